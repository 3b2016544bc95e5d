"""Role lab_sim's entry point measure (SIMULATION; what playbooks/lab_agent.yml runs on a lab
node), run by ansible-playbook on localhost against a simulation directory under tmp_path: the
watch starts in the background, the fault goes in through the entry point fault (a silent GPU loss:
the NVML scenario link; an RDMA port down: port files on a writable copy of the fixture tree), the
answer comes back with the injection and detection times, then each fault is removed and the
recovery measured. A stand-in for the node health agent (below, a loop that reads the same
simulated hardware and writes health.json whole) publishes what it sees; the real agent in the
lab containers is what docs/lab.md's figures come from."""

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
FIXTURES = os.path.join(REPO, "tests", "fixtures")
IN_CONTAINER = any(os.path.exists(p) for p in ("/.dockerenv", "/run/.containerenv"))

pytestmark = [
    pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")), reason="run `make setup` first"),
    # lab_sim refuses to run outside a container (tasks/guard.yml), and its files are root's
    pytest.mark.skipif(not IN_CONTAINER or os.geteuid() != 0, reason="lab_sim runs only as root in a container"),
]

# Stand-in for the agent: every 0.1 s, health.json from the simulated hardware (gpu.lost while the
# scenario link names the lost-GPU scenario; the port checks while mlx5_0/1 is not ACTIVE/LinkUp).
STANDIN = r"""
import json, os, sys, time
sim, health = sys.argv[1], sys.argv[2]
port = os.path.join(sim, "root/sys/class/infiniband/mlx5_0/ports/1")
cycle = 0
while True:
    cycle += 1
    failing = []
    if os.readlink(os.path.join(sim, "nvml/scenario.json")) == "h100-gpu-silently-lost.json":
        failing.append({"id": "gpu.lost", "target": "gpu5", "status": "fail", "message": "GPU is lost"})
    with open(os.path.join(port, "state")) as f:
        state = f.read().strip()
    with open(os.path.join(port, "phys_state")) as f:
        phys = f.read().strip()
    if state != "4: ACTIVE":
        failing.append({"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail", "message": state})
    if phys != "5: LinkUp":
        failing.append({"id": "rdma.port.phys_state", "target": "mlx5_0/1", "status": "fail", "message": phys})
    doc = {"agent": {"healthy": not failing, "failing": failing}, "cycle": cycle, "generated_at": time.time()}
    with open(health + ".new", "w") as f:
        json.dump(doc, f)
    os.replace(health + ".new", health)
    time.sleep(0.1)
"""

FAULTS = [
    ("silent GPU loss", {"nvml_scenario": "h100-gpu-silently-lost.json"}, {"nvml_scenario": "h100-healthy.json"},
     ["gpu.lost"], ""),
    ("RDMA port down", {"ports": [{"device": "mlx5_0", "port": 1, "state": "1: DOWN", "phys_state": "3: Disabled"}]},
     {"node": "dgx-h100"}, ["rdma.port.state", "rdma.port.phys_state"], "mlx5_0/1"),
]


def simulation(tmp_path):
    """A simulation directory as role lab_sim's main leaves it: root -> the fixture tree, the
    fixtures' NVML scenarios with scenario.json -> h100-healthy.json."""
    sim = tmp_path / "sim"
    (sim / "nvml").mkdir(parents=True)
    (sim / "bin").mkdir()
    os.symlink(os.path.join(FIXTURES, "nodes", "dgx-h100"), str(sim / "root"))
    for name in os.listdir(os.path.join(FIXTURES, "nvml")):
        os.symlink(os.path.join(FIXTURES, "nvml", name), str(sim / "nvml" / name))
    os.symlink("h100-healthy.json", str(sim / "nvml" / "scenario.json"))
    return sim


def playbook(tmp_path, sim, health):
    steps = [(name, fault[step], checks, target, step)
             for name, *fault, checks, target in FAULTS for step in (0, 1)]
    tasks = [{"name": "Measure %s %s" % ("inject" if step == 0 else "remove", name),
              "ansible.builtin.include_role": {"name": "gpufleet.cluster.lab_sim", "tasks_from": "measure"},
              "vars": {"lab_sim_measure_label": name, "lab_sim_measure_fault": fault,
                       "lab_sim_measure_checks": checks, "lab_sim_measure_target": target,
                       "lab_sim_measure_until": "failing" if step == 0 else "clear",
                       "lab_sim_measure_timeout": 20, "lab_sim_measure_health": str(health)}}
             for name, fault, checks, target, step in steps]
    tasks.append({"name": "Write the answers", "ansible.builtin.copy": {
        "dest": str(tmp_path / "results.json"), "content": "{{ lab_sim_measure_results | to_json }}", "mode": "0644"}})
    play = [{"name": "Measure", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"lab_sim_dir": str(sim), "lab_sim_fixtures_dir": FIXTURES, "lab_sim_node": "dgx-h100",
                      "ansible_python_interpreter": sys.executable},
             "tasks": tasks}]
    path = tmp_path / "measure.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


def test_measure_times_each_fault_and_its_removal(tmp_path):
    sim = simulation(tmp_path)
    health = tmp_path / "health.json"
    agent = subprocess.Popen([sys.executable, "-c", STANDIN, str(sim), str(health)])
    try:
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   GPUFLEET_REPORT_DIR=str(tmp_path / "reports"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
                   ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(playbook(tmp_path, sim, health))],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(r["label"], r["until"], r["rc"]) for r in results] == [
        ("silent GPU loss", "failing", 0), ("silent GPU loss", "clear", 0),
        ("RDMA port down", "failing", 0), ("RDMA port down", "clear", 0)], results
    for result in results:
        assert result["detected_epoch"] >= result["injected_epoch"], result  # seen after it was injected
        assert result["seconds"] == round(result["detected_epoch"] - result["injected_epoch"], 3)
        assert result["timeout"] == 20.0
    assert results[0]["check"] == "gpu.lost" and results[0]["failing_target"] == "gpu5"
    assert results[2]["check"] in ("rdma.port.state", "rdma.port.phys_state")
    assert results[2]["failing_target"] == "mlx5_0/1" and results[2]["path"].endswith("/mlx5_0/ports/1/state")
    # the port was written on a writable copy, as the kernel shows it; the removal went back to the
    # read-only fixture tree, which the fault never touched
    copy = sim / "trees" / "dgx-h100" / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    assert (copy / "state").read_text() == "1: DOWN\n" and (copy / "phys_state").read_text() == "3: Disabled\n"
    assert os.readlink(str(sim / "root")) == os.path.join(FIXTURES, "nodes", "dgx-h100")
    fixture = os.path.join(FIXTURES, "nodes", "dgx-h100", "sys", "class", "infiniband", "mlx5_0", "ports", "1")
    with open(os.path.join(fixture, "state")) as handle:
        assert handle.read() == "4: ACTIVE\n"
    assert os.readlink(str(sim / "nvml" / "scenario.json")) == "h100-healthy.json"
    assert os.path.exists(str(sim / "nvml" / "h100-gpu-silently-lost.json"))  # installed by tools.yml


def test_a_fault_the_agent_never_publishes_comes_back_not_seen(tmp_path):
    """No agent writes health.json: the watch gives up at its time-out and says so (rc 1); the
    caller (lab_agent.yml) fails on it."""
    sim = simulation(tmp_path)
    health = tmp_path / "health.json"
    health.write_text(json.dumps({"agent": {"healthy": True, "failing": []}}))
    play = yaml.safe_load(playbook(tmp_path, sim, health).read_text())
    play[0]["tasks"] = [dict(play[0]["tasks"][0], vars=dict(play[0]["tasks"][0]["vars"], lab_sim_measure_timeout=2)),
                        play[0]["tasks"][-1]]
    path = tmp_path / "never.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               GPUFLEET_REPORT_DIR=str(tmp_path / "reports"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    (result,) = json.loads((tmp_path / "results.json").read_text())
    assert result["rc"] == 1 and result["detected_at"] is None
    assert "did not show gpu.lost failing within 2.0 s" in result["error"]
