"""The remediation policy's decisions (module_utils/remediation/remediation.py, filters remediation_plan,
gpu_reset_decision) and the remediation_breaker module's entry point against the API double."""

import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from conftest import REPO
from fake_kube_api.server import FakeKubeAPI

from ansible_collections.gpufleet.cluster.plugins.filter import remediation as filters
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker, remediation


def result(*checks):
    return {"checks": [dict(id=i, target=t, status=s, message="m") for i, t, s in checks]}


ON = {"enabled": True}


@pytest.mark.parametrize("check_id, klass", [
    ("gpu.xid", "xid_fatal"), ("gpu.recovery_action", "xid_fatal"), ("gpu.lost", "gpu_lost"),
    ("gpu.row_remap", "row_remap"), ("gpu.ecc.volatile_uncorrectable", "ecc"), ("gpu.ecc.mode", None),
    ("gpu.nvlink", "nvlink"), ("rdma.port.state", "rdma_port"), ("tuning.hugepages", "tuning_drift"),
    ("burnin.dcgm", "burn_in"), ("k8s.nccl.busbw", "burn_in"), ("gpu.temperature", None), ("gpu.xidx", None),
])
def test_check_classes(check_id, klass):
    assert remediation.check_class(check_id) == klass


def test_plan_takes_the_strongest_action_of_the_failing_classes():
    out = remediation.plan(result(("gpu.xid", "gpu3", "fail"), ("gpu.ecc.volatile_uncorrectable", "gpu1", "fail"),
                                  ("rdma.port.state", "mlx5_0/1", "pass")), ON)
    assert out["action"] == "reset" and out["per_class"] == {"xid_fatal": "reset", "ecc": "drain"}
    assert out["reason"] == "reset: ecc -> drain (gpu.ecc.volatile_uncorrectable:gpu1); xid_fatal -> reset (gpu.xid:gpu3)"
    lost = remediation.plan([result(("gpu.xid", "gpu3", "fail")), result(("gpu.lost", "gpu5", "fail"))], ON)
    assert lost["action"] == "reboot"


def test_unclassified_failures_are_isolated_and_warnings_count_only_with_fail_on_warn():
    out = remediation.plan(result(("gpu.temperature", "gpu0", "fail")), ON)
    assert out["action"] == "isolate" and out["classes"] == {"unclassified": ["gpu.temperature:gpu0"]}
    warn = result(("gpu.xid", "gpu0", "warn"))
    assert remediation.plan(warn, ON)["action"] == "none"
    assert remediation.plan(warn, ON, fail_on="warn")["action"] == "reset"


def test_off_by_default_isolates_and_no_result_is_a_failure():
    out = remediation.plan(result(("gpu.lost", "gpu0", "fail")))
    assert out["action"] == "isolate" and out["reason"].startswith("remediation is off (gpufleet_remediation.enabled")
    nothing = remediation.plan([], ON)
    assert nothing["action"] == "isolate" and nothing["failed_checks"] == ["gate.no_results:node"]
    assert remediation.plan(result(("gpu.lost", "gpu0", "pass")), ON)["action"] == "none"


def test_group_override_merges_over_defaults():
    merged = remediation.policy({"enabled": True, "actions": {"gpu_lost": "drain"}, "burn_in": {"dcgm_level": 3}})
    assert merged["actions"]["gpu_lost"] == "drain" and merged["actions"]["xid_fatal"] == "reset"
    assert merged["burn_in"]["dcgm_level"] == 3 and merged["burn_in"]["timeout"] == 1800
    assert remediation.policy(None) == remediation.DEFAULT_POLICY


@pytest.mark.parametrize("value, words", [
    ([], "gpufleet_remediation must be a mapping"),
    ({"enable": True}, "unknown key(s) enable"),
    ({"enabled": "yes"}, "gpufleet_remediation.enabled must be true or false"),
    ({"actions": {"gpu_lost": "pray"}}, "gpufleet_remediation.actions.gpu_lost must be one of"),
    ({"actions": {"fan": "reset"}}, "unknown check class 'fan'"),
    ({"max_attempts": 0}, "gpufleet_remediation.max_attempts must be an integer > 0"),
    ({"max_parallel": "many"}, "gpufleet_remediation.max_parallel"),
    ({"max_parallel": "\u00b2"}, "gpufleet_remediation.max_parallel"),  # '²'.isdigit() is true, int('²') raises
    ({"burn_in": ["dcgm"]}, "gpufleet_remediation.burn_in must be a mapping"),
    ({"burn_in": {"level": 2}}, "gpufleet_remediation.burn_in: unknown key(s) level"),
    ({"burn_in": {"dcgm_level": 5}}, "gpufleet_remediation.burn_in.dcgm_level"),
    ({"burn_in": {"nccl_command": "all_reduce_perf"}}, "burn_in.nccl_command must be a list"),
    ({"group": ""}, "gpufleet_remediation.group"),
    ({"slurm_drain_timeout": "1h"}, "gpufleet_remediation.slurm_drain_timeout must be an integer > 0"),
    ({"slurm_poll_interval": 0}, "gpufleet_remediation.slurm_poll_interval must be an integer > 0"),
    ({"slurm_drain_timeout": 10, "slurm_poll_interval": 60}, "slurm_poll_interval (60) must not exceed"),
])
def test_bad_policy_names_the_key(value, words):
    with pytest.raises(remediation.PolicyError) as error:
        remediation.policy(value)
    assert words in str(error.value)
    with pytest.raises(AnsibleFilterError):
        filters.remediation_policy(value)


# -- GPU reset: only when no process uses the GPUs (nvidia-smi --query-compute-apps ... csv,noheader) ---
def test_reset_refused_while_a_process_holds_a_gpu():
    listing = {"rc": 0, "stdout": "48213, /usr/bin/python3, GPU-4c4aaa9c-e3af-30e7-e9e9-e3f630e0158b\n"
                                  "48377, pt_main_thread, GPU-4c4aaa9c-e3af-30e7-e9e9-e3f630e0158b\n", "stderr": ""}
    out = filters.gpu_reset_decision(listing)
    assert out["allowed"] is False and [p["pid"] for p in out["processes"]] == [48213, 48377]
    assert out["reason"] == ("reset refused: 2 process(es) use the GPUs: 48213 /usr/bin/python3 on "
                             "GPU-4c4aaa9c-e3af-30e7-e9e9-e3f630e0158b, 48377 pt_main_thread on "
                             "GPU-4c4aaa9c-e3af-30e7-e9e9-e3f630e0158b")


def test_a_listing_whose_pid_is_not_ascii_digits_is_unreadable():
    out = filters.gpu_reset_decision({"rc": 0, "stdout": "\u00b2, /usr/bin/python3, GPU-4c4aaa9c\n"})
    assert out["allowed"] is False and "unreadable" in out["reason"]


def test_reset_allowed_only_on_an_empty_listing_that_worked():
    assert filters.gpu_reset_decision({"rc": 0, "stdout": "", "stderr": ""})["allowed"] is True
    failed = filters.gpu_reset_decision({"rc": 15, "stdout": "", "stderr": "Unable to determine the device handle "
                                                                           "for GPU0000:3B:00.0: Unknown Error"})
    assert failed["allowed"] is False and "exited 15: Unable to determine the device handle" in failed["reason"]
    garbled = filters.gpu_reset_decision({"rc": 0, "stdout": "[Insufficient Permissions]\n"})
    assert garbled["allowed"] is False and "unreadable" in garbled["reason"]
    assert filters.gpu_reset_decision({"stdout": ""})["allowed"] is False  # no rc: the command did not run
    with pytest.raises(AnsibleFilterError):
        filters.gpu_reset_decision("nothing")


# -- the module's entry point (as AnsiballZ runs it) --------------------------------------------------------
@pytest.fixture(scope="module")
def api(tmp_path_factory):
    server = FakeKubeAPI().start()
    for name in ("gpu-1", "gpu-2"):
        server.add_node(name)
    server.kubeconfig_path = server.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    yield server
    server.stop()


def module(tmp_path, args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "remediation_breaker.py"),
                           str(path)], capture_output=True, text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def test_module_acquire_refuse_record_release(api, tmp_path):
    base = {"kubeconfig": api.kubeconfig_path, "group": "rack7", "allow_plain_http": True, "max_parallel": "50%",
            "group_size": 2}
    first = module(tmp_path, dict(base, op="acquire", node="gpu-1"))
    assert first["admitted"] is True and first["changed"] is True and first["holders"] == ["gpu-1"], first
    second = module(tmp_path, dict(base, op="acquire", node="gpu-2"))
    assert second["admitted"] is False and second.get("failed") is not True
    assert second["reason"].startswith("breaker open: 1 of 1 node(s) of group rack7")
    peek = module(tmp_path, dict(base, op="acquire", node="gpu-2", _ansible_check_mode=True))
    assert peek["holders"] == ["gpu-1"] and peek["changed"] is False
    recorded = module(tmp_path, dict(base, op="record", node="gpu-1", step="drain", status="done", reason="3 pods evicted"))
    assert recorded["changed"] is True
    state = json.loads(api.node("gpu-1")["metadata"]["annotations"][breaker.STATE_ANNOTATION])
    assert (state["step"], state["status"], state["reason"]) == ("drain", "done", "3 pods evicted")
    released = module(tmp_path, dict(base, op="release", node="gpu-1", reason="burn-in passed"))
    assert released["released"] is True and released["changed"] is True
    assert module(tmp_path, dict(base, op="acquire", node="gpu-2"))["admitted"] is True
    bad = module(tmp_path, dict(base, op="record", node="gpu-1"))
    assert bad["failed"] is True and bad["msg"] == "options step and status are required by op record"
    pct = module(tmp_path, dict(base, op="acquire", node="gpu-1", group_size=None))
    assert pct["failed"] is True and "needs the group's size (option group_size" in pct["msg"]


def test_module_refuses_a_deeply_nested_record_instead_of_crashing(api, tmp_path):
    """Issue 41: json.loads of a deeply nested annotation raised RecursionError and the module
    died with a traceback; now it is an unreadable record: a recorded refusal naming it (and
    check mode reports it the same way)."""
    base = {"kubeconfig": api.kubeconfig_path, "group": "deep", "allow_plain_http": True}
    first = module(tmp_path, dict(base, op="acquire", node="gpu-1"))
    assert first["admitted"] is True, first
    with api.lock:
        lease = api.leases[("kube-system", "gpufleet-remediation-deep")]
        lease["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = "[" * 100000 + "]" * 100000
    record = "Lease kube-system/gpufleet-remediation-deep annotation gpufleet.io/remediation-holders"
    refused = module(tmp_path, dict(base, op="acquire", node="gpu-2"))
    assert refused["admitted"] is False and refused.get("failed") is not True, refused
    assert refused["unreadable"] == record and "nested deeper than" in refused["reason"]
    peek = module(tmp_path, dict(base, op="acquire", node="gpu-2", _ansible_check_mode=True))
    assert peek["admitted"] is False and record in peek["reason"] and peek.get("failed") is not True, peek
    released = module(tmp_path, dict(base, op="release", node="gpu-1"))
    assert released["failed"] is True and record in released["msg"]
    api.patch_node("gpu-2", "application/merge-patch+json",
                   {"metadata": {"annotations": {breaker.HISTORY_ANNOTATION: "{" * 50000}}})
    recorded = module(tmp_path, dict(base, op="record", node="gpu-2", step="drain", status="done"))
    assert recorded["failed"] is True and "Node gpu-2 annotation gpufleet.io/remediation-history" in recorded["msg"]
    annotations = api.node("gpu-2")["metadata"]["annotations"]
    assert json.loads(annotations[breaker.STATE_ANNOTATION])["step"] == "drain"  # the step itself is not lost
    assert annotations[breaker.HISTORY_ANNOTATION] == "{" * 50000


def test_the_inventory_check_names_a_bad_policy_before_any_host_is_contacted():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check

    hosts = ("cp1", "gpu1")
    hostvars = {h: {"inventory_hostname": h, "gpufleet_kubernetes_version": "1.35.4",
                    "kubernetes_cni_calico_manifest_checksum": "sha256:" + "ab" * 32,
                    "kubernetes_addons_mpi_operator_manifest_checksum": "sha256:" + "ab" * 32} for h in hosts}
    groups = {"all": list(hosts), "kube_control_plane": ["cp1"], "kube_node": ["gpu1"], "gpu_nodes": ["gpu1"],
              "rdma_nodes": ["gpu1"]}
    assert inventory_check.inventory_problems(hostvars, groups) == []
    hostvars["gpu1"]["gpufleet_remediation"] = {"enabled": True, "actions": {"gpu_lost": "reflash"}}
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert len(problems) == 1 and problems[0].startswith(
        "gpufleet_remediation.actions.gpu_lost must be one of isolate, drain, reset, reboot, got 'reflash'"), problems
    hostvars["gpu1"]["gpufleet_remediation"] = {"enabled": True, "group": "gpu_a100", "max_parallel": "10%"}
    assert inventory_check.inventory_problems(hostvars, groups) == []


def test_step_checks_pass_done_fail_the_stop_skip_the_rest():
    checks = filters.remediation_step_checks(["breaker", "taint"], "reset", "drain failed: pods are still on the node")
    assert [(c["target"], c["status"]) for c in checks] == [
        ("1:breaker", "pass"), ("2:taint", "pass"), ("3:drain", "fail"), ("4:reset", "skip"), ("5:validate", "skip"),
        ("6:burn_in", "skip"), ("7:release", "skip")]
    assert checks[2]["message"] == "stopped at drain: drain failed: pods are still on the node"
    assert {c["id"] for c in checks} == {"remediation.step"} and {c["observed"] for c in checks} == {"reset"}


def test_step_checks_all_done_drain_has_no_repair_and_a_disabled_burn_in_is_skipped():
    checks = remediation.step_checks("drain", ["breaker", "taint", "drain", "validate", "release"], burn_in=False)
    assert [(c["target"], c["status"]) for c in checks] == [
        ("1:breaker", "pass"), ("2:taint", "pass"), ("3:drain", "pass"), ("4:repair", "skip"), ("5:validate", "pass"),
        ("6:burn_in", "skip"), ("7:release", "pass")]
    refused = remediation.step_checks("reboot", [], "breaker open")
    assert [c["status"] for c in refused] == ["fail"] + ["skip"] * 6 and refused[3]["target"] == "4:reboot"


def test_step_checks_refuse_unknown_steps_and_actions():
    with pytest.raises(AnsibleFilterError, match="unknown step.*drian"):
        filters.remediation_step_checks(["drian"], "reset")
    with pytest.raises(remediation.PolicyError, match="unknown action 'fix'"):
        remediation.step_checks("fix", [])


# -- Slurm: scontrol show node <n> -o (shape of Slurm 23.x; states per the scontrol man page) ----------
SHOW = ("NodeName=gpu-17 Arch=x86_64 CoresPerSocket=56 CPUAlloc=%s CPUTot=224 Gres=gpu:h100:8 State=%s "
        "ThreadsPerCore=2 Partitions=gpu%s")


@pytest.mark.parametrize("state, reason, expect", [
    ("MIXED", "", dict(draining=False, ours=False, admin=False, drained=False, busy=["MIXED"])),
    ("MIXED+DRAIN", " Reason=gpufleet remediation: xid 79 [root@2026-11-26T04:00:00]",
     dict(draining=True, ours=True, admin=False, drained=False, busy=["MIXED"])),
    ("ALLOCATED+DRAIN+COMPLETING", " Reason=gpufleet remediation: x [root@t]",
     dict(ours=True, drained=False, busy=["ALLOCATED", "COMPLETING"])),
    ("IDLE+DRAIN", " Reason=gpufleet remediation: x [root@t]", dict(ours=True, admin=False, drained=True, busy=[])),
    ("IDLE+DRAIN", " Reason=bad dimm [admin@2026-11-20T10:00:00]", dict(ours=False, admin=True, drained=True)),
    ("IDLE+DRAIN", " Reason=gpufleet: gpu.xid[gpu0] [root@t]", dict(ours=False, admin=True)),  # the agent's
    ("DOWN*", " Reason=Not responding", dict(draining=False, admin=True, drained=True)),  # no job runs
    ("IDLE", "", dict(draining=False, admin=False, drained=False, busy=[])),  # not drained: jobs may start
    # someone else's and still scheduled on: the playbook stops at once instead of waiting for a drain
    ("IDLE+MAINTENANCE", "", dict(admin=True, closed=False, drained=False)),
    ("MIXED+REBOOT_REQUESTED", "", dict(admin=True, closed=False, drained=False, busy=["MIXED"])),
    ("IDLE+FAIL", " Reason=dimm [admin@t]", dict(admin=True, closed=True, drained=True)),
])
def test_slurm_state(state, reason, expect):
    out = remediation.slurm_state(SHOW % (0, state, reason), "gpu-17")
    assert {key: out[key] for key in expect} == expect
    assert out["state"] == state


def test_slurm_state_fails_closed_on_another_node_or_a_failed_command():
    with pytest.raises(remediation.PolicyError, match="no NodeName=gpu-17"):
        remediation.slurm_state("Node gpu-17 not found", "gpu-17")
    with pytest.raises(AnsibleFilterError, match="scontrol show node gpu-17 failed: slurm_load_node error"):
        filters.remediation_slurm_state({"rc": 1, "stdout": "", "stderr": "slurm_load_node error"}, "gpu-17")
    with pytest.raises(AnsibleFilterError, match="no NodeName=gpu-17"):
        filters.remediation_slurm_state({"rc": 0, "stdout": (SHOW % (0, "IDLE", "")).replace("gpu-17", "gpu-18")},
                                        "gpu-17")
