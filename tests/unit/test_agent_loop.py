"""The resident node health agent (``gpufleet-health-agent --loop``, plugins/module_utils/agent/agent.py
``Loop``, ``StopSignals``, ``sd_notify``, ``run_once``): a monotonic schedule without drift or
overlap, an exception per cycle journalled with the last good result kept, SIGTERM ending it
between cycles, the cycle counter, systemd's notifications, and the same results as a process per
cycle. The clock and the sleep are injected: nothing sleeps longer than a few milliseconds."""

import json
import os
import signal
import socket
import sys
import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from nvml_scenarios import NODES, SCENARIOS, load_fake

DGX = os.path.join(NODES, "dgx-h100")
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}


class Clock(object):
    """A monotonic clock the cycles and the sleeps advance."""

    def __init__(self):
        self.now = 1000.0
        self.waits = []

    def __call__(self):
        return self.now

    def wait(self, seconds):
        assert seconds > 0, "never a negative or zero sleep (no burst of late cycles)"
        self.waits.append(seconds)
        self.now += seconds
        return False


def loop_with(clock, durations, interval=10.0, fail=(), stop_after=None):
    """A Loop whose cycle k (1-based) takes durations[k-1] s, raises when k is in ``fail``; its
    cycle start times and journal lines. ``stop_after``: the wait after that cycle says stop."""
    starts, lines, notes = [], [], []

    def run_cycle():
        starts.append(clock.now)
        clock.now += durations[len(starts) - 1]
        if len(starts) in fail:
            raise RuntimeError("boom in cycle %d" % len(starts))
        return "cycle %d" % len(starts)

    def wait(seconds):
        clock.wait(seconds)
        return stop_after is not None and len(starts) >= stop_after

    loop = agent.Loop(run_cycle, interval, wait, clock=clock, notify=notes.append, log=lines.append)
    return loop, starts, lines, notes


def test_cycles_start_on_a_fixed_schedule_whatever_they_take():
    clock = Clock()
    loop, starts, lines, _notes = loop_with(clock, [0.3, 2.5, 0.1, 7.0, 0.2])
    assert loop.run(max_cycles=5) == 5
    assert starts == [1000.0, 1010.0, 1020.0, 1030.0, 1040.0]  # no drift from the cycles' durations
    assert lines == []


def test_a_cycle_longer_than_the_interval_skips_slots_and_never_overlaps():
    clock = Clock()
    loop, starts, lines, _notes = loop_with(clock, [1.0, 25.0, 1.0])
    loop.run(max_cycles=3)
    # cycle 2 ran 1010-1035: the slots 1020 and 1030 are skipped, cycle 3 starts at the next slot
    assert starts == [1000.0, 1010.0, 1040.0]
    assert loop.skipped == 2
    assert lines == ["gpufleet-health-agent: a cycle took longer than the interval (10 s): 2 cycle(s) skipped"]
    assert all(wait > 0 for wait in clock.waits)


def test_an_exception_in_a_cycle_is_journalled_and_the_loop_goes_on():
    clock = Clock()
    loop, starts, lines, notes = loop_with(clock, [0.1] * 4, fail=(2,))
    assert loop.run(max_cycles=4) == 4
    assert starts == [1000.0, 1010.0, 1020.0, 1030.0]
    assert len(lines) == 1 and lines[0].startswith(
        "gpufleet-health-agent: cycle failed, last good result kept: RuntimeError('boom in cycle 2')")
    assert "Traceback" in lines[0]
    assert notes[1] == "WATCHDOG=1\nSTATUS=last cycle failed (journal), last good result kept"


def test_systemd_hears_ready_after_the_first_cycle_then_watchdog_and_stopping():
    clock = Clock()
    loop, _starts, _lines, notes = loop_with(clock, [0.1] * 3, stop_after=3)
    assert loop.run() == 3
    assert notes == ["READY=1\nWATCHDOG=1\nSTATUS=cycle 1", "WATCHDOG=1\nSTATUS=cycle 2",
                     "WATCHDOG=1\nSTATUS=cycle 3", "STOPPING=1"]


def test_zero_cycles_runs_none():
    clock = Clock()
    loop, starts, _lines, notes = loop_with(clock, [])
    assert loop.run(max_cycles=0) == 0 and starts == [] and notes == ["STOPPING=1"]


def test_sd_notify_sends_one_datagram_to_notify_socket(tmp_path):
    path = str(tmp_path / "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    try:
        assert agent.sd_notify("READY=1\nSTATUS=cycle 1", environ={"NOTIFY_SOCKET": path}) is True
        assert server.recv(4096) == b"READY=1\nSTATUS=cycle 1"
    finally:
        server.close()
    assert agent.sd_notify("READY=1", environ={}) is False  # not run by a Type=notify service
    assert agent.sd_notify("READY=1", environ={"NOTIFY_SOCKET": path}) is False  # nobody listening


def test_sd_notify_abstract_socket():
    name = "gpufleet-test-%d" % os.getpid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name)
    try:
        assert agent.sd_notify("WATCHDOG=1", environ={"NOTIFY_SOCKET": "@" + name}) is True
        assert server.recv(4096) == b"WATCHDOG=1"
    finally:
        server.close()


# -- signals: the real StopSignals, in this process ----------------------------------------------------
def test_sigterm_during_a_cycle_ends_the_loop_after_that_cycle():
    signals = agent.StopSignals()
    ran = []

    def run_cycle():
        ran.append(len(ran) + 1)
        if len(ran) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the cycle runs: it finishes first
        return "ok"

    try:
        # no cycle limit, a 10 ms interval: only the signal ends the loop, right after cycle 2
        loop = agent.Loop(run_cycle, 0.01, signals.wait, notify=lambda message: None, log=lambda line: None)
        assert loop.run() == 2
    finally:
        signals.close()
    assert ran == [1, 2] and signals.received == [signal.SIGTERM]


def test_sigterm_during_the_sleep_wakes_it():
    signals = agent.StopSignals()
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        assert signals.wait(3600) is True
    finally:
        timer.cancel()
        signals.close()


def test_stop_signals_restore_the_previous_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signals = agent.StopSignals()
    assert signal.getsignal(signal.SIGTERM) == signals._handler
    assert signals.wait(0.001) is False  # timeout, no signal
    signals.close()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# -- whole cycles: run_once, main(--loop), the fake NVML switched while the agent runs ---------------
@pytest.fixture
def fake_nvml(tmp_path, monkeypatch):
    """The fake binding as the agent's ``pynvml``, reading its scenario from the environment
    through a symlink (as the lab and molecule switch it); returns the switch."""
    link = tmp_path / "scenario.json"
    link.symlink_to(os.path.join(SCENARIOS, "h100-healthy.json"))
    monkeypatch.setenv("GPUFLEET_FAKE_NVML_SCENARIO", str(link))
    monkeypatch.setitem(sys.modules, "pynvml", load_fake())

    def switch(name):
        link.unlink()
        link.symlink_to(os.path.join(SCENARIOS, name + ".json"))

    return switch


def write_config(directory, **extra):
    state = directory / "state"
    state.mkdir(parents=True, exist_ok=True)
    config = dict({"node_name": "dgx-1", "state_dir": str(state), "node_validate": dict(OPTIONS, root=DGX)}, **extra)
    path = directory / "agent.json"
    path.write_text(json.dumps(config))
    return path, config


def read(directory, name="health.json"):
    return json.loads((directory / "state" / name).read_text())


def test_main_loop_runs_the_asked_cycles_and_counts_them(tmp_path, fake_nvml, capsys):
    path, _config = write_config(tmp_path, interval=0.001)
    assert agent.main(["--loop", "--cycles", "3", str(path)]) == 0
    assert read(tmp_path)["cycle"] == 3 and read(tmp_path, "agent-state.json")["cycle"] == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gpufleet-health-agent: resident, a cycle every 0.001 s (%s)" % path
    assert out[-1] == "gpufleet-health-agent: stopped after 3 cycle(s)"


def test_a_fault_injected_while_the_agent_runs_is_seen_by_its_next_cycle(tmp_path, fake_nvml):
    """NVML is shut down after each cycle and initialised again by the next, as a process per
    cycle would: a GPU that falls off the bus while the resident agent runs is seen."""
    path, _config = write_config(tmp_path)
    assert agent.run_once(str(path)).startswith("cycle 1: healthy")
    fake_nvml("h100-gpu-fell-off-bus")
    status = agent.run_once(str(path))
    assert status.startswith("cycle 2: unhealthy: gpu.count[node]"), status
    assert read(tmp_path)["agent"]["failing"][0]["id"] == "gpu.count"
    assert sys.modules["pynvml"]._STATE["initialised"] == 0  # shut down after the cycle


def test_bad_settings_in_a_cycle_keep_the_last_good_result_and_the_loop_going(tmp_path, fake_nvml, capsys):
    path, config = write_config(tmp_path)
    clock = Clock()
    configs = [config, dict(config, hysteresis={"per_check": {"gpu.xidd": {"fail_after": 1}}}), config]
    kept = []

    def run_cycle():
        path.write_text(json.dumps(configs[len(kept)]))
        status = agent.run_once(str(path))
        kept.append(read(tmp_path))
        return status

    loop = agent.Loop(run_cycle, 10, clock.wait, clock=clock, notify=lambda message: None)
    assert loop.run(max_cycles=3) == 3
    assert kept[1] == kept[0]  # the bad cycle wrote nothing
    assert [result["cycle"] for result in kept] == [1, 1, 2]
    assert "bad hysteresis settings, last good result kept" in capsys.readouterr().out


def test_a_missing_configuration_is_journalled_every_cycle_never_a_crash(tmp_path, capsys):
    status = agent.run_once(str(tmp_path / "agent.json"))
    assert status.startswith("no cycle: configuration %s does not exist" % (tmp_path / "agent.json"))
    assert agent.loop_interval(str(tmp_path / "agent.json")) == 60.0


def test_interval_comes_from_the_option_then_the_configuration(tmp_path, capsys):
    path, _config = write_config(tmp_path, interval=15)
    assert agent.loop_interval(str(path)) == 15.0
    assert agent.loop_interval(str(path), "0.2") == 0.2
    assert agent.loop_interval(str(path), "-1") == 60.0
    assert "interval must be a number of seconds > 0" in capsys.readouterr().out
    path.write_text(json.dumps({"node_validate": {"root": DGX}, "interval": "often"}))
    assert agent.main(["--check-config", str(path)]) == 1
    assert "interval must be a number of seconds > 0, got 'often'" in capsys.readouterr().out
    assert agent.main(["--loop", "--interval"]) == 2


def _comparable(document):
    """A result without what differs between two runs of the same cycles (times, CPU)."""
    text = json.dumps(document, sort_keys=True)
    document = json.loads(text)
    for key in ("generated_at", "elapsed_ms", "updated"):
        document.pop(key, None)
    document.get("agent", {}).pop("cpu_ms", None)
    for entry in (document.get("checks") or {}).values() if isinstance(document.get("checks"), dict) else []:
        entry.pop("since", None)
    return document


def test_the_resident_loop_publishes_what_a_process_per_cycle_publishes(tmp_path, fake_nvml):
    """Three cycles with a fault in the second: main() per cycle (timer mode) and main(--loop)
    give the same health.json and agent-state.json, times and CPU aside."""
    oneshot, _c = write_config(tmp_path / "oneshot")
    resident, _c = write_config(tmp_path / "resident", interval=0.001)
    for scenario in ("h100-healthy", "h100-gpu-fell-off-bus", "h100-healthy"):
        fake_nvml(scenario)
        assert agent.main([str(oneshot)]) == 0
    scenarios = iter(["h100-gpu-fell-off-bus", "h100-healthy"])
    fake_nvml("h100-healthy")

    def run_cycle():
        status = agent.run_once(str(resident))
        fake_nvml(next(scenarios, "h100-healthy"))
        return status

    clock = Clock()
    agent.Loop(run_cycle, 10, clock.wait, clock=clock, notify=lambda message: None).run(max_cycles=3)
    for name in ("health.json", "agent-state.json"):
        assert _comparable(read(tmp_path / "resident", name)) == _comparable(read(tmp_path / "oneshot", name))
    assert read(tmp_path / "resident")["agent"]["healthy"] is False  # one passing cycle after the fault


def test_the_resident_agent_journals_a_damaged_sequence_file_by_name(tmp_path, fake_nvml, capsys, monkeypatch):
    """--loop with the kernel log on: an unreadable kmsg-seq.json is set aside and the journal
    names it at start-up (and reads the log from its start: nothing counted as seen)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_events

    boot = tmp_path / "boot_id"
    boot.write_text("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\n")
    monkeypatch.setattr(agent_events, "BOOT_ID", str(boot))
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"6,0,17,-;usb 1-1: new high-speed USB device\n")
    path, _config = write_config(tmp_path, interval=0.001, events={"kmsg": str(kmsg), "nvml": False})
    (tmp_path / "state" / "kmsg-seq.json").write_text('{"seq": 12, "boot_id": "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"')
    assert agent.main(["--loop", "--cycles", "1", str(path)]) == 0
    out = capsys.readouterr().out
    assert "events: kmsg: watching %s (%s is damaged (" % (kmsg, tmp_path / "state" / "kmsg-seq.json") in out
    assert "read from its start" in out
    assert read(tmp_path, "kmsg-seq.json") == {"seq": 0, "boot_id": "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"}
    assert [name for name in os.listdir(str(tmp_path / "state")) if name.startswith("kmsg-seq.json.damaged-")]
