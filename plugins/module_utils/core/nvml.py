# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small adapter over the NVML Python binding (nvidia-ml-py, imported as ``pynvml``).

- ``pynvml`` is imported lazily, on first use; a missing module is reported, never raised.
- NVML is initialised once per adapter; ``start()`` answers a dict for ``nvml`` in results.
- Strings from old bindings (bytes) are converted to str.
- Errors are mapped: NotSupported / FunctionNotFound, or a function or constant missing from
  an older binding, give the UNSUPPORTED sentinel (that one optional check skips); GpuIsLost and
  ResetRequired raise GpuLost (that one device fails gpu.lost); any other NVML error (and any
  other exception out of the binding) raises NvmlCallError: the reading applies but could not
  be taken, so the check fails "could not be measured" (docs/contracts.md#fail-closed-checks).
  Both exceptions carry ``call`` (``nvmlDeviceGetHandleByIndex(3)``), ``error`` (the binding's
  text and the NVML_ERROR_* name: ``Unknown Error (NVML_ERROR_UNKNOWN)``) and ``code``;
  ``str(exc)`` is ``<call>: <error>``, the ``error`` key of the failing check.

The module is injectable (``NvmlAdapter(pynvml_module=fake)``) so tests pass a fake directly.
``binding_path`` (the GPU family's option ``nvml_binding_path``) is a directory searched first
for the binding: for hosts whose nvidia-ml-py lives outside the module interpreter's
site-packages. Unlike ``PYTHONPATH`` in a task's ``environment``, it also works when modules run
in an interpreter that is already started (Mitogen's strategies, docs/performance.md).
"""

from __future__ import absolute_import, division, print_function

import ctypes
import importlib
import os
import sys

BINDING_HINT = "install nvidia-ml-py (imported as pynvml)"

# NVML return codes (nvml.h); the binding's own constants are preferred when present.
_CODES = {
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "DRIVER_NOT_LOADED": 9,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "LIB_RM_VERSION_MISMATCH": 18,
}

# error_kind values of start(): each has its own message for gpu.nvml.
INIT_MESSAGES = {
    "binding_missing": "the NVML Python binding is not importable: " + BINDING_HINT,
    "library_not_found": "NVML shared library libnvidia-ml.so.1 not found "
                         "(NVIDIA driver user-space libraries not installed)",
    "driver_not_loaded": "NVIDIA kernel driver not loaded (NVML answers Driver Not Loaded)",
    "version_mismatch": "NVIDIA driver/library version mismatch: the loaded kernel module and "
                        "libnvidia-ml differ (driver upgraded without reboot or module reload)",
    "no_permission": "no permission to open the NVIDIA device nodes",
    "error": "NVML initialisation failed",
}


class _Unsupported(object):
    """Sentinel: the query is not supported by this GPU, driver or binding."""

    def __init__(self, reason="not supported"):
        self.reason = reason

    def __bool__(self):
        return False

    __nonzero__ = __bool__

    def __repr__(self):
        return "UNSUPPORTED(%s)" % self.reason


UNSUPPORTED = _Unsupported()


def is_unsupported(value):
    return isinstance(value, _Unsupported)


class NvmlError(Exception):
    """An NVML call that failed: ``call`` (with its index argument where it names a device),
    ``error`` (text and NVML_ERROR_* name) and ``code`` (the NVML return code, or None when the
    exception did not come from NVML)."""

    def __init__(self, call, error, code=None):
        Exception.__init__(self, "%s: %s" % (call, error))
        self.call = call
        self.error = error
        self.code = code


class GpuLost(NvmlError):
    """The device answered GpuIsLost or ResetRequired."""


class NvmlCallError(NvmlError):
    """Any other NVML error on one call (the check could not be measured: it fails)."""


def to_text(value):
    """str from str or bytes (bindings before 11.515 return bytes); other values unchanged."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return value


def _inside(path, directory):
    """Whether the file ``path`` lies below ``directory``."""
    if not path:
        return False
    directory = os.path.realpath(directory)
    return os.path.realpath(path).startswith(directory.rstrip(os.sep) + os.sep)


class NvmlAdapter(object):
    """Lazy, error-mapping wrapper around a pynvml module."""

    def __init__(self, pynvml_module=None, module_name="pynvml", binding_path=None):
        self._nvml = pynvml_module
        self._module_name = module_name
        self._binding_path = binding_path
        self._info = None
        self._handles = {}
        self._code_names = None  # (binding, {code: name} or None): _code_table

    # -- module and constants ------------------------------------------------------------
    @property
    def binding(self):
        if self._nvml is None:
            self._nvml = self._import()
        return self._nvml

    def _import(self):
        """The binding; with ``binding_path``, imported from that directory first (sys.path is
        restored afterwards; a binding already imported from elsewhere is not reused)."""
        if not self._binding_path:
            return importlib.import_module(self._module_name)
        if not os.path.isdir(self._binding_path):
            raise ImportError("nvml_binding_path %s is not a directory" % self._binding_path)
        loaded = sys.modules.get(self._module_name)
        if loaded is not None and not _inside(getattr(loaded, "__file__", None), self._binding_path):
            del sys.modules[self._module_name]
        sys.path.insert(0, self._binding_path)
        try:
            return importlib.import_module(self._module_name)
        finally:
            sys.path.remove(self._binding_path)

    def const(self, name, default=None):
        """A constant of the binding, or ``default`` when this binding does not define it."""
        return getattr(self.binding, name, default)

    def _code(self, name):
        return getattr(self.binding, "NVML_ERROR_" + name, _CODES[name])

    def _error_code(self, exc):
        return getattr(exc, "value", None)

    def _is_nvml_error(self, exc):
        base = getattr(self.binding, "NVMLError", None)
        return base is not None and isinstance(exc, base)  # pylint: disable=isinstance-second-argument-not-valid-type

    # -- lifecycle -----------------------------------------------------------------------
    def start(self):
        """Initialise NVML once. Returns {available, error, error_kind, driver_version,
        cuda_driver_version, call_errors}; never raises. ``call_errors``: ``<call>: <error>`` of
        every failed call (nvmlInit, and the system queries after it, which must not fail either:
        gpu.nvml fails on them)."""
        if self._info is not None:
            return self._info
        info = {"available": False, "error": None, "error_kind": None,
                "driver_version": None, "cuda_driver_version": None, "call_errors": []}
        self._info = info
        try:
            binding = self.binding
        except ImportError as exc:
            info["error_kind"] = "binding_missing"
            info["error"] = "%s (%s)" % (INIT_MESSAGES["binding_missing"], exc)
            return info
        try:
            binding.nvmlInit()
        except Exception as exc:
            kind = self._init_error_kind(exc)
            info["error_kind"] = kind
            info["error"] = "%s (%s: %s)" % (INIT_MESSAGES[kind], type(exc).__name__, exc)
            info["call_errors"].append(str(self.error_for("nvmlInit", exc)))
            return info
        info["available"] = True
        version = self._system_query("nvmlSystemGetDriverVersion", info)
        info["driver_version"] = None if version is None else str(version)
        info["cuda_driver_version"] = format_cuda_version(
            self._system_query("nvmlSystemGetCudaDriverVersion", info))
        return info

    def _system_query(self, name, info):
        try:
            value = self.call(name)
        except NvmlError as exc:
            info["call_errors"].append(str(exc))
            return None
        return None if is_unsupported(value) else value

    def _init_error_kind(self, exc):
        if not self._is_nvml_error(exc):
            return "error"
        code = self._error_code(exc)
        if code == self._code("LIBRARY_NOT_FOUND"):
            return "library_not_found"
        if code == self._code("DRIVER_NOT_LOADED"):
            return "driver_not_loaded"
        if code == self._code("LIB_RM_VERSION_MISMATCH"):
            return "version_mismatch"
        if code == self._code("NO_PERMISSION"):
            return "no_permission"
        return "error"

    def shutdown(self):
        if self._info and self._info.get("available"):
            try:
                self.binding.nvmlShutdown()
            except Exception:
                pass
        self._info = None
        self._handles = {}

    # -- calls ---------------------------------------------------------------------------
    def call(self, name, *args):
        """Call ``pynvml.<name>(*args)`` with the error mapping described above."""
        func = getattr(self.binding, name, None)
        if func is None:
            return _Unsupported("%s missing from this nvidia-ml-py binding" % name)
        try:
            return to_text(func(*args))
        except AttributeError as exc:
            # Some bindings reference structures/functions they do not define.
            return _Unsupported("%s: %s" % (name, exc))
        except Exception as exc:
            if type(exc).__name__ == "NVMLLibraryMismatchError":
                return _Unsupported("%s: %s" % (name, exc))
            mapped = self.error_for(name, exc, unsupported_ok=True)
            if is_unsupported(mapped):
                return mapped
            raise mapped

    def error_for(self, call, exc, unsupported_ok=False):
        """The NvmlError for ``exc`` raised by ``call``: GpuLost for GpuIsLost / ResetRequired,
        NvmlCallError otherwise; with ``unsupported_ok`` NotSupported / FunctionNotFound give
        the UNSUPPORTED sentinel instead (returned, not an exception)."""
        if not self._is_nvml_error(exc):
            return NvmlCallError(call, "%s: %s" % (type(exc).__name__, exc))
        code = self._error_code(exc)
        text = self.describe(exc)
        if unsupported_ok and code in (self._code("NOT_SUPPORTED"), self._code("FUNCTION_NOT_FOUND")):
            return _Unsupported("%s: %s" % (call, text))
        if code in (self._code("GPU_IS_LOST"), self._code("RESET_REQUIRED")):
            return GpuLost(call, text, code)
        return NvmlCallError(call, text, code)

    def describe(self, exc_or_code):
        """``Unknown Error (NVML_ERROR_UNKNOWN)``: the binding's text and the constant's name."""
        code = exc_or_code if isinstance(exc_or_code, int) else self._error_code(exc_or_code)
        name = self.code_name(code)
        if isinstance(exc_or_code, int):
            try:
                text = str(self.binding.NVMLError(code))
            except Exception:
                text = None
        else:
            try:
                text = str(exc_or_code)
            except Exception:
                text = None
        if text and name:
            return "%s (%s)" % (text, name)
        return text or name or "NVML return code %s" % code

    def code_name(self, code):
        """``NVML_ERROR_UNKNOWN`` for 999 (from the binding's constants), or None."""
        table = self._code_table()
        if table is not None and type(code) is int:  # pylint: disable=unidiomatic-typecheck
            if code in table:
                return table[code]
        else:
            for attr in dir(self.binding):
                if attr.startswith("NVML_ERROR_") and getattr(self.binding, attr, None) == code:
                    return attr
        for name, value in _CODES.items():
            if value == code:
                return "NVML_ERROR_" + name
        return None

    def _code_table(self):
        """{code: first ``NVML_ERROR_*`` name in ``dir()`` order} of the binding, made once per binding (a
        sweep names a code for each unsupported call: about 160 per DGX node, each a ``dir()`` of the
        binding before); None when a constant is not a plain int, so that the loop's ``==`` decides."""
        binding = self.binding
        if self._code_names is None or self._code_names[0] is not binding:
            table = {}
            for attr in dir(binding):
                if attr.startswith("NVML_ERROR_"):
                    value = getattr(binding, attr, None)
                    if type(value) is not int:  # pylint: disable=unidiomatic-typecheck
                        table = None
                        break
                    table.setdefault(value, attr)
            self._code_names = (binding, table)
        return self._code_names[1]

    def device_count(self):
        """nvmlDeviceGetCount; any failure (NotSupported included) raises NvmlError: the count of
        GPUs on the PCI bus must be confirmed."""
        return self._required("nvmlDeviceGetCount")

    def handle(self, index):
        """nvmlDeviceGetHandleByIndex(index); any failure (NotSupported included) raises
        NvmlError naming ``nvmlDeviceGetHandleByIndex(<index>)``."""
        if index not in self._handles:
            self._handles[index] = self._required("nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def _required(self, name, *args, **kwargs):
        call = kwargs.get("call") or ("%s(%s)" % (name, ", ".join(str(a) for a in args)) if args else name)
        func = getattr(self.binding, name, None)
        if func is None:
            raise NvmlCallError(call, "missing from this nvidia-ml-py binding")
        try:
            return func(*args)
        except Exception as exc:
            raise self.error_for(call, exc)

    def nvlink_states(self, handle):
        """{link: active(bool)} of the links this GPU supports, or UNSUPPORTED when none is.

        NVML answers NotSupported for absent links and Invalid Argument past the last one."""
        max_links = self.const("NVML_NVLINK_MAX_LINKS", 18)
        states = {}
        reason = None
        for link in range(max_links):
            try:
                state = self.call("nvmlDeviceGetNvLinkState", handle, link)
            except NvmlCallError as exc:
                if link == 0 or exc.code != self._code("INVALID_ARGUMENT"):
                    raise
                break  # past the last link
            if is_unsupported(state):
                reason = reason or state
                if getattr(self.binding, "nvmlDeviceGetNvLinkState", None) is None:
                    break
                continue
            states[link] = bool(state)
        if not states:
            return reason or _Unsupported("NVLink not supported")
        return states

    # -- composite queries (structures differ between binding versions) -----------------
    def gpu_instances(self, handle):
        """The GPU instances of a GPU in MIG mode: [(profile index, sliceCount, memorySizeMB)], one
        per instance, and the board's memory (nvmlDeviceGetMemoryInfo ``total``, bytes), read as
        mig-parted reads a layout: every NVML_GPU_INSTANCE_PROFILE_* index through
        nvmlDeviceGetGpuInstanceProfileInfo (NotSupported / Invalid Argument: not a profile of this
        GPU, skipped), then nvmlDeviceGetGpuInstances for each profile. Every call is required (any
        other error, NotSupported included, raises NvmlError); no profile at all raises too."""
        total = int(self._required("nvmlDeviceGetMemoryInfo", handle, call="nvmlDeviceGetMemoryInfo").total)
        count = self.const("NVML_GPU_INSTANCE_PROFILE_COUNT")
        instance_type = self.const("c_nvmlGpuInstance_t")
        if count is None or instance_type is None:
            raise NvmlCallError("nvmlDeviceGetGpuInstances", "MIG structures missing from this nvidia-ml-py binding")
        skipped = (self._code("NOT_SUPPORTED"), self._code("INVALID_ARGUMENT"), self._code("FUNCTION_NOT_FOUND"))
        instances, last_error, profiles = [], None, 0
        for index in range(int(count)):
            try:
                info = self._required("nvmlDeviceGetGpuInstanceProfileInfo", handle, index,
                                      call="nvmlDeviceGetGpuInstanceProfileInfo(profile %d)" % index)
            except NvmlCallError as exc:
                if exc.code not in skipped:
                    raise
                last_error = exc
                continue
            profiles += 1
            found = ctypes.c_uint(0)
            room = (instance_type * max(1, int(info.instanceCount)))()
            self._required("nvmlDeviceGetGpuInstances", handle, info.id, room, ctypes.byref(found),
                           call="nvmlDeviceGetGpuInstances(profile %d)" % index)
            instances.extend([(index, int(info.sliceCount), int(info.memorySizeMB))] * int(found.value))
        if not profiles:
            raise last_error or NvmlCallError("nvmlDeviceGetGpuInstanceProfileInfo", "no GPU-instance profile")
        return instances, total

    def pci_bus_id(self, handle):
        info = self.call("nvmlDeviceGetPciInfo", handle)
        if is_unsupported(info):
            return None
        bus_id = to_text(getattr(info, "busId", None)) or to_text(getattr(info, "busIdLegacy", None))
        return normalize_pci_address(bus_id) if bus_id else None

    def fabric_info(self, handle):
        """{state, status} of the GPU's NVLink fabric registration, or UNSUPPORTED."""
        attempts = (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"))
        result = _Unsupported("GPU fabric info missing from this nvidia-ml-py binding")
        for func_name, struct_name in attempts:
            struct_type = getattr(self.binding, struct_name, None)
            if struct_type is None or getattr(self.binding, func_name, None) is None:
                continue
            struct = struct_type()
            outcome = self.call(func_name, handle, _by_ref(struct))
            if is_unsupported(outcome):
                result = outcome
                continue
            return {"state": int(struct.state), "status": int(struct.status)}
        return result

    def field_value(self, handle, constant_name):
        """Value of one NVML field (nvmlDeviceGetFieldValues), or UNSUPPORTED."""
        field_id = self.const(constant_name)
        if field_id is None:
            return _Unsupported("%s missing from this nvidia-ml-py binding" % constant_name)
        values = self.call("nvmlDeviceGetFieldValues", handle, [field_id])
        if is_unsupported(values):
            return values
        value = values[0]
        ret = int(getattr(value, "nvmlReturn", 0))
        if ret in (self._code("NOT_SUPPORTED"), self._code("FUNCTION_NOT_FOUND")):
            return _Unsupported("%s not supported" % constant_name)
        if ret != 0:
            call = "nvmlDeviceGetFieldValues(%s)" % constant_name
            if ret in (self._code("GPU_IS_LOST"), self._code("RESET_REQUIRED")):
                raise GpuLost(call, self.describe(ret), ret)
            raise NvmlCallError(call, self.describe(ret), ret)
        return _field_number(value)


_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_number(value):
    member = _VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")
    return getattr(value.value, member)


def _by_ref(struct):
    """ctypes.byref for ctypes structures (the real binding), the object itself otherwise."""
    try:
        return ctypes.byref(struct)
    except TypeError:
        return struct


def format_cuda_version(value):
    """12040 -> '12.4' (the form nvidia-smi prints); None when unknown."""
    if value is None or is_unsupported(value):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return "%d.%d" % (number // 1000, (number % 1000) // 10)


def normalize_pci_address(address):
    """'00000000:18:00.0' / '0000:18:00.0' / '18:00.0' -> '0000:18:00.0' (lower case)."""
    if not address:
        return None
    text = to_text(address).strip().lower()
    parts = text.split(":")
    try:
        if len(parts) == 3:
            domain, bus, rest = parts
        elif len(parts) == 2:
            domain, bus, rest = "0", parts[0], parts[1]
        else:
            return text
        device, _dot, function = rest.partition(".")
        result = "%04x:%02x:%02x" % (int(domain, 16), int(bus, 16), int(device, 16))
        if function:
            result += ".%x" % int(function, 16)
        return result
    except ValueError:
        return text
