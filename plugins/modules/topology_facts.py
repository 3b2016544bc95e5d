#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
module: topology_facts
short_description: Map every NVIDIA GPU to its nearest RDMA devices by the PCIe hierarchy in sysfs
description:
  - Resolves C(<root>/sys/bus/pci/devices/<address>) of every NVIDIA GPU (vendor C(0x10de), PCI class
    C(0x0300xx) or C(0x0302xx)) and of the PCI function behind every C(<root>/sys/class/infiniband/<dev>),
    and classifies each GPU/RDMA pair the way C(nvidia-smi topo -m) does, best first (list below).
  - C(PIX) at most a single PCIe bridge (a PCIe switch counts as one); C(PXB) multiple PCIe bridges
    without the host bridge; C(PHB) through a PCIe host bridge (same root complex, different root
    ports); C(NODE) between host bridges within one NUMA node; C(SYS) across NUMA nodes, or when the
    NUMA node of either side is unknown.
  - A device whose PCIe position cannot be resolved has C(pci_path) null, its classes are null and
    C(complete) is false; nothing is guessed.
  - Pure sysfs, no NVML, no C(nvidia-smi); never changes the host. Verified against fixture trees
    laid out like a DGX H100 and a dual-socket PCIe server without switches (C(tests/fixtures/nodes)),
    not on hardware.
version_added: 0.2.0
author: gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.attributes.facts
attributes:
  facts:
    support: full
    details: Returns C(ansible_facts.gpu_topology).
seealso:
  - module: gpufleet.cluster.gpu_facts
  - module: gpufleet.cluster.mlx5_facts
"""

EXAMPLES = r"""
- name: Map GPUs to their nearest HCAs
  gpufleet.cluster.topology_facts:

- name: NCCL_IB_HCA with the HCAs that share a PCIe switch with a GPU
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu_topology'] | gpufleet.cluster.nccl_ib_hca(max_class='PIX') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(ansible_facts.gpu_topology).
  returned: always
  type: dict
  contains:
    gpu_topology:
      description: GPUs, RDMA devices and the class of the path between each pair.
      returned: always
      type: dict
      contains:
        gpus:
          description: One entry per NVIDIA GPU, sorted by PCI address; C(index) is that order.
          type: list
          elements: dict
          returned: always
          sample:
            - index: 0
              pci_address: "0000:18:00.0"
              numa_node: 0
              host_bridge: pci0000:10
              pci_path: ["0000:10:03.0", "0000:11:00.0", "0000:12:00.0", "0000:18:00.0"]
              rdma: {mlx5_0: PIX, mlx5_1: NODE, mlx5_4: SYS}
              nearest_class: PIX
              nearest_rdma: [mlx5_0]
        rdma_devices:
          description: One entry per RDMA device of C(/sys/class/infiniband), sorted by name, with
            C(name), C(pci_address), C(numa_node), C(host_bridge), C(pci_path) and C(ports)
            (C(port), C(link_layer)).
          type: list
          elements: dict
          returned: always
        numa_nodes:
          description: Per NUMA node (key C(unknown) when the kernel reports none), the GPUs' PCI
            addresses and the RDMA device names.
          type: dict
          returned: always
          sample: {"0": {gpus: ["0000:18:00.0"], rdma_devices: [mlx5_0]}}
        complete:
          description: Every GPU and RDMA device has a resolved PCIe position.
          type: bool
          returned: always
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ROOT_OPTION, checked_root, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.topology import gather_topology_facts

ARGUMENT_SPEC = {"root": ROOT_OPTION}


def gather(module):
    reader = SysfsReader(checked_root(module.params))
    return {"changed": False, "ansible_facts": {"gpu_topology": gather_topology_facts(reader)}}


def main():
    run_module(ARGUMENT_SPEC, gather)


if __name__ == "__main__":
    main()
