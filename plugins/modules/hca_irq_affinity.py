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

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import (
    ROOT_OPTION,
    ModuleFailure,
    checked_root,
    run_module,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.irq_affinity import apply_affinity
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

ARGUMENT_SPEC = {"root": ROOT_OPTION, "devices": {"type": "list", "elements": "str"}}


def pin(module):
    devices, moved, errors = apply_affinity(SysfsReader(checked_root(module.params)), module.params["devices"],
                                            module.check_mode)
    if errors:
        raise ModuleFailure("hca_irq_affinity: " + "; ".join(errors), devices=devices, moved=moved,
                            changed=moved > 0 and not module.check_mode)
    return {"changed": moved > 0, "devices": devices, "moved": moved}


def main():
    run_module(ARGUMENT_SPEC, pin)


if __name__ == "__main__":
    main()
