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
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

API_VERSION = "kubelet.config.k8s.io/v1beta1"
# option -> (KubeletConfiguration field, allowed values)
ENUMS = {
    "cpu_manager_policy": ("cpuManagerPolicy", ("none", "static")),
    "topology_manager_policy": ("topologyManagerPolicy", ("none", "best-effort", "restricted", "single-numa-node")),
    "topology_manager_scope": ("topologyManagerScope", ("container", "pod")),
    "memory_manager_policy": ("memoryManagerPolicy", ("None", "Static")),
}
OPTIONS = tuple(ENUMS) + ("reserved_system_cpus", "reserved_memory")
_CPU_RANGE = re.compile(r"^([0-9]{1,5})(?:-([0-9]{1,5}))?$")
_QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def parse_cpuset(text):
    """Sorted CPU numbers of a cpuset list (``0-1,32-33``), or None when it does not parse the way
    the kubelet's cpuset.Parse accepts (ranges low-high, comma separated)."""
    if not isinstance(text, str) or not text.strip():
        return None
    cpus = set()
    for part in text.split(","):
        match = _CPU_RANGE.match(part.strip())
        if not match:
            return None
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            return None
        cpus.update(range(low, high + 1))
    return sorted(cpus)


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


class FilterModule(object):
    def filters(self):
        return {"kubelet_tuning_config": kubelet_tuning_config}
