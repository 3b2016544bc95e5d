# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep this collection's module_utils compiled on the node between module runs.

Why this exists (hand-written, because no library does it): Ansible ships a module and its
module_utils to the node in a zip on every run (AnsiballZ), and Python imports from a zip with
``zipimport``, which keeps no bytecode cache and (Python 3.11, profiled) compiles each module twice:
once in ``find_spec`` to learn its file name, once to run it. ``node_validate`` imports 16
module_utils files (about 220 kB of source); the cache saves 48.6 ms of CPU per run of it
(``bench/module_payload.py``, docs/performance.md), more than the checks themselves take.
Python's own import system caches bytecode for files on disk (``__pycache__``). So
:func:`activate` copies this collection's module_utils (every wing, sub-packages included) from the
payload once per content to a private directory on the node and puts that directory, and its copy
of each wing package already imported (this file's own), first on the packages' ``__path__``: the
standard path finder and ``SourceFileLoader`` import them from there and keep their ``.pyc`` files.
Only this collection's module_utils are affected; ansible-core's own stay in the zip.

Where: ``$XDG_CACHE_HOME/gpufleet/module_utils/<content hash>`` (default ``~/.cache``; one per
module's set of module_utils, since each payload carries only what its module imports), created with
mode 0700 and used only when it belongs to the user the module runs as and nobody else can write to
it. A content hash names each directory, so a changed collection gets a new one; directories not used
for 7 days are removed when a new one is made. Nothing is written when Python is told not to write
bytecode (``PYTHONDONTWRITEBYTECODE``), and any problem (no home directory, a read-only one, a
foreign owner, a damaged copy) leaves the imports where they are, in the zip: the cache can make a run
faster, never fail it. Outside a zip (unit tests, ansible-test, Mitogen's importer) it does nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
import zipimport
import zlib


def module_utils_package(name):
    """The collection's module_utils package of a module ``name`` below it (any wing depth)."""
    head, found, _rest = name.partition(".module_utils.")
    return head + ".module_utils" if found else name.rpartition(".")[0]


PACKAGE = module_utils_package(__name__)
MAX_UNUSED_DAYS = 7


def cache_root(environ=None):
    """The directory that holds one subdirectory per content hash, or None without a home."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative: ignored, as the XDG base directory spec says
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):  # expanduser left "~" (no HOME, no passwd entry)
        return None
    return os.path.join(base, "gpufleet", "module_utils")


def private(path):
    """True when ``path`` is a directory (not a link) of this user that nobody else can write to."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def payload_files(archive, prefix):
    """{path below ``prefix`` ("core/checks.py"): (crc32, size)} of the .py files below ``prefix``
    (sub-packages included) in the zip ``archive``."""
    files = {}
    with zipfile.ZipFile(archive) as payload:
        for info in payload.infolist():
            name = info.filename[len(prefix):]
            parts = name.split("/")
            if (info.filename.startswith(prefix) and name.endswith(".py")
                    and all(part and part not in (".", "..") for part in parts)):
                files[name] = (info.CRC, info.file_size)
    return files


def present_files(directory):
    """The .py files below ``directory`` (sub-directories included, ``__pycache__`` not), as paths
    relative to it with ``/``; OSError when it cannot be listed."""
    found = set()
    for folder, dirs, names in os.walk(directory, onerror=_raise):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        relative = os.path.relpath(folder, directory)
        for name in names:
            if name.endswith(".py"):
                found.add(name if relative == "." else "%s/%s" % (relative.replace(os.sep, "/"), name))
    return found


def _raise(error):
    raise error


def content_key(files):
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(("%s %d %d\n" % ((name,) + files[name])).encode("utf-8"))
    return digest.hexdigest()[:32]


def matches(directory, files):
    """True when ``directory`` holds exactly these files with these contents (crc32 and size)."""
    try:
        if present_files(directory) != set(files):
            return False
        for name, (crc, size) in files.items():
            with open(os.path.join(directory, name), "rb") as handle:
                data = handle.read()
            if len(data) != size or zlib.crc32(data) & 0xFFFFFFFF != crc:
                return False
    except OSError:
        return False
    return True


def usable(directory, files):
    """True when ``directory`` is private (see :func:`private`) and holds exactly ``files``."""
    return private(directory) and matches(directory, files)


def extract(archive, prefix, files, root, key):
    """Write the files to a new directory below ``root`` and rename it to ``key``; its path.

    Runs on the same node may race: the rename is atomic, and a complete copy another run renamed
    first is used as it is (never removed while that run imports from it).
    """
    target = os.path.join(root, key)
    staging = tempfile.mkdtemp(prefix=".new-", dir=root)
    try:
        with zipfile.ZipFile(archive) as payload:
            for name in files:
                folder = os.path.dirname(os.path.join(staging, name))
                if not os.path.isdir(folder):
                    os.makedirs(folder, mode=0o700)
                fd = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(payload.read(prefix + name))
        if os.path.lexists(target) and not usable(target, files):  # damaged, or not ours alone
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.unlink(target)
        try:
            os.rename(staging, target)
        except OSError:
            if not usable(target, files):
                raise
            shutil.rmtree(staging)  # another run was first with the same content
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def prune(root, keep, now=None):
    """Remove the copies next to ``keep`` that no run has used for MAX_UNUSED_DAYS."""
    limit = (time.time() if now is None else now) - MAX_UNUSED_DAYS * 86400
    for name in os.listdir(root):
        path = os.path.join(root, name)
        try:
            if path != keep and private(path) and os.lstat(path).st_mtime < limit:
                shutil.rmtree(path)
        except OSError:
            pass


def activate(package=PACKAGE, loader=None, environ=None):
    """Import the rest of ``package`` from the on-disk copy; its path, or None when left in the zip.

    Call it before importing other module_utils of this collection (the module's first import).
    """
    loader = globals().get("__loader__") if loader is None else loader
    module = sys.modules.get(package)
    if not isinstance(loader, zipimport.zipimporter) or module is None or sys.dont_write_bytecode:
        return None
    root = cache_root(environ)
    if root is None:
        return None
    prefix = package.replace(".", "/") + "/"  # where the package's files are in the zip
    if not loader.prefix.replace(os.sep, "/").startswith(prefix):
        return None
    try:
        archive = loader.archive
        files = payload_files(archive, prefix)
        if not files:
            return None
        key = content_key(files)
        os.makedirs(root, mode=0o700, exist_ok=True)
        if not private(root):
            return None
        target = os.path.join(root, key)
        if usable(target, files):
            os.utime(target, None)  # in use: not pruned
        else:
            target = extract(archive, prefix, files, root, key)
            prune(root, target)
    except (OSError, ValueError, zipimport.ZipImportError, zipfile.BadZipFile):
        return None
    module.__path__.insert(0, target)
    for name, sub in list(sys.modules.items()):  # the wings imported already (this file's): their copies first
        if name.startswith(package + ".") and getattr(sub, "__path__", None) is not None:
            copy = os.path.join(target, *name[len(package) + 1:].split("."))
            if os.path.isdir(copy):
                sub.__path__.insert(0, copy)
    return target
