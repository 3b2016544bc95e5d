"""The agent's Kubernetes publisher against the in-process API double: the GpufleetHealthy
condition set and cleared through the status subresource (the kubelet's conditions kept), the
opt-in taint added and removed through health_gate_patch, another controller's taint preserved
(also when written between our read and our write: 409, redone), an unreachable API server."""

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import find_condition
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient, KubeError
from fake_kube_api.server import FakeKubeAPI

FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79 (fallen off the bus)"},
           {"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail", "message": "DOWN"}]
OTHER = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def api():
    with FakeKubeAPI() as server:
        server.add_node("gpu-1")
        server.add_node("gpu-2")
        yield server


def publisher(api, taint=False, node="gpu-1", now=1700000000.0):
    # the double speaks plain http: allow_plain_http is its opt-in (kube_node refuses otherwise)
    client = KubeClient(api.url, token=api.token, allow_plain_http=True)
    return KubePublisher(client, node, taint=taint, clock=lambda: now)


def test_condition_set_and_cleared_on_the_own_node_only(api):
    lines = publisher(api).publish(False, FAILING)
    condition = find_condition(api.node("gpu-1"))
    assert condition["status"] == "False" and condition["reason"] == "gpu.xid"
    assert condition["message"] == "gpu.xid[gpu3]: Xid 79 (fallen off the bus) (+1 more)"
    assert lines == ["condition GpufleetHealthy=False reason gpu.xid: " + condition["message"]]
    ready = [c for c in api.node("gpu-1")["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"  # the kubelet's condition is kept
    assert find_condition(api.node("gpu-2")) is None
    patches = api.recorded("PATCH")
    assert [r["path"] for r in patches] == ["/api/v1/nodes/gpu-1/status"]
    assert patches[0]["content_type"] == "application/strategic-merge-patch+json"

    publisher(api, now=1700000060.0).publish(True, [])
    condition = find_condition(api.node("gpu-1"))
    assert condition["status"] == "True" and condition["reason"] == "GpufleetChecksPass"
    assert condition["lastTransitionTime"] == "2023-11-14T22:14:20Z"


def test_an_unchanged_condition_is_not_rewritten_until_its_heartbeat_is_due(api):
    publisher(api).publish(False, FAILING)
    assert publisher(api, now=1700000060.0).publish(False, FAILING) == []
    assert len(api.recorded("PATCH")) == 1
    publisher(api, now=1700000400.0).publish(False, FAILING)
    assert len(api.recorded("PATCH")) == 2
    condition = find_condition(api.node("gpu-1"))
    assert condition["lastTransitionTime"] == "2023-11-14T22:13:20Z"  # unchanged status: same transition


def test_taint_added_and_removed_through_the_gate_filter_other_taints_kept(api):
    api.add_node("gpu-3", taints=[OTHER])
    lines = publisher(api, taint=True, node="gpu-3").publish(False, FAILING)
    taints = api.node("gpu-3")["spec"]["taints"]
    assert OTHER in taints
    assert {"key": "gpufleet.io/unhealthy", "value": "gpu.xid", "effect": "NoSchedule"} in taints
    assert lines[-1] == "taint gpufleet.io/unhealthy=gpu.xid:NoSchedule added"
    spec_patch = [r for r in api.recorded("PATCH") if r["path"] == "/api/v1/nodes/gpu-3"][0]
    assert spec_patch["body"]["metadata"]["resourceVersion"]
    lines = publisher(api, taint=True, node="gpu-3").publish(True, [])
    assert api.node("gpu-3")["spec"]["taints"] == [OTHER]
    assert lines[-1] == "gate taint removed"


def test_a_taint_written_by_another_controller_between_read_and_write_survives(api):
    def other_controller(server):
        server.patch_node("gpu-1", "application/merge-patch+json", {"spec": {"taints": [OTHER]}})

    api.interleave("gpu-1", other_controller, content_type="application/merge-patch+json")
    publisher(api, taint=True).publish(False, FAILING)
    taints = api.node("gpu-1")["spec"]["taints"]
    assert OTHER in taints and any(t["key"] == "gpufleet.io/unhealthy" for t in taints)
    assert 409 in [r["status"] for r in api.recorded("PATCH")]


def test_without_taint_mode_no_spec_is_written(api):
    publisher(api).publish(False, FAILING)
    assert "taints" not in api.node("gpu-1").get("spec", {})


def test_an_unreachable_api_server_is_a_clear_agent_error():
    client = KubeClient("http://127.0.0.1:9", timeout=2)
    with pytest.raises(KubeError, match="API server http://127.0.0.1:9 unreachable"):
        KubePublisher(client, "gpu-1").publish(True, [])


def test_a_missing_node_is_named(api):
    with pytest.raises(KubeError, match="API server answered 404"):
        publisher(api, node="gpu-9").publish(True, [])
