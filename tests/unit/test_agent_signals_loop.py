"""Every fault class reaches health.json through the resident agent's fast signals (issue 46): the
agent's Loop (agent_daemon.Loop with agent_daemon.signal_sources, run_once per cycle, a targeted
cycle per signal) in a thread over a copy of the DGX H100 fixture tree with the fake NVML, the
netlink and uevent sockets replaced by socketpairs fed with real-format messages, and a 600 s
periodic interval (so only a signal can have run the cycle that shows the fault). Asserted: the
eventual outcome (the check failing after hysteresis, the cycle that said so a targeted one, the
other checks untouched), never a latency; the timeouts are generous bounds."""

import json
import os
import select
import shutil
import socket
import sys
import threading
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import run_once
from nvml_scenarios import NODES, load_fake, scenario

DGX = os.path.join(NODES, "dgx-h100")
UNIT = "nvidia-fabricmanager.service"
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}, "tuning": {"enabled": False}}
LIMIT = 60  # seconds: a bound for a loaded machine, not a latency


class Waiter(object):
    """Loop.wait for a loop in a thread: select on the fds and a stop pipe."""

    def __init__(self):
        self.read, self.write = os.pipe()
        self.stopped = False

    def __call__(self, timeout, fds=()):
        readable = select.select([self.read] + list(fds), [], [], max(0, timeout))[0]
        return self.stopped or self.read in readable

    def stop(self):
        self.stopped = True
        os.write(self.write, b"x")


class Agent(object):
    """The resident agent in a thread, with stand-in sockets (``route_in``, ``uevent_in``)."""

    def __init__(self, tmp_path, fake, root, min_gap=0.2, probe=0.2):
        self.tmp, self.fake, self.root = tmp_path, fake, root
        state = tmp_path / "state"
        state.mkdir(exist_ok=True)
        self.state = state
        config = {"node_name": "dgx-1", "state_dir": str(state), "interval": 600,
                  "node_validate": dict(OPTIONS, root=str(root)), "events": {"kmsg": None, "nvml": False, "min_gap": min_gap},
                  "signals": {"netlink": True, "uevent": True, "fast_probe_interval": probe, "fabricmanager_unit": UNIT}}
        self.path = str(tmp_path / "agent.json")
        with open(self.path, "w") as out:
            json.dump(config, out)
        self.thread = None

    def run_full(self, counters):
        """One full cycle of the loop (a subclass counts or interrupts them)."""
        return run_once(self.path, events=counters())

    def start(self):
        route, self.route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        uevent, self.uevent_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sources = agent_daemon.signal_sources(self.path, log=lambda line: None, binding_loader=lambda: self.fake,
                                                   sockets={"netlink": route, "uevent": uevent})
        self.waiter = Waiter()
        counters = self.sources.counters
        self.loop = agent_daemon.Loop(lambda: self.run_full(counters), 600, self.waiter,
                                      notify=lambda message: None, log=lambda line: None, signals=self.sources,
                                      run_targeted=lambda what: run_once(self.path, events=counters(), only=what))
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()
        self.wait_for(lambda doc: doc["agent"]["healthy"] is True)
        return self

    def stop(self):
        if self.thread is not None:
            self.waiter.stop()
            self.thread.join(LIMIT)
            self.sources.close()
            self.route_in.close()
            self.uevent_in.close()
            self.thread = None

    def health(self):
        try:
            with open(str(self.state / "health.json")) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def wait_for(self, test, limit=LIMIT):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            doc = self.health()
            if doc is not None and test(doc):
                return doc
            time.sleep(0.02)
        raise AssertionError("not within %d s: %s" % (limit, json.dumps((self.health() or {}).get("agent"))[:2000]))


def fabric_node(tmp_path):
    """A DGX H100 fixture tree under tmp_path/node with the fabric manager unit installed and running
    (its cgroup populated), and a fake NVML on scenario h100-healthy: (root, fake)."""
    root = tmp_path / "node"
    shutil.copytree(DGX, str(root), symlinks=True)
    (root / "lib" / "systemd" / "system").mkdir(parents=True)
    (root / "lib" / "systemd" / "system" / UNIT).write_text("[Service]\nExecStart=/usr/bin/nv-fabricmanager\n")
    cgroup = root / "sys" / "fs" / "cgroup" / "system.slice" / UNIT
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    fake = load_fake()
    fake.set_scenario(scenario("h100-healthy"))
    return root, fake


@pytest.fixture
def node(tmp_path, monkeypatch):
    root, fake = fabric_node(tmp_path)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    agent = Agent(tmp_path, fake, root)
    yield agent
    agent.stop()


def failing(doc, check_id, target=None):
    return [c for c in doc["agent"]["failing"] if c["id"] == check_id and (target is None or c["target"] == target)]


def targeted(doc):
    return doc["agent"].get("signal") is not None


def test_a_silent_gpu_loss_nvml_gpu_is_lost_without_a_kernel_line(node):
    agent = node.start()
    node.fake._STATE["devices"][3]["errors"] = {"*": "GPU_IS_LOST"}
    doc = agent.wait_for(lambda d: failing(d, "gpu.lost", "gpu3"))
    assert targeted(doc) and doc["agent"]["signal"]["checks"]["gpu"] is True
    assert doc["agent"]["healthy"] is False and agent.loop.targeted >= 1


def test_a_port_down_announced_by_netlink_and_seen_by_the_probe(node):
    agent = node.start()
    state = node.root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (state / "state").write_text("1: DOWN\n")
    (state / "phys_state").write_text("3: Disabled\n")
    agent.route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))
    doc = agent.wait_for(lambda d: failing(d, "rdma.port.state", "mlx5_0/1"))  # after fail_after 3 cycles
    assert targeted(doc) and doc["agent"]["signal"]["checks"]["rdma"] == ["mlx5_0"]
    assert doc["agent"]["events"]["netlink_messages"] >= 1
    # the other ports were not measured again by the targeted cycles: their state was not stepped
    state_doc = json.loads((node.state / "agent-state.json").read_text())
    assert state_doc["checks"]["rdma.port.state|mlx5_0/1"]["fails"] >= 3
    assert state_doc["checks"]["rdma.port.state|mlx5_1/1"]["passes"] == 1


def test_a_link_downgrade_port_rate_below_the_minimum(node):
    agent = node.start()
    rate = node.root / "sys" / "class" / "infiniband" / "mlx5_2" / "ports" / "1" / "rate"
    rate.write_text("100 Gb/sec (1X NDR)\n")
    doc = agent.wait_for(lambda d: failing(d, "rdma.port.rate", "mlx5_2/1"))
    assert targeted(doc) and "below 200" in failing(doc, "rdma.port.rate")[0]["message"]


def test_an_ecc_counter_jump(node):
    agent = node.start()
    device = node.fake._STATE["devices"][5]
    device["ecc"] = dict(device["ecc"], volatile_uncorrected=2)
    doc = agent.wait_for(lambda d: failing(d, "gpu.ecc.volatile_uncorrectable", "gpu5"))
    assert targeted(doc)


def test_the_fabric_manager_stopping(node):
    agent = node.start()
    events = node.root / "sys" / "fs" / "cgroup" / "system.slice" / UNIT / "cgroup.events"
    events.write_text("populated 0\nfrozen 0\n")
    doc = agent.wait_for(lambda d: failing(d, "agent.fabricmanager", "node"))
    assert targeted(doc) and doc["agent"]["signal"]["checks"] == {"gpu": False, "rdma": None, "fabricmanager": True}
    assert [c for c in doc["checks"] if c["id"] == "gpu.count"][0]["status"] == "pass"  # kept from the full cycle


def test_a_gpu_removed_announced_by_a_uevent(node):
    agent = node.start()
    gpu = "0000:18:00.0"
    devices = node.root / "sys" / "bus" / "pci" / "devices"
    target = os.path.realpath(str(devices / gpu))
    (devices / gpu).unlink()
    shutil.rmtree(target)
    del node.fake._STATE["devices"][-1]  # the driver lets the device go: NVML counts 7
    agent.uevent_in.send(nl.build_uevent("remove", "/devices/pci0000:10/0000:10:03.0/0000:11:00.0/0000:12:00.0/" + gpu,
                                         SUBSYSTEM="pci", PCI_ID="10DE:2330", PCI_SLOT_NAME=gpu, SEQNUM="1"))
    doc = agent.wait_for(lambda d: failing(d, "gpu.count", "node"))
    assert targeted(doc) and doc["agent"]["events"]["uevent_messages"] >= 1


def test_signals_after_a_restart_of_the_agent(node):
    agent = node.start()
    agent.stop()
    agent.start()  # a new process: new sockets, a new baseline, the last result as the base
    state = node.root / "sys" / "class" / "infiniband" / "mlx5_4" / "ports" / "1" / "state"
    state.write_text("1: DOWN\n")
    doc = agent.wait_for(lambda d: failing(d, "rdma.port.state", "mlx5_4/1"))
    assert targeted(doc)


def test_the_tree_disappearing_under_the_probe_never_stops_the_agent(node):
    agent = node.start()
    shutil.rmtree(str(node.root / "sys"))
    # the targeted cycles fail closed (the checks cannot measure), the loop goes on
    doc = agent.wait_for(lambda d: not d["agent"]["healthy"])
    assert agent.thread.is_alive()
    assert doc["agent"]["failing"]


def test_a_lab_style_silent_gpu_loss_scenario_switch_and_config_space(tmp_path, monkeypatch):
    """As a lab injects it (docs/contracts.md, signals): the fake NVML's scenario file switched
    (read again only at an nvmlInit after a full shutdown) and ``ff ff`` in the GPU's fixture
    config space: the probe sees the config space, the targeted cycle's own nvmlInit the scenario."""
    from nvml_scenarios import SCENARIOS

    root = tmp_path / "node"
    shutil.copytree(DGX, str(root), symlinks=True)
    link = tmp_path / "scenario.json"
    link.symlink_to(os.path.join(SCENARIOS, "h100-healthy.json"))
    monkeypatch.setenv("GPUFLEET_FAKE_NVML_SCENARIO", str(link))
    fake = load_fake()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    agent = Agent(tmp_path, fake, root).start()
    try:
        link.unlink()
        link.symlink_to(os.path.join(SCENARIOS, "h100-gpu-is-lost.json"))
        gpu = sorted(agent.sources.probe.gpus)[0]
        (root / "sys" / "bus" / "pci" / "devices" / gpu / "config").write_bytes(b"\xff\xff\xff\xff")
        doc = agent.wait_for(lambda d: failing(d, "gpu.lost"))
        assert targeted(doc) and any("vendor 0xffff" in why for why in doc["agent"]["signal"]["why"])
    finally:
        agent.stop()


def test_a_port_down_reaches_unhealthy_through_confirmation_readings(tmp_path, monkeypatch):
    """Issue 46: the probe alone (no netlink announcement) sees the port down, then reads that port
    again every 0.1 s (the default 1 s probe / 10): its third bad reading confirms it and runs one
    targeted cycle that counts the three readings as the hysteresis' fail_after (3) measurements,
    under a min_gap of 30 s. Counted, not timed: which cycles ran, and what the hysteresis counted."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_signals import CONFIRM_PREFIX

    root = tmp_path / "node"
    shutil.copytree(DGX, str(root), symlinks=True)
    fake = load_fake()
    fake.set_scenario(scenario("h100-healthy"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    agent = Agent(tmp_path, fake, root, min_gap=30, probe=1).start()
    try:
        assert agent.sources.confirm == 0.1
        (root / "sys" / "class" / "infiniband" / "mlx5_3" / "ports" / "1" / "state").write_text("1: DOWN\n")
        doc = agent.wait_for(lambda d: failing(d, "rdma.port.state", "mlx5_3/1"))
        assert targeted(doc) and doc["agent"]["signal"]["why"][0].startswith(
            CONFIRM_PREFIX + "port mlx5_3/1 confirmed: bad at 3 readings")
        # one targeted cycle: the probe's three readings (0.1 s apart) are the hysteresis' three measurements
        assert agent.loop.targeted == 1 and agent.loop.confirmed == 1
        state_doc = json.loads((agent.state / "agent-state.json").read_text())
        assert state_doc["checks"]["rdma.port.state|mlx5_3/1"]["fails"] == 3
        assert doc["agent"]["events"]["probe_confirms"] >= 2
    finally:
        agent.stop()
