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
  config space vendor id (``config``, 0xffff: the device answers no more), per RDMA port
  ``state`` and ``rate`` (a link retrained to fewer lanes or a lower speed reads a lower rate), and
  the fabric manager unit's cgroup (``cgroup.events`` ``populated``). The probe signals an
  observation that changes, and one that stays bad for ``repeat`` more probes (so a check with
  ``fail_after`` N is seen failing N times in a row, as the hysteresis asks, without waiting for
  N periodic cycles).

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
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import DEFAULT_SIGNALS, FM_CHECK
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_netlink import (
    NETLINK_KOBJECT_UEVENT, NETLINK_ROUTE, RTMGRP_LINK, UEVENT_KERNEL_GROUP, NetlinkWatcher, open_netlink, read_small)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, PASS, STATUSES

DEFAULT_UNIT = DEFAULT_SIGNALS["fabricmanager_unit"]
NVIDIA, MELLANOX = "0x10de", "0x15b3"
GPU_CLASSES = ("0x0300", "0x0302")
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED


def _text(raw):
    return None if raw is None else raw.decode("ascii", "replace").strip()


# -- the fabric manager unit -------------------------------------------------------------------
def unit_installed(root, unit):
    return any(os.path.exists(os.path.join(root, directory, unit)) for directory in UNIT_DIRS)


def unit_running(root, unit):
    """True / False from the unit's cgroup (v2 ``cgroup.events`` populated, v1 ``cgroup.procs``
    not empty); a unit without a cgroup is not running."""
    base = os.path.join(root, "sys/fs/cgroup")
    raw = read_small(os.path.join(base, "system.slice", unit, "cgroup.events"))
    if raw is not None:
        return b"populated 1" in raw
    raw = read_small(os.path.join(base, "systemd", "system.slice", unit, "cgroup.procs"), 64)
    return bool(raw and raw.strip())


def fabricmanager_check(root, unit):
    """The agent's check ``agent.fabricmanager`` (node): only where the unit is installed under
    ``root``; None otherwise (gpu.fabric judges the NVLink fabric itself)."""
    if not unit or not unit_installed(root, unit):
        return None
    if unit_running(root, unit):
        return {"id": FM_CHECK, "target": "node", "status": PASS, "message": "%s running (its cgroup has a process)"
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
    """Cheap readings of what announces nothing, every ``interval`` seconds (``poll``). The first
    reading is the baseline (the periodic cycle judged it); afterwards an observation that
    changes signals its scope, and one that stays bad signals again for ``repeat`` probes."""

    def __init__(self, root, unit=DEFAULT_UNIT, binding=None, repeat=2, clock=time.monotonic):
        self.root = root
        self.unit = unit
        self.nvml = binding
        self.repeat = repeat
        self.clock = clock
        self.handles = None  # [(index, handle)] while NVML is held
        self.nvml_error = None
        self.last = None
        self.bad_left = {}
        self.base_rate = {}
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
        self.port_paths = [("port %s/%s" % (device, os.path.basename(port)), "rdma:" + device,
                            os.path.join(port, "state"), os.path.join(port, "rate")) for device, port in self.ports]
        self.last = None  # a new baseline

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
        """(value, bad) of a PCI function: the first two bytes of its config space (vendor 0xffff:
        the device answers no more; a read that fails on a function whose directory is gone: gone).
        Its current link width and speed are not probed: no check compares them (gpu.pcie compares
        the link capability, the periodic cycle reads it)."""
        config, directory = self.pci_paths[address]
        raw = read_small(config, 2)
        if raw is None:
            return ("gone",) if not os.path.isdir(directory) else ("no config",), not os.path.isdir(directory)
        if raw[:2] == b"\xff\xff":
            return ("vendor 0xffff",), True
        return ("present",), False

    def observe(self):
        """{key: (scope, value, bad)} now (paths joined once, at discovery: the probe runs every second)."""
        seen = {}
        for address in self.gpus:
            value, bad = self._pci(address)
            seen["pci " + address] = ("gpu", value, bad)
        for address in self.hcas:
            value, bad = self._pci(address)
            seen["pci " + address] = ("rdma", value, bad)
        for key, scope, state_path, rate_path in self.port_paths:
            # state and rate: phys_state changes with state (the periodic cycle reads it)
            state = _text(read_small(state_path, 64))
            rate = _text(read_small(rate_path, 64))
            # a port's rate has no "max" in sysfs: the rate first seen is its own (a retrain to
            # fewer lanes or a lower speed reads below it)
            base = self.base_rate.setdefault(key, rate)
            seen[key] = (scope, (state, rate), state is None or not state.endswith("ACTIVE") or rate != base)
        if self.nvml is not None and self.handles is not None:
            if self.nvml_error:
                seen["nvml"] = ("gpu", self.nvml_error, True)
            for index, handle in self.handles:
                value, bad = self._gpu_query(handle)
                seen["nvml gpu%d" % index] = ("gpu", value, bad)
        if self.fabric:
            running = unit_running(self.root, self.unit)
            seen["unit " + self.unit] = ("fabricmanager", running, not running)
        return seen

    def poll(self):
        """[(scope, why)] of this probe."""
        cpu = time.process_time()
        self.runs += 1
        now = self.observe()
        signals = []
        if self.last is not None:
            for key, (scope, value, bad) in now.items():
                before = self.last.get(key)
                if before is None or before[1] != value:
                    signals.append((scope, "probe: %s %s -> %s" % (key, before[1] if before else "new", value)))
                    self.bad_left[key] = self.repeat if bad else 0
                elif bad and self.bad_left.get(key, 0) > 0:
                    self.bad_left[key] -= 1
                    signals.append((scope, "probe: %s still %s" % (key, value)))
            for key in set(self.last) - set(now):
                signals.append((self.last[key][0], "probe: %s gone" % key))
        self.last = now
        self.cpu += time.process_time() - cpu
        return signals


# -- the sources together ---------------------------------------------------------------------------
class SignalSources(object):
    """The signals the configuration asks for (``signals``), each optional: one that cannot be
    opened is reported in ``status`` (health.json ``agent.events``), the others go on.
    ``fds()`` for select(), ``due()`` the monotonic time of the next probe, ``poll()`` the
    signals readable or due now. ``sockets``: stand-ins for tests and the bench
    ({"netlink": sock, "uevent": sock})."""

    min_gap = 1.0  # seconds between two targeted cycles (the events' min_gap, set by agent_daemon)

    def __init__(self, settings, root, repeat=2, binding_loader=None, sockets=None, clock=time.monotonic,
                 opener=open_netlink):
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
        self.probe = None
        if self.interval:
            binding = None
            if binding_loader is not None:
                try:
                    binding = binding_loader()
                except Exception as exc:
                    self.status["probe_nvml"] = "unavailable: %s" % exc
            self.probe = FastProbe(root, settings.get("fabricmanager_unit"), binding, repeat, clock)
            self.probe.hold_nvml()
            self.probe.poll()  # the baseline
            self.status["probe"] = "every %g s: %d GPU(s), %d HCA(s), %d RDMA port(s)%s%s" % (
                self.interval, len(self.probe.gpus), len(self.probe.hcas), len(self.probe.ports),
                ", NVML" if binding is not None else "", ", %s" % self.probe.unit if self.probe.fabric else "")
        else:
            self.status["probe"] = "off (signals.fast_probe_interval 0)"
        self.next = self.clock() + self.interval if self.interval else None

    def fds(self):
        return [watcher.fileno() for watcher in self.watchers]

    def due(self):
        return self.next if self.next is not None else float("inf")

    def pause(self):
        if self.probe is not None:
            self.probe.release_nvml()

    def resume(self):
        if self.probe is not None:
            self.probe.hold_nvml()

    def _announcements(self):
        signals = []
        for watcher in list(self.watchers):
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
            return [("rdma:" + device, "netlink: %s %s %s" % (event["type"], event["ifname"], state))
                    for device in devices]
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
            self.probe.poll()
        return scopes

    def poll(self):
        """[(scope, why)]: announcements readable now, and the probe when it is due."""
        signals = self._announcements()
        if self.probe is not None and self.clock() >= self.next:
            try:
                signals.extend(self.probe.poll())
            except Exception as exc:  # never the agent's end: said in health.json, the periodic cycle goes on
                self.status["probe"] = "probe failed: %r; %s" % (exc, self.status["probe"].split("; ")[-1])
            now = self.clock()
            self.next += self.interval
            if self.next <= now:  # a long cycle: the next probe one interval from now, no burst
                self.next = now + self.interval
        return signals

    def counters(self):
        result = dict(self.status)
        for watcher in self.watchers:
            result["%s_messages" % watcher.kind] = watcher.messages
            result["%s_dropped" % watcher.kind] = watcher.dropped
        result["signals_overruns"] = self.overruns
        if self.probe is not None:
            result["probe_runs"] = self.probe.runs
            result["probe_us"] = round(self.probe.cpu * 1e6 / max(1, self.probe.runs), 1)
        return result

    def close(self):
        self.pause()
        for watcher in self.watchers:
            watcher.close()
        self.watchers = []
