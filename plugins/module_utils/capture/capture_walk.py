# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capture's walk of the tree below root (module node_capture, docs/capture.md; capture.py packs
what it finds): ``ALLOW`` and the kubelet files (``capture_patterns``) expanded component by component
through directory descriptors opened from root with ``O_NOFOLLOW``, links followed only inside
``TREES``, files read once and capped, entries and bytes capped (``CaptureError`` naming the option);
the host names a root and its kernel log name. Imports only records-level helpers (framework,
sysfs): nothing of the NVML recording or the archive.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import os
import re
import stat

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import MAX_READ, read_bounded

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
