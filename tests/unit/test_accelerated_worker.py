"""The accelerated mode's worker side (scripts/accelerated/gpufleet_mitogen_linear.py): what each forked
worker would otherwise load again for every task and host is loaded once in the controller before the
workers fork, and module results reach the task executor with the values ansible-core's wrap_var gives. The
effect on a sweep is measured by bench/fleet_validate.py (docs/performance.md, "Sweep cost, round 6: the
worker side"), not here."""

import json
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st
from accelerated_shim import SHIM, loaded_shim, shape  # shape: one comparison of type and trust, node by node

try:
    import ansible_mitogen  # noqa: F401  pylint: disable=unused-import
except ImportError:  # pragma: no cover - make setup installs mitogen
    ansible_mitogen = None

pytestmark = pytest.mark.skipif(ansible_mitogen is None,
                                reason="mitogen is not installed (make setup installs the pinned version)")


def run_fresh(body):
    """Run ``body`` in a new controller-side interpreter with the shim loaded as ``shim`` (a fresh process:
    what is imported or cached before and after is the point)."""
    script = textwrap.dedent("""
        import importlib.util, json, sys
        import ansible.constants  # a controller process, as ansible-playbook is
        spec = importlib.util.spec_from_file_location("gpufleet_mitogen_linear", %r)
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
        """ % SHIM) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


PROFILE_MODULE = "ansible.module_utils._internal._json._profiles._module_legacy_m2c"


def test_the_strategy_loads_the_module_result_decoder_before_the_workers_fork():
    """Without it every worker imports the decoder's profile and reads the strict UTF-8 setting for its
    first (and only) module result: the controller process itself never decodes one."""
    out = run_fresh("""
        from ansible.module_utils._internal._json import _profiles
        before = (%r in sys.modules, _profiles._string_encoding_check_enabled.cache_info().currsize)
        shim.Base.__init__ = lambda self, *args, **kwargs: None  # no task queue manager here
        shim.collection_dirs = lambda: ()
        shim.StrategyModule(None)
        after = (%r in sys.modules, _profiles._string_encoding_check_enabled.cache_info().currsize)
        print(json.dumps([before, after]))
        """ % (PROFILE_MODULE, PROFILE_MODULE))
    before, after = json.loads(out)
    assert before == [False, 0]
    assert after == [True, 1]


def test_the_warmed_decoder_is_the_one_mitogen_decodes_with():
    """The same class _parse_returned_data gets for Mitogen's profile, decoding as it does."""
    out = run_fresh("""
        from ansible.module_utils.common.json import get_module_decoder, Direction
        decoder = shim.warm_module_decoder()
        same = decoder is get_module_decoder("legacy", Direction.MODULE_TO_CONTROLLER)
        text = '{"checks": [{"id": "gpu.nvml", "status": "pass"}], "changed": false}'
        print(json.dumps([same, json.loads(text, cls=decoder) == json.loads(text)]))
        """)
    assert json.loads(out) == [True, True]


# -- the module result Mitogen wraps: not copied when it is a plain tree ------------------------------------

@pytest.fixture(scope="module")
def shim():
    with loaded_shim("gpufleet_mitogen_linear_worker_test") as module:
        yield module


def _tagged(text):
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel

    return TrustedAsTemplate().tag(text)


def core_wrap_var(shim, value):
    import ansible.utils.unsafe_proxy  # pylint: disable=import-outside-toplevel

    core = shim.plain_wrap_var.__defaults__[0]  # ansible-core's, as the shim found it
    ansible.utils.unsafe_proxy.wrap_var = core  # its recursion looks the name up in its module
    try:
        return core(value)
    finally:
        ansible.utils.unsafe_proxy.wrap_var = shim.plain_wrap_var


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=4)),
                    max_leaves=30)
ODD = st.one_of(st.text(max_size=6).map(_tagged), st.binary(max_size=4), st.tuples(st.integers()),
                st.frozensets(st.integers(), max_size=2).map(set))


def decoded(shim, value):
    """``value`` as Mitogen's _postprocess_response hands it on: just decoded, noted for plain_wrap_var."""
    shim._DECODED[:] = [value]  # pylint: disable=protected-access
    return value


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_a_decoded_plain_result_is_handed_on_as_wrap_var_would_make_it(shim, value):
    value = json.loads(json.dumps(value))  # a module result: what the JSON decoder makes
    expected = shape(core_wrap_var(shim, value))
    assert shape(shim.plain_wrap_var(decoded(shim, value))) == expected
    assert shim._DECODED == []  # pylint: disable=protected-access


@settings(max_examples=200, deadline=None)
@given(JSON, ODD, st.data())
def test_a_decoded_result_with_anything_else_in_it_is_copied_as_before(shim, value, odd, data):
    """A tagged string, bytes, a tuple or a set anywhere (a module may send ansible-core tagged values): the
    node-by-node copy, the same values as ansible-core's wrap_var."""
    result = {"checks": [value], "odd": odd} if data.draw(st.booleans()) else [{"k": [odd]}, value]
    expected = shape(core_wrap_var(shim, result))
    wrapped = shim.plain_wrap_var(decoded(shim, result))
    assert wrapped is not result and shape(wrapped) == expected


def test_only_the_decoded_result_is_handed_on_uncopied(shim):
    result = {"checks": [{"id": "gpu.nvml", "status": "pass", "observed": 8}], "healthy": True, "nvml": None}
    assert shim.plain_wrap_var(decoded(shim, result)) is result  # fails before: wrap_var always copied
    again = shim.plain_wrap_var(result)  # another call of wrap_var with it: a copy, as ansible-core's
    assert again == result and again is not result and again["checks"] is not result["checks"]
    other = {"a": [1]}
    decoded(shim, result)
    copy = shim.plain_wrap_var(other)  # a value that is not the decoded result
    assert copy == other and copy is not other


def test_a_container_in_the_result_twice_is_copied_apart(shim):
    """wrap_var copies each occurrence: the two places must not stay one list."""
    shared = ["x"]
    result = {"a": shared, "b": shared}
    wrapped = shim.plain_wrap_var(decoded(shim, result))
    assert wrapped == result and wrapped["a"] is not wrapped["b"]


def test_mitogen_decodes_through_the_shim(shim):
    """Mitogen's _execute_module calls _postprocess_response (the module's JSON decoded by ansible-core's
    decoder), then wrap_var on what it returned: that result is noted, and handed on as it is."""
    import ansible_mitogen.mixins  # pylint: disable=import-outside-toplevel
    from ansible.plugins.action import ActionBase  # pylint: disable=import-outside-toplevel

    assert ansible_mitogen.mixins.ActionModuleMixin._postprocess_response is shim.postprocess_response
    probe_class = type("Probe", (ansible_mitogen.mixins.ActionModuleMixin, ActionBase),
                       {"run": lambda self, tmp=None, task_vars=None: {}})
    probe = object.__new__(probe_class)  # _parse_returned_data reads nothing of an action on good JSON
    text = '{"changed": false, "checks": [{"id": "rdma.port", "status": "warn", "observed": ["DOWN"]}]}'
    data = probe._postprocess_response({"stdout": text, "stderr": "", "rc": 0})  # pylint: disable=protected-access
    assert data["checks"] == [{"id": "rdma.port", "status": "warn", "observed": ["DOWN"]}]
    assert shim._DECODED == [data]  # pylint: disable=protected-access
    assert shim.plain_wrap_var(data) is data and shape(data) == shape(core_wrap_var(shim, data))


# -- the connection plugin an inventory names, loaded before the workers fork --------------------------------

class RecordingLoader:
    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def get(self, **kwargs):
        self.calls.append(kwargs)
        if self.fail:
            raise RuntimeError("a broken plugin")
        return object


def test_the_inventory_connection_is_loaded_once_per_name(shim, monkeypatch):
    monkeypatch.setattr(shim, "_PRELOADED_CONNECTIONS", set())
    loader = RecordingLoader()
    assert shim.preload_connection(_tagged("local"), loader) is True  # an inventory value carries tags
    assert shim.preload_connection("local", loader) is False
    assert shim.preload_connection("ssh", loader) is True
    assert loader.calls == [{"name": "local", "class_only": True}, {"name": "ssh", "class_only": True}]
    assert all(type(call["name"]) is str for call in loader.calls)  # pylint: disable=unidiomatic-typecheck


@pytest.mark.parametrize("value", [None, "", "{{ my_connection }}", 3, ["local"]])
def test_what_is_not_a_plain_name_is_left_to_the_worker(shim, monkeypatch, value):
    monkeypatch.setattr(shim, "_PRELOADED_CONNECTIONS", set())
    loader = RecordingLoader()
    assert shim.preload_connection(value, loader) is False and loader.calls == []


def test_a_plugin_that_fails_to_load_is_left_to_the_worker(shim, monkeypatch):
    """No error in the controller: the worker loads it again and reports the error for its host."""
    monkeypatch.setattr(shim, "_PRELOADED_CONNECTIONS", set())
    loader = RecordingLoader(fail=True)
    assert shim.preload_connection("broken", loader) is True and len(loader.calls) == 1


def test_the_strategy_loads_each_hosts_connection_before_queueing_its_task(shim, monkeypatch):
    import ansible_mitogen.strategy  # pylint: disable=import-outside-toplevel

    seen = []
    monkeypatch.setattr(shim, "preload_connection", seen.append)
    monkeypatch.setattr(ansible_mitogen.strategy.StrategyMixin, "_queue_task",
                        lambda self, host, task, task_vars, play_context: seen.append(("queued", host)))
    strategy = object.__new__(shim.StrategyModule)
    strategy._queue_task("node0001", "task", {"ansible_connection": "local"}, "play context")  # pylint: disable=protected-access
    strategy._queue_task("node0002", "task", {}, "play context")  # pylint: disable=protected-access
    strategy._queue_task("node0003", "task", None, "play context")  # pylint: disable=protected-access
    assert seen == ["local", ("queued", "node0001"), None, ("queued", "node0002"), None, ("queued", "node0003")]
