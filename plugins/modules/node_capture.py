#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_capture
short_description: Capture what gpufleet reads on a node, pseudonymised, as an archive that replays
version_added: 0.1.0
description:
  - >-
    Records exactly what the collection's read-only modules read (M(gpufleet.cluster.gpu_facts),
    M(gpufleet.cluster.mlx5_facts), M(gpufleet.cluster.topology_facts), M(gpufleet.cluster.node_validate)):
    the sysfs and procfs files of PCI functions, RDMA devices and ports, kernel modules, huge pages,
    IRQ affinity, C(/proc/driver/nvidia), the tuned profile and the kubelet configuration files; every
    NVML query the GPU family makes with its answer or error, written as a scenario of the test
    suite's fake NVML (C(nvml.json)); the kernel-log lines the XID check uses (C(NVRM) lines of the
    window); the output of C(ofed_info -s).
  - >-
    The archive (gzip'ed tar, mode 0600) holds C(gpufleet-capture/MANIFEST) (every member with its
    size and sha256, then what was skipped or unreadable and why), C(capture.json) (when, limits,
    counts, NVML and kernel-log status), C(root/) (the tree, for option O(root) of the other
    modules), C(nvml.json) and C(commands/). See C(docs/capture.md) for replaying it and turning
    it into a test fixture.
  - >-
    Safe to share. Serial numbers, GUIDs, MAC and hardware addresses, UUIDs, host names and IP
    addresses are replaced by stable pseudonyms of the same shape (the same value gets the same
    pseudonym within one capture, in file contents, path names, link targets, the NVML scenario,
    the log lines, C(MANIFEST) and C(capture.json)). Serial numbers are collected from the files,
    the kernel log (the driver's C(NVRM: GPU Board Serial Number) and C(GPU serial number is) lines)
    and NVML alike; host names from the capturing host and, below another root, from the image's
    C(etc/hostname), C(etc/hosts) (C(127.0.1.1)) and the kernel log's host fields. One value gets
    one pseudonym whatever its spelling (MACs with colons, dashes or dots, GUIDs as C(0x...), IPv6
    compressed or in eight groups), and no pseudonym equals a string already in the capture. A
    dotted quad in a version file or after a version word is a version and kept. Host names and
    O(redact) values are not applied to path components the readers look up (C(sys), C(dev),
    C(node), module names...). Nothing outside the list is read (no environment, no credentials).
  - >-
    Bounded. Each file is read at most once and at most O(max_file_bytes); symbolic links are
    stored relative and inside root (an absolute target below root is rewritten relative; a link
    out of root, into a loop or through a file becomes an empty placeholder listed in C(MANIFEST)),
    so the archive unpacks with Python's C(tarfile) C(data) filter, and followed only inside root
    and the captured trees; FIFOs and sockets are
    skipped, device nodes get an empty stand-in. Paths are opened from root one component at a
    time with C(O_NOFOLLOW), so a tree changing during the capture cannot lead outside root; the
    kernel log file follows the same link rule. A file cut at O(max_file_bytes) also loses the
    token the cut split (listed C(truncated)); a name longer than 255 bytes once pseudonymised is
    shortened (listed C(shortened)). A capture exceeding O(max_entries) or
    O(max_total_bytes) fails naming the option.
  - >-
    In check mode everything is read and nothing is written (C(changed) says an archive would be).
author:
  - gpufleet contributors (@gpufleet)
options:
  dest:
    description: The archive to write on the node (its directory must exist). C(playbooks/capture.yml)
      writes it to a temporary directory and fetches it.
    type: path
    required: true
  root:
    description: The filesystem root to capture (C(/), a mounted node image, a fixture tree).
    type: path
    default: /
  nvml:
    description: Record the GPU family's NVML queries (only when an NVIDIA GPU is on the PCI bus).
    type: bool
    default: true
  nvml_binding_path:
    description: A directory searched first for the NVML Python binding (as the GPU family's option).
    type: path
  xid_source:
    description: Where the kernel log is read (as the GPU family's option C(xid_source)).
    type: str
    default: auto
  xid_window_hours:
    description: How far back kernel-log lines are kept.
    type: float
    default: 24.0
  kubelet_config:
    description: The kubelet configuration file (as the tuning family's option).
    type: str
    default: /var/lib/kubelet/config.yaml
  kubelet_config_dir:
    description: The kubelet drop-in directory (its C(*.conf) files are captured).
    type: str
    default: /var/lib/kubelet/config.d
  ofed_info:
    description: The C(ofed_info) executable; unset, it is searched on PATH when O(root) is C(/).
    type: path
  redact:
    description: More values to replace by pseudonyms wherever they appear (inventory names,
      cluster names). The node's own host names always are.
    type: list
    elements: str
    default: []
  max_file_bytes:
    description: At most this many bytes of one file (the sysfs reader's own limit); a file cut
      here also loses the partial token at the cut (at most 256 bytes), listed in C(MANIFEST).
    type: int
    default: 65536
  max_entries:
    description: At most this many entries (files, directories, links) in the archive.
    type: int
    default: 200000
  max_total_bytes:
    description: At most this many bytes of file contents.
    type: int
    default: 67108864
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Only verified on fixture trees and the fake NVML (C(tests/unit/test_node_capture.py)), never on a
    real GPU node.
"""

EXAMPLES = r"""
- name: Capture the node
  gpufleet.cluster.node_capture:
    dest: /tmp/capture.tar.gz
    redact: ["{{ inventory_hostname }}"]

- name: Capture a mounted image without NVML
  gpufleet.cluster.node_capture:
    dest: /srv/captures/image.tar.gz
    root: /mnt/node-image
    nvml: false
"""

RETURN = r"""
dest:
  description: The archive.
  returned: always
  type: str
entries:
  description: Members of the archive (MANIFEST excluded).
  returned: always
  type: int
files_read:
  description: Files read below root (each once).
  returned: always
  type: int
bytes:
  description: Bytes of file contents captured.
  returned: always
  type: int
skipped_paths:
  description: Paths left out or replaced by an empty placeholder (not regular files, links leaving root
    or the captured trees, links into a loop), listed in the MANIFEST.
  returned: always
  type: int
unreadable:
  description: Paths that could not be read (listed in the MANIFEST with the reason; they replay as absent).
  returned: always
  type: int
pseudonymised:
  description: How many distinct values of each kind were replaced (C(guid), C(mac), C(uuid), C(ipv4), C(hostname), ...).
  returned: always
  type: dict
nvml:
  description: Whether NVML was recorded (C(recorded)), the number of calls, devices, notes on answers
    a scenario cannot express, or why not.
  returned: always
  type: dict
kernel_log:
  description: Whether the kernel log was read (C(recorded)), its origin and the number of lines kept, or the error.
  returned: always
  type: dict
captured_at:
  description: UTC time of the capture (ISO 8601).
  returned: always
  type: str
elapsed_ms:
  description: Time the capture took.
  returned: always
  type: float
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.capture.capture import node_capture_work
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ROOT_OPTION, run_module

ARGUMENT_SPEC = dict(
    dest=dict(type="path", required=True),
    root=ROOT_OPTION,
    nvml=dict(type="bool", default=True),
    nvml_binding_path=dict(type="path"),
    xid_source=dict(type="str", default="auto"),
    xid_window_hours=dict(type="float", default=24.0),
    kubelet_config=dict(type="str", default="/var/lib/kubelet/config.yaml"),
    kubelet_config_dir=dict(type="str", default="/var/lib/kubelet/config.d"),
    ofed_info=dict(type="path"),
    redact=dict(type="list", elements="str", default=[]),
    max_file_bytes=dict(type="int", default=65536),
    max_entries=dict(type="int", default=200000),
    max_total_bytes=dict(type="int", default=67108864),
)


def main():
    run_module(ARGUMENT_SPEC, node_capture_work)


if __name__ == "__main__":
    main()
