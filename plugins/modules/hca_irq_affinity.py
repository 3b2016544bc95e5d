#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
module: hca_irq_affinity
short_description: Pin the interrupts of the RDMA devices (HCAs) to the CPUs of their NUMA node
description:
  - For every RDMA device of C(<root>/sys/class/infiniband) (or those of O(devices)), reads the MSI/MSI-X
    interrupts of its PCI function (C(device/msi_irqs/<irq>)) and the CPUs of its NUMA node
    (C(device/local_cpulist)), and writes that CPU list to C(<root>/proc/irq/<irq>/smp_affinity_list) of every
    interrupt whose affinity differs.
  - Fails closed, naming every device and interrupt it could not handle - a device without interrupts or
    without C(local_cpulist), an affinity the kernel refuses (a kernel-managed interrupt answers EIO), a
    read-only C(/proc/irq) (containers). Nothing is written when a device cannot be read.
  - The affinity lasts until the interrupt is re-created (driver reload, reboot) or moved by irqbalance
    (see the role C(node_tuning), C(node_tuning_irq_affinity.irqbalance)). The drift check
    C(tuning.irq_affinity) of M(gpufleet.cluster.node_validate) compares the same values.
version_added: 0.2.0
author: gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.attributes
options:
  devices:
    description: RDMA device names (C(mlx5_0)); all of C(/sys/class/infiniband) when unset.
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    details: Reports the interrupts it would move without writing.
  diff_mode:
    support: none
seealso:
  - module: gpufleet.cluster.topology_facts
  - module: gpufleet.cluster.node_validate
"""

EXAMPLES = r"""
- name: HCA interrupts on the CPUs of their NUMA node
  gpufleet.cluster.hca_irq_affinity:

- name: Only the compute rails
  gpufleet.cluster.hca_irq_affinity:
    devices: [mlx5_0, mlx5_1, mlx5_2, mlx5_3]
"""

RETURN = r"""
devices:
  description: One entry per RDMA device.
  returned: always
  type: list
  elements: dict
  sample:
    - device: mlx5_0
      numa_node: 0
      local_cpulist: 0-55,112-167
      irqs: [150, 151, 152]
      moved: [{irq: 151, before: 56-111, after: 0-55,112-167}]
moved:
  description: Number of interrupts whose affinity was (check mode - would be) written.
  returned: always
  type: int
"""

import copy
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.irq_affinity import affinity_path, hca_irqs
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import SysfsReader, validate_root


ARGUMENT_SPEC = {"root": {"type": "path", "default": "/"}, "devices": {"type": "list", "elements": "str"}}


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


def main():
    module = AnsibleModule(argument_spec=copy.deepcopy(ARGUMENT_SPEC), supports_check_mode=True)
    error = validate_root(module.params["root"])
    if error:
        module.fail_json(msg=error)
    devices, moved, errors = apply_affinity(SysfsReader(module.params["root"]), module.params["devices"],
                                            module.check_mode)
    if errors:
        module.fail_json(msg="hca_irq_affinity: " + "; ".join(errors), devices=devices, moved=moved,
                         changed=moved > 0 and not module.check_mode)
    module.exit_json(changed=moved > 0, devices=devices, moved=moved)


if __name__ == "__main__":
    main()
