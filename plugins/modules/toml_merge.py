#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function


DOCUMENTATION = r"""
---
module: toml_merge
short_description: Set keys of one table in a TOML file, keeping everything else as it is
version_added: 0.1.0
description:
  - Sets the keys in O(values) in the table O(table) of the TOML file O(path). Keys of that table
    not named in O(values), every other table, comments and layout are left untouched; only the
    lines of the keys that change are rewritten, and a missing table is inserted after its closest
    relative (or at the end of the file).
  - Meant for configuration files several tools edit, such as C(/etc/containerd/config.toml)
    (a runtime entry of the NVIDIA container toolkit next to another tool's runtimes).
  - Refuses, with an error naming the line, a table defined through dotted keys, an inline table
    or an array of tables, rather than writing a second definition.
  - Before the file is replaced, the new text is parsed (C(tomllib), or C(tomli) before Python 3.11) and
    must mean the original with O(values) set in O(table); otherwise the task fails naming the file
    and the key and the file is left untouched (also refused, by name, is a key that names an existing
    sub-table). A merge whose values are already there, in any spelling, changes nothing. Strings are
    written with every character TOML forbids raw (control characters, DEL) and U+0080-U+009F,
    U+2028, U+2029 escaped as C(\uXXXX). Without either parser the check is skipped and RV(toml_check)
    says so.
  - A symbolic link as O(path) is refused, naming the link and its target, and nothing is written; gpufleet
    edits only a regular file.
  - A file starting with a UTF-8 byte-order mark is refused (TOML does not allow one).
  - With O(validate) the new content is checked by a command (for example
    C(containerd --config %s config dump)) before it replaces the file.
author:
  - gpufleet contributors (@gpufleet)
options:
  path:
    description: The TOML file. Created when missing if O(create=true).
    type: path
    required: true
  table:
    description:
      - The table as a list of key parts, for example
        C([plugins, io.containerd.grpc.v1.cri, containerd, runtimes, nvidia]).
      - An empty list means the root table.
    type: list
    elements: str
    required: true
  values:
    description:
      - Keys and values to set. Values can be strings, booleans, integers, floats and lists of
        those; a nested table is set with its own O(table) path.
    type: dict
    required: true
  create:
    description: Create the file when it does not exist.
    type: bool
    default: true
  validate:
    description:
      - Command run on the new content before it replaces the file; C(%s) is the temporary file.
      - Not run in check mode.
    type: str
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.files
  - gpufleet.cluster.attributes
notes:
  - Values are compared by meaning for one-line scalars (C('x') equals C("x")); anything else is
    compared as text, so the first run may rewrite an equivalent multi-line value once.
attributes:
  check_mode:
    support: full
    details: Reports what would change without writing.
  diff_mode:
    support: full
    details: Shows the file before and after.
"""

EXAMPLES = r"""
- name: Add the NVIDIA runtime to containerd (config version 2)
  gpufleet.cluster.toml_merge:
    path: /etc/containerd/config.toml
    table: [plugins, io.containerd.grpc.v1.cri, containerd, runtimes, nvidia, options]
    values:
      BinaryName: /usr/bin/nvidia-container-runtime
      SystemdCgroup: true
    validate: containerd --config %s config dump
    mode: "0644"
"""

RETURN = r"""
changed_keys:
  description: Keys of the table that were added or changed.
  returned: always
  type: list
  elements: str
  sample: [BinaryName, SystemdCgroup]
table:
  description: The table as written in a TOML header.
  returned: always
  type: str
  sample: plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options
toml_check:
  description:
    - Present only when the result could not be parsed back before writing, and says why (neither
      C(tomllib), Python 3.11+, nor C(tomli) is importable on the target). Otherwise the new text was
      parsed and compared in meaning with the original plus O(values) before the file was replaced; a
      mismatch fails the task naming the file and the key, leaving the file untouched.
  returned: when the check was skipped
  type: str
backup_file:
  description: The backup copy, when one was made.
  returned: changed and backup
  type: str
"""

import os
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import (
    TomlMergeError,
    merge_checked,
    render_path,
)

# add_file_common_args=True adds FILE_COMMON_ARGUMENTS (documented by ansible.builtin.files).
ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    table=dict(type="list", elements="str", required=True),
    values=dict(type="dict", required=True),
    create=dict(type="bool", default=True),
    validate=dict(type="str"),
    backup=dict(type="bool", default=False),
)


def read_text(module, path):
    try:
        with open(path, "rb") as handle:
            return to_text(handle.read(), errors="surrogate_or_strict")
    except OSError as exc:
        module.fail_json(msg="path: cannot read %s: %s" % (path, to_native(exc)))


def write_validated(module, path, content):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".toml_merge.", dir=directory)
    with os.fdopen(fd, "wb") as handle:
        handle.write(to_bytes(content))
    validate = module.params["validate"]
    if validate:
        if "%s" not in validate:
            os.remove(tmp)
            module.fail_json(msg="validate: must contain %%s (the file to check): %s" % validate)
        rc, out, err = module.run_command(validate % tmp)
        if rc != 0:
            os.remove(tmp)
            module.fail_json(msg="validate: '%s' rejected the new content of %s (rc %d): %s"
                             % (validate, path, rc, (err or out).strip()))
    module.atomic_move(tmp, path, unsafe_writes=module.params["unsafe_writes"])


def merge_file(module):
    path = module.params["path"]
    table = module.params["table"]
    if os.path.islink(path):
        module.fail_json(msg="path: %s is a symbolic link to %s; gpufleet edits only a regular file (give the "
                         "file itself as path, or replace the link by the file); nothing was written"
                         % (path, os.readlink(path)))
    exists = os.path.exists(path)
    if exists and not os.path.isfile(path):
        module.fail_json(msg="path: %s is not a regular file" % path)
    if not exists and not module.params["create"]:
        module.fail_json(msg="path: %s does not exist and create=false" % path)
    before = read_text(module, path) if exists else ""
    try:
        after, changed_keys, note = merge_checked(before, table, module.params["values"])
    except TomlMergeError as exc:
        module.fail_json(msg="%s: %s" % (path, to_native(exc)), table=render_path(table))

    result = dict(changed=bool(changed_keys), changed_keys=changed_keys, table=render_path(table))
    if note:
        result["toml_check"] = note
    if changed_keys and module._diff:
        result["diff"] = dict(before=before, after=after,
                              before_header=path if exists else "/dev/null", after_header=path)
    if changed_keys and not module.check_mode:
        if exists and module.params["backup"]:
            result["backup_file"] = module.backup_local(path)
        write_validated(module, path, after)
    if not module.check_mode and os.path.exists(path):
        file_args = module.load_file_common_arguments(module.params)
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    return result


def main():
    run_module(ARGUMENT_SPEC, merge_file, add_file_common_args=True)


if __name__ == "__main__":
    main()
