#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function


DOCUMENTATION = r"""
---
module: mlx5_facts
short_description: Facts about the mlx5_core driver, OFED user space and RDMA devices
version_added: 0.1.0
description:
  - Reads C(/sys/module/mlx5_core), C(/sys/bus/pci/devices), C(/sys/class/infiniband) and
    C(/proc/sys/kernel/osrelease) below O(root) and runs C(ofed_info -s) to describe the loaded
    mlx5_core driver (OFED or inbox), the installed MLNX_OFED / DOCA-OFED user space and every
    RDMA device with its ports.
  - Read-only; never changes the host. An unreadable or malformed sysfs file makes only its own
    field null.
  - Verified against fixture trees modelled on real sysfs (ConnectX-5/6/7, InfiniBand and RoCE);
    see C(tests/fixtures/nodes/README.md).
author:
  - gpufleet contributors (@gpufleet)
options:
  root:
    description:
      - Directory used as the filesystem root for every read (C(<root>/sys/...), C(<root>/proc/...),
        C(<root>/dev/...)).
      - Point it at a fixture tree or a mounted node image for offline inspection.
  ofed_info:
    description:
      - Path of the C(ofed_info) executable.
      - When not set it is searched on E(PATH), but only when O(root=/); for another root the
        controller's own OFED would be wrong, so OFED user space then counts as not installed.
      - When absent, OFED user space counts as not installed.
    type: path
notes:
  - Versions compare as integer tuples. The loaded mlx5_core shows the package version without
    its last component(s) (C(23.10-1.1.9.0) installed, C(23.10-1.1.9) loaded).
seealso:
  - module: gpufleet.cluster.rdma_validate
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.attributes.facts
attributes:
  facts:
    support: full
    details: Returns C(ansible_facts.mlx5).
"""

EXAMPLES = r"""
- name: Gather mlx5 / OFED / RDMA device facts
  gpufleet.cluster.mlx5_facts:

- name: Show the loaded driver and whether it matches the installed OFED
  ansible.builtin.debug:
    msg: >-
      mlx5_core {{ ansible_facts['mlx5']['version'] }} ({{ ansible_facts['mlx5']['driver_source'] }}),
      OFED {{ ansible_facts['mlx5']['ofed']['package_version'] }},
      match={{ ansible_facts['mlx5']['ofed']['loaded_matches_installed'] }}

- name: Inspect a mounted node image offline with a known ofed_info
  gpufleet.cluster.mlx5_facts:
    root: /mnt/node-image
    ofed_info: /mnt/node-image/usr/bin/ofed_info
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    mlx5:
      description: The mlx5_core driver, OFED user space and RDMA devices.
      returned: always
      type: dict
      contains:
        loaded:
          description: Whether C(/sys/module/mlx5_core) exists.
          type: bool
          returned: always
          sample: true
        version:
          description: Content of C(/sys/module/mlx5_core/version), or null.
          type: str
          returned: always
          sample: 24.10-1.1.4
        srcversion:
          description: Content of C(/sys/module/mlx5_core/srcversion), or null.
          type: str
          returned: always
          sample: A3C4D1F6E8B2A9C0D7E5F41
        driver_source:
          description:
            - V(ofed), V(inbox) or V(absent).
            - Inbox when loaded and the version file is missing, reads C(5.0-0) or equals the kernel release.
          type: str
          returned: always
          sample: ofed
        ofed:
          description: OFED user space from C(ofed_info -s).
          type: dict
          returned: always
          contains:
            installed:
              description: Whether an ofed_info executable was found.
              type: bool
              returned: always
              sample: true
            package_version:
              description: Installed package version, or null.
              type: str
              returned: always
              sample: 24.10-1.1.4.0.200
            flavor:
              description: V(mlnx_ofed) (MLNX_OFED_LINUX), V(doca_ofed) (OFED-internal) or null.
              type: str
              returned: always
              sample: doca_ofed
            loaded_matches_installed:
              description:
                - Whether the loaded mlx5_core belongs to the installed package; false when an inbox
                  driver is loaded while OFED is installed; null when unknown.
              type: bool
              returned: always
              sample: true
        pci_functions:
          description: Number of PCI functions with vendor C(0x15b3).
          type: int
          returned: always
          sample: 10
        devices:
          description: One entry per C(/sys/class/infiniband/<name>).
          type: list
          elements: dict
          returned: always
          contains:
            name:
              description: RDMA device name.
              type: str
              returned: always
              sample: mlx5_0
            driver:
              description: Kernel driver of the PCI function, or null.
              type: str
              returned: always
              sample: mlx5_core
            pci_address:
              description: PCI address of the function behind the device, or null.
              type: str
              returned: always
              sample: "0000:1a:00.0"
            hca_type:
              description: HCA type.
              type: str
              returned: always
              sample: MT4129
            board_id:
              description: Board (PSID) identifier.
              type: str
              returned: always
              sample: MT_0000000838
            fw_ver:
              description: Firmware version.
              type: str
              returned: always
              sample: 28.39.1002
            node_guid:
              description: Node GUID.
              type: str
              returned: always
              sample: b83f:d203:00a1:2b3c
            numa_node:
              description: NUMA node of the PCI function; null when unknown or C(-1).
              type: int
              returned: always
              sample: 0
            netdevs:
              description: Network interfaces of the PCI function and those named by the GID table.
              type: list
              elements: str
              returned: always
              sample: [ibp26s0]
            uverbs:
              description: Name of the uverbs character device, or null.
              type: str
              returned: always
              sample: uverbs0
            ports:
              description:
                - One entry per port with keys C(port), C(state), C(state_id), C(phys_state),
                  C(phys_state_id), C(rate_gbps), C(width), C(speed), C(link_layer), C(lid),
                  C(sm_lid) (integers) and C(roce_v2_gid_index).
                - C(roce_v2_gid_index) is the first GID index of type C(RoCE v2) whose GID is
                  IPv4-mapped, else null.
              type: list
              elements: dict
              returned: always
              sample:
                - port: 1
                  state: ACTIVE
                  state_id: 4
                  phys_state: LinkUp
                  phys_state_id: 5
                  rate_gbps: 400.0
                  width: 4X
                  speed: NDR
                  link_layer: InfiniBand
                  lid: 26
                  sm_lid: 1
                  roce_v2_gid_index: null
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import (
    ROOT_OPTION,
    ModuleFailure,
    checked_root,
    run_module,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import check_mlx5_options, gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

ARGUMENT_SPEC = {"root": ROOT_OPTION, "ofed_info": {"type": "path"}}


def gather(module):
    reader = SysfsReader(checked_root(module.params))
    errors = check_mlx5_options(module.params)
    if errors:
        raise ModuleFailure("; ".join(errors))
    facts = gather_mlx5_facts(reader, ModuleRunner(module), ofed_info=module.params["ofed_info"])
    return {"changed": False, "ansible_facts": {"mlx5": facts}}


def main():
    run_module(ARGUMENT_SPEC, gather)


if __name__ == "__main__":
    main()
