# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The resident agent's fast signals (docs/contracts.md, "Node health agent", signals): what wakes
it between two periodic cycles besides the kernel log and NVML events (agent_events), and which
checks each signal concerns.

- ``netlink``: rtnetlink link announcements (RTM_NEWLINK / RTM_DELLINK) of the RDMA netdevs
  (IPoIB, RoCE): the ports of that RDMA device are checked.
- ``uevent``: kernel uevents of the PCI bus: a GPU or HCA removed (or added) -> the GPU family,
  or the RDMA family.
- ``probe``: every ``fast_probe_interval`` seconds (default 1) a cheap look at what announces
  nothing: per GPU one NVML query that goes to the driver (``nvmlDeviceGetTotalEccErrors``,
  volatile uncorrected: fails with GPU_IS_LOST / RESET_REQUIRED for a lost GPU and is the
  ECC counter; ``nvmlDeviceGetTemperature`` where ECC is not supported), the PCI function's
  config space vendor id (``config``: good only as the function's own, 0xffff: the device answers
  no more), per RDMA port
  ``state`` and ``rate`` (a link retrained to fewer lanes or a lower speed reads a lower rate), and
  the fabric manager unit's cgroup (``cgroup.events`` ``populated``). The probe signals an
  observation that changes, a bad first reading (a fault there at a start or restart), and one
  that stays bad for ``repeat`` more readings (so a check with
  ``fail_after`` N is seen failing N times in a row, as the hysteresis asks, without waiting for
  N periodic cycles).
- fast confirmation: a reading that turns bad (or an item a netlink announcement names) is read
  again alone, every ``confirm_interval(fast_probe_interval)`` seconds (``fast_probe_interval /
  CONFIRM_DIVISOR``, at least ``CONFIRM_MIN``), until it has been signalled ``repeat`` more times
  or reads good again. A signal of a confirmation reading, and a bad reading signalled again
  ("still", whichever reading took it), has the why ``CONFIRM_PREFIX``: the loop runs its targeted
  cycle ``confirm_interval`` after the previous one instead of ``min_gap`` (the hysteresis still
  counts ``fail_after`` measurements, taken faster). Bounded: "still" at most ``repeat`` times per
  change of a reading; an item armed at most once per probe, for at most ``repeat + 1``
  confirmation readings; anything else keeps ``min_gap``.

The probe keeps the files it reads open (agent_heldfiles.HeldFiles).

Why the fabric manager's cgroup: ``systemctl is-active`` forks and execs a process (milliseconds of
CPU, 10-70 s per hour at one a second: over the agent's budget); D-Bus PropertiesChanged needs a
D-Bus library the node need not have (the agent uses the standard library only); the unit's
cgroup is the kernel's own record of whether any of its processes lives (cgroup v2
``cgroup.events``, ``populated 0|1``, Documentation/admin-guide/cgroup-v2.rst; systemd removes the
cgroup when the unit stops; cgroup v1: the systemd hierarchy's ``cgroup.procs``): one small read.

A signal is ``(scope, why)``: ``gpu``, ``rdma`` (every RDMA device), ``rdma:<device>``,
``fabricmanager``. ``plan(signals)`` merges them into the checks to run (``only``), which
``targeted_params`` and ``merge_targeted`` apply to a cycle (agent_cycle).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import DEFAULT_SIGNALS, FM_CHECK
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_heldfiles import HeldFiles
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_netlink import (
    NETLINK_KOBJECT_UEVENT, NETLINK_ROUTE, RTMGRP_LINK, UEVENT_KERNEL_GROUP, NetlinkWatcher, open_netlink, read_small)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, PASS, STATUSES
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import parse_rate

DEFAULT_UNIT = DEFAULT_SIGNALS["fabricmanager_unit"]
NVIDIA, MELLANOX = "0x10de", "0x15b3"
# the first two bytes of the config space of a function that answers: its vendor id, little-endian
# (PCI config offset 0); the probe's GPUs are NVIDIA's and its HCAs Mellanox's by discovery
GPU_VENDOR_BYTES, HCA_VENDOR_BYTES = b"\xde\x10", b"\xb3\x15"
GPU_CLASSES = ("0x0300", "0x0302")
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
# a bad reading is confirmed every fast_probe_interval / 10, never more often than every 0.1 s (0.1 s
# at the default 1 s): how many confirmations a reading gets is bounded (fail_after - 1 per change,
# repeat + 1 per arming), so a shorter interval makes none more, it only takes them sooner; a
# targeted cycle (100-200 ms on the DGX fixture tree) is the longer part of each anyway
CONFIRM_DIVISOR = 10
CONFIRM_MIN = 0.1
CONFIRM_PREFIX = "probe confirm: "  # the why of a signal of a confirmation reading (agent_daemon: its gap)
# the quick probe: the RDMA ports' state and rate and the fabric manager's cgroup (a held descriptor's
# pread each) and each GPU's NVML query (a GPU lost without an event or a kernel line: a reading at
# most half a probe interval old) every fast_probe_interval / 2 (0.5 s at the default 1 s); the config
# space reads stay at fast_probe_interval. 2, not more: each wake-up of the loop costs more
# than its reads (bench/detect_latency.py idle: 4 a second went over the 5 s per hour)
QUICK_DIVISOR = 2
# the checks of an RDMA port's reading (target <device>/<port>) and of the fabric manager's (node):
# a confirmed reading of the probe is their fail_after measurements (FastProbe, credits)
PORT_CHECKS = ("rdma.port.state", "rdma.port.phys_state", "rdma.port.rate")
UNIT_CHECKS = (FM_CHECK,)
# a probe reading counts as a measurement when taken at least SPACING confirmation intervals after
# the last one counted (a quick probe and a confirmation reading a moment apart are one measurement)
SPACING = 0.9


def confirm_interval(interval):
    """Seconds between two confirmation readings of a bad reading for a probe every ``interval``."""
    return max(CONFIRM_MIN, float(interval) / CONFIRM_DIVISOR)


PRESENT = ("present",)


def _text(raw):
    return None if raw is None else raw.decode("ascii", "replace").strip()


# -- the fabric manager unit -------------------------------------------------------------------
def unit_installed(root, unit):
    return any(os.path.exists(os.path.join(root, directory, unit)) for directory in UNIT_DIRS)


CGROUP_EVENTS_LINE = re.compile(br"\A[a-z_]+ [0-9]+\Z")
MAX_CGROUP_EVENTS = 512  # the kernel's file is about 21 bytes ("populated 1\nfrozen 0\n")


def cgroup_populated(raw):
    """True / False of a cgroup v2 ``cgroup.events`` (a flat-keyed file, Documentation/admin-guide/
    cgroup-v2.rst: ``KEY VAL`` lines, each ended by a newline; ``populated 0|1``, ``frozen 0|1``),
    or None when ``raw`` is not that: a line of another form, no or more than one ``populated``
    line, a value other than 0 or 1, no final newline, too long."""
    if not raw or len(raw) >= MAX_CGROUP_EVENTS or not raw.endswith(b"\n"):
        return None
    lines = raw[:-1].split(b"\n")
    if not all(CGROUP_EVENTS_LINE.match(line) for line in lines):
        return None
    populated = [line for line in lines if line.startswith(b"populated ")]
    if len(populated) != 1 or populated[0] not in (b"populated 0", b"populated 1"):
        return None
    return populated[0] == b"populated 1"


def unit_running(root, unit, read=read_small):
    """True / False from the unit's cgroup (v2 ``cgroup.events`` populated, v1 ``cgroup.procs``
    not empty); a unit without a cgroup is not running; None: its ``cgroup.events`` is there but not
    the kernel's (cgroup_populated), unreadable. ``read``: read_small or HeldFiles.read."""
    base = os.path.join(root, "sys/fs/cgroup")
    raw = read(os.path.join(base, "system.slice", unit, "cgroup.events"), MAX_CGROUP_EVENTS)
    if raw is not None:
        return cgroup_populated(raw)
    raw = read(os.path.join(base, "systemd", "system.slice", unit, "cgroup.procs"), 64)
    return bool(raw and raw.strip())


def fabricmanager_check(root, unit):
    """The agent's check ``agent.fabricmanager`` (node): only where the unit is installed under
    ``root``; None otherwise (gpu.fabric judges the NVLink fabric itself)."""
    if not unit or not unit_installed(root, unit):
        return None
    running = unit_running(root, unit)
    if running:
        return {"id": FM_CHECK, "target": "node", "status": PASS, "message": "%s running (its cgroup has a process)"
                % unit}
    if running is None:
        return {"id": FM_CHECK, "target": "node", "status": FAIL,
                "message": "%s: its cgroup.events is unreadable (not the kernel's 'populated 0|1'): not seen running"
                % unit}
    return {"id": FM_CHECK, "target": "node", "status": FAIL,
            "message": "%s is not running (no process in its cgroup): the NVLink fabric is not managed" % unit}


def rdma_devices_of(root, ifname):
    """The RDMA device(s) of a netdev (the ``infiniband`` directory of the device it sits on:
    ``/sys/class/net/<if>`` -> ``.../<pci function>/net/<if>``), or [] (a bridge, a veth, a bond)."""
    if not ifname or "/" in ifname or ifname in (".", ".."):
        return []
    try:
        path = os.path.realpath(os.path.join(root, "sys", "class", "net", ifname))
        parent = os.path.dirname(path)
        if not os.path.isdir(path) or os.path.basename(parent) != "net" or "/devices/" not in path:
            return []
        return sorted(os.listdir(os.path.join(os.path.dirname(parent), "infiniband")))
    except OSError:
        return []


# -- which checks a signal concerns ----------------------------------------------------------------
def plan(signals):
    """{"gpu": bool, "rdma": None | "all" | [devices], "fabricmanager": bool, "why": [...]} for
    ``signals`` [(scope, why)]; None when no signal concerns a check."""
    gpu = fabric = False
    rdma, why = set(), []
    for scope, reason in signals:
        if scope == "gpu":
            gpu = True
        elif scope == "fabricmanager":
            fabric = True
        elif scope == "rdma":
            rdma.add("*")
        elif scope.startswith("rdma:"):
            rdma.add(scope[5:])
        else:
            continue
        if reason not in why:
            why.append(reason)
    if not (gpu or fabric or rdma):
        return None
    devices = "all" if "*" in rdma else (sorted(rdma) or None)
    return {"gpu": gpu, "rdma": devices, "fabricmanager": fabric, "why": why[:20]}


def targeted_params(params, only):
    """node_validate parameters running only the families ``only`` concerns (the RDMA family
    narrowed to the devices named)."""
    params = dict(params)
    for family in ("gpu", "rdma", "tuning"):
        params[family] = dict(params.get(family) or {})
    if not only.get("gpu"):
        params["gpu"]["enabled"] = False
    params["tuning"]["enabled"] = False
    devices = only.get("rdma")
    if not devices:
        params["rdma"]["enabled"] = False
    elif devices != "all":
        asked = params["rdma"].get("devices")
        params["rdma"]["devices"] = [d for d in devices if not asked or d in asked] or list(devices)
    return params


def in_scope(check, only):
    """True when ``check`` is one a targeted cycle for ``only`` measured again."""
    check_id, target = check["id"], check["target"]
    if check_id == "host.validation":
        return True
    if check_id == FM_CHECK:
        return bool(only.get("fabricmanager"))
    if check_id.startswith("gpu."):
        return bool(only.get("gpu"))
    if check_id.startswith("rdma."):
        devices = only.get("rdma")
        if devices == "all":
            return True
        return bool(devices) and any(target == d or target.startswith(d + "/") for d in devices)
    return False


def credited(credits, checks, ran):
    """{"id|target": measurements} of a targeted cycle's ``checks`` that a confirmed reading of the
    probe credits (``credits``: FastProbe.take_credits, [[check ids, target, measurements]]), only
    those measured (``ran``): agent_hysteresis.step counts such a check, when it fails in this
    cycle, as failing that many times in a row."""
    found = {}
    for ids, target, count in credits or ():
        for check in checks:
            key = "%s|%s" % (check["id"], check["target"])
            if check["id"] in ids and check["target"] == target and (ran is None or key in ran):
                found[key] = max(found.get(key, 0), int(count))
    return found


def previous_checks(result):
    """The checks of the last result (health.json), or None when they are not a list of
    {id, target, status} (then a targeted cycle is not possible: a full cycle runs)."""
    checks = result.get("checks") if isinstance(result, dict) else None
    if not isinstance(checks, list) or not checks:
        return None
    for check in checks:
        if not (isinstance(check, dict) and isinstance(check.get("id"), str) and isinstance(check.get("target"), str)
                and check.get("status") in STATUSES):
            return None
    return checks


def merge_targeted(previous, payload, only):
    """(result, keys measured) of a targeted cycle: the last result with the checks in scope
    replaced by this run's (a check in scope that is no longer reported is dropped; new ones are
    added at the end). ``payload``: this run's node_validate payload (families off but those
    concerned, the RDMA family narrowed)."""
    fresh = [c for c in payload["checks"] if in_scope(c, only)]
    by_key = dict(("%s|%s" % (c["id"], c["target"]), c) for c in fresh)
    merged, seen = [], set()
    for check in previous["checks"]:
        key = "%s|%s" % (check["id"], check["target"])
        if in_scope(check, only) or check["id"] == "host.validation":
            if key in by_key:
                merged.append(by_key[key])
                seen.add(key)
            continue
        merged.append(check)
    merged.extend(c for c in fresh if "%s|%s" % (c["id"], c["target"]) not in seen)
    result = dict(previous)
    result.pop("agent", None)
    result["checks"] = merged
    summary = dict((status, 0) for status in ("pass", "warn", "fail", "skip"))
    for check in merged:
        summary[check["status"]] = summary.get(check["status"], 0) + 1
    result["summary"] = summary
    result["healthy"] = not any(c["status"] == FAIL for c in merged)
    if only.get("gpu"):
        for key in ("gpus", "nvml"):
            if key in payload:
                result[key] = payload[key]
        facts = dict(result.get("ansible_facts") or {})
        facts.update(dict((k, v) for k, v in (payload.get("ansible_facts") or {}).items() if k == "nvidia"))
        result["ansible_facts"] = facts
    keys = set(by_key) | set("%s|%s" % (c["id"], c["target"]) for c in previous["checks"] if in_scope(c, only))
    return result, keys


# -- the fast probe -------------------------------------------------------------------------------
class FastProbe(object):
    """Cheap readings of what announces nothing, every ``interval`` seconds (``poll``), all but the
    PCI functions' config space also in between (``poll(quick=True)``). The first reading
    is the baseline: silent where good, a bad one handled like a change (a fault already there at a
    start or restart).

    A GPU's reading (NVML, config space): a change signals at once (the GPU's immediate checks), a
    bad one signals again for ``repeat`` readings, read again alone (``poll(pending())``, the
    confirmation readings): at most ``repeat + 1`` confirmation readings per arming.

    A port's or the fabric manager's reading (``credits``): a bad reading is counted, not signalled;
    it is read again alone every confirmation interval, and each bad reading taken at least
    ``SPACING`` confirmation intervals after the last one counted is one more measurement. When the
    count reaches a ``fail_after`` of the item's checks (``needs``) it signals once
    (``CONFIRM_PREFIX``, "confirmed") and ``take_credits()`` says how many measurements the probe
    took: the targeted cycle that follows counts each of those checks it sees failing as failing
    that many times (agent_hysteresis.step, ``credit``). A reading good again before that resets
    the count: a fault shorter than ``(fail_after - 1)`` confirmation intervals is never signalled.
    A reading good again (or another bad value once signalled) signals as a change. An item
    ``arm``-ed (a netlink announcement) is read the same way. Bounded: at most ``2 * fail_after``
    confirmation readings per turn to bad or arming, an item armed at most once per probe."""

    def __init__(self, root, unit=DEFAULT_UNIT, binding=None, repeat=2, clock=time.monotonic, needs=None,
                 confirm=0.0):
        self.root = root
        self.unit = unit
        self.nvml = binding
        self.repeat = repeat
        self.clock = clock
        # fail_after of the checks of a port's and of the fabric manager's reading (agent_daemon from the
        # hysteresis settings), sorted; the probe alone: repeat + 1
        needs = needs or {}
        self.needs = dict((kind, tuple(sorted(set(needs.get(kind) or (repeat + 1,))))) for kind in ("port", "unit"))
        self.spacing = SPACING * float(confirm or 0)
        self.handles = None  # [(index, handle)] while NVML is held
        self.nvml_error = None
        self.last = None
        self.bad_left = {}
        self.base_rate = {}
        self.confirm_left = {}  # key -> confirmation readings left
        self.armed_run = {}  # key -> the probe run it was last armed at
        self.count = {}  # key -> bad readings counted in a row (ports, the fabric manager)
        self.counted_at = {}  # key -> (clock of the first, clock of the last counted)
        self.signalled = {}  # key -> the count last signalled in this run of bad readings
        self.credits = {}  # key -> measurements of a confirmed reading, for the next targeted cycle
        self.confirms = 0  # confirmation readings taken
        self.quicks = 0  # quick probes taken
        self.files = HeldFiles(check_inode=os.path.realpath(root) != "/", root=root)
        self.config_read = set()  # PCI functions whose config space was read (its vendor id) once
        self.runs = 0
        self.cpu = 0.0  # CPU seconds spent probing (health.json agent.events.probe_us)
        self.discover()

    def _sys(self, *parts):
        return os.path.join(self.root, "sys", *parts)

    def discover(self):
        """The GPUs' and HCAs' PCI functions and the RDMA ports (read once, again on a uevent)."""
        pci = self._sys("bus", "pci", "devices")
        self.gpus, self.hcas = [], []
        try:
            addresses = sorted(os.listdir(pci))
        except OSError:
            addresses = []
        for address in addresses:
            vendor = _text(read_small(os.path.join(pci, address, "vendor"), 16))
            klass = _text(read_small(os.path.join(pci, address, "class"), 16)) or ""
            if vendor == NVIDIA and klass[:6] in GPU_CLASSES:
                self.gpus.append(address)
            elif vendor == MELLANOX and os.path.isdir(os.path.join(pci, address, "infiniband")):
                self.hcas.append(address)

        self.ports = []  # (device, port dir)
        base = self._sys("class", "infiniband")
        try:
            devices = sorted(os.listdir(base))
        except OSError:
            devices = []
        for device in devices:
            try:
                ports = sorted(os.listdir(os.path.join(base, device, "ports")))
            except OSError:
                continue
            self.ports.extend((device, os.path.join(base, device, "ports", port)) for port in ports)
        self.fabric = bool(self.unit) and unit_installed(self.root, self.unit)
        self.pci_paths = dict((address, (os.path.join(pci, address, "config"), os.path.join(pci, address)))
                              for address in self.gpus + self.hcas)
        # (key, address, scope) of the PCI functions, joined once: the probe runs every second
        self.pci_items = [("pci " + address, address, "gpu") for address in self.gpus] + \
            [("pci " + address, address, "rdma") for address in self.hcas]
        self.port_paths = [("port %s/%s" % (device, os.path.basename(port)), "rdma:" + device,
                            os.path.join(port, "state"), os.path.join(port, "rate")) for device, port in self.ports]
        self.unit_key = "unit %s" % self.unit
        # the unit's cgroup v2 cgroup.events (unit_running's first path), joined once
        self.unit_events = os.path.join(self.root, "sys/fs/cgroup", "system.slice", self.unit or "", "cgroup.events")
        self.raws = {}  # key -> the bytes of its last reading decoded (a port: state and rate; the unit)
        self.nvml_keys = {}  # index -> key
        # the readings a confirmed bad reading credits: key -> (kind, check ids, target)
        self.credit_of = dict((key, ("port", PORT_CHECKS, key[5:])) for key, _s, _a, _b in self.port_paths)
        if self.fabric:
            self.credit_of[self.unit_key] = ("unit", UNIT_CHECKS, "node")
        self.files.keep([config for config, _rest in self.pci_paths.values()] + [p[2] for p in self.port_paths]
                        + [p[3] for p in self.port_paths] + [d for _c, d in self.pci_paths.values()])
        self.last = None  # a new baseline
        self.confirm_left, self.armed_run = {}, {}
        self.count, self.counted_at, self.signalled, self.credits = {}, {}, {}, {}

    def hold_nvml(self):
        """NVML initialised and the handles taken (between two cycles)."""
        if self.nvml is None or self.handles is not None:
            return
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # no driver, library gone: an observation of its own
            self.nvml_error = "nvmlInit: %s" % exc
            self.handles = []
            return
        self.nvml_error = None
        handles = []
        try:
            for index in range(self.nvml.nvmlDeviceGetCount()):
                try:
                    handles.append((index, self.nvml.nvmlDeviceGetHandleByIndex(index)))
                except Exception as exc:
                    handles.append((index, exc))
        except Exception as exc:
            self.nvml_error = "nvmlDeviceGetCount: %s" % exc
        self.handles = handles

    def release_nvml(self):
        if self.handles is None:
            return
        if self.nvml_error is None or not self.nvml_error.startswith("nvmlInit"):
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
        self.handles = None

    def _gpu_query(self, handle):
        """(value, bad) of one GPU: its volatile uncorrected ECC count, else (ECC not supported)
        its temperature read; an error (GPU_IS_LOST, RESET_REQUIRED, anything a binding raises)
        is bad."""
        nvml = self.nvml
        if isinstance(handle, Exception):
            return ("error", str(handle)), True
        try:
            count = nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                     nvml.NVML_VOLATILE_ECC)
            return ("ecc", int(count)), False
        except Exception as exc:  # the binding's NVMLError, or anything else it raises: never the probe's end
            if getattr(exc, "value", None) != NOT_SUPPORTED:
                return ("error", "%s" % (exc,)), True
        try:
            nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            return ("ok", None), False
        except Exception as exc:
            return ("error", "%s" % (exc,)), getattr(exc, "value", None) != NOT_SUPPORTED

    def _pci(self, address):
        """(value, bad) of a PCI function: the first two bytes of its config space, good only as the
        vendor id it was discovered with (vendor 0xffff: the device answers no more; any other
        value, 0x0000, fewer than 2 bytes: not a device answering); a read that fails on a function
        whose directory is gone: gone; on one whose config was read before: unreadable (a function
        whose config never opened, a fixture tree without config files, is not judged by it).
        Its current link width and speed are not probed: no check compares them (gpu.pcie compares
        the link capability, the periodic cycle reads it)."""
        config, directory = self.pci_paths[address]
        files = self.files
        if files.check_inode and config not in files.held and not files.present(directory):
            return ("gone",), True  # a fixture tree: the directory first, then its config opened in it
        raw = files.read(config, 2, directory)
        if raw is None:
            if not files.present(directory):
                return ("gone",), True
            return ("no config",) if address not in self.config_read else ("config unreadable",), \
                address in self.config_read
        self.config_read.add(address)
        if raw[:2] == (GPU_VENDOR_BYTES if address in self.gpus else HCA_VENDOR_BYTES):
            return PRESENT, False
        if len(raw) < 2:
            return ("config reads %d byte(s)" % len(raw),), True
        return ("vendor 0x%02x%02x" % (bytearray(raw)[1], bytearray(raw)[0]),), True

    def observe(self, keys=None, quick=False):
        """{key: (scope, value, bad)} now, of every item, of ``keys`` only, or (``quick``) of all
        but the PCI functions (paths joined once, at discovery: the quick probe runs twice a second)."""
        seen = {}
        read = self.files.read if not quick else self._quick_read
        if not quick:
            self.files.check_root()  # a lab root re-pointed at another tree: every file by path again
            for key, address, scope in self.pci_items:
                if keys is None or key in keys:
                    value, bad = self._pci(address)
                    seen[key] = (scope, value, bad)
        base_rate = self.base_rate
        raws, last = self.raws, self.last or {}
        for key, scope, state_path, rate_path in self.port_paths:
            if keys is not None and key not in keys:
                continue
            # state and rate: phys_state changes with state (the periodic cycle reads it)
            raw_state, raw_rate = read(state_path, 64), read(rate_path, 64)
            before = last.get(key)
            if before is not None and not before[2] and raws.get(key) == (raw_state, raw_rate):
                if not quick:
                    seen[key] = before  # good and the same bytes: nothing decoded again
                continue  # (a quick probe hands only what changed or is bad to poll)
            raws[key] = (raw_state, raw_rate)
            state, rate = _text(raw_state), _text(raw_rate)
            # a port's rate has no "max" in sysfs: the highest rate seen is its own (a retrain to fewer
            # lanes or a lower speed reads below it; one that trains up raises it); unreadable is bad
            gbps = parse_rate(rate)[0]
            base = base_rate.get(key)
            if key not in base_rate or (gbps is not None and (base is None or gbps > base)):
                base = base_rate[key] = gbps
            bad_rate = base is not None and (gbps is None or gbps < base)
            seen[key] = (scope, (state, rate), state is None or not state.endswith("ACTIVE") or bad_rate)
        if self.nvml is not None and self.handles is not None:  # the quick probe too (QUICK_DIVISOR)
            if self.nvml_error and (keys is None or "nvml" in keys):
                seen["nvml"] = ("gpu", self.nvml_error, True)
            for index, handle in self.handles:
                key = self.nvml_keys.get(index)
                if key is None:
                    key = self.nvml_keys[index] = "nvml gpu%d" % index
                if keys is None or key in keys:
                    value, bad = self._gpu_query(handle)
                    seen[key] = ("gpu", value, bad)
        if self.fabric and (keys is None or self.unit_key in keys):
            key = self.unit_key
            raw = read(self.unit_events, MAX_CGROUP_EVENTS)
            before = last.get(key)
            if raw is not None and before is not None and not before[2] and raws.get(key) == raw:
                if not quick:
                    seen[key] = before
                return seen
            raws[key] = raw
            running = cgroup_populated(raw) if raw is not None else unit_running(self.root, self.unit, read)
            seen[key] = ("fabricmanager", running, not running)
        return seen

    def _quick_read(self, path, size=256):
        return self.files.read(path, size, recheck=False)

    def keys_of(self, scope):
        """The keys of the last reading whose scope is ``scope`` (``rdma:<device>``: its ports)."""
        return sorted(key for key, item in (self.last or {}).items() if item[0] == scope)

    def arm(self, keys):
        """Read ``keys`` again at the next confirmation (a netlink announcement named their device):
        up to ``repeat + 1`` confirmation readings (a port: until its bad readings are confirmed, at
        most ``2 * fail_after``), once per probe."""
        for key in keys:
            if self.armed_run.get(key) != self.runs:
                self.armed_run[key] = self.runs
                credit = self.credit_of.get(key)
                self.confirm_left[key] = 2 * self.needs[credit[0]][-1] if credit else self.repeat + 1

    def pending(self):
        """The keys a confirmation reading is due for."""
        return sorted(key for key, left in self.confirm_left.items() if left > 0)

    def take_credits(self):
        """[[check ids, target, measurements]] of the readings confirmed since the last call (the
        targeted cycle they signalled counts its failing checks among them as failing that many
        times); emptied."""
        if not self.credits:
            return []
        found = [[list(self.credit_of[key][1]), self.credit_of[key][2], count]
                 for key, count in sorted(self.credits.items()) if key in self.credit_of]
        self.credits = {}
        return found

    def _counted(self, key, scope, value, bad, before, first, confirm, now, signals):
        """A reading of a port or of the fabric manager (class docstring): counted while bad,
        signalled when the count reaches a fail_after of its checks."""
        changed = first or before is None or before[1] != value
        if not bad:
            if self.count.get(key):
                self.count[key] = 0
            signalled_before = self.signalled.pop(key, 0)
            if key in self.confirm_left:
                self.confirm_left[key] = 0
            if changed and not first:
                # good again: at once when its bad reading was signalled (a confirmation's gap), else as
                # any change (min_gap: a flap never confirmed runs at most one cycle a min_gap)
                fast = confirm and signalled_before
                signals.append((scope, "%s%s %s -> %s" % (CONFIRM_PREFIX if fast else "probe: ", key,
                                                          before[1] if before else "new", value)))
            return
        needs = self.needs[self.credit_of[key][0]]
        count = self.count.get(key, 0)
        if count == 0:
            count, self.counted_at[key] = 1, (now, now)
            if not confirm or self.confirm_left.get(key, 0) <= 0:
                self.confirm_left[key] = 2 * needs[-1]  # the bound of this run's confirmation readings
        elif now - self.counted_at[key][1] >= self.spacing:
            count += 1
            self.counted_at[key] = (self.counted_at[key][0], now)
        self.count[key] = count
        signalled = self.signalled.get(key, 0)
        if count in needs and signalled < count:
            self.signalled[key] = count
            self.credits[key] = count
            if count == 1:
                why = "bad at the first reading" if first or before is None else "%s ->" % (before[1],)
                signals.append((scope, "probe: %s %s %s" % (key, why, value)))
            else:
                signals.append((scope, "%s%s confirmed: bad at %d readings over %.2f s: %s" % (
                    CONFIRM_PREFIX, key, count, now - self.counted_at[key][0], value)))
        elif changed and signalled and not first:
            signals.append((scope, "probe: %s %s -> %s" % (key, before[1], value)))
        if confirm:
            self.confirm_left[key] = self.confirm_left.get(key, 1) - 1
        if count >= needs[-1]:
            self.confirm_left[key] = 0

    def poll(self, keys=None, quick=False):
        """[(scope, why)] of this probe (``keys`` None), of a quick probe (``quick``: the ports,
        the fabric manager and the GPUs' NVML query) or of a confirmation reading of ``keys``."""
        confirm = keys is not None
        if confirm:
            self.confirms += 1
        elif quick:
            self.quicks += 1
        else:
            self.runs += 1
        if self.last is None and (confirm or quick):
            return []  # no baseline yet (the next probe takes it)
        cpu = time.process_time() if not quick else None  # probe_us: the full probe's CPU (a syscall less)
        now_at = self.clock()
        now = self.observe(keys, quick)
        signals = []
        prefix = "probe: " if not confirm else CONFIRM_PREFIX
        first = self.last is None
        last = self.last or {}
        credit_of = self.credit_of
        for key, item in (sorted(now.items()) if first else now.items()):
            before = last.get(key)
            if before is not None and before == item and not item[2]:
                if confirm:
                    self.confirm_left[key] = 0  # good: confirmed good, done
                continue  # good and unchanged: the common case, nothing to do
            scope, value, bad = item
            if key in credit_of:
                self._counted(key, scope, value, bad, before, first, confirm, now_at, signals)
                continue
            if first:
                # a first reading (a start, a restart, a new discovery): a bad one signals like a change
                # and is confirmed like any bad reading (a fault present at a restart still turns failing
                # within seconds, not over fail_after periodic cycles); a good one is the silent baseline
                if bad:
                    signals.append((scope, "%s%s bad at the first reading: %s" % (prefix, key, value)))
                    self.bad_left[key] = self.repeat
                    self.armed_run[key] = self.runs
                    self.confirm_left[key] = self.repeat
                continue
            if before is None or before[1] != value:
                signals.append((scope, "%s%s %s -> %s" % (prefix, key, before[1] if before else "new", value)))
                self.bad_left[key] = self.repeat if bad else 0
                if not confirm and bad and self.armed_run.get(key) != self.runs:
                    self.armed_run[key] = self.runs  # turned bad: confirmed at once, not a probe later
                    self.confirm_left[key] = self.repeat
            elif bad and self.bad_left.get(key, 0) > 0:  # a confirmation, whichever reading took it
                self.bad_left[key] -= 1
                signals.append((scope, "%s%s still %s" % (CONFIRM_PREFIX, key, value)))
            if confirm:
                left = self.confirm_left.get(key, 0) - 1
                # done: good again, signalled enough times, or the readings the arming allows taken
                self.confirm_left[key] = left if bad and self.bad_left.get(key, 0) > 0 else 0
        if not first:
            if not confirm and not quick:
                for key in [k for k in last if k not in now]:
                    signals.append((last[key][0], "probe: %s gone" % key))
                    self.count.pop(key, None)
                    self.signalled.pop(key, None)
            for key in [k for k in (keys if confirm else self.confirm_left) if k not in now]:
                if confirm or not quick:
                    self.confirm_left.pop(key, None)  # not read now: the next probe says what became of it
        if confirm or quick:
            last.update(now)
        else:
            self.last = now
        if cpu is not None:
            self.cpu += time.process_time() - cpu
        return signals

    def close(self):
        self.release_nvml()
        self.files.close()


# -- the sources together ---------------------------------------------------------------------------
class SignalSources(object):
    """The signals the configuration asks for (``signals``), each optional: one that cannot be
    opened is reported in ``status`` (health.json ``agent.events``), the others go on.
    ``fds()`` for select(), ``due()`` the monotonic time of the next probe or confirmation
    reading, ``poll()`` the signals readable or due now (``confirm``: seconds between two
    confirmation readings, confirm_interval). ``sockets``: stand-ins for tests and the bench
    ({"netlink": sock, "uevent": sock})."""

    min_gap = 1.0  # seconds between two targeted cycles (the events' min_gap, set by agent_daemon)

    def __init__(self, settings, root, repeat=2, binding_loader=None, sockets=None, clock=time.monotonic,
                 opener=open_netlink, needs=None):
        self.settings = settings
        self.root = root
        self.clock = clock
        self.status = {}
        self.watchers = []
        self.overruns = 0
        sockets = sockets or {}
        for name, protocol, groups in (("netlink", NETLINK_ROUTE, RTMGRP_LINK),
                                       ("uevent", NETLINK_KOBJECT_UEVENT, UEVENT_KERNEL_GROUP)):
            if not settings.get(name):
                self.status[name] = "off (signals.%s)" % name
                continue
            try:
                sock = sockets[name] if name in sockets else opener(protocol, groups)
            except OSError as exc:
                self.status[name] = "unavailable: %s, the fast probe and the periodic cycle cover it" % (
                    exc.strerror or exc)
                continue
            watcher = NetlinkWatcher(name, sock)
            self.watchers.append(watcher)
            self.status[name] = "watching %s" % ("link announcements (RTMGRP_LINK)" if name == "netlink"
                                                 else "kernel uevents")
        self.interval = settings.get("fast_probe_interval") or 0
        self.confirm = confirm_interval(self.interval) if self.interval else None
        self.confirm_at = None  # monotonic time of the next confirmation reading
        self.early = []  # signals of a first reading (bad at the start, after a discovery): the next poll's
        self.probe = None
        self.quick = None  # seconds between two quick probes (the ports, the fabric manager), or None
        if self.interval:
            binding = None
            if binding_loader is not None:
                try:
                    binding = binding_loader()
                except Exception as exc:
                    self.status["probe_nvml"] = "unavailable: %s" % exc
            self.probe = FastProbe(root, settings.get("fabricmanager_unit"), binding, repeat, clock, needs=needs,
                                   confirm=self.confirm)
            self.probe.hold_nvml()
            self.early = self.probe.poll()  # the baseline: a bad first reading signals (a GPU) or is confirmed
            quick = self.interval / QUICK_DIVISOR
            self.quick = quick if quick >= CONFIRM_MIN else None
            self.status["probe"] = "every %g s: %d GPU(s), %d HCA(s), %d RDMA port(s)%s%s%s, a bad reading " \
                "confirmed every %g s" % (
                self.interval, len(self.probe.gpus), len(self.probe.hcas), len(self.probe.ports),
                ", NVML" if binding is not None else "", ", %s" % self.probe.unit if self.probe.fabric else "",
                "; ports%s every %g s" % (" and the unit" if self.probe.fabric else "", self.quick)
                if self.quick else "", self.confirm)
        else:
            self.status["probe"] = "off (signals.fast_probe_interval 0)"
        self.next = self.clock() + self.interval if self.interval else None
        self.quick_next = self.clock() + self.quick if self.quick else None
        self._schedule(self.clock())  # a bad first reading of a port or the unit: its confirmations

    def fds(self):
        return [watcher.fileno() for watcher in self.watchers]

    def due(self):
        if self.early:
            return self.clock()
        if self.next is None:
            return float("inf")
        due = self.next if self.confirm_at is None else min(self.next, self.confirm_at)
        return due if self.quick_next is None else min(due, self.quick_next)

    def _schedule(self, now):
        """The next confirmation reading, one ``confirm`` from ``now``, while one is pending."""
        if self.probe is None or not self.probe.pending():
            self.confirm_at = None
        elif self.confirm_at is None or self.confirm_at <= now:
            self.confirm_at = now + self.confirm

    def pause(self):
        if self.probe is not None:
            self.probe.release_nvml()

    def resume(self):
        if self.probe is not None:
            self.probe.hold_nvml()

    def _announcements(self, readable=None):
        signals = []
        for watcher in list(self.watchers):
            if readable is not None and watcher.fileno() not in readable:
                continue  # nothing to read: no failing recv each probe
            try:
                events, overrun = watcher.drain()
            except OSError as exc:
                self.watchers.remove(watcher)
                self.status[watcher.kind] = "unavailable: read failed: %s" % (exc.strerror or exc)
                continue
            if watcher.ended:
                self.watchers.remove(watcher)
                self.status[watcher.kind] = "unavailable: the socket ended"
            if overrun:
                self.overruns += 1
                signals.extend([("gpu", "%s: announcements lost (ENOBUFS)" % watcher.kind),
                                ("rdma", "%s: announcements lost (ENOBUFS)" % watcher.kind)])
            for event in events:
                signals.extend(self._concerns(watcher.kind, event))
        return signals

    def _concerns(self, kind, event):
        if kind == "netlink":
            devices = rdma_devices_of(self.root, event.get("ifname"))
            state = event.get("operstate") or ("lower up" if event["lower_up"] else "lower down")
            armed = [key for device in devices for key in self.probe.keys_of("rdma:" + device)] \
                if self.probe is not None else []
            if armed:  # its ports read again at once, every confirmation interval: they signal (confirmed)
                self.probe.arm(armed)
                self._schedule(self.clock())
            probed = set(key[5:].split("/", 1)[0] for key in armed)
            # a device whose ports the probe reads: no cycle of its own, the readings decide (a link announced
            # down and up again within the confirmation window is not reported, as the probe's own flaps)
            return [("rdma:" + device, "netlink: %s %s %s" % (event["type"], event["ifname"], state))
                    for device in devices if device not in probed]
        if event.get("subsystem") != "pci" or event.get("action") not in ("remove", "add", "change", "unbind"):
            return []
        slot, pci_id = event.get("pci_slot") or event["devpath"].rsplit("/", 1)[-1], (event.get("pci_id") or "").upper()
        why = "uevent: %s %s" % (event["action"], slot)
        scopes = []
        known = self.probe is not None
        if (known and slot in self.probe.gpus) or pci_id.startswith("10DE:"):
            scopes.append(("gpu", why))
        if (known and slot in self.probe.hcas) or pci_id.startswith("15B3:"):
            scopes.append(("rdma", why))
        if scopes and self.probe is not None and event["action"] in ("remove", "add"):
            self.probe.discover()
            self.early.extend(self.probe.poll())  # a new baseline: its bad readings signal
        return scopes

    def poll(self, readable=None):
        """[(scope, why)]: announcements readable now, and the probe when it is due. ``readable``:
        the descriptors select() found readable (None: every socket is read)."""
        signals = self._announcements(readable)
        if self.early:
            signals.extend(self.early)
            self.early = []
            self._schedule(self.clock())
        if self.probe is None:
            return signals
        if self.clock() >= self.next:
            try:
                signals.extend(self.probe.poll())
            except Exception as exc:  # never the agent's end: said in health.json, the periodic cycle goes on
                self.status["probe"] = "probe failed: %r; %s" % (exc, self.status["probe"].split("; ")[-1])
            now = self.clock()
            self.next += self.interval
            if self.next <= now:  # a long cycle: the next probe one interval from now, no burst
                self.next = now + self.interval
            if self.quick_next is not None:
                self.quick_next = now + self.quick
            self._schedule(now)
            return signals
        now = self.clock()
        if self.confirm_at is not None and now >= self.confirm_at:
            try:
                pending = self.probe.pending()  # none after a new discovery (a uevent): nothing read
                signals.extend(self.probe.poll(pending) if pending else [])
            except Exception as exc:
                self.probe.confirm_left = {}
                self.status["probe"] = "probe failed: %r; %s" % (exc, self.status["probe"].split("; ")[-1])
            self._schedule(self.clock())
        if self.quick_next is not None and now >= self.quick_next:
            try:
                signals.extend(self.probe.poll(quick=True))
            except Exception as exc:
                self.status["probe"] = "probe failed: %r; %s" % (exc, self.status["probe"].split("; ")[-1])
            self.quick_next += self.quick
            now = self.clock()
            if self.quick_next <= now:  # no burst after a long cycle
                self.quick_next = now + self.quick
            self._schedule(now)
        return signals

    def take_credits(self):
        """The probe's confirmed readings since the last call (FastProbe.take_credits): the targeted
        cycle about to run counts them (agent_daemon.Loop, agent_cycle)."""
        return self.probe.take_credits() if self.probe is not None else []

    def counters(self):
        result = dict(self.status)
        for watcher in self.watchers:
            result["%s_messages" % watcher.kind] = watcher.messages
            result["%s_dropped" % watcher.kind] = watcher.dropped
        result["signals_overruns"] = self.overruns
        if self.probe is not None:
            result["probe_runs"] = self.probe.runs
            result["probe_confirms"] = self.probe.confirms
            result["probe_quick"] = self.probe.quicks
            result["probe_us"] = round(self.probe.cpu * 1e6 / max(1, self.probe.runs), 1)
        return result

    def close(self):
        self.pause()
        if self.probe is not None:
            self.probe.files.close()
        for watcher in self.watchers:
            watcher.close()
        self.watchers = []
