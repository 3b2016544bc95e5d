"""playbooks/rolling_upgrade.yml with component driver checks the compatibility matrix on each node's
facts before the node is touched (roles/rolling_upgrade/tasks/compatibility.yml, through role
preflight's own check, tasks_from compatibility).

The first play's inventory check sees the variables only: nvidia_driver_branch "595" passes there.
The node facts decide: a Grace-Blackwell node (GB200 PCI device ids 0x2941, aarch64) with a PCI
function bound to the efa driver is refused by efa-grace-blackwell-driver-580 (NVIDIA's R595 release
notes; NVIDIA AICR issue 2383 / PR 2439, the EFA address below is the one that PR measured), a Volta
node (V100 SXM2, 0x1db1) by volta-last-driver-branch. Each is left as it is: not cordoned, no state
file, no annotation, recorded "skipped" with the rule named in the reason, and the host fails (the
run's failure model: as a kubeadm refusal). Local-connection nodes, the kubernetes gate backend
against tests/fake_kube_api, the DGX H100 sysfs fixture with its GPU device ids rewritten.
"""

import json
import os
import shutil
import subprocess

import pytest

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_upgrade.yml")
FIXTURE = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
STATE_ANNOTATION = "gpufleet.io/upgrade-state"
WRITES = ("PATCH", "POST", "PUT", "DELETE")
# node -> (GPU device id written over the fixture's 0x2330, EFA device bound, rule expected)
NODES = {"gb-efa": ("0x2941", True, "efa-grace-blackwell-driver-580"),
         "v100": ("0x1db1", False, "volta-last-driver-branch")}

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]


def _tree(tmp, node, device_id, efa):
    root = tmp / "sysfs" / node
    shutil.copytree(FIXTURE, root, symlinks=True)
    for path in root.glob("sys/devices/**/device"):
        if path.is_file() and not path.is_symlink() and path.read_text().strip() == "0x2330":
            path.write_text(device_id + "\n")
    if efa:
        drivers = root / "sys" / "bus" / "pci" / "drivers" / "efa"
        drivers.mkdir(parents=True)
        (drivers / "0000:97:00.0").symlink_to("../../../../devices/pci0000:84/0000:84:00.0/0000:97:00.0")
    return root


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rolling_upgrade_compatibility")
    api = FakeKubeAPI().start()
    try:
        for node in NODES:
            api.add_node(node)
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"kube_node": {
                "vars": {
                    "node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON,
                    "node_gate_kubeconfig": kubeconfig, "node_gate_allow_plain_http": True,
                    "rolling_upgrade_gate_backend": "kubernetes",
                    "rolling_upgrade_manage_holds": False,
                    "rolling_upgrade_components": ["driver"],
                    "rolling_upgrade_target": {"driver": "595"},
                    "nvidia_driver_branch": "595",
                    "preflight_kubelet": False,  # the Kubernetes rules read this machine's cgroup: not under test
                    "rolling_upgrade_state_file": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade-state.json",
                    "rolling_upgrade_state_dir": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade",
                },
                "hosts": {node: dict({"gpufleet_sysfs_root": str(_tree(tmp, node, device_id, efa))},
                                     # a V100 runs the proprietary modules (rule open-modules-turing)
                                     **({"nvidia_driver_kernel_modules": "proprietary"} if node == "v100" else {}))
                          for node, (device_id, efa, _rule) in NODES.items()}}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp / "reports"),
                   TMPDIR=str(tmp))
        # role vars of preflight (a Grace CPU; no containerd config of this machine's): extra vars
        extra = {"rolling_upgrade_serial": len(NODES), "rolling_upgrade_max_fail_percentage": 100,
                 "rolling_upgrade_run_id": "compat-1", "__preflight_cpu_architecture": "aarch64",
                 "__preflight_containerd_root_config": str(tmp / "absent" / "config.toml"),
                 "__preflight_containerd_dropin_dir": str(tmp / "absent" / "conf.d")}
        before = len(api.requests)
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK, "-e", json.dumps(extra)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
        writes = [(r["method"], r["path"]) for r in api.requests[before:] if r["method"] in WRITES]
        nodes = {node: api.node(node) for node in NODES}
        yield {"tmp": tmp, "proc": proc, "writes": writes, "nodes": nodes}
    finally:
        api.stop()


def test_node_fact_rules_refuse_the_driver_upgrade_before_the_node_is_touched(run):
    proc, tmp = run["proc"], run["tmp"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    summary = json.loads((tmp / "reports" / "upgrades" / "compat-1" / "summary.json").read_text())
    records = {record["node"]: record for record in summary["nodes"]}
    assert summary["counts"]["skipped"] == len(NODES) and summary["counts"]["upgraded"] == 0, summary["counts"]
    for node, (_device_id, _efa, rule) in NODES.items():
        # skipped with the refused rule (the only one) as the reason; the host failed with it
        assert records[node]["outcome"] == "skipped"
        assert records[node]["reason"].startswith("compatibility refused: %s: " % rule), records[node]["reason"]
        assert records[node]["reason"].count("compatibility refused") == 1 and " | " not in records[node]["reason"]
        assert "fatal: [%s]" % node in out and "%s: compatibility refused: %s" % (node, rule) in out
        # the node was not cordoned, nothing recorded on it
        assert not run["nodes"][node]["spec"].get("unschedulable"), node
        assert STATE_ANNOTATION not in run["nodes"][node]["metadata"].get("annotations", {}), node
        assert not (tmp / "nodes" / node / "upgrade-state.json").exists(), node
    reason = records["gb-efa"]["reason"]
    assert "efa=present (from %s/sys/bus/pci/drivers/efa)" % (tmp / "sysfs" / "gb-efa") in reason
    assert "cpu_architecture=aarch64" in reason and "gpu_architectures=blackwell" in reason
    assert "driver=595 (from nvidia_driver_branch)" in reason
    assert 'Fix: set nvidia_driver_branch to "580"' in reason
    assert "driver=595 (from nvidia_driver_branch)" in records["v100"]["reason"]
    assert run["writes"] == [], run["writes"]
