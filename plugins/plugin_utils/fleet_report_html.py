# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTML page of the fleet report: view model here, markup in ``templates/fleet_report.html.j2``.

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

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import FAIL, PASS, SKIP, WARN, summarize, worst
from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import is_finite_number
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import (
    check_group, json_safe, problems_first, text)

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
TEMPLATE = "fleet_report.html.j2"

# Shares of the minimum (lower bound, css class, legend label) for pairs below it, best first.
BELOW_MINIMUM = ((0.9, "lo1", "90-100 % of min"), (0.75, "lo2", "75-90 %"), (0.5, "lo3", "50-75 %"),
                 (float("-inf"), "lo4", "< 50 %"))
_SYMBOL = {FAIL: "\u2717", WARN: "!", PASS: "\u2713", SKIP: "\u2013"}

_ENV = {}


def environment():
    """The Jinja2 environment (autoescape on), built once."""
    if "env" not in _ENV:
        _ENV["env"] = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=True,
                                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                  keep_trailing_newline=True)
    return _ENV["env"]


def _observed(check):
    parts = []
    for key in ("observed", "expected"):
        if key in check and check[key] is not None:
            value = text(check[key])
            if len(value) > 200:
                value = value[:197] + "..."
            parts.append("%s %s" % (key, value))
    return "; ".join(parts)


def _grid(rows):
    groups = sorted(set(check_group(c["id"]) for _h, checks, _s in rows for c in checks))
    grid = []
    for index, (host, checks, summary) in enumerate(rows):
        by_group = {}
        for check in checks:
            by_group.setdefault(check_group(check["id"]), []).append(check)
        cells = []
        for group in groups:
            members = by_group.get(group)
            if not members:
                cells.append(None)
                continue
            status = worst(c["status"] for c in members)
            counts = summarize(members)
            title = "%s on %s: %s" % (group, host, ", ".join(
                "%d %s" % (counts[s], s) for s in (FAIL, WARN, PASS, SKIP) if counts[s]))
            cells.append({"status": status, "title": title, "symbol": _SYMBOL[status]})
        grid.append({"index": index, "host": host, "summary": summary,
                     "bad": bool(summary[FAIL] or summary[WARN]), "cells": cells})
    return groups, grid


def _problems(rows, open_limit):
    problems = []
    for index, (host, checks, summary) in enumerate(rows):
        if not (summary[FAIL] or summary[WARN]):
            continue
        problems.append({"index": index, "host": host, "summary": summary, "open": len(problems) < open_limit,
                         "bad": [dict(c, detail=_observed(c)) for c in problems_first(checks)],
                         "checks": checks})
    return problems


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


def render(report, generated_at, open_limit=25):
    """The self-contained page (inline CSS, no scripts) of a FleetReport."""
    rows = report.host_rows()
    totals = report.totals(rows)
    groups, grid = _grid(rows)
    return environment().get_template(TEMPLATE).render(
        generated_at=generated_at, playbook=report.playbook, totals=totals, groups=groups, grid=grid,
        problems=_problems(rows, open_limit), heatmaps=[_heatmap(m) for m in report.matrices.values()],
        symbols=_SYMBOL)
