# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tolerant reader of sysfs / procfs / devfs, rooted at an arbitrary directory.

Every read is relative to ``root`` so that tests, the lab and offline inspection of a
mounted node image can point modules at a fixture tree. A file that is missing, unreadable,
answers EINVAL/EIO (as some sysfs attributes do) or holds a placeholder such as
``N/A (no PMA)`` reads as ``None``: one bad field never takes down the whole host.
Each file is read at most once per reader (results are memoised).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# Values sysfs prints when an attribute exists but has no meaningful content.
PLACEHOLDERS = frozenset(["N/A (no PMA)", "N/A", "(null)"])


class SysfsReader(object):
    """Read files below ``root`` with memoisation and field-level tolerance."""

    def __init__(self, root="/"):
        self.root = root or "/"
        self._cache = {}
        self._dir_cache = {}

    def path(self, rel):
        """Absolute path of ``rel`` (e.g. ``sys/module/mlx5_core``) below root."""
        return os.path.join(self.root, rel.lstrip("/"))

    def exists(self, rel):
        return os.path.exists(self.path(rel))

    def isdir(self, rel):
        return os.path.isdir(self.path(rel))

    def read(self, rel):
        """Stripped text of a file, or None when missing/unreadable/placeholder."""
        if rel in self._cache:
            return self._cache[rel]
        value = None
        try:
            with open(self.path(rel), "rb") as handle:
                raw = handle.read(65536)
            text = raw.decode("utf-8", "replace").strip().strip("\x00").strip()
            if text not in PLACEHOLDERS:
                value = text
        except (OSError, ValueError):
            value = None
        self._cache[rel] = value
        return value

    def read_lines(self, rel):
        text = self.read(rel)
        if text is None:
            return []
        return [line for line in text.splitlines() if line.strip()]

    def read_int(self, rel, base=10):
        """Integer content (base 0 accepts 0x prefixes), or None when not an integer."""
        text = self.read(rel)
        if text is None:
            return None
        try:
            return int(text.split()[0], base)
        except (ValueError, IndexError):
            return None

    def listdir(self, rel):
        """Sorted entries of a directory, [] when missing or unreadable."""
        if rel in self._dir_cache:
            return self._dir_cache[rel]
        try:
            entries = sorted(os.listdir(self.path(rel)))
        except OSError:
            entries = []
        self._dir_cache[rel] = entries
        return entries

    def link_name(self, rel):
        """Basename of a symlink's target (``device/driver`` -> ``mlx5_core``), or None."""
        try:
            target = os.readlink(self.path(rel))
        except OSError:
            return None
        return os.path.basename(target.rstrip("/")) or None

    def real_name(self, rel):
        """Basename of the fully resolved path (PCI address behind ``device``), or None."""
        full = self.path(rel)
        if not os.path.exists(full):
            return None
        return os.path.basename(os.path.realpath(full)) or None


def validate_root(root):
    """Return an error message when ``root`` cannot serve as a filesystem root, else None."""
    if not root:
        return "option root must not be empty"
    if not os.path.isdir(root):
        return "option root: %s is not a directory" % root
    return None
