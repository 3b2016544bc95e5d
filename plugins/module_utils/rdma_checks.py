# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RDMA readiness checks (SPEC 2.5) over mlx5 facts and a SysfsReader.

``validate_rdma(facts, reader, options)`` returns a CheckResults. Options are the
``RDMA_VALIDATE_ARGSPEC`` options (without ``root`` / ``fail_on``, which belong to the calling
module), so node_validate can take them as a nested dict. Missing keys get their defaults.

Node-level checks (modules, driver, devices, peermem, ofed_version) are always reported;
per-port checks that depend on an option (rate, counters, RoCE GID) are reported only when
that option asks for them. A node without any RDMA device and without Mellanox PCI functions
gets readable ``skip`` results, unless ``expected_devices`` says devices should be there.
"""

from __future__ import absolute_import, division, print_function


import copy
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import (
    FAIL_ON_CHOICES,
    CheckResults,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.ofed import (
    driver_at_least,
    version_tuple,
)

DEFAULT_REQUIRED_MODULES = ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib"]
LINK_LAYERS = ("any", "InfiniBand", "Ethernet")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
STATE_ACTIVE = "ACTIVE"
STATE_INIT = "INIT"
PHYS_LINKUP = "LinkUp"
PHYS_HINTS = {
    "Polling": "cable or peer lost",
    "Disabled": "port disabled",
    "Sleep": "port asleep",
    "PortConfigurationTraining": "link training",
    "LinkErrorRecovery": "link error recovery",
}

# Options of rdma_validate other than root / fail_on: reusable as nested options.
RDMA_VALIDATE_ARGSPEC = {
    "devices": {"type": "list", "elements": "str"},
    "link_layer": {"type": "str", "default": "any", "choices": list(LINK_LAYERS)},
    "expected_devices": {"type": "int"},
    "min_rate_gbps": {"type": "float"},
    "required_modules": {"type": "list", "elements": "str", "default": list(DEFAULT_REQUIRED_MODULES)},
    "require_peermem": {"type": "bool", "default": False},
    "min_ofed_version": {"type": "str"},
    "require_roce_v2_gid": {"type": "bool", "default": True},
    "check_counters": {"type": "bool", "default": False},
    "max_symbol_errors": {"type": "int", "default": 10},
    "max_link_downed": {"type": "int", "default": 10},
}

COMMON_ARGSPEC = {
    "root": {"type": "path", "default": "/"},
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
}


def rdma_validate_module_argspec():
    """Full argument_spec of the rdma_validate module (a fresh copy)."""
    spec = copy.deepcopy(COMMON_ARGSPEC)
    spec.update(copy.deepcopy(RDMA_VALIDATE_ARGSPEC))
    return spec


def rdma_options(options=None):
    """``options`` completed with the RDMA_VALIDATE_ARGSPEC defaults (None counts as unset)."""
    result = {}
    options = options or {}
    for name, spec in RDMA_VALIDATE_ARGSPEC.items():
        value = options.get(name)
        if value is None:
            value = copy.deepcopy(spec.get("default"))
        result[name] = value
    return result


def check_rdma_options(options):
    """Errors (each naming its option) in rdma_validate options beyond what types catch."""
    errors = []
    opts = rdma_options(options)
    if opts["link_layer"] not in LINK_LAYERS:
        errors.append("option link_layer: %r is not one of %s" % (opts["link_layer"], ", ".join(LINK_LAYERS)))
    for name in ("expected_devices", "max_symbol_errors", "max_link_downed"):
        value = opts[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            errors.append("option %s: must be a non-negative integer, got %r" % (name, value))
    rate = opts["min_rate_gbps"]
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
        errors.append("option min_rate_gbps: must be a non-negative number, got %r" % (rate,))
    if opts["min_ofed_version"] is not None and version_tuple(opts["min_ofed_version"]) is None:
        errors.append("option min_ofed_version: %r is not a version such as 5.8-1.0.1 or 24.10"
                      % (opts["min_ofed_version"],))
    for name in ("devices", "required_modules"):
        value = opts[name]
        if value is None:
            continue
        if not isinstance(value, list):
            errors.append("option %s: must be a list of names" % name)
            continue
        for item in value:
            if not isinstance(item, str) or not re.match(r"^[\w.:\-]+$", item):
                errors.append("option %s: invalid entry %r" % (name, item))
    return errors


def _normalise_pci(address):
    address = address.strip().lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", address):
        address = "0000:" + address
    return address


def _port_target(device, port):
    return "%s/%s" % (device["name"], port.get("port"))


class RdmaValidator(object):
    def __init__(self, facts, reader, options):
        self.facts = facts or {}
        self.reader = reader
        self.opts = rdma_options(options)
        self.results = CheckResults()

    # -- helpers -----------------------------------------------------------------------------
    def _loaded(self, module):
        return self.reader.isdir("sys/module/%s" % module)

    def _no_rdma_hardware(self):
        return (not self.facts.get("devices") and not self.facts.get("pci_functions")
                and self.opts["expected_devices"] is None)

    def _no_rdma_message(self):
        return "no RDMA devices; mlx5_core %s" % ("loaded" if self.facts.get("loaded") else "not loaded")

    def _selected_devices(self):
        """(devices matching ``devices`` and ``link_layer``, requested names that were not found)."""
        wanted = self.opts["devices"]
        layer = self.opts["link_layer"]
        devices = list(self.facts.get("devices") or [])
        missing = []
        if wanted:
            keys = dict((w, _normalise_pci(w)) for w in wanted)
            chosen = []
            for want, pci in keys.items():
                hits = [d for d in devices if d.get("name") == want
                        or (d.get("pci_address") or "").lower() == pci]
                if not hits:
                    missing.append(want)
                for hit in hits:
                    if hit not in chosen:
                        chosen.append(hit)
            devices = [d for d in devices if d in chosen]
        if layer != "any":
            devices = [d for d in devices if any(p.get("link_layer") == layer for p in d.get("ports") or [])]
        return devices, missing

    def _ports(self, device):
        layer = self.opts["link_layer"]
        return [p for p in device.get("ports") or [] if layer == "any" or p.get("link_layer") == layer]

    # -- node checks -------------------------------------------------------------------------
    def check_modules(self):
        r = self.results
        required = list(self.opts["required_modules"] or [])
        if self._no_rdma_hardware():
            r.skip("rdma.modules", "node", self._no_rdma_message(), expected=required)
            return
        missing = [m for m in required if not self._loaded(m)]
        if missing:
            r.fail("rdma.modules", "node", "kernel modules not loaded: %s" % ", ".join(missing),
                   observed=missing, expected=required)
        else:
            r.passed("rdma.modules", "node", "all %d required modules loaded" % len(required),
                     observed=[], expected=required)

    def check_driver(self):
        r = self.results
        pci = self.facts.get("pci_functions") or 0
        if self.facts.get("loaded"):
            version = self.facts.get("version")
            r.passed("rdma.driver", "node", "mlx5_core loaded (%s%s), %d Mellanox PCI functions"
                     % (self.facts.get("driver_source"), " " + version if version else "", pci),
                     observed={"loaded": True, "pci_functions": pci})
        elif pci:
            r.fail("rdma.driver", "node",
                   "%d Mellanox (0x15b3) PCI functions present but mlx5_core not loaded" % pci,
                   observed={"loaded": False, "pci_functions": pci}, expected={"loaded": True})
        else:
            r.skip("rdma.driver", "node", "no Mellanox (0x15b3) PCI functions; mlx5_core not loaded",
                   observed={"loaded": False, "pci_functions": 0})

    def check_devices(self, devices, missing):
        r = self.results
        names = [d.get("name") for d in devices]
        expected = self.opts["expected_devices"]
        layer = self.opts["link_layer"]
        what = "RDMA devices" if layer == "any" else "%s RDMA devices" % layer
        if missing:
            r.fail("rdma.devices", "node", "requested devices not found: %s" % ", ".join(missing),
                   observed=names, expected=list(self.opts["devices"]))
        elif expected is not None and len(devices) < expected:
            r.fail("rdma.devices", "node", "%d %s, expected %d" % (len(devices), what, expected),
                   observed=len(devices), expected=expected)
        elif expected is not None:
            r.passed("rdma.devices", "node", "%d %s: %s" % (len(devices), what, ", ".join(names)),
                     observed=len(devices), expected=expected)
        elif not self.facts.get("devices"):
            r.skip("rdma.devices", "node", self._no_rdma_message(), observed=0)
        elif not devices:
            r.skip("rdma.devices", "node", "no %s to check" % what, observed=0)
        else:
            r.passed("rdma.devices", "node", "%d %s: %s" % (len(devices), what, ", ".join(names)),
                     observed=len(devices))

    def check_peermem(self):
        r = self.results
        loaded = [m for m in PEERMEM_MODULES if self._loaded(m)]
        registered = [m for m in loaded if self.reader.exists("sys/module/ib_core/holders/%s" % m)]
        required = self.opts["require_peermem"]
        observed = {"loaded": loaded, "registered": registered}
        if loaded and not registered:
            r.warn("rdma.peermem", "node", "%s loaded but not registered with ib_core"
                   % ", ".join(loaded), observed=observed)
        elif loaded:
            r.passed("rdma.peermem", "node", "%s loaded and registered with ib_core"
                     % ", ".join(registered), observed=observed)
        elif required and not self._no_rdma_hardware():
            r.fail("rdma.peermem", "node", "GPUDirect RDMA required but neither nvidia_peermem "
                   "nor nv_peer_mem is loaded", observed=observed, expected="nvidia_peermem")
        elif required:
            r.skip("rdma.peermem", "node", self._no_rdma_message(), observed=observed)
        else:
            r.skip("rdma.peermem", "node", "peermem not required and not loaded", observed=observed)

    def check_ofed_version(self):
        r = self.results
        minimum = self.opts["min_ofed_version"]
        source = self.facts.get("driver_source")
        version = self.facts.get("version")
        observed = {"driver_source": source, "version": version}
        if minimum is None:
            r.skip("rdma.ofed_version", "node", "no min_ofed_version set (driver %s%s)"
                   % (source, " " + version if version else ""), observed=observed)
        elif self._no_rdma_hardware():
            r.skip("rdma.ofed_version", "node", self._no_rdma_message(), observed=observed,
                   expected=minimum)
        elif source == "absent" or not self.facts.get("loaded"):
            r.fail("rdma.ofed_version", "node", "mlx5_core not loaded; OFED >= %s required" % minimum,
                   observed=observed, expected=minimum)
        elif source == "inbox":
            r.fail("rdma.ofed_version", "node", "inbox mlx5_core%s loaded; OFED >= %s required"
                   % (" " + version if version else "", minimum), observed=observed, expected=minimum)
        else:
            ok = driver_at_least(version, minimum)
            if ok is None:
                r.fail("rdma.ofed_version", "node", "loaded mlx5_core version %r is not a version; "
                       "OFED >= %s required" % (version, minimum), observed=observed, expected=minimum)
            elif not ok:
                r.fail("rdma.ofed_version", "node", "loaded mlx5_core %s is older than %s"
                       % (version, minimum), observed=observed, expected=minimum)
            else:
                r.passed("rdma.ofed_version", "node", "loaded mlx5_core %s >= %s" % (version, minimum),
                         observed=observed, expected=minimum)

    # -- device / port checks ----------------------------------------------------------------
    def check_uverbs(self, device):
        r = self.results
        uverbs = device.get("uverbs")
        name = device.get("name")
        if not uverbs:
            r.fail("rdma.uverbs", name, "no uverbs device for %s (ib_uverbs not loaded?)" % name,
                   observed=None)
        elif not self.reader.exists("dev/infiniband/%s" % uverbs):
            r.fail("rdma.uverbs", name, "/dev/infiniband/%s missing" % uverbs, observed=uverbs)
        else:
            r.passed("rdma.uverbs", name, "/dev/infiniband/%s present" % uverbs, observed=uverbs)

    def check_port(self, device, port):
        r = self.results
        target = _port_target(device, port)
        state = port.get("state")
        phys = port.get("phys_state")
        if state is None:
            r.skip("rdma.port.state", target, "port state unreadable", observed=None)
        elif state == STATE_ACTIVE:
            r.passed("rdma.port.state", target, "ACTIVE", observed=state, expected=STATE_ACTIVE)
        elif state == STATE_INIT:
            r.warn("rdma.port.state", target, "INIT: link up but no subnet manager has "
                   "configured the port yet", observed=state, expected=STATE_ACTIVE)
        else:
            r.fail("rdma.port.state", target, "port %s" % state, observed=state, expected=STATE_ACTIVE)

        if phys is None:
            r.skip("rdma.port.phys_state", target, "physical state unreadable", observed=None)
        elif phys == PHYS_LINKUP:
            r.passed("rdma.port.phys_state", target, "LinkUp", observed=phys, expected=PHYS_LINKUP)
        else:
            hint = PHYS_HINTS.get(phys)
            r.fail("rdma.port.phys_state", target, "physical state %s%s"
                   % (phys, " (%s)" % hint if hint else ""), observed=phys, expected=PHYS_LINKUP)

        self.check_rate(target, port)
        if port.get("link_layer") == "Ethernet" and self.opts["require_roce_v2_gid"]:
            self.check_roce_gid(target, port)
        if self.opts["check_counters"]:
            self.check_counters(device, port, target)

    def check_rate(self, target, port):
        r = self.results
        minimum = self.opts["min_rate_gbps"]
        if minimum is None:
            return
        rate = port.get("rate_gbps")
        phys = port.get("phys_state")
        if phys is not None and phys != PHYS_LINKUP:
            r.skip("rdma.port.rate", target, "link not up; rate not meaningful",
                   observed=rate, expected=minimum)
        elif rate is None:
            r.skip("rdma.port.rate", target, "rate unreadable", observed=None, expected=minimum)
        elif rate < minimum:
            r.fail("rdma.port.rate", target, "rate %g Gb/s below %g Gb/s" % (rate, minimum),
                   observed=rate, expected=minimum)
        else:
            r.passed("rdma.port.rate", target, "rate %g Gb/s >= %g Gb/s" % (rate, minimum),
                     observed=rate, expected=minimum)

    def check_roce_gid(self, target, port):
        r = self.results
        index = port.get("roce_v2_gid_index")
        if index is None:
            r.fail("rdma.roce_gid", target, "Ethernet port without a RoCE v2 IPv4 GID "
                   "(no IPv4 address on the netdev?)", observed=None)
        else:
            r.passed("rdma.roce_gid", target, "RoCE v2 IPv4 GID at index %d" % index, observed=index)

    def check_counters(self, device, port, target):
        r = self.results
        base = "sys/class/infiniband/%s/ports/%s/counters" % (device.get("name"), port.get("port"))
        observed = {
            "symbol_error": self.reader.read_int(base + "/symbol_error"),
            "link_downed": self.reader.read_int(base + "/link_downed"),
        }
        maxima = {"symbol_error": self.opts["max_symbol_errors"], "link_downed": self.opts["max_link_downed"]}
        if observed["symbol_error"] is None and observed["link_downed"] is None:
            r.skip("rdma.counters", target, "error counters not readable", observed=observed,
                   expected=maxima)
            return
        over = ["%s %d > %d" % (name, observed[name], maxima[name]) for name in sorted(observed)
                if observed[name] is not None and maxima[name] is not None and observed[name] > maxima[name]]
        if over:
            r.warn("rdma.counters", target, "; ".join(over), observed=observed, expected=maxima)
        else:
            r.passed("rdma.counters", target, "error counters within maxima", observed=observed,
                     expected=maxima)

    # -- all ---------------------------------------------------------------------------------
    def run(self):
        devices, missing = self._selected_devices()
        self.check_modules()
        self.check_driver()
        self.check_devices(devices, missing)
        for device in devices:
            self.check_uverbs(device)
            for port in self._ports(device):
                self.check_port(device, port)
        self.check_peermem()
        self.check_ofed_version()
        return self.results


def validate_rdma(facts, reader, options=None):
    """CheckResults of SPEC 2.5 for mlx5 ``facts`` (gather_mlx5_facts) read through ``reader``."""
    return RdmaValidator(facts, reader, options).run()
