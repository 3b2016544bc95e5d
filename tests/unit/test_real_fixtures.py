"""XID parsing against the real lines of tests/fixtures/real/xid (sources in tests/fixtures/real/README.md).

The captures in tests/fixtures/real/captures are exercised by test_real_captures.py."""

import calendar
import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import (
    XID_FATAL_DEFAULT,
    XID_IGNORE_DEFAULT,
    classify,
    parse_xid_lines,
)
from conftest import FIXTURES

REAL = os.path.join(FIXTURES, "real")


def real_lines(name):
    with open(os.path.join(REAL, "xid", name), encoding="utf-8") as handle:
        return handle.read().splitlines()




# -- XID lines ---------------------------------------------------------------------------------
def test_gpud_dmesg_ctime_lines_are_dated(utc):
    now = calendar.timegm((2024, 8, 30, 12, 0, 0))
    events, stats = parse_xid_lines(real_lines("gpud-dmesg-ctime.log"), now, 24)
    assert stats == {"xid_lines": 4, "outside_window": 0, "undated": 0}
    assert [(e["xid"], e["pci"], e["time"]) for e in events] == [
        (13, "0000:cb:00", "2024-08-30T11:43:09Z"),
        (13, "0000:cb:00", "2024-08-30T11:43:09Z"),
        (13, "0000:cb:00", "2024-08-30T11:43:09Z"),
        (109, "0000:cb:00", "2024-08-30T11:43:14Z"),
    ]
    # three months later the same lines are outside a 24 h window (they were "undated" before)
    later = calendar.timegm((2024, 11, 30, 12, 0, 0))
    events, stats = parse_xid_lines(real_lines("gpud-dmesg-ctime.log"), later, 24)
    assert events == [] and stats["outside_window"] == 4


def test_nvsentinel_multiline_fallen_off_the_bus_without_xid():
    events, stats = parse_xid_lines(real_lines("nvsentinel-155-fallen-off-no-xid.log"), time.time(), 24)
    assert [(e["xid"], e["pci"], e["kind"], e["time"]) for e in events] == [
        (79, "0000:b3:00", "fallen_off_bus", None)]
    assert "fallen off the bus" in events[0]["detail"]
    assert classify(79, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == "fail"
    assert stats["undated"] == 1


def test_bumblebee_fallen_off_the_bus_reported_once_per_gpu():
    events, _ = parse_xid_lines(real_lines("bumblebee-554-fallen-off-no-xid.log"), time.time(), 24)
    assert [(e["xid"], e["pci"], e["kind"]) for e in events] == [(79, "0000:01:00", "fallen_off_bus")]


def test_bumblebee_raw_dmesg_xids_are_undated_but_counted():
    events, stats = parse_xid_lines(real_lines("bumblebee-677-dmesg-raw.log"), time.time(), 1)
    assert [(e["xid"], e["time"]) for e in events] == [(32, None), (32, None), (31, None)]
    assert stats["undated"] == 3
    assert {classify(e["xid"], XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) for e in events} == {"warn"}


def test_ml_engineering_xid63_row_remap_pending_warns_by_default():
    events, _ = parse_xid_lines(real_lines("ml-engineering-xid63.log"), time.time(), 24)
    assert [(e["xid"], e["pci"]) for e in events] == [(63, "0000:10:1c")]
    assert events[0]["detail"].startswith("pid=1896, Row Remapper")
    # "reset gpu to activate": the remapping is pending until a GPU reset (a warning, not a pass)
    assert classify(63, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == "warn"
