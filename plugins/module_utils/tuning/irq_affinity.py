# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Interrupts of the RDMA devices (HCAs) and the CPUs of their NUMA node, read below a root.

One reading for the module ``hca_irq_affinity`` (which writes the affinity) and the drift check
``tuning.irq_affinity`` (which compares it). Kernel ABI: ``/sys/class/infiniband/<dev>/device`` is
the PCI function; its ``msi_irqs/`` holds one file per MSI/MSI-X vector named by the IRQ number
(Documentation/ABI/testing/sysfs-bus-pci), ``numa_node`` and ``local_cpulist`` the node and its
CPUs; ``/proc/irq/<n>/smp_affinity_list`` the CPUs an IRQ may run on, as a cpu list
(Documentation/core-api/irq/irq-affinity.rst).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.cpulist import parse_cpulist
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs


def affinity_path(irq):
    return "proc/irq/%d/smp_affinity_list" % irq


def hca_irqs(reader, devices=None):
    """One entry per RDMA device (all under sys/class/infiniband, or ``devices``):
    ``{device, numa_node, local_cpulist, local_cpus (set or None), irqs: [{irq, affinity (set or None),
    affinity_text}], problem}``; ``problem`` names what could not be read (None when all was read)."""
    names = reader.listdir("sys/class/infiniband") if devices is None else list(devices)
    out = []
    for name in names:
        base = "sys/class/infiniband/%s/device" % name
        entry = {"device": name, "numa_node": reader.read_int(base + "/numa_node"),
                 "local_cpulist": reader.read(base + "/local_cpulist"), "irqs": [], "problem": None}
        entry["local_cpus"] = parse_cpulist(entry["local_cpulist"])
        irq_names = reader.listdir(base + "/msi_irqs")
        if not reader.isdir("sys/class/infiniband/%s" % name):
            entry["problem"] = "no RDMA device %s under /sys/class/infiniband" % name
        elif entry["local_cpus"] is None:
            entry["problem"] = "cannot read /%s/local_cpulist" % base
        elif not irq_names:
            entry["problem"] = "no MSI/MSI-X interrupts under /%s/msi_irqs" % base
        for irq_name in irq_names:
            if not sysfs.is_index(irq_name):
                continue
            irq = int(irq_name)
            text = reader.read(affinity_path(irq))
            entry["irqs"].append({"irq": irq, "affinity_text": text, "affinity": parse_cpulist(text)})
        out.append(entry)
    return out


def apply_affinity(reader, devices=None, check_mode=False):
    """(result devices, moved count, errors) - writes ``local_cpulist`` to every HCA interrupt whose
    affinity differs; nothing is written when any device cannot be read."""
    entries = hca_irqs(reader, devices)
    errors = [entry["problem"] for entry in entries if entry["problem"]]
    if not entries:
        errors.append("no RDMA device under /sys/class/infiniband")
    out, moved = [], 0
    for entry in entries:
        result = {"device": entry["device"], "numa_node": entry["numa_node"],
                  "local_cpulist": entry["local_cpulist"], "irqs": [irq["irq"] for irq in entry["irqs"]], "moved": []}
        out.append(result)
        if errors:
            continue
        for irq in entry["irqs"]:
            if irq["affinity"] == entry["local_cpus"]:
                continue
            if irq["affinity_text"] is None:
                errors.append("%s: cannot read /%s" % (entry["device"], affinity_path(irq["irq"])))
                continue
            result["moved"].append({"irq": irq["irq"], "before": irq["affinity_text"], "after": entry["local_cpulist"]})
            moved += 1
            if check_mode:
                continue
            try:
                with open(reader.path(affinity_path(irq["irq"])), "w") as handle:
                    handle.write(entry["local_cpulist"] + "\n")
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                hint = {5: " (a kernel-managed interrupt)", 30: " (read-only /proc: a container?)",
                        13: " (not root?)"}.get(exc.errno, "")
                errors.append("%s: cannot write /%s: %s%s" % (entry["device"], affinity_path(irq["irq"]), reason, hint))
    return out, moved, errors
