# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side fleet report: collection of task results, ranking, JSON and JUnit.

The ``fleet_report`` callback feeds task results in; this module decides what they mean. The
check model itself (statuses, summary, healthy, worst status) is the modules' one,
``plugins/module_utils/core/checks.py`` (see ``docs/contracts.md``). The HTML page is rendered by
``fleet_report_html`` from a Jinja2 template.

Synthetic checks (status ``fail``, target as stated), so that no host is ever lost:

- ``host.unreachable`` (target ``node``): a task could not reach the host. Dropped again when a
  later task on that host returns checks.
- ``host.validation`` (target = the task name): a validation task failed on the host without
  returning checks (module exception, failure before the checks were built, async or task
  timeout). The message holds Ansible's ``msg`` and the last line of the exception. Dropped when
  the same task later returns checks on that host (a retry).
- ``host.validation`` (target ``node``): the host was in a validation play but returned no
  validation result at all (it failed or became unreachable in an earlier task or play, or the
  play ended before its validation tasks ran). The message names the host's last failure.

A validation task is a task of a check-returning module of this collection (``VALIDATION_MODULES``)
or any task that returned ``checks`` on at least one host; a validation play is a play that ran
one. A host whose validation tasks were all skipped (``when``) counts as reported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    FAIL, PASS, SEVERITIES, SKIP, STATUSES, WARN, is_healthy, json_safe, severity, summarize, worst)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.report_json import to_json
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.report_xml import attribute_escaper, closed

UNREACHABLE_ID = "host.unreachable"
VALIDATION_ID = "host.validation"
SYNTHETIC_IDS = (UNREACHABLE_ID, VALIDATION_ID)
# Modules of this collection whose result carries ``checks`` (docs/contracts.md).
VALIDATION_MODULES = frozenset(("node_validate", "gpu_health", "rdma_validate", "record_checks", "rdma_bandwidth",
                                "fleet_conditions"))
COLLECTION_PREFIX = "gpufleet.cluster."
# Version of the report JSON (docs/contracts.md "Reports"): raised when a field changes meaning or
# goes away; new fields alone do not raise it. 1: the first versioned form (failing_since,
# not_considered).
SCHEMA_VERSION = 1
# The inventory group of GPU nodes (docs/inventory.md): a host of it whose every check skipped
# was not validated (it is not "healthy").
GPU_GROUP = "gpu_nodes"

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_REASON_LIMIT = 400
_PROBLEM_WIDTH = 120  # characters of the summary's "first problem" column


def text(value):
    """Display text of any value (strings as they are, the rest as strict JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(json_safe(value), sort_keys=True, allow_nan=False)


def xml_text(value):
    return _XML_INVALID.sub("?", text(value))


def _number_text(value):
    if isinstance(value, float):
        if not math.isfinite(value):
            return json_safe(value)
        return ("%.3f" % value).rstrip("0").rstrip(".") if value != int(value) else "%d" % value
    return str(value)


def human(value, limit=200):
    """Display text of an observed or expected value for people: strings as they are, numbers
    without noise, lists as ``a, b, c`` (empty: ``none``), dicts as ``key: value, key: value`` (nested
    values in parentheses), no JSON quotes or brackets; at most ``limit`` characters."""
    def render(item, nested):
        if item is None:
            return "none"
        if isinstance(item, bool):
            return "yes" if item else "no"
        if isinstance(item, (int, float)):
            return _number_text(item)
        if isinstance(item, (list, tuple)):
            inner = ", ".join(render(x, len(item) > 1) for x in item) if item else "none"
            return "(%s)" % inner if nested and len(item) > 1 else inner
        if isinstance(item, dict):
            inner = ", ".join("%s: %s" % (k, render(v, True)) for k, v in item.items()) if item else "none"
            return "(%s)" % inner if nested else inner
        return " ".join(text(item).split())
    shown = render(value, False)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


# ---------------------------------------------------------------------- the collection
def collection_info(root=COLLECTION_ROOT):
    """``{version, repository}`` of this collection: galaxy.yml of a checkout, else MANIFEST.json of
    an installed collection; missing values are None."""
    info = {"version": None, "repository": None}
    try:
        import yaml  # ansible-core's own dependency
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
            galaxy = yaml.safe_load(handle) or {}
        info.update({"version": galaxy.get("version"), "repository": galaxy.get("repository")})
    except Exception:  # pylint: disable=broad-except
        try:
            with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as handle:
                manifest = json.load(handle).get("collection_info") or {}
            info.update({"version": manifest.get("version"), "repository": manifest.get("repository")})
        except Exception:  # pylint: disable=broad-except
            pass
    return dict((key, None if value is None else str(value)) for key, value in info.items())


# ---------------------------------------------------------------------- checks
def check_group(check_id):
    """``gpu.ecc.volatile_uncorrectable`` -> ``gpu.ecc``; ``gpu.count`` -> ``gpu.count``."""
    return ".".join(str(check_id).split(".")[:2])


def problems_first(checks):
    """The failing then warning checks, each group in its original order."""
    return [c for c in checks if c["status"] == FAIL] + [c for c in checks if c["status"] == WARN]


def skipped_families(checks):
    """``gpu skipped: <reason>; rdma skipped: <reason>`` for the check families (id up to the
    first dot) whose checks all skipped; the reason is the family's most common skip message."""
    families, order = {}, []
    for check in checks:
        family = str(check["id"]).split(".", 1)[0]
        if family not in families:
            order.append(family)
        families.setdefault(family, []).append(check)
    notes = []
    for family in order:
        members = families[family]
        if any(c["status"] != SKIP for c in members):
            continue
        counts, first = {}, []
        for check in members:
            message = " ".join(check["message"].split())
            if message not in counts:
                first.append(message)
            counts[message] = counts.get(message, 0) + 1
        reason = max(first, key=lambda m: (counts[m], -first.index(m)))
        notes.append("%s skipped: %s" % (family, reason) if reason else "%s skipped" % family)
    return "; ".join(notes)


def normalise_check(check, task_name=None, play=None):
    """A clean copy of a check dict, or None when it is not one (``task`` and ``play``: where it
    came from; the fleet picture merges runs by play, fleet_report_store)."""
    if not isinstance(check, dict) or check.get("status") not in STATUSES or not check.get("id"):
        return None
    clean = {"id": str(check["id"]), "target": str(check.get("target") or "node"),
             "status": check["status"], "message": text(check.get("message", ""))}
    for key in ("observed", "expected"):
        if key in check:
            clean[key] = json_safe(check[key])
    if check.get("error") not in (None, ""):
        clean["error"] = text(check["error"])  # a reading that could not be taken (docs/contracts.md)
    if task_name:
        clean["task"] = str(task_name)
    if play is not None:
        clean["play"] = str(play)
    return clean


# What a check's observed and expected values are, where "observed" would mislead: rdma.modules
# returns the required modules that are NOT loaded as observed (module_utils/rdma/rdma_checks.py), so
# with every module missing, "observed" would equal "expected".
VALUE_LABELS = {"rdma.modules": ("missing", "required")}


def value_labels(check):
    return VALUE_LABELS.get(check.get("id"), ("observed", "expected"))


def value_detail(check, limit=200, separator="; "):
    """``observed 7 (pci 8); expected 8``: a check's observed and expected values for people
    (``human``), labelled by ``value_labels``; empty when it has neither."""
    parts = []
    for key, label in zip(("observed", "expected"), value_labels(check)):
        if key in check and check[key] is not None:
            parts.append("%s %s" % (label, human(check[key], limit)))
    return separator.join(parts)


def check_detail(check):
    detail = check["message"]
    for key, label in zip(("observed", "expected"), value_labels(check)):
        if key in check:
            detail += "\n%s: %s" % (label, human(check[key], limit=2000))
    if check.get("error"):
        detail += "\ncould not be measured: " + check["error"]
    if check.get("task"):
        detail += "\ntask: " + check["task"]
    return detail


def is_validation_action(action):
    """Whether a task action (as written: FQCN or short name) is a check-returning module."""
    action = str(action or "")
    if action.startswith(COLLECTION_PREFIX):
        action = action[len(COLLECTION_PREFIX):]
    return action in VALIDATION_MODULES


def failure_reason(data):
    """One line saying why a task failed: Ansible's msg and the last line of the exception."""
    msg = " ".join(text(data.get("msg") or "").split())
    tail = ""
    for key in ("exception", "module_stderr", "stderr"):
        value = data.get(key)
        if isinstance(value, str) and value.strip() and not value.strip().startswith("(traceback unavailable"):
            tail = value.strip().splitlines()[-1].strip()
            break
    if data.get("censored"):
        msg = msg or "output hidden by no_log"
    if msg.startswith("Task failed: "):  # ansible-core 2.19 prefix, says nothing here
        msg = msg[len("Task failed: "):]
    parts = [p for p in (msg, tail) if p]
    if len(parts) == 2 and (tail in msg):
        parts = [msg]
    reason = " | ".join(parts) or "failed without a message"
    if data.get("ansible_job_id"):
        reason += " (async job %s)" % data["ansible_job_id"]
    if len(reason) > _REASON_LIMIT:
        reason = reason[:_REASON_LIMIT - 3] + "..."
    return reason


# Prefixes that say nothing about the cause (ansible-core's own wording around an ssh error).
_NOISE = (re.compile(r"^Task failed:(?: |$)"), re.compile(r"^unreachable:(?: |$)"),
          re.compile(r"^no checks returned:(?: |$)"),
          re.compile(r"^Failed to connect to the host via ssh:(?: |$)"),
          re.compile(r'^Data could not be sent to remote host "[^"]*"\. Make sure this host can be reached over '
                     r'ssh:(?: |$)'))


def cause(message):
    """The cause of a failure message on one line: whitespace folded, the wrappers (ansible-core's
    ``Task failed: ``, ``Failed to connect to the host via ssh: ``, ``Data could not be sent ...``,
    the report's own ``unreachable: `` and ``no checks returned: ``) removed."""
    line = " ".join(text(message or "").split())
    changed = True
    while changed:
        changed = False
        for pattern in _NOISE:
            stripped = pattern.sub("", line, count=1)
            if stripped != line:
                line, changed = stripped, True
    return line


def fit(message, limit):
    """``message`` in at most ``limit`` characters keeping its meaningful end: a cause reads
    ``ssh: Could not resolve hostname dgx-99: Name or service not known`` and the end says why, so
    a long message keeps the most trailing ``: ``-separated parts that fit, after ``...``
    (``...: interpreter '/usr/bin/python9' was not found``), never its head cut off mid-word."""
    line = " ".join(text(message or "").split())
    limit = max(int(limit), 8)
    if len(line) <= limit:
        return line
    if " | " in line:  # failure_reason's "<Ansible's msg> | <the exception's last line>": the msg says it
        head = line.split(" | ", 1)[0]
        if head and len(head) <= limit:
            return head
    parts = line.split(": ")
    for start in range(1, len(parts)):
        tail = ": ".join(parts[start:])
        if len(tail) + 3 <= limit:
            return "..." + tail
    return "..." + line[-(limit - 3):]


def module_seconds(payload):
    """The module's own measured duration of a result (``elapsed_ms``, node_validate) in seconds,
    None when the result has none."""
    value = payload.get("elapsed_ms")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return value / 1000.0 if math.isfinite(value) and value >= 0 else None
    except OverflowError:  # an int too large for a float (10**400, red team round 9): not a duration
        return None


# ---------------------------------------------------------------------- node facts
def _text_or_none(value):
    return None if value in (None, "") else text(value)


def host_facts(data):
    """The node facts of a validation result (node_validate, gpu_health, rdma_validate; see
    docs/contracts.md "Facts"): ``gpu_model`` (the NVML names, ``2x A + 6x B`` when mixed),
    ``gpu_count`` (GPUs NVML sees, else on the PCI bus), ``gpu_pci`` (on the PCI bus), ``driver``
    (NVML's driver version, else the loaded module's), ``ofed`` (``<version>`` of an OFED driver,
    ``inbox <version>`` or ``absent``) and ``hcas`` (RDMA devices). Only what the result holds."""
    facts = {}
    ansible_facts = data.get("ansible_facts") if isinstance(data.get("ansible_facts"), dict) else {}
    nvidia = ansible_facts.get("nvidia") if isinstance(ansible_facts.get("nvidia"), dict) else {}
    mlx5 = ansible_facts.get("mlx5") if isinstance(ansible_facts.get("mlx5"), dict) else {}
    gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)] if isinstance(data.get("gpus"), list) else []
    names, order = {}, []
    for gpu in gpus:
        name = _text_or_none(gpu.get("name")) or "unknown GPU"
        if name not in names:
            order.append(name)
        names[name] = names.get(name, 0) + 1
    if order:
        facts["gpu_model"] = order[0] if len(order) == 1 else " + ".join("%dx %s" % (names[n], n) for n in order)
    if isinstance(nvidia.get("gpu_count"), int):
        facts["gpu_pci"] = nvidia["gpu_count"]
    if gpus or "gpu_pci" in facts:
        facts["gpu_count"] = len(gpus) if gpus else facts["gpu_pci"]
    nvml = data.get("nvml") if isinstance(data.get("nvml"), dict) else {}
    driver = nvidia.get("driver") if isinstance(nvidia.get("driver"), dict) else {}
    version = _text_or_none(nvml.get("driver_version")) or _text_or_none(driver.get("version"))
    if version:
        facts["driver"] = version
    if mlx5:
        source, version = mlx5.get("driver_source"), _text_or_none(mlx5.get("version"))
        if source == "ofed":
            facts["ofed"] = version or "OFED"
        elif source == "inbox":
            facts["ofed"] = "inbox %s" % version if version else "inbox"
        elif mlx5.get("loaded") is False or source == "absent":
            facts["ofed"] = "absent"
        if isinstance(mlx5.get("devices"), (list, dict)):
            facts["hcas"] = len(mlx5["devices"])
    return facts


# ---------------------------------------------------------------------- ranking
_STATUS_ORDER = {FAIL: 0, WARN: 1, PASS: 2, SKIP: 3}


def host_status(checks):
    """The host's worst status (fail > warn > pass > skip)."""
    return worst(c["status"] for c in checks)


def host_severity(checks):
    """Severity (module_utils/core/checks.py ``CHECK_SEVERITY``) of the worst of the host's checks
    that have its worst status; None for a host without failures or warnings."""
    status = host_status(checks)
    if status not in (FAIL, WARN):
        return None
    levels = [severity(c["id"]) for c in checks if c["status"] == status]
    return min(levels, key=SEVERITIES.index)


def rank_key(name, entry):
    """Worst status first, then the worst severity among those checks, then more failures, more
    warnings, then the name: a GPU fallen off the bus (critical) outranks eight gpu.fabric lines."""
    summary = entry["summary"]
    level = entry.get("severity")
    return (_STATUS_ORDER[entry.get("status") or host_status(entry["checks"])],
            SEVERITIES.index(level) if level in SEVERITIES else len(SEVERITIES),
            -summary[FAIL], -summary[WARN], name)


def clean_durations(durations, checks=None):
    """``{task name: seconds}`` with finite numbers >= 0 only; with ``checks``, only the tasks that
    produced one of them (a duration describes the checks of its task)."""
    tasks = None if checks is None else set(c.get("task") for c in checks)
    clean = {}
    for task, seconds in (durations or {}).items() if isinstance(durations, dict) else ():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0 or (tasks is not None and task not in tasks):
            continue
        clean[str(task)] = round(float(seconds), 3)
    return clean


def host_entry(checks, facts=None, durations=None):
    """A host of a report document (docs/contracts.md "Reports")."""
    ids = set(c["id"] for c in checks)
    entry = {"healthy": is_healthy(checks), "status": host_status(checks), "severity": host_severity(checks),
             "summary": summarize(checks), "unreachable": UNREACHABLE_ID in ids,
             "validation_failed": VALIDATION_ID in ids, "checks": checks}
    if facts:
        entry["facts"] = facts
    durations = clean_durations(durations, checks)
    if durations:
        entry["durations"] = durations
    return entry


def rank_hosts(hosts):
    """[(name, entry)] of a document's hosts, worst first (``rank_key``)."""
    return sorted(hosts.items(), key=lambda item: rank_key(item[0], item[1]))


def totals_of(ranked):
    """Totals of ranked hosts: check counts per status, hosts, healthy, unhealthy, with_warnings."""
    totals = dict((status, 0) for status in STATUSES)
    unhealthy = warned = 0
    for _name, entry in ranked:
        for status in STATUSES:
            totals[status] += entry["summary"][status]
        if not entry["healthy"]:
            unhealthy += 1
        elif entry["summary"][WARN]:
            warned += 1
    totals.update({"hosts": len(ranked), "healthy": len(ranked) - unhealthy, "unhealthy": unhealthy,
                   "with_warnings": warned})
    return totals


def _seconds(value):
    return "%.3f" % value


def check_times(entry):
    """``{(id, target): seconds}`` of a host's checks: each validation task's measured duration
    (``durations``) shared evenly by the checks it returned; checks of a task without a measured
    duration (synthetic checks, older reports) have none."""
    durations = entry.get("durations") or {}
    per_task = {}
    for check in entry["checks"]:
        per_task[check.get("task")] = per_task.get(check.get("task"), 0) + 1
    share = {task: durations[task] / count for task, count in per_task.items()
             if isinstance(durations.get(task), (int, float)) and not isinstance(durations.get(task), bool)}
    return {(c["id"], c["target"]): share[c.get("task")] for c in entry["checks"] if c.get("task") in share}


def junit_xml(document, name=None):
    """JUnit XML of a report document: one testsuite per host, one testcase per check.

    fail is a ``failure``; skip is ``skipped``; warn is ``skipped`` whose message and text start
    with ``warning: `` (JUnit parsers know passed, failed, error and skipped only; GitLab reads the
    element's text and no properties, see docs/reports.md) and the property ``gpufleet.status=warn``.
    ``time`` of a testsuite is the host's measured validation time, of a testcase its task's
    duration shared by that task's checks; absent when not measured.

    Written as text: ElementTree's serialisation of the same elements, byte for byte (report_xml)."""
    ranked = list(document["hosts"].items())
    totals = document["totals"]
    stamp = document["generated_at"]
    if name is None:
        name = "gpufleet fleet picture" if document.get("scope") == "fleet" else "gpufleet run %s" % (
            (document.get("run") or {}).get("id") or stamp)
    attr = attribute_escaper()
    head = '<testsuites name="%s" tests="%s" failures="%s" skipped="%s" errors="0"' % (
        attr(xml_text(name)), attr(str(sum(len(e["checks"]) for _n, e in ranked))), attr(str(totals[FAIL])),
        attr(str(totals[SKIP] + totals[WARN])))
    warn_property = '<properties><property name="gpufleet.status" value="%s" /></properties>' % attr(WARN)
    body, total_time, timed, names = [], 0.0, False, {}
    for host, entry in ranked:
        checks, summary = entry["checks"], entry["summary"]
        host_name = attr(xml_text(host))
        suite = '<testsuite name="%s" tests="%s" failures="%s" skipped="%s" errors="0" timestamp="%s"' % (
            host_name, attr(str(len(checks))), attr(str(summary[FAIL])), attr(str(summary[SKIP] + summary[WARN])),
            attr(entry.get("last_seen") or stamp))
        durations = clean_durations(entry.get("durations"))
        if durations:
            suite += ' time="%s"' % _seconds(sum(durations.values()))
            total_time += sum(durations.values())
            timed = True
        body.append(suite + (">" if checks else " />"))
        times = check_times(dict(entry, durations=durations))
        for check in checks:
            key = (check["id"], check["target"])
            case_name = "%s[%s]" % key
            case = names.get(case_name)
            if case is None:
                case = names[case_name] = attr(xml_text(case_name))
            case = '<testcase classname="%s" name="%s"' % (host_name, case)
            if key in times:
                case += ' time="%.3f"' % times[key]  # _seconds
            # the detail (observed and expected, written for people) only where it is written: a
            # passing check has none, and writing it for every check was half of this function's time
            if check["status"] == FAIL:
                body.append('%s><failure message="%s" type="%s"%s</testcase>' % (
                    case, attr(xml_text(check["message"])), attr(xml_text(check["id"])),
                    closed("failure", xml_text(check_detail(check)))))
            elif check["status"] == SKIP:
                # the reason as the element's text too: GitLab reads the content, not the attribute
                body.append('%s><skipped message="%s"%s</testcase>' % (
                    case, attr(xml_text(check["message"])), closed("skipped", xml_text(check["message"]))))
            elif check["status"] == WARN:
                body.append('%s>%s<skipped message="%s"%s</testcase>' % (
                    case, warn_property, attr(xml_text("warning: " + check["message"])),
                    closed("skipped", xml_text("warning: " + check_detail(check)))))
            else:
                body.append(case + " />")
        if checks:
            body.append("</testsuite>")
    if timed:
        head += ' time="%s"' % _seconds(total_time)
    return '<?xml version="1.0" encoding="UTF-8"?>\n%s%s\n' % (
        head, ">%s</testsuites>" % "".join(body) if body else " />")


def run_summary_line(fleet):
    """One line on the fleet picture after a run (fleet_report_store.merge's document)."""
    run = fleet.get("run") or {}
    older = [entry for entry in fleet["hosts"].values() if entry.get("last_run") != run.get("id")]
    totals = fleet["totals"]
    line = "fleet picture: %d host(s), %d unhealthy" % (totals["hosts"], totals["unhealthy"])
    if older:
        line += "; %d not in this run, kept from earlier runs (oldest seen %s)" % (
            len(older), min(text(entry.get("last_seen") or "?") for entry in older))
    return line + "; run %s, %d run(s) kept" % (run.get("id"), len(fleet.get("runs") or []))


# ---------------------------------------------------------------------- bandwidth matrices
def _number_or_none(value):
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _square(rows, size):
    return (isinstance(rows, list) and len(rows) == size
            and all(isinstance(row, list) and len(row) == size and all(_number_or_none(v) for v in row)
                    for row in rows))


def _worst_rail(per_rail, size):
    """Per pair the lowest measured value over the rails; a non-finite value wins (fail closed)."""
    gbps = [[None] * size for _row in range(size)]
    for rows in per_rail.values():
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                current = gbps[i][j]
                if value is None or (isinstance(current, float) and not math.isfinite(current)):
                    continue
                if not math.isfinite(value) or current is None or value < current:
                    gbps[i][j] = value
    return gbps


def normalise_matrix(matrix, task_name=None):
    """``(clean matrix, None)`` or ``(None, reason)`` for a ``bandwidth_matrix`` task result.

    Shape (docs/fabric-test.md): ``{title, hosts, gbps, min_gbps?, rails?, per_rail?}``; ``gbps``
    and each ``per_rail`` matrix hold one row per sender and one column per receiver (null: not
    measured); ``per_rail`` is a dict rail -> matrix, or a list of matrices in the order of
    ``rails``. Without ``gbps`` the worst rail per pair is used.
    """
    if not isinstance(matrix, dict):
        return None, "expected a dict {title, hosts, gbps, min_gbps?, rails?, per_rail?}"
    hosts = matrix.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        return None, "hosts: expected a non-empty list of host names"
    size = len(hosts)
    per_rail = matrix.get("per_rail")
    rails = matrix.get("rails")
    clean_rails = {}
    if per_rail is not None:
        if isinstance(per_rail, dict):
            names = [str(name) for name in per_rail]
            if rails is not None and (not isinstance(rails, list) or sorted(map(str, rails)) != sorted(names)):
                return None, "rails: must list the keys of per_rail"
            order = [str(r) for r in rails] if rails is not None else names
            by_name = dict((str(k), v) for k, v in per_rail.items())
            pairs = [(name, by_name[name]) for name in order]
        elif isinstance(per_rail, list):
            if not isinstance(rails, list) or len(rails) != len(per_rail):
                return None, "per_rail: a list needs rails: [one name per matrix]"
            pairs = list(zip([str(r) for r in rails], per_rail))
        else:
            return None, "per_rail: expected a dict rail -> matrix or a list of matrices"
        for name, rows in pairs:
            if not _square(rows, size):
                return None, "per_rail[%s]: expected %d rows of %d numbers or null" % (name, size, size)
            clean_rails[name] = [list(row) for row in rows]
    elif rails is not None and not isinstance(rails, list):
        return None, "rails: expected a list of rail names"
    gbps = matrix.get("gbps")
    if gbps is None and clean_rails:
        gbps = _worst_rail(clean_rails, size)
    if not _square(gbps, size):
        return None, "gbps: expected %d rows of %d numbers or null (row = sender, column = receiver)" % (
            size, size)
    minimum = matrix.get("min_gbps")
    if minimum is not None and (not _number_or_none(minimum) or not math.isfinite(minimum) or minimum <= 0):
        return None, "min_gbps: expected a positive number, got %r" % (minimum,)
    clean = {"title": text(matrix.get("title") or task_name or "bandwidth matrix"),
             "hosts": [text(h) for h in hosts], "gbps": [list(row) for row in gbps]}
    if minimum is not None:
        clean["min_gbps"] = minimum
    if rails is not None or clean_rails:
        clean["rails"] = list(clean_rails) if clean_rails else [text(r) for r in rails]
    if clean_rails:
        clean["per_rail"] = clean_rails
    return clean, None


# ---------------------------------------------------------------------- the report
class FleetReport(object):
    """Checks and matrices collected over a playbook run, and their JSON/JUnit/summary forms."""

    def __init__(self):
        self.hosts = {}
        self.facts = {}
        self.durations = {}
        self.matrices = {}
        self.playbook = None
        self._play = None
        self._validation_tasks = set()
        self._pending = {}
        self._last_failure = {}
        self.matrix_error = None
        self.matrix_warnings = []
        self.not_considered = []

    # ------------------------------------------------------------------ checks
    def _entry(self, host):
        return self.hosts.setdefault(host, {})

    def add_checks(self, host, checks, task_name=None):
        entry = self._entry(host)
        added = 0
        for check in checks or []:
            clean = normalise_check(check, task_name, self._play_name())
            if clean is None:
                continue
            entry[(clean["id"], clean["target"])] = clean
            added += 1
        if added:
            entry.pop((UNREACHABLE_ID, "node"), None)
            if task_name:
                entry.pop((VALIDATION_ID, str(task_name)), None)
        elif not entry:
            del self.hosts[host]
        return added

    def _measured(self, host, task_name, module_times, wall):
        """Record how long ``task_name`` took on ``host``: the sum of the modules' own
        ``elapsed_ms`` when every result of the task carries one, else the wall time."""
        if not module_times or not task_name or host not in self.hosts:
            return
        if all(seconds is not None for seconds in module_times):
            seconds = sum(module_times)
        elif isinstance(wall, (int, float)) and not isinstance(wall, bool) and wall >= 0:
            seconds = float(wall)
        else:
            return
        self.durations.setdefault(host, {})[str(task_name)] = seconds

    def _play_name(self):
        return self._play["name"] if self._play is not None else None

    def _synthetic(self, host, check_id, target, message, task_name=None):
        check = normalise_check({"id": check_id, "target": target, "status": FAIL, "message": message},
                                task_name, self._play_name())
        self._entry(host)[(check["id"], check["target"])] = check
        self._reported(host)
        return check

    def add_unreachable(self, host, message, task_name=None):
        reason = " ".join(text(message or "").split()) or "host unreachable"
        self._last_failure[host] = "unreachable in task %r: %s" % (task_name, reason) if task_name else reason
        return self._synthetic(host, UNREACHABLE_ID, "node", reason, task_name)

    def add_matrix(self, matrix, task_name=None):
        """The normalised matrix stored under its title, or None with ``self.matrix_error`` set."""
        clean, self.matrix_error = normalise_matrix(matrix, task_name)
        if clean is not None:
            self.matrices[clean["title"]] = clean
        return clean

    @property
    def empty(self):
        return not self.hosts and not self.matrices and not self.not_considered

    def add_not_considered(self, play, hosts, why):
        """Hosts of ``play`` that never ran a task of it (a serial play stopped after a batch failed
        or was unreachable, ``max_fail_percentage``, ``any_errors_fatal``): listed in the report and
        the summary with ``why``, so that a stopped play never ends silently."""
        hosts = [str(h) for h in hosts]
        if hosts:
            self.not_considered.append({"play": text(play or ""), "hosts": hosts, "reason": text(why)})

    def finish(self, gpu_hosts=()):
        """End of the playbook: a host of ``gpu_hosts`` (the inventory group ``GPU_GROUP``) whose
        every check skipped was not validated: it gets ``host.validation`` (target ``node``)
        failing, naming the families and why they skipped, instead of counting as healthy."""
        gpu_hosts = set(gpu_hosts or ())
        for host, entry in self.hosts.items():
            checks = list(entry.values())
            if host not in gpu_hosts or not checks or any(c["status"] != SKIP for c in checks):
                continue
            why = skipped_families(checks) or "every check skipped"
            check = normalise_check({"id": VALIDATION_ID, "target": "node", "status": FAIL,
                                     "message": "not validated: every check of this %s host skipped (%s)"
                                                % (GPU_GROUP, why)},
                                    play=checks[-1].get("play"))
            entry[(VALIDATION_ID, "node")] = check

    # ------------------------------------------------------------------ plays and task results
    def start_play(self, name, hosts=None):
        """A play (or serial batch) starts; ``hosts`` are its hosts when known."""
        self.end_play()
        self._play = {"name": name or "", "hosts": list(hosts) if hosts is not None else None,
                      "validation": False, "reported": set(), "seen": []}

    def _seen(self, host):
        if self._play is not None and host not in self._play["seen"]:
            self._play["seen"].append(host)

    def _reported(self, host):
        if self._play is not None:
            self._play["reported"].add(host)

    def validation_task(self, task_key):
        """Declare a task a validation task (its module returns checks)."""
        if self._play is not None:
            self._play["validation"] = True
        if task_key is None or task_key in self._validation_tasks:
            return
        self._validation_tasks.add(task_key)
        for kind, host, task_name, reason in self._pending.pop(task_key, []):
            if kind == "failed":
                self._validation_failed(host, task_name, reason)
            else:
                self._reported(host)

    def _validation_failed(self, host, task_name, reason):
        self._synthetic(host, VALIDATION_ID, str(task_name or "node"),
                        "no checks returned: %s" % reason, task_name)

    def task_result(self, host, data, task_name=None, outcome="ok", task_key=None, validation=False,
                    duration=None, delegate=None):
        """One task result of ``host``: outcome ok, failed, skipped or unreachable. ``duration``: the
        seconds from the task's start on the host to this result (the callback's clock), used when
        the result does not carry the module's own ``elapsed_ms``. ``delegate``: the host the task
        ran on (``delegate_to``) when not ``host``; an unreachable result is then the delegate's."""
        self._seen(host)
        if validation:
            self.validation_task(task_key)
        if outcome == "unreachable":
            reason = cause(failure_reason(data)) or "cannot be reached"
            if delegate and str(delegate) != host:
                delegate = str(delegate)
                self.add_unreachable(delegate, "unreachable (task %r, delegated for %s): %s"
                                     % (task_name, host, reason), task_name)
                self._last_failure[host] = "task %r could not run: its delegate %s is unreachable: %s" % (
                    task_name, delegate, reason)
                return
            self.add_unreachable(host, "unreachable: %s" % reason, task_name)
            return
        items = [item for item in data.get("results", []) or [] if isinstance(item, dict)]
        returned_checks = False
        measured = []
        failures = []
        # A controller task reporting for other hosts (record_checks option hosts: fleet status
        # from the Kubernetes API, one task for the whole fleet): {host: [checks]}.
        host_checks = data.get("host_checks")
        if isinstance(host_checks, dict):
            returned_checks = True
            for other, checks in host_checks.items():
                if isinstance(checks, list):
                    self.add_checks(str(other), checks, task_name)
        for payload in [data] + items:
            if isinstance(payload.get("checks"), list):
                returned_checks = True
                self.add_checks(host, payload["checks"], task_name)
                measured.append(module_seconds(payload))
                facts = host_facts(payload)
                if facts:
                    self.facts.setdefault(host, {}).update(facts)
            elif payload is not data and payload.get("failed"):
                failures.append(failure_reason(payload))
            matrix = payload.get("bandwidth_matrix")
            if matrix is not None and self.add_matrix(matrix, task_name) is None:
                self.matrix_warnings.append("fleet_report: ignoring bandwidth_matrix of task %r on %s: %s"
                                            % (task_name, host, self.matrix_error))
        if returned_checks:
            self._reported(host)
            self.validation_task(task_key)
            self._measured(host, task_name, measured, duration)
        if outcome == "failed":
            if not failures and not isinstance(data.get("checks"), list) and not isinstance(host_checks, dict):
                failures.append(failure_reason(data))
            if failures:
                reason = failures[0] if len(failures) == 1 else "%s (and %d more failed item(s))" % (
                    failures[0], len(failures) - 1)
                self._last_failure[host] = "task %r failed: %s" % (task_name, reason)
                if task_key is not None and task_key in self._validation_tasks:
                    self._validation_failed(host, task_name, reason)
                else:
                    self._pending.setdefault(task_key, []).append(("failed", host, task_name, reason))
        elif outcome == "skipped":
            if task_key is not None and task_key in self._validation_tasks:
                self._reported(host)
            else:
                self._pending.setdefault(task_key, []).append(("skipped", host, task_name, None))

    def end_play(self):
        """Close the current play: every host of a validation play without a validation result
        gets ``host.validation`` (target ``node``) failing with its last failure."""
        play, self._play = self._play, None
        self._pending = {}
        if not play or not play["validation"]:
            return
        hosts = play["hosts"] if play["hosts"] is not None else play["seen"]
        for host in hosts:
            if host in play["reported"]:
                continue
            why = self._last_failure.get(host)
            message = "not validated in play %r: %s" % (
                play["name"], why or "the play ended, or the host left it, before its validation tasks ran")
            check = normalise_check({"id": VALIDATION_ID, "target": "node", "status": FAIL, "message": message},
                                    play=play["name"])
            self._entry(host)[(VALIDATION_ID, "node")] = check

    # ------------------------------------------------------------------ model
    def host_rows(self):
        """[(host, checks, summary)] ranked worst first (``rank_key``: status, severity, counts, name)."""
        entries = dict((host, host_entry(list(entry.values()))) for host, entry in self.hosts.items())
        return [(host, entry["checks"], entry["summary"]) for host, entry in rank_hosts(entries)]

    @staticmethod
    def totals(rows):
        return totals_of([(host, {"healthy": is_healthy(checks), "summary": summary})
                          for host, checks, summary in rows])

    def as_dict(self, generated_at, run=None):
        """The report document of this run (docs/contracts.md "Reports"); ``run``: its metadata."""
        entries = dict((host, host_entry(list(entry.values()), self.facts.get(host), self.durations.get(host)))
                       for host, entry in self.hosts.items())
        ranked = rank_hosts(entries)
        document = {"generated_at": generated_at, "playbook": self.playbook, "totals": totals_of(ranked),
                    "hosts": dict(ranked), "bandwidth_matrices": list(self.matrices.values())}
        document["schema_version"] = SCHEMA_VERSION
        if self.not_considered:
            document["not_considered"] = [dict(item) for item in self.not_considered]
        if run is not None:
            document.update({"scope": "run", "run": run})
        return document

    def json(self, generated_at):
        return to_json(self.as_dict(generated_at))

    # ------------------------------------------------------------------ console
    def summary_lines(self, limit):
        """[(text, status)] of the printed summary; status picks the colour (None: plain)."""
        rows = self.host_rows()
        totals = self.totals(rows)
        lines = [("%d host(s): %d unhealthy, %d with warnings, %d healthy  (checks: fail %d, warn %d, "
                  "pass %d, skip %d)" % (totals["hosts"], totals["unhealthy"], totals["with_warnings"],
                                         totals["healthy"] - totals["with_warnings"], totals[FAIL],
                                         totals[WARN], totals[PASS], totals[SKIP]), None)]
        if not rows:
            return lines + self._not_considered_lines()
        limit = max(int(limit or 0), 1)
        if len(rows) <= limit:
            shown = rows
        else:
            shown = [row for row in rows if row[2][FAIL] or row[2][WARN]][:limit]
        width = min(max([len(host) for host, _c, _s in shown] + [4]), 40)
        header = "%-*s %5s %5s %5s %5s  %s" % (width, "HOST", "FAIL", "WARN", "PASS", "SKIP",
                                               "FIRST PROBLEM / SKIPPED")
        lines.append((header, None))
        for host, checks, summary in shown:
            bad = problems_first(checks)
            if bad:
                label = "%s[%s]: " % (bad[0]["id"], bad[0]["target"])
                problem = label + fit(cause(bad[0]["message"]), max(_PROBLEM_WIDTH - len(label), 40))
            else:
                problem = skipped_families(checks)
                if len(problem) > 120:
                    problem = problem[:117] + "..."
            status = FAIL if summary[FAIL] else WARN if summary[WARN] else PASS
            name = host if len(host) <= width else host[:width - 3] + "..."
            lines.append(("%-*s %5d %5d %5d %5d  %s" % (width, name, summary[FAIL], summary[WARN],
                                                        summary[PASS], summary[SKIP], problem), status))
        listed = set(row[0] for row in shown)
        hidden = [row for row in rows if row[0] not in listed]
        hidden_bad = sum(1 for row in hidden if row[2][FAIL] or row[2][WARN])
        if hidden_bad:
            lines.append(("... %d more host(s) with failures or warnings not listed (see the report)"
                          % hidden_bad, WARN))
        if len(hidden) - hidden_bad:
            lines.append(("... %d healthy host(s) without warnings not listed" % (len(hidden) - hidden_bad),
                          None))
        return lines + self._not_considered_lines()

    def _not_considered_lines(self):
        return [("%d host(s) of play %r never considered (%s): %s" % (
            len(item["hosts"]), item["play"], item["reason"], ", ".join(item["hosts"])), FAIL)
            for item in self.not_considered]

    # ------------------------------------------------------------------ JUnit
    def junit(self, generated_at):
        return junit_xml(self.as_dict(generated_at))
