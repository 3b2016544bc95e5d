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
  - With O(validate) containerd reads the result (C(containerd --config <config> config dump));
    when it refuses, both files are put back as they were.
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
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.containerd_config import (
    ContainerdConfigError, containerd_version, plan)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import TomlMergeError, merge_checked

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


def read(module, path):
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        module.fail_json(msg="%s is not a regular file" % path)
    try:
        with open(path, "rb") as handle:
            return to_text(handle.read(), errors="surrogate_or_strict")
    except (OSError, UnicodeError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))


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
    root_before = read(module, config)
    dropin_before = read(module, dropin)
    runtimes = dict((name, to_text(binary or "")) for name, binary in params["runtimes"].items())
    try:
        result = plan(root_before, containerd_version(params["containerd_version"]), runtimes,
                      params["default_runtime"], params["systemd_cgroup"], params["imports_glob"])
        root_after = root_before
        if result["imports"] is not None:
            root_after, _keys, _note = merge_checked(root_before, [], {"imports": result["imports"]})
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
        if not os.path.isdir(os.path.dirname(dropin)):
            os.makedirs(os.path.dirname(dropin), 0o755)
        write(module, dropin, result["dropin"])
        if root_after != root_before:
            write(module, config, root_after)
        if params["validate"]:
            rc, stdout, stderr = module.run_command([params["containerd_binary"], "--config", config, "config", "dump"])
            if rc != 0:
                restore(module, dropin, dropin_before)
                restore(module, config, root_before)
                module.fail_json(msg="containerd refused the result (rc %d), %s and %s were put back: %s"
                                 % (rc, config, dropin, (stderr or stdout).strip()[-2000:]))
    return out


def main():
    run_module(ARGUMENT_SPEC, configure)


if __name__ == "__main__":
    main()
