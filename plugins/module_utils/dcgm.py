# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Burn-in (docs/remediation.md, "Burn-in"): DCGM diagnostics (``dcgmi diag -r <level> -j``) and
a single-node NCCL all_reduce, turned into the check-result model (docs/contracts.md).

The JSON of ``dcgmi diag -j`` comes in two shapes (tests/fixtures/dcgm/README.md names the source
of each fact):

- DCGM 4.x: root key ``DCGM Diagnostic``; ``test_categories[].tests[]`` with ``name``,
  ``results[]`` (``entity_group`` "GPU", ``entity_id``, ``status`` Pass/Fail/Warn/Skip/Not Run,
  ``warnings[]`` objects ``{warning, error_id, error_category, error_severity}``, ``info[]``) and
  ``test_summary.status``; ``runtime_error`` when the run itself failed; ``metadata.version`` and
  ``metadata["Driver Version Detected"]``.
- DCGM 3.x: root key ``DCGM GPU Diagnostic``; ``results[]`` carry ``gpu_ids`` (a number, or a
  comma-separated string for the deployment tests that cover every GPU) and a status in upper or
  mixed case (PASS, Fail, SKIPPED ...); ``warnings[]`` strings or objects; ``version``. Arrays
  may hold ``null`` entries, and text may precede the JSON (DCGM's own reader skips to the first
  ``{``).

Fail closed: no JSON, an unknown shape or status, a ``runtime_error``, a run that timed out, a
non-zero exit that the document does not explain, or a run in which no test executed is a
failing ``burnin.dcgm.run`` check, never a pass. Nothing here needs Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResults,
    compress_targets,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.nccl import nccl_checks, parse_nccl_tests

DIAG_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
LEVELS = (1, 2, 3, 4)
RUN_CHECK = "burnin.dcgm.run"
TEST_CHECK = "burnin.dcgm"
# dcgmi's statuses (any case) -> the result model's
STATUS_MAP = {"pass": PASS, "fail": FAIL, "warn": WARN, "warning": WARN, "skip": SKIP, "skipped": SKIP,
              "not run": SKIP, "notrun": SKIP}
MAX_MESSAGE = 600


class DiagError(ValueError):
    """The output is not a ``dcgmi diag -j`` document this parser understands."""


def extract_document(text):
    """(document, preamble): the first JSON object of ``text`` and what preceded it."""
    if text is None:
        raise DiagError("no output")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    start = text.find("{")
    if start < 0:
        raise DiagError("no JSON object in the output")
    try:
        document, _end = json.JSONDecoder().raw_decode(text, start)
    except ValueError as exc:
        raise DiagError("the JSON of the output does not parse: %s" % exc)
    if not isinstance(document, dict):
        raise DiagError("the output's JSON is not an object")
    return document, text[:start].strip()


def _status(value, where):
    key = str(value or "").strip().lower()
    if key not in STATUS_MAP:
        raise DiagError("%s: unknown status %r" % (where, value))
    return STATUS_MAP[key]


def _entities(result, where):
    """Targets of one result: ``gpu<N>`` (or ``<group><N>`` for other entity groups)."""
    if "entity_id" in result:
        group = str(result.get("entity_group") or "GPU").lower()
        entity = result["entity_id"]
        if isinstance(entity, bool) or not isinstance(entity, int):
            raise DiagError("%s: entity_id %r is not a number" % (where, entity))
        return ["%s%d" % ("gpu" if group == "gpu" else group, entity)]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(ids, bool):
        raise DiagError("%s: gpu_ids %r is not a GPU id" % (where, ids))
    if isinstance(ids, int):
        return ["gpu%d" % ids]
    if isinstance(ids, str) and ids.strip():
        out = []
        for part in (piece.strip() for piece in ids.split(",")):
            if not part.isdigit():
                raise DiagError("%s: gpu_ids %r is not a list of GPU ids" % (where, ids))
            out.append("gpu%d" % int(part))
        return out
    return ["node"]  # a result without an entity covers the node (the 3.x software summary)


def _messages(result):
    texts, error_ids = [], []
    for item in result.get("warnings") or []:
        if isinstance(item, dict):
            text = item.get("warning") or item.get("message")
            code = item.get("error_id")
            if isinstance(code, dict):
                code = code.get("code")
            if code is not None:
                error_ids.append(code)
        else:
            text = item
        if text:
            texts.append(str(text).strip())
    info = result.get("info") or []
    if isinstance(info, str):
        info = [info]
    return texts, [str(i).strip() for i in info if i], error_ids


def parse_diag(text):
    """The tests of a ``dcgmi diag -j`` output: {version, driver, runtime_error, preamble,
    tests: [{category, name, summary, results: [{targets, status, warnings, info, error_ids}]}]}.
    DiagError when it is not such a document."""
    document, preamble = extract_document(text)
    key = next((k for k in DIAG_KEYS if k in document), None)
    if key is None:
        wanted = " or ".join(repr(k) for k in DIAG_KEYS)
        raise DiagError("no %s object in the JSON (keys: %s)" % (wanted, ", ".join(sorted(document)) or "none"))
    diag = document[key]
    if not isinstance(diag, dict):
        raise DiagError("%r is not an object" % key)
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    parsed = {"format": "4.x" if key == "DCGM Diagnostic" else "3.x",
              "version": metadata.get("version") or diag.get("version"),
              "driver": metadata.get("Driver Version Detected") or diag.get("Driver Version Detected"),
              "runtime_error": diag.get("runtime_error") or document.get("runtime_error"),
              "preamble": preamble, "tests": []}
    categories = diag.get("test_categories")
    if categories is None:
        return parsed
    if not isinstance(categories, list):
        raise DiagError("test_categories is not a list")
    for category in categories:
        if category is None:
            continue
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            raise DiagError("a test category is not an object with a list of tests")
        for test in category["tests"]:
            if test is None:
                continue
            if not isinstance(test, dict) or not test.get("name"):
                raise DiagError("a test of category %r has no name" % category.get("category"))
            where = "%s/%s" % (category.get("category"), test["name"])
            results = test.get("results")
            if not isinstance(results, list):
                raise DiagError("%s: results is not a list" % where)
            entry = {"category": category.get("category") or "", "name": str(test["name"]), "results": [],
                     "summary": None}
            summary = test.get("test_summary")
            if isinstance(summary, dict) and summary.get("status") is not None:
                entry["summary"] = _status(summary["status"], where + " test_summary")
            for result in results:
                if result is None:
                    continue
                if not isinstance(result, dict):
                    raise DiagError("%s: a result is not an object" % where)
                warnings, info, error_ids = _messages(result)
                entry["results"].append({"targets": _entities(result, where),
                                         "status": _status(result.get("status"), where),
                                         "warnings": warnings, "info": info, "error_ids": error_ids})
            parsed["tests"].append(entry)
    return parsed


def _cut(text):
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def _test_matches(requested, name):
    """A requested test name matches the output's (``memory_bandwidth`` and ``Memory Bandwidth``)."""
    def norm(value):
        return "".join(ch for ch in str(value).lower() if ch.isalnum())
    return norm(requested) == norm(name)


def diag_checks(parsed=None, rc=0, timed_out=False, error=None, stderr="", requested_tests=None, run=None,
                timeout=None):
    """CheckResults of one dcgmi run. ``parsed`` from parse_diag (None: ``error`` says why it is
    missing); ``rc`` the exit status; ``requested_tests`` the named tests that must have run."""
    results = CheckResults()
    command = run or "dcgmi diag"
    stderr_tail = _cut((stderr or "").strip().splitlines()[-1]) if (stderr or "").strip() else ""
    if timed_out:
        results.fail(RUN_CHECK, "node", "%s did not finish within %s s: killed, the burn-in did not pass"
                     % (command, timeout), observed={"rc": rc, "timed_out": True})
        return results
    if parsed is None:
        detail = error or "no output"
        if rc:
            message = "%s exited %s without a JSON result (%s)%s" % (
                command, rc, detail, ("; stderr: " + stderr_tail) if stderr_tail else "")
        else:
            message = "%s printed no diagnostic result: %s" % (command, detail)
        results.fail(RUN_CHECK, "node", _cut(message), observed={"rc": rc})
        return results
    if parsed.get("runtime_error"):
        results.fail(RUN_CHECK, "node", _cut("%s: DCGM runtime error: %s" % (command, parsed["runtime_error"])),
                     observed={"rc": rc, "version": parsed.get("version")})
        return results
    executed, failed_any = 0, False
    for test in parsed["tests"]:
        label = "%s/%s" % (test["category"], test["name"]) if test["category"] else test["name"]
        passed_targets, skipped = [], []
        for result in test["results"]:
            status = result["status"]
            if status in (FAIL, WARN):
                failed_any = failed_any or status == FAIL
                text = "; ".join(result["warnings"] or result["info"]) or "no message from DCGM"
                for target in result["targets"]:
                    observed = {"test": test["name"], "category": test["category"], "dcgm_status": status}
                    if result["error_ids"]:
                        observed["error_ids"] = result["error_ids"]
                    results.add(TEST_CHECK, "%s/%s" % (target, test["name"]), status, _cut("%s: %s" % (label, text)),
                                observed=observed)
            elif status == PASS:
                passed_targets.extend(result["targets"])
            else:
                skipped.append(result)
        if test["summary"] == FAIL and not any(r["status"] == FAIL for r in test["results"]):
            failed_any = True  # a test that failed as a whole, none of its results saying why
            results.fail(TEST_CHECK, test["name"], "%s: test summary Fail" % label, observed={"test": test["name"]})
        ran = [r for r in test["results"] if r["status"] != SKIP]
        if ran:
            executed += 1
        if passed_targets:
            where = compress_targets(sorted(set(passed_targets), key=_target_key))
            results.passed(TEST_CHECK, test["name"], "%s: pass on %s" % (label, where),
                           observed={"test": test["name"], "category": test["category"], "passed_on": where})
        if skipped and not ran:
            why = "; ".join(sum((r["info"] or r["warnings"] for r in skipped), [])) or "skipped by DCGM"
            results.skip(TEST_CHECK, test["name"], _cut("%s: not run (%s)" % (label, why)),
                         observed={"test": test["name"]})
    for name in requested_tests or []:
        ran = [t for t in parsed["tests"] if _test_matches(name, t["name"])
               and any(r["status"] != SKIP for r in t["results"])]
        if not ran:
            results.fail(RUN_CHECK, "node", "requested test %s did not run (absent or skipped in the output)" % name,
                         observed={"rc": rc}, expected="%s ran" % name)
    version = {"rc": rc, "version": parsed.get("version"), "driver": parsed.get("driver"), "tests_run": executed}
    if not executed:
        results.fail(RUN_CHECK, "node", "%s ran no test (every test skipped or none in the output): nothing was "
                     "verified%s" % (command, "; " + _cut(parsed["preamble"]) if parsed.get("preamble") else ""),
                     observed=version)
    elif rc and not failed_any:
        results.fail(RUN_CHECK, "node", "%s exited %s although no test failed: the result is not trusted%s"
                     % (command, rc, ("; stderr: " + stderr_tail) if stderr_tail else ""), observed=version)
    else:
        results.passed(RUN_CHECK, "node", "%s ran %d test(s) (DCGM %s)" % (command, executed, parsed.get("version")),
                       observed=version)
    return results


def _target_key(target):
    digits = "".join(ch for ch in target if ch.isdigit())
    return (target.rstrip("0123456789"), int(digits) if digits else -1)


def diag_command(dcgmi, level=None, tests=None, parameters=None):
    """The argument vector of ``dcgmi diag``: ``-r <level>`` or ``-r <test,test>``, ``-j``."""
    if tests:
        bad = [t for t in tests if not t or "," in str(t) or str(t).strip() != str(t)]
        if bad:
            raise ValueError("option tests: %r is not a DCGM test name" % (bad[0],))
        run = ",".join(str(t) for t in tests)
    else:
        if level not in LEVELS:
            raise ValueError("option level must be one of 1, 2, 3, 4 (got %r)" % (level,))
        run = str(level)
    args = [dcgmi, "diag", "-r", run, "-j"]
    if parameters:
        args += ["-p", parameters]
    return args


def run_diag(runner, dcgmi, level=None, tests=None, parameters=None, timeout=None):
    """Run dcgmi through ``runner`` (module_utils/runner.py) -> (CheckResults, raw info)."""
    args = diag_command(dcgmi, level, tests, parameters)
    answer = runner.run(args, timeout=timeout)
    shown = " ".join(args[1:])
    parsed, error = None, None
    if not answer.timed_out:
        try:
            parsed = parse_diag(answer.stdout)
        except DiagError as exc:
            error = str(exc)
    checks = diag_checks(parsed, rc=answer.rc, timed_out=answer.timed_out, error=error, stderr=answer.stderr,
                         requested_tests=tests, run="dcgmi " + shown, timeout=timeout)
    return checks, {"command": args, "rc": answer.rc, "timed_out": bool(answer.timed_out),
                    "version": (parsed or {}).get("version")}


def run_nccl(runner, command, min_busbw_gbps=None, timeout=None, target="node"):
    """A single-node nccl-tests run (e.g. ``all_reduce_perf -b 8 -e 1G -f 2 -g 8``) judged by the
    one NCCL parser (module_utils/nccl.py): checks ``k8s.nccl.busbw`` and ``k8s.nccl.wrong``."""
    if not command or not isinstance(command, (list, tuple)):
        raise ValueError("option nccl.command must be the nccl-tests command as a list")
    answer = runner.run(list(command), timeout=timeout)
    results = CheckResults()
    if answer.timed_out:
        results.fail("k8s.nccl.busbw", target, "%s did not finish within %s s: killed" % (command[0], timeout))
        return results
    parsed = parse_nccl_tests(answer.stdout or "")
    results.extend(nccl_checks(parsed, min_busbw_gbps=min_busbw_gbps, target=target, job_succeeded=answer.rc == 0))
    return results
