# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
name: fleet_report
type: aggregate
short_description: Fleet health report from validation checks (summary table, JSON, JUnit, HTML)
version_added: 0.1.0
description:
  - Collects every task result that carries a C(checks) list (the gpufleet check-result model with
    C(id), C(target), C(status), C(message), optional C(observed) and C(expected)), from ok and
    failed tasks alike, including the items of looped tasks.
  - Per host, the latest result for a check C(id) and C(target) replaces an earlier one (a
    re-validation after remediation supersedes the first run); checks keep the position where they
    were first seen. A host that becomes unreachable gets a failing check C(host.unreachable),
    dropped again when a later task on that host returns checks.
  - "At the end of the playbook prints a per-host summary sorted worst first (most failed checks,
    then most warnings) with the first failing (else warning) check of each host. For a host
    without failures or warnings it names the check families whose checks were all skipped and
    why (for example C(gpu skipped: no NVIDIA GPU on the PCI bus)). With more hosts than
    O(summary_limit) only hosts with failures or warnings are listed (up to the limit) and the
    rest are counted."
  - Writes to O(dir) C(fleet-report.json) (hosts with their checks, summary and health, totals,
    generation time), C(junit.xml) (one testsuite per host, one testcase C(<id>[<target>]) per
    check; fail is a failure, skip is skipped, warn passes with its message in system-out), and
    C(fleet-report.html), a self-contained page (inline CSS, no scripts, no external assets) with
    a host x check-group grid (group = the id up to its second dot, for example C(gpu.ecc),
    C(rdma.port)) coloured by the worst status, the failing and warning messages per host and
    any bandwidth matrix.
  - "A task result may carry C(bandwidth_matrix), a dict C({title, hosts: [...], gbps: [[...]]}) with
    one row per sender and one column per receiver (null for a pair not measured); the latest matrix
    per title (default the task name) is rendered as a heatmap and stored in the JSON."
  - Nothing is written when no task returned checks or a bandwidth matrix.
requirements:
  - Enabled in C(callbacks_enabled) (the C(ansible.cfg) of this collection does).
options:
  dir:
    description:
      - Directory the reports are written to; created when missing.
      - A relative path is relative to the current directory (to the directory of C(ansible.cfg)
        when set there).
    type: path
    default: ./reports
    env:
      - name: GPUFLEET_REPORT_DIR
    ini:
      - section: fleet_report
        key: dir
  html:
    description: Write C(fleet-report.html).
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_HTML
    ini:
      - section: fleet_report
        key: html
  junit:
    description: Write C(junit.xml).
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_JUNIT
    ini:
      - section: fleet_report
        key: junit
  summary:
    description:
      - Print the summary at the end of the playbook.
      - It is never printed while the stdout callback writes JSON (C(json), C(jsonl), for example
        C(ansible.posix.json)), whose output must stay parseable; the files are written anyway.
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_SUMMARY
    ini:
      - section: fleet_report
        key: summary
  summary_limit:
    description:
      - Most host lines in the printed summary. Fleets above it list only hosts with failures or
        warnings and print a count for the others.
    type: int
    default: 40
    env:
      - name: GPUFLEET_REPORT_SUMMARY_LIMIT
    ini:
      - section: fleet_report
        key: summary_limit
"""

import datetime
import html
import json
import os
import re
import tempfile
import xml.etree.ElementTree as ET

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

STATUSES = ("pass", "warn", "fail", "skip")
SEVERITY = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}
UNREACHABLE_ID = "host.unreachable"
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
DEFAULTS = {"dir": "./reports", "html": True, "junit": True, "summary": True, "summary_limit": 40}


def check_group(check_id):
    """``gpu.ecc.volatile_uncorrectable`` -> ``gpu.ecc``; ``gpu.count`` -> ``gpu.count``."""
    return ".".join(str(check_id).split(".")[:2])


def worst(statuses):
    result = None
    for status in statuses:
        if result is None or SEVERITY[status] > SEVERITY[result]:
            result = status
    return result


def summarize(checks):
    counts = dict((status, 0) for status in STATUSES)
    for check in checks:
        counts[check["status"]] += 1
    return counts


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
        if any(c["status"] != "skip" for c in members):
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


def _text(value):
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _xml(value):
    return _XML_INVALID.sub("?", _text(value))


def _esc(value):
    return html.escape(_text(value), quote=True)


def _normalise_check(check, task_name):
    """A clean copy of a check dict, or None when it is not one."""
    if not isinstance(check, dict) or check.get("status") not in STATUSES or not check.get("id"):
        return None
    clean = {"id": str(check["id"]), "target": str(check.get("target") or "node"),
             "status": check["status"], "message": _text(check.get("message", ""))}
    for key in ("observed", "expected"):
        if key in check:
            clean[key] = check[key]
    if task_name:
        clean["task"] = task_name
    return clean


def _valid_matrix(matrix):
    if not isinstance(matrix, dict):
        return False
    hosts, gbps = matrix.get("hosts"), matrix.get("gbps")
    if not isinstance(hosts, list) or not isinstance(gbps, list) or len(gbps) != len(hosts):
        return False
    for row in gbps:
        if not isinstance(row, list) or len(row) != len(hosts):
            return False
        for value in row:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                return False
    return True


class FleetReport(object):
    """The collected checks and matrices, and the renderers (kept apart from Ansible's plumbing)."""

    def __init__(self):
        self.hosts = {}
        self.matrices = {}
        self.playbook = None

    # ------------------------------------------------------------------ collection
    def add_checks(self, host, checks, task_name=None):
        entry = self.hosts.setdefault(host, {})
        added = 0
        for check in checks or []:
            clean = _normalise_check(check, task_name)
            if clean is None:
                continue
            entry[(clean["id"], clean["target"])] = clean
            added += 1
        if added:
            entry.pop((UNREACHABLE_ID, "node"), None)
        elif not entry:
            del self.hosts[host]
        return added

    def add_unreachable(self, host, message, task_name=None):
        entry = self.hosts.setdefault(host, {})
        entry[(UNREACHABLE_ID, "node")] = _normalise_check(
            {"id": UNREACHABLE_ID, "target": "node", "status": "fail",
             "message": message or "host unreachable"}, task_name)

    def add_matrix(self, matrix, task_name=None):
        if not _valid_matrix(matrix):
            return False
        title = _text(matrix.get("title") or task_name or "bandwidth matrix")
        self.matrices[title] = {"title": title, "hosts": [_text(h) for h in matrix["hosts"]],
                                "gbps": [list(row) for row in matrix["gbps"]]}
        return True

    @property
    def empty(self):
        return not self.hosts and not self.matrices

    # ------------------------------------------------------------------ model
    def host_rows(self):
        """[(host, checks, summary)] sorted worst first: fails, then warns, then name."""
        rows = []
        for host, entry in self.hosts.items():
            checks = list(entry.values())
            rows.append((host, checks, summarize(checks)))
        rows.sort(key=lambda row: (-row[2]["fail"], -row[2]["warn"], row[0]))
        return rows

    def totals(self, rows):
        totals = dict((status, 0) for status in STATUSES)
        for _host, _checks, summary in rows:
            for status in STATUSES:
                totals[status] += summary[status]
        unhealthy = sum(1 for row in rows if row[2]["fail"])
        warned = sum(1 for row in rows if not row[2]["fail"] and row[2]["warn"])
        totals.update({"hosts": len(rows), "healthy": len(rows) - unhealthy, "unhealthy": unhealthy,
                       "with_warnings": warned})
        return totals

    def as_dict(self, generated_at):
        rows = self.host_rows()
        hosts = {}
        for host, checks, summary in rows:
            hosts[host] = {"healthy": summary["fail"] == 0, "summary": summary,
                           "unreachable": any(c["id"] == UNREACHABLE_ID for c in checks), "checks": checks}
        return {"generated_at": generated_at, "playbook": self.playbook, "totals": self.totals(rows),
                "hosts": hosts, "bandwidth_matrices": list(self.matrices.values())}

    # ------------------------------------------------------------------ console
    def summary_lines(self, limit):
        """[(text, status)] of the printed summary; status picks the colour (None: plain)."""
        rows = self.host_rows()
        totals = self.totals(rows)
        lines = [("%d host(s): %d unhealthy, %d with warnings, %d healthy  (checks: fail %d, warn %d, "
                  "pass %d, skip %d)" % (totals["hosts"], totals["unhealthy"], totals["with_warnings"],
                                         totals["healthy"] - totals["with_warnings"], totals["fail"],
                                         totals["warn"], totals["pass"], totals["skip"]), None)]
        if not rows:
            return lines
        limit = max(int(limit or 0), 1)
        if len(rows) <= limit:
            shown = rows
        else:
            shown = [row for row in rows if row[2]["fail"] or row[2]["warn"]][:limit]
        width = min(max([len(host) for host, _c, _s in shown] + [4]), 40)
        header = "%-*s %5s %5s %5s %5s  %s" % (width, "HOST", "FAIL", "WARN", "PASS", "SKIP",
                                               "FIRST PROBLEM / SKIPPED")
        lines.append((header, None))
        for host, checks, summary in shown:
            problem = ""
            bad = sorted((c for c in checks if c["status"] in ("fail", "warn")),
                         key=lambda c: -SEVERITY[c["status"]])
            if bad:
                problem = "%s[%s]: %s" % (bad[0]["id"], bad[0]["target"], " ".join(bad[0]["message"].split()))
                if len(problem) > 100:
                    problem = problem[:97] + "..."
            else:
                problem = skipped_families(checks)
                if len(problem) > 120:
                    problem = problem[:117] + "..."
            status = "fail" if summary["fail"] else "warn" if summary["warn"] else "pass"
            name = host if len(host) <= width else host[:width - 3] + "..."
            lines.append(("%-*s %5d %5d %5d %5d  %s" % (width, name, summary["fail"], summary["warn"],
                                                         summary["pass"], summary["skip"], problem), status))
        listed = set(row[0] for row in shown)
        hidden = [row for row in rows if row[0] not in listed]
        hidden_bad = sum(1 for row in hidden if row[2]["fail"] or row[2]["warn"])
        if hidden_bad:
            lines.append(("... %d more host(s) with failures or warnings not listed (see the report)"
                          % hidden_bad, "warn"))
        if len(hidden) - hidden_bad:
            lines.append(("... %d healthy host(s) without warnings not listed" % (len(hidden) - hidden_bad),
                          None))
        return lines

    # ------------------------------------------------------------------ JUnit
    def junit(self, generated_at):
        rows = self.host_rows()
        totals = self.totals(rows)
        suites = ET.Element("testsuites", {
            "name": "gpufleet fleet report", "tests": str(sum(len(r[1]) for r in rows)),
            "failures": str(totals["fail"]), "skipped": str(totals["skip"]), "errors": "0"})
        for host, checks, summary in rows:
            suite = ET.SubElement(suites, "testsuite", {
                "name": _xml(host), "tests": str(len(checks)), "failures": str(summary["fail"]),
                "skipped": str(summary["skip"]), "errors": "0", "timestamp": generated_at})
            for check in checks:
                case = ET.SubElement(suite, "testcase", {
                    "classname": _xml(host), "name": _xml("%s[%s]" % (check["id"], check["target"]))})
                detail = _check_detail(check)
                if check["status"] == "fail":
                    failure = ET.SubElement(case, "failure", {"message": _xml(check["message"]),
                                                              "type": _xml(check["id"])})
                    failure.text = _xml(detail)
                elif check["status"] == "skip":
                    ET.SubElement(case, "skipped", {"message": _xml(check["message"])})
                elif check["status"] == "warn":
                    out = ET.SubElement(case, "system-out")
                    out.text = _xml("WARN: " + detail)
        return ET.tostring(suites, encoding="unicode")

    # ------------------------------------------------------------------ HTML
    def html(self, generated_at, open_limit=25):
        rows = self.host_rows()
        totals = self.totals(rows)
        groups = sorted(set(check_group(c["id"]) for _h, checks, _s in rows for c in checks))
        out = [_HTML_HEAD]
        out.append("<h1>gpufleet fleet report</h1>")
        out.append('<p class="meta">Generated %s%s. <b>%d</b> host(s): '
                   '<span class="t-fail">%d unhealthy</span>, <span class="t-warn">%d with warnings</span>, '
                   '%d healthy. Checks: %d fail, %d warn, %d pass, %d skip.</p>' % (
                       _esc(generated_at), " by playbook " + _esc(self.playbook) if self.playbook else "",
                       totals["hosts"], totals["unhealthy"], totals["with_warnings"],
                       totals["healthy"] - totals["with_warnings"], totals["fail"], totals["warn"],
                       totals["pass"], totals["skip"]))
        if rows:
            out.append(_LEGEND)
            out.append('<h2>Hosts &times; check groups</h2><div class="scroll"><table class="grid">'
                       '<thead><tr><th class="host">host</th><th>fail</th><th>warn</th>')
            out.extend('<th class="group"><span>%s</span></th>' % _esc(group) for group in groups)
            out.append("</tr></thead><tbody>")
            for index, (host, checks, summary) in enumerate(rows):
                by_group = {}
                for check in checks:
                    by_group.setdefault(check_group(check["id"]), []).append(check)
                bad = summary["fail"] or summary["warn"]
                name = '<a href="#h%d">%s</a>' % (index, _esc(host)) if bad else _esc(host)
                out.append('<tr><th class="host">%s</th><td class="n">%s</td><td class="n">%s</td>' % (
                    name, summary["fail"] or "", summary["warn"] or ""))
                for group in groups:
                    members = by_group.get(group)
                    if not members:
                        out.append('<td class="none"></td>')
                        continue
                    status = worst(c["status"] for c in members)
                    counts = summarize(members)
                    title = "%s on %s: %s" % (group, host, ", ".join(
                        "%d %s" % (counts[s], s) for s in ("fail", "warn", "pass", "skip") if counts[s]))
                    out.append('<td class="s-%s" title="%s">%s</td>' % (status, _esc(title), _SYMBOL[status]))
                out.append("</tr>")
            out.append("</tbody></table></div>")
            problems = [(i, row) for i, row in enumerate(rows) if row[2]["fail"] or row[2]["warn"]]
            out.append("<h2>Failing and warning checks</h2>")
            if not problems:
                out.append("<p>No check failed or warned.</p>")
            for position, (index, (host, checks, summary)) in enumerate(problems):
                out.append('<details id="h%d"%s><summary><b>%s</b> &mdash; %d fail, %d warn, %d pass, %d skip'
                           '</summary><ul class="problems">' % (
                               index, " open" if position < open_limit else "", _esc(host), summary["fail"],
                               summary["warn"], summary["pass"], summary["skip"]))
                for check in sorted((c for c in checks if c["status"] in ("fail", "warn")),
                                    key=lambda c: -SEVERITY[c["status"]]):
                    out.append('<li class="s-%s"><code>%s[%s]</code> %s%s</li>' % (
                        check["status"], _esc(check["id"]), _esc(check["target"]), _esc(check["message"]),
                        _observed_html(check)))
                out.append('</ul><details><summary>all %d checks</summary><table class="checks">'
                           "<tr><th>status</th><th>check</th><th>message</th><th>task</th></tr>"
                           % len(checks))
                for check in checks:
                    out.append('<tr class="s-%s"><td>%s</td><td><code>%s[%s]</code></td>'
                               "<td>%s</td><td>%s</td></tr>" % (
                                   check["status"], check["status"], _esc(check["id"]), _esc(check["target"]),
                                   _esc(check["message"]), _esc(check.get("task", ""))))
                out.append("</table></details></details>")
            out.append('<p class="meta">Full results of every host, healthy ones included, are in '
                       "fleet-report.json and junit.xml next to this page.</p>")
        for matrix in self.matrices.values():
            out.append(_matrix_html(matrix))
        out.append("</body></html>\n")
        return "\n".join(out)


def _check_detail(check):
    text = check["message"]
    if "observed" in check:
        text += "\nobserved: " + _text(check["observed"])
    if "expected" in check:
        text += "\nexpected: " + _text(check["expected"])
    if check.get("task"):
        text += "\ntask: " + check["task"]
    return text


def _observed_html(check):
    parts = []
    for key in ("observed", "expected"):
        if key in check and check[key] is not None:
            value = _text(check[key])
            if len(value) > 200:
                value = value[:197] + "..."
            parts.append("%s %s" % (key, _esc(value)))
    return ' <span class="obs">(%s)</span>' % "; ".join(parts) if parts else ""


def _matrix_html(matrix):
    hosts, gbps = matrix["hosts"], matrix["gbps"]
    values = [v for row in gbps for v in row if v is not None]
    top = max(values) if values else 0
    out = ["<h2>%s</h2>" % _esc(matrix["title"]),
           '<p class="meta">Gb/s, row = sender, column = receiver; colour relative to the best pair '
           '(%.1f Gb/s).</p>' % top,
           '<details%s><summary>%d x %d hosts</summary><div class="scroll"><table class="matrix">'
           "<tr><th></th>" % (" open" if len(hosts) <= 32 else "", len(hosts), len(hosts))]
    out.extend('<th class="group"><span>%s</span></th>' % _esc(host) for host in hosts)
    out.append("</tr>")
    for sender, row in zip(hosts, gbps):
        out.append('<tr><th class="host">%s</th>' % _esc(sender))
        for receiver, value in zip(hosts, row):
            if value is None:
                out.append('<td class="none" title="%s">&ndash;</td>' % _esc("%s -> %s: not measured"
                                                                             % (sender, receiver)))
                continue
            ratio = value / top if top else 0
            out.append('<td style="background:hsl(%d,70%%,72%%)" title="%s">%.0f</td>' % (
                int(120 * max(0.0, min(ratio, 1.0))), _esc("%s -> %s: %.2f Gb/s" % (sender, receiver, value)),
                value))
        out.append("</tr>")
    out.append("</table></div></details>")
    return "".join(out)


_SYMBOL = {"fail": "&#10007;", "warn": "!", "pass": "&#10003;", "skip": "&ndash;"}

_HTML_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpufleet fleet report</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1d2330}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.4em 0 .5em}
.meta{color:#555}.t-fail{color:#b3261e;font-weight:600}.t-warn{color:#8a5a00;font-weight:600}
.scroll{overflow:auto;max-height:80vh;border:1px solid #ddd}
table{border-collapse:collapse}th,td{padding:2px 6px;border:1px solid #e3e3e3;text-align:center}
.grid thead th,.matrix tr:first-child th{position:sticky;top:0;background:#f6f7f9;z-index:1}
th.host{text-align:left;white-space:nowrap;position:sticky;left:0;background:#fafafa}
th.group{vertical-align:bottom}
th.group span{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
td.n{font-variant-numeric:tabular-nums;color:#555}
.s-fail{background:#f4c7c3;color:#8c1d18}.s-warn{background:#fde7b0;color:#6b4500}
.s-pass{background:#cdebd3;color:#1e5b2d}.s-skip{background:#eceff1;color:#666}td.none{background:#fff}
ul.problems{margin:.3em 0 .5em 1.2em;padding:0}ul.problems li{margin:.15em 0;padding:1px 4px;list-style:none}
.obs{color:#555}details{margin:.2em 0}summary{cursor:pointer}
table.checks td{text-align:left}.legend span{display:inline-block;padding:0 .6em;margin-right:.4em}
</style></head><body>"""

_LEGEND = ('<p class="legend"><span class="s-fail">&#10007; fail</span><span class="s-warn">! warn</span>'
           '<span class="s-pass">&#10003; pass</span><span class="s-skip">&ndash; skip</span>'
           "Cell = worst status of the host's checks in that group; hover for counts.</p>")


def _json_stdout():
    """Whether the stdout callback prints JSON (json, jsonl, ansible.posix.json, ...)."""
    try:
        name = C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or ""
    except Exception:  # pylint: disable=broad-except
        return False
    return str(name).rsplit(".", 1)[-1] in ("json", "jsonl")


def _write(directory, name, text):
    fd, tmp = tempfile.mkstemp(prefix="." + name, dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return os.path.join(directory, name)


class CallbackModule(CallbackBase):
    """Aggregate callback writing the gpufleet fleet report."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.fleet_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super(CallbackModule, self).__init__(display=display)
        self.report = FleetReport()
        self.written = []

    def _option(self, name):
        try:
            value = self.get_option(name)
        except KeyError:
            value = None
        return DEFAULTS[name] if value is None else value

    @staticmethod
    def _parts(result):
        host = getattr(result, "host", None) or result._host
        data = getattr(result, "result", None)
        if not isinstance(data, dict):
            data = result._result
        try:
            task_name = result.task_name
        except AttributeError:
            task = getattr(result, "task", None) or result._task
            task_name = task.get_name() if task is not None else None
        return host.get_name(), data, task_name

    def _collect(self, result):
        host, data, task_name = self._parts(result)
        payloads = [data] + [item for item in data.get("results", []) or [] if isinstance(item, dict)]
        for payload in payloads:
            if isinstance(payload.get("checks"), list):
                self.report.add_checks(host, payload["checks"], task_name)
            matrix = payload.get("bandwidth_matrix")
            if matrix is not None and not self.report.add_matrix(matrix, task_name):
                self._display.warning("fleet_report: ignoring bandwidth_matrix of task %r on %s: expected "
                                      "{hosts: [n names], gbps: [n rows of n numbers or null]}"
                                      % (task_name, host))

    def v2_playbook_on_start(self, playbook):
        name = os.path.basename(getattr(playbook, "_file_name", None) or "")
        self.report.playbook = name if name and not name.startswith("__adhoc") else None

    def v2_runner_on_ok(self, result):
        self._collect(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._collect(result)

    def v2_runner_on_async_ok(self, result):
        self._collect(result)

    def v2_runner_on_async_failed(self, result):
        self._collect(result)

    def v2_runner_on_unreachable(self, result):
        host, data, task_name = self._parts(result)
        self.report.add_unreachable(host, "unreachable: %s" % _text(data.get("msg", "")).strip(), task_name)

    def v2_playbook_on_stats(self, stats):
        if self.report.empty:
            self._display.vvv("fleet_report: no task returned checks; no report written")
            return
        generated_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        generated_at = generated_at.replace("+00:00", "Z")
        printing = self._option("summary") and not _json_stdout()
        if printing:
            self._display.banner("FLEET REPORT")
            colours = {"fail": C.COLOR_ERROR, "warn": C.COLOR_WARN, "pass": C.COLOR_OK}
            for text, status in self.report.summary_lines(self._option("summary_limit")):
                self._display.display(text, color=colours.get(status))
        directory = self._option("dir")
        try:
            os.makedirs(directory, exist_ok=True)
            document = json.dumps(self.report.as_dict(generated_at), indent=2, default=str) + "\n"
            self.written = [_write(directory, "fleet-report.json", document)]
            if self._option("junit"):
                self.written.append(_write(directory, "junit.xml", '<?xml version="1.0" encoding="UTF-8"?>\n'
                                           + self.report.junit(generated_at) + "\n"))
            if self._option("html"):
                self.written.append(_write(directory, "fleet-report.html", self.report.html(generated_at)))
        except (OSError, ValueError) as exc:
            self._display.warning("fleet_report: cannot write the report to %s: %s" % (directory, exc))
            return
        if printing:
            self._display.display("reports: %s" % ", ".join(self.written))
        else:
            self._display.vvv("fleet_report: reports written: %s" % ", ".join(self.written))
