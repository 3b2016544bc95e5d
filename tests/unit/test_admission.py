"""Admission burn-in (docs/node-lifecycle.md, "Admission"): the burn-in settings' one place
(module_utils/gpu/burnin.py), the admission record's one reader and the decision
(module_utils/remediation/admission.py), the filters, and the lab inventory's settings."""

import base64
import json
import os
import stat

import pytest
import yaml
from hypothesis import given, settings as hsettings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.admission import admission_decision, admission_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import state_files
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
    assert record["result"] in ("pass", "fail", "in_service", "pending") and 1 <= record["level"] <= 4


@hsettings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={key: st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                                            st.text(max_size=10), st.lists(st.text(max_size=5)))
                                           for key in admission.KEYS}))
def test_a_record_is_admitted_only_when_every_field_reads(fields):
    raw = json.dumps(fields)
    decision = decide(raw, driver=None)
    if not decision["burn_in"]:
        record = admission.read_record(raw, SOURCE)  # never raises: admitted means read
        assert record["result"] in admission.ADMITTED and record["level"] >= DEFAULTS["dcgm_level"]


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


# -- nodes in service before admission burn-in ------------------------------------------------------
TAINT = "gpufleet.io/unhealthy"
READY = {"type": "Ready", "status": "True"}
SERVING = {"taint": None, "taints": [], "cordoned": False, "labels": {"gpufleet.io/healthy": "true"},
           "conditions": [READY], "annotations": {}}
STAMPS = json.dumps({"roles": {"nvidia_driver": {"inputs": "d" * 64}, "container_runtime": {"inputs": "e" * 64}}})
HEALTH = json.dumps({"agent": {"healthy": True, "failing": []}, "generated_at": WHEN, "cycle": 7, "node": "n"})


def status(**over):
    return dict(SERVING, **over)


@pytest.mark.parametrize("node, evidence", [
    (status(), "label gpufleet.io/healthy=true"),
    (status(labels={}, conditions=[READY, {"type": "GpufleetHealthy", "status": "True"}]), "GpufleetHealthy True"),
    (status(cordoned=True), "label gpufleet.io/healthy=true"),  # an administrator's cordon: no taint of ours
    (status(taints=[{"key": "nvidia.com/gpu", "value": "x", "effect": "NoSchedule"}]), "healthy=true"),
    # no evidence: held back by the gate, not Ready, no mark of an earlier run, malformed, no Node
    (status(taint={"key": TAINT, "value": "gpu.xid", "effect": "NoSchedule"},
            taints=[{"key": TAINT, "value": "gpu.xid", "effect": "NoSchedule"}]), None),
    (status(taints=[{"key": TAINT, "value": "burnin.dcgm", "effect": "NoSchedule"}]), None),
    (status(conditions=[{"type": "Ready", "status": "False"}]), None),
    (status(conditions=[{"type": "Ready", "status": "Unknown"}]), None),
    (status(conditions=[]), None), (status(conditions="Ready"), None),
    (status(labels={"gpufleet.io/healthy": "false"}), None),
    (status(labels={}, conditions=[READY, {"type": "GpufleetHealthy", "status": "False"}]), None),
    (status(labels={}), None), (status(taints=None), None), (status(taints=["x"]), None), ({}, None), (None, None),
])
def test_a_node_is_in_service_only_ready_untainted_and_marked_by_an_earlier_run(node, evidence):
    seen = admission.kube_in_service(node, TAINT)
    assert (seen is None) if evidence is None else (evidence in seen)


@hsettings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "taint": st.none() | st.just({"key": TAINT}),
    "taints": st.none() | st.lists(st.fixed_dictionaries({"key": st.sampled_from([TAINT, "other", None])}), max_size=2)
    | st.text(max_size=3),
    "labels": st.none() | st.dictionaries(st.sampled_from(["gpufleet.io/healthy", "x"]),
                                          st.sampled_from(["true", "false", "", None]), max_size=2),
    "conditions": st.none() | st.lists(st.one_of(st.fixed_dictionaries({
        "type": st.sampled_from(["Ready", "GpufleetHealthy", "MemoryPressure", None]),
        "status": st.sampled_from(["True", "False", "Unknown", None])}), st.text(max_size=3)), max_size=4),
}))
def test_any_node_status_is_evidence_or_none_never_evidence_of_a_held_or_unready_node(node):
    seen = admission.kube_in_service(node, TAINT)
    assert seen is None or isinstance(seen, str)
    if seen is not None:
        assert node.get("taint") is None and all(t.get("key") != TAINT for t in node["taints"])
        conditions = [c for c in node["conditions"] if isinstance(c, dict)]
        assert dict((c["type"], c["status"]) for c in conditions).get("Ready") == "True"


@pytest.mark.parametrize("role_state, health, seen", [
    (STAMPS, None, "container_runtime, nvidia_driver"),
    (None, "health.json written by the node health agent", "health.json"),
    (json.dumps({"roles": {}}), None, None),           # a file, no stamp
    ('{"roles": {"x": {}}}', None, None),              # not a stamp record
    ("\x00unreadable", None, None), (None, None, None), ("[", None, None),
])
def test_without_the_api_role_stamps_or_health_json_are_the_evidence(role_state, health, seen):
    found = admission.local_in_service(role_state, "/var/lib/gpufleet/role-state.json", health)
    assert (found is None) if seen is None else (seen in found)


def test_a_node_in_service_without_a_record_is_recorded_not_burnt_in():
    decision = decide(None, in_service="Ready, label gpufleet.io/healthy=true", now=WHEN)
    assert not decision["burn_in"] and decision["trigger"] == "in_service" and decision["new_record"]
    record = decision["record"]
    assert record["result"] == "in_service" and record["trigger"] == "in_service" and record["driver"] == "580.95.05"
    assert admission.read_record(admission.record_text(record), SOURCE) == record
    assert "in service before admission burn-in" in decision["reason"] and "gpufleet_burnin_force" in decision["reason"]
    check = admission.admission_check(decision)
    assert check["status"] == "pass" and check["observed"]["result"] == "in_service"
    assert check["message"].startswith("in service before admission burn-in")
    # the next run reads the record back: still admitted, saying so; a driver change or a repair burns it in
    again = decide(admission.record_text(record))
    assert not again["burn_in"] and again["reason"].startswith("in service before admission burn-in, recorded")
    assert admission.admission_check(again)["status"] == "pass"
    assert decide(admission.record_text(record), driver="595.1")["trigger"] == "driver"
    history = json.dumps([{"step": "reset", "status": "done", "reason": "", "at": "2026-10-01T00:00:00Z",
                           "by": "remediate.yml"}])
    assert decide(admission.record_text(record),
                  annotations={"gpufleet.io/remediation-history": history})["trigger"] == "repaired"


def test_force_burns_in_a_node_in_service_and_a_record_outranks_the_evidence():
    assert decide(None, in_service="stamps", force=True)["trigger"] == "force"
    assert decide(text(result="fail", checks=["burnin.dcgm:gpu0/memtest"]), in_service="stamps")["trigger"] == "failed"
    assert decide("{", in_service="stamps")["trigger"] == "unreadable"
    assert decide(None, in_service=None)["trigger"] == "new" and decide(None, in_service="")["trigger"] == "new"


@hsettings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.just(text()), st.just(text(result="fail")), st.text(max_size=30)),
       st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=20)), st.booleans(), st.booleans())
def test_without_a_record_only_evidence_and_no_force_spares_the_burn_in(raw, seen, force, enabled):
    current = burnin.settings({"enabled": enabled}, "gpufleet_burnin")
    decision = decide(raw, settings=current, in_service=seen, force=force, now=WHEN)
    if not enabled:
        assert not decision["burn_in"] and decision.get("off")
    elif raw is None:
        assert decision["burn_in"] == (force or not seen)
        assert (decision["trigger"] == "in_service") == (not decision["burn_in"])
    elif not decision["burn_in"]:
        assert admission.read_record(raw, SOURCE)["result"] in admission.ADMITTED and decision["trigger"] is None


def test_the_filter_takes_the_evidence_from_the_node_or_the_files():
    files = [{"path": "/var/lib/gpufleet/role-state.json", "exists": True, "content": STAMPS, "problem": None},
             {"path": "/var/lib/gpufleet/health.json", "exists": False, "content": None, "problem": None}]
    local = admission_decision(None, {}, state_file={"exists": False, "content": None, "problem": None},
                               kubernetes=False, evidence=files)
    assert local["trigger"] == "in_service" and local["text"] and local["check"]["status"] == "pass"
    health = [dict(files[0], exists=False, content=None), dict(files[1], exists=True, content=HEALTH)]
    assert admission_decision(None, {}, kubernetes=False, evidence=health)["trigger"] == "in_service"
    # unreadable evidence (a FIFO at role-state.json, a failed read, health.json not the agent's) is none
    fifo = [dict(files[0], content=None, problem="/var/lib/gpufleet/role-state.json is damaged (not a regular file)"),
            {"path": "/var/lib/gpufleet/health.json", "failed": True, "msg": "boom"}]
    assert admission_decision(None, {}, kubernetes=False, evidence=fifo)["trigger"] == "new"
    alien = [dict(files[1], exists=True, content='{"agent": {}}')]
    assert admission_decision(None, {}, kubernetes=False, evidence=alien)["trigger"] == "new"
    assert admission_decision(None, {}, kubernetes=False)["trigger"] == "new"
    node = admission_decision({}, {}, node_status=status(), taint_key=TAINT)
    assert node["trigger"] == "in_service" and "healthy=true" in node["reason"]
    assert admission_decision({}, {}, node_status=status())["trigger"] == "new"  # no taint key: no Node evidence
    held = status(taint={"key": TAINT, "value": "x"}, taints=[{"key": TAINT, "value": "x"}])
    assert admission_decision({}, {}, node_status=held, taint_key=TAINT)["trigger"] == "new"
    # with the API the local files are no evidence (kubernetes.yml stamps role-state.json before its gate)
    assert admission_decision({}, {}, evidence=files, taint_key=TAINT)["trigger"] == "new"


# -- the state file read strictly (module state_file, state read) -----------------------------------
def read(path, check_mode=False, set_aside=True, max_bytes=16384):
    return state_files.read_work(str(path), {"max_bytes": max_bytes, "set_aside": set_aside}, check_mode)


def decision_of(result):
    return admission_decision(None, {}, state_file=result, kubernetes=False)


@pytest.mark.parametrize("kind, words", [
    ("fifo", "not a regular file"), ("symlink", "symbolic link"), ("directory", "directory"),
    ("oversize", "more than 16384 bytes"), ("binary", "not UTF-8"),
])
def test_a_state_file_that_is_no_regular_small_file_is_unreadable_and_burnt_in_again(tmp_path, kind, words):
    path = tmp_path / "admission.json"
    if kind == "fifo":
        os.mkfifo(str(path))
    elif kind == "symlink":
        (tmp_path / "elsewhere.json").write_text(text())
        os.symlink(str(tmp_path / "elsewhere.json"), str(path))
    elif kind == "directory":
        path.mkdir()
    elif kind == "oversize":
        path.write_text(text() + " " * 16384)
    else:
        path.write_bytes(b"\xff\xfe" + text().encode())
    mode = os.lstat(str(path)).st_mode
    checked = read(path, check_mode=True)  # check mode: never moved
    assert checked["content"] is None and words in checked["problem"] and str(path) in checked["problem"]
    assert not checked["changed"] and os.lstat(str(path)).st_mode == mode
    decision = decision_of(checked)
    assert decision["burn_in"] and decision["trigger"] == "unreadable" and words in decision["reason"]
    assert admission.admission_check(decision)["status"] == "fail"
    moved = read(path)  # set aside, so that the record can be written anew
    assert moved["set_aside"] and moved["changed"] and not os.path.lexists(str(path))
    assert decision_of(moved)["trigger"] == "unreadable"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("admission.json.damaged-")]
    if kind == "symlink":
        assert (tmp_path / "elsewhere.json").read_text() == text()  # what the link pointed to is untouched


def test_a_regular_state_file_is_read_and_an_absent_one_is_a_new_node(tmp_path):
    path = tmp_path / "admission.json"
    assert read(path) == {"changed": False, "path": str(path), "exists": False, "content": None, "problem": None,
                          "set_aside": False}
    assert decision_of(read(path))["trigger"] == "new"
    path.write_text(text())
    result = read(path)
    assert result["content"] == text() and result["problem"] is None and not result["changed"]
    assert not decision_of(result)["burn_in"]
    assert stat.S_ISREG(os.lstat(str(path)).st_mode)
    not_aside = read(tmp_path, set_aside=False)  # a directory, left in place without set_aside
    assert "left in place" in not_aside["problem"] and os.path.isdir(str(tmp_path))


# -- a new node's pending marker (the evidence read of node.yml, before the roles stamp it) ----------
PENDING = json.dumps({"when": WHEN, "level": 2, "tests": [], "result": "pending", "dcgm_version": "", "driver": "",
                      "checks": [], "trigger": "new"})
STAMP_FILES = [{"path": "/var/lib/gpufleet/role-state.json", "exists": True, "content": STAMPS, "problem": None},
               {"path": "/var/lib/gpufleet/health.json", "exists": True, "content": HEALTH, "problem": None}]


def state_read(content):
    return {"exists": content is not None, "content": content, "problem": None,
            "path": "/var/lib/gpufleet/admission.json"}


def test_a_pending_marker_is_read_not_admitted_and_burnt_in_as_new_whatever_the_evidence():
    record = admission.read_record(PENDING, SOURCE)
    assert record["result"] == "pending" and record["result"] not in admission.ADMITTED
    for seen, force in ((None, False), ("role-state.json has the stamps of an earlier converge", False),
                        ("stamps", True)):
        decision = decide(PENDING, in_service=seen, force=force, now=WHEN)
        assert decision["burn_in"] and decision["trigger"] == "new" and "admission pending since" in decision["reason"]
        assert not decision.get("new_record")
        check = admission.admission_check(decision)
        assert check["status"] == "fail" and check["message"].startswith("not admitted")
        assert admission.admission_check(dict(decision, burn_in=False), record)["status"] == "fail"
    off = decide(PENDING, settings=burnin.settings({"enabled": False}, "gpufleet_burnin"))
    assert not off["burn_in"] and off["off"]  # the group opted out: no burn-in, skip


def test_the_marker_is_offered_only_to_a_new_node_without_record_or_evidence():
    new = admission_decision(None, {}, state_file=state_read(None), kubernetes=False, evidence=[])
    marker = admission.read_record(new["pending"], SOURCE)
    assert marker["result"] == "pending" and marker["trigger"] == "new" and marker["level"] == DEFAULTS["dcgm_level"]
    assert admission_decision(None, {"dcgm_level": 3}, kubernetes=False)["pending"] is not None
    # evidence (an in-service node), a record (pending, admitted, failed, unreadable), burn-in off: no marker
    assert admission_decision(None, {}, state_file=state_read(None), kubernetes=False,
                              evidence=STAMP_FILES)["pending"] is None
    for content in (PENDING, text(), text(result="fail"), "{", text(result="in_service")):
        assert admission_decision(None, {}, state_file=state_read(content), kubernetes=False)["pending"] is None
    damaged = {"exists": True, "content": None, "problem": "admission.json is damaged (not a regular file)"}
    assert admission_decision(None, {}, state_file=damaged, kubernetes=False)["pending"] is None
    assert admission_decision(None, {"enabled": False}, state_file=state_read(None), kubernetes=False)["pending"] is None


def test_a_run_stopped_after_the_roles_stamped_a_new_node_leaves_it_burnt_in_as_new(tmp_path):
    """node.yml: the evidence read marks the new node (state_file's atomic write), the roles stamp it,
    the run stops; the next run's evidence read sees stamps, its admission play the marker: burnt in."""
    path = tmp_path / "admission.json"
    first = admission_decision(None, {}, state_file=read(path), kubernetes=False, evidence=[])
    assert first["trigger"] == "new"
    state_files.atomic_write(str(path), first["pending"] + "\n")
    # a second run: the roles of the first stamped role-state.json, the agent may have written health.json
    again = admission_decision(None, {}, state_file=read(path), kubernetes=False, evidence=STAMP_FILES)
    assert again["burn_in"] and again["trigger"] == "new" and again["pending"] is None, again["reason"]
    assert again["check"]["status"] == "fail"
    # the burn-in's record replaces the marker; from then on it is an admitted node
    result = {"healthy": True, "checks": [{"id": "burnin.dcgm.run", "target": "node", "status": "pass",
                                           "observed": {"version": "4.2.3"}}]}
    done = admission_record(result, again, driver="580.95.05")
    assert done["record"]["result"] == "pass" and done["record"]["trigger"] == "new"
    state_files.atomic_write(str(path), done["text"] + "\n")
    later = admission_decision(None, {}, state_file=read(path), kubernetes=False, evidence=STAMP_FILES,
                               driver="580.95.05")
    assert not later["burn_in"] and later["reason"].startswith("admitted")


def test_with_the_api_a_local_pending_marker_wins_over_the_nodes_in_service_evidence():
    # the Node has no record and looks in service; the node's state file says pending: burnt in
    gate = admission_decision({}, {}, state_file=state_read(PENDING), node_status=status(), taint_key=TAINT)
    assert gate["burn_in"] and gate["trigger"] == "new" and "pending" in gate["reason"]
    assert gate["pending"] is None  # the gate never writes a marker
    # without the marker the same Node is in service; a record on the Node wins over the local marker
    assert admission_decision({}, {}, state_file=state_read(None), node_status=status(),
                              taint_key=TAINT)["trigger"] == "in_service"
    admitted = admission_decision({admission.ANNOTATION: text()}, {}, driver="580.95.05",
                                  state_file=state_read(PENDING), node_status=status(), taint_key=TAINT)
    assert not admitted["burn_in"]


@pytest.mark.parametrize("damaged", [
    PENDING[:-20], PENDING.replace('"new"', '"nwe"'), PENDING.replace('"pending"', '"Pending"'),
    PENDING.replace("2,", "7,"), PENDING + "x", PENDING.replace('"pending"', '"pending\\u0000"'),
])
def test_a_damaged_pending_marker_is_unreadable_and_burnt_in_even_with_evidence(damaged):
    decision = admission_decision(None, {}, state_file=state_read(damaged), kubernetes=False, evidence=STAMP_FILES)
    assert decision["burn_in"] and decision["trigger"] == "unreadable" and decision["pending"] is None


@hsettings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries({"when": st.floats(min_value=1.6e9, max_value=4.0e9), "level": st.integers(1, 4)},
                             optional={"tests": st.lists(st.text(min_size=1, max_size=5), max_size=3),
                                       "trigger": st.sampled_from(admission.TRIGGERS),
                                       "repair": st.floats(min_value=1.6e9, max_value=4.0e9)}),
       st.one_of(st.none(), st.text(min_size=1, max_size=20)), st.booleans(), st.sampled_from([None, "580.95.05"]))
def test_any_readable_pending_record_burns_the_node_in_as_new(fields, seen, force, driver):
    raw = json.dumps(dict(fields, result="pending", dcgm_version="", driver="", checks=[]))
    decision = decide(raw, in_service=seen, force=force, driver=driver, now=WHEN)
    assert decision["burn_in"] and decision["trigger"] in ("new", "unreadable")
    if decision["trigger"] == "unreadable":  # only a field out of the reader's bounds
        with pytest.raises(RecordError):
            admission.read_record(raw, SOURCE)
