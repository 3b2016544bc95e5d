"""playbooks/rolling_upgrade.yml, component kubernetes as a kubeadm upgrade: kubeadm's skew rules
refuse an upgrade before the node is touched (role rolling_upgrade, tasks/kubeadm_preflight.yml).

Local-connection nodes, the kubernetes gate backend against the API double (tests/fake_kube_api),
a kubectl double answering `kubectl version -o json` with an API server at v1.28.5 (v1.28.5-rc.1
through the kubeconfig rc.conf, v1.28.7 through new.conf) and `kubectl get node <name> -o json`
with a kubelet at v1.28.5 (v1.28.6 through new.conf), the kubeadm test double of the molecule
scenarios (never reached here). All refused with a message naming
rolling_upgrade_target.kubernetes, in one playbook run: the first control-plane node asked for
v1.30.1 (two minors up), a worker asked for v1.29.2 before the control plane runs it, a worker
asked for v1.27.9 (below the API server's minor), a worker asked for v1.28.5 while the API server
runs the release candidate v1.28.5-rc.1 (not the release; kubernetes/kubernetes issue #53259 shows
such a gitVersion of a development build), and a worker asked for v1.28.5 whose kubelet runs
v1.28.6 (down). None is cordoned, drained or given a state file; the run's records say skipped
with the reason.
"""

import json
import os
import subprocess

import pytest

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_upgrade.yml")
KUBEADM_DOUBLE = os.path.join(REPO, "roles", "kubernetes_worker", "molecule", "default", "files", "kubeadm")
NODES = ["ku-cp", "ku-w", "ku-w-below", "ku-w-rc", "ku-w-kubelet"]

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]

# kubectl double: `kubectl --kubeconfig <path> version -o json` of a v1.29.2 client (fields as the existing
# double had them) and `kubectl --kubeconfig <path> get node <name> -o json` (metadata.name,
# status.nodeInfo.kubeletVersion: the fields the module reads); the kubeconfig's name picks the versions
KUBECTL = """#!/bin/sh
echo "$*" >> "@LOG@"
case "$*" in
  *rc.conf*) server=v1.28.5-rc.1; kubelet=v1.28.5 ;;
  *new.conf*) server=v1.28.7; kubelet=v1.28.6 ;;
  *) server=v1.28.5; kubelet=v1.28.5 ;;
esac
if [ "$3" = get ] && [ "$4" = node ]; then
  printf '{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "%s"},' "$5"
  printf ' "status": {"nodeInfo": {"kubeletVersion": "%s"}}}\\n' "$kubelet"
  exit 0
fi
minor=$(echo "$server" | cut -d. -f2)
cat <<JSON
{"clientVersion": {"major": "1", "minor": "29", "gitVersion": "v1.29.2", "platform": "linux/amd64"},
 "kustomizeVersion": "v5.0.4-0.20230601165947-6ce0bf390ce3",
 "serverVersion": {"major": "1", "minor": "$minor", "gitVersion": "$server", "platform": "linux/amd64"}}
JSON
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rolling_upgrade_kubeadm")
    kubectl = tmp / "kubectl"
    kubectl.write_text(KUBECTL.replace("@LOG@", str(tmp / "kubectl.log")))
    kubectl.chmod(0o755)
    api = FakeKubeAPI().start()
    try:
        for node in NODES:
            api.add_node(node)
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        node_vars = {
            "node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON,
            "node_gate_kubeconfig": kubeconfig, "node_gate_allow_plain_http": True,
            "rolling_upgrade_gate_backend": "kubernetes",
            "rolling_upgrade_manage_holds": False,
            "rolling_upgrade_validate_gpu": False,
            "rolling_upgrade_validate_rdma": False,
            "rolling_upgrade_components": ["kubernetes"],
            # safety net: were the refusal to fail, the upgrade stops at once (no such role) instead
            # of installing packages on the machine running the test (local connection)
            "rolling_upgrade_component_roles": {"driver": "nvidia_driver", "ofed": "rdma_stack",
                                                "kubernetes": "gpufleet_test_no_such_role"},
            "rolling_upgrade_target": {"kubernetes": "1.30.1"},
            "rolling_upgrade_kubectl_command": str(kubectl),
            "rolling_upgrade_kubeadm_command": KUBEADM_DOUBLE,
            "rolling_upgrade_state_file": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade-state.json",
            "rolling_upgrade_state_dir": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade",
        }
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {
                "kube_control_plane": {"hosts": {"ku-cp": {}}},
                "kube_node": {"vars": node_vars,
                              "hosts": {
                                  "ku-cp": {},
                                  "ku-w": {"rolling_upgrade_target": {"kubernetes": "1.29.2"}},
                                  "ku-w-below": {"rolling_upgrade_target": {"kubernetes": "1.27.9"}},
                                  "ku-w-rc": {"rolling_upgrade_target": {"kubernetes": "1.28.5"},
                                              "rolling_upgrade_kubeadm_kubeconfig": str(tmp / "rc.conf")},
                                  "ku-w-kubelet": {"rolling_upgrade_target": {"kubernetes": "1.28.5"},
                                                   "rolling_upgrade_kubeadm_kubeconfig": str(tmp / "new.conf")}}},
            },
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp / "reports"),
                   TMPDIR=str(tmp), KUBEADM_DOUBLE_LOG=str(tmp / "kubeadm.log"), KUBEADM_DOUBLE_STATE=str(tmp / "kd"))
        extra = {"rolling_upgrade_serial": len(NODES), "rolling_upgrade_max_fail_percentage": 100,
                 "rolling_upgrade_run_id": "k-1"}
        result = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK, "-e", json.dumps(extra)],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
        records = {}
        for node in NODES:
            path = tmp / "reports" / "upgrades" / "k-1" / "nodes" / ("%s.json" % node)
            records[node] = json.loads(path.read_text()) if path.exists() else None
        yield {"result": result, "api": api, "tmp": tmp, "records": records,
               "nodes": {node: api.node(node) for node in NODES}}
    finally:
        api.stop()


def test_both_hosts_fail_with_the_reason_naming_the_variable(run):
    out = run["result"].stdout + run["result"].stderr
    assert run["result"].returncode != 0, out
    assert "rolling_upgrade_target.kubernetes v1.30.1 skips a minor: the cluster runs v1.28.5" in out, out
    assert "upgrade to 1.29 first" in out
    assert ("rolling_upgrade_target.kubernetes v1.29.2 would make this node's kubelet newer than the API server "
            "(v1.28.5)") in out, out
    assert "rolling_upgrade_target.kubernetes v1.27.9 is below the API server's minor (v1.28.5)" in out, out
    assert ("the API server reports v1.28.5-rc.1 (a pre-release, -rc.1: not the release v1.28.5): "
            "rolling_upgrade_target.kubernetes v1.28.5") in out, out
    assert "rolling_upgrade_target.kubernetes v1.28.5 is older than this node's kubelet (v1.28.6)" in out, out


def test_refused_nodes_are_left_untouched(run):
    for node in NODES:
        spec = run["nodes"][node]["spec"]
        assert "unschedulable" not in spec and "taints" not in spec, (node, spec)
        assert not (run["tmp"] / "nodes" / node / "upgrade-state.json").exists()
    patches = [r for r in run["api"].requests if r["method"] in ("PATCH", "POST", "PUT", "DELETE")]
    assert patches == [], patches
    assert not (run["tmp"] / "kubeadm.log").exists()  # kubeadm never ran
    log = (run["tmp"] / "kubectl.log").read_text()
    assert log.count("version -o json") == len(NODES)
    assert sorted(line.split()[4] for line in log.splitlines() if " get node " in line) == sorted(NODES)


def test_the_run_records_say_skipped_with_the_reason(run):
    for node in NODES:
        record = run["records"][node]
        assert record is not None, node
        assert record["outcome"] == "skipped" and record["reason"].startswith("kubeadm upgrade refused: "), record
        assert record["etcd_snapshot"] == ""
