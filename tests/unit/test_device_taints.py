"""Per-device health under DRA (docs/contracts.md, "Device taints"): the split of failing checks
into node-level and device-level (gate.split_failing), the DeviceTaintRule objects
(gate.device_taint_rules, resource.k8s.io/v1 of Kubernetes 1.37) and the plan against the rules
listed; then the writers against the API double speaking 1.37: the node health agent (after its
hysteresis) and the module node_write (mode health): rules created, updated, deleted when the
device recovered, the node tainted with the reason when the rules cannot be written, and
device_plugin allocation unchanged."""

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_hysteresis
from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import hysteresis_settings
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.kube_node_write import (
    listed_device_taint_rules,
    write_device_taints,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import ApiStatusError, KubeClient
from ansible_collections.gpufleet.cluster.plugins.modules import node_write
from fake_kube_api.server import FakeKubeAPI

KEY = gate.DEFAULT_TAINT_KEY
ECC = {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail",
       "message": "12 uncorrectable ECC errors since boot"}
XID = {"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79 (fallen off the bus)"}
TEMP = {"id": "gpu.temperature", "target": "gpu5", "status": "fail", "message": "94 C >= 90 C"}
COUNT = {"id": "gpu.count", "target": "node", "status": "fail", "message": "7 GPU(s) visible to NVML, expected 8"}
FABRIC = {"id": "gpu.fabric", "target": "gpu0", "status": "fail", "message": "fabric registration failed"}
DRIVER = {"id": "gpu.driver_version", "target": "node", "status": "fail", "message": "driver 550 != 580"}
PORT = {"id": "rdma.port.state", "target": "mlx5_1/1", "status": "fail", "message": "port DOWN"}
HCAS = {"id": "rdma.devices", "target": "node", "status": "fail", "message": "7 RDMA devices, expected 8"}
HUGE = {"id": "tuning.hugepages", "target": "node", "status": "fail", "message": "0 of 1024 2M pages"}


# -- the split -------------------------------------------------------------------------------------
def test_split_blames_devices_for_device_checks_and_the_node_for_the_rest():
    split = gate.split_failing([ECC, COUNT, XID, TEMP, FABRIC, DRIVER, PORT, HCAS, HUGE])
    assert split["node"] == [COUNT, FABRIC, DRIVER, PORT, HCAS, HUGE]  # no RDMA DRA driver: the port is the node's
    assert split["devices"] == {("gpu", "3"): [ECC, XID], ("gpu", "5"): [TEMP]}
    with_rdma = gate.split_failing([PORT, HCAS, ECC], rdma=True)
    assert with_rdma["node"] == [HCAS]
    assert with_rdma["devices"] == {("rdma", "mlx5_1"): [PORT], ("gpu", "3"): [ECC]}


@pytest.mark.parametrize("check", [
    {"id": "gate.no_results", "target": "node"}, {"id": "result.unhealthy", "target": "node"},
    {"id": "gpu.xid", "target": "node"}, {"id": "gpu.pcie", "target": "0000:17:00.0"},
    {"id": "rdma.uverbs", "target": "gpu2"}, {"id": "gpu.lost", "target": "mlx5_0"},
    {"id": "tuning.irq_affinity", "target": "mlx5_0"}, {"id": "gpu.nvml", "target": "gpu1"},
])
def test_a_check_without_a_device_of_its_own_kind_is_the_nodes(check):
    assert gate.device_of(dict(check, status="fail"), rdma=True) is None


def test_device_gate_keeps_device_plugin_allocation_as_it_was():
    results = {"checks": [ECC, COUNT, {"id": "gpu.pcie", "target": "gpu1", "status": "pass", "message": "ok"}]}
    assert gate.device_gate(results, "device_plugin") == {"failing": [ECC, COUNT], "node": [ECC, COUNT], "devices": {}}
    dra = gate.device_gate(results, "dra")
    assert dra["node"] == [COUNT] and dra["devices"] == {("gpu", "3"): [ECC]}
    assert gate.device_gate(results, "dra", taint_node=True)["node"] == [ECC, COUNT]
    assert gate.device_gate([], "dra")["node"][0]["id"] == "gate.no_results"  # nothing checked: fail closed
    with pytest.raises(gate.GateError, match="allocation='mig'"):
        gate.device_gate(results, "mig")


# -- the objects -------------------------------------------------------------------------------------
def test_rules_carry_check_id_message_and_the_nvidia_dra_device_name():
    rules = gate.device_taint_rules("gpu-node-17", {("gpu", "5"): [TEMP], ("gpu", "3"): [ECC, XID]})
    assert [r["metadata"]["name"] for r in rules] == ["gpufleet-gpu-node-17-gpu-3", "gpufleet-gpu-node-17-gpu-5"]
    assert rules[0] == {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": "gpufleet-gpu-node-17-gpu-3",
                     "labels": {"gpufleet.io/node": "gpu-node-17", "gpufleet.io/device": "gpu-3"},
                     "annotations": {"gpufleet.io/node": "gpu-node-17", "gpufleet.io/message":
                                     "gpu.ecc.volatile_uncorrectable[gpu3]: 12 uncorrectable ECC errors since "
                                     "boot (+1 more)"}},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-node-17", "device": "gpu-3"},
                 "taint": {"key": KEY, "value": "gpu.ecc.volatile_uncorrectable", "effect": "NoSchedule"}}}


def test_rule_settings_name_the_rdma_driver_and_the_effect():
    rules = gate.device_taint_rules("Node_7.lab", {("rdma", "mlx5_1"): [PORT]}, key="example.com/bad",
                                    settings={"rdma_driver": "dra.net", "rdma_device": "{name}-netdev",
                                              "effect": "NoExecute"})
    rule = rules[0]
    assert rule["metadata"]["name"] == "gpufleet-node-7.lab-mlx5-1-netdev"  # DNS subdomain
    assert rule["spec"] == {"deviceSelector": {"driver": "dra.net", "pool": "Node_7.lab", "device": "mlx5_1-netdev"},
                            "taint": {"key": "example.com/bad", "value": "rdma.port.state", "effect": "NoExecute"}}


@pytest.mark.parametrize("settings, words", [
    ({"effect": "PreferNoSchedule"}, "effect='PreferNoSchedule' must be NoSchedule, NoExecute or None"),
    ({"gpu_device": "gpu-{minor}"}, "gpu_device='gpu-{minor}'"),
    ({"drivers": "x"}, "setting 'drivers' is unknown"),
    ({"gpu_driver": ""}, "gpu_driver must be a non-empty string"),
])
def test_bad_settings_are_named(settings, words):
    with pytest.raises(gate.GateError) as err:
        gate.device_taint_rules("n", {("gpu", "0"): [ECC]}, settings=settings)
    assert words in str(err.value)


def test_an_rdma_device_without_a_driver_is_refused_not_silently_dropped():
    with pytest.raises(gate.GateError, match="rdma_driver"):
        gate.device_taint_rules("n", {("rdma", "mlx5_0"): [PORT]})


def test_plan_creates_updates_keeping_time_added_and_deletes_only_this_nodes_rules():
    old = gate.device_taint_rules("n1", {("gpu", "3"): [XID], ("gpu", "5"): [TEMP], ("gpu", "6"): [TEMP]})
    for i, rule in enumerate(old):
        rule["metadata"]["resourceVersion"] = str(100 + i)
        rule["spec"]["taint"]["timeAdded"] = "2026-11-26T03:00:00Z"
    foreign = gate.device_taint_rules("n1-other", {("gpu", "7"): [TEMP]})[0]
    foreign["metadata"]["annotations"]["gpufleet.io/node"] = "n1-other"
    wanted = gate.device_taint_rules("n1", {("gpu", "3"): [ECC], ("gpu", "5"): [dict(TEMP, message="95 C")],
                                            ("gpu", "6"): [TEMP], ("gpu", "1"): [TEMP]})
    plan = gate.device_rules_plan("n1", wanted, old + [foreign])
    assert [r["metadata"]["name"] for r in plan["create"]] == ["gpufleet-n1-gpu-1"]
    updates = dict((r["metadata"]["name"], r) for r in plan["update"])
    assert sorted(updates) == ["gpufleet-n1-gpu-3", "gpufleet-n1-gpu-5"]  # gpu-6 unchanged: not sent
    assert updates["gpufleet-n1-gpu-3"]["metadata"]["resourceVersion"] == "100"
    assert "timeAdded" not in updates["gpufleet-n1-gpu-3"]["spec"]["taint"]  # a new taint value: a new taint
    assert updates["gpufleet-n1-gpu-5"]["spec"]["taint"]["timeAdded"] == "2026-11-26T03:00:00Z"  # message only
    assert plan["delete"] == []
    assert gate.device_rules_plan("n1", [], old + [foreign])["delete"] == [
        "gpufleet-n1-gpu-3", "gpufleet-n1-gpu-5", "gpufleet-n1-gpu-6"]


# -- the API double (Kubernetes 1.37) ------------------------------------------------------------------
@pytest.fixture
def api(tmp_path):
    with FakeKubeAPI(server_version="1.37.1") as server:
        server.add_node("gpu-1")
        server.add_node("gpu-2")
        server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def client(api):
    return KubeClient(api.url, token=api.token, allow_plain_http=True)


def node_taints(api, name="gpu-1"):
    return api.node(name)["spec"].get("taints") or []


def test_the_double_validates_device_taint_rules_like_the_1_37_server(api):
    rule = gate.device_taint_rules("gpu-1", {("gpu", "3"): [ECC]})[0]
    bad = dict(rule, spec=dict(rule["spec"], taint=dict(rule["spec"]["taint"], effect="PreferNoSchedule")))
    with pytest.raises(ApiStatusError) as err:
        client(api).request("POST", gate.DEVICE_TAINT_API, bad, "application/json")
    assert err.value.code == 422 and "Unsupported value" in str(err.value)
    created = client(api).request("POST", gate.DEVICE_TAINT_API, rule, "application/json")
    assert created["spec"]["taint"]["timeAdded"] and created["metadata"]["generation"] == 1
    with pytest.raises(ApiStatusError) as err:
        client(api).request("POST", gate.DEVICE_TAINT_API, rule, "application/json")
    assert err.value.code == 409
    stale = dict(rule, metadata=dict(rule["metadata"], resourceVersion="1"))
    with pytest.raises(ApiStatusError) as err:
        client(api).request("PUT", gate.DEVICE_TAINT_API + "/" + rule["metadata"]["name"], stale, "application/json")
    assert err.value.code == 409
    with FakeKubeAPI(server_version="1.36.4") as old:
        with pytest.raises(ApiStatusError) as err:
            KubeClient(old.url, token=old.token, allow_plain_http=True).request(
                "POST", gate.DEVICE_TAINT_API, rule, "application/json")
        assert err.value.code == 404  # not served as v1 before 1.37


def test_write_creates_updates_and_deletes_only_this_nodes_rules(api):
    other = gate.device_taint_rules("gpu-2", {("gpu", "0"): [TEMP]})
    write_device_taints(client(api), "gpu-2", other)
    done = write_device_taints(client(api), "gpu-1", gate.device_taint_rules("gpu-1", {("gpu", "3"): [XID]}))
    assert done["create"] == ["gpufleet-gpu-1-gpu-3"] and len(done["lines"]) == 1
    assert done["lines"][0].startswith("device taint %s=gpu.xid:NoSchedule added on gpu.nvidia.com/gpu-1/gpu-3" % KEY)
    added = api.device_taint_rules()["gpufleet-gpu-1-gpu-3"]["spec"]["taint"]["timeAdded"]

    again = write_device_taints(client(api), "gpu-1", gate.device_taint_rules("gpu-1", {("gpu", "3"): [XID]}))
    assert again["create"] == again["update"] == again["delete"] == [] and not api.recorded("PUT")

    changed = write_device_taints(client(api), "gpu-1",
                                  gate.device_taint_rules("gpu-1", {("gpu", "3"): [dict(XID, message="Xid 48")]}))
    assert changed["update"] == ["gpufleet-gpu-1-gpu-3"]
    stored = api.device_taint_rules()["gpufleet-gpu-1-gpu-3"]
    assert stored["spec"]["taint"]["timeAdded"] == added  # same taint: its time kept
    assert stored["metadata"]["annotations"]["gpufleet.io/message"] == "gpu.xid[gpu3]: Xid 48"

    gone = write_device_taints(client(api), "gpu-1", [])
    assert gone["delete"] == ["gpufleet-gpu-1-gpu-3"]
    assert sorted(api.device_taint_rules()) == ["gpufleet-gpu-2-gpu-0"]  # the other node's rule untouched


def agent(api, **options):
    options.setdefault("gpu_allocation", "dra")
    return KubePublisher(client(api), "gpu-1", taint=True, clock=lambda: 1700000000.0, **options)


def test_agent_under_dra_taints_the_device_not_the_node_and_removes_it_after_recovery_hysteresis(api):
    settings, errors = hysteresis_settings({"hysteresis": {"fail_after": 1, "recover_after": 3}})
    assert not errors
    state, publisher = {}, agent(api)
    sick = [ECC, dict(COUNT, status="pass")]
    well = [dict(ECC, status="pass", message="0 uncorrectable"), dict(COUNT, status="pass")]
    cycles = []
    for checks in (sick, well, well, well):
        state, _events = agent_hysteresis.step(state, checks, settings, now=1700000000.0)
        failing = agent_hysteresis.failing_after_hysteresis(state, checks)
        lines = publisher.publish(not failing, failing)
        cycles.append((sorted(api.device_taint_rules()), node_taints(api), lines))
    assert cycles[0][0] == ["gpufleet-gpu-1-gpu-3"] and cycles[0][1] == []  # device tainted, node not
    assert any(line.startswith("device taint %s=gpu.ecc.volatile_uncorrectable:NoSchedule added" % KEY)
               for line in cycles[0][2])
    assert cycles[1][0] == cycles[2][0] == ["gpufleet-gpu-1-gpu-3"]  # passing, not yet recovered
    assert cycles[3][0] == [] and "device taint rule gpufleet-gpu-1-gpu-3 removed (device healthy again)" in cycles[3][2]


def test_agent_under_dra_taints_the_node_for_node_level_checks_or_when_the_site_asks(api):
    agent(api).publish(False, [ECC, COUNT])
    assert [t["value"] for t in node_taints(api)] == ["gpu.count"]
    assert sorted(api.device_taint_rules()) == ["gpufleet-gpu-1-gpu-3"]
    agent(api).publish(False, [ECC])
    assert node_taints(api) == []
    agent(api, device_failures_taint_node=True).publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]


def test_agent_falls_back_to_the_node_taint_when_rules_cannot_be_written(api):
    api.device_taint_outage(403)
    lines = agent(api).publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    assert any(line.startswith("device taints not written (") and "403" in line
               and line.endswith("the node is tainted instead") for line in lines)
    api.end_device_taint_outage()
    agent(api).publish(False, [ECC])  # the API is back: the device carries it, the node is released
    assert node_taints(api) == [] and sorted(api.device_taint_rules()) == ["gpufleet-gpu-1-gpu-3"]


def test_agent_with_device_plugin_allocation_is_unchanged(api):
    lines = agent(api, gpu_allocation="device_plugin").publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    assert api.device_taint_rules() == {} and not api.recorded(path_contains="devicetaintrules")
    assert lines[-1] == "taint %s=gpu.ecc.volatile_uncorrectable:NoSchedule added" % KEY


def test_agent_refuses_a_bad_allocation_naming_the_setting(api):
    with pytest.raises(gate.GateError, match="kubernetes.gpu_allocation='mig'"):
        agent(api, gpu_allocation="mig")


# -- module node_write, mode health ---------------------------------------------------------------------
def health(api, results, check_mode=False, **options):
    values = {name: spec.get("default") for name, spec in node_write.ARGUMENT_SPEC.items()}
    values.update(kubeconfig=api.kubeconfig_path, node="gpu-1", mode="health", allow_plain_http=True,
                  results=results, gpu_allocation="dra")
    values.update(options)
    return node_write.run(values, check_mode=check_mode)


def test_node_write_under_dra_writes_device_rules_and_the_node_only_for_node_checks(api):
    sick = health(api, {"checks": [ECC, TEMP]})
    assert sick["changed"] is True and sick["decision"]["healthy"] is True
    assert sick["device_taints"] == {"rules": ["gpufleet-gpu-1-gpu-3", "gpufleet-gpu-1-gpu-5"],
                                     "create": ["gpufleet-gpu-1-gpu-3", "gpufleet-gpu-1-gpu-5"],
                                     "update": [], "delete": [], "error": None}
    assert node_taints(api) == []

    worse = health(api, {"checks": [ECC, COUNT]})
    assert worse["device_taints"]["delete"] == ["gpufleet-gpu-1-gpu-5"]  # gpu5 passes now
    assert [t["value"] for t in node_taints(api)] == ["gpu.count"]
    assert sorted(api.device_taint_rules()) == ["gpufleet-gpu-1-gpu-3"]

    well = health(api, {"checks": [dict(ECC, status="pass")]})
    assert well["device_taints"]["delete"] == ["gpufleet-gpu-1-gpu-3"] and well["decision"]["healthy"] is True
    assert api.device_taint_rules() == {} and node_taints(api) == []


def test_node_write_check_mode_writes_no_rule(api):
    result = health(api, {"checks": [ECC]}, check_mode=True)
    assert result["device_taints"]["create"] == ["gpufleet-gpu-1-gpu-3"] and result["changed"] is True
    assert api.device_taint_rules() == {}
    assert not api.recorded("POST") and not api.recorded("PATCH")


def test_node_write_falls_back_to_the_node_taint_with_the_reason(api):
    api.device_taint_outage(503)
    result = health(api, {"checks": [ECC]})
    assert "503" in result["device_taints"]["error"]
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    reason = api.node("gpu-1")["metadata"]["annotations"][KEY + "-reason"]
    assert reason.startswith("validation failed: gpu.ecc.volatile_uncorrectable:gpu3; device taints not written (")
    assert reason.endswith("): the node is tainted instead")


def test_node_write_with_device_plugin_allocation_is_unchanged(api):
    result = health(api, {"checks": [ECC]}, gpu_allocation="device_plugin")
    assert "device_taints" not in result
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    assert not api.recorded(path_contains="devicetaintrules")


def test_node_write_names_a_bad_device_taint_setting(api):
    with pytest.raises(node_write.WriteError, match="option results or device_taints: .*gpu_device"):
        health(api, {"checks": [ECC]}, device_taints={"gpu_device": "gpu-{uuid}"})


# -- every failure of the DeviceTaintRule path falls back to the node taint (issue 41) -------------------
# The list as a broken proxy, an older or newer server or a hostile one could answer it; the writer
# reads it strictly (kube_node_write.listed_device_taint_rules) and anything unexpected is a failure.
BAD_LISTS = [
    {"items": [None]},                                     # the case: a list whose items are null
    {"items": None, "kind": "DeviceTaintRuleList"},        # no items at all is not "no rules"
    {"items": "rules"},
    {"items": [{"metadata": None}]},
    {"items": [{"metadata": {"name": 5}}]},
    {"items": [{"metadata": {"name": "gpufleet-gpu-1-gpu-3", "annotations": ["x"]}}]},
    {"kind": "Status"},
    [],
    "<html>502 Bad Gateway</html>",
    None,
]


class BadListClient(KubeClient):
    """The API double's client, except that the DeviceTaintRule list answers ``listed``."""
    listed = None

    def request(self, method, path, body=None, content_type=None, deadline=None):
        if method == "GET" and "devicetaintrules" in path:
            return self.listed
        return super(BadListClient, self).request(method, path, body, content_type, deadline)


@pytest.mark.parametrize("listed", BAD_LISTS)
def test_agent_falls_back_to_the_node_taint_on_a_list_it_cannot_read(api, listed):
    bad = BadListClient(api.url, token=api.token, allow_plain_http=True)
    bad.listed = listed
    lines = KubePublisher(bad, "gpu-1", taint=True, clock=lambda: 1700000000.0, gpu_allocation="dra").publish(
        False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    assert any(line.startswith("device taints not written (unreadable record DeviceTaintRule list")
               and line.endswith("the node is tainted instead") for line in lines), lines
    assert api.device_taint_rules() == {}


def test_agent_falls_back_to_the_node_taint_on_any_error_of_the_rule_path(api, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something nobody expected")
    monkeypatch.setattr(gate, "device_rules_plan", broken)
    lines = agent(api).publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    assert "device taints not written (RuntimeError: something nobody expected): the node is tainted instead" in lines


@pytest.mark.parametrize("listed", BAD_LISTS)
def test_node_write_falls_back_to_the_node_taint_on_a_list_it_cannot_read(api, monkeypatch, listed):
    class Answering(object):
        """The kubeconfig's client, except that the DeviceTaintRule list answers ``listed``."""

        def __init__(self, real):
            self.real = real

        def request(self, method, path, body=None, content_type=None, deadline=None):
            if method == "GET" and "devicetaintrules" in path:
                return listed
            return self.real.request(method, path, body, content_type, deadline)

        def __getattr__(self, name):
            return getattr(self.real, name)

    class Client(node_write.KubeconfigClient):
        def __enter__(self):
            return Answering(super(Client, self).__enter__())
    monkeypatch.setattr(node_write, "KubeconfigClient", Client)
    result = health(api, {"checks": [ECC]})
    assert result["device_taints"]["error"].startswith("unreadable record DeviceTaintRule list")
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]
    reason = api.node("gpu-1")["metadata"]["annotations"][KEY + "-reason"]
    assert reason.endswith("): the node is tainted instead")


def test_node_write_falls_back_to_the_node_taint_on_any_error_of_the_rule_path(api, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("metadata")
    monkeypatch.setattr(gate, "device_rules_plan", broken)
    result = health(api, {"checks": [ECC]})
    assert result["device_taints"]["error"] == "KeyError: 'metadata'"
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"]


def test_a_healthy_node_with_an_unreadable_list_keeps_no_taint_but_says_so(api):
    bad = BadListClient(api.url, token=api.token, allow_plain_http=True)
    bad.listed = {"items": [None]}
    lines = KubePublisher(bad, "gpu-1", taint=True, clock=lambda: 1700000000.0, gpu_allocation="dra").publish(
        True, [])
    assert node_taints(api) == []
    assert any(line.startswith("device taint rules not reconciled (unreadable record DeviceTaintRule list")
               for line in lines), lines


LIST_ANSWERS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.sampled_from(["gpufleet-gpu-1-gpu-3", "gpu-1", gate.DEVICE_NODE_ANNOTATION])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["items", "metadata", "name", "annotations", "resourceVersion", "spec",
                                         "taint", gate.DEVICE_NODE_ANNOTATION, "kind"]), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(LIST_ANSWERS)
def test_any_list_answer_is_rules_to_plan_against_or_unreadable(listed):
    try:
        items = listed_device_taint_rules(listed)
    except RecordError as exc:
        assert str(exc).startswith("unreadable record DeviceTaintRule list")
        return
    wanted = gate.device_taint_rules("gpu-1", {("gpu", "3"): [ECC]})
    plan = gate.device_rules_plan("gpu-1", wanted, items)
    assert set(plan) == {"create", "update", "delete"}
