# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tuning family of node_validate: drift of OS tuning from what was configured (docs/contracts.md,
"Tuning family").

Read-only, every check opt-in: an option left unset adds no check (so a node_validate run that
configures none returns the gpu and rdma checks only; readiness shows ``tuning: skip (no checks)``). A reading that is impossible
(file missing, unreadable, not a number) fails the check: drift cannot be ruled out.

- ``tuning.hugepages`` (targets ``2048kB``, ``1048576kB``): ``/sys/kernel/mm/hugepages/hugepages-<size>/nr_hugepages``
  against ``hugepages_2m`` / ``hugepages_1g``; fewer pages than configured fail, more warn.
- ``tuning.tuned_profile`` (target ``node``): the profile tuned records as active in
  ``/etc/tuned/active_profile`` against ``tuned_profile``.
- ``tuning.kubelet_policy`` (target the KubeletConfiguration field, or ``config``): the kubelet's
  configuration (``kubelet_config`` merged with the ``*.conf`` drop-ins of ``kubelet_config_dir``; a
  field set nowhere has the kubelet's default) against ``kubelet_policy``.
- ``tuning.irq_affinity`` (target the RDMA device): every MSI/MSI-X interrupt of the device on CPUs of
  its NUMA node (``/proc/irq/<n>/smp_affinity_list`` within ``device/local_cpulist``), when
  ``irq_affinity`` is true (``irq_devices``: which devices, default all).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.irq_affinity import affinity_path, hca_irqs
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.kubelet_config import (
    ENUMS as KUBELET_ENUMS,
    RESERVED_CPUS,
    effective_config,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import Family, FamilyResult

TUNING_OPTIONS = {
    "hugepages_2m": {"type": "int"},
    "hugepages_1g": {"type": "int"},
    "tuned_profile": {"type": "str"},
    "kubelet_policy": {"type": "dict", "options": dict(
        [(name, {"type": "str", "choices": list(allowed)}) for name, (_f, allowed, _d) in sorted(KUBELET_ENUMS.items())]
        + [(RESERVED_CPUS[0], {"type": "str"})])},
    "kubelet_config": {"type": "str", "default": "/var/lib/kubelet/config.yaml"},
    "kubelet_config_dir": {"type": "str", "default": "/var/lib/kubelet/config.d"},
    "irq_affinity": {"type": "bool"},
    "irq_devices": {"type": "list", "elements": "str"},
}
HUGEPAGE_SIZES = (("hugepages_2m", "2048kB"), ("hugepages_1g", "1048576kB"))
TUNED_ACTIVE_PROFILE = "etc/tuned/active_profile"
# tuned profile names: letters, digits, '-', '_', '.'; several profiles merge with spaces.
_PROFILE = re.compile(r"^[A-Za-z0-9_.-]{1,64}( [A-Za-z0-9_.-]{1,64}){0,7}$")


def validate_options(options, prefix=""):
    errors = []
    for name, _size in HUGEPAGE_SIZES:
        value = options.get(name)
        if value is not None and value < 0:
            errors.append("option %s%s: must be >= 0, got %d" % (prefix, name, value))
    profile = options.get("tuned_profile")
    if profile is not None and not _PROFILE.match(profile):
        errors.append("option %s%s: %r is not a tuned profile name (letters, digits, '-', '_', '.'; "
                      "several separated by one space)" % (prefix, "tuned_profile", profile))
    cpus = (options.get("kubelet_policy") or {}).get(RESERVED_CPUS[0])
    if cpus is not None and parse_cpulist(cpus) is None:
        errors.append("option %skubelet_policy.%s: %r is not a cpuset list such as 0-1,56-57"
                      % (prefix, RESERVED_CPUS[0], cpus))
    return errors


def _reason(problem, otherwise):
    """The reader's reason for ``problem`` (``/<file>: <reason>``), or ``otherwise``."""
    return problem.split(": ", 1)[1] if problem else otherwise


def _check_hugepages(checks, reader, options):
    for name, size in HUGEPAGE_SIZES:
        expected = options.get(name)
        if expected is None:
            continue
        path = "sys/kernel/mm/hugepages/hugepages-%s/nr_hugepages" % size
        observed = reader.read_int(path)
        if observed is None:
            problem = reader.problem(path)
            check = checks.fail("tuning.hugepages", size, "cannot read /%s (%s); %d configured" % (
                path, _reason(problem, "kernel without %s pages, or not a number" % size), expected),
                observed=None, expected=expected)
            check["error"] = problem or "/%s: absent or not a number" % path
        elif observed < expected:
            checks.fail("tuning.hugepages", size, "%d of %d configured %s huge pages allocated"
                        % (observed, expected, size), observed=observed, expected=expected)
        elif observed > expected:
            checks.warn("tuning.hugepages", size, "%d %s huge pages allocated, %d configured"
                        % (observed, size, expected), observed=observed, expected=expected)
        else:
            checks.passed("tuning.hugepages", size, "%d %s huge pages allocated as configured" % (observed, size),
                          observed=observed, expected=expected)


def _check_tuned_profile(checks, reader, options):
    expected = options.get("tuned_profile")
    if expected is None:
        return
    observed = reader.read(TUNED_ACTIVE_PROFILE)
    if not observed:
        problem = reader.problem(TUNED_ACTIVE_PROFILE)
        check = checks.fail("tuning.tuned_profile", "node", "cannot read /%s (%s); %s configured" % (
            TUNED_ACTIVE_PROFILE, _reason(problem, "tuned not installed or no profile applied"), expected),
            observed=None, expected=expected)
        check["error"] = problem or "/%s: absent" % TUNED_ACTIVE_PROFILE
    elif observed.split() != expected.split():
        checks.fail("tuning.tuned_profile", "node", "tuned profile %r active, %r configured" % (observed, expected),
                    observed=observed, expected=expected)
    else:
        checks.passed("tuning.tuned_profile", "node", "tuned profile %s active" % observed,
                      observed=observed, expected=expected)


def _check_kubelet_policy(checks, reader, options):
    expected = dict((name, value) for name, value in (options.get("kubelet_policy") or {}).items()
                    if value is not None)
    if not expected:
        return
    config, used, problem = effective_config(reader, options["kubelet_config"], options.get("kubelet_config_dir"))
    base_problem = reader.problem(options["kubelet_config"].lstrip("/"))
    if base_problem and base_problem.endswith(": empty"):
        problem = base_problem  # an empty file reads as no field set: every field the kubelet's default
    if problem:
        failed = problem[len("cannot read /"):] if problem.startswith("cannot read /") else None
        why = reader.problem(failed) if failed else None
        if why:
            problem = "cannot read %s" % why
        check = checks.fail("tuning.kubelet_policy", "config", "kubelet configuration unreadable: %s; %s configured"
                            % (problem, ", ".join(sorted(expected))), observed=None, expected=expected)
        check["error"] = problem
        return
    fields = [(name,) + KUBELET_ENUMS[name][::2] for name in sorted(KUBELET_ENUMS)]
    fields.append(RESERVED_CPUS + ("",))
    for name, field, default in fields:
        if name not in expected:
            continue
        want = expected[name]
        observed = config.get(field, default)
        if name == RESERVED_CPUS[0]:
            same = parse_cpulist(str(observed)) == parse_cpulist(str(want)) if observed else False
        else:
            same = observed == want
        where = "" if field in config else " (not set: the kubelet's default)"
        if same:
            checks.passed("tuning.kubelet_policy", field, "%s is %s as configured" % (field, observed),
                          observed=observed, expected=want)
        else:
            checks.fail("tuning.kubelet_policy", field, "%s is %r%s, %r configured (read %s)"
                        % (field, observed, where, want, ", ".join(used)), observed=observed, expected=want)


def _check_irq_affinity(checks, reader, options):
    if not options.get("irq_affinity"):
        return
    entries = hca_irqs(reader, options.get("irq_devices"))
    if not entries:
        checks.fail("tuning.irq_affinity", "node", "no RDMA device under /sys/class/infiniband; HCA interrupt "
                    "affinity configured", observed=None, expected="local NUMA node")
    for entry in entries:
        target = entry["device"]
        if entry["problem"]:
            checks.fail("tuning.irq_affinity", target, entry["problem"], observed=None, expected="local NUMA node")
            continue
        local = entry["local_cpus"]
        unreadable = [irq["irq"] for irq in entry["irqs"] if irq["affinity"] is None]
        outside = [irq for irq in entry["irqs"] if irq["affinity"] is not None and not irq["affinity"] <= local]
        if unreadable:
            problems = [reader.problem(affinity_path(irq)) or "/%s: absent or not a CPU list" % affinity_path(irq)
                        for irq in unreadable]
            check = checks.fail("tuning.irq_affinity", target, "cannot read %s" % ", ".join(problems),
                                observed=None, expected=entry["local_cpulist"])
            check["error"] = ", ".join(problems)
        elif outside:
            checks.fail("tuning.irq_affinity", target, "%d of %d interrupts off NUMA node %s (CPUs %s): %s"
                        % (len(outside), len(entry["irqs"]), entry["numa_node"], entry["local_cpulist"],
                           ", ".join("IRQ %d on %s" % (irq["irq"], format_cpulist(irq["affinity"])) for irq in outside)),
                        observed=dict((str(irq["irq"]), irq["affinity_text"]) for irq in outside),
                        expected=entry["local_cpulist"])
        else:
            checks.passed("tuning.irq_affinity", target, "%d interrupts on NUMA node %s (CPUs %s)"
                          % (len(entry["irqs"]), entry["numa_node"], entry["local_cpulist"]),
                          observed=len(entry["irqs"]), expected=entry["local_cpulist"])


def validate_tuning(reader, options):
    """CheckResults of the tuning family."""
    checks = CheckResults()
    _check_hugepages(checks, reader, options)
    _check_tuned_profile(checks, reader, options)
    _check_kubelet_policy(checks, reader, options)
    _check_irq_affinity(checks, reader, options)
    return checks


def run(ctx, options):
    return FamilyResult(validate_tuning(ctx.reader, options))


# Every check id of the family (the node health agent validates its hysteresis settings against them).
CHECK_IDS = ("tuning.hugepages", "tuning.tuned_profile", "tuning.kubelet_policy", "tuning.irq_affinity")

FAMILY = Family("tuning", TUNING_OPTIONS, validate_options, run)
