"""The check agent.health of playbooks/validate.yml (filter agent_health_check): a node's
health.json, written by the real agent cycle on the DGX H100 fixture with the fake NVML, read back
through what ansible.builtin.slurp registers (base64 content, or a failed read)."""

import base64
import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import (
    agent_health_check, agent_health_checks, agent_health_failing)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import build_results
from nvml_scenarios import NODES, fake_with
from runners import ScriptedRunner

NOW = 1700000000.0
OPTIONS = {"root": os.path.join(NODES, "dgx-h100"),
           "gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}
# what slurp registers for a missing file (ansible.builtin.slurp, ansible-core 2.19)
MISSING = {"failed": True, "msg": "File not found: /var/lib/gpufleet/health.json"}


def published(tmp_path, scenario):
    """The slurp result of the health.json one real agent cycle writes at NOW."""
    state = tmp_path / scenario
    state.mkdir()
    config = {"node_name": "dgx-1", "state_dir": str(state), "node_validate": OPTIONS}
    agent.Agent(config, log=lambda line: None, runner=ScriptedRunner(),
                nvml=NvmlAdapter(fake_with(scenario)), clock=lambda: NOW).cycle()
    return slurped((state / "health.json").read_bytes())


def slurped(data):
    return {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64", "source": "health.json"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("agent")
    return {"healthy": published(base, "h100-healthy"), "off_bus": published(base, "h100-gpu-fell-off-bus")}


def test_a_fresh_healthy_result_passes_and_names_its_age_and_cycle(results):
    check = agent_health_check(results["healthy"], now=NOW + 30)
    assert (check["id"], check["target"], check["status"]) == ("agent.health", "node", "pass")
    assert check["message"] == "the agent publishes the node healthy (30 s old, cycle 1)"


def test_a_node_published_unhealthy_fails_with_its_first_failing_check(results):
    check = agent_health_check(results["off_bus"], now=NOW + 5)
    assert check["status"] == "fail"
    assert "publishes the node unhealthy (5 s old, cycle 1;" in check["message"]
    assert "): gpu.count[node]: " in check["message"]


@pytest.mark.parametrize("interval, age, status", [
    (60, 300, "pass"), (60, 301, "fail"),       # current for 3 intervals, at least 300 s
    (200, 600, "pass"), (200, 601, "fail"),
    (60, -60, "pass"), (60, -61, "fail"),       # dated in the future beyond 60 s: unknown, not current
])
def test_a_stale_or_future_dated_result_fails(results, interval, age, status):
    check = agent_health_check(results["healthy"], now=NOW + age, interval=interval)
    assert check["status"] == status, check
    if status == "fail":
        assert ("s old, more than" if age > 0 else "in the future") in check["message"]
        assert "systemctl status gpufleet-health-agent" in check["message"]


def test_an_absent_result_fails_where_the_agent_belongs_and_skips_while_this_run_installs_it():
    check = agent_health_check(MISSING, now=NOW)
    assert check["status"] == "fail" and "not installed yet or never published" in check["message"]
    # the way out is named: install the agent, or the variable that leaves the check out
    assert "gpufleet.cluster.health_agent" in check["message"] and "gpufleet_health_agent=false" in check["message"]
    # named as an installed collection's user runs it (FQCN), not as a path in a checkout
    assert "playbooks/health_agent.yml" not in check["message"]
    assert agent_health_check(MISSING, installing=True, now=NOW)["status"] == "skip"
    # the read was skipped (the agent is not expected): absent too
    assert agent_health_check({"skipped": True, "changed": False}, now=NOW)["status"] == "fail"


def test_no_agent_expected_skips_with_the_reason():
    check = agent_health_check({"skipped": True}, expected=False, reason="opted out: gpufleet_health_agent is false")
    assert check["status"] == "skip" and check["message"] == "opted out: gpufleet_health_agent is false"


@pytest.mark.parametrize("read, message", [
    ({"failed": True, "msg": "Permission denied"}, "cannot read /var/lib/gpufleet/health.json: Permission denied"),
    (slurped(b"{\"checks\": ["), "is not the agent's JSON result"),
    (slurped(b"\xff\xfe"), "is not the agent's JSON result"),
    (slurped(json.dumps({"checks": [], "generated_at": NOW}).encode()), "has no agent verdict"),
    (slurped(json.dumps({"agent": {"healthy": "yes"}, "generated_at": NOW}).encode()), "has no agent verdict"),
    (slurped(json.dumps({"agent": {"healthy": True}}).encode()), "no usable time stamp"),
])
def test_an_unreadable_or_foreign_result_fails_closed(read, message):
    check = agent_health_check(read, now=NOW)
    assert check["status"] == "fail" and message in check["message"], check


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="registered result of ansible.builtin.slurp"):
        agent_health_check("health.json")
    with pytest.raises(AnsibleFilterError, match="interval must be"):
        agent_health_check(slurped(json.dumps({"agent": {"healthy": True}, "generated_at": NOW}).encode()),
                           interval="often", now=NOW)


def test_inside_a_site_run_a_result_that_is_not_current_warns_and_an_unhealthy_one_still_fails(results):
    stale = agent_health_check(results["healthy"], installing=True, now=NOW + 301)
    assert stale["status"] == "warn" and stale["message"].endswith("(re)starts the agent after validation")
    assert agent_health_check({"failed": True, "msg": "Permission denied"}, installing=True, now=NOW)["status"] == "warn"
    assert agent_health_check(results["off_bus"], installing=True, now=NOW)["status"] == "fail"
    assert agent_health_check(results["healthy"], installing=True, now=NOW)["status"] == "pass"


def test_the_play_gets_one_check_per_host_where_the_agent_belongs_or_why_not(results):
    hostvars = {
        "dgx-1": {"gpufleet_node_validation": {"agent_health_file": results["healthy"]}},
        "dgx-2": {"gpufleet_node_validation": {"agent_health_file": MISSING}, "node_health_agent_interval": 200},
        "dgx-3": {"gpufleet_health_agent": False, "gpufleet_node_validation": {"agent_health_file": {"skipped": True}}},
        "dgx-4": {"gpufleet_health_agent": "false"},  # -e gpufleet_health_agent=false is a string
        "cp-1": {},
    }
    checks = agent_health_checks(sorted(hostvars), hostvars, ["dgx-1", "dgx-2", "dgx-3", "dgx-4"], now=NOW + 400)
    assert {host: c[0]["status"] for host, c in checks.items()} == {
        "dgx-1": "fail", "dgx-2": "fail", "dgx-3": "skip", "dgx-4": "skip", "cp-1": "skip"}
    assert "400 s old, more than 300 s" in checks["dgx-1"][0]["message"]
    assert "opted out (gpufleet_health_agent is false)" in checks["dgx-3"][0]["message"]
    assert "not in group gpu_nodes" in checks["cp-1"][0]["message"]
    # dgx-1 with its own interval: current for 3 intervals
    hostvars["dgx-1"]["node_health_agent_interval"] = 200
    assert agent_health_checks(["dgx-1"], hostvars, ["dgx-1"], now=NOW + 400)["dgx-1"][0]["status"] == "pass"
    site = agent_health_checks(["dgx-2"], hostvars, ["dgx-2"], installing=True, now=NOW)
    assert site["dgx-2"][0]["status"] == "skip"


def test_bad_play_input_is_named():
    with pytest.raises(AnsibleFilterError, match="gpufleet_health_agent must be true or false, got 'maybe'"):
        agent_health_checks(["n"], {"n": {"gpufleet_health_agent": "maybe"}}, ["n"])
    with pytest.raises(AnsibleFilterError, match="'x' is not in hostvars"):
        agent_health_checks(["x"], {}, [])
    with pytest.raises(AnsibleFilterError, match="agent_hosts must be a list"):
        agent_health_checks(["n"], {"n": {}}, "gpu_nodes")


def test_record_checks_takes_the_checks_and_the_play_fails_the_hosts_by_their_own_fail_on(results):
    def read(result, **more):
        return dict({"gpufleet_node_validation": {"agent_health_file": result}}, **more)

    hostvars = {"dgx-1": read(results["off_bus"]),
                "dgx-2": read(results["off_bus"], gpufleet_validate_fail_on="never"),
                "dgx-3": read(results["healthy"]),
                "dgx-4": read(results["healthy"], gpufleet_validate_fail_on="warn")}
    checks = agent_health_checks(sorted(hostvars), hostvars, sorted(hostvars), now=NOW + 5)
    for host, host_checks in checks.items():  # what record_checks (option hosts) validates
        _, error = build_results(host_checks, "hosts[%s]" % host)
        assert error is None, error
    assert agent_health_failing(checks, hostvars) == ["dgx-1"]
    # a site run 400 s later: dgx-3's and dgx-4's results are stale (warn), which fails dgx-4's fail_on
    # warn only; dgx-1's and dgx-2's are still current (interval 200: 600 s) and unhealthy
    hostvars["dgx-1"]["node_health_agent_interval"] = hostvars["dgx-2"]["node_health_agent_interval"] = 200
    site = agent_health_checks(sorted(hostvars), hostvars, sorted(hostvars), installing=True, now=NOW + 400)
    assert [site[h][0]["status"] for h in sorted(site)] == ["fail", "fail", "warn", "warn"]
    assert agent_health_failing(site, hostvars) == ["dgx-1", "dgx-4"]
    with pytest.raises(AnsibleFilterError, match="host dgx-1: fail_on must be one of"):
        agent_health_failing(checks, {"dgx-1": {"gpufleet_validate_fail_on": "sometimes"}})
    with pytest.raises(AnsibleFilterError, match="expected {host: \\[checks\\]}"):
        agent_health_failing([], hostvars)


def test_node_validate_reads_health_json_in_its_own_run_and_fails_closed(tmp_path, results):
    """validate.yml reads health.json in node_validate's run (option agent_health_file, no task of
    its own per node): what it returns is what agent_health_checks reads, and every way the read can
    go wrong is a failing agent.health, never a pass."""
    import base64
    import os

    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
        AGENT_HEALTH_MAX_BYTES, read_agent_health)

    path = tmp_path / "health.json"
    path.write_bytes(base64.b64decode(results["healthy"]["content"]))

    def check(read, **kwargs):
        hostvars = {"dgx-1": {"gpufleet_node_validation": {"agent_health_file": read}}}
        return agent_health_checks(["dgx-1"], hostvars, ["dgx-1"], now=NOW + 5, **kwargs)["dgx-1"][0]

    assert check(read_agent_health(str(path)))["status"] == "pass"
    absent = read_agent_health(str(tmp_path / "none.json"))
    assert absent["failed"] and absent["msg"].startswith("file not found")
    assert check(absent)["status"] == "fail" and "not installed" in check(absent)["message"]
    assert check(absent, installing=True)["status"] == "skip"  # site.yml installs it after validation
    directory = read_agent_health(str(tmp_path))  # EISDIR: unreadable, not absent
    assert directory["failed"] and check(directory)["status"] == "fail"
    assert "cannot read" in check(directory)["message"]
    if os.geteuid() != 0:  # root reads a mode-0000 file
        path.chmod(0)
        assert check(read_agent_health(str(path)))["status"] == "fail"
        path.chmod(0o600)
    path.write_bytes(b"{" * (AGENT_HEALTH_MAX_BYTES + 1))
    big = read_agent_health(str(path))
    assert big["failed"] and "larger than" in big["msg"] and check(big)["status"] == "fail"
    path.write_bytes(b"\xff\xfe not json")
    assert check(read_agent_health(str(path)))["status"] == "fail"
    # node_validate ran without the option (no agent belongs here, or an older playbook): skip/fail as before
    assert agent_health_checks(["cp-1"], {"cp-1": {"gpufleet_node_validation": {}}}, [], now=NOW)["cp-1"][0][
        "status"] == "skip"
