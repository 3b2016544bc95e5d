# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""perftest (ib_write_bw, ib_read_bw, ib_send_bw) runner and output parser (check rdma.bandwidth, docs/contracts.md).

Pure logic behind the ``rdma_bandwidth`` module: option validation, the default RoCE v2 GID
index read from sysfs, the argv, and a parser for the bandwidth table of every perftest
generation seen in the field::

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             392.35             392.21             0.748081

Units and their conversion to Gb/s (10^9 bit/s):

* ``Gb/sec`` (``--report_gbits``): taken as printed.
* ``MiB/sec`` (perftest >= 23.x without ``--report_gbits``): x 8 x 1048576 / 1e9.
* ``MB/sec`` (perftest <= 4.x, including 3.x): perftest computes this column with a divisor
  of 0x100000 (``format_factor`` in ``perftest_parameters.c``) -- the value is MiB/s and only
  the label is wrong (later releases renamed it to ``MiB/sec``), so it is converted exactly
  like ``MiB/sec``. Reading it as 10^6 bytes would understate a link by 4.9 %.

Columns are: message size, iterations, BW peak, BW average (the 4th column), MsgRate; the QoS
layout (``#sl`` after ``#bytes``) shifts them by one and is handled. Every perftest since 2013
prints the MsgRate column (``RESULT_FMT`` in ``src/perftest_parameters.h``); a row with fewer
figures than its header has columns is an incomplete result row (an empty or cut column), never
read as another layout: the run fails naming it. A complete table ends with a dashed line: the
programs print ``RESULT_LINE`` (``RESULT_LINE_PER_PORT`` with ``--report-per-port``) after
``print_full_bw_report`` (linux-rdma/perftest ``src/write_bw.c``, ``src/send_bw.c``,
``src/read_bw.c``; ``RESULT_LINE`` in ``src/perftest_parameters.h``). A report whose last result
row is not followed by a dashed line was cut (a killed run, a byte-limited log) and fails. Lines inside the table
that are not result rows (``Conflicting CPU frequency values detected ...``, ``Warning: ...``)
are skipped and collected in ``perftest_warnings``. Duration mode (``-D``) prints a peak of
``0.00``: the peak was not measured and is reported as null. With ``-a`` (all sizes) every row
is returned and the headline figures come from the row with the largest message size, the one
that saturates the link (small messages are message-rate bound); when the same size appears
more than once the last row wins.
"""

from __future__ import absolute_import, division, print_function


import math
import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import (
    roce_v2_ipv4_gid_index as mlx5_roce_v2_ipv4_gid_index,
)

CHECK_ID = "rdma.bandwidth"
LINK_CHECK_ID = "rdma.fabric.link"
DEFAULT_EXECUTABLE = "ib_write_bw"
DEFAULT_TIMEOUT = 120
MODES = ("server", "client")

# Unit as printed in the header -> factor to Gb/s. See the module docstring for MB/sec.
_MIB_TO_GBPS = 8.0 * 1048576 / 1e9
UNIT_TO_GBPS = {
    "Gb/sec": 1.0,
    "MiB/sec": _MIB_TO_GBPS,
    "MB/sec": _MIB_TO_GBPS,
}

_HEADER_RE = re.compile(
    r"#?bytes\s+(?P<sl>#sl\s+)?#?iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[(?P<unit2>[^\]]+)\]"
    r"(?P<per_port>.*BW Port1\[)?")
_SECTION_RE = re.compile(r"^(Local|Remote) results\s*:", re.IGNORECASE)
_BIDIRECTIONAL_RE = re.compile(r"\bBidirectional\b.*\bBW Test\b")
_DUAL_PORT_RE = re.compile(r"Dual-port\s*:\s*ON\b")
# ASCII digits, bounded: a figure never becomes a huge integer (int() refuses 4300+ digits) or an
# infinite float (a "bandwidth" of 10^400 is no measurement); such a line is not a result row.
_NUMBER_RE = re.compile(r"^[0-9]{1,15}(\.[0-9]{1,9})?$")
_SEPARATOR_RE = re.compile(r"^\s*-{20,}\s*$")
_WARNING_RE = re.compile(r"warning|conflicting cpu frequency|test integrity", re.IGNORECASE)
# a header column with a unit: BW peak[..], BW average[..], MsgRate[Mpps], BW Port1[..], MsgRate Port1[Mpps], ...,
# CPU_Util[%] (RESULT_FMT*, RESULT_EXT_CPU_UTIL in src/perftest_parameters.h); #bytes, #sl, #iterations have none
_UNIT_COLUMN_RE = re.compile(r"\[[^\]]*\]")


# --------------------------------------------------------------------------- options

def validate_params(params):
    """Return an error message naming the offending option, or None when the options are usable."""
    mode = params.get("mode")
    if mode not in MODES:
        return "option mode must be one of %s, got %r" % (", ".join(MODES), mode)
    server = params.get("server")
    if mode == "client" and not server:
        return "option server is required when mode=client"
    if mode == "server" and server:
        return "option server is only used with mode=client (the server listens; drop server)"
    positive = ("ib_port", "size", "duration", "qps", "timeout")
    for name in positive:
        value = params.get(name)
        if value is not None and value <= 0:
            return "option %s must be greater than 0, got %r" % (name, value)
    for name in ("gid_index", "use_cuda", "min_gbps"):
        value = params.get(name)
        if value is not None and value < 0:
            return "option %s must not be negative, got %r" % (name, value)
    min_gbps = params.get("min_gbps")
    if min_gbps is not None and not math.isfinite(min_gbps):
        return "option min_gbps must be a finite number, got %r" % (min_gbps,)
    if params.get("link") is not None and not str(params["link"]).strip():
        return "option link must not be empty"
    tcp_port = params.get("tcp_port")
    if tcp_port is not None and not 1 <= tcp_port <= 65535:
        return "option tcp_port must be between 1 and 65535, got %r" % (tcp_port,)
    if params.get("all_sizes") and params.get("size") is not None:
        return "options all_sizes and size are mutually exclusive"
    if params.get("all_sizes") and params.get("duration") is not None:
        return "option all_sizes cannot be combined with duration (perftest does not support -a with -D)"
    timeout = params.get("timeout")
    duration = params.get("duration")
    if timeout is not None and duration is not None and timeout <= duration:
        return "option timeout (%s s) must be longer than option duration (%s s)" % (timeout, duration)
    if not params.get("executable"):
        return "option executable must not be empty"
    return None


# --------------------------------------------------------------------------- sysfs

def port_link_layer(reader, device, port):
    """``InfiniBand`` / ``Ethernet`` of ``<device>/<port>``, or None when unreadable."""
    return reader.read("sys/class/infiniband/%s/ports/%s/link_layer" % (device, port))


def roce_v2_ipv4_gid_index(reader, device, port):
    """RoCE v2 IPv4 GID index of an Ethernet port (perftest ``-x``); None for InfiniBand ports
    (perftest needs no GID index there), unreadable link layers and when no such GID exists.

    The rule itself is mlx5.roce_v2_ipv4_gid_index, shared with the mlx5 facts.
    """
    if port_link_layer(reader, device, port) != "Ethernet":
        return None
    return mlx5_roce_v2_ipv4_gid_index(reader, device, port)


# --------------------------------------------------------------------------- command

def build_command(executable, params, gid_index=None):
    """perftest argv for ``params`` (the module options); the server address goes last."""
    argv = [executable]
    if params.get("device"):
        argv += ["-d", str(params["device"])]
    if params.get("ib_port") is not None:
        argv += ["-i", str(params["ib_port"])]
    if gid_index is not None:
        argv += ["-x", str(gid_index)]
    if params.get("tcp_port") is not None:
        argv += ["-p", str(params["tcp_port"])]
    if params.get("all_sizes"):
        argv.append("-a")
    elif params.get("size") is not None:
        argv += ["-s", str(params["size"])]
    if params.get("duration") is not None:
        argv += ["-D", str(params["duration"])]
    if params.get("qps") is not None:
        argv += ["-q", str(params["qps"])]
    if params.get("use_cuda") is not None:
        argv.append("--use_cuda=%d" % params["use_cuda"])
    argv.append("--report_gbits")
    argv += [str(arg) for arg in (params.get("extra_args") or [])]
    if params.get("mode") == "client":
        argv.append(str(params["server"]))
    return argv


def resolve_executable(runner, executable):
    """Absolute path of ``executable`` (a name searched on PATH, or a path), or None."""
    if os.sep in executable:
        if os.path.isfile(executable) and os.access(executable, os.X_OK):
            return executable
        return None
    return runner.which(executable)


# --------------------------------------------------------------------------- parser

def to_gbps(value, unit):
    """Convert a bandwidth printed in ``unit`` to Gb/s; None for an unknown unit."""
    factor = UNIT_TO_GBPS.get(unit)
    if factor is None or value is None:
        return None
    return round(value * factor, 6)


def _header_width(line, has_sl):
    """Number of columns of a table header line (``#bytes #iterations`` and ``#sl``, then one
    per ``[unit]``: ``#bytes ... MsgRate[Mpps]`` is 5)."""
    return (3 if has_sl else 2) + len(_UNIT_COLUMN_RE.findall(line))


def _row_fields(line, has_sl, width=None):
    """(size, iterations, peak, average, rate, more) of a result row; None when the line is not
    one; ``"incomplete"`` when it holds only figures but fewer than the header's ``width``
    columns (an empty or cut column: never read as a layout without MsgRate)."""
    fields = line.split()
    if not fields or not all(_NUMBER_RE.match(f) for f in fields):
        return None
    needed = width if width else (5 if has_sl else 4)
    if len(fields) < needed:
        return "incomplete" if len(fields) >= 2 and width else None
    if has_sl:
        fields = fields[:1] + fields[2:]
    if "." in fields[0] or "." in fields[1]:
        return None
    rate = float(fields[4]) if len(fields) > 4 else None
    return int(fields[0]), int(fields[1]), float(fields[2]), float(fields[3]), rate, fields[5:]


def parse_output(text):
    """Parse a perftest bandwidth report.

    Returns ``{unit, rows: [{msg_size, iterations, bw_peak_gbps, bw_average_gbps,
    msg_rate_mpps}], warnings: [...], bidirectional, dual_port, incomplete_rows, cut_after}``;
    ``unit`` is None and ``rows`` empty when no table is found. ``incomplete_rows`` lists rows
    with fewer figures than the header's columns (not in ``rows``); ``cut_after`` is the last
    result row when no dashed line follows it (the report was cut), else None.

    Bidirectional tests (``-b``) print the sum of both directions; with ``--report-both`` two
    more tables follow, ``Local results:`` and ``Remote results:``, whose rows carry
    ``section: local`` / ``remote`` (the first table's rows have no ``section``). Per-port
    reports (``--report-per-port`` with ``-O``) add ``bw_port1_gbps``, ``msg_rate_port1_mpps``,
    ``bw_port2_gbps``, ``msg_rate_port2_mpps``.
    """
    unit = None
    has_sl = False
    per_port = False
    in_table = False
    section = None
    bidirectional = False
    dual_port = False
    rows = []
    warnings = []
    width = None
    incomplete = []
    open_row = None  # the last result row not yet followed by perftest's dashed RESULT_LINE
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if _SEPARATOR_RE.match(line):
            open_row = None
        if _BIDIRECTIONAL_RE.search(line):
            bidirectional = True
        if _DUAL_PORT_RE.search(line):
            dual_port = True
        match = _SECTION_RE.match(line)
        if match:
            section = match.group(1).lower()
            continue
        header = _HEADER_RE.search(line)
        if header:
            unit = header.group("unit").strip()
            has_sl = bool(header.group("sl"))
            per_port = bool(header.group("per_port"))
            width = _header_width(line[header.start():], has_sl)
            in_table = True
            continue
        if _WARNING_RE.search(line):
            if line not in warnings:
                warnings.append(line)
            continue
        if not in_table:
            continue
        if _SEPARATOR_RE.match(line):
            in_table = False
            continue
        fields = _row_fields(line, has_sl, width)
        if fields is None:
            continue
        if fields == "incomplete":
            if len(incomplete) < 5:
                incomplete.append(" ".join(line.split()))
            open_row = line
            continue
        open_row = " ".join(line.split())
        size, iterations, peak, average, rate, more = fields
        row = {
            "msg_size": size,
            "iterations": iterations,
            "bw_peak_gbps": to_gbps(peak, unit),
            "bw_average_gbps": to_gbps(average, unit),
            "msg_rate_mpps": rate,
        }
        if per_port and len(more) >= 4:
            row.update({"bw_port1_gbps": to_gbps(float(more[0]), unit), "msg_rate_port1_mpps": float(more[1]),
                        "bw_port2_gbps": to_gbps(float(more[2]), unit), "msg_rate_port2_mpps": float(more[3])})
        if section:
            row["section"] = section
        rows.append(row)
    return {"unit": unit, "rows": rows, "warnings": warnings[:20], "bidirectional": bidirectional,
            "dual_port": dual_port, "incomplete_rows": incomplete,
            "cut_after": " ".join(open_row.split()) if open_row else None}


def headline(rows):
    """The row reported as the result: the largest message size (last one on ties), or None.

    The ``Local results`` / ``Remote results`` tables of ``--report-both`` are parts of the
    first (both directions) table and never the headline.
    """
    best = None
    for row in rows:
        if row.get("section"):
            continue
        if best is None or row["msg_size"] >= best["msg_size"]:
            best = row
    return best


# --------------------------------------------------------------------------- run

def _tail(text, lines=5):
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def _target(params):
    if params.get("link"):
        return params["link"]
    if params.get("device"):
        return "%s/%s" % (params["device"], params.get("ib_port") or 1)
    return "node"


def default_gid_index(reader, params):
    """(gid_index, link_layer, note) for the options; gid_index is None when not applicable."""
    device = params.get("device")
    if params.get("gid_index") is not None:
        return params["gid_index"], None, None
    if not device:
        return None, None, None
    port = params.get("ib_port") or 1
    link_layer = port_link_layer(reader, device, port)
    if link_layer is None:
        return None, None, "cannot read link_layer of %s/%s below root; no GID index passed" % (device, port)
    if link_layer != "Ethernet":
        return None, link_layer, None
    index = roce_v2_ipv4_gid_index(reader, device, port)
    if index is None:
        return None, link_layer, ("no RoCE v2 IPv4 GID on %s/%s: perftest falls back to its own default "
                                  "GID index (0, usually RoCE v1); set gid_index" % (device, port))
    return index, link_layer, None


def _check_id(params):
    """``rdma.bandwidth``; ``rdma.fabric.link`` when the run measures a named fabric link."""
    return LINK_CHECK_ID if params.get("link") else CHECK_ID


def _bandwidth_check(checks, params, parsed, result, executable_name):
    target = _target(params)
    check_id = _check_id(params)
    min_gbps = params.get("min_gbps")
    rows = parsed["rows"]
    if result.timed_out:
        hint = ""
        if params["mode"] == "server":
            hint = " (server mode waits for a client: was the client started?)"
        checks.fail(check_id, target, "%s did not finish within timeout=%ss; its process group was killed%s"
                    % (executable_name, params.get("timeout"), hint), expected=min_gbps)
        return
    if result.rc != 0:
        detail = _tail(result.stderr) or _tail(result.stdout) or "no output"
        if params.get("use_cuda") is not None and "use_cuda" in (result.stderr + result.stdout):
            detail += " (is this perftest built with CUDA support?)"
        checks.fail(check_id, target, "%s exited with rc=%s: %s" % (executable_name, result.rc, detail),
                    expected=min_gbps)
        return
    if parsed.get("incomplete_rows"):
        checks.fail(check_id, target, "%s printed an incomplete result row: %r has fewer figures than the "
                    "columns of its header (an empty or cut column; not a result)"
                    % (executable_name, parsed["incomplete_rows"][0]), expected=min_gbps)
        return
    if parsed.get("cut_after"):
        checks.fail(check_id, target, "%s report cut: no dashed line after the result row %r (perftest prints "
                    "one after every table; the run was killed or its output truncated)"
                    % (executable_name, parsed["cut_after"]), expected=min_gbps)
        return
    best = headline(rows)
    if best is None:
        if params["mode"] == "server":
            checks.skip(check_id, target, "%s server printed no bandwidth table (older perftest report "
                        "results on the client only)" % executable_name, expected=min_gbps)
        else:
            checks.fail(check_id, target, "%s finished but printed no bandwidth table: %s"
                        % (executable_name, _tail(result.stdout) or "no output"), expected=min_gbps)
        return
    observed = best["bw_average_gbps"]
    if parsed.get("bidirectional") and observed is not None:
        size_note = " (bidirectional: both directions summed)"
    else:
        size_note = ""
    if observed is None:
        checks.fail(check_id, target, "unknown bandwidth unit %r in perftest output" % parsed["unit"])
        return
    size = best["msg_size"]
    if observed <= 0:
        whatever = "" if min_gbps is None else ", whatever min_gbps"
        checks.fail(check_id, target, "no data moved: average %.2f Gb/s at %d B messages%s (a run that moved "
                    "nothing is not a pass%s)" % (observed, size, size_note, whatever),
                    observed=observed, expected=min_gbps)
    elif min_gbps is None:
        checks.passed(check_id, target, "%.2f Gb/s average at %d B messages%s (no min_gbps threshold set)"
                      % (observed, size, size_note), observed=observed)
    elif observed >= min_gbps:
        checks.passed(check_id, target, "%.2f Gb/s average at %d B messages%s >= min_gbps %s"
                      % (observed, size, size_note, min_gbps), observed=observed, expected=min_gbps)
    else:
        checks.fail(check_id, target, "%.2f Gb/s average at %d B messages%s < min_gbps %s"
                    % (observed, size, size_note, min_gbps), observed=observed, expected=min_gbps)


def run_bandwidth(params, runner, reader, check_mode=False):
    """Run perftest for the module options.

    Returns ``(error, checks, extra)``: ``error`` is a message for fail_json (bad options, no
    executable) and None otherwise; ``checks`` is a CheckResults; ``extra`` holds the other
    return keys.
    """
    error = validate_params(params)
    if error:
        return error, None, {}
    executable_name = params["executable"]
    gid_index, link_layer, note = default_gid_index(reader, params)
    executable = resolve_executable(runner, executable_name)
    notes = [note] if note else []
    extra = {"gid_index": gid_index, "link_layer": link_layer, "bw_average_gbps": None,
             "bw_peak_gbps": None, "msg_size": None, "msg_rate_mpps": None, "iterations": None,
             "unit": None, "rows": [], "perftest_warnings": [], "notes": notes, "bidirectional": False,
             "perftest_rc": None, "stdout": "", "stderr": "", "timed_out": False}
    checks = CheckResults()
    if executable is None:
        where = "" if os.sep in executable_name else " on PATH (install perftest or set executable)"
        message = "option executable: %s not found%s" % (executable_name, where)
        if not check_mode:
            return message, None, extra
        notes.append(message)
        executable = executable_name
    cmd = build_command(executable, params, gid_index)
    extra["cmd"] = cmd
    if check_mode:
        checks.skip(_check_id(params), _target(params), "check mode: %s not run" % executable_name)
        return None, checks, extra
    result = runner.run(cmd, timeout=params.get("timeout") or DEFAULT_TIMEOUT)
    parsed = parse_output(result.stdout)
    if not parsed["rows"] and not parsed["incomplete_rows"] and result.stderr:
        from_stderr = parse_output(result.stderr)
        if from_stderr["rows"]:
            parsed = from_stderr
    warnings = list(parsed["warnings"])
    for line in parse_output(result.stderr)["warnings"] + parse_output(result.stdout)["warnings"]:
        if line not in warnings and len(warnings) < 20:
            warnings.append(line)
    best = headline(parsed["rows"])
    extra.update({"perftest_rc": result.rc, "stdout": result.stdout, "stderr": result.stderr,
                  "timed_out": bool(result.timed_out), "unit": parsed["unit"], "rows": parsed["rows"],
                  "perftest_warnings": warnings, "bidirectional": parsed["bidirectional"]})
    if best is not None:
        peak = best["bw_peak_gbps"]
        extra.update({"bw_average_gbps": best["bw_average_gbps"],
                      "bw_peak_gbps": peak if peak else None,
                      "msg_size": best["msg_size"], "msg_rate_mpps": best["msg_rate_mpps"],
                      "iterations": best["iterations"]})
    _bandwidth_check(checks, params, parsed, result, executable_name)
    return None, checks, extra
