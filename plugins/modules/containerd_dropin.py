#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_dropin
short_description: Set containerd runtimes through a drop-in file, leaving config.toml to its owners
version_added: 0.2.0
description:
  - Writes the CRI runtimes (for example the NVIDIA runtime) and the default runtime to a drop-in
    file of its own, in the config version of the root containerd config (2, 3 or 4), and adds the
    drop-in directory's glob to the root config's C(imports) when it is not there yet (containerd
    2.2 and later list C(/etc/containerd/conf.d/*.toml) by default). Nothing else in the root
    config is touched, so another installer's settings survive and a re-run changes nothing.
  - containerd 2.x merges an imported file key by key, so the drop-in holds only these keys.
    containerd 1.x replaces a whole plugin table with an imported one, so the drop-in starts from
    a copy of the root config's CRI plugin tables (taken again on every run), as
    C(nvidia-ctk runtime configure --drop-in-config) does.
  - Config version 4 (containerd 2.3 and later) keeps the CRI plugin paths of version 3; the
    drop-in never carries server-level fields (grpc, ttrpc, debug, metrics), so only its version
    line differs. A root config written by another tool in version 2, 3 or 4 is kept.
  - Refuses, naming the way out, a version 1 config, a config version the installed containerd
    does not read (3 before containerd 2.0, 4 before 2.3), and a missing or stub root config
    (write C(containerd config default) first).
  - With containerd 1.x, whose copy of the CRI plugin holds only its C([tables]), also refused naming
    the line of O(config) are CRI settings written as dotted keys or inline tables outside those
    tables, and a table gpufleet sets that is (partly) defined by a dotted key, an inline table or an
    array of tables. An C(imports) that is not an array of strings is refused naming the line; an
    C(imports) array on several lines keeps its lines and gets the glob on a line of its own.
  - Refused without writing anything are O(config) or O(dropin) being a symbolic link (gpufleet edits
    only a regular file, the message names the link and its target), a config starting with a UTF-8
    byte-order mark, the drop-in directory existing as something else than a directory, and a
    O(containerd_version) that is not containerd 1.x or 2.x.
  - With O(validate) containerd reads the result (C(containerd --config <config> config dump));
    when it refuses, both files are put back as they were. O(containerd_binary) must be an
    executable file, checked before anything is written.
author:
  - gpufleet contributors (@gpufleet)
options:
  config:
    description: The root containerd config.
    type: path
    default: /etc/containerd/config.toml
  dropin:
    description: The drop-in file written by this module (its directory must match O(imports_glob)).
    type: path
    default: /etc/containerd/conf.d/99-gpufleet.toml
  imports_glob:
    description: The glob added to the root config's C(imports).
    type: str
    default: /etc/containerd/conf.d/*.toml
  containerd_version:
    description: Output of C(containerd --version), or a version such as C(2.2.1).
    type: str
    required: true
  runtimes:
    description:
      - Runtime name to C(BinaryName) of its options; an empty value keeps runc's own binary.
      - Every runtime gets C(runtime_type = "io.containerd.runc.v2") and O(systemd_cgroup).
    type: dict
    required: true
  default_runtime:
    description: C(default_runtime_name); one of O(runtimes).
    type: str
    required: true
  systemd_cgroup:
    description: C(SystemdCgroup) of every runtime.
    type: bool
    default: true
  validate:
    description: Let containerd read the result and restore both files when it refuses. Not run in check mode.
    type: bool
    default: true
  containerd_binary:
    description: containerd binary used by O(validate).
    type: path
    default: /usr/bin/containerd
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would change without writing.
  diff_mode:
    support: full
    details: Shows both files before and after.
seealso:
  - module: gpufleet.cluster.toml_merge
"""

EXAMPLES = r"""
- name: NVIDIA runtime as containerd's default, through /etc/containerd/conf.d
  gpufleet.cluster.containerd_dropin:
    containerd_version: "{{ containerd_version_output.stdout }}"
    runtimes:
      runc: ""
      nvidia: /usr/bin/nvidia-container-runtime
    default_runtime: nvidia
"""

RETURN = r"""
config_version:
  description: Version of the root config (and of the drop-in).
  returned: success
  type: int
  sample: 3
imports_added:
  description: Whether the glob was added to the root config's imports.
  returned: success
  type: bool
copied_cri_tables:
  description: Whether the root config's CRI tables were copied into the drop-in (containerd 1.x).
  returned: success
  type: bool
dropin:
  description: Path of the drop-in.
  returned: success
  type: str
"""

import os
import shutil
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.containerd_config import (
    ContainerdConfigError, check_containerd, plan)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import TomlMergeError

ARGUMENT_SPEC = dict(
    config=dict(type="path", default="/etc/containerd/config.toml"),
    dropin=dict(type="path", default="/etc/containerd/conf.d/99-gpufleet.toml"),
    imports_glob=dict(type="str", default="/etc/containerd/conf.d/*.toml"),
    containerd_version=dict(type="str", required=True),
    runtimes=dict(type="dict", required=True),
    default_runtime=dict(type="str", required=True),
    systemd_cgroup=dict(type="bool", default=True),
    validate=dict(type="bool", default=True),
    containerd_binary=dict(type="path", default="/usr/bin/containerd"),
)


def refuse_link(module, option, path):
    """gpufleet edits only a regular file: a symbolic link is refused, naming it and its target."""
    if os.path.islink(path):
        module.fail_json(msg="%s: %s is a symbolic link to %s; gpufleet edits only a regular file (point %s at "
                         "the file itself, or replace the link by the file); nothing was written"
                         % (option, path, os.readlink(path), option))


def read(module, option, path):
    refuse_link(module, option, path)
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        module.fail_json(msg="%s: %s is not a regular file" % (option, path))
    try:
        with open(path, "rb") as handle:
            return to_text(handle.read(), errors="surrogate_or_strict")
    except (OSError, UnicodeError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))


def runnable(binary):
    """Whether ``binary`` (a path, or a name looked up in PATH) is an executable file."""
    if os.sep not in binary:
        binary = shutil.which(binary) or binary
    return os.path.isfile(binary) and os.access(binary, os.X_OK)


def write(module, path, text):
    fd, tmp = tempfile.mkstemp(prefix=".gpufleet.", dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as handle:
        handle.write(to_bytes(text))
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def restore(module, path, text):
    if text is None:
        if os.path.exists(path):
            os.remove(path)
    else:
        write(module, path, text)


def configure(module):
    params = module.params
    config, dropin = params["config"], params["dropin"]
    if os.path.dirname(params["imports_glob"]) != os.path.dirname(dropin):
        module.fail_json(msg="dropin: %s is not in the directory of imports_glob %s"
                         % (dropin, params["imports_glob"]))
    try:
        version = check_containerd(params["containerd_version"])
    except ContainerdConfigError as exc:
        module.fail_json(msg=to_native(exc))
    directory = os.path.dirname(dropin)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        module.fail_json(msg="dropin: the directory of %s, %s, exists and is not a directory; nothing was written"
                         % (dropin, directory))
    root_before = read(module, "config", config)
    dropin_before = read(module, "dropin", dropin)
    runtimes = dict((name, to_text(binary or "")) for name, binary in params["runtimes"].items())
    try:
        result = plan(root_before, version, runtimes,
                      params["default_runtime"], params["systemd_cgroup"], params["imports_glob"])
        root_after = result["root"]
    except (ContainerdConfigError, TomlMergeError) as exc:
        module.fail_json(msg="%s: %s" % (config, to_native(exc)), config=config,
                         containerd_version=params["containerd_version"])

    changed = root_after != root_before or result["dropin"] != dropin_before
    out = dict(changed=changed, config_version=result["version"], dropin=dropin,
               imports_added=result["imports"] is not None, copied_cri_tables=result["copied"])
    if changed and module._diff:
        out["diff"] = [
            dict(before=root_before, after=root_after, before_header=config, after_header=config),
            dict(before=dropin_before or "", after=result["dropin"],
                 before_header=dropin if dropin_before is not None else "/dev/null", after_header=dropin)]
    if changed and not module.check_mode:
        binary = params["containerd_binary"]
        if params["validate"] and not runnable(binary):
            module.fail_json(msg="containerd_binary: %s cannot be executed (%s), so validate cannot let containerd "
                             "read the result; nothing was written: set containerd_binary to the installed "
                             "containerd (for example /usr/local/bin/containerd) or validate: false"
                             % (binary, "not executable" if os.path.lexists(binary) else "missing"))
        created = None
        try:
            if not os.path.isdir(directory):
                created = directory
                os.makedirs(directory, 0o755)
            write(module, dropin, result["dropin"])
            if root_after != root_before:
                write(module, config, root_after)
        except OSError as exc:
            restore(module, dropin, dropin_before)
            if created:
                os.rmdir(created)
            module.fail_json(msg="cannot write %s / %s: %s; put back as they were" % (config, dropin, to_native(exc)))
        if params["validate"]:
            # containerd_binary was seen executable above, before anything was written
            rc, stdout, stderr = module.run_command([binary, "--config", config, "config", "dump"])
            if rc != 0:
                restore(module, dropin, dropin_before)
                restore(module, config, root_before)
                if created:
                    os.rmdir(created)
                module.fail_json(msg="containerd refused the result (rc %d), %s and %s were put back: %s"
                                 % (rc, config, dropin, (stderr or stdout).strip()[-2000:]))
    return out


def main():
    run_module(ARGUMENT_SPEC, configure)


if __name__ == "__main__":
    main()
