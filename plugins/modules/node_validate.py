#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_validate
short_description: Validate a whole GPU + RDMA node in one task (gpu_health + rdma_validate)
version_added: 0.1.0
description:
  - Gathers the facts of M(gpufleet.cluster.gpu_facts) and M(gpufleet.cluster.mlx5_facts) and runs
    the checks of M(gpufleet.cluster.gpu_health) and M(gpufleet.cluster.rdma_validate) in one module
    execution, so a fleet sweep costs one task per host.
  - The rules are those of the single modules (shared code in C(module_utils)); the result for a
    family is the same as that module's. Each sysfs file is read at most once, NVML is
    initialised once, and no command is run where sysfs has the answer (the kernel log for XIDs
    and C(ofed_info -s) for the installed OFED package are the only commands, as in the single
    modules).
  - "Returns the union of the checks (gpu first, then rdma), C(summary), C(healthy), the facts
    C(ansible_facts.nvidia) and C(ansible_facts.mlx5), C(gpus), C(nvml), a per-family
    C(readiness) and a one-line C(msg) with each family's status and reason (see RV(msg))."
  - Read-only; never changes the host. Verified against fixture trees and a fake NVML binding (see
    C(tests/fixtures)), and with the real nvidia-ml-py on a host without GPU or HCA.
author:
  - gpufleet contributors (@gpufleet)
requirements:
  - nvidia-ml-py on the managed host (only needed when NVIDIA GPUs are present)
options:
  agent_health_file:
    description:
      - The node health agent's C(health.json) to read in the same run (no task of its own per node), returned as
        RV(agent_health_file) for the check C(agent.health) that C(playbooks/validate.yml) makes on the controller
        (filter P(gpufleet.cluster.agent_health_checks#filter)). Unset (the default) reads nothing. The file is not judged
        here and does not change RV(checks).
    type: path
    version_added: 0.3.0
  from_tier:
    description:
      - V(true) fills O(root), O(gpu), O(rdma) and O(tuning) from the node's C(gpufleet_*) tier variables
        (C(docs/contracts.md), "gpufleet_* tier"), as the lookup C(gpufleet.cluster.node_validate_options) maps them
        (C(gpufleet_gpu_count) -> O(gpu.expected_count), C(gpufleet_expected_hcas) -> O(rdma.expected_devices), ...);
        an unset O(root) is C(gpufleet_sysfs_root).
      - Options given in the task win over the tier's, key by key; V(false) for O(gpu), O(rdma) or O(tuning) turns that
        family off (as O(gpu.enabled=false)).
      - Done by the action plugin on the controller before the module runs (C(invocation) shows the options used);
        the module itself ignores this option.
    type: bool
    default: false
    version_added: 0.3.0
  from_validate_vars:
    description:
      - "V(true) takes what C(playbooks/validate.yml) sets with its inventory variables, on the controller: O(root),
        O(gpu), O(rdma) and O(tuning) not given in the task are the variables C(gpufleet_validate_root),
        C(gpufleet_validate_gpu), C(gpufleet_validate_rdma) and C(gpufleet_validate_tuning) (unset: O(root) null,
        a family V({})); the variable C(gpufleet_validate_environment) is added to the task's environment (after
        the play's and the block's, as the task's own C(environment)); an unset O(agent_health_file) is
        C(/var/lib/gpufleet/health.json) on a host of the group C(gpu_nodes) whose tier C(gpufleet_health_agent) is
        true, else null. Applied before O(from_tier), so the variables win over the tier, key by key."
      - Done by the action plugin before the module runs; the module itself ignores this option.
    type: bool
    default: false
    version_added: 0.3.0
  root:
    description:
      - Directory used as the filesystem root for every read (C(<root>/sys/...), C(<root>/proc/...),
        C(<root>/dev/...), log files). NVML always talks to the running driver.
  gpu:
    description:
      - The GPU family (the checks of M(gpufleet.cluster.gpu_health)), with its options other than
        O(root) and O(fail_on) (same types and defaults), plus O(gpu.enabled).
      - Ansible checks the sub-options and names the offending one (for example C(expected_count)
        C(found in 'gpu')); the family's own rules name it as C(option gpu.expected_count ...).
    type: dict
    suboptions:
      enabled:
        description: V(false) does not run the GPU family (no C(ansible_facts.nvidia), no C(gpu.*) checks).
        type: bool
        default: true
      expected_count:
        description: See O(gpufleet.cluster.gpu_health#module:expected_count).
        type: int
      expected_driver_version:
        description: See O(gpufleet.cluster.gpu_health#module:expected_driver_version).
        type: str
      require_persistence_mode:
        description: See O(gpufleet.cluster.gpu_health#module:require_persistence_mode).
        type: bool
        default: false
      require_ecc:
        description: See O(gpufleet.cluster.gpu_health#module:require_ecc).
        type: bool
        default: true
      temperature_margin_c:
        description: See O(gpufleet.cluster.gpu_health#module:temperature_margin_c).
        type: int
        default: 5
      xid_source:
        description: See O(gpufleet.cluster.gpu_health#module:xid_source).
        type: str
        default: auto
      xid_window_hours:
        description: See O(gpufleet.cluster.gpu_health#module:xid_window_hours).
        type: float
        default: 24
      xid_fatal:
        description: See O(gpufleet.cluster.gpu_health#module:xid_fatal).
        type: list
        elements: int
        default: [46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 155, 156, 158]
      xid_ignore:
        description: See O(gpufleet.cluster.gpu_health#module:xid_ignore).
        type: list
        elements: int
        default: [14, 37, 38, 43, 44, 45, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 157, 160, 161]
      nvml_binding_path:
        description: See O(gpufleet.cluster.gpu_health#module:nvml_binding_path).
        type: path
      expected_mig:
        description: See O(gpufleet.cluster.gpu_health#module:expected_mig).
        type: list
        elements: dict
  rdma:
    description:
      - The RDMA family (the checks of M(gpufleet.cluster.rdma_validate)), with its options other
        than O(root) and O(fail_on) (same types and defaults), plus O(rdma.enabled).
      - "Ansible checks the sub-options and names the offending one; the family's own rules name it as
        C(option rdma.min_rate_gbps: ...)."
    type: dict
    suboptions:
      enabled:
        description: V(false) does not run the RDMA family (no C(ansible_facts.mlx5), no C(rdma.*) checks).
        type: bool
        default: true
      devices:
        description: See O(gpufleet.cluster.rdma_validate#module:devices).
        type: list
        elements: str
      link_layer:
        description: See O(gpufleet.cluster.rdma_validate#module:link_layer).
        type: str
        default: any
        choices: [any, InfiniBand, Ethernet]
      expected_devices:
        description: See O(gpufleet.cluster.rdma_validate#module:expected_devices).
        type: int
      min_rate_gbps:
        description: See O(gpufleet.cluster.rdma_validate#module:min_rate_gbps).
        type: float
      required_modules:
        description: See O(gpufleet.cluster.rdma_validate#module:required_modules).
        type: list
        elements: str
        default: [ib_core, ib_uverbs, rdma_ucm, mlx5_core, mlx5_ib]
      require_peermem:
        description: See O(gpufleet.cluster.rdma_validate#module:require_peermem).
        type: bool
        default: false
      min_ofed_version:
        description: See O(gpufleet.cluster.rdma_validate#module:min_ofed_version).
        type: str
      require_roce_v2_gid:
        description: See O(gpufleet.cluster.rdma_validate#module:require_roce_v2_gid).
        type: bool
        default: true
      check_counters:
        description: See O(gpufleet.cluster.rdma_validate#module:check_counters).
        type: bool
        default: false
      max_symbol_errors:
        description: See O(gpufleet.cluster.rdma_validate#module:max_symbol_errors).
        type: int
        default: 10
      max_link_downed:
        description: See O(gpufleet.cluster.rdma_validate#module:max_link_downed).
        type: int
        default: 10
  tuning:
    description:
      - The tuning family (drift of OS tuning from what was configured, C(tuning.*) checks). Every check
        is opt-in; an option left unset adds no check. A reading that is impossible fails its check.
    type: dict
    suboptions:
      enabled:
        description: V(false) does not run the tuning family.
        type: bool
        default: true
      hugepages_2m:
        description:
          - 2 MiB huge pages the node should have (C(/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)).
          - Fewer fail C(tuning.hugepages) (target C(2048kB)), more warn.
        type: int
      hugepages_1g:
        description: 1 GiB huge pages the node should have (C(hugepages-1048576kB)); as O(tuning.hugepages_2m).
        type: int
      tuned_profile:
        description:
          - The tuned profile that should be active, as tuned records it in C(/etc/tuned/active_profile)
            (C(tuning.tuned_profile)); several merged profiles separated by one space.
        type: str
      kubelet_policy:
        description:
          - The kubelet's CPU, topology and memory manager settings that should be in force
            (C(tuning.kubelet_policy), one check per field set, target the KubeletConfiguration field).
          - Compared with O(tuning.kubelet_config) merged with the C(*.conf) drop-ins of O(tuning.kubelet_config_dir)
            in lexical order; a field set nowhere has the kubelet's default. An unreadable file fails (target C(config)).
        type: dict
        suboptions:
          cpu_manager_policy:
            description: C(cpuManagerPolicy).
            type: str
            choices: [none, static]
          memory_manager_policy:
            description: C(memoryManagerPolicy).
            type: str
            choices: [None, Static]
          topology_manager_policy:
            description: C(topologyManagerPolicy).
            type: str
            choices: [none, best-effort, restricted, single-numa-node]
          topology_manager_scope:
            description: C(topologyManagerScope).
            type: str
            choices: [container, pod]
          reserved_system_cpus:
            description: C(reservedSystemCPUs), compared as CPU sets.
            type: str
      kubelet_config:
        description: The kubelet's C(--config) file, below O(root).
        type: str
        default: /var/lib/kubelet/config.yaml
      kubelet_config_dir:
        description: The kubelet's C(--config-dir), below O(root).
        type: str
        default: /var/lib/kubelet/config.d
      irq_affinity:
        description:
          - V(true) checks that every MSI/MSI-X interrupt of each RDMA device runs on CPUs of the device's NUMA node
            (C(/proc/irq/<n>/smp_affinity_list) within C(device/local_cpulist); C(tuning.irq_affinity), target the device).
        type: bool
      irq_devices:
        description: RDMA devices O(tuning.irq_affinity) checks; all of C(/sys/class/infiniband) when unset.
        type: list
        elements: str
notes:
  - C(ofed_info) is searched on E(PATH) only when O(root=/), as in M(gpufleet.cluster.mlx5_facts).
  - With O(root) other than C(/) and C(gpu.xid_source=auto), XIDs are read from the log files below
    O(root), as in M(gpufleet.cluster.gpu_health).
seealso:
  - module: gpufleet.cluster.gpu_health
  - module: gpufleet.cluster.rdma_validate
  - module: gpufleet.cluster.gpu_facts
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
    details: Returns C(ansible_facts.nvidia) and C(ansible_facts.mlx5).
"""

EXAMPLES = r"""
- name: Validate a DGX H100 node (8 GPUs, 8 NDR HCAs + a RoCE bond, GPUDirect RDMA)
  gpufleet.cluster.node_validate:
    gpu:
      expected_count: 8
      expected_driver_version: "580"
      require_persistence_mode: true
    rdma:
      expected_devices: 9
      min_rate_gbps: 200
      require_peermem: true
      min_ofed_version: "24.10"

- name: RDMA only (a storage node without GPUs), report without failing the play
  gpufleet.cluster.node_validate:
    gpu:
      enabled: false
    fail_on: never
  register: node

- name: Print the readiness line
  ansible.builtin.debug:
    msg: "{{ node.msg }}"

- name: Inspect a mounted node image offline
  gpufleet.cluster.node_validate:
    root: /mnt/node-image
    gpu:
      xid_source: none
"""

RETURN = r"""
checks:
  description: The checks of M(gpufleet.cluster.gpu_health) then those of M(gpufleet.cluster.rdma_validate).
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable dotted check id (C(gpu.*) or C(rdma.*)).
      type: str
      returned: always
      sample: rdma.port.state
    target:
      description: C(node), a GPU (C(gpu3)), an RDMA device (C(mlx5_0)) or port (C(mlx5_0/1)).
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
    expected:
      description: What was required.
      type: raw
      returned: when relevant
summary:
  description: Number of checks per status.
  returned: always
  type: dict
  sample: {"pass": 152, "warn": 0, "fail": 0, "skip": 10}
healthy:
  description: True when no check has status V(fail).
  returned: always
  type: bool
  sample: true
msg:
  description:
    - One line per family with its status and the reason (the first failing or warning check, the
      most common skip reason, or a pass count). On failure, the checks at or above O(fail_on).
  returned: always
  type: str
  sample: "gpu: skip (no NVIDIA GPU on the PCI bus); rdma: skip (no RDMA devices; mlx5_core not loaded)"
readiness:
  description: Per family (C(gpu), C(rdma)) the status, the summary of its checks and the message of C(msg).
  returned: always
  type: dict
  contains:
    gpu:
      description: C(status) (V(fail), V(warn), V(pass), V(skip) when every check skipped, V(off) when
        not run), C(summary) and C(message).
      type: dict
      returned: always
    rdma:
      description: Same as C(gpu), for the RDMA family.
      type: dict
      returned: always
  sample:
    gpu: {status: skip, summary: {pass: 0, warn: 0, fail: 0, skip: 17}, message: no NVIDIA GPU on the PCI bus}
    rdma: {status: skip, summary: {pass: 0, warn: 0, fail: 0, skip: 5},
           message: "no RDMA devices; mlx5_core not loaded"}
gpus:
  description: One entry per GPU NVML enumerates, as returned by M(gpufleet.cluster.gpu_health); empty
    when the GPU family is not run.
  returned: always
  type: list
  elements: dict
nvml:
  description: NVML state as returned by M(gpufleet.cluster.gpu_health) (C(available), C(error),
    C(driver_version), C(cuda_driver_version)); null when the GPU family is not run.
  returned: always
  type: dict
agent_health_file:
  description:
    - With O(agent_health_file), the file in the shape C(ansible.builtin.slurp) returns; C(content) (base64) and
      C(encoding), or C(failed) and C(msg) when it could not be read (C(file not found) and the path when absent).
  returned: when O(agent_health_file) is set
  type: dict
  sample: {content: eyJhZ2VudCI6IHsiaGVhbHRoeSI6IHRydWV9fQ==, encoding: base64, source: /var/lib/gpufleet/health.json}
elapsed_ms:
  description: Time spent in the module's logic (option checks, sysfs reads, NVML queries, checks) in
    milliseconds; interpreter start-up, imports and Ansible's argument parsing are not included.
  returned: success
  type: float
  sample: 41.3
ansible_facts:
  description: The facts the checks used.
  returned: always
  type: dict
  contains:
    nvidia:
      description: Same as C(ansible_facts.nvidia) of M(gpufleet.cluster.gpu_facts); absent with O(gpu.enabled=false).
      type: dict
      returned: when the GPU family runs
    mlx5:
      description: Same as C(ansible_facts.mlx5) of M(gpufleet.cluster.mlx5_facts); absent with O(rdma.enabled=false).
      type: dict
      returned: when the RDMA family runs
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    node_module_argspec,
    node_module_class,
    node_work,
)

ARGUMENT_SPEC = node_module_argspec(FAMILIES)


def main():
    run_module(ARGUMENT_SPEC, node_work(FAMILIES), module_class=node_module_class(FAMILIES))


if __name__ == "__main__":
    main()
