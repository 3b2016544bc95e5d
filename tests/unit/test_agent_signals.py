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


def test_the_probe_finds_the_dgx_devices_and_signals_a_port_down_until_hysteresis_is_served(tree):
    probe = sig.FastProbe(str(tree), binding=None, repeat=2)
    assert (len(probe.gpus), len(probe.hcas)) == (8, 9) and len(probe.ports) >= 9
    assert probe.poll() == [] and probe.poll() == []  # the baseline, then nothing changed
    port_file(tree, "state").write_text("1: DOWN\n")
    first = probe.poll()
    assert [scope for scope, _why in first] == ["rdma:mlx5_0"] and "ACTIVE" in first[0][1]
    assert [s for s, _ in probe.poll()] == ["rdma:mlx5_0"] and [s for s, _ in probe.poll()] == ["rdma:mlx5_0"]
    assert probe.poll() == []  # repeat served: the periodic cycle goes on
    port_file(tree, "state").write_text("4: ACTIVE\n")
    assert [s for s, _ in probe.poll()] == ["rdma:mlx5_0"]  # back: checked at once too


def test_a_rate_below_the_first_seen_is_bad_and_the_pci_link_is_not_probed(tree):
    probe = sig.FastProbe(str(tree), binding=None, repeat=1)
    probe.poll()
    port_file(tree, "rate", "mlx5_2").write_text("100 Gb/sec (1X NDR)\n")
    assert [s for s, _ in probe.poll()] == ["rdma:mlx5_2"]
    assert [s for s, _ in probe.poll()] == ["rdma:mlx5_2"]  # still bad: once more (repeat 1)
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
    assert [s for s, _ in probe.poll()] == ["fabricmanager"]
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
