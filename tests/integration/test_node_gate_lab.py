"""Role node_gate, action health, lab backend (SIMULATION: marker files), on this machine.

One ansible-playbook run (local connection) gates a node three times: a failing check writes the
taint marker, passing checks remove it, no result at all writes it again (fail closed). The marker
files are written owner root (as on a lab node), so the test needs root.
"""

import json
import os
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab markers are written owner root, as on a lab node"),
]

SICK = {"healthy": False, "summary": {"pass": 0, "warn": 0, "fail": 1, "skip": 0},
        "checks": [{"id": "rdma.port.state", "target": "mlx5_2/1", "status": "fail", "message": "DOWN"}]}
HEALTHY = {"healthy": True, "summary": {"pass": 1, "warn": 0, "fail": 0, "skip": 0},
           "checks": [{"id": "rdma.port.state", "target": "mlx5_2/1", "status": "pass", "message": "ACTIVE"}]}


def test_lab_health_gate(tmp_path):
    lab_dir = tmp_path / "gate"
    steps = [SICK, HEALTHY, []]
    tasks = []
    for index, results in enumerate(steps):
        tasks += [
            {"name": "Gate step %d" % index, "ansible.builtin.include_role": {"name": "gpufleet.cluster.node_gate"},
             "vars": {"node_gate_action": "health", "node_gate_backend": "lab", "node_gate_results": results}},
            {"name": "Marker after step %d" % index, "ansible.builtin.slurp": {"src": str(lab_dir / "taint")},
             "register": "__marker", "failed_when": False},
            {"name": "Report step %d" % index, "ansible.builtin.debug": {"msg": {
                "status": "{{ node_gate_status }}",
                "marker": "{{ (__marker.content | b64decode) if __marker.content is defined else None }}"}}},
        ]
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"node_gate_lab_dir": str(lab_dir), "ansible_python_interpreter": VENV_PYTHON},
             "tasks": tasks}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", str(playbook)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    reports = [t["hosts"]["localhost"]["msg"] for t in data["plays"][0]["tasks"]
               if t["task"]["name"].startswith("Report")]
    sick, healthy, unchecked = reports

    assert "SIMULATION" in sick["marker"]
    marker = yaml.safe_load(sick["marker"])
    assert marker == {"key": "gpufleet.io/unhealthy", "value": "rdma.port.state", "effect": "NoSchedule",
                      "node": "localhost", "reason": "validation failed: rdma.port.state:mlx5_2/1"}
    assert sick["status"]["taint"] == {"key": "gpufleet.io/unhealthy", "value": "rdma.port.state",
                                       "effect": "NoSchedule"}
    assert sick["status"]["cordoned"] is False  # the health gate taints, it does not cordon
    assert healthy["marker"] is None and healthy["status"]["taint"] is None
    assert unchecked["status"]["taint"]["value"] == "gate.no_results"
