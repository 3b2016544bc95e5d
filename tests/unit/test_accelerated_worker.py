"""The accelerated mode's worker side (scripts/accelerated/gpufleet_mitogen_linear.py): what each forked
worker would otherwise load again for every task and host is loaded once in the controller before the
workers fork, and module results reach the task executor with the values ansible-core's wrap_var gives. The
effect on a sweep is measured by bench/fleet_validate.py (docs/performance.md, "Sweep cost, round 6: the
worker side"), not here."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

try:
    import ansible_mitogen  # noqa: F401  pylint: disable=unused-import
except ImportError:  # pragma: no cover - make setup installs mitogen
    ansible_mitogen = None

pytestmark = pytest.mark.skipif(ansible_mitogen is None,
                                reason="mitogen is not installed (make setup installs the pinned version)")

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "accelerated",
                    "gpufleet_mitogen_linear.py")


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
