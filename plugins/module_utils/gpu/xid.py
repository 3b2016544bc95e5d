# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA XID events from the kernel log, and the default XID policy.

The driver logs ``NVRM: Xid (PCI:0000:9b:00): 119, pid=1234, name=python, ...``. Lines come
from the journal (``journalctl -k --since @<epoch> -o short-iso``), from ``dmesg --time-format
iso`` (both through a runner) or from a log file below ``root`` (only its tail is read: at
most ``MAX_LOG_BYTES``, and no further back than the window start).

Timestamps understood (every line format dmesg, journalctl and syslog daemons print):

- ISO 8601 / RFC 3339: journal ``short-iso`` / ``short-iso-precise``, ``dmesg --time-format
  iso`` (``2025-02-23T16:24:18,123456+00:00``), rsyslog high precision, RFC 5424 records
  (``<14>1 2025-02-23T16:24:18.123Z host kernel - - - ...``); a missing offset means local time;
- journal ``short-full`` (``Sun 2025-02-23 16:24:18 UTC``);
- ``dmesg -T`` / ``--ctime`` (``[Sun Feb 23 16:24:18 2025]``, local time);
- traditional syslog / journal ``short`` / ``short-precise`` (``Feb 23 16:24:18[.123456]``: no
  year, so the most recent such date not in the future is assumed);
- any of these after a ``dmesg --decode`` prefix (``kern  :err   : ``) or a ``<N>`` priority.

Local time: ``dmesg -T`` / ``--ctime`` print the kernel's time converted with the local time zone
of the dmesg process (no offset in the line), and syslog ``short`` lines print the logging host's
local time. They are read in the time zone of this process (``TZ``, else ``/etc/localtime``), the
same one dmesg used when both run on the node with the same environment; in the hour a DST change
repeats, the later reading is taken (the event counts as more recent). Every comparison is then
done in UTC epoch seconds.

Time is checked, not trusted: a line dated more than ``FUTURE_TOLERANCE_S`` (5 min) after the
node's clock (a clock stepped back, a wrong RTC, a log written under another TZ) is never dropped:
it is counted inside the window and the event carries ``clock_skew_s`` (seconds ahead) for the
message (``skew_note``).

XIDs 144-150 (NVLink5) have a severity per error unit in NVIDIA's catalog (Fatal or Non-fatal),
and the driver prints it in the line: ``NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0
i0 Link 13 (...)``, ``... 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (...)``. For these XIDs the
event's ``severity`` (``fatal``, ``nonfatal``, None when the word is missing) decides
(``classify(..., severity)``): Nonfatal is ``warn``, Fatal or no word follows the lists.

Undated lines (boot-relative ``[ 1234.567890]`` stamps of plain ``dmesg`` or journal
``short-monotonic``) and lines whose date is impossible (``2025-13-01``, ``24:61:00``) cannot be
placed in the window, so they are counted as if inside it (conservative: an XID is never
silently dropped) and marked ``time: null``. No line, whatever its bytes, raises.

"GPU has fallen off the bus" printed without an Xid line (``NVRM: GPU 0000:db:00.0: GPU has
fallen off the bus.``, ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``, or the multi-line
``NVRM: The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus and is not responding``) is reported
as an XID 79 event with ``kind: fallen_off_bus``, unless the same GPU also logged Xid 79.
"""

from __future__ import absolute_import, division, print_function

import os
import re
import stat
import time

# -- the default XID policy: NVIDIA's XID catalog ---------------------------------------------
# Source: NVIDIA, "XID Errors" / "Analyzing Xid Errors with the Xid Catalog"
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), column "Resolution
# Bucket (Immediate Action)" for Ampere and newer GPUs. One row per XID the catalog marks as
# applying to A100, H100, B100 or GB200 (XIDs 162-172 have no bucket there yet and are left to
# the default, warn). The policy maps the bucket to a status:
#   fail: the GPU or node must be reset/rebooted/repaired before it takes work
#         (RESET_GPU, RESTART_BM, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR, WORKFLOW_NVLINK5_ERR);
#   pass: the catalog says IGNORE (or WORKFLOW_XID_45: follow the other XIDs logged with it),
#         except WARN_OVERRIDES (63: a reset is pending; see XID_ADVICE);
#   warn: everything else (RESTART_APP: only the application must restart, the node is fine;
#         CHECK_MECHANICALS, UPDATE_SWFW, RESTART_VM, XID_154, CHECK_UVM, CONTACT_SUPPORT) and
#         any XID not in the table.
# ``xid_fatal`` / ``xid_ignore`` replace the derived lists (fatal wins when a code is in both).
FATAL_BUCKETS = frozenset(["RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
                           "WORKFLOW_NVLINK5_ERR"])
IGNORE_BUCKETS = frozenset(["IGNORE", "WORKFLOW_XID_45"])
XID_CATALOG = {
    8: ("GPU stopped processing", "RESTART_APP"),
    11: ("Invalid or corrupted push buffer stream", "RESTART_APP"),
    13: ("Graphics Engine Exception", "RESTART_APP"),
    14: ("Fake or injected error", "IGNORE"),
    25: ("Invalid or illegal push buffer stream", "RESTART_APP"),
    31: ("GPU memory page fault", "RESTART_APP"),
    32: ("Invalid or corrupted push buffer stream (PBDMA)", "RESTART_APP"),
    37: ("Driver firmware error", "IGNORE"),
    38: ("Driver firmware error (watchdog timeout)", "IGNORE"),
    39: ("Copy Engine Exception (CE0)", "RESTART_APP"),
    40: ("Copy Engine Exception (CE1)", "RESTART_APP"),
    41: ("Copy Engine Exception (CE2)", "RESTART_APP"),
    43: ("GPU stopped processing (reset channel verification)", "IGNORE"),
    44: ("Graphics Engine fault during context switch", "IGNORE"),
    45: ("Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing (GPU timeout)", "RESET_GPU"),
    48: ("Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    60: ("Video processor exception (SEC2)", "RESTART_APP"),
    62: ("Internal micro-controller halt", "RESET_GPU"),
    63: ("GPU memory remapping event", "IGNORE"),
    64: ("GPU memory remapping failure", "RESET_GPU"),
    66: ("Illegal access by driver", "IGNORE"),
    67: ("Illegal access by driver (verification violation)", "IGNORE"),
    68: ("NVDEC0 Exception", "RESTART_APP"),
    69: ("Graphics Engine class error", "RESTART_APP"),
    70: ("CE3: Unknown Error", "RESTART_APP"),
    71: ("CE4: Unknown Error", "RESTART_APP"),
    72: ("CE5: Unknown Error", "RESTART_APP"),
    74: ("NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    75: ("CE6: Unknown Error", "RESTART_APP"),
    76: ("CE7: Unknown Error", "RESTART_APP"),
    77: ("CE8: Unknown Error", "RESTART_APP"),
    78: ("vGPU Start Error", "UPDATE_SWFW"),
    79: ("GPU has fallen off the bus", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", "RESTART_APP"),
    82: ("NVJPG0 Error", "RESTART_APP"),
    83: ("NVDEC1 Error", "RESTART_APP"),
    84: ("NVDEC2 Error", "RESTART_APP"),
    85: ("CE9: Unknown Error", "RESTART_APP"),
    86: ("OFA Exception", "RESTART_APP"),
    88: ("NVDEC3 Error", "RESTART_APP"),
    89: ("NVDEC4 Error", "RESTART_APP"),
    92: ("High single-bit ECC error rate", "IGNORE"),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    94: ("Contained memory error", "RESTART_APP"),
    95: ("Uncontained memory error", "RESET_GPU"),
    96: ("NVDEC5 Error", "RESTART_APP"),
    97: ("NVDEC6 Error", "RESTART_APP"),
    98: ("NVDEC7 Error", "RESTART_APP"),
    99: ("NVJPG1 Error", "RESTART_APP"),
    100: ("NVJPG2 Error", "RESTART_APP"),
    101: ("NVJPG3 Error", "RESTART_APP"),
    102: ("NVJPG4 Error", "RESTART_APP"),
    103: ("NVJPG5 Error", "RESTART_APP"),
    104: ("NVJPG6 Error", "RESTART_APP"),
    105: ("NVJPG7 Error", "RESTART_APP"),
    106: ("SMBPBI Test Message", "IGNORE"),
    107: ("SMBPBI Test Message Silent", "IGNORE"),
    108: ("NVLink remote translation error (unused)", "IGNORE"),
    109: ("Context Switch Timeout Error", "RESET_GPU"),
    110: ("Security Fault Error", "RESET_GPU"),
    119: ("GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP Error", "RESET_GPU"),
    121: ("C2C Error (corrected)", "IGNORE"),
    126: ("CE10: Unknown Error", "RESTART_APP"),
    127: ("CE11: Unknown Error", "RESTART_APP"),
    128: ("CE12: Unknown Error", "RESTART_APP"),
    129: ("CE13: Unknown Error", "RESTART_APP"),
    130: ("CE14: Unknown Error", "RESTART_APP"),
    131: ("CE15: Unknown Error", "RESTART_APP"),
    132: ("CE16: Unknown Error", "RESTART_APP"),
    133: ("CE17: Unknown Error", "RESTART_APP"),
    134: ("CE18: Unknown Error", "RESTART_APP"),
    135: ("CE19: Unknown Error", "RESTART_APP"),
    136: ("Link Training Failed", "RESET_GPU"),
    137: ("NVLink Privilege Error", "IGNORE"),
    139: ("OFA1 Error", "RESTART_APP"),
    140: ("ECC Unrecovered Error", "RESET_GPU"),
    141: ("CUDA Fast Path Error", "IGNORE"),
    142: ("NVENC3 Error", "CONTACT_SUPPORT"),
    143: ("GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("Key rotation Error", "RESTART_VM"),
    154: ("GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK: SW Defined Error", "RESET_GPU"),
    156: ("Resource Retirement Event", "RESET_GPU"),
    157: ("Resource Retirement Failure", "IGNORE"),
    158: ("GPU Fatal Timeout", "RESET_GPU"),
    159: ("CHI Non-Data Error", "CHECK_UVM"),
    160: ("Channel Retirement Event", "IGNORE"),
    161: ("Channel Retirement Failure", "IGNORE"),
}
# XIDs the catalog buckets IGNORE that still ask for an action, read from NVIDIA's own pages: warn
# by default (not in XID_IGNORE_DEFAULT), with the advice in the gpu.xid message.
# 63: on Ampere and newer (A100, H100, B100, GB200) "successful recording of a row-remapping entry
#     to the InfoROM" (NVIDIA, "A100 GPU Memory Error Management", User Visible Statistics,
#     https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/user-visible-statistics.html); the
#     remapping is pending until a GPU reset ("Row-remapping pending flag ... will happen at the next
#     GPU reset", Error Recovery and Response Flags; "GPU reset is required", Row Remapping). Work
#     may continue meanwhile. On Volta and older the same XID is a page retired by Dynamic Page
#     Retirement, active after a driver reload (https://docs.nvidia.com/deploy/dynamic-page-retirement/
#     visibility.html: "XID 63: A page has successfully been retired").
# 64 (failure to record the remapping / to retire the page) is RESET_GPU in the catalog: fail.
XID_ADVICE = {
    63: "row remapping pending (Ampere and newer; a retired page on Volta and older): reset the GPU "
        "(reload the driver on Volta and older) when convenient",
    64: "row remapping could not be recorded (a page could not be retired on Volta and older): reset the "
        "GPU; a recurrence is an RMA case",
}
WARN_OVERRIDES = frozenset([63])
XID_FATAL_DEFAULT = sorted(x for x, (_name, bucket) in XID_CATALOG.items() if bucket in FATAL_BUCKETS)
XID_IGNORE_DEFAULT = sorted(x for x, (_name, bucket) in XID_CATALOG.items()
                            if bucket in IGNORE_BUCKETS and x not in WARN_OVERRIDES)
XID_SOURCE_KEYWORDS = ("auto", "journal", "dmesg", "none")
# XIDs whose catalog severity varies by error unit and is printed in the line (Fatal / Nonfatal):
# the NVLink5 XIDs 144-150 (catalog "Severity" per unit; lines as in leptonai/gpud PR #1174).
VARYING_SEVERITY_XIDS = frozenset(range(144, 151))
# A kernel-log line dated further than this after the node's clock is clock skew, kept as recent.
FUTURE_TOLERANCE_S = 300
# The event a "fallen off the bus" line without an Xid line is reported as.
FALLEN_OFF_BUS_XID = 79

# Bounds of what is read: a log file's tail, the journal's line count, a detail's length.
MAX_LOG_BYTES = 32 * 1024 * 1024
_CHUNK = 1024 * 1024
JOURNAL_MAX_LINES = 500000
_DETAIL_MAX = 200

_PCI = r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
_XID_RE = re.compile(r"NVRM: Xid \(" + _PCI + r"\): (?P<xid>[0-9]{1,6})(?![0-9])(?:, ?(?P<detail>.*))?", re.ASCII)
_SEVERITY_RE = re.compile(r"(?<![A-Za-z_-])(Fatal|Nonfatal|Non-fatal)(?![A-Za-z_-])", re.ASCII)
_FALLEN_RE = re.compile(r"NVRM: .{0,200}?fallen off the bus", re.ASCII)
_GPU_ADDR_RE = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?" + _PCI, re.ASCII)
# Prefixes before the timestamp: RFC 5424 / kmsg priority, dmesg --decode facility:level.
_PREFIX_RE = re.compile(r"^(?:<[0-9]{1,3}>(?:1 )?)?\s*(?:[a-z]{2,8}\s*:\s*[a-z]{3,7}\s*:\s*)?", re.ASCII)
_ISO_RE = re.compile(
    r"^(?:[A-Z][a-z]{2} )?(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[T ]"
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:[.,][0-9]{1,9})?"
    r"(?:(?P<tz>Z|[+-][0-9]{2}:?[0-9]{2})| (?P<tzname>UTC|GMT))?(?=\s|$)", re.ASCII)
_CTIME_RE = re.compile(
    r"^\[(?:[A-Z][a-z]{2} )?(?P<mon>[A-Z][a-z]{2}) +(?P<d>[0-9]{1,2}) "
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:[.,][0-9]{1,9})? (?P<y>[0-9]{4})\]", re.ASCII)
_SYSLOG_RE = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2}) +(?P<d>[0-9]{1,2}) (?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
    r"(?:\.[0-9]{1,9})?(?=\s|$)", re.ASCII)
_MONTHS = dict((name, number) for number, name in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1))
# Files in a node image where auto looks when root is not "/".
_AUTO_FILES = ("var/log/kern.log", "var/log/messages", "var/log/syslog")


def classify(xid, fatal, ignore, severity=None):
    """fail (in xid_fatal) | pass (in xid_ignore) | warn (any other). Fatal wins when a code
    is in both lists: a health gate errs on the safe side.

    ``severity``: the word the driver printed for an XID whose catalog severity varies
    (``VARYING_SEVERITY_XIDS``): ``nonfatal`` makes it warn (pass when ignored); ``fatal`` or
    None (no word: fail closed) follow the lists."""
    if severity == "nonfatal" and xid in VARYING_SEVERITY_XIDS:
        return "pass" if xid in ignore and xid not in fatal else "warn"
    if xid in fatal:
        return "fail"
    if xid in ignore:
        return "pass"
    return "warn"


def catalog_entry(xid):
    """(name, resolution bucket) of ``xid`` in NVIDIA's catalog, or (None, None)."""
    return XID_CATALOG.get(xid, (None, None))


def _epoch(fields, offset):
    """Epoch seconds of (y, mo, d, h, mi, s); ``offset`` seconds east of UTC, None = local.
    None when the date is impossible."""
    import datetime  # here: only a journal or dmesg line needs it (1 ms of every agent cycle's start-up)

    try:
        if offset is None:
            datetime.datetime(*fields)  # validates ranges (month 13, hour 25, Feb 30 ...)
            return _local_epoch(tuple(fields))
        zone = datetime.timezone(datetime.timedelta(seconds=offset))
        return datetime.datetime(*fields, tzinfo=zone).timestamp()
    except (ValueError, OverflowError, OSError, TypeError):
        return None


def _local_epoch(fields):
    """Epoch seconds of local (y, mo, d, h, mi, s) in this process's time zone. In the hour a DST
    change repeats, both readings exist: the later one is taken (the event counts as more recent,
    the conservative side for a window; glibc's ``mktime(isdst=-1)`` picks either, by zone). A time
    in the hour skipped by DST (never printed by dmesg) is normalised by ``mktime``."""
    candidates = []
    for isdst in (0, 1):
        stamp = time.mktime(fields + (0, 0, isdst))
        local = time.localtime(stamp)
        if tuple(local[:6]) == fields and local.tm_isdst == isdst:
            candidates.append(stamp)
    return max(candidates) if candidates else time.mktime(fields + (0, 0, -1))


def _offset(tz):
    if tz is None:
        return None
    if tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)


def parse_timestamp(line, now):
    """Epoch seconds of the timestamp that starts ``line``, or None (undated, or a date that
    cannot exist). Never raises."""
    if not isinstance(line, str):
        return None
    line = _PREFIX_RE.sub("", line, count=1)
    match = _ISO_RE.match(line)
    if match:
        fields = [int(match.group(k)) for k in ("y", "mo", "d", "h", "mi", "s")]
        offset = 0 if match.group("tzname") else _offset(match.group("tz"))
        return _epoch(fields, offset)
    match = _CTIME_RE.match(line)
    if match and match.group("mon") in _MONTHS:
        fields = [int(match.group("y")), _MONTHS[match.group("mon")]] + [
            int(match.group(k)) for k in ("d", "h", "mi", "s")]
        return _epoch(fields, None)
    match = _SYSLOG_RE.match(line)
    if match and match.group("mon") in _MONTHS:
        rest = [int(match.group(k)) for k in ("d", "h", "mi", "s")]
        year = time.localtime(now).tm_year
        for candidate in (year, year - 1):
            stamp = _epoch([candidate, _MONTHS[match.group("mon")]] + rest, None)
            if stamp is not None and stamp <= now + 86400:  # tolerate a day of skew, else last year
                return stamp
    return None


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_xid_lines(lines, now, window_hours):
    """XID events within ``window_hours`` before ``now``.

    Returns (events, stats): events are {xid, pci, time, detail, kind} (kind ``xid`` or
    ``fallen_off_bus``), plus ``severity`` for XIDs 144-150 and ``clock_skew_s`` for a line dated
    after ``now`` beyond the tolerance; stats count what was seen (xid_lines, outside_window,
    undated; ``future`` only when some line is dated after ``now`` beyond the tolerance). ``now``
    and every stamp are UTC epoch seconds.
    """
    since = now - float(window_hours) * 3600.0
    events = []
    stats = {"xid_lines": 0, "outside_window": 0, "undated": 0}  # + "future" (see above)
    xid79 = set()
    fallen = []
    last_gpu = None  # (pci, stamp, index) of the last "NVRM: [The NVIDIA ]GPU <addr>" line
    for index, line in enumerate(lines):
        if not isinstance(line, str) or "NVRM" not in line:
            continue
        match = _XID_RE.search(line)
        if match:
            xid = int(match.group("xid"))
            pci = _short_pci(match.group("pci"))
            if xid == FALLEN_OFF_BUS_XID:
                xid79.add(pci)
            stats["xid_lines"] += 1
            stamp = parse_timestamp(line.strip(), now)
            if not _in_window(stamp, since, now, stats):
                continue
            detail = (match.group("detail") or "").strip()
            event = _event(xid, pci, stamp, detail, "xid", now)
            if xid in VARYING_SEVERITY_XIDS:
                word = _SEVERITY_RE.search(detail)
                event["severity"] = None if word is None else (
                    "fatal" if word.group(1) == "Fatal" else "nonfatal")
            events.append(event)
            continue
        address = _GPU_ADDR_RE.search(line)
        stamp = parse_timestamp(line.strip(), now)
        if address:
            last_gpu = (_short_pci(address.group("pci")), stamp, index)
        if _FALLEN_RE.search(line):
            if address:
                pci = last_gpu[0]
            elif last_gpu is not None and index - last_gpu[2] <= 3:  # multi-line form
                pci, stamp = last_gpu[0], stamp if stamp is not None else last_gpu[1]
            else:
                pci = "unknown"
            fallen.append((pci, stamp, line))
    for pci, stamp, line in fallen:
        if pci in xid79 or any(e["pci"] == pci and e["kind"] == "fallen_off_bus" for e in events):
            continue  # the Xid 79 line (or an earlier line of this report) already counts
        stats["xid_lines"] += 1
        if not _in_window(stamp, since, now, stats):
            continue
        detail = "GPU has fallen off the bus (no Xid line): " + line.split("NVRM:", 1)[-1].strip()
        events.append(_event(FALLEN_OFF_BUS_XID, pci, stamp, detail, "fallen_off_bus", now))
    return events, stats


def _in_window(stamp, since, now, stats):
    """Inside the window: undated lines and lines dated in the future count as recent (an XID is
    never dropped because a clock is wrong); only lines before the window start are left out."""
    if stamp is None:
        stats["undated"] += 1
        return True
    if stamp > now + FUTURE_TOLERANCE_S:
        stats["future"] = stats.get("future", 0) + 1
        return True
    if stamp < since:
        stats["outside_window"] += 1
        return False
    return True


def _event(xid, pci, stamp, detail, kind, now=None):
    event = {"xid": xid, "pci": pci, "time": None if stamp is None else _iso(stamp),
             "detail": detail[:_DETAIL_MAX], "kind": kind}
    if stamp is not None and now is not None and stamp > now + FUTURE_TOLERANCE_S:
        event["clock_skew_s"] = int(stamp - now)
    return event


def skew_note(events):
    """Text for the gpu.xid message when lines are dated after the node's clock, else ''."""
    ahead = [e["clock_skew_s"] for e in events if e.get("clock_skew_s")]
    if not ahead:
        return ""
    return ("; clock skew: %d line(s) dated up to %s after the node's clock (%s), counted as recent"
            % (len(ahead), _duration(max(ahead)), _iso_now_hint(events)))


def _duration(seconds):
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    if seconds < 86400 * 2:
        return "%.1f h" % (seconds / 3600.0)
    return "%d days" % (seconds // 86400)


def _iso_now_hint(events):
    latest = max(e["time"] for e in events if e.get("clock_skew_s"))
    return "latest %s" % latest


def _short_pci(text):
    """'0000:9b:00' / '00000000:9B:00' -> '0000:9b:00' (domain:bus:device, as NVRM prints)."""
    domain, bus, device = text.lower().split(":")
    return "%04x:%s:%s" % (int(domain, 16), bus, device)


class XidRead(object):
    """Outcome of reading the kernel log: lines, where they came from, or why not."""

    __slots__ = ("lines", "origin", "error", "truncated")

    def __init__(self, lines=None, origin=None, error=None, truncated=False):
        self.lines = lines
        self.origin = origin
        self.error = error
        self.truncated = truncated  # the window reaches further back than what was read


def read_xid_source(source, runner, root, window_hours, now):
    """Read kernel log lines for ``xid_source``; XidRead.error says why nothing was read."""
    if source == "none":
        return XidRead(error="xid_source=none: XID scan disabled")
    if source == "journal":
        return _read_journal(runner, window_hours, now)
    if source == "dmesg":
        return _read_dmesg(runner)
    if source == "auto":
        if os.path.realpath(root) != "/":
            for rel in _AUTO_FILES:
                if os.path.isfile(os.path.join(root, rel)):
                    return _read_file(root, rel, window_hours, now)
            return XidRead(error="xid_source=auto: root is %s, and the running kernel's log is not "
                                 "that node's; no var/log/kern.log or messages below root" % root)
        journal = _read_journal(runner, window_hours, now)
        if journal.error is None:
            return journal
        dmesg = _read_dmesg(runner)
        if dmesg.error is None:
            return dmesg
        return XidRead(error="%s; %s" % (journal.error, dmesg.error))
    return _read_file(root, source, window_hours, now)


def _read_journal(runner, window_hours, now):
    journalctl = runner.which("journalctl")
    if not journalctl:
        return XidRead(error="journalctl not found")
    since = int(now - float(window_hours) * 3600.0)
    result = runner.run([journalctl, "-k", "--since", "@%d" % since, "-o", "short-iso",
                         "-n", str(JOURNAL_MAX_LINES), "--no-pager", "-q"])
    if result.rc != 0:
        return XidRead(error="journalctl -k failed (rc=%s): %s" % (result.rc, result.stderr.strip()[:200]))
    return XidRead(lines=result.stdout.splitlines(), origin="journal")


def _read_dmesg(runner):
    dmesg = runner.which("dmesg")
    if not dmesg:
        return XidRead(error="dmesg not found")
    result = runner.run([dmesg, "--time-format", "iso"])
    if result.rc != 0:
        return XidRead(error="dmesg failed (rc=%s): %s" % (result.rc, result.stderr.strip()[:200]))
    return XidRead(lines=result.stdout.splitlines(), origin="dmesg")


def xid_file_path(root, path):
    """A log path is read below root like every other file (offline inspection of an image)."""
    return path if os.path.realpath(root) == "/" else os.path.join(root, path.lstrip("/"))


def _read_file(root, path, window_hours, now):
    """The tail of a log file: read backwards in 1 MiB steps until a line older than the
    window start is reached or ``MAX_LOG_BYTES`` were read. Only regular files are read."""
    full = xid_file_path(root, path)
    since = now - float(window_hours) * 3600.0
    try:
        if not stat.S_ISREG(os.stat(full).st_mode):
            return XidRead(error="xid_source: %s is not a regular file" % full)
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as exc:
        return XidRead(error="xid_source: cannot read %s: %s" % (full, getattr(exc, "strerror", None) or exc))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return XidRead(error="xid_source: %s is not a regular file" % full)
        chunks, position, reached = [], info.st_size, False
        while position > 0 and info.st_size - position < MAX_LOG_BYTES:
            step = min(_CHUNK, position, MAX_LOG_BYTES - (info.st_size - position))
            position -= step
            chunk = os.pread(fd, step, position)
            chunks.append(chunk)
            if position > 0 and _older_than(chunk, since, now):
                reached = True
                break
    except OSError as exc:
        return XidRead(error="xid_source: cannot read %s: %s" % (full, exc.strerror or exc))
    finally:
        os.close(fd)
    data = b"".join(reversed(chunks))
    if position > 0:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""  # drop the partial first line
    truncated = position > 0 and not reached
    origin = full if position == 0 or reached else "%s (last %d MiB)" % (full, MAX_LOG_BYTES // _CHUNK)
    return XidRead(lines=data.decode("utf-8", "replace").splitlines(), origin=origin, truncated=truncated)


def _older_than(chunk, since, now):
    """Whether the first complete, dated line of ``chunk`` lies before ``since`` (with a day
    of slack for clock steps and out-of-order writers)."""
    start = chunk.find(b"\n") + 1
    for _attempt in range(8):
        end = chunk.find(b"\n", start)
        if start <= 0 or end < 0:
            return False
        stamp = parse_timestamp(chunk[start:end].decode("utf-8", "replace"), now)
        if stamp is not None:
            return stamp < since - 86400
        start = end + 1
    return False
