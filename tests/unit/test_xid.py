"""XID parsing, time windows and kernel-log sources."""

import calendar
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import (
    FATAL_BUCKETS,
    IGNORE_BUCKETS,
    MAX_LOG_BYTES,
    WARN_OVERRIDES,
    XID_CATALOG,
    XID_FATAL_DEFAULT,
    XID_IGNORE_DEFAULT,
    VARYING_SEVERITY_XIDS,
    classify,
    parse_timestamp,
    parse_xid_lines,
    read_xid_source,
    skew_note,
)
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from runners import ScriptedRunner

XID_DIR = os.path.join(FIXTURES, "xid")
NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))  # 2025-11-20T12:00:00Z


def lines(name):
    with open(os.path.join(XID_DIR, name)) as handle:
        return handle.read().splitlines()




def test_journal_short_iso_events_in_window():
    events, stats = parse_xid_lines(lines("journal-short-iso.log"), NOW, 24)
    assert [(e["pci"], e["xid"]) for e in events] == [
        ("0000:9a:00", 119),
        ("0000:9a:00", 119),
        ("0000:18:00", 13),
        ("0000:3a:00", 63),
        ("0000:ba:00", 94),
    ]
    assert events[0]["time"] == "2025-11-20T09:14:51Z"
    assert events[2]["time"] == "2025-11-20T10:02:11Z"  # "+00:00" offset form of newer systemd
    assert events[0]["detail"].startswith("pid=48213, name=python3, Timeout after 6s")
    # The XID 79 two days earlier is outside the window; the NVSwitch SXid line is not an XID.
    assert stats == {"xid_lines": 6, "outside_window": 1, "undated": 0}


def test_window_hours_widen_the_scan():
    events, stats = parse_xid_lines(lines("journal-short-iso.log"), NOW, 72)
    assert (events[0]["pci"], events[0]["xid"]) == ("0000:db:00", 79)
    assert stats["outside_window"] == 0


def test_dmesg_iso_with_comma_fraction():
    events, _ = parse_xid_lines(lines("dmesg-iso.log"), NOW, 24)
    assert [(e["xid"], e["time"]) for e in events] == [
        (48, "2025-11-20T11:05:42Z"),
        (63, "2025-11-20T11:05:42Z"),
    ]


def test_offsets_are_honoured():
    line = "2025-11-20T13:30:00+0200 host kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1"
    assert parse_timestamp(line, NOW) == NOW - 30 * 60
    events, _ = parse_xid_lines([line], NOW, 0.25)
    assert events == []  # 11:30Z is 30 min ago, outside a 15 min window


def test_syslog_kern_log_in_local_time(utc):
    events, stats = parse_xid_lines(lines("kern.log"), NOW, 24)
    # Nov 19 06:12 is outside 24 h; the old driver format without "PCI:" is understood.
    assert [(e["xid"], e["time"]) for e in events] == [
        (43, "2025-11-20T10:41:07Z"),
        (13, "2025-11-20T10:45:19Z"),
        (109, "2025-11-20T11:59:59Z"),
    ]
    assert stats["outside_window"] == 1


def test_syslog_dates_without_year_roll_back_over_new_year(utc):
    january = calendar.timegm((2026, 1, 1, 0, 30, 0))
    stamp = parse_timestamp("Dec 31 23:45:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x", january)
    assert stamp == calendar.timegm((2025, 12, 31, 23, 45, 0))


def test_undated_lines_are_counted_conservatively():
    events, stats = parse_xid_lines(lines("dmesg-plain.log"), NOW, 1)
    assert [(e["pci"], e["xid"], e["time"]) for e in events] == [("0000:db:00", 79, None)]
    assert stats["undated"] == 1


def test_pci_address_is_normalised():
    events, _ = parse_xid_lines(["NVRM: Xid (PCI:00000000:9B:00): 119, pid=1234, name=x"], NOW, 1)
    assert events[0]["pci"] == "0000:9b:00"


@pytest.mark.parametrize(
    "xid,expected",
    [
        (79, "fail"),  # RESTART_BM
        (119, "fail"),  # RESET_GPU
        (149, "fail"),  # WORKFLOW_NVLINK5_ERR: reset the GPU (was only a warning before)
        (48, "fail"),  # WORKFLOW_XID_48
        (74, "fail"),  # WORKFLOW_NVLINK_ERR
        (46, "fail"),  # RESET_GPU
        (94, "warn"),  # RESTART_APP: contained, restart the application (was fatal before)
        (13, "warn"),  # RESTART_APP
        (31, "warn"),  # RESTART_APP
        (63, "warn"),  # IGNORE in the catalog, but a row remapping is pending until a GPU reset
        (64, "fail"),  # RESET_GPU (row remapping failure)
        (92, "pass"),  # IGNORE (high single-bit ECC rate)
        (45, "pass"),  # WORKFLOW_XID_45: follows the XIDs logged with it
        (154, "warn"),  # XID_154: informational, the action comes with the other XID
        (999, "warn"),  # not in the catalog
    ],
)
def test_default_classification(xid, expected):
    assert classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == expected


def test_fatal_wins_over_ignore():
    assert classify(13, [13], [13]) == "fail"


def test_defaults_follow_the_catalog_table():
    assert XID_FATAL_DEFAULT == [46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143,
                                 144, 145, 146, 147, 148, 149, 150, 155, 156, 158]
    assert XID_IGNORE_DEFAULT == [14, 37, 38, 43, 44, 45, 66, 67, 92, 93, 106, 107, 108, 121,
                                  137, 141, 157, 160, 161]
    for xid, (name, bucket) in XID_CATALOG.items():
        assert name and bucket, xid
        assert (xid in XID_FATAL_DEFAULT) == (bucket in FATAL_BUCKETS)
        assert (xid in XID_IGNORE_DEFAULT) == (bucket in IGNORE_BUCKETS and xid not in WARN_OVERRIDES)


@settings(max_examples=200, deadline=None)
@given(xid=st.integers(0, 400), in_fatal=st.booleans(), in_ignore=st.booleans())
def test_a_pending_row_remap_is_never_a_silent_pass_by_default(xid, in_fatal, in_ignore):
    """The default lists never pass XID 63 or 64 (a reset is due); explicit lists still decide."""
    fatal = set(XID_FATAL_DEFAULT) | ({xid} if in_fatal else set())
    ignore = set(XID_IGNORE_DEFAULT) - ({xid} if in_fatal else set()) | ({xid} if in_ignore and not in_fatal else set())
    status = classify(xid, fatal, ignore)
    if xid in (63, 64) and not in_ignore:
        assert status in ("warn", "fail")
    assert status == ("fail" if xid in fatal else "pass" if xid in ignore else "warn")


# -- sources ------------------------------------------------------------------------------
def test_journal_source_runs_journalctl_for_the_window():
    runner = ScriptedRunner(
        {"/bin/journalctl": (0, "\n".join(lines("journal-short-iso.log")), "")},
        paths={"journalctl": "/bin/journalctl"},
    )
    read = read_xid_source("journal", runner, "/", 24, NOW)
    assert read.error is None and read.origin == "journal" and len(read.lines) == 10
    assert runner.calls == [
        ["/bin/journalctl", "-k", "--since", "@%d" % (NOW - 86400), "-o", "short-iso", "-n", "500000",
         "--no-pager", "-q"]
    ]


def test_dmesg_source():
    runner = ScriptedRunner(
        {"/bin/dmesg": (0, "\n".join(lines("dmesg-iso.log")), "")}, paths={"dmesg": "/bin/dmesg"}
    )
    read = read_xid_source("dmesg", runner, "/", 24, NOW)
    assert read.origin == "dmesg" and runner.calls == [["/bin/dmesg", "--time-format", "iso"]]


def test_auto_falls_back_to_dmesg_when_the_journal_fails():
    runner = ScriptedRunner(
        {
            "/bin/journalctl": (1, "", "No journal files were found."),
            "/bin/dmesg": (0, "\n".join(lines("dmesg-iso.log")), ""),
        },
        paths={"journalctl": "/bin/journalctl", "dmesg": "/bin/dmesg"},
    )
    read = read_xid_source("auto", runner, "/", 24, NOW)
    assert read.origin == "dmesg" and len(runner.calls) == 2


def test_auto_reports_both_failures():
    runner = ScriptedRunner(
        {"/bin/dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")},
        paths={"dmesg": "/bin/dmesg"},
    )
    read = read_xid_source("auto", runner, "/", 24, NOW)
    assert read.lines is None
    assert "journalctl not found" in read.error and "Operation not permitted" in read.error


def test_auto_below_another_root_reads_its_log_files_not_the_running_kernel(tmp_path):
    runner = ScriptedRunner()
    read = read_xid_source("auto", runner, str(tmp_path), 24, NOW)
    assert read.error.startswith("xid_source=auto: root is") and runner.calls == []
    log = tmp_path / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines("kern.log")))
    read = read_xid_source("auto", runner, str(tmp_path), 24, NOW)
    assert read.origin == str(log) and len(read.lines) == 5 and runner.calls == []


def test_file_source_is_read_below_root(tmp_path):
    log = tmp_path / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text("x\n")
    assert read_xid_source("/var/log/kern.log", ScriptedRunner(), str(tmp_path), 24, NOW).lines == ["x"]
    missing = read_xid_source("/var/log/nope.log", ScriptedRunner(), str(tmp_path), 24, NOW)
    assert missing.lines is None and "cannot read" in missing.error


def test_none_disables_the_scan():
    runner = ScriptedRunner()
    read = read_xid_source("none", runner, "/", 24, NOW)
    assert read.lines is None and "disabled" in read.error and runner.calls == []


# -- every time format (constructed lines in the formats the tools print) ----------------------
@pytest.mark.parametrize("line,expected", [
    # dmesg --time-format iso
    ("2025-11-20T11:05:42,123456+00:00 NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    # dmesg --decode --time-format iso
    ("kern  :err   : 2025-11-20T11:05:42,123456+00:00 NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    # dmesg -T / --ctime (local time; TZ=UTC here), also after --decode
    ("[Thu Nov 20 11:05:42 2025] NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("kern  :warn  : [Thu Nov 20 11:05:42 2025] NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    # journalctl -o short / short-precise / short-iso / short-iso-precise / short-full
    ("Nov 20 11:05:42 host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("Nov 20 11:05:42.123456 host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("2025-11-20T11:05:42+0000 host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("2025-11-20T13:05:42.123456+02:00 host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("Thu 2025-11-20 11:05:42 UTC host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    # RFC 5424 and RFC 3164 syslog with the kernel's own stamp inside
    ("<3>1 2025-11-20T11:05:42.123Z host kernel - - - NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    ("Nov 20 11:05:42 host kernel: [183921.441270] NVRM: Xid (PCI:0000:18:00): 48, x", (2025, 11, 20, 11, 5, 42)),
    # undated: raw dmesg, journalctl -o short-monotonic
    ("[183921.441270] NVRM: Xid (PCI:0000:18:00): 48, x", None),
    ("[ 1843.308145] host kernel: NVRM: Xid (PCI:0000:18:00): 48, x", None),
])
def test_every_time_format(utc, line, expected):
    stamp = parse_timestamp(line, NOW)
    assert stamp == (None if expected is None else calendar.timegm(expected + (0, 0, 0)))
    events, stats = parse_xid_lines([line], NOW, 24)
    assert [e["xid"] for e in events] == [48]
    assert stats["undated"] == (1 if expected is None else 0)


@pytest.mark.parametrize("line", [
    "2025-13-01T10:00:00+00:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",  # month 13
    "2025-02-30T10:00:00Z host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",  # Feb 30
    "2025-11-20T25:61:61+00:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
    "2025-11-20T10:00:00+99:99 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
    "0000-01-01T00:00:00-23:59 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
    "[Sun Feb 30 16:24:18 2025] NVRM: Xid (PCI:0000:18:00): 79, x",
    "[Sun Feb 23 16:24:18 0000] NVRM: Xid (PCI:0000:18:00): 79, x",
    "Feb 30 16:24:18 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
    "Xyz 23 16:24:18 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
])
def test_impossible_dates_make_the_line_undated_not_an_error(line):
    assert parse_timestamp(line, NOW) is None
    events, stats = parse_xid_lines([line], NOW, 24)
    assert [(e["xid"], e["time"]) for e in events] == [(79, None)] and stats["undated"] == 1


def test_dates_at_the_edge_of_the_calendar_are_clock_skew_kept_as_recent():
    line = "9999-12-31T23:59:59-23:59 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x"
    assert parse_timestamp(line, NOW) > NOW
    events, stats = parse_xid_lines([line], NOW, 24)
    assert [e["xid"] for e in events] == [79] and stats["future"] == 1 and stats["outside_window"] == 0
    assert events[0]["clock_skew_s"] > 86400 * 365 * 7000


def test_lines_of_any_content_never_raise():
    garbage = ["", "\x00" * 10, "NVRM: Xid (PCI:0000:18:00): " + "9" * 5000 + ", x",
               "NVRM: Xid (PCI:0000:18:00): \u00b2, x", "NVRM: Xid (PCI:0000:18:00): \u0663, x",
               "\udcff\udcfe NVRM: Xid (PCI:0000:18:00): 48, x", "NVRM: fallen off the bus", None, 42]
    events, _ = parse_xid_lines(garbage, NOW, 24)
    assert sorted(e["xid"] for e in events) == [48, 79]  # Unicode/huge codes are not XIDs
    assert [e["pci"] for e in events if e["kind"] == "fallen_off_bus"] == ["unknown"]


def test_fallen_off_the_bus_with_its_xid_line_counts_once():
    events, _ = parse_xid_lines(lines("dmesg-plain.log"), NOW, 1)
    assert [(e["xid"], e["kind"]) for e in events] == [(79, "xid")]


def test_fallen_off_the_bus_without_xid_is_an_xid_79_event(utc):
    log = ["2025-11-20T11:00:00+00:00 host kernel: NVRM: GPU 0000:db:00.0: GPU has fallen off the bus."]
    events, _ = parse_xid_lines(log, NOW, 24)
    assert [(e["xid"], e["pci"], e["kind"], e["time"]) for e in events] == [
        (79, "0000:db:00", "fallen_off_bus", "2025-11-20T11:00:00Z")]


# -- bounded, non-blocking reads of log files -------------------------------------------------
def test_a_fifo_as_log_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "var" / "log" / "kern.log"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(str(fifo))
    read = read_xid_source("/var/log/kern.log", ScriptedRunner(), str(tmp_path), 24, NOW)
    assert read.lines is None and "not a regular file" in read.error


def test_only_the_tail_of_a_huge_log_is_read(tmp_path, utc):
    log = tmp_path / "kern.log"
    old = "2025-11-10T00:00:00+00:00 host kernel: filler %s\n" % ("x" * 200)
    recent = "2025-11-20T11:00:00+00:00 host kernel: NVRM: Xid (PCI:0000:18:00): 79, x\n"
    with open(str(log), "w") as handle:
        for _ in range(40000):  # about 10 MiB of lines older than the window
            handle.write(old)
        handle.write(recent)
    read = read_xid_source(str(log), ScriptedRunner(), "/", 24, NOW)
    assert read.error is None and not read.truncated
    assert len(read.lines) < 20000  # stopped about 1 MiB before the window start
    events, _ = parse_xid_lines(read.lines, NOW, 24)
    assert [e["xid"] for e in events] == [79]


def test_a_log_larger_than_the_cap_is_read_up_to_the_cap(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import xid as xid_module

    monkeypatch.setattr(xid_module, "MAX_LOG_BYTES", 2 * 1024 * 1024)
    log = tmp_path / "dmesg.txt"
    with open(str(log), "w") as handle:
        for number in range(100000):  # undated lines: the window start is never seen
            handle.write("[%d.000000] NVRM: Xid (PCI:0000:18:00): 13, line %d\n" % (number, number))
    read = read_xid_source(str(log), ScriptedRunner(), "/", 24, NOW)
    assert read.truncated and "(last 2 MiB)" in read.origin
    assert sum(len(x) + 1 for x in read.lines) <= 2 * 1024 * 1024
    assert read.lines[-1].endswith("line 99999") and read.lines[0].startswith("[")
    assert MAX_LOG_BYTES == 32 * 1024 * 1024


def test_contracts_document_the_catalog_table_row_by_row():
    with open(os.path.join(os.path.dirname(FIXTURES), "..", "docs", "contracts.md"), encoding="utf-8") as handle:
        doc = handle.read()
    documented = {}
    for row in doc.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isascii() and cells[0].isdigit():
            documented[int(cells[0])] = (cells[1], cells[2].strip("`"), cells[3])
    expected = {}
    for xid, (name, bucket) in XID_CATALOG.items():
        status = classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT)
        expected[xid] = (name, bucket, status)
    assert documented == expected


# -- NVLink5 XIDs 144-150: the severity word of the line decides ------------------------------
def test_nvlink5_severity_word_is_read_from_the_line(utc):
    now = calendar.timegm((2025, 11, 25, 12, 0, 0))
    events, stats = parse_xid_lines(lines("nvlink5-severity-dmesg-T.log"), now, 24)
    assert [(e["xid"], e["pci"], e["severity"]) for e in events] == [
        (145, "0018:01:00", "nonfatal"), (145, "0018:01:00", "nonfatal"), (149, "0019:01:00", "fatal"),
        (144, "0019:01:00", "nonfatal"), (146, "001a:01:00", None)]
    assert events[2]["time"] == "2025-11-25T10:14:40Z" and stats["undated"] == 0
    statuses = [classify(e["xid"], XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT, e["severity"]) for e in events]
    assert statuses == ["warn", "warn", "fail", "warn", "fail"]  # no word: the catalog's bucket (fail closed)


@pytest.mark.parametrize("xid", sorted(VARYING_SEVERITY_XIDS))
def test_varying_severity_xids(xid):
    assert XID_CATALOG[xid][1] == "WORKFLOW_NVLINK5_ERR"
    assert classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT, "nonfatal") == "warn"
    assert classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT, "fatal") == "fail"
    assert classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == "fail"
    assert classify(xid, [], [xid], "nonfatal") == "pass"
    assert classify(xid, [], [], "fatal") == "warn"  # xid_fatal replaced without it


def test_severity_words_of_other_xids_are_ignored():
    line = "NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, Nonfatal"
    (event,), _ = parse_xid_lines([line], NOW, 24)
    assert "severity" not in event
    assert classify(48, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT, "nonfatal") == "fail"


@pytest.mark.parametrize("detail, severity", [
    ("RLW_SRC_TRACK Fatal XC0 i0 Link 02 (0x1)", "fatal"),
    ("RLW_SRC_TRACK Nonfatal XC0 i0 Link 02 (0x1)", "nonfatal"),
    ("RLW_SRC_TRACK Non-fatal XC0 i0 Link 02 (0x1)", "nonfatal"),
    ("RLW_FATALITY XC0 i0 Link 02 (0x1)", None),
    ("FatalX XC0", None),
])
def test_severity_word_is_a_whole_word(detail, severity):
    (event,), _ = parse_xid_lines(["NVRM: Xid (PCI:0018:01:00): 145, " + detail], NOW, 24)
    assert event["severity"] == severity


# -- dated dmesg -T / --ctime lines in several time zones (TZ of the process) -------------------
# local_tz: the fixture of tests/conftest.py


# (TZ, dmesg -T stamp as that zone prints it, the same instant in UTC)
@pytest.mark.parametrize("zone, stamp, utc_fields", [
    ("UTC", "Tue Nov 25 10:11:12 2025", (2025, 11, 25, 10, 11, 12)),
    ("America/New_York", "Tue Nov 25 10:11:12 2025", (2025, 11, 25, 15, 11, 12)),
    ("Asia/Kolkata", "Tue Nov 25 10:11:12 2025", (2025, 11, 25, 4, 41, 12)),
    ("Australia/Lord_Howe", "Tue Nov 25 10:11:12 2025", (2025, 11, 24, 23, 11, 12)),  # +11:00 (DST, 30 min)
    ("Europe/Berlin", "Sun Mar 29 01:59:59 2026", (2026, 3, 29, 0, 59, 59)),  # just before spring forward
    ("Europe/Berlin", "Sun Mar 29 03:00:00 2026", (2026, 3, 29, 1, 0, 0)),  # just after
    # the hour repeated at fall back: the later reading (CET), the conservative one for a window
    ("Europe/Berlin", "Sun Oct 25 02:30:00 2026", (2026, 10, 25, 1, 30, 0)),
    ("America/New_York", "Sun Nov  1 01:30:00 2026", (2026, 11, 1, 6, 30, 0)),
])
def test_dmesg_ctime_is_local_time_of_the_process(local_tz, zone, stamp, utc_fields):
    local_tz(zone)
    expected = calendar.timegm(utc_fields + (0, 0, 0))
    line = "[%s] NVRM: Xid (PCI:0000:18:00): 48, x" % stamp
    assert parse_timestamp(line, expected) == expected
    assert parse_timestamp("kern  :err   : " + line, expected) == expected  # dmesg --decode -T
    (event,), stats = parse_xid_lines([line], expected + 3600, 24)
    assert event["time"] == "%04d-%02d-%02dT%02d:%02d:%02dZ" % utc_fields and stats["undated"] == 0


def test_the_same_log_read_in_another_zone_moves_by_the_offset(local_tz):
    line = "[Tue Nov 25 10:11:12 2025] NVRM: Xid (PCI:0000:18:00): 48, x"
    local_tz("UTC")
    utc = parse_timestamp(line, NOW)
    local_tz("Asia/Tokyo")
    assert utc - parse_timestamp(line, NOW) == 9 * 3600


# -- time is checked, not trusted: future-dated lines ------------------------------------------
@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kathmandu"])
def test_a_line_dated_in_the_future_is_kept_as_recent_and_reported_as_skew(local_tz, zone):
    local_tz(zone)
    now = calendar.timegm((2026, 11, 25, 10, 0, 0))
    future = "[%s] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus." % time_text(now + 3 * 3600)
    near = "[%s] NVRM: Xid (PCI:0000:18:00): 13, x" % time_text(now + 240)  # within the 5 min tolerance
    old = "[%s] NVRM: Xid (PCI:0000:18:00): 31, x" % time_text(now - 30 * 3600)
    events, stats = parse_xid_lines([old, future, near], now, 24)
    assert [e["xid"] for e in events] == [79, 13]
    assert events[0]["clock_skew_s"] == 3 * 3600 and "clock_skew_s" not in events[1]
    assert stats == {"xid_lines": 3, "outside_window": 1, "undated": 0, "future": 1}
    note = skew_note(events)
    assert note.startswith("; clock skew: 1 line(s) dated up to 3.0 h after the node's clock")
    assert "counted as recent" in note
    assert skew_note(events[1:]) == ""


def test_a_clock_set_back_keeps_yesterdays_fatal_xid(utc):
    # the node's clock was stepped back a day after the XID was logged: the XID still counts
    logged = calendar.timegm((2026, 11, 25, 10, 0, 0))
    line = "2026-11-25T10:00:00+00:00 NVRM: Xid (PCI:0000:18:00): 48, x"
    events, stats = parse_xid_lines([line], logged - 86400 - 60, 1)
    assert [e["xid"] for e in events] == [48] and stats["future"] == 1
    assert classify(48, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == "fail"


def time_text(epoch):
    import time
    return time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(epoch))
