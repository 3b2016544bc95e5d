# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA family of checks (docs/contracts.md, "rdma family"): rdma_validate and node_validate.

The family interface of module_utils/core/validation.py: ``RDMA_OPTIONS`` (argument spec without
``root`` / ``fail_on``), ``validate_options(options, prefix)`` (list of errors naming the option),
``run(ctx, options)`` (a FamilyResult), all bundled as ``FAMILY``. Checks are tables of functions
over a ``Scope`` (as in gpu_checks). ``validate_rdma(facts, reader, options)`` returns the
CheckResults for gathered facts; missing option keys get their defaults.

Node-level checks (modules, driver, devices, peermem, ofed_version) are always reported;
per-port checks that depend on an option (rate, counters, RoCE GID) are reported only when
that option asks for them. A node without any RDMA device and without Mellanox PCI functions
gets readable ``skip`` results, unless ``expected_devices`` says devices should be there.
"""

from __future__ import absolute_import, division, print_function


import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import (
    driver_at_least,
    version_tuple,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    Family,
    FamilyResult,
    Scope,
    is_finite_number,
)

DEFAULT_REQUIRED_MODULES = ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib"]
LINK_LAYERS = ("any", "InfiniBand", "Ethernet")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
MLX5_VERSION = "sys/module/mlx5_core/version"
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

# The options of the RDMA family (rdma_validate's options other than root / fail_on;
# node_validate's ``rdma`` sub-options).
RDMA_OPTIONS = {
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


def validate_options(options, prefix=""):
    """Errors (list of strings) naming the bad option as ``option <prefix><name>:``, beyond
    what the argument spec's types catch."""
    errors = []
    opts = options  # checked as given: the planner filled the defaults (validation.Family.defaults)
    if opts.get("link_layer") is not None and opts["link_layer"] not in LINK_LAYERS:
        errors.append("option %slink_layer: %r is not one of %s"
                      % (prefix, opts["link_layer"], ", ".join(LINK_LAYERS)))
    for name in ("expected_devices", "max_symbol_errors", "max_link_downed"):
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            errors.append("option %s%s: must be a non-negative integer, got %r" % (prefix, name, value))
    rate = opts.get("min_rate_gbps")
    if rate is not None and not (is_finite_number(rate) and rate >= 0):
        errors.append("option %smin_rate_gbps: must be a non-negative number, got %r" % (prefix, rate))
    if opts.get("min_ofed_version") is not None:
        try:
            version_tuple(opts["min_ofed_version"])
        except ValueError:
            errors.append("option %smin_ofed_version: %r is not a version such as 5.8-1.0.1 or 24.10"
                          % (prefix, opts["min_ofed_version"]))
    for name in ("devices", "required_modules"):
        value = opts.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            errors.append("option %s%s: must be a list of names" % (prefix, name))
            continue
        for item in value:
            if not isinstance(item, str) or not re.match(r"^[\w.:\-]+$", item):
                errors.append("option %s%s: invalid entry %r" % (prefix, name, item))
    return errors


def _normalise_pci(address):
    address = address.strip().lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", address):
        address = "0000:" + address
    return address


def _port_target(device, port):
    return "%s/%s" % (device["name"], port.get("port"))


# -- helpers over a Scope (facts, reader, options, checks) ---------------------------------------
def _loaded(scope, module):
    return scope.reader.isdir("sys/module/%s" % module)


def _no_rdma_hardware(scope):
    return (not scope.facts.get("devices") and not scope.facts.get("pci_functions")
            and scope.options["expected_devices"] is None)


def _no_rdma_message(scope):
    return "no RDMA devices; mlx5_core %s" % ("loaded" if scope.facts.get("loaded") else "not loaded")


def selected_devices(facts, options):
    """(devices matching ``devices`` and ``link_layer``, requested names that were not found)."""
    wanted = options["devices"]
    layer = options["link_layer"]
    devices = list(facts.get("devices") or [])
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


def _ports(device, options):
    layer = options["link_layer"]
    return [p for p in device.get("ports") or [] if layer == "any" or p.get("link_layer") == layer]


# -- node checks (scope.target is "node") ----------------------------------------------------------
def _check_modules(scope):
    r = scope.checks
    required = list(scope.options["required_modules"] or [])
    if _no_rdma_hardware(scope):
        r.skip("rdma.modules", "node", _no_rdma_message(scope), expected=required)
        return
    missing = [m for m in required if not _loaded(scope, m)]
    if missing:
        r.fail("rdma.modules", "node", "kernel modules not loaded: %s" % ", ".join(missing),
               observed=missing, expected=required)
    else:
        r.passed("rdma.modules", "node", "all %d required modules loaded" % len(required),
                 observed=[], expected=required)


def _check_driver(scope):
    r, facts = scope.checks, scope.facts
    pci = facts.get("pci_functions") or 0
    if facts.get("loaded"):
        version = facts.get("version")
        r.passed("rdma.driver", "node", "mlx5_core loaded (%s%s), %d Mellanox PCI functions"
                 % (facts.get("driver_source"), " " + version if version else "", pci),
                 observed={"loaded": True, "pci_functions": pci})
    elif pci:
        r.fail("rdma.driver", "node",
               "%d Mellanox (0x15b3) PCI functions present but mlx5_core not loaded" % pci,
               observed={"loaded": False, "pci_functions": pci}, expected={"loaded": True})
    else:
        r.skip("rdma.driver", "node", "no Mellanox (0x15b3) PCI functions; mlx5_core not loaded",
               observed={"loaded": False, "pci_functions": 0})


def _check_devices(scope):
    r, devices, missing = scope.checks, scope.devices, scope.missing
    names = [d.get("name") for d in devices]
    expected = scope.options["expected_devices"]
    layer = scope.options["link_layer"]
    what = "RDMA devices" if layer == "any" else "%s RDMA devices" % layer
    if missing:
        r.fail("rdma.devices", "node", "requested devices not found: %s" % ", ".join(missing),
               observed=names, expected=list(scope.options["devices"]))
    elif expected is not None and len(devices) < expected:
        r.fail("rdma.devices", "node", "%d %s, expected %d" % (len(devices), what, expected),
               observed=len(devices), expected=expected)
    elif expected is not None:
        r.passed("rdma.devices", "node", "%d %s: %s" % (len(devices), what, ", ".join(names)),
                 observed=len(devices), expected=expected)
    elif not scope.facts.get("devices"):
        r.skip("rdma.devices", "node", _no_rdma_message(scope), observed=0)
    elif not devices:
        r.skip("rdma.devices", "node", "no %s to check" % what, observed=0)
    else:
        r.passed("rdma.devices", "node", "%d %s: %s" % (len(devices), what, ", ".join(names)),
                 observed=len(devices))


def _check_peermem(scope):
    r = scope.checks
    loaded = [m for m in PEERMEM_MODULES if _loaded(scope, m)]
    registered = [m for m in loaded if scope.reader.exists("sys/module/ib_core/holders/%s" % m)]
    required = scope.options["require_peermem"]
    observed = {"loaded": loaded, "registered": registered}
    if loaded and not registered:
        r.warn("rdma.peermem", "node", "%s loaded but not registered with ib_core"
               % ", ".join(loaded), observed=observed)
    elif loaded:
        r.passed("rdma.peermem", "node", "%s loaded and registered with ib_core"
                 % ", ".join(registered), observed=observed)
    elif required and not _no_rdma_hardware(scope):
        r.fail("rdma.peermem", "node", "GPUDirect RDMA required but neither nvidia_peermem "
               "nor nv_peer_mem is loaded", observed=observed, expected="nvidia_peermem")
    elif required:
        r.skip("rdma.peermem", "node", _no_rdma_message(scope), observed=observed)
    else:
        r.skip("rdma.peermem", "node", "peermem not required and not loaded", observed=observed)


def _check_ofed_version(scope):
    r, facts = scope.checks, scope.facts
    minimum = scope.options["min_ofed_version"]
    source = facts.get("driver_source")
    version = facts.get("version")
    observed = {"driver_source": source, "version": version}
    if minimum is None:
        r.skip("rdma.ofed_version", "node", "no min_ofed_version set (driver %s%s)"
               % (source, " " + version if version else ""), observed=observed)
    elif _no_rdma_hardware(scope):
        r.skip("rdma.ofed_version", "node", _no_rdma_message(scope), observed=observed,
               expected=minimum)
    elif facts.get("loaded") and scope.reader is not None and scope.reader.problem(MLX5_VERSION):
        problem = scope.reader.problem(MLX5_VERSION)
        check = r.fail("rdma.ofed_version", "node", "could not be measured: %s; OFED >= %s required"
                       % (problem, minimum), observed=observed, expected=minimum)
        check["error"] = problem
    elif source == "absent" or not facts.get("loaded"):
        r.fail("rdma.ofed_version", "node", "mlx5_core not loaded; OFED >= %s required" % minimum,
               observed=observed, expected=minimum)
    elif source == "inbox":
        r.fail("rdma.ofed_version", "node", "inbox mlx5_core%s loaded; OFED >= %s required"
               % (" " + version if version else "", minimum), observed=observed, expected=minimum)
    else:
        try:
            ok = driver_at_least(version, minimum)
        except ValueError:  # min_ofed_version was checked with the options: the loaded version is not one
            ok = None
        if ok is None:
            r.fail("rdma.ofed_version", "node", "loaded mlx5_core version %r is not a version; "
                   "OFED >= %s required" % (version, minimum), observed=observed, expected=minimum)
        elif not ok:
            r.fail("rdma.ofed_version", "node", "loaded mlx5_core %s is older than %s"
                   % (version, minimum), observed=observed, expected=minimum)
        else:
            r.passed("rdma.ofed_version", "node", "loaded mlx5_core %s >= %s" % (version, minimum),
                     observed=observed, expected=minimum)


# -- device checks (scope.target is the device name, scope.device its facts) -----------------------
def _check_uverbs(scope):
    r, name = scope.checks, scope.target
    uverbs = scope.device.get("uverbs")
    if not uverbs:
        r.fail("rdma.uverbs", name, "no uverbs device for %s (ib_uverbs not loaded?)" % name,
               observed=None)
    elif not scope.reader.exists("dev/infiniband/%s" % uverbs):
        r.fail("rdma.uverbs", name, "/dev/infiniband/%s missing" % uverbs, observed=uverbs)
    else:
        r.passed("rdma.uverbs", name, "/dev/infiniband/%s present" % uverbs, observed=uverbs)


# -- port checks (scope.target is device/port, scope.device and scope.port their facts) -----------
def _port_file(scope, name):
    return "sys/class/infiniband/%s/ports/%s/%s" % (scope.device.get("name"), scope.port.get("port"), name)


def _unreadable(scope, name):
    """``/<port file>`` and why it gave no value (read failed, vanished, empty, not parsable)."""
    rel = _port_file(scope, name)
    reader = scope.reader
    problem = reader.problem(rel) if reader is not None else None
    if problem:
        return problem
    if reader is not None and reader.read(rel) is not None:
        return "/%s: not parsable (%r)" % (rel, reader.read(rel)[:40])
    return "/%s: missing" % rel


def _fail_unreadable(scope, check_id, name, what, consequence, **kwargs):
    problem = _unreadable(scope, name)
    reason = problem.split(": ", 1)[1]
    check = scope.checks.fail(check_id, scope.target, "%s unreadable: reading %s is impossible (%s), so %s"
                              % (what, _port_file(scope, name), reason, consequence), **kwargs)
    check["error"] = problem
    return check


def _check_port_state(scope):
    r, target = scope.checks, scope.target
    state = scope.port.get("state")
    if state is None:
        # fail closed: a port that exists but whose state cannot be read is not admitted
        _fail_unreadable(scope, "rdma.port.state", "state", "port state",
                         "the port cannot be shown to be ACTIVE", observed=None, expected=STATE_ACTIVE)
    elif state == STATE_ACTIVE:
        r.passed("rdma.port.state", target, "ACTIVE", observed=state, expected=STATE_ACTIVE)
    elif state == STATE_INIT:
        r.warn("rdma.port.state", target, "INIT: link up but no subnet manager has "
               "configured the port yet", observed=state, expected=STATE_ACTIVE)
    else:
        r.fail("rdma.port.state", target, "port %s" % state, observed=state, expected=STATE_ACTIVE)


def _check_phys_state(scope):
    r, target = scope.checks, scope.target
    phys = scope.port.get("phys_state")
    if phys is None:
        _fail_unreadable(scope, "rdma.port.phys_state", "phys_state", "physical state",
                         "the link cannot be shown to be up", observed=None, expected=PHYS_LINKUP)
    elif phys == PHYS_LINKUP:
        r.passed("rdma.port.phys_state", target, "LinkUp", observed=phys, expected=PHYS_LINKUP)
    else:
        hint = PHYS_HINTS.get(phys)
        r.fail("rdma.port.phys_state", target, "physical state %s%s"
               % (phys, " (%s)" % hint if hint else ""), observed=phys, expected=PHYS_LINKUP)


def _check_rate(scope):
    r, target, port = scope.checks, scope.target, scope.port
    minimum = scope.options["min_rate_gbps"]
    if minimum is None:
        return
    rate = port.get("rate_gbps")
    phys = port.get("phys_state")
    if phys is not None and phys != PHYS_LINKUP:
        r.skip("rdma.port.rate", target, "link not up; rate not meaningful",
               observed=rate, expected=minimum)
    elif rate is None:
        _fail_unreadable(scope, "rdma.port.rate", "rate", "rate",
                         "the rate cannot be shown to be >= %g Gb/s" % minimum, observed=None, expected=minimum)
    elif not is_finite_number(rate):
        r.fail("rdma.port.rate", target, "rate %r is not a number: cannot be shown to be >= %g Gb/s"
               % (rate, minimum), observed=rate, expected=minimum)
    elif rate < minimum:
        r.fail("rdma.port.rate", target, "rate %g Gb/s below %g Gb/s" % (rate, minimum),
               observed=rate, expected=minimum)
    else:
        r.passed("rdma.port.rate", target, "rate %g Gb/s >= %g Gb/s" % (rate, minimum),
                 observed=rate, expected=minimum)


def _check_roce_gid(scope):
    if scope.port.get("link_layer") != "Ethernet" or not scope.options["require_roce_v2_gid"]:
        return
    r, target = scope.checks, scope.target
    index = scope.port.get("roce_v2_gid_index")
    if index is None:
        r.fail("rdma.roce_gid", target, "Ethernet port without a RoCE v2 IPv4 GID "
               "(no IPv4 address on the netdev?)", observed=None)
    else:
        r.passed("rdma.roce_gid", target, "RoCE v2 IPv4 GID at index %d" % index, observed=index)


def _check_counters(scope):
    if not scope.options["check_counters"]:
        return
    r, target, reader = scope.checks, scope.target, scope.reader
    base = "sys/class/infiniband/%s/ports/%s/counters" % (scope.device.get("name"), scope.port.get("port"))
    observed = {
        "symbol_error": reader.read_int(base + "/symbol_error"),
        "link_downed": reader.read_int(base + "/link_downed"),
    }
    maxima = {"symbol_error": scope.options["max_symbol_errors"],
              "link_downed": scope.options["max_link_downed"]}
    problems = [p for p in (reader.problem(base + "/" + name) for name in sorted(observed)) if p]
    if problems:
        # present but unreadable (EIO, vanished, empty): not the device's N/A (no PMA)
        check = r.fail("rdma.counters", target, "could not be measured: %s" % ", ".join(problems),
                       observed=observed, expected=maxima)
        check["error"] = ", ".join(problems)
        return
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


# Report order: node checks, then per device its uverbs and per port its checks, then the
# node checks that look at the whole stack.
NODE_CHECKS_FIRST = (("rdma.modules", _check_modules), ("rdma.driver", _check_driver),
                     ("rdma.devices", _check_devices))
DEVICE_CHECKS = (("rdma.uverbs", _check_uverbs),)
PORT_CHECKS = (("rdma.port.state", _check_port_state), ("rdma.port.phys_state", _check_phys_state),
               ("rdma.port.rate", _check_rate), ("rdma.roce_gid", _check_roce_gid),
               ("rdma.counters", _check_counters))
NODE_CHECKS_LAST = (("rdma.peermem", _check_peermem), ("rdma.ofed_version", _check_ofed_version))


def validate_rdma(facts, reader, options=None):
    """CheckResults of the rdma family for mlx5 ``facts`` (gather_mlx5_facts) read through ``reader``,
    for partial ``options`` (tests, fuzzing): the family's defaults filled, then ``rdma_checks``."""
    return rdma_checks(facts, reader, FAMILY.defaults(options))


def rdma_checks(facts, reader, opts):
    """CheckResults of the rdma family for complete options ``opts`` (a module run's plan)."""
    facts = facts or {}
    devices, missing = selected_devices(facts, opts)
    node = Scope(CheckResults(), opts, "node", facts=facts, reader=reader, devices=devices, missing=missing)
    for _check_id, check in NODE_CHECKS_FIRST:
        check(node)
    for device in devices:
        on_device = node.but(target=device.get("name"), device=device)
        for _check_id, check in DEVICE_CHECKS:
            check(on_device)
        for port in _ports(device, opts):
            on_port = on_device.but(target=_port_target(device, port), port=port)
            for _check_id, check in PORT_CHECKS:
                check(on_port)
    for _check_id, check in NODE_CHECKS_LAST:
        check(node)
    return node.checks


def run(ctx, options):
    """The RDMA family over a Context: mlx5 facts (ofed_info only where sysfs has no answer),
    checks. Returns a FamilyResult with ``ansible_facts.mlx5``."""
    facts = gather_mlx5_facts(ctx.reader, ctx.runner)
    return FamilyResult(rdma_checks(facts, ctx.reader, options), facts={"mlx5": facts})


FAMILY = Family("rdma", RDMA_OPTIONS, validate_options, run)
