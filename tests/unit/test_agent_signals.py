"""The resident agent's fast signals (plugins/module_utils/agent/agent_netlink.py, agent_signals.py):
the strict readers of rtnetlink link messages and kernel uevents (any bytes -> events or a counted
drop, never an exception), which checks a signal concerns (plan, targeted_params, merge_targeted,
hysteresis of a targeted cycle), the fast probe over the DGX H100 fixture tree with the fake NVML,
the fabric manager check, and the ``signals`` settings.

Message layouts are written from the kernel's uapi headers (include/uapi/linux/netlink.h
``struct nlmsghdr``, include/uapi/linux/rtnetlink.h ``struct ifinfomsg`` / ``struct rtattr``,
include/uapi/linux/if_link.h ``IFLA_IFNAME`` 3, ``IFLA_OPERSTATE`` 16) and lib/kobject_uevent.c
(``<action>@<devpath>\\0`` then ``KEY=value\\0``; the PCI variables from drivers/pci/pci-driver.c
``pci_uevent``)."""

import os
import shutil
import socket
import struct

import pytest
from hypothesis import given, settings, strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink as nl
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_heldfiles import HeldFiles
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_signals as sig
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import config_errors, signals_settings
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import step
from nvml_scenarios import NODES, fake_with

DGX = os.path.join(NODES, "dgx-h100")
# A GPU's removal as the kernel announces it (devpath of the fixture's GPU 0000:18:00.0 under its
# switches; PCI_ID 10DE:2330 is the H100 SXM5's device id, as in the fixture's device file)
GPU_REMOVE = nl.build_uevent("remove", "/devices/pci0000:10/0000:10:03.0/0000:11:00.0/0000:12:00.0/0000:18:00.0",
                             SUBSYSTEM="pci", PCI_CLASS="30200", PCI_ID="10DE:2330", PCI_SUBSYS_ID="10DE:16C1",
                             PCI_SLOT_NAME="0000:18:00.0", MODALIAS="pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00",
                             SEQNUM="4711")


# -- rtnetlink --------------------------------------------------------------------------------------
def test_a_link_message_in_the_kernels_layout_is_read():
    down = nl.build_link_message("ibp26s0", index=7, flags=nl.IFF_UP, operstate=2)
    up = nl.build_link_message("ibp26s0", index=7, operstate=6)
    events, dropped = nl.parse_rtnetlink(down + up)
    assert dropped == 0
    assert [(e["type"], e["ifname"], e["index"], e["operstate"], e["lower_up"]) for e in events] == [
        ("newlink", "ibp26s0", 7, "down", False), ("newlink", "ibp26s0", 7, "up", True)]
    events, _ = nl.parse_rtnetlink(nl.build_link_message("eth0", kind=nl.RTM_DELLINK))
    assert events[0]["type"] == "dellink"


def test_the_header_sizes_are_the_uapi_structs():
    assert (nl.NLMSGHDR.size, nl.IFINFOMSG.size, nl.RTATTR.size) == (16, 16, 4)


def test_other_messages_are_skipped_and_broken_ones_counted():
    done = nl.NLMSGHDR.pack(16, nl.NLMSG_DONE, 0, 0, 0)
    route = nl.NLMSGHDR.pack(20, 24, 0, 0, 0) + b"\0" * 4  # RTM_NEWROUTE: not a link message
    assert nl.parse_rtnetlink(done + route) == ([], 0)
    message = nl.build_link_message("ibp26s0")
    assert nl.parse_rtnetlink(message[:-3]) == ([], 1)  # cut short: nlmsg_len beyond the bytes
    bad_len = struct.pack("=I", 8) + message[4:]  # nlmsg_len below the header
    assert nl.parse_rtnetlink(bad_len)[1] == 1
    error = nl.NLMSGHDR.pack(36, nl.NLMSG_ERROR, 0, 0, 0) + b"\0" * 20
    assert nl.parse_rtnetlink(error) == ([], 1)
    long_name = nl.build_link_message("x" * 20)
    assert nl.parse_rtnetlink(long_name) == ([], 1)  # IFNAMSIZ is 16


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_give_events_or_a_count_never_an_exception(data):
    events, dropped = nl.parse_rtnetlink(data)
    assert dropped >= 0 and all(e["type"] in ("newlink", "dellink") for e in events)


NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=15)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(NAMES, st.integers(1, 2 ** 31 - 1),
                          st.integers(0, 6), st.booleans()), min_size=1, max_size=8),
       st.integers(0, 40), st.binary(max_size=4))
def test_real_layouts_are_read_exactly_and_a_cut_datagram_never_invents_one(links, cut, junk):
    data = b"".join(nl.build_link_message(name, index=index, operstate=state,
                                          flags=nl.IFF_LOWER_UP if lower else nl.IFF_UP)
                    for name, index, state, lower in links)
    events, dropped = nl.parse_rtnetlink(data)
    assert dropped == 0
    assert [(e["ifname"], e["index"], e["lower_up"]) for e in events] == [(n, i, lw) for n, i, _s, lw in links]
    events, dropped = nl.parse_rtnetlink(data[:len(data) - cut] + junk)
    assert all((e["ifname"], e["index"]) in [(n, i) for n, i, _s, _l in links] for e in events)
    assert len(events) <= len(links)


# -- uevents ----------------------------------------------------------------------------------------
def test_a_pci_removal_uevent_is_read():
    event = nl.parse_uevent(GPU_REMOVE)
    assert event == {"action": "remove", "devpath": "/devices/pci0000:10/0000:10:03.0/0000:11:00.0/0000:12:00.0/0000:18:00.0",
                     "subsystem": "pci", "pci_slot": "0000:18:00.0", "pci_id": "10DE:2330", "pci_class": "30200",
                     "seqnum": "4711"}


@pytest.mark.parametrize("data", [
    b"", b"libudev\0\xfe\xed\xca\xfe", b"remove\0ACTION=remove\0", b"remove@devices\0",
    b"remove@/devices/x\0ACTION=add\0", b"remove@/devices/x\0ACTION=remove\0ACTION=remove\0",
    b"remove@/devices/x\0NOEQUALS\0", b"remove@/devices/\xff\0", b"x" * 9000,
])
def test_what_is_not_a_kernel_uevent_is_none(data):
    assert nl.parse_uevent(data) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_are_a_uevent_or_none(data):
    event = nl.parse_uevent(data)
    assert event is None or event["devpath"].startswith("/")


def test_a_socketpair_stand_in_carries_datagrams_to_the_watcher():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    watcher = nl.NetlinkWatcher("uevent", ours)
    try:
        theirs.send(GPU_REMOVE)
        theirs.send(b"garbage")
        events, overrun = watcher.drain()
        assert [e["pci_slot"] for e in events] == ["0000:18:00.0"] and not overrun
        assert (watcher.messages, watcher.dropped) == (2, 1)
        assert watcher.drain() == ([], False)  # nothing readable: returns at once
    finally:
        watcher.close()
        theirs.close()


def test_a_real_netlink_socket_opens_or_says_why():
    try:
        sock = nl.open_netlink(nl.NETLINK_ROUTE, nl.RTMGRP_LINK)
    except OSError as exc:  # a sandbox without AF_NETLINK: the source is reported unavailable
        assert exc.errno
        return
    watcher = nl.NetlinkWatcher("netlink", sock)
    assert watcher.drain()[1] is False
    watcher.close()


# -- which checks a signal concerns ---------------------------------------------------------------
def test_a_signal_runs_only_the_checks_it_concerns():
    assert sig.plan([]) is None
    what = sig.plan([("rdma:mlx5_0", "netlink: newlink ibp26s0 down"), ("rdma:mlx5_0", "probe: x"),
                     ("rdma:mlx5_3", "probe: y")])
    assert what == {"gpu": False, "rdma": ["mlx5_0", "mlx5_3"], "fabricmanager": False,
                    "why": ["netlink: newlink ibp26s0 down", "probe: x", "probe: y"]}
    assert sig.plan([("rdma:mlx5_0", "a"), ("rdma", "b")])["rdma"] == "all"
    params = sig.targeted_params({"root": "/", "fail_on": "fail", "gpu": {"expected_count": 8}, "rdma": {},
                                  "tuning": {}}, what)
    assert params["gpu"]["enabled"] is False and params["tuning"]["enabled"] is False
    assert params["rdma"]["devices"] == ["mlx5_0", "mlx5_3"]
    params = sig.targeted_params({"root": "/", "gpu": {}, "rdma": {}, "tuning": {}}, sig.plan([("gpu", "lost")]))
    assert params["rdma"]["enabled"] is False and "enabled" not in params["gpu"]


def checks(*rows):
    return [{"id": i, "target": t, "status": s, "message": m} for i, t, s, m in rows]


def test_a_targeted_cycle_replaces_only_the_checks_in_scope_and_hysteresis_counts_only_them():
    previous = {"checks": checks(("gpu.count", "node", "pass", "8"), ("rdma.devices", "node", "pass", "9"),
                                 ("rdma.port.state", "mlx5_0/1", "pass", "ACTIVE"),
                                 ("rdma.port.state", "mlx5_1/1", "pass", "ACTIVE")),
                "agent": {"healthy": True}, "gpus": ["old"]}
    only = sig.plan([("rdma:mlx5_0", "probe")])
    # the narrowed RDMA run also reports node checks (rdma.devices of one device): not in scope
    payload = {"checks": checks(("rdma.devices", "node", "fail", "1 of 9"),
                                ("rdma.port.state", "mlx5_0/1", "fail", "DOWN"))}
    result, ran = sig.merge_targeted(previous, payload, only)
    assert [(c["id"], c["target"], c["status"]) for c in result["checks"]] == [
        ("gpu.count", "node", "pass"), ("rdma.devices", "node", "pass"), ("rdma.port.state", "mlx5_0/1", "fail"),
        ("rdma.port.state", "mlx5_1/1", "pass")]
    assert ran == {"rdma.port.state|mlx5_0/1"} and "agent" not in result and result["gpus"] == ["old"]
    assert result["summary"] == {"pass": 3, "warn": 0, "fail": 1, "skip": 0} and result["healthy"] is False
    settings_ = {"fail_after": 3, "recover_after": 2, "immediate": set(), "per_check": {}}
    state, _ = step({}, previous["checks"], settings_)
    for number in range(1, 4):
        state, events = step(state, result["checks"], settings_, ran=ran)
        entries = state["checks"]
        assert entries["rdma.port.state|mlx5_0/1"]["fails"] == number
        assert entries["gpu.count|node"]["passes"] == 1  # not measured: not counted
    assert state["healthy"] is False and entries["rdma.port.state|mlx5_0/1"]["failing"]


def test_a_result_without_readable_checks_is_no_base_for_a_targeted_cycle():
    assert sig.previous_checks({"checks": []}) is None
    assert sig.previous_checks({"checks": [{"id": "x", "target": "node", "status": "bogus"}]}) is None
    assert sig.previous_checks({"checks": "no"}) is None and sig.previous_checks(None) is None


# -- the fast probe on the fixture tree --------------------------------------------------------------
@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(DGX, str(root), symlinks=True)
    return root


def port_file(root, name, device="mlx5_0"):
    return root / "sys" / "class" / "infiniband" / device / "ports" / "1" / name


def test_the_probe_finds_the_dgx_devices_and_signals_a_port_down_once_confirmed(tree):
    """Issue 46: a port's bad reading is counted, not signalled, until fail_after (3) readings
    confirm it; then one signal, and the credit of 3 measurements for the port's checks."""
    probe = sig.FastProbe(str(tree), binding=None, repeat=2)
    assert (len(probe.gpus), len(probe.hcas)) == (8, 9) and len(probe.ports) >= 9
    assert probe.poll() == [] and probe.poll() == []  # the baseline, then nothing changed
    port_file(tree, "state").write_text("1: DOWN\n")
    assert probe.poll() == [] and probe.pending() == ["port mlx5_0/1"]  # counted (1), read again
    assert probe.poll(probe.pending()) == []  # 2
    found = probe.poll(probe.pending())  # 3: confirmed
    assert [s for s, _ in found] == ["rdma:mlx5_0"] and found[0][1].startswith(sig.CONFIRM_PREFIX + "port mlx5_0/1 confirmed")
    assert probe.take_credits() == [[list(sig.PORT_CHECKS), "mlx5_0/1", 3]] and probe.take_credits() == []
    assert probe.pending() == [] and probe.poll() == []  # confirmed: quiet, the periodic cycle goes on
    port_file(tree, "state").write_text("4: ACTIVE\n")
    assert [s for s, _ in probe.poll()] == ["rdma:mlx5_0"]  # back: checked at once


def test_a_rate_below_the_first_seen_is_bad_and_the_pci_link_is_not_probed(tree):
    probe = sig.FastProbe(str(tree), binding=None, repeat=1)
    probe.poll()
    port_file(tree, "rate", "mlx5_2").write_text("100 Gb/sec (1X NDR)\n")
    assert probe.poll() == []  # counted: 1 of fail_after 2 (repeat 1)
    assert [s for s, _ in probe.poll(quick=True)] == ["rdma:mlx5_2"]  # the quick probe's reading: confirmed
    assert probe.poll() == []
    # no check compares a current PCIe width (gpu.pcie compares the capability): not a signal
    link = tree / "sys" / "bus" / "pci" / "devices" / probe.gpus[0] / "current_link_width"
    link.write_text("8\n")
    assert probe.poll() == []


def test_the_config_space_vendor_0xffff_and_a_vanished_function_are_a_gpu_signal(tree):
    probe = sig.FastProbe(str(tree), binding=None)
    probe.poll()
    gpu = probe.gpus[1]
    config = tree / "sys" / "bus" / "pci" / "devices" / gpu / "config"
    config.write_bytes(b"\xff\xff\xff\xff" + b"\0" * 60)
    found = probe.poll()
    assert found and found[0][0] == "gpu" and "vendor 0xffff" in found[0][1]
    shutil.rmtree(str(tree / "sys"))  # the whole tree disappears under the probe (a reboot, an unmount)
    found = probe.poll()
    assert found and {scope for scope, _ in found} >= {"gpu"}


def test_nvml_gpu_is_lost_and_an_ecc_counter_jump_are_gpu_signals(tree):
    fake = fake_with("h100-healthy")
    probe = sig.FastProbe(str(tree), binding=fake)
    probe.hold_nvml()
    try:
        probe.poll()
        fake._STATE["devices"][2]["ecc"] = dict(fake._STATE["devices"][2]["ecc"], volatile_uncorrected=1)
        found = probe.poll()
        assert [s for s, _ in found] == ["gpu"] and "ecc" in found[0][1]
        fake._STATE["devices"][0]["errors"] = {"*": "GPU_IS_LOST"}
        found = probe.poll()
        assert [s for s, _ in found] == ["gpu"] and "GPU is lost" in found[0][1]
    finally:
        probe.release_nvml()
    assert fake._STATE["initialised"] == 0  # let go for the cycle's own init


def test_the_fabric_manager_check_reads_the_units_cgroup(tree):
    unit = "nvidia-fabricmanager.service"
    assert sig.fabricmanager_check(str(tree), unit) is None  # not installed: no check
    (tree / "lib" / "systemd" / "system").mkdir(parents=True)
    (tree / "lib" / "systemd" / "system" / unit).write_text("[Service]\n")
    assert sig.fabricmanager_check(str(tree), unit)["status"] == "fail"  # no cgroup: not running
    cgroup = tree / "sys" / "fs" / "cgroup" / "system.slice" / unit
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert sig.fabricmanager_check(str(tree), unit)["status"] == "pass"
    probe = sig.FastProbe(str(tree), unit=unit)
    probe.poll()
    (cgroup / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert probe.poll() == [] and probe.poll(quick=True) == []  # counted: 2 of 3
    assert [s for s, _ in probe.poll(probe.pending())] == ["fabricmanager"]
    assert probe.take_credits() == [[["agent.fabricmanager"], "node", 3]]
    assert sig.fabricmanager_check(str(tree), unit)["status"] == "fail"


def test_sources_that_cannot_open_are_reported_and_the_rest_goes_on(tree):
    def refuse(protocol, groups):
        raise OSError(13, "Permission denied")

    sources = sig.SignalSources({"netlink": True, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(tree), opener=refuse)
    try:
        assert sources.status["netlink"].startswith("unavailable: Permission denied")
        assert sources.status["uevent"] == "off (signals.uevent)"
        assert sources.status["probe"].startswith("every 1 s: 8 GPU(s), 9 HCA(s)")
        assert sources.fds() == [] and sources.counters()["probe_runs"] == 1
    finally:
        sources.close()


def test_a_uevent_for_a_gpu_and_a_netlink_message_for_an_rdma_netdev_are_dispatched(tree):
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    uevent, uevent_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sources = sig.SignalSources({"netlink": True, "uevent": True, "fast_probe_interval": 0,
                                 "fabricmanager_unit": None}, str(tree),
                                sockets={"netlink": route, "uevent": uevent})
    try:
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))
        route_in.send(nl.build_link_message("docker0", flags=nl.IFF_UP, operstate=2))  # not RDMA: nothing
        uevent_in.send(GPU_REMOVE)
        found = sources.poll()
        assert sorted(scope for scope, _ in found) == ["gpu", "rdma:mlx5_0"]
        assert sig.plan(found)["rdma"] == ["mlx5_0"]
    finally:
        sources.close()
        route_in.close()
        uevent_in.close()


# -- settings -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, message", [
    ([], "signals must be a dict"),
    ({"probe": 1}, "signals: unknown setting 'probe'"),
    ({"netlink": "yes"}, "signals.netlink must be true or false"),
    ({"fast_probe_interval": 0.01}, "signals.fast_probe_interval must be 0 (off) or seconds in [0.1, 3600]"),
    ({"fast_probe_interval": True}, "signals.fast_probe_interval must be"),
    ({"fabricmanager_unit": "../x.service"}, "signals.fabricmanager_unit must be a systemd service name"),
])
def test_the_signals_settings_are_checked_by_name(raw, message):
    settings_, errors = signals_settings({"signals": raw})
    assert settings_ is None and any(e.startswith(message) for e in errors), errors
    assert any(e.startswith(message) for e in config_errors({"signals": raw}))


def test_the_signals_default_on_with_a_one_second_probe():
    assert signals_settings({})[0] == {"netlink": True, "uevent": True, "fast_probe_interval": 1.0,
                                       "fabricmanager_unit": "nvidia-fabricmanager.service"}
    assert signals_settings({"signals": {"fast_probe_interval": 0, "fabricmanager_unit": ""}})[0][
        "fabricmanager_unit"] is None


# -- fast confirmation (issue 46) ---------------------------------------------------------------------
PORT = "port mlx5_0/1"


class Clock(object):
    """A monotonic clock the test moves (``wait`` moves it by the timeout: Loop.wait's double)."""

    def __init__(self):
        self.now = 100.0
        self.waits = []

    def __call__(self):
        return self.now

    def wait(self, timeout, fds=()):
        self.waits.append(timeout)
        self.now += timeout
        return False


def probe_sources(tree, clock, interval=1.0, repeat=2):
    return sig.SignalSources({"netlink": False, "uevent": False, "fast_probe_interval": interval,
                              "fabricmanager_unit": None}, str(tree), repeat=repeat, clock=clock)


def test_the_confirmation_interval_is_a_tenth_of_the_probe_and_at_least_100_ms():
    assert sig.confirm_interval(1) == pytest.approx(0.1) and sig.confirm_interval(5) == pytest.approx(0.5)
    assert sig.confirm_interval(0.1) == sig.CONFIRM_MIN == 0.1 and sig.confirm_interval(0.4) == 0.1


def run_until_signal(sources, clock, until):
    """Poll at each due time up to ``until``: [(clock, signals)] of the polls that signalled."""
    found = []
    while sources.due() <= until:
        clock.now = sources.due()
        got = sources.poll()
        if got:
            found.append((clock.now, got))
    return found


def test_a_bad_reading_is_read_again_alone_until_fail_after_measurements(tree):
    """Issue 46: the quick probe (every interval / 2) sees the port down, two confirmation readings
    0.1 s apart confirm it: one signal, 0.2 s after the first bad reading, with the credit of 3."""
    clock = Clock()
    sources = probe_sources(tree, clock)
    try:
        probe = sources.probe
        assert sources.quick == 0.5 and sources.due() == 100.5  # all good: the quick probe's interval
        port_file(tree, "state").write_text("1: DOWN\n")
        clock.now = 100.5
        assert sources.poll() == [] and probe.pending() == [PORT]  # counted, not yet signalled
        assert sources.due() == pytest.approx(100.6)
        found = run_until_signal(sources, clock, 100.95)
        assert len(found) == 1 and found[0][0] == pytest.approx(100.7)  # (fail_after - 1) x 0.1 s later
        assert [s for s, _ in found[0][1]] == ["rdma:mlx5_0"]
        assert found[0][1][0][1].startswith(sig.CONFIRM_PREFIX + PORT + " confirmed: bad at 3 readings over 0.20 s")
        assert sources.take_credits() == [[list(sig.PORT_CHECKS), "mlx5_0/1", 3]]
        assert probe.confirms == 2 and probe.pending() == []
        assert run_until_signal(sources, clock, 103.0) == []  # still down, confirmed: nothing more
    finally:
        sources.close()


def test_a_reading_good_again_at_a_confirmation_ends_it_and_is_signalled(tree):
    clock = Clock()
    sources = probe_sources(tree, clock)
    try:
        port_file(tree, "rate").write_text("100 Gb/sec (1X NDR)\n")
        clock.now = 100.5
        assert sources.poll() == []  # counted
        port_file(tree, "rate").write_text("400 Gb/sec (4X NDR)\n")
        clock.now = sources.due()
        found = sources.poll()  # good again before confirmed: a change (min_gap), never a confirmation
        assert [s for s, _ in found] == ["rdma:mlx5_0"] and found[0][1].startswith("probe: ")
        assert sources.probe.pending() == [] and sources.take_credits() == []
    finally:
        sources.close()


def test_a_flapping_reading_is_never_confirmed_and_resets_the_count(tree):
    """Bad at the quick probe, good at the confirmation, three times: never confirmed, no credit;
    the hysteresis the targeted cycles step stays healthy."""
    clock = Clock()
    sources = probe_sources(tree, clock)
    state, settings_ = {}, {"fail_after": 3, "recover_after": 1, "immediate": set(), "per_check": {}}
    try:
        for _round in range(3):
            clock.now = sources.due()
            port_file(tree, "state").write_text("1: DOWN\n")
            sources.poll()
            port_file(tree, "state").write_text("4: ACTIVE\n")
            clock.now = sources.due()
            found = sources.poll()
            assert not any(why.startswith(sig.CONFIRM_PREFIX) for _, why in found)
            state, _ = step(state, checks(("rdma.port.state", "mlx5_0/1", "pass", "ACTIVE")), settings_,
                            credit=sig.credited(sources.take_credits(), checks(("rdma.port.state", "mlx5_0/1",
                                                                                  "pass", "ACTIVE")), None))
            assert sources.probe.pending() == [] and sources.probe.count.get(PORT) == 0
        assert state["healthy"] is True and state["checks"]["rdma.port.state|mlx5_0/1"]["fails"] == 0
    finally:
        sources.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["4: ACTIVE\n", "1: DOWN\n", "2: INIT\n"]),
                          st.floats(0.0, 0.6)), min_size=1, max_size=14),
       st.integers(1, 4))
def test_any_sequence_of_readings_is_confirmed_only_after_fail_after_spaced_bad_readings(
        tmp_path_factory, readings, repeat):
    """Any sequence of port states held for any time: a confirmation signal only after fail_after
    (repeat + 1) bad readings at least 0.9 confirmation intervals apart with no good reading
    between, so a port bad for less than (fail_after - 1) x 0.09 s is never confirmed; one per run
    of bad readings; bounded confirmation readings; nothing pending once good."""
    root = tmp_path_factory.mktemp("node")
    ports = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    ports.mkdir(parents=True)
    (ports / "state").write_text("4: ACTIVE\n")
    (ports / "rate").write_text("400 Gb/sec (4X NDR)\n")
    clock = Clock()
    sources = probe_sources(root, clock, repeat=repeat)
    need = repeat + 1
    try:
        bad_since = None
        for reading, hold in readings:
            (ports / "state").write_text(reading)
            bad = not reading.startswith("4")
            if bad and bad_since is None:
                bad_since = clock.now
            confirmed_in_run, confirms = 0, sources.probe.confirms
            end = clock.now + hold
            while sources.due() <= end:
                clock.now = sources.due()
                if not bad:
                    bad_since = None  # a good reading taken: the run of bad readings ended
                for _scope, why in sources.poll():
                    if why.startswith(sig.CONFIRM_PREFIX) and "confirmed" in why:
                        assert bad_since is not None and clock.now - bad_since >= (need - 1) * 0.09 - 1e-9
                        confirmed_in_run += 1
                credits = sources.take_credits()
                assert all(count == need for _ids, _target, count in credits)
            assert confirmed_in_run <= 1
            assert sources.probe.confirms - confirms <= 2 * need + 1
            if not bad and sources.probe.last is not None and sources.probe.last[PORT][2] is False:
                assert sources.probe.pending() == []  # good: no confirmation due
            clock.now = end
    finally:
        sources.close()


def test_a_netlink_announcement_arms_a_confirmation_of_that_devices_ports(tree):
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    clock = Clock()
    sources = sig.SignalSources({"netlink": True, "uevent": False, "fast_probe_interval": 1,
                                 "fabricmanager_unit": None}, str(tree), repeat=2, clock=clock,
                                sockets={"netlink": route})
    try:
        port_file(tree, "state").write_text("1: DOWN\n")
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))
        route_in.send(nl.build_link_message("ibp26s0", flags=nl.IFF_UP, operstate=2))  # a storm arms it once
        # the device's ports are probed: no cycle of the announcement's own, its ports are read again
        assert sources.poll() == []
        assert sources.probe.pending() == [PORT] and sources.probe.confirm_left[PORT] == 6
        found = run_until_signal(sources, clock, 100.9)
        # the port read alone from 0.1 s on: confirmed at its third bad reading, 0.3 s after the announcement
        assert len(found) == 1 and found[0][0] == pytest.approx(100.3)
        assert found[0][1][0][1].startswith(sig.CONFIRM_PREFIX + PORT + " confirmed")
        assert sources.take_credits() == [[list(sig.PORT_CHECKS), "mlx5_0/1", 3]]
        confirms = sources.counters()["probe_confirms"]
        assert confirms <= 3
        clock.now = 101.0
        sources.poll()  # the next probe
        sources.probe.arm([PORT])
        sources._schedule(clock.now)
        assert sources.probe.pending() == [PORT] and sources.due() == pytest.approx(101.1)
        port_file(tree, "state").write_text("4: ACTIVE\n")
        sources.probe.discover()  # a uevent found the devices again: a new baseline, nothing pending
        assert sources.probe.poll() == [] and sources.probe.pending() == []
        clock.now = sources.due()
        assert sources.poll() == [] and sources.counters()["probe_confirms"] == confirms
    finally:
        sources.close()
        route_in.close()


def test_only_confirmation_signals_skip_min_gap():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon

    class Signals(object):
        min_gap, confirm = 5.0, 0.1

        def __init__(self):
            self.found = []

        def poll(self):
            found, self.found = self.found, []
            return found

        def fds(self):
            return []

        def pause(self):
            pass

        resume = pause

    clock, signals, plans = Clock(), Signals(), []
    loop = agent_daemon.Loop(lambda: "ok", 600, clock.wait, clock=clock, notify=lambda m: None, log=lambda line: None,
                             signals=signals, run_targeted=plans.append)
    loop.event_started = clock()  # a targeted cycle just started
    signals.found = [("rdma:mlx5_0", sig.CONFIRM_PREFIX + "port mlx5_0/1 still ('1: DOWN', '400')")]
    loop._signalled()
    assert clock.waits == [pytest.approx(0.1)] and loop.confirmed == 1
    signals.found = [("rdma:mlx5_0", "probe: port mlx5_0/1 ('4: ACTIVE', '400') -> ('1: DOWN', '400')"),
                     ("rdma:mlx5_0", sig.CONFIRM_PREFIX + "port mlx5_0/1 still ('1: DOWN', '400')")]
    loop._signalled()
    assert clock.waits[1] == pytest.approx(5.0) and loop.confirmed == 1 and len(plans) == 2  # storm bound kept


# -- files held open --------------------------------------------------------------------------------------
def test_held_files_read_again_see_writes_renames_and_removals(tmp_path):
    path = tmp_path / "state"
    path.write_text("4: ACTIVE\n")
    held = HeldFiles(check_inode=True)
    try:
        assert held.read(str(path), 64) == b"4: ACTIVE\n" and list(held.held) == [str(path)]
        path.write_text("1: DOWN\n")  # rewritten in place: the same descriptor reads it
        assert held.read(str(path), 64) == b"1: DOWN\n"
        new = tmp_path / "state.tmp"
        new.write_text("2: INIT\n")
        os.rename(str(new), str(path))  # replaced by a rename (Ansible's copy): the inode changed
        assert held.read(str(path), 64) == b"2: INIT\n"
        path.unlink()
        assert held.read(str(path), 64) is None and held.held == {}
        assert held.read(str(tmp_path / "missing")) is None
    finally:
        held.close()


def test_held_files_are_bounded_and_let_go_after_a_discovery(tmp_path, tree):
    paths = []
    for index in range(5):
        paths.append(str(tmp_path / ("f%d" % index)))
        with open(paths[-1], "w") as out:
            out.write("x%d" % index)
    held = HeldFiles(check_inode=False, limit=3)
    assert [held.read(p) for p in paths] == [b"x0", b"x1", b"x2", b"x3", b"x4"] and len(held.held) == 3
    held.keep(paths[:1])
    assert list(held.held) == paths[:1]
    held.close()
    assert held.held == {}
    probe = sig.FastProbe(str(tree), binding=None)
    probe.poll()
    # state and rate of each port (the fixture's PCI functions have no config file: nothing held for them)
    assert sorted(probe.files.held) == sorted(p for row in probe.port_paths for p in row[2:])
    probe.close()
    assert probe.files.held == {}


def test_a_root_link_re_pointed_at_a_copy_is_read_from_the_copy_by_the_next_full_probe(tmp_path):
    """The lab's port fault (roles/lab_sim, fault.yml): the agent's root is a link, re-pointed at a
    writable copy of the tree, then the copy's port files are rewritten. The held descriptors stay on
    the old tree (its files are neither removed nor renamed): the full probe looks at the root once
    and reads every file by path again (found by `make lab`: the port reached health.json only after
    three periodic cycles, 25 s)."""
    first, copy = tmp_path / "fixture", tmp_path / "copy"
    shutil.copytree(os.path.join(NODES, "dgx-h100"), str(first), symlinks=True)
    shutil.copytree(str(first), str(copy), symlinks=True)
    root = tmp_path / "root"
    root.symlink_to(first)
    probe = sig.FastProbe(str(root), binding=None, repeat=2)
    try:
        assert probe.poll() == []  # the baseline, read through the held descriptors
        new = tmp_path / "root.new"
        new.symlink_to(copy)
        os.rename(str(new), str(root))  # re-pointed, as ansible.builtin.file state=link force=true does
        (copy / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "state").write_text("1: DOWN\n")
        assert probe.poll(quick=True) == []  # the quick probe does not look at the root (counted, not signalled)
        assert probe.poll() == [] and probe.pending() == ["port mlx5_0/1"]  # seen: counted, read again
        held = probe.files.held
        assert held and all(os.path.realpath(path).startswith(str(copy)) for path in held)
    finally:
        probe.close()
