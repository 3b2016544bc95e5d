"""The module's exit (plugins/module_utils/core/framework.py, ``plain_remove_values``): ansible-core's
``remove_values`` copies a module's whole result even when the module has no no_log value; with none, a plain
tree (plugins/module_utils/core/plain.py) is copied by gpufleet's walk, every other case is ansible-core's.
The answers must be ansible-core's for any value, and a module's output the same bytes. The cost is measured in
docs/performance.md ("Sweep cost, round 7"), not here."""

import collections
import datetime
import json
import os
import subprocess
import sys
import textwrap

import pytest
from accelerated_shim import containers_of, shape
from conftest import REPO
from hypothesis import given, settings, strategies as st

from ansible.module_utils.common.parameters import remove_values
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import framework, plain

KEYS = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(), st.floats(allow_nan=False))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
PLAIN = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(KEYS, inner, max_size=5)), max_leaves=40)


class SubStr(str):
    pass


class SubDict(dict):
    pass


ODD = st.one_of(st.binary(max_size=4), st.tuples(st.integers()), st.frozensets(st.integers(), max_size=2).map(set),
                st.text(max_size=4).map(SubStr), st.dictionaries(st.text(max_size=3), SCALARS, max_size=2).map(SubDict),
                st.dictionaries(st.text(max_size=3), SCALARS, max_size=2).map(collections.OrderedDict),
                st.just(datetime.date(2026, 11, 30)), st.just(object()), st.just(1 + 2j))


def outcome(function, *args):
    try:
        value = function(*args)
    except Exception as error:  # pylint: disable=broad-except  # compared, not handled
        return ("raised", type(error), str(error)[:200])
    return ("ok", repr(shape(value)))


@settings(max_examples=150, deadline=None)
@given(PLAIN, st.sampled_from([set(), [], (), frozenset()]))
def test_with_no_no_log_value_a_plain_result_is_ansible_cores_copy(value, empty):
    """Equal node by node (types, NaN and infinities kept), in new containers only."""
    ours = framework.plain_remove_values(value, empty)
    assert outcome(lambda: ours) == outcome(remove_values, value, empty)
    assert not set(containers_of(ours)) & set(containers_of(value))


@settings(max_examples=150, deadline=None)
@given(PLAIN, st.data())
def test_with_a_no_log_value_it_is_ansible_cores(value, data):
    texts, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            stack.extend(node.values() if isinstance(node, dict) else node)
        elif isinstance(node, str) and node:
            texts.append(node)
    secret = data.draw(st.sampled_from(texts)) if texts else data.draw(st.text(min_size=1, max_size=3))
    assert outcome(framework.plain_remove_values, value, {secret}) == outcome(remove_values, value, {secret})


@settings(max_examples=150, deadline=None)
@given(PLAIN, ODD, st.booleans())
def test_anything_else_in_a_result_is_ansible_cores(value, odd, nested):
    value = {"checks": [value, {"odd": odd}]} if nested else [odd, value]
    assert outcome(framework.plain_remove_values, value, set()) == outcome(remove_values, value, set())


def test_a_container_twice_and_a_deep_tree_are_ansible_cores():
    shared = {"a": [1]}
    twice = {"x": shared, "y": [shared]}
    assert outcome(framework.plain_remove_values, twice, set()) == outcome(remove_values, twice, set())
    deep = leaf = []
    for _ in range(3 * sys.getrecursionlimit()):
        deep = [deep]
    copied = framework.plain_remove_values(deep, set())  # deeper than plain.MAX_DEPTH: ansible-core's,
    assert copied is not deep  # which walks with a queue
    depth, node = 0, copied
    while node:
        node, depth = node[0], depth + 1
    assert depth == 3 * sys.getrecursionlimit() and node == leaf and node is not leaf


def test_plain_trees_are_what_a_json_decoder_makes():
    decoded = json.loads('{"a": [1, 2.5, "x", true, null, {"b": {}}], "1": []}')
    assert plain.plain_tree(decoded) and plain.plain_copy(decoded) == decoded
    for odd in (SubStr("x"), (1,), {1}, b"x", SubDict(), {(1,): 2}, {SubStr("k"): 1}):
        assert not plain.plain_tree({"k": [odd]})
        with pytest.raises(plain.NotPlain):
            plain.plain_copy({"k": [odd]})
    shared = [1]
    assert not plain.plain_tree([shared, shared])
    with pytest.raises(plain.NotPlain):
        plain.plain_copy([shared, shared])


class FakeBasic:
    pass


def test_it_is_installed_only_in_place_of_ansible_cores():
    from ansible.module_utils.common import parameters  # pylint: disable=import-outside-toplevel,consider-using-from-import

    basic = FakeBasic()
    basic.remove_values = parameters.remove_values
    assert framework.install_plain_exit(basic, parameters) is True
    assert basic.remove_values is framework.plain_remove_values
    assert framework.install_plain_exit(basic, parameters) is True  # again: still ours
    other = FakeBasic()
    other.remove_values = lambda value, strings: value  # someone else's: left as it is
    foreign = other.remove_values
    assert framework.install_plain_exit(other, parameters) is False and other.remove_values is foreign


MODULE = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, %(path)r)
    import ansible.module_utils.basic as basic
    from ansible.module_utils.common.parameters import remove_values
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import framework
    if os.environ["EXIT_MODE"] == "core":
        basic.remove_values = lambda value, strings: remove_values(value, strings)  # not ansible-core's: kept
    def work(module):
        print("exit through", basic.remove_values.__name__, file=sys.stderr)
        return {"checks": [{"id": "gpu.count", "status": "pass", "observed": {"count": 8, "t": [1.5, None, True]},
                            "message": "8 GPUs, token %%s" %% module.params["token"]}] * 3,
                "healthy": True, "gpus": [{"index": i, "uuid": "GPU-%%d" %% i} for i in range(8)],
                "nan": float("nan"), "msg": "ok"}
    framework.run_module({"token": {"type": "str", "no_log": os.environ["EXIT_SECRET"] == "secret"}}, work)
""")


@pytest.mark.parametrize("secret", ["plain", "secret"])
def test_a_modules_output_is_the_same_bytes(tmp_path, secret):
    """A real AnsibleModule exit through framework.run_module: the same stdout with the plain copy and with
    ansible-core's remove_values, with and without a no_log option (whose value is masked either way)."""
    script = tmp_path / "module.py"
    script.write_text(MODULE % {"path": os.path.join(REPO, ".collections")})
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"token": "s3cr3t-value"}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    outputs = {}
    for mode in ("plain", "core"):
        proc = subprocess.run([sys.executable, str(script)], input=args, capture_output=True, text=True,
                              env=dict(env, EXIT_MODE=mode, EXIT_SECRET=secret), timeout=60, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs[mode] = proc.stdout
        assert ("exit through plain_remove_values" in proc.stderr) is (mode == "plain"), proc.stderr
    assert outputs["plain"] == outputs["core"]
    result = json.loads(outputs["plain"])
    assert result["healthy"] is True and len(result["checks"]) == 3
    assert ("s3cr3t-value" in outputs["plain"]) is (secret == "plain")
