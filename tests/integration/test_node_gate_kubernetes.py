"""Role node_gate, backend kubernetes, against the Kubernetes API test double (tests/fake_kube_api).

One fake API server, one ansible-playbook run (tests/integration/playbooks/node_gate_kubernetes.yml):
every inventory host is a Node of the fake cluster running its own sequence of node_gate actions
(the scenarios below run in parallel, which keeps the whole module well under a minute). The
kubeconfig is plain http with a bearer token (so node_gate_allow_plain_http is set);
node_gate_api_host is localhost (local connection) and node_gate_python the venv interpreter, which
has the Python kubernetes client (the reads and the evictions of drain go through kubernetes.core;
every write of a Node through module node_write). The tests assert the server state afterwards,
the requests sent (every Node write a merge patch carrying the resourceVersion read, nothing sent
when nothing changes, 409 Conflict redone), what each step changed (from the ansible.posix.json
output) and node_gate_status after each step.
"""

import json
import os
import subprocess
import time

import pytest

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "node_gate_kubernetes.yml")
TAINT_KEY = "gpufleet.io/unhealthy"
REASON_ANNOTATION = "gpufleet.io/unhealthy-reason"
FOREIGN_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
REASON = "validation failed: gpu.ecc.volatile_uncorrectable:gpu3 rdma.port.state:mlx5_1/1"
# The label-safe form of the one sanitiser (filter k8s_label_value, used by health_gate_patch):
# runs of other characters become "-", 63 characters at most, no leading/trailing
# non-alphanumerics. (node_gate used "_" before the two sanitisers were made one.)
REASON_VALUE = "validation-failed-gpu.ecc.volatile_uncorrectable-gpu3-rdma.port"

MAINTENANCE_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
STATE_ANNOTATION = "gpufleet.io/upgrade-state"
STATE_VALUE = json.dumps({"state": "cordoned", "run_id": "20261122T210000Z"})

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]

# node_validate results (the result model of docs/contracts.md), as the health gate receives them
SICK = {"changed": False, "healthy": False, "summary": {"pass": 1, "warn": 0, "fail": 1, "skip": 0},
        "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs"},
                   {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail", "message": "2 DBE"}]}
HEALTHY = {"changed": False, "healthy": True, "summary": {"pass": 1, "warn": 1, "fail": 0, "skip": 0},
           "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs"},
                      {"id": "gpu.temperature", "target": "gpu0", "status": "warn", "message": "hot"}]}

SCENARIOS = {
    # cordon twice, then release a cordoned node that has no gpufleet taint
    "gpu-cordon": [{"action": "cordon"}, {"action": "cordon"}, {"action": "release"}],
    "gpu-drain": [{"action": "drain", "drain_timeout": 20}, {"action": "drain", "drain_timeout": 20}],
    "gpu-pdb": [{"action": "drain", "drain_timeout": 2}],
    "gpu-stuck": [{"action": "drain", "drain_timeout": 2}],
    "gpu-bare": [{"action": "drain", "drain_timeout": 5}],
    "gpu-taint": [
        {"action": "taint", "reason": REASON},
        {"action": "taint", "reason": REASON},
        {"action": "taint", "reason": "reboot required", "taint_value": "reboot-required"},
        {"action": "release"},
        {"action": "release"},
    ],
    "gpu-status": [{"action": "status"}, {"action": "status", "node_name": "gpu-node-404"}],
    # optimistic concurrency: another controller writes the Node between our read and our write
    "gpu-race-taint": [{"action": "taint", "reason": REASON}],
    "gpu-race-release": [{"action": "release"}],
    "gpu-race-forever": [{"action": "taint", "reason": REASON}],
    "gpu-race-cordon": [{"action": "cordon"}],
    "gpu-race-drain": [{"action": "drain", "drain_timeout": 20}],
    # durable state of rolling_upgrade: set, set again (no change), remove
    "gpu-annotate": [
        {"action": "annotate", "annotations": {STATE_ANNOTATION: STATE_VALUE}},
        {"action": "annotate", "annotations": {STATE_ANNOTATION: STATE_VALUE}},
        {"action": "annotate", "annotations": {STATE_ANNOTATION: None}},
    ],
    # the health gate: a failing check taints, the same result again changes nothing, passing
    # checks untaint, no result at all taints again (fail closed)
    "gpu-health": [
        {"action": "health", "results": SICK},
        {"action": "health", "results": [SICK]},
        {"action": "health", "results": HEALTHY},
        {"action": "health"},
    ],
}


def build_cluster(api):
    for name in [*SCENARIOS, "bystander"]:
        api.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    api.add_pod("web-7d9f-zzzzz", "bystander", labels={"app": "web"})
    api.add_pod("debug-shell", "bystander", owner_kind=None)

    api.add_pod("web-7d9f-abcde", "gpu-drain", labels={"app": "web"})
    api.add_pod("train-0", "gpu-drain", namespace="ml", owner_kind="StatefulSet", labels={"app": "train"})
    api.add_pod("nccl-test-xyz", "gpu-drain", namespace="ml", owner_kind="Job")
    api.add_pod("done-1", "gpu-drain", owner_kind=None, phase="Succeeded")  # finished bare pod: deletable
    api.add_pod("nvidia-device-plugin-q8z", "gpu-drain", namespace="kube-system", owner_kind="DaemonSet")
    api.add_pdb("web", {"app": "web"}, disruptions_allowed=1)

    api.add_pod("db-0", "gpu-pdb", namespace="data", owner_kind="StatefulSet", labels={"app": "db"})
    api.add_pdb("db", {"app": "db"}, namespace="data", disruptions_allowed=0)

    api.add_pod("stuck-0", "gpu-stuck", stuck=True)
    api.add_pod("debug-shell", "gpu-bare", namespace="ml", owner_kind=None)

    api.patch_node("gpu-taint", "application/merge-patch+json",
                   {"metadata": {"annotations": {"example.com/owner": "team-a"}}, "spec": {"taints": [FOREIGN_TAINT]}})
    api.patch_node("gpu-health", "application/merge-patch+json", {"spec": {"taints": [FOREIGN_TAINT]}})
    def other_controller_taints(api, node="gpu-race-taint"):
        taints = api.node(node)["spec"].get("taints", [])
        api.patch_node(node, "application/merge-patch+json", {"spec": {"taints": taints + [MAINTENANCE_TAINT]}})

    def other_controller_annotates(api):
        count = int(api.node("gpu-race-forever")["metadata"].get("annotations", {}).get("example.com/writes", "0"))
        api.patch_node("gpu-race-forever", "application/merge-patch+json",
                       {"metadata": {"annotations": {"example.com/writes": str(count + 1)}}})

    api.interleave("gpu-race-taint", other_controller_taints, content_type="application/merge-patch+json")
    api.patch_node("gpu-race-release", "application/merge-patch+json", {
        "metadata": {"annotations": {REASON_ANNOTATION: REASON}},
        "spec": {"unschedulable": True, "taints": [{"key": TAINT_KEY, "value": REASON_VALUE, "effect": "NoSchedule"}]}})
    api.interleave("gpu-race-release", lambda api: other_controller_taints(api, "gpu-race-release"),
                   content_type="application/merge-patch+json")
    api.interleave("gpu-race-forever", other_controller_annotates, times=100,
                   content_type="application/merge-patch+json")

    def other_controller_labels_and_taints(api, node):
        taints = api.node(node)["spec"].get("taints", [])
        api.patch_node(node, "application/merge-patch+json", {
            "metadata": {"labels": {"example.com/pool": "maintenance"}},
            "spec": {"taints": taints + [MAINTENANCE_TAINT]}})

    for node in ("gpu-race-cordon", "gpu-race-drain"):
        api.interleave(node, lambda api, node=node: other_controller_labels_and_taints(api, node),
                       content_type="application/merge-patch+json")
    api.add_pod("web-race-1", "gpu-race-drain", namespace="web", labels={"app": "race"})
    api.patch_node("gpu-status", "application/merge-patch+json", {
        "metadata": {"annotations": {REASON_ANNOTATION: "validation failed: gpu.count:node"}},
        "spec": {"unschedulable": True, "taints": [
            {"key": TAINT_KEY, "value": "gpu.count", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})


class Run:
    """The playbook run: per host, the steps (changed count, node_gate_status) and the failure."""

    def __init__(self, api, proc, duration):
        self.api = api
        self.proc = proc
        self.duration = duration
        self.output = proc.stdout + proc.stderr
        start = proc.stdout.find("{")
        assert start >= 0, self.output
        self.data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
        self.steps = {host: [] for host in SCENARIOS}
        self.failure = {}
        for play in self.data["plays"]:  # play n runs step n of every host
            changed = {host: 0 for host in SCENARIOS}
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("skipped"):
                        continue
                    if task["task"]["name"] == "Report the step to the test":
                        self.steps[host].append({"changed": changed[host],
                                                 "status": result["msg"]["node_gate_status"]})
                    elif result.get("changed"):
                        changed[host] += 1
                    if result.get("failed"):
                        self.failure[host] = result.get("msg", "")
        self.stats = self.data["stats"]

    def changed(self, host):
        return [step["changed"] for step in self.steps[host]]

    def status(self, host, index=-1):
        return self.steps[host][index]["status"]

    def failed(self, host):
        return self.stats[host]["failures"] > 0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node_gate_kubernetes")
    api = FakeKubeAPI().start()
    try:
        build_cluster(api)
        api.requests.clear()
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        hosts = {name: {"node_gate_test_steps": steps} for name, steps in SCENARIOS.items()}
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"gpu_nodes": {
                "vars": {"node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON,
                         "node_gate_kubeconfig": kubeconfig, "node_gate_backend": "kubernetes"},
                "hosts": hosts}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        env = dict(os.environ)
        env.update({
            "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "GPUFLEET_REPORT_DIR": str(tmp / "reports"),  # fleet_report (ansible.cfg) writes there
            "TMPDIR": str(tmp),  # kubernetes.core's discovery cache (k8srcp-*.json) lands here
        })
        started = time.monotonic()
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK], check=False, cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=900)
        yield Run(api, proc, time.monotonic() - started)
    finally:
        api.stop()


def patches(api, node, content_type=None):
    return [r for r in api.recorded("PATCH", "/api/v1/nodes/%s" % node)
            if r["status"] == 200 and content_type in (None, r["content_type"])]


def evictions(api, pod, status=None):
    return [r for r in api.recorded("POST", "/pods/%s/eviction" % pod) if status in (None, r["status"])]


def test_only_the_expected_hosts_failed(run):
    failed = sorted(host for host in SCENARIOS if run.failed(host))
    assert failed == ["gpu-bare", "gpu-pdb", "gpu-race-forever", "gpu-status", "gpu-stuck"], run.output
    assert all(r["status"] != 401 for r in run.api.requests)


def test_cordon_sets_unschedulable_and_is_idempotent(run):
    api = run.api
    assert run.changed("gpu-cordon") == [1, 0, 1], run.output
    cordon, cordon_again, release = (step["status"] for step in run.steps["gpu-cordon"])
    assert cordon["cordoned"] is True and cordon["taint"] is None and cordon["backend"] == "kubernetes"
    assert cordon_again["cordoned"] is True
    assert release["cordoned"] is False
    # cordon and uncordon are the guarded write too: a merge patch carrying the resourceVersion
    # read just before (never k8s_drain's unguarded strategic merge patch); the repeated cordon
    # sends nothing; release of a node without our taint touches neither taints nor annotations.
    sent = patches(api, "gpu-cordon")
    assert [p["content_type"] for p in sent] == ["application/merge-patch+json"] * 2
    assert [p["body"]["spec"] for p in sent] == [{"unschedulable": True}, {"unschedulable": False}]
    assert all(set(p["body"]["metadata"]) == {"resourceVersion"} for p in sent), sent
    assert api.recorded("PATCH", "/api/v1/nodes/gpu-cordon") == sent  # no other patch, none refused
    assert "unschedulable" not in api.node("gpu-cordon")["spec"]  # omitempty, as the real server stores it


def test_a_write_action_reads_the_node_once_and_its_status_is_the_node_it_wrote(run):
    """node_gate_status after a guarded write (cordon, release) is the Node the write returned: the Node
    is read once per action, by the write itself, not read again after it."""
    methods = [r["method"] for r in run.api.recorded(path_contains="/api/v1/nodes/gpu-cordon")]
    # cordon: read, patch; cordon again: read, nothing to send; release: read, patch
    assert methods == ["GET", "PATCH", "GET", "GET", "PATCH"], methods
    sent = patches(run.api, "gpu-cordon")
    # the status after the cordon is the Node at the resourceVersion the next write read and carried
    assert run.status("gpu-cordon", 0)["resource_version"] == sent[1]["body"]["metadata"]["resourceVersion"]
    assert run.status("gpu-cordon", 1)["resource_version"] == sent[1]["body"]["metadata"]["resourceVersion"]


def test_no_gate_action_patches_without_a_resource_version(run):
    unguarded = [(r["path"], r["body"]) for r in run.api.recorded("PATCH", "/api/v1/nodes/")
                 if not (r["body"] or {}).get("metadata", {}).get("resourceVersion")]
    assert unguarded == [], run.output


def test_cordon_is_redone_after_a_conflict_and_keeps_the_other_controllers_changes(run):
    api = run.api
    sent = api.recorded("PATCH", "/api/v1/nodes/gpu-race-cordon")
    # the other controller wrote between our read and our write (FakeKubeAPI.interleave): 409,
    # then the Node is read again and the cordon sent with the new resourceVersion
    assert [r["status"] for r in sent] == [409, 200], run.output
    assert int(sent[1]["body"]["metadata"]["resourceVersion"]) > int(sent[0]["body"]["metadata"]["resourceVersion"])
    assert [r["body"]["spec"] for r in sent] == [{"unschedulable": True}] * 2
    node = api.node("gpu-race-cordon")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [MAINTENANCE_TAINT]
    assert node["metadata"]["labels"]["example.com/pool"] == "maintenance"
    assert run.status("gpu-race-cordon")["cordoned"] is True


def test_drain_cordons_with_the_guarded_write_then_evicts(run):
    api = run.api
    sent = api.recorded("PATCH", "/api/v1/nodes/gpu-race-drain")
    assert [(r["status"], r["content_type"]) for r in sent] == [(409, "application/merge-patch+json"),
                                                                 (200, "application/merge-patch+json")], run.output
    # k8s_drain found the node cordoned and did not patch it itself (no strategic merge patch)
    node = api.node("gpu-race-drain")
    assert node["spec"]["unschedulable"] is True and node["spec"]["taints"] == [MAINTENANCE_TAINT]
    assert api.pod_names("gpu-race-drain") == []
    assert [r["status"] for r in evictions(api, "web-race-1")] == [201]
    assert run.status("gpu-race-drain")["drained"] is True


def test_drain_evicts_pods_but_not_daemonset_pods_and_is_idempotent(run):
    api = run.api
    assert run.changed("gpu-drain")[0] >= 1 and run.changed("gpu-drain")[1] == 0, run.output
    assert api.node("gpu-drain")["spec"]["unschedulable"] is True
    assert api.pod_names("gpu-drain") == ["kube-system/nvidia-device-plugin-q8z"]
    for pod in ("web-7d9f-abcde", "train-0", "nccl-test-xyz", "done-1"):
        assert [r["status"] for r in evictions(api, pod)] == [201], pod
    assert evictions(api, "nvidia-device-plugin-q8z") == []
    assert api.recorded("DELETE") == []  # the Eviction API only, never a plain delete
    assert api.pdbs[("default", "web")]["status"]["disruptionsAllowed"] == 0  # the budget was used
    listed = [r for r in api.recorded("GET", "/api/v1/pods") if "gpu-drain" in r["query"].get("fieldSelector", "")]
    assert listed and all(r["query"]["fieldSelector"] == "spec.nodeName=gpu-drain" for r in listed)
    first, second = (step["status"] for step in run.steps["gpu-drain"])
    assert first["cordoned"] is True and first["drained"] is True
    assert second["drained"] is True


def test_drain_leaves_other_nodes_alone(run):
    api = run.api
    assert api.pod_names("bystander") == ["default/debug-shell", "default/web-7d9f-zzzzz"]
    assert patches(api, "bystander") == []
    assert "unschedulable" not in api.node("bystander")["spec"]


def test_drain_blocked_by_a_pdb_fails_after_the_timeout(run):
    api = run.api
    message = run.failure.get("gpu-pdb", "")
    assert "drain of gpu-pdb did not complete" in message, run.output
    assert "Cannot evict pod as it would violate the pod's disruption budget" in message
    assert "data/db-0" in message and "PodDisruptionBudget refused the eviction for 2 s" in message
    assert "The node is cordoned." in message
    assert api.pod_names("gpu-pdb") == ["data/db-0"]
    assert api.node("gpu-pdb")["spec"]["unschedulable"] is True
    refused = evictions(api, "db-0", 429)
    assert len(refused) >= 2 and len(refused) == len(evictions(api, "db-0"))  # retried, as kubectl drain does


def test_drain_fails_when_pods_outlive_the_timeout(run):
    api = run.api
    message = run.failure.get("gpu-stuck", "")
    assert "drain of gpu-stuck did not complete: pods were still on the node after 2 s" in message, run.output
    assert "timeout reached" in message and "The node is cordoned." in message
    assert api.pods[("default", "stuck-0")]["metadata"].get("deletionTimestamp")
    assert api.node("gpu-stuck")["spec"]["unschedulable"] is True


def test_drain_refuses_a_bare_pod_and_leaves_the_node_cordoned(run):
    api = run.api
    message = run.failure.get("gpu-bare", "")
    assert "cannot delete Pods not managed by" in message and "ml/debug-shell" in message, run.output
    # the guarded cordon comes before k8s_drain, which then has no cordon of its own to undo:
    # the node stays cordoned, as after a failed kubectl drain; the message says so.
    assert "The node is cordoned." in message
    assert api.node("gpu-bare")["spec"]["unschedulable"] is True
    assert api.pod_names("gpu-bare") == ["ml/debug-shell"]
    assert evictions(api, "debug-shell") == []


def test_taint_then_release_keep_other_taints_and_are_idempotent(run):
    api = run.api
    # one guarded write each: cordon + taint, -, retaint, untaint + uncordon, -
    assert run.changed("gpu-taint") == [1, 0, 1, 1, 0], run.output
    ours = {"key": TAINT_KEY, "value": REASON_VALUE, "effect": "NoSchedule"}
    taint, _, retaint, release, _ = (step["status"] for step in run.steps["gpu-taint"])
    assert taint["cordoned"] is True and taint["reason"] == REASON and taint["taint"] == ours
    assert taint["taints"] == [FOREIGN_TAINT, ours]
    assert retaint["taint"] == {"key": TAINT_KEY, "value": "reboot-required", "effect": "NoSchedule"}
    assert retaint["taints"][0] == FOREIGN_TAINT and retaint["reason"] == "reboot required"
    assert release["cordoned"] is False and release["taint"] is None and release["reason"] == ""

    merges = patches(api, "gpu-taint", "application/merge-patch+json")
    assert len(merges) == 3 and merges == patches(api, "gpu-taint")  # taint, retaint, untaint: nothing else
    assert merges[0]["body"]["spec"] == {"taints": [FOREIGN_TAINT, ours], "unschedulable": True}
    assert merges[0]["body"]["metadata"]["annotations"] == {REASON_ANNOTATION: REASON}
    assert "unschedulable" not in merges[1]["body"]["spec"]  # already cordoned
    assert merges[2]["body"]["spec"] == {"taints": [FOREIGN_TAINT], "unschedulable": False}
    assert merges[2]["body"]["metadata"]["annotations"] == {REASON_ANNOTATION: None}

    node = api.node("gpu-taint")
    assert node["spec"]["taints"] == [FOREIGN_TAINT]
    assert node["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert "unschedulable" not in node["spec"]


def test_status_reads_without_writing(run):
    api = run.api
    assert run.changed("gpu-status")[0] == 0
    assert patches(api, "gpu-status") == []
    assert run.status("gpu-status", 0) == {
        "backend": "kubernetes", "simulated": False, "node": "gpu-status", "cordoned": True, "drained": None,
        "taint": {"key": TAINT_KEY, "value": "gpu.count", "effect": "NoSchedule"},
        "reason": "validation failed: gpu.count:node",
        "taints": [{"key": TAINT_KEY, "value": "gpu.count", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
        "annotations": {REASON_ANNOTATION: "validation failed: gpu.count:node"},
        "resource_version": api.node("gpu-status")["metadata"]["resourceVersion"],
        # the Node's labels and conditions (type and status): the admission's in-service evidence
        "labels": api.node("gpu-status")["metadata"]["labels"],
        "conditions": [{"type": c["type"], "status": c["status"]} for c in api.node("gpu-status")["status"]["conditions"]],
    }


def test_status_of_an_unknown_node_fails_clearly(run):
    assert "no Node named gpu-node-404" in run.failure.get("gpu-status", ""), run.output



def test_health_gate_taints_on_failure_untaints_on_pass_and_fails_closed(run):
    api = run.api
    assert run.changed("gpu-health") == [1, 0, 1, 1], run.output
    sick, sick_again, healthy, unchecked = (step["status"] for step in run.steps["gpu-health"])
    ours = {"key": TAINT_KEY, "value": "gpu.ecc.volatile_uncorrectable", "effect": "NoSchedule"}
    assert sick["taint"] == ours and sick["taints"] == [FOREIGN_TAINT, ours]
    assert sick["reason"] == "validation failed: gpu.ecc.volatile_uncorrectable:gpu3"
    assert sick["cordoned"] is False  # the health gate taints, it does not cordon
    assert sick_again["taint"] == ours
    assert healthy["taint"] is None and healthy["reason"] == "" and healthy["taints"] == [FOREIGN_TAINT]
    assert unchecked["taint"] == {"key": TAINT_KEY, "value": "gate.no_results", "effect": "NoSchedule"}

    merges = patches(api, "gpu-health", "application/merge-patch+json")
    assert len(merges) == 4  # sick, sick again (no change), healthy, unchecked
    assert merges[0]["body"]["metadata"]["labels"] == {"gpufleet.io/failed-check": "gpu.ecc.volatile_uncorrectable",
                                                       "gpufleet.io/healthy": "false"}
    assert merges[2]["body"]["metadata"]["labels"] == {"gpufleet.io/failed-check": None, "gpufleet.io/healthy": "true"}
    assert merges[2]["body"]["metadata"]["annotations"] == {REASON_ANNOTATION: None}
    node = api.node("gpu-health")
    assert node["metadata"]["labels"]["gpufleet.io/failed-check"] == "gate.no_results"
    assert "unschedulable" not in node["spec"]


def test_taint_write_is_redone_after_a_conflict_and_keeps_the_other_controllers_taint(run):
    api = run.api
    ours = {"key": TAINT_KEY, "value": REASON_VALUE, "effect": "NoSchedule"}
    merges = [r for r in api.recorded("PATCH", "/api/v1/nodes/gpu-race-taint")
              if r["content_type"] == "application/merge-patch+json"]
    # our write refused (the other controller wrote after our read), our write redone; the other
    # controller writes in-process (FakeKubeAPI.interleave), so only our requests are recorded
    assert [r["status"] for r in merges] == [409, 200], run.output
    ours_sent = [r for r in merges if r["body"]["metadata"].get("resourceVersion")]
    assert len(ours_sent) == 2
    assert ours_sent[0]["body"]["spec"]["taints"] == [ours]  # computed from the stale read
    assert ours_sent[1]["body"]["spec"]["taints"] == [MAINTENANCE_TAINT, ours]
    assert int(ours_sent[1]["body"]["metadata"]["resourceVersion"]) > int(ours_sent[0]["body"]["metadata"]["resourceVersion"])
    node = api.node("gpu-race-taint")
    assert node["spec"]["taints"] == [MAINTENANCE_TAINT, ours]
    assert node["spec"]["unschedulable"] is True
    assert run.status("gpu-race-taint")["taints"] == [MAINTENANCE_TAINT, ours]


def test_release_after_a_conflict_removes_only_our_taint(run):
    api = run.api
    statuses = [r["status"] for r in api.recorded("PATCH", "/api/v1/nodes/gpu-race-release")
                if r["content_type"] == "application/merge-patch+json"]
    assert statuses == [409, 200], run.output
    node = api.node("gpu-race-release")
    assert node["spec"]["taints"] == [MAINTENANCE_TAINT]
    assert REASON_ANNOTATION not in node["metadata"].get("annotations", {})
    assert "unschedulable" not in node["spec"]


def test_a_write_that_keeps_conflicting_fails_after_the_retries(run):
    api = run.api
    message = run.failure.get("gpu-race-forever", "")
    assert "taint of gpu-race-forever was refused 5 times with 409 Conflict" in message, run.output
    ours = [r for r in api.recorded("PATCH", "/api/v1/nodes/gpu-race-forever")
            if r["content_type"] == "application/merge-patch+json" and r["body"]["metadata"].get("resourceVersion")]
    assert [r["status"] for r in ours] == [409] * 5
    node = api.node("gpu-race-forever")
    assert "taints" not in node["spec"]  # nothing of ours was written: no taint, no cordon
    assert "unschedulable" not in node["spec"]
    assert node["metadata"]["annotations"]["example.com/writes"] == "5"


def test_annotate_sets_keeps_and_removes_the_state_annotation(run):
    api = run.api
    assert run.changed("gpu-annotate") == [1, 0, 1], run.output
    first, again, removed = (step["status"] for step in run.steps["gpu-annotate"])
    assert first["annotations"][STATE_ANNOTATION] == STATE_VALUE
    assert again["annotations"] == first["annotations"]
    assert STATE_ANNOTATION not in removed["annotations"]
    merges = patches(api, "gpu-annotate", "application/merge-patch+json")
    assert len(merges) == 2  # the repeat sends nothing
    assert "spec" not in merges[0]["body"]  # an annotation write never touches the taints
    assert merges[1]["body"]["metadata"]["annotations"] == {STATE_ANNOTATION: None}
    assert api.node("gpu-annotate")["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-annotate"
