"""Role node_gate, action health, passes the tier's gpufleet_gpu_allocation and
gpufleet_gate_device_failures_taint_node to module node_write: one ansible-playbook run against
the API double speaking Kubernetes 1.37 (three Nodes, the same failing GPU check): dra (the GPU
gets a DeviceTaintRule, the Node no taint), dra with gpufleet_gate_device_failures_taint_node
(rule and Node taint), device_plugin (Node taint, no rule). One run of a few seconds."""

import json
import os
import subprocess

import pytest
from fake_kube_api.server import FakeKubeAPI

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
SICK = {"changed": False, "healthy": False,
        "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs"},
                   {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail", "message": "2 DBE"}]}
PLAYBOOK = """---
- name: Health gate of each node
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Run node_gate
      ansible.builtin.include_role:
        name: gpufleet.cluster.node_gate
      vars:
        node_gate_action: health
        node_gate_results: "{{ sick }}"
        node_gate_describe_node: false
        node_gate_allow_plain_http: true
"""

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def test_node_gate_health_under_dra_and_device_plugin(tmp_path):
    hosts = {"gpu-dra": {"gpufleet_gpu_allocation": "dra"},
             "gpu-dra-node": {"gpufleet_gpu_allocation": "dra", "gpufleet_gate_device_failures_taint_node": True},
             "gpu-plugin": {"gpufleet_gpu_allocation": "device_plugin"}}
    with FakeKubeAPI(server_version="1.37.1") as api:
        for name in hosts:
            api.add_node(name)
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"gpu_nodes": {
                "vars": {"node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON, "sick": SICK,
                         "node_gate_kubeconfig": api.kubeconfig(tmp_path / "kubeconfig"),
                         "node_gate_backend": "kubernetes"},
                "hosts": hosts}}}}
        (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
        (tmp_path / "play.yml").write_text(PLAYBOOK)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   GPUFLEET_REPORT_DIR=str(tmp_path / "reports"), TMPDIR=str(tmp_path))
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        rules = api.device_taint_rules()
        taints = dict((name, [t["value"] for t in api.node(name)["spec"].get("taints") or []]) for name in hosts)
    assert sorted(rules) == ["gpufleet-gpu-dra-gpu-3", "gpufleet-gpu-dra-node-gpu-3"]
    assert rules["gpufleet-gpu-dra-gpu-3"]["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com", "pool": "gpu-dra", "device": "gpu-3"}
    assert taints == {"gpu-dra": [], "gpu-dra-node": ["gpu.ecc.volatile_uncorrectable"],
                      "gpu-plugin": ["gpu.ecc.volatile_uncorrectable"]}
    said = " ".join(proc.stdout.split())  # the YAML callback wraps long messages
    assert "gpu-dra: healthy, schedulable (gate taint removed if present); DeviceTaintRules gpufleet-gpu-dra-gpu-3" \
        in said
