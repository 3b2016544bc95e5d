"""gpu_health rules (docs/contracts.md, GPU family), one test per rule and scenario, over the fake NVML binding."""

import calendar
import os
import shutil

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import (
    CHECK_IDS,
    DEVICE_CHECKS,
    FAMILY,
    check_gpu_health,
    validate_options,
    version_matches,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    Context,
    module_argspec,
    run_family,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import XID_IGNORE_DEFAULT
from conftest import FIXTURES
from nvml_scenarios import fake_with, load_fake, node, scenario_files
from runners import ScriptedRunner

NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
GPUS = ["gpu%d" % i for i in range(8)]


def run(name, root="dgx-h100", options=None, xid=None, device_overrides=None, **top):
    fake = fake_with(name, device_overrides, **top)
    reader = SysfsReader(node(root))
    results, gpus, info = check_gpu_health(
        gather_gpu_facts(reader), NvmlAdapter(fake), FAMILY.defaults(options), xid, now=NOW, reader=reader
    )
    return results, gpus, info


def status(results, check_id, target="node"):
    found = [c for c in results if c["id"] == check_id and c["target"] == target]
    assert len(found) == 1, (check_id, target, found)
    return found[0]["status"]


def check(results, check_id, target="node"):
    return [c for c in results if c["id"] == check_id and c["target"] == target][0]


def statuses(results, check_id):
    return {c["target"]: c["status"] for c in results if c["id"] == check_id}


# -- healthy DGX H100 ---------------------------------------------------------------------
def test_healthy_dgx_h100_every_rule_passes():
    results, gpus, info = run(
        "h100-healthy", options={"expected_count": 8, "expected_driver_version": "580"}, xid=[]
    )
    assert info == {
        "available": True,
        "error": None,
        "driver_version": "580.95.05",
        "cuda_driver_version": "13.0",
    }
    assert results.healthy and results.summary()["fail"] == 0 and results.summary()["warn"] == 0
    for check_id in DEVICE_CHECKS:
        expected = "skip" if check_id == "gpu.retired_pages" else "pass"  # H100 uses row remapping
        assert statuses(results, check_id) == dict.fromkeys(GPUS, expected), check_id
    for check_id in ("gpu.nvml", "gpu.count", "gpu.driver_version", "gpu.xid"):
        assert status(results, check_id) == "pass"
    assert {c["id"] for c in results} == set(CHECK_IDS)
    assert [g["pci_bus_id"] for g in gpus] == [
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
        "0000:ba:00.0",
        "0000:db:00.0",
    ]
    gpu = gpus[0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["uuid"].startswith("GPU-")
    assert gpu["temperature_c"] == 34 and gpu["slowdown_temperature_c"] == 89
    assert gpu["nvlink"] == {"supported": 18, "active": 18, "inactive": []}
    assert gpu["fabric"] == {"state": "COMPLETED", "status": 0}
    assert gpu["recovery_action"] == "NONE" and gpu["persistence_mode"] is True
    assert gpu["mig"] == {"current": False, "pending": False}


def test_healthy_pcie_idle_downshift_passes():
    results, gpus, _ = run("h100-healthy")
    assert gpus[0]["pcie"] == {
        "current_gen": 1,
        "current_width": 16,
        "max_gen": 5,
        "max_width": 16,
        "gpu_max_gen": 5,
        "gpu_max_width": 16,
    }
    assert "idle downshift" in check(results, "gpu.pcie", "gpu0")["message"]


# -- gpu.count ----------------------------------------------------------------------------
def test_count_gpu_fell_off_the_bus():
    results, gpus, _ = run("h100-gpu-fell-off-bus")
    assert len(gpus) == 7
    found = check(results, "gpu.count")
    assert found["status"] == "fail"
    assert found["observed"] == {"nvml": 7, "pci": 8}
    assert "missing from NVML: 0000:db:00.0" in found["message"]


@pytest.mark.parametrize("expected,result", [(8, "pass"), (7, "pass"), (9, "fail")])
def test_count_against_expected_count(expected, result):
    results, _, _ = run("h100-healthy", options={"expected_count": expected})
    assert status(results, "gpu.count") == result


# -- gpu.driver_version -------------------------------------------------------------------
@pytest.mark.parametrize(
    "expected,result",
    [
        ("580", "pass"),
        ("580.95", "pass"),
        ("580.95.05", "pass"),
        ("58", "fail"),
        ("570", "fail"),
        ("580.95.05.1", "fail"),
    ],
)
def test_driver_version_prefix_match(expected, result):
    results, _, _ = run("h100-healthy", options={"expected_driver_version": expected})
    assert status(results, "gpu.driver_version") == result


def test_driver_version_unset_is_skipped():
    results, _, _ = run("h100-healthy")
    assert status(results, "gpu.driver_version") == "skip"


def test_version_matches_components():
    assert version_matches("580.95.05", "580") and not version_matches("580.95.05", "5")
    assert not version_matches("580.95.05", "580.9")
    assert version_matches("580.95.05", "580.95.5")  # components compare as numbers (versions.py)
    with pytest.raises(ValueError, match="not a version: 'latest'"):
        version_matches("580.95.05", "latest")


# -- gpu.nvml -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,words",
    [
        ("nvml-library-not-found", "libnvidia-ml.so.1 not found"),
        ("nvml-driver-not-loaded", "kernel driver not loaded"),
        ("nvml-driver-mismatch", "driver/library version mismatch"),
    ],
)
def test_nvml_unusable_each_cause_has_its_own_message(name, words):
    results, gpus, info = run(name)
    found = check(results, "gpu.nvml")
    assert found["status"] == "fail" and words in found["message"]
    assert info["available"] is False and words in info["error"]
    assert gpus == []
    # fail closed: the device checks apply and could not be measured (they used to skip)
    lost = check(results, "gpu.lost")
    assert lost["status"] == "fail" and lost["message"].startswith("could not be measured: NVML unavailable")
    assert found["error"].startswith("nvmlInit: ") and lost["error"] == found["error"]


def test_nvml_mismatch_still_checks_the_loaded_driver_version_from_sysfs():
    results, _, _ = run("nvml-driver-mismatch", options={"expected_driver_version": "570"})
    found = check(results, "gpu.driver_version")
    assert found["status"] == "fail" and found["observed"] == "580.95.05"
    assert "/sys/module/nvidia/version" in found["message"]


def test_nvml_unusable_on_a_nouveau_host_says_so():
    results, _, _ = run("nvml-driver-not-loaded", root="gpu-nouveau")
    message = check(results, "gpu.nvml")["message"]
    assert "nvidia kernel module not loaded" in message and "nouveau is loaded" in message


def test_nvml_binding_not_installed():
    reader = SysfsReader(node("dgx-h100"))
    adapter = NvmlAdapter(module_name="gpufleet_no_such_pynvml")
    results, _, info = check_gpu_health(gather_gpu_facts(reader), adapter, FAMILY.defaults(), [], now=NOW)
    assert status(results, "gpu.nvml") == "fail"
    assert "install nvidia-ml-py (imported as pynvml)" in info["error"]


class ExplodingAdapter:
    def start(self):
        raise AssertionError("NVML must not be touched without a GPU")


@pytest.mark.parametrize("root", ["empty", None])
def test_no_gpu_on_the_bus_skips_everything(root, tmp_path):
    reader = SysfsReader(node(root) if root else str(tmp_path))
    results, gpus, info = check_gpu_health(gather_gpu_facts(reader), ExplodingAdapter(), FAMILY.defaults(), None, now=NOW)
    assert gpus == [] and info["available"] is False
    assert results.healthy and results.summary() == {"pass": 0, "warn": 0, "fail": 0, "skip": len(CHECK_IDS)}
    assert check(results, "gpu.nvml")["message"].startswith("no NVIDIA GPU on the PCI bus")


def test_no_gpu_but_gpus_expected_fails_the_count(tmp_path):
    reader = SysfsReader(str(tmp_path))
    results, _, _ = check_gpu_health(
        gather_gpu_facts(reader), ExplodingAdapter(), FAMILY.defaults({"expected_count": 8}), None, now=NOW
    )
    assert status(results, "gpu.count") == "fail" and status(results, "gpu.nvml") == "skip"


# -- gpu.lost -----------------------------------------------------------------------------
def test_lost_gpu_fails_and_its_other_checks_fail_as_not_measured():
    results, gpus, _ = run("h100-gpu-is-lost")
    assert statuses(results, "gpu.lost") == {**dict.fromkeys(GPUS, "pass"), "gpu5": "fail", "gpu2": "fail"}
    assert "GPU is lost" in check(results, "gpu.lost", "gpu5")["message"]
    assert "requires restart" in check(results, "gpu.lost", "gpu2")["message"]  # ResetRequired
    assert check(results, "gpu.lost", "gpu2")["error"] == (
        "nvmlDeviceGetTotalEccErrors: GPU requires restart (NVML_ERROR_RESET_REQUIRED)")
    for check_id in DEVICE_CHECKS[1:]:  # they used to skip: a lost GPU's readings cannot be taken
        found = check(results, check_id, "gpu5")
        assert found["status"] == "fail" and found["message"].startswith("could not be measured: GPU is lost")
        assert found["error"] == "nvmlDeviceGetUUID: GPU is lost (NVML_ERROR_GPU_IS_LOST)"
    assert gpus[5]["lost"] is True and gpus[4]["lost"] is False


# -- gpu.ecc.* ----------------------------------------------------------------------------
def test_ecc_volatile_uncorrectable():
    results, gpus, _ = run("h100-ecc-volatile-uncorrectable")
    assert statuses(results, "gpu.ecc.volatile_uncorrectable") == {
        **dict.fromkeys(GPUS, "pass"),
        "gpu3": "fail",
    }
    assert check(results, "gpu.ecc.volatile_uncorrectable", "gpu3")["observed"] == 2
    assert gpus[3]["ecc"]["volatile_uncorrected"] == 2


def test_ecc_off_warns_when_required():
    overrides = {0: {"ecc": {"mode_current": 0, "mode_pending": 0}}}
    results, _, _ = run("h100-healthy", device_overrides=overrides)
    assert status(results, "gpu.ecc.mode", "gpu0") == "warn"
    results, _, _ = run("h100-healthy", device_overrides=overrides, options={"require_ecc": False})
    assert status(results, "gpu.ecc.mode", "gpu0") == "pass"


def test_ecc_mode_change_pending_warns():
    results, _, _ = run("h100-healthy", device_overrides={1: {"ecc": {"mode_pending": 0}}})
    found = check(results, "gpu.ecc.mode", "gpu1")
    assert found["status"] == "warn" and "pending" in found["message"]


# -- gpu.retired_pages (boards before Ampere) ----------------------------------------------
@pytest.mark.parametrize(
    "sbe,dbe,pending,result",
    [(0, 0, 0, "pass"), (40, 22, 0, "pass"), (40, 23, 0, "fail"), (63, 0, 0, "fail"), (1, 0, 1, "warn")],
)
def test_retired_pages(sbe, dbe, pending, result):
    results, gpus, _ = run(
        "h100-healthy", device_overrides={0: {"retired_pages": {"sbe": sbe, "dbe": dbe, "pending": pending}}}
    )
    assert status(results, "gpu.retired_pages", "gpu0") == result
    assert gpus[0]["retired_pages"] == {"sbe": sbe, "dbe": dbe, "pending": bool(pending)}


# -- gpu.row_remap ------------------------------------------------------------------------
def test_row_remap_pending_warns():
    results, _, _ = run("h100-row-remap-pending")
    assert statuses(results, "gpu.row_remap") == {**dict.fromkeys(GPUS, "pass"), "gpu2": "warn"}
    assert "reset" in check(results, "gpu.row_remap", "gpu2")["message"]


def test_row_remap_failure_fails():
    results, gpus, _ = run("h100-row-remap-failure")
    assert statuses(results, "gpu.row_remap") == {**dict.fromkeys(GPUS, "pass"), "gpu6": "fail"}
    assert gpus[6]["row_remap"]["failure"] is True


@pytest.mark.parametrize("uncorrectable,result", [(511, "pass"), (512, "warn")])
def test_row_remap_many_uncorrectable_rows_warn(uncorrectable, result):
    results, _, _ = run(
        "h100-healthy", device_overrides={0: {"remapped_rows": {"uncorrectable": uncorrectable}}}
    )
    assert status(results, "gpu.row_remap", "gpu0") == result


# -- gpu.temperature / gpu.clocks_event ------------------------------------------------------
def test_temperature_at_slowdown_fails_and_near_it_warns():
    results, _, _ = run("h100-temperature-slowdown")
    assert statuses(results, "gpu.temperature") == {
        **dict.fromkeys(GPUS, "pass"),
        "gpu1": "fail",
        "gpu2": "warn",
    }


def test_temperature_margin_option():
    results, _, _ = run("h100-temperature-slowdown", options={"temperature_margin_c": 2})
    assert status(results, "gpu.temperature", "gpu2") == "pass"  # 86 C < 89 - 2


def test_clocks_event_hw_thermal_slowdown_warns():
    results, gpus, _ = run("h100-temperature-slowdown")
    assert statuses(results, "gpu.clocks_event") == {**dict.fromkeys(GPUS, "pass"), "gpu1": "warn"}
    assert gpus[1]["clocks_event_reasons"] == ["SwThermalSlowdown", "HwThermalSlowdown"]


@pytest.mark.parametrize("reasons,result", [(0x80, "warn"), (0x8, "warn"), (0x4, "pass"), (0x0, "pass")])
def test_clocks_event_reasons(reasons, result):
    results, _, _ = run("h100-healthy", device_overrides={0: {"clocks_event_reasons": reasons}})
    assert status(results, "gpu.clocks_event", "gpu0") == result


# -- gpu.pcie -----------------------------------------------------------------------------
def test_pcie_degraded_slot_warns():
    results, _, _ = run("h100-pcie-x8")
    assert statuses(results, "gpu.pcie") == {**dict.fromkeys(GPUS, "pass"), "gpu4": "warn", "gpu5": "warn"}
    assert "x8 below the GPU's x16" in check(results, "gpu.pcie", "gpu4")["message"]
    assert "gen4 below the GPU's gen5" in check(results, "gpu.pcie", "gpu5")["message"]


def test_pcie_without_any_reference_is_skipped():
    fake = fake_with("h100-healthy", missing_functions=["nvmlDeviceGetGpuMaxPcieLinkGeneration"])
    reader = SysfsReader(node("dgx-h100"))
    # No reader: the GPU's own width (sysfs) is unknown too.
    results, _, _ = check_gpu_health(gather_gpu_facts(reader), NvmlAdapter(fake), FAMILY.defaults(), [], now=NOW)
    assert statuses(results, "gpu.pcie") == dict.fromkeys(GPUS, "skip")


# -- gpu.nvlink / gpu.mig -------------------------------------------------------------------
def test_nvlink_inactive_link_fails():
    links = [1] * 18
    links[3] = links[17] = 0
    results, gpus, _ = run("h100-healthy", device_overrides={6: {"nvlink": links}})
    assert statuses(results, "gpu.nvlink") == {**dict.fromkeys(GPUS, "pass"), "gpu6": "fail"}
    assert gpus[6]["nvlink"] == {"supported": 18, "active": 16, "inactive": [3, 17]}
    assert "3, 17" in check(results, "gpu.nvlink", "gpu6")["message"]


def test_nvlink_skipped_with_mig_and_mig_pending_warns():
    results, gpus, _ = run("h100-mig-nvlink-down")
    assert statuses(results, "gpu.nvlink") == dict.fromkeys(GPUS, "skip")
    assert statuses(results, "gpu.mig") == {**dict.fromkeys(GPUS, "pass"), "gpu7": "warn"}
    assert gpus[7]["mig"] == {"current": True, "pending": False}
    assert results.healthy


def test_nvlink_checked_again_once_mig_is_off():
    results, _, _ = run("h100-mig-nvlink-down", device_overrides={0: {"mig": {"current": 0, "pending": 0}}})
    assert status(results, "gpu.nvlink", "gpu0") == "fail"


# -- gpu.persistence ----------------------------------------------------------------------
def test_persistence_off_warns_or_fails_when_required():
    results, _, _ = run("h100-recovery-action")
    assert statuses(results, "gpu.persistence") == {**dict.fromkeys(GPUS, "pass"), "gpu1": "warn"}
    results, _, _ = run("h100-recovery-action", options={"require_persistence_mode": True})
    assert status(results, "gpu.persistence", "gpu1") == "fail"


# -- gpu.fabric ---------------------------------------------------------------------------
def test_fabric_not_started_fails_on_an_nvswitch_system():
    results, gpus, _ = run("h100-fabric-not-started")
    assert statuses(results, "gpu.fabric") == dict.fromkeys(GPUS, "fail")
    assert "fabricmanager" in check(results, "gpu.fabric", "gpu0")["message"]
    assert gpus[0]["fabric"]["state"] == "NOT_STARTED"


def test_fabric_completed_with_error_status_fails():
    results, _, _ = run("h100-healthy", device_overrides={2: {"fabric": {"status": 999}}})
    assert status(results, "gpu.fabric", "gpu2") == "fail"


def test_fabric_checked_without_nvswitch_when_nvml_reports_fabric_support():
    # Same NVML answers (fabric NOT_STARTED) on a tree without NVSwitch functions: NVML reports a
    # fabric-capable GPU, so the fabric is checked (GB200/NVL72 trays have no NVSwitch on their bus).
    results, gpus, _ = run(
        "h100-fabric-not-started",
        root="workstation-geforce",
        devices=[{"pci_bus_id": "00000000:01:00.0", "uuid": "GPU-x"}],
    )
    found = check(results, "gpu.fabric", "gpu0")
    assert found["status"] == "fail" and found["message"].startswith("NVLink fabric state NOT_STARTED")
    assert gpus[0]["fabric"] == {"state": "NOT_STARTED", "status": 0}


@pytest.mark.parametrize("fabric", ["NOT_SUPPORTED", {"state": 0, "status": 0}])
def test_fabric_skipped_without_nvswitch_when_nvml_reports_no_fabric(fabric):
    # A PCIe GPU: the query is not supported, or answers state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED.
    results, gpus, _ = run("geforce-rtx4090", root="workstation-geforce", device_overrides={0: {"fabric": fabric}})
    found = check(results, "gpu.fabric", "gpu0")
    assert found["status"] == "skip"
    assert found["message"] == "no NVSwitch on the PCI bus: no NVLink fabric to join"
    assert gpus[0]["fabric"] is None


def test_fabric_not_supported_state_fails_on_an_nvswitch_system():
    results, _, _ = run("h100-healthy", device_overrides={1: {"fabric": {"state": 0}}})
    assert check(results, "gpu.fabric", "gpu1")["status"] == "fail"


# -- GB200 / NVL72 tray: fabric-capable GPUs, no NVSwitch on the PCI bus ----------------------------
GB200_GPUS = ["gpu%d" % i for i in range(4)]


@pytest.fixture
def gb200_tray(tmp_path):
    """A compute-tray tree: dgx-h100's first four GPU functions, no NVSwitch function."""
    root = tmp_path / "gb200-tray"
    shutil.copytree(node("dgx-h100"), str(root), symlinks=True)
    devices = root / "sys" / "bus" / "pci" / "devices"
    for address in ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0",  # NVSwitches
                    "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"):
        (devices / address).unlink()
    return str(root)


def run_gb200(root, device_overrides=None, options=None):
    fake = fake_with("gb200-nvl72-tray", device_overrides)
    reader = SysfsReader(root)
    facts = gather_gpu_facts(reader)
    results, gpus, _ = check_gpu_health(facts, NvmlAdapter(fake), FAMILY.defaults(options), [], now=NOW, reader=reader)
    return facts, results, gpus


def test_gb200_tray_fabric_completed_passes(gb200_tray):
    facts, results, gpus = run_gb200(gb200_tray, options={"expected_count": 4})
    assert facts["nvswitch_count"] == 0 and facts["fabricmanager_required"] is False
    assert statuses(results, "gpu.fabric") == dict.fromkeys(GB200_GPUS, "pass")
    assert check(results, "gpu.fabric", "gpu0")["message"] == "NVLink fabric registration completed"
    assert gpus[3]["fabric"] == {"state": "COMPLETED", "status": 0}
    assert results.healthy and status(results, "gpu.count") == "pass"


@pytest.mark.parametrize("state, name", [(1, "NOT_STARTED"), (2, "IN_PROGRESS")])
def test_gb200_tray_fabric_not_completed_fails(gb200_tray, state, name):
    _facts, results, gpus = run_gb200(gb200_tray, device_overrides={2: {"fabric": {"state": state}}})
    found = check(results, "gpu.fabric", "gpu2")
    assert found["status"] == "fail" and found["observed"] == {"state": name, "status": 0}
    assert found["message"].startswith("NVLink fabric state %s" % name)
    assert statuses(results, "gpu.fabric") == {**dict.fromkeys(GB200_GPUS, "pass"), "gpu2": "fail"}
    assert gpus[2]["fabric"]["state"] == name and not results.healthy


def test_gb200_tray_fabric_completed_with_error_status_fails(gb200_tray):
    # status is an nvmlReturn_t; NVML_ERROR_INSUFFICIENT_RESOURCES (23) after a failed registration
    _facts, results, _ = run_gb200(gb200_tray, device_overrides={0: {"fabric": {"status": 23}}})
    found = check(results, "gpu.fabric", "gpu0")
    assert found["status"] == "fail" and "NVML status 23" in found["message"]


def test_gb200_tray_fabric_not_supported_skips(gb200_tray):
    _facts, results, _ = run_gb200(gb200_tray, device_overrides={1: {"fabric": {"state": 0}}})
    assert check(results, "gpu.fabric", "gpu1")["status"] == "skip"


# -- gpu.recovery_action ------------------------------------------------------------------
def test_recovery_action_other_than_none_fails():
    results, gpus, _ = run("h100-recovery-action")
    assert statuses(results, "gpu.recovery_action") == {**dict.fromkeys(GPUS, "pass"), "gpu0": "fail"}
    assert gpus[0]["recovery_action"] == "GPU_RESET"


# -- unsupported queries and old bindings ---------------------------------------------------
def test_geforce_board_unsupported_features_skip():
    results, gpus, _ = run("geforce-rtx4090", root="workstation-geforce")
    expected = {
        "gpu.lost": "pass",
        "gpu.ecc.volatile_uncorrectable": "skip",
        "gpu.ecc.mode": "skip",
        "gpu.retired_pages": "skip",
        "gpu.row_remap": "skip",
        "gpu.temperature": "pass",
        "gpu.clocks_event": "pass",
        "gpu.pcie": "pass",
        "gpu.nvlink": "skip",
        "gpu.persistence": "warn",
        "gpu.mig": "skip",
        "gpu.fabric": "skip",
        "gpu.recovery_action": "pass",
    }
    assert {check_id: status(results, check_id, "gpu0") for check_id in DEVICE_CHECKS} == expected
    assert status(results, "gpu.count") == "pass"
    assert results.healthy
    assert gpus[0]["nvlink"] is None and gpus[0]["ecc"]["volatile_uncorrected"] is None


@pytest.mark.parametrize(
    "function,check_id",
    [
        ("nvmlDeviceGetTemperature", "gpu.temperature"),
        ("nvmlDeviceGetRemappedRows", "gpu.row_remap"),
        ("nvmlDeviceGetPersistenceMode", "gpu.persistence"),
        ("nvmlDeviceGetFieldValues", "gpu.recovery_action"),
    ],
)
@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "FUNCTION_NOT_FOUND"])
def test_not_supported_skips_only_that_check(function, check_id, error):
    results, _, _ = run("h100-healthy", device_overrides={0: {"errors": {function: error}}})
    assert status(results, check_id, "gpu0") == "skip"
    assert results.summary()["fail"] == 0
    others = [c for c in results if c["target"] == "gpu0" and c["id"] not in (check_id, "gpu.retired_pages")]
    assert {c["status"] for c in others} == {"pass"}


def test_missing_function_in_binding_skips_only_that_check():
    results, _, _ = run("h100-healthy", missing_functions=["nvmlDeviceGetMigMode"])
    assert statuses(results, "gpu.mig") == dict.fromkeys(GPUS, "skip")
    assert statuses(results, "gpu.nvlink") == dict.fromkeys(GPUS, "pass")


def test_other_nvml_error_means_not_measured_and_fails():
    results, _, _ = run("h100-healthy", device_overrides={0: {"errors": {"nvmlDeviceGetEccMode": "UNKNOWN"}}})
    found = check(results, "gpu.ecc.mode", "gpu0")
    assert found["status"] == "fail" and found["message"].startswith("could not be measured: ")
    assert found["error"] == "nvmlDeviceGetEccMode: Unknown Error (NVML_ERROR_UNKNOWN)"
    assert not results.healthy


def test_old_binding_returning_bytes():
    results, gpus, info = run("h100-old-binding-bytes")
    assert info["driver_version"] == "580.95.05"
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3" and gpus[0]["pci_bus_id"] == "0000:18:00.0"
    assert isinstance(gpus[0]["uuid"], str)
    # Clock reasons fall back to the pre-12.535 name; fabric and recovery action are missing.
    assert statuses(results, "gpu.clocks_event") == dict.fromkeys(GPUS, "pass")
    assert statuses(results, "gpu.fabric") == dict.fromkeys(GPUS, "skip")
    assert statuses(results, "gpu.recovery_action") == dict.fromkeys(GPUS, "skip")
    assert statuses(results, "gpu.pcie") == dict.fromkeys(GPUS, "pass")  # width still compared
    assert results.summary()["fail"] == 0


@pytest.mark.parametrize("name", scenario_files())
def test_every_scenario_runs_without_exception_and_covers_every_check(name):
    root = "workstation-geforce" if name.startswith("geforce") else "dgx-h100"
    results, _, _ = run(name, root=root, xid=[])
    assert {c["id"] for c in results} == set(CHECK_IDS)
    assert all(c["target"] == "node" or c["target"].startswith("gpu") for c in results)


# -- gpu.xid ------------------------------------------------------------------------------
def xid_lines(name):
    with open(os.path.join(FIXTURES, "xid", name)) as handle:
        return handle.read().splitlines()


def test_xid_classification_per_gpu():
    results, _, _ = run("h100-healthy", xid=xid_lines("journal-short-iso.log"))
    # NVIDIA's catalog: 13 and 94 restart the application (warn), 119 resets the GPU; 63 (IGNORE in the
    # catalog) is a row remapping pending until a GPU reset: warn, with the advice.
    assert statuses(results, "gpu.xid") == {"gpu0": "warn", "gpu2": "warn", "gpu4": "fail", "gpu6": "warn"}
    assert "XID 63: row remapping pending" in check(results, "gpu.xid", "gpu2")["message"]
    found = check(results, "gpu.xid", "gpu4")
    assert found["observed"][0]["xid"] == 119 and found["observed"][0]["count"] == 2
    assert found["observed"][0]["last"] == "2025-11-20T09:14:57Z"
    assert "XID 119 x2 (fatal)" in found["message"]
    assert not results.healthy


def test_xid_options_reclassify():
    results, _, _ = run(
        "h100-healthy",
        xid=xid_lines("journal-short-iso.log"),
        options={"xid_fatal": [13], "xid_ignore": [63, 94, 119]},
    )
    assert statuses(results, "gpu.xid") == {"gpu0": "fail", "gpu2": "pass", "gpu4": "pass", "gpu6": "pass"}


def test_xid_on_a_gpu_nvml_does_not_see_targets_node():
    results, _, _ = run("h100-gpu-fell-off-bus", xid=xid_lines("dmesg-plain.log"))
    found = check(results, "gpu.xid", "node")
    assert found["status"] == "fail" and "0000:db:00" in found["message"] and "undated" in found["message"]


def test_xid_none_in_window_passes():
    results, _, _ = run(
        "h100-healthy", xid=xid_lines("journal-short-iso.log"), options={"xid_window_hours": 0.1}
    )
    assert status(results, "gpu.xid") == "pass"


def test_xid_source_unreadable_fails_closed():
    runner = ScriptedRunner(paths={})
    fake = fake_with("h100-healthy")
    results, _, _, _ = run_gpu_health(
        {"root": "/", "xid_source": "journal"},
        runner,
        adapter=NvmlAdapter(fake),
        now=NOW,
        reader=SysfsReader(node("dgx-h100")),
    )
    found = check(results, "gpu.xid")
    assert found["status"] == "fail" and "journalctl not found" in found["message"]
    assert found["message"].startswith("kernel log unreadable, XIDs cannot be checked: ")
    assert not results.healthy


JOURNAL = "/usr/bin/journalctl"
DMESG = "/usr/bin/dmesg"
WINDOW = (JOURNAL, "-k", "--since", "@%d" % int(NOW - 24 * 3600), "-o", "short-iso", "-n", "500000", "--no-pager",
          "-q")
LAST = (JOURNAL, "-k", "-n", "1", "-o", "short-iso", "--no-pager", "-q")
KERNEL_LINE = "2025-11-20T11:00:00+0000 dgx kernel: mlx5_core 0000:1a:00.0: Port module event: module 0"


def xid_with(script, source="auto", paths=None):
    runner = ScriptedRunner(script, paths={"journalctl": JOURNAL, "dmesg": DMESG} if paths is None else paths)
    results, _, _, _ = run_gpu_health({"root": "/", "xid_source": source}, runner,
                                      adapter=NvmlAdapter(fake_with("h100-healthy")), now=NOW,
                                      reader=SysfsReader(node("dgx-h100")))
    return check(results, "gpu.xid"), runner.calls


def test_unprivileged_empty_journal_fails_closed():
    # journalctl -k as a user outside systemd-journal/adm: rc 0, no output, even for -n 1
    found, calls = xid_with({WINDOW: (0, "", ""), LAST: (0, "", ""), DMESG: (1, "", "dmesg: read kernel buffer "
                                                                           "failed: Operation not permitted")})
    assert found["status"] == "fail"
    assert "not readable by this user" in found["message"] and "Operation not permitted" in found["message"]
    assert [c[:3] for c in calls] == [[JOURNAL, "-k", "--since"], [JOURNAL, "-k", "-n"], [DMESG, "--time-format", "iso"]]


def test_unprivileged_empty_journal_with_journal_source_fails_without_dmesg():
    found, calls = xid_with({WINDOW: (0, "", ""), LAST: (0, "", "")}, source="journal")
    assert found["status"] == "fail" and "not readable by this user" in found["message"]
    assert all(c[0] == JOURNAL for c in calls)


def test_quiet_window_of_a_readable_journal_passes():
    found, _ = xid_with({WINDOW: (0, "", ""), LAST: (0, KERNEL_LINE, "")})
    assert found["status"] == "pass" and "(journal)" in found["message"]


def test_empty_journal_falls_back_to_a_readable_ring_buffer():
    found, _ = xid_with({WINDOW: (0, "", ""), LAST: (0, "", ""), DMESG: (0, KERNEL_LINE, "")})
    assert found["status"] == "pass" and "(dmesg)" in found["message"]


@pytest.mark.parametrize("answer", [(0, "", ""), (1, "", "dmesg: read kernel buffer failed: Operation not permitted")])
def test_empty_or_refused_ring_buffer_fails_closed(answer):
    found, _ = xid_with({DMESG: answer}, source="dmesg")
    assert found["status"] == "fail" and found["message"].startswith("kernel log unreadable")


def test_xid_scan_disabled_skips():
    found, calls = xid_with({}, source="none")
    assert found["status"] == "skip" and calls == []


def test_run_gpu_health_reads_the_journal_through_the_runner():
    runner = ScriptedRunner(
        {"/usr/bin/journalctl": (0, "\n".join(xid_lines("journal-short-iso.log")), "")},
        paths={"journalctl": "/usr/bin/journalctl"},
    )
    fake = fake_with("h100-healthy")
    results, gpus, info, facts = run_gpu_health(
        {"root": "/", "xid_source": "auto"},
        runner,
        adapter=NvmlAdapter(fake),
        now=NOW,
        reader=SysfsReader(node("dgx-h100")),
    )
    assert runner.calls[0][:2] == ["/usr/bin/journalctl", "-k"]
    assert status(results, "gpu.xid", "gpu4") == "fail"
    assert facts["gpu_count"] == 8 and len(gpus) == 8 and info["available"]


def test_run_gpu_health_without_gpu_reads_no_log_and_no_nvml(tmp_path):
    runner = ScriptedRunner()
    results, gpus, info, _ = run_gpu_health(
        {"root": str(tmp_path)}, runner, adapter=ExplodingAdapter(), now=NOW
    )
    assert runner.calls == [] and gpus == [] and results.summary()["skip"] == len(CHECK_IDS)


def run_gpu_health(params, runner, adapter=None, now=None, reader=None):
    """The GPU family run as gpu_health runs it: (checks, gpus, nvml, ansible_facts.nvidia)."""
    params = dict(params)
    ctx = Context(params.pop("root", "/"), runner=runner, reader=reader, nvml=adapter, now=now)
    result = run_family(FAMILY, ctx, params)
    return result.checks, result.returns["gpus"], result.returns["nvml"], result.facts["nvidia"]


# -- options ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params,option",
    [
        ({"expected_count": -1}, "expected_count"),
        ({"temperature_margin_c": -3}, "temperature_margin_c"),
        ({"xid_window_hours": 0}, "xid_window_hours"),
        ({"xid_source": ""}, "xid_source"),
        ({"xid_source": "/nonexistent/kern.log", "root": "/"}, "xid_source"),
        ({"expected_driver_version": " "}, "expected_driver_version"),
    ],
)
def test_bad_options_are_named(params, option):
    errors = validate_options(params)
    assert len(errors) == 1 and errors[0].startswith("option " + option), errors
    assert validate_options(params, "gpu.")[0].startswith("option gpu." + option)


def test_good_options_pass_validation():
    path = os.path.join(FIXTURES, "xid", "kern.log")
    assert validate_options({"xid_source": path, "root": "/", "expected_count": 8}) == []
    assert validate_options({"xid_source": "auto"}) == []


def test_argspec_defaults_follow_the_spec():
    spec = module_argspec(FAMILY)
    assert spec["root"]["default"] == "/" and spec["fail_on"]["choices"] == ["fail", "warn", "never"]
    assert spec["require_persistence_mode"]["default"] is False and spec["require_ecc"]["default"] is True
    assert spec["temperature_margin_c"]["default"] == 5 and spec["xid_source"]["default"] == "auto"
    assert spec["xid_window_hours"]["default"] == 24
    # NVIDIA's XID catalog (plugins/module_utils/gpu/xid.py XID_CATALOG, docs/contracts.md "XID policy")
    assert spec["xid_ignore"]["default"] == XID_IGNORE_DEFAULT and 63 not in XID_IGNORE_DEFAULT  # a reset is due
    assert 79 in spec["xid_fatal"]["default"] and 119 in spec["xid_fatal"]["default"]
    assert 149 in spec["xid_fatal"]["default"] and 94 not in spec["xid_fatal"]["default"]


def test_fake_binding_mirrors_the_real_error_classes():
    fake = load_fake()
    real = pytest.importorskip("pynvml")
    for name in (
        "NVMLError_NotSupported",
        "NVMLError_FunctionNotFound",
        "NVMLError_GpuIsLost",
        "NVMLError_ResetRequired",
        "NVMLError_LibraryNotFound",
        "NVMLError_DriverNotLoaded",
        "NVMLError_LibRmVersionMismatch",
    ):
        fake_error = getattr(fake, name)(0)
        real_error = getattr(real, name)(0)
        assert fake_error.value == real_error.value and issubclass(getattr(fake, name), fake.NVMLError)
        assert isinstance(fake.NVMLError(fake_error.value), getattr(fake, name))
    for name in (
        "nvmlInit",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetTemperatureThreshold",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetFieldValues",
        "c_nvmlGpuFabricInfoV_t",
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
        "NVML_GPU_FABRIC_STATE_COMPLETED",
        "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    ):
        assert hasattr(real, name) and hasattr(fake, name), name
    for name in [n for n in dir(fake) if n.startswith("NVML_")]:
        assert getattr(fake, name) == getattr(real, name), name


def test_nvlink5_xids_follow_the_severity_word_of_their_line(local_tz):
    """NVLink5 XIDs 144-150 carry Fatal/Nonfatal in the line (tests/fixtures/xid/README.md names
    the source): a Nonfatal 145 is a warning, a Fatal 149 fails the node, and a line without the
    word (146) fails closed. The lines are `dmesg -T` dated, read as UTC here."""
    local_tz("UTC")
    lines = xid_lines("nvlink5-severity-dmesg-T.log")
    results, _, _ = run("h100-healthy", xid=lines)
    _nvlink5_asserts([c for c in results if c["id"] == "gpu.xid"], lines)


def _nvlink5_asserts(found, lines):
    # the PCI addresses are not GPUs of this fixture node: one node-level check
    assert len(found) == 1 and found[0]["status"] == "fail"
    message = found[0]["message"]
    assert "XID 145 nonfatal x2 (other)" in message and "XID 144 nonfatal x1 (other)" in message
    assert "XID 149 fatal x1 (fatal)" in message
    assert "XID 146 x1 (fatal)" in message  # no severity word: fail closed
    # the lines are dated days after this test's clock: kept as recent, the skew reported
    assert "clock skew: 5 line(s)" in message
    nonfatal_only = [line for line in lines if " 145, " in line]
    results, _, _ = run("h100-healthy", xid=nonfatal_only)
    assert [c["status"] for c in results if c["id"] == "gpu.xid"] == ["warn"]
    assert results.healthy


def test_a_fatal_xid_dated_in_the_future_is_counted_and_the_skew_reported():
    """A fatal XID whose date lies ahead of the node's clock (an RTC behind, a clock set back) is
    kept as recent, never dropped, and the message names the skew."""
    future = _time_text(NOW + 6 * 3600)
    line = "%s gpu-1 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=0, GPU has fallen off the bus." % future
    results, _, _ = run("h100-healthy", xid=[line])
    found = [c for c in results if c["id"] == "gpu.xid"]
    assert len(found) == 1 and found[0]["status"] == "fail"
    assert "clock skew" in found[0]["message"] and "counted as recent" in found[0]["message"]


def _time_text(epoch):
    import time as _time

    return _time.strftime("%Y-%m-%dT%H:%M:%S+0000", _time.gmtime(epoch))
