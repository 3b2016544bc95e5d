"""The accelerated mode's strategy shim (scripts/accelerated/gpufleet_mitogen_linear.py): Mitogen's CPU
pinning is switched off on a controller with fewer than 4 CPUs and kept from 4 up; its wrap_var of module
results gives what ansible-core's wrap_var gives for any value. The effect on a sweep is measured by
bench/fleet_validate.py (docs/performance.md), not here."""

import sys
import types

import ansible.utils.unsafe_proxy
import pytest
from accelerated_shim import loaded_shim, shape
from hypothesis import given, settings, strategies as st

try:
    from ansible_mitogen import affinity
except ImportError:  # pragma: no cover - make setup installs mitogen
    affinity = None

pytestmark = pytest.mark.skipif(affinity is None, reason="mitogen is not installed (make setup installs the pinned version)")



@pytest.fixture(scope="module")
def shim():

    with loaded_shim("gpufleet_mitogen_linear_under_test") as module:
        # the import switches the policy off on a small machine; loaded_shim leaves no trace of it
        module.policy_before, module.policy_after = module.before[("ansible_mitogen.affinity", "policy")], affinity.policy
        module.run_module_before = module.before[("ansible_mitogen.target", "run_module")]
        module.responder_before = module.before[("ansible_mitogen.process", "_setup_responder")]
        yield module


def fake_affinity(cpu_count):
    """A stand-in for ansible_mitogen.affinity holding a real Mitogen policy built for cpu_count CPUs."""
    return types.SimpleNamespace(policy=affinity.FixedPolicy(cpu_count=cpu_count), Policy=affinity.Policy)


@pytest.mark.parametrize("cpus, unpinned", [(1, True), (2, True), (3, True), (4, False), (16, False)])
def test_pinning_off_below_four_cpus(shim, cpus, unpinned):
    fake = fake_affinity(cpus)
    pinned = fake.policy
    assert shim.unpin_small_controller(fake) is unpinned
    if unpinned:
        assert type(fake.policy) is affinity.Policy  # Mitogen's no-op: no process is pinned
    else:
        assert fake.policy is pinned


def test_a_policy_without_a_cpu_count_is_left_alone(shim):
    fake = types.SimpleNamespace(policy=affinity.Policy(), Policy=affinity.Policy)
    kept = fake.policy
    assert shim.unpin_small_controller(fake) is False and fake.policy is kept


def test_the_import_applies_it_to_mitogen_on_this_machine(shim):
    """The shim acts on import, before Mitogen assigns the controller, workers and multiplexers."""
    small = getattr(shim.policy_before, "cpu_count", 4) < 4
    if small:
        assert type(shim.policy_after) is affinity.Policy
    else:
        assert shim.policy_after is shim.policy_before


# -- wrap_var of module results ------------------------------------------------------------------------------

def _tagged(text):
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel

    return TrustedAsTemplate().tag(text)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8),
                    st.text(max_size=8).map(_tagged), st.binary(max_size=4),
                    st.text(max_size=8).map(ansible.utils.unsafe_proxy.AnsibleUnsafeText))
KEYS = st.one_of(st.text(max_size=6), st.text(max_size=6).map(_tagged), st.integers())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(KEYS, inner, max_size=4), st.frozensets(st.text(max_size=4), max_size=3).map(set)), max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_wrap_var_gives_what_ansible_core_gives(shim, value):
    core = shim.plain_wrap_var.__defaults__[0]  # ansible-core's, as the shim found it
    ansible.utils.unsafe_proxy.wrap_var = core  # its recursion looks the name up in its module
    try:
        expected = shape(core(value))
    finally:
        ansible.utils.unsafe_proxy.wrap_var = shim.plain_wrap_var
    assert shape(shim.plain_wrap_var(value)) == expected


def test_the_import_puts_it_in_place_of_ansible_cores(shim):
    assert ansible.utils.unsafe_proxy.wrap_var is shim.plain_wrap_var
    result = {"checks": [{"id": "gpu.nvml", "status": "pass", "observed": 8}], "healthy": True, "nvml": None}
    assert shim.plain_wrap_var(result) == result and shim.plain_wrap_var(result) is not result


# -- the module_utils' compiled code kept on the node (gpufleet_mitogen_target.py) ------------------------------

def test_every_module_run_calls_the_target_side_run_module(shim):
    """Mitogen names a called function by its module: the hosts import gpufleet_mitogen_target, whose
    run_module installs the cache and runs Mitogen's own (captured before the shim replaced it)."""
    import ansible_mitogen.target  # pylint: disable=import-outside-toplevel

    target = sys.modules[shim.TARGET_MODULE]
    assert ansible_mitogen.target.run_module is target.run_module
    assert target.run_module.__module__ == "gpufleet_mitogen_target"
    assert target.ORIGINAL_RUN_MODULE is shim.run_module_before
    assert getattr(target.run_module, "mitogen_takes_econtext", False)


def test_the_responder_serves_the_target_side_module(shim):
    """Without its name in the responder's allow-list Mitogen refuses to serve it to the hosts."""
    allowed = []
    responder = types.SimpleNamespace(whitelist_prefix=allowed.append)
    import ansible_mitogen._modifiers  # pylint: disable=import-outside-toplevel

    saved = ansible_mitogen._modifiers.register_moduleresponder_modifiers
    ansible_mitogen._modifiers.register_moduleresponder_modifiers = lambda _responder: None
    try:
        shim.setup_responder(responder)
    finally:
        ansible_mitogen._modifiers.register_moduleresponder_modifiers = saved
    assert "gpufleet_mitogen_target" in allowed and "ansible_collections" in allowed

