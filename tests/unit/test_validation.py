"""The validation framework (module_utils/core/validation.py, checks.py): common options declared once,
one family interface, one context, one JSON-safe exit path."""

import json
import math

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import gpu_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import rdma_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    CheckResults,
    exit_with_checks,
    json_safe,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, GPU, RDMA
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    COMMON_OPTIONS,
    Context,
    FamilyResult,
    is_finite_number,
    module_argspec,
    node_argspec,
    record_checks_argspec,
)
from nvml_scenarios import node
from runners import ScriptedRunner


class ModuleExit(Exception):
    pass


class FakeModule:
    """Stands in for AnsibleModule; serialises like Ansible (json.dumps) with NaN forbidden."""

    def __init__(self):
        self.outcome = None

    def _end(self, kind, payload):
        self.outcome = (kind, payload)
        json.dumps(payload, allow_nan=False).encode("utf-8")  # raises on anything undeliverable
        raise ModuleExit()

    def exit_json(self, **payload):
        self._end("exit", payload)

    def fail_json(self, **payload):
        self._end("fail", payload)


# -- common options, family interface ----------------------------------------------------------
def test_common_options_are_declared_once_and_merged_everywhere():
    for spec in (module_argspec(GPU), module_argspec(RDMA), node_argspec(FAMILIES)):
        for name, option in COMMON_OPTIONS.items():
            assert spec[name] == option and spec[name] is not option
    assert record_checks_argspec()["fail_on"] == COMMON_OPTIONS["fail_on"]
    assert "root" not in record_checks_argspec()


@pytest.mark.parametrize("family, module", [(GPU, gpu_checks), (RDMA, rdma_checks)])
def test_both_families_expose_the_same_interface(family, module):
    assert family is module.FAMILY and family in FAMILIES
    assert not {"root", "fail_on"} & set(family.options)
    assert family.validate is module.validate_options and family.run is module.run
    assert family.validate(family.defaults({}), "x.") == []
    errors = family.validate(dict(family.defaults({}), **{"expected_count" if family is GPU
                                                          else "expected_devices": -1}), "x.")
    assert isinstance(errors, list) and len(errors) == 1 and errors[0].startswith("option x.")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_run_on_a_context(family):
    ctx = Context(node("empty"), runner=ScriptedRunner(), now=0)
    result = family.run(ctx, family.defaults({}))
    assert isinstance(result, FamilyResult) and isinstance(result.checks, CheckResults)
    # the tuning family checks only what is configured: nothing by default
    assert {c["id"].split(".")[0] for c in result.checks} == ({family.name} if family.name != "tuning" else set())
    assert set(result.facts) == {"gpu": {"nvidia"}, "rdma": {"mlx5"}, "tuning": set()}[family.name]


def test_context_builds_one_reader_and_nvml_only_on_first_use():
    ctx = Context(node("empty"))
    assert isinstance(ctx.reader, SysfsReader) and ctx.reader.root == node("empty")
    assert ctx._nvml is None  # no GPU family has asked for NVML yet
    assert ctx.nvml is ctx.nvml
    assert isinstance(ctx.now, float)


# -- numbers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, finite", [
    (0, True), (-3, True), (2.5, True), (10 ** 400, True),
    (float("nan"), False), (float("inf"), False), (-math.inf, False),
    (True, False), ("5", False), (None, False), ([1], False),
])
def test_is_finite_number(value, finite):
    assert is_finite_number(value) is finite


# -- the exit path -------------------------------------------------------------------------------
NASTY = {
    "surrogate": "mlx5_\udcff\udcfe",           # os.fsdecode of a non-UTF-8 netdev name
    "lone": "\ud800",
    "bytes": b"\xff\xfeabc",
    "huge": 10 ** 5000,                          # a 5,001-digit lid
    "negative_huge": -(2 ** 64),
    "edge": 2 ** 63 - 1,
    "nan": float("nan"),
    "inf": float("inf"),
    "tuple": (1, 2),
    "set": {3},
    "object": object,
    ("tuple", "key"): 1,
    b"\xffkey": "v",
}


def test_json_safe_makes_anything_strict_json():
    safe = json_safe(NASTY)
    text = json.dumps(safe, allow_nan=False)
    text.encode("utf-8")
    assert safe["surrogate"] == "mlx5_\\xff\\xfe" and safe["lone"] == "\\ud800"
    assert safe["bytes"] == "\\xff\\xfeabc"
    assert safe["huge"] == hex(10 ** 5000) and safe["negative_huge"] == str(-(2 ** 64))
    assert safe["edge"] == 2 ** 63 - 1
    assert (safe["nan"], safe["inf"]) == ("nan", "inf")
    assert safe["tuple"] == [1, 2] and safe["set"] == [3]
    assert "\\xffkey" in safe


@pytest.mark.parametrize("fail_on, kind", [("fail", "fail"), ("never", "exit")])
def test_exit_path_delivers_results_whatever_bytes_and_numbers(fail_on, kind):
    results = CheckResults()
    results.fail("rdma.port.state", "mlx5_\udcff/1", "port \udcff DOWN", observed=10 ** 30)
    results.passed("rdma.port.rate", "mlx5_0/1", "ok", observed=float("nan"))
    module = FakeModule()
    with pytest.raises(ModuleExit):
        exit_with_checks(module, results, fail_on, ansible_facts={"mlx5": {"lid": 10 ** 5000}},
                         msg="readiness")
    got, payload = module.outcome
    assert got == kind
    assert payload["checks"][0]["target"] == "mlx5_\\xff/1"
    assert payload["checks"][0]["observed"] == str(10 ** 30)
    assert payload["checks"][1]["observed"] == "nan"
    assert payload["ansible_facts"]["mlx5"]["lid"] == hex(10 ** 5000)
    assert payload["summary"] == {"pass": 1, "warn": 0, "fail": 1, "skip": 0}
    assert payload["healthy"] is False and payload["changed"] is False
    if kind == "fail":
        assert payload["msg"].startswith("1 check(s) at or above fail_on=fail: rdma.port.state[mlx5_\\xff/1]")
    else:
        assert payload["msg"] == "readiness"
