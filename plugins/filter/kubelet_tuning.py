# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_tuning_config: a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) fragment for the CPU,
topology and memory managers, validated with the kubelet's own rules before it reaches a node.

Documentation: kubelet_tuning_config.yml next to this file. The allowed values and the rules are
those of the kubelet's configuration validation (kubernetes/kubernetes
pkg/kubelet/apis/config/validation/validation.go: topologyManagerPolicy, topologyManagerScope,
reservedSystemCPUs parsed as a cpuset) and of its CPU and memory managers (the static CPU policy
needs a CPU reservation; the Static memory policy needs reservedMemory).

kernel_tuning_args: the kernel command line arguments of 1 GiB huge pages and CPU isolation (same
cpuset rules; isolated CPUs must not overlap the kubelet's reserved CPUs). Documentation:
kernel_tuning_args.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.cpulist import parse_cpulist
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.kubelet_config import ENUMS as KUBELET_ENUMS

API_VERSION = "kubelet.config.k8s.io/v1beta1"
# option -> (KubeletConfiguration field, allowed values)
# option -> (KubeletConfiguration field, allowed values): module_utils/tuning/kubelet_config.py, shared with
# the drift check tuning.kubelet_policy.
ENUMS = {name: (field, allowed) for name, (field, allowed, _default) in KUBELET_ENUMS.items()}
OPTIONS = tuple(ENUMS) + ("reserved_system_cpus", "reserved_memory")
_QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def parse_cpuset(text):
    """Sorted CPU numbers of a cpuset list (``0-1,32-33``), or None when it does not parse the way
    the kubelet's cpuset.Parse accepts (ranges low-high, comma separated)."""
    if not isinstance(text, str):
        return None
    cpus = parse_cpulist(text)
    return None if cpus is None else sorted(cpus)


def _reserved_memory_errors(value):
    if not isinstance(value, list) or not value:
        return ["option reserved_memory must be a non-empty list of {numaNode, limits: {memory}}"]
    errors, seen = [], set()
    for index, entry in enumerate(value):
        where = "option reserved_memory[%d]" % index
        if not isinstance(entry, dict) or set(entry) != {"numaNode", "limits"}:
            errors.append("%s must have exactly the keys numaNode and limits" % where)
            continue
        node = entry["numaNode"]
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            errors.append("%s.numaNode must be an integer >= 0, got %r" % (where, node))
        elif node in seen:
            errors.append("%s.numaNode %d is listed twice" % (where, node))
        else:
            seen.add(node)
        limits = entry["limits"]
        if not isinstance(limits, dict) or not limits:
            errors.append("%s.limits must be a dict of resource quantities" % where)
            continue
        for resource, quantity in limits.items():
            if resource != "memory" and not str(resource).startswith("hugepages-"):
                errors.append("%s.limits: %r is not memory or hugepages-<size>" % (where, resource))
            if not _QUANTITY.match(str(quantity)):
                errors.append("%s.limits.%s: %r is not a quantity (e.g. 1Gi)" % (where, resource, quantity))
    return errors


def kubelet_tuning_config(options):
    """The KubeletConfiguration fragment for ``options`` (unset options are left out)."""
    if not isinstance(options, dict):
        raise AnsibleFilterError("kubelet_tuning_config: expected a dict of options, got %s"
                                 % type(options).__name__)
    errors = ["unknown option %s (known: %s)" % (name, ", ".join(OPTIONS))
              for name in sorted(options) if name not in OPTIONS]
    config = {"apiVersion": API_VERSION, "kind": "KubeletConfiguration"}
    for name, (field, allowed) in ENUMS.items():
        value = options.get(name)
        if value is None:
            continue
        if value not in allowed:
            errors.append("option %s (%s) %r must be one of: %s" % (name, field, value, ", ".join(allowed)))
        config[field] = value
    cpus = options.get("reserved_system_cpus")
    if cpus is not None:
        if parse_cpuset(str(cpus)) is None:
            errors.append("option reserved_system_cpus (reservedSystemCPUs) %r is not a cpuset list "
                          "such as 0-1,32-33" % (cpus,))
        config["reservedSystemCPUs"] = str(cpus)
    if options.get("cpu_manager_policy") == "static" and cpus is None:
        errors.append("option cpu_manager_policy static needs reserved_system_cpus: the kubelet's static "
                      "CPU policy refuses to start without a CPU reservation")
    memory = options.get("reserved_memory")
    if memory is not None:
        errors.extend(_reserved_memory_errors(memory))
        config["reservedMemory"] = memory
    if options.get("memory_manager_policy") == "Static" and memory is None:
        errors.append("option memory_manager_policy Static needs reserved_memory (reservedMemory per NUMA node)")
    if errors:
        raise AnsibleFilterError("kubelet_tuning_config: " + "; ".join(errors))
    return config


ISOLCPUS_FLAGS = ("nohz", "domain", "managed_irq")


def kernel_tuning_args(hugepages_1g=None, cpu_isolation=None, reserved_system_cpus=None):
    """Kernel command line arguments for 1 GiB huge pages and CPU isolation, in a fixed order.

    ``cpu_isolation``: ``{cpus, isolcpus_flags (list, default [managed_irq, domain]), nohz_full (default
    true), rcu_nocbs (default true)}`` (kernel-parameters: isolcpus=[flag-list,]<cpu-list>,
    nohz_full=<cpu-list>, rcu_nocbs=<cpu-list>). ``reserved_system_cpus``: the kubelet's reserved CPUs,
    which must not be isolated (they run the system daemons and the kubelet itself).
    """
    errors, args = [], []
    if hugepages_1g is not None:
        if not isinstance(hugepages_1g, int) or isinstance(hugepages_1g, bool) or hugepages_1g < 0:
            errors.append("hugepages_1g must be an integer >= 0, got %r" % (hugepages_1g,))
        elif hugepages_1g > 0:
            args += ["hugepagesz=1G", "hugepages=%d" % hugepages_1g]
    if cpu_isolation:
        if not isinstance(cpu_isolation, dict):
            raise AnsibleFilterError("kernel_tuning_args: cpu_isolation must be a dict, got %s"
                                     % type(cpu_isolation).__name__)
        unknown = sorted(set(cpu_isolation) - {"cpus", "isolcpus_flags", "nohz_full", "rcu_nocbs"})
        errors += ["unknown option cpu_isolation.%s" % name for name in unknown]
        cpus = cpu_isolation.get("cpus")
        isolated = parse_cpuset(str(cpus)) if cpus is not None else None
        if isolated is None:
            errors.append("cpu_isolation.cpus %r is not a cpuset list such as 2-55,58-111" % (cpus,))
        flags = cpu_isolation.get("isolcpus_flags")
        flags = ["managed_irq", "domain"] if flags is None else flags
        if not isinstance(flags, list) or any(flag not in ISOLCPUS_FLAGS for flag in flags):
            errors.append("cpu_isolation.isolcpus_flags %r must be a list of: %s" % (flags, ", ".join(ISOLCPUS_FLAGS)))
        if reserved_system_cpus is not None and isolated is not None:
            reserved = parse_cpuset(str(reserved_system_cpus))
            overlap = sorted(set(reserved or ()) & set(isolated))
            if reserved is None:
                errors.append("reserved_system_cpus %r is not a cpuset list" % (reserved_system_cpus,))
            elif overlap:
                errors.append("cpu_isolation.cpus %s and the kubelet's reserved_system_cpus %s overlap (CPUs %s): "
                              "reserved CPUs run the system daemons and must stay out of isolation"
                              % (cpus, reserved_system_cpus, ",".join(str(cpu) for cpu in overlap)))
        if not errors:
            cpus = str(cpus)
            args.append("isolcpus=" + ",".join(list(flags) + [cpus]))
            if cpu_isolation.get("nohz_full", True):
                args.append("nohz_full=" + cpus)
            if cpu_isolation.get("rcu_nocbs", True):
                args.append("rcu_nocbs=" + cpus)
    if errors:
        raise AnsibleFilterError("kernel_tuning_args: " + "; ".join(errors))
    return args


class FilterModule(object):
    def filters(self):
        return {"kubelet_tuning_config": kubelet_tuning_config, "kernel_tuning_args": kernel_tuning_args}
