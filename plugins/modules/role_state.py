#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: role_state
short_description: Verify or record the converged-role stamps against the node's actual state
version_added: 0.1.0
description:
  - "The node side of the converged-role skip (C(common_internal) entry points C(state_read) and
    C(state_write), docs/performance.md). A stamp in O(path) says that a role converged with an
    inputs digest and records a snapshot of what the role declares it manages on the node (the
    fact C(<role>_managed_state)): what is at each file's path, symlinks not followed (a regular
    file's sha256, mode, owner and group; a symlink's target, owner and group and the file it
    points to; or its absence) and the installed version of each package (or its absence), for
    each architecture it is installed for (C(libc6:amd64), C(libc6:i386): a change to either is
    drift)."
  - "O(action=verify) takes the snapshot again, in one module call for all roles, and returns per
    role the differences (drift): a file missing, changed, with another mode, owner or group,
    replaced by a symlink (or a symlink by a file, or pointing elsewhere), unreadable; a package
    removed or at another version. Fail closed: anything that cannot be observed, a stamp
    without a snapshot (or with an empty one) and a state file that the strict reader refuses
    (named in O(path)'s problem with the field) count as drift, never as verified. A state file
    that is not a regular file (a FIFO, socket, device or symbolic link: never waited on nor
    followed) or is larger than 16 MiB is unreadable the same way, named in the problem. Read-only."
  - O(action=record) takes the snapshot of each role of O(stamps) and writes its stamp, removes the
    stamps of O(forget) and keeps the others (atomic write, C(module_utils/core/state_files.py)).
author:
  - gpufleet contributors (@gpufleet)
options:
  action:
    description: C(verify) the stamps, or C(record) stamps.
    type: str
    choices: [verify, record]
    required: true
  path:
    description: The state file.
    type: path
    default: /var/lib/gpufleet/role-state.json
  roles:
    description: With O(action=verify), the roles whose stamps are verified (unset, all of them).
    type: list
    elements: str
  stamps:
    description: "With O(action=record), the roles to stamp and their inputs digests, C({<role>: <digest>})."
    type: dict
  managed:
    description:
      - "With O(action=record), what each role of O(stamps) declares it manages, C({<role>: {files:
        [<absolute path>], packages: [<name>]}}) (the fact C(<role>_managed_state)). A role
        missing here (or with an empty value, or declaring no file and no package), with a
        malformed declaration or whose state cannot be observed now is stamped without a
        snapshot, so it is never verified (it runs)."
    type: dict
    default: {}
  forget:
    description: With O(action=record), roles whose stamps are removed.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Which stamps still hold on this node
  gpufleet.cluster.role_state:
    action: verify
    roles: [nvidia_driver, container_runtime]
  register: verified

- name: Stamp nvidia_driver with a snapshot of what it manages
  gpufleet.cluster.role_state:
    action: record
    stamps:
      nvidia_driver: "{{ digest }}"
    managed:
      nvidia_driver:
        files: [/etc/modprobe.d/blacklist-nouveau.conf]
        packages: [nvidia-smi]
"""

RETURN = r"""
path:
  description: The state file.
  returned: always
  type: str
problem:
  description: Why the state file could not be read (then no stamp holds), else null.
  returned: always
  type: str
roles:
  description:
    - "With O(action=verify): C({<role>: {inputs: <digest>, verified: <bool>, drift: [<what
      differs>]}}) for each stamp of the file (of O(roles))."
  returned: when action is verify
  type: dict
  sample:
    nvidia_driver:
      inputs: 3f5c0e...
      verified: false
      drift: [/etc/modprobe.d/blacklist-nouveau.conf missing]
recorded:
  description: With O(action=record), the roles stamped with a snapshot.
  returned: when action is record
  type: list
  elements: str
unrecorded:
  description: With O(action=record), the roles stamped without a snapshot and why.
  returned: when action is record
  type: dict
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.role_stamps import role_state_work

ARGUMENT_SPEC = dict(
    action=dict(type="str", choices=["verify", "record"], required=True),
    path=dict(type="path", default="/var/lib/gpufleet/role-state.json"),
    roles=dict(type="list", elements="str"),
    stamps=dict(type="dict"),
    managed=dict(type="dict", default={}),
    forget=dict(type="list", elements="str", default=[]),
)


def main():
    run_module(ARGUMENT_SPEC, role_state_work)


if __name__ == "__main__":
    main()
