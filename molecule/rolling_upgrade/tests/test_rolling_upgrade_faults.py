"""Fault injection: the controller dies mid-run, a package upgrade fails, a canary fails.

Runs after test_rolling_upgrade.py (converge and idempotence are done: node1 and node3 admitted,
node2 held). Each fault is a real ansible-playbook run of playbooks/rolling_upgrade.yml against
the lab containers with a new target. The controller is killed with SIGKILL
(callback_plugins/kill_controller.py, test-only) after cordon (node1), after drain (node3), in the
middle of the package upgrade (node1 again, resumed) and during validation (node3 again,
resumed); then one run over every node must carry both on. Last, a canary run whose canary's
package upgrade fails (test-only role lab_upgrade_sim) must hold it back with its holds restored
and not start the other batches.

Check mode: right after the first kill (node1 cordoned by the dead run, node2 held, node3
admitted), a --check run over every node (held ones too: rolling_upgrade_retry_held) with a new
target must change nothing on any node: the apt lists and refresh stamps (names, mtimes, sizes;
the simulated upgrade really refreshes its repository's index outside check mode), the dpkg
holds, /etc/apt (the unattended-upgrades blacklist among it), /var/lib/gpufleet (state file,
applied.json, the reboot marker, the lab gate files) and the simulated GPU scenario; and it opens
no run directory on the controller.
"""

import json
import os
import subprocess

import pytest

ROOT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
SCENARIO = os.environ["MOLECULE_SCENARIO_DIRECTORY"]
INVENTORY = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
PLAYBOOK = os.path.join(ROOT, "playbooks", "rolling_upgrade.yml")
RUNS_DIR = os.path.join(os.environ["GPUFLEET_REPORT_DIR"], "upgrades")
GATE = "/var/lib/gpufleet/gate"
STATE = "/var/lib/gpufleet/upgrade-state.json"
BLACKLIST = "/etc/apt/apt.conf.d/51gpufleet-unattended-upgrades"
NODES = ["rolling-upgrade-node1", "rolling-upgrade-node2", "rolling-upgrade-node3"]
TARGET2 = {"kubernetes": "1.31.3-lab"}
TARGET3 = {"kubernetes": "1.31.4-lab"}
IN_PROGRESS = ("planned", "cordoned", "drained", "upgrading", "validating")
# What a --check run must leave as it was, read in one command per node.
SNAPSHOT = r"""
echo '--- apt lists and stamps'; find /var/lib/apt/lists /var/lib/apt/periodic -printf '%p %T@ %s %m
' | sort
echo '--- dpkg holds'; apt-mark showhold
echo '--- /etc/apt'; find /etc/apt -printf '%p %T@ %s %m
' | sort; find /etc/apt -type f -exec md5sum {} + | sort
echo '--- /var/lib/gpufleet'; find /var/lib/gpufleet -printf '%p %T@ %s %m
' | sort
find /var/lib/gpufleet -type f -exec md5sum {} + | sort
echo '--- reboot'; ls -l --time-style=+%s /run/reboot-required 2>&1
echo '--- simulated GPUs'; readlink /opt/gpufleet-sim/nvml/scenario.json
"""


def _host(name):
    import testinfra

    return testinfra.get_host("docker://" + name)


# A node's record, gate markers and unattended-upgrades blacklist, read in one command (one docker
# exec per node instead of one per file: _node runs for every node after each of the runs).
NODE = r"""
import json, os, sys
state, gate, blacklist = sys.argv[1:4]
def read(path):
    with open(path) as handle:
        return handle.read()
print(json.dumps({
    "state": json.loads(read(state)) if os.path.exists(state) else None,
    "cordoned": os.path.exists(gate + "/cordoned"),
    "drained": os.path.exists(gate + "/drained"),
    "tainted": os.path.exists(gate + "/taint"),
    "taint": read(gate + "/taint") if os.path.exists(gate + "/taint") else "",
    "blacklist": os.path.exists(blacklist),
}))
"""


def _node(name):
    result = _host(name).run("python3 -c %s %s %s %s", NODE, STATE, GATE, BLACKLIST)
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def _snapshot():
    snapshots = {}
    for name in NODES:
        result = _host(name).run(SNAPSHOT)
        assert result.rc == 0, result.stderr
        snapshots[name] = result.stdout
    return snapshots


def _latest_summary():
    with open(os.path.join(RUNS_DIR, "latest", "summary.json")) as handle:
        return json.load(handle)


def _playbook(target, hosts=None, kill_after=None, kill_host=None, extra=None, check=False):
    env = dict(os.environ)
    variables = {"rolling_upgrade_target": target}
    variables.update(extra or {})
    if hosts:
        variables["rolling_upgrade_hosts"] = hosts
    if kill_after:
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.path.join(SCENARIO, "callback_plugins")
        env["ANSIBLE_CALLBACKS_ENABLED"] = "kill_controller"
        env["GPUFLEET_TEST_KILL_AFTER"] = kill_after
        env["GPUFLEET_TEST_KILL_HOST"] = kill_host or hosts
    proc = subprocess.run(["ansible-playbook", "-i", INVENTORY, PLAYBOOK, "-e", json.dumps(variables)]
                          + (["--check"] if check else []),
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    return {"rc": proc.returncode, "output": proc.stdout[-6000:] + proc.stderr[-3000:],
            "nodes": {name: _node(name) for name in NODES}, "summary": _latest_summary()}


@pytest.fixture(scope="module")
def runs():
    done = {}
    done["after_cordon"] = _playbook(TARGET2, "rolling-upgrade-node1", "Name the step (drain)")
    before = _snapshot()
    run_dirs = sorted(os.listdir(RUNS_DIR))
    done["check_mode"] = _playbook(TARGET3, extra={"rolling_upgrade_retry_held": True,
                                                   "rolling_upgrade_serial": 3}, check=True)
    done["check_mode"].update(before=before, after=_snapshot(), run_dirs=(run_dirs, sorted(os.listdir(RUNS_DIR))))
    done["after_drain"] = _playbook(TARGET2, "rolling-upgrade-node3", "Record the node as upgrading")
    done["mid_upgrade"] = _playbook(TARGET2, "rolling-upgrade-node1", "Simulate the package upgrade (SIMULATION)")
    done["validating"] = _playbook(TARGET2, "rolling-upgrade-node3",
                                   "Validate the node (GPU health and RDMA readiness)")
    done["resume"] = _playbook(TARGET2)
    done["canary"] = _playbook(TARGET3, extra={"rolling_upgrade_canary": 1, "lab_upgrade_sim_fail": True})
    return done


def test_killed_after_cordon_leaves_a_cordoned_record(runs):
    run = runs["after_cordon"]
    assert run["rc"] == -9, run["output"]
    node = run["nodes"]["rolling-upgrade-node1"]
    assert node["state"]["state"] == "cordoned" and node["state"]["target"] == TARGET2
    assert node["cordoned"] and not node["drained"] and not node["tainted"]
    # the summary on disk is this run's, written at its start, though no node record was written
    assert run["summary"]["target"] == TARGET2
    assert run["summary"]["not_reached"] == ["rolling-upgrade-node1"]


def test_check_mode_changes_nothing_on_any_node(runs):
    run = runs["check_mode"]
    assert run["rc"] == 0, run["output"]
    recap = run["output"][run["output"].rindex("PLAY RECAP"):]
    for name in NODES:  # every node went through the upgrade path (node2 with retry_held)
        line = [ln for ln in recap.splitlines() if ln.startswith(name)][0]
        assert "failed=0" in line and "unreachable=0" in line, line
    for name in NODES:
        assert run["after"][name] == run["before"][name], name
    assert "--- apt lists and stamps" in run["before"]["rolling-upgrade-node1"]
    assert "gpufleet-gpufleet-lab.list-stamp" in run["before"]["rolling-upgrade-node1"]  # refreshed outside --check
    assert "upgrade-state.json" in run["before"]["rolling-upgrade-node1"]
    before_dirs, after_dirs = run["run_dirs"]
    assert after_dirs == before_dirs  # no run directory, "latest" unchanged


def test_killed_after_drain_leaves_a_drained_record(runs):
    run = runs["after_drain"]
    assert run["rc"] == -9, run["output"]
    node = run["nodes"]["rolling-upgrade-node3"]
    assert node["state"]["state"] == "drained"
    assert node["cordoned"] and node["drained"] and not node["tainted"]


def test_killed_mid_package_upgrade_resumed_node1_with_its_holds_lifted(runs):
    run = runs["mid_upgrade"]
    assert run["rc"] == -9, run["output"]
    node = run["nodes"]["rolling-upgrade-node1"]
    assert node["state"]["state"] == "upgrading"
    assert node["state"]["resumed_from"]["state"] == "cordoned"  # recognised as gpufleet's cordon
    assert node["cordoned"] and not node["tainted"]
    assert not node["blacklist"]  # the dead run had lifted the holds


def test_killed_during_validation_leaves_a_validating_record(runs):
    run = runs["validating"]
    assert run["rc"] == -9, run["output"]
    node = run["nodes"]["rolling-upgrade-node3"]
    assert node["state"]["state"] == "validating"
    assert node["state"]["resumed_from"]["state"] == "drained"
    assert node["blacklist"]  # put back before validation


def test_rerun_carries_every_node_on(runs):
    run = runs["resume"]
    assert run["rc"] == 0, run["output"]
    nodes = run["nodes"]
    for name in ("rolling-upgrade-node1", "rolling-upgrade-node3"):
        assert nodes[name]["state"]["state"] == "admitted", name
        assert nodes[name]["state"]["target"] == TARGET2
        assert not nodes[name]["cordoned"] and not nodes[name]["tainted"]
    outcomes = {n["node"]: n for n in run["summary"]["nodes"]}
    assert outcomes["rolling-upgrade-node1"]["resumed_from"]["state"] == "upgrading"
    assert outcomes["rolling-upgrade-node3"]["resumed_from"]["state"] == "validating"
    assert outcomes["rolling-upgrade-node2"]["outcome"] == "held"  # held by converge, left alone
    assert run["summary"]["counts"]["upgraded"] == 2


def test_failed_package_upgrade_in_the_canary_restores_holds_and_stops_the_run(runs):
    run = runs["canary"]
    assert run["rc"] != 0, run["output"]
    assert "stopped: canary not admitted: rolling-upgrade-node1" in run["output"]
    node1 = run["nodes"]["rolling-upgrade-node1"]
    assert node1["state"]["state"] == "held"
    assert node1["state"]["step"] == "upgrade kubernetes"
    assert "simulated package upgrade failure" in node1["state"]["reason"]
    assert node1["cordoned"] and node1["tainted"] and "value: upgrade-failed" in node1["taint"]
    assert node1["blacklist"]  # holds restored by the rescue
    summary = run["summary"]
    assert summary["stopped"].startswith("canary not admitted: rolling-upgrade-node1")
    assert summary["not_reached"] == ["rolling-upgrade-node2", "rolling-upgrade-node3"]
    node3 = run["nodes"]["rolling-upgrade-node3"]
    assert node3["state"]["target"] == TARGET2 and node3["state"]["state"] == "admitted"  # not started


@pytest.mark.parametrize("name", NODES)
def test_in_the_end_every_node_is_admitted_or_held_with_a_record_and_holds(runs, name):
    node = runs["canary"]["nodes"][name]
    assert node["state"]["state"] in ("admitted", "held")
    if node["cordoned"]:
        assert node["state"]["state"] == "held" or node["state"]["state"] in IN_PROGRESS
    assert node["blacklist"]


def test_every_run_kept_its_directory(runs):
    dirs = sorted(d for d in os.listdir(RUNS_DIR) if d != "latest")
    assert len(dirs) == 2 + len(runs) - 1  # converge, idempotence, each run but the --check one
