#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: state_file
short_description: Write one of gpufleet's state files atomically, with its mode and owner
version_added: 0.1.0
description:
  - The one writer of the files under C(/var/lib/gpufleet) (role stamps, reboot and restart
    markers, the rolling upgrade's state), the same code the node health agent writes its files
    with (C(module_utils/core/state_files.py)). It writes a temporary file in the same directory,
    fsyncs it, sets mode and owner, and renames it. A reader sees the old or the new content, never a part; a full disk leaves
    the old content.
  - "Either the whole O(content), or one line of a marker file shared by roles (O(marker_owner)
    names the line C(<owner>: <text>), set, or removed when O(marker_text) is empty; the file is
    removed when no line is left)."
  - Nothing is written when the file already is as wanted (content, mode, owner, group).
  - "O(state=read) writes nothing: it reads the file's text through the strict reader side of the
    same code (C(read_record)): only a regular file is read, never a symbolic link (not followed),
    a FIFO, socket or device (never waited on) or a directory, and no more than O(max_bytes); such
    a file is unreadable, named in RV(problem). With O(set_aside) (never in check mode) an
    unreadable file is renamed C(<path>.damaged-<UTC time>) so that the record can be written anew."
author:
  - gpufleet contributors (@gpufleet)
options:
  path:
    description: The file (absolute). Its directory is created (mode 0755) when missing.
    type: path
    required: true
  content:
    description: The whole content. Mutually exclusive with O(marker_owner).
    type: str
  marker_owner:
    description: The owner of one line of a marker file (for example C(nvidia_driver)).
    type: str
  marker_text:
    description: The text of O(marker_owner)'s line; empty removes the line.
    type: str
    default: ""
  state:
    description: C(absent) removes the file; C(read) reads it (RV(content), RV(problem)) and writes nothing.
    type: str
    choices: [present, absent, read]
    default: present
  max_bytes:
    description: With O(state=read), a larger file is unreadable.
    type: int
    default: 16384
  set_aside:
    description: With O(state=read), rename an unreadable file aside (not in check mode).
    type: bool
    default: false
  mode:
    description: The file's mode, an octal string.
    type: str
    default: "0644"
  owner:
    description: The file's owner (name or number); unset keeps the writer's.
    type: str
  group:
    description: The file's group (name or number); unset keeps the writer's.
    type: str
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Stamp the roles that converged
  gpufleet.cluster.state_file:
    path: /var/lib/gpufleet/role-state.json
    content: "{{ {'roles': stamps} | to_nice_json }}\n"
    owner: root
    group: root

- name: Read the admission record (a FIFO, link or oversize file is unreadable, set aside)
  gpufleet.cluster.state_file:
    path: /var/lib/gpufleet/admission.json
    state: read
    set_aside: true
  register: admission_file

- name: Record why the node needs a reboot
  gpufleet.cluster.state_file:
    path: /var/lib/gpufleet/reboot-required
    marker_owner: nvidia_driver
    marker_text: driver 580.95.05 installed, 570.172.08 loaded
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
content:
  description: The content after the run (C(null) when the file is absent); with O(state=read), the
    text read (C(null) when absent or unreadable).
  returned: always
  type: str
exists:
  description: With O(state=read), whether anything was at O(path) (a symbolic link included).
  returned: when O(state=read)
  type: bool
problem:
  description: With O(state=read), why the file is unreadable (names it), or C(null).
  returned: when O(state=read)
  type: str
set_aside:
  description: With O(state=read), whether the unreadable file was renamed aside.
  returned: when O(state=read)
  type: bool
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import state_file_work

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    content=dict(type="str"),
    marker_owner=dict(type="str"),
    marker_text=dict(type="str", default=""),
    state=dict(type="str", choices=["present", "absent", "read"], default="present"),
    max_bytes=dict(type="int", default=16384),
    set_aside=dict(type="bool", default=False),
    mode=dict(type="str", default="0644"),
    owner=dict(type="str"),
    group=dict(type="str"),
)


def main():
    run_module(ARGUMENT_SPEC, state_file_work, mutually_exclusive=[("content", "marker_owner")])


if __name__ == "__main__":
    main()
