"""The accelerated mode's strategy shim (scripts/accelerated/gpufleet_mitogen_linear.py): Mitogen's CPU
pinning is switched off on a controller with fewer than 4 CPUs and kept from 4 up. The effect on a
sweep is measured by bench/fleet_validate.py (docs/performance.md), not here."""

import importlib.util
import os
import types

import pytest

try:
    from ansible_mitogen import affinity
except ImportError:  # pragma: no cover - make setup installs mitogen
    affinity = None

pytestmark = pytest.mark.skipif(affinity is None, reason="mitogen is not installed (make setup installs the pinned version)")

SHIM = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "accelerated", "gpufleet_mitogen_linear.py")


@pytest.fixture(scope="module")
def shim():
    saved = affinity.policy
    spec = importlib.util.spec_from_file_location("gpufleet_mitogen_linear_under_test", SHIM)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        module.policy_before, module.policy_after = saved, affinity.policy
        yield module
    finally:
        affinity.policy = saved  # the import switches it off on a small machine: leave no trace


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
