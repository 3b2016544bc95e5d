# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA XID events from the kernel log.

The driver logs ``NVRM: Xid (PCI:0000:9b:00): 119, pid=1234, name=python, ...``. Lines come
from the journal (``journalctl -k --since @<epoch> -o short-iso``), from ``dmesg --time-format
iso`` (both through a runner) or from a log file below ``root``. Timestamps understood:
ISO 8601 (journal short-iso, dmesg iso, rsyslog high precision; with or without offset, a
missing offset meaning local time) and traditional syslog (``Nov 20 10:15:02``: no year, so the
most recent such date not in the future is assumed).

Choice for undated lines (only possible from files, e.g. plain ``dmesg`` output with
boot-relative ``[ 1234.5]`` stamps): they cannot be placed in the window, so they are counted
as if inside it (conservative: an XID is never silently dropped) and marked ``time: null``.
"""

from __future__ import absolute_import, division, print_function

import calendar
import os
import re
import time

XID_IGNORE_DEFAULT = [13, 31, 43, 45, 68]
XID_FATAL_DEFAULT = [48, 62, 64, 74, 79, 92, 94, 95, 109, 119, 120, 136, 140, 143, 155, 158]
XID_SOURCE_KEYWORDS = ("auto", "journal", "dmesg", "none")

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(?P<xid>\d+)(?:, ?(?P<detail>.*))?")
_ISO_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?:[.,]\d+)?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2})?(?=\s|$)")
_SYSLOG_RE = re.compile(r"^(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2})\b")
_MONTHS = dict((name, number) for number, name in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1))
# Files in a node image where auto looks when root is not "/".
_AUTO_FILES = ("var/log/kern.log", "var/log/messages", "var/log/syslog")


def classify(xid, fatal, ignore):
    """fail (in xid_fatal) | pass (in xid_ignore) | warn (any other). Fatal wins when a code
    is in both lists: a health gate errs on the safe side."""
    if xid in fatal:
        return "fail"
    if xid in ignore:
        return "pass"
    return "warn"


def parse_timestamp(line, now):
    """Epoch seconds of the timestamp that starts ``line``, or None."""
    match = _ISO_RE.match(line)
    if match:
        fields = [int(x) for x in match.group("date").split("-") + match.group("time").split(":")]
        tz = match.group("tz")
        if tz is None:
            return time.mktime(tuple(fields) + (0, 0, -1))
        epoch = calendar.timegm(tuple(fields) + (0, 0, 0))
        if tz != "Z":
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            epoch -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        return float(epoch)
    match = _SYSLOG_RE.match(line)
    if match and match.group("mon") in _MONTHS:
        hour, minute, second = [int(x) for x in match.group("time").split(":")]
        year = time.localtime(now).tm_year
        for candidate in (year, year - 1):
            try:
                stamp = time.mktime((candidate, _MONTHS[match.group("mon")], int(match.group("day")),
                                     hour, minute, second, 0, 0, -1))
            except (OverflowError, ValueError):
                return None
            if stamp <= now + 86400:  # tolerate clock skew of a day, else last year
                return stamp
    return None


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_xid_lines(lines, now, window_hours):
    """XID events within ``window_hours`` before ``now``.

    Returns (events, stats): events are {xid, pci, time, detail}; stats count what was seen
    (xid_lines, outside_window, undated).
    """
    since = now - float(window_hours) * 3600.0
    events = []
    stats = {"xid_lines": 0, "outside_window": 0, "undated": 0}
    for line in lines:
        match = _XID_RE.search(line)
        if not match:
            continue
        stats["xid_lines"] += 1
        stamp = parse_timestamp(line.strip(), now)
        if stamp is None:
            stats["undated"] += 1
        elif stamp < since or stamp > now + 86400:
            stats["outside_window"] += 1
            continue
        detail = (match.group("detail") or "").strip()
        events.append({
            "xid": int(match.group("xid")),
            "pci": _short_pci(match.group("pci")),
            "time": None if stamp is None else _iso(stamp),
            "detail": detail[:200],
        })
    return events, stats


def _short_pci(text):
    """'0000:9b:00' / '00000000:9B:00' -> '0000:9b:00' (domain:bus:device, as NVRM prints)."""
    domain, bus, device = text.lower().split(":")
    return "%04x:%s:%s" % (int(domain, 16), bus, device)


class XidRead(object):
    """Outcome of reading the kernel log: lines, where they came from, or why not."""

    __slots__ = ("lines", "origin", "error")

    def __init__(self, lines=None, origin=None, error=None):
        self.lines = lines
        self.origin = origin
        self.error = error


def read_xid_source(source, runner, root, window_hours, now):
    """Read kernel log lines for ``xid_source``; XidRead.error says why nothing was read."""
    root = root or "/"
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
                    return _read_file(root, rel)
            return XidRead(error="xid_source=auto: root is %s, and the running kernel's log is not "
                                 "that node's; no var/log/kern.log or messages below root" % root)
        journal = _read_journal(runner, window_hours, now)
        if journal.error is None:
            return journal
        dmesg = _read_dmesg(runner)
        if dmesg.error is None:
            return dmesg
        return XidRead(error="%s; %s" % (journal.error, dmesg.error))
    return _read_file(root, source)


def _read_journal(runner, window_hours, now):
    journalctl = runner.which("journalctl")
    if not journalctl:
        return XidRead(error="journalctl not found")
    since = int(now - float(window_hours) * 3600.0)
    result = runner.run([journalctl, "-k", "--since", "@%d" % since, "-o", "short-iso",
                         "--no-pager", "-q"])
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
    return path if os.path.realpath(root or "/") == "/" else os.path.join(root, path.lstrip("/"))


def _read_file(root, path):
    full = xid_file_path(root, path)
    try:
        with open(full, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError as exc:
        return XidRead(error="xid_source: cannot read %s: %s" % (full, exc.strerror or exc))
    return XidRead(lines=text.splitlines(), origin=full)
