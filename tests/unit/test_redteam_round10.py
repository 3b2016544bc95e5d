"""Red team, round 10: the module exit's plain_remove_values, core/plain.py, and the accelerated shim's
plain_strip_internal_keys / plain_transform_to_native_types against ansible-core's own functions. Every test here
passes while the claim holds (a regression suite); the cases that did not hold are kept apart."""

import collections
import datetime
import json
import os
import subprocess
import sys
import textwrap

import pytest
from accelerated_shim import loaded_shim, shape
from conftest import REPO
from hypothesis import HealthCheck, given, settings, strategies as st

import ansible.utils.vars
from ansible.module_utils.common import parameters
from ansible.module_utils.common.parameters import remove_values
from ansible.vars.clean import strip_internal_keys as core_strip
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import framework, plain

CORE_TRANSFORM = ansible.utils.vars.transform_to_native_types
assert CORE_TRANSFORM.__module__ == "ansible.utils.vars"

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))

SURROGATES = st.sampled_from(["\udc80", "\ud800x", "a\udfff", "_ansible_\udc80"])
TEXT = st.one_of(st.text(max_size=8), SURROGATES, st.sampled_from(["_ansible_x", "_ansible_no_log", "_ansible_item_label",
                                                                   "_ansible_", "changed", ""]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 0.0, float("nan")]))
INTS = st.one_of(st.integers(), st.sampled_from([10 ** 4299, -(10 ** 4299), 2 ** 63, -(2 ** 64)]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
KEYS = st.one_of(TEXT, st.integers(-3, 3), st.booleans(), st.none(), FLOATS)
PLAIN = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                     max_leaves=25)
EMPTY_NO_LOG = st.sampled_from([[], (), set(), frozenset(), "", {}, b""])


def same(left, right):
    """Node by node: the same types, keys (identical objects, same order) and identical scalars."""
    assert type(left) is type(right), (left, right)
    if type(left) is dict:
        assert len(left) == len(right)
        for (lk, lv), (rk, rv) in zip(left.items(), right.items()):
            assert lk is rk or (type(lk) is type(rk) and lk == rk), (lk, rk)
            same(lv, rv)
    elif type(left) is list:
        assert len(left) == len(right)
        for lv, rv in zip(left, right):
            same(lv, rv)
    else:
        assert left is right, (left, right)


def container_ids(value, out=None):
    out = set() if out is None else out
    if isinstance(value, (dict, list)):
        out.add(id(value))
        for item in (value.values() if isinstance(value, dict) else value):
            container_ids(item, out)
    return out


def outcome(function, *args):
    try:
        return "ok", function(*args)
    except Exception as exc:  # pylint: disable=broad-except
        return "raised", type(exc)


def nest(depth, kind=list):
    top = kind()
    node = top
    for _ in range(depth):
        child = kind()
        if kind is list:
            node.append(child)
        else:
            node["k"] = child
        node = child
    return top


# ---- claim 1: plain_remove_values ---------------------------------------------------------------------------

@SETTINGS
@given(PLAIN, EMPTY_NO_LOG)
def test_remove_values_plain_trees_no_strings(value, empty):
    ours, core = framework.plain_remove_values(value, empty), remove_values(value, empty)
    same(ours, core)
    same(ours, value)
    assert not (container_ids(ours) & container_ids(value))  # isolated from the input
    assert not (container_ids(ours) & container_ids(core))


@SETTINGS
@given(PLAIN, st.lists(st.one_of(st.text(min_size=1, max_size=3), st.sampled_from(["1", "0", "True", "nan", "-0.0"])),
                       min_size=1, max_size=3))
def test_remove_values_with_no_log_strings(value, strings):
    assert shape(framework.plain_remove_values(value, strings)) == shape(remove_values(value, strings))
    assert shape(framework.plain_remove_values(value, set(strings))) == shape(remove_values(value, set(strings)))


ODD = st.recursive(st.one_of(SCALARS, st.binary(max_size=3), st.just(datetime.date(2020, 1, 2)),
                             st.just(datetime.datetime(2020, 1, 2, 3, 4))),
                   lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(collections.OrderedDict)
                   | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12)


@SETTINGS
@given(ODD, EMPTY_NO_LOG)
def test_remove_values_odd_values_fall_back(value, empty):
    assert shape(framework.plain_remove_values(value, empty)) == shape(remove_values(value, empty))


def test_remove_values_shared_and_deep_and_unknown():
    shared = {"x": [1]}
    for value in (nest(5000), nest(5000, dict), nest(990)):
        assert outcome(framework.plain_remove_values, value, [])[0] == outcome(remove_values, value, [])[0] == "ok"
    for value in ([shared, shared], {"a": shared, "b": shared}, 10 ** 4299, [10 ** 4299], {10 ** 5000: "huge key"},
                  float("nan"), "\udc80", [-(10 ** 4299)]):
        ours, core = outcome(framework.plain_remove_values, value, []), outcome(remove_values, value, [])
        assert ours[0] == core[0] == "ok"
        same(ours[1], core[1])
    out = framework.plain_remove_values([shared, shared], [])
    assert out[0] is not out[1] and out[0]["x"] is not out[1]["x"]  # ansible-core copies each occurrence
    for value in ([object()], {"a": {1, 2j}}, [1j]):
        assert outcome(framework.plain_remove_values, value, []) == outcome(remove_values, value, [])


def test_remove_values_nonempty_iterables_and_scalars():
    value = {"a": "xs3x", "b": [3, "s3", 33], "s3": True}
    for make in (lambda: iter(["s3"]), lambda: ["s3"], lambda: ("s3",), lambda: {"s3": 1}, lambda: "s", lambda: ["3"]):
        assert shape(framework.plain_remove_values(value, make())) == shape(remove_values(value, make()))
    for strings in ([1], [None]):
        assert outcome(framework.plain_remove_values, {"a": "1"}, strings)[0] == outcome(remove_values, {"a": "1"},
                                                                                          strings)[0]


def test_install_plain_exit_only_replaces_core():
    class Basic:  # pylint: disable=too-few-public-methods
        pass

    basic = Basic()
    basic.remove_values = parameters.remove_values
    assert framework.install_plain_exit(basic, parameters) is True and basic.remove_values is framework.plain_remove_values
    for foreign in (lambda value, strings: value, framework.plain_remove_values.__get__(1), None):
        other = Basic()
        other.remove_values = foreign
        assert framework.install_plain_exit(other, parameters) is False and other.remove_values is foreign
    import ansible.module_utils.basic as real_basic  # pylint: disable=import-outside-toplevel
    saved = real_basic.remove_values
    try:
        real_basic.remove_values = remove_values
        assert framework.install_plain_exit() is True and real_basic.remove_values is framework.plain_remove_values
    finally:
        real_basic.remove_values = saved


MODULE = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, %(path)r)
    import ansible.module_utils.basic as basic
    from ansible.module_utils.common.parameters import remove_values
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import framework
    if os.environ["EXIT_MODE"] == "core":
        basic.remove_values = lambda value, strings: remove_values(value, strings)
    def work(module):
        if os.environ["KIND"] == "huge":
            return {"n": 10 ** 4300}
        shared = {"s": [1]}
        return {"s": "\\udc80", "f": -0.0, "nan": float("nan"), "inf": float("-inf"), "k": {1: 2, True: 3, None: 4, 1.5: 5},
                "big": 10 ** 4299, "shared": [shared, shared], "params": module.params, "t": (1, 2),
                "msg": "token " + str(module.params["token"]), "d": [[[[{"_ansible_x": 1}]]]]}
    framework.run_module({"token": {"type": "str", "no_log": True}}, work)
""")


@pytest.mark.parametrize("kind", ["odd", "huge"])
def test_module_stdout_same_bytes(tmp_path, kind):
    script = tmp_path / "module.py"
    script.write_text(MODULE % {"path": os.path.join(REPO, ".collections")})
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"token": "tok-secret"}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), KIND=kind)
    runs = {}
    for mode in ("plain", "core"):
        proc = subprocess.run([sys.executable, str(script)], input=args, capture_output=True, text=True,
                              env=dict(env, EXIT_MODE=mode), timeout=60, check=False)
        runs[mode] = (proc.returncode, proc.stdout)
    assert runs["plain"] == runs["core"]
    if kind == "odd":
        assert runs["plain"][0] == 0 and "tok-secret" not in runs["plain"][1]


# ---- claim 2: plain_tree / plain_copy ---------------------------------------------------------------------

class SubInt(int):
    pass


class SubFloat(float):
    pass


class SubStr(str):
    pass


class SubDict(dict):
    pass


class SubList(list):
    pass


class AlwaysEqual:  # pylint: disable=too-few-public-methods
    def __eq__(self, other):
        return True

    def __hash__(self):
        return hash("x")


class EqualMeta(type):
    def __eq__(cls, other):
        return True

    __hash__ = type.__hash__


class Impostor(metaclass=EqualMeta):  # pylint: disable=too-few-public-methods
    pass


def _not_plain_values():
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel
    from ansible.parsing.vault import EncryptedString  # pylint: disable=import-outside-toplevel

    cycle = []
    cycle.append(cycle)
    selfdict = {}
    selfdict["me"] = selfdict
    shared = []
    return [SubInt(1), SubFloat(1.0), SubStr("a"), SubDict(), SubList(), range(0),
            (), b"", bytearray(), set(), frozenset(), 1j, AlwaysEqual(), Impostor(), collections.OrderedDict(),
            TrustedAsTemplate().tag("t"), EncryptedString(ciphertext="$ANSIBLE_VAULT;1.1;AES256\n3031"),
            datetime.date(2020, 1, 1), cycle, selfdict, [shared, shared], {"a": shared, "b": [shared]},
            {SubStr("k"): 1}, {SubInt(1): 1}, {(): 1}, {frozenset(): 1}, {AlwaysEqual(): 1}, {Impostor(): 1}]


@pytest.mark.parametrize("index", range(28))
def test_not_plain_refused(index):
    bad = _not_plain_values()[index]
    for value in (bad, [bad], {"k": bad}, [{"k": [bad]}]):
        assert plain.plain_tree(value) is False
        with pytest.raises(plain.NotPlain):
            plain.plain_copy(value)


@SETTINGS
@given(PLAIN)
def test_plain_copy_of_plain_trees(value):
    assert plain.plain_tree(value) is True
    copy = plain.plain_copy(value)
    same(copy, value)
    assert not (container_ids(copy) & container_ids(value))


def test_plain_edges():
    value = {True: [float("nan"), -0.0], 2: None, None: "\udc80", 1.5: 10 ** 5000, "": {}}
    assert plain.plain_tree(value) is True
    copy = plain.plain_copy(value)
    assert list(copy) == list(value) and all(a is b for a, b in zip(copy, value))
    assert copy[True][1] is value[True][1] and str(copy[True][1]) == "-0.0"
    # at most plain.MAX_DEPTH containers deep (nest(d) holds d + 1); deeper, ansible-core's own walks decide
    top = plain.MAX_DEPTH - 1
    assert plain.plain_tree(nest(top)) is True and plain.plain_tree(nest(top, dict)) is True
    assert plain.plain_copy(nest(top)) == nest(top)
    assert plain.plain_tree(nest(top + 1)) is False and plain.plain_tree(nest(20000, dict)) is False
    with pytest.raises(plain.NotPlain):
        plain.plain_copy(nest(5000))
    for scalar in (None, True, 0, 1.5, "s", 10 ** 5000):
        assert plain.plain_tree(scalar) is True and plain.plain_copy(scalar) is scalar
    empty = []
    assert plain.plain_tree([empty, [empty]]) is False
    assert plain.plain_tree([[], []]) is True  # distinct empty lists are fine


# ---- claim 3: the accelerated shim ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shim():
    with loaded_shim("gpufleet_mitogen_linear_redteam_round10") as module:
        yield module


def _strip_both(shim_module, make, exceptions_make):
    results = []
    for function in (core_strip, shim_module.plain_strip_internal_keys):
        dirty = make()
        try:
            returned = function(dirty, exceptions_make())
            results.append(("ok", returned is dirty, shape(dirty)))
        except Exception as exc:  # pylint: disable=broad-except
            results.append(("raised", type(exc), repr(dirty)[:300]))
    return results


EXCEPTIONS = st.sampled_from([None, (), ("_ansible_no_log",), ["_ansible_x", "_ansible_item_label"],
                              {"_ansible_x"}, frozenset({"_ansible_"}), "_ansible_no_log", "_ansible_x_ansible_item",
                              {"_ansible_x": 1}, "", collections.OrderedDict(_ansible_no_log=1)])


@SETTINGS
@given(PLAIN, EXCEPTIONS)
def test_strip_plain_trees(shim, value, exceptions):  # pylint: disable=redefined-outer-name
    if type(value) not in (dict, list):
        value = {"_ansible_top": 1, "v": value}
    result = _strip_both(shim, lambda: plain.plain_copy(value), lambda: exceptions)
    assert result[0] == result[1]


@SETTINGS
@given(ODD, EXCEPTIONS)
def test_strip_odd_values(shim, value, exceptions):  # pylint: disable=redefined-outer-name
    import copy  # pylint: disable=import-outside-toplevel
    result = _strip_both(shim, lambda: copy.deepcopy([value, {"_ansible_a": value}]), lambda: exceptions)
    assert result[0] == result[1]


def test_strip_edge_arguments(shim):  # pylint: disable=redefined-outer-name
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel

    make = lambda: [{"_ansible_a": 1, "b": {"_ansible_no_log": True}}, {"_ansible_b": [{"_ansible_c": 2}]}]  # noqa: E731
    for exceptions in (5, 1.5, object(), None, ["_ansible_a", 1, None], b"_ansible_a"):
        result = _strip_both(shim, make, lambda e=exceptions: e)
        assert result[0] == result[1], exceptions
    for top in ("x", 1, None, (), ({"_ansible_a": 1},), frozenset()):
        result = _strip_both(shim, lambda t=top: t, lambda: None)
        assert result[0] == result[1]
    tagged = lambda: {TrustedAsTemplate().tag("_ansible_t"): 1, "_ansible_u": [SubDict(_ansible_v=1)]}  # noqa: E731
    result = _strip_both(shim, tagged, lambda: ())
    assert result[0] == result[1]
    result = _strip_both(shim, lambda: [{"_ansible_x": 1}, nest(5)], lambda: None)
    assert result[0] == result[1]

    def cycle_last():
        loop = []
        loop.append(loop)
        return [{"_ansible_x": 1}, loop]

    result = _strip_both(shim, cycle_last, lambda: None)
    assert result[0][0] == result[1][0] == "raised" and result[0] == result[1]


@SETTINGS
@given(PLAIN, st.booleans())
def test_transform_plain_trees(shim, value, redact):  # pylint: disable=redefined-outer-name
    ours, core = shim.plain_transform_to_native_types(value, redact), CORE_TRANSFORM(value, redact)
    same(ours, core)
    assert not (container_ids(ours) & container_ids(value))


def _tagged_values():
    from ansible._internal._datatag._tags import Origin, TrustedAsTemplate  # pylint: disable=import-outside-toplevel
    from ansible.module_utils._internal._datatag import AnsibleTagHelper  # pylint: disable=import-outside-toplevel
    from ansible.parsing.vault import EncryptedString  # pylint: disable=import-outside-toplevel

    origin = Origin(path="/x.yml", line_num=3)
    trusted = TrustedAsTemplate().tag("{{ x }}")
    vault = EncryptedString(ciphertext="$ANSIBLE_VAULT;1.1;AES256\n3031")
    shared = [1]
    return [
        {"a": trusted}, {trusted: 1}, [origin.tag("o")], origin.tag({"a": 1}), origin.tag([1, {"b": 2}]),
        {"v": vault}, [vault], {"i": origin.tag(5), "f": origin.tag(1.5)}, AnsibleTagHelper.tag_copy(trusted, "c"),
        {"t": (1, [2]), "s": {3}}, collections.OrderedDict(a=[1]), {"d": datetime.datetime(2020, 1, 1)},
        [shared, shared], {"a": SubStr("x"), SubInt(2): SubFloat(1.0)}, {"b": b"x"}, trusted, vault, 10 ** 5000,
    ]


@pytest.mark.parametrize("index", range(18))
@pytest.mark.parametrize("redact", [True, False])
def test_transform_tagged_and_odd(shim, index, redact):  # pylint: disable=redefined-outer-name
    value = _tagged_values()[index]
    ours = outcome(shim.plain_transform_to_native_types, value, redact)
    core = outcome(CORE_TRANSFORM, value, redact)
    assert ours[0] == core[0]
    if ours[0] == "ok":
        assert shape(ours[1]) == shape(core[1])
    else:
        assert ours[1] is core[1]


def test_transform_depths_that_agree(shim):  # pylint: disable=redefined-outer-name
    for depth in (50, 150, 2000, 5000):
        for kind in (list, dict):
            value = nest(depth, kind)
            ours = outcome(shim.plain_transform_to_native_types, value)
            core = outcome(CORE_TRANSFORM, value)
            assert ours[0] == core[0] and (ours[0] == "ok" or ours[1] is core[1]), (depth, kind)


def test_unknown_object_transform(shim):  # pylint: disable=redefined-outer-name
    for value in ([object()], {"a": AlwaysEqual()}, {AlwaysEqual(): 1}):
        ours, core = outcome(shim.plain_transform_to_native_types, value), outcome(CORE_TRANSFORM, value)
        assert ours == core


def _task_result(data, action="gpufleet.cluster.node_validate", no_log=False):
    from ansible.executor.task_result import _RawTaskResult  # pylint: disable=import-outside-toplevel
    from ansible.inventory.host import Host  # pylint: disable=import-outside-toplevel
    from ansible.playbook.task import Task  # pylint: disable=import-outside-toplevel

    task = Task()
    task.action = action
    task.no_log = no_log
    return _RawTaskResult(Host("h1"), task, data, {})


@SETTINGS
@given(st.dictionaries(st.sampled_from(["_ansible_no_log", "_ansible_x", "changed", "failed", "_ansible_item_label",
                                        "invocation", "_ansible_delegated_vars", "msg"]), PLAIN, max_size=6),
       st.sampled_from(["gpufleet.cluster.node_validate", "ansible.builtin.debug"]), st.booleans())
def test_callers_same_with_and_without_shim(shim, data, action, no_log):  # pylint: disable=redefined-outer-name
    from ansible.executor import task_result  # pylint: disable=import-outside-toplevel

    assert task_result.strip_internal_keys is shim.plain_strip_internal_keys
    assert ansible.utils.vars.transform_to_native_types is shim.plain_transform_to_native_types
    with_shim = _task_result(plain.plain_copy(data), action, no_log).as_callback_task_result()
    saved = task_result.strip_internal_keys, ansible.utils.vars.transform_to_native_types
    task_result.strip_internal_keys, ansible.utils.vars.transform_to_native_types = core_strip, CORE_TRANSFORM
    try:
        without = _task_result(plain.plain_copy(data), action, no_log).as_callback_task_result()
        core_result = without.result
    finally:
        task_result.strip_internal_keys, ansible.utils.vars.transform_to_native_types = saved
    assert shape(with_shim._return_data) == shape(without._return_data)  # pylint: disable=protected-access
    assert shape(with_shim.result) == shape(core_result)


def test_transform_lazy_containers(shim):  # pylint: disable=redefined-outer-name
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel
    from ansible._internal._templating import _lazy_containers  # pylint: disable=import-outside-toplevel
    from ansible._internal._templating._engine import TemplateEngine, TemplateOptions  # pylint: disable=import-outside-toplevel
    from ansible._internal._templating._utils import TemplateContext  # pylint: disable=import-outside-toplevel

    templar = TemplateEngine(variables={"x": 5, "y": {"z": [1]}})

    def lazy():
        with TemplateContext(template_value=None, templar=templar, options=TemplateOptions.DEFAULT):
            return _lazy_containers._AnsibleLazyTemplateMixin._try_create(  # pylint: disable=protected-access
                {"a": [1, {"b": TrustedAsTemplate().tag("{{ x }}")}], "c": TrustedAsTemplate().tag("{{ y }}"),
                 "_ansible_d": 1})

    for value in (lazy(), [lazy()], {"k": lazy()}):
        ours, core = outcome(shim.plain_transform_to_native_types, value), outcome(CORE_TRANSFORM, value)
        assert ours[0] == core[0] == "ok" and shape(ours[1]) == shape(core[1])
    result = _strip_both(shim, lambda: [lazy(), {"_ansible_e": 1}], lambda: None)
    assert result[0] == result[1]


def test_foreign_references_are_kept():
    from ansible.executor import task_result  # pylint: disable=import-outside-toplevel
    from ansible.plugins import strategy  # pylint: disable=import-outside-toplevel

    def foreign_transform(value, redact=True):
        return CORE_TRANSFORM(value, redact)

    def foreign_strip(dirty, exceptions=None):
        return core_strip(dirty, exceptions)

    saved = (ansible.utils.vars.transform_to_native_types, task_result.strip_internal_keys, strategy.strip_internal_keys)
    ansible.utils.vars.transform_to_native_types = foreign_transform
    task_result.strip_internal_keys = strategy.strip_internal_keys = foreign_strip
    try:
        with loaded_shim("gpufleet_mitogen_linear_redteam_round10_foreign"):
            assert ansible.utils.vars.transform_to_native_types is foreign_transform
            assert task_result.strip_internal_keys is foreign_strip and strategy.strip_internal_keys is foreign_strip
    finally:
        ansible.utils.vars.transform_to_native_types, task_result.strip_internal_keys, strategy.strip_internal_keys = saved
    assert ansible.utils.vars.transform_to_native_types is saved[0]


# Found failing by red team round 10 and fixed (each failed before the fix):
# F1: an int with more digits than sys.get_int_max_str_digits(): ansible-core's remove_values calls to_native() on it
# (ValueError "Exceeds the limit (4300 digits)"); plain_copy keeps it, so plain_remove_values returns a list.
def test_f1_huge_int():
    value = [10 ** 4300]
    assert outcome(framework.plain_remove_values, value, []) == outcome(remove_values, value, [])


# F2: a falsy non-iterable no_log_strings (None, 0, False): ansible-core raises TypeError (not iterable);
# plain_remove_values's `if not no_log_strings` takes the plain copy and returns it.
@pytest.mark.parametrize("strings", [None, 0, False])
def test_f2_falsy_non_iterable_no_log_strings(strings):
    assert outcome(framework.plain_remove_values, {"a": 1}, strings) == outcome(remove_values, {"a": 1}, strings)


# F3: a no_log_strings object that is falsy but iterates items (len 0, yields "secret"): ansible-core masks the
# secret, plain_remove_values returns it unmasked.
def test_f3_falsy_iterable_no_log_strings_leaks():
    class Falsy(list):
        def __len__(self):
            return 0

        def __iter__(self):
            return iter(["secret"])

    value = {"a": "secret"}
    assert framework.plain_remove_values(value, Falsy()) == remove_values(value, Falsy())


# F4: an object whose metaclass compares equal to and hashes like str passes `type(x) in PLAIN_SCALARS` (a set):
# plain_tree says True, plain_copy keeps it; ansible-core's remove_values raises TypeError for it.
class _StrMeta(type):
    def __eq__(cls, other):
        return other is str or type.__eq__(cls, other)

    def __hash__(cls):
        return hash(str)


class _Impostor(metaclass=_StrMeta):  # pylint: disable=too-few-public-methods
    pass


def test_f4_impostor_type_is_plain():
    assert plain.plain_tree([_Impostor()]) is False


def test_f4_impostor_remove_values():
    value = [_Impostor()]
    assert outcome(framework.plain_remove_values, value, [])[0] == outcome(remove_values, value, [])[0]


# F5: install_plain_exit on a `basic` without remove_values and a `parameters` without it: None is None, so it
# installs plain_remove_values where there was no ansible-core function to replace.
def test_f5_install_without_core_function():
    class Empty:  # pylint: disable=too-few-public-methods
        pass

    basic = Empty()
    assert framework.install_plain_exit(basic, Empty()) is False and not hasattr(basic, "remove_values")


# F6: strip_internal_keys on [loop, {"_ansible_x": 1}] with loop = [loop]: ansible-core recurses into the loop
# first and raises RecursionError with _ansible_x still there; the shim's stack walk strips the second dict first,
# then meets the loop, falls back, raises RecursionError too -- with _ansible_x deleted (in-place result differs).
def test_f6_strip_cycle_order(shim):  # pylint: disable=redefined-outer-name
    def make():
        loop = []
        loop.append(loop)
        return [loop, {"_ansible_x": 1}]

    core, ours = make(), make()
    with pytest.raises(RecursionError):
        core_strip(core)
    with pytest.raises(RecursionError):
        shim.plain_strip_internal_keys(ours)
    assert ours[1] == core[1] == {"_ansible_x": 1}


# F7: exceptions given as a one-shot iterator: `k not in exceptions` consumes it, and the shim asks in a different
# node order (LIFO stack) than ansible-core's depth-first recursion, so different keys survive.
def test_f7_strip_iterator_exceptions(shim):  # pylint: disable=redefined-outer-name
    core = [{"_ansible_a": 1}, {"_ansible_b": 2}]
    ours = [{"_ansible_a": 1}, {"_ansible_b": 2}]
    core_strip(core, iter(["_ansible_b", "_ansible_a"]))
    shim.plain_strip_internal_keys(ours, iter(["_ansible_b", "_ansible_a"]))
    assert ours == core  # core [{'_ansible_a': 1}, {}]; ours [{'_ansible_a': 1}, {'_ansible_b': 2}]


# F8: a plain list nested ~300-990 deep: ansible-core's visitor (~3 frames a level) raises RecursionError, the
# shim's plain_copy (1 frame a level) returns a copy; also through CallbackTaskResult.result.
def _nest(depth):
    top = node = []
    for _ in range(depth):
        child = []
        node.append(child)
        node = child
    return top


def test_f8_transform_depth(shim):  # pylint: disable=redefined-outer-name
    value = _nest(400)
    assert outcome(shim.plain_transform_to_native_types, value)[0] == outcome(CORE_TRANSFORM, value)[0]


def test_f8_callback_result_depth(shim):  # pylint: disable=redefined-outer-name
    from ansible.executor.task_result import CallbackTaskResult  # pylint: disable=import-outside-toplevel
    from ansible.inventory.host import Host  # pylint: disable=import-outside-toplevel
    from ansible.playbook.task import Task  # pylint: disable=import-outside-toplevel

    def result_of():
        return CallbackTaskResult(Host("h"), Task(), {"d": _nest(400)}, {}).result

    with_shim = outcome(result_of)
    saved = ansible.utils.vars.transform_to_native_types
    ansible.utils.vars.transform_to_native_types = CORE_TRANSFORM
    try:
        without = outcome(result_of)
    finally:
        ansible.utils.vars.transform_to_native_types = saved
    assert with_shim[0] == without[0]


# F9: the shim replaces ansible.utils.vars.transform_to_native_types when its __module__ is "ansible.utils.vars";
# a foreign functools.wraps wrapper of ansible-core's function has that __module__, so it is replaced too and
# plain values bypass it (the wrapper is never called).
def test_f9_foreign_wraps_wrapper_replaced():
    import functools  # pylint: disable=import-outside-toplevel

    core = ansible.utils.vars.transform_to_native_types
    calls = []

    @functools.wraps(core)
    def wrapper(value, redact=True):
        calls.append(value)
        return core(value, redact)

    ansible.utils.vars.transform_to_native_types = wrapper
    try:
        with loaded_shim("gpufleet_mitogen_linear_redteam_round10_wraps"):
            replaced = ansible.utils.vars.transform_to_native_types is not wrapper
    finally:
        ansible.utils.vars.transform_to_native_types = core
    assert not replaced
