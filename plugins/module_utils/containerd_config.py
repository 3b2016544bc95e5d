# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd runtime settings as a drop-in file, without rewriting what others own.

containerd reads ``imports`` of its root config (``/etc/containerd/config.toml``); gpufleet adds
one glob there (the only edit to a file other installers own) and writes its settings to its own
file in that directory. How containerd merges an imported file decides what the file must hold:

- containerd 2.x merges imported plugin tables key by key (containerd PR #9982, in 2.0): the
  drop-in holds only gpufleet's keys, in the root config's version (2 or 3; a drop-in of a higher
  version than the root config is not loaded since containerd PR #12891).
- containerd 1.x replaces a whole plugin table with the imported one (containerd issue #5837):
  the drop-in starts from a copy of the root config's CRI plugin tables, then sets gpufleet's
  keys, as ``nvidia-ctk runtime configure --drop-in-config`` does since toolkit 1.18
  (NVIDIA/nvidia-container-toolkit PR #1311). The copy is taken again on every run, so a change
  another installer makes to that table in config.toml is carried over by the next run.

Config version 3 (containerd 2.x) keeps runtimes under ``io.containerd.cri.v1.runtime``,
version 2 under ``io.containerd.grpc.v1.cri``. Version 1 files and version 3 on containerd 1.x
are refused with the way out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.toml_merge import (
    TomlMergeError, merge_checked, scan)

CONF_D_GLOB = "/etc/containerd/conf.d/*.toml"
CRI_V2 = ["plugins", "io.containerd.grpc.v1.cri"]
CRI_V3 = ["plugins", "io.containerd.cri.v1.runtime"]

_VERSION = re.compile(r"(?m)^\s*version\s*=\s*(\d+)\s*(#.*)?$")
_TABLE = re.compile(r"(?m)^\s*\[")


class ContainerdConfigError(Exception):
    """A configuration gpufleet cannot add a drop-in to; the message says what to do."""


def containerd_major(version_output):
    """Major version from ``containerd --version`` ("containerd containerd.io 2.2.1 ..." or
    "containerd github.com/containerd/containerd 1.6.20~ds1 ..."); None when none is found."""
    match = re.search(r"(?:^|\s)v?(\d+)\.(\d+)\.\d+", version_output or "")
    return int(match.group(1)) if match else None


def classify(text):
    """'missing' (None), 'stub' (no table and no version: Docker's containerd.io ships
    ``disabled_plugins = ["cri"]``), or the config version as an int (1 when unstated)."""
    if text is None:
        return "missing"
    match = _VERSION.search(text)
    if match:
        return int(match.group(1))
    if not _TABLE.search(text):
        return "stub"
    return 1


def imports_of(text):
    """The root table's ``imports`` list (strings), [] when absent."""
    statements = scan(text.splitlines())
    for stmt in statements:
        if stmt["kind"] == "keyval" and stmt["table"] == [] and stmt["key"] == ["imports"]:
            value = (stmt["value"] or "").strip()
            if not (value.startswith("[") and value.endswith("]")):
                raise ContainerdConfigError("imports is not a list: %s" % value)
            items = []
            for double, single in re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'', value):
                items.append(json.loads('"%s"' % double) if double else single)
            return items
    return []


def extract_tables(text, prefix):
    """Verbatim text of every table whose path starts with ``prefix`` (header and keys)."""
    lines = text.splitlines()
    statements = scan(lines)
    headers = [s for s in statements if s["kind"] in ("table", "array")]
    out = []
    for number, header in enumerate(headers):
        if header["path"][:len(prefix)] != list(prefix):
            continue
        end = headers[number + 1]["start"] if number + 1 < len(headers) else len(lines)
        while end > header["start"] + 1 and not lines[end - 1].strip():
            end -= 1
        out.append("\n".join(lines[header["start"]:end]))
    return "\n\n".join(out)


def plugin_path(version):
    return CRI_V3 if version == 3 else CRI_V2


def edits(version, runtimes, default_runtime, systemd_cgroup):
    """(table path, values) pairs gpufleet sets. ``runtimes``: name -> BinaryName or None (runc)."""
    base = plugin_path(version) + ["containerd"]
    out = []
    for name in sorted(runtimes, key=lambda n: (n != "runc", n)):
        out.append((base + ["runtimes", name], {"runtime_type": "io.containerd.runc.v2"}))
        options = {"SystemdCgroup": bool(systemd_cgroup)}
        if runtimes[name]:
            options = {"BinaryName": runtimes[name], "SystemdCgroup": bool(systemd_cgroup)}
        out.append((base + ["runtimes", name, "options"], options))
    out.append((base, {"default_runtime_name": default_runtime}))
    return out


def plan(root_text, major, runtimes, default_runtime, systemd_cgroup, dropin_glob=CONF_D_GLOB):
    """What to write: {'version', 'imports' (new list, or None when the glob is already there),
    'dropin' (text), 'copied' (bool: the CRI tables were copied, containerd 1.x)}."""
    kind = classify(root_text)
    if kind in ("missing", "stub"):
        raise ContainerdConfigError(
            "the containerd config is %s: write containerd's default first (containerd config default)" % kind)
    if kind == 1:
        raise ContainerdConfigError(
            "config version 1 (no 'version =' line and tables present): migrate it with "
            "'containerd config migrate' (version 2 for containerd 1.x, 3 for 2.x)")
    if kind not in (2, 3):
        raise ContainerdConfigError("config version %s is not known to gpufleet (2 or 3 expected)" % kind)
    if major is None:
        raise ContainerdConfigError("containerd's version is unknown ('containerd --version' said nothing usable)")
    if kind == 3 and major < 2:
        raise ContainerdConfigError(
            "config version 3 needs containerd 2.x; this is containerd %d.x: use a version 2 config" % major)
    if default_runtime not in runtimes:
        raise ContainerdConfigError("default runtime %s is not among the runtimes set (%s)"
                                    % (default_runtime, ", ".join(sorted(runtimes))))
    imports = imports_of(root_text)
    new_imports = None if dropin_glob in imports else imports + [dropin_glob]
    header = ("# Written by gpufleet (role container_runtime): the NVIDIA runtime and the default\n"
              "# runtime, imported by %s. Do not edit: the next run rewrites it.\n" % "config.toml")
    text = header + "version = %d\n" % kind
    copied = major < 2
    if copied:
        header_note = ("# containerd %d.x replaces a whole plugin table with an imported one, so the\n"
                       "# CRI tables of config.toml are copied here (again on every run).\n" % major)
        tables = extract_tables(root_text, plugin_path(kind))
        text = header + header_note + "version = %d\n" % kind + ("\n" + tables + "\n" if tables else "")
    for path, values in edits(kind, runtimes, default_runtime, systemd_cgroup):
        try:
            # parsed back and compared in meaning before anything is written (toml_merge.merge_checked)
            text, _changed, _note = merge_checked(text, path, values)
        except TomlMergeError as exc:
            raise ContainerdConfigError("cannot set %s: %s" % (".".join(path), exc))
    return {"version": kind, "imports": new_imports, "dropin": text, "copied": copied}
