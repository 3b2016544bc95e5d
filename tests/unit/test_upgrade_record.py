"""The one reader of rolling_upgrade's records (module_utils/kube/upgrade_record.py, filter upgrade_record):
what a run wrote reads back; anything else is unreadable, named, and never taken as "no record"."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter.upgrade_record import upgrade_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import upgrade_record as reader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

WRITTEN = {  # what roles/rolling_upgrade/tasks/state.yml writes (a held node, resumed)
    "state": "held", "run_id": "2026-11-29T0400Z", "components": ["driver", "kubernetes"],
    "target": {"driver": "580.95.05", "kubernetes": "1.36.5"}, "updated": "2026-11-29T04:01:02Z",
    "step": "validate", "reason": "gpu.xid: XID 79", "failed_checks": ["gpu.xid"],
    "versions_before": {"nvidia-driver": "570.1"}, "versions_after": {}, "etcd_snapshot": "/var/lib/x.db",
    "resumed_from": {"run_id": "r0", "state": "drained"},
}


def test_what_a_run_writes_reads_back():
    assert reader.read_state(json.dumps(WRITTEN, indent=2) + "\n", "f") == WRITTEN
    assert reader.read_state("", "f") == {} and reader.read_state(" \n", "f") == {}
    applied = {"components": ["driver"], "target": {"driver": "580.95.05"}}
    assert reader.read_applied(json.dumps(applied), "a") == applied


@pytest.mark.parametrize("change", [
    {"state": "done"}, {"state": None}, {"target": {"driver": float("nan")}}, {"components": "driver"},
    {"updated": "yesterday"}, {"failed_checks": [3]}, {"resumed_from": {"run_id": 1}}, {"extra": 1},
    {"target": {"driver": {"nested": "x"}}}, {"reason": ["x"]},
])
def test_damaged_state_records_are_unreadable_and_named(change):
    doc = dict(WRITTEN, **change)
    text = json.dumps(doc, allow_nan=True)
    with pytest.raises(RecordError, match="upgrade-state.json"):
        reader.read_state(text, "upgrade-state.json")
    result = upgrade_record(text, "state", "upgrade-state.json")
    assert result["record"] == {} and "unreadable record upgrade-state.json" in result["error"]


@pytest.mark.parametrize("text", ['{"state": "held", "state": "admitted"}', "[" * 100000, '"held"', "{"])
def test_hostile_texts_are_unreadable(text):
    assert upgrade_record(text, "state", "annotation x")["error"].startswith("unreadable record annotation x")


def test_applied_must_be_the_fingerprint():
    for text in ('{"components": []}', '{"components": [], "target": {}, "x": 1}', '{"components": [1], "target": {}}'):
        with pytest.raises(RecordError):
            reader.read_applied(text, "applied.json")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(sorted(reader.KEYS) + ["x"]), inner, max_size=6), max_leaves=25))))
def test_any_text_is_a_record_or_a_named_refusal(text):
    for kind in ("state", "applied"):
        result = upgrade_record(text, kind, "rec")
        assert set(result) == {"record", "error"}
        if result["error"]:
            assert result["record"] == {} and "rec" in result["error"]
        elif kind == "state" and result["record"]:
            assert result["record"]["state"] in reader.STATES


# -- found by the red team (tests/unit/test_redteam_etcd_upgrade_records.py for what held) --------------------
KNOWN = ["driver", "ofed", "kubernetes", "mig"]


@pytest.mark.parametrize("change", [
    {"reason": "\ud800"},  # a lone surrogate: read back, it could never be written again
    {"target": {"driver": True}},  # a bool is never a version
    {"updated": "2026-13-45T99:99:99Z"}, {"updated": "2026-02-30T04:01:02Z"}, {"updated": "2026-11-29T24:00:00Z"},
    {"updated": "9999-12-31T23:59:59Z"}, {"updated": "1970-01-01T00:00:00Z"},  # not a plausible time
    {"resumed_from": {"run_id": "r0", "state": "done"}},
    {"components": ["evil-firmware"], "target": {"evil-firmware": "1"}},
    {"target": {"evil-firmware": "1"}},
])
def test_red_team_values_are_refused(change):
    result = upgrade_record(json.dumps(dict(WRITTEN, **change)), "state", "rec", KNOWN)
    assert result["record"] == {} and result["error"].startswith("unreadable record rec"), result


def test_a_version_may_be_a_number_yaml_read_unquoted():
    record = dict(WRITTEN, target={"ofed": 24.10, "driver": 580})
    assert upgrade_record(json.dumps(record), "state", "rec", KNOWN)["record"]["target"] == {"ofed": 24.1, "driver": 580}


@pytest.mark.parametrize("value", [None, 5, {"state": "held"}, ["x"], b"{}"])
def test_what_is_not_text_is_never_no_record(value):
    result = upgrade_record(value, "state", "rec")
    assert result["record"] == {} and "not text" in result["error"]


def test_unknown_components_of_applied_are_refused_when_the_role_names_them():
    text = json.dumps({"components": ["drvr"], "target": {"drvr": "1"}})
    assert upgrade_record(text, "applied", "a.json")["error"] == ""
    assert "unknown component(s) drvr" in upgrade_record(text, "applied", "a.json", KNOWN)["error"]
