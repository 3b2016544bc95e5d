"""The agent's Slurm mode (NHC-like): drain with the failing check id as the reason, resume only
nodes the agent drained itself; scontrol command construction from `scontrol show node -o`."""

import json
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_slurm import (
    SlurmPublisher,
    parse_show_node,
    slurm_commands,
)
from runners import ScriptedRunner

FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]


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
    runner = ScriptedRunner({("scontrol", "show", "node", "gpu-1", "-o"): (0, show(), ""),
                             ("scontrol", "update", "NodeName=gpu-1", "State=DRAIN",
                              "Reason=gpufleet: gpu.xid[gpu3]"): (0, "", "")})
    publisher = SlurmPublisher("gpu-1", runner)
    assert publisher.publish(False, FAILING) == ["drain: gpufleet: gpu.xid[gpu3]"]
    assert [call[1] for call in runner.calls] == ["show", "update"]


def test_scontrol_failure_is_an_agent_error():
    runner = ScriptedRunner({("scontrol", "show", "node", "gpu-1", "-o"):
                             (1, "", "slurm_load_node error: Unable to contact slurm controller")})
    with pytest.raises(agent.AgentError, match="Unable to contact slurm controller"):
        SlurmPublisher("gpu-1", runner).publish(True, [])


def test_health_check_program_mode_says_what_it_decided_every_run(tmp_path, monkeypatch, capsys):
    """--slurm-health-check (slurmd's HealthCheckProgram) reads health.json and prints its decision
    even when nothing is to do (the wrapper sends it to the journal), unlike the cycle's publisher."""
    (tmp_path / "health.json").write_text(json.dumps({"generated_at": time.time(), "agent": {"healthy": True, "failing": []}}))
    runner = ScriptedRunner({("scontrol", "show", "node", "gpu-1", "-o"): (0, show("IDLE+DRAIN", "admin: bad dimm"), "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("gpu-1", runner)))
    assert SlurmPublisher("gpu-1", runner).publish(True, []) == []
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}) == 0
    assert capsys.readouterr().out == "gpufleet-health-agent: slurm: nothing to do\n"
    (tmp_path / "health.json").write_text(json.dumps({"agent": {"healthy": False, "failing": FAILING}}))
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}) == 0
    assert "left alone: drained or down for another reason (admin: bad dimm" in capsys.readouterr().out
