"""The NVML adapter: lazy import, single init, error mapping, old-binding conversions."""

import os
import sys
import types

import pytest
from hypothesis import given, settings, strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import (
    UNSUPPORTED,
    GpuLost,
    NvmlAdapter,
    NvmlCallError,
    format_cuda_version,
    is_unsupported,
    normalize_pci_address,
    to_text,
)
from nvml_scenarios import fake_with, load_fake


def test_binding_is_imported_lazily(monkeypatch):
    monkeypatch.delitem(sys.modules, "gpufleet_lazy_probe", raising=False)
    adapter = NvmlAdapter(module_name="gpufleet_lazy_probe")
    assert "gpufleet_lazy_probe" not in sys.modules
    info = adapter.start()
    assert info["available"] is False and info["error_kind"] == "binding_missing"
    assert "install nvidia-ml-py (imported as pynvml)" in info["error"]


def test_nvml_is_initialised_once():
    fake = fake_with("h100-healthy")
    adapter = NvmlAdapter(fake)
    first = adapter.start()
    assert adapter.start() is first
    assert fake._STATE["initialised"] == 1
    adapter.shutdown()
    assert fake._STATE["initialised"] == 0


def test_real_binding_without_driver_reports_library_not_found():
    real = pytest.importorskip("pynvml")
    info = NvmlAdapter(real).start()
    if info["available"]:
        pytest.skip("this machine has a working NVIDIA driver")
    assert info["error_kind"] in ("library_not_found", "driver_not_loaded")
    assert "NVMLError_" in info["error"]


@pytest.mark.parametrize(
    "error,kind",
    [
        ("LIBRARY_NOT_FOUND", "library_not_found"),
        ("DRIVER_NOT_LOADED", "driver_not_loaded"),
        ("LIB_RM_VERSION_MISMATCH", "version_mismatch"),
        ("NO_PERMISSION", "no_permission"),
        ("UNKNOWN", "error"),
    ],
)
def test_init_errors_are_told_apart(error, kind):
    fake = load_fake()
    fake.set_scenario({"init_error": error})
    assert NvmlAdapter(fake).start()["error_kind"] == kind


def test_call_mapping():
    fake = fake_with(
        "h100-gpu-is-lost",
        device_overrides={
            0: {"errors": {"nvmlDeviceGetTemperature": "NOT_SUPPORTED", "nvmlDeviceGetEccMode": "TIMEOUT"}}
        },
    )
    adapter = NvmlAdapter(fake)
    adapter.start()
    handle = adapter.handle(0)
    assert is_unsupported(adapter.call("nvmlDeviceGetTemperature", handle, 0))
    with pytest.raises(NvmlCallError):
        adapter.call("nvmlDeviceGetEccMode", handle)
    with pytest.raises(GpuLost):
        adapter.call("nvmlDeviceGetName", adapter.handle(5))
    missing = adapter.call("nvmlDeviceGetSomethingFromTheFuture", handle)
    assert is_unsupported(missing) and "missing from this nvidia-ml-py binding" in missing.reason
    assert not UNSUPPORTED


def test_attribute_error_inside_the_binding_is_unsupported():
    fake = fake_with("h100-healthy")

    def broken(handle):
        raise AttributeError("module 'pynvml' has no attribute 'c_nvmlSomething_t'")

    fake.nvmlDeviceGetMigMode = broken
    adapter = NvmlAdapter(fake)
    adapter.start()
    assert is_unsupported(adapter.call("nvmlDeviceGetMigMode", adapter.handle(0)))


def test_fabric_info_and_field_values_through_real_ctypes_structures():
    adapter = NvmlAdapter(fake_with("h100-recovery-action"))
    adapter.start()
    assert adapter.fabric_info(adapter.handle(0)) == {"state": 3, "status": 0}
    assert adapter.field_value(adapter.handle(0), "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION") == 1
    assert adapter.field_value(adapter.handle(1), "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION") == 0


def test_nvlink_states_stop_at_the_last_link():
    fake = fake_with("h100-healthy")
    adapter = NvmlAdapter(fake)
    adapter.start()
    states = adapter.nvlink_states(adapter.handle(0))
    assert states == dict.fromkeys(range(18), True)


def test_bytes_from_old_bindings():
    assert to_text(b"580.95.05\x00") == "580.95.05" and to_text("x") == "x" and to_text(3) == 3


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        (b"00000000:9A:00.0", "0000:9a:00.0"),
        ("0000:db:00.0", "0000:db:00.0"),
        ("18:00.0", "0000:18:00.0"),
        ("00000001:02:03", "0001:02:03"),
    ],
)
def test_normalize_pci_address(raw, expected):
    assert normalize_pci_address(raw) == expected


@pytest.mark.parametrize(
    "raw,expected", [(13000, "13.0"), (12040, "12.4"), (None, None), (UNSUPPORTED, None)]
)
def test_cuda_version(raw, expected):
    assert format_cuda_version(raw) == expected


FAKE_NVML_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_nvml")


def test_binding_path_imports_from_that_directory_without_touching_sys_path(monkeypatch, tmp_path):
    """nvml_binding_path: the binding comes from the directory (here the fake of tests/fake_nvml,
    as in the fleet benchmark's persistent interpreters), sys.path is as before, and a binding
    imported earlier from elsewhere is not reused."""
    elsewhere = tmp_path / "pynvml.py"
    elsewhere.write_text("ELSEWHERE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    import pynvml  # noqa: F401  (the stand-in from tmp_path, as a warm interpreter may hold)

    assert getattr(sys.modules["pynvml"], "ELSEWHERE", False)
    path_before = list(sys.path)
    monkeypatch.setenv("GPUFLEET_FAKE_NVML_SCENARIO", os.path.join(FAKE_NVML_DIR, "..", "fixtures", "nvml",
                                                                   "h100-healthy.json"))
    adapter = NvmlAdapter(binding_path=FAKE_NVML_DIR)
    info = adapter.start()
    try:
        assert sys.path == path_before
        assert os.path.dirname(adapter.binding.__file__) == FAKE_NVML_DIR
        assert info["available"] is True and adapter.device_count() == 8
    finally:
        adapter.shutdown()
        sys.modules.pop("pynvml", None)


def test_binding_path_that_is_not_a_directory_reports_the_binding_missing(tmp_path):
    info = NvmlAdapter(binding_path=str(tmp_path / "absent")).start()
    assert info["available"] is False and info["error_kind"] == "binding_missing"
    assert "nvml_binding_path" in info["error"] and "absent" in info["error"]


# -- code_name: the binding's constants read once per binding ---------------------------------------------------

def _code_name_by_loop(binding, code):
    """code_name as it was before its table: the first NVML_ERROR_* of dir() equal to code, then _CODES."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import _CODES  # pylint: disable=import-outside-toplevel

    for attr in dir(binding):
        if attr.startswith("NVML_ERROR_") and getattr(binding, attr, None) == code:
            return attr
    for name, value in _CODES.items():
        if value == code:
            return "NVML_ERROR_" + name
    return None


_CONSTANT = st.one_of(st.integers(-2, 1000), st.sampled_from([2, 3, 13, 15, 999]), st.booleans(),
                      st.floats(allow_nan=False, min_value=-2, max_value=20), st.none(), st.text(max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"NVML_ERROR_[A-Z_]{1,8}", fullmatch=True), _CONSTANT, max_size=8),
       st.lists(st.one_of(st.integers(-2, 1000), st.booleans(), st.floats(allow_nan=False, max_value=20),
                          st.none(), st.sampled_from([2, 3, 13, 15, 16, 999])), min_size=1, max_size=6))
def test_code_name_gives_what_the_loop_gave(constants, codes):
    binding = types.SimpleNamespace(**constants)
    adapter = NvmlAdapter(pynvml_module=binding)
    for code in codes:
        assert adapter.code_name(code) == _code_name_by_loop(binding, code)


def test_code_name_reads_the_bindings_constants_once(monkeypatch):
    binding = types.SimpleNamespace(NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_UNKNOWN=999, NVML_ERROR_ALSO_THREE=3)
    adapter = NvmlAdapter(pynvml_module=binding)
    listed = []
    real_dir = dir
    monkeypatch.setattr("builtins.dir", lambda *args: listed.append(args) or real_dir(*args))
    names = [adapter.code_name(code) for code in (3, 999, 3, 15, 999)]
    assert names == ["NVML_ERROR_ALSO_THREE", "NVML_ERROR_UNKNOWN", "NVML_ERROR_ALSO_THREE",
                     "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN"]
    assert len(listed) == 1
