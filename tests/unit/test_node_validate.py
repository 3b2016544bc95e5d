"""node_validate (docs/contracts.md): parity with gpu_health + rdma_validate on every fixture node, nested
option errors, families turned off, one reader / one NVML initialisation, readiness text, and the
one shared RoCE v2 GID-index rule."""

import calendar
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import perftest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, GPU
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import validate_rdma
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    check_params,
    family_readiness,
    node_argspec,
    node_plan,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    validate_node as framework_validate_node,
)
from nvml_scenarios import NODES, fake_with, node
from runners import ScriptedRunner
from test_gpu_health import run_gpu_health


def validate_node(params, runner, adapter=None, now=None, reader=None):
    return framework_validate_node(FAMILIES, params, runner=runner, nvml=adapter, now=now, reader=reader)


def check_node_options(params):
    """(gpu options or None, rdma options or None, [errors]) as node_validate plans its run."""
    validated, errors = check_params(node_argspec(FAMILIES), params)
    if errors:
        return None, None, errors
    plan, errors = node_plan(FAMILIES, validated)
    return plan["gpu"], plan["rdma"], errors

NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
ALL_NODES = sorted(n for n in os.listdir(NODES) if os.path.isdir(os.path.join(NODES, n)))
# The NVML scenario that fits each node's GPUs; nodes without an NVIDIA GPU never query NVML.
SCENARIO = {"dgx-h100": "h100-healthy", "workstation-geforce": "geforce-rtx4090",
            "gpu-nouveau": "nvml-driver-not-loaded"}
OPTION_SETS = {
    "defaults": ({}, {}),
    "strict": ({"expected_count": 8, "expected_driver_version": "580", "require_persistence_mode": True},
               {"expected_devices": 4, "min_rate_gbps": 200, "require_peermem": True,
                "min_ofed_version": "5.8", "check_counters": True}),
    "ethernet": ({"xid_source": "none", "temperature_margin_c": 40},
                 {"link_layer": "Ethernet", "devices": ["mlx5_0", "mlx5_bond_0", "0000:1a:00.0"]}),
}


def adapter_for(name):
    return NvmlAdapter(fake_with(SCENARIO.get(name, "h100-healthy")))


def single_modules(name, gpu, rdma):
    """What gpu_health and rdma_validate compute, each on its own reader, as their modules do."""
    root = node(name)
    runner = ScriptedRunner()
    gpu_results, gpus, nvml, nvidia = run_gpu_health(dict(gpu, root=root), runner,
                                                     adapter=adapter_for(name), now=NOW)
    reader = SysfsReader(root)
    mlx5 = gather_mlx5_facts(reader, runner)
    rdma_results = validate_rdma(mlx5, reader, rdma)
    return gpu_results.as_list() + rdma_results.as_list(), gpus, nvml, {"nvidia": nvidia, "mlx5": mlx5}


def node_validate(name, gpu, rdma, **kwargs):
    params = {"root": node(name), "fail_on": "fail", "gpu": gpu, "rdma": rdma}
    payload, errors = validate_node(params, ScriptedRunner(), adapter=kwargs.pop("adapter", adapter_for(name)),
                                    now=NOW, **kwargs)
    assert errors == []
    return payload


@pytest.mark.parametrize("options", sorted(OPTION_SETS))
@pytest.mark.parametrize("name", ALL_NODES)
def test_parity_with_the_single_modules_on_every_fixture_node(name, options):
    gpu, rdma = OPTION_SETS[options]
    checks, gpus, nvml, facts = single_modules(name, gpu, rdma)
    payload = node_validate(name, gpu, rdma)
    assert payload["checks"] == checks  # ids, targets, statuses, messages, observed, expected, order
    assert payload["gpus"] == gpus and payload["nvml"] == nvml
    assert payload["ansible_facts"] == facts
    assert payload["summary"] == {s: sum(1 for c in checks if c["status"] == s)
                                  for s in ("pass", "warn", "fail", "skip")}
    assert payload["healthy"] is not any(c["status"] == "fail" for c in checks)
    assert {c["id"].split(".")[0] for c in payload["checks"]} == {"gpu", "rdma"}
    assert isinstance(payload["elapsed_ms"], float) and payload["elapsed_ms"] >= 0


def test_every_node_is_covered():
    assert {"dgx-h100", "empty", "hdr-degraded", "workstation-geforce", "gpu-nouveau"} <= set(ALL_NODES)


def test_dgx_h100_healthy_figures():
    payload = node_validate("dgx-h100", {"expected_count": 8}, {"expected_devices": 9, "min_rate_gbps": 200})
    assert payload["healthy"] is True
    assert payload["summary"]["fail"] == payload["summary"]["warn"] == 0
    assert payload["ansible_facts"]["nvidia"]["gpu_count"] == 8
    assert len(payload["ansible_facts"]["mlx5"]["devices"]) == 9
    assert payload["readiness"]["gpu"]["status"] == "pass" and payload["readiness"]["rdma"]["status"] == "pass"
    assert payload["msg"].startswith("gpu: pass (")


def test_no_gpu_no_hca_readiness_text():
    payload = node_validate("empty", {}, {})
    assert payload["summary"]["pass"] == 0 and payload["healthy"] is True
    assert payload["msg"] == ("gpu: skip (no NVIDIA GPU on the PCI bus); "
                              "rdma: skip (no RDMA devices; mlx5_core not loaded); "
                              "tuning: skip (no checks)")


def test_readiness_names_the_first_failure_and_counts_the_rest():
    payload = node_validate("hdr-degraded", {}, {"min_rate_gbps": 200})
    rdma = payload["readiness"]["rdma"]
    assert rdma["status"] == "fail"
    assert rdma["message"].startswith("rdma.port.state[mlx5_2/1]: port DOWN (+")
    assert payload["readiness"]["gpu"]["status"] == "skip"
    assert family_readiness([], [])["gpu"]["status"] == "off"


# -- one reader, one NVML initialisation, no commands ---------------------------------------
def test_each_file_read_once_nvml_initialised_once_no_command(monkeypatch):
    opened = {}
    real_read = sysfs._read_found  # every sysfs read of a file found goes through it (open_regular too)

    def counting_read(path, found, *args, **kwargs):
        if not isinstance(found, OSError):
            opened[path] = opened.get(path, 0) + 1
        return real_read(path, found, *args, **kwargs)

    monkeypatch.setattr(sysfs, "_read_found", counting_read)
    fake = fake_with("h100-healthy")
    inits = []
    original = fake.nvmlInitWithFlags
    monkeypatch.setattr(fake, "nvmlInitWithFlags", lambda flags: inits.append(flags) or original(flags))
    runner = ScriptedRunner()
    params = {"root": node("dgx-h100"), "fail_on": "fail", "gpu": {}, "rdma": {}}
    payload, errors = validate_node(params, runner, adapter=NvmlAdapter(fake), now=NOW)
    assert not errors and payload["healthy"]
    assert opened and max(opened.values()) == 1, [p for p, n in opened.items() if n > 1]
    # Both families read through the shared reader: GPU and HCA files are among the opened ones.
    assert any(p.endswith("sys/module/nvidia/version") for p in opened)
    assert any(p.endswith("sys/module/mlx5_core/version") for p in opened)
    assert len(inits) == 1
    assert runner.calls == []  # sysfs answers everything; XIDs come from log files below root


# -- families turned off ---------------------------------------------------------------------
@pytest.mark.parametrize("off", [{"enabled": False}, {"enabled": "no"}, {"enabled": "false", "expected_count": 8}])
def test_gpu_family_off_is_not_run(off):
    fake = fake_with("h100-healthy")
    calls = []
    fake.nvmlInitWithFlags = calls.append
    payload = node_validate("dgx-h100", off, {}, adapter=NvmlAdapter(fake))
    assert calls == []
    assert not [c for c in payload["checks"] if c["id"].startswith("gpu.")]
    assert "nvidia" not in payload["ansible_facts"] and "mlx5" in payload["ansible_facts"]
    assert payload["gpus"] == [] and payload["nvml"] is None
    assert payload["readiness"]["gpu"] == {"status": "off", "summary": {"pass": 0, "warn": 0, "fail": 0, "skip": 0},
                                           "message": "not run (gpu.enabled: false)"}
    assert payload["msg"].startswith("gpu: off (not run (gpu.enabled: false)); rdma: pass (")


def test_rdma_family_off_is_not_run():
    payload = node_validate("dgx-h100", {"expected_count": 8}, {"enabled": False})
    assert not [c for c in payload["checks"] if c["id"].startswith("rdma.")]
    assert "mlx5" not in payload["ansible_facts"] and payload["ansible_facts"]["nvidia"]["gpu_count"] == 8
    assert len(payload["gpus"]) == 8


def test_both_off_runs_nothing():
    payload = node_validate("dgx-h100", {"enabled": False}, {"enabled": False})
    assert payload["checks"] == [] and payload["healthy"] is True and payload["ansible_facts"] == {}


@pytest.mark.parametrize("value", [None, {}, {"enabled": True}, {"enabled": "yes"}])
def test_family_defaults(value):
    gpu, rdma, errors = check_node_options({"root": node("empty"), "gpu": value, "rdma": value})
    assert errors == []
    assert gpu["require_ecc"] is True and gpu["root"] == node("empty") and "fail_on" not in gpu
    assert "enabled" not in gpu and "enabled" not in rdma
    assert rdma["link_layer"] == "any" and rdma["required_modules"][0] == "ib_core"


def test_family_options_from_a_command_line_string():
    gpu, rdma, errors = check_node_options({"root": "/", "gpu": '{"expected_count": "8"}',
                                            "rdma": "min_rate_gbps=200 link_layer=InfiniBand"})
    assert errors == []
    assert gpu["expected_count"] == 8
    assert rdma["min_rate_gbps"] == 200.0 and rdma["link_layer"] == "InfiniBand"


# -- nested option errors ----------------------------------------------------------------------
# Types, choices and unknown keys are checked by Ansible's own argument-spec validator (the nested
# specs name the option and its family); the families' own rules name ``option <family>.<name>``.
@pytest.mark.parametrize("gpu, rdma, words", [
    ({}, {"min_rate_gbps": "fast"}, ["'min_rate_gbps'", "found in 'rdma'", "float"]),
    ({}, {"link_layer": "bogus"}, ["value of link_layer", "any, InfiniBand, Ethernet", "bogus", "found in rdma"]),
    ({"expected_count": "x"}, {}, ["'expected_count'", "found in 'gpu'", "int"]),
    ({"expected_count": -1}, {}, ["option gpu.expected_count must be >= 0"]),
    ({"xid_window_hours": 0}, {}, ["option gpu.xid_window_hours must be > 0"]),
    ({"xid_window_hours": float("nan")}, {}, ["option gpu.xid_window_hours must be > 0, got nan"]),
    ({"xid_source": "/nonexistent/kern.log"}, {}, ["option gpu.xid_source:", "is not a file"]),
    ({"nvml_binding_path": "/nonexistent/nvml"}, {}, ["option gpu.nvml_binding_path:", "is not a directory"]),
    ({"xid_fatal": ["x"]}, {}, ["'xid_fatal'", "found in 'gpu'", "int"]),
    ({}, {"min_ofed_version": "latest"}, ["option rdma.min_ofed_version:", "is not a version"]),
    ({}, {"expected_devices": -2}, ["option rdma.expected_devices:", "non-negative"]),
    ({}, {"min_rate_gbps": float("inf")}, ["option rdma.min_rate_gbps:", "non-negative number", "inf"]),
    ({}, {"devices": ["mlx5_0", "bad name!"]}, ["option rdma.devices:", "bad name!"]),
    ({}, {"frobnicate": 1}, ["rdma.frobnicate", "min_rate_gbps"]),
    ({"root": "/"}, {}, ["gpu.root", "Supported parameters include", "expected_count"]),
    ({"fail_on": "never"}, {}, ["gpu.fail_on", "Supported parameters include"]),
    (5, {}, ["option gpu: expected a dict of options, got int 5"]),
    (False, {}, ["option gpu: expected a dict of options, got bool False", "enabled: false"]),
    ({}, ["mlx5_0"], ["'rdma'", "dict"]),
    ("expected_count", {}, ["'gpu'", "dict"]),
])
def test_nested_option_errors_name_the_option(gpu, rdma, words):
    payload, errors = validate_node({"root": node("empty"), "fail_on": "fail", "gpu": gpu, "rdma": rdma},
                                    ScriptedRunner())
    assert payload is None and errors, errors
    text = " ".join(errors)
    for word in words:
        assert word in text, errors


def test_all_errors_reported_at_once_and_bad_root():
    _gpu, _rdma, errors = check_node_options({"root": "/nonexistent-root", "gpu": {"expected_count": "x"},
                                              "rdma": {"min_rate_gbps": "fast", "link_layer": "bogus"}})
    # Ansible reports every type and choice error of the nested options together
    assert len(errors) == 3
    assert "'expected_count'" in errors[0] and "found in 'gpu'" in errors[0]
    assert "'min_rate_gbps'" in errors[1] and "found in 'rdma'" in errors[1]
    assert "value of link_layer" in errors[2] and "found in rdma" in errors[2]
    _gpu, _rdma, errors = check_node_options({"root": "/nonexistent-root", "gpu": {"expected_count": -1},
                                              "rdma": {"expected_devices": -1, "min_ofed_version": "x"}})
    assert errors == ["option root: /nonexistent-root is not a directory"]
    _gpu, _rdma, errors = check_node_options({"root": "/", "gpu": {"expected_count": -1},
                                              "rdma": {"expected_devices": -1, "min_ofed_version": "x"}})
    assert [e.split(":")[0].split(" must")[0] for e in errors] == [
        "option gpu.expected_count", "option rdma.expected_devices", "option rdma.min_ofed_version"]


def test_nested_specs_are_the_single_modules_options():
    spec = node_argspec(FAMILIES)
    assert set(spec) == {"root", "fail_on", "gpu", "rdma", "tuning"}
    for family in FAMILIES:
        nested = spec[family.name]
        assert nested["type"] == "dict" and nested["apply_defaults"] is True
        assert nested["options"] == dict(family.options, enabled={"type": "bool", "default": True})
    assert "root" not in GPU.options and "fail_on" not in GPU.options
    assert {"expected_count", "xid_source", "xid_fatal"} <= set(GPU.options)


# -- the one RoCE v2 IPv4 GID-index rule -------------------------------------------------------
@pytest.mark.parametrize("name", ALL_NODES)
def test_perftest_and_mlx5_facts_agree_on_the_roce_gid_index(name):
    reader = SysfsReader(node(name))
    facts = gather_mlx5_facts(reader, ScriptedRunner())
    for device in facts["devices"]:
        for port in device["ports"]:
            expected = port["roce_v2_gid_index"] if port["link_layer"] == "Ethernet" else None
            assert perftest.roce_v2_ipv4_gid_index(reader, device["name"], port["port"]) == expected


def test_dgx_bond_gid_index_through_both_paths():
    reader = SysfsReader(node("dgx-h100"))
    assert perftest.roce_v2_ipv4_gid_index(reader, "mlx5_bond_0", 1) == 5
    assert perftest.default_gid_index(reader, {"device": "mlx5_bond_0"})[0] == 5
