# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strict readers of the two kernel announcements the resident agent listens to (docs/contracts.md,
"Node health agent", signals), and the socket that carries them:

- rtnetlink link messages (``AF_NETLINK``, ``NETLINK_ROUTE``, multicast group ``RTMGRP_LINK``):
  ``RTM_NEWLINK`` / ``RTM_DELLINK`` of a network device, whose layout is the kernel's uapi:
  ``struct nlmsghdr`` (include/uapi/linux/netlink.h: u32 nlmsg_len, u16 nlmsg_type, u16
  nlmsg_flags, u32 nlmsg_seq, u32 nlmsg_pid; messages aligned to 4 bytes, NLMSG_ALIGN), then
  ``struct ifinfomsg`` (include/uapi/linux/rtnetlink.h: u8 ifi_family, u8 pad, u16 ifi_type,
  s32 ifi_index, u32 ifi_flags, u32 ifi_change), then ``struct rtattr`` attributes (rtnetlink.h:
  u16 rta_len, u16 rta_type, RTA_ALIGN 4) of which ``IFLA_IFNAME`` (3, a NUL-terminated name) and
  ``IFLA_OPERSTATE`` (16, u8, RFC 2863 states IF_OPER_*) are read (include/uapi/linux/if_link.h).
  rtnl_fill_ifinfo (net/core/rtnetlink.c) always puts ``IFLA_IFNAME``, once, with nla_put_string
  (the name, then one NUL ending the attribute's payload): a link message without it, with it twice,
  or whose name is not followed by exactly that NUL is malformed.
- kernel uevents (``NETLINK_KOBJECT_UEVENT``, group 1, the kernel's own broadcast, not udev's
  group 2 with its ``libudev`` header): ``<action>@<devpath>\\0`` then ``KEY=value\\0`` pairs
  (lib/kobject_uevent.c, kobject_uevent_env: the "%s@%s" header and the env buffer;
  ``ACTION``, ``DEVPATH``, ``SUBSYSTEM``, ``SEQNUM`` always: a uevent without ``ACTION`` or
  ``DEVPATH`` is malformed; the PCI bus adds ``PCI_CLASS``,
  ``PCI_ID``, ``PCI_SUBSYS_ID``, ``PCI_SLOT_NAME``, ``MODALIAS``: drivers/pci/pci-driver.c,
  pci_uevent). At most UEVENT_BUFFER_SIZE (2048, include/linux/kobject.h) bytes of variables.

Any bytes give events or a counted drop, never an exception: every length is checked against what
was received before it is used. A message larger than ``MAX_DATAGRAM`` is cut by the receive and
counted as dropped.

Imports nothing of the collection: the lowest layer of the agent's signals.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import socket
import struct

NETLINK_ROUTE = 0
NETLINK_KOBJECT_UEVENT = 15
RTMGRP_LINK = 1
UEVENT_KERNEL_GROUP = 1
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME, IFLA_OPERSTATE = 3, 16
IFF_UP, IFF_RUNNING, IFF_LOWER_UP = 0x1, 0x40, 0x10000
# RFC 2863 operational states (include/uapi/linux/if.h, IF_OPER_*)
OPERSTATES = {0: "unknown", 1: "notpresent", 2: "down", 3: "lowerlayerdown", 4: "testing", 5: "dormant", 6: "up"}
NLMSGHDR = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BxHiII")
RTATTR = struct.Struct("=HH")
MAX_DATAGRAM = 65536  # a receive buffer; link messages are about 1-2 KiB
MAX_UEVENT = 8192  # the kernel's variables are at most 2048 bytes, plus the header
MAX_MESSAGES = 256  # per datagram: more is counted as dropped
IFNAMSIZ = 16


def _align(length):
    return (length + 3) & ~3


def parse_rtnetlink(data):
    """([{"type": "newlink"|"dellink", "index", "ifname", "flags", "operstate", "lower_up"}],
    dropped) of one datagram of rtnetlink messages. A message that is not a link message is
    skipped (not counted); a truncated or malformed one (a link message without its name among
    them) ends the datagram and counts as dropped."""
    events, dropped, offset, count = [], 0, 0, 0
    size = len(data)
    while offset + NLMSGHDR.size <= size:
        count += 1
        if count > MAX_MESSAGES:
            return events, dropped + 1
        length, kind, _flags, _seq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > size:
            return events, dropped + 1
        body = data[offset + NLMSGHDR.size:offset + length]
        offset += _align(length)
        if kind in (NLMSG_DONE, NLMSG_NOOP):
            continue
        if kind in (NLMSG_ERROR, NLMSG_OVERRUN):
            dropped += 1
            continue
        if kind not in (RTM_NEWLINK, RTM_DELLINK):
            continue
        event = _link(body, kind)
        if event is None:
            dropped += 1
        else:
            events.append(event)
    if offset < size and size - offset < NLMSGHDR.size and any(data[offset:]):
        dropped += 1  # trailing bytes that are not a header (padding is zeros)
    return events, dropped


def _link(body, kind):
    if len(body) < IFINFOMSG.size:
        return None
    _family, _type, index, flags, _change = IFINFOMSG.unpack_from(body, 0)
    event = {"type": "newlink" if kind == RTM_NEWLINK else "dellink", "index": index, "ifname": None,
             "flags": flags, "operstate": None, "lower_up": bool(flags & IFF_LOWER_UP)}
    offset = _align(IFINFOMSG.size)
    while offset + RTATTR.size <= len(body):
        length, rta_type = RTATTR.unpack_from(body, offset)
        if length < RTATTR.size or offset + length > len(body):
            return None
        value = body[offset + RTATTR.size:offset + length]
        rta_type &= 0x3fff  # NLA_F_NESTED / NLA_F_NET_BYTEORDER bits
        if rta_type == IFLA_IFNAME:
            # nla_put_string: the name and its one NUL, nothing after it; once per message
            name = value[:-1]
            if (event["ifname"] is not None or value[-1:] != b"\0" or not name or b"\0" in name
                    or len(name) >= IFNAMSIZ or b"/" in name):
                return None
            try:
                event["ifname"] = name.decode("ascii")
            except UnicodeDecodeError:
                return None
        elif rta_type == IFLA_OPERSTATE and len(value) >= 1:
            event["operstate"] = OPERSTATES.get(bytearray(value)[0], "unknown")
        offset += _align(length)
    if event["ifname"] is None:  # rtnl_fill_ifinfo always puts IFLA_IFNAME: names no netdev
        return None
    return event


def build_link_message(ifname, index=2, flags=IFF_UP | IFF_RUNNING | IFF_LOWER_UP, operstate=6, kind=RTM_NEWLINK,
                       seq=0):
    """One rtnetlink link message in the kernel's layout (the uapi structs above): what
    rtnl_fill_ifinfo sends, reduced to the attributes the agent reads. For the bench and tests
    (a socketpair fed with real-format messages)."""
    name = ifname.encode("ascii") + b"\0"
    attrs = b""
    for rta_type, value in ((IFLA_IFNAME, name), (IFLA_OPERSTATE, struct.pack("=B", operstate))):
        length = RTATTR.size + len(value)
        attrs += RTATTR.pack(length, rta_type) + value + b"\0" * (_align(length) - length)
    body = IFINFOMSG.pack(0, 32 if ifname.startswith("ib") else 1, index, flags, 0xffffffff) + attrs
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, 0, seq, 0) + body


def parse_uevent(data):
    """{"action", "devpath", "subsystem", "pci_slot", "pci_id", "pci_class", "seqnum"} of one
    kernel uevent datagram, or None when it is not one (udev's ``libudev`` messages, a header
    without ``@``, no ``ACTION`` or ``DEVPATH`` variable or one that does not match the header
    (kobject_uevent_env always adds both), not ASCII)."""
    if not data or len(data) > MAX_UEVENT or data.startswith(b"libudev\0"):
        return None
    parts = data.rstrip(b"\0").split(b"\0")
    try:
        header = parts[0].decode("ascii")
        pairs = [part.decode("ascii") for part in parts[1:]]
    except UnicodeDecodeError:
        return None
    action, sep, devpath = header.partition("@")
    if not sep or not action or not devpath.startswith("/"):
        return None
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or key in env:
            return None
        env[key] = value
    if env.get("ACTION") != action or env.get("DEVPATH") != devpath:  # always added, equal to the header
        return None
    return {"action": action, "devpath": devpath, "subsystem": env.get("SUBSYSTEM"),
            "pci_slot": env.get("PCI_SLOT_NAME"), "pci_id": env.get("PCI_ID"), "pci_class": env.get("PCI_CLASS"),
            "seqnum": env.get("SEQNUM")}


def build_uevent(action, devpath, **env):
    """A kernel uevent datagram as lib/kobject_uevent.c sends it (tests and the bench)."""
    pairs = [("ACTION", action), ("DEVPATH", devpath)] + sorted(env.items())
    return ("%s@%s\0" % (action, devpath) + "".join("%s=%s\0" % pair for pair in pairs)).encode("ascii")


def open_netlink(protocol, groups):
    """A non-blocking netlink socket bound to ``groups``; OSError when it cannot be opened (not
    Linux, no permission, a sandbox without AF_NETLINK)."""
    family = getattr(socket, "AF_NETLINK", None)
    if family is None:
        raise OSError(errno.EAFNOSUPPORT, "no AF_NETLINK on this system")
    sock = socket.socket(family, socket.SOCK_RAW | getattr(socket, "SOCK_CLOEXEC", 0), protocol)
    try:
        sock.setblocking(False)
        sock.bind((0, groups))
    except OSError:
        sock.close()
        raise
    return sock


class NetlinkWatcher(object):
    """One announcement socket (a real netlink socket, or a stand-in such as one end of a
    ``socketpair(AF_UNIX, SOCK_DGRAM)`` fed with real-format datagrams); ``drain()`` gives the
    parsed events readable now (at most ``max_reads`` datagrams per call). ``overruns`` counts
    ENOBUFS (the kernel dropped announcements: the caller checks everything), ``dropped`` what
    could not be read."""

    def __init__(self, kind, sock, max_reads=256):
        self.kind = kind  # "netlink" (route) or "uevent"
        self.sock = sock
        self.max_reads = max_reads
        self.messages = 0
        self.dropped = 0
        self.overruns = 0
        self.ended = False

    def fileno(self):
        return self.sock.fileno()

    def drain(self):
        """(events, overrun) readable now; never blocks, never raises for the bytes read."""
        events, overrun = [], False
        for _read in range(self.max_reads):
            try:
                data = self.sock.recv(MAX_DATAGRAM + 1, getattr(socket, "MSG_DONTWAIT", 0))
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # announcements lost: look at everything
                    self.overruns += 1
                    overrun = True
                    continue
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                    break
                raise
            if not data:
                self.ended = True  # a stand-in whose writer closed
                break
            self.messages += 1
            if len(data) > MAX_DATAGRAM:
                self.dropped += 1
                continue
            if self.kind == "uevent":
                event = parse_uevent(data)
                if event is None:
                    self.dropped += 1
                else:
                    events.append(event)
            else:
                found, dropped = parse_rtnetlink(data)
                events.extend(found)
                self.dropped += dropped
        return events, overrun

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def read_small(path, size=256):
    """The first ``size`` bytes of a file (sysfs attributes, cgroup files): one open, one read;
    None when it cannot be read (gone, no permission, EIO of a device that fell off the bus)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)
