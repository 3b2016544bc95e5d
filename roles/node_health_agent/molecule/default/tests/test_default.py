"""node_health_agent on a systemd container with the dgx-h100 fixture and the fake NVML. The
verifier runs twice: after converge (default mode, daemon, every 10 s) and after side_effect
(switched to timer mode, every 600 s); each test names the mode it needs.

Both modes: exactly one scheduler (daemon mode: the resident service active and enabled, no
timer unit; timer mode: the timer, no resident process, the oneshot not enabled); the installed
configuration checks clean. Daemon mode: the cycles advance by themselves in the same process,
and a GPU fallen off the bus injected while it runs is published by its next cycle. Timer mode:
a healthy node; the fault turns it unhealthy in one cycle; cleared, healthy again after two
cycles; files, metrics and one journal line per state change."""

import json
import re
import time

import pytest

SCENARIOS = "/opt/fake-nvml/scenarios"
SERVICE = "gpufleet-health-agent.service"
TIMER = "gpufleet-health-agent.timer"
HEALTH = "/var/lib/gpufleet/health.json"


def mode(host):
    unit = host.file("/etc/systemd/system/" + SERVICE).content_string
    return "daemon" if "Type=notify" in unit else "timer"


def needs(host, wanted):
    if mode(host) != wanted:
        pytest.skip("runs in %s mode (the verifier runs once per mode: converge daemon, side_effect timer)"
                    % wanted)


def show(host, unit, *props):
    out = host.check_output("systemctl show %s %s" % (unit, " ".join("-p " + p for p in props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def health(host):
    return json.loads(host.file(HEALTH).content_string)


def unhealthy(host):
    result = health(host)
    return None if result["agent"]["healthy"] else result


def cycle(host):
    host.run_expect([0], "systemctl start " + SERVICE)
    return health(host)


def scenario(host, name):
    host.run_expect([0], "ln -sfn %s %s/scenario.json" % (name, SCENARIOS))


def wait_for(what, probe, timeout):
    deadline = time.time() + timeout
    while True:
        value = probe()
        if value or time.time() > deadline:
            assert value, "%s: not within %d s" % (what, timeout)
            return value
        time.sleep(0.5)


def test_exactly_one_scheduler(host):
    service = show(host, SERVICE, "ActiveState", "UnitFileState")
    resident = host.run("pgrep -f -- 'gpufleet-health-agen[t] --loop'")  # [t]: not the shell running pgrep
    if mode(host) == "daemon":
        assert service == {"ActiveState": "active", "UnitFileState": "enabled"}
        assert resident.rc == 0 and len(resident.stdout.split()) == 1, resident.stdout
        assert not host.file("/etc/systemd/system/" + TIMER).exists
        assert show(host, TIMER, "LoadState", "ActiveState") == {"LoadState": "not-found", "ActiveState": "inactive"}
    else:
        timer = host.service(TIMER)
        assert timer.is_enabled and timer.is_running
        # a oneshot is activating while a cycle runs, never active; no resident agent left
        assert service["ActiveState"] in ("inactive", "activating") and service["UnitFileState"] == "static"
        assert resident.rc == 1, resident.stdout
        assert not host.file("/etc/systemd/system/multi-user.target.wants/" + SERVICE).exists


def test_daemon_cycles_advance_and_a_fault_is_published_by_the_next_cycle(host):
    """One wait (at most two 10 s cycles): the fault injected while the agent runs is published by
    the same process, in a later cycle than the healthy result read before."""
    needs(host, "daemon")
    pid = show(host, SERVICE, "MainPID")["MainPID"]
    before = health(host)
    assert before["agent"]["healthy"] is True, before["agent"]
    scenario(host, "h100-gpu-fell-off-bus.json")
    try:
        faulty = wait_for("the fault published", lambda: unhealthy(host), 25)
    finally:
        scenario(host, "h100-healthy.json")
    # the cycle running at the switch may have read the healthy scenario; the next periodic one may
    # not; a targeted cycle of the fast probe (its NVML query every 0.5 s) may come between them and
    # counts as a cycle too
    assert 1 <= faulty["cycle"] - before["cycle"] <= 3 and faulty["agent"]["failing"][0]["id"] == "gpu.count"
    # by the second periodic slot at the latest, in the same process (resident, not restarted)
    elapsed = faulty["generated_at"] - before["generated_at"]
    assert 0 < elapsed <= 2 * 10 + 2, elapsed
    assert show(host, SERVICE, "MainPID")["MainPID"] == pid
    # systemd's status is the last cycle's: this one, or a later one (the fast probe sees the GPU
    # missing from NVML once it holds NVML again after the cycle and runs a targeted cycle)
    status = re.match(r"cycle ([0-9]+): unhealthy: gpu\.count\[node\]", show(host, SERVICE, "StatusText")["StatusText"])
    assert status and int(status.group(1)) >= faulty["cycle"], show(host, SERVICE, "StatusText")
    journal = host.check_output("journalctl -u %s --no-pager -o cat" % SERVICE)
    assert "gpufleet-health-agent: resident, a cycle every 10 s" in journal
    assert "gpufleet-health-agent: node unhealthy: gpu.count[node]" in journal


def test_fault_flips_the_node_in_one_cycle_and_clears_after_two(host):
    needs(host, "timer")
    since = host.check_output("date +%s")
    host.run("rm -f /var/lib/gpufleet/health.json /var/lib/gpufleet/agent-state.json")
    scenario(host, "h100-healthy.json")
    result = cycle(host)
    assert result["healthy"] is True and result["agent"]["healthy"] is True, "%s\n%s\n%s" % (
        result["msg"], host.run("systemctl show -p Environment -p ExecStart " + SERVICE).stdout,
        host.run("journalctl -n 30 --no-pager -o short-precise").stdout)
    assert result["summary"]["fail"] == 0 and len(result["checks"]) > 100
    prom = host.file("/var/lib/prometheus/node-exporter/gpufleet.prom").content_string
    assert "gpufleet_node_healthy 1\n" in prom

    scenario(host, "h100-gpu-fell-off-bus.json")
    result = cycle(host)
    assert result["agent"]["healthy"] is False
    assert result["agent"]["failing"][0]["id"] == "gpu.count"
    prom = host.file("/var/lib/prometheus/node-exporter/gpufleet.prom").content_string
    assert "gpufleet_node_healthy 0\n" in prom
    assert 'gpufleet_check_status{id="gpu.count",target="node",status="fail"} 2' in prom

    scenario(host, "h100-healthy.json")
    assert cycle(host)["agent"]["healthy"] is False  # one passing cycle is not enough
    assert cycle(host)["agent"]["healthy"] is True
    journal = host.check_output("journalctl -u %s --since @%s --no-pager -o cat" % (SERVICE, since))
    assert "gpufleet-health-agent: node unhealthy: gpu.count[node]" in journal
    assert journal.count("node unhealthy") == 1 and "node healthy again" in journal


def test_the_installed_configuration_checks_clean(host):
    out = host.run("/usr/bin/python3 -s /opt/gpufleet/agent/gpufleet-health-agent --check-config /etc/gpufleet/agent.json")
    assert out.rc == 0, out.stdout
    config = json.loads(host.file("/etc/gpufleet/agent.json").content_string)
    assert config["node_validate"]["gpu"]["expected_count"] == 8
    assert config["hysteresis"]["fail_after"] == 3
    assert config["interval"] == (10 if mode(host) == "daemon" else 600)


MODULE_UTILS = "/opt/gpufleet/agent/ansible_collections/gpufleet/cluster/plugins/module_utils"


def test_the_flat_layouts_files_are_gone_and_nothing_outside_touched(host):
    # prepare.yml seeded an agent of the flat layout (files beside the wings of the same name, a
    # stale file in a wing, symlinks out of the deploy directory, Python's cache).
    for stale in ("agent_kube.py", "agent.py", "gpu.py", "gpu/old_gpu_helper.py", "linked_dir",
                  "linked_file.py"):
        assert not host.file(MODULE_UTILS + "/" + stale).exists, stale
    for kept in ("agent/agent.py", "agent/agent_kube.py", "gpu/__init__.py", "gpu/gpu.py",
                 "__pycache__/gpu.cpython-311.pyc"):
        assert host.file(MODULE_UTILS + "/" + kept).is_file, kept
    assert host.file("/srv/outside-deploy-dir").is_directory
    assert host.file("/srv/outside-deploy-dir/keep.py").is_file
    top = host.check_output("find %s -mindepth 1 -maxdepth 1 -printf '%%f\\n'" % MODULE_UTILS).split()
    assert sorted(top) == ["__pycache__", "agent", "core", "gpu", "health", "kube", "rdma", "slurm",
                           "tuning"], top
