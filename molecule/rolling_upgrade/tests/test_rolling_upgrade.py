"""Verify the health-gated rolling upgrade in the lab (gate backend "lab": marker files).

node1 and node3 passed validation: released (no cordon/taint markers) and recorded as upgraded.
node2's simulated GPU turned unhealthy during the upgrade: still cordoned, tainted with the
failing check id, not recorded as upgraded, and named with its reason in the run summary.
"""

import json
import os

import pytest
import yaml

GATE = "/var/lib/gpufleet/gate"
APPLIED = "/var/lib/gpufleet/upgrade/applied.json"
FAILING_CHECK = "gpu.ecc.volatile_uncorrectable"
SUMMARY_DIR = os.path.join(os.environ["GPUFLEET_REPORT_DIR"], "rolling-upgrade")
FINGERPRINT = {"components": [], "target": {"driver": "580.95.05"}}


def _host(name):
    import testinfra

    return testinfra.get_host("docker://" + name)


@pytest.mark.parametrize("name", ["rolling-upgrade-node1", "rolling-upgrade-node3"])
def test_healthy_nodes_are_released(name):
    host = _host(name)
    assert not host.file(GATE + "/cordoned").exists
    assert not host.file(GATE + "/drained").exists
    assert not host.file(GATE + "/taint").exists
    applied = host.file(APPLIED)
    assert applied.exists
    assert json.loads(applied.content_string) == FINGERPRINT


def test_faulty_node_stays_cordoned_and_tainted():
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


def test_fault_was_injected_only_on_node2():
    target = _host("rolling-upgrade-node2").file("/opt/gpufleet-sim/nvml/scenario.json").linked_to
    assert target.endswith("h100-ecc-volatile-uncorrectable.json")
    for name in ("rolling-upgrade-node1", "rolling-upgrade-node3"):
        target = _host(name).file("/opt/gpufleet-sim/nvml/scenario.json").linked_to
        assert target.endswith("h100-healthy.json")


def test_summary_names_upgraded_and_held_nodes():
    with open(os.path.join(SUMMARY_DIR, "summary.json")) as handle:
        summary = json.load(handle)
    assert summary["simulated"] is True
    assert summary["counts"] == {"upgraded": 2, "current": 0, "held": 1, "skipped": 0, "not_reached": 0}
    outcomes = {node["node"]: node for node in summary["nodes"]}
    assert outcomes["rolling-upgrade-node1"]["outcome"] == "upgraded"
    assert outcomes["rolling-upgrade-node3"]["outcome"] == "upgraded"
    held = outcomes["rolling-upgrade-node2"]
    assert held["outcome"] == "held"
    assert held["failed_checks"] == [FAILING_CHECK + ":gpu3"]
    with open(os.path.join(SUMMARY_DIR, "summary.md")) as handle:
        text = handle.read()
    assert "SIMULATION" in text
    held_section = text.split("## Held back")[1].split("##")[0]
    assert "rolling-upgrade-node2: validation failed: %s:gpu3" % FAILING_CHECK in held_section
    upgraded_section = text.split("## Upgraded")[1].split("##")[0]
    assert "rolling-upgrade-node1" in upgraded_section and "rolling-upgrade-node3" in upgraded_section
