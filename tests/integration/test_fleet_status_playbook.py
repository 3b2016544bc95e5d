"""playbooks/fleet_status.yml: the fleet report from the agents' health.json files (written by a
real agent cycle on the DGX H100 fixture with the fake NVML), no check re-run; a stale or missing
result fails the host (host.validation)."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "unit")]

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def agent_result(tmp_path, name, scenario):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
    from nvml_scenarios import NODES, fake_with
    from runners import ScriptedRunner

    state = tmp_path / name
    state.mkdir()
    config = {"node_name": name, "state_dir": str(state),
              "node_validate": {"root": os.path.join(NODES, "dgx-h100"),
                                "gpu": {"expected_count": 8, "xid_source": "none"}, "rdma": {"expected_devices": 9}}}
    agent.Agent(config, log=lambda line: None, runner=ScriptedRunner(), nvml=NvmlAdapter(fake_with(scenario))).cycle()
    return state / "health.json"


def test_fleet_status_reports_the_published_results(tmp_path):
    healthy = agent_result(tmp_path, "node-a", "h100-healthy")
    broken = agent_result(tmp_path, "node-b", "h100-gpu-fell-off-bus")
    stale = agent_result(tmp_path, "node-c", "h100-healthy")
    data = json.loads(stale.read_text())
    data["generated_at"] = time.time() - 3600
    stale.write_text(json.dumps(data))
    future = agent_result(tmp_path, "node-e", "h100-healthy")  # a clock behind the node's: unknown, not fresh
    data = json.loads(future.read_text())
    data["generated_at"] = time.time() + 3600
    future.write_text(json.dumps(data))
    inventory = tmp_path / "hosts.yml"
    # the agents run on gpu_nodes (the default hosts); node-f opted out: left out of the report
    inventory.write_text(json.dumps({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {"hosts": {
            "node-a": {"gpufleet_status_file": str(healthy)}, "node-b": {"gpufleet_status_file": str(broken)},
            "node-c": {"gpufleet_status_file": str(stale)}, "node-e": {"gpufleet_status_file": str(future)},
            "node-d": {"gpufleet_status_file": str(tmp_path / "missing.json")},
            "node-f": {"gpufleet_health_agent": False}}}},
        "hosts": {"cp-1": {}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp_path / "reports"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml")],
                          check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0  # node-b, node-c, node-d, node-e fail
    report = json.loads((tmp_path / "reports" / "fleet-report.json").read_text())
    hosts = report["hosts"]
    assert hosts["node-a"]["healthy"] is True
    assert hosts["node-a"]["summary"] == json.loads(healthy.read_text())["summary"]
    assert hosts["node-b"]["healthy"] is False
    assert any(c["id"] == "gpu.count" and c["status"] == "fail" for c in hosts["node-b"]["checks"])
    for name in ("node-c", "node-e"):
        assert hosts[name]["healthy"] is False
        assert hosts[name]["checks"][0]["id"] == "host.validation", hosts[name]
    # no result at all (no agent installed yet): agent.health failing with what to do, one failure
    assert hosts["node-d"]["healthy"] is False
    assert [(c["id"], c["status"]) for c in hosts["node-d"]["checks"]] == [("agent.health", "fail")], hosts["node-d"]
    assert "the node health agent is not installed yet" in hosts["node-d"]["checks"][0]["message"]
    assert "s old (more than 300 s)" in json.dumps(hosts["node-c"]["checks"])
    assert "s in the future (clock skew" in json.dumps(hosts["node-e"]["checks"])
    assert sorted(hosts) == ["node-a", "node-b", "node-c", "node-d", "node-e"], sorted(hosts)  # not cp-1, node-f
    assert report["totals"]["hosts"] == 5 and report["totals"]["unhealthy"] == 4


def test_fleet_status_from_the_kubernetes_api(tmp_path):
    """Source kubernetes: the conditions written by the agent's own publisher into the in-process
    API double, one GET of the node list, one record_checks task for the fleet; a node without a
    condition, one with a stale heartbeat and one missing from the API fail (agent.condition); the
    report has no entry for localhost."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
    from fake_kube_api.server import FakeKubeAPI

    failing = [{"id": "gpu.count", "target": "node", "status": "fail", "message": "7 GPUs in NVML, 8 on the PCI bus"}]
    with FakeKubeAPI() as api:
        token = tmp_path / "token"
        token.write_text(api.token)
        client = KubeClient(api.url, token_file=str(token), allow_plain_http=True)  # the double is plain http
        for name in ("node-a", "node-b", "node-c", "node-e"):
            api.add_node(name)
        KubePublisher(client, "node-a").publish(True, [])
        KubePublisher(client, "node-b").publish(False, failing)
        KubePublisher(client, "node-e", clock=lambda: time.time() - 3600).publish(True, [])
        inventory = tmp_path / "hosts.yml"
        nodes = dict((name, {}) for name in ("node-a", "node-b", "node-c", "node-d", "node-e"))
        nodes["node-f"] = {"gpufleet_health_agent": False}  # opted out: not reported
        inventory.write_text(json.dumps({"all": {"hosts": {"cp-1": {}}, "children": {"gpu_nodes": {"hosts": nodes}}}}))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   GPUFLEET_REPORT_DIR=str(tmp_path / "reports"))
        extra = json.dumps({"gpufleet_status_source": "kubernetes", "gpufleet_status_kube_server": api.url,
                            "gpufleet_status_kube_token_file": str(token)})
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml"),
                               "-e", extra], check=False, env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        lists = [r for r in api.requests if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    assert proc.returncode != 0, proc.stdout  # fail_on fail: node-b, node-c, node-d, node-e
    assert len(lists) == 1
    hosts = json.loads((tmp_path / "reports" / "fleet-report.json").read_text())["hosts"]
    assert sorted(hosts) == ["node-a", "node-b", "node-c", "node-d", "node-e"]
    assert hosts["node-a"]["healthy"] is True and hosts["node-a"]["checks"][0]["id"] == "agent.condition"
    assert [(c["id"], c["target"], c["status"]) for c in hosts["node-b"]["checks"]] == [("gpu.count", "node", "fail")]
    assert "no GpufleetHealthy condition" in hosts["node-c"]["checks"][0]["message"]
    assert "no Node of this name" in hosts["node-d"]["checks"][0]["message"]
    # 3600 s plus the time the run took to read it (under 300 s, the run's timeout): "36" was the prefix
    # of that age only while the run took less than 100 s
    stale = re.search(r"condition is stale \(last heartbeat (\d+) s ago", hosts["node-e"]["checks"][0]["message"])
    assert stale and 3600 <= int(stale.group(1)) <= 3600 + 300, hosts["node-e"]["checks"][0]["message"]
