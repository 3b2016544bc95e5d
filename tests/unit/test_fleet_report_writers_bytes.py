# -*- coding: utf-8 -*-
"""The report files written faster (issue 45 item 4, docs/performance.md "Sweep cost, round 6: the report
files") are the same bytes as before for the same document: the JSON writer's C-encoder path for
flat dicts in a list (a host's checks) against the json module, the JUnit text against the
ElementTree tree it replaced (kept here as the reference), check_times against its former loop."""

import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import json_safe
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report, fleet_report_html, report_json
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import (
    FAIL, PASS, SKIP, WARN, check_detail, clean_durations, xml_text)


def reference_json(value):
    return json.dumps(json_safe(value), indent=2, allow_nan=False)


class Text(str):
    """A str subclass: json_safe's general rule, never the C encoder's path."""


class Loud(str):
    def __str__(self):
        return "LOUD"


class Count(int):
    pass


class Ratio(float):
    pass


ODD_TEXT = st.sampled_from([
    "}", "},\n  {", '"}, {"', "\\", "\n", "\udc80", "\ud800x", "caf\u00e9", "\u2028", "\U0001f600", "",
    "a & b < c > d \" e ' f", "\r\n\t", "\x00\x01\x0b\ufffe", "nan", Text("sub"), Loud("loud"), Text("caf\u00e9")])
TEXT = st.one_of(st.text(max_size=6), ODD_TEXT)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 64, 2 ** 64), st.floats(allow_nan=True, allow_infinity=True),
    TEXT, st.sampled_from([2 ** 63 - 1, -(2 ** 63), 2 ** 63, Count(3), Ratio(0.5), Ratio(float("nan")), -0.0,
                           b"\xff", 10 ** 4300]))
KEY = st.one_of(st.sampled_from(["id", "target", "status", "message", "observed", "task", "play"]), TEXT,
                st.integers(-2, 2), st.none())
CONTAINER = st.one_of(st.lists(SCALAR, max_size=3), st.dictionaries(KEY, SCALAR, max_size=3), st.just({}),
                      st.just([]), st.frozensets(st.integers(0, 3), max_size=2))
STR_KEY = st.one_of(st.sampled_from(["id", "target", "status", "message", "observed", "task", "play"]), TEXT)
CHECK = st.one_of(st.dictionaries(STR_KEY, SCALAR, max_size=7),  # flat ones (mostly: odd texts and numbers)
                  st.dictionaries(KEY, st.one_of(SCALAR, SCALAR, SCALAR, CONTAINER), max_size=7))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(CHECK, CHECK, CHECK, SCALAR, CONTAINER), max_size=8),
       st.integers(min_value=0, max_value=3))
@example([{"a": "\udc80"}, {"b": 1}], 1)
@example([{"a": 2 ** 63}, {"b": float("inf")}, {Text("k"): 1}, {"c": Count(1)}, {"d": Ratio(1.5)}], 2)
@example([{"m": "},\n      {"}, {}, {"n": "x"}, {"o": True}], 3)
@example([{"a": "1234567890123456789012", "b": [2 ** 63 - 1]}, {"c": "\U0001f600"}, {"d": "\\ud800"},
          {"e": {"f": float("nan")}}, {"g": ["\udc80"]}, {"h": -(2 ** 63)}, {"i": -(2 ** 63) - 1}], 2)
def test_lists_of_flat_dicts_are_written_as_the_json_module_did(checks, depth):
    """A list of check-like dicts (flat ones go through the C encoder in runs; odd keys, str, int and
    float subclasses, NaN, huge ints, lone surrogates, text holding ``},\\n  {``, nested
    containers, empty dicts between them), at several depths: the json module's text of json_safe's
    copy, byte for byte."""
    document = checks
    for _level in range(depth):
        document = {"hosts": {"n1": {"checks": document}}}
    assert report_json.to_json(document) == reference_json(document) + "\n"


def test_without_the_c_encoder_the_text_is_the_same(monkeypatch):
    document = {"hosts": {"n1": {"checks": [{"id": "a", "status": "pass", "observed": 1.5},
                                            {"id": "b", "status": "fail", "observed": None}]}}}
    before = report_json.to_json(document)
    assert before == reference_json(document) + "\n"
    monkeypatch.setattr(report_json, "c_make_encoder", None)
    assert report_json.to_json(document) == before


def test_a_run_of_flat_checks_is_one_encoder_call(monkeypatch):
    """The point of the path: a host's flat checks are written by one C call, not value by value."""
    calls = []
    real = report_json._strict_scalar

    def counted(value):
        calls.append(value)
        return real(value)

    monkeypatch.setattr(report_json, "_strict_scalar", counted)
    checks = [{"id": "gpu.x%d" % n, "target": "node", "status": "pass", "message": "fine", "observed": n}
              for n in range(50)]
    text = report_json.to_json({"checks": checks})
    assert text == reference_json({"checks": checks}) + "\n"
    assert len(calls) < 5  # the document, the list: never once per check value


# ---------------------------------------------------------------------- JUnit
def reference_check_times(entry):
    """check_times as it was (one loop over the checks), the reference of the new one."""
    durations = entry.get("durations") or {}
    per_task = {}
    for check in entry["checks"]:
        per_task[check.get("task")] = per_task.get(check.get("task"), 0) + 1
    times = {}
    for check in entry["checks"]:
        seconds = durations.get(check.get("task"))
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            times[(check["id"], check["target"])] = seconds / per_task[check.get("task")]
    return times


def reference_junit(document, name=None):
    """fleet_report.junit_xml as it was before it wrote text (an ElementTree tree, ET.tostring)."""
    ranked = list(document["hosts"].items())
    totals = document["totals"]
    stamp = document["generated_at"]
    if name is None:
        name = "gpufleet fleet picture" if document.get("scope") == "fleet" else "gpufleet run %s" % (
            (document.get("run") or {}).get("id") or stamp)
    suites = ET.Element("testsuites", {
        "name": xml_text(name), "tests": str(sum(len(e["checks"]) for _n, e in ranked)),
        "failures": str(totals[FAIL]), "skipped": str(totals[SKIP] + totals[WARN]), "errors": "0"})
    total_time, timed = 0.0, False
    for host, entry in ranked:
        checks, summary = entry["checks"], entry["summary"]
        attributes = {"name": xml_text(host), "tests": str(len(checks)), "failures": str(summary[FAIL]),
                      "skipped": str(summary[SKIP] + summary[WARN]), "errors": "0",
                      "timestamp": entry.get("last_seen") or stamp}
        durations = clean_durations(entry.get("durations"))
        if durations:
            attributes["time"] = "%.3f" % sum(durations.values())
            total_time += sum(durations.values())
            timed = True
        suite = ET.SubElement(suites, "testsuite", attributes)
        times = reference_check_times(dict(entry, durations=durations))
        for check in checks:
            case = ET.SubElement(suite, "testcase", {
                "classname": xml_text(host), "name": xml_text("%s[%s]" % (check["id"], check["target"]))})
            if (check["id"], check["target"]) in times:
                case.set("time", "%.3f" % times[(check["id"], check["target"])])
            if check["status"] == FAIL:
                failure = ET.SubElement(case, "failure", {"message": xml_text(check["message"]),
                                                          "type": xml_text(check["id"])})
                failure.text = xml_text(check_detail(check))
            elif check["status"] == SKIP:
                skipped = ET.SubElement(case, "skipped", {"message": xml_text(check["message"])})
                skipped.text = xml_text(check["message"])
            elif check["status"] == WARN:
                properties = ET.SubElement(case, "properties")
                ET.SubElement(properties, "property", {"name": "gpufleet.status", "value": WARN})
                skipped = ET.SubElement(case, "skipped", {"message": xml_text("warning: " + check["message"])})
                skipped.text = xml_text("warning: " + check_detail(check))
    if timed:
        suites.set("time", "%.3f" % total_time)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


XML_TEXT = st.one_of(st.text(max_size=5), st.sampled_from([
    "", "a & b", "<tag>", 'say "hi"', "line\nbreak", "cr\rtab\t", "\x00\x08\x0b\ufffe\uffff", "]]>", "caf\u00e9",
    "&amp;", "\U0001f600", Text("sub&"), Loud("x<y")]))
TASKS = st.sampled_from([None, "validate", "fabric", "a & <b>"])
XML_CHECK = st.fixed_dictionaries(
    {"id": st.sampled_from(["gpu.count", "gpu.ecc.volatile", "rdma.link", "host.validation", "a&b"]),
     "target": st.one_of(st.sampled_from(["node", "gpu0", "mlx5_0"]), XML_TEXT),
     "status": st.sampled_from([PASS, FAIL, WARN, SKIP]), "message": XML_TEXT},
    optional={"task": TASKS, "observed": st.one_of(st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                                                    st.floats(allow_nan=True)),
              "expected": st.one_of(st.integers(), st.none(), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                              max_size=2)),
              "error": XML_TEXT})
DURATION = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 10 ** 6), st.booleans(),
                     st.text(max_size=2), st.just(-0.0), st.just(0.0005))
HOST = st.fixed_dictionaries(
    {"checks": st.lists(XML_CHECK, max_size=6),
     "summary": st.fixed_dictionaries({s: st.integers(0, 9) for s in (PASS, FAIL, WARN, SKIP)})},
    optional={"durations": st.dictionaries(TASKS, DURATION, max_size=3), "last_seen": st.one_of(XML_TEXT, st.none())})
DOCUMENT = st.fixed_dictionaries(
    {"hosts": st.dictionaries(XML_TEXT, HOST, max_size=4),
     "totals": st.fixed_dictionaries({s: st.integers(0, 99) for s in (PASS, FAIL, WARN, SKIP)}),
     "generated_at": st.sampled_from(["2026-11-30T02:00:00Z", "a<b"])},
    optional={"scope": st.sampled_from(["run", "fleet"]), "run": st.fixed_dictionaries({"id": XML_TEXT})})


@settings(max_examples=300, deadline=None)
@given(DOCUMENT, st.one_of(st.none(), XML_TEXT))
def test_junit_is_the_elementtree_text_byte_for_byte(document, name):
    """Any document (texts with &, <, >, quotes, CR, LF, tab, characters XML cannot hold, empty
    messages and details, hosts without checks, durations that are NaN, negative, -0.0, bools or
    text, checks of one id and target from two tasks, str subclasses): the same text as the tree."""
    assert fleet_report.junit_xml(document, name) == reference_junit(document, name)


def _outcome(render, document):
    try:
        return render(document)
    except TypeError as exc:  # ElementTree's "cannot serialize 5 (type int)"
        return "TypeError: %s" % exc


@pytest.mark.parametrize("stamp", [5, 1.5, True, ["x", "&"], {"a": "<"}, ("t",), Text("a&b")])
def test_junit_of_a_timestamp_that_is_not_text_is_what_the_tree_made_of_it(stamp):
    """A timestamp (``last_seen``) that is not text: ElementTree failed on some (numbers, a list
    holding "&") and wrote others as str() unescaped (its escaping only looks for the characters
    in them); the text writer does the same, with the same message."""
    document = {"hosts": {"n1": {"checks": [], "summary": {s: 0 for s in (PASS, FAIL, WARN, SKIP)},
                                 "last_seen": stamp}},
                "totals": {s: 0 for s in (PASS, FAIL, WARN, SKIP)}, "generated_at": "2026-11-30T02:00:00Z"}
    expected = _outcome(reference_junit, document)
    assert _outcome(fleet_report.junit_xml, document) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(XML_CHECK, max_size=8), st.dictionaries(TASKS, DURATION, max_size=3))
def test_check_times_is_the_former_loop(checks, durations):
    entry = {"checks": checks, "durations": durations}

    def shown(times):  # repr: NaN equal to NaN, -0.0 not equal to 0.0
        return [(key, repr(value)) for key, value in times.items()]
    assert shown(fleet_report.check_times(entry)) == shown(reference_check_times(entry))


# ---------------------------------------------------------------------- HTML
@pytest.mark.parametrize("check_id", ["gpu.ecc.volatile", "gpu", "", 7, None, Text("gpu.ecc.x"), Loud("a.b.c")])
def test_the_memoised_check_group_is_check_group(check_id):
    group = fleet_report_html._group_of()
    assert group(check_id) == fleet_report.check_group(check_id)
    assert group(check_id) == fleet_report.check_group(check_id)  # from the memo the second time
