"""The one Node health write (plugins/module_utils/health/kube_node_write.py, issue 43): the module
node_write is a thin adapter over it and borrows nothing from the agent's files; the agent and the
module go through the same DRA path and its fail-closed fallback; mode status reads the Node the way
a write returns it (role node_gate's status, no Jinja rebuild)."""

import ast
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate, kube_node_write
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import ApiStatusError
from ansible_collections.gpufleet.cluster.plugins.modules import node_write
from conftest import REPO
from fake_kube_api import FakeKubeAPI
from test_layering import collection_imports, module_file

MODULE = os.path.join(REPO, "plugins", "modules", "node_write.py")
MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")


def closure(kind, name):
    """module_utils file names (no wing, no .py) imported, directly or not, by plugins/<kind>/<name>.py."""
    seen, todo = set(), [os.path.join(REPO, "plugins", kind, name + ".py")]
    while todo:
        for dotted in collection_imports(todo.pop()):
            rel = module_file(dotted)
            if rel and rel.startswith("module_utils/") and not rel.endswith("/__init__.py") and rel not in seen:
                seen.add(rel)
                todo.append(os.path.join(REPO, "plugins", rel))
    return {os.path.basename(rel)[:-3] for rel in seen}


def test_node_write_borrows_nothing_from_the_agent():
    assert sorted(m for m in closure("modules", "node_write") if m.startswith("agent")) == []
    assert "kube_node_write" in closure("modules", "node_write")
    assert "kube_node_write" in closure("module_utils/agent", "agent_kube")


def test_node_write_is_a_thin_adapter():
    """Code lines (no documentation strings, comments or blank lines) within what the other modules have."""
    with open(MODULE) as handle:
        source = handle.read()
    docs = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docs.update(range(node.lineno, node.end_lineno + 1))
    code = [line for number, line in enumerate(source.splitlines(), 1)
            if number not in docs and line.strip() and not line.strip().startswith("#")]
    assert len(code) <= 115, len(code)


@pytest.fixture
def api(tmp_path):
    server = FakeKubeAPI().start()
    server.add_node("gpu-1", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                    annotations={"example.com/owner": "team-a"})
    server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig")
    server.requests.clear()
    yield server
    server.stop()


def params(api, mode, **options):
    values = {name: spec.get("default") for name, spec in node_write.ARGUMENT_SPEC.items()}
    values.update(kubeconfig=api.kubeconfig_path, node="gpu-1", mode=mode, allow_plain_http=True)
    values.update(options)
    return values


def test_status_reads_the_node_as_a_write_returns_it_and_sends_nothing(api):
    written = node_write.run(params(api, "taint", reason="reboot required"))
    api.requests.clear()
    status = node_write.run(params(api, "status"))
    assert status == {"changed": False, "patch": None, "attempts": 1, "node_status": written["node_status"]}
    assert status["node_status"]["cordoned"] is True and status["node_status"]["reason"] == "reboot required"
    assert [r for r in api.recorded() if r["method"] != "GET"] == []


def test_status_of_a_missing_node_names_it(api):
    with pytest.raises(node_write.WriteError, match="no Node named gpu-404 in the cluster of kubeconfig"):
        node_write.run(params(api, "status", node="gpu-404"))


class Refusing(object):
    """A client whose every DeviceTaintRule request fails."""

    def __init__(self, exc):
        self.exc = exc
        self.requests = []

    def request(self, method, path, body=None, content_type=None, deadline=None):
        self.requests.append((method, path))
        raise self.exc


CHECK_IDS = ["gpu.ecc.volatile_uncorrectable", "gpu.xid", "gpu.temperature", "gpu.count", "gpu.fabric",
             "rdma.port.state", "tuning.cpu_governor"]
CHECKS = st.builds(lambda i, t: {"id": i, "target": t, "status": "fail", "message": "bad"},
                   st.sampled_from(CHECK_IDS), st.sampled_from(["gpu0", "gpu3", "node", "mlx5_0/1", ""]))


@settings(max_examples=200, deadline=None)
@given(failing=st.lists(CHECKS, max_size=6), taint_node=st.booleans(),
       exc=st.sampled_from([ApiStatusError(503, "unavailable"), KeyError("metadata"), RuntimeError("boom")]))
def test_the_fallback_holds_the_node_back_for_every_failing_check(failing, taint_node, exc):
    out = kube_node_write.write_device_health(Refusing(exc), "gpu-1", failing, gate.device_settings(None),
                                              taint_node=taint_node)
    devices = gate.split_failing(failing)["devices"]
    assert out["held"] == failing  # fail closed: nothing bad is left unseen
    assert out["error"] and out["create"] == out["update"] == out["delete"] == []
    assert (out["note"] is not None) == bool(devices)
    assert out["lines"] == [out["note"] or "device taint rules not reconciled (%s)" % out["error"]]


@settings(max_examples=100, deadline=None)
@given(failing=st.lists(CHECKS, max_size=6), taint_node=st.booleans())
def test_written_rules_hold_the_node_back_for_node_level_checks_only(failing, taint_node):
    class Empty(object):
        def request(self, method, path, body=None, content_type=None, deadline=None):
            return {"items": []} if method == "GET" else {}

    out = kube_node_write.write_device_health(Empty(), "gpu-1", failing, gate.device_settings(None),
                                              taint_node=taint_node)
    split = gate.split_failing(failing)
    assert out["error"] is None and out["note"] is None
    assert out["held"] == (failing if taint_node else split["node"])
    assert sorted(out["create"]) == sorted(out["rules"]) and len(out["rules"]) == len(split["devices"])


def test_node_gate_takes_its_status_from_node_write_not_a_jinja_rebuild():
    import yaml

    folder = os.path.join(REPO, "roles", "node_gate", "tasks", "kubernetes")
    with open(os.path.join(folder, "status.yml")) as handle:
        text = handle.read()
    tasks = yaml.safe_load(text)
    reads = [t for t in tasks[0]["block"] if "gpufleet.cluster.node_write" in t]
    assert [t["gpufleet.cluster.node_write"]["mode"] for t in reads] == ["status"]
    assert "k8s_info" not in text and "selectattr" not in text  # no rebuild of the Node's fields
    assert "__node_gate_node.node_status" in tasks[1]["ansible.builtin.set_fact"]["node_gate_status"]
    with open(os.path.join(folder, "write.yml")) as handle:
        assert "__node_gate_write.node_status" in handle.read()
