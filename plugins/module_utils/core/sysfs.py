# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tolerant reader of sysfs / procfs / devfs, rooted at an arbitrary directory.

Every read is relative to ``root`` so that tests, the lab and offline inspection of a
mounted node image can point modules at a fixture tree. A file that is missing, unreadable,
answers EINVAL/EIO (as some sysfs attributes do) or holds a placeholder such as
``N/A (no PMA)`` reads as ``None``: one bad field never takes down the whole host.
Each file is read at most once per reader (results are memoised): every check of one run sees
the same value of a file, so a file that changes while a run reads it cannot give two checks
two different answers (nor one check two); a change is seen by the next run.

Absent is not unreadable. ``read`` answers ``None`` in both cases, and ``problem(rel)`` tells
them apart for the checks that must fail closed (docs/contracts.md#fail-closed-checks): a file
that does not exist when it is looked up (ENOENT / ENOTDIR at ``stat``) or resolves outside the
root is absent (``problem`` is None); a file that exists but cannot be read (EIO, EACCES, ENXIO,
any other error), that vanishes between ``stat`` and ``open`` (or between a directory listing
and the read, seen as such), is not a regular file, or is empty, has a problem: a string
naming the file and the reason, e.g. ``/sys/class/infiniband/mlx5_0/ports/1/state: read failed:
EIO (Input/output error)``. Placeholders (``N/A (no PMA)``) are answers, not problems.

Field-by-field tolerance (see docs/contracts.md, "Reading sysfs"):

- only regular files are read: a FIFO, socket or device node where an attribute should be
  reads as ``None`` without being opened for reading (``os.stat`` first, then an
  ``O_NONBLOCK`` open checked again with ``fstat`` so that a swap in between cannot block);
- at most ``MAX_READ`` bytes of a file are read;
- below a root other than ``/``, a path whose symlinks resolve outside the root (an
  absolute link in a mounted image, ``../../..`` past the top) reads as missing, and so does
  a file or directory the kernel, asked once it is open (``fd_path``), puts outside root (a
  directory on the path switched to a link out of root during the run);
- names (``listdir``, link targets) of any bytes come back as valid UTF-8 text: undecodable
  bytes are shown as ``\\xNN`` escapes, and the reader maps such a name back to the bytes on
  disk when it is used in a later path;
- ``read_int`` accepts ASCII digits only (``'²'`` is not a number) and at most 64-bit
  values, so a 5,000-digit attribute reads as ``None`` instead of breaking serialisation.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import stat

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import safe_text  # noqa: F401 (re-exported)

# Values sysfs prints when an attribute exists but has no meaningful content.
PLACEHOLDERS = frozenset(["N/A (no PMA)", "N/A", "(null)"])
# sysfs attributes are at most a page; 64 KiB leaves room for procfs tables.
MAX_READ = 65536
_INT_PATTERNS = {
    10: re.compile(r"^[+-]?[0-9]{1,20}$"),
    16: re.compile(r"^(?:0[xX])?[0-9a-fA-F]{1,16}$"),
    0: re.compile(r"^(?:[+-]?[0-9]{1,20}|0[xX][0-9a-fA-F]{1,16})$"),
}
_INT64_MAX = 2 ** 64


class ReadFailure(object):
    """Why ``open_regular`` returned no bytes: ``reason`` (text) and ``absent`` (the file did not
    exist when it was looked up). Falsy, like the ``None`` it replaces."""

    def __init__(self, reason, absent=False):
        self.reason = reason
        self.absent = absent

    def __bool__(self):
        return False

    __nonzero__ = __bool__

    def __repr__(self):
        return "ReadFailure(%r, absent=%r)" % (self.reason, self.absent)


def _os_error(action, exc):
    name = errno.errorcode.get(exc.errno, "errno %s" % exc.errno) if exc.errno else type(exc).__name__
    return "%s failed: %s (%s)" % (action, name, exc.strerror or exc)


def open_regular(path, max_bytes, opened_inside=None):
    """Bytes (at most ``max_bytes``) of ``path`` if it is a readable regular file, else a
    ReadFailure saying why (absent, not a regular file, the errno of stat/open/read).
    ``opened_inside``: a function of the open descriptor, false when the file opened is not one
    that may be read (outside the reader's root); it then reads as absent, unread.

    Never blocks on a FIFO or device: non-regular files are not opened for reading."""
    try:
        found = os.stat(path)
    except OSError as exc:
        found = exc
    except ValueError as exc:
        return ReadFailure("invalid path (%s)" % exc, absent=True)
    return _read_found(path, found, max_bytes, 0, opened_inside=opened_inside)


_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def fd_path(fd):
    """The path the kernel has for the open file ``fd`` (``/proc/self/fd``: every link on the way
    resolved, as it was when the file was opened), or None where that cannot be read (no /proc)."""
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None


def _read_found(path, found, max_bytes, flags, again=False, opened_inside=None):
    """``open_regular`` once ``path`` was looked up: ``found`` is its stat result, or the OSError
    of the look-up. ``flags`` are added to the open's (O_NOFOLLOW when ``found`` is the lstat of
    the file the path resolves to, made while resolving it). ``again``: when the open finds no
    such file (ENOENT, ENOTDIR, ELOOP: the path itself does not lead where its resolution did, as
    with ``missing/../file``, or more than 40 links on the way), the path is looked up with stat,
    and a failure of that is the answer, as when it is looked up first."""
    if isinstance(found, OSError):
        if found.errno in (errno.ENOENT, errno.ENOTDIR):
            return ReadFailure("absent", absent=True)
        return ReadFailure(_os_error("stat", found))
    if not stat.S_ISREG(found.st_mode):
        return ReadFailure("not a regular file")
    try:
        fd = os.open(path, _READ | flags)
    except OSError as exc:
        if again and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            try:
                os.stat(path)
            except OSError as failed:
                return _read_found(path, failed, max_bytes, flags, opened_inside=opened_inside)
        if exc.errno == errno.ENOENT:
            return ReadFailure("vanished between lookup and open (ENOENT)")
        return ReadFailure(_os_error("open", exc))
    try:
        if opened_inside is not None and not opened_inside(fd):
            return ReadFailure("outside root", absent=True)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ReadFailure("not a regular file")
        return read_bounded(fd, max_bytes)
    except OSError as exc:
        return ReadFailure(_os_error("read", exc))
    finally:
        os.close(fd)


def parse_int(text, base=10):
    """Integer of ``text``'s first word in ``base`` (10, 16 or 0), ASCII digits only and at
    most 64 bits; None otherwise."""
    if not isinstance(text, str):
        return None
    words = text.split()
    if not words:
        return None
    word = words[0]
    pattern = _INT_PATTERNS.get(base)
    if pattern is None or not pattern.match(word):
        return None
    try:
        value = int(word, base)
    except ValueError:
        return None
    return value if -_INT64_MAX < value < _INT64_MAX else None


def read_bounded(fd, limit):
    """At most ``limit`` bytes of the open file ``fd``, read in 64 KiB chunks (OSError as raised)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def is_index(name):
    """Whether ``name`` is a small ASCII decimal index (``'3'``; not ``'²'``, ``'٣'``, ``'1_0'``)."""
    return isinstance(name, str) and re.match(r"^[0-9]{1,9}$", name) is not None


def _split(path):
    """os.path.split of a text path, written out (a few thousand calls a run)."""
    cut = path.rfind("/") + 1
    parent, name = path[:cut], path[cut:]
    if parent and parent != "/" * len(parent):
        parent = parent.rstrip("/")
    return parent, name


class _LinkLoop(Exception):
    """More than 40 symbolic links in a row while resolving a path."""


class SysfsReader(object):
    """Read files below ``root`` with memoisation and field-level tolerance."""

    def __init__(self, root="/"):
        self.root = root  # normalised once by the caller (framework.given_root)
        self._root_real = os.path.realpath(self.root)
        self._whole = self._root_real == os.sep  # root /: every path is inside, none is resolved to read
        self._root_below = self._root_real + os.sep
        self._root_slash = root if root.endswith("/") else root + "/"
        self._cache = {}
        self._problems = {}  # rel -> why a present file gave no value (see problem())
        self._dir_cache = {}
        self._raw = {}  # escaped name shown to callers -> name on disk
        self._real = {}  # path -> its realpath (a run reads many files of one directory)
        self._found = {}  # resolved path -> its lstat result or OSError (made once, while resolving)
        self._gave_up = set()  # paths left to os.path.realpath (a loop)
        # below a root other than /: each file read or directory listed is asked where it is once open
        self._verify = not self._whole and os.path.isdir("/proc/self/fd")

    def path(self, rel):
        """Absolute path of ``rel`` (e.g. ``sys/module/mlx5_core``) below root."""
        rel = rel.lstrip("/")
        if self._raw:
            rel = "/".join(self._raw.get(part, part) for part in rel.split("/"))
        return self._root_slash + rel  # os.path.join(root, rel)

    def _inside(self, full):
        """Whether ``full`` resolves inside root (always true for root ``/``)."""
        if self._whole:
            return True
        try:
            real = self._realpath(full)
        except (OSError, ValueError):
            return False
        return self._below_root(real)

    def _below_root(self, real):
        """Whether the resolved path ``real`` is root or below it."""
        return real == self._root_real or real.startswith(self._root_below)

    def _realpath(self, full):
        """os.path.realpath(full), each path resolved once per reader: realpath(parent/name) is
        realpath(parent)/name unless name is a symlink (then its target is resolved from
        realpath(parent), the directory holding it, or from / when absolute) or a dot entry. A
        cycle reads hundreds of files below a few dozen directories: one lstat per new path
        component, instead of one per component of every path as os.path.realpath does. More than
        40 links in a row (a loop) is left to os.path.realpath."""
        try:
            return self._resolve(full, 0)
        except (_LinkLoop, RecursionError):  # not cached: a link resolved through the loop is not where it ends
            self._gave_up.add(full)
            return os.path.realpath(full)

    def _lstat(self, real):
        try:
            found = os.lstat(real)
        except OSError as exc:
            found = exc
        self._found[real] = found
        return found

    def _resolve(self, full, links):
        real = self._real.get(full)
        if real is not None:
            return real
        parent, name = _split(full)
        if not parent or parent == full:
            real = os.path.realpath(full)
        elif name in ("", "."):
            real = self._resolve(parent, links)
        elif name == "..":
            real = os.path.dirname(self._resolve(parent, links))
        else:
            above = self._resolve(parent, links)
            if not above.endswith("/"):
                above += "/"
            real = above + name
            found = self._found.get(real)
            if found is None:
                found = self._lstat(real)
            # missing (an OSError): kept as it is, as os.path.realpath does
            if not isinstance(found, OSError) and stat.S_ISLNK(found.st_mode):
                if links >= 40:
                    raise _LinkLoop(full)
                target = os.readlink(real)
                # an absolute target is resolved from /, as the kernel does
                real = self._resolve(target if target.startswith("/") else above + target, links + 1)
        self._real[full] = real
        return real

    def _read_inside(self, full):
        """open_regular(full) below a root other than /: nothing outside root is read. The lstat
        made while resolving ``full`` serves as open_regular's stat when it found that full's last
        name, in its resolved directory, is a regular file (not a link: the very entry the kernel
        opens; opened with O_NOFOLLOW, so a link put there since is not followed). In every other
        case (missing, an error, a link, not a regular file, a loop) the path itself is looked up
        as before, so the answer and its reason are the same; and when the open finds no such
        file, the path is looked up too (``missing/../file`` resolves lexically, the kernel finds
        nothing there)."""
        try:
            real = self._realpath(full)
        except (OSError, ValueError):
            return ReadFailure("outside root", absent=True)
        if not self._below_root(real):
            return ReadFailure("outside root", absent=True)
        parent, name = _split(full)
        above = self._real.get(parent)
        found = None
        if above is not None and name not in ("", ".", "..") and full not in self._gave_up:
            found = self._found.get((above if above.endswith("/") else above + "/") + name)
        opened_inside = self._opened_inside if self._verify else None
        if found is None or isinstance(found, OSError) or not stat.S_ISREG(found.st_mode):
            return open_regular(full, MAX_READ, opened_inside)
        return _read_found(full, found, MAX_READ, getattr(os, "O_NOFOLLOW", 0), again=True,
                           opened_inside=opened_inside)

    def _opened_inside(self, fd):
        """Whether the file or directory open as ``fd`` is inside root, asked of the kernel after the
        open (``fd_path``: one readlink). The resolution above was made before the open and is kept for
        the run, so a directory on the path switched to a link out of root since then, or between the
        look-up and the open, would otherwise be followed (red team round 9: F1 a switch between two
        reads of one run, F2 one right before the open). The lstat made while resolving cannot tell: it
        walks the same switched path. What is outside root is then not read, but it was opened
        (O_NONBLOCK; the look-up never lets a FIFO or device be opened, one swapped in since would be).
        Where /proc/self/fd is not there (``_verify`` false), only the resolution's check applies."""
        where = fd_path(fd)
        return where is not None and self._below_root(where)

    def _names(self, full):
        """os.listdir(full); below a root other than /, of the directory opened only when it is inside
        root (``_opened_inside``)."""
        if not self._verify:  # root / (nothing to ask), or no /proc
            return os.listdir(full)
        fd = os.open(full, _READ | getattr(os, "O_DIRECTORY", 0))
        try:
            return os.listdir(fd) if self._opened_inside(fd) else []
        finally:
            os.close(fd)

    def _display(self, name):
        shown = safe_text(name)
        if shown != name:
            self._raw[shown] = name
        return shown

    def exists(self, rel):
        full = self.path(rel)
        try:
            return os.path.exists(full) and self._inside(full)
        except (OSError, ValueError):
            return False

    def isdir(self, rel):
        full = self.path(rel)
        try:
            return os.path.isdir(full) and self._inside(full)
        except (OSError, ValueError):
            return False

    def read(self, rel):
        """Stripped text of a file, or None when absent/unreadable/placeholder (``problem``
        tells unreadable from absent). An empty file reads as ``""``."""
        if rel in self._cache:
            return self._cache[rel]
        value = None
        full = self.path(rel)
        raw = open_regular(full, MAX_READ) if self._whole else self._read_inside(full)
        if isinstance(raw, bytes):
            text = raw.decode("utf-8", "replace").strip().strip("\x00").strip()
            if not text:
                self._problems[rel] = "empty"
            if text not in PLACEHOLDERS:
                value = text
        elif raw is None or not getattr(raw, "absent", False):
            self._problems[rel] = getattr(raw, "reason", None) or "unreadable"
        self._cache[rel] = value
        return value

    def problem(self, rel):
        """``/<rel>: <reason>`` when the file exists but gave no usable value (read failed with
        EIO, EACCES, ENXIO..., vanished after it was looked up, not a regular file, empty), None
        when it was read or is absent. Reads the file (memoised) when it was not read yet."""
        self.read(rel)
        reason = self._problems.get(rel)
        return None if reason is None else "/%s: %s" % (rel.lstrip("/"), reason)

    def required_problem(self, rel):
        """``problem(rel)``, or ``/<rel>: missing`` when the file is absent: for attributes the
        kernel always provides below an entry that exists (a listed PCI function's vendor)."""
        if self.read(rel) is None and rel not in self._problems:
            return "/%s: missing" % rel.lstrip("/")
        return self.problem(rel)

    def read_lines(self, rel):
        text = self.read(rel)
        if text is None:
            return []
        return [line for line in text.splitlines() if line.strip()]

    def read_int(self, rel, base=10):
        """Integer content (base 0 accepts 0x prefixes), or None when not an integer.

        ASCII digits only, at most 64 bits (see ``parse_int``)."""
        return parse_int(self.read(rel), base)

    def listdir(self, rel):
        """Sorted entries of a directory (names as valid UTF-8 text), [] when missing or
        unreadable."""
        if rel in self._dir_cache:
            return self._dir_cache[rel]
        full = self.path(rel)
        entries = []
        try:
            if self._inside(full):
                entries = sorted(self._display(name) for name in self._names(full))
        except (OSError, ValueError):
            entries = []
        self._dir_cache[rel] = entries
        return entries

    def link_name(self, rel):
        """Basename of a symlink's target (``device/driver`` -> ``mlx5_core``), or None."""
        try:
            target = os.readlink(self.path(rel))
        except (OSError, ValueError):
            return None
        return self._display(os.path.basename(target.rstrip("/"))) or None

    def real_name(self, rel):
        """Basename of the fully resolved path (PCI address behind ``device``), or None."""
        full = self.path(rel)
        try:
            if not os.path.exists(full) or not self._inside(full):
                return None
            # resolved now, as the open of a read resolves: after a link switched inside root during the run the
            # place named is the one a read of it opens (red team round 9, F5: the cached resolution named the old)
            return self._display(os.path.basename(os.path.realpath(full))) or None
        except (OSError, ValueError):
            return None

    def real_parts(self, rel):
        """Components of the fully resolved path of ``rel`` relative to root
        (``['sys', 'devices', 'pci0000:00', '0000:00:01.0', ...]``), or None when it is missing
        or resolves outside root. Names come back as valid UTF-8 text (see ``listdir``)."""
        full = self.path(rel)
        try:
            if not os.path.exists(full) or not self._inside(full):
                return None
            relative = os.path.relpath(os.path.realpath(full), self._root_real)  # resolved now (real_name)
        except (OSError, ValueError):
            return None
        if relative == os.curdir or relative.startswith(os.pardir):
            return None
        return [self._display(part) for part in relative.split(os.sep)]


def validate_root(root):
    """Return an error message when ``root`` cannot serve as a filesystem root, else None."""
    if not root:
        return "option root must not be empty"
    if not os.path.isdir(root):
        return "option root: %s is not a directory" % root
    return None
