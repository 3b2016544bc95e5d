# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one writer of gpufleet's state files (``/var/lib/gpufleet``: the agent's health.json and
agent-state.json, the roles' role-state.json, reboot-required, kubelet-restart-required,
upgrade-state.json; the node_exporter textfile): atomic (a temporary file in the same directory,
fsync, rename: a reader sees the old or the new content, never a part; a full disk leaves the old
content), mode set, owner and group set when asked. Used by the node health agent and, through
the module ``state_file``, by the roles (common_internal's ``state_file`` and ``marker`` entry
points, rolling_upgrade). No Ansible here: it runs on nodes with the agent.

The reader side (``read_record``) is shared by the agent's strict record readers
(docs/contracts.md, "Records read back"): a file that is missing is absent; a file that cannot
be read or parsed is set aside (``set_aside``: kept for a post-mortem under another name) and
reported naming the file, and its reader's caller treats it as absent in the safe direction.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError


class StateFileError(OSError):
    """A state file cannot be written where asked (names the file or directory)."""


def atomic_write(path, text, mode=0o644, owner=None, group=None):
    """Write ``text`` (str or bytes) to ``path`` atomically, with ``mode`` and, when given, the
    numeric ``owner``/``group``. The directory must exist. On any error (ENOSPC) the temporary file
    is removed and the old content stays."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise StateFileError("directory %s does not exist: %s not written" % (directory, path))
    data = text.encode("utf-8") if not isinstance(text, bytes) else text
    # no tempfile module: its import costs more CPU than the rest of the write (one agent cycle <= 50 ms)
    tmp = os.path.join(directory, ".%s.%d.%s" % (os.path.basename(path), os.getpid(), os.urandom(4).hex()))
    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if owner is not None or group is not None:
            os.chown(tmp, -1 if owner is None else owner, -1 if group is None else group)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


REPLACED = "replaced by a newer file meanwhile, which is left in place"


def set_aside(path, reason, now=None, read=None):
    """Rename a damaged file to ``<path>.damaged-<UTC time>`` (kept for a post-mortem: one set
    aside before in the same second is not replaced, ``.1``, ``.2``... follow); when even the
    rename fails, remove it. Returns (new path or None, reason). ``read``: (st_dev, st_ino) of
    the file found damaged; when the renamed file is another (a writer replaced the damaged one
    between the read and the rename: another agent's new record), it is put back, never set
    aside, and None is returned."""
    now = time.time() if now is None else now
    try:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    except (ValueError, OverflowError, OSError, TypeError):  # a clock no calendar holds
        stamp = "unknown-time"
    target = base = "%s.damaged-%s" % (path, stamp)
    for number in range(1, 100):
        if not os.path.lexists(target):
            break
        target = "%s.%d" % (base, number)
    try:
        os.replace(path, target)
    except OSError as exc:
        target = None
        try:
            os.unlink(path)
        except OSError:
            pass
        reason = "%s; could not be renamed (%s), removed" % (reason, exc.strerror or exc)
        return target, reason
    if read is not None and _identity(target) not in (None, read):
        _put_back(target, path)
        return None, "%s; %s" % (reason, REPLACED)
    return target, reason


def _identity(path):
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _put_back(moved, path):
    """``moved`` back to ``path``, never over a file written there since (os.link fails then: the
    moved one is older than it and goes)."""
    try:
        os.link(moved, path)
    except FileExistsError:
        pass
    except OSError:  # no hard links here: a rename, while nothing is in the way
        if not os.path.lexists(path):
            try:
                os.rename(moved, path)
                return
            except OSError:
                pass
    try:
        os.unlink(moved)
    except OSError:
        pass


def read_bytes(path, max_bytes=None, follow_links=True):
    """The file's content, or None when it does not exist. Only a regular file is read, opened
    without blocking (open_regular: a FIFO, socket or device, or a link to one when
    ``follow_links``, is OSError EISDIR "not a regular file"; without ``follow_links`` a final
    symbolic link is OSError ELOOP) and, with ``max_bytes``, no more than that: a larger file is
    OSError EFBIG naming the bound."""
    try:
        handle = open_regular(path, follow_links=follow_links)
    except FileNotFoundError:
        return None
    with handle:
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise OSError(errno.EFBIG, "larger than %d bytes" % max_bytes, path)
    return data


def open_regular(path, follow_links=False):
    """``path`` opened for reading as a binary file object, only when it is a regular file.
    Opened without blocking (O_NONBLOCK: a FIFO put in a file's place would block the reader
    until a writer came) and, unless ``follow_links``, without following a final symbolic link
    (O_NOFOLLOW: a record is never a link, atomic_write replaces links; ELOOP then). OSError
    otherwise: FileNotFoundError when absent, EISDIR "not a regular file" for a directory, FIFO,
    socket or device."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    handle = os.fdopen(os.open(path, flags), "rb")
    try:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
    except BaseException:
        handle.close()
        raise
    return handle


# An unreadable file we may not read is someone else's to fix: reported, never moved.
_NOT_OURS = (errno.EACCES, errno.EPERM)


def read_record(path, parse, now=None, max_bytes=None, aside=True):
    """One record file read back through its strict reader ``parse(raw, record)``:
    ``(value, None)`` when readable, ``(None, None)`` when the file does not exist, ``(None,
    problem)`` when it cannot be read or ``parse`` raises RecordError: the file is then set aside
    (``<path>.damaged-<UTC time>``; a file we lack the permission to read is left in place) and
    ``problem`` names it, the reason and where it went. Never raises for a damaged file.
    ``max_bytes``: read no more than this (a larger file is refused by ``parse``). ``aside``
    False: the damaged file is left in place (a reader that may not change the node: check mode,
    another owner's file), the problem says so."""
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        reason = "unreadable: %s" % (exc.strerror or exc)
        if exc.errno == errno.ELOOP:
            reason = "a symbolic link, not a record file"
        elif exc.errno in _NOT_OURS:
            return None, "%s is %s (left in place)" % (path, reason)
        return None, _aside_problem(path, reason, now, aside)
    try:
        with handle:
            opened = os.fstat(handle.fileno())
            read = (opened.st_dev, opened.st_ino)  # the file set aside is this one, never a newer one
            raw = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    except OSError as exc:
        return None, _aside_problem(path, "unreadable: %s" % (exc.strerror or exc), now, aside)
    try:
        if max_bytes is not None and len(raw) > max_bytes:
            raise RecordError(path, "more than %d bytes" % max_bytes)
        return parse(raw, path), None
    except RecordError as exc:
        return None, _aside_problem(path, exc.reason if exc.field is None else "%s: %s" % (exc.field, exc.reason),
                                    now, aside, read)


def _aside_problem(path, reason, now, aside=True, read=None):
    if not aside:
        return "%s is damaged (%s): left in place" % (path, reason)
    target, reason = set_aside(path, reason, now, read)
    if target is None and reason.endswith(REPLACED):
        return "%s was damaged (%s)" % (path, reason)
    return "%s is damaged (%s): set aside%s" % (path, reason, " as " + target if target else "")


def marker_lines(text, owner, line_text):
    """The lines of a marker file shared by roles (``<owner>: <text>`` per line) with ``owner``'s
    line set to ``line_text`` (replaced in place or appended), or removed when ``line_text`` is
    empty. Other owners' lines are kept in order."""
    prefix = "%s: " % owner
    line_text = " ".join((line_text or "").split("\n")).strip()  # one line per owner, whatever was passed
    lines = [line for line in (text or "").splitlines() if line.strip()]
    wanted = prefix + line_text if line_text else None
    out, placed = [], False
    for line in lines:
        if line.startswith(prefix):
            if wanted is not None and not placed:
                out.append(wanted)
                placed = True
            continue
        out.append(line)
    if wanted is not None and not placed:
        out.append(wanted)
    return out


def _ident(value, kind):
    """A numeric uid/gid from a name or number; None when unset. ValueError naming it otherwise."""
    if value in (None, ""):
        return None
    if records.is_decimal(str(value)):
        return int(value)
    import grp
    import pwd

    try:
        return (pwd.getpwnam(value).pw_uid if kind == "owner" else grp.getgrnam(value).gr_gid)
    except KeyError:
        raise ValueError("option %s: no %s named %r on this host" % (kind, "user" if kind == "owner" else "group", value))


def _text(raw, record):
    """The UTF-8 text of a state file's bytes (read_record's parse for a read of any record kind:
    its own strict reader parses the text where it is acted on)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(record, "not UTF-8 text (byte %d)" % exc.start)


def read_work(path, params, check_mode):
    """The module state_file's ``state: read``: the file's text through read_record (only a
    regular file, never a symbolic link, FIFO, socket, device or directory, at most ``max_bytes``).
    ``{changed, path, exists, content, problem, set_aside}``: ``content`` None when the file is
    absent or unreadable, ``problem`` naming it when unreadable. With ``set_aside`` (never in check
    mode) an unreadable file is renamed ``<path>.damaged-<UTC time>`` (read_record), so that the
    record can be written anew; otherwise it is left in place. Writes nothing else."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure

    max_bytes = params.get("max_bytes")
    if max_bytes is None:
        max_bytes = 16 * 1024
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ModuleFailure("option max_bytes: %r is not a number of bytes > 0" % (max_bytes,), path=path)
    aside = bool(params.get("set_aside")) and not check_mode
    present = os.path.lexists(path)
    content, problem = read_record(path, _text, max_bytes=max_bytes, aside=aside)
    moved = bool(problem) and aside and not os.path.lexists(path)
    return {"changed": moved, "path": path, "exists": present, "content": content, "problem": problem,
            "set_aside": moved}


def state_file_work(module):
    """The work of the module state_file (framework.run_module): see its documentation."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure

    params = module.params
    path = params["path"]
    if not os.path.isabs(path):
        raise ModuleFailure("option path: %s is not an absolute path" % path, path=path)
    if params.get("state") == "read":
        return read_work(path, params, module.check_mode)
    try:
        mode = int(params["mode"], 8)
        if not 0 <= mode <= 0o7777:
            raise ValueError
    except (TypeError, ValueError):
        raise ModuleFailure("option mode: %r is not an octal file mode such as \"0644\"" % (params["mode"],), path=path)
    try:
        owner = _ident(params.get("owner"), "owner")
        group = _ident(params.get("group"), "group")
    except ValueError as exc:
        raise ModuleFailure(str(exc), path=path)
    if os.path.isdir(path):
        raise ModuleFailure("option path: %s is a directory" % path, path=path)
    try:
        # a FIFO, socket or device in the file's place is refused, never waited on (open_regular)
        before = read_bytes(path)
    except OSError as exc:
        raise ModuleFailure("option path: %s cannot be read as a file: %s (not written)" % (path, exc.strerror or exc),
                            path=path)
    before_text = None if before is None else before.decode("utf-8", "replace")
    if params["state"] == "absent":
        wanted = None
    elif params.get("marker_owner"):
        lines = marker_lines(before_text, params["marker_owner"], params["marker_text"] or "")
        wanted = "".join(line + "\n" for line in lines) or None  # no line left: the file goes
    elif params.get("content") is not None:
        wanted = params["content"]
    else:
        raise ModuleFailure("one of content or marker_owner is required with state=present", path=path)
    changed = wanted != before_text
    if wanted is not None and not changed:
        info = os.stat(path)
        changed = ((info.st_mode & 0o7777) != mode or (owner is not None and info.st_uid != owner)
                   or (group is not None and info.st_gid != group))
    result = {"changed": changed, "path": path, "content": wanted}
    if module._diff:
        result["diff"] = {"before": before_text or "", "after": wanted or "", "before_header": path, "after_header": path}
    if not changed or module.check_mode:
        return result
    try:
        if wanted is None:
            os.unlink(path)
        else:
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            atomic_write(path, wanted, mode=mode, owner=owner, group=group)
    except OSError as exc:
        raise ModuleFailure("%s not written: %s" % (path, exc.strerror or exc), path=path)
    return result
