# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd runtime settings as a drop-in file, without rewriting what others own.

containerd reads ``imports`` of its root config (``/etc/containerd/config.toml``); gpufleet adds
one glob there (the only edit to a file other installers own) and writes its settings to its own
file in that directory. How containerd merges an imported file decides what the file must hold:

- containerd 2.x merges imported plugin tables key by key (containerd PR #9982, in 2.0): the
  drop-in holds only gpufleet's keys, in the root config's version (2, 3 or 4; a drop-in of a
  higher version than the root config is not loaded since containerd PR #12891, and a drop-in
  written in the version containerd migrated to instead of the root's broke containerd 2.3,
  azimuth-cloud/capi-helm-charts PR #838).
- containerd 1.x replaces a whole plugin table with the imported one (containerd issue #5837):
  the drop-in starts from a copy of the root config's CRI plugin tables, then sets gpufleet's
  keys, as ``nvidia-ctk runtime configure --drop-in-config`` does since toolkit 1.18
  (NVIDIA/nvidia-container-toolkit PR #1311). The copy is taken again on every run, so a change
  another installer makes to that table in config.toml is carried over by the next run.

Config version 3 (containerd 2.0) keeps runtimes under ``io.containerd.cri.v1.runtime``,
version 2 under ``io.containerd.grpc.v1.cri``. Version 4 (containerd 2.3, the first LTS line, the
version ``containerd config default`` writes there) keeps the CRI plugin paths of version 3; only
server-level fields (``grpc``, ``ttrpc``, ``debug``, ``metrics``) moved into plugin tables
(``io.containerd.server.v1.*``; gardener/gardener PR #14856, containerd 2.3.0's default config).
The drop-in never holds server-level fields, so its content is the same for 3 and 4 apart from
the version line. A root config in a version the installed containerd does not read (3 before
2.0, 4 before 2.3; the matrix rules ``containerd-config-v3`` / ``containerd-config-v4``) and
version 1 files are refused with the way out. A root config another tool wrote in 2, 3 or 4 is
kept as it is: containerd 2.x reads the older versions and migrates them in memory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import (
    TomlMergeError, merge_checked, scan)

CONF_D_GLOB = "/etc/containerd/conf.d/*.toml"
CRI_V2 = ["plugins", "io.containerd.grpc.v1.cri"]
CRI_V3 = ["plugins", "io.containerd.cri.v1.runtime"]
KNOWN_VERSIONS = (2, 3, 4)
# config version -> the first containerd (major, minor) that reads it (docs/compatibility.md)
FIRST_READER = {2: (1, 0), 3: (2, 0), 4: (2, 3)}
# top-level tables of a root config that a drop-in must never carry (server-level fields)
SERVER_TABLES = ("grpc", "ttrpc", "debug", "metrics")

_VERSION = re.compile(r"(?m)^\s*version\s*=\s*([0-9]+)\s*(#.*)?$", re.ASCII)
_TABLE = re.compile(r"(?m)^\s*\[")


class ContainerdConfigError(Exception):
    """A configuration gpufleet cannot add a drop-in to; the message says what to do."""


def containerd_major(version_output):
    """Major version from ``containerd --version`` ("containerd containerd.io 2.2.1 ..." or
    "containerd github.com/containerd/containerd 1.6.20~ds1 ..."); None when none is found."""
    match = re.search(r"(?:^|\s)v?([0-9]{1,9})\.([0-9]{1,9})\.[0-9]", version_output or "")
    return int(match.group(1)) if match else None


def containerd_version(version_output):
    """(major, minor) from ``containerd --version`` or a bare version ("2.3.1"); None when none
    is found."""
    match = re.search(r"(?:^|\s)v?([0-9]{1,9})\.([0-9]{1,9})(?![0-9])", version_output or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def classify(text):
    """'missing' (None), 'stub' (no table and no version: Docker's containerd.io ships
    ``disabled_plugins = ["cri"]``), or the config version as an int (1 when unstated).
    ContainerdConfigError for a version line whose figure is no version (more than 9 digits: int()
    would refuse 4300 and more)."""
    if text is None:
        return "missing"
    match = _VERSION.search(text)
    if match:
        if len(match.group(1)) > 9:
            raise ContainerdConfigError("config version %s... is not a version; not edited" % match.group(1)[:12])
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
    """CRI table of a config version: version 4 keeps the paths of version 3."""
    return CRI_V3 if version >= 3 else CRI_V2


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


def plan(root_text, containerd, runtimes, default_runtime, systemd_cgroup, dropin_glob=CONF_D_GLOB):
    """What to write: {'version', 'imports' (new list, or None when the glob is already there),
    'dropin' (text), 'copied' (bool: the CRI tables were copied, containerd 1.x)}.
    ``containerd``: (major, minor) of the installed containerd, or the major alone (minor 0)."""
    shown = "%d.x" % containerd if isinstance(containerd, int) else None
    if isinstance(containerd, int):  # minor unknown: judged as x.0
        containerd = (containerd, 0)
    major = containerd[0] if containerd else None
    kind = classify(root_text)
    if kind in ("missing", "stub"):
        raise ContainerdConfigError(
            "the containerd config is %s: write containerd's default first (containerd config default)" % kind)
    if kind == 1:
        raise ContainerdConfigError(
            "config version 1 (no 'version =' line and tables present): migrate it with "
            "'containerd config migrate' (version 2 for containerd 1.x, 3 for 2.x)")
    if kind not in KNOWN_VERSIONS:
        raise ContainerdConfigError("config version %s is not known to gpufleet (2, 3 or 4 expected)" % kind)
    if major is None:
        raise ContainerdConfigError("containerd's version is unknown ('containerd --version' said nothing usable)")
    if tuple(containerd) < FIRST_READER[kind]:
        readable = [v for v in KNOWN_VERSIONS if tuple(containerd) >= FIRST_READER[v]]
        raise ContainerdConfigError(
            "compatibility containerd-config-v%d: config version %d needs containerd %d.%d or later; this is "
            "containerd %s, which reads config version %s: write that containerd's default "
            "(containerd config default) or upgrade containerd (docs/compatibility.md)"
            % (kind, kind, FIRST_READER[kind][0], FIRST_READER[kind][1], shown or "%d.%d" % tuple(containerd),
               " or ".join(str(v) for v in readable)))
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
    server = sorted(set(s["path"][0] for s in scan(text.splitlines())
                        if s["kind"] in ("table", "array") and s["path"] and s["path"][0] in SERVER_TABLES))
    if server:  # only CRI tables are ever copied or set: this would be a defect here
        raise ContainerdConfigError("the drop-in would carry server-level tables (%s)" % ", ".join(server))
    return {"version": kind, "imports": new_imports, "dropin": text, "copied": copied}
