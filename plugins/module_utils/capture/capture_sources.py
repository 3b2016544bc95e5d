# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a capture records besides the tree (module node_capture, docs/capture.md): every NVML query
the GPU family makes, through a recording proxy of the binding (``NvmlRecorder``, ``record_nvml``),
written in the fake NVML's scenario format; the kernel-log lines the XID reader uses
(``kernel_log_lines``, by the walk's link rule); ``ofed_info -s`` on the host's own root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils.capture.capture_walk import _under, inside_root

# -- NVML -------------------------------------------------------------------------------------
_MISSING = object()
_THRESHOLDS = {0: "shutdown", 1: "slowdown", 2: "mem_max", 3: "gpu_max"}
_PCIE = {
    "nvmlDeviceGetCurrPcieLinkGeneration": "current_gen",
    "nvmlDeviceGetCurrPcieLinkWidth": "current_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "max_gen",
    "nvmlDeviceGetMaxPcieLinkWidth": "max_width",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": "gpu_max_gen",
}
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class _Call(object):
    __slots__ = ("name", "args", "result", "error", "extra")

    def __init__(self, name, args):
        self.name, self.args, self.result, self.error, self.extra = name, args, None, None, None


class NvmlRecorder(object):
    """A stand-in for the binding module that passes every attribute through and records each
    ``nvml*`` call (device handles as their index, the answer or the error's NVML code) and every
    name the binding lacks; ``scenario()`` turns the record into a fake NVML scenario."""

    def __init__(self, binding):
        self._binding = binding
        self._calls = []
        self._missing = set()
        self._handles = {}
        self._keep = []  # the handles, alive while recorded by id()
        self._bytes = False

    def __dir__(self):
        return dir(self._binding)

    def __getattr__(self, name):
        value = getattr(self._binding, name, _MISSING)
        if value is _MISSING:
            self._missing.add(name)
            raise AttributeError(name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            return self._wrap(name, value)
        return value

    def _wrap(self, name, func):
        def call(*args):
            record = _Call(name, [self._handles.get(id(arg), arg) if i == 0 else arg for i, arg in enumerate(args)])
            self._calls.append(record)
            try:
                result = func(*args)
            except Exception as exc:
                record.error = exc
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles[id(result)] = args[0]
                self._keep.append(result)
            if isinstance(result, bytes):
                self._bytes = True
            record.result = result
            if name.startswith("nvmlDeviceGetGpuFabricInfo") and len(args) > 1:
                info = getattr(args[1], "_obj", args[1])
                record.extra = {"state": int(info.state), "status": int(info.status),
                                "clique_id": int(getattr(info, "cliqueId", 0))}
            if name == "nvmlDeviceGetGpuInstances" and len(args) > 3:
                record.extra = int(getattr(args[3], "_obj", args[3]).value)  # the instances found
            return result
        return call

    @property
    def calls(self):
        return len(self._calls)

    def _error_name(self, exc):
        code = getattr(exc, "value", None)
        if not isinstance(code, int):
            return "UNKNOWN", "%s: %s" % (type(exc).__name__, exc)
        for attr in dir(self._binding):
            if attr.startswith("NVML_ERROR_") and getattr(self._binding, attr, None) == code:
                return attr[len("NVML_ERROR_"):], None
        return code, None

    def scenario(self, description):
        """The fake NVML scenario of the recorded calls, and notes on what could not be expressed."""
        notes = []
        data = {"description": description}
        errors = {}
        devices = {}
        count = None
        for call in self._calls:
            if call.name == "nvmlShutdown":
                continue
            error = None
            if call.error is not None:
                error, note = self._error_name(call.error)
                if note:
                    notes.append("%s raised %s: replayed as NVML_ERROR_UNKNOWN" % (call.name, note))
            if call.name in ("nvmlInit", "nvmlInitWithFlags"):
                if error is not None:
                    errors["nvmlInit"] = error
                continue
            if call.name.startswith("nvmlSystem"):
                key = {"nvmlSystemGetDriverVersion": "driver_version",
                       "nvmlSystemGetCudaDriverVersion": "cuda_driver_version",
                       "nvmlSystemGetCudaDriverVersion_v2": "cuda_driver_version"}.get(call.name)
                if key is None:
                    notes.append("%s: not expressible in a scenario" % call.name)
                elif error is not None:
                    errors["nvmlSystemGetCudaDriverVersion" if key == "cuda_driver_version" else call.name] = error
                else:
                    data[key] = _text(call.result)
                continue
            if call.name == "nvmlDeviceGetCount":
                if error is not None:
                    errors["nvmlDeviceGetCount"] = error
                else:
                    count = int(call.result)
                continue
            index = call.args[0] if call.args else None
            if not isinstance(index, int):
                notes.append("%s: device not identified, not recorded" % call.name)
                continue
            device = devices.setdefault(index, {})
            self._device_call(device, call, error, notes)
        data["devices"] = [_clean_device(devices.get(i, {})) for i in range(count or 0)]
        if count is None and devices:
            notes.append("device answers recorded without a device count")
        if errors:
            data["errors"] = errors
        missing = sorted(self._missing)
        if missing:
            data["missing_functions"] = [m for m in missing if m.startswith("nvml")]
            data["missing_constants"] = [m for m in missing if not m.startswith("nvml")]
        if self._bytes:
            data["bytes_strings"] = True
        return data, notes

    def _device_call(self, device, call, error, notes):
        name, args, result = call.name, call.args, call.result
        errs = device.setdefault("errors", {})

        def slot_error():
            if isinstance(error, str):
                return error
            notes.append("%s: NVML code %s in one slot replayed as NVML_ERROR_UNKNOWN" % (name, error))
            return "UNKNOWN"

        def slot(container, key, value):
            device.setdefault(container, {})[key] = slot_error() if error is not None else value

        if name == "nvmlDeviceGetHandleByIndex":
            if error is not None:
                errs[name] = error
        elif name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial"):
            key = name[len("nvmlDeviceGet"):].lower()
            if error is not None:
                errs[name] = error
            else:
                device[key] = _text(result)
        elif name.startswith("nvmlDeviceGetPciInfo"):
            if error is not None:
                errs["nvmlDeviceGetPciInfo"] = error
            else:
                device["pci_bus_id"] = _text(getattr(result, "busId", None) or getattr(result, "busIdLegacy", ""))
                if getattr(result, "pciDeviceId", None) is not None:
                    device["pci_device_id"] = "0x%08x" % int(result.pciDeviceId)
        elif name in ("nvmlDeviceGetPersistenceMode", "nvmlDeviceGetTemperature",
                      "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            key = {"nvmlDeviceGetPersistenceMode": "persistence_mode",
                   "nvmlDeviceGetTemperature": "temperature"}.get(name, "clocks_event_reasons")
            if error is not None:
                errs[name] = error
            else:
                device[key] = _number(result)
        elif name == "nvmlDeviceGetTemperatureThreshold":
            slot("temperature_thresholds", _THRESHOLDS.get(args[1], str(args[1])), _number(result))
        elif name == "nvmlDeviceGetEccMode":
            if error is not None:
                errs[name] = error
            else:
                device.setdefault("ecc", {}).update({"mode_current": _number(result[0]),
                                                     "mode_pending": _number(result[1])})
        elif name == "nvmlDeviceGetTotalEccErrors":
            key = "%s_%s" % ("volatile" if args[2] == 0 else "aggregate",
                             "uncorrected" if args[1] == 1 else "corrected")
            slot("ecc", key, _number(result))
        elif name == "nvmlDeviceGetRetiredPages":
            slot("retired_pages", "sbe" if args[1] == 0 else "dbe", None if error is not None else len(result))
        elif name == "nvmlDeviceGetRetiredPagesPendingStatus":
            slot("retired_pages", "pending", _number(result))
        elif name == "nvmlDeviceGetRemappedRows":
            if error is not None:
                errs[name] = error
            else:
                device["remapped_rows"] = dict(zip(("correctable", "uncorrectable", "pending", "failure"),
                                                   [_number(x) for x in result]))
        elif name in _PCIE:
            if error is not None:
                errs[name] = error
            else:
                device.setdefault("pcie", {})[_PCIE[name]] = _number(result)
        elif name == "nvmlDeviceGetNvLinkState":
            links = device.setdefault("nvlink", [])
            link = int(args[1])
            while len(links) <= link:
                links.append("NOT_SUPPORTED")
            links[link] = slot_error() if error is not None else _number(result)
        elif name == "nvmlDeviceGetMigMode":
            if error is not None:
                errs[name] = error
            else:
                device["mig"] = {"current": _number(result[0]), "pending": _number(result[1])}
        elif name == "nvmlDeviceGetMemoryInfo":
            if error is not None:
                errs[name] = error
            else:
                device["memory_total_mib"] = int(result.total) // (1024 * 1024)
        elif name.startswith("nvmlDeviceGetGpuInstanceProfileInfo"):
            # one slot per NVML_GPU_INSTANCE_PROFILE_* index: [id, sliceCount, instanceCount,
            # memorySizeMB, name] or the error that index answered (NotSupported: not on this GPU)
            profiles = device.setdefault("mig_profiles", {})
            if error is not None:
                profiles[str(args[1])] = slot_error()
            else:
                label = _text(getattr(result, "name", b"")) or ""
                profiles[str(args[1])] = [int(result.id), int(result.sliceCount), int(result.instanceCount),
                                          int(result.memorySizeMB), label.replace("MIG ", "") or "profile%d" % int(result.id)]
        elif name == "nvmlDeviceGetGpuInstances":
            mig = device.setdefault("mig", {})
            if error is not None:
                errs[name] = error
                return
            names = [p[4] for p in device.get("mig_profiles", {}).values() if isinstance(p, list) and p[0] == int(args[1])]
            mig.setdefault("instances", []).extend(names[:1] * int(call.extra or 0))
        elif name.startswith("nvmlDeviceGetGpuFabricInfo"):
            if error is not None:
                errs[name] = error
            elif call.extra:
                device["fabric"] = call.extra
        elif name == "nvmlDeviceGetFieldValues":
            if error is not None:
                errs[name] = error
                return
            for value in result:
                if int(getattr(value, "fieldId", -1)) != int(getattr(self._binding, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)):
                    notes.append("nvmlDeviceGetFieldValues field %s: not expressible" % getattr(value, "fieldId", None))
                    continue
                ret = int(getattr(value, "nvmlReturn", 0))
                if ret == 0:
                    member = _VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")
                    device["recovery_action"] = _number(getattr(value.value, member))
                elif ret != int(getattr(self._binding, "NVML_ERROR_NOT_SUPPORTED", 3)):
                    code, _note = self._error_name(type("E", (Exception,), {"value": ret})())
                    device["recovery_action"] = code
        else:
            notes.append("%s: not expressible in a scenario" % name)


def _clean_device(device):
    if not device.get("errors"):
        device.pop("errors", None)
    links = device.get("nvlink")
    if links is not None:
        while links and links[-1] == "NOT_SUPPORTED":
            links.pop()
        if not links:
            device.pop("nvlink")
    return device


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return value


def _number(value):
    """A JSON-safe reading: ints of ctypes values, str of bytes."""
    if isinstance(value, bool) or isinstance(value, (int, float)) or value is None:
        return value
    if isinstance(value, bytes):
        return _text(value)
    inner = getattr(value, "value", _MISSING)
    if inner is not _MISSING and isinstance(inner, (int, float)):
        return inner
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def record_nvml(reader, facts, binding_path=None, binding=None, description="captured"):
    """Run the GPU family over the captured tree (``reader``, ``facts``: its gpu facts) with a
    recording binding: (scenario or None, status dict). ``binding``: the module to wrap (tests
    pass the fake); None imports the node's ``pynvml`` (from ``binding_path`` first) as the GPU
    family does."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import FAMILY, check_gpu_health
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter

    if binding is None:
        try:
            binding = NvmlAdapter(binding_path=binding_path).binding
        except ImportError as exc:
            return None, {"recorded": False, "reason": "the NVML Python binding is not importable (%s): "
                                                       "replays as binding missing" % exc}
    recorder = NvmlRecorder(binding)
    adapter = NvmlAdapter(pynvml_module=recorder)
    try:
        check_gpu_health(facts, adapter, FAMILY.defaults({}), None, reader=reader)
    finally:
        adapter.shutdown()
    scenario, notes = recorder.scenario(description)
    return scenario, {"recorded": True, "calls": recorder.calls, "devices": len(scenario["devices"]),
                      "notes": notes}


# -- kernel log, ofed_info ----------------------------------------------------------------------
def kernel_log_lines(root, runner, source, window_hours, now):
    """(NVRM lines of the window, status): what the GPU family's XID reader would see."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import read_kernel_log
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import Context
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import parse_timestamp

    ctx = Context(root, runner=runner, now=now)
    xid = read_kernel_log({"xid_source": source, "root": root, "xid_window_hours": window_hours}, ctx)
    if xid.error is not None:
        return None, {"recorded": False, "error": xid.error}
    since = now - float(window_hours) * 3600.0
    lines = []
    for line in xid.lines:
        if "NVRM" not in line:
            continue
        stamp = parse_timestamp(line.strip(), now)
        if stamp is None or stamp >= since:
            lines.append(line)
    origin = xid.origin
    if origin and os.path.isabs(origin) and not inside_root(root, origin):
        return None, {"recorded": False, "error": "the kernel log file %s leads out of root (a link): "
                                                  "not read (the capture's link rule)" % (
                                                      os.sep + os.path.relpath(origin, root)
                                                      if _under(origin, root.rstrip(os.sep)) else "below root")}
    if origin and os.path.isabs(origin) and _under(origin, root.rstrip(os.sep)):
        origin = os.sep + os.path.relpath(origin, root)  # the file as the node names it, not where root is
    return lines, {"recorded": True, "origin": origin, "lines": len(lines), "truncated": xid.truncated,
                   "window_hours": window_hours}


def ofed_info_output(root, runner, ofed_info=None):
    """``ofed_info -s`` as mlx5_facts runs it (only for the host's own root), or None."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import OFED_INFO_TIMEOUT

    if ofed_info is None:
        if os.path.realpath(root) != os.sep or runner is None:
            return None
        ofed_info = runner.which("ofed_info")
    if not ofed_info:
        return None
    answer = runner.run([ofed_info, "-s"], timeout=OFED_INFO_TIMEOUT)
    return {"rc": answer.rc, "stdout": answer.stdout}
