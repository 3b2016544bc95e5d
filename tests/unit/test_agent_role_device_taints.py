"""Role node_health_agent writes the agent's per-device health keys (docs/contracts.md, "Device
taints"): kubernetes.gpu_allocation and kubernetes.device_failures_taint_node from the tier,
kubernetes.device_taints from node_health_agent_device_taints; the agent's own configuration
check (--check-config, gate.device_settings) accepts what the role writes and names a bad
setting; its Kubernetes publisher takes them. One ansible-playbook run of the role's input tasks
(the configuration it builds, no install) over four hosts, a few seconds."""

import json
import os
import subprocess

import pytest
from conftest import FIXTURES, REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import config_errors
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher

ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
PLAYBOOK = """---
- name: The agent's configuration as role node_health_agent builds it
  hosts: agents
  gather_facts: false
  tasks:
    - name: Check the role's inputs
      ansible.builtin.include_role:
        name: gpufleet.cluster.node_health_agent
        tasks_from: assert_inputs.yml

    - name: Build the agent's configuration
      ansible.builtin.include_role:
        name: gpufleet.cluster.node_health_agent
        tasks_from: build_config.yml

    - name: Keep it for the test
      ansible.builtin.copy:
        content: "{{ __node_health_agent_settings | to_nice_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
"""
HOSTS = {
    "agent-plugin": {},  # the tier's defaults: device_plugin
    "agent-dra": {"gpufleet_gpu_allocation": "dra", "gpufleet_gate_device_failures_taint_node": True,
                  "node_health_agent_device_taints": {"rdma_driver": "rdma.example.com", "effect": "NoExecute"}},
    "agent-bad-template": {"gpufleet_gpu_allocation": "dra",
                           "node_health_agent_device_taints": {"gpu_device": "gpu-{minor}"}},
    "agent-bad-allocation": {"node_health_agent_gpu_allocation": "mig"},
}

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent-role")
    inventory = {"all": {"children": {"agents": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON, "out_dir": str(tmp),
                 "node_health_agent_root": os.path.join(FIXTURES, "nodes", "dgx-h100"),
                 "node_health_agent_gpu": False, "node_health_agent_rdma": False, "node_health_agent_tuning": False,
                 "node_health_agent_kubernetes": True, "node_health_agent_taint": True,
                 "node_health_agent_kube_server": "https://k8s-api.example:6443",
                 "node_health_agent_kube_token_file": "/etc/gpufleet/agent-token",
                 "node_health_agent_kube_cert_file": "", "node_health_agent_kube_key_file": ""},
        "hosts": HOSTS}}}}
    (tmp / "hosts.yml").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               GPUFLEET_REPORT_DIR=str(tmp / "reports"), TMPDIR=str(tmp), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    return tmp, proc


def settings(run, host):
    tmp, proc = run
    path = tmp / ("%s.json" % host)
    assert path.exists(), proc.stdout[-4000:] + proc.stderr[-2000:]
    return path, json.loads(path.read_text())


def publisher(config):
    """The agent's Kubernetes publisher from that configuration (the CA bundle, a node's file, left out)."""
    return KubePublisher.from_config(dict(config, kubernetes=dict(config["kubernetes"], ca_file=None)))


def test_device_plugin_allocation_from_the_tier_by_default(run):
    path, config = settings(run, "agent-plugin")
    kube = config["kubernetes"]
    assert (kube["gpu_allocation"], kube["device_failures_taint_node"], kube["device_taints"]) == (
        "device_plugin", False, {})
    assert config_errors(config) == []
    assert agent.main(["--check-config", str(path)]) == 0
    assert publisher(config).allocation == "device_plugin"


def test_dra_keys_from_the_tier_and_the_role_reach_the_publisher(run):
    path, config = settings(run, "agent-dra")
    kube = config["kubernetes"]
    assert kube["gpu_allocation"] == "dra" and kube["device_failures_taint_node"] is True
    assert kube["device_taints"] == {"rdma_driver": "rdma.example.com", "effect": "NoExecute"}
    assert agent.main(["--check-config", str(path)]) == 0
    kube_publisher = publisher(config)
    assert kube_publisher.allocation == "dra" and kube_publisher.taint_node_always is True and kube_publisher.taint
    assert kube_publisher.device_settings["rdma_driver"] == "rdma.example.com"
    assert kube_publisher.device_settings["effect"] == "NoExecute"
    assert kube_publisher.device_settings["gpu_device"] == "gpu-{index}"  # unset keys keep their default


def test_a_bad_device_name_template_fails_the_configuration_check_naming_it(run, capsys):
    path, config = settings(run, "agent-bad-template")
    assert config_errors(config) == [
        "kubernetes.device_taints: device taint setting gpu_device='gpu-{minor}': 'minor' (fields: index, node)"]
    assert agent.main(["--check-config", str(path)]) == 1
    assert "gpu_device='gpu-{minor}'" in capsys.readouterr().out


def test_a_bad_allocation_fails_the_role_naming_the_variable(run):
    tmp, proc = run
    assert not (tmp / "agent-bad-allocation.json").exists()
    assert "node_health_agent_gpu_allocation must be device_plugin or dra (got mig" in proc.stdout
    recap = proc.stdout[proc.stdout.index("PLAY RECAP"):]
    failed = sorted(line.split()[0] for line in recap.splitlines()[1:] if "failed=1" in line)
    assert failed == ["agent-bad-allocation"]


@pytest.mark.parametrize("kube,error", [
    ({"gpu_allocation": "mig"}, "kubernetes.gpu_allocation must be device_plugin or dra, got 'mig'"),
    ({"device_failures_taint_node": "yes"}, "kubernetes.device_failures_taint_node must be true or false, got 'yes'"),
    ({"device_taints": ["gpu-0"]}, "kubernetes.device_taints must be a dict of device taint settings (effect, "
                                   "gpu_device, gpu_driver, pool, rdma_device, rdma_driver), got list"),
    ({"device_taints": {"driver": "gpu.nvidia.com"}}, "kubernetes.device_taints: device taint setting 'driver' is "
                                                      "unknown (known: effect, gpu_device, gpu_driver, pool, "
                                                      "rdma_device, rdma_driver)"),
    ({"device_taints": {"rdma_driver": 3}}, "kubernetes.device_taints: device taint setting rdma_driver must be a "
                                            "DRA driver name or null, got 3"),
    ({"device_taints": {"rdma_driver": "rdma.example.com", "rdma_device": "{nic}"}},
     "kubernetes.device_taints: device taint setting rdma_device='{nic}': 'nic' (fields: name, node)"),
    ({"device_taints": {"effect": "PreferNoSchedule"}},
     "kubernetes.device_taints: device taint effect='PreferNoSchedule' must be NoSchedule, NoExecute or None"),
], ids=["allocation", "taint-node", "not-a-dict", "unknown-key", "rdma-driver-type", "rdma-template", "effect"])
def test_the_configuration_check_names_each_bad_device_setting(kube, error):
    assert config_errors({"kubernetes": kube}) == [error]


def test_the_role_checks_its_inputs_in_one_file_and_builds_the_configuration_in_another():
    import yaml

    tasks = os.path.join(REPO, "roles", "node_health_agent", "tasks")

    def load(name):
        with open(os.path.join(tasks, name)) as handle:
            return yaml.safe_load(handle)

    checks = load("assert_inputs.yml")
    assert checks and all(set(task) - {"name", "vars", "when"} == {"ansible.builtin.assert"} for task in checks)
    built = load("build_config.yml")
    assert any("__node_health_agent_settings" in (task.get("ansible.builtin.set_fact") or {}) for task in built)
    assert [task["ansible.builtin.import_tasks"] for task in load("main.yml")] == [
        "assert_inputs.yml", "build_config.yml", "install.yml", "service.yml"]
