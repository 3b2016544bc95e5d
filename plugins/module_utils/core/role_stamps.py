# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged-role stamps of ``/var/lib/gpufleet/role-state.json``, verified on the node
(module ``role_state``; docs/performance.md, "Converged-role skip").

A stamp says: role R converged with inputs digest D, and at that moment the files and packages R
declares it manages were in this state (a snapshot: for each file its type, owner, group, mode and
sha256, for a symlink its target and what it points to, or its absence; the installed version of
each package, or its absence). ``verify`` takes the snapshot again and names every difference
("drift"); a role is skipped only when its stamp has a snapshot of something and nothing drifted.
Fail closed: a file that cannot be read, a package database that cannot be queried, a stamp
without a snapshot, an empty declaration or a state file that is unreadable (``read_stamps``, the
one strict reader, on module_utils/core/records.py) all count as drift (the role runs), never as
verified.

File format: ``{"roles": {<role>: {"inputs": <digest>, "managed": {"files": {<path>: <file>},
"packages": {<name>: <version> | null}} | null}}}`` with ``<file>`` one of ``{"absent": true}``,
``{"type": "file", "sha256": <hex>, "mode": "0644", "uid": 0, "gid": 0}``, ``{"type":
"symlink", "target": <link text>, "uid": 0, "gid": 0, "points_to": <file>}`` (``points_to``:
the regular file or absence it resolves to); a package ``<name>`` as the package database prints
it, with an architecture qualifier where it has one, one entry per installed architecture
(``libc6:amd64``, ``libc6:i386``; stamps of an earlier gpufleet dropped the qualifier: such a
package is drift once, the role runs and records it anew). ``managed`` null: the role declared nothing to
verify; stamps of gpufleet 0.3 have no ``managed`` at all (the same); file records of an earlier
gpufleet (``{"sha256", "mode"}`` only: no type, owner or group) are read but never verified.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import re
import stat

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write, read_bytes

DEFAULT_PATH = "/var/lib/gpufleet/role-state.json"
MAX_BYTES = 16 << 20  # a state file larger than this is unreadable (every role runs): never read without a bound
_CHUNK = 1 << 20
_open = os.open  # tests replace it to see an unreadable file


class SnapshotError(Exception):
    """Something a role manages cannot be observed (names it)."""


def _regular_state(path, follow):
    """{"type": "file", sha256, mode, uid, gid} of the regular file at ``path``, opened without
    following a symlink (``follow`` False) so what is hashed is what was stat'ed."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) * (not follow) | getattr(os, "O_NONBLOCK", 0)
    try:
        handle = _open(path, flags)
    except OSError as exc:
        raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise SnapshotError("%s is not a regular file" % path)
        digest = hashlib.sha256()
        for block in iter(lambda: os.read(handle, _CHUNK), b""):
            digest.update(block)
    except OSError as exc:
        raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
    finally:
        os.close(handle)
    return {"type": "file", "sha256": digest.hexdigest(), "mode": "%04o" % (info.st_mode & 0o7777),
            "uid": info.st_uid, "gid": info.st_gid}


def file_state(path):
    """The state of what is at ``path`` (symlinks not followed): {"absent": True}; a regular file
    {"type": "file", "sha256", "mode", "uid", "gid"}; a symlink {"type": "symlink", "target",
    "uid", "gid", "points_to": the regular file or absence it resolves to}. SnapshotError naming
    the path otherwise (unreadable, a directory, a device, a link to one ...)."""
    if not os.path.isabs(path):
        raise SnapshotError("%s is not an absolute path" % path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"absent": True}
    except OSError as exc:
        raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except FileNotFoundError:  # gone between lstat and readlink
            return {"absent": True}
        except OSError as exc:
            raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
        try:
            os.stat(path)
        except FileNotFoundError:
            return {"type": "symlink", "target": target, "uid": info.st_uid, "gid": info.st_gid,
                    "points_to": {"absent": True}}
        except OSError as exc:
            raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
        return {"type": "symlink", "target": target, "uid": info.st_uid, "gid": info.st_gid,
                "points_to": _regular_state(path, follow=True)}
    if not stat.S_ISREG(info.st_mode):
        raise SnapshotError("%s is not a regular file" % path)
    return _regular_state(path, follow=False)


def parse_dpkg(text):
    """{name: version or None} from ``dpkg-query -W -f '${binary:Package}\\t${db:Status-Abbrev}\\t${Version}\\n'``
    (installed: the status's second letter is i; held: its first letter is h, the version then
    ends in " (held)"). The name as dpkg prints it, with its architecture qualifier when it has one
    (``libc6:amd64``, ``libc6:i386``: a package installed for two architectures has a line for each,
    each its own entry)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, status, version = parts
        installed = len(status) >= 2 and status[1] == "i"
        if installed or name not in found:
            # a hold is part of the state (dpkg's selection "h"): released by hand is drift
            found[name] = (version + (" (held)" if status[0] == "h" else "")) if installed else None
    return found


def parse_rpm(text):
    """{name: version or None} from ``rpm -q --qf '%{NAME}:%{ARCH}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'``
    (one line per installed architecture; "package X is not installed" lines give X None)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            found[parts[0]] = parts[1]
        elif line.startswith("package ") and line.endswith(" is not installed"):
            found[line[len("package "):-len(" is not installed")]] = None
    return found


def _bare(name):
    """A package name without its architecture qualifier (``libc6:amd64`` -> ``libc6``)."""
    return name.split(":", 1)[0]


def package_versions(names, run_command, which):
    """{name: installed version or None} for the packages ``names`` (with or without an
    architecture qualifier) with one dpkg-query (else rpm) call: an entry per architecture the
    package database prints (``libc6:amd64``, ``libc6:i386``; a package without a qualifier as it
    is), a name it prints nothing for None. SnapshotError when neither answers."""
    names = sorted(set(_bare(name) for name in names))
    if not names:
        return {}
    if which("dpkg-query"):
        rc, out, err = run_command(["dpkg-query", "-W", "-f", "${binary:Package}\t${db:Status-Abbrev}\t${Version}\n"]
                                   + names)
        found = parse_dpkg(out)
        # rc 1 with "no packages found matching X" for a package dpkg never knew: absent.
        if rc not in (0, 1) or (rc == 1 and "no packages found" not in err):
            raise SnapshotError("dpkg-query failed (rc %s): %s" % (rc, (err or out).strip()[:200]))
    elif which("rpm"):
        rc, out, err = run_command(["rpm", "-q", "--qf", "%{NAME}:%{ARCH}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"]
                                   + names)
        found = parse_rpm(out)
        if rc != 0 and not any(value is None for value in found.values()):
            raise SnapshotError("rpm -q failed (rc %s): %s" % (rc, (err or out).strip()[:200]))
    else:
        raise SnapshotError("no dpkg-query or rpm on this host: packages cannot be checked")
    result = dict((name, version) for name, version in found.items() if _bare(name) in names)
    for name in names:
        if not any(_bare(key) == name for key in result):
            result[name] = None
    return result


def _packages_of(declared, versions):
    """{name: version or None} of the packages ``declared`` (names, qualified or not) in
    ``versions`` (package_versions): every architecture's entry of each."""
    wanted = set(_bare(name) for name in declared)
    return dict((name, version) for name, version in versions.items() if _bare(name) in wanted)


def _declared(managed):
    """(files, packages) lists of a declaration {files: [...], packages: [...]}; ValueError naming
    the bad part."""
    if not isinstance(managed, dict):
        raise ValueError("must be a dict with files and packages, got %s" % type(managed).__name__)
    unknown = sorted(set(managed) - {"files", "packages"})
    if unknown:
        raise ValueError("unknown keys %s (files, packages)" % ", ".join(unknown))
    out = []
    for key in ("files", "packages"):
        value = managed.get(key) or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item for item in value):
            raise ValueError("%s must be a list of non-empty strings" % key)
        out.append(list(value))
    if any(not os.path.isabs(path) for path in out[0]):
        raise ValueError("files must be absolute paths: %s" % ", ".join(p for p in out[0] if not os.path.isabs(p)))
    return out


def snapshots(declarations, run_command, which):
    """({role: snapshot}, {role: reason}) for ``declarations`` ({role: {files, packages} or None}):
    the state of what each role manages now. A role whose declaration is None, malformed or not
    observable gets no snapshot, with the reason."""
    taken, missing, files, packages = {}, {}, {}, {}
    for role, managed in sorted(declarations.items()):
        if managed is None:
            missing[role] = "the role declares nothing to verify on the node"
            continue
        try:
            files[role], packages[role] = _declared(managed)
        except ValueError as exc:
            missing[role] = "its managed-state declaration %s" % exc
            continue
        if not files[role] and not packages[role]:
            del files[role], packages[role]
            missing[role] = "the role declares nothing to verify on the node (no files, no packages)"
    versions, package_error = {}, None
    wanted = [name for role in packages for name in packages[role]]
    try:
        versions = package_versions(wanted, run_command, which)
    except SnapshotError as exc:
        package_error = str(exc)
    for role in sorted(files):
        try:
            if packages[role] and package_error:
                raise SnapshotError(package_error)
            taken[role] = {"files": dict((path, file_state(path)) for path in files[role]),
                           "packages": _packages_of(packages[role], versions)}
        except SnapshotError as exc:
            missing[role] = str(exc)
    return taken, missing


def _describe(state):
    if state.get("absent"):
        return "absent"
    if state.get("type") == "symlink":
        return "a symlink to %s" % state.get("target")
    return "a regular file"


def _file_drift(path, recorded, now):
    """What differs between the recorded and the current state of ``path`` (None: nothing)."""
    if not recorded.get("absent") and "type" not in recorded:
        return "%s recorded by an older gpufleet (no file type, owner or group): not verified" % path
    if now.get("absent") and not recorded.get("absent"):
        return "%s missing" % path
    if recorded.get("absent") and not now.get("absent"):
        return "%s present (absent when the role converged)" % path
    if recorded.get("absent"):
        return None
    if recorded.get("type") != now.get("type") or recorded.get("target") != now.get("target"):
        return "%s is %s (%s when the role converged)" % (path, _describe(now), _describe(recorded))
    found = []
    for key, what in (("uid", "owner"), ("gid", "group")):
        if recorded.get(key) != now.get(key):
            found.append("%s %s (%s when the role converged)" % (what, now.get(key), recorded.get(key)))
    if recorded.get("type") == "symlink":
        pointed = _file_drift("%s -> %s" % (path, recorded.get("target")), recorded["points_to"], now["points_to"])
        if pointed:
            found.append(pointed[len(path) + 1:] if pointed.startswith(path + " ") else pointed)
    else:
        if recorded.get("sha256") != now.get("sha256"):
            found.append("changed (content differs from the converged run)")
        if recorded.get("mode") != now.get("mode"):
            found.append("mode %s (%s when the role converged)" % (now.get("mode"), recorded.get("mode")))
    return "%s %s" % (path, "; ".join(found)) if found else None


def _package_drift(name, recorded, now):
    if recorded == now:
        return None
    if now is None:
        return "package %s removed (%s when the role converged)" % (name, recorded)
    if recorded is None:
        return "package %s %s installed (absent when the role converged)" % (name, now)
    return "package %s now %s (%s when the role converged)" % (name, now, recorded)


def drift(stamps, run_command, which):
    """{role: [what drifted]} for every stamp of ``stamps`` ({role: stamp} as read_stamps gives
    them); an empty list means verified. A stamp without a snapshot or with an empty one, a file
    that cannot be read and a package database that cannot be queried are drift (fail closed)."""
    result, packages = {}, []
    for stamp in stamps.values():
        managed = stamp.get("managed")
        if managed:
            packages.extend(managed["packages"])
    versions, package_error = {}, None
    try:
        versions = package_versions(packages, run_command, which)
    except SnapshotError as exc:
        package_error = str(exc)
    for role, stamp in sorted(stamps.items()):
        managed = stamp.get("managed")
        if managed is None or not (managed["files"] or managed["packages"]):
            result[role] = ["nothing recorded to verify on the node (the role declares no managed state)"]
            continue
        found = []
        for path, recorded in sorted(managed["files"].items()):
            try:
                message = _file_drift(path, recorded, file_state(path))
            except SnapshotError as exc:
                message = str(exc)
            if message:
                found.append(message)
        recorded_packages = managed["packages"]
        if recorded_packages and package_error:
            found.append(package_error)
        elif recorded_packages:
            # every architecture's entry, recorded or now: one changed, removed or added is drift
            current = _packages_of(recorded_packages, versions)
            found.extend(message for message in (_package_drift(name, recorded_packages.get(name), current.get(name))
                                                 for name in sorted(set(recorded_packages) | set(current)))
                         if message)
        result[role] = found
    return result


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODE = re.compile(r"^[0-7]{4}$")
_FILE_KEYS = ("type", "sha256", "mode", "uid", "gid")
_LINK_KEYS = ("type", "target", "uid", "gid", "points_to")
_MAX_ID = 2 ** 32 - 1


def _file_record(value, record, field, link_allowed=True):
    """One file's recorded state, checked (an earlier gpufleet's record, sha256 and mode only, is kept as
    it is: _file_drift never verifies it)."""
    records.mapping(value, record, field)
    if "absent" in value:
        records.mapping(value, record, field, required=("absent",), allowed=("absent",))
        if value["absent"] is not True:
            raise records.RecordError(record, "absent must be true", field)
        return {"absent": True}
    if "type" not in value:  # an earlier gpufleet: sha256 and mode only
        records.mapping(value, record, field, required=("sha256", "mode"), allowed=("sha256", "mode"))
        return {"sha256": records.string(value["sha256"], record, field + ".sha256", max_length=64),
                "mode": records.string(value["mode"], record, field + ".mode", max_length=4)}
    kind = records.string(value["type"], record, field + ".type",
                          choices=("file", "symlink") if link_allowed else ("file",))
    keys = _FILE_KEYS if kind == "file" else _LINK_KEYS
    records.mapping(value, record, field, required=keys, allowed=keys)
    state = {"type": kind,
             "uid": records.integer(value["uid"], record, field + ".uid", 0, _MAX_ID),
             "gid": records.integer(value["gid"], record, field + ".gid", 0, _MAX_ID)}
    if kind == "symlink":
        state["target"] = records.string(value["target"], record, field + ".target", allow_empty=False)
        state["points_to"] = _file_record(value["points_to"], record, field + ".points_to", link_allowed=False)
        return state
    if not _SHA256.match(records.string(value["sha256"], record, field + ".sha256", max_length=64)):
        raise records.RecordError(record, "not 64 lowercase hex digits: %r" % (value["sha256"],), field + ".sha256")
    if not _MODE.match(records.string(value["mode"], record, field + ".mode", max_length=4)):
        raise records.RecordError(record, "not a mode of 4 octal digits: %r" % (value["mode"],), field + ".mode")
    state.update(sha256=value["sha256"], mode=value["mode"])
    return state


def parse_stamps(raw, record=DEFAULT_PATH):
    """{role: {"inputs": digest, "managed": None | {"files": {path: state}, "packages": {name:
    version or None}}}} of the state file's bytes; records.RecordError naming the file (and the
    field) for anything else: the one reader of this record kind."""
    document = records.mapping(records.load_json(raw, record), record, required=("roles",), allowed=("roles",))
    roles = records.mapping(document["roles"], record, "roles")
    stamps = {}
    for role, stamp in roles.items():
        field = "roles.%s" % role
        records.string(role, record, field, max_length=255, allow_empty=False)
        records.mapping(stamp, record, field, required=("inputs",), allowed=("inputs", "managed"))
        inputs = records.string(stamp["inputs"], record, field + ".inputs", max_length=1024, allow_empty=False)
        managed = stamp.get("managed")
        if managed is not None:
            where = field + ".managed"
            records.mapping(managed, record, where, required=("files", "packages"), allowed=("files", "packages"))
            files = {}
            for path, state in records.mapping(managed["files"], record, where + ".files").items():
                if not os.path.isabs(path):
                    raise records.RecordError(record, "%r is not an absolute path" % path, where + ".files")
                files[path] = _file_record(state, record, "%s.files[%s]" % (where, path))
            packages = {}
            for name, version in records.mapping(managed["packages"], record, where + ".packages").items():
                if version is not None:
                    records.string(version, record, "%s.packages[%s]" % (where, name), max_length=1024)
                packages[name] = version
            managed = {"files": files, "packages": packages}
        stamps[role] = {"inputs": inputs, "managed": managed}
    return stamps


def read_stamps(path):
    """({role: stamp}, problem or None): the stamps of the state file; no file is no stamps, a
    file that cannot be read (not a regular file: a FIFO, socket, device or symbolic link, never
    waited on nor followed; larger than MAX_BYTES) or is unreadable as a record (parse_stamps) is
    no stamps and a problem naming it (every role runs)."""
    try:
        data = _read_state(path)
    except OSError as exc:
        reason = "a symbolic link, not a state file" if exc.errno == errno.ELOOP else exc.strerror or exc
        return {}, "%s cannot be read: %s: every role runs" % (path, reason)
    if data is None:
        return {}, None
    try:
        return parse_stamps(data, path), None
    except records.RecordError as exc:
        return {}, "%s: every role runs" % exc


def render(stamps):
    return json.dumps({"roles": stamps}, indent=4, sort_keys=True) + "\n"


def role_state_work(module):
    """The work of the module role_state (framework.run_module): see its documentation."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure

    params = module.params
    path = params["path"]
    if not os.path.isabs(path):
        raise ModuleFailure("option path: %s is not an absolute path" % path, path=path)
    stamps, problem = read_stamps(path)

    def run_command(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    def which(name):
        return module.get_bin_path(name)

    if params["action"] == "verify":
        wanted = params["roles"]
        chosen = dict((role, stamp) for role, stamp in stamps.items() if wanted is None or role in wanted)
        drifted = drift(chosen, run_command, which)
        return {"changed": False, "path": path, "problem": problem,
                "roles": dict((role, {"inputs": stamp.get("inputs"), "drift": drifted[role],
                                      "verified": not drifted[role]})
                              for role, stamp in chosen.items())}

    # action record
    new = params["stamps"] or {}
    bad = sorted(role for role, digest in new.items() if not isinstance(digest, str) or not digest)
    if bad:
        raise ModuleFailure("option stamps: %s need an inputs digest (a string)" % ", ".join(bad), path=path)
    declared = params["managed"] or {}
    taken, unrecorded = snapshots(dict((role, declared.get(role) or None) for role in new), run_command, which)
    after = dict((role, stamp) for role, stamp in stamps.items() if role not in (params["forget"] or []))
    for role, digest in new.items():
        after[role] = {"inputs": digest, "managed": taken.get(role)}
    before = read_bytes_safe(path)
    before_text = None if before is None else before.decode("utf-8", "replace")
    wanted_text = render(after)
    # no file and nothing to record: nothing is created
    changed = before_text != wanted_text and not (before_text is None and not after)
    result = {"changed": changed, "path": path, "problem": problem, "recorded": sorted(taken),
              "unrecorded": unrecorded}
    if module._diff:
        result["diff"] = {"before": before_text or "", "after": wanted_text, "before_header": path, "after_header": path}
    if not changed or module.check_mode:
        return result
    try:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        atomic_write(path, wanted_text, mode=0o644, owner=0 if os.geteuid() == 0 else None,
                     group=0 if os.geteuid() == 0 else None)
    except OSError as exc:
        raise ModuleFailure("%s not written: %s" % (path, exc.strerror or exc), path=path)
    return result


def _read_state(path):
    """The state file's bytes (None: no file): a regular file only, its final link not followed (a
    record is never a link: atomic_write replaces one), opened without blocking, at most MAX_BYTES."""
    return read_bytes(path, max_bytes=MAX_BYTES, follow_links=False)


def read_bytes_safe(path):
    """The file's bytes; None when it does not exist or cannot be read (it is then rewritten)."""
    try:
        return _read_state(path)
    except OSError:
        return None
