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
    parse_xid_lines,
)
from conftest import FIXTURES

REAL = os.path.join(FIXTURES, "real")
PROCFS = os.path.join(REAL, "sysfs", "procfs-infiniband")


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


# -- sysfs: prometheus/procfs InfiniBand tree ----------------------------------------------------
def test_procfs_infiniband_tree_attribute_formats():
    facts = gather_mlx5_facts(SysfsReader(PROCFS), None)
    json.dumps(facts, allow_nan=False)
    devices = {d["name"]: d for d in facts["devices"]}
    assert sorted(devices) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    hfi = devices["hfi1_0"]["ports"][0]
    assert (hfi["port"], hfi["state"], hfi["state_id"], hfi["phys_state"], hfi["phys_state_id"]) == (
        1, "ACTIVE", 4, "LinkUp", 5)
    assert (hfi["rate_gbps"], hfi["width"], hfi["speed"], hfi["link_layer"]) == (100.0, "4X", "EDR", "InfiniBand")
    mlx4 = devices["mlx4_0"]
    assert [p["port"] for p in mlx4["ports"]] == [1, 2]
    # port 2's link_layer file holds "InfiniBand\n\n": still InfiniBand
    assert [(p["rate_gbps"], p["width"], p["speed"], p["link_layer"]) for p in mlx4["ports"]] == [
        (40.0, "4X", "QDR", "InfiniBand"), (40.0, "4X", "QDR", "InfiniBand")]
    assert (mlx4["hca_type"], mlx4["fw_ver"], mlx4["board_id"]) == ("MT4099", "2.31.5050", "SM_1141000001000")
    mlx5 = devices["mlx5_0"]
    assert mlx5["node_guid"] == "0a7f:bc12:45ef:d23b"  # file without trailing newline
    port = mlx5["ports"][0]
    assert (port["rate_gbps"], port["width"], port["speed"]) == (25.0, "1X", "EDR")
    assert (port["phys_state"], port["phys_state_id"]) == ("ACTIVE", 4)


def test_procfs_tree_validates_without_crashing():
    reader = SysfsReader(PROCFS)
    facts = gather_mlx5_facts(reader, None)
    results = validate_rdma(facts, reader, {"link_layer": "InfiniBand", "min_rate_gbps": 40, "check_counters": True})
    json.dumps(results.result(), allow_nan=False)
    by_target = {(c["id"], c["target"]): c["status"] for c in results}
    # the 25 Gb/s mlx5_0 port is below a 40 Gb/s minimum
    assert any(status == "fail" for (cid, target), status in by_target.items() if "mlx5_0" in target)


@pytest.mark.parametrize("rel,expected", [
    ("hfi1_0/ports/1/rate", (100.0, "4X", "EDR")),
    ("mlx4_0/ports/2/rate", (40.0, "4X", "QDR")),
    ("mlx5_0/ports/1/rate", (25.0, "1X", "EDR")),
])
def test_rate_files_of_the_procfs_tree(rel, expected):
    assert parse_rate(SysfsReader(PROCFS).read("sys/class/infiniband/" + rel)) == expected


def test_state_files_of_the_procfs_tree():
    reader = SysfsReader(PROCFS)
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


# -- ofed_info -s ------------------------------------------------------------------------------
def test_daocloud_mlnx_ofed_string():
    with open(os.path.join(REAL, "ofed_info", "daocloud-mlnx-ofed-23.07.txt")) as handle:
        output = handle.read()
    assert parse_ofed_info(output) == ("23.07-0.5.1.2", "mlnx_ofed")
    assert normalize_version(output) == "23.07-0.5.1.2"
