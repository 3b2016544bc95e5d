# -*- coding: utf-8 -*-
"""SysfsReader below a root other than /: a directory on a path switched to a link out of root during a run
reads as absent, never the file outside (red team round 9, F1 and F2; docs/contracts.md "Reading sysfs":
never through a symlink that leaves root).

F1: the switch comes between two reads of one run, after the reader resolved the path (its resolution is kept
for the run). F2: the switch comes right before the reader's own lookup or open of the file. Both read the
file outside root: the reader now checks, after the open, that the file opened is the one its resolution
found (else the kernel's path of it). What is asserted: no answer holds the text outside root, and nothing
outside root is read or listed (it may have been opened: the check is made on the open descriptor)."""

from __future__ import absolute_import, division, print_function

import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

SECRET = "secret-outside-root"
ADDR, MTU, SPEED, NET = ("sys/class/net/eth0/address", "sys/class/net/eth0/mtu", "sys/class/net/eth0/speed",
                         "sys/devices/pci0/eth0")


def make_tree(base):
    """root/sys/class/net/eth0 -> ../../devices/pci0/eth0 (address, mtu, speed); outside/eth0 the same names
    holding SECRET."""
    root, outside = os.path.join(base, "root"), os.path.join(base, "outside")
    device = os.path.join(root, "sys", "devices", "pci0", "eth0")
    os.makedirs(device)
    os.makedirs(os.path.join(root, "sys", "class", "net"))
    os.symlink("../../devices/pci0/eth0", os.path.join(root, "sys", "class", "net", "eth0"))
    os.makedirs(os.path.join(outside, "eth0"))
    for name, value in (("address", "00:11:22:33:44:55"), ("mtu", "4092"), ("speed", "200000")):
        with open(os.path.join(device, name), "w") as handle:
            handle.write(value + "\n")
        with open(os.path.join(outside, "eth0", name), "w") as handle:
            handle.write(SECRET + "\n")
    return root, outside


def switch(root, outside, which):
    """Replace a directory on the path to eth0's files by a link out of root."""
    if which == "device dir":
        path, target = os.path.join(root, "sys", "devices", "pci0", "eth0"), os.path.join(outside, "eth0")
    else:  # "pci0 dir": one level up
        path, target = os.path.join(root, "sys", "devices", "pci0"), outside
    os.rename(path, path + ".old")
    os.symlink(target, path)


class Watching(object):
    """``os`` for the sysfs module: records what is read or listed (the kernel's path of the descriptor) and
    switches the tree right before the first call ``when`` of a path ending ``trigger``."""

    def __init__(self, trigger=None, when=None, action=None):
        self.trigger, self.when, self.action, self.fired = trigger, when, action, False
        self.read_from = []

    def __getattr__(self, name):
        return getattr(os, name)

    def _maybe(self, name, path):
        if self.action and not self.fired and name == self.when and str(path).endswith(self.trigger):
            self.fired = True
            self.action()

    def open(self, path, flags, *args, **kwargs):
        self._maybe("open", path)
        return os.open(path, flags, *args, **kwargs)

    def read(self, fd, size):
        self.read_from.append(os.readlink("/proc/self/fd/%d" % fd))
        return os.read(fd, size)

    def listdir(self, path):
        self.read_from.append(os.readlink("/proc/self/fd/%d" % path) if isinstance(path, int) else path)
        return os.listdir(path)

    def stat(self, path, *args, **kwargs):
        self._maybe("stat", path)
        return os.stat(path, *args, **kwargs)

    def lstat(self, path, *args, **kwargs):
        self._maybe("lstat", path)
        return os.lstat(path, *args, **kwargs)


def answers(reader, rel):
    return {"read": reader.read(rel), "problem": reader.problem(rel), "list": reader.listdir(os.path.dirname(rel))}


def assert_nothing_outside(got, watching, outside):
    assert SECRET not in repr(got), got
    real_outside = os.path.realpath(outside)
    for path in watching.read_from:
        assert not (path == real_outside or path.startswith(real_outside + os.sep)), path


@pytest.fixture
def watched(monkeypatch):
    def install(watching):
        monkeypatch.setattr(sysfs, "os", watching)
        return watching
    return install


@pytest.mark.parametrize("which", ["device dir", "pci0 dir"])
@pytest.mark.parametrize("root_is_link", [False, True], ids=["root-dir", "root-link"])
def test_a_directory_switched_between_two_reads_of_a_run_is_not_followed_out(tmp_path, watched, which,
                                                                                root_is_link):
    """F1: the run has read eth0's address (so the path is resolved and kept); then a directory on the path
    becomes a link out of root; mtu, speed and the listing of eth0 come from nowhere outside root."""
    root, outside = make_tree(str(tmp_path))
    if root_is_link:
        os.symlink(root, str(tmp_path / "root-link"))
        root = str(tmp_path / "root-link")
    watching = watched(Watching())
    reader = SysfsReader(root)
    assert reader.read(ADDR) == "00:11:22:33:44:55"
    switch(os.path.realpath(root), outside, which)
    got = [answers(reader, MTU), answers(reader, SPEED)]
    assert_nothing_outside(got, watching, outside)
    assert [entry["read"] for entry in got] == [None, None]
    assert [entry["list"] for entry in got] == [[], []]


@pytest.mark.parametrize("point", [("open", "eth0/mtu"), ("lstat", "eth0/mtu"), ("stat", "eth0/mtu"),
                                   ("lstat", "pci0/eth0"), ("lstat", "net/eth0")],
                         ids=lambda point: "%s-%s" % point)
@pytest.mark.parametrize("which", ["device dir", "pci0 dir"])
def test_a_directory_switched_right_before_the_lookup_or_open_is_not_followed_out(tmp_path, watched, which, point):
    """F2: the switch comes right before the reader's first open / lstat / stat of a path ending so, while it
    reads mtu for the first time."""
    root, outside = make_tree(str(tmp_path))
    when, trigger = point
    watching = watched(Watching(trigger, when, lambda: switch(root, outside, which)))
    reader = SysfsReader(root)
    got = [answers(reader, MTU), answers(reader, SPEED)]
    assert_nothing_outside(got, watching, outside)
    for entry in got:  # read inside root before the switch, or absent after it: never the outside text
        assert entry["read"] in (None, "4092", "200000")


def test_without_a_switch_the_files_read_as_before(tmp_path, watched):
    """The check costs nothing of the answers: every file and listing of the tree reads, each read inside
    root."""
    root, outside = make_tree(str(tmp_path))
    watching = watched(Watching())
    reader = SysfsReader(root)
    assert [reader.read(rel) for rel in (ADDR, MTU, SPEED)] == ["00:11:22:33:44:55", "4092", "200000"]
    assert reader.listdir("sys/class/net/eth0") == ["address", "mtu", "speed"]
    assert reader.listdir(NET) == ["address", "mtu", "speed"]
    assert_nothing_outside([], watching, outside)
    assert watching.read_from and all(path.startswith(os.path.realpath(root) + os.sep)
                                      for path in watching.read_from)


def test_without_proc_the_reader_reads_as_before_on_its_resolution_alone(tmp_path, monkeypatch):
    """Where /proc/self/fd is not there (a chroot without /proc), nothing can be asked of the kernel: the
    reader reads and lists as before the check (the resolution's containment only), instead of refusing
    every file."""
    root, _outside = make_tree(str(tmp_path))
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda path: False if path == "/proc/self/fd" else real_isdir(path))
    reader = SysfsReader(root)
    assert reader._verify is False  # pylint: disable=protected-access
    assert [reader.read(rel) for rel in (ADDR, MTU, SPEED)] == ["00:11:22:33:44:55", "4092", "200000"]
    assert reader.listdir(NET) == ["address", "mtu", "speed"]


def test_a_file_reads_as_absent_when_the_kernel_puts_it_outside_root(tmp_path, monkeypatch):
    """The kernel's answer decides: a descriptor whose /proc path is outside root is not read (the file
    reads as absent, with no problem), whatever the resolution said."""
    root, outside = make_tree(str(tmp_path))
    monkeypatch.setattr(sysfs, "fd_path", lambda fd: os.path.join(outside, "eth0", "mtu"))
    reader = SysfsReader(root)
    assert reader.read(MTU) is None and reader.problem(MTU) is None
    assert reader.listdir(NET) == []


def test_a_link_switched_inside_root_names_the_place_it_reads(tmp_path):
    """Red team round 9, F5: eth0's link switched to another device inside root after a first read of the run;
    the next file read is the new device's, and real_name / real_parts name that same device (they named the
    cached, old one: value and place disagreed)."""
    root, _outside = make_tree(str(tmp_path))
    other = os.path.join(root, "sys", "devices", "pci1", "eth0")
    os.makedirs(other)
    with open(os.path.join(other, "mtu"), "w") as handle:
        handle.write("9000\n")
    reader = SysfsReader(root)
    assert reader.read(ADDR) == "00:11:22:33:44:55"
    link = os.path.join(root, "sys", "class", "net", "eth0")
    os.unlink(link)
    os.symlink("../../devices/pci1/eth0", link)
    assert reader.read(MTU) == "9000"
    assert reader.real_parts("sys/class/net/eth0") == ["sys", "devices", "pci1", "eth0"]
    assert reader.real_name("sys/class/net/eth0") == "eth0"
    assert reader.real_parts(MTU) == ["sys", "devices", "pci1", "eth0", "mtu"]
