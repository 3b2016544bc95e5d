"""Module node_write (the guarded Node write of role node_gate) against the API server double
(tests/fake_kube_api): every mode, nothing sent when the Node already is as wanted, 409 Conflict
redone and given up on, other owners' taints kept, credentials refused over plain http, check mode
without a write, and the module's entry point run as Ansible runs it (JSON arguments in, JSON out)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.modules import node_write
from fake_kube_api import FakeKubeAPI

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MERGE = "application/merge-patch+json"
TAINT_KEY = "gpufleet.io/unhealthy"
REASON_ANNOTATION = TAINT_KEY + "-reason"
FOREIGN_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
MAINTENANCE_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
REASON = "validation failed: gpu.ecc.volatile_uncorrectable:gpu3"

SICK = {"changed": False, "healthy": False,
        "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs"},
                   {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail", "message": "2 DBE"}]}
HEALTHY = {"changed": False, "healthy": True,
           "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8 GPUs"}]}


@pytest.fixture
def api(tmp_path):
    server = FakeKubeAPI().start()
    server.add_node("gpu-1", taints=[FOREIGN_TAINT], annotations={"example.com/owner": "team-a"})
    server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig")
    server.requests.clear()
    yield server
    server.stop()


def params(api, mode, **options):
    """The module's parameters as AnsibleModule hands them over (defaults filled in)."""
    values = {name: spec.get("default") for name, spec in node_write.ARGUMENT_SPEC.items()}
    values.update(kubeconfig=api.kubeconfig_path, node="gpu-1", mode=mode, allow_plain_http=True)
    values.update(options)
    return values


def write(api, mode, check_mode=False, **options):
    return node_write.run(params(api, mode, **options), check_mode=check_mode)


def patches(api, node="gpu-1"):
    return api.recorded("PATCH", "/api/v1/nodes/%s" % node)


def ours(value):
    return {"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}


def test_cordon_sends_only_unschedulable_with_the_resource_version(api):
    version = api.node("gpu-1")["metadata"]["resourceVersion"]
    result = write(api, "cordon")
    assert result["changed"] is True and result["attempts"] == 1
    assert result["patch"] == {"metadata": {"resourceVersion": version}, "spec": {"unschedulable": True}}
    assert "decision" not in result
    sent = patches(api)
    assert [(r["status"], r["content_type"], r["body"]) for r in sent] == [(200, MERGE, result["patch"])]
    status = result["node_status"]
    assert status["cordoned"] is True and status["backend"] == "kubernetes" and status["node"] == "gpu-1"
    assert status["resource_version"] == api.node("gpu-1")["metadata"]["resourceVersion"] != version
    assert status["taints"] == [FOREIGN_TAINT] and status["taint"] is None

    again = write(api, "cordon")  # already cordoned: nothing sent, no resourceVersion bump
    assert again["changed"] is False and again["patch"] is None
    assert len(patches(api)) == 1
    assert again["node_status"]["resource_version"] == status["resource_version"]


def test_taint_cordons_taints_and_annotates_in_one_write_keeping_other_taints(api):
    result = write(api, "taint", reason=REASON, taint_value="gpu.ecc.volatile_uncorrectable")
    taint = ours("gpu.ecc.volatile_uncorrectable")
    assert result["changed"] is True
    assert result["patch"]["spec"] == {"taints": [FOREIGN_TAINT, taint], "unschedulable": True}
    assert result["patch"]["metadata"]["annotations"] == {REASON_ANNOTATION: REASON}
    assert result["decision"]["healthy"] is False and result["decision"]["taint"] == taint
    node = api.node("gpu-1")
    assert node["spec"]["taints"] == [FOREIGN_TAINT, taint] and node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"] == {"example.com/owner": "team-a", REASON_ANNOTATION: REASON}
    status = result["node_status"]
    assert status["taint"] == taint and status["reason"] == REASON and status["cordoned"] is True
    assert status["annotations"] == node["metadata"]["annotations"]

    assert write(api, "taint", reason=REASON, taint_value="gpu.ecc.volatile_uncorrectable")["changed"] is False
    assert len(patches(api)) == 1

    # a taint value derived from the reason: label-safe, 63 characters at most
    derived = write(api, "taint", reason="reboot required")
    assert derived["node_status"]["taint"] == ours("reboot-required")
    assert derived["patch"]["spec"] == {"taints": [FOREIGN_TAINT, ours("reboot-required")]}  # already cordoned


def test_release_removes_only_ours_and_uncordons(api):
    write(api, "taint", reason=REASON)
    result = write(api, "release")
    assert result["changed"] is True
    assert result["patch"]["spec"] == {"taints": [FOREIGN_TAINT], "unschedulable": False}
    assert result["patch"]["metadata"]["annotations"] == {REASON_ANNOTATION: None}
    assert result["decision"]["healthy"] is True
    node = api.node("gpu-1")
    assert node["spec"]["taints"] == [FOREIGN_TAINT] and "unschedulable" not in node["spec"]
    assert node["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert result["node_status"]["cordoned"] is False and result["node_status"]["reason"] == ""
    assert write(api, "release")["changed"] is False
    assert len(patches(api)) == 2


def test_health_taints_on_failure_untaints_on_pass_and_fails_closed(api):
    sick = write(api, "health", results=SICK, labels={"gpufleet.io/gpu.count": "8"})
    taint = ours("gpu.ecc.volatile_uncorrectable")
    assert sick["changed"] is True and sick["decision"]["failed_check"] == "gpu.ecc.volatile_uncorrectable"
    assert sick["patch"]["metadata"]["labels"] == {"gpufleet.io/gpu.count": "8",
                                                   "gpufleet.io/failed-check": "gpu.ecc.volatile_uncorrectable",
                                                   "gpufleet.io/healthy": "false"}
    assert "unschedulable" not in sick["patch"]["spec"]  # the health gate does not cordon
    node = api.node("gpu-1")
    assert node["spec"]["taints"] == [FOREIGN_TAINT, taint] and "unschedulable" not in node["spec"]
    assert node["metadata"]["annotations"][REASON_ANNOTATION] == REASON
    assert node["metadata"]["labels"]["gpufleet.io/gpu.count"] == "8"

    # the same result again: the health gate always sends its write, which changes nothing
    again = write(api, "health", results=[SICK], labels={"gpufleet.io/gpu.count": "8"})
    assert again["changed"] is False and again["patch"] is not None and len(patches(api)) == 2

    healthy = write(api, "health", results=HEALTHY)
    assert healthy["changed"] is True and healthy["decision"]["healthy"] is True
    assert healthy["patch"]["metadata"]["labels"] == {"gpufleet.io/failed-check": None, "gpufleet.io/healthy": "true"}
    node = api.node("gpu-1")
    assert node["spec"]["taints"] == [FOREIGN_TAINT] and REASON_ANNOTATION not in node["metadata"]["annotations"]
    assert "gpufleet.io/failed-check" not in node["metadata"]["labels"]

    unchecked = write(api, "health", results=[])  # no result at all: held back
    assert unchecked["node_status"]["taint"] == ours("gate.no_results")


def test_annotate_sets_keeps_and_removes(api):
    state = json.dumps({"state": "cordoned"})
    first = write(api, "annotate", annotations={"gpufleet.io/upgrade-state": state})
    assert first["changed"] is True and "spec" not in first["patch"]
    assert first["node_status"]["annotations"]["gpufleet.io/upgrade-state"] == state
    assert write(api, "annotate", annotations={"gpufleet.io/upgrade-state": state})["changed"] is False
    removed = write(api, "annotate", annotations={"gpufleet.io/upgrade-state": None})
    assert removed["patch"]["metadata"]["annotations"] == {"gpufleet.io/upgrade-state": None}
    assert removed["node_status"]["annotations"] == {"example.com/owner": "team-a"}
    assert len(patches(api)) == 2
    assert write(api, "annotate", annotations={"example.com/absent": None})["changed"] is False


def test_a_conflict_is_read_again_and_the_other_writers_taint_kept(api):
    def other_controller(server):
        taints = server.node("gpu-1")["spec"].get("taints", [])
        server.patch_node("gpu-1", MERGE, {"spec": {"taints": taints + [MAINTENANCE_TAINT]}})

    api.interleave("gpu-1", other_controller, content_type=MERGE)
    result = write(api, "taint", reason=REASON)
    sent = patches(api)
    assert [r["status"] for r in sent] == [409, 200] and result["attempts"] == 2
    versions = [int(r["body"]["metadata"]["resourceVersion"]) for r in sent]
    assert versions[1] > versions[0]
    taint = ours("validation-failed-gpu.ecc.volatile_uncorrectable-gpu3")
    assert sent[0]["body"]["spec"]["taints"] == [FOREIGN_TAINT, taint]  # from the stale read
    assert sent[1]["body"]["spec"]["taints"] == [FOREIGN_TAINT, MAINTENANCE_TAINT, taint]
    assert api.node("gpu-1")["spec"]["taints"] == [FOREIGN_TAINT, MAINTENANCE_TAINT, taint]
    assert result["node_status"]["taints"] == [FOREIGN_TAINT, MAINTENANCE_TAINT, taint]


def test_a_conflict_on_every_attempt_fails_with_nothing_written(api):
    def other_controller(server):
        count = int(server.node("gpu-1")["metadata"]["annotations"].get("example.com/writes", "0"))
        server.patch_node("gpu-1", MERGE, {"metadata": {"annotations": {"example.com/writes": str(count + 1)}}})

    api.interleave("gpu-1", other_controller, times=100, content_type=MERGE)
    with pytest.raises(node_write.WriteError) as error:
        write(api, "taint", reason=REASON, retries=3)
    assert str(error.value) == ("taint of gpu-1 was refused 3 times with 409 Conflict (another writer kept changing "
                                "the Node); nothing was written by this attempt")
    assert [r["status"] for r in patches(api)] == [409] * 3
    node = api.node("gpu-1")
    assert node["spec"]["taints"] == [FOREIGN_TAINT] and "unschedulable" not in node["spec"]


def test_check_mode_sends_no_write(api):
    before = api.node("gpu-1")
    result = write(api, "taint", check_mode=True, reason=REASON)
    assert result["changed"] is True and result["patch"]["spec"]["unschedulable"] is True
    assert result["patch"]["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert result["node_status"]["cordoned"] is False  # the Node as read
    assert [r["method"] for r in api.requests] == ["GET"]
    assert api.node("gpu-1") == before
    # nothing would change: changed false; the health gate's no-op write is not a change either
    write(api, "cordon")
    assert write(api, "cordon", check_mode=True)["changed"] is False
    write(api, "health", results=HEALTHY)
    checked = write(api, "health", check_mode=True, results=HEALTHY)
    assert checked["changed"] is False and checked["patch"] is not None
    assert write(api, "health", check_mode=True, results=SICK)["changed"] is True
    assert len(patches(api)) == 2


def test_credentials_over_plain_http_are_refused_before_any_request(api):
    with pytest.raises(node_write.WriteError) as error:
        write(api, "cordon", allow_plain_http=False)
    message = str(error.value)
    assert "plain http" in message and "allow_plain_http" in message
    assert api.token not in message
    assert api.requests == []


def test_unknown_node_and_unreadable_kubeconfig_name_what_is_wrong(api, tmp_path):
    with pytest.raises(node_write.WriteError, match="no Node named gpu-404 in the cluster of kubeconfig .* "
                                                    r"\(option node\)"):
        write(api, "cordon", node="gpu-404")
    with pytest.raises(node_write.WriteError, match="kubeconfig .*missing.* is unreadable"):
        write(api, "cordon", kubeconfig=str(tmp_path / "missing"))


def test_an_api_outage_fails_naming_the_node(api):
    api.outage("gpu-1")
    with pytest.raises(node_write.WriteError, match="cordon of gpu-1 failed: API server answered 503"):
        write(api, "cordon")


@pytest.mark.parametrize("mode, options, words", [
    ("taint", {"reason": "  "}, "option reason is required by mode taint"),
    ("annotate", {}, "option annotations is required by mode annotate"),
    ("annotate", {"annotations": {"a": 1}}, "option annotations: values must be strings or null"),
    ("health", {"labels": {"gpufleet.io/gpu.count": 8}}, "option labels: values must be strings"),
    ("cordon", {"retries": 0}, "option retries must be at least 1"),
    ("cordon", {"taint_key": ""}, "option taint_key must not be empty"),
    ("health", {"results": "sick"}, "option results: expected a check result dict"),
])
def test_bad_options_are_refused_naming_the_option(api, mode, options, words):
    with pytest.raises(node_write.WriteError) as error:
        write(api, mode, **options)
    assert words in str(error.value)
    assert patches(api) == []


def _module(api, tmp_path, args):
    """Run plugins/modules/node_write.py as AnsiballZ does (arguments from a JSON file)."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "node_write.py"), str(path)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def test_the_module_entry_point_writes_and_fails_with_msg(api, tmp_path):
    base = {"kubeconfig": api.kubeconfig_path, "node": "gpu-1", "allow_plain_http": True}
    out = _module(api, tmp_path, dict(base, mode="cordon"))
    assert out["changed"] is True and out["node_status"]["cordoned"] is True, out
    out = _module(api, tmp_path, dict(base, mode="taint", _ansible_check_mode=True))
    assert out["failed"] is True and out["msg"] == ("node_write: option reason is required by mode taint "
                                                    "(why the node is held back)")
    out = _module(api, tmp_path, dict(base, mode="taint", reason="held", _ansible_check_mode=True))
    assert out["changed"] is True and out["patch"]["spec"]["taints"][-1] == ours("held"), out
    assert [r["status"] for r in patches(api)] == [200]
