"""node_health_agent on a systemd container with the dgx-h100 fixture and the fake NVML: timer
enabled; a healthy node; a GPU fallen off the bus (immediate check gpu.count) turns it unhealthy in
one cycle; cleared, it is healthy again after two cycles; files, metrics and one journal line per
state change."""

import json

SCENARIOS = "/opt/fake-nvml/scenarios"


def cycle(host):
    host.run_expect([0], "systemctl start gpufleet-health-agent.service")
    return json.loads(host.file("/var/lib/gpufleet/health.json").content_string)


def scenario(host, name):
    host.run_expect([0], "ln -sfn %s %s/scenario.json" % (name, SCENARIOS))


def test_timer_enabled_and_active(host):
    timer = host.service("gpufleet-health-agent.timer")
    assert timer.is_enabled and timer.is_running


def test_fault_flips_the_node_in_one_cycle_and_clears_after_two(host):
    host.run("rm -f /var/lib/gpufleet/health.json /var/lib/gpufleet/agent-state.json")
    scenario(host, "h100-healthy.json")
    health = cycle(host)
    assert health["healthy"] is True and health["agent"]["healthy"] is True, health["msg"]
    assert health["summary"]["fail"] == 0 and len(health["checks"]) > 100
    prom = host.file("/var/lib/prometheus/node-exporter/gpufleet.prom").content_string
    assert "gpufleet_node_healthy 1\n" in prom

    scenario(host, "h100-gpu-fell-off-bus.json")
    health = cycle(host)
    assert health["agent"]["healthy"] is False
    assert health["agent"]["failing"][0]["id"] == "gpu.count"
    prom = host.file("/var/lib/prometheus/node-exporter/gpufleet.prom").content_string
    assert "gpufleet_node_healthy 0\n" in prom
    assert 'gpufleet_check_status{id="gpu.count",target="node",status="fail"} 2' in prom

    scenario(host, "h100-healthy.json")
    assert cycle(host)["agent"]["healthy"] is False  # one passing cycle is not enough
    assert cycle(host)["agent"]["healthy"] is True
    journal = host.check_output("journalctl -u gpufleet-health-agent.service --no-pager -o cat")
    assert "gpufleet-health-agent: node unhealthy: gpu.count[node]" in journal
    assert journal.count("node unhealthy") == 1 and "node healthy again" in journal


def test_the_installed_configuration_checks_clean(host):
    out = host.run("/usr/bin/python3 -s /opt/gpufleet/agent/gpufleet-health-agent --check-config /etc/gpufleet/agent.json")
    assert out.rc == 0, out.stdout
    config = json.loads(host.file("/etc/gpufleet/agent.json").content_string)
    assert config["node_validate"]["gpu"]["expected_count"] == 8
    assert config["hysteresis"]["fail_after"] == 3
