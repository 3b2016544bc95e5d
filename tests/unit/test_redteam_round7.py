# -*- coding: utf-8 -*-
"""Red-team round 7 (attacks written from the documentation only):

1. lookup ``gpufleet.cluster.pattern_hosts`` must answer what ``ansible.builtin.inventory_hostnames`` answers
   for any pattern (its DOCUMENTATION), and filter ``target_hosts`` must be Jinja's ``intersect | sort``.
2. plugin_utils/report_json ``strict_indented`` / ``to_json``: byte for byte
   ``json.dumps(json_safe(value), indent=2, allow_nan=False)`` (+ newline), any value.
3. scripts/accelerated/gpufleet_mitogen_target.py's compile cache: whatever is in the cache directory, what
   runs is what compiling the source gives, and the run never fails because of the cache.

Failing attacks live in /work/notes/redteam-round7-failing.py (not committed)."""

import enum
import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".collections")
sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpufleet.cluster.plugins.filter.inventory_problems import target_hosts  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import json_safe  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.report_json import (  # noqa: E402
    strict_indented, to_json)

# ---------------------------------------------------------------------------------------------------------
# 1. pattern_hosts vs inventory_hostnames; target_hosts vs intersect | sort (Ansible in a child process, as
#    tests/unit/test_target_problem.py drives the lookups: the plugin loader is global state)
# ---------------------------------------------------------------------------------------------------------

DRIVER = r'''
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, lookup_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader([sys.argv[1]])
data = json.loads(sys.stdin.read())
loader = DataLoader()
ours = lookup_loader.get("gpufleet.cluster.pattern_hosts", loader=loader, templar=Templar(loader=loader))
theirs = lookup_loader.get("ansible.builtin.inventory_hostnames", loader=loader, templar=Templar(loader=loader))
def call(plugin, terms, groups):
    try:
        return ["ok", list(plugin.run(terms, variables={"groups": groups}))]
    except Exception as exc:
        return ["error", type(exc).__name__]
lookups = [[call(ours, t, g), call(theirs, t, g)] for t, g in data["lookups"]]
filters = []
for a, b in data["filters"]:
    templar = Templar(loader=loader, variables={"a": a, "b": b})
    row = []
    for expr in ("{{ a | intersect(b) | sort }}", "{{ a | gpufleet.cluster.target_hosts(b) }}"):
        try:
            row.append(["ok", list(templar.template(trust_as_template(expr)))])
        except Exception as exc:
            row.append(["error", type(exc).__name__])
    filters.append(row)
print(json.dumps({"lookups": lookups, "filters": filters}))
'''


def drive(lookups=(), filters=()):
    """[[pattern_hosts answer, inventory_hostnames answer]...], [[intersect | sort, target_hosts]...]."""
    proc = subprocess.run([sys.executable, "-c", DRIVER, COLLECTIONS], input=json.dumps(
        {"lookups": list(lookups), "filters": list(filters)}), capture_output=True, text=True, cwd=REPO,
        timeout=120, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["lookups"], out["filters"]


def inventory(rng):
    """A `groups` magic variable as Ansible makes it: every host in all, groups' hosts flattened, no duplicates."""
    hosts = rng.sample(["gpu1", "gpu2", "GPU3", "web1", "web2", "web10", "cp1", "localhost", "10.0.0.5",
                        "node-a.example.com", "n_1", "db", "gpu_nodes", "h\u00e9te"], rng.randint(0, 9))
    names = rng.sample(["gpu_nodes", "kube_node", "web", "db", "empty", "kube_control_plane", "Gpu", "g1",
                        "123", "_x", "web1", "rdma_nodes"], rng.randint(1, 6))
    groups = {"all": list(hosts)}
    for name in names:
        groups[name] = [h for h in hosts if rng.random() < 0.5]
    groups["ungrouped"] = [h for h in hosts if not any(h in v for k, v in groups.items() if k != "all")]
    return groups


def patterns(rng, groups):
    names = [g for g in groups if g not in ("all",)]
    one = rng.choice(names)
    two = rng.choice(names)
    return rng.choice([
        one, one, one, "all", "*", one + ":" + two, one + ":&" + two, one + ":!" + two, "!" + one,
        "all:!" + one, "~gpu[0-9]+", "~^web", "web[0:1]", one + "[0]", one + "[-1]", "gpu*", "nothere",
        "no_such_group", "GPU_NODES", one.upper(), "gpu1", "localhost", "127.0.0.1", one + " ", " " + one,
        one + ",", one + "," + two, "", "x y", "a.b", "\u00e9", "10.0.0.5", "web1", "db", "123", "_x"])


def test_pattern_hosts_answers_what_inventory_hostnames_answers_for_realistic_inventories():
    """pattern_hosts DOCUMENTATION: 'The hosts of the inventory that the host pattern matches ... as
    ansible.builtin.inventory_hostnames answers' (a plain group name from `groups`, anything else through it)."""
    rng = random.Random(7)
    cases = []
    for _ in range(300):
        groups = inventory(rng)
        cases.append([[patterns(rng, groups)], groups])
    # terms that are not one string: several patterns, a list, a number, nothing
    groups = {"all": ["a", "b"], "g": ["b"], "h": ["a"], "ungrouped": []}
    cases += [[["g", "h"], groups], [[["g", "h"]], groups], [[5], groups], [[None], groups], [[], groups],
              [["g"], {"all": [], "g": [], "ungrouped": []}]]
    lookups, _ = drive(lookups=cases)
    wrong = [(case, got) for case, got in zip(cases, lookups) if got[0] != got[1]]
    assert not wrong, wrong[:5]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=5), max_size=12), st.lists(st.text(max_size=5), max_size=12))
def test_target_hosts_is_intersect_then_sort_for_any_text(matched, play_hosts):
    """target_hosts: 'matched that are in play_hosts, sorted as Jinja's intersect | sort sorts them
    (case-insensitive)' -- Jinja's sort(case_sensitive=False) keys a str on str.lower()."""
    got = target_hosts(matched, play_hosts)
    expected = sorted(set(matched) & set(play_hosts), key=str.lower)
    assert sorted(got) == sorted(expected)
    assert [name.lower() for name in got] == [name.lower() for name in expected]


def test_target_hosts_agrees_with_jinja_on_case_and_unicode_edges():
    """The real `intersect | sort` (Ansible's Templar) against target_hosts, names whose lower() and casefold()
    differ (sharp s, dotted I, Kelvin sign, final sigma, titlecase digraphs), duplicates, empties."""
    names = ["\u00df", "SS", "ss", "st", "\u0130", "i", "I", "\u212a", "k", "K", "\u03a3", "\u03c3", "\u03c2",
             "\u01c4", "\u01c5", "\u01c6", "", " ", "a", "A", "a", "b\u0301", "\u00e1", "\U0001f600"]
    rng = random.Random(3)
    cases = [[names, list(reversed(names))], [[], names], [names, []]]
    for _ in range(60):
        cases.append([rng.sample(names, rng.randint(0, len(names))), rng.sample(names, rng.randint(0, len(names)))])
    _, filters = drive(filters=cases)
    for (a, b), (jinja, ours) in zip(cases, filters):
        assert jinja[0] == ours[0] == "ok", (a, b, jinja, ours)
        assert sorted(jinja[1]) == sorted(ours[1]), (a, b)
        assert [n.lower() for n in jinja[1]] == [n.lower() for n in ours[1]], (a, b, jinja, ours)


# ---------------------------------------------------------------------------------------------------------
# 2. report_json
# ---------------------------------------------------------------------------------------------------------

def reference(value):
    return json.dumps(json_safe(value), indent=2, allow_nan=False)


def outcome(function, value):
    try:
        return ("ok", function(value))
    except Exception as exc:  # pylint: disable=broad-except
        return ("error", type(exc).__name__)


def same_as_reference(value):
    ref = outcome(reference, value)
    ours = outcome(strict_indented, value)
    whole = outcome(to_json, value)
    assert ours == ref, (ascii(ref)[:300], ascii(ours)[:300])
    if ref[0] == "ok":
        assert whole == ("ok", ref[1] + "\n"), ascii(whole)[:300]
    else:
        assert whole[0] == "error"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Colour(str, enum.Enum):
    RED = "red"


class Ratio(float, enum.Enum):
    HALF = 0.5


class LoudInt(int):
    def __repr__(self):
        return "LoudInt!"

    def __str__(self):
        return "loud \udc80"


class BigInt(int):
    """An int subclass whose str() is plain text (one whose str() has a lone surrogate: F3, failing file)."""

    def __repr__(self):
        return "BigInt!"

    def __str__(self):
        return "big int"


class LoudFloat(float):
    def __repr__(self):
        return "LoudFloat!"

    def __str__(self):
        return "loud float"


class LoudStr(str):
    def __repr__(self):
        return "LoudStr!"

    def __str__(self):
        return "other text"


class Plain(object):
    def __str__(self):
        return "plain \ud800 object"


class MyDict(dict):
    pass


class MyList(list):
    pass


TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6)
ODD = st.sampled_from([Level.LOW, Level.HIGH, Colour.RED, Ratio.HALF, LoudInt(3), LoudInt(-7),
                       BigInt(2 ** 64), BigInt(-(2 ** 70)),
                       LoudFloat(1.5), LoudFloat(float("nan")), LoudFloat(float("-inf")), LoudStr("x"),
                       LoudStr("\udc80"), Plain(), True, False, None, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1,
                       2 ** 63 - 1, float("nan"), float("inf"), -0.0,
                       5e-324, 1e308, b"\x80\xff", b"ok", bytearray(b"\x00"), "\ud800", "\udcff", "\\x80",
                       "\u2028\x00\x1f\x7f", "nan", "true", "1", 1j, range(2)])
HUGE = st.sampled_from([4299, 4300, 4301, 4400, 6000]).map(lambda digits: 10 ** digits * (-1) ** digits)
KEYS = st.one_of(TEXT, HUGE, ODD.filter(lambda k: not isinstance(k, (bytearray, range))),
                 st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True), st.binary(max_size=3),
                 st.tuples(st.integers(0, 2), st.none()), st.sampled_from(["1", "1.0", "True", "None", "null",
                                                                           "nan", "inf", "\\x80", "(0, None)"]))
VALUES = st.recursive(
    st.one_of(ODD, TEXT, st.integers(), st.floats(), st.binary(max_size=4), HUGE),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(MyList),
        st.dictionaries(KEYS, children, max_size=4), st.dictionaries(KEYS, children, max_size=3).map(MyDict),
        st.frozensets(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.booleans()), max_size=4),
        st.sets(st.one_of(st.integers(-5, 5), st.text(max_size=2)), max_size=4)),
    max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_strict_json_is_the_reference_for_hostile_values(value):
    same_as_reference(value)


def test_keys_that_collide_after_json_safe_keep_the_references_order_and_value():
    for value in ({1: "int", "1": "str"}, {"1": "str", 1: "int"}, {True: "bool", "True": "str"},
                  {None: "none", "None": "str"}, {b"\x80": "bytes", "\\x80": "text"}, {"\udc80": 1, "\\x80": 2},
                  {1.0: "float", "1.0": "str"}, {float("nan"): 1, "nan": 2}, {(0, None): 1, "(0, None)": 2},
                  {Level.LOW: "enum", "Level.LOW": "str", 1: "x"}, {LoudInt(3): 1, "loud \\udc80": 2},
                  {LoudStr("a"): 1, "a": 2}, {2 ** 64: 1, str(2 ** 64): 2}, {"a": {1: {2: {"2": 3}}}}):
        same_as_reference(value)


class Refuses(int):
    def __str__(self):
        raise RuntimeError("no text")


def test_subclasses_whose_str_raises_or_is_odd_fail_or_write_as_the_reference_does():
    for value in (Refuses(1), Refuses(2 ** 64), {Refuses(1): 1}, {Refuses(2 ** 64): 1}, [LoudInt(2 ** 64)],
                  {LoudInt(2 ** 64): 1}, (LoudInt(2 ** 64),), {(LoudInt(2 ** 64),): 1}, {"a": LoudInt(2 ** 64)},
                  {LoudFloat(1.5): 1}, {LoudFloat(float("nan")): 1}, {LoudStr("\udc80"): LoudStr("\ud800")},
                  {1: LoudStr("\ud800"), LoudStr("\udc80"): 2}, Level.HIGH, {Level.HIGH: Colour.RED},
                  {Ratio.HALF: Ratio.HALF}):
        same_as_reference(value)


def test_long_texts_and_many_items():
    same_as_reference({"x" * 100000: "\udc80" * 100000, "list": list(range(20000)), "s": "\u00e9\ud83d" * 5000})


def test_where_the_reference_writes_a_deep_nesting_ours_writes_the_same():
    """Nesting near the recursion limit, called from several stack depths: whenever json.dumps(json_safe())
    succeeds, strict_indented and to_json give the same bytes (never a RecursionError of their own)."""
    def nest(kind, depth):
        value = 0
        for _ in range(depth):
            value = {"k": value} if kind == "dict" else ({1: value} if kind == "intkey" else
                                                         ((value,) if kind == "tuple" else [value]))
        return value

    def at(stack, function, value):
        return at(stack - 1, function, value) if stack else outcome(function, value)

    for kind in ("list", "dict", "intkey", "tuple"):
        for stack in (0, 300, 700):
            for depth in range(0, 1000 - stack, 23):
                value = nest(kind, depth)
                ref = at(stack, reference, value)
                if ref[0] == "ok":
                    assert at(stack, strict_indented, value) == ref, (kind, stack, depth)
                    assert at(stack, to_json, value) == ("ok", ref[1] + "\n"), (kind, stack, depth)


# ---------------------------------------------------------------------------------------------------------
# 3. accelerated compile cache (driven as tests/unit/test_accelerated_code_cache.py drives it)
# ---------------------------------------------------------------------------------------------------------

# the module under test, its fixtures and the source it compiles: test_accelerated_code_cache's (one place)
import test_accelerated_code_cache as _cache  # noqa: E402

SOURCE, TARGET, runs = _cache.SOURCE, _cache.TARGET, _cache.run
target, writes_bytecode = _cache.target, _cache.writes_bytecode  # fixtures (writes_bytecode autouse)

NAME = "master:/x/a.py"

try:
    import ansible_mitogen.runner  # noqa: F401  pylint: disable=unused-import
    HAVE_MITOGEN = True
except ImportError:  # pragma: no cover
    HAVE_MITOGEN = False
needs_mitogen = pytest.mark.skipif(not HAVE_MITOGEN, reason="mitogen is not installed")


def entry(target, directory, source=SOURCE, name=NAME):
    return os.path.join(directory, target.entry_key(source, name))


@needs_mitogen
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 400), st.binary(max_size=8), st.sampled_from(["cut", "flip", "append", "prefix", "digest"]))
def test_a_hand_damaged_real_entry_never_runs_other_code(target, tmp_path_factory, where, junk, how):
    directory = str(tmp_path_factory.mktemp("code"))
    target.compile_cached(SOURCE, NAME, directory)
    path = entry(target, directory)
    with open(path, "rb") as handle:
        whole = handle.read()
    where = where % max(len(whole), 1)
    damaged = {"cut": whole[:where], "flip": whole[:where] + bytes([whole[where] ^ 0xFF]) + whole[where + 1:],
               "append": whole + junk, "prefix": junk + whole,
               "digest": whole[:32] + junk + whole[32 + len(junk):]}[how]
    with open(path, "wb") as handle:
        handle.write(damaged)
    assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42)


@needs_mitogen
def test_odd_things_in_place_of_an_entry_compile_from_source(target, tmp_path):
    for kind in ("directory", "dangling", "loop", "empty", "unreadable-dir"):
        directory = tmp_path / kind
        directory.mkdir(mode=0o700)
        path = entry(target, str(directory))
        if kind == "directory":
            os.mkdir(path)
        elif kind == "dangling":
            os.symlink(str(tmp_path / "nothing"), path)
        elif kind == "loop":
            os.symlink(path, path)
        elif kind == "empty":
            open(path, "wb").close()
        else:
            os.mkdir(path, 0o000)
        assert runs(target.compile_cached(SOURCE, NAME, str(directory))) == ([0, 2, 4], 42), kind


@needs_mitogen
def test_a_symlinked_foreign_or_writable_directory_is_not_used(target, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert runs(target.compile_cached(SOURCE, NAME, str(link))) == ([0, 2, 4], 42)
    assert os.listdir(str(real)) == []
    for mode in (0o770, 0o707, 0o1777, 0o720, 0o702):
        shared = tmp_path / ("m%o" % mode)
        shared.mkdir()
        shared.chmod(mode)
        assert runs(target.compile_cached(SOURCE, NAME, str(shared))) == ([0, 2, 4], 42)
        assert os.listdir(str(shared)) == [], oct(mode)
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(str(foreign), 65534, 65534)
        assert runs(target.compile_cached(SOURCE, NAME, str(foreign))) == ([0, 2, 4], 42)
        assert os.listdir(str(foreign)) == []


@needs_mitogen
def test_a_directory_that_cannot_be_a_directory_compiles_from_source(target, tmp_path):
    plain = tmp_path / "file"
    plain.write_text("x")
    for directory in (str(plain), str(plain / "below" / "it"), str(tmp_path / "ro" / "sub")):
        if directory.endswith("sub"):
            (tmp_path / "ro").mkdir(mode=0o500)
        assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42), directory
    readonly = tmp_path / "readonly"
    readonly.mkdir(mode=0o500)
    assert runs(target.compile_cached(SOURCE, NAME, str(readonly))) == ([0, 2, 4], 42)


@needs_mitogen
def test_an_entry_of_another_file_name_is_not_run(target, tmp_path):
    directory = str(tmp_path)
    other = compile("VALUE = [9]\ndef double(x):\n    return -1\n", "master:/x/b.py", "exec", 0, True)
    with open(entry(target, directory), "wb") as handle:
        handle.write(target.entry_bytes(other, os.path.basename(entry(target, directory))))
    assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42)


# --- found by this round (F5-F7), fixed in scripts/accelerated/gpufleet_mitogen_target.py ----------------
# The docstrings below say what failed before the fix.
OTHER = "VALUE = ['other code']\ndef double(x):\n    return -1\n"


@needs_mitogen
def test_a_valid_entry_of_another_source_under_this_key_is_not_run(target, tmp_path):
    """An entry copied / renamed / symlinked under another key (e.g. a hand-made copy of the directory, an
    old entry moved over a new one): its digest matches its data, its code's file name matches, so the old
    source's code runs for the new source. Test docstring of test_accelerated_code_cache.py: 'What runs must
    be what compiling the source gives, whatever is in the cache directory'; the module docstring: 'the
    cache can make a run faster, never ... change what runs'. The digest covers the data, not the key."""
    directory = str(tmp_path)
    target.compile_cached(OTHER, NAME, directory)
    with open(entry(target, directory, OTHER), "rb") as handle:
        other_entry = handle.read()
    with open(entry(target, directory), "wb") as handle:
        handle.write(other_entry)
    assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42)


@needs_mitogen
def test_an_entry_linked_to_another_entry_is_not_followed(target, tmp_path):
    directory = str(tmp_path)
    target.compile_cached(OTHER, NAME, directory)
    os.symlink(entry(target, directory, OTHER), entry(target, directory))
    assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42)


DRIVE = (
    "import importlib.util, os, resource, sys\n"
    "sys.dont_write_bytecode = False\n"
    "spec = importlib.util.spec_from_file_location('t', sys.argv[1])\n"
    "t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)\n"
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    "d, kind = sys.argv[2], sys.argv[3]\n"
    "path = os.path.join(d, t.entry_key(sys.argv[4], 'master:/x/a.py'))\n"
    "os.mkfifo(path) if kind == 'fifo' else os.symlink(kind, path)\n"
    "ns = {}; exec(t.compile_cached(sys.argv[4], 'master:/x/a.py', d), ns)\n"
    "print(ns['VALUE'], ns['double'](21))\n")


@needs_mitogen
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_an_entry_that_is_a_fifo_or_an_endless_device_is_not_read(kind, tmp_path):
    """A FIFO (or a symlink to /dev/zero, /dev/urandom) in place of an entry: the module reads it forever
    (the 60 s here is a hang guard), instead of 'any problem (... an unreadable entry) compiles from source'."""
    directory = str(tmp_path)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVE, TARGET, directory, kind, SOURCE], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("%s entry: the module run hangs (no answer in 60 s)" % kind)
    assert proc.returncode == 0 and proc.stdout == "[0, 2, 4] 42\n", proc.stderr[-2000:]


@needs_mitogen
def test_a_directory_swapped_for_a_link_after_the_privacy_check_is_not_used(target, tmp_path, monkeypatch):
    """The 'private' check (a directory, not a link, of this user, nobody else can write) is made on the path,
    then entries are read by path: a directory swapped for a symlink to a world-writable one right after the
    check (a writable parent directory, e.g. XDG_CACHE_HOME under a shared place) serves its code."""
    import shutil

    directory = str(tmp_path / "code")
    os.mkdir(directory, 0o700)
    evil = str(tmp_path / "evil")
    os.mkdir(evil)
    os.chmod(evil, 0o777)
    with open(entry(target, evil), "wb") as handle:
        handle.write(target.entry_bytes(compile(OTHER, NAME, "exec", 0, True), os.path.basename(entry(target, evil))))
    original = target.private

    def racing(path):
        answer = original(path)
        if answer and os.path.realpath(path) == os.path.realpath(directory):
            shutil.rmtree(directory)
            os.symlink(evil, directory)
        return answer

    monkeypatch.setattr(target, "private", racing)
    assert runs(target.compile_cached(SOURCE, NAME, directory)) == ([0, 2, 4], 42)


# --- found by this round (F1, F2), fixed in plugins/lookup/pattern_hosts.py --------------------------------
def test_an_empty_group_named_localhost_is_the_implicit_localhost_as_inventory_hostnames_answers():
    """inventory_hostnames answers ['localhost'] (the implicit localhost: the pattern matched nothing and
    is a name of localhost); pattern_hosts answered [] from groups['localhost'] before round 7's fix."""
    groups = {"all": ["gpu1"], "ungrouped": [], "localhost": [], "gpu_nodes": ["gpu1"]}
    lookups, _ = drive(lookups=[[["localhost"], groups]])
    assert lookups[0][0] == lookups[0][1], lookups


@pytest.mark.parametrize("groups", [
    {"all": ["a"], "g": ["a", "a"], "ungrouped": []},            # a member twice: Ansible answers it once
    {"all": ["1", "a"], "g": [1, "a"], "ungrouped": []},         # a non-str member: Ansible raises AnsibleError
    # not kept: a host named g in group h but missing from groups['all'] (Ansible's groups lists every host
    # under all; pattern_hosts reads a host's name from there)
], ids=["duplicate-member", "int-member"])
def test_a_hand_made_groups_variable_answers_as_inventory_hostnames(groups):
    """Not the magic variable Ansible makes (a playbook can pass its own `groups` only by overriding it), but
    the DOCUMENTATION promises inventory_hostnames' answer for the pattern, whatever `groups` holds."""
    lookups, _ = drive(lookups=[[["g"], groups]])
    assert lookups[0][0] == lookups[0][1], lookups


# --- 2. report_json -----------------------------------------------------------------------------------

class LoudInt(int):
    def __str__(self):
        return "loud \udc80"
