# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU family of checks (docs/contracts.md, "gpu family"): gpu_health and node_validate.

The family interface of module_utils/core/validation.py: ``GPU_OPTIONS`` (argument spec without
``root`` / ``fail_on``), ``validate_options(options, prefix)`` (list of errors naming the option),
``run(ctx, options)`` (a FamilyResult), all bundled as ``FAMILY``. Per-device checks are a table
of functions over a ``Scope`` (as in rdma_checks).

``check_gpu_health(facts, nvml_adapter, options, xid_lines_or_source, now=None, reader=None)``
returns ``(CheckResults, gpus, nvml_info)``. Node-level checks have target ``node``; per-device
checks have target ``gpu<NVML index>``. A query the GPU, driver or binding does not support
(NotSupported / FunctionNotFound, or missing from the binding) makes that one check ``skip``.
A reading that applies but cannot be taken fails (docs/contracts.md#fail-closed-checks): any
other NVML error fails that check "could not be measured: ..." with the key ``error``
(``<call>: <error>``); nvmlInit, nvmlDeviceGetCount and nvmlDeviceGetHandleByIndex failing in
any way (NotSupported included) fail gpu.nvml / gpu.count / gpu.lost; a lost GPU fails
``gpu.lost`` and its other checks fail as not measured.
NVML always talks to the running kernel driver: ``root`` only redirects sysfs and log reads.
"""

from __future__ import absolute_import, division, print_function

import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults, worst
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import (
    PCI_DEVICES,
    gather_gpu_facts,
    pci_link,
    pci_read_problems,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import (
    describe as describe_mig,
    expected_for,
    layout_errors,
    profile_name,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import (
    GpuLost,
    NvmlError,
    is_unsupported,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.versions import version_matches
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    Family,
    FamilyResult,
    Scope,
    is_finite_number,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import (
    XID_ADVICE,
    XID_FATAL_DEFAULT,
    XID_IGNORE_DEFAULT,
    XID_SOURCE_KEYWORDS,
    XidRead,
    classify,
    parse_xid_lines,
    read_xid_source,
    skew_note,
    xid_file_path,
)

# The options of the GPU family (gpu_health's options other than root / fail_on; node_validate's
# ``gpu`` sub-options).
GPU_OPTIONS = {
    "expected_count": {"type": "int"},
    "expected_driver_version": {"type": "str"},
    "require_persistence_mode": {"type": "bool", "default": False},
    "require_ecc": {"type": "bool", "default": True},
    "temperature_margin_c": {"type": "int", "default": 5},
    "xid_source": {"type": "str", "default": "auto"},
    "xid_window_hours": {"type": "float", "default": 24.0},
    "xid_fatal": {"type": "list", "elements": "int", "default": list(XID_FATAL_DEFAULT)},
    "xid_ignore": {"type": "list", "elements": "int", "default": list(XID_IGNORE_DEFAULT)},
    "nvml_binding_path": {"type": "path"},
    "expected_mig": {"type": "list", "elements": "dict"},
}

NODE_CHECKS = ("gpu.nvml", "gpu.count", "gpu.driver_version")
DEVICE_CHECKS = (
    "gpu.lost", "gpu.ecc.volatile_uncorrectable", "gpu.ecc.mode", "gpu.retired_pages",
    "gpu.row_remap", "gpu.temperature", "gpu.clocks_event", "gpu.pcie", "gpu.nvlink",
    "gpu.persistence", "gpu.mig", "gpu.fabric", "gpu.recovery_action",
)
CHECK_IDS = NODE_CHECKS + DEVICE_CHECKS + ("gpu.xid",)

NO_GPU = "no NVIDIA GPU on the PCI bus"
RETIRED_PAGES_LIMIT = 63  # NVIDIA: a board with 63+ retired pages is due for RMA
REMAP_UNCORRECTABLE_LIMIT = 512

# Clock event reasons (nvmlClocksEventReason*); the binding's constants are used when present.
CLOCK_REASONS = (
    ("GpuIdle", 0x1), ("ApplicationsClocksSetting", 0x2), ("SwPowerCap", 0x4),
    ("HwSlowdown", 0x8), ("SyncBoost", 0x10), ("SwThermalSlowdown", 0x20),
    ("HwThermalSlowdown", 0x40), ("HwPowerBrakeSlowdown", 0x80), ("DisplayClockSetting", 0x100),
)
BAD_CLOCK_REASONS = ("HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
# nvmlGpuFabricState_t: NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0), _NOT_STARTED, _IN_PROGRESS, _COMPLETED
FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
FABRIC_STATE_NOT_SUPPORTED = 0
RECOVERY_ACTIONS = {0: "NONE", 1: "GPU_RESET", 2: "NODE_REBOOT", 3: "DRAIN_P2P",
                    4: "DRAIN_AND_RESET", 5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET",
                    7: "SYSTEM_REBOOT"}


def validate_options(params, prefix=""):
    """Errors (list of strings) naming the bad option as ``option <prefix><name>``."""
    errors = []
    if params.get("expected_count") is not None and params["expected_count"] < 0:
        errors.append("option %sexpected_count must be >= 0, got %s" % (prefix, params["expected_count"]))
    if params.get("temperature_margin_c") is not None and params["temperature_margin_c"] < 0:
        errors.append("option %stemperature_margin_c must be >= 0, got %s"
                      % (prefix, params["temperature_margin_c"]))
    hours = params.get("xid_window_hours")
    if hours is not None and not (is_finite_number(hours) and hours > 0):
        errors.append("option %sxid_window_hours must be > 0, got %s" % (prefix, hours))
    source = params.get("xid_source")
    if source is not None and not source.strip():
        errors.append("option %sxid_source must not be empty (use none to disable the XID scan)" % prefix)
    elif source is not None and source not in XID_SOURCE_KEYWORDS:
        path = xid_file_path(params["root"], source)
        if not os.path.isfile(path):
            errors.append("option %sxid_source: %s is not a file (expected auto, journal, dmesg, none or "
                          "the path of a kernel log)" % (prefix, path))
    if params.get("expected_driver_version") is not None and not params["expected_driver_version"].strip():
        errors.append("option %sexpected_driver_version must not be empty" % prefix)
    elif params.get("expected_driver_version") is not None:
        try:
            version_matches("0", params["expected_driver_version"])
        except ValueError as exc:
            errors.append("option %sexpected_driver_version: %s" % (prefix, exc))
    if params.get("expected_mig") is not None:
        errors.extend(layout_errors(params["expected_mig"], "option %sexpected_mig" % prefix))
    binding_path = params.get("nvml_binding_path")
    if binding_path is not None and not os.path.isdir(binding_path):
        errors.append("option %snvml_binding_path: %s is not a directory" % (prefix, binding_path))
    return errors


def run(ctx, options):
    """The GPU family over a Context: facts, kernel log (only with a GPU on the bus), NVML
    (initialised only with a GPU on the bus), checks. Returns a FamilyResult with
    ``ansible_facts.nvidia`` and the return keys ``gpus`` and ``nvml``."""
    facts = gather_gpu_facts(ctx.reader)
    xid = None
    adapter = None
    if facts["gpu_count"] > 0:
        xid = read_kernel_log(options, ctx)
        adapter = ctx.nvml_adapter(options.get("nvml_binding_path"))
    results, gpus, info = check_gpu_health(facts, adapter, options, xid, now=ctx.now, reader=ctx.reader)
    return FamilyResult(results, facts={"nvidia": facts}, returns={"gpus": gpus, "nvml": info})


def read_kernel_log(options, ctx):
    """The kernel log for gpu.xid (an XidRead), failing closed on a log that reads as empty.

    ``journalctl -k`` run without the rights to read the kernel's messages exits 0 with no output,
    exactly like a quiet window. An empty window is believed only when the journal shows at least
    the last kernel message (``journalctl -k -n 1``); otherwise, with ``xid_source=auto``, the
    kernel ring buffer is tried, and an empty or refused buffer is an error (gpu.xid fails)."""
    source = options["xid_source"]
    xid = read_xid_source(source, ctx.runner, options["root"], options["xid_window_hours"], ctx.now)
    if xid.error is not None or xid.lines or xid.origin not in ("journal", "dmesg"):
        return xid
    if xid.origin == "journal":
        if _journal_has_kernel_messages(ctx.runner):
            return xid
        reason = ("journalctl -k returned no line, not even the last kernel message: the journal's "
                  "kernel messages are not readable by this user (run as root or in the "
                  "systemd-journal or adm group)")
        if source != "auto":
            return XidRead(error=reason)
        dmesg = read_xid_source("dmesg", ctx.runner, options["root"], options["xid_window_hours"], ctx.now)
        if dmesg.error is None and dmesg.lines:
            return dmesg
        return XidRead(error="%s; %s" % (reason, dmesg.error or _EMPTY_DMESG))
    return XidRead(error=_EMPTY_DMESG)


_EMPTY_DMESG = "dmesg returned no line: the kernel ring buffer is unreadable or was cleared"


def _journal_has_kernel_messages(runner):
    journalctl = runner.which("journalctl")
    if not journalctl:
        return False
    result = runner.run([journalctl, "-k", "-n", "1", "-o", "short-iso", "--no-pager", "-q"])
    return result.rc == 0 and bool(result.stdout.strip())


def check_gpu_health(facts, nvml_adapter, options, xid_lines_or_source, *, now=None, reader=None):
    """Evaluate every GPU check (docs/contracts.md, GPU family). ``xid_lines_or_source``: list of log lines, an XidRead,
    or None (not read). ``options``: complete (validation.Family.defaults)."""
    now = time.time() if now is None else now
    results = CheckResults()
    if not facts.get("gpu_count"):
        return _no_gpu(results, options, reader)

    info = dict(nvml_adapter.start())
    public_info = dict((k, info.get(k)) for k in ("available", "error", "driver_version",
                                                  "cuda_driver_version"))
    gpus = []
    device_results = CheckResults()
    nvml_count = None
    count_error = None
    call_errors = info.get("call_errors") or []
    if not info.get("available"):
        check = results.fail("gpu.nvml", "node", _nvml_failure_message(info, facts),
                             observed=info.get("error_kind"))
        error = call_errors[0] if call_errors else info.get("error")
        check["error"] = error
        _not_measured(device_results, "node", DEVICE_CHECKS, "NVML unavailable (%s)" % info.get("error_kind"),
                      error)
    else:
        if call_errors:
            check = results.fail("gpu.nvml", "node", "NVML initialised but answers with errors: %s"
                                 % "; ".join(call_errors))
            check["error"] = "; ".join(call_errors)
        else:
            results.passed("gpu.nvml", "node", "NVML initialised (driver %s, CUDA %s)" % (
                info.get("driver_version"), info.get("cuda_driver_version")))
        try:
            nvml_count = int(nvml_adapter.device_count())
        except NvmlError as exc:
            count_error = str(exc)
        except (TypeError, ValueError) as exc:
            count_error = "nvmlDeviceGetCount: not a number (%s)" % exc
        if count_error is not None:
            nvml_count = None
            _not_measured(device_results, "node", DEVICE_CHECKS, "no device count", count_error)
        for index in range(nvml_count or 0):
            gpu, checks = _check_device(nvml_adapter, index, facts, options, reader)
            gpus.append(gpu)
            device_results.extend(checks)

    pci_problems = pci_read_problems(reader) if reader is not None else []
    _check_count(results, facts, options, nvml_count, gpus, count_error, pci_problems)
    _check_driver_version(results, facts, options, info, reader)
    results.extend(device_results)
    _check_xid(results, options, xid_lines_or_source, gpus, now)
    return results, gpus, public_info


def _not_measured(checks, target, check_ids, reason, error):
    """Fail ``check_ids`` of ``target``: applicable readings that could not be taken."""
    for check_id in check_ids:
        check = checks.fail(check_id, target, "could not be measured: %s" % reason)
        check["error"] = error


def _no_gpu(results, options, reader=None):
    results.skip("gpu.nvml", "node", NO_GPU + ": NVML not queried")
    expected = options.get("expected_count")
    problems = pci_read_problems(reader) if expected and reader is not None else []
    if expected:
        check = results.fail("gpu.count", "node", "%s, expected %d GPU(s)%s" % (
            NO_GPU, expected, "; PCI functions not identified: " + ", ".join(problems) if problems else ""),
            observed=0, expected=expected)
        if problems:
            check["error"] = ", ".join(problems)
    else:
        results.skip("gpu.count", "node", NO_GPU)
    for check_id in CHECK_IDS[2:]:
        results.skip(check_id, "node", NO_GPU)
    info = {"available": False, "error": "not initialised: " + NO_GPU,
            "driver_version": None, "cuda_driver_version": None}
    return results, [], info


def _nvml_failure_message(info, facts):
    message = info.get("error") or "NVML unavailable"
    context = []
    if not facts["driver"]["loaded"]:
        context.append("nvidia kernel module not loaded (/sys/module/nvidia absent)")
    if facts.get("nouveau_loaded"):
        context.append("nouveau is loaded and holds the GPUs")
    text = "%d NVIDIA GPU(s) on the PCI bus but NVML is unusable: %s" % (facts["gpu_count"], message)
    if context:
        text += "; " + "; ".join(context)
    return text


# -- node checks --------------------------------------------------------------------------
def _check_count(results, facts, options, nvml_count, gpus, count_error=None, pci_problems=()):
    pci_count = facts["gpu_count"]
    expected = options.get("expected_count")
    observed = {"nvml": nvml_count, "pci": pci_count}
    wanted = expected if expected is not None else pci_count
    if count_error is not None:
        check = results.fail("gpu.count", "node", "could not be measured: %s (%d GPU(s) on the PCI bus)"
                             % (count_error, pci_count), observed=observed, expected=wanted)
        check["error"] = count_error
        return
    if nvml_count is None:
        if expected is not None and pci_count < expected:
            results.fail("gpu.count", "node", "%d GPU(s) on the PCI bus, expected %d"
                         % (pci_count, expected), observed=observed, expected=expected)
        else:
            results.skip("gpu.count", "node", "NVML device count unavailable (%d on the PCI bus)"
                         % pci_count, observed=observed)
        return
    problems = []
    if nvml_count < pci_count:
        seen = set(gpu["pci_bus_id"] for gpu in gpus if gpu.get("pci_bus_id"))
        missing = [g["pci_address"] for g in facts["pci_gpus"] if g["pci_address"] not in seen]
        text = "NVML sees %d of the %d GPUs on the PCI bus (a GPU fell off the bus)" % (nvml_count, pci_count)
        if missing and seen:
            text += "; missing from NVML: %s" % ", ".join(missing)
        problems.append(text)
    if expected is not None and nvml_count < expected:
        problems.append("NVML sees %d GPU(s), expected %d" % (nvml_count, expected))
    if pci_problems:
        problems.append("could not be measured: PCI functions not identified (a GPU may be hidden): %s"
                        % ", ".join(pci_problems))
    if problems:
        check = results.fail("gpu.count", "node", "; ".join(problems), observed=observed, expected=wanted)
        if pci_problems:
            check["error"] = ", ".join(pci_problems)
    else:
        results.passed("gpu.count", "node", "%d GPU(s) visible to NVML and on the PCI bus" % nvml_count,
                       observed=observed, expected=wanted)


def _driver_matches(version, expected):
    """versions.version_matches (prefix: 580 matches 580.95.05); a driver version that is not a
    version matches nothing (expected_driver_version was checked with the options)."""
    try:
        return version_matches(version, expected)
    except ValueError:
        return False


def _check_driver_version(results, facts, options, info, reader=None):
    version = info.get("driver_version") or facts["driver"].get("version") or None
    origin = "NVML" if info.get("driver_version") else "/sys/module/nvidia/version"
    expected = options.get("expected_driver_version")
    if not expected:
        results.skip("gpu.driver_version", "node", "expected_driver_version not set (driver %s)"
                     % version, observed=version)
    elif version is None:
        # fail closed: the version to compare could be read from neither source
        causes = list(info.get("call_errors") or [])
        if not info.get("available"):
            causes.append("NVML unavailable")
        problem = reader.problem("sys/module/nvidia/version") if reader is not None else None
        causes.append(problem or ("/sys/module/nvidia/version: %s" % (
            "absent" if facts["driver"].get("loaded") else "nvidia module not loaded")))
        check = results.fail("gpu.driver_version", "node", "could not be measured: driver version "
                             "unknown (%s)" % "; ".join(causes), expected=expected)
        check["error"] = "; ".join(causes)
    elif _driver_matches(version, expected):
        results.passed("gpu.driver_version", "node", "driver %s matches %s (%s)"
                       % (version, expected, origin), observed=version, expected=expected)
    else:
        results.fail("gpu.driver_version", "node", "driver %s does not match expected %s (%s)"
                     % (version, expected, origin), observed=version, expected=expected)


# -- per-device checks --------------------------------------------------------------------
def _check_device(adapter, index, facts, options, reader):
    target = "gpu%d" % index
    gpu = {"index": index, "uuid": None, "name": None, "pci_bus_id": None, "lost": False}
    checks = CheckResults()
    try:
        handle = adapter.handle(index)
        identity_errors = []
        for key, query in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName"), ("pci_bus_id", None)):
            try:
                gpu[key] = adapter.pci_bus_id(handle) if query is None else _value(adapter.call(query, handle))
            except GpuLost:
                raise
            except NvmlError as exc:
                identity_errors.append(str(exc))
        if identity_errors:
            check = checks.fail("gpu.lost", target, "could not be measured: the GPU does not answer "
                                "NVML's identity queries: %s" % "; ".join(identity_errors))
            check["error"] = "; ".join(identity_errors)
        else:
            checks.passed("gpu.lost", target, "GPU responds to NVML")
        scope = Scope(checks, options, target, adapter=adapter, handle=handle, gpu=gpu, facts=facts,
                      reader=reader)
        for check_id, func in _DEVICE_CHECK_FUNCS:
            try:
                func(scope)
            except GpuLost:
                raise
            except NvmlError as exc:
                check = checks.fail(check_id, target, "could not be measured: %s" % exc)
                check["error"] = str(exc)
    except GpuLost as exc:
        gpu["lost"] = True
        checks = CheckResults()
        check = checks.fail("gpu.lost", target, "GPU is lost or requires a reset: %s" % exc)
        check["error"] = str(exc)
        _not_measured(checks, target, DEVICE_CHECKS[1:], "GPU is lost (%s)" % exc, str(exc))
    except NvmlError as exc:
        checks = CheckResults()
        check = checks.fail("gpu.lost", target, "could not be measured: no NVML handle: %s" % exc)
        check["error"] = str(exc)
        _not_measured(checks, target, DEVICE_CHECKS[1:], "no NVML handle (%s)" % exc, str(exc))
    return gpu, checks


def _value(value):
    return None if is_unsupported(value) else value


def _unsupported(scope, check_id, value, what):
    scope.checks.skip(check_id, scope.target, "%s not supported (%s)" % (what, value.reason))


def _check_ecc_volatile(scope):
    adapter, checks, target = scope.adapter, scope.checks, scope.target
    count = adapter.call("nvmlDeviceGetTotalEccErrors", scope.handle,
                         adapter.const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                         adapter.const("NVML_VOLATILE_ECC", 0))
    ecc = scope.gpu.setdefault("ecc", {})
    ecc["volatile_uncorrected"] = _value(count)
    if is_unsupported(count):
        return _unsupported(scope, "gpu.ecc.volatile_uncorrectable", count, "ECC error counters")
    if count > 0:
        return checks.fail("gpu.ecc.volatile_uncorrectable", target,
                           "%d volatile uncorrectable ECC error(s) since the driver loaded" % count,
                           observed=count, expected=0)
    return checks.passed("gpu.ecc.volatile_uncorrectable", target, "no volatile uncorrectable ECC error",
                         observed=0, expected=0)


def _check_ecc_mode(scope):
    checks, target = scope.checks, scope.target
    mode = scope.adapter.call("nvmlDeviceGetEccMode", scope.handle)
    ecc = scope.gpu.setdefault("ecc", {})
    if is_unsupported(mode):
        ecc.update({"mode_current": None, "mode_pending": None})
        return _unsupported(scope, "gpu.ecc.mode", mode, "ECC")
    current, pending = bool(mode[0]), bool(mode[1])
    ecc.update({"mode_current": current, "mode_pending": pending})
    observed = {"current": current, "pending": pending}
    if scope.options["require_ecc"] and not current:
        return checks.warn("gpu.ecc.mode", target, "ECC is disabled (require_ecc)",
                           observed=observed, expected=True)
    if current != pending:
        return checks.warn("gpu.ecc.mode", target, "ECC mode change pending (%s -> %s): reset or "
                           "reboot needed" % (_onoff(current), _onoff(pending)), observed=observed)
    return checks.passed("gpu.ecc.mode", target, "ECC %s" % _onoff(current), observed=observed)


def _onoff(flag):
    return "enabled" if flag else "disabled"


def _check_retired_pages(scope):
    adapter, handle, checks, target = scope.adapter, scope.handle, scope.checks, scope.target
    sbe = adapter.call("nvmlDeviceGetRetiredPages", handle,
                       adapter.const("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
    dbe = adapter.call("nvmlDeviceGetRetiredPages", handle,
                       adapter.const("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    if is_unsupported(sbe) or is_unsupported(dbe):
        scope.gpu["retired_pages"] = None
        return _unsupported(scope, "gpu.retired_pages", sbe if is_unsupported(sbe) else dbe,
                            "page retirement")
    pending = _value(adapter.call("nvmlDeviceGetRetiredPagesPendingStatus", handle))
    observed = {"sbe": len(sbe), "dbe": len(dbe), "pending": None if pending is None else bool(pending)}
    scope.gpu["retired_pages"] = observed
    total = len(sbe) + len(dbe)
    if total >= RETIRED_PAGES_LIMIT:
        return checks.fail("gpu.retired_pages", target, "%d retired pages (limit %d): replace the board"
                           % (total, RETIRED_PAGES_LIMIT), observed=observed)
    if pending:
        return checks.warn("gpu.retired_pages", target, "page retirement pending: reset or reboot needed",
                           observed=observed)
    return checks.passed("gpu.retired_pages", target, "%d retired page(s)" % total, observed=observed)


def _check_row_remap(scope):
    checks, target = scope.checks, scope.target
    rows = scope.adapter.call("nvmlDeviceGetRemappedRows", scope.handle)
    if is_unsupported(rows):
        scope.gpu["row_remap"] = None
        return _unsupported(scope, "gpu.row_remap", rows, "row remapping")
    correctable, uncorrectable, pending, failure = [int(x) for x in rows]
    observed = {"correctable": correctable, "uncorrectable": uncorrectable,
                "pending": bool(pending), "failure": bool(failure)}
    scope.gpu["row_remap"] = observed
    if failure:
        return checks.fail("gpu.row_remap", target, "row remapping failed: replace the board",
                           observed=observed)
    if pending:
        return checks.warn("gpu.row_remap", target, "row remap pending: GPU reset needed", observed=observed)
    if uncorrectable >= REMAP_UNCORRECTABLE_LIMIT:
        return checks.warn("gpu.row_remap", target, "%d rows remapped for uncorrectable errors (>= %d)"
                           % (uncorrectable, REMAP_UNCORRECTABLE_LIMIT), observed=observed)
    return checks.passed("gpu.row_remap", target, "%d correctable / %d uncorrectable remapped row(s)"
                         % (correctable, uncorrectable), observed=observed)


def _check_temperature(scope):
    adapter, handle, checks, target = scope.adapter, scope.handle, scope.checks, scope.target
    temp = adapter.call("nvmlDeviceGetTemperature", handle, adapter.const("NVML_TEMPERATURE_GPU", 0))
    slowdown = adapter.call("nvmlDeviceGetTemperatureThreshold", handle,
                            adapter.const("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1))
    scope.gpu["temperature_c"] = _value(temp)
    scope.gpu["slowdown_temperature_c"] = _value(slowdown)
    if is_unsupported(temp):
        return _unsupported(scope, "gpu.temperature", temp, "GPU temperature")
    if not is_finite_number(temp):
        return checks.fail("gpu.temperature", target, "temperature reading %r is not a number: the "
                           "temperature cannot be checked" % (temp,), observed=temp)
    if is_unsupported(slowdown):
        return checks.skip("gpu.temperature", target, "%d C; slowdown threshold not reported (%s)"
                           % (temp, slowdown.reason), observed=temp)
    if not is_finite_number(slowdown):
        return checks.fail("gpu.temperature", target, "slowdown threshold %r is not a number: the "
                           "temperature cannot be checked" % (slowdown,), observed=temp)
    margin = scope.options["temperature_margin_c"]
    if temp >= slowdown:
        return checks.fail("gpu.temperature", target, "%d C at or above the slowdown threshold %d C"
                           % (temp, slowdown), observed=temp, expected="< %d" % slowdown)
    if temp >= slowdown - margin:
        return checks.warn("gpu.temperature", target, "%d C within %d C of the slowdown threshold %d C"
                           % (temp, margin, slowdown), observed=temp, expected="< %d" % (slowdown - margin))
    return checks.passed("gpu.temperature", target, "%d C (slowdown at %d C)" % (temp, slowdown),
                         observed=temp, expected="< %d" % (slowdown - margin))


def _check_clocks_event(scope):
    adapter, checks, target = scope.adapter, scope.checks, scope.target
    reasons = adapter.call("nvmlDeviceGetCurrentClocksEventReasons", scope.handle)
    if is_unsupported(reasons):  # bindings/drivers before 12.535 only have the old name
        reasons = adapter.call("nvmlDeviceGetCurrentClocksThrottleReasons", scope.handle)
    if is_unsupported(reasons):
        scope.gpu["clocks_event_reasons"] = None
        return _unsupported(scope, "gpu.clocks_event", reasons, "clock event reasons")
    active = []
    for name, default in CLOCK_REASONS:
        bit = adapter.const("nvmlClocksEventReason" + name,
                            adapter.const("nvmlClocksThrottleReason" + name, default))
        if int(reasons) & bit:
            active.append(name)
    scope.gpu["clocks_event_reasons"] = active
    bad = [name for name in active if name in BAD_CLOCK_REASONS]
    if bad:
        return checks.warn("gpu.clocks_event", target, "clocks held down by %s" % ", ".join(bad),
                           observed=active)
    return checks.passed("gpu.clocks_event", target, "no hardware slowdown (active: %s)"
                         % (", ".join(active) or "none"), observed=active)


def _check_pcie(scope):
    adapter, handle, checks, target = scope.adapter, scope.handle, scope.checks, scope.target
    pcie = {
        "current_gen": _value(adapter.call("nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        "current_width": _value(adapter.call("nvmlDeviceGetCurrPcieLinkWidth", handle)),
        "max_gen": _value(adapter.call("nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        "max_width": _value(adapter.call("nvmlDeviceGetMaxPcieLinkWidth", handle)),
        "gpu_max_gen": _value(adapter.call("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)),
        "gpu_max_width": None,
    }
    address = scope.gpu.get("pci_bus_id")
    problem = None
    if scope.reader is not None and address:
        # The function's own link capability (LnkCap); NVML's max is device *and* system.
        pcie["gpu_max_width"] = pci_link(scope.reader, address)["max_width"]
        path = "%s/%s/max_link_width" % (PCI_DEVICES, address)
        problem = scope.reader.problem(path) if pcie["gpu_max_width"] is None else None
        if problem is None and pcie["gpu_max_width"] is None and scope.reader.read(path):
            problem = "/%s: not a number" % path
    scope.gpu["pcie"] = pcie
    if problem:
        check = checks.fail("gpu.pcie", target, "could not be measured: %s" % problem, observed=pcie)
        check["error"] = problem
        return check
    compared, degraded = [], []
    for kind, label in (("gen", "gen"), ("width", "x")):
        have, own = pcie["max_" + kind], pcie["gpu_max_" + kind]
        if have is None or own is None:
            continue
        compared.append(kind)
        if have < own:
            degraded.append("max %s%s below the GPU's %s%s" % (label, have, label, own))
    if not compared:
        return checks.skip("gpu.pcie", target, "PCIe link capability not comparable (NVML/sysfs "
                           "did not report the GPU's own maximum)", observed=pcie)
    if degraded:
        return checks.warn("gpu.pcie", target, "PCIe link capability degraded: %s (bad slot or riser)"
                           % "; ".join(degraded), observed=pcie)
    message = "PCIe max gen%s x%s" % (pcie["max_gen"], pcie["max_width"])
    if pcie["current_gen"] is not None and (pcie["current_gen"], pcie["current_width"]) != (
            pcie["max_gen"], pcie["max_width"]):
        message += ", running gen%s x%s (idle downshift)" % (pcie["current_gen"], pcie["current_width"])
    return checks.passed("gpu.pcie", target, message, observed=pcie)


def _check_mig(scope):
    """MIG mode, and with ``expected_mig`` (a mig-parted layout, module_utils/gpu/mig.py) the live layout:
    the GPU instances by profile name (gpu ``mig_layout``, read whenever MIG is on). A pending mode
    change warns; a mode or layout other than the expected one fails, naming both; MIG not
    supported fails when the layout wants it on; a failed reading fails (could not be measured)."""
    checks, target = scope.checks, scope.target
    expected = None
    if scope.options.get("expected_mig"):
        expected = expected_for(scope.options["expected_mig"], scope.gpu["index"])
    want = None if expected is None else {"mig_enabled": expected[0], "instances": expected[1]}
    mode = scope.adapter.call("nvmlDeviceGetMigMode", scope.handle)
    if is_unsupported(mode):
        scope.gpu["mig"] = None
        scope.gpu["mig_layout"] = None
        if expected is not None and expected[0]:
            return checks.fail("gpu.mig", target, "MIG not supported by this GPU (%s) but the layout expects "
                               "MIG enabled with %s" % (mode.reason, describe_mig(expected[1])),
                               observed=None, expected=want)
        if expected is not None:
            return checks.passed("gpu.mig", target, "MIG not supported (%s): disabled as the layout expects"
                                 % mode.reason, observed=None, expected=want)
        return _unsupported(scope, "gpu.mig", mode, "MIG")
    current, pending = bool(mode[0]), bool(mode[1])
    scope.gpu["mig"] = {"current": current, "pending": pending}
    layout = None
    if current:
        instances, total = scope.adapter.gpu_instances(scope.handle)
        layout = {}
        for index, slices, memory_mb in instances:
            name = profile_name(index, slices, memory_mb, total)
            layout[name] = layout.get(name, 0) + 1
    scope.gpu["mig_layout"] = layout
    observed = dict(scope.gpu["mig"], instances=layout)
    found = "MIG %s%s" % (_onoff(current), " (%s)" % describe_mig(layout) if current else "")
    if current != pending:
        return checks.warn("gpu.mig", target, "MIG mode change pending (%s -> %s): GPU reset needed; %s"
                           % (_onoff(current), _onoff(pending),
                              "expected MIG %s" % _onoff(expected[0]) if expected else "no layout expected"),
                           observed=observed, expected=want)
    if expected is None:
        return checks.passed("gpu.mig", target, found, observed=observed)
    wanted = "MIG %s%s" % (_onoff(expected[0]), " (%s)" % describe_mig(expected[1]) if expected[0] else "")
    if current != expected[0] or (current and layout != expected[1]):
        return checks.fail("gpu.mig", target, "MIG layout differs: expected %s, found %s" % (wanted, found),
                           observed=observed, expected=want)
    return checks.passed("gpu.mig", target, "%s as expected" % found, observed=observed, expected=want)


def _check_nvlink(scope):
    checks, target = scope.checks, scope.target
    mig = scope.gpu.get("mig")
    if mig and mig["current"]:
        scope.gpu["nvlink"] = None
        return checks.skip("gpu.nvlink", target, "MIG enabled: NVLink state not checked")
    states = scope.adapter.nvlink_states(scope.handle)
    if is_unsupported(states):
        scope.gpu["nvlink"] = None
        return _unsupported(scope, "gpu.nvlink", states, "NVLink")
    inactive = sorted(link for link, up in states.items() if not up)
    summary = {"supported": len(states), "active": len(states) - len(inactive), "inactive": inactive}
    scope.gpu["nvlink"] = summary
    if inactive:
        return checks.fail("gpu.nvlink", target, "%d of %d NVLinks inactive: %s" % (
            len(inactive), len(states), ", ".join(str(x) for x in inactive)), observed=summary)
    return checks.passed("gpu.nvlink", target, "%d NVLinks active" % len(states), observed=summary)


def _check_persistence(scope):
    checks, target = scope.checks, scope.target
    mode = scope.adapter.call("nvmlDeviceGetPersistenceMode", scope.handle)
    if is_unsupported(mode):
        scope.gpu["persistence_mode"] = None
        return _unsupported(scope, "gpu.persistence", mode, "persistence mode")
    scope.gpu["persistence_mode"] = bool(mode)
    if mode:
        return checks.passed("gpu.persistence", target, "persistence mode on", observed=True)
    if scope.options["require_persistence_mode"]:
        return checks.fail("gpu.persistence", target, "persistence mode off (required)",
                           observed=False, expected=True)
    return checks.warn("gpu.persistence", target, "persistence mode off (enable nvidia-persistenced)",
                       observed=False, expected=True)


def _check_fabric(scope):
    """NVLink fabric registration, wherever NVML reports fabric support: HGX/DGX boards with
    NVSwitches on the PCI bus, and GB200/NVL72 trays whose NVLink switches sit in other trays (no
    NVSwitch on this bus). With an NVSwitch on the bus every state but COMPLETED fails (fail
    closed); without one, state NOT_SUPPORTED (or no fabric query) means no NVLink fabric."""
    checks, target = scope.checks, scope.target
    nvswitch = bool(scope.facts.get("fabricmanager_required"))
    fabric = scope.adapter.fabric_info(scope.handle)
    if not nvswitch and (is_unsupported(fabric) or fabric["state"] == FABRIC_STATE_NOT_SUPPORTED):
        scope.gpu["fabric"] = None
        return checks.skip("gpu.fabric", target, "no NVSwitch on the PCI bus: no NVLink fabric to join")
    if is_unsupported(fabric):
        scope.gpu["fabric"] = None
        return _unsupported(scope, "gpu.fabric", fabric, "GPU fabric info")
    state = FABRIC_STATES.get(fabric["state"], str(fabric["state"]))
    observed = {"state": state, "status": fabric["status"]}
    scope.gpu["fabric"] = observed
    if nvswitch:
        what, hint = "NVSwitch fabric", "is nvidia-fabricmanager running?"
    else:
        what, hint = "NVLink fabric", "NVSwitch outside this node: check the NVLink switch trays' fabric manager"
    if state != "COMPLETED":
        return checks.fail("gpu.fabric", target, "%s state %s (%s)" % (what, state, hint),
                           observed=observed, expected="COMPLETED")
    if fabric["status"] != 0:
        return checks.fail("gpu.fabric", target, "%s registration failed (NVML status %d)"
                           % (what, fabric["status"]), observed=observed, expected="COMPLETED")
    return checks.passed("gpu.fabric", target, "%s registration completed" % what, observed=observed)


def _check_recovery_action(scope):
    checks, target = scope.checks, scope.target
    action = scope.adapter.field_value(scope.handle, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")
    if is_unsupported(action):
        scope.gpu["recovery_action"] = None
        return _unsupported(scope, "gpu.recovery_action", action, "GPU recovery action")
    name = RECOVERY_ACTIONS.get(int(action), str(action))
    scope.gpu["recovery_action"] = name
    if int(action) != 0:
        return checks.fail("gpu.recovery_action", target, "NVML asks for recovery action %s" % name,
                           observed=name, expected="NONE")
    return checks.passed("gpu.recovery_action", target, "no recovery action pending", observed=name)


# MIG before NVLink (NVLink is skipped when MIG is on); report order follows DEVICE_CHECKS.
_DEVICE_CHECK_FUNCS = (
    ("gpu.ecc.volatile_uncorrectable", _check_ecc_volatile),
    ("gpu.ecc.mode", _check_ecc_mode),
    ("gpu.retired_pages", _check_retired_pages),
    ("gpu.row_remap", _check_row_remap),
    ("gpu.temperature", _check_temperature),
    ("gpu.clocks_event", _check_clocks_event),
    ("gpu.pcie", _check_pcie),
    ("gpu.mig", _check_mig),
    ("gpu.nvlink", _check_nvlink),
    ("gpu.persistence", _check_persistence),
    ("gpu.fabric", _check_fabric),
    ("gpu.recovery_action", _check_recovery_action),
)


# -- XID ----------------------------------------------------------------------------------
def _check_xid(results, options, source, gpus, now):
    hours = options["xid_window_hours"]
    window = "%g h" % hours
    if source is None:
        return results.skip("gpu.xid", "node", "kernel log not read")
    if isinstance(source, XidRead):
        if source.error and (options["xid_source"] == "none" or _offline_auto(options)):
            # not applicable: the scan is off, or root is another node's tree (an image, the lab)
            # without a log file below it and the running kernel's log is not that node's
            return results.skip("gpu.xid", "node", "kernel log unavailable: %s" % source.error)
        if source.error:
            # fail closed: an XID that cannot be seen must not let the node pass
            return results.fail("gpu.xid", "node", "kernel log unreadable, XIDs cannot be checked: %s"
                                % source.error)
        lines, origin = source.lines, source.origin
    else:
        lines, origin = list(source), "lines"
    events, stats = parse_xid_lines(lines, now, hours)
    if not events:
        return results.passed("gpu.xid", "node", "no XID in the last %s (%s)" % (window, origin),
                              observed={"events": 0, "outside_window": stats["outside_window"]})
    targets = {}
    for gpu in gpus:
        if gpu.get("pci_bus_id"):
            targets[gpu["pci_bus_id"].rsplit(".", 1)[0]] = "gpu%d" % gpu["index"]
    groups = {}
    for event in events:
        groups.setdefault(targets.get(event["pci"], "node"), []).append(event)
    fatal, ignore = set(options["xid_fatal"]), set(options["xid_ignore"])
    for target in sorted(groups, key=_target_key):
        group = groups[target]
        codes = {}
        for event in group:
            # grouped by code and the severity word the driver printed (NVLink5 XIDs 144-150 print
            # Fatal or Nonfatal): a Fatal and a Nonfatal 145 are not merged
            severity = event.get("severity")
            entry = codes.setdefault((event["xid"], severity or ""), {
                "xid": event["xid"], "count": 0, "pci": event["pci"], "last": None,
                "class": {"fail": "fatal", "pass": "ignored", "warn": "other"}[
                    classify(event["xid"], fatal, ignore, severity)]})
            if severity:
                entry["severity"] = severity
            entry["count"] += 1
            if event["time"] and (entry["last"] is None or event["time"] > entry["last"]):
                entry["last"] = event["time"]
            entry["detail"] = event["detail"]
        observed = [codes[key] for key in sorted(codes)]
        status = worst(classify(xid, fatal, ignore, severity or None) for xid, severity in codes)
        text = ", ".join("XID %d%s x%d (%s)" % (e["xid"], " " + e["severity"] if e.get("severity") else "",
                                                e["count"], e["class"]) for e in observed)
        pcis = sorted(set(e["pci"] for e in group))
        message = "%s on %s in the last %s (%s)" % (text, ", ".join(pcis), window, origin)
        advice = ["XID %d: %s" % (xid, XID_ADVICE[xid]) for xid in sorted(set(e["xid"] for e in observed))
                  if xid in XID_ADVICE and xid not in ignore]
        if advice:
            message += "; " + "; ".join(advice)
        undated = sum(1 for e in group if e["time"] is None)
        if undated:
            message += "; %d undated line(s) counted as recent" % undated
        message += skew_note(group)
        results.add("gpu.xid", target, status, message, observed=observed)
    return None


def _offline_auto(options):
    return options["xid_source"] == "auto" and os.path.realpath(options["root"]) != "/"


def _target_key(target):
    return (0, int(target[3:])) if target.startswith("gpu") else (1, 0)


FAMILY = Family("gpu", GPU_OPTIONS, validate_options, run, off_returns={"gpus": [], "nvml": None})
