"""A targeted cycle that touches no NVML leaves the NVML event watcher running (issue 46):
agent_cycle.touches_nvml, agent_daemon.Loop._cycle, Agent.cycle. The NVML event watcher is never
stopped for a cycle (it runs through them, agent_events); the fast probe lets its NVML go for a cycle
that touches NVML; a cycle of RDMA ports or the fabric manager alone reads sysfs and the cgroup only,
so neither pause nor resume is needed.
Asserted: which sources were paused (stand-ins counting calls) and, on the real path (run_once over
a copy of the DGX H100 fixture tree), how often the fake NVML (tests/fake_nvml) was initialised."""

import json
import os
import sys

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import (
    FULL_CYCLE_NEEDED, run_once, touches_nvml)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_signals import plan
from nvml_scenarios import NODES
from test_agent_signals_loop import fabric_node

DGX = os.path.join(NODES, "dgx-h100")
UNIT = "nvidia-fabricmanager.service"
FABRIC_ID = "agent.fabricmanager"
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}, "tuning": {"enabled": False}}
PORT = plan([("rdma:mlx5_0", "probe confirm: port mlx5_0/1 confirmed")])
ALL_PORTS = plan([("rdma", "netlink: announcements lost (ENOBUFS)")])
FABRIC = plan([("fabricmanager", "probe confirm: nvidia-fabricmanager.service confirmed")])
GPU = plan([("gpu", "probe: gpu 3 lost")])
BOTH = plan([("rdma:mlx5_0", "netlink"), ("gpu", "uevent: remove 0000:18:00.0")])


class Counting(object):
    """An event source stand-in (EventSources / SignalSources): counts pause, resume, drain."""

    min_gap = 1.0

    def __init__(self):
        self.calls = []

    def pause(self):
        self.calls.append("pause")

    def resume(self):
        self.calls.append("resume")

    def refresh(self):
        self.calls.append("refresh")

    def drain(self, readable=None):
        self.calls.append("drain")
        return []

    def save(self):
        return None


def loop(run_targeted, cycles=None):
    events, signals = Counting(), Counting()
    cycles = [] if cycles is None else cycles
    made = agent_daemon.Loop(lambda: cycles.append("full") or "full", 60, lambda seconds, fds=(): True,
                             notify=lambda message: None, log=lambda line: None, events=events, signals=signals,
                             run_targeted=run_targeted)
    return made, events, signals


@pytest.mark.parametrize("what", [PORT, ALL_PORTS, FABRIC], ids=["port", "all-ports", "fabricmanager"])
def test_a_targeted_cycle_without_nvml_pauses_no_watcher(what):
    ran = []
    made, events, signals = loop(lambda only: ran.append(only) or "cycle 2: healthy")
    made._cycle(what)
    assert ran == [what] and made.cycles == 1
    assert events.calls == [] and signals.calls == []  # the NVML event watcher and the probe keep NVML


@pytest.mark.parametrize("what", [GPU, BOTH, None], ids=["gpu", "gpu-and-port", "full"])
def test_a_gpu_or_full_cycle_lets_the_probes_nvml_go_and_never_stops_the_event_watcher(what):
    made, events, signals = loop(lambda only: "cycle 2: healthy")
    made._cycle(what)
    assert signals.calls == ["pause", "resume"]
    assert events.calls == (["drain", "refresh"] if what is None else [])  # no pause: no event lost meanwhile


def test_a_targeted_cycle_without_a_last_result_becomes_a_full_one_with_nvml_let_go():
    cycles = []
    made, events, signals = loop(lambda only: FULL_CYCLE_NEEDED, cycles)
    made._cycle(PORT)
    assert cycles == ["full"] and made.cycles == 1  # the refused targeted cycle is not counted
    assert events.calls == ["drain", "refresh"] and signals.calls == ["pause", "resume"]


def test_touches_nvml_only_for_the_gpu_family_or_a_full_cycle():
    assert touches_nvml(None) and touches_nvml(GPU) and touches_nvml(BOTH)
    assert not touches_nvml(PORT) and not touches_nvml(ALL_PORTS) and not touches_nvml(FABRIC)


# -- the real cycle: run_once over the fixture tree with a fake NVML counting its calls ---------------
@pytest.fixture
def agent(tmp_path, monkeypatch):
    root, fake = fabric_node(tmp_path)
    counts = {"nvmlInit": 0, "nvmlShutdown": 0}
    for name in list(counts):
        real = getattr(fake, name)

        def counted(*args, _name=name, _real=real):
            counts[_name] += 1
            return _real(*args)

        setattr(fake, name, counted)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    state = tmp_path / "state"
    state.mkdir()
    config = {"node_name": "dgx-1", "state_dir": str(state), "interval": 600,
              "node_validate": dict(OPTIONS, root=str(root)), "events": {"kmsg": None, "nvml": False},
              "signals": {"netlink": False, "uevent": False, "fast_probe_interval": 0, "fabricmanager_unit": UNIT}}
    path = str(tmp_path / "agent.json")
    with open(path, "w") as out:
        json.dump(config, out)
    return path, root, state, counts


def test_the_real_port_and_fabricmanager_cycles_call_no_nvml(agent):
    path, root, state, counts = agent
    run_once(path)
    assert counts["nvmlInit"] >= 1 and counts["nvmlShutdown"] == counts["nvmlInit"]  # the full cycle does
    counts.update(nvmlInit=0, nvmlShutdown=0)
    (root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (root / "sys" / "fs" / "cgroup" / "system.slice" / UNIT / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    for what in (PORT, ALL_PORTS, FABRIC):
        run_once(path, only=what)
    assert counts == {"nvmlInit": 0, "nvmlShutdown": 0}
    doc = json.loads((state / "health.json").read_text())
    assert doc["agent"]["signal"]["checks"]["fabricmanager"] is True  # the targeted cycles did run
    assert [c for c in doc["checks"] if c["id"] == "rdma.port.state" and c["target"] == "mlx5_0/1"][0]["status"] \
        == "fail"
    assert [c for c in doc["checks"] if c["id"] == FABRIC_ID][0]["status"] == "fail"
    run_once(path, only=GPU)
    assert counts["nvmlInit"] >= 1  # a GPU plan does


def test_a_port_cycle_without_a_last_result_runs_nothing_and_asks_for_a_full_one(agent):
    path, _root, state, counts = agent
    assert run_once(path, only=PORT) == FULL_CYCLE_NEEDED
    assert counts == {"nvmlInit": 0, "nvmlShutdown": 0} and not (state / "health.json").exists()
    assert run_once(path, only=GPU) != FULL_CYCLE_NEEDED  # a GPU plan runs its full cycle itself, as before
    assert counts["nvmlInit"] >= 1 and (state / "health.json").exists()
