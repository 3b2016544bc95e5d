"""Fault matrix (docs/contracts.md#fail-closed-checks): "could not measure" is never "healthy".

NVML: every function the collection calls (read from plugins/module_utils, so the table cannot
rot) x every error code nvidia-ml-py defines, injected through the fake binding on one GPU of an
8-GPU DGX H100 (fixture tree, expected_count 8), run as node_validate runs the GPU family.
sysfs: every required file x EIO, EACCES, ENXIO, empty, vanished after lookup, changing, injected
below SysfsReader (the ``os`` its ``open_regular`` uses), through node_validate.
"""

import calendar
import glob
import os
import re

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, GPU
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    Context,
    run_family,
    validate_node,
)
from sysfs_faults import FaultyOs
from conftest import REPO
from nvml_scenarios import load_fake, node, scenario
from runners import ScriptedRunner

NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
DGX = node("dgx-h100")
FAULTY = 3  # the GPU the error is injected into
GPU_OPTIONS = {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"}
UNSUPPORTED = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
LOST = ("GPU_IS_LOST", "RESET_REQUIRED")

MIG_ON = {"mig": {"current": 1, "pending": 1, "instances": ["3g.40gb", "3g.40gb"]}}
# Every NVML function the collection calls -> (check that fails, target, required, prerequisite).
# required: any error, NotSupported included, fails. prerequisite: scenario keys that make the
# code reach a fallback (the older name of a query is called only when the newer one is missing).
NVML_CALLS = {
    "nvmlInit": ("gpu.nvml", "node", True, {}),
    "nvmlSystemGetDriverVersion": ("gpu.nvml", "node", False, {}),
    "nvmlSystemGetCudaDriverVersion": ("gpu.nvml", "node", False, {}),
    "nvmlDeviceGetCount": ("gpu.count", "node", True, {}),
    "nvmlDeviceGetHandleByIndex": ("gpu.lost", "gpu3", True, {}),
    "nvmlDeviceGetUUID": ("gpu.lost", "gpu3", False, {}),
    "nvmlDeviceGetName": ("gpu.lost", "gpu3", False, {}),
    "nvmlDeviceGetPciInfo": ("gpu.lost", "gpu3", False, {}),
    "nvmlDeviceGetTotalEccErrors": ("gpu.ecc.volatile_uncorrectable", "gpu3", False, {}),
    "nvmlDeviceGetEccMode": ("gpu.ecc.mode", "gpu3", False, {}),
    "nvmlDeviceGetRetiredPages": ("gpu.retired_pages", "gpu3", False, {}),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("gpu.retired_pages", "gpu3", False, {}),
    "nvmlDeviceGetRemappedRows": ("gpu.row_remap", "gpu3", False, {}),
    "nvmlDeviceGetTemperature": ("gpu.temperature", "gpu3", False, {}),
    "nvmlDeviceGetTemperatureThreshold": ("gpu.temperature", "gpu3", False, {}),
    "nvmlDeviceGetCurrentClocksEventReasons": ("gpu.clocks_event", "gpu3", False, {}),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (
        "gpu.clocks_event", "gpu3", False, {"missing_functions": ["nvmlDeviceGetCurrentClocksEventReasons"]}),
    "nvmlDeviceGetCurrPcieLinkGeneration": ("gpu.pcie", "gpu3", False, {}),
    "nvmlDeviceGetCurrPcieLinkWidth": ("gpu.pcie", "gpu3", False, {}),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("gpu.pcie", "gpu3", False, {}),
    "nvmlDeviceGetMaxPcieLinkWidth": ("gpu.pcie", "gpu3", False, {}),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": ("gpu.pcie", "gpu3", False, {}),
    "nvmlDeviceGetNvLinkState": ("gpu.nvlink", "gpu3", False, {}),
    "nvmlDeviceGetPersistenceMode": ("gpu.persistence", "gpu3", False, {}),
    "nvmlDeviceGetMigMode": ("gpu.mig", "gpu3", False, {}),
    # the MIG layout is read whenever MIG is on (gpu3 split 2x 3g.40gb): any error fails gpu.mig
    "nvmlDeviceGetMemoryInfo": ("gpu.mig", "gpu3", True, {"device_overrides": {"3": MIG_ON}}),
    "nvmlDeviceGetGpuInstanceProfileInfo": ("gpu.mig", "gpu3", True, {"device_overrides": {"3": MIG_ON}}),
    "nvmlDeviceGetGpuInstances": ("gpu.mig", "gpu3", True, {"device_overrides": {"3": MIG_ON}}),
    "nvmlDeviceGetGpuFabricInfoV": ("gpu.fabric", "gpu3", False, {}),
    "nvmlDeviceGetGpuFabricInfo": (
        "gpu.fabric", "gpu3", False, {"missing_functions": ["nvmlDeviceGetGpuFabricInfoV"]}),
    "nvmlDeviceGetFieldValues": ("gpu.recovery_action", "gpu3", False, {}),
}
# Called, but not a reading: nvmlShutdown's errors are ignored after the checks are made.
# Calls that take no reading of the node's health: NVML shutdown, and the resident agent's event
# watcher (agent_events.NvmlEventWatcher: a failure there means polling, said in health.json,
# tests/unit/test_agent_events.py), which only wakes a cycle that takes the readings above.
NOT_READINGS = {"nvmlShutdown", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
                "nvmlEventSetFree", "nvmlDeviceGetIndex", "nvmlDeviceGetSupportedEventTypes"}

FAKE = load_fake()
ERRORS = FAKE.ERROR_NAMES
BASE = scenario("h100-healthy")
# page retirement reported (A100-style) so its two queries are made too
BASE["device_template"] = dict(BASE["device_template"], retired_pages={"sbe": 0, "dbe": 0, "pending": 0})
READER = SysfsReader(DGX)  # no sysfs fault in the NVML matrix: one memoised reader for all cases


def called_nvml_functions():
    """Names of the NVML functions in plugins/module_utils ("nvml…" strings, binding.nvml…())."""
    pynvml = pytest.importorskip("pynvml")
    names = set()
    for path in glob.glob(os.path.join(REPO, "plugins", "module_utils", "*", "*.py")):
        if os.path.basename(os.path.dirname(path)) == "capture":
            # node_capture records the calls the GPU family makes (a recording wrapper around the
            # binding) and names some of them to file their answers: it takes no reading of its own
            continue
        with open(path) as handle:
            names.update(re.findall(r"""(?:["']|\.)(nvml[A-Z]\w*)\b""", handle.read()))
    return {name for name in names if callable(getattr(pynvml, name, None))}


def test_the_table_is_every_nvml_function_the_code_calls():
    assert called_nvml_functions() == set(NVML_CALLS) | NOT_READINGS


def test_the_fake_raises_every_error_code_of_the_binding():
    pynvml = pytest.importorskip("pynvml")
    real = {name[len("NVML_ERROR_"):]: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")}
    assert {name: getattr(FAKE, "NVML_ERROR_" + name) for name in ERRORS} == real
    for code in real.values():
        fake_class = FAKE.nvmlExceptionClass(code)
        assert fake_class.__name__ == pynvml.nvmlExceptionClass(code).__name__
        assert isinstance(FAKE.NVMLError(code), fake_class) and FAKE.NVMLError(code).value == code
        if code in pynvml.NVMLError._errcode_to_string:
            assert str(FAKE.NVMLError(code)) == pynvml.NVMLError._errcode_to_string[code]


def run_gpu(function, error):
    data = dict(BASE, errors={function: {str(FAULTY): error} if NVML_CALLS[function][1] != "node" else error})
    data.update(NVML_CALLS[function][3])
    FAKE.set_scenario(data)
    ctx = Context(DGX, runner=ScriptedRunner(), reader=READER, nvml=NvmlAdapter(FAKE), now=NOW)
    return run_family(GPU, ctx, GPU_OPTIONS).checks


def test_without_a_fault_the_node_is_healthy():
    for function in NVML_CALLS:
        FAKE.set_scenario(dict(BASE, **NVML_CALLS[function][3]))
        ctx = Context(DGX, runner=ScriptedRunner(), reader=READER, nvml=NvmlAdapter(FAKE), now=NOW)
        results = run_family(GPU, ctx, GPU_OPTIONS).checks
        assert results.healthy, (function, [c for c in results if c["status"] == "fail"])


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("function", sorted(NVML_CALLS))
def test_nvml_error_is_never_healthy(function, error):
    check_id, target, required, _ = NVML_CALLS[function]
    results = run_gpu(function, error)
    if error in UNSUPPORTED and not required:
        # not supported by this GPU / driver: that check skips (or a fallback answers)
        assert results.healthy, [c for c in results if c["status"] == "fail"]
        assert {c["status"] for c in results if c["id"] == check_id and c["target"] == target} <= {"skip", "pass"}
        return
    assert not results.healthy
    if error in LOST and target != "node":
        check_id = "gpu.lost"
    found = [c for c in results if c["id"] == check_id and c["target"] == target]
    assert len(found) == 1 and found[0]["status"] == "fail", found
    text = "NVML_ERROR_" + error
    assert function in found[0]["error"] and text in found[0]["error"], found[0]
    if target != "node" or function != "nvmlInit":
        assert function in found[0]["message"] and text in found[0]["message"], found[0]
    if function == "nvmlDeviceGetHandleByIndex":
        assert "nvmlDeviceGetHandleByIndex(3)" in found[0]["error"]
    if target != "node" and error not in LOST and check_id != "gpu.lost":
        assert found[0]["message"].startswith("could not be measured: ")


@pytest.mark.parametrize("error", [e for e in ERRORS if e != "SUCCESS"])
def test_recovery_action_field_answering_an_error(error):
    """nvmlDeviceGetFieldValues answers, but the field itself carries an NVML return code."""
    data = dict(BASE, device_overrides={str(FAULTY): {"recovery_action": error}})
    FAKE.set_scenario(data)
    ctx = Context(DGX, runner=ScriptedRunner(), reader=READER, nvml=NvmlAdapter(FAKE), now=NOW)
    results = run_family(GPU, ctx, GPU_OPTIONS).checks
    found = {c["id"]: c for c in results if c["target"] == "gpu3"}
    if error in UNSUPPORTED:
        assert results.healthy and found["gpu.recovery_action"]["status"] == "skip"
        return
    assert not results.healthy
    check = found["gpu.lost" if error in LOST else "gpu.recovery_action"]
    assert check["status"] == "fail" and "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION" in check["error"]
    assert "NVML_ERROR_" + error in check["error"]


# -- sysfs ----------------------------------------------------------------------------------------
SYSFS_FAULTS = ("EIO", "EACCES", "ENXIO", "empty", "vanished", "changing")
GPU0 = "sys/bus/pci/devices/0000:18:00.0/"
PORT = "sys/class/infiniband/mlx5_0/ports/1/"
RDMA = {"min_rate_gbps": 100, "min_ofed_version": "5.8", "check_counters": True}
# required file -> (scenario, families' options, check id, target)
SYSFS_REQUIRED = {
    GPU0 + "vendor": ("h100-healthy", {"gpu": GPU_OPTIONS}, "gpu.count", "node"),
    GPU0 + "class": ("h100-healthy", {"gpu": GPU_OPTIONS}, "gpu.count", "node"),
    "sys/bus/pci/devices/0000:05:00.0/vendor": ("h100-healthy", {"gpu": GPU_OPTIONS}, "gpu.count", "node"),
    GPU0 + "max_link_width": ("h100-healthy", {"gpu": GPU_OPTIONS}, "gpu.pcie", "gpu0"),
    "sys/module/nvidia/version": ("nvml-driver-mismatch", {"gpu": GPU_OPTIONS}, "gpu.driver_version", "node"),
    PORT + "state": ("h100-healthy", {"rdma": RDMA}, "rdma.port.state", "mlx5_0/1"),
    PORT + "phys_state": ("h100-healthy", {"rdma": RDMA}, "rdma.port.phys_state", "mlx5_0/1"),
    PORT + "rate": ("h100-healthy", {"rdma": RDMA}, "rdma.port.rate", "mlx5_0/1"),
    PORT + "counters/symbol_error": ("h100-healthy", {"rdma": RDMA}, "rdma.counters", "mlx5_0/1"),
    "sys/module/mlx5_core/version": ("h100-healthy", {"rdma": RDMA}, "rdma.ofed_version", "node"),
}
TUNING_FILES = {
    "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": ("4096\n", {"hugepages_2m": 4096},
                                                              "tuning.hugepages", "2048kB"),
    "etc/tuned/active_profile": ("network-latency\n", {"tuned_profile": "network-latency"},
                                 "tuning.tuned_profile", "node"),
    "var/lib/kubelet/config.yaml": ("cpuManagerPolicy: static\n", {"kubelet_policy": {"cpu_manager_policy": "static"}},
                                    "tuning.kubelet_policy", "cpuManagerPolicy"),
}
# the kubelet check reports per field, and on target config when the configuration is unreadable
FAIL_TARGET = {"var/lib/kubelet/config.yaml": "config"}


@pytest.fixture(scope="module")
def tuning_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuning")
    for rel, (content, _options, _check, _target) in TUNING_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return str(root)


def node_validate(root, name, options, monkeypatch=None, target=None, fault=None):
    faulty = None
    if target is not None:
        faulty = FaultyOs(os.path.join(root, target), fault)
        monkeypatch.setattr(sysfs, "os", faulty)
    params = {"root": root, "fail_on": "never"}
    for family in FAMILIES:
        params[family.name] = options.get(family.name, {"enabled": False})
    FAKE.set_scenario(scenario(name))
    payload, errors = validate_node(FAMILIES, params, runner=ScriptedRunner(), nvml=NvmlAdapter(FAKE), now=NOW)
    assert errors == []
    return payload, faulty


def _cases():
    for rel, (name, options, check_id, target) in SYSFS_REQUIRED.items():
        yield DGX, rel, name, options, check_id, target
    for rel, (_content, options, check_id, target) in TUNING_FILES.items():
        yield None, rel, "h100-healthy", {"tuning": options}, check_id, target


CASES = list(_cases())


@pytest.mark.parametrize("fault", SYSFS_FAULTS)
@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_sysfs_fault_on_a_required_file(case, fault, monkeypatch, tuning_root):
    root, rel, name, options, check_id, target = case
    root = root or tuning_root
    baseline, _ = node_validate(root, name, options)
    before = [c for c in baseline["checks"] if c["id"] == check_id and c["target"] == target]
    assert len(before) == 1 and before[0]["status"] != "fail" or name == "nvml-driver-mismatch", before
    payload, faulty = node_validate(root, name, options, monkeypatch, rel, fault)
    if fault != "changing":
        target = FAIL_TARGET.get(rel, target)
    found = [c for c in payload["checks"] if c["id"] == check_id and c["target"] == target]
    assert len(found) == 1, payload["checks"]
    if fault == "changing":
        # one reader per run, every file read once: each check of the run sees the first value
        assert faulty.opens == 1 and found == before
        return
    assert faulty.opens <= 1
    assert found[0]["status"] == "fail" and not payload["healthy"], found
    assert rel in found[0]["message"], found[0]
    assert "/" + rel in found[0].get("error", ""), found[0]
    words = {"EIO": "EIO", "EACCES": "EACCES", "ENXIO": "ENXIO", "empty": "empty", "vanished": "vanished"}[fault]
    if not (fault == "empty" and rel.endswith(("vendor", "class", "config.yaml"))):
        assert words in found[0]["message"], found[0]
