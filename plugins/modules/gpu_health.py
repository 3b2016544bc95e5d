#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
module: gpu_health
short_description: Check NVIDIA GPU health over NVML (ECC, row remapping, NVLink, fabric, XIDs, ...)
description:
  - Compares the GPUs on the PCI bus with those NVML enumerates and runs one check per rule and
    per GPU (ECC, retired pages, row remapping, temperature, clock slowdown reasons, PCIe link
    capability, NVLink, persistence and MIG modes, NVSwitch fabric registration, NVML recovery
    action) and checks the kernel log for XID errors.
  - Results follow the gpufleet check model; C(target) is C(node) or C(gpu<NVML index>).
    C(skip) means not applicable, not supported by this GPU, driver or binding (NVML NotSupported,
    FunctionNotFound, or a function missing from an older nvidia-ml-py), or not measurable; it is
    never a defect.
  - A host without an NVIDIA GPU on the PCI bus gets C(gpu.nvml) and every other check skipped, and
    NVML is not loaded at all; only O(expected_count) greater than 0 makes C(gpu.count) fail there.
  - Uses the official binding C(nvidia-ml-py) (imported as C(pynvml)) on the managed host, imported
    only when a GPU is present. NVML queries the running driver; O(root) only redirects sysfs and
    log file reads.
  - Verified against a fake NVML binding and fixture trees (DGX H100, GeForce, nouveau) and with the
    real binding on a host without a driver; the rules follow NVIDIA's documentation.
version_added: 0.1.0
author: gpufleet contributors (@gpufleet)
requirements:
  - nvidia-ml-py on the managed host (only needed when NVIDIA GPUs are present)
options:
  root:
    description: Filesystem root the module reads C(sys/...) and log files below.
  expected_count:
    description: Minimum number of GPUs NVML must enumerate (C(gpu.count) fails below it).
    type: int
  expected_driver_version:
    description:
      - Expected driver version as a prefix of dotted components; C(580) and C(580.95) match
        C(580.95.05), C(58) does not. Unset, C(gpu.driver_version) is skipped.
    type: str
  require_persistence_mode:
    description: Persistence mode off fails C(gpu.persistence) instead of warning.
    type: bool
    default: false
  require_ecc:
    description: ECC disabled makes C(gpu.ecc.mode) warn.
    type: bool
    default: true
  temperature_margin_c:
    description: C(gpu.temperature) warns this many degrees Celsius below the slowdown threshold.
    type: int
    default: 5
  xid_source:
    description:
      - Where XID errors are read from. C(journal) runs C(journalctl -k --since @<epoch> -o short-iso);
        C(dmesg) runs C(dmesg --time-format iso); C(none) disables the scan; any other value is the
        path of a kernel log file (read below O(root)).
      - C(auto) tries the journal, then dmesg. With O(root) other than C(/) it reads
        C(var/log/kern.log), C(var/log/messages) or C(var/log/syslog) below O(root) instead, since
        the running kernel's log is not that node's.
      - Lines whose timestamp cannot be read (plain C(dmesg) output with boot-relative stamps) are
        counted as inside the window, so an XID is never silently dropped.
    type: str
    default: auto
  xid_window_hours:
    description: Only XIDs logged within this many hours count.
    type: float
    default: 24
  xid_fatal:
    description:
      - XID codes that fail C(gpu.xid). A code in both lists is treated as fatal.
      - The default is every XID whose immediate action in NVIDIA's XID catalog resets the GPU,
        reboots the node or starts the double-bit ECC / NVLink workflows (see docs/contracts.md, "XID policy").
    type: list
    elements: int
    default: [46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 155, 156, 158]
  xid_ignore:
    description:
      - XID codes that pass C(gpu.xid). Other codes warn (for example C(RESTART_APP) XIDs such as 13, 31 and 94).
      - The default is every XID NVIDIA's XID catalog says to ignore, and 45 (it follows the XIDs logged with it).
    type: list
    elements: int
    default: [14, 37, 38, 43, 44, 45, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 157, 160, 161]
  nvml_binding_path:
    description:
      - A directory on the managed host searched first for the NVML Python binding (C(pynvml)), for
        hosts where nvidia-ml-py is installed outside the module interpreter's own search path
        (a dedicated virtualenv or vendored directory).
      - Unlike C(PYTHONPATH) in the task's C(environment), this also works when modules run in an
        interpreter that is already started (Mitogen's strategies; see docs/performance.md).
      - The module fails naming this option when it is not a directory. Unset, the interpreter's
        search path is used.
    type: path
  expected_mig:
    description:
      - The MIG layout the GPUs must have, in the format of NVIDIA mig-parted's configuration, as the
        entries of one config, each with C(devices) (C(all) or a list of NVML indices),
        C(mig-enabled) and C(mig-devices) (GPU-instance profile name such as C(1g.10gb) -> count).
      - C(gpu.mig) compares each GPU named by an entry with the live MIG mode and GPU instances and
        fails naming expected and found; a GPU no entry names is not compared. Unset, only the MIG
        mode is reported (a pending change warns).
      - Checked only; applying a layout (drain, reset, mig-parted) is not done by this module.
      - node_validate with C(from_tier) fills it from the tier variable C(gpufleet_mig_layout)
        (a config name of C(gpufleet_mig_configs) or an explicit list); see docs/contracts.md, MIG layout.
    type: list
    elements: dict
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.validation.fail_on
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.attributes.facts
attributes:
  facts:
    support: full
    details: Returns C(ansible_facts.nvidia), the facts the checks used.
notes:
  - "Check ids: C(gpu.nvml), C(gpu.count), C(gpu.driver_version) (target C(node)); C(gpu.lost),
    C(gpu.ecc.volatile_uncorrectable), C(gpu.ecc.mode), C(gpu.retired_pages), C(gpu.row_remap),
    C(gpu.temperature), C(gpu.clocks_event), C(gpu.pcie), C(gpu.nvlink), C(gpu.persistence),
    C(gpu.mig), C(gpu.fabric), C(gpu.recovery_action) (target C(gpuN)); C(gpu.xid) (target the GPU
    the XID names, or C(node))."
  - C(gpu.pcie) compares NVML's maximum link (device and slot) with the GPU's own capability
    (C(nvmlDeviceGetGpuMaxPcieLinkGeneration) and the function's sysfs C(max_link_width)). A current
    link below the maximum is normal power saving and passes.
seealso:
  - module: gpufleet.cluster.gpu_facts
"""

EXAMPLES = r"""
- name: Check the GPUs of a DGX H100 node
  gpufleet.cluster.gpu_health:
    expected_count: 8
    expected_driver_version: "580"
    require_persistence_mode: true

- name: Report only, never fail the play
  gpufleet.cluster.gpu_health:
    fail_on: never
    xid_window_hours: 72
  register: gpu

- name: Show the failed checks
  ansible.builtin.debug:
    msg: "{{ gpu.checks | selectattr('status', 'equalto', 'fail') | list }}"

- name: Read XIDs from a log file and treat XID 31 as fatal
  gpufleet.cluster.gpu_health:
    xid_source: /var/log/kern.log
    xid_fatal: [31, 48, 62, 64, 74, 79, 92, 94, 95, 109, 119, 120, 136, 140, 143, 155, 158]
    xid_ignore: [13, 43, 45, 68]
"""

RETURN = r"""
checks:
  description: One result per check and target.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable dotted check id.
      type: str
      returned: always
      sample: gpu.ecc.volatile_uncorrectable
    target:
      description: C(node) or C(gpu<NVML index>).
      type: str
      returned: always
      sample: gpu3
    status:
      description: C(pass), C(warn), C(fail) or C(skip).
      type: str
      returned: always
      sample: fail
    message:
      description: Human readable explanation.
      type: str
      returned: always
      sample: 2 volatile uncorrectable ECC error(s) since the driver loaded
    observed:
      description: Measured value, when there is one.
      type: raw
      returned: when measured
    expected:
      description: Expected value or bound, when there is one.
      type: raw
      returned: when relevant
summary:
  description: Number of checks per status.
  returned: always
  type: dict
  sample: {pass: 108, warn: 0, fail: 1, skip: 9}
healthy:
  description: True when no check failed.
  returned: always
  type: bool
nvml:
  description: NVML state.
  returned: always
  type: dict
  contains:
    available:
      description: NVML initialised.
      type: bool
      returned: always
    error:
      description: Why NVML is unavailable (library not found, driver not loaded, driver/library
        version mismatch, binding missing), or null.
      type: str
      returned: always
    driver_version:
      description: Driver version reported by NVML.
      type: str
      returned: always
      sample: "580.95.05"
    cuda_driver_version:
      description: Highest CUDA version the driver supports.
      type: str
      returned: always
      sample: "13.0"
ansible_facts:
  description: The facts the checks used.
  returned: always
  type: dict
  contains:
    nvidia:
      description: Same structure as C(ansible_facts.nvidia) of M(gpufleet.cluster.gpu_facts).
      type: dict
      returned: always
gpus:
  description: One entry per device NVML enumerates; values a GPU does not support are null.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
      returned: always
    uuid:
      description: GPU UUID.
      type: str
      returned: always
    name:
      description: Product name.
      type: str
      returned: always
    pci_bus_id:
      description: PCI address, normalised to the sysfs form.
      type: str
      returned: always
    lost:
      description: The GPU answered GpuIsLost or ResetRequired.
      type: bool
      returned: always
    temperature_c:
      description: Core temperature in degrees Celsius.
      type: int
      returned: unless lost
    slowdown_temperature_c:
      description: Slowdown threshold in degrees Celsius.
      type: int
      returned: unless lost
    ecc:
      description: ECC modes and volatile uncorrectable count.
      type: dict
      returned: unless lost
    retired_pages:
      description: Retired page counts (sbe, dbe, pending); null where row remapping replaced it.
      type: dict
      returned: unless lost
    row_remap:
      description: Remapped rows (correctable, uncorrectable, pending, failure).
      type: dict
      returned: unless lost
    clocks_event_reasons:
      description: Active clock event (throttle) reasons.
      type: list
      elements: str
      returned: unless lost
    pcie:
      description: Current and maximum link, and the GPU's own maximum.
      type: dict
      returned: unless lost
    nvlink:
      description: Supported, active and inactive NVLinks; null when unsupported or MIG is on.
      type: dict
      returned: unless lost
    persistence_mode:
      description: Persistence mode.
      type: bool
      returned: unless lost
    mig:
      description: Current and pending MIG mode; null when MIG is not supported.
      type: dict
      returned: unless lost
    fabric:
      description: NVSwitch fabric state and status; null without NVSwitch.
      type: dict
      returned: unless lost
    recovery_action:
      description: NVML recovery action (NONE, GPU_RESET, NODE_REBOOT, ...).
      type: str
      returned: unless lost
  sample:
    - {index: 0, uuid: GPU-7c2f1d3e-4b5a-6c7d-8e9f-a0b1c2d3e400, name: NVIDIA H100 80GB HBM3,
       pci_bus_id: "0000:18:00.0", lost: false, temperature_c: 34, persistence_mode: true}
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import GPU
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import module_argspec, single_family_work

ARGUMENT_SPEC = module_argspec(GPU)


def main():
    run_module(ARGUMENT_SPEC, single_family_work(GPU))


if __name__ == "__main__":
    main()
