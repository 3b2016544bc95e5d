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
    TomlMergeError, _difference, intended, merge_checked, render_path, render_string, scan, split_lines, toml_loads)

CONF_D_GLOB = "/etc/containerd/conf.d/*.toml"
CRI_V2 = ["plugins", "io.containerd.grpc.v1.cri"]
CRI_V3 = ["plugins", "io.containerd.cri.v1.runtime"]
KNOWN_VERSIONS = (2, 3, 4)
KNOWN_MAJORS = (1, 2)  # containerd majors whose reading of imports gpufleet knows
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


def check_containerd(version):
    """(major, minor) of ``containerd_version`` when gpufleet knows that containerd (1.x or 2.x);
    ContainerdConfigError naming the option otherwise (no version found, or another major)."""
    found = containerd_version(version) if not isinstance(version, (tuple, list)) else tuple(version)
    if found is None:
        raise ContainerdConfigError("containerd_version: %r holds no version ('containerd --version' said nothing "
                                    "usable)" % (version,))
    if found[0] not in KNOWN_MAJORS:
        raise ContainerdConfigError(
            "containerd_version: %r is containerd %d.%d; gpufleet knows how containerd 1.x and 2.x read a "
            "drop-in, not %d.x: not edited" % (version, found[0], found[1], found[0]))
    return found


def _overlaps(table, key, path):
    """Whether the key/value ``key`` of ``table`` defines (part of) the table ``path`` through a
    dotted key or an inline table, rather than in a [header] of its own."""
    defined = list(table) + list(key)
    return len(table) < len(path) and (defined[:len(path)] == list(path)
                                       or (len(defined) < len(path) and list(path)[:len(defined)] == defined))


def check_copyable(text, version, paths):
    """containerd 1.x: the drop-in carries a copy of the CRI plugin's [tables] (whole plugin tables
    replace each other there), so CRI settings written as dotted keys or inline tables outside those
    tables would be lost, and ones on a table gpufleet sets could not be merged. Refuses naming the
    line of ``text`` (config.toml)."""
    cri = plugin_path(version)
    for stmt in scan(split_lines(text)):
        line = stmt["start"] + 1
        if stmt["kind"] == "array":
            if any(path[:len(stmt["path"])] == stmt["path"] for path in paths):
                raise ContainerdConfigError(
                    "line %d: [[%s]] is an array of tables on the path of a table gpufleet sets; not edited"
                    % (line, render_path(stmt["path"])))
            continue
        if stmt["kind"] != "keyval":
            continue
        if _overlaps(stmt["table"], stmt["key"], cri):
            raise ContainerdConfigError(
                "line %d: the CRI plugin [%s] is (partly) set by the key %s (dotted key or inline table) outside "
                "its [tables]; containerd 1.x replaces the whole plugin table with the drop-in's copy of its "
                "[tables], so this setting would be lost: rewrite it as a [table] section"
                % (line, render_path(cri), stmt["key_text"]))
        for path in paths:
            if stmt["table"][:len(cri)] == cri and _overlaps(stmt["table"], stmt["key"], path):
                raise ContainerdConfigError(
                    "line %d: [%s] is (partly) defined by the key %s (dotted key or inline table); "
                    "rewrite it as a [table] section to let it be merged"
                    % (line, render_path(path), stmt["key_text"]))


def classify(text):
    """'missing' (None), 'stub' (no table and no version: Docker's containerd.io ships
    ``disabled_plugins = ["cri"]``), or the config version as an int (1 when unstated).
    ContainerdConfigError for a version line whose figure is no version (more than 9 digits: int()
    would refuse 4300 and more)."""
    if text is None:
        return "missing"
    if text.startswith("\ufeff"):
        raise ContainerdConfigError("the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: "
                                    "remove it (for example sed -i '1s/^\\xEF\\xBB\\xBF//'); not edited")
    match = _VERSION.search(text)
    if match:
        if len(match.group(1)) > 9:
            raise ContainerdConfigError("config version %s... is not a version; not edited" % match.group(1)[:12])
        return int(match.group(1))
    if not _TABLE.search(text):
        return "stub"
    return 1


def _imports_statement(text):
    """(lines, statement) of the root table's ``imports``; (lines, None) when absent."""
    lines = split_lines(text)
    for stmt in scan(lines):
        if stmt["kind"] == "keyval" and stmt["table"] == [] and stmt["key"] == ["imports"]:
            return lines, stmt
    return lines, None


def _string_items(lines, stmt):
    """The entries of the ``imports`` array of ``stmt`` (on one line or several), read as TOML
    reads them: a list of (value, line index, column after the entry, column after its comma or
    None), and (line index, column) of the closing bracket. ContainerdConfigError naming the line
    for anything but an array of one-line strings (a number, a table, a nested array...)."""
    first = lines[stmt["start"]]
    index, col = stmt["start"], first.index("=", len(stmt["indent"]) + len(stmt["key_text"])) + 1
    while col < len(first) and first[col] in " \t":
        col += 1
    if not first.startswith("[", col):
        value = first[col:].strip() if stmt["value"] is None else stmt["value"]
        raise ContainerdConfigError("line %d: imports is not a list: %s" % (index + 1, value))
    col += 1
    items = []
    expect_item = True  # an entry may come (start, or after a comma)
    while index < stmt["end"]:
        text = lines[index]
        while col < len(text):
            char = text[col]
            if char in " \t":
                col += 1
            elif char == "#":
                col = len(text)
            elif char == "]":
                return items, (index, col)
            elif char == "," and not expect_item:
                value, line_no, end, _comma = items[-1]
                items[-1] = (value, line_no, end, (index, col + 1))
                expect_item = True
                col += 1
            elif char in "\"'" and expect_item and not text.startswith(char * 3, col):
                end = col + 1
                while end < len(text) and text[end] != char:
                    end += 2 if char == '"' and text[end] == "\\" else 1
                if end >= len(text):
                    raise ContainerdConfigError("line %d: unterminated string in imports" % (index + 1))
                raw = text[col:end + 1]
                if char == '"':
                    try:
                        value = json.loads(raw, strict=False)  # TOML allows a raw tab
                    except ValueError:
                        raise ContainerdConfigError("line %d: imports entry %s: escape not read here; not edited"
                                                    % (index + 1, raw))
                else:
                    value = raw[1:-1]
                items.append((value, index, end + 1, None))
                expect_item = False
                col = end + 1
            else:
                raise ContainerdConfigError(
                    "line %d: imports holds %s, not a one-line string: only paths (strings) belong in imports; "
                    "not edited" % (index + 1, re.match(r"[^,\]#\s]+|.", text[col:]).group(0)[:40]))
        index += 1
        col = 0
    raise ContainerdConfigError("line %d: imports never ends" % (stmt["start"] + 1))


def imports_of(text):
    """The root table's ``imports`` list (strings), [] when absent. ContainerdConfigError naming
    the line when it is not an array of strings."""
    lines, stmt = _imports_statement(text)
    if stmt is None:
        return []
    return [item[0] for item in _string_items(lines, stmt)[0]]


def add_import(text, glob):
    """``text`` with ``glob`` appended to the root table's ``imports`` (the statement added when
    absent). A multi-line array keeps its lines and comments: the entry goes on a line of its own
    before the closing bracket; a one-line array is rewritten on its line."""
    lines, stmt = _imports_statement(text)
    items = [] if stmt is None else _string_items(lines, stmt)[0]
    wanted = [item[0] for item in items] + [glob]
    if stmt is None or stmt["end"] - stmt["start"] == 1:
        new_text, _keys, _note = merge_checked(text, [], {"imports": wanted})
        return new_text
    closing_line, closing_col = _string_items(lines, stmt)[1]
    newline = "\r\n" if "\r\n" in text else "\n"
    entry = render_string(glob) + ","
    if lines[closing_line][:closing_col].strip():  # "..., "x"]": the bracket follows an entry on its line
        before, after = lines[closing_line][:closing_col].rstrip(), lines[closing_line][closing_col:]
        if items and items[-1][3] is None:
            before += ","
        lines[closing_line:closing_line + 1] = [before, stmt["indent"] + "  " + entry, stmt["indent"] + after]
    else:
        if items and items[-1][3] is None:
            value, line_no, end, _comma = items[-1]
            lines[line_no] = lines[line_no][:end] + "," + lines[line_no][end:]
        indent = stmt["indent"] + "  "
        if items and items[-1][1] != stmt["start"]:
            last = lines[items[-1][1]]
            indent = last[:len(last) - len(last.lstrip())]
        lines.insert(closing_line, indent + entry)
    new_text = newline.join(lines) + newline
    loads = toml_loads()
    if loads is not None:
        try:
            got = loads(new_text)
        except ValueError as exc:
            raise ContainerdConfigError("adding %s to imports would write invalid TOML (%s); not edited" % (glob, exc))
        if _difference(intended(loads(text), [], {"imports": wanted}), got) is not None:
            raise ContainerdConfigError("adding %s to imports would change more than imports; not edited" % glob)
    elif imports_of(new_text) != wanted:
        raise ContainerdConfigError("adding %s to imports would not read back as intended; not edited" % glob)
    return new_text


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
    'root' (config.toml's new text, the same text when the glob is there), 'dropin' (text),
    'copied' (bool: the CRI tables were copied, containerd 1.x)}.
    ``containerd``: (major, minor) of the installed containerd, or the major alone (minor 0)."""
    shown = "%d.x" % containerd if isinstance(containerd, int) else None
    if isinstance(containerd, int):  # minor unknown: judged as x.0
        containerd = (containerd, 0)
    major = containerd[0] if containerd else None
    if major is not None:
        check_containerd(containerd)
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
    new_root = root_text if new_imports is None else add_import(root_text, dropin_glob)
    header = ("# Written by gpufleet (role container_runtime): the NVIDIA runtime and the default\n"
              "# runtime, imported by %s. Do not edit: the next run rewrites it.\n" % "config.toml")
    text = header + "version = %d\n" % kind
    copied = major < 2
    if copied:
        check_copyable(root_text, kind, [path for path, _values in edits(kind, runtimes, default_runtime,
                                                                         systemd_cgroup)])
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
    return {"version": kind, "imports": new_imports, "root": new_root, "dropin": text, "copied": copied}
