# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for nccl-tests output (all_reduce_perf, all_gather_perf, broadcast_perf, ...) and its checks.

The result table has one row per message size (nccl-tests ``src/util.cu``, ``writeResultHeader``
and ``writeBenchmarkLine*``)::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
          8388608       2097152     float     sum      -1    102.3   82.00  153.75      0    101.9 ...

Layouts handled (see ``tests/fixtures/real/README.md`` for where each one was seen):

* 2.13 and later: ``redop`` and ``root`` columns, ``#wrong`` (a count printed with ``%6g``, so
  ``1e+06`` for a million; ``N/A`` with ``-c 0``). Since September 2022 (nccl-tests a0a1491)
  sendrecv, alltoall and alltoallv print ``N/A`` as the in-place ``#wrong`` even with ``-c 1``:
  those collectives do not support in-place buffers, only their out-of-place half is checked
  (``args->reportErrors = in_place ? 0 : 1`` in ``src/sendrecv.cu``, ``src/alltoall.cu``).
* Older releases: no ``root`` column and ``error`` (a float tolerance such as ``5e-07``, or ``N/A``)
  instead of ``#wrong``; broadcast/reduce of that era print ``root`` instead of ``redop``, and
  all_gather neither (the header names the columns between ``type`` and ``time``).
* ``-S 1`` / ``--report_timestamps 1``: a ``YYYY-MM-DD HH:MM:SS`` timestamp ends every row.
* ``-N``/per-iteration timing (2.19+): ``i_min i_max i_p99 i_cv%`` after each half of the row.
* Lines prefixed by the launcher: Open MPI ``--tag-output`` (``[1,0]<stdout>:``) and Slurm
  ``srun --label`` (``0: ``); the prefix is removed before parsing.
* The summary ``# Avg bus bandwidth    : 153.12`` -- with ``NCCL_TESTS_MIN_BW`` set nccl-tests
  appends ``OK`` or ``FAILED`` (FAILED when below 90 % of that minimum; the program then exits
  non-zero). The first releases (2017) printed the summary lines without the leading ``#``.
* A complete average line: nccl-tests prints ``"# Avg bus bandwidth    : %g %s\n"`` and then
  ``"#\n"`` (NVIDIA/nccl-tests ``src/common.cu`` from v2.0.0 on, ``writeResultFooter`` in
  ``src/util.cu`` since 2.18; 2.17+ add ``# Collective test concluded: <name>`` after it). The
  ``#`` line after the average is what shows the average line was printed whole: a log cut
  inside the figure (``8.6`` of ``8.62002``) has none. A trailing newline alone proves nothing
  (Ansible's ``stdout`` strips it). v1.0.0 (no ``#`` in front of the summaries) prints
  ``" Avg bus bandwidth    : %g %s\n"`` then an empty line (``src/common.cu`` @ v1.0.0): there
  the space ``%g %s`` always prints after the figure (or ``OK``/``FAILED``), or a line after it,
  shows the figure is whole.

Lines that are not table rows (NCCL INFO/WARN lines from the ranks, mpirun noise) are skipped;
a skipped line that looks like a summary, header or result row (an unknown launcher prefix such as
``[0]`` before every write) is kept in ``unread`` so that a failure can name it.
Figures that are not finite (``nan``, ``-nan``, ``inf``) are never returned as numbers: the
result stays strict JSON, and a non-finite average fails the bandwidth check.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\s*\d+:\s)")
_NUMBER_TEXT = r"[-+]?(?:[0-9][0-9.eE+-]*|\.[0-9][0-9eE+-]*|nan|inf(?:inity)?)"
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(%s)\s*(OK|FAILED)?\s*$" % _NUMBER_TEXT, re.IGNORECASE)
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?", re.IGNORECASE)
_HEADER = re.compile(r"^#?\s*size\s+count\s+type\s+(.*)$", re.IGNORECASE)
_DEVICE = re.compile(r"^#?\s*Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d{1,9})"
                     r"\s+\[(\S+)\]\s+(.*)$")
_VALIDATION = re.compile(r"^#?\s*nThread\b.*\bvalidation:\s*(\d+)", re.IGNORECASE)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}$")
# a line that mentions what nccl-tests prints in its summaries / header (for ``unread``)
_SUMMARY_LIKE = re.compile(r"avg\s+bus\s+bandwidth|out\s+of\s+bounds\s+values|\bsize\s+count\s+type\b", re.IGNORECASE)
_FIGURE = re.compile(r"^[-+]?[0-9][0-9.eE+-]*$")
_UNREAD_KEPT = 5
_UNREAD_WIDTH = 160


_COUNT_CAP = 10 ** 18  # a count printed with more digits reads as this (int() refuses 4300+ digits)


def _count(text):
    """A count nccl-tests printed (validation flag, out-of-bounds values), capped: never a crash, and a
    figure too long to read stays non-zero."""
    return int(text) if len(text) <= 18 else _COUNT_CAP


def strip_prefix(line):
    """``line`` without an Open MPI ``--tag-output`` or ``srun --label`` prefix."""
    return _PREFIX.sub("", line, count=1)


def _number(text):
    """Finite float of ``text``; None when it is not a number or not finite (nan, inf)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _is_number(text):
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _is_na(text):
    return text in ("N/A", "n/a")


def _wrong(text):
    """``0`` / ``12`` / ``1e+06`` (#wrong), ``5e-07`` (old error column); None for ``N/A`` (no
    check) and for a figure that is not finite (``nan``: judged from ``wrong_text``)."""
    if _is_na(text):
        return None
    return _number(text)


def _half(values):
    """time, algbw, busbw, wrong of one half of a row (None values for non-finite figures, and for
    every figure of a half printed as ``N/A``); ``wrong_text`` is the #wrong column as printed."""
    time_us, algbw, busbw, wrong = values
    return {"time_us": _number(time_us), "algbw_gbps": _number(algbw), "busbw_gbps": _number(busbw),
            "wrong": _wrong(wrong), "wrong_text": wrong}


def _body_ok(values):
    """time, algbw, busbw numbers and #wrong a number or N/A, for each half of the row; or the
    whole half ``N/A`` (a collective without an in-place variant)."""
    if all(_is_na(value) for value in values):
        return True
    return all(_is_number(values[i]) for i in (0, 1, 2)) and (_is_na(values[3]) or _is_number(values[3]))


def parse_row(line, columns=None):
    """One table row as a dict, or None when the line is not a row.

    ``columns``: the header's names between ``type`` and ``time`` (``["redop", "root"]`` since
    2.13, ``["redop"]`` or ``["root"]`` or ``[]`` in older releases); without a header they are
    inferred from the number of fields.
    """
    line = strip_prefix(line)
    tokens = line.split()
    if len(tokens) < 11 or line.lstrip().startswith("#"):
        return None
    try:
        size = int(tokens[0])
        count = int(tokens[1])
    except ValueError:
        return None
    if len(tokens) >= 13 and _DATE.match(tokens[-2]) and _TIME.match(tokens[-1]):
        timestamp = "%s %s" % (tokens[-2], tokens[-1])
        tokens = tokens[:-2]
    else:
        timestamp = None
    rest = tokens[3:]
    per_iteration = None
    if len(rest) - 16 in (0, 1, 2) and _body_ok(rest[-16:-12]) and _body_ok(rest[-8:-4]):
        preamble, body = rest[:-16], rest[-16:]
        out_values, in_values = body[0:4], body[8:12]
        per_iteration = [body[4:8], body[12:16]]
        if not all(_is_number(value) for value in body[4:8] + body[12:16]):
            return None
    elif len(rest) - 8 in (0, 1, 2) and _body_ok(rest[-8:-4]) and _body_ok(rest[-4:]):
        preamble, body = rest[:-8], rest[-8:]
        out_values, in_values = body[0:4], body[4:8]
    else:
        return None
    if columns is not None and len(columns) == len(preamble):
        names = columns
    else:
        names = ("redop", "root")[:len(preamble)]
    fields = dict(zip(names, preamble))
    row = {
        "size": size,
        "count": count,
        "type": tokens[2],
        "redop": fields.get("redop"),
        "root": fields.get("root"),
        "out_of_place": _half(out_values),
        "in_place": _half(in_values),
    }
    if timestamp:
        row["timestamp"] = timestamp
    if per_iteration:
        for key, values in zip(("out_of_place", "in_place"), per_iteration):
            row[key]["per_iteration_us"] = {"min": _number(values[0]), "max": _number(values[1]),
                                            "p99": _number(values[2]), "cv_pct": _number(values[3])}
    return row


def _header_columns(line):
    """Names between ``type`` and ``time`` of a header line, or None when it is not a header."""
    match = _HEADER.match(line)
    if not match:
        return None
    names = []
    for name in match.group(1).split():
        if name.lower() in ("time", "cputime"):
            break
        names.append(name.lower())
    return names


def parse_nccl_tests(text):
    """Structured view of nccl-tests stdout.

    Returns ``{rows, avg_busbw_gbps, avg_busbw_text, avg_status, peak_busbw_gbps, out_of_bounds,
    out_of_bounds_status, wrong, ranks, header_seen, summaries}``. ``avg_busbw_gbps`` is None when the
    summary line is missing (the run did not finish) or its figure is not finite (then
    ``avg_busbw_text`` holds what was printed, for example ``nan``). ``avg_status`` is ``OK`` /
    ``FAILED`` when nccl-tests judged the average itself (``NCCL_TESTS_MIN_BW``), else None.
    ``wrong`` is the sum of the #wrong columns (None when the run did not check results).
    ``summaries`` counts the ``Avg bus bandwidth`` lines: more than one means the ranks ran as
    separate single-process jobs (nccl-tests built without ``MPI=1`` but started by mpirun), and
    the figures are the last job's.

    ``avg_complete`` is False when the (last) average line was not printed whole: in the ``#``
    layout no ``#`` line follows it, in the v1.0.0 layout neither the space after the figure nor a
    further line (see the module docstring); ``avg_busbw_gbps`` is then None and
    ``avg_busbw_text`` holds the cut line's figure. ``unread`` lists (up to 5, shortened) lines
    that look like a summary, header or result row but were not understood.
    """
    rows = []
    summaries = 0
    avg = avg_text = avg_status = None
    avg_line = None  # (index, whole line, the '#' layout?) of the last average line
    oob = oob_status = None
    header = False
    columns = None
    ranks = []
    validation = None
    wrong_column = None
    unread = []
    lines = (text or "").splitlines()
    for index, raw in enumerate(lines):
        line = strip_prefix(raw.rstrip())
        stripped = line.strip()
        match = _VALIDATION.match(stripped)
        if match:
            validation = _count(match.group(1))
            continue
        match = _AVG.match(stripped)
        if match:
            avg_text = match.group(1)
            avg = _number(avg_text)
            avg_status = match.group(2).upper() if match.group(2) else None
            summaries += 1
            avg_line = (index, strip_prefix(raw), stripped.startswith("#"))
            continue
        match = _OOB.match(stripped)
        if match:
            oob = _count(match.group(1))
            oob_status = match.group(2).upper() if match.group(2) else None
            continue
        names = _header_columns(stripped)
        if names is not None:
            header = True
            columns = names
            lowered = stripped.lower().split()
            wrong_column = "#wrong" if "#wrong" in lowered else ("error" if "error" in lowered else wrong_column)
            continue
        match = _DEVICE.match(stripped)
        if match:
            ranks.append({"rank": int(match.group(1)), "host": match.group(2),
                          "device": int(match.group(3)), "bus_id": match.group(4),
                          "name": match.group(5).strip()})
            continue
        row = parse_row(line, columns)
        if row is not None:
            rows.append(row)
        elif len(unread) < _UNREAD_KEPT and _looks_read_worthy(stripped):
            shown = stripped if len(stripped) <= _UNREAD_WIDTH else stripped[:_UNREAD_WIDTH] + "..."
            unread.append(shown)
    avg_complete = None
    if avg_line is not None:
        avg_complete = _average_complete(lines, *avg_line)
        if not avg_complete:
            avg = None
    wrong, checked_rows, problems = _judge_wrong(rows, wrong_column, validation)
    busbws = [r[kind]["busbw_gbps"] for r in rows for kind in ("out_of_place", "in_place")]
    busbws = [value for value in busbws if value is not None]
    peak = max(busbws) if busbws else None
    return {"rows": rows, "avg_busbw_gbps": avg, "avg_busbw_text": avg_text, "avg_status": avg_status,
            "peak_busbw_gbps": peak, "out_of_bounds": oob, "out_of_bounds_status": oob_status,
            "wrong": wrong, "wrong_checked_rows": checked_rows, "wrong_problems": problems,
            "wrong_column": wrong_column, "validation": validation,
            "ranks": ranks, "header_seen": header, "summaries": summaries,
            "avg_complete": avg_complete, "unread": unread}


def _looks_read_worthy(stripped):
    """Whether a line the parser skipped looks like something it should have read: a summary or
    header line, or a row (8+ figures; an NCCL INFO/WARN line has a few)."""
    if _SUMMARY_LIKE.search(stripped):
        return True
    if stripped.startswith("#") or "nThread" in stripped:
        return False  # comment lines; the parameter line (its validation figure is read when it can be)
    figures = sum(1 for token in stripped.split() if _FIGURE.match(token))
    return figures >= 8


def _average_complete(lines, index, line, hashed):
    """Whether the average line at ``lines[index]`` was printed whole (module docstring)."""
    if hashed:
        # nccl-tests v2.0.0+: PRINT("#\n") right after the average (src/common.cu, src/util.cu)
        return any(strip_prefix(later.rstrip()).strip() == "#" for later in lines[index + 1:])
    # v1.0.0: " Avg bus bandwidth    : %g %s\n" then "\n" (src/common.cu @ v1.0.0)
    if index + 1 < len(lines):
        return True
    after = line.split(":", 1)[1].lstrip() if ":" in line else ""
    return " " in after  # the space "%g %s" prints after the figure (OK/FAILED follow it)


def _judge_wrong(rows, wrong_column, validation):
    """(wrong, checked rows, problems) of the #wrong / error columns, as nccl-tests means them.

    A half whose #wrong is ``N/A`` was not checked by nccl-tests. In-place ``N/A`` next to an
    out-of-place figure is how sendrecv/alltoall(v) print a checked row (no in-place variant):
    the row is checked on its out-of-place half. ``N/A`` on both halves is a row run without a
    check (``-c 0``). Problems (each fails k8s.nccl.wrong): a #wrong that is not finite
    (``nan``), ``N/A`` where the run checked results (``validation: 1`` in the first line, other
    rows checked, or only the out-of-place half N/A) and a non-zero count of either sign
    (``+5``, ``-5``: nccl-tests never prints a negative count). ``wrong`` is the total of
    absolute counts (None when no row was checked). The old ``error`` column (releases before
    2.13) holds the largest deviation, a float tolerance figure: only whole numbers count there.
    """
    counts = []
    problems = []
    unchecked = []
    checked = 0
    old = wrong_column == "error"
    for row in rows:
        halves = [("out-of-place", row["out_of_place"]), ("in-place", row["in_place"])]
        texts = [half.get("wrong_text") for _name, half in halves]
        na = [text is None or _is_na(text) for text in texts]
        if all(na):
            unchecked.append(row["size"])
            continue
        if na[0] and not na[1]:
            problems.append("size %d: out-of-place #wrong is N/A but in-place is %s (nccl-tests never "
                            "prints this)" % (row["size"], texts[1]))
            continue
        checked += 1
        for (name, _half), text, skip in zip(halves, texts, na):
            if skip:
                continue  # in-place N/A of sendrecv / alltoall: checked on the out-of-place half
            value = _number(text)
            if value is None:
                problems.append("size %d: %s #wrong is %r, not a count" % (row["size"], name, text))
            elif old:
                if value.is_integer() and value != 0:
                    counts.append(abs(value))
            elif value != 0 or text.lstrip()[:1] in ("+", "-"):
                counts.append(abs(value))
                if value == 0 or value < 0 or not value.is_integer():
                    problems.append("size %d: %s #wrong is %s, not a count of wrong elements"
                                    % (row["size"], name, text))
    if unchecked and (checked or problems or (validation or 0) > 0):
        problems.append("#wrong is N/A on both halves of %d row(s) (sizes %s) though the run checked "
                        "results (%s)" % (len(unchecked), ", ".join(str(size) for size in unchecked[:5]),
                                          "validation: %s" % validation if validation else "other rows checked"))
    if validation == 0 and not counts and not problems:
        # -c 0: nothing was compared, though sendrecv/alltoall still print 0 out of place
        return None, 0, []
    wrong = int(sum(counts)) if checked or counts else None
    return wrong, checked, problems


def _finite_threshold(value):
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("min_busbw_gbps must be a finite number, got %r" % (value,))
    return number


def nccl_checks(parsed, min_busbw_gbps=None, target="nccl", job_succeeded=True):
    """Checks ``k8s.nccl.busbw`` and ``k8s.nccl.wrong`` (the check-result model of
    docs/contracts.md) for a parsed run.

    ``k8s.nccl.busbw`` fails when the job failed, the summary line is missing (run incomplete;
    the message names the first line that looked like a summary or row but was not understood)
    or cut (not printed whole), its figure is not finite, zero or below (no data moved: a
    failure with or without a threshold), nccl-tests itself printed ``FAILED``
    (``NCCL_TESTS_MIN_BW``), or the average is below ``min_busbw_gbps``.
    """
    checks = []
    minimum = _finite_threshold(min_busbw_gbps)
    avg = parsed.get("avg_busbw_gbps")
    avg_text = parsed.get("avg_busbw_text")
    avg_status = parsed.get("avg_status")
    expected = None if minimum is None else ">= %s GB/s" % minimum
    base = {"id": "k8s.nccl.busbw", "target": target}

    def add(status, message, observed=None):
        check = dict(base, status=status, message=message, observed=observed)
        if expected is not None:
            check["expected"] = expected
        checks.append(check)

    if parsed.get("avg_complete") is False:
        add("fail", "the '# Avg bus bandwidth' line was cut: %r is not followed by the '#' line nccl-tests "
            "prints after it (run incomplete or its output truncated)" % _shown(avg_text))
    elif avg is None and avg_text is not None:
        add("fail", "average bus bandwidth is %r, not a finite number: the run produced no usable figure"
            % avg_text)
    elif avg is not None and avg < 0:
        add("fail", "average bus bandwidth is %r, below zero: not a bandwidth (nccl-tests never prints one)"
            % avg_text, avg)
    elif not job_succeeded:
        if avg_status == "FAILED":
            add("fail", "nccl-tests reported the average bus bandwidth %.2f GB/s as FAILED against "
                "NCCL_TESTS_MIN_BW (below 90 %% of it) and the job exited with an error" % avg, avg)
        else:
            add("fail", "the NCCL job did not complete successfully", avg)
    elif avg is None and parsed.get("unread"):
        add("fail", "no '# Avg bus bandwidth' line could be read; not understood: %r (the first line that looks "
            "like an nccl-tests summary, header or row: an unknown line prefix or layout?)" % parsed["unread"][0])
    elif avg is None:
        add("fail", "no '# Avg bus bandwidth' line in the job output (run incomplete)")
    elif avg <= 0:
        add("fail", "no data moved: average bus bandwidth %.2f GB/s (a run that moved nothing is not a pass%s)"
            % (avg + 0.0, "" if minimum is None else ", whatever the threshold"), avg + 0.0)
    elif (parsed.get("summaries") or 0) > 1:
        add("fail", "%d '# Avg bus bandwidth' lines: the ranks ran as %d separate jobs, not one NCCL "
            "communicator (nccl-tests built without MPI=1?)" % (parsed["summaries"], parsed["summaries"]), avg)
    elif avg_status == "FAILED":
        add("fail", "nccl-tests reported the average bus bandwidth %.2f GB/s as FAILED against "
            "NCCL_TESTS_MIN_BW (below 90 %% of it)" % avg, avg)
    elif minimum is None:
        add("pass", "average bus bandwidth %.2f GB/s (no threshold set%s)"
            % (avg, "; nccl-tests: OK against NCCL_TESTS_MIN_BW" if avg_status == "OK" else ""), avg)
    elif avg < minimum:
        add("fail", "average bus bandwidth %.2f GB/s below %s GB/s" % (avg, minimum), avg)
    else:
        add("pass", "average bus bandwidth %.2f GB/s (>= %s GB/s)" % (avg, minimum), avg)
    wrong = parsed.get("wrong")
    oob = parsed.get("out_of_bounds")
    problems = parsed.get("wrong_problems") or []
    if not parsed.get("rows"):
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "skip",
                       "message": "no result rows to check"})
    elif problems:
        shown = "; ".join(problems[:5]) + ("; +%d more" % (len(problems) - 5) if len(problems) > 5 else "")
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "fail",
                       "message": "result check not trustworthy: %s" % shown,
                       "observed": {"wrong": wrong, "out_of_bounds": oob, "problems": problems[:20]},
                       "expected": 0})
    elif (wrong or 0) > 0 or (oob or 0) > 0 or parsed.get("out_of_bounds_status") == "FAILED":
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "fail",
                       "message": "data corruption: %s wrong element(s), %s out-of-bounds value(s)"
                       % (wrong, oob), "observed": {"wrong": wrong, "out_of_bounds": oob}, "expected": 0})
    elif wrong is None:
        # -c 0: the #wrong/error columns say N/A; "Out of bounds values : 0 OK" is still printed
        # but nothing was compared.
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "skip",
                       "message": "results were not checked (-c 0: validation: 0, or the #wrong column is N/A)"})
    else:
        checks.append({"id": "k8s.nccl.wrong", "target": target, "status": "pass",
                       "message": "no wrong elements (%d row(s) checked%s)" % (
                           parsed.get("wrong_checked_rows") or 0,
                           "; in-place N/A: checked on the out-of-place half"
                           if _inplace_na(parsed) else ""),
                       "observed": {"wrong": wrong, "out_of_bounds": oob}})
    return checks


def _shown(text):
    text = "" if text is None else str(text)
    return text if len(text) <= _UNREAD_WIDTH else text[:_UNREAD_WIDTH] + "..."


def _inplace_na(parsed):
    return any(_is_na(row["in_place"].get("wrong_text") or "") and not _is_na(row["out_of_place"].get("wrong_text") or "N/A")
               for row in parsed.get("rows") or [])
