"""topology_facts and the NCCL filters run by real ansible-playbook (check mode) against the
fixture trees; node_validate's tuning family through the real module."""

import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")

pytestmark = pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="run `make setup` first")

PLAY = """
- name: Topology
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Map GPUs to HCAs
      gpufleet.cluster.topology_facts:
        root: {dgx}
    - name: NCCL environment
      ansible.builtin.debug:
        msg: "{{{{ ansible_facts['gpu_topology'] | gpufleet.cluster.nccl_topology_env(max_class='PIX') }}}}"
    - name: Tuning drift
      gpufleet.cluster.node_validate:
        root: {tuned}
        gpu: {{enabled: false}}
        rdma: {{enabled: false}}
        tuning: {{hugepages_2m: 512, tuned_profile: network-latency}}
        fail_on: never
"""


def test_topology_facts_and_nccl_env_in_a_play(tmp_path):
    tuned = tmp_path / "node"
    (tuned / "etc/tuned").mkdir(parents=True)
    (tuned / "etc/tuned/active_profile").write_text("network-latency\n")
    hp = tuned / "sys/kernel/mm/hugepages/hugepages-2048kB"
    hp.mkdir(parents=True)
    (hp / "nr_hugepages").write_text("512\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY.format(dgx=os.path.join(NODES, "dgx-h100"), tuned=str(tuned)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_PYTHON_INTERPRETER=VENV_PYTHON,
               GPUFLEET_REPORT_DIR=str(tmp_path / "reports"))
    proc = subprocess.run([PLAYBOOK, "-i", "localhost,", "--check", str(playbook)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    tasks = {task["task"]["name"]: task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]}
    topology = tasks["Map GPUs to HCAs"]["ansible_facts"]["gpu_topology"]
    assert tasks["Map GPUs to HCAs"]["changed"] is False
    assert [g["nearest_rdma"] for g in topology["gpus"]] == [["mlx5_%d" % i] for i in range(8)]
    assert tasks["NCCL environment"]["msg"] == {
        "NCCL_IB_HCA": "=" + ",".join("mlx5_%d:1" % i for i in range(8)), "NCCL_NET_GDR_LEVEL": "PIX"}
    tuning = tasks["Tuning drift"]
    assert [(c["id"], c["target"], c["status"]) for c in tuning["checks"]] == [
        ("tuning.hugepages", "2048kB", "pass"), ("tuning.tuned_profile", "node", "pass")]
    assert tuning["readiness"]["tuning"]["status"] == "pass"


IRQ_PLAY = """
- name: HCA interrupts
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Pin the HCA interrupts
      gpufleet.cluster.hca_irq_affinity:
        root: {root}
    - name: Drift
      gpufleet.cluster.node_validate:
        root: {root}
        gpu: {{enabled: false}}
        rdma: {{enabled: false}}
        tuning:
          irq_affinity: true
          kubelet_policy: {{cpu_manager_policy: static, reserved_system_cpus: "0-1"}}
        fail_on: never
"""


@pytest.mark.parametrize("check_mode", [True, False])
def test_hca_irq_affinity_and_tuning_drift_in_a_play(tmp_path, check_mode):
    """The module in check mode reports the moves and writes nothing; for real it moves them and the drift
    checks pass (kubelet drop-in as node_tuning writes it)."""
    from irq_fixture import NODE0, node

    root = node(tmp_path / "node")
    dropin = tmp_path / "node/var/lib/kubelet/config.d"
    dropin.mkdir(parents=True)
    (tmp_path / "node/var/lib/kubelet/config.yaml").write_text("kind: KubeletConfiguration\ncgroupDriver: systemd\n")
    (dropin / "50-gpufleet-tuning.conf").write_text("cpuManagerPolicy: static\nreservedSystemCPUs: 0-1\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(IRQ_PLAY.format(root=root))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_PYTHON_INTERPRETER=VENV_PYTHON,
               GPUFLEET_REPORT_DIR=str(tmp_path / "reports"))
    proc = subprocess.run([PLAYBOOK, "-i", "localhost,", str(playbook)] + (["--check"] if check_mode else []),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    tasks = {task["task"]["name"]: task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]}
    pinned = tasks["Pin the HCA interrupts"]
    assert pinned["changed"] is True and pinned["moved"] == 2
    assert [m["irq"] for m in pinned["devices"][0]["moved"]] == [151, 152]
    with open(os.path.join(root, "proc/irq/151/smp_affinity_list")) as handle:
        assert handle.read().strip() == ("0-223" if check_mode else NODE0)
    drift = [(c["id"], c["target"], c["status"]) for c in tasks["Drift"]["checks"]]
    assert drift == [("tuning.kubelet_policy", "cpuManagerPolicy", "pass"),
                     ("tuning.kubelet_policy", "reservedSystemCPUs", "pass"),
                     ("tuning.irq_affinity", "mlx5_0", "fail" if check_mode else "pass"),
                     ("tuning.irq_affinity", "mlx5_4", "pass")]
