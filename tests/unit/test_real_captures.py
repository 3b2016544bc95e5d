"""The project's parsers and rules run over real captures from other projects.

Every file under ``tests/fixtures/real/captures/`` is named with its source in the README there.
Each test asserts values printed in the capture itself (the Xid code and PCI address of a line,
the average bus bandwidth of the summary, the state id of a port). Cases a parser still misreads
are ``xfail(strict=True)`` with the misreading in the reason, so they turn into failures the moment
the parser is fixed and the marker has to go.
"""

import calendar
import os
import tarfile

import pytest
from conftest import FIXTURES

from ansible_collections.gpufleet.cluster.plugins.filter.nccl import FilterModule as NcclFilters
from ansible_collections.gpufleet.cluster.plugins.filter.ofed import FilterModule as OfedFilters
from ansible_collections.gpufleet.cluster.plugins.module_utils.capture import capture
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.nccl import nccl_checks, parse_nccl_tests
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import normalize_version, parse_ofed_info
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.perftest import headline, parse_output
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import validate_rdma
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.xid import parse_timestamp, parse_xid_lines

CAPTURES = os.path.join(FIXTURES, "real", "captures")
# perftest prints MB/sec with MB = 2**20 bytes; 1 MB/sec = 8 * 2**20 / 1e9 Gb/s.
MB_PER_SEC_IN_GBPS = 8.0 * 1048576 / 1e9


def text(*parts):
    with open(os.path.join(CAPTURES, *parts)) as handle:
        return handle.read()


def lines(*parts):
    return text(*parts).splitlines()


def epoch(*fields):
    return float(calendar.timegm(fields + (0, 0, 0)))




def test_every_capture_is_named_in_the_readme():
    readme = text("README.md")
    names = []
    for topic in ("xid", "nccl", "perftest", "ofed_info"):
        names.extend(os.listdir(os.path.join(CAPTURES, topic)))
    names.extend(os.listdir(os.path.join(CAPTURES, "sysfs_ib")))
    assert names
    missing = [name for name in names if "`%s" % name not in readme]
    assert missing == []


# -- sysfs_ib: mlx5_facts and rdma_validate with root at another project's sysfs tree ------------
def facts(tree):
    reader = SysfsReader(os.path.join(CAPTURES, "sysfs_ib", tree))
    return reader, gather_mlx5_facts(reader, None)


def ports_by_target(gathered):
    return dict(("%s/%s" % (device["name"], port["port"]), port)
                for device in gathered["devices"] for port in device["ports"])


def test_procfs_tree_ports():
    _reader, gathered = facts("procfs")
    assert sorted(d["name"] for d in gathered["devices"]) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    ports = ports_by_target(gathered)
    assert sorted(ports) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    observed = dict((target, (p["state_id"], p["state"], p["phys_state_id"], p["phys_state"],
                              p["rate_gbps"], p["width"], p["speed"], p["link_layer"]))
                    for target, p in ports.items())
    assert observed == {
        "hfi1_0/1": (4, "ACTIVE", 5, "LinkUp", 100.0, "4X", "EDR", None),
        "mlx4_0/1": (4, "ACTIVE", 5, "LinkUp", 40.0, "4X", "QDR", None),
        "mlx4_0/2": (4, "ACTIVE", 5, "LinkUp", 40.0, "4X", "QDR", None),
        # procfs' fixture has "4: ACTIVE" in phys_state of mlx5_0: read as printed.
        "mlx5_0/1": (4, "ACTIVE", 4, "ACTIVE", 25.0, "1X", "EDR", None),
    }


def test_procfs_tree_device_attributes():
    _reader, gathered = facts("procfs")
    devices = dict((d["name"], d) for d in gathered["devices"])
    assert (devices["mlx4_0"]["hca_type"], devices["mlx4_0"]["board_id"], devices["mlx4_0"]["fw_ver"]) == (
        "MT4099", "SM_1141000001000", "2.31.5050")
    assert (devices["mlx5_0"]["hca_type"], devices["mlx5_0"]["fw_ver"]) == ("MT4118", "14.28.2006")
    assert devices["hfi1_0"]["board_id"] == "HPE 100Gb 1-port OP101 QSFP28 x16 PCIe Gen3 with Intel Omni-Path Adapter"
    assert devices["hfi1_0"]["hca_type"] is None


def test_procfs_tree_rdma_validate_port_rules():
    reader, gathered = facts("procfs")
    results = validate_rdma(gathered, reader, {"link_layer": "any", "min_rate_gbps": 40,
                                               "check_counters": True})
    by_check = {}
    for check in results:
        by_check.setdefault(check["id"], {})[check["target"]] = check["status"]
    assert by_check["rdma.port.state"] == {"hfi1_0/1": "pass", "mlx4_0/1": "pass", "mlx4_0/2": "pass",
                                           "mlx5_0/1": "pass"}
    assert by_check["rdma.port.phys_state"]["mlx5_0/1"] == "fail"
    assert by_check["rdma.port.rate"]["hfi1_0/1"] == "pass"
    assert by_check["rdma.port.rate"]["mlx4_0/2"] == "pass"
    # symbol_error and link_downed are 0 on every port of the capture.
    assert set(by_check["rdma.counters"].values()) == {"pass"}


def test_procfs_tree_rate_below_minimum_fails():
    reader, gathered = facts("procfs")
    results = validate_rdma(gathered, reader, {"link_layer": "any", "min_rate_gbps": 56})
    rates = dict((c["target"], (c["status"], c["observed"])) for c in results if c["id"] == "rdma.port.rate")
    assert rates["mlx4_0/1"] == ("fail", 40.0)
    assert rates["hfi1_0/1"] == ("pass", 100.0)


def test_node_exporter_tree_ports():
    _reader, gathered = facts("node_exporter")
    ports = ports_by_target(gathered)
    assert sorted(ports) == ["mlx4_0/1", "mlx4_0/2"]
    for port in ports.values():
        assert (port["state_id"], port["state"], port["phys_state_id"], port["phys_state"]) == (
            4, "ACTIVE", 5, "LinkUp")
        assert (port["rate_gbps"], port["width"], port["speed"], port["link_layer"]) == (
            40.0, "4X", "QDR", "InfiniBand")
        assert port["roce_v2_gid_index"] is None


def test_node_exporter_saturated_counter_reads_as_printed():
    reader, _gathered = facts("node_exporter")
    base = "sys/class/infiniband/mlx4_0/ports/1/counters/"
    assert reader.read_int(base + "port_xmit_wait") == 4294967295
    assert reader.read_int(base + "port_xmit_discards") == 5


def test_gpud_h100_values_without_trailing_newline():
    _reader, gathered = facts("gpud_h100")
    ports = ports_by_target(gathered)
    assert (ports["mlx5_0/1"]["state_id"], ports["mlx5_0/1"]["state"]) == (4, "ACTIVE")
    assert (ports["mlx5_0/1"]["rate_gbps"], ports["mlx5_0/1"]["width"], ports["mlx5_0/1"]["speed"]) == (
        400.0, "4X", "NDR")
    assert ports["mlx5_bond_0/1"]["link_layer"] == "Ethernet"


def test_gpud_h100_rate_rule():
    reader, gathered = facts("gpud_h100")
    results = validate_rdma(gathered, reader, {"link_layer": "any", "min_rate_gbps": 400})
    states = dict((c["target"], c["status"]) for c in results if c["id"] == "rdma.port.state")
    assert states["mlx5_0/1"] == "pass"


# -- xid: kernel log lines ----------------------------------------------------------------------
XID119 = ("xid", "dmesg_ctime_xid119_gpud.txt")
DECODE_ISO = ("xid", "dmesg_decode_iso_xid13_43_gpud.txt")


def test_dmesg_ctime_xid_codes_and_pci():
    events, stats = parse_xid_lines(lines(*XID119), epoch(2025, 2, 23, 17, 0, 0), 24)
    assert [(e["xid"], e["pci"]) for e in events] == [(119, "0000:9b:00")] * 5
    assert stats["xid_lines"] == 5
    assert events[0]["detail"].startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")


def test_dmesg_ctime_dates(utc):
    events, stats = parse_xid_lines(lines(*XID119), epoch(2025, 2, 23, 17, 0, 0), 24)
    assert [e["time"] for e in events] == ["2025-02-23T16:24:18Z", "2025-02-23T16:24:24Z",
                                           "2025-02-23T16:24:30Z", "2025-02-23T16:27:12Z",
                                           "2025-02-23T16:30:13Z"]
    assert stats["undated"] == 0


def test_dmesg_ctime_old_lines_fall_outside_the_window(utc):
    events, stats = parse_xid_lines(lines(*XID119), epoch(2025, 5, 23, 17, 0, 0), 24)
    assert events == []
    assert stats["outside_window"] == 5


def test_dmesg_decode_iso_xid_codes_and_pci():
    events, stats = parse_xid_lines(lines(*DECODE_ISO), epoch(2025, 1, 21, 5, 0, 0), 24)
    assert [(e["xid"], e["pci"]) for e in events] == [(13, "0000:38:00")] * 3 + [(43, "0000:38:00")]
    assert stats["xid_lines"] == 4


def test_dmesg_decode_iso_dates():
    events, stats = parse_xid_lines(lines(*DECODE_ISO), epoch(2025, 1, 21, 5, 0, 0), 24)
    assert [e["time"] for e in events] == ["2025-01-21T04:41:44Z"] * 4
    assert stats["undated"] == 0


def test_journal_short_iso_timestamps():
    utc_lines = lines("xid", "journal_short_iso_utc_gpud.txt")
    assert parse_timestamp(utc_lines[0], 0) == epoch(2025, 1, 17, 17, 10, 43)
    assert parse_timestamp(utc_lines[-1], 0) == epoch(2025, 1, 17, 17, 39, 30)
    plus8 = lines("xid", "journal_short_iso_plus0800_gpud.txt")
    assert parse_timestamp(plus8[0], 0) == epoch(2025, 1, 2, 7, 20, 12)


def test_node_capture_replaces_the_board_serial_of_a_real_dmesg(utc, tmp_path):
    """node_capture over a GPU node whose kernel log is gpud's real dmesg: the driver's UUID and
    ``NVRM: GPU Board Serial Number: 1650124014249`` lines leave pseudonymised (NVML not recorded:
    the log alone names the serial), and the Xid lines still read as the same five events."""
    root = tmp_path / "node"
    function = root / "sys" / "bus" / "pci" / "devices" / "0000:9b:00.0"
    function.mkdir(parents=True)
    for attr, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2330")):
        (function / attr).write_text(value + "\n")
    (root / "var" / "log").mkdir(parents=True)
    (root / "var" / "log" / "kern.log").write_text(text(*XID119))
    now = epoch(2025, 2, 23, 17, 0, 0)
    result = capture.capture_node({"root": str(root), "nvml": False}, None, now=now)
    dest = str(tmp_path / "capture.tar.gz")
    capture.write_archive(result, dest)
    with tarfile.open(dest) as tar:
        tar.extractall(str(tmp_path / "unpacked"), filter="data")
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert b"1650124014249" not in blob and b"509665ad" not in blob
    log = (tmp_path / "unpacked" / capture.ARCHIVE_TOP / "root" / "var" / "log" / "kern.log").read_text()
    assert "NVRM: GPU Board Serial Number: serial-1\n" in log
    assert "NVRM: GPU at PCI:0000:9b:00: GPU-00000000-0000-4000-8000-000000000001\n" in log
    events, stats = parse_xid_lines(log.splitlines(), now, 24)
    assert [(e["xid"], e["pci"]) for e in events] == [(119, "0000:9b:00")] * 5 and stats["xid_lines"] == 5


def test_journal_lines_without_xid_give_no_event():
    for name in ("journal_short_iso_utc_gpud.txt", "journal_short_iso_plus0800_gpud.txt"):
        events, stats = parse_xid_lines(lines("xid", name), epoch(2025, 1, 18, 0, 0, 0), 24 * 30)
        assert (events, stats["xid_lines"]) == ([], 0)


# -- nccl: nccl-tests outputs ---------------------------------------------------------------------
A3MEGA = ("nccl", "all_reduce_2nodes_h100_a3mega.txt")
SB_ALLREDUCE = ("nccl", "all_reduce_old_redop_no_root_na_superbench.txt")
SB_BROADCAST = ("nccl", "broadcast_old_root_no_redop_superbench.txt")
SB_ALLGATHER = ("nccl", "all_gather_old_no_redop_no_root_superbench.txt")
SIZES = [8, 1024, 1048576, 134217728, 4294967296, 8589934592]
OLD_SIZES = [0, 4, 1048576, 134217728, 4294967296, 8589934592]


def test_current_layout_summary_rows_and_ranks():
    parsed = parse_nccl_tests(text(*A3MEGA))
    assert parsed["avg_busbw_gbps"] == 70.742
    assert parsed["out_of_bounds"] == 0
    assert [r["size"] for r in parsed["rows"]] == SIZES
    last = parsed["rows"][-1]
    assert (last["type"], last["redop"], last["root"]) == ("float", "sum", "-1")
    assert (last["out_of_place"]["busbw_gbps"], last["in_place"]["busbw_gbps"]) == (338.82, 337.35)
    assert (last["out_of_place"]["time_us"], last["out_of_place"]["algbw_gbps"]) == (47535.0, 180.71)
    assert parsed["peak_busbw_gbps"] == 338.82
    assert parsed["wrong"] == 0
    assert len(parsed["ranks"]) == 16
    assert parsed["ranks"][8] == {"rank": 8, "host": "ztan-mig-gq73", "device": 0, "bus_id": "0000:04:00",
                                  "name": "NVIDIA H100 80GB HBM3"}


def test_current_layout_checks_against_thresholds():
    parsed = parse_nccl_tests(text(*A3MEGA))
    passing = dict((c["id"], c["status"]) for c in nccl_checks(parsed, min_busbw_gbps=70))
    assert passing == {"k8s.nccl.busbw": "pass", "k8s.nccl.wrong": "pass"}
    failing = dict((c["id"], (c["status"], c.get("observed"))) for c in nccl_checks(parsed, min_busbw_gbps=71))
    assert failing["k8s.nccl.busbw"] == ("fail", 70.742)


def test_filter_plugin_reads_the_same_capture():
    filters = NcclFilters().filters()
    parsed = filters["nccl_tests_parse"](text(*A3MEGA))
    assert parsed["avg_busbw_gbps"] == 70.742
    checks = filters["nccl_tests_checks"](parsed, 60)
    assert [c["status"] for c in checks if c["id"] == "k8s.nccl.busbw"] == ["pass"]


def test_old_all_reduce_layout():
    parsed = parse_nccl_tests(text(*SB_ALLREDUCE))
    assert parsed["avg_busbw_gbps"] == 68.4048
    assert [r["size"] for r in parsed["rows"]] == OLD_SIZES
    last = parsed["rows"][-1]
    assert (last["redop"], last["root"]) == ("sum", None)
    assert (last["out_of_place"]["busbw_gbps"], last["in_place"]["busbw_gbps"]) == (235.26, 235.03)
    # -c 0 (validation: 0): the error column says N/A, so nothing was checked.
    assert last["out_of_place"]["wrong"] is None
    assert parsed["wrong"] is None
    assert [(r["rank"], r["host"], r["bus_id"]) for r in parsed["ranks"]][:2] == [
        (0, "localhost", "0x00"), (1, "localhost", "0x00")]


def test_old_all_reduce_unchecked_run_is_not_a_pass():
    parsed = parse_nccl_tests(text(*SB_ALLREDUCE))
    wrong = [c for c in nccl_checks(parsed, min_busbw_gbps=60) if c["id"] == "k8s.nccl.wrong"]
    assert wrong[0]["status"] == "skip"


def test_old_broadcast_layout_rows_and_summary():
    parsed = parse_nccl_tests(text(*SB_BROADCAST))
    assert parsed["avg_busbw_gbps"] == 64.8653
    assert [r["size"] for r in parsed["rows"]] == OLD_SIZES
    assert [r["out_of_place"]["busbw_gbps"] for r in parsed["rows"]] == [0.0, 0.0, 13.79, 199.67, 232.33, 232.81]
    assert parsed["peak_busbw_gbps"] == 234.70


def test_old_broadcast_layout_root_column():
    parsed = parse_nccl_tests(text(*SB_BROADCAST))
    assert [(r["redop"], r["root"]) for r in parsed["rows"]] == [(None, "0")] * 6


def test_old_all_gather_layout_summary():
    parsed = parse_nccl_tests(text(*SB_ALLGATHER))
    assert parsed["avg_busbw_gbps"] == 58.2651
    assert parsed["out_of_bounds"] == 0
    assert len(parsed["ranks"]) == 8


def test_old_all_gather_layout_rows():
    parsed = parse_nccl_tests(text(*SB_ALLGATHER))
    assert [r["size"] for r in parsed["rows"]] == [0, 32, 1048576, 134217728, 4294967296, 8589934592]
    assert (parsed["rows"][-1]["out_of_place"]["busbw_gbps"], parsed["rows"][-1]["in_place"]["busbw_gbps"]) == (
        223.39, 230.07)
    assert parsed["peak_busbw_gbps"] == 230.07


# -- perftest: ib_write_bw reports ----------------------------------------------------------------
def test_loopback_all_sizes_interleaved_report():
    parsed = parse_output(text("perftest", "ib_write_bw_loopback_all_sizes_mbsec_superbench.txt"))
    assert parsed["unit"] == "MB/sec"
    assert [r["msg_size"] for r in parsed["rows"]] == [2, 4, 1024, 4096, 65536, 4194304, 8388608]
    assert all(r["iterations"] == 2000 for r in parsed["rows"])
    row_4k = parsed["rows"][3]
    assert row_4k["bw_peak_gbps"] == pytest.approx(10034.02 * MB_PER_SEC_IN_GBPS, abs=1e-6)
    assert row_4k["bw_average_gbps"] == pytest.approx(9948.41 * MB_PER_SEC_IN_GBPS, abs=1e-6)
    assert row_4k["msg_rate_mpps"] == 2.546793
    best = headline(parsed["rows"])
    assert best["msg_size"] == 8388608
    assert best["bw_average_gbps"] == pytest.approx(23240.68 * MB_PER_SEC_IN_GBPS, abs=1e-6)


def test_loopback_two_single_size_reports():
    parsed = parse_output(text("perftest", "ib_write_bw_loopback_8M_mbsec_superbench.txt"))
    assert parsed["unit"] == "MB/sec"
    assert [(r["msg_size"], r["iterations"], r["msg_rate_mpps"]) for r in parsed["rows"]] == [
        (8388608, 20000, 0.003007)] * 2
    assert headline(parsed["rows"])["bw_average_gbps"] == pytest.approx(24056.72 * MB_PER_SEC_IN_GBPS, abs=1e-6)
    assert parsed["warnings"] == []


# -- ofed_info ------------------------------------------------------------------------------------
def test_ofed_info_s_mlnx():
    assert parse_ofed_info(text("ofed_info", "mlnx_ofed_23.07_s_daocloud.txt")) == ("23.07-0.5.1.2", "mlnx_ofed")


def test_ofed_info_full_output_first_line():
    output = text("ofed_info", "mlnx_ofed_23.10_full_head_daocloud.txt")
    assert parse_ofed_info(output) == ("23.10-1.1.9.0", "mlnx_ofed")
    assert normalize_version(output.splitlines()[0]) == "23.10-1.1.9.0"


def test_ofed_filter_on_capture():
    filters = OfedFilters().filters()
    assert filters["ofed_version"](text("ofed_info", "mlnx_ofed_23.07_s_daocloud.txt").strip()) == "23.07-0.5.1.2"
