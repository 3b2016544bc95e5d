# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's state as gpufleet reads it, in one archive that replays (module node_capture, docs/capture.md).

What is recorded is exactly what the read-only modules read (gpu_facts, mlx5_facts, topology_facts,
node_validate's gpu, rdma and tuning families):

- the files and directories below ``root`` matched by ``ALLOW`` (``capture_patterns``): glob
  patterns over paths relative to root. ``tests/unit/test_node_capture.py`` runs every reader over
  every fixture node with a reader that records each path it looks at and fails when one is not
  covered by these patterns, so the list cannot drift from the code;
- every NVML query the GPU family makes, with its answer or error (``NvmlRecorder``: the family is
  run over a recording proxy of the binding), written in the scenario format of the fake NVML
  (``tests/fake_nvml/pynvml.py``, loaded with ``GPUFLEET_FAKE_NVML_SCENARIO``);
- the kernel-log lines the XID reader uses (the ``NVRM`` lines of the window), as
  ``var/log/kern.log`` below the captured root, where ``xid_source: auto`` finds them;
- the output of ``ofed_info -s`` when root is ``/`` and it is installed (``commands/``).

Bounded: a path is resolved component by component below root, every access through directory
descriptors opened from root with ``O_NOFOLLOW`` (a directory swapped for a link while the capture
runs is refused, never followed); a file cut at ``max_file_bytes`` loses the token the cut split; a
name over 255 bytes once pseudonymised is shortened (MANIFEST ``shortened``); the kernel log file
obeys the link rule; a symbolic link is stored relative
and inside root (an absolute target below root is rewritten relative; a link out of root, into a
loop or through a file is an empty placeholder, listed in the MANIFEST) so that the archive unpacks
with tarfile's ``data`` filter, and followed only inside ``TREES``; each file is read
once (at most ``max_file_bytes``, the sysfs reader's own limit by default); FIFOs and sockets are
skipped, device nodes get an empty stand-in; the number of entries and the total size are capped
(a capture over a cap fails naming the option: an incomplete capture would not replay).

Safe to share: ``Pseudonymiser`` (capture_pseudonym.py) replaces serial numbers, GUIDs, MAC and
hardware addresses, UUIDs, host names and IP addresses by stable pseudonyms of the same shape (the
same value gets the same pseudonym within a capture, in file contents, path names, link targets,
the NVML scenario, the log lines, MANIFEST and capture.json); serials are collected from files, the
kernel log (the driver's ``NVRM: GPU Board Serial Number``) and NVML alike; nothing else is read
(no environment, no credentials).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
import socket
import stat
import tarfile
import tempfile
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.capture_pseudonym import Pseudonymiser
from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure, checked_root
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import MAX_READ, SysfsReader, read_bounded

FORMAT = 1
ARCHIVE_TOP = "gpufleet-capture"
KERN_LOG = "var/log/kern.log"
NVML_FILE = "nvml.json"
DEFAULT_KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
DEFAULT_KUBELET_CONFIG_DIR = "/var/lib/kubelet/config.d"

# What the readers read, relative to root (the drift test keeps it equal to the code's reads).
ALLOW = (
    # PCI functions (gpu.py, mlx5.py, topology.py): every function is identified by vendor/class
    "sys/bus/pci/devices/*/vendor",
    "sys/bus/pci/devices/*/class",
    "sys/bus/pci/devices/*/device",
    "sys/bus/pci/devices/*/numa_node",
    "sys/bus/pci/devices/*/max_link_width",
    "sys/bus/pci/devices/*/max_link_speed",
    "sys/bus/pci/devices/*/current_link_width",
    "sys/bus/pci/devices/*/current_link_speed",
    # RDMA devices and ports (mlx5.py, rdma_checks.py, topology.py, irq_affinity.py)
    "sys/class/infiniband/*/board_id",
    "sys/class/infiniband/*/fw_ver",
    "sys/class/infiniband/*/hca_type",
    "sys/class/infiniband/*/node_guid",
    "sys/class/infiniband/*/node_type",
    "sys/class/infiniband/*/device/driver",
    "sys/class/infiniband/*/device/numa_node",
    "sys/class/infiniband/*/device/local_cpulist",
    "sys/class/infiniband/*/device/msi_irqs/*",
    "sys/class/infiniband/*/device/net/*",
    "sys/class/infiniband/*/device/infiniband_verbs/*/ibdev",
    "sys/class/infiniband/*/ports/*/state",
    "sys/class/infiniband/*/ports/*/phys_state",
    "sys/class/infiniband/*/ports/*/rate",
    "sys/class/infiniband/*/ports/*/link_layer",
    "sys/class/infiniband/*/ports/*/lid",
    "sys/class/infiniband/*/ports/*/sm_lid",
    "sys/class/infiniband/*/ports/*/counters/*",
    "sys/class/infiniband/*/ports/*/gids/*",
    "sys/class/infiniband/*/ports/*/gid_attrs/types/*",
    "sys/class/infiniband/*/ports/*/gid_attrs/ndevs/*",
    "sys/class/infiniband_verbs/*/ibdev",
    "dev/infiniband/*",
    # kernel modules (gpu.py, mlx5.py, rdma_checks.py): which are loaded, versions, peermem holder
    "sys/module/*",
    "sys/module/*/version",
    "sys/module/*/srcversion",
    "sys/module/ib_core/holders/*",
    "proc/sys/kernel/osrelease",
    # tuning family (tuning_checks.py, irq_affinity.py)
    "sys/kernel/mm/hugepages/*/nr_hugepages",
    "proc/irq/*/smp_affinity_list",
    "etc/tuned/active_profile",
    # NUMA and CPU lists, the NVIDIA driver's own view (for the reader of a bug report)
    "sys/devices/system/node/online",
    "sys/devices/system/node/node*/cpulist",
    "sys/devices/system/cpu/online",
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus/*/information",
)
# Trees a symbolic link may lead into and still be followed (the kernel's own links stay inside).
TREES = ("sys", "proc", "dev", "etc/tuned", "var/lib/kubelet")
MAX_LINKS = 40
DEFAULT_MAX_ENTRIES = 200000
DEFAULT_MAX_TOTAL_BYTES = 64 * 1024 * 1024
NO_GPU = "no NVIDIA GPU on the PCI bus: the GPU family queries neither NVML nor the kernel log"
# Names the readers look up: a path component equal to a literal component of the capture patterns
# (``sys``, ``dev``, ``node``, ``nvidia``, ``config.d``), or below one of these trees (kernel module
# and driver names): host names and redact values are not applied to it, only shapes and serials are.
LAYOUT_TREES = (("sys", "module"), ("sys", "bus", "pci", "drivers"))
# Files holding a version: every dotted quad in them is a version (``1.14.9.2``), not an address.
VERSION_FILES = frozenset(["version", "srcversion", "fw_ver", "osrelease"])
# A name component is at most NAME_MAX bytes once pseudonymised (else shortened, listed in MANIFEST);
# a member whose path would exceed PATH_LIMIT bytes is left out (listed in MANIFEST).
NAME_MAX = 255
PATH_LIMIT = 3800
# A file cut at max_file_bytes loses the token the cut split (at most this many bytes, back to the
# last separator): half an identifier is not recognisable any more, so it is not kept.
PARTIAL_MAX = 256
# What a token (an identifier, a host name, a serial) is made of; any other byte separates tokens.
TOKEN_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz._:-%~+@") | frozenset(
    range(0x80, 0x100))
DIR_FDS = 32
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_FILE_FLAGS = (os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
# ``<ISO time> host kernel: …`` / ``Nov 20 11:00:00 host kernel: …``: the host the log names.
LOG_HOST = re.compile(r"^(?:<[0-9]+>)?(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T\S+|[A-Z][a-z]{2} +[0-9]{1,2} "
                      r"[0-9]{2}:[0-9]{2}:[0-9]{2})\s+(\S+)\s+kernel(?:\[[0-9]+\])?:")


class CaptureError(ModuleFailure):
    """The capture cannot be made (a cap reached, dest unusable): the message names the option."""


def capture_patterns(kubelet_config=DEFAULT_KUBELET_CONFIG, kubelet_config_dir=DEFAULT_KUBELET_CONFIG_DIR):
    """``ALLOW`` plus the kubelet configuration files of the tuning family's options."""
    patterns = list(ALLOW)
    if kubelet_config:
        patterns.append(kubelet_config.strip("/"))
    if kubelet_config_dir:
        patterns.append(kubelet_config_dir.strip("/") + "/*.conf")
    return patterns


def capture_trees(patterns):
    """``TREES`` plus the directories of patterns outside them (kubelet files elsewhere)."""
    trees = list(TREES)
    for pattern in patterns:
        if not any(_under(pattern, tree) for tree in trees):
            trees.append(os.path.dirname(pattern) or pattern)
    return trees


def _under(rel, tree):
    return rel == tree or rel.startswith(tree + "/")


def _relative(target, parent):
    """The relative link text from directory ``parent`` to ``target`` (components below root)."""
    return os.path.relpath("/" + "/".join(target), "/" + "/".join(parent))


def allowed(rel, patterns=None):
    """Whether a path a reader looks at (relative to root) is covered by the capture: it matches a
    pattern, or a pattern's leading components (a directory the capture lists or passes through)."""
    parts = [part for part in rel.strip("/").split("/") if part]
    for pattern in (ALLOW if patterns is None else patterns):
        comps = pattern.split("/")
        if len(parts) <= len(comps) and all(fnmatch.fnmatchcase(p, c) for p, c in zip(parts, comps)):
            return True
    return False


# -- the tree ---------------------------------------------------------------------------------
class TreeWalker(object):
    """Expands the patterns below ``root`` and records what it finds, keyed by the real path
    (relative to root): ``dir``, ``file`` (bytes), ``link`` (target as written), ``device``
    (an empty stand-in); ``skipped`` and ``unreadable`` say what was left out and why."""

    def __init__(self, root, trees=TREES, max_file_bytes=MAX_READ, max_entries=DEFAULT_MAX_ENTRIES,
                 max_total_bytes=DEFAULT_MAX_TOTAL_BYTES):
        self.root = root
        self.host_root = os.path.realpath(root) == os.sep
        self.trees = tuple(trees)
        self.max_file_bytes = max_file_bytes
        self.max_entries = max_entries
        self.max_total_bytes = max_total_bytes
        self.nodes = {}
        self.skipped = {}
        self.unreadable = {}
        self.truncated = []
        self.cut = {}
        self.total_bytes = 0
        self.reads = 0
        self.rewritten = {}
        self._resolved = {(): ()}
        self._dir_fds = {}
        self._root_forms = sorted(set((os.path.normpath(os.path.abspath(root)), os.path.realpath(root))))

    def _full(self, parts):
        return os.path.join(self.root, *parts) if parts else self.root

    # Every access goes through directory file descriptors opened component by component with
    # O_NOFOLLOW from root: a directory swapped for a link while the capture runs is refused
    # (ELOOP/ENOTDIR), never followed out of root.
    # The descriptors of the last directories opened are kept (DIR_FDS): each was reached from
    # root without following a link, so what is opened below it is below root.
    def _open_dir(self, parts):
        """A new descriptor of the directory at the real components ``parts`` (the caller closes it)."""
        parts = tuple(parts)
        cache = self._dir_fds
        start = len(parts)
        while start > 0 and parts[:start] not in cache:
            start -= 1
        if start:
            fd = os.dup(cache[parts[:start]])
        else:
            fd = os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            for index in range(start, len(parts)):
                following = os.open(parts[index], _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = following
        except BaseException:
            os.close(fd)
            raise
        if parts and parts not in cache:
            if len(cache) >= DIR_FDS:
                os.close(cache.pop(next(iter(cache))))
            cache[parts] = os.dup(fd)
        return fd

    def close(self):
        """Close the kept directory descriptors."""
        while self._dir_fds:
            os.close(self._dir_fds.popitem()[1])

    def __del__(self):
        try:
            self.close()
        except (OSError, AttributeError, TypeError):
            pass

    def _at(self, parts, action):
        fd = self._open_dir(parts[:-1])
        try:
            return action(parts[-1], fd)
        finally:
            os.close(fd)

    def _lstat(self, parts):
        if not parts:
            return os.stat(self.root)
        return self._at(parts, lambda name, fd: os.stat(name, dir_fd=fd, follow_symlinks=False))

    def _readlink(self, parts):
        return self._at(parts, lambda name, fd: os.readlink(name, dir_fd=fd))

    def _isdir(self, parts):
        try:
            os.close(self._open_dir(parts))
        except (OSError, ValueError):
            return False
        return True

    def _listdir(self, parts):
        fd = self._open_dir(parts)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def read_file(self, parts, limit):
        """Bytes (at most ``limit``) of the regular file at the real components ``parts``, or a
        str saying why not (never a FIFO, a device, a link or anything outside root)."""
        def read(name, fd):
            try:
                handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return "changed into a link while captured: not read"
                return "open failed: %s" % (exc.strerror or type(exc).__name__)
            try:
                if not stat.S_ISREG(os.fstat(handle).st_mode):
                    return "not a regular file when opened: not read"
                return read_bounded(handle, limit)
            except OSError as exc:
                return "read failed: %s" % (exc.strerror or type(exc).__name__)
            finally:
                os.close(handle)
        try:
            return self._at(parts, read)
        except (OSError, ValueError) as exc:
            return "a directory on the way changed while captured: not read (%s)" % (
                getattr(exc, "strerror", None) or type(exc).__name__)

    def _add(self, parts, entry):
        key = "/".join(parts)
        if key in self.nodes:
            return
        if len(self.nodes) >= self.max_entries:
            raise CaptureError("option max_entries: the capture reached %d entries (at /%s); raise the "
                               "limit to capture this node" % (self.max_entries, key))
        self.nodes[key] = entry

    def _inside_trees(self, parts):
        rel = "/".join(parts)
        return any(_under(rel, tree) for tree in self.trees)

    def resolve(self, parts, depth=0):
        """Real components (relative to root) of the logical path ``parts``, recording every link
        and directory on the way; None when missing or when a link leaves root or the trees."""
        parts = tuple(parts)
        if parts in self._resolved:
            return self._resolved[parts]
        parent = self.resolve(parts[:-1], depth)
        real = None
        if parent is not None:
            real = self._step(parent, parts[-1], depth)
        self._resolved[parts] = real
        return real

    def _step(self, parent, name, depth):
        cand = parent + (name,)
        try:
            info = self._lstat(cand)
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(info.st_mode):
            return self._link(parent, cand, depth)
        if stat.S_ISDIR(info.st_mode):
            self._add(cand, ("dir",))
        return cand

    def _link(self, parent, cand, depth):
        """A symbolic link: recorded relative and inside root (an absolute target below root is
        rewritten relative), or, when it leads out of root or into a loop, an empty placeholder
        (listed as skipped); followed only inside the captured trees."""
        key = "/".join(cand)
        if key in self.nodes and self.nodes[key][0] != "link":
            return None  # replaced by a placeholder already
        try:
            target = self._readlink(cand)
        except (OSError, ValueError) as exc:
            self.unreadable[key] = "readlink failed: %s" % (exc.strerror or type(exc).__name__)
            return None
        normal = self._link_target(parent, target)
        if normal is None:
            self._placeholder(cand, "link target leaves root (%s): not followed, replaced by an empty placeholder"
                              % ("absolute" if os.path.isabs(target) else "relative"))
            return None
        if os.path.isabs(target) and key not in self.nodes:
            self.rewritten[key] = "absolute link target made relative"
        self._add(cand, ("link", _relative(normal, parent), normal))
        if depth >= MAX_LINKS:
            self.skipped[key] = "more than %d links in a row: not followed" % MAX_LINKS
            return None
        if not self._inside_trees(normal):
            self.skipped[key] = "link target /%s outside the captured trees: not followed" % "/".join(normal)
            return None
        return self.resolve(normal, depth + 1)

    def settle_links(self):
        """Replace by an empty placeholder every link that does not lead somewhere in the archive:
        into a loop (more than ``MAX_LINKS`` links in a row) or through a file (a placeholder). Such
        a link replays as an error on the node too, and tarfile's data filter refuses it where it
        resolves links strictly (a loop, a file used as a directory)."""
        links = sorted(key for key, entry in self.nodes.items() if entry[0] == "link")
        while links:
            bad = [key for key in links if not self._leads_somewhere(self.nodes[key][2])]
            for key in bad:  # all at once: every link of a loop is replaced, not all but one
                self._placeholder(tuple(key.split("/")), "link leads into a loop or through a file: "
                                                         "replaced by an empty placeholder")
            links = [key for key in links if key not in bad] if bad else []

    def _leads_somewhere(self, parts, depth=0):
        """Whether the path ``parts`` resolves in the archive without a loop and without passing
        through a file; a missing component ends the walk (what is below it is missing too)."""
        for index in range(len(parts)):
            entry = self.nodes.get("/".join(parts[:index + 1]))
            if entry is None:
                return True
            if entry[0] == "link":
                if depth >= MAX_LINKS:
                    return False
                return self._leads_somewhere(tuple(entry[2]) + tuple(parts[index + 1:]), depth + 1)
            if entry[0] != "dir" and index < len(parts) - 1:
                return False
        return True

    def _placeholder(self, cand, reason):
        key = "/".join(cand)
        self.rewritten.pop(key, None)
        self.nodes.pop(key, None)
        self._add(cand, ("device", "link not kept: empty"))
        self.skipped[key] = reason

    def _link_target(self, parent, target):
        """Components below root of where a link in ``parent`` to ``target`` leads (lexically, as
        the link is stored), or None when that is outside root. Below the host's root ``..`` of
        root is root (as the kernel resolves it); an absolute target below another root counts
        when it names a path below that root."""
        if os.path.isabs(target):
            if self.host_root:
                comps = target.split("/")
            else:
                comps = self._below_root(target)
                if comps is None:
                    return None
            base = ()
        else:
            comps, base = target.split("/"), parent
        normal = list(base)
        for part in comps:
            if part in ("", "."):
                continue
            if part != "..":
                normal.append(part)
            elif normal:
                normal.pop()
            elif not self.host_root:
                return None
        return tuple(normal)

    def _below_root(self, target):
        path = os.path.normpath(target)
        for base in self._root_forms:
            if path == base:
                return []
            if path.startswith(base.rstrip(os.sep) + os.sep):
                return path[len(base.rstrip(os.sep)) + 1:].split(os.sep)
        return None

    def expand(self, pattern):
        """Capture every path matching ``pattern`` (components may be globs)."""
        frontier = [()]
        comps = pattern.split("/")
        for index, comp in enumerate(comps):
            last = index == len(comps) - 1
            following = []
            for logical in frontier:
                real = self.resolve(logical)
                if real is None or not self._isdir(real):
                    continue
                if any(ch in comp for ch in "*?["):
                    try:
                        names = sorted(self._listdir(real))
                    except (OSError, ValueError) as exc:
                        self.unreadable["/".join(real)] = "listing failed: %s" % (
                            getattr(exc, "strerror", None) or type(exc).__name__)
                        continue
                    following.extend(logical + (name,) for name in names if fnmatch.fnmatchcase(name, comp))
                else:
                    following.append(logical + (comp,))
            frontier = []
            for logical in following:
                real = self.resolve(logical)
                if real is None:
                    continue
                if last:
                    self._leaf(real)
                elif not self._isdir(real):
                    self._stand_in(real)  # keeps the listing of its directory whole
                frontier.append(logical)

    def _stand_in(self, real):
        """An entry where the pattern wants a directory (a file, a FIFO) is recorded unread, as an
        empty file: what is below it reads as absent in the replay, as on the node."""
        key = "/".join(real)
        try:
            mode = self._lstat(real).st_mode
        except (OSError, ValueError):
            return
        if key not in self.nodes and not stat.S_ISLNK(mode):
            self._add(real, ("device", "not a directory, not read: empty"))

    def _leaf(self, real):
        key = "/".join(real)
        if key in self.nodes or key in self.skipped or key in self.unreadable:
            return
        try:
            mode = self._lstat(real).st_mode
        except (OSError, ValueError):
            return
        if stat.S_ISDIR(mode):
            self._add(real, ("dir",))
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            self._add(real, ("device", "char" if stat.S_ISCHR(mode) else "block"))
        elif stat.S_ISREG(mode):
            self.reads += 1
            data = self.read_file(real, self.max_file_bytes + 1)
            if not isinstance(data, bytes):
                self.unreadable[key] = data
                return
            if len(data) > self.max_file_bytes:
                data = drop_partial_token(data[:self.max_file_bytes])
                self.truncated.append(key)
                self.cut[key] = len(data)
            self.total_bytes += len(data)
            if self.total_bytes > self.max_total_bytes:
                raise CaptureError("option max_total_bytes: the capture holds more than %d bytes (at /%s); "
                                   "raise the limit to capture this node" % (self.max_total_bytes, key))
            self._add(real, ("file", data))
        else:
            self.skipped[key] = "not a regular file, directory or device: skipped"

    def materialise(self, target):
        """Write the recorded tree below ``target`` (links as links, devices as empty files)."""
        for key in sorted(self.nodes):
            entry = self.nodes[key]
            path = os.path.join(target, key)
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            if entry[0] == "dir":
                if not os.path.isdir(path):
                    os.makedirs(path)
            elif entry[0] == "link":
                os.symlink(entry[1], path)
            else:
                with open(path, "wb") as handle:
                    handle.write(entry[1] if entry[0] == "file" else b"")


def drop_partial_token(data):
    """``data`` cut at the cap, without the token the cut split: back to the last separator within
    ``PARTIAL_MAX`` bytes, else ``PARTIAL_MAX`` bytes less (no recognisable value is that long)."""
    for index in range(len(data) - 1, max(-1, len(data) - 1 - PARTIAL_MAX), -1):
        if data[index] not in TOKEN_BYTES:
            return data[:index + 1]
    return data[:max(0, len(data) - PARTIAL_MAX)]


class _Anywhere(TreeWalker):
    """A walker that follows links anywhere below root (the link rule of root, not of the trees)."""

    def _inside_trees(self, parts):
        return True


def read_below_root(root, rel, limit=MAX_READ):
    """Bytes of the file ``rel`` below ``root`` read by the capture's link rule (a link out of
    root, a FIFO, a device: None)."""
    walker = _Anywhere(root, ())
    try:
        real = walker.resolve([part for part in rel.split("/") if part])
        data = None if real is None else walker.read_file(real, limit)
    finally:
        walker.close()
    return data if isinstance(data, bytes) else None


def inside_root(root, path):
    """Whether ``path`` (a file the log reader read) is, by the capture's link rule, a file below
    ``root``: resolved component by component (no link out of root) and the same inode as ``path``."""
    if os.path.realpath(root) == os.sep:
        return True
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return False
    walker = _Anywhere(root, ())
    try:
        real = walker.resolve([part for part in rel.split(os.sep) if part not in ("", ".")])
        if real is None:
            return False
        info = walker._lstat(real)
        seen = os.stat(path)
    except (OSError, ValueError):
        return False
    finally:
        walker.close()
    return stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) == (seen.st_dev, seen.st_ino)


def root_host_names(root):
    """The host names a captured root names itself by: ``etc/hostname``, the names of
    ``127.0.1.1`` in ``etc/hosts`` (Debian's own-name line); short forms too."""
    names = set()
    data = read_below_root(root, "etc/hostname", 4096)
    if data:
        names.update(data.decode("utf-8", "replace").split()[:1])
    data = read_below_root(root, "etc/hosts", 1 << 20)
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] == "127.0.1.1":
            names.update(fields[1:])
    return _with_short(names)


def log_host_names(lines):
    """The host names syslog-format kernel-log lines name (``<time> <host> kernel: …``)."""
    names = set()
    for line in lines or ():
        match = LOG_HOST.match(line.strip())
        if match:
            names.add(match.group(1))
    return _with_short(names)


def _with_short(names):
    out = set()
    for name in names:
        if name and not name.replace(".", "").isdigit() and ":" not in name:
            out.update((name, name.split(".")[0]))
    return sorted(n for n in out if n)


# -- NVML -------------------------------------------------------------------------------------
_MISSING = object()
_THRESHOLDS = {0: "shutdown", 1: "slowdown", 2: "mem_max", 3: "gpu_max"}
_PCIE = {
    "nvmlDeviceGetCurrPcieLinkGeneration": "current_gen",
    "nvmlDeviceGetCurrPcieLinkWidth": "current_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "max_gen",
    "nvmlDeviceGetMaxPcieLinkWidth": "max_width",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": "gpu_max_gen",
}
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class _Call(object):
    __slots__ = ("name", "args", "result", "error", "extra")

    def __init__(self, name, args):
        self.name, self.args, self.result, self.error, self.extra = name, args, None, None, None


class NvmlRecorder(object):
    """A stand-in for the binding module that passes every attribute through and records each
    ``nvml*`` call (device handles as their index, the answer or the error's NVML code) and every
    name the binding lacks; ``scenario()`` turns the record into a fake NVML scenario."""

    def __init__(self, binding):
        self._binding = binding
        self._calls = []
        self._missing = set()
        self._handles = {}
        self._keep = []  # the handles, alive while recorded by id()
        self._bytes = False

    def __dir__(self):
        return dir(self._binding)

    def __getattr__(self, name):
        value = getattr(self._binding, name, _MISSING)
        if value is _MISSING:
            self._missing.add(name)
            raise AttributeError(name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            return self._wrap(name, value)
        return value

    def _wrap(self, name, func):
        def call(*args):
            record = _Call(name, [self._handles.get(id(arg), arg) if i == 0 else arg for i, arg in enumerate(args)])
            self._calls.append(record)
            try:
                result = func(*args)
            except Exception as exc:
                record.error = exc
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles[id(result)] = args[0]
                self._keep.append(result)
            if isinstance(result, bytes):
                self._bytes = True
            record.result = result
            if name.startswith("nvmlDeviceGetGpuFabricInfo") and len(args) > 1:
                info = getattr(args[1], "_obj", args[1])
                record.extra = {"state": int(info.state), "status": int(info.status),
                                "clique_id": int(getattr(info, "cliqueId", 0))}
            if name == "nvmlDeviceGetGpuInstances" and len(args) > 3:
                record.extra = int(getattr(args[3], "_obj", args[3]).value)  # the instances found
            return result
        return call

    @property
    def calls(self):
        return len(self._calls)

    def _error_name(self, exc):
        code = getattr(exc, "value", None)
        if not isinstance(code, int):
            return "UNKNOWN", "%s: %s" % (type(exc).__name__, exc)
        for attr in dir(self._binding):
            if attr.startswith("NVML_ERROR_") and getattr(self._binding, attr, None) == code:
                return attr[len("NVML_ERROR_"):], None
        return code, None

    def scenario(self, description):
        """The fake NVML scenario of the recorded calls, and notes on what could not be expressed."""
        notes = []
        data = {"description": description}
        errors = {}
        devices = {}
        count = None
        for call in self._calls:
            if call.name == "nvmlShutdown":
                continue
            error = None
            if call.error is not None:
                error, note = self._error_name(call.error)
                if note:
                    notes.append("%s raised %s: replayed as NVML_ERROR_UNKNOWN" % (call.name, note))
            if call.name in ("nvmlInit", "nvmlInitWithFlags"):
                if error is not None:
                    errors["nvmlInit"] = error
                continue
            if call.name.startswith("nvmlSystem"):
                key = {"nvmlSystemGetDriverVersion": "driver_version",
                       "nvmlSystemGetCudaDriverVersion": "cuda_driver_version",
                       "nvmlSystemGetCudaDriverVersion_v2": "cuda_driver_version"}.get(call.name)
                if key is None:
                    notes.append("%s: not expressible in a scenario" % call.name)
                elif error is not None:
                    errors["nvmlSystemGetCudaDriverVersion" if key == "cuda_driver_version" else call.name] = error
                else:
                    data[key] = _text(call.result)
                continue
            if call.name == "nvmlDeviceGetCount":
                if error is not None:
                    errors["nvmlDeviceGetCount"] = error
                else:
                    count = int(call.result)
                continue
            index = call.args[0] if call.args else None
            if not isinstance(index, int):
                notes.append("%s: device not identified, not recorded" % call.name)
                continue
            device = devices.setdefault(index, {})
            self._device_call(device, call, error, notes)
        data["devices"] = [_clean_device(devices.get(i, {})) for i in range(count or 0)]
        if count is None and devices:
            notes.append("device answers recorded without a device count")
        if errors:
            data["errors"] = errors
        missing = sorted(self._missing)
        if missing:
            data["missing_functions"] = [m for m in missing if m.startswith("nvml")]
            data["missing_constants"] = [m for m in missing if not m.startswith("nvml")]
        if self._bytes:
            data["bytes_strings"] = True
        return data, notes

    def _device_call(self, device, call, error, notes):
        name, args, result = call.name, call.args, call.result
        errs = device.setdefault("errors", {})

        def slot_error():
            if isinstance(error, str):
                return error
            notes.append("%s: NVML code %s in one slot replayed as NVML_ERROR_UNKNOWN" % (name, error))
            return "UNKNOWN"

        def slot(container, key, value):
            device.setdefault(container, {})[key] = slot_error() if error is not None else value

        if name == "nvmlDeviceGetHandleByIndex":
            if error is not None:
                errs[name] = error
        elif name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial"):
            key = name[len("nvmlDeviceGet"):].lower()
            if error is not None:
                errs[name] = error
            else:
                device[key] = _text(result)
        elif name.startswith("nvmlDeviceGetPciInfo"):
            if error is not None:
                errs["nvmlDeviceGetPciInfo"] = error
            else:
                device["pci_bus_id"] = _text(getattr(result, "busId", None) or getattr(result, "busIdLegacy", ""))
                if getattr(result, "pciDeviceId", None) is not None:
                    device["pci_device_id"] = "0x%08x" % int(result.pciDeviceId)
        elif name in ("nvmlDeviceGetPersistenceMode", "nvmlDeviceGetTemperature",
                      "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            key = {"nvmlDeviceGetPersistenceMode": "persistence_mode",
                   "nvmlDeviceGetTemperature": "temperature"}.get(name, "clocks_event_reasons")
            if error is not None:
                errs[name] = error
            else:
                device[key] = _number(result)
        elif name == "nvmlDeviceGetTemperatureThreshold":
            slot("temperature_thresholds", _THRESHOLDS.get(args[1], str(args[1])), _number(result))
        elif name == "nvmlDeviceGetEccMode":
            if error is not None:
                errs[name] = error
            else:
                device.setdefault("ecc", {}).update({"mode_current": _number(result[0]),
                                                     "mode_pending": _number(result[1])})
        elif name == "nvmlDeviceGetTotalEccErrors":
            key = "%s_%s" % ("volatile" if args[2] == 0 else "aggregate",
                             "uncorrected" if args[1] == 1 else "corrected")
            slot("ecc", key, _number(result))
        elif name == "nvmlDeviceGetRetiredPages":
            slot("retired_pages", "sbe" if args[1] == 0 else "dbe", None if error is not None else len(result))
        elif name == "nvmlDeviceGetRetiredPagesPendingStatus":
            slot("retired_pages", "pending", _number(result))
        elif name == "nvmlDeviceGetRemappedRows":
            if error is not None:
                errs[name] = error
            else:
                device["remapped_rows"] = dict(zip(("correctable", "uncorrectable", "pending", "failure"),
                                                   [_number(x) for x in result]))
        elif name in _PCIE:
            if error is not None:
                errs[name] = error
            else:
                device.setdefault("pcie", {})[_PCIE[name]] = _number(result)
        elif name == "nvmlDeviceGetNvLinkState":
            links = device.setdefault("nvlink", [])
            link = int(args[1])
            while len(links) <= link:
                links.append("NOT_SUPPORTED")
            links[link] = slot_error() if error is not None else _number(result)
        elif name == "nvmlDeviceGetMigMode":
            if error is not None:
                errs[name] = error
            else:
                device["mig"] = {"current": _number(result[0]), "pending": _number(result[1])}
        elif name == "nvmlDeviceGetMemoryInfo":
            if error is not None:
                errs[name] = error
            else:
                device["memory_total_mib"] = int(result.total) // (1024 * 1024)
        elif name.startswith("nvmlDeviceGetGpuInstanceProfileInfo"):
            # one slot per NVML_GPU_INSTANCE_PROFILE_* index: [id, sliceCount, instanceCount,
            # memorySizeMB, name] or the error that index answered (NotSupported: not on this GPU)
            profiles = device.setdefault("mig_profiles", {})
            if error is not None:
                profiles[str(args[1])] = slot_error()
            else:
                label = _text(getattr(result, "name", b"")) or ""
                profiles[str(args[1])] = [int(result.id), int(result.sliceCount), int(result.instanceCount),
                                          int(result.memorySizeMB), label.replace("MIG ", "") or "profile%d" % int(result.id)]
        elif name == "nvmlDeviceGetGpuInstances":
            mig = device.setdefault("mig", {})
            if error is not None:
                errs[name] = error
                return
            names = [p[4] for p in device.get("mig_profiles", {}).values() if isinstance(p, list) and p[0] == int(args[1])]
            mig.setdefault("instances", []).extend(names[:1] * int(call.extra or 0))
        elif name.startswith("nvmlDeviceGetGpuFabricInfo"):
            if error is not None:
                errs[name] = error
            elif call.extra:
                device["fabric"] = call.extra
        elif name == "nvmlDeviceGetFieldValues":
            if error is not None:
                errs[name] = error
                return
            for value in result:
                if int(getattr(value, "fieldId", -1)) != int(getattr(self._binding, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)):
                    notes.append("nvmlDeviceGetFieldValues field %s: not expressible" % getattr(value, "fieldId", None))
                    continue
                ret = int(getattr(value, "nvmlReturn", 0))
                if ret == 0:
                    member = _VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")
                    device["recovery_action"] = _number(getattr(value.value, member))
                elif ret != int(getattr(self._binding, "NVML_ERROR_NOT_SUPPORTED", 3)):
                    code, _note = self._error_name(type("E", (Exception,), {"value": ret})())
                    device["recovery_action"] = code
        else:
            notes.append("%s: not expressible in a scenario" % name)


def _clean_device(device):
    if not device.get("errors"):
        device.pop("errors", None)
    links = device.get("nvlink")
    if links is not None:
        while links and links[-1] == "NOT_SUPPORTED":
            links.pop()
        if not links:
            device.pop("nvlink")
    return device


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return value


def _number(value):
    """A JSON-safe reading: ints of ctypes values, str of bytes."""
    if isinstance(value, bool) or isinstance(value, (int, float)) or value is None:
        return value
    if isinstance(value, bytes):
        return _text(value)
    inner = getattr(value, "value", _MISSING)
    if inner is not _MISSING and isinstance(inner, (int, float)):
        return inner
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def record_nvml(reader, facts, binding_path=None, binding=None, description="captured"):
    """Run the GPU family over the captured tree (``reader``, ``facts``: its gpu facts) with a
    recording binding: (scenario or None, status dict). ``binding``: the module to wrap (tests
    pass the fake); None imports the node's ``pynvml`` (from ``binding_path`` first) as the GPU
    family does."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu_checks import FAMILY, check_gpu_health
    from ansible_collections.gpufleet.cluster.plugins.module_utils.nvml import NvmlAdapter

    if binding is None:
        try:
            binding = NvmlAdapter(binding_path=binding_path).binding
        except ImportError as exc:
            return None, {"recorded": False, "reason": "the NVML Python binding is not importable (%s): "
                                                       "replays as binding missing" % exc}
    recorder = NvmlRecorder(binding)
    adapter = NvmlAdapter(pynvml_module=recorder)
    try:
        check_gpu_health(facts, adapter, FAMILY.defaults({}), None, reader=reader)
    finally:
        adapter.shutdown()
    scenario, notes = recorder.scenario(description)
    return scenario, {"recorded": True, "calls": recorder.calls, "devices": len(scenario["devices"]),
                      "notes": notes}


# -- kernel log, ofed_info ----------------------------------------------------------------------
def kernel_log_lines(root, runner, source, window_hours, now):
    """(NVRM lines of the window, status): what the GPU family's XID reader would see."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu_checks import read_kernel_log
    from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import Context
    from ansible_collections.gpufleet.cluster.plugins.module_utils.xid import parse_timestamp

    ctx = Context(root, runner=runner, now=now)
    xid = read_kernel_log({"xid_source": source, "root": root, "xid_window_hours": window_hours}, ctx)
    if xid.error is not None:
        return None, {"recorded": False, "error": xid.error}
    since = now - float(window_hours) * 3600.0
    lines = []
    for line in xid.lines:
        if "NVRM" not in line:
            continue
        stamp = parse_timestamp(line.strip(), now)
        if stamp is None or stamp >= since:
            lines.append(line)
    origin = xid.origin
    if origin and os.path.isabs(origin) and not inside_root(root, origin):
        return None, {"recorded": False, "error": "the kernel log file %s leads out of root (a link): "
                                                  "not read (the capture's link rule)" % (
                                                      os.sep + os.path.relpath(origin, root)
                                                      if _under(origin, root.rstrip(os.sep)) else "below root")}
    if origin and os.path.isabs(origin) and _under(origin, root.rstrip(os.sep)):
        origin = os.sep + os.path.relpath(origin, root)  # the file as the node names it, not where root is
    return lines, {"recorded": True, "origin": origin, "lines": len(lines), "truncated": xid.truncated,
                   "window_hours": window_hours}


def ofed_info_output(root, runner, ofed_info=None):
    """``ofed_info -s`` as mlx5_facts runs it (only for the host's own root), or None."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.mlx5 import OFED_INFO_TIMEOUT

    if ofed_info is None:
        if os.path.realpath(root) != os.sep or runner is None:
            return None
        ofed_info = runner.which("ofed_info")
    if not ofed_info:
        return None
    answer = runner.run([ofed_info, "-s"], timeout=OFED_INFO_TIMEOUT)
    return {"rc": answer.rc, "stdout": answer.stdout}


# -- the capture --------------------------------------------------------------------------------
def host_names():
    """This host's names (short and full) as the kernel knows them: replaced wherever they appear."""
    name = socket.gethostname()
    return sorted(set(n for n in (name, name.split(".")[0]) if n))


def capture_node(params, runner=None, binding=None, now=None):
    """Capture the node below ``params['root']``; returns a Capture (nothing written yet)."""
    started = time.time()
    now = started if now is None else now
    root = checked_root(params)
    patterns = capture_patterns(params.get("kubelet_config", DEFAULT_KUBELET_CONFIG),
                                params.get("kubelet_config_dir", DEFAULT_KUBELET_CONFIG_DIR))
    walker = TreeWalker(root, capture_trees(patterns), params.get("max_file_bytes") or MAX_READ,
                        params.get("max_entries") or DEFAULT_MAX_ENTRIES,
                        params.get("max_total_bytes") or DEFAULT_MAX_TOTAL_BYTES)
    try:
        for pattern in patterns:
            walker.expand(pattern)
    finally:
        walker.close()
    walker.settle_links()
    pseudo = Pseudonymiser()
    for name in host_names() + root_host_names(root):
        pseudo.add_literal(name, "hostname")
    for value in params.get("redact") or []:
        pseudo.add_literal(value)
    for key, entry in walker.nodes.items():
        if entry[0] != "file":
            continue
        pseudo.collect_serials(entry[1].decode("utf-8", "replace"), whole=os.path.basename(key).endswith("serial"))
    capture = Capture(walker, pseudo, patterns, now)
    staging = tempfile.mkdtemp(prefix="gpufleet-capture-")
    try:
        os.chmod(staging, 0o700)
        walker.materialise(os.path.join(staging, "root"))
        reader = SysfsReader(os.path.join(staging, "root"))
        facts = gather_gpu_facts(reader)
        if not facts["gpu_count"]:
            capture.nvml = {"recorded": False, "reason": NO_GPU}
        elif params.get("nvml", True):
            scenario, capture.nvml = record_nvml(reader, facts, params.get("nvml_binding_path"), binding,
                                                 "captured by gpufleet.cluster.node_capture")
            if scenario is not None:
                for device in scenario["devices"]:
                    pseudo.add_literal(device.get("serial"), "serial")
                pseudo.value(scenario, collect=True)
                capture.scenario = scenario
        else:
            capture.nvml = {"recorded": False, "reason": "option nvml is false"}
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if facts["gpu_count"]:
        capture.kernel_log, capture.xid_status = kernel_log_lines(
            root, runner, params.get("xid_source") or "auto", params.get("xid_window_hours") or 24.0, now)
        for line in capture.kernel_log or ():
            pseudo.collect_serials(line)  # NVRM: GPU Board Serial Number: …, … GPU serial number is ….
        for name in log_host_names(capture.kernel_log):
            pseudo.add_literal(name, "hostname")
    else:
        capture.xid_status = {"recorded": False, "reason": NO_GPU}
    capture.ofed_info = ofed_info_output(root, runner, params.get("ofed_info"))
    if capture.ofed_info is not None:
        pseudo.collect_serials(capture.ofed_info["stdout"])
    reserve_present(pseudo, capture)
    capture.elapsed_s = time.time() - started
    return capture


def reserve_present(pseudo, capture):
    """Every string of a literal pseudonym's form already in what is captured is reserved (a host
    really named ``host-1`` keeps that name; the node's own host name gets another number)."""
    for key, entry in capture.walker.nodes.items():
        pseudo.reserve(key)
        if entry[0] == "file":
            pseudo.reserve(entry[1])
        elif entry[0] == "link":
            pseudo.reserve(entry[1])
    for table in (capture.walker.skipped, capture.walker.unreadable):
        for key, reason in table.items():
            pseudo.reserve(key)
            pseudo.reserve(reason)
    for line in capture.kernel_log or ():
        pseudo.reserve(line)
    if capture.scenario is not None:
        pseudo.reserve(json.dumps(capture.scenario))
    pseudo.reserve(json.dumps(capture.nvml, default=str))
    pseudo.reserve(json.dumps(capture.xid_status, default=str))
    if capture.ofed_info is not None:
        pseudo.reserve(capture.ofed_info["stdout"])


class Capture(object):
    """What a capture holds before it is pseudonymised and packed."""

    def __init__(self, walker, pseudo, patterns, now):
        self.walker = walker
        self.pseudo = pseudo
        self.patterns = patterns
        self.now = now
        self.scenario = None
        self.nvml = {"recorded": False}
        self.kernel_log = None
        self.xid_status = {"recorded": False}
        self.ofed_info = None
        self.elapsed_s = 0.0
        self.shortened = {}
        self.too_long = []
        self._names = {}
        self.layout_words = frozenset(
            comp for pattern in list(patterns) + [KERN_LOG] for comp in pattern.split("/")
            if comp and not any(ch in comp for ch in "*?["))

    def shown(self, parts):
        """The archive's components for the real components ``parts`` (relative to root): each
        pseudonymised (``Pseudonymiser.name``; a name of the layout keeps its host-name-like and
        redacted words) and at most ``NAME_MAX`` bytes (a longer one is shortened to a prefix and a
        hash of the pseudonymised name, listed in MANIFEST)."""
        parts = tuple(parts)
        if parts in self._names:
            return self._names[parts]
        if not parts:
            return ()
        head = self.shown(parts[:-1])
        comp = parts[-1]
        layout = comp in self.layout_words or any(parts[:len(tree)] == tree for tree in LAYOUT_TREES)
        name = self.pseudo.name(comp, layout)
        raw = name.encode("utf-8", "surrogateescape")
        if len(raw) > NAME_MAX:
            digest = hashlib.sha256(raw).hexdigest()[:16]
            short = raw[:NAME_MAX - 40].decode("utf-8", "ignore")
            short = short.encode("utf-8", "surrogateescape")[:NAME_MAX - 40].decode("utf-8", "surrogateescape")
            shortened = "%s~%s" % (short, digest)
            self.shortened["/".join(head + (shortened,))] = name
            name = shortened
        self._names[parts] = head + (name,)
        return self._names[parts]

    def members(self):
        """(archive path, kind, payload) of every member, pseudonymised, sorted: kind ``dir``,
        ``file`` (bytes), ``link`` (target)."""
        pseudo = self.pseudo
        tree = {}
        self.too_long = []
        for key, entry in self.walker.nodes.items():
            name = "/".join(self.shown(key.split("/")))
            if len(("%s/root/%s" % (ARCHIVE_TOP, name)).encode("utf-8", "surrogateescape")) > PATH_LIMIT:
                self.too_long.append(name[:200] + "…")
                continue
            if entry[0] == "file":
                tree[name] = ("file", pseudo.data(entry[1], versions=key.rsplit("/", 1)[-1] in VERSION_FILES),
                              "file")
            elif entry[0] == "device":
                tree[name] = ("file", b"", "%s device (empty stand-in)" % entry[1]
                              if entry[1] in ("char", "block") else "placeholder (%s)" % entry[1])
            elif entry[0] == "link":
                parts = key.split("/")
                tree[name] = ("link", _relative(self.shown(entry[2]), self.shown(parts[:-1])), "link")
            else:
                tree[name] = ("dir", None, "dir")
        if self.kernel_log is not None:
            text = "".join(pseudo.text(line) + "\n" for line in self.kernel_log)
            for parent in ("var", "var/log"):
                tree.setdefault(parent, ("dir", None, "dir"))
            tree[KERN_LOG] = ("file", text.encode("utf-8"), "kernel log (NVRM lines)")
        members = [("root/" + name, kind, payload, what) for name, (kind, payload, what) in tree.items()]
        members.append(("root", "dir", None, "dir"))
        if self.scenario is not None:
            scenario = pseudo.value(self.scenario)
            members.append((NVML_FILE, "file", (json.dumps(scenario, indent=2, sort_keys=True) + "\n").encode(),
                            "NVML scenario"))
        if self.ofed_info is not None:
            members.append(("commands", "dir", None, "dir"))
            members.append(("commands/ofed_info-s.txt", "file", pseudo.data(self.ofed_info["stdout"].encode(
                "utf-8", "surrogateescape")), "ofed_info -s output (rc %s)" % self.ofed_info["rc"]))
        return sorted(members)

    def metadata(self, members):
        walker = self.walker
        return {
            "format": FORMAT,
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now)),
            "captured_at_epoch": int(self.now),
            "host": self.pseudo.text(host_names()[0]) if host_names() else None,
            "root_is_host": walker.host_root,
            "patterns": self.pseudo.value(list(self.patterns)),
            "trees": self.pseudo.value(list(walker.trees)),
            "counts": {"entries": len(members), "files_read": walker.reads, "bytes": walker.total_bytes,
                       "skipped": len(walker.skipped), "unreadable": len(walker.unreadable),
                       "truncated": len(walker.truncated), "links_rewritten": len(walker.rewritten)},
            "limits": {"max_file_bytes": walker.max_file_bytes, "max_entries": walker.max_entries,
                       "max_total_bytes": walker.max_total_bytes},
            "pseudonymised": self.pseudonym_counts(),
            # the reasons and errors quote what NVML and the log readers said: pseudonymised too
            "nvml": self.pseudo.value(dict(self.nvml, file=NVML_FILE if self.scenario is not None else None)),
            "kernel_log": self.pseudo.value(dict(self.xid_status, file=("root/" + KERN_LOG)
                                                 if self.kernel_log is not None else None)),
            "ofed_info": None if self.ofed_info is None else {"rc": self.ofed_info["rc"],
                                                              "file": "commands/ofed_info-s.txt"},
            "elapsed_s": round(self.elapsed_s, 3),
        }

    def pseudonym_counts(self):
        return dict(self.pseudo.counts)

    def manifest(self, members):
        walker, pseudo = self.walker, self.pseudo
        lines = ["# gpufleet node capture, format %d: every member of this archive, then what was left out" % FORMAT,
                 "# <type> <bytes> <sha256 or -> <path> [-> link target]"]
        for path, kind, payload, what in members:
            if kind == "file":
                kind_shown = "device" if "device" in what else "placeholder" if "placeholder" in what else "file"
                lines.append("%s %d %s %s" % (kind_shown, len(payload),
                                              hashlib.sha256(payload).hexdigest(), path))
            elif kind == "link":
                lines.append("link 0 - %s -> %s" % (path, payload))
            else:
                lines.append("dir 0 - %s" % path)

        def shown(key):
            return "/".join(self.shown(key.split("/")))

        for title, table in (("skipped", walker.skipped), ("unreadable", walker.unreadable),
                             ("rewritten", walker.rewritten)):
            for key in sorted(table):
                lines.append("%s - - root/%s: %s" % (title, shown(key), pseudo.text(table[key])))
        for key in walker.truncated:
            lines.append("truncated %d - root/%s: cut at max_file_bytes, kept %d bytes (the token the cut "
                         "split dropped)" % (walker.max_file_bytes, shown(key), walker.cut.get(key, 0)))
        for key in sorted(self.shortened):
            lines.append("shortened - - root/%s: name longer than %d bytes once pseudonymised: %s"
                         % (key, NAME_MAX, self.shortened[key]))
        for name in self.too_long:
            lines.append("skipped - - root/%s: path longer than %d bytes once pseudonymised: left out"
                         % (name, PATH_LIMIT))
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def write_archive(capture, dest):
    """Pack ``capture`` into the gzip'ed tar ``dest`` (written beside it, then renamed; mode 0600).
    Returns (members, metadata)."""
    members = capture.members()
    meta = capture.metadata(members)
    extra = [("capture.json", "file", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), "metadata"),
             ("MANIFEST", "file", None, "manifest")]
    listed = sorted(members + extra[:1])
    manifest = capture.manifest(listed)
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(directory):
        raise CaptureError("option dest: directory %s does not exist" % directory)
    handle, temp = tempfile.mkstemp(prefix=".capture-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                _add(tar, ARCHIVE_TOP, "dir", None, capture.now)
                _add(tar, ARCHIVE_TOP + "/MANIFEST", "file", manifest, capture.now)
                for path, kind, payload, _what in listed:
                    _add(tar, ARCHIVE_TOP + "/" + path, kind, payload, capture.now)
        os.chmod(temp, 0o600)
        os.rename(temp, dest)
    except Exception:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return listed, meta


def _add(tar, name, kind, payload, mtime):
    info = tarfile.TarInfo(name)
    info.mtime = int(mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, payload
        tar.addfile(info)
    else:
        info.size, info.mode = len(payload), 0o644
        tar.addfile(info, io.BytesIO(payload))


def node_capture_work(module, binding=None):
    """``work`` of module node_capture (framework.run_module)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu_checks import validate_options

    params = module.params
    checked_root(params)
    errors = validate_options({"root": params["root"], "xid_source": params.get("xid_source"),
                               "xid_window_hours": params.get("xid_window_hours"),
                               "nvml_binding_path": params.get("nvml_binding_path")})
    path = params.get("ofed_info")
    if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        errors.append("option ofed_info: %s is not an executable file" % path)
    for name in ("max_file_bytes", "max_entries", "max_total_bytes"):
        if params.get(name) is not None and params[name] < 1:
            errors.append("option %s must be >= 1, got %s" % (name, params[name]))
    dest = params["dest"]
    if dest and os.path.isdir(dest):
        errors.append("option dest: %s is a directory (give the archive's file name)" % dest)
    if errors:
        raise CaptureError("; ".join(errors))
    from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import ModuleRunner

    capture = capture_node(params, ModuleRunner(module), binding)
    members = capture.members()
    meta = capture.metadata(members)
    if not module.check_mode:
        members, meta = write_archive(capture, dest)
    # changed in check mode too: an archive would be written
    return {"changed": True, "dest": dest, "entries": len(members),
            "files_read": meta["counts"]["files_read"], "bytes": meta["counts"]["bytes"],
            "pseudonymised": meta["pseudonymised"], "nvml": meta["nvml"], "kernel_log": meta["kernel_log"],
            "skipped_paths": meta["counts"]["skipped"], "unreadable": meta["counts"]["unreadable"],
            "captured_at": meta["captured_at"], "elapsed_ms": round(capture.elapsed_s * 1000.0, 1)}
