"""A fake of nvidia-ml-py (imported as ``pynvml``) for tests on machines without a GPU.

Same function names, NVMLError hierarchy (one subclass per NVML_ERROR_* code, built like the
real binding's, carrying ``.value``) and constants as nvidia-ml-py 13.x, answering from a
scenario JSON file:

- ``GPUFLEET_FAKE_NVML_SCENARIO=<path>`` in the environment (read at import, and read again by
  the first ``nvmlInit`` after a full ``nvmlShutdown`` when the file changed - a symlink switched
  to another scenario - as the real library enumerates the GPUs again: a long-running process,
  the resident node health agent, sees a fault injected into the scenario), or
- ``set_scenario(path_or_dict)`` programmatically.

Scenario keys: ``init_error`` (an NVML_ERROR_* suffix such as ``LIBRARY_NOT_FOUND``),
``driver_version``, ``cuda_driver_version``, ``bytes_strings`` (old bindings returned bytes),
``missing_functions`` / ``missing_constants`` (names absent from an older binding),
``device_template`` (merged under every device), ``devices`` (list, NVML index order),
``device_overrides`` ({"<index>": {...}} merged over devices), ``extends`` (a scenario file
in the same directory this one is based on). Per-device ``errors`` maps a function name (or
``*`` for every device query but nvmlDeviceGetHandleByIndex) to an error that call raises. A
value that is a string naming an error (``"NOT_SUPPORTED"``) raises that error for the query.

Fault injection into any call: the top-level ``errors`` maps a function name (``nvmlInit``,
``nvmlDeviceGetCount``, ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetHandleByIndex``, any
device query) to an error (every device, or the system call), or to ``{"<index>": error}`` for
some devices (``"*"``: all). An error is an NVML_ERROR_* suffix (``"UNKNOWN"``), the full constant
name (``"NVML_ERROR_UNKNOWN"``) or the code (``999``); every code nvidia-ml-py defines can be
raised, as the NVMLError subclass the real binding raises (``NVMLError_Unknown``, ``.value``).
``ERROR_NAMES`` lists the suffixes. ``nvmlInit`` also covers ``nvmlInitWithFlags``; ``init_error``
is the older spelling of ``errors: {"nvmlInit": ...}``. An entry of a device's ``nvlink`` list
may be an error name too (that link's query raises it). MIG: a device's ``mig`` is
``{"current": 0|1, "pending": 0|1, "instances": ["3g.40gb", ...]}`` (the GPU instances, by
profile name, nvmlDeviceGetGpuInstances answers), ``mig_profiles`` the board's GPU-instance
profiles (default: an H100 80GB, see H100_80GB_MIG_PROFILES; an entry may be an error name that
profile index answers), ``memory_total_mib`` its memory.
``gpufleet.cluster.node_capture`` writes its ``nvml.json`` in this format (docs/capture.md): such a
file replays with ``GPUFLEET_FAKE_NVML_SCENARIO=<unpacked capture>/nvml.json``.
Put ``tests/fake_nvml`` first on PYTHONPATH so a module's interpreter imports this file as
``pynvml``; unit tests load it under another name through importlib.
"""

import ctypes
import json
import os
import string
from ctypes import Structure, Union, c_char, c_int64, c_uint, c_uint8, c_uint32

# -- constants (values from nvidia-ml-py 13.x / nvml.h) -----------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
nvmlGpuInstanceProfileInfo_v2 = 0x02000098
NVML_GPU_FABRIC_UUID_LEN = 16
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
NVML_GPU_FABRIC_STATE_COMPLETED = 3
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_GPU_RECOVERY_ACTION_NONE = 0
NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1
NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2
NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3
NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlClocksEventReasonNone = 0x0
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksThrottleReasonNone = 0x0

nvmlGpuFabricInfo_v2 = 0x02000024


# -- error hierarchy, built the way nvidia-ml-py builds it --------------------------------
class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping = dict()
    # the binding's own table (nvidia-ml-py 13.x); other codes ask nvmlErrorString, as it does
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        try:
            if self.value not in NVMLError._errcode_to_string:
                NVMLError._errcode_to_string[self.value] = str(nvmlErrorString(self.value))
            return NVMLError._errcode_to_string[self.value]
        except NVMLError:
            return "NVML Error with code %d" % self.value

    def __eq__(self, other):
        return self.value == other.value

    def __hash__(self):
        return hash(self.value)


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = globals()
    for err_name in sorted(x for x in this_module if x.startswith("NVML_ERROR_")):
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = this_module[err_name]

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)
            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        this_module[class_name] = new_error_class
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


ERROR_NAMES = tuple(sorted((name[len("NVML_ERROR_"):] for name in list(globals()) if name.startswith("NVML_ERROR_")),
                           key=lambda n: globals()["NVML_ERROR_" + n]))

# What libnvidia-ml's nvmlErrorString answers for the codes the binding's table lacks (the
# descriptions of nvml.h; the real library's wording may differ slightly).
_LIBRARY_STRINGS = {
    NVML_ERROR_NO_DATA: "No data",
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: "The requested vgpu operation is not available on target device, "
                                       "because ECC is enabled",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "Ran out of critical resources, other than memory",
    NVML_ERROR_FREQ_NOT_SUPPORTED: "The requested frequency is not supported",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "The provided version is invalid/unsupported",
    NVML_ERROR_DEPRECATED: "The requested functionality has been deprecated",
    NVML_ERROR_NOT_READY: "The system is not ready for the request",
    NVML_ERROR_GPU_NOT_FOUND: "No GPUs were found",
    NVML_ERROR_INVALID_STATE: "Resource not in correct state to perform requested operation",
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: "The requested reset type is not supported",
    NVML_ERROR_IN_USE: "An operation cannot be performed because the GPU is currently in use",
}


def error_code(error):
    """The NVML return code of ``error``: a suffix (``UNKNOWN``), a constant name or an int."""
    if isinstance(error, int):
        return error
    name = error if error.startswith("NVML_ERROR_") else "NVML_ERROR_" + error
    return globals()[name]


def _raise(name):
    raise NVMLError(error_code(name))


def _injected(func, index=None):
    """The error the scenario's top-level ``errors`` injects into ``func`` (for device ``index``)."""
    entry = _STATE["scenario"].get("errors", {}).get(func)
    if isinstance(entry, dict):
        entry = entry.get(str(index)) if index is not None and str(index) in entry else entry.get("*")
    if entry is not None:
        _raise(entry)


# -- structures the real binding exposes -------------------------------------------------
class c_nvmlGpuFabricInfo_t(Structure):
    _fields_ = [("clusterUuid", c_uint8 * NVML_GPU_FABRIC_UUID_LEN), ("status", c_uint),
                ("cliqueId", c_uint32), ("state", c_uint)]


class c_nvmlGpuFabricInfo_v2_t(Structure):
    _fields_ = [("version", c_uint), ("clusterUuid", c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
                ("status", c_uint), ("cliqueId", c_uint32), ("state", c_uint), ("healthMask", c_uint32)]

    def __init__(self):
        super().__init__(version=nvmlGpuFabricInfo_v2)


c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t


class c_nvmlValue_t(Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class c_nvmlFieldValue_t(Structure):
    _fields_ = [("fieldId", c_uint32), ("scopeId", c_uint32), ("timestamp", c_int64),
                ("latencyUsec", c_int64), ("valueType", c_uint), ("nvmlReturn", c_uint),
                ("value", c_nvmlValue_t)]


class nvmlPciInfo_t(Structure):
    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", c_char * 32)]

    def __getattribute__(self, name):
        # The real binding's _PrintableStructure decodes char arrays; old bindings did not.
        res = super().__getattribute__(name)
        if isinstance(res, bytes) and not _STATE["scenario"].get("bytes_strings"):
            return res.decode()
        return res


class c_nvmlDevice_t(object):
    """Opaque device handle (the real one is a ctypes pointer)."""

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return "<fake nvmlDevice %d>" % self.index


# -- scenario ----------------------------------------------------------------------------
_STATE = {"scenario": {}, "devices": [], "initialised": 0}
_REMOVED = {}


def _merge(base, extra):
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def _load(path):
    with open(path) as handle:
        data = json.load(handle)
    parent = data.pop("extends", None)
    if parent:
        base = _load(os.path.join(os.path.dirname(os.path.realpath(path)), parent))
        overrides = _merge(base.pop("device_overrides", {}), data.pop("device_overrides", {}))
        data = _merge(base, data)
        if overrides:
            data["device_overrides"] = overrides
    return data


def set_scenario(scenario):
    """Load a scenario (path or dict); resets initialisation state and binding surface."""
    if not isinstance(scenario, dict):
        scenario = _load(scenario)
    scenario = dict(scenario)
    template = scenario.get("device_template", {})
    overrides = scenario.get("device_overrides", {})
    devices = []
    for index, entry in enumerate(scenario.get("devices", [])):
        device = _merge(template, entry)
        device = _merge(device, overrides.get(str(index), {}))
        devices.append(device)
    _STATE.update({"scenario": scenario, "devices": devices, "initialised": 0, "path": None})
    module = globals()
    for name, value in list(_REMOVED.items()):
        module[name] = value
        del _REMOVED[name]
    for name in scenario.get("missing_functions", []) + scenario.get("missing_constants", []):
        if name in module:
            _REMOVED[name] = module.pop(name)
    return scenario


def calls():
    """Number of NVML queries answered since the scenario was set (for tests)."""
    return _STATE.get("calls", 0)


def _text(value):
    if _STATE["scenario"].get("bytes_strings") and isinstance(value, str):
        return value.encode()
    return value


def _device(handle, func):
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    _STATE["calls"] = _STATE.get("calls", 0) + 1
    index = handle.index if isinstance(handle, c_nvmlDevice_t) else handle
    device = _STATE["devices"][index]
    _injected(func, index)
    errors = device.get("errors", {})
    error = errors.get(func) or (errors.get("*") if func != "nvmlDeviceGetHandleByIndex" else None)
    if error:
        _raise(error)
    return device


def _value(device, key):
    value = device.get(key)
    if isinstance(value, str) and ("NVML_ERROR_" + value) in globals():
        _raise(value)
    if value is None:
        _raise("NOT_SUPPORTED")
    return value


# -- library lifecycle -------------------------------------------------------------------
def _file_identity(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), info.st_ino, info.st_mtime_ns, info.st_size)


def _reload_from_environment():
    """The environment's scenario again when its file changed since it was read: the hardware's
    state changed (a GPU lost, an ECC count), which the real library reports on the next query
    whoever else holds an initialisation (the resident agent's event watcher holds one through
    every cycle), so the reference count and the event sets are kept."""
    path = _STATE.get("path")
    if path:
        identity = _file_identity(path)
        if identity is not None and identity != _STATE.get("identity"):
            initialised = _STATE["initialised"]
            set_scenario(path)
            _STATE.update({"path": path, "identity": identity, "initialised": initialised})


def nvmlInitWithFlags(flags):
    _reload_from_environment()
    error = _STATE["scenario"].get("init_error")
    if error:
        _raise(error)
    _injected("nvmlInit")
    _STATE["initialised"] += 1


def nvmlInit():
    nvmlInitWithFlags(0)


def nvmlShutdown():
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    _STATE["initialised"] -= 1


def nvmlErrorString(result):
    text = NVMLError._errcode_to_string.get(result) or _LIBRARY_STRINGS.get(result, "Unknown Error")
    return _text(text)


def _system(key, func):
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    _injected(func)
    value = _STATE["scenario"].get(key)
    if value is None:
        _raise("NOT_SUPPORTED")
    return value


def nvmlSystemGetDriverVersion():
    return _text(_system("driver_version", "nvmlSystemGetDriverVersion"))


def nvmlSystemGetNVMLVersion():
    return _text("13." + _system("driver_version", "nvmlSystemGetNVMLVersion"))


def nvmlSystemGetCudaDriverVersion():
    return _system("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlDeviceGetCount():
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    _injected("nvmlDeviceGetCount")
    return len(_STATE["devices"])


def nvmlDeviceGetHandleByIndex(index):
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    if index >= len(_STATE["devices"]):
        _raise("INVALID_ARGUMENT")
    _device(index, "nvmlDeviceGetHandleByIndex")
    return c_nvmlDevice_t(index)


def nvmlDeviceGetHandleByPciBusId(pciBusId):
    if isinstance(pciBusId, bytes):
        pciBusId = pciBusId.decode()
    for index, device in enumerate(_STATE["devices"]):
        if device.get("pci_bus_id", "").lower() == pciBusId.lower():
            return nvmlDeviceGetHandleByIndex(index)
    _raise("NOT_FOUND")


# -- device queries ----------------------------------------------------------------------
def nvmlDeviceGetName(handle):
    return _text(_value(_device(handle, "nvmlDeviceGetName"), "name"))


def nvmlDeviceGetUUID(handle):
    return _text(_value(_device(handle, "nvmlDeviceGetUUID"), "uuid"))


def nvmlDeviceGetSerial(handle):
    return _text(_value(_device(handle, "nvmlDeviceGetSerial"), "serial"))


def nvmlDeviceGetIndex(handle):
    _device(handle, "nvmlDeviceGetIndex")
    return handle.index


def nvmlDeviceGetMinorNumber(handle):
    _device(handle, "nvmlDeviceGetMinorNumber")
    return handle.index


def nvmlDeviceGetPciInfo_v3(handle):
    device = _device(handle, "nvmlDeviceGetPciInfo")
    bus_id = _value(device, "pci_bus_id")
    domain, bus, rest = bus_id.split(":")
    info = nvmlPciInfo_t()
    info.busId = bus_id.encode()
    info.busIdLegacy = bus_id[-12:].encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    info.pciDeviceId = int(device.get("pci_device_id", "0x233010de"), 16)
    return info


def nvmlDeviceGetPciInfo(handle):
    return nvmlDeviceGetPciInfo_v3(handle)


def nvmlDeviceGetPersistenceMode(handle):
    return _value(_device(handle, "nvmlDeviceGetPersistenceMode"), "persistence_mode")


def nvmlDeviceGetTemperature(handle, sensor):
    return _value(_device(handle, "nvmlDeviceGetTemperature"), "temperature")


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    thresholds = _value(_device(handle, "nvmlDeviceGetTemperatureThreshold"), "temperature_thresholds")
    names = {NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown", NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
             NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "mem_max", NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "gpu_max"}
    return _value(thresholds, names.get(threshold, "?"))


def nvmlDeviceGetEccMode(handle):
    ecc = _value(_device(handle, "nvmlDeviceGetEccMode"), "ecc")
    return [_value(ecc, "mode_current"), _value(ecc, "mode_pending")]


def nvmlDeviceGetCurrentEccMode(handle):
    return nvmlDeviceGetEccMode(handle)[0]


def nvmlDeviceGetPendingEccMode(handle):
    return nvmlDeviceGetEccMode(handle)[1]


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    ecc = _value(_device(handle, "nvmlDeviceGetTotalEccErrors"), "ecc")
    key = "%s_%s" % ("volatile" if counterType == NVML_VOLATILE_ECC else "aggregate",
                     "uncorrected" if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected")
    return _value(ecc, key)


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    pages = _value(_device(device, "nvmlDeviceGetRetiredPages"), "retired_pages")
    count = _value(pages, "sbe" if sourceFilter == 0 else "dbe")
    return [0x1000 * (i + 1) for i in range(count)]


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    pages = _value(_device(device, "nvmlDeviceGetRetiredPagesPendingStatus"), "retired_pages")
    return int(_value(pages, "pending"))


def nvmlDeviceGetRemappedRows(device):
    rows = _value(_device(device, "nvmlDeviceGetRemappedRows"), "remapped_rows")
    return tuple(_value(rows, key) for key in ("correctable", "uncorrectable", "pending", "failure"))


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _value(_device(handle, "nvmlDeviceGetCurrentClocksEventReasons"), "clocks_event_reasons")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _value(_device(handle, "nvmlDeviceGetCurrentClocksThrottleReasons"), "clocks_event_reasons")


def nvmlDeviceGetSupportedClocksEventReasons(handle):
    _device(handle, "nvmlDeviceGetSupportedClocksEventReasons")
    return 0x1FF


def _pcie(handle, func, key):
    return _value(_value(_device(handle, func), "pcie"), key)


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "current_gen")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", "current_width")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", "max_gen")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", "max_width")


def nvmlDeviceGetGpuMaxPcieLinkGeneration(handle):
    return _pcie(handle, "nvmlDeviceGetGpuMaxPcieLinkGeneration", "gpu_max_gen")


def nvmlDeviceGetNvLinkState(device, link):
    links = _value(_device(device, "nvmlDeviceGetNvLinkState"), "nvlink")
    if link >= NVML_NVLINK_MAX_LINKS:
        _raise("INVALID_ARGUMENT")
    if link >= len(links):
        _raise("NOT_SUPPORTED")
    if isinstance(links[link], str):  # an error name for this one link (node_capture records them)
        _raise(links[link])
    return int(links[link])


def nvmlDeviceGetMigMode(device):
    mig = _value(_device(device, "nvmlDeviceGetMigMode"), "mig")
    return [_value(mig, "current"), _value(mig, "pending")]


# -- MIG layout (the calls mig-parted reads a layout with) ---------------------------------
# NVML_GPU_INSTANCE_PROFILE_* index -> (profile id, sliceCount, instanceCount, memorySizeMB, name):
# an H100 SXM5 80GB, from NVIDIA go-nvml's mock (pkg/nvml/mock/shared/gpus/h100.go,
# h100_80gb_GpuInstanceProfiles; there the profile id equals the index). The device's
# ``mig_profiles`` (same shape, keyed by the index as a string) replaces it for other boards.
H100_80GB_MIG_PROFILES = {
    "0": [0, 1, 7, 10240, "1g.10gb"], "7": [7, 1, 1, 10240, "1g.10gb+me"], "9": [9, 1, 4, 20480, "1g.20gb"],
    "1": [1, 2, 3, 20480, "2g.20gb"], "2": [2, 3, 2, 40960, "3g.40gb"], "3": [3, 4, 1, 40960, "4g.40gb"],
    "4": [4, 7, 1, 81920, "7g.80gb"],
}


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class c_nvmlGpuInstanceProfileInfo_v2_t(Structure):
    _fields_ = [("version", c_uint), ("id", c_uint), ("isP2pSupported", c_uint), ("sliceCount", c_uint),
                ("instanceCount", c_uint), ("multiprocessorCount", c_uint), ("copyEngineCount", c_uint),
                ("decoderCount", c_uint), ("encoderCount", c_uint), ("jpegCount", c_uint),
                ("ofaCount", c_uint), ("memorySizeMB", ctypes.c_ulonglong), ("name", c_char * 96)]

    def __init__(self):
        super().__init__(version=nvmlGpuInstanceProfileInfo_v2)


class struct_c_nvmlGpuInstance_t(Structure):
    pass  # opaque handle


c_nvmlGpuInstance_t = ctypes.POINTER(struct_c_nvmlGpuInstance_t)


def _mig_profiles(device):
    return device["mig_profiles"] if "mig_profiles" in device else H100_80GB_MIG_PROFILES


def nvmlDeviceGetMemoryInfo(handle, version=None):
    """Scenario key ``memory_total_mib`` (default: 81920 on a device with a ``mig`` key, the H100 of
    the profile table; NotSupported otherwise)."""
    device = _device(handle, "nvmlDeviceGetMemoryInfo")
    total = device.get("memory_total_mib", 81920 if isinstance(device.get("mig"), dict) else None)
    memory = c_nvmlMemory_t()
    memory.total = int(_value({"total": total}, "total")) * 1024 * 1024
    memory.used = 0
    memory.free = memory.total
    return memory


def nvmlDeviceGetGpuInstanceProfileInfo(device, profile, version=2):
    """Invalid Argument past NVML_GPU_INSTANCE_PROFILE_COUNT, NotSupported for a profile the board
    lacks (and for every profile of a GPU without MIG), as the library answers."""
    dev = _device(device, "nvmlDeviceGetGpuInstanceProfileInfo")
    if profile >= NVML_GPU_INSTANCE_PROFILE_COUNT:
        _raise("INVALID_ARGUMENT")
    entry = _mig_profiles(dev).get(str(profile)) if isinstance(dev.get("mig"), dict) else None
    if entry is None:
        _raise("NOT_SUPPORTED")
    if isinstance(entry, (str, int)):  # an error this profile index answers (node_capture records them)
        _raise(entry)
    info = c_nvmlGpuInstanceProfileInfo_v2_t()
    info.id, info.sliceCount, info.instanceCount, info.memorySizeMB = entry[0], entry[1], entry[2], entry[3]
    info.isP2pSupported = 1
    info.name = ("MIG " + entry[4]).encode()
    return info


nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo


def nvmlDeviceGetGpuInstances(device, profileId, gpuInstancesRef, countRef):
    """Fills ``countRef`` (byref(c_uint)) with the GPU instances of ``profileId`` the device's
    ``mig.instances`` (profile names) hold; Insufficient Size when the array is too small and
    Invalid Argument for an unknown profile id, like the library."""
    dev = _device(device, "nvmlDeviceGetGpuInstances")
    mig = _value(dev, "mig")
    if not _value(mig, "current"):
        _raise("NOT_SUPPORTED")  # no MIG mode: no GPU instance can be listed
    names = [entry[4] for entry in _mig_profiles(dev).values() if isinstance(entry, list) and entry[0] == profileId]
    if not names:
        _raise("INVALID_ARGUMENT")
    found = sum(1 for name in mig.get("instances", []) if name == names[0])
    if found > len(gpuInstancesRef):
        _raise("INSUFFICIENT_SIZE")
    count = getattr(countRef, "_obj", countRef)
    count.value = found
    return NVML_SUCCESS


def _fill_fabric(device, gpuFabricInfo, func):
    fabric = _value(_device(device, func), "fabric")
    info = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)  # byref(struct) or struct
    info.state = _value(fabric, "state")
    info.status = _value(fabric, "status")
    info.cliqueId = fabric.get("clique_id", 0)
    return NVML_SUCCESS


def nvmlDeviceGetGpuFabricInfo(device, gpuFabricInfo):
    return _fill_fabric(device, gpuFabricInfo, "nvmlDeviceGetGpuFabricInfo")


def nvmlDeviceGetGpuFabricInfoV(device, gpuFabricInfo):
    return _fill_fabric(device, gpuFabricInfo, "nvmlDeviceGetGpuFabricInfoV")


_FIELDS = {NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: "recovery_action", NVML_FI_DEV_NVLINK_LINK_COUNT: None}


def nvmlDeviceGetFieldValues(handle, fieldIds):
    device = _device(handle, "nvmlDeviceGetFieldValues")
    values = (c_nvmlFieldValue_t * len(fieldIds))()
    for i, field_id in enumerate(fieldIds):
        values[i].fieldId = field_id
        values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT
        if field_id == NVML_FI_DEV_NVLINK_LINK_COUNT:
            links = device.get("nvlink")
            value = len(links) if isinstance(links, list) else None
        else:
            key = _FIELDS.get(field_id)
            value = device.get(key) if key else None
        if value is None:
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        elif isinstance(value, str):
            values[i].nvmlReturn = globals()["NVML_ERROR_" + value]
        else:
            values[i].nvmlReturn = NVML_SUCCESS
            values[i].value.uiVal = int(value)
    return values



# -- events (nvmlEventSet*: the agent's NvmlEventWatcher) ---------------------------------
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypeNone = 0x0000000000000000
nvmlEventTypeAll = (nvmlEventTypeNone | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError
                    | nvmlEventTypePState | nvmlEventTypeClock | nvmlEventTypeXidCriticalError)


class c_nvmlEventSet_t(object):
    """Opaque event set (the real one is a ctypes pointer): the events queued for it."""

    def __init__(self):
        import threading

        self.registered = {}  # device index -> event type mask
        self.queue = []
        self.cond = threading.Condition()
        self.freed = False


class c_nvmlEventData_t(object):
    """The fields of nvidia-ml-py's c_nvmlEventData_t (device, eventType, eventData = the XID for
    nvmlEventTypeXidCriticalError, gpuInstanceId, computeInstanceId); a plain object here because
    the fake's device handle is not a ctypes pointer."""

    def __init__(self, device, eventType, eventData, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF):
        self.device = device
        self.eventType = eventType
        self.eventData = eventData
        self.gpuInstanceId = gpuInstanceId
        self.computeInstanceId = computeInstanceId


_EVENT_SETS = []


def nvmlEventSetCreate():
    if not _STATE["initialised"]:
        _raise("UNINITIALIZED")
    _injected("nvmlEventSetCreate")
    event_set = c_nvmlEventSet_t()
    _EVENT_SETS.append(event_set)
    return event_set


def _supported_event_types(device):
    """Every type, less the ECC ones on a GPU with ECC off or without ECC (NVML API reference,
    nvmlDeviceRegisterEvents: "ECC events are available only on ECC-enabled devices")."""
    ecc = device.get("ecc")
    if not isinstance(ecc, dict) or ecc.get("mode_current") != 1:
        return nvmlEventTypeAll & ~(nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError)
    return nvmlEventTypeAll


def nvmlDeviceGetSupportedEventTypes(handle):
    return _supported_event_types(_device(handle, "nvmlDeviceGetSupportedEventTypes"))


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    """NOT_SUPPORTED for a mask with a type the GPU does not support (NVML API reference), also
    where the binding is made to lack nvmlDeviceGetSupportedEventTypes (missing_functions)."""
    device = _device(handle, "nvmlDeviceRegisterEvents")  # per-device or top-level errors apply
    if int(eventTypes) & ~_supported_event_types(device):
        _raise("NOT_SUPPORTED")
    with eventSet.cond:
        eventSet.registered[handle.index] = eventSet.registered.get(handle.index, 0) | int(eventTypes)


def nvmlEventSetWait_v2(eventSet, timeoutms):
    """The next event of the set, waiting at most ``timeoutms``; NVMLError TIMEOUT when none came."""
    _injected("nvmlEventSetWait_v2")
    with eventSet.cond:
        if not eventSet.queue:
            eventSet.cond.wait(max(0, timeoutms) / 1000.0)
        if eventSet.freed:
            _raise("UNINITIALIZED")
        if not eventSet.queue:
            _raise("TIMEOUT")
        return eventSet.queue.pop(0)


def nvmlEventSetWait(eventSet, timeoutms):
    return nvmlEventSetWait_v2(eventSet, timeoutms)


def nvmlEventSetFree(eventSet):
    with eventSet.cond:
        eventSet.freed = True
        eventSet.cond.notify_all()
    if eventSet in _EVENT_SETS:
        _EVENT_SETS.remove(eventSet)


def inject_event(index, xid, event_type=nvmlEventTypeXidCriticalError):
    """Test helper (not in nvidia-ml-py): device ``index`` reports ``event_type`` with eventData
    ``xid`` to every event set registered for it; returns the number of sets told."""
    told = 0
    for event_set in list(_EVENT_SETS):
        with event_set.cond:
            if event_set.registered.get(index, 0) & event_type:
                event_set.queue.append(c_nvmlEventData_t(c_nvmlDevice_t(index), event_type, xid))
                event_set.cond.notify_all()
                told += 1
    return told

__all__ = [name for name in list(globals()) if name.startswith(("nvml", "NVML", "c_nvml"))]

if os.environ.get("GPUFLEET_FAKE_NVML_SCENARIO"):
    set_scenario(os.environ["GPUFLEET_FAKE_NVML_SCENARIO"])
    _STATE.update({"path": os.environ["GPUFLEET_FAKE_NVML_SCENARIO"],
                   "identity": _file_identity(os.environ["GPUFLEET_FAKE_NVML_SCENARIO"])})
