"""Parsers against real captures (tests/fixtures/real, sources in its README)."""

import calendar
import json
import os
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.mlx5 import gather_mlx5_facts, parse_rate, parse_state
from ansible_collections.gpufleet.cluster.plugins.module_utils.ofed import normalize_version, parse_ofed_info
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma_checks import validate_rdma
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.xid import (
    XID_FATAL_DEFAULT,
    XID_IGNORE_DEFAULT,
    classify,
    parse_timestamp,
    parse_xid_lines,
)
from conftest import FIXTURES

REAL = os.path.join(FIXTURES, "real")
CAPTURES = os.path.join(REAL, "captures")  # sources in captures/README.md
PROCFS = os.path.join(CAPTURES, "sysfs_ib", "procfs")
NODE_EXPORTER = os.path.join(CAPTURES, "sysfs_ib", "node_exporter")
GPUD_H100 = os.path.join(CAPTURES, "sysfs_ib", "gpud_h100")


def real_lines(name):
    with open(os.path.join(REAL, "xid", name), encoding="utf-8") as handle:
        return handle.read().splitlines()


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- sysfs: prometheus/procfs, node_exporter and gpud InfiniBand trees -------------------------
def _devices(root):
    facts = gather_mlx5_facts(SysfsReader(root), None)
    json.dumps(facts, allow_nan=False)
    return {d["name"]: d for d in facts["devices"]}


def _port(entry):
    return (entry["port"], entry["state"], entry["state_id"], entry["phys_state"], entry["phys_state_id"],
            entry["rate_gbps"], entry["width"], entry["speed"], entry["link_layer"])


def test_procfs_infiniband_tree_attribute_formats():
    devices = _devices(PROCFS)
    assert sorted(devices) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    assert [_port(p) for p in devices["hfi1_0"]["ports"]] == [(1, "ACTIVE", 4, "LinkUp", 5, 100.0, "4X", "EDR", None)]
    assert [_port(p) for p in devices["mlx4_0"]["ports"]] == [
        (1, "ACTIVE", 4, "LinkUp", 5, 40.0, "4X", "QDR", None), (2, "ACTIVE", 4, "LinkUp", 5, 40.0, "4X", "QDR", None)]
    # phys_state "4: ACTIVE" (sic) is read as it is
    assert [_port(p) for p in devices["mlx5_0"]["ports"]] == [(1, "ACTIVE", 4, "ACTIVE", 4, 25.0, "1X", "EDR", None)]
    assert (devices["mlx4_0"]["hca_type"], devices["mlx4_0"]["fw_ver"]) == ("MT4099", "2.31.5050")
    assert devices["hfi1_0"]["hca_type"] is None and devices["hfi1_0"]["fw_ver"] == "1.27.0"


def test_node_exporter_tree_attribute_formats():
    devices = _devices(NODE_EXPORTER)
    assert [_port(p) for p in devices["mlx4_0"]["ports"]] == [
        (1, "ACTIVE", 4, "LinkUp", 5, 40.0, "4X", "QDR", "InfiniBand"),
        (2, "ACTIVE", 4, "LinkUp", 5, 40.0, "4X", "QDR", "InfiniBand")]


def test_gpud_h100_tree_without_trailing_newlines():
    devices = _devices(GPUD_H100)
    port = devices["mlx5_0"]["ports"][0]
    assert (port["state"], port["state_id"], port["rate_gbps"], port["width"], port["speed"]) == (
        "ACTIVE", 4, 400.0, "4X", "NDR")
    assert devices["mlx5_bond_0"]["ports"][0]["link_layer"] == "Ethernet"


def test_procfs_tree_validates_without_crashing():
    reader = SysfsReader(PROCFS)
    facts = gather_mlx5_facts(reader, None)
    results = validate_rdma(facts, reader, {"min_rate_gbps": 40, "check_counters": True})
    json.dumps(results.result(), allow_nan=False)
    statuses = {(c["id"], c["target"]): c["status"] for c in results}
    # the 25 Gb/s mlx5_0 port is below a 40 Gb/s minimum
    assert any(status == "fail" for (_cid, target), status in statuses.items() if "mlx5_0" in target)


@pytest.mark.parametrize("root,rel,expected", [
    (PROCFS, "hfi1_0/ports/1/rate", (100.0, "4X", "EDR")),
    (PROCFS, "mlx4_0/ports/2/rate", (40.0, "4X", "QDR")),
    (PROCFS, "mlx5_0/ports/1/rate", (25.0, "1X", "EDR")),
    (GPUD_H100, "mlx5_0/ports/1/rate", (400.0, "4X", "NDR")),
])
def test_rate_files(root, rel, expected):
    assert parse_rate(SysfsReader(root).read("sys/class/infiniband/" + rel)) == expected


def test_state_files():
    reader = SysfsReader(NODE_EXPORTER)
    assert parse_state(reader.read("sys/class/infiniband/mlx4_0/ports/1/state")) == (4, "ACTIVE")
    assert parse_state(reader.read("sys/class/infiniband/mlx4_0/ports/1/phys_state")) == (5, "LinkUp")


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


def test_ml_engineering_xid63_is_ignored_by_default():
    events, _ = parse_xid_lines(real_lines("ml-engineering-xid63.log"), time.time(), 24)
    assert [(e["xid"], e["pci"]) for e in events] == [(63, "0000:10:1c")]
    assert events[0]["detail"].startswith("pid=1896, Row Remapper")
    assert classify(63, XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) == "pass"


def captured_lines(name):
    with open(os.path.join(CAPTURES, "xid", name), encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_gpud_dmesg_ctime_xid119_lines(utc):
    now = calendar.timegm((2025, 2, 23, 18, 0, 0))
    events, stats = parse_xid_lines(captured_lines("dmesg_ctime_xid119_gpud.txt"), now, 24)
    assert stats["undated"] == 0 and stats["outside_window"] == 0
    assert [(e["xid"], e["pci"]) for e in events] == [(119, "0000:9b:00")] * 5
    assert events[0]["time"] == "2025-02-23T16:24:18Z" and events[-1]["time"] == "2025-02-23T16:30:13Z"
    assert {classify(e["xid"], XID_FATAL_DEFAULT, XID_IGNORE_DEFAULT) for e in events} == {"fail"}


def test_gpud_dmesg_decode_iso_lines():
    now = calendar.timegm((2025, 1, 21, 6, 0, 0))
    events, stats = parse_xid_lines(captured_lines("dmesg_decode_iso_xid13_43_gpud.txt"), now, 24)
    assert stats["undated"] == 0
    assert [(e["xid"], e["pci"]) for e in events] == [(13, "0000:38:00")] * 3 + [(43, "0000:38:00")]
    assert events[0]["time"] == "2025-01-21T04:41:44Z"


@pytest.mark.parametrize("name,first", [
    ("journal_short_iso_utc_gpud.txt", (2025, 1, 17, 17, 10, 43)),
    ("journal_short_iso_plus0800_gpud.txt", (2025, 1, 2, 7, 20, 12)),
])
def test_gpud_journal_short_iso_lines_are_dated(name, first):
    lines = captured_lines(name)
    assert parse_timestamp(lines[0], calendar.timegm(first)) == calendar.timegm(first)
    assert all(parse_timestamp(line, calendar.timegm(first)) is not None for line in lines)


# -- ofed_info -s ------------------------------------------------------------------------------
def test_daocloud_mlnx_ofed_strings():
    with open(os.path.join(CAPTURES, "ofed_info", "mlnx_ofed_23.07_s_daocloud.txt")) as handle:
        output = handle.read()
    assert parse_ofed_info(output) == ("23.07-0.5.1.2", "mlnx_ofed")
    assert normalize_version(output) == "23.07-0.5.1.2"
    with open(os.path.join(CAPTURES, "ofed_info", "mlnx_ofed_23.10_full_head_daocloud.txt")) as handle:
        full = handle.read()
    assert parse_ofed_info(full) == ("23.10-1.1.9.0", "mlnx_ofed")
