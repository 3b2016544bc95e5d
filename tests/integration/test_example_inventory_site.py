"""site.yml on the example inventory as shipped (its group_vars unchanged) with simulated hosts ends
rc 0: the DGX nodes are validated against the GPU and RDMA expectations of group_vars/gpu_nodes and
group_vars/rdma_nodes (fixture dgx-h100, fake NVML healthy), the control plane (fixture empty: no
GPU, no HCA) expects none, so it is not failed with "no NVIDIA GPU on the PCI bus, expected 8"."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def _example_with_simulated_hosts(tmp_path):
    """inventories/example's group_vars as shipped; hosts.yml with the example's groups and three local
    hosts; host_vars point validation at fixture trees (the only change)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(os.path.join(REPO, "inventories", "example", "group_vars"), str(inventory / "group_vars"))
    hosts = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
        "children": {
            "kube_control_plane": {"hosts": {"cp-01": None}},
            "kube_node": {"children": {"gpu_nodes": None, "rdma_nodes": None}},
            "gpu_nodes": {"hosts": {"dgx-01": None, "dgx-02": None}},
            "rdma_nodes": {"hosts": {"dgx-01": None, "dgx-02": None}},
        }}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "cp-01.yml").write_text(yaml.safe_dump({
        "gpufleet_validate_root": os.path.join(NODES, "empty")}))
    for host in ("dgx-01", "dgx-02"):
        (inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump({
            "gpufleet_validate_root": os.path.join(NODES, "dgx-h100"),
            "gpufleet_validate_gpu": {"xid_source": "none"},  # the kernel log is this machine's
            "gpufleet_validate_environment": {
                "PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml"),
                "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")},
        }))
    return str(inventory / "hosts.yml")


def test_site_on_the_example_inventory_validates_gpus_only_where_expected(tmp_path):
    sys.path.insert(0, os.path.join(REPO, ".collections"))
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER
    extra = {"gpufleet_phases": ["validate", "report"]}
    if "gpufleet_health_agent" in TIER:
        extra["gpufleet_health_agent"] = False  # no agent is installed on this machine
    reports = tmp_path / "reports"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               GPUFLEET_REPORT_DIR=str(reports))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", _example_with_simulated_hosts(tmp_path),
                           os.path.join(REPO, "playbooks", "site.yml"), "-e", json.dumps(extra),
                           # no agent install and no kubeadm on this machine: the health agent's play and the
                           # control plane's certificate check (its own tests: test_kubeadm*) are left out
                           "--skip-tags", "node_health_agent,certs"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "expected 8" not in out, out
    with open(str(reports / "fleet-report.json")) as handle:
        report = json.load(handle)
    hosts = report["hosts"]
    assert set(hosts) == {"cp-01", "dgx-01", "dgx-02"}, hosts.keys()
    for name, host in hosts.items():
        assert host["summary"]["fail"] == 0, (name, host)
    checks = dict((name, dict((c["id"], c) for c in host["checks"] if c["target"] == "node"))
                  for name, host in hosts.items())
    assert checks["dgx-01"]["gpu.count"]["status"] == "pass" and checks["dgx-01"]["gpu.count"]["expected"] == 8
    assert checks["cp-01"]["gpu.count"]["status"] == "skip"
