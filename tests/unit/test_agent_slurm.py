"""The agent's Slurm mode (NHC-like): drain with the failing check id as the reason, resume only
nodes the agent drained itself; scontrol command construction from `scontrol show node -o`."""

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import (
    SlurmPublisher,
    parse_show_node,
    slurm_commands,
)
from runners import ScriptedRunner

FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]
# `scontrol --version` of Debian 12's slurm-wlm (tests/transcripts/scontrol/22.05/version.yml): no --json
SLURM_22_05 = "slurm-wlm 22.05.8\n"


# `scontrol show node <name> -o`: the field layout of Slurm 25.05 `scontrol show node` output in
# public captures (multi-line there, one line with -o): `Key=value` fields, values with spaces
# (OS), `Reason=<text> [<user>@<time>]`, possibly followed by more fields (Comment on 17.11).
def show(state="IDLE", reason=None):
    line = ("NodeName=gpu-1 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 CPULoad=0.10 "
            "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 NodeAddr=gpu-1 NodeHostName=gpu-1 "
            "Version=23.11.4 OS=Linux 6.8.0-48-generic RealMemory=2000000 AllocMem=0 FreeMem=1900000 Sockets=2 "
            "Boards=1 State=%s ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu "
            "BootTime=2025-11-20T08:00:00 SlurmdStartTime=2025-11-20T08:01:00" % state)
    if reason:
        line += " Reason=%s [root@2025-11-20T12:00:00] Comment=(null)" % reason
    return line + "\n"


def test_parse_show_node_multi_line_format():
    text = ("NodeName=server5 Arch=x86_64 CoresPerSocket=1 \n   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0\n"
            "   OS=Linux 5.15.0-153-generic #163-Ubuntu SMP Thu Aug 7 16:37:18 UTC 2025 \n"
            "   Reason=gpufleet: gpu.xid[gpu0] [root@2025-09-23T09:46:15]\n")
    fields = parse_show_node(text)
    assert fields["NodeName"] == "server5" and fields["State"] == "IDLE+DRAIN"
    assert fields["Reason"] == "gpufleet: gpu.xid[gpu0] [root@2025-09-23T09:46:15]"
    assert slurm_commands("server5", True, [], text)[0] == [["scontrol", "update", "NodeName=server5", "State=RESUME"]]


def test_parse_show_node_keeps_reasons_with_spaces():
    fields = parse_show_node(show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"))
    assert fields["State"] == "IDLE+DRAIN" and fields["OS"] == "Linux 6.8.0-48-generic"
    assert fields["Reason"] == "gpufleet: gpu.xid[gpu3] [root@2025-11-20T12:00:00]"


def test_unhealthy_drains_with_the_check_id_as_reason():
    commands, why = slurm_commands("gpu-1", False, FAILING, show())
    assert commands == [["scontrol", "update", "NodeName=gpu-1", "State=DRAIN", "Reason=gpufleet: gpu.xid[gpu3]"]]
    assert why == "drain: gpufleet: gpu.xid[gpu3]"


def test_already_drained_by_us_with_the_same_reason_does_nothing():
    assert slurm_commands("gpu-1", False, FAILING, show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"))[0] == []


def test_drained_by_us_for_another_check_gets_the_new_reason():
    commands, _ = slurm_commands("gpu-1", False, FAILING, show("MIXED+DRAIN", "gpufleet: rdma.port.state[mlx5_0/1]"))
    assert commands[0][-1] == "Reason=gpufleet: gpu.xid[gpu3]"


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "DOWN", "DOWN+DRAIN"])
def test_a_node_drained_by_someone_else_is_never_touched(state):
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, show(state, "bad DIMM, ticket 4711"))
        assert commands == []
    assert slurm_commands("gpu-1", False, FAILING, show(state, "bad DIMM"))[1].startswith("left alone")


def test_healthy_resumes_only_what_the_agent_drained():
    commands, _ = slurm_commands("gpu-1", True, [], show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"))
    assert commands == [["scontrol", "update", "NodeName=gpu-1", "State=RESUME"]]
    assert slurm_commands("gpu-1", True, [], show("IDLE"))[0] == []


def test_an_unknown_node_is_named():
    with pytest.raises(agent.AgentError, match="no NodeName"):
        slurm_commands("gpu-1", True, [], "")


def test_health_check_program_mode_acts_on_the_last_result(tmp_path):
    (tmp_path / "health.json").write_text(json.dumps({"agent": {"healthy": False, "failing": FAILING}}))
    runner = ScriptedRunner({("scontrol", "--version"): (0, SLURM_22_05, ""),
                             ("scontrol", "show", "node", "gpu-1", "-o"): (0, show(), ""),
                             ("scontrol", "update", "NodeName=gpu-1", "State=DRAIN",
                              "Reason=gpufleet: gpu.xid[gpu3]"): (0, "", "")})
    publisher = SlurmPublisher("gpu-1", runner)
    assert publisher.publish(False, FAILING) == ["drain: gpufleet: gpu.xid[gpu3]"]
    assert [call[1] for call in runner.calls] == ["--version", "show", "update"]


def test_scontrol_failure_is_an_agent_error():
    runner = ScriptedRunner({("scontrol", "--version"): (0, SLURM_22_05, ""),
                             ("scontrol", "show", "node", "gpu-1", "-o"):
                             (1, "", "slurm_load_node error: Unable to contact slurm controller")})
    with pytest.raises(agent.AgentError, match="Unable to contact slurm controller"):
        SlurmPublisher("gpu-1", runner).publish(True, [])


def test_health_check_program_mode_says_what_it_decided_every_run(tmp_path, monkeypatch, capsys):
    """--slurm-health-check (slurmd's HealthCheckProgram) reads health.json and prints its decision
    even when nothing is to do (the wrapper sends it to the journal), unlike the cycle's publisher."""
    (tmp_path / "health.json").write_text(json.dumps({"generated_at": time.time(), "agent": {"healthy": True, "failing": []}}))
    runner = ScriptedRunner({("scontrol", "--version"): (0, SLURM_22_05, ""),
                             ("scontrol", "show", "node", "gpu-1", "-o"): (0, show("IDLE+DRAIN", "admin: bad dimm"), "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("gpu-1", runner)))
    assert SlurmPublisher("gpu-1", runner).publish(True, []) == []
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}) == 0
    assert capsys.readouterr().out == ("gpufleet-health-agent: slurm: left alone: State=IDLE+DRAIN is not gpufleet's "
                                       "(Reason=admin: bad dimm [root@2025-11-20T12:00:00])\n")
    (tmp_path / "health.json").write_text(json.dumps({"generated_at": time.time(),
                                                      "agent": {"healthy": False, "failing": FAILING}}))
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}) == 0
    assert "left alone: State=IDLE+DRAIN is not gpufleet's (Reason=admin: bad dimm" in capsys.readouterr().out


# --- whose state is it (issue 41) ----------------------------------------------------------------
# State= as `scontrol show node` prints it: node_state_string_complete() of Slurm's
# src/common/slurm_protocol_defs.c (SchedMD/slurm, master and slurm-21-08 .. 25-05): the base state
# of node_states[] followed by "+FLAG" for each flag set, in the order of node_state_flags[]; Slurm
# <= 20.11 (src/api/node_info.c of slurm-20-11-9-1) printed node_state_string()'s short form
# (DOWN*, IDLE~, MAINT, REBOOT^ ...) with +CLOUD, +COMPLETING, +DRAIN or +FAIL, +POWER.
FLAG_ORDER = ("BLOCKED", "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "EXTERNAL",
              "INVALID_REG", "FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN", "REBOOT_REQUESTED",
              "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED", "POWERING_UP", "POWERING_DOWN")
THEIRS = ("FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN",
          "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "RESUME")
OURS = "gpufleet: gpu.xid[gpu3]"


def test_an_admins_fail_is_neither_redrained_nor_resumed():
    # the case: `scontrol update NodeName=gpu-1 State=FAIL Reason="fan"` on an idle node
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, show("IDLE+FAIL", "fan"))
        assert commands == [], why
        assert why.startswith("left alone: State=IDLE+FAIL is not gpufleet's (FAIL; Reason=fan")


@pytest.mark.parametrize("state", ["IDLE+DRAIN+MAINTENANCE", "IDLE+DRAIN+REBOOT_REQUESTED", "IDLE+DRAIN+REBOOT_ISSUED",
                                   "IDLE+DRAIN+POWER_DOWN", "IDLE+DRAIN+POWERED_DOWN", "IDLE+DRAIN+POWERING_DOWN",
                                   "IDLE+DRAIN+POWERING_UP", "IDLE+DRAIN+FAIL", "DOWN+DRAIN", "DOWN+DRAIN+NOT_RESPONDING",
                                   "UNKNOWN+DRAIN", "FUTURE+DRAIN", "IDLE+DRAIN+SOMETHING_NEW",
                                   # Slurm <= 20.11
                                   "DOWN*+DRAIN", "IDLE~+DRAIN", "IDLE@+DRAIN", "MAINT+DRAIN", "REBOOT^+DRAIN",
                                   "IDLE+DRAIN+POWER"])
def test_our_drain_under_someone_elses_state_is_not_resumed_nor_rereasoned(state):
    """An admin (or Slurm) took the node over after the agent drained it: hands off."""
    assert slurm_commands("gpu-1", True, [], show(state, OURS))[0] == []
    assert slurm_commands("gpu-1", False, [dict(FAILING[0], id="gpu.lost")], show(state, OURS))[0] == []


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED+COMPLETING", "IDLE+NOT_RESPONDING", "IDLE+RESERVED",
                                   "IDLE+CLOUD", "MIXED+PLANNED"])
def test_a_reason_that_is_not_ours_keeps_the_node_out_of_our_hands(state):
    assert slurm_commands("gpu-1", False, FAILING, show(state, "admin: network maintenance"))[0] == []
    # the same states without a reason are drained when unhealthy
    assert slurm_commands("gpu-1", False, FAILING, show(state))[0][0][3] == "State=DRAIN"


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "ALLOCATED+DRAIN+COMPLETING", "IDLE+DRAIN+NOT_RESPONDING",
                                   "IDLE+CLOUD+DRAIN", "IDLE+DRAIN+RESERVED"])
def test_our_own_drain_is_resumed(state):
    assert slurm_commands("gpu-1", True, [], show(state, OURS))[0] == [
        ["scontrol", "update", "NodeName=gpu-1", "State=RESUME"]]


def test_the_remediation_keeps_its_hands_off_the_same_states():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import slurm_state
    mine = "gpufleet remediation: reset: xid_fatal -> reset (gpu.xid:gpu3)"
    fail = slurm_state(show("IDLE+FAIL", "fan"), "gpu-1")
    assert fail["admin"] and not fail["ours"] and fail["drained"]
    assert fail["held"] == ["FAIL", "Reason=fan [root@2025-11-20T12:00:00]"]
    taken_over = slurm_state(show("IDLE+DRAIN+REBOOT_REQUESTED", mine), "gpu-1")
    assert taken_over["admin"] and not taken_over["ours"] and taken_over["draining"]
    assert slurm_state(show("IDLE+DRAIN", mine), "gpu-1")["ours"]
    maint = slurm_state(show("IDLE+MAINTENANCE"), "gpu-1")
    assert maint["admin"] and not maint["drained"]  # nobody closed it to jobs: not drained, not ours to drain
    assert slurm_state(show("MIXED+FAIL", "fan"), "gpu-1")["busy"] == ["MIXED"]


STATE_STRINGS = st.builds(
    lambda base, flags, stars: base + stars + "".join("+" + flag for flag in FLAG_ORDER if flag in flags),
    st.sampled_from(("DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN")),
    st.frozensets(st.sampled_from(FLAG_ORDER), max_size=4),
    st.sampled_from(("", "", "*", "$", "@", "^", "~", "!", "#", "%")))
REASONS = st.one_of(st.none(), st.sampled_from((OURS, "gpufleet: rdma.port.state[mlx5_0/1]", "gpufleet remediation: x",
                                                "Not responding", "admin: bad dimm", "Kill task failed",
                                                "reboot requested", "")),
                    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30))


@settings(max_examples=300, deadline=None)
@given(STATE_STRINGS, REASONS, st.booleans())
def test_only_our_own_state_is_ever_changed(state, reason, healthy):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm import parse_state
    reason_text = (reason or "").strip()
    commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING,
                                   show(state, reason_text) if reason_text else show(state))
    base, flags, unknown = parse_state(state)
    ours = reason_text.startswith("gpufleet:")
    theirs = (base not in ("IDLE", "ALLOCATED", "MIXED") or unknown or flags & set(THEIRS)
              or (reason_text and not ours) or ("DRAIN" in flags and not ours))
    if theirs:
        assert commands == [] and why.startswith("left alone"), (state, reason, why)
    for argv in commands:
        if argv[3] == "State=RESUME":
            assert healthy and "DRAIN" in flags and ours
        else:
            assert argv[3] == "State=DRAIN" and not healthy
    if not theirs and not healthy and not ("DRAIN" in flags and reason_text.startswith(OURS)):
        assert commands, (state, reason)
    if not theirs and healthy and "DRAIN" in flags:
        assert commands == [["scontrol", "update", "NodeName=gpu-1", "State=RESUME"]]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), REASONS)
def test_any_state_text_is_a_decision_never_a_crash(state, reason):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import slurm_state
    line = "NodeName=gpu-1 State=%s" % state.replace(" ", "_").replace("=", "_")
    if reason:
        line += " Reason=%s" % reason
    commands, _why = slurm_commands("gpu-1", True, [], line)
    assert commands in ([], [["scontrol", "update", "NodeName=gpu-1", "State=RESUME"]])
    view = slurm_state(line, "gpu-1")
    assert not (view["ours"] and view["admin"])
