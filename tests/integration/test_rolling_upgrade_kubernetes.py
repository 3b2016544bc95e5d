"""playbooks/rolling_upgrade.yml with the kubernetes gate backend against the API double.

The nodes are local-connection hosts whose state files live in a temporary directory; the gate is
the in-process double of the API server (tests/fake_kube_api). Validation and holds are off (no
GPU, no HCA, no node_pinning on the test machine) and there is nothing to upgrade: what is tested
is the fault handling around the gate.

Run 0, in check mode (--check), over every node: not one write request reaches the API server
(no PATCH, POST, PUT or DELETE), no state file, no run directory; the Nodes are as before.

Run 1 (all nodes in one batch, no stop threshold):
- ok: admitted, state annotation "admitted"; another controller adds its taint between our read
  and our first write (409): its taint survives.
- pdb: a PodDisruptionBudget blocks the eviction: the drain times out, the node is held with
  step "drain", tainted, state "held" on the node and in the annotation.
- outage: the API server stops answering for this node right after its "cordoned" state was
  written: the drain fails and so does the taint; the host fails with the node cordoned and the
  record "cordoned".
- down: the API server stops answering at all for this node (connection closed, no answer) right
  after its "drained" state was written (state file and annotation): the host fails, the node
  stays cordoned with the record "drained".
- stuck: a pod that never goes away (finalizer): the drain times out, the node is held with step
  "drain" and the reason naming the timeout.
- foreign: cordoned by someone else before the run, no gpufleet record: skipped and reported.
- nan: its upgrade-state annotation holds NaN (set after the check run): the node is refused before
  anything is done, the message naming the annotation; an admin removes it and run 2 upgrades it.
- reboot: the upgrade leaves nvidia_driver_reboot_required and rolling_upgrade_reboot is false
  (the default): held with taint value reboot-required and a reason naming rolling_upgrade_reboot.
Run 2 (API back): outage and down are recognised as gpufleet's cordon and carried on to
"admitted" from the state recorded on the node; pdb and stuck stay held; ok is current; foreign
still skipped.
"""

import json
import os
import subprocess

import pytest

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_upgrade.yml")
TAINT_KEY = "gpufleet.io/unhealthy"
STATE_ANNOTATION = "gpufleet.io/upgrade-state"
OTHER_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
NODES = ["ru-ok", "ru-pdb", "ru-outage", "ru-down", "ru-stuck", "ru-foreign", "ru-reboot", "ru-nan"]
# what Python's json.loads accepts and JSON does not: a record holding it is unreadable, never "none"
NAN_RECORD = '{"state": "admitted", "run_id": "run-0", "components": ["driver"], "target": {"driver": NaN}}'
WRITES = ("PATCH", "POST", "PUT", "DELETE")
NEEDS_REBOOT = os.path.join(REPO, "tests", "integration", "tasks", "rolling_upgrade_needs_reboot.yml")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]


def _run(tmp, run_id, check=False):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "GPUFLEET_REPORT_DIR": str(tmp / "reports"),
        "TMPDIR": str(tmp),
    })
    # nothing to upgrade: the explicit re-validation scope (a bare run is refused)
    extra = {"rolling_upgrade_serial": len(NODES), "rolling_upgrade_max_fail_percentage": 100,
             "rolling_upgrade_run_id": run_id, "rolling_upgrade_revalidate": True}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK, "-e", json.dumps(extra)]
                          + (["--check"] if check else []),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)


def _file_state(tmp, node):
    path = tmp / "nodes" / node / "upgrade-state.json"
    return json.loads(path.read_text()) if path.exists() else None


def _annotation(api, node):
    text = api.node(node)["metadata"].get("annotations", {}).get(STATE_ANNOTATION)
    return json.loads(text) if text else None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rolling_upgrade_kubernetes")
    api = FakeKubeAPI().start()
    try:
        for node in NODES:
            api.add_node(node)
        api.add_pod("web-1", "ru-ok", labels={"app": "web"})
        api.add_pod("db-0", "ru-pdb", namespace="data", owner_kind="StatefulSet", labels={"app": "db"})
        api.add_pdb("db", {"app": "db"}, namespace="data", disruptions_allowed=0)
        api.add_pod("train-0", "ru-outage", namespace="ml", owner_kind="Job")
        api.add_pod("train-1", "ru-down", namespace="ml", owner_kind="Job")
        api.add_pod("stuck-0", "ru-stuck", stuck=True)
        api.patch_node("ru-foreign", "application/merge-patch+json", {"spec": {"unschedulable": True}})

        def other_controller(api):
            taints = api.node("ru-ok")["spec"].get("taints", [])
            api.patch_node("ru-ok", "application/merge-patch+json", {"spec": {"taints": taints + [OTHER_TAINT]}})

        api.interleave("ru-ok", other_controller, content_type="application/merge-patch+json")
        # planned (annotation), cordon, cordoned (annotation): then the API server goes away
        api.outage("ru-outage", after_patches=3)
        # planned, cordon, cordoned, drained (annotations; the drain's cordon finds the node
        # cordoned and k8s_drain patches nothing): then no answer at all
        api.outage("ru-down", after_patches=4, unreachable=True)
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"kube_node": {
                "vars": {
                    "node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON,
                    "node_gate_kubeconfig": kubeconfig,
                    "node_gate_allow_plain_http": True,  # the double is plain http with a bearer token
                    "rolling_upgrade_gate_backend": "kubernetes",
                    "rolling_upgrade_drain_timeout": 3,
                    "rolling_upgrade_manage_holds": False,
                    "rolling_upgrade_validate_gpu": False,
                    "rolling_upgrade_validate_rdma": False,
                    "rolling_upgrade_target": {"driver": "580.95.05"},
                    "rolling_upgrade_state_file": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade-state.json",
                    "rolling_upgrade_state_dir": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade",
                    "rolling_upgrade_fail_held_nodes": False,
                },
                "hosts": dict({node: {} for node in NODES},
                              **{"ru-reboot": {"rolling_upgrade_post_upgrade_tasks": NEEDS_REBOOT}})}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        before_check = {node: api.node(node) for node in NODES}
        requests_before = len(api.requests)
        check = _run(tmp, "run-0", check=True)
        check_requests = api.requests[requests_before:]
        after_check = {node: api.node(node) for node in NODES}
        # node state (state files, applied.json) and the run directories; the fleet_report
        # callback's own files (reports/fleet-report.*, junit.xml) are not the upgrade's
        check_files = sorted(str(p.relative_to(tmp)) for p in [*(tmp / "nodes").glob("**/*"),
                                                             *(tmp / "reports" / "upgrades").glob("**/*")])
        api.patch_node("ru-nan", "application/merge-patch+json",
                       {"metadata": {"annotations": {STATE_ANNOTATION: NAN_RECORD}}})
        first = _run(tmp, "run-1")
        nan_after_first = api.node("ru-nan")
        after_first = {node: {"file": _file_state(tmp, node), "annotation": _annotation(api, node),
                              "node": api.node(node)} for node in NODES if node != "ru-nan"}
        api.patch_node("ru-nan", "application/merge-patch+json",
                       {"metadata": {"annotations": {STATE_ANNOTATION: None}}})
        api.end_outage("ru-outage")
        api.end_outage("ru-down")
        second = _run(tmp, "run-2")
        after_second = {node: {"file": _file_state(tmp, node), "annotation": _annotation(api, node),
                               "node": api.node(node)} for node in NODES}
        summaries = {}
        for run_id in ("run-1", "run-2"):
            with open(tmp / "reports" / "upgrades" / run_id / "summary.json") as handle:
                summaries[run_id] = json.load(handle)
        yield {"api": api, "check": check, "check_requests": check_requests, "before_check": before_check,
               "after_check": after_check, "check_files": check_files,
               "first": first, "second": second, "after_first": after_first, "nan_after_first": nan_after_first,
               "after_second": after_second, "summaries": summaries, "tmp": tmp}
    finally:
        api.stop()


def _outcomes(summary):
    return {n["node"]: n for n in summary["nodes"]}


def test_check_mode_sends_no_write_to_the_api_and_writes_nothing(runs):
    out = runs["check"].stdout + runs["check"].stderr
    assert runs["check"].returncode == 0, out
    assert "ru-ok" in out and "PLAY RECAP" in out
    assert runs["check_requests"], "the check run read nothing from the API server"
    writes = [(r["method"], r["path"]) for r in runs["check_requests"] if r["method"] in WRITES]
    assert writes == [], writes
    assert runs["after_check"] == runs["before_check"]
    assert runs["check_files"] == []  # no state file, no applied.json, no run directory


def test_first_run_fails_only_the_nodes_whose_api_went_away(runs):
    out = runs["first"].stdout + runs["first"].stderr
    assert runs["first"].returncode != 0, out
    # the Node read after the write goes through node_write (mode status): "API server answered 503"
    assert "ru-outage" in out and ("ServiceUnavailable" in out or "API server answered 503" in out)
    recap = out[out.rindex("PLAY RECAP"):]
    for node in ("ru-ok", "ru-pdb", "ru-stuck", "ru-foreign", "ru-reboot"):
        line = [ln for ln in recap.splitlines() if ln.startswith(node)][0]
        assert "failed=0" in line, line
    for node in ("ru-outage", "ru-down", "ru-nan"):
        line = [ln for ln in recap.splitlines() if ln.startswith(node)][0]
        assert "failed=0" not in line, line


def test_an_unreadable_record_refuses_the_node_before_anything_is_done(runs):
    out = runs["first"].stdout + runs["first"].stderr
    assert "ru-nan not touched: unreadable record annotation gpufleet.io/upgrade-state" in out, out
    node = runs["nan_after_first"]
    assert "unschedulable" not in node["spec"] and not node["spec"].get("taints")
    assert node["metadata"]["annotations"][STATE_ANNOTATION] == NAN_RECORD  # left for the admin
    assert _file_state(runs["tmp"], "ru-nan") is not None  # run 2 (record removed) wrote it
    outcomes = _outcomes(runs["summaries"]["run-2"])
    assert outcomes["ru-nan"]["outcome"] == "upgraded"


def test_admitted_node_keeps_the_other_controllers_taint(runs):
    state = runs["after_first"]["ru-ok"]
    assert state["file"]["state"] == "admitted" and state["annotation"] == state["file"]
    assert state["node"]["spec"]["taints"] == [OTHER_TAINT]
    assert "unschedulable" not in state["node"]["spec"]
    statuses = [r["status"] for r in runs["api"].recorded("PATCH", "/api/v1/nodes/ru-ok")
                if r["content_type"] == "application/merge-patch+json"]
    assert statuses[:2] == [409, 200]
    assert runs["api"].pod_names("ru-ok") == []


def test_pdb_blocked_drain_holds_the_node_with_the_step(runs):
    state = runs["after_first"]["ru-pdb"]
    assert state["file"]["state"] == "held" and state["file"]["step"] == "drain"
    assert "disruption budget" in state["file"]["reason"]
    assert state["annotation"] == state["file"]
    node = state["node"]
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == [TAINT_KEY]
    assert node["spec"]["taints"][0]["value"] == "upgrade-failed"
    assert runs["api"].pod_names("ru-pdb") == ["data/db-0"]


def test_api_outage_leaves_a_cordoned_record(runs):
    state = runs["after_first"]["ru-outage"]
    assert state["file"]["state"] == "cordoned"
    assert state["annotation"]["state"] == "cordoned"
    assert state["node"]["spec"]["unschedulable"] is True and "taints" not in state["node"]["spec"]
    assert "ru-outage" in runs["summaries"]["run-1"]["not_reached"]


def test_unreachable_api_after_drain_leaves_the_record_on_the_node(runs):
    state = runs["after_first"]["ru-down"]
    assert state["file"]["state"] == "drained"
    assert state["annotation"] == state["file"]
    assert state["node"]["spec"]["unschedulable"] is True and "taints" not in state["node"]["spec"]
    assert runs["api"].pod_names("ru-down") == []
    dropped = [r for r in runs["api"].recorded(path_contains="ru-down") if r["status"] is None]
    assert dropped and dropped[0]["method"] == "GET"  # the read after the "drained" write went unanswered
    assert "ru-down" in runs["summaries"]["run-1"]["not_reached"]


def test_drain_timeout_holds_the_node_with_the_step(runs):
    state = runs["after_first"]["ru-stuck"]
    assert state["file"]["state"] == "held" and state["file"]["step"] == "drain"
    assert "pods were still on the node after 3 s" in state["file"]["reason"]
    assert state["annotation"] == state["file"]
    node = state["node"]
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": TAINT_KEY, "value": "upgrade-failed", "effect": "NoSchedule"}]
    assert runs["api"].pod_names("ru-stuck") == ["default/stuck-0"]
    assert _outcomes(runs["summaries"]["run-2"])["ru-stuck"]["outcome"] == "held"


def test_foreign_cordon_is_left_alone_and_reported(runs):
    for run_id in ("run-1", "run-2"):
        record = _outcomes(runs["summaries"][run_id])["ru-foreign"]
        assert record["outcome"] == "skipped" and "someone else" in record["reason"]
    assert runs["after_second"]["ru-foreign"]["file"] is None
    assert runs["after_second"]["ru-foreign"]["annotation"] is None


def test_second_run_carries_the_interrupted_node_on(runs):
    out = runs["second"].stdout + runs["second"].stderr
    assert runs["second"].returncode == 0, out
    state = runs["after_second"]["ru-outage"]
    assert state["file"]["state"] == "admitted"
    assert state["file"]["resumed_from"] == {"run_id": "run-1", "state": "cordoned"}
    assert state["annotation"] == state["file"]
    assert "unschedulable" not in state["node"]["spec"]
    assert runs["api"].pod_names("ru-outage") == []
    down = runs["after_second"]["ru-down"]
    assert down["file"]["state"] == "admitted" and down["annotation"] == down["file"]
    assert down["file"]["resumed_from"] == {"run_id": "run-1", "state": "drained"}
    assert "unschedulable" not in down["node"]["spec"]
    outcomes = _outcomes(runs["summaries"]["run-2"])
    assert outcomes["ru-outage"]["outcome"] == "upgraded"
    assert outcomes["ru-down"]["outcome"] == "upgraded"
    assert outcomes["ru-pdb"]["outcome"] == "held"
    assert outcomes["ru-ok"]["outcome"] == "current"
    assert runs["after_second"]["ru-pdb"]["file"]["state"] == "held"


def test_a_needed_reboot_that_is_not_allowed_holds_the_node_naming_the_variable(runs):
    state = runs["after_first"]["ru-reboot"]
    assert state["file"]["state"] == "held" and state["file"]["step"] == "reboot"
    assert "nvidia_driver_reboot_required is true" in state["file"]["reason"]
    assert "set rolling_upgrade_reboot=true" in state["file"]["reason"]
    node = state["node"]
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": TAINT_KEY, "value": "reboot-required", "effect": "NoSchedule"}]
    assert _outcomes(runs["summaries"]["run-2"])["ru-reboot"]["outcome"] == "held"
