# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTML page of the fleet report: view model here, markup in ``templates/fleet_report.html.j2``.

The page is rendered from a report document (a run's, or the fleet picture of
``fleet_report_store.merge``): run metadata, hosts in the document's order (ranked worst first),
their facts, last run and history over the kept runs, the host x check-group grid (columns grouped
by check family under one header each, so a DGX fleet's families fit 1400 px), grouped
failing and warning lines with check ids linked to docs/contracts.md, and the heatmaps. One
inline script sorts and filters the host table (plain JavaScript, works from a file; the state
can be given in the address: ``#q=gpu.fabric&health=fail&sort=host&dir=asc&family=rdma``; a family
scrolls the grid to its columns).

The template sits next to this file, so it is found the same way from a checkout (through the
``.collections`` symlink) and from an installed collection. Jinja2 autoescapes every value.

Heatmap colours (docs/fabric-test.md):

- with ``min_gbps`` in the matrix: a pair at or above the minimum is green; below it, one of four
  reds by the share of the minimum reached (90-100 %, 75-90 %, 50-75 %, under 50 %). A NaN or
  infinite value is "invalid" (dark) and counts as below the minimum (fail closed).
- without a minimum: a hue from red (0) to green (the best measured pair), relative to the best.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    CHECK_SEVERITY, FAIL, PASS, SEVERITIES, SKIP, WARN, group_checks, summarize, worst)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import is_finite_number
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.report_xml import once_per_text
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import (
    check_group, json_safe, problems_first, text, value_detail)

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
TEMPLATE = "fleet_report.html.j2"

# Shares of the minimum (lower bound, css class, legend label) for pairs below it, best first.
BELOW_MINIMUM = ((0.9, "lo1", "90-100 % of min"), (0.75, "lo2", "75-90 %"), (0.5, "lo3", "50-75 %"),
                 (float("-inf"), "lo4", "< 50 %"))
_SYMBOL = {FAIL: "\u2717", WARN: "!", PASS: "\u2713", SKIP: "\u2013"}
_ESCAPED = dict((text, str(escape(text))) for text in list(_SYMBOL) + list(_SYMBOL.values()))  # none needs any

_ENV = {}


def environment():
    """The Jinja2 environment (autoescape on), built once."""
    if "env" not in _ENV:
        _ENV["env"] = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=True,
                                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                  keep_trailing_newline=True)
    return _ENV["env"]


def _observed(check):
    """``observed 7 (pci 8); expected 8``: the check's values for people (fleet_report.value_detail)."""
    return value_detail(check, limit=200)


def anchor(check_id):
    """The anchor in docs/contracts.md of a check id: the id itself when listed in the severity
    table (every listed id has ``<a id="<id>">`` there), else its longest listed prefix, else the
    section "Check ids"."""
    parts = str(check_id).split(".")
    while parts:
        if ".".join(parts) in CHECK_SEVERITY:
            return ".".join(parts)
        parts.pop()
    return "check-ids"


def _facts_text(facts):
    gpu = ""
    count, pci = facts.get("gpu_count"), facts.get("gpu_pci")
    if not count and not facts.get("gpu_model") and count is not None:
        # a host without GPUs (or none NVML sees) does not read "0x GPU"
        gpu = "no GPU" if not pci else "no GPU in NVML"
    elif facts.get("gpu_model") or count is not None:
        model = facts.get("gpu_model") or "GPU"
        if model.startswith("NVIDIA ") and " + " not in model:
            model = model[len("NVIDIA "):]  # "8x H100 80GB HBM3": the vendor says nothing in this column
        gpu = "%s%s" % ("%sx " % count if count is not None else "", model)
    if gpu and pci is not None and count is not None and pci != count:
        gpu += " (%s on the PCI bus)" % pci
    ofed = facts.get("ofed") or ""
    if ofed and facts.get("hcas") is not None:
        ofed += " (%s HCA%s)" % (facts["hcas"], "" if facts["hcas"] == 1 else "s")
    return {"gpu": gpu, "driver": facts.get("driver") or "", "ofed": ofed}


def _lines(checks):
    """Grouped failing-then-warning lines of a host (identical lines as one, targets compressed)."""
    lines = []
    for group in group_checks(problems_first(checks)):
        first = group["checks"][0]
        lines.append({"id": group["id"], "anchor": anchor(group["id"]), "target": group["target"],
                      "status": group["status"], "message": group["message"], "count": len(group["checks"]),
                      "detail": _observed(first) if len(group["checks"]) == 1 else "",
                      "since": first.get("failing_since") if group["status"] == FAIL else None})
    return lines


def check_family(check_id):
    """``rdma.port.state`` -> ``rdma``: the family of a check id (its first part)."""
    return str(check_id).split(".", 1)[0]


def _families(groups):
    """[{name, groups: [{name, label, first}]}] of the sorted check groups: the grid's column
    families (a header spanning each family's columns; the column label without the family)."""
    families = []
    for group in groups:
        family = check_family(group)
        if not families or families[-1]["name"] != family:
            families.append({"name": family, "groups": []})
        label = group[len(family) + 1:] if group.startswith(family + ".") else group
        families[-1]["groups"].append({"name": group, "label": label, "first": not families[-1]["groups"]})
    return families


def _run_time(run_id):
    """``20261123T001000Z-validate`` -> ``11-23 00:10`` (the compact last-run label), else the id."""
    stamp = str(run_id or "")
    if len(stamp) >= 15 and stamp[8] == "T" and stamp[:15].isascii() and stamp[:8].isdigit() and stamp[9:15].isdigit():
        return "%s-%s %s:%s" % (stamp[4:6], stamp[6:8], stamp[9:11], stamp[11:13])
    return stamp


def _group_of():
    """check_group of a check id, once per distinct id (a fleet's hosts share their ids)."""
    return once_per_text(check_group)


def _rows(document, runs):
    hosts = list(document["hosts"].items())
    check_group = _group_of()  # pylint: disable=redefined-outer-name  # the same function, memoised
    counts_by_host, seen = [], set()
    for _host, entry in hosts:  # per host: group -> summarize() of its checks, one pass over them
        counts_of = {}
        for check in entry["checks"]:
            group = check_group(check["id"])
            counts = counts_of.get(group)
            if counts is None:
                counts = counts_of[group] = summarize(())
            counts[check["status"]] += 1
        counts_by_host.append(counts_of)
        seen.update(counts_of)
    groups = sorted(seen, key=lambda g: (check_family(g), g))
    run_ids = [r["id"] for r in runs]
    family_of, counted = dict((group, check_family(group)) for group in groups), {}
    current = (document.get("run") or {}).get("id")
    rows = []
    for index, (host, entry) in enumerate(hosts):
        checks, summary, counts_of = entry["checks"], entry["summary"], counts_by_host[index]
        cells = []
        for group in groups:
            counts = counts_of.get(group)
            if counts is None:
                cells.append(None)
                continue
            key = (counts[FAIL], counts[WARN], counts[PASS], counts[SKIP])
            if key not in counted:  # the worst status and the counts' text, once per distinct counts
                status = worst(s for s in (FAIL, WARN, PASS, SKIP) if counts[s])
                counted[key] = (status, ", ".join("%d %s" % (counts[s], s) for s in (FAIL, WARN, PASS, SKIP) if counts[s]))
            status, tally = counted[key]
            cells.append({"status": status, "title": "%s on %s: %s" % (group, host, tally), "symbol": _SYMBOL[status],
                          "family": family_of[group]})
        status = entry.get("status") or worst(c["status"] for c in checks)
        level = entry.get("severity")
        history = dict((h.get("run"), h.get("status")) for h in entry.get("history") or [] if isinstance(h, dict))
        if not history and current:
            history = {current: status}  # a run's own page: the run itself
        lines = _lines(checks) if summary[FAIL] or summary[WARN] else []
        facts = _facts_text(entry.get("facts") or {})
        search = " ".join([host, facts["gpu"], facts["driver"], facts["ofed"]] +
                          ["%s[%s] %s" % (line["id"], line["target"], line["message"]) for line in lines])
        rows.append({
            "index": index, "rank": index + 1, "host": host, "summary": summary, "status": status,
            "health": "fail" if summary[FAIL] else "warn" if summary[WARN] else "ok",
            "severity": level if level in SEVERITIES else "", "severity_order": SEVERITIES.index(level)
            if level in SEVERITIES else len(SEVERITIES), "bad": bool(lines), "cells": cells, "facts": facts,
            "last_run": entry.get("last_run") or current or "", "last_seen": entry.get("last_seen") or "",
            "last_run_label": _run_time(entry.get("last_run") or current),
            "stale": bool(current and entry.get("last_run") and entry.get("last_run") != current),
            "history": [history.get(run) for run in run_ids], "lines": lines,
            "checks": [dict(c, detail=_observed(c)) for c in checks] if lines else checks,
            "search": " ".join(search.lower().split())})
    return groups, rows


def _cell(sender, receiver, value, rail, minimum, top):
    where = "%s -> %s%s" % (sender, receiver, " on %s" % rail if rail else "")
    if value is None:
        return {"css": "none", "style": None, "title": "%s: not measured" % where, "label": "\u2013", "low": False}
    if not is_finite_number(value):
        reading = json_safe(value)
        return {"css": "bad", "style": None, "title": "%s: invalid reading %s" % (where, reading),
                "label": reading, "low": True}
    label = "%.0f" % value
    if minimum is None:
        ratio = value / top if top else 0
        return {"css": None, "style": "background:hsl(%d,70%%,72%%)" % int(120 * max(0.0, min(ratio, 1.0))),
                "title": "%s: %.2f Gb/s" % (where, value), "label": label, "low": False}
    share = value / minimum
    title = "%s: %.2f Gb/s (%.0f %% of the %s Gb/s minimum)" % (where, value, 100 * share, text(minimum))
    if value >= minimum:
        return {"css": "ok", "style": None, "title": title, "label": label, "low": False}
    css = [klass for bound, klass, _label in BELOW_MINIMUM if share >= bound][0]
    return {"css": css, "style": None, "title": title + " BELOW MINIMUM", "label": label, "low": True}


def _heatmap_table(name, hosts, gbps, rail, minimum, top):
    rows, low_in = [], [[0, 0] for _host in hosts]
    for sender, values in zip(hosts, gbps):
        cells, low, measured = [], 0, 0
        for j, (receiver, value) in enumerate(zip(hosts, values)):
            cell = _cell(sender, receiver, value, rail, minimum, top)
            cells.append(cell)
            if value is not None:
                measured += 1
                low_in[j][1] += 1
                if cell["low"]:
                    low += 1
                    low_in[j][0] += 1
        rows.append({"host": sender, "cells": cells, "low": low, "measured": measured})
    return {"name": name, "rows": rows, "low_in": low_in}


def _heatmap(matrix):
    hosts, minimum = matrix["hosts"], matrix.get("min_gbps")
    values = [v for row in matrix["gbps"] for v in row if is_finite_number(v)]
    per_rail = matrix.get("per_rail") or {}
    values += [v for rows in per_rail.values() for row in rows for v in row if is_finite_number(v)]
    top = max(values) if values else 0
    tables = [_heatmap_table("all rails, worst rail per pair" if per_rail else None, hosts, matrix["gbps"],
                             None, minimum, top)]
    for rail, rows in per_rail.items():
        tables.append(_heatmap_table("rail %s" % rail, hosts, rows, rail, minimum, top))
    low_pairs = sum(row["low"] for row in tables[0]["rows"])
    measured = sum(row["measured"] for row in tables[0]["rows"])
    return {"title": matrix["title"], "hosts": hosts, "minimum": minimum, "top": top, "tables": tables,
            "rails": list(per_rail), "low_pairs": low_pairs, "measured": measured,
            "below_minimum": BELOW_MINIMUM, "compact": len(hosts) > 24}


def _cells_html(row):
    """The grid cells of a host row, the text the template's loop wrote (every value escaped as
    its autoescape does, markupsafe.escape): one join per row instead of a template loop per cell
    (25 groups x 200 hosts: a fifth of the page's time)."""
    parts = []
    for cell, first in zip(row["cells"], row["firsts"]):
        if cell:
            parts.append('<td class="c s-%s%s" title="%s">%s</td>' % (
                _ESCAPED.get(cell["status"]) or escape(cell["status"]), " fam-first" if cell["first"] else "",
                escape(cell["title"]), _ESCAPED.get(cell["symbol"]) or escape(cell["symbol"])))
        else:
            parts.append('<td class="c none%s"></td>' % (" fam-first" if first else ""))
    return Markup("".join(parts))


def render(document, contracts=None, open_limit=25):
    """The self-contained page (inline CSS and script) of a report document. ``contracts``: the
    address of docs/contracts.md check ids link to; None (the default): no link, the id is plain
    text titled with its place in docs/contracts.md (no page of the report points to another
    site: air-gapped sites read it as it is)."""
    scope = document.get("scope") or "run"
    run = document.get("run") or {}
    runs = document.get("runs") or ([run] if run.get("id") else [])
    groups, rows = _rows(document, runs)
    problems = [row for row in rows if row["bad"]]
    for number, row in enumerate(problems):
        row["open"] = number < open_limit
    families = _families(groups)
    firsts = set(g["name"] for family in families for g in family["groups"] if g["first"])
    for row in rows:
        for group, cell in zip(groups, row["cells"]):
            if cell is not None:
                cell["first"] = group in firsts
        row["firsts"] = [group in firsts for group in groups]
        row["cells_html"] = _cells_html(row)
    return environment().get_template(TEMPLATE).render(
        scope=scope, run=run, runs=runs, generated_at=document["generated_at"], playbook=document.get("playbook"),
        totals=document["totals"], groups=groups, families=families, rows=rows, problems=problems, contracts=contracts,
        not_considered=document.get("not_considered") or [], stale=sum(1 for row in rows if row["stale"]),
        heatmaps=[_heatmap(m) for m in document.get("bandwidth_matrices") or []], symbols=_SYMBOL)
