#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function


DOCUMENTATION = r"""
---
module: rdma_validate
short_description: Validate RDMA readiness (modules, driver, ports, uverbs, RoCE GIDs, peermem, OFED)
version_added: 0.1.0
description:
  - Gathers the same facts as M(gpufleet.cluster.mlx5_facts) and checks them against the
    options. Returns a list of checks (C(id), C(target), C(status) V(pass)/V(warn)/V(fail)/V(skip),
    C(message), C(observed), C(expected)), a summary and C(healthy).
  - "Checks: C(rdma.modules) (required kernel modules loaded), C(rdma.driver) (Mellanox PCI
    functions present but mlx5_core not loaded), C(rdma.devices) (fewer devices than
    O(expected_devices), or a device named in O(devices) missing), C(rdma.port.state) (ACTIVE
    pass, INIT warn, else fail), C(rdma.port.phys_state) (not LinkUp fails), C(rdma.port.rate)
    (below O(min_rate_gbps)), C(rdma.uverbs) (no C(/dev/infiniband/uverbsN)), C(rdma.roce_gid)
    (Ethernet port without a RoCE v2 IPv4 GID), C(rdma.peermem), C(rdma.ofed_version) and
    C(rdma.counters) (warn)."
  - Node-level checks are always reported; C(rdma.port.rate), C(rdma.roce_gid) and
    C(rdma.counters) only when O(min_rate_gbps), O(require_roce_v2_gid) and O(check_counters)
    ask for them. A node with no RDMA device and no Mellanox PCI function gets V(skip) results
    (for example C(no RDMA devices; mlx5_core not loaded)) unless O(expected_devices) is set.
  - Read-only; never changes the host. Verified against fixture trees modelled on real sysfs.
author:
  - gpufleet contributors (@gpufleet)
options:
  root:
    description:
      - Directory used as the filesystem root for every read (C(<root>/sys/...), C(<root>/dev/...)).
  devices:
    description:
      - RDMA device names (C(mlx5_0)) or PCI addresses (C(0000:1a:00.0) or C(1a:00.0)) to check.
        Default is every device. A name that matches no device fails C(rdma.devices).
    type: list
    elements: str
  link_layer:
    description:
      - Only check devices and ports of this link layer.
    type: str
    default: any
    choices: [any, InfiniBand, Ethernet]
  expected_devices:
    description:
      - Minimum number of matching RDMA devices; fewer fails C(rdma.devices).
      - When set, a node without RDMA hardware fails instead of being skipped.
    type: int
  min_rate_gbps:
    description:
      - Minimum active rate of each checked port in Gb/s (for example V(400) for NDR, V(200) for HDR).
    type: float
  required_modules:
    description:
      - Kernel modules that must be loaded (C(/sys/module/<name>)).
    type: list
    elements: str
    default: [ib_core, ib_uverbs, rdma_ucm, mlx5_core, mlx5_ib]
  require_peermem:
    description:
      - Fail when neither C(nvidia_peermem) nor C(nv_peer_mem) is loaded (GPUDirect RDMA).
      - A peermem module loaded but not registered with ib_core warns either way.
    type: bool
    default: false
  min_ofed_version:
    description:
      - Minimum version of the loaded OFED mlx5_core (for example V(5.8-1.0.1) or V(24.10)).
        Versions compare as integer tuples; a minimum longer than the loaded version is cut to
        its length. An inbox driver fails when a minimum is set.
    type: str
  require_roce_v2_gid:
    description:
      - Check that every Ethernet (RoCE) port has a RoCE v2 GID with an IPv4-mapped address.
    type: bool
    default: true
  check_counters:
    description:
      - Warn when C(symbol_error) or C(link_downed) port counters exceed the maxima.
    type: bool
    default: false
  max_symbol_errors:
    description:
      - Highest acceptable C(symbol_error) counter when O(check_counters=true).
    type: int
    default: 10
  max_link_downed:
    description:
      - Highest acceptable C(link_downed) counter when O(check_counters=true).
    type: int
    default: 10
notes:
  - C(ofed_info) is searched on E(PATH) only when O(root=/) (see M(gpufleet.cluster.mlx5_facts)).
seealso:
  - module: gpufleet.cluster.mlx5_facts
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.validation.fail_on
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.attributes.facts
attributes:
  facts:
    support: full
    details: Returns C(ansible_facts.mlx5), the facts the checks used.
"""

EXAMPLES = r"""
- name: Validate a DGX H100 (8 NDR InfiniBand HCAs, GPUDirect RDMA, DOCA-OFED)
  gpufleet.cluster.rdma_validate:
    link_layer: InfiniBand
    expected_devices: 8
    min_rate_gbps: 400
    require_peermem: true
    min_ofed_version: "24.10"

- name: Report RoCE readiness without failing the play
  gpufleet.cluster.rdma_validate:
    link_layer: Ethernet
    check_counters: true
    fail_on: never
  register: rdma

- name: Show failing checks
  ansible.builtin.debug:
    msg: "{{ rdma.checks | selectattr('status', 'equalto', 'fail') | map(attribute='message') | list }}"
"""

RETURN = r"""
checks:
  description: One entry per check.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable dotted check id.
      type: str
      returned: always
      sample: rdma.port.state
    target:
      description: C(node), a device (C(mlx5_0)) or a port (C(mlx5_0/1)).
      type: str
      returned: always
      sample: mlx5_0/1
    status:
      description: V(pass), V(warn), V(fail) or V(skip).
      type: str
      returned: always
      sample: pass
    message:
      description: Human readable result.
      type: str
      returned: always
      sample: ACTIVE
    observed:
      description: What was found.
      type: raw
      returned: when relevant
      sample: ACTIVE
    expected:
      description: What was required.
      type: raw
      returned: when relevant
      sample: ACTIVE
summary:
  description: Number of checks per status.
  returned: always
  type: dict
  sample: {"pass": 50, "warn": 0, "fail": 0, "skip": 1}
healthy:
  description: True when no check has status V(fail).
  returned: always
  type: bool
  sample: true
ansible_facts:
  description: The facts the checks used.
  returned: always
  type: dict
  contains:
    mlx5:
      description: Same structure as C(ansible_facts.mlx5) of M(gpufleet.cluster.mlx5_facts).
      type: dict
      returned: always
      sample: {"loaded": true, "version": "24.10-1.1.4", "driver_source": "ofed", "pci_functions": 10}
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import RDMA
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import module_argspec, single_family_work

ARGUMENT_SPEC = module_argspec(RDMA)


def main():
    run_module(ARGUMENT_SPEC, single_family_work(RDMA))


if __name__ == "__main__":
    main()
