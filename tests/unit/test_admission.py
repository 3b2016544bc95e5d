"""Admission burn-in (docs/node-lifecycle.md, "Admission"): the burn-in settings' one place
(module_utils/gpu/burnin.py), the admission record's one reader and the decision
(module_utils/remediation/admission.py), the filters, and the lab inventory's settings."""

import base64
import json
import os

import pytest
import yaml
from hypothesis import given, settings as hsettings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.admission import admission_decision, admission_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import admission
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import (
    DEFAULT_POLICY, PolicyError, policy)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.inventory_check import tier_problems

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULTS = burnin.settings(None, "gpufleet_burnin")
WHEN = 1790000000.0  # 2026-09-21
GOOD = {"when": WHEN, "level": 2, "tests": [], "result": "pass", "dcgm_version": "4.2.3", "driver": "580.95.05",
        "checks": []}
SOURCE = "Node n annotation gpufleet.io/admission"


def text(**over):
    return json.dumps(dict(GOOD, **over))


def decide(raw, driver="580.95.05", annotations=None, **kw):
    return admission.decide([(SOURCE, raw)], kw.pop("settings", DEFAULTS), node="n", driver=driver,
                            annotations={} if annotations is None else annotations, **kw)


# -- one place of the burn-in settings -------------------------------------------------------------
def test_the_remediation_takes_its_burn_in_settings_from_the_one_place():
    assert DEFAULT_POLICY["burn_in"] == burnin.DEFAULTS
    assert policy({})["burn_in"] == DEFAULTS
    with pytest.raises(PolicyError, match=r"gpufleet_remediation\.burn_in\.dcgm_level must be 1, 2, 3 or 4"):
        policy({"burn_in": {"dcgm_level": 5}})
    with pytest.raises(burnin.SettingsError, match=r"gpufleet_burnin\.dcgm_level must be 1, 2, 3 or 4"):
        burnin.settings({"dcgm_level": 5}, "gpufleet_burnin")


@pytest.mark.parametrize("value, key", [
    ({"enabled": "yes"}, "gpufleet_burnin.enabled"), ({"dcgm_level": True}, "gpufleet_burnin.dcgm_level"),
    ({"timeout": 0}, "gpufleet_burnin.timeout"), ({"timeout": float("nan")}, "gpufleet_burnin.timeout"),
    ({"timeout": float("inf")}, "gpufleet_burnin.timeout"), ({"dcgm_tests": "memtest"}, "gpufleet_burnin.dcgm_tests"),
    ({"nccl_min_busbw_gbps": -1}, "gpufleet_burnin.nccl_min_busbw_gbps"), ({"level": 2}, "unknown key(s) level"),
    ({"dcgm_parameters": 3}, "gpufleet_burnin.dcgm_parameters"), ("on", "gpufleet_burnin must be a mapping"),
])
def test_bad_settings_are_refused_naming_the_key(value, key):
    with pytest.raises(burnin.SettingsError) as exc:
        burnin.settings(value, "gpufleet_burnin")
    assert key in str(exc.value)
    with pytest.raises(AnsibleFilterError, match="admission_decision: "):
        admission_decision({}, value)


# -- the record's one reader -----------------------------------------------------------------------
def test_the_reader_reads_what_the_builder_writes():
    result = {"healthy": True, "dcgm": {"version": "4.2.3"},
              "checks": [{"id": "burnin.dcgm.run", "target": "node", "status": "pass",
                          "observed": {"version": "4.2.3", "driver": "570.1"}}]}
    record = admission.build_record(result, DEFAULTS, "new", WHEN, driver="580.95.05")
    assert admission.read_record(admission.record_text(record), SOURCE) == record
    assert record["result"] == "pass" and record["driver"] == "580.95.05" and record["trigger"] == "new"


@pytest.mark.parametrize("raw, field", [
    (text(when=0), "when"), (text(when=1e12), "when"), (text(level=5), "level"), (text(level=True), "level"),
    (text(result="admitted"), "result"), (text(checks="none"), "checks"), (text(checks=[1]), "checks[0]"),
    (text(extra=1), "unknown key(s) extra"), ('{"when": NaN}', "not JSON"), ("{" * 50, "nested"),
    (text(dcgm_version="x" * 65), "dcgm_version"), ("x" * 20000, "bytes"), (text(tests=[""]), "tests[0]"),
    ('{"when": 1, "when": 2}', "duplicate"), (text(trigger="maybe"), "trigger"),
])
def test_the_reader_refuses_naming_the_field(raw, field):
    with pytest.raises(RecordError) as exc:
        admission.read_record(raw, SOURCE)
    assert field in str(exc.value) and SOURCE in str(exc.value)


@hsettings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300),
                 st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                         max_size=8),
                              max_leaves=20).map(json.dumps)))
def test_any_annotation_is_a_record_or_refused_never_admitted_by_garbage(raw):
    try:
        record = admission.read_record(raw, SOURCE)
    except RecordError:
        decision = decide(raw)
        assert decision["burn_in"] and decision["trigger"] == "unreadable" and SOURCE in decision["reason"]
        return
    assert record["result"] in ("pass", "fail") and 1 <= record["level"] <= 4


@hsettings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={key: st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                                            st.text(max_size=10), st.lists(st.text(max_size=5)))
                                           for key in admission.KEYS}))
def test_a_record_is_admitted_only_when_every_field_reads(fields):
    raw = json.dumps(fields)
    decision = decide(raw, driver=None)
    if not decision["burn_in"]:
        record = admission.read_record(raw, SOURCE)  # never raises: admitted means read
        assert record["result"] == "pass" and record["level"] >= DEFAULTS["dcgm_level"]


# -- the decision ----------------------------------------------------------------------------------
def test_new_failed_repaired_driver_level_force_and_admitted():
    assert decide(None)["trigger"] == "new"
    assert decide(text(result="fail", checks=["burnin.dcgm:gpu0/memtest"]))["trigger"] == "failed"
    history = json.dumps([{"step": "reset", "status": "done", "reason": "", "at": "2026-10-01T00:00:00Z",
                           "by": "remediate.yml"}])
    assert decide(text(), annotations={"gpufleet.io/remediation-history": history})["trigger"] == "repaired"
    older = json.dumps([{"step": "reboot", "status": "done", "reason": "", "at": "2026-01-01T00:00:00Z", "by": "x"},
                        {"step": "reset", "status": "failed", "reason": "", "at": "2026-10-01T00:00:00Z", "by": "x"}])
    assert not decide(text(), annotations={"gpufleet.io/remediation-history": older})["burn_in"]
    damaged = decide(text(), annotations={"gpufleet.io/remediation-history": "[{"})
    assert damaged["trigger"] == "repaired" and "remediation-history" in damaged["reason"]
    assert decide(text(), driver="595.1")["trigger"] == "driver"
    assert decide(text(level=1))["trigger"] == "level"
    assert decide(text(), force=True)["trigger"] == "force"
    admitted = decide(text())
    assert not admitted["burn_in"] and admitted["reason"].startswith("admitted 2026-09-21")
    off = decide(None, settings=burnin.settings({"enabled": False}, "gpufleet_burnin"))
    assert not off["burn_in"] and admission.admission_check(off)["status"] == "skip"


def test_the_node_annotation_wins_over_the_state_file_and_the_state_file_stands_in_without_it():
    stale = base64.b64encode(text(result="fail").encode()).decode()
    state = {"content": stale, "encoding": "base64"}
    assert not admission_decision({admission.ANNOTATION: text()}, {}, state_file=state)["burn_in"]
    assert admission_decision({}, {}, state_file=state)["trigger"] == "failed"
    local = admission_decision(None, {}, state_file={"content": base64.b64encode(text().encode()).decode()},
                               kubernetes=False)
    assert not local["burn_in"] and local["text"] and local["check"]["status"] == "pass"
    absent = {"failed": True, "msg": "file not found: /var/lib/gpufleet/admission.json"}
    assert admission_decision(None, {}, state_file=absent, kubernetes=False)["trigger"] == "new"
    denied = {"failed": True, "msg": "file is not readable"}
    assert admission_decision(None, {}, state_file=denied, kubernetes=False)["trigger"] == "unreadable"


@pytest.mark.parametrize("result", [
    {"failed": True, "msg": "boom"}, {"skipped": True}, {}, None, "text",
    {"healthy": True, "checks": [{"id": "burnin.dcgm.run", "target": "node", "status": "skip"}]},
    {"healthy": False, "checks": [{"id": "burnin.dcgm", "target": "gpu0/memtest", "status": "fail"},
                                  {"id": "burnin.dcgm.run", "target": "node", "status": "pass"}]},
])
def test_a_burn_in_that_did_not_pass_is_recorded_failed_naming_the_check(result):
    decision = admission_decision({}, {})
    out = admission_record(result, decision, now=WHEN)
    assert out["record"]["result"] == "fail" and not out["passed"] and out["record"]["checks"]
    assert out["check"]["status"] == "fail" and out["check"]["id"] == "node.admission"
    assert out["check"]["message"].startswith("not admitted: burn-in (level 2) failed")
    assert admission.read_record(out["text"], SOURCE)["result"] == "fail"


def test_a_record_is_never_written_from_a_clock_that_reads_no_plausible_time():
    with pytest.raises(AnsibleFilterError, match="clock"):
        admission_record({"healthy": True}, admission_decision({}, {}), now=0)


# -- the lab ---------------------------------------------------------------------------------------
def test_the_lab_inventory_burn_in_settings_pass_the_inventory_check():
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "all", "lab.yml")) as handle:
        lab = yaml.safe_load(handle)
    assert lab["gpufleet_burnin"] == {"enabled": False}  # no dcgmi in the lab (docs/lab.md)
    assert not [p for p in tier_problems(lab) if "burnin" in p]
    assert [p for p in tier_problems(dict(lab, gpufleet_burnin={"dcgm_level": 7})) if "gpufleet_burnin" in p]
    assert [p for p in tier_problems(dict(lab, gpufleet_burnin_force="sometimes")) if "gpufleet_burnin_force" in p]
