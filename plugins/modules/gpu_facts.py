#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather NVIDIA GPU, NVSwitch and kernel module facts from sysfs (no NVML)
description:
  - Reads C(<root>/sys/bus/pci/devices) once and reports the NVIDIA GPUs (vendor C(0x10de), PCI class
    C(0x0300xx) or C(0x0302xx)) and NVSwitches (class C(0x0680xx)) found there, the loaded NVIDIA
    kernel driver and its version, whether C(nouveau) is loaded, and the GPUDirect RDMA peer-memory
    modules.
  - Works without the NVIDIA driver and without NVML, so it also describes a node whose driver is
    broken or not yet installed. Never changes the host.
  - Unreadable or malformed sysfs files are skipped field by field (recorded as null).
  - Verified against fixture trees reproducing DGX H100, GeForce workstation and nouveau hosts
    (C(tests/fixtures/nodes)); not yet on every real platform.
version_added: 0.1.0
author: gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
seealso:
  - module: gpufleet.cluster.gpu_health
"""

EXAMPLES = r"""
- name: Gather NVIDIA facts
  gpufleet.cluster.gpu_facts:

- name: Refuse to install the driver while nouveau holds the GPUs
  ansible.builtin.assert:
    that: not ansible_facts['nvidia']['nouveau_loaded']
    fail_msg: blacklist nouveau and reboot first

- name: Inspect a mounted node image
  gpufleet.cluster.gpu_facts:
    root: /mnt/node-image
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(ansible_facts.nvidia).
  returned: always
  type: dict
  contains:
    nvidia:
      description: NVIDIA GPUs, NVSwitches and kernel modules as seen in sysfs.
      returned: always
      type: dict
      contains:
        pci_gpus:
          description: One entry per NVIDIA GPU PCI function, sorted by PCI address.
          type: list
          elements: dict
          returned: always
          contains:
            pci_address:
              description: PCI address (domain:bus:device.function).
              type: str
              returned: always
              sample: "0000:18:00.0"
            device_id:
              description: PCI device id (C(0x2330) is H100 80GB HBM3 SXM5).
              type: str
              returned: always
              sample: "0x2330"
            numa_node:
              description: NUMA node of the function; null when unknown or C(-1).
              type: int
              returned: always
              sample: 0
        gpu_count:
          description: Number of entries in C(pci_gpus).
          type: int
          returned: always
          sample: 8
        nvswitch_count:
          description: NVIDIA functions of class C(0x0680xx) (NVSwitch).
          type: int
          returned: always
          sample: 4
        driver:
          description: The C(nvidia) kernel module.
          type: dict
          returned: always
          contains:
            loaded:
              description: C(<root>/sys/module/nvidia) exists.
              type: bool
              returned: always
            version:
              description: Content of C(/sys/module/nvidia/version), or null.
              type: str
              returned: always
              sample: "580.95.05"
        nouveau_loaded:
          description: The C(nouveau) module is loaded (it prevents the NVIDIA driver from binding).
          type: bool
          returned: always
        peermem:
          description: GPUDirect RDMA peer-memory modules.
          type: dict
          returned: always
          contains:
            nvidia_peermem:
              description: C(nvidia_peermem) is loaded.
              type: bool
              returned: always
            nv_peer_mem:
              description: The legacy C(nv_peer_mem) module is loaded.
              type: bool
              returned: always
            registered:
              description: C(/sys/module/ib_core/holders/nvidia_peermem) exists (registered with ib_core).
              type: bool
              returned: always
        fabricmanager_required:
          description: NVSwitches are present, so nvidia-fabricmanager must run for NVLink to work.
          type: bool
          returned: always
  sample:
    nvidia:
      pci_gpus: [{pci_address: "0000:18:00.0", device_id: "0x2330", numa_node: 0}]
      gpu_count: 1
      nvswitch_count: 0
      driver: {loaded: true, version: "580.95.05"}
      nouveau_loaded: false
      peermem: {nvidia_peermem: true, nv_peer_mem: false, registered: true}
      fabricmanager_required: false
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ROOT_OPTION, checked_root, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

ARGUMENT_SPEC = {"root": ROOT_OPTION}


def gather(module):
    return {"changed": False, "ansible_facts": {"nvidia": gather_gpu_facts(SysfsReader(checked_root(module.params)))}}


def main():
    run_module(ARGUMENT_SPEC, gather)


if __name__ == "__main__":
    main()
