"""Red team, area signals_confirm (issue 46, fast confirmation of RDMA port and fabric manager
readings), written from docs/contracts.md ("Node health agent", signals; Hysteresis;
agent.fabricmanager), docs/performance.md, roles/node_health_agent/README.md and the changelog
fragments agent-fast-signals.yml / agent-confirmed-probe-readings.yml only. Driven as
tests/unit/test_agent_signals*.py drive it: agent_signals.SignalSources / FastProbe over a fixture
sysfs tree, a simulated monotonic clock, agent_hysteresis.step fed by an instantaneous targeted
cycle per signal.

Promises attacked (contracts.md, signals):
- "a port (or the unit) bad for less than (fail_after - 1) x 0.9 confirmation intervals is never
  reported by the probe ..., not even as a failing check in checks"
- "one that stays bad for (fail_after - 1) confirmation intervals after a reading saw it is
  confirmed"; quick probe every fast_probe_interval / 2 ("none when that is under 0.1 s"),
  confirmation interval fast_probe_interval / 10, at least 0.1 s
- "recover_after passing measurements by cycles"; "a credit never lowers a count"
- "The probe's state lives in memory: a restart counts again from its first reading"
- "reads them again with pread ... one system call instead of open, read and close"; "read again alone"
- "intervals inside one process use the monotonic clock" (Time)."""

import errno
import os
import shutil
import time

import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_signals as sig
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import step

UNIT = "nvidia-fabricmanager.service"
ACTIVE, DOWN = "4: ACTIVE\n", "1: DOWN\n"
RATE = "400 Gb/sec (4X NDR)\n"
EPS = 1e-6
HS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


class Clock(object):
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def port_dir(root, device="mlx5_0", port=1):
    return root / "sys" / "class" / "infiniband" / device / "ports" / str(port)


def make_ports(root, devices=1, ports=1):
    for d in range(devices):
        for p in range(1, ports + 1):
            path = port_dir(root, "mlx5_%d" % d, p)
            path.mkdir(parents=True)
            (path / "state").write_text(ACTIVE)
            (path / "rate").write_text(RATE)
    return port_dir(root)


def install_unit(root, v1=False, running=True):
    (root / "lib" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    (root / "lib" / "systemd" / "system" / UNIT).write_text("[Service]\n")
    if v1:
        cgroup = root / "sys" / "fs" / "cgroup" / "systemd" / "system.slice" / UNIT
        cgroup.mkdir(parents=True)
        (cgroup / "cgroup.procs").write_text("4242\n" if running else "")
        return cgroup / "cgroup.procs"
    cgroup = root / "sys" / "fs" / "cgroup" / "system.slice" / UNIT
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.events").write_text("populated %d\nfrozen 0\n" % (1 if running else 0))
    return cgroup / "cgroup.events"


def sources_for(root, clock, interval=1.0, fail_after=3, unit=None):
    return sig.SignalSources({"netlink": False, "uevent": False, "fast_probe_interval": interval,
                              "fabricmanager_unit": unit}, str(root), repeat=fail_after - 1, clock=clock)


def is_confirm(why):
    return why.startswith(sig.CONFIRM_PREFIX) and "confirmed" in why


def port_checks(ports, target="mlx5_0/1"):
    try:
        state = (ports / "state").read_text()
    except OSError:
        state = ""
    return [{"id": "rdma.port.state", "target": target, "status": "pass" if state == ACTIVE else "fail",
             "message": state.strip()}]


def write(path, text):
    """Atomic replace, as Ansible's copy writes (a new inode behind the same path)."""
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as out:
        out.write(text)
    os.rename(tmp, str(path))


def drive(sources, clock, events, until, checks=None, fail_after=3, recover_after=2, ran=None):
    """Poll the sources at each due time up to ``until`` applying ``events`` [(t, callable)] on
    time; a targeted cycle (``checks()``) stepped through the hysteresis per poll that signalled.
    Returns (signals [(t, scope, why)], credits [(t, credit)], unhealthy_at [t...], state)."""
    events = sorted(events, key=lambda e: e[0])
    settings_ = {"fail_after": fail_after, "recover_after": recover_after, "immediate": set(), "per_check": {}}
    state = step({}, checks(), settings_, now=1000.0)[0] if checks else None
    signals, credits, unhealthy = [], [], []
    while True:
        due = sources.due()
        if events and events[0][0] <= min(due, until):
            when, action = events.pop(0)
            clock.now = max(clock.now, when)
            action()
            continue
        if due > until:
            break
        clock.now = due
        found = sources.poll()
        credit = sources.take_credits()
        for scope, why in found:
            signals.append((clock.now, scope, why))
        if credit:
            credits.append((clock.now, credit))
        if found and checks:
            measured = checks()
            state = step(state, measured, settings_, now=1000.0 + clock.now, ran=ran,
                         credit=sig.credited(credit, measured, None))[0]
            if not state["healthy"]:
                unhealthy.append(clock.now)
    return signals, credits, unhealthy, state


# -- flaps ------------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999), st.lists(st.tuples(st.floats(0.0, 0.1799), st.floats(0.101, 2.0)), min_size=1,
                                          max_size=8))
def test_repeated_flaps_shorter_than_the_window_at_any_phase_are_never_reported(tmp_path_factory, phase, flaps):
    """Down for < (fail_after - 1) x 0.9 x 0.1 s (0.18 s) each, up long enough for a confirmation
    reading to see it (> 0.1 s), repeated at any phase relative to the probe ticks: no
    confirmation, no credit, never a failing check, never unhealthy."""
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        events, t = [], 100.0 + phase
        for down, up in flaps:
            events.append((t, lambda: (ports / "state").write_text(DOWN)))
            events.append((t + down, lambda: (ports / "state").write_text(ACTIVE)))
            t += down + up
        signals, credits, unhealthy, state = drive(sources, clock, events, t + 3.0, lambda: port_checks(ports))
        assert not [s for s in signals if is_confirm(s[2])] and credits == [] and unhealthy == []
        assert state["checks"]["rdma.port.state|mlx5_0/1"]["failing"] is False
    finally:
        sources.close()


@settings(max_examples=30, deadline=None, suppress_health_check=HS)
@given(st.sampled_from([0.1, 0.15, 0.2, 0.5, 1.0, 2.0, 7.0, 3600.0]), st.integers(2, 8), st.floats(0.0, 0.999),
       st.floats(0.0, 0.999))
def test_a_flap_shorter_than_the_window_is_never_confirmed_at_any_interval_and_fail_after(
        tmp_path_factory, interval, fail_after, phase, fraction):
    ci = max(interval / 10.0, 0.1)
    window = (fail_after - 1) * 0.9 * ci
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    sources = sources_for(root, clock, interval, fail_after)
    try:
        start = 100.0 + phase * interval
        down = fraction * window * 0.999
        events = [(start, lambda: (ports / "state").write_text(DOWN)),
                  (start + down, lambda: (ports / "state").write_text(ACTIVE))]
        signals, credits, unhealthy, _state = drive(sources, clock, events, start + 3 * interval + 2 * window,
                                                    lambda: port_checks(ports), fail_after=fail_after)
        assert not [s for s in signals if is_confirm(s[2])] and credits == [] and unhealthy == []
    finally:
        sources.close()


# -- a persistent fault within the documented latency, at the limits of the settings ------------------------
def detection_bound(interval, fail_after):
    quick = interval / 2.0
    first = quick if quick >= 0.1 else interval  # "none when that is under 0.1 s"
    return first + (fail_after - 1) * max(interval / 10.0, 0.1)


@settings(max_examples=30, deadline=None, suppress_health_check=HS)
@given(st.sampled_from([0.1, 0.15, 0.2, 0.3, 1.0, 2.5, 60.0, 3600.0]), st.integers(1, 12), st.floats(0.0, 0.999),
       st.sampled_from(["state", "rate"]))
def test_a_port_that_stays_bad_is_confirmed_with_credit_fail_after_within_the_bound(
        tmp_path_factory, interval, fail_after, phase, what):
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    sources = sources_for(root, clock, interval, fail_after)
    try:
        start = 100.0 + phase * interval
        text = DOWN if what == "state" else "100 Gb/sec (1X NDR)\n"
        events = [(start, lambda: (ports / what).write_text(text))]
        bound = detection_bound(interval, fail_after)
        confirms_before = sources.counters()["probe_confirms"]
        signals, credits, _u, _s = drive(sources, clock, events, start + bound + 3 * interval)
        if fail_after == 1:  # an immediate check: the first bad reading signals, its cycle fails it
            assert signals and signals[0][1] == "rdma:mlx5_0" and signals[0][0] - start <= bound + EPS, signals
            return
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1, signals
        assert confirmed[0][0] - start <= bound + EPS, (confirmed[0][0] - start, bound)
        assert confirmed[0][1] == "rdma:mlx5_0"
        assert [c for _t, c in credits] == [[[list(sig.PORT_CHECKS), "mlx5_0/1", fail_after]]]
        # storm bound: at most 2 x fail_after confirmation readings per turn to bad
        assert sources.counters()["probe_confirms"] - confirms_before <= 2 * fail_after
    finally:
        sources.close()


def test_fail_after_1_is_confirmed_by_the_first_bad_reading(tmp_path):
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, 1.0, 1)
    try:
        signals, credits, unhealthy, _ = drive(sources, clock, [(100.2, lambda: (ports / "state").write_text(DOWN))],
                                               102.0, lambda: port_checks(ports), fail_after=1)
        assert unhealthy and unhealthy[0] <= 100.5 + EPS  # the first reading after the fault
        assert all(count == 1 for _t, c in credits for _ids, _target, count in c)
    finally:
        sources.close()


def test_probe_off_runs_nothing_and_reports_nothing(tmp_path):
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, 0)
    try:
        assert sources.status["probe"].startswith("off")
        (ports / "state").write_text(DOWN)
        assert sources.poll() == [] and sources.take_credits() == []
    finally:
        sources.close()


# -- recovery: cycles only -----------------------------------------------------------------------------------
def test_after_a_confirmed_port_comes_back_the_probe_signals_once_and_never_credits_a_pass(tmp_path):
    """recover_after counts cycles: the port back runs one targeted cycle (at once), and then the
    probe stays quiet, so recovery needs recover_after cycles (one targeted, then periodic)."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        events = [(100.2, lambda: (ports / "state").write_text(DOWN)),
                  (103.05, lambda: (ports / "state").write_text(ACTIVE))]
        signals, credits, unhealthy, state = drive(sources, clock, events, 110.0, lambda: port_checks(ports))
        assert unhealthy and unhealthy[0] <= 100.2 + 0.7 + EPS
        after = [s for s in signals if s[0] >= 103.05]
        assert len(after) == 1 and after[0][0] <= 103.5 + EPS, after  # one targeted cycle at the next quick probe
        assert len(credits) == 1
        entry = state["checks"]["rdma.port.state|mlx5_0/1"]
        assert entry["failing"] is True and entry["passes"] == 1 and state["healthy"] is False  # 1 of recover_after 2
    finally:
        sources.close()


def test_a_port_down_during_a_full_cycle_then_confirmed_counts_at_least_fail_after_never_more_by_credit():
    """Periodic cycle sees the port down (fails 1), then the confirmation's cycle with credit 3:
    failing; a credit never lowers a count; a passing periodic cycle then starts recovery."""
    settings_ = {"fail_after": 3, "recover_after": 2, "immediate": set(), "per_check": {}}
    down = [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail", "message": "1: DOWN"}]
    up = [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "pass", "message": "4: ACTIVE"}]
    state = step({}, up, settings_, now=1.0)[0]
    state = step(state, down, settings_, now=2.0)[0]  # the periodic cycle, during the fault
    assert state["healthy"] is True
    state = step(state, down, settings_, now=2.1, credit={"rdma.port.state|mlx5_0/1": 3})[0]
    assert state["healthy"] is False and state["checks"]["rdma.port.state|mlx5_0/1"]["fails"] >= 3
    state = step(state, down, settings_, now=3.0, credit={"rdma.port.state|mlx5_0/1": 1})[0]
    assert state["checks"]["rdma.port.state|mlx5_0/1"]["fails"] >= 4
    state = step(state, up, settings_, now=4.0, credit={"rdma.port.state|mlx5_0/1": 3})[0]
    assert state["healthy"] is False  # one passing cycle of recover_after 2; the credit counts no pass
    state = step(state, up, settings_, now=5.0)[0]
    assert state["healthy"] is True


# -- clocks --------------------------------------------------------------------------------------------------
def run_with_wall_clock(tmp_path_factory, monkeypatch, jumpy, steps, phase):
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    if jumpy:
        values = iter(steps * 10000)
        monkeypatch.setattr(time, "time", lambda: 1.7e9 + next(values, 0.0))
    sources = sources_for(root, clock)
    try:
        start = 100.0 + phase
        events = [(start, lambda: (ports / "state").write_text(DOWN)),
                  (start + 0.15, lambda: (ports / "state").write_text(ACTIVE)),
                  (start + 1.5, lambda: (ports / "state").write_text(DOWN))]
        signals, credits, _u, _s = drive(sources, clock, events, start + 4.0)
        return [(round(t, 6), s, is_confirm(w)) for t, s, w in signals], credits
    finally:
        sources.close()
        monkeypatch.undo()


@settings(max_examples=40, deadline=None, suppress_health_check=HS)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20), st.floats(0.0, 0.999))
def test_wall_clock_steps_between_confirmation_readings_change_nothing(tmp_path_factory, monkeypatch, steps, phase):
    """The confirmation runs on the monotonic clock (Time): the wall clock jumping (back, ahead)
    at every call changes neither when nor whether a port is confirmed."""
    results = [run_with_wall_clock(tmp_path_factory, monkeypatch, jumpy, steps, phase) for jumpy in (False, True)]
    assert results[0] == results[1]


def test_a_monotonic_jump_between_readings_still_confirms_a_port_that_stayed_down(tmp_path):
    """The process stopped (SIGSTOP, a hung host) between two readings: readings far apart are
    still spaced readings; a port that stayed down is confirmed, nothing crashes."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        (ports / "state").write_text(DOWN)
        clock.now = sources.due()
        sources.poll()
        assert sources.probe.pending()
        clock.now += 5000.0
        found = []
        for _ in range(10):
            clock.now = max(clock.now, sources.due())
            found += sources.poll()
            if any(is_confirm(w) for _s, w in found):
                break
        assert any(is_confirm(w) for _s, w in found)
    finally:
        sources.close()


# -- restart in the middle of a confirmation -----------------------------------------------------------------
@pytest.mark.parametrize("counted", [1, 2])
def test_a_restart_mid_confirmation_counts_again_from_its_first_reading(tmp_path, counted):
    """contracts: "The probe's state lives in memory: a restart counts again from its first reading
    (a port already down is confirmed like any bad reading)"."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    (ports / "state").write_text(DOWN)
    for _ in range(counted):
        clock.now = sources.due()
        assert not any(is_confirm(w) for _s, w in sources.poll())
    sources.close()
    clock.now += 0.01  # the new process starts at once
    start = clock.now
    again = sources_for(tmp_path, clock)
    try:
        signals, credits, _u, _s = drive(again, clock, [], start + 2.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][0] - start <= 2 * 0.1 + EPS, signals
        assert [c for _t, c in credits] == [[[list(sig.PORT_CHECKS), "mlx5_0/1", 3]]]  # never more than 3
    finally:
        again.close()


def test_a_restart_after_the_port_came_back_reports_nothing(tmp_path):
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    (ports / "state").write_text(DOWN)
    clock.now = sources.due()
    sources.poll()
    sources.close()
    (ports / "state").write_text(ACTIVE)
    again = sources_for(tmp_path, clock)
    try:
        signals, credits, _u, _s = drive(again, clock, [], clock.now + 3.0)
        assert signals == [] and credits == []
    finally:
        again.close()


# -- hostile sysfs contents and errors -----------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=HS)
@given(st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\n", b"\x00" * 8, b"4:\n", b"ACTIVE", b"1: DOWN",
                                                           b"4: ACTIV\n", b"\xff\xfe4: ACTIVE\n", b"4: ACTIVE" * 2000,
                                                           b"x" * (1 << 20)])))
def test_any_port_state_bytes_never_crash_and_what_is_not_active_is_a_bad_reading(shared_tree, content):
    root, ports = shared_tree
    probe = sig.FastProbe(str(root), unit=None, binding=None, repeat=2)
    try:
        probe.poll()
        (ports / "state").write_bytes(content)
        probe.poll()
        if b"ACTIVE" not in content:
            assert probe.pending() == ["port mlx5_0/1"], content
        probe.poll(probe.pending())
        probe.poll(probe.pending())
    finally:
        (ports / "state").write_text(ACTIVE)
        probe.close()


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    return root, make_ports(root)


@settings(max_examples=40, deadline=None, suppress_health_check=HS)
@given(st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\n", b"Gb/sec", b"-400 Gb/sec\n", b"nan Gb/sec\n",
                                                           b"1e400 Gb/sec\n", b"400 Gb/sec" * 5000])))
def test_any_port_rate_bytes_never_crash_the_probe(shared_tree, content):
    root, ports = shared_tree
    probe = sig.FastProbe(str(root), unit=None, binding=None, repeat=2)
    try:
        probe.poll()
        (ports / "rate").write_bytes(content)
        probe.poll()
        probe.poll(probe.pending())
        probe.poll(probe.pending(), quick=True)
    finally:
        (ports / "rate").write_text(RATE)
        probe.close()


@pytest.mark.parametrize("code", [errno.ENODEV, errno.EIO, errno.EAGAIN, errno.ENXIO])
def test_a_held_port_file_whose_read_fails_is_a_bad_reading_never_a_crash(tmp_path, monkeypatch, code):
    ports = make_ports(tmp_path)
    probe = sig.FastProbe(str(tmp_path), unit=None, binding=None, repeat=2)
    try:
        assert probe.poll() == []
        real = os.pread
        state = str(ports / "state")

        def failing(fd, size, offset):
            if os.path.realpath("/proc/self/fd/%d" % fd) == os.path.realpath(state):
                raise OSError(code, os.strerror(code))
            return real(fd, size, offset)

        monkeypatch.setattr(os, "pread", failing)
        probe.poll()
        assert probe.pending() == ["port mlx5_0/1"]  # unreadable: bad, counted
        probe.poll(probe.pending())
        found = probe.poll(probe.pending())
        assert [s for s, w in found if is_confirm(w)] == ["rdma:mlx5_0"]  # stays unreadable: confirmed
        monkeypatch.undo()
        found = probe.poll()
        assert [s for s, _w in found] == ["rdma:mlx5_0"] and probe.pending() == []  # readable and ACTIVE: back
    finally:
        probe.close()


# -- device removed and added again while held --------------------------------------------------------------
@pytest.mark.parametrize("back", [ACTIVE, DOWN])
def test_an_hca_removed_mid_confirmation_and_added_again(tmp_path, back):
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    device = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0"
    try:
        (ports / "state").write_text(DOWN)
        clock.now = sources.due()
        sources.poll()  # 1
        shutil.rmtree(str(device))
        clock.now = sources.due()
        sources.poll()  # 2 (gone: bad)
        make_ports(tmp_path)
        (ports / "state").write_text(back)
        signals, credits, _u, _s = drive(sources, clock, [], clock.now + 3.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        if back == ACTIVE:
            assert confirmed == [] and credits == []
        else:
            assert len(confirmed) == 1 and len(credits) == 1
    finally:
        sources.close()


@settings(max_examples=25, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999))
def test_a_port_file_replaced_by_rename_down_is_confirmed_by_the_next_full_probe(tmp_path_factory, phase):
    """contracts: "a held file replaced by a rename under a lab root is seen by the next full probe":
    confirmed within one probe interval and (fail_after - 1) confirmation intervals."""
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        start = 100.0 + phase
        signals, credits, _u, _s = drive(sources, clock, [(start, lambda: write(ports / "state", DOWN))],
                                         start + 4.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][0] - start <= 1.0 + 0.2 + EPS
        assert len(credits) == 1
    finally:
        sources.close()


# -- the fabric manager ------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999), st.lists(st.tuples(st.floats(0.0, 0.1799), st.floats(0.101, 1.5)), min_size=1,
                                          max_size=6), st.booleans())
def test_fabric_manager_populated_flapping_is_never_reported(tmp_path_factory, phase, flaps, remove):
    """populated 0 (or the cgroup removed, as systemd does when the unit stops) for less than the
    window, again and again: never confirmed, no credit."""
    root = tmp_path_factory.mktemp("node")
    make_ports(root)
    events_file = install_unit(root)
    cgroup = events_file.parent
    clock = Clock()
    sources = sources_for(root, clock, unit=UNIT)

    def stop():
        if remove:
            shutil.rmtree(str(cgroup))
        else:
            events_file.write_text("populated 0\nfrozen 0\n")

    def start_():
        cgroup.mkdir(exist_ok=True)
        events_file.write_text("populated 1\nfrozen 0\n")

    try:
        events, t = [], 100.0 + phase
        for down, up in flaps:
            events += [(t, stop), (t + down, start_)]
            t += down + up
        signals, credits, _u, _s = drive(sources, clock, events, t + 3.0)
        assert not [s for s in signals if is_confirm(s[2])] and credits == []
    finally:
        sources.close()


@pytest.mark.parametrize("how", ["populated 0", "removed", "garbage", "empty", "two populated"])
def test_a_stopped_or_unreadable_fabric_manager_is_confirmed_within_the_bound(tmp_path, how):
    make_ports(tmp_path)
    events_file = install_unit(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    actions = {"populated 0": lambda: events_file.write_text("populated 0\nfrozen 0\n"),
               "removed": lambda: shutil.rmtree(str(events_file.parent)),
               "garbage": lambda: events_file.write_bytes(b"\xff\x00populated 1 extra\n"),
               "empty": lambda: events_file.write_text(""),
               "two populated": lambda: events_file.write_text("populated 1\npopulated 1\n")}
    try:
        start = 100.33
        signals, credits, _u, _s = drive(sources, clock, [(start, actions[how])], start + 3.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][1] == "fabricmanager", signals
        # a removal under a lab root is an unlinked held file: "seen by the next full probe, which looks at
        # link counts" (the 0.5 s bound for it: /work/notes/redteam-signals_confirm-failing.py F1)
        bound = (1.0 if how == "removed" else 0.5) + 0.2
        assert confirmed[0][0] - start <= bound + EPS
        assert [c for _t, c in credits] == [[[["agent.fabricmanager"], "node", 3]]]
        check = sig.fabricmanager_check(str(tmp_path), UNIT)
        assert check is not None and check["status"] == "fail"
    finally:
        sources.close()


def test_a_cgroup_v1_host_fabric_manager_running_then_stopped(tmp_path):
    make_ports(tmp_path)
    procs = install_unit(tmp_path, v1=True)
    assert sig.fabricmanager_check(str(tmp_path), UNIT)["status"] == "pass"
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    try:
        assert drive(sources, clock, [], 102.0)[0] == []  # running: silent
        procs.write_text("")
        signals, credits, _u, _s = drive(sources, clock, [], clock.now + 2.0)
        assert [s[1] for s in signals if is_confirm(s[2])] == ["fabricmanager"] and len(credits) == 1
        assert sig.fabricmanager_check(str(tmp_path), UNIT)["status"] == "fail"
    finally:
        sources.close()


# -- many ports: cost per tick ---------------------------------------------------------------------------------
class Counting(object):
    def __init__(self, monkeypatch):
        self.opens = self.reads = self.stats = 0
        real_open, real_pread, real_read, real_stat = os.open, os.pread, os.read, os.stat

        def opener(*args, **kwargs):
            self.opens += 1
            return real_open(*args, **kwargs)

        def preader(*args, **kwargs):
            self.reads += 1
            return real_pread(*args, **kwargs)

        def reader(*args, **kwargs):
            self.reads += 1
            return real_read(*args, **kwargs)

        def stater(*args, **kwargs):
            self.stats += 1
            return real_stat(*args, **kwargs)

        monkeypatch.setattr(os, "open", opener)
        monkeypatch.setattr(os, "pread", preader)
        monkeypatch.setattr(os, "read", reader)
        monkeypatch.setattr(os, "stat", stater)

    def reset(self):
        self.opens = self.reads = self.stats = 0


def test_16_hcas_x_2_ports_quick_probe_and_confirmation_costs(tmp_path, monkeypatch):
    """32 ports and the unit (65 files, under the 256 held): a quick probe in the steady state opens
    nothing and reads each held file once (pread); a confirmation reads the one port alone."""
    make_ports(tmp_path, devices=16, ports=2)
    install_unit(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    try:
        assert "32 RDMA port(s)" in sources.status["probe"], sources.status
        for _ in range(4):
            clock.now = sources.due()
            assert sources.poll() == []
        count = Counting(monkeypatch)
        clock.now = sources.due()
        assert sources.poll() == []
        assert count.opens == 0 and count.reads <= 65, (count.opens, count.reads)
        port_dir(tmp_path, "mlx5_7", 2).joinpath("state").write_text(DOWN)
        clock.now = sources.due()
        sources.poll()
        assert sources.probe.pending() == ["port mlx5_7/2"]
        count.reset()
        clock.now = sources.due()
        sources.poll()  # a confirmation reading: the port alone
        assert count.opens == 0 and count.reads <= 2, (count.opens, count.reads)
    finally:
        sources.close()


# -- distinct fail_after among a port's checks -------------------------------------------------------------------
def test_per_check_fail_after_each_check_turns_failing_at_its_own_count_never_before(tmp_path):
    """per_check fail_after 2 / 3 / 5 for the port's three checks: "each distinct fail_after among
    them" is confirmed; each check turns failing exactly when its own count is reached."""
    ports = make_ports(tmp_path)
    (ports / "phys_state").write_text("5: LinkUp\n")
    clock = Clock()
    sources = sig.SignalSources({"netlink": False, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(tmp_path), repeat=4, clock=clock,
                                needs={"port": [2, 3, 5]})
    per_check = {"rdma.port.state": {"fail_after": 2, "recover_after": 2},
                 "rdma.port.phys_state": {"fail_after": 3, "recover_after": 2},
                 "rdma.port.rate": {"fail_after": 5, "recover_after": 2}}
    settings_ = {"fail_after": 3, "recover_after": 2, "immediate": set(), "per_check": per_check}

    def checks():
        down = (ports / "state").read_text() != ACTIVE
        return [{"id": i, "target": "mlx5_0/1", "status": "fail" if down else "pass", "message": ""}
                for i in sig.PORT_CHECKS]

    state = step({}, checks(), settings_, now=1.0)[0]
    try:
        (ports / "state").write_text(DOWN)
        readings = 0
        while clock.now < 103.0:
            clock.now = sources.due()
            found = sources.poll()
            if sources.probe.count.get("port mlx5_0/1"):
                readings = sources.probe.count["port mlx5_0/1"]
            credit = sources.take_credits()
            if found:
                measured = checks()
                state = step(state, measured, settings_, now=clock.now, credit=sig.credited(credit, measured, None))[0]
                for cid, need in (("rdma.port.state", 2), ("rdma.port.phys_state", 3), ("rdma.port.rate", 5)):
                    entry = state["checks"][cid + "|mlx5_0/1"]
                    assert entry["failing"] == (entry["fails"] >= need)
        assert all(state["checks"][c + "|mlx5_0/1"]["failing"] for c in sig.PORT_CHECKS), (readings, state)
    finally:
        sources.close()


# -- a real node's kernfs: a removed cgroup's held descriptor answers ENODEV --------------------------------------
def kernfs_pread(monkeypatch):
    real = os.pread

    def pread(fd, size, offset):
        if os.fstat(fd).st_nlink == 0:  # the node was removed: what kernfs answers (kernfs_fop_read_iter)
            raise OSError(errno.ENODEV, "No such device")
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)


@pytest.mark.parametrize("what", ["fabric manager cgroup", "port"])
def test_on_kernfs_a_removed_file_is_seen_by_the_quick_probe(tmp_path, monkeypatch, what):
    """systemd removes the unit's cgroup when it stops; a device removal removes its port files: the
    held descriptor's pread fails with ENODEV (contracts: "a removed file ... fails that read (ENODEV)
    and is opened again by path"): confirmed within the quick probe's 0.5 s and 0.2 s."""
    ports = make_ports(tmp_path)
    events_file = install_unit(tmp_path)
    kernfs_pread(monkeypatch)
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    remove = (lambda: shutil.rmtree(str(events_file.parent))) if what != "port" else \
        (lambda: shutil.rmtree(str(ports.parent.parent)))
    try:
        start = 100.33
        signals, credits, _u, _s = drive(sources, clock, [(start, remove)], start + 3.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][0] - start <= 0.5 + 0.2 + EPS, signals
        assert len(credits) == 1
    finally:
        sources.close()


# -- more ports than the probe holds -----------------------------------------------------------------------------
def test_more_port_files_than_the_held_limit_never_crash_and_a_port_past_it_is_still_confirmed(tmp_path):
    """130 HCAs x 1 port (260 files, the unit's too): the probe holds at most 256 files (contracts);
    the others are still read, so any port down is confirmed like the first."""
    make_ports(tmp_path, devices=130, ports=1)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        assert "130 RDMA port(s)" in sources.status["probe"]
        assert len(sources.probe.files.held) <= 256
        for device in ("mlx5_0", "mlx5_129"):
            path = port_dir(tmp_path, device) / "state"
            start = clock.now + 0.01
            signals, credits, _u, _s = drive(sources, clock, [(start, lambda path=path: path.write_text(DOWN))], start + 2.0)
            confirmed = [s for s in signals if is_confirm(s[2])]
            assert [s[1] for s in confirmed] == ["rdma:" + device] and confirmed[0][0] - start <= 0.7 + EPS, signals
            assert len(credits) == 1 and len(sources.probe.files.held) <= 256
            path.write_text(ACTIVE)
            drive(sources, clock, [], clock.now + 1.0)
    finally:
        sources.close()


# -- a netlink announcement arms confirmation readings at any phase of the probe ---------------------------------
@pytest.fixture(scope="module")
def dgx_tree(tmp_path_factory):
    from nvml_scenarios import NODES  # pylint: disable=import-outside-toplevel
    root = tmp_path_factory.mktemp("dgx") / "node"
    shutil.copytree(os.path.join(NODES, "dgx-h100"), str(root), symlinks=True)
    return root


@settings(max_examples=25, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999), st.floats(0.0, 0.1799), st.booleans())
def test_a_netlink_armed_confirmation_at_any_phase_never_reports_a_flap_under_the_window(dgx_tree, phase, down,
                                                                                        twice):
    """The announcement's readings and the quick probe's interleave at any phase ("a quick probe and a
    confirmation a moment apart are one measurement"): a port down for < 0.18 s, announced when it
    went down (and, ``twice``, when it came back), is never confirmed and never credited."""
    import socket  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl  # pylint: disable=import-outside-toplevel
    state = port_dir(dgx_tree) / "state"
    state.write_text(ACTIVE)
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    clock = Clock()
    sources = sig.SignalSources({"netlink": True, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(dgx_tree), repeat=2, clock=clock,
                                sockets={"netlink": route})
    found, credits = [], []

    def announce(operstate):
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=operstate))
        found.extend(sources.poll())
        credits.extend(sources.take_credits())

    try:
        start = 100.0 + phase
        events = [(start, lambda: (state.write_text(DOWN), announce(2))),
                  (start + down, lambda: (state.write_text(ACTIVE), twice and announce(6)))]
        signals, more, _u, _s = drive(sources, clock, events, start + 3.0)
        assert not [w for _s, w in found if is_confirm(w)] and not [s for s in signals if is_confirm(s[2])]
        assert credits == [] and more == []
    finally:
        sources.close()
        route_in.close()
        state.write_text(ACTIVE)


@settings(max_examples=15, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999))
def test_a_netlink_announced_port_down_is_confirmed_once_with_credit_3(dgx_tree, phase):
    import socket  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl  # pylint: disable=import-outside-toplevel
    state = port_dir(dgx_tree) / "state"
    state.write_text(ACTIVE)
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    clock = Clock()
    sources = sig.SignalSources({"netlink": True, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(dgx_tree), repeat=2, clock=clock,
                                sockets={"netlink": route})
    found, credits = [], []

    def announce():
        state.write_text(DOWN)
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))
        found.extend((clock.now, s, w) for s, w in sources.poll())
        credits.extend(sources.take_credits())

    try:
        start = 100.0 + phase
        signals, more, _u, _s = drive(sources, clock, [(start, announce)], start + 3.0)
        confirmed = [s for s in found + signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][0] - start <= 0.5 + 0.2 + EPS, found + signals
        assert credits + [c for _t, batch in more for c in batch] == [[list(sig.PORT_CHECKS), "mlx5_0/1", 3]]
    finally:
        sources.close()
        route_in.close()
        state.write_text(ACTIVE)


@settings(max_examples=20, deadline=None, suppress_health_check=HS)
@given(st.floats(0.0, 0.999), st.floats(0.75, 1.5), st.floats(0.51, 1.0), st.integers(2, 6))
def test_a_port_flapping_with_long_down_runs_is_confirmed_once_per_run_and_signals_once_per_up_run(
        tmp_path_factory, phase, down, up, runs):
    """Down runs long enough to be seen and confirmed (> 0.5 + 0.2 s), up runs between: one
    confirmation per run of bad readings, one signal (one targeted cycle) per return to good; the
    node turns unhealthy in the first run and recovers only through recover_after passing cycles."""
    root = tmp_path_factory.mktemp("node")
    ports = make_ports(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        events, t, windows = [], 100.0 + phase, []
        for _ in range(runs):
            events += [(t, lambda: (ports / "state").write_text(DOWN)),
                       (t + down, lambda: (ports / "state").write_text(ACTIVE))]
            windows.append((t, t + down, t + down + up))
            t += down + up
        signals, credits, unhealthy, state = drive(sources, clock, events, t + 2.0, lambda: port_checks(ports))
        confirmed = [s[0] for s in signals if is_confirm(s[2])]
        for start, end, next_start in windows:
            assert len([c for c in confirmed if start <= c < end + EPS]) == 1, (start, end, signals)
            assert len([s for s in signals if end < s[0] < next_start and not is_confirm(s[2])]) <= 1, signals
        assert len(confirmed) == runs and len(credits) == runs
        assert unhealthy and unhealthy[0] <= windows[0][0] + 0.7 + EPS
        entry = state["checks"]["rdma.port.state|mlx5_0/1"]
        assert entry["passes"] <= 1 and entry["failing"] is True  # one targeted cycle after the last run
    finally:
        sources.close()


@pytest.mark.parametrize("code", [errno.EIO, errno.ENODEV])
def test_a_held_fabric_manager_cgroup_file_whose_read_fails_is_confirmed_not_running(tmp_path, monkeypatch, code):
    make_ports(tmp_path)
    events_file = install_unit(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    real = os.pread
    target = os.path.realpath(str(events_file))

    def failing(fd, size, offset):
        if os.path.realpath("/proc/self/fd/%d" % fd) == target:
            raise OSError(code, os.strerror(code))
        return real(fd, size, offset)

    try:
        start = 100.33
        signals, credits, _u, _s = drive(sources, clock, [(start, lambda: monkeypatch.setattr(os, "pread", failing))],
                                         start + 2.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert [s[1] for s in confirmed] == ["fabricmanager"] and confirmed[0][0] - start <= 0.7 + EPS, signals
        assert [c for _t, c in credits] == [[[["agent.fabricmanager"], "node", 3]]]
        monkeypatch.undo()
        signals, credits, _u, _s = drive(sources, clock, [], clock.now + 2.0)
        assert [s[1] for s in signals] == ["fabricmanager"] and credits == []  # readable again: back, once
    finally:
        monkeypatch.undo()
        sources.close()


def test_fail_after_100_is_confirmed_once_after_99_confirmation_intervals_within_the_storm_bound(tmp_path):
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock, 1.0, 100)
    try:
        start = 100.2
        signals, credits, _u, _s = drive(sources, clock, [(start, lambda: (ports / "state").write_text(DOWN))],
                                         start + 20.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0][0] - start <= 0.5 + 99 * 0.1 + EPS, signals[:3]
        assert [c for _t, c in credits] == [[[list(sig.PORT_CHECKS), "mlx5_0/1", 100]]]
        assert sources.counters()["probe_confirms"] <= 200
    finally:
        sources.close()


def test_a_netlink_storm_on_a_port_that_stays_down_is_one_confirmation_and_bounded_readings(dgx_tree):
    """RTM_NEWLINK every 50 ms for 10 s (a link bouncing at the PHY while its port stays down):
    "one confirmation signal per run of bad readings", "at most 2 x fail_after confirmation readings
    per turn to bad or arming", "an item armed at most once per probe"."""
    import socket  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl  # pylint: disable=import-outside-toplevel
    state = port_dir(dgx_tree) / "state"
    state.write_text(ACTIVE)
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    clock = Clock()
    sources = sig.SignalSources({"netlink": True, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(dgx_tree), repeat=2, clock=clock,
                                sockets={"netlink": route})
    found, credits = [], []

    def announce():
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))
        found.extend(sources.poll())
        credits.extend(sources.take_credits())

    try:
        confirms = sources.counters()["probe_confirms"]
        events = [(100.01, lambda: state.write_text(DOWN))] + [(100.02 + 0.05 * i, announce) for i in range(200)]
        signals, more, _u, _s = drive(sources, clock, events, 110.5)
        confirmed = [w for _s, w in found if is_confirm(w)] + [s for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1, confirmed
        assert len(credits) + sum(len(batch) for _t, batch in more) == 1
        assert sources.counters()["probe_confirms"] - confirms <= (11 + 1) * 2 * 3, sources.counters()
    finally:
        sources.close()
        route_in.close()
        state.write_text(ACTIVE)


@pytest.mark.parametrize("gap", [0.0, 0.001, 0.04, 0.089])
def test_readings_a_moment_apart_are_one_measurement(tmp_path, gap):
    """Polled again and again at (nearly) the same monotonic instant (a coarse clock, a wake-up per
    source): "each bad reading taken at least 0.9 confirmation intervals after the last one counted
    ... is one more measurement; a quick probe and a confirmation a moment apart are one measurement"."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        (ports / "state").write_text(DOWN)
        clock.now = sources.due()
        first = clock.now
        found = []
        for i in range(30):
            clock.now = first + (gap * i if gap < 0.09 / 30 else min(gap, 0.089))
            found += sources.poll()
            found += sources.probe.poll(sources.probe.pending(), quick=True)
        assert not [w for _s, w in found if is_confirm(w)] and sources.take_credits() == []
        assert sources.probe.count["port mlx5_0/1"] == 1  # all within 0.89 confirmation intervals of the first
        signals, _credits, _u, _s = drive(sources, clock, [], first + 2.0)
        confirmed = [s[0] for s in signals if is_confirm(s[2])]
        assert len(confirmed) == 1 and confirmed[0] - first >= 2 * 0.09 - EPS
    finally:
        sources.close()


@pytest.mark.parametrize("how", ["populated 0", "no cgroup"])
def test_a_fabric_manager_already_stopped_at_the_start_is_confirmed_within_the_confirmation(tmp_path, how):
    """"a bad first reading ... (the fabric manager not running) signals like a change and is
    confirmed like any bad reading, so a fault already there when the agent starts turns failing
    within seconds"."""
    make_ports(tmp_path)
    events_file = install_unit(tmp_path, running=False)
    if how == "no cgroup":
        shutil.rmtree(str(events_file.parent))
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    try:
        signals, credits, _u, _s = drive(sources, clock, [], 103.0)
        confirmed = [s for s in signals if is_confirm(s[2])]
        assert [s[1] for s in confirmed] == ["fabricmanager"] and confirmed[0][0] - 100.0 <= 0.2 + EPS, signals
        assert [c for _t, c in credits] == [[[["agent.fabricmanager"], "node", 3]]]
    finally:
        sources.close()


def test_a_fabric_manager_unit_not_installed_is_not_watched(tmp_path):
    make_ports(tmp_path)
    cgroup = tmp_path / "sys" / "fs" / "cgroup" / "system.slice" / UNIT
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    clock = Clock()
    sources = sources_for(tmp_path, clock, unit=UNIT)
    try:
        assert UNIT not in sources.status["probe"]
        signals, credits, _u, _s = drive(sources, clock, [(100.3, lambda: shutil.rmtree(str(cgroup)))], 103.0)
        assert signals == [] and credits == [] and sig.fabricmanager_check(str(tmp_path), UNIT) is None
    finally:
        sources.close()


def test_f2_flaps_whose_up_gaps_no_reading_falls_into_are_one_run_of_bad_readings(tmp_path):
    """contracts.md: "a port (or the unit) bad for less than (fail_after - 1) x 0.9 confirmation
    intervals is never reported by the probe (0.18 s ...)", Hysteresis: "so a port down for less than
    (fail_after - 1) x 0.9 confirmation intervals (0.18 s at the defaults) is never reported by the
    probe". Down 0.15 s, up 0.02 s, repeated: every down period is under 0.18 s, yet the readings
    (0.1 s apart) never fall into an up gap and the port is confirmed. The promise holds only per run
    of bad READINGS; the sentence now says so (a sampler cannot see a gap between its readings)."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        events, t = [], 100.05
        for _ in range(20):
            events += [(t, lambda: (ports / "state").write_text(DOWN)),
                       (t + 0.15, lambda: (ports / "state").write_text(ACTIVE))]
            t += 0.17
        signals, credits, _u, _s = drive(sources, clock, events, t + 2.0)
        # decided (contracts.md, flap semantics per run of bad readings): the port is confirmed, once
        assert len([s for s in signals if is_confirm(s[2])]) == 1 and credits, (signals, credits)
    finally:
        sources.close()


def test_f3_a_port_rate_above_the_first_seen_is_not_a_bad_reading(tmp_path):
    """contracts.md signals: "per RDMA port state and rate (not ACTIVE, or a rate below the first one
    seen: a retrain to fewer lanes or a lower speed)". A port that came up at 400 and retrains to 800
    (or one that came up degraded at the agent's start and recovers its full rate) is ACTIVE at a
    higher rate: not bad. Got: "probe confirm: port mlx5_0/1 confirmed: bad at 3 readings over
    0.20 s: ('4: ACTIVE', '800 Gb/sec (4X XDR)')" and a credit of 3 for the port's checks."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        signals, credits, _u, _s = drive(sources, clock,
                                         [(100.3, lambda: (ports / "rate").write_text("800 Gb/sec (4X XDR)\n"))],
                                         103.0)
        assert not [s for s in signals if is_confirm(s[2])] and credits == [], (signals, credits)
    finally:
        sources.close()


def test_f4_an_hca_back_at_the_same_address_keeps_its_rate_baseline(tmp_path):
    """contracts.md signals: "The first reading (at a start, a restart, a new discovery after a
    uevent) is the baseline: a good one stays silent". An HCA added again (PCI add uevent) whose port
    now trains at 100 Gb/s (was 200): ACTIVE, so a good first reading of the new discovery -> silent.
    Got: confirmed bad at 3 readings with credit 3 (the old baseline kept). The safer
    behaviour (a re-added HCA at a lower rate is flagged) was chosen and the docs now say so."""
    import socket  # pylint: disable=import-outside-toplevel
    from nvml_scenarios import NODES  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl  # pylint: disable=import-outside-toplevel
    root = tmp_path / "node"
    shutil.copytree(os.path.join(NODES, "dgx-h100"), str(root), symlinks=True)
    rate = port_dir(root) / "rate"
    rate.write_text("200 Gb/sec (2X NDR)\n")
    uevent, uevent_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    clock = Clock()
    sources = sig.SignalSources({"netlink": False, "uevent": True, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(root), repeat=2, clock=clock,
                                sockets={"uevent": uevent})

    def readd():
        rate.write_text("100 Gb/sec (1X NDR)\n")
        uevent_in.send(nl.build_uevent("add", "/devices/pci0000:10/0000:10:03.0/0000:11:00.0/0000:12:01.0/0000:1a:00.0",
                                       SUBSYSTEM="pci", PCI_ID="15B3:1021", PCI_SLOT_NAME="0000:1a:00.0", SEQNUM="5"))
        assert [s for s, _w in sources.poll()] == ["rdma"]

    try:
        signals, credits, _u, _s = drive(sources, clock, [(100.3, readd)], 103.0)
        assert [s for s in signals if is_confirm(s[2])] and credits, (signals, credits)
    finally:
        sources.close()
        uevent_in.close()


def test_f3b_a_port_that_trained_up_and_falls_back_is_a_downgrade(tmp_path):
    """contracts.md signals: bad is "a rate below the highest one seen ... a port that trains up raises
    its baseline". 400 -> 800 (silent) -> 400 again (a retrain to a lower speed): confirmed bad."""
    ports = make_ports(tmp_path)
    clock = Clock()
    sources = sources_for(tmp_path, clock)
    try:
        signals, credits, _u, _s = drive(sources, clock,
                                         [(100.3, lambda: (ports / "rate").write_text("800 Gb/sec (4X XDR)\n")),
                                          (102.3, lambda: (ports / "rate").write_text("400 Gb/sec (4X NDR)\n"))],
                                         105.0)
        confirms = [s for s in signals if is_confirm(s[2])]
        assert len(confirms) == 1 and confirms[0][0] >= 102.3 and credits, (signals, credits)
    finally:
        sources.close()
