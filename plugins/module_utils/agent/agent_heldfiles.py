# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The small files the resident agent's fast probe (agent_signals.FastProbe) reads again and
again, through descriptors it keeps open.

The probe keeps the files it reads open and reads them again with ``pread`` at offset 0
(Documentation/filesystems/sysfs.rst: a read at offset 0 calls the attribute's show() again;
cgroup files are the same kernfs seq files): a file removed (device gone, cgroup removed when the
unit stops) fails that read (ENODEV) and is opened again by path. Under a root other than ``/`` (a
lab's fixture tree of regular files, rewritten by a rename as Ansible's ``copy`` does) the path's
descriptor's link count is looked at first, and the root itself once per full probe
(``HeldFiles.check_root``: a root that is a link re-pointed at another tree, as a lab does to
write a fault into a copy, leaves every held descriptor on the old tree).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

MAX_HELD_FILES = 256  # files the probe keeps open (a DGX: 36); more are opened by path each probe
READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_DIRECTORY", 0)


class HeldFiles(object):
    """Small files read again and again (``read(path, size)``, as agent_netlink.read_small: None
    when unreadable) through a descriptor kept open: ``pread`` at offset 0, one system call instead
    of open, read and close with a path walk (sysfs: about 10 times less CPU). A read that fails
    (ENODEV or ENOENT: the kernfs node was removed; EIO) closes it, the read is None ("gone") and
    the path is opened again at the next read (a device that reappears is read again).
    ``check_inode`` (a root other than ``/``: regular files): the held descriptor's link count is
    looked at first (``fstat``, no path walk): 0 when the file was removed or replaced by a rename
    (Ansible's ``copy``), whose new content the old descriptor does not see: opened again by path.
    ``present(directory)``: whether a directory is there (held the same way under ``check_inode``).
    ``root`` (with ``check_inode``): ``check_root()`` lets every descriptor go when the root's path
    now leads to another directory (one ``stat``)."""

    def __init__(self, check_inode, limit=MAX_HELD_FILES, root=None):
        self.check_inode = check_inode
        self.limit = limit
        self.held = {}  # path -> fd
        self.dirs = {}  # path -> fd of a directory (check_inode only)
        self.root = root if check_inode else None
        self.root_id = self._root_id()

    def _root_id(self):
        if self.root is None:
            return None
        try:
            info = os.stat(self.root)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def check_root(self):
        """Every descriptor let go (opened again by path at the next read) when the root's path
        leads to another directory than before (a link re-pointed: a lab's fault in a copy)."""
        if self.root is None:
            return
        now = self._root_id()
        if now != self.root_id:
            self.root_id = now
            self.close()

    def read(self, path, size=256, directory=None, recheck=True):
        """``directory``: ``path``'s directory, held (``present``): ``path`` is opened in it, not
        walked again from the root (a file that does not open, such as a fixture tree's missing
        PCI ``config``, costs no path walk each probe). ``recheck`` False: the link count is not
        looked at (the quick probe: a file replaced by a rename is seen by the next full probe)."""
        fd = self.held.get(path)
        if fd is not None:
            try:
                if not (self.check_inode and recheck) or os.fstat(fd).st_nlink:
                    return os.pread(fd, size, 0)
            except OSError:
                pass
            self.drop(path)  # removed, replaced or unreadable: by path again
        try:
            parent = self.dirs.get(directory) if directory is not None else None
            fd = os.open(path, READ_FLAGS) if parent is None else \
                os.open(os.path.basename(path), READ_FLAGS, dir_fd=parent)
        except OSError:
            return None
        try:
            raw = os.pread(fd, size, 0)
            if len(self.held) + len(self.dirs) < self.limit:
                self.held[path], fd = fd, None
            return raw
        except OSError:
            return None
        finally:
            if fd is not None:
                os.close(fd)

    def present(self, path):
        """True when the directory ``path`` is there (os.path.isdir; under ``check_inode`` a held
        descriptor whose link count is not 0: a directory removed has none)."""
        if not self.check_inode:
            return os.path.isdir(path)
        fd = self.dirs.get(path)
        if fd is not None:
            try:
                if os.fstat(fd).st_nlink:
                    return True
            except OSError:
                pass
            self.dirs.pop(path, None)
            os.close(fd)
        try:
            fd = os.open(path, DIR_FLAGS)
        except OSError:
            return False
        if len(self.held) + len(self.dirs) < self.limit:
            self.dirs[path] = fd
        else:
            os.close(fd)
        return True

    def drop(self, path):
        fd = self.held.pop(path, None)
        if fd is None:
            fd = self.dirs.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def keep(self, paths):
        """Close the descriptors of the paths not in ``paths`` (after a new discovery)."""
        paths = set(paths)
        for path in [p for p in list(self.held) + list(self.dirs) if p not in paths]:
            self.drop(path)

    def close(self):
        for path in list(self.held) + list(self.dirs):
            self.drop(path)

    def __del__(self):  # a probe let go without close() (a test, a new discovery's): its descriptors too
        try:
            self.close()
        except Exception:
            pass
