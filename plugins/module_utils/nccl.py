# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for nccl-tests output (all_reduce_perf, all_gather_perf, ...) and its checks.

The result table has one row per message size::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
          8388608       2097152     float     sum      -1    102.3   82.00  153.75      0    101.9 ...

Older releases print ``error`` (a float such as ``5e-07``, or ``N/A`` with ``-c 0``) instead of
``#wrong`` and have no ``root`` column. Lines that are not table rows (NCCL INFO/WARN lines from
the ranks, mpirun noise) are skipped. The summary is ``# Avg bus bandwidth    : 153.12``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)\s*$", re.IGNORECASE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)", re.IGNORECASE)
_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop", re.IGNORECASE)
_DEVICE = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[(\S+)\]\s+(.*)$")


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _wrong(text):
    """``0`` / ``12`` (#wrong), ``5e-07`` (old error column) or ``N/A`` (no check)."""
    if text in ("N/A", "n/a"):
        return None
    value = _number(text)
    return value


def parse_row(line):
    """One table row as a dict, or None when the line is not a row."""
    tokens = line.split()
    if len(tokens) < 12 or line.lstrip().startswith("#"):
        return None
    try:
        size = int(tokens[0])
        count = int(tokens[1])
    except ValueError:
        return None
    rest = tokens[4:]
    root = None
    if len(rest) == 9:
        root = rest[0]
        rest = rest[1:]
    if len(rest) != 8:
        return None
    numbers = [_number(rest[i]) for i in (0, 1, 2, 4, 5, 6)]
    if any(value is None for value in numbers):
        return None
    return {
        "size": size,
        "count": count,
        "type": tokens[2],
        "redop": tokens[3],
        "root": root,
        "out_of_place": {"time_us": numbers[0], "algbw_gbps": numbers[1], "busbw_gbps": numbers[2],
                         "wrong": _wrong(rest[3])},
        "in_place": {"time_us": numbers[3], "algbw_gbps": numbers[4], "busbw_gbps": numbers[5],
                     "wrong": _wrong(rest[7])},
    }


def parse_nccl_tests(text):
    """Structured view of nccl-tests stdout.

    Returns ``{rows, avg_busbw_gbps, peak_busbw_gbps, out_of_bounds, wrong, ranks, header_seen}``;
    ``avg_busbw_gbps`` is None when the summary line is missing (the run did not finish).
    ``wrong`` is the sum of the #wrong columns (None when the run did not check results).
    """
    rows = []
    avg = None
    oob = None
    header = False
    ranks = []
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        match = _AVG.match(line.strip())
        if match:
            avg = _number(match.group(1))
            continue
        match = _OOB.match(line.strip())
        if match:
            oob = int(match.group(1))
            continue
        if _HEADER.match(line.strip()):
            header = True
            continue
        match = _DEVICE.match(line.strip())
        if match:
            ranks.append({"rank": int(match.group(1)), "host": match.group(2),
                          "device": int(match.group(3)), "bus_id": match.group(4),
                          "name": match.group(5).strip()})
            continue
        row = parse_row(line)
        if row is not None:
            rows.append(row)
    wrongs = [r[kind]["wrong"] for r in rows for kind in ("out_of_place", "in_place")]
    wrong = None
    if rows and all(w is not None for w in wrongs):
        # The old "error" column holds a float tolerance figure, not a count.
        wrong = int(sum(w for w in wrongs if float(w).is_integer()))
    peak = None
    if rows:
        peak = max(max(r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"]) for r in rows)
    return {"rows": rows, "avg_busbw_gbps": avg, "peak_busbw_gbps": peak, "out_of_bounds": oob,
            "wrong": wrong, "ranks": ranks, "header_seen": header}


def nccl_checks(parsed, min_busbw_gbps=None, target="nccl", job_succeeded=True):
    """Checks ``k8s.nccl.busbw`` and ``k8s.nccl.wrong`` (SPEC 2.1 dicts) for a parsed run."""
    checks = []
    avg = parsed.get("avg_busbw_gbps")
    expected = None if min_busbw_gbps is None else ">= %s GB/s" % min_busbw_gbps
    if not job_succeeded:
        checks.append({"id": "k8s.nccl.busbw", "target": target, "status": "fail",
                       "message": "the NCCL job did not complete successfully",
                       "observed": avg, "expected": expected})
    elif avg is None:
        checks.append({"id": "k8s.nccl.busbw", "target": target, "status": "fail",
                       "message": "no '# Avg bus bandwidth' line in the job output (run incomplete)",
                       "observed": None, "expected": expected})
    elif min_busbw_gbps is None:
        checks.append({"id": "k8s.nccl.busbw", "target": target, "status": "pass",
                       "message": "average bus bandwidth %.2f GB/s (no threshold set)" % avg,
                       "observed": avg})
    elif avg < float(min_busbw_gbps):
        checks.append({"id": "k8s.nccl.busbw", "target": target, "status": "fail",
                       "message": "average bus bandwidth %.2f GB/s below %s GB/s" % (avg, min_busbw_gbps),
                       "observed": avg, "expected": expected})
    else:
        checks.append({"id": "k8s.nccl.busbw", "target": target, "status": "pass",
                       "message": "average bus bandwidth %.2f GB/s (>= %s GB/s)" % (avg, min_busbw_gbps),
                       "observed": avg, "expected": expected})
    wrong = parsed.get("wrong")
    oob = parsed.get("out_of_bounds")
    if not parsed.get("rows"):
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "skip",
                       "message": "no result rows to check"})
    elif (wrong or 0) > 0 or (oob or 0) > 0:
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "fail",
                       "message": "data corruption: %s wrong element(s), %s out-of-bounds value(s)"
                       % (wrong, oob), "observed": {"wrong": wrong, "out_of_bounds": oob}, "expected": 0})
    elif wrong is None and oob is None:
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "skip",
                       "message": "results were not checked (-c 0)"})
    else:
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "pass",
                       "message": "no wrong elements", "observed": {"wrong": wrong, "out_of_bounds": oob}})
    return checks
