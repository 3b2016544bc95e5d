"""Issue 46, fast confirmation counted by the hysteresis: a port's (or the fabric manager's) bad
fast-probe reading is confirmed by fail_after readings at least 0.9 confirmation intervals apart
and then counted as the check's fail_after measurements by the one targeted cycle it runs
(agent_signals.FastProbe, credited; agent_hysteresis.step, credit). In a simulated clock (the
targeted cycle instantaneous): a port down for less than (fail_after - 1) x 0.09 s is never
reported, one that stays down makes the node unhealthy within 0.7 s of the fault at the default
1 s probe; and the probe's held descriptors survive a device removed and added again."""

import errno
import os
import shutil

from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_heldfiles import HeldFiles
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_signals as sig
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import step

PORT = "port mlx5_0/1"
SETTINGS = {"fail_after": 3, "recover_after": 2, "immediate": set(), "per_check": {}}


class Clock(object):
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def make_tree(root):
    ports = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    ports.mkdir(parents=True)
    (ports / "state").write_text("4: ACTIVE\n")
    (ports / "rate").write_text("400 Gb/sec (4X NDR)\n")
    return ports


def port_check(ports):
    state = (ports / "state").read_text()
    return [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "pass" if "ACTIVE" in state else "fail",
             "message": state.strip()}]


def simulate(ports, clock, sources, start, duration, until):
    """Run the sources and a hysteresis fed by an instantaneous targeted cycle per signal: the port
    goes down at ``start`` for ``duration`` s (None: stays down). Returns (the clock when the node
    first turned unhealthy or None, the confirmation signals seen)."""
    state, _events = step({}, port_check(ports), SETTINGS, now=clock.now)
    unhealthy_at, confirmed, down = None, [], False
    events = [(start, "1: DOWN\n")] + ([(start + duration, "4: ACTIVE\n")] if duration is not None else [])
    while clock.now < until:
        due = sources.due()
        if events and events[0][0] <= due:
            clock.now, text = events.pop(0)
            (ports / "state").write_text(text)
            down = text.startswith("1")
            continue
        clock.now = due
        found = sources.poll()
        if found:
            checks = port_check(ports)
            confirmed += [why for _scope, why in found if "confirmed" in why]
            state, _events = step(state, checks, SETTINGS, now=clock.now, ran={"rdma.port.state|mlx5_0/1"},
                                  credit=sig.credited(sources.take_credits(), checks, None))
            if not state["healthy"] and unhealthy_at is None:
                unhealthy_at = clock.now
                assert down  # never unhealthy for a port that is up
    return unhealthy_at, confirmed


def sources_for(root, clock):
    return sig.SignalSources({"netlink": False, "uevent": False, "fast_probe_interval": 1, "fabricmanager_unit": None},
                             str(root), repeat=2, clock=clock, needs={"port": [3, 3, 3]})


@settings(max_examples=150, deadline=None)
@given(st.floats(0.0, 0.999), st.floats(0.0, 0.179))
def test_a_port_down_for_less_than_the_confirmation_window_is_never_reported(tmp_path_factory, phase, duration):
    root = tmp_path_factory.mktemp("node")
    ports = make_tree(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        unhealthy_at, confirmed = simulate(ports, clock, sources, 100.0 + phase, duration, 104.0)
        assert unhealthy_at is None and confirmed == []
    finally:
        sources.close()


@settings(max_examples=150, deadline=None)
@given(st.floats(0.0, 0.999))
def test_a_port_that_stays_down_makes_the_node_unhealthy_within_0_7_s(tmp_path_factory, phase):
    """The quick probe sees it within 0.5 s, two confirmation readings 0.1 s apart confirm it, one
    targeted cycle counts the three readings: within 1 s (0.7 s plus the cycle's own time)."""
    root = tmp_path_factory.mktemp("node")
    ports = make_tree(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        start = 100.0 + phase
        unhealthy_at, confirmed = simulate(ports, clock, sources, start, None, 104.0)
        assert unhealthy_at is not None and unhealthy_at - start <= 0.7 + 1e-6, (unhealthy_at, start)
        assert len(confirmed) == 1 and "bad at 3 readings" in confirmed[0]
    finally:
        sources.close()


@settings(max_examples=150, deadline=None)
@given(st.floats(0.0, 0.999), st.floats(0.5, 3.0))
def test_a_port_down_longer_than_the_window_and_a_probe_interval_is_reported_while_down(tmp_path_factory, phase,
                                                                                         duration):
    root = tmp_path_factory.mktemp("node")
    ports = make_tree(root)
    clock = Clock()
    sources = sources_for(root, clock)
    try:
        start = 100.0 + phase
        unhealthy_at, _confirmed = simulate(ports, clock, sources, start, duration, 105.0)
        if duration >= 0.5 + 0.2 + 1e-6:  # seen by a quick probe and confirmed twice while still down
            assert unhealthy_at is not None and unhealthy_at <= start + 0.7 + 1e-6
    finally:
        sources.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=1, max_size=12), st.integers(1, 5))
def test_a_credit_only_counts_a_check_failing_in_its_cycle(steps, fail_after):
    """agent_hysteresis.step with ``credit``: a check failing in the cycle has failed at least the
    credited count in a row (failing when that reaches fail_after); a passing check is never
    credited, never made failing by one; the count never goes down because of a credit."""
    settings_ = dict(SETTINGS, fail_after=fail_after)
    state = {}
    for failing_now, credit in steps:
        check = [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail" if failing_now else "pass",
                  "message": ""}]
        before = ((state.get("checks") or {}).get("rdma.port.state|mlx5_0/1") or {})
        state, _events = step(state, check, settings_, credit={"rdma.port.state|mlx5_0/1": credit} if credit else None)
        entry = state["checks"]["rdma.port.state|mlx5_0/1"]
        if failing_now:
            assert entry["fails"] == max(before.get("fails", 0) + 1, credit)
            if entry["fails"] >= fail_after:
                assert entry["failing"]
        else:
            assert entry["fails"] == 0  # a passing check is never credited
            assert entry["failing"] == (before.get("failing", False) and entry["passes"] < 2)


def test_credited_names_only_the_measured_checks_of_the_confirmed_target():
    checks = [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail"},
              {"id": "rdma.port.rate", "target": "mlx5_0/1", "status": "fail"},
              {"id": "rdma.port.state", "target": "mlx5_1/1", "status": "fail"},
              {"id": "rdma.devices", "target": "node", "status": "fail"}]
    credits = [[list(sig.PORT_CHECKS), "mlx5_0/1", 3]]
    assert sig.credited(credits, checks, None) == {"rdma.port.state|mlx5_0/1": 3, "rdma.port.rate|mlx5_0/1": 3}
    assert sig.credited(credits, checks, {"rdma.port.rate|mlx5_0/1"}) == {"rdma.port.rate|mlx5_0/1": 3}
    assert sig.credited([], checks, None) == {} and sig.credited(None, checks, None) == {}


# -- held descriptors across a device removed and added again ---------------------------------------------
def test_a_port_removed_and_added_again_with_its_files_held_open(tmp_path):
    ports = make_tree(tmp_path)
    probe = sig.FastProbe(str(tmp_path), unit=None, binding=None, repeat=2)
    assert probe.poll() == [] and sorted(probe.files.held) == sorted(str(ports / n) for n in ("rate", "state"))
    shutil.rmtree(str(tmp_path / "sys" / "class" / "infiniband" / "mlx5_0"))  # the device is gone
    assert probe.poll() == [] and probe.count[PORT] == 1  # gone reads as a bad reading (None), counted
    assert probe.last[PORT][1] == (None, None) and probe.files.held == {}  # the stale descriptors let go
    ports = make_tree(tmp_path)  # the device is back (its files are new inodes)
    (ports / "state").write_text("4: ACTIVE\n")
    found = probe.poll()
    assert [s for s, _ in found] == ["rdma:mlx5_0"] and "ACTIVE" in found[0][1]  # read again by path
    (ports / "state").write_text("1: DOWN\n")
    probe.poll()
    assert probe.last[PORT][1][0] == "1: DOWN"  # the new file, held again, sees a write
    probe.close()


def test_a_gpu_function_removed_and_added_again_is_gone_then_present(tmp_path):
    function = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:1b:00.0"
    function.mkdir(parents=True)
    (function / "vendor").write_text("0x10de\n")
    (function / "class").write_text("0x030200\n")
    (function / "config").write_bytes(b"\xde\x10\x30\x23" + b"\0" * 60)
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    (devices / "0000:1b:00.0").symlink_to(function)
    probe = sig.FastProbe(str(tmp_path), unit=None, binding=None, repeat=1)
    assert probe.gpus == ["0000:1b:00.0"] and probe.poll() == []
    saved = (function / "config").read_bytes()
    shutil.rmtree(str(function))
    found = probe.poll()
    assert [s for s, _ in found] == ["gpu"] and "gone" in found[0][1]
    function.mkdir(parents=True)
    (function / "config").write_bytes(saved)
    found = probe.poll()
    assert [s for s, _ in found] == ["gpu"] and "present" in found[0][1]
    probe.close()


def test_a_held_sysfs_descriptor_whose_node_was_removed_reads_as_gone_and_is_opened_again(tmp_path, monkeypatch):
    """Under root / (no link count check) a removed kernfs node fails the held descriptor's pread
    with ENODEV (Documentation/filesystems/sysfs.rst; kernfs_fop_read_iter of a removed node): that
    read is None (gone) while the path is absent, and the file reappearing is read again."""
    path = tmp_path / "state"
    path.write_text("4: ACTIVE\n")
    files = HeldFiles(check_inode=False)
    assert files.read(str(path)) == b"4: ACTIVE\n" and list(files.held) == [str(path)]
    real = os.pread

    def kernfs_pread(fd, size, offset):
        if os.fstat(fd).st_nlink == 0:  # the node was removed: what kernfs answers
            raise OSError(errno.ENODEV, "No such device")
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", kernfs_pread)
    path.unlink()
    assert files.read(str(path)) is None and files.held == {}  # gone
    assert files.read(str(path)) is None  # still gone: opened by path, nothing there
    path.write_text("1: DOWN\n")
    assert files.read(str(path)) == b"1: DOWN\n" and list(files.held) == [str(path)]  # back: held again
    files.close()
