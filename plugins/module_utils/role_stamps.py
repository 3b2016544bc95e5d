# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged-role stamps of ``/var/lib/gpufleet/role-state.json``, verified on the node
(module ``role_state``; docs/performance.md, "Converged-role skip").

A stamp says: role R converged with inputs digest D, and at that moment the files and packages R
declares it manages were in this state (a snapshot: sha256 and mode of each file, or absent; the
installed version of each package, or absent). ``verify`` takes the snapshot again and names every
difference ("drift"); a role is skipped only when its stamp has a snapshot and nothing drifted.
Fail closed: a file that cannot be read, a package database that cannot be queried, a stamp
without a snapshot or a damaged state file all count as drift (the role runs), never as verified.

File format: ``{"roles": {<role>: {"inputs": <digest>, "managed": {"files": {<path>: {"sha256":
<hex>, "mode": "0644"} | {"absent": true}}, "packages": {<name>: <version> | null}} | null}}}``
(``managed`` null: the role declared nothing to verify; stamps of gpufleet 0.3 have no
``managed`` at all: the same).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat

from ansible_collections.gpufleet.cluster.plugins.module_utils.state_files import atomic_write, read_bytes

DEFAULT_PATH = "/var/lib/gpufleet/role-state.json"
_CHUNK = 1 << 20


class SnapshotError(Exception):
    """Something a role manages cannot be observed (names it)."""


def file_state(path):
    """{"sha256": hex, "mode": "0644"} of a regular file (symlinks followed), {"absent": True}
    when nothing is there; SnapshotError naming the path otherwise (unreadable, a directory ...)."""
    if not os.path.isabs(path):
        raise SnapshotError("%s is not an absolute path" % path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {"absent": True}
    except OSError as exc:
        raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
    if not stat.S_ISREG(info.st_mode):
        raise SnapshotError("%s is not a regular file" % path)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(block)
    except OSError as exc:
        raise SnapshotError("%s cannot be read: %s" % (path, exc.strerror or exc))
    return {"sha256": digest.hexdigest(), "mode": "%04o" % (info.st_mode & 0o7777)}


def parse_dpkg(text):
    """{name: version or None} from ``dpkg-query -W -f '${binary:Package}\\t${db:Status-Abbrev}\\t${Version}\\n'``
    (installed: the status's second letter is i; held: its first letter is h, the version then
    ends in " (held)"; an arch qualifier ``:amd64`` is dropped)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, status, version = parts
        name = name.split(":", 1)[0]
        installed = len(status) >= 2 and status[1] == "i"
        if installed or name not in found:
            # a hold is part of the state (dpkg's selection "h"): released by hand is drift
            found[name] = (version + (" (held)" if status[0] == "h" else "")) if installed else None
    return found


def parse_rpm(text):
    """{name: version or None} from ``rpm -q --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'``
    ("package X is not installed" lines give None)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            found[parts[0]] = parts[1]
        elif line.startswith("package ") and line.endswith(" is not installed"):
            found[line[len("package "):-len(" is not installed")]] = None
    return found


def package_versions(names, run_command, which):
    """{name: installed version or None} for ``names`` with one dpkg-query (else rpm) call;
    SnapshotError when neither answers."""
    names = sorted(set(names))
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
        rc, out, err = run_command(["rpm", "-q", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"] + names)
        found = parse_rpm(out)
        if rc != 0 and not any(value is None for value in found.values()):
            raise SnapshotError("rpm -q failed (rc %s): %s" % (rc, (err or out).strip()[:200]))
    else:
        raise SnapshotError("no dpkg-query or rpm on this host: packages cannot be checked")
    return dict((name, found.get(name)) for name in names)


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
                           "packages": dict((name, versions.get(name)) for name in packages[role])}
        except SnapshotError as exc:
            missing[role] = str(exc)
    return taken, missing


def _file_drift(path, recorded, now):
    if now.get("absent") and not recorded.get("absent"):
        return "%s missing" % path
    if recorded.get("absent") and not now.get("absent"):
        return "%s present (absent when the role converged)" % path
    if recorded.get("absent"):
        return None
    if recorded.get("sha256") != now.get("sha256"):
        return "%s changed (content differs from the converged run)" % path
    if recorded.get("mode") != now.get("mode"):
        return "%s mode %s (%s when the role converged)" % (path, now.get("mode"), recorded.get("mode"))
    return None


def _package_drift(name, recorded, now):
    if recorded == now:
        return None
    if now is None:
        return "package %s removed (%s when the role converged)" % (name, recorded)
    if recorded is None:
        return "package %s %s installed (absent when the role converged)" % (name, now)
    return "package %s now %s (%s when the role converged)" % (name, now, recorded)


def drift(stamps, run_command, which):
    """{role: [what drifted]} for every stamp of ``stamps`` ({role: stamp}); an empty list means
    verified. A stamp without a snapshot, a snapshot that is malformed, a file that cannot be
    read and a package database that cannot be queried are drift (fail closed)."""
    result, packages = {}, []
    for stamp in stamps.values():
        managed = stamp.get("managed") if isinstance(stamp, dict) else None
        if isinstance(managed, dict) and isinstance(managed.get("packages"), dict):
            packages.extend(managed["packages"])
    versions, package_error = {}, None
    try:
        versions = package_versions(packages, run_command, which)
    except SnapshotError as exc:
        package_error = str(exc)
    for role, stamp in sorted(stamps.items()):
        managed = stamp.get("managed") if isinstance(stamp, dict) else None
        if managed is None:
            result[role] = ["nothing recorded to verify on the node (the role declares no managed state)"]
            continue
        files = managed.get("files") if isinstance(managed, dict) else None
        recorded_packages = managed.get("packages") if isinstance(managed, dict) else None
        if not isinstance(files, dict) or not isinstance(recorded_packages, dict) \
                or not all(isinstance(value, dict) for value in files.values()):
            result[role] = ["its record of the managed state is malformed"]
            continue
        found = []
        for path, recorded in sorted(files.items()):
            try:
                message = _file_drift(path, recorded, file_state(path))
            except SnapshotError as exc:
                message = str(exc)
            if message:
                found.append(message)
        if recorded_packages and package_error:
            found.append(package_error)
        elif recorded_packages:
            found.extend(message for message in (_package_drift(name, recorded, versions.get(name))
                                                 for name, recorded in sorted(recorded_packages.items()))
                         if message)
        result[role] = found
    return result


def read_stamps(path):
    """({role: stamp}, problem or None): the stamps of the state file; no file is no stamps, a
    file that cannot be read or parsed is no stamps and a problem naming it."""
    try:
        data = read_bytes(path)
    except OSError as exc:
        return {}, "%s cannot be read: %s" % (path, exc.strerror or exc)
    if data is None:
        return {}, None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {}, "%s is not JSON (%s): every role runs" % (path, exc)
    roles = document.get("roles") if isinstance(document, dict) else None
    if not isinstance(roles, dict):
        return {}, "%s has no \"roles\" object: every role runs" % path
    return dict((role, stamp) for role, stamp in roles.items() if isinstance(stamp, dict)), None


def render(stamps):
    return json.dumps({"roles": stamps}, indent=4, sort_keys=True) + "\n"


def role_state_work(module):
    """The work of the module role_state (framework.run_module): see its documentation."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure

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


def read_bytes_safe(path):
    """The file's bytes; None when it does not exist or cannot be read (it is then rewritten)."""
    try:
        return read_bytes(path)
    except OSError:
        return None
