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
  comma-separated string for the deployment tests that cover every GPU; absent on dcgmi's software
  tests, which cover the node; ``null`` is refused) and a status (``STATUSES_3X``); ``warnings[]``
  strings or objects; ``version``. Arrays may hold ``null`` entries, and text may precede the JSON
  (DCGM's own reader skips to the first ``{``).

A status is one of the exact strings DCGM writes (``STATUSES_4X``, ``STATUSES_3X``): any other
spelling (``pass``, ``Pass ``, ``SKIPPED``) is refused. A document holding both root keys is refused
(dcgmi writes one). A ``Pass`` result carrying warnings is reported as a ``warn`` check with DCGM's
warning text (it fails a burn-in only with fail_on warn).

Fail closed: no JSON, an unknown shape or status, a ``runtime_error``, a run that timed out, a
non-zero exit that the document does not explain, or a run in which no test executed is a
failing ``burnin.dcgm.run`` check, never a pass. Nothing here needs Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResults,
    compress_targets,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.nccl import nccl_checks, parse_nccl_tests
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import (
    RecordError,
    integer,
    listing,
    load_json,
    mapping,
    string,
)

DIAG_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
LEVELS = (1, 2, 3, 4)
RUN_CHECK = "burnin.dcgm.run"
TEST_CHECK = "burnin.dcgm"
# The statuses DCGM writes, exactly (no other case or spacing) -> the result model's.
# 4.x: dcgmi/Diag.cpp Diag::HelperDisplayDiagResult (NVIDIA/DCGM@72fa3fe, DCGM 4.6.0, lines 846-863;
# pinned by dcgmi/tests/DiagTests.cpp lines 330-335): "Pass", "Skip", "Warn", "Fail", "Not Run".
STATUSES_4X = {"Pass": PASS, "Fail": FAIL, "Warn": WARN, "Skip": SKIP, "Not Run": SKIP}
# 3.x: dcgmi/Diag.cpp HelperDisplayDiagResult of DCGM 3.0.4-3.3.9 (e.g. NVIDIA/DCGM@a33560c, 3.3.1,
# lines 685-697): "Pass", "Skip", "Fail" (a warning is written "Fail"); and the same layout written by
# nvvs (nvvs/src/JsonOutput.cpp with nvvs/src/Output.cpp Output::resultEnumToString, lines 121-141):
# "PASS", "WARN", "SKIP", "FAIL". No DCGM source writes "SKIPPED" or "Not Run" in 3.x.
STATUSES_3X = {"Pass": PASS, "Fail": FAIL, "Skip": SKIP, "PASS": PASS, "FAIL": FAIL, "WARN": WARN, "SKIP": SKIP}
MAX_MESSAGE = 600


class DiagError(ValueError):
    """The output is not a ``dcgmi diag -j`` document this parser understands."""


# The document is read strictly (module_utils/core/records.py load_json: bounded size and nesting, no
# NaN/Infinity, no duplicate keys), then checked against the shape DCGM writes: NVIDIA/DCGM
# dcgmi/Diag.cpp (HelperJsonBuildOutput, HelperJsonAddResult, HelperJsonAddTestSummary; keys of
# nvvs/include/NvvsJsonStrings.h) and testing/python3/dcgm_diag_schema.json. A known key with a
# value of another type is a DiagError naming it (never skipped, never a pass); keys DCGM may add
# later are ignored. The 3.x layout (nvvs/src/JsonOutput.cpp) differs as the module docstring says.
RECORD = "dcgmi diag -j output"
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
MAX_DOCUMENT_DEPTH = 12  # the 4.x document nests 8 deep (root, diag, categories, tests, results, warnings)
MAX_STATUS = 64


def extract_document(text):
    """(document, preamble): the JSON object of ``text`` (read strictly) and the text before it."""
    if text is None:
        raise DiagError("no output")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    start = text.find("{")
    if start < 0:
        raise DiagError("no JSON object in the output")
    try:
        document = load_json(text[start:], RECORD, max_bytes=MAX_DOCUMENT_BYTES, max_depth=MAX_DOCUMENT_DEPTH)
    except RecordError as exc:
        raise DiagError(str(exc))
    if not isinstance(document, dict):
        raise DiagError("the output's JSON is not an object")
    return document, text[:start].strip()


def _check(function, value, field, **kwargs):
    try:
        return function(value, RECORD, field, **kwargs)
    except RecordError as exc:
        raise DiagError(str(exc))


def _optional(container, key, function, where, **kwargs):
    """``container[key]`` checked by ``function`` (records.py), None when absent."""
    if key not in container:
        return None
    return _check(function, container[key], "%s.%s" % (where, key) if where else key, **kwargs)


def _status(value, where, statuses):
    text = _check(string, value, where, max_length=MAX_STATUS)
    if text not in statuses:
        raise DiagError("%s: unknown status %r (DCGM writes %s)" % (where, value, ", ".join(sorted(statuses))))
    return statuses[text]


def _entities(result, where):
    """Targets of one result: ``gpu<N>`` (or ``<group><N>`` for other entity groups)."""
    if "entity_id" in result:
        group = _optional(result, "entity_group", string, where, max_length=64)
        _optional(result, "entity_group_id", integer, where, minimum=0)
        entity = _check(integer, result["entity_id"], where + ".entity_id", minimum=0)
        group = (group or "GPU").lower()
        return ["%s%d" % ("gpu" if group == "gpu" else group, entity)]
    key = "gpu_ids" if "gpu_ids" in result else "gpu_id"
    if key not in result:
        return ["node"]  # a result without an entity covers the node (dcgmi 3.x software tests)
    ids = result[key]
    if ids is None:
        raise DiagError("%s.%s is null: no GPU id (dcgmi writes a number or a list, or leaves it out)" % (where, key))
    if isinstance(ids, bool) or not isinstance(ids, (int, str)):
        raise DiagError("%s.%s %r is not a GPU id" % (where, key, ids))
    if isinstance(ids, int):
        return ["gpu%d" % _check(integer, ids, where + "." + key, minimum=0)]
    out = []
    for part in (piece.strip() for piece in ids.split(",")):
        if not part or not part.isdigit() or not part.isascii():
            raise DiagError("%s.%s %r is not a list of GPU ids" % (where, key, ids))
        out.append("gpu%d" % int(part))
    return out


def _messages(result, where):
    """(warning texts, info texts, error ids) of a result or a test summary."""
    texts, error_ids = [], []
    for number, item in enumerate(_optional(result, "warnings", listing, where, max_items=1000) or []):
        at = "%s.warnings[%d]" % (where, number)
        if isinstance(item, str):  # 3.x
            texts.append(item.strip())
            continue
        _check(mapping, item, at)
        if "warning" not in item:
            raise DiagError("%s has no warning text" % at)
        texts.append(_check(string, item["warning"], at + ".warning", max_length=65536).strip())
        code = _optional(item, "error_id", integer, at, minimum=0)
        _optional(item, "error_category", integer, at, minimum=0)
        _optional(item, "error_severity", integer, at, minimum=0)
        if code is not None:
            error_ids.append(code)
    info = result.get("info")
    if info is None:
        info = []
    elif isinstance(info, str):  # 3.x
        info = [info]
    else:
        _check(listing, info, where + ".info", max_items=1000)
        for number, item in enumerate(info):
            _check(string, item, "%s.info[%d]" % (where, number), max_length=65536)
    return [t for t in texts if t], [i.strip() for i in info if i.strip()], error_ids


def parse_diag(text):
    """The tests of a ``dcgmi diag -j`` output: {version, driver, runtime_error, preamble,
    tests: [{category, name, summary, summary_messages, results: [{targets, status, warnings, info,
    error_ids}]}]}. DiagError naming what is unexpected when it is not such a document."""
    document, preamble = extract_document(text)
    present = [k for k in DIAG_KEYS if k in document]
    if len(present) > 1:
        raise DiagError("both %s in one document: dcgmi writes one (4.x or 3.x), the document is not read"
                        % " and ".join(repr(k) for k in present))
    key = present[0] if present else None
    if key is None:
        wanted = " or ".join(repr(k) for k in DIAG_KEYS)
        raise DiagError("no %s object in the JSON (keys: %s)" % (wanted, ", ".join(sorted(document)) or "none"))
    diag = _check(mapping, document[key], key)
    metadata = _optional(document, "metadata", mapping, "") or {}
    _optional(document, "entity_groups", listing, "")
    version = (_optional(metadata, "version", string, "metadata", max_length=256)
               or _optional(diag, "version", string, key, max_length=256))
    driver = (_optional(metadata, "Driver Version Detected", string, "metadata", max_length=256)
              or _optional(diag, "Driver Version Detected", string, key, max_length=256))
    runtime_error = (_optional(diag, "runtime_error", string, key, max_length=65536)
                     or _optional(document, "runtime_error", string, "", max_length=65536))
    statuses = STATUSES_4X if key == "DCGM Diagnostic" else STATUSES_3X
    parsed = {"format": "4.x" if key == "DCGM Diagnostic" else "3.x", "version": version, "driver": driver,
              "runtime_error": runtime_error, "preamble": preamble, "tests": []}
    categories = _optional(diag, "test_categories", listing, key, max_items=1000)
    for c_number, category in enumerate(categories or []):
        if category is None:  # 3.x arrays may hold null entries
            continue
        c_where = "%s.test_categories[%d]" % (key, c_number)
        _check(mapping, category, c_where, required=("tests",))
        name = _optional(category, "category", string, c_where, max_length=256) or ""
        for t_number, test in enumerate(_check(listing, category["tests"], c_where + ".tests", max_items=1000)):
            if test is None:
                continue
            t_where = "%s.tests[%d]" % (c_where, t_number)
            _check(mapping, test, t_where, required=("name", "results"))
            test_name = _check(string, test["name"], t_where + ".name", max_length=256, allow_empty=False)
            entry = {"category": name, "name": test_name, "results": [], "summary": None,
                     "summary_messages": []}
            summary = _optional(test, "test_summary", mapping, t_where)
            if summary is not None:
                if "status" not in summary:
                    raise DiagError("%s.test_summary has no status" % t_where)
                entry["summary"] = _status(summary["status"], t_where + ".test_summary.status", statuses)
                warnings, info, _ids = _messages(summary, t_where + ".test_summary")
                entry["summary_messages"] = warnings or info
            for r_number, result in enumerate(_check(listing, test["results"], t_where + ".results",
                                                     max_items=10000)):
                if result is None:
                    continue
                r_where = "%s.results[%d]" % (t_where, r_number)
                _check(mapping, result, r_where)
                if "status" not in result:
                    raise DiagError("%s has no status" % r_where)
                warnings, info, error_ids = _messages(result, r_where)
                entry["results"].append({"targets": _entities(result, r_where),
                                         "status": _status(result["status"], r_where + ".status", statuses),
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
                timeout=None, stdout=""):
    """CheckResults of one dcgmi run. ``parsed`` from parse_diag (None: ``error`` says why it is
    missing); ``rc`` the exit status; ``requested_tests`` the named tests that must have run. dcgmi
    prints its own errors on stdout (dcgmi/Command.cpp, std::cout): without a document, the last line
    of stdout is named too."""
    results = CheckResults()
    command = run or "dcgmi diag"
    stderr_tail = _cut((stderr or "").strip().splitlines()[-1]) if (stderr or "").strip() else ""
    label = "stderr"
    if parsed is None and not stderr_tail and isinstance(stdout, str) and stdout.strip():
        stderr_tail, label = _cut(stdout.strip().splitlines()[-1]), "stdout"
    if timed_out:
        results.fail(RUN_CHECK, "node", "%s did not finish within %s s: killed, the burn-in did not pass"
                     % (command, timeout), observed={"rc": rc, "timed_out": True})
        return results
    if parsed is None:
        detail = error or "no output"
        if rc:
            message = "%s exited %s without a JSON result (%s)%s" % (
                command, rc, detail, ("; %s: %s" % (label, stderr_tail)) if stderr_tail else "")
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
            passed_with_warnings = status == PASS and bool(result["warnings"])
            if status in (FAIL, WARN) or passed_with_warnings:
                failed_any = failed_any or status == FAIL
                text = "; ".join(result["warnings"] or result["info"]) or "no message from DCGM"
                if passed_with_warnings:
                    # DCGM said Pass but wrote a warning (e.g. persistence mode off): visible as a warn
                    text, status = "Pass with a DCGM warning: %s" % text, WARN
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
            why = "; ".join(test.get("summary_messages") or []) or "no message from DCGM"
            results.fail(TEST_CHECK, test["name"], _cut("%s: test summary Fail: %s" % (label, why)),
                         observed={"test": test["name"]})
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
    """Run dcgmi through ``runner`` (module_utils/core/runner.py) -> (CheckResults, raw info)."""
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
                         requested_tests=tests, run="dcgmi " + shown, timeout=timeout, stdout=answer.stdout)
    return checks, {"command": args, "rc": answer.rc, "timed_out": bool(answer.timed_out),
                    "version": (parsed or {}).get("version")}


def run_nccl(runner, command, min_busbw_gbps=None, timeout=None, target="node"):
    """A single-node nccl-tests run (e.g. ``all_reduce_perf -b 8 -e 1G -f 2 -g 8``) judged by the
    one NCCL parser (module_utils/gpu/nccl.py): checks ``k8s.nccl.busbw`` and ``k8s.nccl.wrong``."""
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
