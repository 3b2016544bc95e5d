# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole node in one module execution (SPEC 2.8): orchestration only.

Every rule lives in gpu_checks (gpu_health) and rdma_checks (rdma_validate); this file parses
the nested per-family options, runs both families over ONE SysfsReader (each sysfs file is read
at most once) and ONE NvmlAdapter (NVML initialised once), and summarises the result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.validation import check_type_dict
from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE
from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import (
    FAIL,
    FAIL_ON_CHOICES,
    PASS,
    SKIP,
    WARN,
    CheckResults,
    summarize,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu_checks import (
    GPU_HEALTH_ARGSPEC,
    option_defaults,
    run_gpu_health,
    validate_health_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma_checks import (
    RDMA_VALIDATE_ARGSPEC,
    check_rdma_options,
    rdma_options,
    validate_rdma,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import SysfsReader, validate_root

FAMILIES = ("gpu", "rdma")

# The nested options: gpu_health's without root / fail_on (those are node_validate's own),
# rdma_validate's as they are.
FAMILY_ARGSPECS = {
    "gpu": dict((name, spec) for name, spec in GPU_HEALTH_ARGSPEC.items() if name not in ("root", "fail_on")),
    "rdma": RDMA_VALIDATE_ARGSPEC,
}

NODE_VALIDATE_ARGSPEC = {
    "root": {"type": "path", "default": "/"},
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
    # raw: a dict of the family's options, or false to not run the family.
    "gpu": {"type": "raw", "default": {}},
    "rdma": {"type": "raw", "default": {}},
}


def node_validate_argspec():
    """Argument spec of the node_validate module (a fresh copy)."""
    return copy.deepcopy(NODE_VALIDATE_ARGSPEC)


def _prefix(family, message):
    """``option min_rate_gbps: ...`` -> ``option rdma.min_rate_gbps: ...``."""
    return re.sub(r"^option (\w+)", r"option %s.\1" % family, message)


def family_options(family, value):
    """(options or None when the family is off, [errors naming ``family.option``]).

    ``value``: a dict of options, None / true (defaults), false (do not run the family), or the
    same as a string (``no``, ``{"expected_count": 8}``) from ``-a`` on the command line.
    """
    if value is None or value is True:
        value = {}
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in BOOLEANS_FALSE:
            return None, []
        if text.lower() in BOOLEANS_TRUE or not text:
            value = {}
        else:
            try:
                value = check_type_dict(text)
            except (TypeError, ValueError) as exc:
                return None, ["option %s: expected a dict of options or false, got %r (%s)" % (family, text, exc)]
    if value is False:
        return None, []
    if not isinstance(value, dict):
        return None, ["option %s: expected a dict of options or false, got %s %r"
                      % (family, type(value).__name__, value)]
    spec = FAMILY_ARGSPECS[family]
    errors, options = [], {}
    for name in sorted(value):
        if name not in spec:
            where = " (set it at the top level of node_validate)" if name in ("root", "fail_on") else ""
            errors.append("option %s.%s: unsupported%s; supported: %s"
                          % (family, name, where, ", ".join(sorted(spec))))
            continue
        result = ArgumentSpecValidator({name: spec[name]}).validate({name: value[name]})
        if result.error_messages:
            errors.append("option %s.%s: %s" % (family, name, "; ".join(result.error_messages)))
            continue
        options[name] = result.validated_parameters[name]
    return options, errors


def check_node_options(params):
    """(gpu options or None, rdma options or None, [errors]) for the module parameters.

    Options come back complete (defaults filled in) and checked by the families' own option
    checks, whose messages are prefixed with the family (``option rdma.min_rate_gbps: ...``)."""
    root = params.get("root") or "/"
    errors = []
    error = validate_root(root)
    if error:
        errors.append(error)
    gpu, gpu_errors = family_options("gpu", params.get("gpu"))
    rdma, rdma_errors = family_options("rdma", params.get("rdma"))
    errors.extend(gpu_errors + rdma_errors)
    if gpu is not None and not gpu_errors:
        gpu = option_defaults(gpu)
        gpu.pop("fail_on", None)
        gpu["root"] = root
        if not error:
            message = validate_health_options(gpu)
            if message:
                errors.append(_prefix("gpu", message))
    if rdma is not None and not rdma_errors:
        rdma = rdma_options(rdma)
        errors.extend(_prefix("rdma", message) for message in check_rdma_options(rdma))
    return gpu, rdma, errors


def run_node_validate(root, gpu, rdma, runner, adapter=None, now=None, reader=None):
    """Run the families that are on (options dict) and skip those that are off (None).

    Returns {checks (CheckResults), ansible_facts, gpus, nvml, families}."""
    reader = reader or SysfsReader(root)
    results = CheckResults()
    facts = {}
    gpus, nvml = [], None
    if gpu is not None:
        gpu_results, gpus, nvml, facts["nvidia"] = run_gpu_health(
            dict(gpu, root=root), runner, adapter=adapter, now=now, reader=reader)
        results.extend(gpu_results)
    if rdma is not None:
        facts["mlx5"] = gather_mlx5_facts(reader, runner)
        results.extend(validate_rdma(facts["mlx5"], reader, rdma))
    families = [name for name, options in (("gpu", gpu), ("rdma", rdma)) if options is not None]
    return {"checks": results, "ansible_facts": facts, "gpus": gpus, "nvml": nvml, "families": families}


def validate_node(params, runner, adapter=None, now=None, reader=None):
    """Options check + run + readiness, timed. Returns (payload, errors); payload is None on errors."""
    started = time.perf_counter()
    gpu, rdma, errors = check_node_options(params)
    if errors:
        return None, errors
    root = params.get("root") or "/"
    run = run_node_validate(root, gpu, rdma, runner, adapter=adapter, now=now, reader=reader)
    checks = run["checks"].as_list()
    readiness = family_readiness(checks, run["families"])
    payload = {
        "checks": checks,
        "summary": summarize(checks),
        "healthy": not any(c["status"] == FAIL for c in checks),
        "ansible_facts": run["ansible_facts"],
        "gpus": run["gpus"],
        "nvml": run["nvml"],
        "readiness": readiness,
        "msg": readiness_text(readiness),
    }
    payload["elapsed_ms"] = round((time.perf_counter() - started) * 1000.0, 1)
    return payload, []


def _most_common_message(checks):
    counts, order = {}, []
    for check in checks:
        message = check["message"]
        if message not in counts:
            order.append(message)
        counts[message] = counts.get(message, 0) + 1
    return max(order, key=lambda m: (counts[m], -order.index(m))) if order else ""


def family_readiness(checks, families):
    """Per family: {status, summary, message}. Status: fail > warn > pass; skip only when every
    check skipped. Message: the first failing (then warning) check, or the most common skip
    reason when nothing was checked, or a pass count."""
    readiness = {}
    for family in FAMILIES:
        if family not in families:
            readiness[family] = {"status": "off", "summary": summarize([]),
                                 "message": "not run (%s: false)" % family}
            continue
        mine = [c for c in checks if c["id"].split(".", 1)[0] == family]
        summary = summarize(mine)
        for status in (FAIL, WARN):
            bad = [c for c in mine if c["status"] == status]
            if bad:
                first = bad[0]
                message = "%s[%s]: %s" % (first["id"], first["target"], first["message"])
                if len(bad) > 1:
                    message += " (+%d more %s)" % (len(bad) - 1, status)
                readiness[family] = {"status": status, "summary": summary, "message": message}
                break
        else:
            if summary[PASS]:
                message = "%d check(s) passed, %d skipped" % (summary[PASS], summary[SKIP])
                readiness[family] = {"status": PASS, "summary": summary, "message": message}
            else:
                readiness[family] = {"status": SKIP, "summary": summary,
                                     "message": _most_common_message(mine) or "no checks"}
    return readiness


def readiness_text(readiness):
    """One line: ``gpu: skip (no NVIDIA GPU on the PCI bus); rdma: pass (52 check(s) passed, ...)``."""
    return "; ".join("%s: %s (%s)" % (family, readiness[family]["status"], readiness[family]["message"])
                     for family in FAMILIES if family in readiness)
