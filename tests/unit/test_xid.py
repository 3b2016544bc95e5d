"""XID parsing, time windows and kernel-log sources."""

import calendar
import os
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.xid import (
    XID_FATAL_DEFAULT,
    XID_IGNORE_DEFAULT,
    classify,
    parse_timestamp,
    parse_xid_lines,
    read_xid_source,
)
from conftest import FIXTURES
from runners import ScriptedRunner

XID_DIR = os.path.join(FIXTURES, "xid")
NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))  # 2025-11-20T12:00:00Z


def lines(name):
    with open(os.path.join(XID_DIR, name)) as handle:
        return handle.read().splitlines()


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


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
    "xid,expected", [(79, "fail"), (119, "fail"), (13, "pass"), (31, "pass"), (63, "warn")]
)
def test_default_classification(xid, expected):
    assert classify(xid, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == expected


def test_fatal_wins_over_ignore():
    assert classify(13, [13], [13]) == "fail"


def test_spec_defaults():
    assert XID_IGNORE_DEFAULT == [13, 31, 43, 45, 68]
    assert XID_FATAL_DEFAULT == [48, 62, 64, 74, 79, 92, 94, 95, 109, 119, 120, 136, 140, 143, 155, 158]


# -- sources ------------------------------------------------------------------------------
def test_journal_source_runs_journalctl_for_the_window():
    runner = ScriptedRunner(
        {"/bin/journalctl": (0, "\n".join(lines("journal-short-iso.log")), "")},
        paths={"journalctl": "/bin/journalctl"},
    )
    read = read_xid_source("journal", runner, "/", 24, NOW)
    assert read.error is None and read.origin == "journal" and len(read.lines) == 10
    assert runner.calls == [
        ["/bin/journalctl", "-k", "--since", "@%d" % (NOW - 86400), "-o", "short-iso", "--no-pager", "-q"]
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
