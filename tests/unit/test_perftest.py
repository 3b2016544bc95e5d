"""perftest argv, sysfs GID lookup, output parser and the rdma.bandwidth check."""

import os

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from runners import ScriptedRunner

from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import perftest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import CommandResult
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

PERFTEST = os.path.join(FIXTURES, "perftest")
EXE = "/usr/bin/ib_write_bw"
MIB = 8 * 1048576 / 1e9


def fixture(name):
    with open(os.path.join(PERFTEST, name)) as handle:
        return handle.read()


def params(**overrides):
    base = {"mode": "client", "server": "10.20.1.12", "device": None, "ib_port": None, "gid_index": None,
            "tcp_port": None, "size": None, "all_sizes": False, "duration": None, "qps": None,
            "use_cuda": None, "extra_args": [], "min_gbps": None, "executable": "ib_write_bw",
            "timeout": 120, "root": "/", "fail_on": "fail"}
    base.update(overrides)
    return base


def write(root, rel, text):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text + "\n")


def roce_port(root, device="mlx5_2", port=1):
    """A ConnectX RoCE port as sysfs shows it: v1/v2 link-local GIDs first, then the IPv4 pair."""
    base = "sys/class/infiniband/%s/ports/%d" % (device, port)
    write(root, base + "/link_layer", "Ethernet")
    entries = [
        ("IB/RoCE v1", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d2"),
        ("RoCE v2", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d2"),
        ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a14:010b"),
        ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a14:010b"),
    ]
    for index, (gid_type, gid) in enumerate(entries):
        write(root, "%s/gid_attrs/types/%d" % (base, index), gid_type)
        write(root, "%s/gids/%d" % (base, index), gid)
    # unpopulated slot: the kernel answers EINVAL on types/<i>; a directory reads as unreadable too
    os.makedirs(os.path.join(str(root), base, "gid_attrs/types/4"))
    write(root, base + "/gids/4", "0000:0000:0000:0000:0000:0000:0000:0000")


def ib_port(root, device="mlx5_0", port=1):
    base = "sys/class/infiniband/%s/ports/%d" % (device, port)
    write(root, base + "/link_layer", "InfiniBand")
    write(root, base + "/gid_attrs/types/0", "IB/RoCE v1")
    write(root, base + "/gids/0", "fe80:0000:0000:0000:946d:ae03:0050:0778")


# ---------------------------------------------------------------- parser


def test_parse_24x_gbits():
    parsed = perftest.parse_output(fixture("ib_write_bw_24.07_ib_gbits_client.txt"))
    assert parsed["unit"] == "Gb/sec"
    assert parsed["rows"] == [{"msg_size": 65536, "iterations": 5000, "bw_peak_gbps": 392.35,
                               "bw_average_gbps": 392.21, "msg_rate_mpps": 0.748081}]
    assert parsed["warnings"] == []


def test_parse_23x_mib_skips_cpu_frequency_warning_inside_table():
    parsed = perftest.parse_output(fixture("ib_write_bw_23.10_roce_mib_client.txt"))
    assert parsed["unit"] == "MiB/sec"
    (row,) = parsed["rows"]
    assert row["bw_average_gbps"] == pytest.approx(23268.33 * MIB, abs=1e-5)
    assert row["bw_average_gbps"] == pytest.approx(195.19, abs=0.01)
    assert row["bw_peak_gbps"] == pytest.approx(23273.91 * MIB, abs=1e-5)
    assert row["msg_rate_mpps"] == 0.372293
    assert parsed["warnings"][0].startswith("Conflicting CPU frequency values detected")


def test_parse_3x_mb_per_sec_is_mebibytes():
    parsed = perftest.parse_output(fixture("ib_write_bw_3.4_mb_client.txt"))
    assert parsed["unit"] == "MB/sec"
    (row,) = parsed["rows"]
    # perftest divides by 0x100000 for this column: 6033.89 "MB/s" on FDR is 50.6 Gb/s
    assert row["bw_average_gbps"] == pytest.approx(6033.89 * 8 * 1048576 / 1e9, abs=1e-5)
    assert row["bw_average_gbps"] == pytest.approx(50.62, abs=0.01)
    assert len(parsed["warnings"]) == 2


def test_parse_duration_mode_peak_zero():
    parsed = perftest.parse_output(fixture("ib_write_bw_4.5_duration_gbits_client.txt"))
    (row,) = parsed["rows"]
    assert row["bw_peak_gbps"] == 0.0
    assert row["bw_average_gbps"] == 98.03
    assert row["iterations"] == 1869770
    assert "WARNING: BW peak won't be measured in this run." in parsed["warnings"]


def test_parse_all_sizes_sweep_headline_is_largest_message():
    parsed = perftest.parse_output(fixture("ib_write_bw_4.5_all_sizes_gbits_client.txt"))
    sizes = [row["msg_size"] for row in parsed["rows"]]
    assert sizes == [2 ** e for e in range(1, 24)]
    best = perftest.headline(parsed["rows"])
    assert best["msg_size"] == 8388608
    assert best["bw_average_gbps"] == 197.49
    assert parsed["rows"][0]["bw_average_gbps"] == 0.15


def test_parse_cuda_report_ignores_cuda_lines():
    parsed = perftest.parse_output(fixture("ib_write_bw_24.07_cuda_client.txt"))
    assert [(r["msg_size"], r["bw_average_gbps"]) for r in parsed["rows"]] == [(262144, 371.62)]


def test_parse_server_side_report():
    parsed = perftest.parse_output(fixture("ib_write_bw_24.07_roce_server.txt"))
    assert parsed["rows"][0]["bw_average_gbps"] == 195.46


def test_parse_legacy_without_msgrate_column_and_repeated_header():
    text = (" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]\n"
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]\n"
            " 65536      5000           3249.64            3249.38\n"
            "------------------------------------------------------------------\n")
    (row,) = perftest.parse_output(text)["rows"]
    assert row["msg_rate_mpps"] is None
    assert row["bw_average_gbps"] == pytest.approx(3249.38 * MIB, abs=1e-5)


def test_parse_qos_layout_shifts_columns():
    text = (" #bytes    #sl      #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            " 65536    3           5000           96.12            95.87                  0.182858\n")
    (row,) = perftest.parse_output(text)["rows"]
    assert (row["msg_size"], row["iterations"], row["bw_average_gbps"]) == (65536, 5000, 95.87)


def test_parse_skips_warning_lines_and_stops_at_rule():
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            "Warning: measured bandwidth may be inaccurate\n"
            " 65536      5000             92.42              92.40              0.176230\n"
            "---------------------------------------------------------------------------------------\n"
            " 1 2 3 4 5\n")
    parsed = perftest.parse_output(text)
    assert len(parsed["rows"]) == 1
    assert parsed["warnings"] == ["Warning: measured bandwidth may be inaccurate"]


def test_parse_latency_report_and_garbage_give_no_rows():
    latency = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n"
               " 2       1000          1.84           12.20        1.90     \t       1.97\n")
    assert perftest.parse_output(latency)["rows"] == []
    assert perftest.parse_output("")["rows"] == []
    assert perftest.parse_output(None)["unit"] is None


def test_unit_conversion_table():
    assert perftest.to_gbps(100.0, "Gb/sec") == 100.0
    assert perftest.to_gbps(1000.0, "MiB/sec") == pytest.approx(8.388608)
    assert perftest.to_gbps(1000.0, "MB/sec") == pytest.approx(8.388608)
    assert perftest.to_gbps(1000.0, "furlongs") is None


# ---------------------------------------------------------------- sysfs GID


def test_roce_v2_ipv4_gid_index(tmp_path):
    roce_port(tmp_path)
    reader = SysfsReader(str(tmp_path))
    assert perftest.roce_v2_ipv4_gid_index(reader, "mlx5_2", 1) == 3


def test_gid_index_none_for_infiniband_and_missing_ports(tmp_path):
    ib_port(tmp_path)
    reader = SysfsReader(str(tmp_path))
    assert perftest.roce_v2_ipv4_gid_index(reader, "mlx5_0", 1) is None
    assert perftest.roce_v2_ipv4_gid_index(reader, "mlx5_9", 1) is None


def test_gid_index_none_without_ipv4_roce_v2(tmp_path):
    base = "sys/class/infiniband/mlx5_3/ports/1"
    write(tmp_path, base + "/link_layer", "Ethernet")
    write(tmp_path, base + "/gid_attrs/types/0", "IB/RoCE v1")
    write(tmp_path, base + "/gids/0", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d3")
    write(tmp_path, base + "/gid_attrs/types/1", "RoCE v2")
    write(tmp_path, base + "/gids/1", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d3")
    reader = SysfsReader(str(tmp_path))
    index, link_layer, note = perftest.default_gid_index(reader, params(device="mlx5_3"))
    assert (index, link_layer) == (None, "Ethernet")
    assert "no RoCE v2 IPv4 GID on mlx5_3/1" in note


def test_explicit_gid_index_wins(tmp_path):
    roce_port(tmp_path)
    reader = SysfsReader(str(tmp_path))
    assert perftest.default_gid_index(reader, params(device="mlx5_2", gid_index=5))[0] == 5


# ---------------------------------------------------------------- argv and options


def test_build_command_client_all_options():
    argv = perftest.build_command(EXE, params(device="mlx5_2", ib_port=1, tcp_port=18600, size=1048576,
                                              duration=10, qps=4, use_cuda=3, extra_args=["-F"]), 3)
    assert argv == [EXE, "-d", "mlx5_2", "-i", "1", "-x", "3", "-p", "18600", "-s", "1048576", "-D", "10",
                    "-q", "4", "--use_cuda=3", "--report_gbits", "-F", "10.20.1.12"]


def test_build_command_server_and_sweep():
    argv = perftest.build_command(EXE, params(mode="server", server=None, all_sizes=True))
    assert argv == [EXE, "-a", "--report_gbits"]


@pytest.mark.parametrize("overrides, option", [
    ({"mode": "client", "server": None}, "option server is required"),
    ({"mode": "server"}, "option server is only used"),
    ({"mode": "both"}, "option mode"),
    ({"size": 0}, "option size"),
    ({"qps": -1}, "option qps"),
    ({"gid_index": -1}, "option gid_index"),
    ({"use_cuda": -2}, "option use_cuda"),
    ({"tcp_port": 70000}, "option tcp_port"),
    ({"all_sizes": True, "size": 65536}, "all_sizes and size"),
    ({"all_sizes": True, "duration": 5}, "option all_sizes cannot be combined with duration"),
    ({"duration": 30, "timeout": 30}, "option timeout (30 s) must be longer than option duration"),
    ({"executable": ""}, "option executable"),
])
def test_validate_params_names_the_option(overrides, option):
    error, checks, _extra = perftest.run_bandwidth(params(**overrides), ScriptedRunner(), SysfsReader("/"))
    assert option in error
    assert checks is None


# ---------------------------------------------------------------- run and check


def runner_for(out="", rc=0, err=""):
    return ScriptedRunner(script={EXE: (rc, out, err)}, paths={"ib_write_bw": EXE})


def test_run_passes_threshold_with_roce_gid_from_sysfs(tmp_path):
    roce_port(tmp_path)
    runner = runner_for(fixture("ib_write_bw_23.10_roce_mib_client.txt"))
    error, checks, extra = perftest.run_bandwidth(params(device="mlx5_2", min_gbps=180), runner,
                                                  SysfsReader(str(tmp_path)))
    assert error is None
    assert runner.calls == [[EXE, "-d", "mlx5_2", "-x", "3", "--report_gbits", "10.20.1.12"]]
    assert extra["cmd"] == runner.calls[0]
    assert extra["gid_index"] == 3 and extra["link_layer"] == "Ethernet"
    assert extra["bw_average_gbps"] == pytest.approx(195.19, abs=0.01)
    assert extra["msg_size"] == 65536 and extra["unit"] == "MiB/sec"
    (check,) = checks.as_list()
    assert (check["id"], check["target"], check["status"]) == ("rdma.bandwidth", "mlx5_2/1", "pass")
    assert check["expected"] == 180
    assert extra["perftest_warnings"][0].startswith("Conflicting CPU frequency")


def test_run_fails_below_threshold(tmp_path):
    ib_port(tmp_path)
    runner = runner_for(fixture("ib_write_bw_24.07_ib_gbits_client.txt"))
    _error, checks, extra = perftest.run_bandwidth(params(device="mlx5_0", ib_port=1, min_gbps=395.0), runner,
                                                   SysfsReader(str(tmp_path)))
    assert "-x" not in runner.calls[0]
    (check,) = checks.as_list()
    assert check["status"] == "fail"
    assert check["observed"] == 392.21
    assert "392.21 Gb/s average at 65536 B messages < min_gbps 395.0" == check["message"]
    assert extra["bw_peak_gbps"] == 392.35


def test_run_without_threshold_passes_with_message():
    _error, checks, extra = perftest.run_bandwidth(
        params(), runner_for(fixture("ib_write_bw_24.07_cuda_client.txt")), SysfsReader("/nonexistent"))
    (check,) = checks.as_list()
    assert check["status"] == "pass" and "no min_gbps threshold set" in check["message"]
    assert check["target"] == "node"
    assert extra["bw_average_gbps"] == 371.62 and extra["msg_size"] == 262144


def test_run_duration_mode_reports_peak_as_null():
    runner = runner_for(fixture("ib_write_bw_4.5_duration_gbits_client.txt"))
    _error, checks, extra = perftest.run_bandwidth(params(duration=10), runner, SysfsReader("/"))
    assert extra["bw_peak_gbps"] is None
    assert extra["rows"][0]["bw_peak_gbps"] == 0.0
    assert extra["bw_average_gbps"] == 98.03
    assert checks.as_list()[0]["status"] == "pass"


def test_run_sweep_reports_every_row():
    runner = runner_for(fixture("ib_write_bw_4.5_all_sizes_gbits_client.txt"))
    sweep = params(all_sizes=True, min_gbps=190)
    _error, checks, extra = perftest.run_bandwidth(sweep, runner, SysfsReader("/"))
    assert len(extra["rows"]) == 23
    assert extra["msg_size"] == 8388608 and extra["bw_average_gbps"] == 197.49
    assert checks.as_list()[0]["status"] == "pass"


def test_run_failure_reports_perftest_error():
    runner = runner_for("", 1, fixture("ib_write_bw_connect_failed.stderr.txt"))
    _error, checks, extra = perftest.run_bandwidth(params(min_gbps=100), runner, SysfsReader("/"))
    (check,) = checks.as_list()
    assert check["status"] == "fail"
    assert "ib_write_bw exited with rc=1" in check["message"]
    assert "Couldn't connect to 10.20.1.12:18515" in check["message"]
    assert extra["perftest_rc"] == 1 and extra["bw_average_gbps"] is None


def test_run_cuda_unsupported_hint():
    runner = runner_for("", 1, "ib_write_bw: unrecognized option '--use_cuda=0'\n")
    _error, checks, _extra = perftest.run_bandwidth(params(use_cuda=0), runner, SysfsReader("/"))
    assert "built with CUDA support" in checks.as_list()[0]["message"]


def test_run_timeout_fails_with_clear_message():
    timed_out = CommandResult(-9, "", "", timed_out=True)
    runner = ScriptedRunner(script={EXE: timed_out}, paths={"ib_write_bw": EXE})
    _error, checks, extra = perftest.run_bandwidth(params(mode="server", server=None, timeout=15), runner,
                                                   SysfsReader("/"))
    (check,) = checks.as_list()
    assert check["status"] == "fail"
    assert "did not finish within timeout=15s" in check["message"]
    assert "was the client started" in check["message"]
    assert extra["timed_out"] is True


def test_run_output_without_table_fails_on_client_and_skips_on_server():
    banner = "************************************\n* Waiting for client to connect... *\n"
    _error, checks, _extra = perftest.run_bandwidth(params(), runner_for(banner), SysfsReader("/"))
    assert checks.as_list()[0]["status"] == "fail"
    _error, checks, _extra = perftest.run_bandwidth(params(mode="server", server=None), runner_for(banner),
                                                    SysfsReader("/"))
    assert checks.as_list()[0]["status"] == "skip"


def test_missing_executable_names_the_option():
    error, checks, _extra = perftest.run_bandwidth(params(), ScriptedRunner(), SysfsReader("/"))
    assert error.startswith("option executable: ib_write_bw not found on PATH")
    assert checks is None
    error, _checks, _extra = perftest.run_bandwidth(params(executable="/nonexistent/ib_write_bw"),
                                                    ScriptedRunner(), SysfsReader("/"))
    assert error == "option executable: /nonexistent/ib_write_bw not found"


def test_check_mode_plans_without_running(tmp_path):
    roce_port(tmp_path)
    runner = runner_for("should not run")
    error, checks, extra = perftest.run_bandwidth(params(device="mlx5_2", qps=2), runner,
                                                  SysfsReader(str(tmp_path)), check_mode=True)
    assert error is None
    assert runner.calls == []
    assert extra["cmd"] == [EXE, "-d", "mlx5_2", "-x", "3", "-q", "2", "--report_gbits", "10.20.1.12"]
    assert checks.as_list()[0]["status"] == "skip"


def test_link_names_the_check_so_every_pair_keeps_its_own():
    runner = runner_for(fixture("ib_write_bw_24.07_ib_gbits_client.txt"))
    _error, checks, _extra = perftest.run_bandwidth(params(device="mlx5_0", link="n1->n2/mlx5_0", min_gbps=395),
                                                    runner, SysfsReader("/"))
    (check,) = checks.as_list()
    assert (check["id"], check["target"], check["status"]) == ("rdma.fabric.link", "n1->n2/mlx5_0", "fail")
    _error, checks, _extra = perftest.run_bandwidth(params(link="n1->n2"), runner_for("x"), SysfsReader("/"),
                                                    check_mode=True)
    assert checks.as_list()[0]["id"] == "rdma.fabric.link"


@pytest.mark.parametrize("overrides, message", [
    ({"min_gbps": float("nan")}, "option min_gbps must be a finite number"),
    ({"min_gbps": float("inf")}, "option min_gbps must be a finite number"),
    ({"link": " "}, "option link must not be empty"),
])
def test_threshold_and_link_option_errors(overrides, message):
    error, checks, _extra = perftest.run_bandwidth(params(**overrides), ScriptedRunner(), SysfsReader("/"))
    assert message in error and checks is None


# ------------------------------------------ bidirectional, dual-port (rebuilt from perftest's format strings)


def test_parse_bidirectional_report_both_headline_is_the_sum():
    parsed = perftest.parse_output(fixture("ib_write_bw_bidirectional_report_both_gbits_client.txt"))
    assert parsed["bidirectional"] is True and parsed["dual_port"] is False
    assert [(r["bw_average_gbps"], r.get("section")) for r in parsed["rows"]] == [
        (783.85, None), (392.21, "local"), (391.64, "remote")]
    best = perftest.headline(parsed["rows"])
    assert best["bw_average_gbps"] == 783.85 and "section" not in best


def test_run_bidirectional_says_both_directions_are_summed():
    runner = runner_for(fixture("ib_write_bw_bidirectional_report_both_gbits_client.txt"))
    _error, checks, extra = perftest.run_bandwidth(params(min_gbps=700), runner, SysfsReader("/"))
    (check,) = checks.as_list()
    assert check["status"] == "pass" and check["observed"] == 783.85
    assert "(bidirectional: both directions summed)" in check["message"]
    assert extra["bidirectional"] is True and len(extra["rows"]) == 3


def test_parse_bidirectional_duration_peak_not_measured():
    parsed = perftest.parse_output(fixture("ib_write_bw_bidirectional_duration_gbits_client.txt"))
    (row,) = parsed["rows"]
    assert (row["bw_peak_gbps"], row["bw_average_gbps"], row["iterations"]) == (0.0, 196.06, 1869770)
    assert parsed["bidirectional"] is True
    assert "WARNING: BW peak won't be measured in this run." in parsed["warnings"]


def test_parse_dual_port_per_port_columns():
    parsed = perftest.parse_output(fixture("ib_write_bw_dual_port_per_port_gbits_client.txt"))
    assert parsed["dual_port"] is True
    (row,) = parsed["rows"]
    assert (row["bw_average_gbps"], row["bw_port1_gbps"], row["bw_port2_gbps"]) == (196.92, 98.51, 98.41)
    assert row["msg_rate_port1_mpps"] == pytest.approx(98.51e9 / 8 / 65536 / 1e6, abs=1e-6)


def test_parse_header_without_hash_marks():
    text = (" #bytes     iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
            " 2          1000             4.86               4.67               2.450225\n")
    (row,) = perftest.parse_output(text)["rows"]
    assert row["bw_average_gbps"] == pytest.approx(4.67 * MIB, abs=1e-6)


def test_report_gbits_and_mib_of_the_same_figure_agree():
    gbits = perftest.parse_output(" #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n"
                                  " 65536 5000 195.19 195.19 0.372293\n")["rows"][0]
    mib = perftest.parse_output(" #bytes #iterations BW peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]\n"
                                " 65536 5000 23268.33 23268.33 0.372293\n")["rows"][0]
    assert mib["bw_average_gbps"] == pytest.approx(gbits["bw_average_gbps"], abs=0.01)


def test_real_loopback_reports_parse():
    real = os.path.join(FIXTURES, "real", "captures", "perftest")
    with open(os.path.join(real, "ib_write_bw_loopback_8M_mbsec_superbench.txt")) as handle:
        parsed = perftest.parse_output(handle.read())
    assert {r["msg_size"] for r in parsed["rows"]} == {8388608}
    best = perftest.headline(parsed["rows"])
    assert best["bw_average_gbps"] == pytest.approx(24056.72 * MIB, abs=1e-6)
    assert parsed["bidirectional"] is False


# ---------------------------------------------------------------- incomplete rows, cut reports, no data moved
# Every perftest since 2013 prints MsgRate[Mpps] (RESULT_FMT in linux-rdma/perftest src/perftest_parameters.h) and
# a dashed RESULT_LINE after each table (src/write_bw.c, src/send_bw.c, src/read_bw.c).

COMPLETE_REPORTS = ["ib_write_bw_24.07_ib_gbits_client.txt", "ib_write_bw_23.10_roce_mib_client.txt",
                    "ib_write_bw_3.4_mb_client.txt", "ib_write_bw_4.5_duration_gbits_client.txt",
                    "ib_write_bw_4.5_all_sizes_gbits_client.txt", "ib_write_bw_24.07_cuda_client.txt",
                    "ib_write_bw_dual_port_per_port_gbits_client.txt",
                    "ib_write_bw_bidirectional_report_both_gbits_client.txt"]


def check_of(tmp_path, out, **overrides):
    error, checks, extra = perftest.run_bandwidth(params(**overrides), runner_for(out), SysfsReader(str(tmp_path)))
    assert error is None
    (check,) = checks.as_list()
    return check, extra


def result_rows(text, first_table=False):
    """(start, end) of every result row of a report (of its first table): a line of figures after a header."""
    spans, offset, in_table = [], 0, False
    for line in text.splitlines(True):
        if "BW average[" in line:
            in_table = True
        elif first_table and spans and line.startswith("-----"):
            break
        elif in_table and line.split() and all(perftest._NUMBER_RE.match(f) for f in line.split()):
            spans.append((offset, offset + len(line.rstrip("\n"))))
        offset += len(line)
    return spans


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(COMPLETE_REPORTS), data=st.data())
def test_a_row_missing_any_figure_is_an_incomplete_result_row(tmp_path_factory, name, data):
    """Any figure of any result row left empty: the run fails naming the row, never a pass with a figure read
    from the wrong column (the MsgRate as the average)."""
    text = fixture(name)
    start, end = data.draw(st.sampled_from(result_rows(text)))
    figures = text[start:end].split()
    dropped = data.draw(st.integers(min_value=0, max_value=len(figures) - 1))
    row = "   ".join(figures[:dropped] + figures[dropped + 1:])
    check, _extra = check_of(tmp_path_factory.mktemp("root"), text[:start] + " " + row + text[end:])
    assert check["status"] == "fail", check
    assert "incomplete result row" in check["message"] and row.split()[0] in check["message"]


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(COMPLETE_REPORTS), data=st.data())
def test_a_report_cut_before_the_dashed_line_after_its_last_row_never_passes(tmp_path_factory, name, data):
    """Cut anywhere up to the newline of the last row of the (first, headline) table, before the dashed line
    perftest prints after it: rdma.bandwidth fails. (--report-both cut after that line, in its Local/Remote
    tables, keeps a headline that was printed whole.)"""
    text = fixture(name)
    _start, end = result_rows(text, first_table=True)[-1]
    cut = data.draw(st.integers(min_value=0, max_value=end + 1))  # up to the row's newline, before the dashes
    check, _extra = check_of(tmp_path_factory.mktemp("root"), text[:cut], min_gbps=0.001)
    assert check["status"] == "fail", (text[:cut][-120:], check)
    whole, _extra = check_of(tmp_path_factory.mktemp("root"), text, min_gbps=0.001)
    assert whole["status"] == "pass", whole


def test_a_cut_report_names_its_last_row(tmp_path):
    text = fixture("ib_write_bw_4.5_all_sizes_gbits_client.txt")
    _start, end = result_rows(text)[-1]
    check, _extra = check_of(tmp_path, text[: end + 1])
    assert check["status"] == "fail"
    assert check["message"].startswith("ib_write_bw report cut: no dashed line after the result row '%s'"
                                       % " ".join(text[_start:end].split()))


@pytest.mark.parametrize("min_gbps", [None, 0.0])
def test_zero_average_is_no_data_moved(tmp_path, min_gbps):
    text = fixture("ib_write_bw_4.5_duration_gbits_client.txt").replace("98.03\t\t   0.186977", "0.00\t\t   0.000000")
    check, extra = check_of(tmp_path, text, min_gbps=min_gbps)
    assert extra["bw_average_gbps"] == 0.0
    assert check["status"] == "fail"
    assert check["message"].startswith("no data moved: average 0.00 Gb/s at 65536 B messages")
