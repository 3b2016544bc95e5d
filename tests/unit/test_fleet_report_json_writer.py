# -*- coding: utf-8 -*-
"""fleet_report's JSON writer (plugin_utils/report_json.strict_indented, used by to_json) writes the
report byte for byte as ``json.dumps(json_safe(document), indent=2, allow_nan=False)`` did, in one pass
(issue 45 item 4: the indenting json encoder is pure Python; docs/performance.md)."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import json_safe
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report, report_json


def reference(value):
    return json.dumps(json_safe(value), indent=2, allow_nan=False)


class Named(object):
    def __str__(self):
        return "named \udc80 thing"


class Number(int):
    pass


TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True), TEXT, st.binary(max_size=6),
    st.sampled_from(["\udc80", "\ud800x", "caf\u00e9", "\u2028", "\\x80", "1", "nan", Named(), Number(7),
                     -(2 ** 63), 2 ** 63, 2 ** 63 - 1]),
    st.integers(min_value=4299, max_value=4301).map(lambda digits: 10 ** digits))
KEYS = st.one_of(TEXT, st.sampled_from(["1", "\\x80", "\udc80", "nan", "true"]), st.integers(-3, 3),
                 st.booleans(), st.none(), st.floats(allow_nan=True), st.binary(max_size=3),
                 st.tuples(st.integers(0, 2)))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
        st.frozensets(st.one_of(st.integers(-5, 5), TEXT), max_size=3),
        st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_writer_is_the_json_module_byte_for_byte(value):
    """Any value (NaN, infinities, ints past 2**63 and past 4300 digits, bytes, lone surrogates,
    sets, tuples, keys that are not text or that json_safe merges into one) is written exactly as the
    json module wrote json_safe's copy of it."""
    assert report_json.strict_indented(value) == reference(value)
    assert report_json.to_json(value) == reference(value) + "\n"


def test_a_report_document_is_written_as_before():
    """A run document (checks with NaN and infinite observed values, facts, durations, a bandwidth
    matrix with a NaN cell): the same text as before, and strict JSON."""
    report = fleet_report.FleetReport()
    report.start_play("validate", ["n1", "n2"])
    report.task_result("n1", {"checks": [
        {"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs", "observed": 8, "expected": 8},
        {"id": "gpu.temperature", "target": "gpu0", "status": "warn", "message": "hot", "observed": float("nan"),
         "expected": {"max": float("inf")}},
        {"id": "rdma.link", "target": "mlx5_0", "status": "fail", "message": "down \u00e9", "observed": ["Down"]}],
        "elapsed_ms": 12.5,
        "bandwidth_matrix": {"title": "bw", "hosts": ["n1", "n2"], "gbps": [[None, float("nan")], [390.5, None]]}},
        "validate", "ok", "t1", True, duration=0.25)
    report.task_result("n2", {"checks": []}, "validate", "failed", "t1", True, duration=None)
    report.end_play()
    report.finish([])
    document = report.as_dict("2026-11-29T20:00:00Z", run={"id": "20261129T200000Z-validate"})
    written = report_json.to_json(document)
    assert written == reference(document) + "\n"
    parsed = json.loads(written, parse_constant=pytest.fail)
    assert parsed["hosts"]["n1"]["checks"][1]["observed"] == "nan"


def test_an_already_safe_document_is_not_copied(monkeypatch):
    """The writer applies json_safe's rule while writing: a document that is already JSON-safe
    (the report's own) is never copied by json_safe first (the copy was half the writer's time)."""
    calls = []
    original = report_json.json_safe
    monkeypatch.setattr(report_json, "json_safe", lambda value: calls.append(value) or original(value))
    document = {"hosts": {"n1": {"checks": [{"id": "a", "observed": 1.5, "x": [1, None, True]}]}}, "m": {}}
    assert report_json.to_json(document) == reference(document) + "\n"
    assert not [value for value in calls if isinstance(value, (dict, list, tuple, set, frozenset))], calls


def test_too_deep_fails_as_before():
    """A nesting deeper than the recursion limit fails as the json module's path did (RecursionError)."""
    value = []
    for _ in range(100000):
        value = [value]
    with pytest.raises(RecursionError):
        report_json.to_json(value)


def test_junit_writes_no_detail_for_a_passing_check(monkeypatch):
    """JUnit: the detail text (observed and expected for people) is made only for the checks whose
    element carries it (fail, warn), not for every passing check; the XML is unchanged."""
    document = json.loads(report_json.to_json(_document()))
    before = fleet_report.junit_xml(document)
    made = []
    original = fleet_report.check_detail
    monkeypatch.setattr(fleet_report, "check_detail", lambda check: made.append(check["status"]) or original(check))
    assert fleet_report.junit_xml(document) == before
    assert sorted(made) == ["fail", "warn"]
    assert "observed: Down" in before and "warning: hot" in before


def _document():
    report = fleet_report.FleetReport()
    report.start_play("validate", ["n1"])
    report.task_result("n1", {"checks": [
        {"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs", "observed": 8, "expected": 8},
        {"id": "gpu.temperature", "target": "gpu0", "status": "warn", "message": "hot", "observed": 90},
        {"id": "rdma.link", "target": "mlx5_0", "status": "fail", "message": "down", "observed": ["Down"]},
        {"id": "gpu.driver", "target": "node", "status": "skip", "message": "no driver"}]},
        "validate", "ok", "t1", True, duration=0.25)
    report.end_play()
    report.finish([])
    return report.as_dict("2026-11-29T20:00:00Z", run={"id": "20261129T200000Z-validate"})


def _json_safe_as_it_was(value):
    """module_utils/core/checks.json_safe before its exact-type fast paths (commit 85d55cf), verbatim
    but for the recursion: the rule the faster one must keep."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
        INT_LIMIT, _big_int_text, safe_text)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -INT_LIMIT <= value < INT_LIMIT else _big_int_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (str, bytes)):
        return safe_text(value)
    if isinstance(value, dict):
        return dict((safe_text(k) if isinstance(k, (str, bytes)) else safe_text(str(_json_safe_as_it_was(k))),
                     _json_safe_as_it_was(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_json_safe_as_it_was(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return [_json_safe_as_it_was(item) for item in sorted(value, key=repr)]
    return safe_text(str(value))


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_json_safe_is_the_rule_it_was(value):
    """Every module's exit copies its result with json_safe: the faster one gives the same copy (same
    values, same types, same key order) for any value."""
    got, want = json_safe(value), _json_safe_as_it_was(value)
    assert repr(got) == repr(want)
    assert json.dumps(got) == json.dumps(want)
