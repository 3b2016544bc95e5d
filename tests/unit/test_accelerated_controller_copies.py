"""The accelerated mode's controller side (scripts/accelerated/gpufleet_mitogen_linear.py, the eighth and ninth
fixes): the copies ansible-core's main process makes of every result it receives -- ``strip_internal_keys``
for each callback and for ``register:``, ``transform_to_native_types`` for a callback that reads
``result.result`` -- give what ansible-core's own give, for any value: a plain tree is done by the shim, every
other value by ansible-core. The effect on a sweep is measured by bench/fleet_validate.py (docs/performance.md,
"Sweep cost, round 7"), not here."""

import collections
import copy
import math

import pytest
from accelerated_shim import containers_of, loaded_shim, shape
from hypothesis import given, settings, strategies as st

try:
    import ansible_mitogen  # noqa: F401  pylint: disable=unused-import
except ImportError:  # pragma: no cover - make setup installs mitogen
    ansible_mitogen = None

pytestmark = pytest.mark.skipif(ansible_mitogen is None,
                                reason="mitogen is not installed (make setup installs the pinned version)")


@pytest.fixture(scope="module")
def shim():
    with loaded_shim("gpufleet_mitogen_linear_copies_test") as module:
        yield module


def core_strip(shim, value, exceptions=None):
    return shim.plain_strip_internal_keys.__defaults__[-1](value, exceptions=exceptions)  # ansible-core's


def core_transform(shim, value, redact=True):
    return shim.plain_transform_to_native_types.__defaults__[-1](value, redact=redact)  # ansible-core's


def outcome(function, *args, **kwargs):
    """("ok", shape of the value and of the argument after the call) or ("raised", exception type, text)."""
    try:
        value = function(*args, **kwargs)
    except Exception as error:  # pylint: disable=broad-except  # compared, not handled
        return ("raised", type(error), str(error)[:200])
    return ("ok", shape(value), shape(args[0]))


def _tagged(text):
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel

    return TrustedAsTemplate().tag(text)


class SubDict(dict):
    pass


class SubList(list):
    pass


class SubStr(str):
    pass


KEYS = st.one_of(st.sampled_from(["_ansible_no_log", "_ansible_verbose_always", "_ansible_item_label",
                                  "_ansible_delegated_vars", "_ansible_", "_ansible", "ansible_facts", "changed",
                                  "checks", "_ansible_x"]),
                 st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(), st.floats(allow_nan=False))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
PLAIN = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(KEYS, inner, max_size=5)), max_leaves=40)
CONTAINERS = st.one_of(st.lists(PLAIN, max_size=4), st.dictionaries(KEYS, PLAIN, max_size=6))
ODD = st.one_of(st.text(max_size=6).map(_tagged), st.just(_tagged("_ansible_no_log")), st.binary(max_size=4),
                st.tuples(st.integers()), st.frozensets(st.integers(), max_size=2).map(set),
                st.dictionaries(KEYS, SCALARS, max_size=3).map(SubDict),
                st.dictionaries(KEYS, SCALARS, max_size=3).map(collections.OrderedDict),
                st.lists(SCALARS, max_size=3).map(SubList), st.text(max_size=4).map(SubStr),
                st.just({"_ansible_x": 1, _tagged("_ansible_y"): 2, SubStr("_ansible_z"): 3}))
EXCEPTIONS = st.sampled_from([None, (), ("_ansible_no_log", "_ansible_verbose_always", "_ansible_item_label"),
                              ["_ansible_x"]])


def with_odd(data, value, odd):
    """``value`` with ``odd`` put at a place drawn in it (as a value, or as a key of a dict)."""
    containers = []
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) in (dict, list):
            containers.append(node)
            stack.extend(node.values() if type(node) is dict else node)
    node = data.draw(st.sampled_from(containers))
    if type(node) is list:
        node.append(odd)
    elif data.draw(st.booleans()) and isinstance(odd, (str, int, tuple)):
        node[odd] = "v"
    else:
        node["odd"] = odd
    return value


def test_the_import_puts_them_in_place_of_ansible_cores(shim):
    import ansible.executor.task_result  # pylint: disable=import-outside-toplevel
    import ansible.plugins.strategy  # pylint: disable=import-outside-toplevel
    import ansible.utils.vars  # pylint: disable=import-outside-toplevel
    import ansible.vars.clean  # pylint: disable=import-outside-toplevel

    assert ansible.executor.task_result.strip_internal_keys is shim.plain_strip_internal_keys
    assert ansible.plugins.strategy.strip_internal_keys is shim.plain_strip_internal_keys
    assert ansible.utils.vars.transform_to_native_types is shim.plain_transform_to_native_types
    # what they fall back to is ansible-core's own, and ansible.vars.clean itself is left as it was
    assert shim.plain_strip_internal_keys.__defaults__[-1] is ansible.vars.clean.strip_internal_keys
    assert shim.plain_transform_to_native_types.__defaults__[-1].__module__ == "ansible.utils.vars"
    assert shim.before[("ansible.executor.task_result", "strip_internal_keys")] is ansible.vars.clean.strip_internal_keys


def test_a_second_import_does_not_wrap_the_first(shim):
    """Loaded twice in one process (a test, or a strategy loaded again), the second falls back to
    ansible-core's function, not to the first shim's."""
    with loaded_shim("gpufleet_mitogen_linear_copies_again") as again:
        assert again.plain_strip_internal_keys.__defaults__[-1] is shim.plain_strip_internal_keys.__defaults__[-1]
        assert again.plain_transform_to_native_types.__defaults__[-1].__module__ == "ansible.utils.vars"


# -- strip_internal_keys ------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(CONTAINERS, EXCEPTIONS)
def test_a_plain_result_is_stripped_as_ansible_core_strips_it(shim, value, exceptions):
    """In place, the same object returned, the same keys left at every level (keys that are not strings,
    ``_ansible_*`` named in ``exceptions`` and ``_ansible`` without the underscore kept)."""
    ours, theirs = copy.deepcopy(value), copy.deepcopy(value)
    returned = shim.plain_strip_internal_keys(ours, exceptions=exceptions)
    assert returned is ours
    assert shape(ours) == shape(core_strip(shim, theirs, exceptions))


@settings(max_examples=150, deadline=None)
@given(CONTAINERS, ODD, EXCEPTIONS, st.data())
def test_a_result_with_anything_else_in_it_is_stripped_as_ansible_core_strips_it(shim, value, odd, exceptions, data):
    """A tagged string (a key too), bytes, a tuple, a set, a dict or list subclass, an OrderedDict anywhere:
    ansible-core's walk, whatever the shim deleted before it met that node."""
    value = with_odd(data, value, odd)
    ours, theirs = copy.deepcopy(value), copy.deepcopy(value)
    assert outcome(shim.plain_strip_internal_keys, ours, exceptions=exceptions) == \
        outcome(core_strip, shim, theirs, exceptions)[:1] + outcome(lambda v: v, theirs)[1:]


def test_a_container_in_two_places_and_a_cycle_are_ansible_cores(shim):
    shared = {"_ansible_no_log": True, "k": [1, {"_ansible_x": 2}]}
    ours, theirs = {"a": shared, "b": [shared]}, copy.deepcopy({"a": shared, "b": [shared]})
    shim.plain_strip_internal_keys(ours)
    assert shape(ours) == shape(core_strip(shim, theirs))
    looped = {"_ansible_x": 1}
    looped["self"] = looped
    with pytest.raises(RecursionError):  # as ansible-core's walk
        shim.plain_strip_internal_keys(looped)


@pytest.mark.parametrize("value", ["text", 1, None, 1.5, b"x", ("a",)])
def test_what_is_not_a_mapping_or_sequence_fails_as_ansible_cores(shim, value):
    ours = outcome(shim.plain_strip_internal_keys, value)
    assert ours == outcome(core_strip, shim, value) and ours[0] == "raised"


@pytest.mark.parametrize("depth", [63, 64, 65, 200, 5000])
def test_a_deep_result_is_ansible_cores(shim, depth):
    """Deeper than plain.MAX_DEPTH containers, ansible-core's own walks decide (its recursion gives up where it
    does: RecursionError at 5,000 levels, as without the shim)."""
    def nested():
        deep = {"_ansible_x": 1}
        for _ in range(depth - 1):
            deep = {"_ansible_no_log": False, "next": [deep]} if len(str(_)) % 2 else {"next": deep}
        return deep

    ours, theirs = nested(), nested()
    assert outcome(shim.plain_strip_internal_keys, ours)[0] == outcome(core_strip, shim, theirs)[0]
    if depth < 1000:
        assert shape(ours) == shape(theirs)
    assert outcome(shim.plain_transform_to_native_types, nested())[:2] == \
        outcome(core_transform, shim, nested())[:2]


def test_a_real_task_results_callback_copy_is_ansible_cores(shim):
    """ansible-core's own as_callback_task_result (a copy, then strip_internal_keys with its exceptions, the
    delegated vars' subset kept) and CallbackTaskResult.result through the shim, against ansible-core's."""
    from ansible.executor import task_result  # pylint: disable=import-outside-toplevel
    import ansible.utils.vars  # pylint: disable=import-outside-toplevel
    from ansible.inventory.host import Host  # pylint: disable=import-outside-toplevel
    from ansible.playbook.task import Task  # pylint: disable=import-outside-toplevel

    data = {"checks": [{"id": "gpu.nvml", "status": "pass", "observed": {"count": 8, "_ansible_x": 1}}],
            "changed": False, "failed": False, "_ansible_no_log": False, "_ansible_verbose_always": True,
            "_ansible_delegated_vars": {"ansible_host": "10.0.0.1", "ansible_port": 22, "other": 1},
            "ansible_facts": {"nvidia": {"gpus": [{"index": 0, "temperature": float("nan")}]}},
            "invocation": {"module_args": {"root": "/"}}}
    task = Task()
    task.action, task.name = "gpufleet.cluster.node_validate", "validate"

    def callback_view():
        raw = task_result._RawTaskResult(Host("node0001"), task, copy.deepcopy(data), {})  # pylint: disable=protected-access
        view = raw.as_callback_task_result()
        return shape(view._return_data), shape(view.result)  # pylint: disable=protected-access

    ours = callback_view()
    task_result.strip_internal_keys = shim.plain_strip_internal_keys.__defaults__[-1]
    ansible.utils.vars.transform_to_native_types = shim.plain_transform_to_native_types.__defaults__[-1]
    try:
        theirs = callback_view()
    finally:
        task_result.strip_internal_keys = shim.plain_strip_internal_keys
        ansible.utils.vars.transform_to_native_types = shim.plain_transform_to_native_types
    assert ours == theirs
    assert "_ansible_verbose_always" in str(ours[0]) and "'other'" not in str(ours[0])


# -- transform_to_native_types ------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(PLAIN, st.booleans())
def test_a_plain_value_is_transformed_as_ansible_core_transforms_it(shim, value, redact):
    """The same nodes, types and values (NaN and infinities included), in new containers only."""
    ours = shim.plain_transform_to_native_types(value, redact=redact)
    assert shape(ours) == shape(core_transform(shim, value, redact))
    assert not set(containers_of(ours)) & set(containers_of(value))


@settings(max_examples=150, deadline=None)
@given(CONTAINERS, ODD, st.booleans(), st.data())
def test_a_value_with_anything_else_in_it_is_ansible_cores(shim, value, odd, redact, data):
    value = with_odd(data, value, odd)
    assert outcome(shim.plain_transform_to_native_types, value, redact=redact)[:2] == \
        outcome(core_transform, shim, value, redact)[:2]


def test_an_encrypted_string_is_redacted_as_ansible_core_redacts_it(shim):
    from ansible.parsing.vault import EncryptedString  # pylint: disable=import-outside-toplevel

    secret = EncryptedString(ciphertext="$ANSIBLE_VAULT;1.1;AES256\n3031")
    value = {"checks": [{"message": secret}], "n": 1}
    assert shape(shim.plain_transform_to_native_types(value)) == shape(core_transform(shim, value))
    assert shim.plain_transform_to_native_types(value)["checks"][0]["message"] == "<redacted>"


def test_a_shared_container_and_a_cycle_are_ansible_cores(shim):
    shared = [1, 2]
    value = {"a": shared, "b": shared}
    ours = shim.plain_transform_to_native_types(value)
    assert shape(ours) == shape(core_transform(shim, value))
    looped = []
    looped.append(looped)
    assert outcome(shim.plain_transform_to_native_types, looped)[:2] == outcome(core_transform, shim, looped)[:2]


def test_nan_and_infinities_keep_their_values(shim):
    value = {"t": [float("nan"), float("inf"), -float("inf"), 0.0, -0.0]}
    ours = shim.plain_transform_to_native_types(value)["t"]
    assert math.isnan(ours[0]) and ours[1:3] == [math.inf, -math.inf] and math.copysign(1, ours[4]) == -1
