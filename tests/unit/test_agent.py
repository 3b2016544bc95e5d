"""Node health agent (plugins/module_utils/agent/agent.py, docs/contracts.md "Node health agent"):
the same checks as node_validate, hysteresis, atomic writes, the Prometheus textfile, and bad
input (unknown check id, missing textfile directory, unreadable state) reported in the journal
with the last good result kept."""

import json
import re
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import state_files
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
from nvml_scenarios import NODES, fake_with
from runners import ScriptedRunner

DGX = os.path.join(NODES, "dgx-h100")
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}
SETTINGS, _ = agent.hysteresis_settings({})


def check(check_id, status, target="node", message="m"):
    return {"id": check_id, "target": target, "status": status, "message": message}


def run_steps(outcomes, check_id="rdma.port.state", settings=SETTINGS):
    """The node's health after each cycle for a sequence of statuses of one check."""
    state, healthy, all_events = {}, [], []
    for status in outcomes:
        state, events = agent.step(state, [check(check_id, status, "mlx5_0/1")], settings, now=1.0)
        healthy.append(state["healthy"])
        all_events.extend(events)
    return healthy, state, all_events


# -- hysteresis ----------------------------------------------------------------------------------------
def test_unhealthy_after_three_failing_cycles_and_healthy_after_two_passes():
    healthy, state, events = run_steps(["fail", "fail", "fail", "pass", "fail", "pass", "pass"])
    assert healthy == [True, True, False, False, False, False, True]
    assert events[0] == "node healthy"
    assert "check rdma.port.state[mlx5_0/1] unhealthy after 3 failing cycle(s): m" in events
    assert "node unhealthy: rdma.port.state[mlx5_0/1]: m" in events
    assert events[-1] == "node healthy again"
    assert state["checks"]["rdma.port.state|mlx5_0/1"]["flaps"] == 3


def test_a_failure_between_passes_never_turns_the_node_unhealthy():
    healthy, _, events = run_steps(["fail", "pass", "fail", "fail", "pass"])
    assert all(healthy) and events == ["node healthy"]


@pytest.mark.parametrize("check_id", ["gpu.xid", "gpu.lost", "gpu.count", "gpu.recovery_action", "gpu.row_remap"])
def test_checks_that_cannot_recover_alone_turn_the_node_unhealthy_at_once(check_id):
    healthy, _, events = run_steps(["fail"], check_id=check_id)
    assert healthy == [False]
    assert events[-1].startswith("node unhealthy: %s[mlx5_0/1]" % check_id)


def test_thresholds_are_configurable_per_check():
    settings, errors = agent.hysteresis_settings({"hysteresis": {
        "fail_after": 2, "recover_after": 3, "immediate": [],
        "per_check": {"rdma.port.rate": {"fail_after": 5}}}})
    assert errors == []
    assert agent.thresholds(settings, "gpu.xid") == (2, 3)
    assert agent.thresholds(settings, "rdma.port.rate") == (5, 3)
    assert run_steps(["fail", "fail", "pass", "pass", "pass"], check_id="gpu.xid", settings=settings)[0] == [
        True, False, False, False, True]


def test_warn_counts_only_with_fail_on_warn():
    state = {}
    for _ in range(3):
        state, _ = agent.step(state, [check("gpu.temperature", "warn")], SETTINGS)
    assert state["healthy"]
    for _ in range(3):
        state, _ = agent.step(state, [check("gpu.temperature", "warn")], SETTINGS, fail_on="warn")
    assert not state["healthy"]


@pytest.mark.parametrize(("hysteresis", "message"), [
    ({"immediate": ["gpu.xids"]}, "hysteresis.immediate: unknown check id 'gpu.xids'"),
    ({"per_check": {"gpu.frob": {"fail_after": 2}}}, "hysteresis.per_check: unknown check id 'gpu.frob'"),
    ({"fail_after": 0}, "hysteresis.fail_after must be an integer >= 1, got 0"),
    ({"recover_after": "2"}, "hysteresis.recover_after must be an integer >= 1, got '2'"),
    ({"per_check": {"gpu.xid": {"fail_afterr": 2}}}, "hysteresis.per_check.gpu.xid must be a dict with fail_after"),
])
def test_bad_hysteresis_settings_name_the_setting(hysteresis, message):
    settings, errors = agent.hysteresis_settings({"hysteresis": hysteresis})
    assert settings is None
    assert any(error.startswith(message) for error in errors), errors


def test_known_check_ids_are_those_of_docs_contracts():
    with open(os.path.join(os.path.dirname(NODES), "..", "..", "docs", "contracts.md")) as handle:
        text = handle.read()
    ids = agent.known_check_ids()
    assert "gpu.xid" in ids and "rdma.port.state" in ids and len(ids) == len(set(ids))
    for check_id in ids:
        assert "| %s |" % check_id in text or "| `%s` |" % check_id in text, check_id
    for check_id in agent.IMMEDIATE_CHECKS:
        assert check_id in ids


# -- atomic writes -------------------------------------------------------------------------------------
def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "health.json"
    target.write_text("old")
    agent.atomic_write(str(target), "new")
    assert target.read_text() == "new"
    assert os.listdir(str(tmp_path)) == ["health.json"]
    assert oct(os.stat(str(target)).st_mode & 0o777) == "0o644"


def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    target = tmp_path / "health.json"
    target.write_text("old")

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_files.os, "fsync", broken)
    with pytest.raises(OSError):
        agent.atomic_write(str(target), "new")
    assert target.read_text() == "old" and os.listdir(str(tmp_path)) == ["health.json"]


def test_atomic_write_into_a_missing_directory_names_it(tmp_path):
    with pytest.raises(state_files.StateFileError, match="directory .*/missing does not exist"):
        agent.atomic_write(str(tmp_path / "missing" / "gpufleet.prom"), "x")


# -- whole cycles --------------------------------------------------------------------------------------
def make_agent(tmp_path, scenario="h100-healthy", textfile=True, **extra):
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    config = {"node_name": "dgx-1", "state_dir": str(state),
              "node_validate": dict(OPTIONS, root=DGX)}
    if textfile:
        (tmp_path / "textfile").mkdir(exist_ok=True)
        config["textfile_dir"] = str(tmp_path / "textfile")
    config.update(extra)
    lines = []
    instance = agent.Agent(config, log=lines.append, runner=ScriptedRunner(),
                           nvml=NvmlAdapter(fake_with(scenario)), clock=lambda: 1700000000.0)
    return instance, lines


def test_a_cycle_gives_node_validates_checks_and_writes_result_state_and_metrics(tmp_path):
    instance, lines = make_agent(tmp_path)
    assert instance.cycle() == 0
    health = json.loads((tmp_path / "state" / "health.json").read_text())
    expected, errors = validate_node(FAMILIES, dict(OPTIONS, root=DGX), runner=ScriptedRunner(),
                                     nvml=NvmlAdapter(fake_with("h100-healthy")), now=1700000000.0)
    assert not errors
    assert [(c["id"], c["target"], c["status"]) for c in health["checks"]] == [
        (c["id"], c["target"], c["status"]) for c in expected["checks"]]
    assert health["healthy"] is True and health["agent"] == dict(health["agent"], healthy=True, failing=[])
    assert health["summary"] == expected["summary"] and health["node"] == "dgx-1"
    assert lines == ["gpufleet-health-agent: node healthy"]
    prom = (tmp_path / "textfile" / "gpufleet.prom").read_text()
    assert 'gpufleet_check_status{id="rdma.port.state",target="mlx5_0/1",status="pass"} 0' in prom
    assert "gpufleet_node_healthy 1\n" in prom
    # the end of the cycle: its start (wall clock) plus its duration (monotonic clock)
    assert re.search(r"gpufleet_agent_last_run_timestamp_seconds 17000000\d\d\.\d{3}\n", prom)
    assert 'gpufleet_check_flaps_total{id="gpu.count",target="node"} 0' in prom
    state = json.loads((tmp_path / "state" / "agent-state.json").read_text())
    assert state["cycle"] == 1 and state["healthy"] is True


def test_a_gpu_fallen_off_the_bus_turns_the_node_unhealthy_in_one_cycle_and_journals_once(tmp_path):
    instance, lines = make_agent(tmp_path, scenario="h100-gpu-fell-off-bus")
    instance.cycle()
    instance.cycle()
    health = json.loads((tmp_path / "state" / "health.json").read_text())
    assert health["agent"]["healthy"] is False
    assert health["agent"]["failing"][0]["id"] == "gpu.count"
    unhealthy = [line for line in lines if "node unhealthy" in line]
    assert len(unhealthy) == 1 and "gpu.count[node]" in unhealthy[0]
    prom = (tmp_path / "textfile" / "gpufleet.prom").read_text()
    assert "gpufleet_node_healthy 0\n" in prom
    assert 'gpufleet_check_status{id="gpu.count",target="node",status="fail"} 2' in prom


def test_missing_textfile_directory_is_journalled_and_the_result_still_written(tmp_path):
    instance, lines = make_agent(tmp_path, textfile=False, textfile_dir=str(tmp_path / "no-such-dir"))
    assert instance.cycle() == 0
    assert (tmp_path / "state" / "health.json").exists()
    assert any("metrics: not updated: directory %s does not exist"
               % (tmp_path / "no-such-dir") in line for line in lines), lines


def test_unknown_check_id_in_settings_keeps_the_last_good_result(tmp_path):
    instance, lines = make_agent(tmp_path)
    instance.cycle()
    before = (tmp_path / "state" / "health.json").read_text()
    bad, lines = make_agent(tmp_path, hysteresis={"per_check": {"gpu.xidd": {"fail_after": 1}}})
    assert bad.cycle() == 0
    assert (tmp_path / "state" / "health.json").read_text() == before
    assert len(lines) == 1 and "bad hysteresis settings, last good result kept" in lines[0]
    assert "unknown check id 'gpu.xidd'" in lines[0]


def test_corrupt_state_file_is_set_aside_and_the_cycle_goes_on(tmp_path):
    instance, lines = make_agent(tmp_path)
    (tmp_path / "state" / "agent-state.json").write_text("{not json")
    assert instance.cycle() == 0
    assert "agent-state.json is damaged (not JSON" in lines[0] and "set aside as" in lines[0]
    assert (tmp_path / "state" / "health.json").exists()
    assert [n for n in os.listdir(str(tmp_path / "state")) if ".damaged-" in n]


def test_an_unexpected_exception_is_journalled_and_the_cycle_returns_0(tmp_path, monkeypatch):
    instance, lines = make_agent(tmp_path)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    instance.check_engine = boom
    assert instance.cycle() == 0
    assert "the checks crashed: RuntimeError('boom')" in lines[0]
    # fail closed: a cycle whose checks crashed is not healthy, and says why
    result = json.loads((tmp_path / "state" / "health.json").read_text())
    assert result["agent"]["healthy"] is False
    assert result["agent"]["failing"][0]["id"] == "host.validation" and "boom" in result["agent"]["failing"][0]["message"]


def test_bad_node_validate_options_are_named(tmp_path):
    instance, lines = make_agent(tmp_path, node_validate={"root": DGX, "gpu": {"expected_count": -1}})
    assert instance.cycle() == 0
    assert "node_validate options: option gpu.expected_count" in lines[0]


def test_publisher_failure_is_journalled(tmp_path):
    class Down(object):
        def publish(self, healthy, failing, deadline=None):
            raise OSError("connection refused")

    instance, lines = make_agent(tmp_path)
    instance.kube = Down()
    assert instance.cycle() == 0
    assert lines[-1] == "gpufleet-health-agent: kubernetes: not updated: connection refused"
    assert (tmp_path / "state" / "health.json").exists()


def test_main_with_a_missing_configuration_returns_0_with_a_message(tmp_path, capsys):
    assert agent.main([str(tmp_path / "agent.json")]) == 0
    assert "does not exist (installed by role node_health_agent); last good result kept" in capsys.readouterr().out


def test_the_agent_imports_no_ansible(tmp_path):
    import subprocess
    import sys

    from conftest import COLLECTIONS

    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent;"
            "from ansible_collections.gpufleet.cluster.plugins.module_utils.health import families;"
            "from ansible_collections.gpufleet.cluster.plugins.module_utils.core import runner;"
            "print([m for m in sys.modules if m == 'ansible' or m.startswith('ansible.')])")
    out = subprocess.run([sys.executable, "-I", "-c", code, COLLECTIONS], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_check_config_names_every_problem(tmp_path, capsys):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"node_validate": {"root": DGX, "gpu": {"expected_count": -1}},
                                "hysteresis": {"immediate": ["gpu.xidd"]}}))
    assert agent.main(["--check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "hysteresis.immediate: unknown check id 'gpu.xidd'" in out
    assert "node_validate options: option gpu.expected_count" in out
    path.write_text(json.dumps({"node_validate": {"root": DGX}}))
    assert agent.main(["--check-config", str(path)]) == 0


# -- node-problem-detector custom plugin contract (exit 0 OK, 1 NonOK, 2 Unknown; message <= 80) --------
def test_npd_plugin_contract():
    failing = [{"id": "gpu.count", "target": "node", "status": "fail",
                "message": "7 GPUs in NVML, 8 on the PCI bus: a GPU fell off the bus (XID 79) " * 3}]
    assert agent.npd_status({"generated_at": 100.0, "agent": {"healthy": True, "failing": []}}, 130.0) == (
        0, "gpufleet: all checks pass")
    code, message = agent.npd_status({"generated_at": 100.0, "agent": {"healthy": False, "failing": failing}}, 130.0)
    assert code == 1 and message.startswith("gpufleet: gpu.count[node]: 7 GPUs") and len(message) == 80
    assert agent.npd_status(None, 130.0) == (2, "gpufleet: no agent result yet")
    assert agent.npd_status({"generated_at": 100.0, "agent": {"healthy": True}}, 1000.0) == (
        2, "gpufleet: agent result 900 s old, more than 300 s")


def test_npd_mode_from_the_command_line(tmp_path, capsys):
    instance, _ = make_agent(tmp_path, scenario="h100-gpu-fell-off-bus")
    instance.clock = __import__("time").time
    instance.cycle()
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(instance.config))
    assert agent.main(["--npd", str(path)]) == 1
    assert capsys.readouterr().out.startswith("gpufleet: gpu.count[node]")
    assert agent.main(["--npd", str(tmp_path / "missing.json")]) == 2


def test_the_tuning_family_runs_in_the_agent_too(tmp_path):
    instance, _ = make_agent(tmp_path, node_validate=dict(OPTIONS, root=DGX, tuning={"tuned_profile": "throughput-performance"}))
    assert instance.cycle() == 0
    health = json.loads((tmp_path / "state" / "health.json").read_text())
    assert [c["id"] for c in health["checks"] if c["id"].startswith("tuning.")] == ["tuning.tuned_profile"]
    settings, errors = agent.hysteresis_settings({"hysteresis": {"per_check": {"tuning.hugepages": {"fail_after": 1}}}})
    assert errors == []


# -- bad input end to end: the configured publishers, main() as systemd runs it ----------------------
def test_an_unreachable_api_server_is_journalled_and_the_result_still_written(tmp_path):
    """The Kubernetes publisher the configuration builds (build_agent), pointed at a closed port:
    the cycle returns 0, the journal names the server, health.json and the metrics are written, and
    the next cycle (server still down) goes on the same way (the timer loop never stops)."""
    instance, lines = make_agent(tmp_path, kubernetes={"enabled": True, "server": "http://127.0.0.1:9", "timeout": 2})
    built = agent.build_agent(instance.config)
    instance.kube = built.kube
    for cycle in (1, 2):
        assert instance.cycle() == 0
        assert json.loads((tmp_path / "state" / "health.json").read_text())["cycle"] == cycle
        assert lines[-1].startswith("gpufleet-health-agent: kubernetes: not updated: API server http://127.0.0.1:9 "
                                    "unreachable"), lines
    assert (tmp_path / "textfile" / "gpufleet.prom").exists()


def test_main_keeps_the_last_good_result_on_bad_settings_and_a_missing_textfile_directory(tmp_path, capsys):
    """main() as the service runs it: a good cycle, then a configuration with an unknown check id
    (health.json untouched, exit 0), then a removed textfile directory (result written, exit 0)."""
    instance, _ = make_agent(tmp_path)
    config = instance.config
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(config))
    assert agent.main([str(path)]) == 0
    good = (tmp_path / "state" / "health.json").read_text()
    path.write_text(json.dumps(dict(config, hysteresis={"per_check": {"gpu.xidd": {"fail_after": 1}}})))
    assert agent.main([str(path)]) == 0
    assert (tmp_path / "state" / "health.json").read_text() == good
    assert "unknown check id 'gpu.xidd'" in capsys.readouterr().out
    __import__("shutil").rmtree(tmp_path / "textfile")
    path.write_text(json.dumps(config))
    assert agent.main([str(path)]) == 0
    assert json.loads((tmp_path / "state" / "health.json").read_text())["cycle"] == 2
    assert "metrics: not updated: directory %s does not exist" % (
        tmp_path / "textfile") in capsys.readouterr().out


def test_python_path_goes_on_sys_path_and_is_checked(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    agent.add_python_path({"python_path": [str(tmp_path)]})
    assert sys.path[-1] == str(tmp_path)
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"node_validate": {"root": DGX}, "python_path": "/opt/nvml"}))
    assert agent.main(["--check-config", str(path)]) == 1
    assert "python_path must be a list of directories, got '/opt/nvml'" in capsys.readouterr().out
