"""SysfsReader below a root other than / (the bench's roots, the lab, captures replayed with
``root``, molecule): what the cheaper path handling must keep (docs/performance.md, "Sweep cost,
round 6: the module side").

- Containment, exactly: a file is read when, and only when, ``os.path.realpath`` of its path is
  inside ``os.path.realpath(root)`` (random trees of directories, files and symlinks: relative,
  absolute, out of root, loops, dangling; a root that is itself a symlink, as the bench's are).
- The same answers as a reference reader that resolves every path with ``os.path.realpath`` and
  looks every file up with ``stat`` (the reader before the change): values, problems, exists,
  isdir, listdir, real_name, real_parts, and node_validate's whole payload on every fixture node.
- The cost, counted in system calls (no timing): a file below a resolved directory costs one
  ``lstat`` and no ``stat``; ``real_name`` / ``real_parts`` do not walk the path again.
"""

import json
import os

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvml_scenarios import fake_with
from runners import ScriptedRunner

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import (
    MAX_READ,
    ReadFailure,
    SysfsReader,
    open_regular,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES

NODES = os.path.join(FIXTURES, "nodes")
NOW = 1763640000
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class ReferenceReader(SysfsReader):
    """The reader as specified: every path resolved with os.path.realpath, every file looked up
    with stat and opened by its path (no cache of resolutions, no lstat reused)."""

    def _realpath(self, full):
        return os.path.realpath(full)

    def _read_inside(self, full):
        if not self._inside(full):
            return ReadFailure("outside root", absent=True)
        return open_regular(full, MAX_READ)


def inside(path, root):
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def answers(reader, rel):
    return {"read": reader.read(rel), "problem": reader.problem(rel), "exists": reader.exists(rel),
            "isdir": reader.isdir(rel), "listdir": reader.listdir(rel), "real_name": reader.real_name(rel),
            "real_parts": reader.real_parts(rel), "link_name": reader.link_name(rel)}


class CountingOs(object):
    """``os`` for sysfs: keeps the paths opened."""

    def __init__(self):
        self.counts = {"stat": 0, "lstat": 0, "open": 0}
        self.opened = []

    def __getattr__(self, name):
        return getattr(os, name)

    def stat(self, path, *args, **kwargs):
        self.counts["stat"] += 1
        return os.stat(path, *args, **kwargs)

    def lstat(self, path, *args, **kwargs):
        self.counts["lstat"] += 1
        return os.lstat(path, *args, **kwargs)

    def open(self, path, flags, *args):
        self.counts["open"] += 1
        fd = os.open(path, flags, *args)
        if not flags & getattr(os, "O_DIRECTORY", 0):  # a directory opened to be listed is not a file read
            self.opened.append(path)  # opened: an open that failed read nothing
        return fd


# -- random trees -----------------------------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "c", "d", "f", "g"])
TARGETS = st.one_of(
    st.sampled_from([".", "..", "../..", "../../..", "a", "../a", "a/b", "../b/f", "f", "missing/x", "b/../f",
                     "../outside", "../outside/f", "../../outside/f", "./c/../a", "a/../../outside"]),
    st.lists(st.sampled_from(["a", "b", "c", "f", "..", "."]), min_size=1, max_size=4).map("/".join),
)
ENTRY = st.tuples(
    st.lists(NAMES, min_size=0, max_size=3).map("/".join),  # parent, below root
    NAMES,
    st.one_of(st.just(("dir", None)), st.tuples(st.just("file"), st.sampled_from([b"1\n", b"", b"N/A", b"x" * 3])),
              st.tuples(st.just("rel"), TARGETS), st.tuples(st.just("abs"), TARGETS),
              st.tuples(st.just("abs_out"), st.sampled_from(["", "f", "d"])), st.just(("fifo", None))),
)


def build(base, entries, root_is_link):
    """tree/ (the root's directory), outside/ (a file and a directory beside it), and the root:
    tree/ itself or a symlink to it."""
    tree, outside = os.path.join(base, "tree"), os.path.join(base, "outside")
    os.makedirs(os.path.join(outside, "d"))
    with open(os.path.join(outside, "f"), "wb") as handle:
        handle.write(b"outside\n")
    os.makedirs(tree)
    for parent, name, (kind, value) in entries:
        folder = os.path.join(tree, parent)
        path = os.path.join(folder, name)
        if not os.path.isdir(folder) or os.path.islink(folder) or os.path.lexists(path):
            continue
        if kind == "dir":
            os.mkdir(path)
        elif kind == "file":
            with open(path, "wb") as handle:
                handle.write(value)
        elif kind == "rel":
            os.symlink(value, path)
        elif kind == "abs":
            os.symlink(os.path.normpath(os.path.join(tree, value)), path)
        elif kind == "abs_out":
            os.symlink(os.path.join(outside, value), path)
        else:
            os.mkfifo(path)
    root = tree
    if root_is_link:
        root = os.path.join(base, "root")
        os.symlink(tree, root)
    return root, tree


def relatives(tree):
    """Every entry of the tree, below and through its links (a few levels), plus dot paths."""
    seen = set()
    for base, dirs, files in os.walk(tree):
        for name in dirs + files:
            rel = os.path.relpath(os.path.join(base, name), tree)
            seen.add(rel)
            for tail in ("f", "a/f", "..", "../f", "../../outside/f", "missing", "."):
                seen.add(rel + "/" + tail)
    seen.update(["f", "a", "missing", ".", "..", "../outside/f", "a/../f", "a/b/../../f"])
    return sorted(seen)


@SETTINGS
@given(entries=st.lists(ENTRY, max_size=18), root_is_link=st.booleans())
def test_a_file_is_read_exactly_when_its_realpath_is_inside_the_root(tmp_path_factory, entries, root_is_link):
    base = str(tmp_path_factory.mktemp("tree"))
    root, _tree = build(base, entries, root_is_link)
    counting = CountingOs()
    real_os = sysfs.os
    sysfs.os = counting
    try:
        reader = SysfsReader(root)
        reference = ReferenceReader(root)
        for rel in relatives(_tree):
            path = os.path.join(root, rel)
            before = len(counting.opened)
            got = answers(reader, rel)
            opened = counting.opened[before:]
            is_inside = inside(path, root)
            # read exactly when inside and a regular file (then opened once, by its path)
            assert bool(opened) == (is_inside and os.path.isfile(path)), (rel, opened, got)
            for name in opened:
                assert inside(name, root), (rel, name)
            if not is_inside:
                assert got["read"] is None and got["problem"] is None and not got["exists"], (rel, got)
                assert got["real_parts"] is None and got["real_name"] is None, (rel, got)
            assert got == answers(reference, rel), rel
    finally:
        sysfs.os = real_os


# Found by the test above: a link as the last name (read through it, as before, not refused as
# ELOOP by the O_NOFOLLOW open); paths whose realpath is lexical where the kernel finds nothing.
ODD = [("", "f", ("file", b"1\n")), ("", "a", ("rel", "f")), ("", "d", ("dir", None)),
       ("d", "up", ("rel", "../f")), ("", "o", ("abs_out", "f")), ("", "s", ("abs", "d/up"))]


@pytest.mark.parametrize("rel", ["a", "d/up", "s", "o", "missing/../f", "f/.", "f/", "f/../f", "d/../f", "a/../f",
                                 "missing/../d", "d/up/..", "./f", "d//up"])
def test_odd_paths_answer_as_the_reference_reader(tmp_path, rel):
    root, _tree = build(str(tmp_path), ODD, True)
    assert answers(SysfsReader(root), rel) == answers(ReferenceReader(root), rel)


@SETTINGS
@given(entries=st.lists(ENTRY, max_size=18))
def test_resolution_is_os_realpath_in_random_trees(tmp_path_factory, entries):
    base = str(tmp_path_factory.mktemp("tree"))
    root, tree = build(base, entries, True)
    reader = SysfsReader(root)
    for rel in relatives(tree):
        path = os.path.join(root, rel)
        assert reader._realpath(path) == os.path.realpath(path), rel


# -- the same payload on every fixture node ------------------------------------------------------------
def payload(root, reader_class):
    params = {"root": root, "fail_on": "never",
              "gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
              "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}
    result, errors = validate_node(FAMILIES, params, runner=ScriptedRunner(), reader=reader_class(root),
                                   nvml=NvmlAdapter(fake_with("h100-healthy")), now=NOW)
    assert errors == []
    result.pop("elapsed_ms")
    return json.dumps(result, sort_keys=True)


@pytest.mark.parametrize("node", sorted(n for n in os.listdir(NODES) if os.path.isdir(os.path.join(NODES, n))))
@pytest.mark.parametrize("through_link", [True, False], ids=["root-symlink", "root-dir"])
def test_node_validate_payload_is_the_reference_readers_on_every_fixture(tmp_path, node, through_link):
    root = os.path.join(NODES, node)
    if through_link:
        os.symlink(root, str(tmp_path / node))
        root = str(tmp_path / node)
    got = payload(root, SysfsReader)
    assert got == payload(root, ReferenceReader)
    assert json.loads(got)["checks"]


# -- the cost, in system calls --------------------------------------------------------------------------
@pytest.fixture
def counted(monkeypatch):
    """Counts of os.stat / os.lstat / os.open from here on (os.path.realpath's lstat calls too)."""
    counts = {"stat": 0, "lstat": 0, "open": 0}
    def counting(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    for name in counts:
        monkeypatch.setattr(os, name, counting(name, getattr(os, name)))
    return counts


def dgx_root(tmp_path):
    node = tmp_path / "node"
    os.symlink(os.path.join(NODES, "dgx-h100"), str(node))
    return str(node)


def test_a_file_below_a_resolved_directory_costs_one_lstat_and_no_stat(tmp_path, request):
    reader = SysfsReader(dgx_root(tmp_path))
    base = "sys/class/infiniband/mlx5_0/ports/1"
    assert reader.read(base + "/state") == "4: ACTIVE"  # resolves the directories
    counts = request.getfixturevalue("counted")
    assert reader.read(base + "/phys_state") == "5: LinkUp"
    assert counts == {"stat": 0, "lstat": 1, "open": 1}


# -- mlx5.clean_text: a regular expression instead of a loop over the characters --------------------
@settings(max_examples=300, deadline=None, database=None)
@given(value=st.one_of(st.none(), st.text(), st.text(alphabet=st.characters(max_codepoint=40))))
def test_clean_text_refuses_exactly_undecodable_bytes_and_control_characters_but_tab_and_newline(value):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import clean_text

    refused = value is not None and ("\ufffd" in value or any(ord(ch) < 32 and ch not in "\t\n" for ch in value))
    assert clean_text(value) == (None if refused else value)


@pytest.mark.parametrize("value,expected", [(["x"], ["x"]), (("a", "b"), ("a", "b")), (["\x01"], None),
                                            (["\ufffd"], None), (["\t", "\n"], ["\t", "\n"]), ([], [])])
def test_clean_text_of_a_sequence_of_characters_is_judged_as_before(value, expected):
    """Red team round 9, F4: its callers pass text, but a list or tuple of characters was judged by the loop
    before 8d8295c and raised TypeError in the regular expression after it: the loop's verdict again."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import clean_text

    assert clean_text(value) == expected
