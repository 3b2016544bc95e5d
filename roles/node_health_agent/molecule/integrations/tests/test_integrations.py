"""node_health_agent with real Slurm (Debian slurm-wlm 22.05: slurmctld, slurmd, munge) and Debian's
prometheus-node-exporter on one systemd container.

Slurm: a GPU fallen off the bus (immediate check gpu.count) drains the node with the check id as the
reason, from the agent's cycle and from slurmd's HealthCheckProgram alone; clearing it resumes the
node; a node drained by an admin is never resumed nor re-labelled. node_exporter: its /metrics on
127.0.0.1:9100 carries the agent's textfile, parsed (gpufleet_check_status, gpufleet_node_healthy)."""

import json
import re
import time

SCENARIOS = "/opt/fake-nvml/scenarios"
CONFIG = "/etc/gpufleet/agent.json"
# A sample of the Prometheus text format: name, optional {labels}, value.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def node_name(host):
    return host.check_output("hostname")


def cycle(host):
    host.run_expect([0], "systemctl start gpufleet-health-agent.service")
    return json.loads(host.file("/var/lib/gpufleet/health.json").content_string)


def scenario(host, name):
    host.run_expect([0], "ln -sfn %s %s/scenario.json" % (name, SCENARIOS))


def reset(host):
    """Healthy scenario, no agent state, node resumed (whoever drained it)."""
    scenario(host, "h100-healthy.json")
    host.run("rm -f /var/lib/gpufleet/health.json /var/lib/gpufleet/agent-state.json")
    if "DRAIN" in slurm_node(host)["State"]:
        host.run_expect([0], "scontrol update NodeName=%s State=RESUME" % node_name(host))


def slurm_node(host):
    """State and Reason of `scontrol show node <me> -o` (the Reason runs up to the next field)."""
    line = host.check_output("scontrol show node %s -o" % node_name(host))
    state = re.search(r"\bState=(\S+)", line).group(1)
    reason = re.search(r"\bReason=(.*?)(?:\s+\w+=|$)", line)
    return {"State": state, "Reason": reason.group(1) if reason else ""}


def wait_for(what, probe, timeout=40):
    """``probe()`` until it returns a true value (slurmd's health check runs every 5 s)."""
    deadline = time.time() + timeout
    while True:
        value = probe()
        if value or time.time() > deadline:
            assert value, "%s: not within %d s" % (what, timeout)
            return value
        time.sleep(1)


def drained(host):
    node = slurm_node(host)
    return node if "DRAIN" in node["State"] else None


def idle(host):
    node = slurm_node(host)
    return node if node["State"] == "IDLE" else None


def scrape(host):
    """Samples of node_exporter's /metrics: [(name, {labels}, value)]."""
    text = host.check_output("curl -sf http://127.0.0.1:9100/metrics")
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, "unparsable metrics line %r" % line
        samples.append((match.group(1), dict(LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return samples


def one(samples, name, **labels):
    found = [value for sample, have, value in samples
             if sample == name and all(have.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def hc_journal(host, since):
    return host.check_output("journalctl -t gpufleet-slurm-health-check --since @%d --no-pager -o cat" % since)


def set_cycle_slurm(host, enabled):
    host.run_expect([0], "python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c[\"slurm\"][\"enabled\"] = %s; "
                         "json.dump(c, open(sys.argv[1], \"w\"))' %s" % (enabled, CONFIG))


def test_slurm_and_node_exporter_run(host):
    for unit in ("munge", "slurmctld", "slurmd", "prometheus-node-exporter"):
        assert host.service(unit).is_running, unit
    listening = host.check_output("ss -Hltn")
    assert "127.0.0.1:9100" in listening and "*:9100" not in listening and "0.0.0.0:9100" not in listening


def test_node_exporter_serves_the_agents_metrics(host):
    reset(host)
    health = cycle(host)
    samples = scrape(host)
    assert one(samples, "gpufleet_node_healthy") == 1
    status = [(labels, value) for name, labels, value in samples if name == "gpufleet_check_status"]
    assert len(status) == len(health["checks"]) > 100
    assert {(c["id"], c["target"]) for c in health["checks"]} == {(s["id"], s["target"]) for s, _v in status}
    assert all(value == 0 for _labels, value in status)
    assert one(samples, "gpufleet_agent_last_run_timestamp_seconds") >= health["generated_at"]
    assert one(samples, "node_textfile_scrape_error") == 0

    scenario(host, "h100-gpu-fell-off-bus.json")
    cycle(host)
    samples = scrape(host)
    assert one(samples, "gpufleet_node_healthy") == 0
    assert one(samples, "gpufleet_check_status", id="gpu.count", target="node", status="fail") == 2
    assert one(samples, "gpufleet_check_failing", id="gpu.count", target="node") == 1
    reset(host)


def test_gpu_fault_drains_the_node_with_the_check_id_and_clearing_resumes_it(host):
    reset(host)
    cycle(host)
    # slurmd may not have answered slurmctld yet (State IDLE+NOT_RESPONDING right after start-up)
    wait_for("the node idle and responding", lambda: idle(host))
    scenario(host, "h100-gpu-fell-off-bus.json")
    assert cycle(host)["agent"]["failing"][0]["id"] == "gpu.count"
    node = slurm_node(host)
    assert "DRAIN" in node["State"] and node["Reason"].startswith("gpufleet: gpu.count[node]"), node
    assert "gpufleet: gpu.count[node]" in host.check_output("sinfo -R -h -o '%%E|%%N' -n %s" % node_name(host))

    scenario(host, "h100-healthy.json")
    cycle(host)
    assert "DRAIN" in slurm_node(host)["State"]  # recover_after 2: one passing cycle is not enough
    cycle(host)
    node = wait_for("resumed", lambda: idle(host))
    assert node["Reason"] == "", node


def test_slurmd_health_check_program_alone_drains_and_resumes(host):
    """The agent's cycle no longer talks to Slurm: slurmd's HealthCheckProgram acts on health.json."""
    reset(host)
    set_cycle_slurm(host, False)
    try:
        cycle(host)
        scenario(host, "h100-gpu-fell-off-bus.json")
        since = int(time.time())
        cycle(host)
        node = wait_for("drained by slurmd's HealthCheckProgram", lambda: drained(host))
        assert node["Reason"].startswith("gpufleet: gpu.count[node]"), node
        assert "drain: gpufleet: gpu.count[node]" in hc_journal(host, since)

        scenario(host, "h100-healthy.json")
        cycle(host)
        cycle(host)
        node = wait_for("resumed by slurmd's HealthCheckProgram", lambda: idle(host))
        assert node["Reason"] == ""
        assert "resume (was gpufleet: gpu.count[node]" in hc_journal(host, since)
    finally:
        set_cycle_slurm(host, True)


def test_a_node_drained_by_an_admin_is_left_alone(host):
    reset(host)
    cycle(host)
    host.run_expect([0], "scontrol update NodeName=%s State=DRAIN Reason='admin: bad dimm'" % node_name(host))
    scenario(host, "h100-gpu-fell-off-bus.json")
    since = int(time.time())
    assert cycle(host)["agent"]["healthy"] is False
    wait_for("HealthCheckProgram ran on the admin-drained node", lambda: "left alone" in hc_journal(host, since))
    node = slurm_node(host)
    assert "DRAIN" in node["State"] and node["Reason"].startswith("admin: bad dimm"), node

    scenario(host, "h100-healthy.json")
    cycle(host)
    since = int(time.time())
    assert cycle(host)["agent"]["healthy"] is True
    # a node in someone else's hands is "left alone" whatever its health (agent_slurm.slurm_commands)
    wait_for("HealthCheckProgram ran on the healthy admin-drained node",
             lambda: "left alone: State=" in hc_journal(host, since))
    node = slurm_node(host)
    assert "DRAIN" in node["State"] and node["Reason"].startswith("admin: bad dimm"), node
    reset(host)
