"""Verify the health-gated rolling upgrade in the lab (gate backend "lab": marker files).

Runs after converge and idempotence. Converge: node1 and node3 passed validation: released (no
cordon/taint markers), recorded as upgraded and "admitted" in their state file; node2's simulated
GPU turned unhealthy during the upgrade: still cordoned, tainted with the failing check id, state
"held" with the step and reason, not recorded as upgraded. The idempotence run left them alone and
has its own run directory (the converge run's records are kept). node3's simulated upgrade asked
for a reboot and rolling_upgrade_reboot is true there: the container really rebooted (systemd
restarted by Docker), the reboot marker with the component's line is gone, the node was admitted.
"""

import json
import os
import subprocess

import pytest
import yaml

GATE = "/var/lib/gpufleet/gate"
APPLIED = "/var/lib/gpufleet/upgrade/applied.json"
STATE = "/var/lib/gpufleet/upgrade-state.json"
ANNOTATION = "gpufleet.io/upgrade-state"
BLACKLIST = "/etc/apt/apt.conf.d/51gpufleet-unattended-upgrades"
REBOOT_MARKER = "/var/lib/gpufleet/reboot-required"
FAILING_CHECK = "gpu.ecc.volatile_uncorrectable"
RUNS_DIR = os.path.join(os.environ["GPUFLEET_REPORT_DIR"], "upgrades")
FINGERPRINT = {"components": ["kubernetes"], "target": {"kubernetes": "1.31.2-lab"}}
NODES = ["rolling-upgrade-node1", "rolling-upgrade-node2", "rolling-upgrade-node3"]


def _host(name):
    import testinfra

    return testinfra.get_host("docker://" + name)


def _runs():
    return sorted(d for d in os.listdir(RUNS_DIR) if d != "latest")


def _summary(run):
    with open(os.path.join(RUNS_DIR, run, "summary.json")) as handle:
        return json.load(handle)


def _state(host):
    return json.loads(host.file(STATE).content_string)


def _annotation(host):
    return json.loads(json.loads(host.file(GATE + "/annotations.json").content_string)["annotations"][ANNOTATION])


@pytest.mark.parametrize("name", ["rolling-upgrade-node1", "rolling-upgrade-node3"])
def test_healthy_nodes_are_released_and_admitted(name):
    host = _host(name)
    assert not host.file(GATE + "/cordoned").exists
    assert not host.file(GATE + "/drained").exists
    assert not host.file(GATE + "/taint").exists
    applied = host.file(APPLIED)
    assert applied.exists
    assert json.loads(applied.content_string) == FINGERPRINT
    state = _state(host)
    assert state["state"] == "admitted"
    assert state["run_id"] == _runs()[0]  # the converge run; idempotence did not touch the node
    assert state["components"] == ["kubernetes"] and state["target"] == FINGERPRINT["target"]
    assert state["step"] == "" and state["reason"] == ""
    assert "versions_before" in state and "versions_after" in state
    assert _annotation(host) == state  # the (simulated) Node annotation carries the same record
    assert host.file(BLACKLIST).exists  # holds lifted for the upgrade and put back
    assert json.loads(host.file("/var/lib/gpufleet/lab-upgraded-to.json").content_string) == FINGERPRINT["target"]


def test_node3_rebooted_for_its_upgrade_and_the_reboot_marker_is_gone():
    restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", "rolling-upgrade-node3"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert restarts == "1"  # one reboot: converge; the idempotence run had nothing to reboot for
    host = _host("rolling-upgrade-node3")
    assert not host.file("/run/reboot-required").exists  # /run is a tmpfs: gone with the reboot
    assert not host.file(REBOOT_MARKER).exists  # the component's line was cleared by the reboot
    assert host.file("/var/lib/apt/periodic/gpufleet-gpufleet-lab.list-stamp").exists  # apt_refresh ran
    assert _state(host)["state"] == "admitted"
    for name in ("rolling-upgrade-node1", "rolling-upgrade-node2"):
        other = _host(name)
        assert not other.file(REBOOT_MARKER).exists and not other.file("/run/reboot-required").exists
        assert subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", name], capture_output=True,
                              text=True, check=True).stdout.strip() == "0"


def test_faulty_node_stays_cordoned_and_tainted_with_a_held_record():
    host = _host("rolling-upgrade-node2")
    cordoned = host.file(GATE + "/cordoned")
    assert cordoned.exists
    assert "SIMULATION" in cordoned.content_string
    assert "unschedulable: true" in cordoned.content_string
    taint = yaml.safe_load(host.file(GATE + "/taint").content_string)
    assert taint["key"] == "gpufleet.io/unhealthy"
    assert taint["effect"] == "NoSchedule"
    assert taint["value"] == FAILING_CHECK
    assert taint["reason"] == "validation failed: %s:gpu3" % FAILING_CHECK
    assert not host.file(APPLIED).exists
    state = _state(host)
    assert state["state"] == "held"
    assert state["step"] == "validate"
    assert state["reason"] == "validation failed: %s:gpu3" % FAILING_CHECK
    assert state["failed_checks"] == [FAILING_CHECK + ":gpu3"]
    assert _annotation(host) == state
    assert host.file(BLACKLIST).exists


def test_fault_was_injected_only_on_node2():
    target = _host("rolling-upgrade-node2").file("/opt/gpufleet-sim/nvml/scenario.json").linked_to
    assert target.endswith("h100-ecc-volatile-uncorrectable.json")
    for name in ("rolling-upgrade-node1", "rolling-upgrade-node3"):
        target = _host(name).file("/opt/gpufleet-sim/nvml/scenario.json").linked_to
        assert target.endswith("h100-healthy.json")


def test_every_run_keeps_its_directory_and_latest_is_the_last():
    runs = _runs()
    assert len(runs) == 2, runs  # converge and idempotence (check mode writes no report)
    assert os.readlink(os.path.join(RUNS_DIR, "latest")) == runs[-1]
    for run in runs:
        summary = _summary(run)
        assert summary["run_id"] == run
        assert sorted(os.listdir(os.path.join(RUNS_DIR, run, "nodes"))) == [n + ".json" for n in NODES]


def test_converge_summary_names_upgraded_and_held_nodes():
    summary = _summary(_runs()[0])
    assert summary["simulated"] is True
    assert summary["counts"] == {"upgraded": 2, "current": 0, "held": 1, "skipped": 0, "not_reached": 0}
    assert summary["stopped"] == ""
    outcomes = {node["node"]: node for node in summary["nodes"]}
    assert outcomes["rolling-upgrade-node1"]["outcome"] == "upgraded"
    assert outcomes["rolling-upgrade-node1"]["state"] == "admitted"
    assert outcomes["rolling-upgrade-node3"]["outcome"] == "upgraded"
    held = outcomes["rolling-upgrade-node2"]
    assert held["outcome"] == "held" and held["state"] == "held" and held["step"] == "validate"
    assert held["failed_checks"] == [FAILING_CHECK + ":gpu3"]
    with open(os.path.join(RUNS_DIR, _runs()[0], "summary.md")) as handle:
        text = handle.read()
    assert "SIMULATION" in text
    held_section = text.split("## Held back")[1].split("##")[0]
    assert "rolling-upgrade-node2: validation failed: %s:gpu3 (step: validate)" % FAILING_CHECK in held_section
    upgraded_section = text.split("## Upgraded")[1].split("##")[0]
    assert "rolling-upgrade-node1" in upgraded_section and "rolling-upgrade-node3" in upgraded_section


def test_idempotence_run_left_every_node_alone():
    summary = _summary(_runs()[1])
    assert summary["counts"] == {"upgraded": 0, "current": 2, "held": 1, "skipped": 0, "not_reached": 0}
    outcomes = {node["node"]: node for node in summary["nodes"]}
    assert outcomes["rolling-upgrade-node2"]["reason"].startswith("held back by an earlier run: validation failed")
