"""Fleet status from the Kubernetes API: filter agent_status_checks on conditions written by the
agent's own publisher (in-process API double), the fleet report filing a controller task's
host_checks under those hosts, record_checks' hosts option."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import agent_status_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import build_results
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import FleetReport
from fake_kube_api.server import FakeKubeAPI

NOW = 1700000000.0
FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"},
           {"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail", "message": "DOWN"}]


def test_the_filter_reads_the_condition_the_agent_writes(tmp_path):
    with FakeKubeAPI() as api:
        token = tmp_path / "token"
        token.write_text(api.token)
        client = KubeClient(api.url, token_file=str(token), allow_plain_http=True)  # the double is plain http
        for name in ("ok", "bad", "silent", "old"):
            api.add_node(name)
        KubePublisher(client, "ok", clock=lambda: NOW).publish(True, [])
        KubePublisher(client, "bad", clock=lambda: NOW).publish(False, FAILING)
        KubePublisher(client, "old", clock=lambda: NOW - 700).publish(True, [])
        nodes = client.request("GET", "/api/v1/nodes")
    checks = agent_status_checks(nodes, ["ok", "bad", "silent", "old", "gone"], now=NOW + 10)
    assert checks["ok"] == [{"id": "agent.condition", "target": "node", "status": "pass",
                             "message": "all gpufleet checks pass"}]
    assert checks["bad"] == [{"id": "gpu.xid", "target": "gpu3", "status": "fail",
                              "message": "gpu.xid[gpu3]: Xid 79 (+1 more)"}]
    assert checks["silent"][0]["status"] == "fail" and "no GpufleetHealthy condition" in checks["silent"][0]["message"]
    assert "stale (last heartbeat 710 s ago, more than 300 s)" in checks["old"][0]["message"]
    assert "no Node of this name" in checks["gone"][0]["message"]
    assert agent_status_checks(nodes, ["old"], now=NOW + 10, max_age=900)["old"][0]["status"] == "pass"


def test_an_unknown_condition_status_fails_and_bad_input_is_named():
    node = {"metadata": {"name": "n"}, "status": {"conditions": [
        {"type": CONDITION_TYPE, "status": "Unknown", "message": "?", "lastHeartbeatTime": "2023-11-14T22:13:20Z"}]}}
    assert agent_status_checks({"items": [node]}, ["n"], now=NOW)["n"][0]["status"] == "fail"
    with pytest.raises(AnsibleFilterError, match="expected a NodeList"):
        agent_status_checks("nodes", ["n"])
    with pytest.raises(AnsibleFilterError, match="hosts must be a list of node names"):
        agent_status_checks({"items": []}, "n")
    assert CONDITION_TYPE == agent.CONDITION_TYPE


def test_the_report_files_host_checks_under_those_hosts_not_under_the_controller():
    report = FleetReport()
    report.start_play("status", ["localhost"])
    report.validation_task("t1")
    data = {"failed": True, "msg": "1 check failed", "summary": {},
            "host_checks": {"n1": [{"id": "agent.condition", "target": "node", "status": "pass", "message": "ok"}],
                            "n2": [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]}}
    report.task_result("localhost", data, "Report", "failed", "t1", validation=True)
    report.end_play()
    document = json.loads(report.json("now"))
    assert sorted(document["hosts"]) == ["n1", "n2"]
    assert document["hosts"]["n2"]["checks"][0]["id"] == "gpu.xid"
    assert document["totals"]["hosts"] == 2 and document["totals"]["unhealthy"] == 1


def test_record_checks_names_a_bad_check_of_a_host():
    assert build_results([None], "hosts[n1]") == (None, "option hosts[n1][0]: a check must be a dict, got None")
    results, error = build_results([{"id": "a.b", "target": "node", "status": "bogus", "message": "m"}], "hosts[n1]")
    assert results is None and error.startswith("option hosts[n1][0]: status 'bogus' is not one of")
