"""nccl-tests output parser and the k8s.nccl.* checks."""

import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter.nccl import nccl_tests_checks, nccl_tests_parse
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.nccl import parse_nccl_tests, parse_row


def fixture(name):
    with open(os.path.join(FIXTURES, "nccl", name)) as handle:
        return handle.read()


def by_id(checks, check_id):
    found = [c for c in checks if c["id"] == check_id]
    assert len(found) == 1, checks
    return found[0]


def test_parse_213_two_nodes():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_2.13_2nodes_ib.txt"))
    assert parsed["avg_busbw_gbps"] == pytest.approx(158.329)
    assert len(parsed["rows"]) == 11
    last = parsed["rows"][-1]
    assert last["size"] == 8589934592
    assert last["type"] == "float" and last["redop"] == "sum" and last["root"] == "-1"
    assert last["out_of_place"]["busbw_gbps"] == pytest.approx(205.22)
    assert last["in_place"]["algbw_gbps"] == pytest.approx(109.47)
    assert parsed["peak_busbw_gbps"] == pytest.approx(205.25)
    assert parsed["wrong"] == 0 and parsed["out_of_bounds"] == 0
    assert len(parsed["ranks"]) == 16
    assert {r["host"] for r in parsed["ranks"]} == {"nccl-allreduce-worker-0", "nccl-allreduce-worker-1"}
    assert parsed["ranks"][7]["bus_id"] == "0xdb"


def test_parse_old_error_column_without_root():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_2.10_old_error_column.txt"))
    assert len(parsed["rows"]) == 4
    assert parsed["rows"][0]["root"] is None
    assert parsed["rows"][2]["out_of_place"]["busbw_gbps"] == pytest.approx(264.35)
    assert parsed["avg_busbw_gbps"] == pytest.approx(167.719)
    assert parsed["wrong"] == 0  # 5e-07 is a tolerance figure, not a count
    assert [r["host"] for r in parsed["ranks"]] == ["hgx-a100", "hgx-a100"]


def test_checks_pass_above_threshold():
    checks = nccl_tests_checks(fixture("all_reduce_perf_2.13_2nodes_ib.txt"), min_busbw_gbps=150,
                               target="nccl-allreduce")
    busbw = by_id(checks, "k8s.nccl.busbw")
    assert busbw["status"] == "pass"
    assert busbw["target"] == "nccl-allreduce"
    assert busbw["observed"] == pytest.approx(158.329)
    assert by_id(checks, "k8s.nccl.wrong")["status"] == "pass"


def test_checks_fail_below_threshold():
    checks = nccl_tests_checks(nccl_tests_parse(fixture("all_reduce_perf_2.13_2nodes_ib.txt")), min_busbw_gbps="180")
    busbw = by_id(checks, "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "below 180.0 GB/s" in busbw["message"]
    assert busbw["expected"] == ">= 180.0 GB/s"


def test_wrong_elements_fail():
    checks = nccl_tests_checks(fixture("all_reduce_perf_wrong_roce.txt"), min_busbw_gbps=15)
    assert by_id(checks, "k8s.nccl.busbw")["status"] == "pass"
    wrong = by_id(checks, "k8s.nccl.wrong")
    assert wrong["status"] == "fail"
    assert wrong["observed"] == {"wrong": 3, "out_of_bounds": 3}


def test_truncated_run_fails_busbw():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_truncated.txt"))
    assert parsed["avg_busbw_gbps"] is None
    assert len(parsed["rows"]) == 1  # the NCCL WARN line is not a row
    busbw = by_id(nccl_tests_checks(parsed, min_busbw_gbps=100), "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "Avg bus bandwidth" in busbw["message"]


def test_failed_job_fails_even_with_output():
    checks = nccl_tests_checks(fixture("all_reduce_perf_2.13_2nodes_ib.txt"), 100, job_succeeded=False)
    assert by_id(checks, "k8s.nccl.busbw")["status"] == "fail"


def test_no_threshold_reports_only():
    busbw = by_id(nccl_tests_checks(fixture("all_reduce_perf_2.13_2nodes_ib.txt")), "k8s.nccl.busbw")
    assert busbw["status"] == "pass"
    assert "no threshold" in busbw["message"]


def test_unchecked_run_skips_wrong_check():
    text = ("#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong\n"
            "  8388608  2097152  float  sum  -1  254.1  33.01  61.90  N/A  251.6  33.34  62.51  N/A\n"
            "# Avg bus bandwidth    : 62.2 \n")
    parsed = parse_nccl_tests(text)
    assert parsed["wrong"] is None
    assert by_id(nccl_checks_of(parsed), "k8s.nccl.wrong")["status"] == "skip"


def nccl_checks_of(parsed):
    return nccl_tests_checks(parsed, 10)


@pytest.mark.parametrize("line", [
    "", "# Avg bus bandwidth    : 1", "nccl-0:1:1 [0] NCCL INFO Using 8 threads", "   12 x float sum -1 1 2 3 0 1 2 3 0",
    "------------------------------------------",
])
def test_non_rows(line):
    assert parse_row(line) is None


def test_garbage_input():
    assert parse_nccl_tests(None)["rows"] == []
    assert parse_nccl_tests("\x00\xff garbage")["avg_busbw_gbps"] is None


# ---------------------------------------------------------------- real captures (tests/fixtures/real/captures/README.md)

def real(name):
    with open(os.path.join(FIXTURES, "real", "captures", "nccl", name)) as handle:
        return handle.read()


def assert_strict_json(value):
    json.dumps(value, allow_nan=False)


def test_real_two_h100_hosts_current_layout():
    parsed = parse_nccl_tests(real("all_reduce_2nodes_h100_a3mega.txt"))
    assert [r["size"] for r in parsed["rows"]] == [8, 1024, 1048576, 134217728, 4294967296, 8589934592]
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {("sum", "-1")}
    assert parsed["avg_busbw_gbps"] == pytest.approx(70.742)
    assert parsed["avg_status"] is None and parsed["out_of_bounds_status"] == "OK"
    assert parsed["peak_busbw_gbps"] == pytest.approx(338.82)
    assert len(parsed["ranks"]) == 16 and parsed["ranks"][15]["bus_id"] == "0000:8c:00"
    assert {r["host"] for r in parsed["ranks"]} == {"ztan-mig-235z", "ztan-mig-gq73"}
    checks = nccl_tests_checks(parsed, 70)
    assert by_id(checks, "k8s.nccl.busbw")["status"] == "pass"
    assert by_id(checks, "k8s.nccl.wrong")["status"] == "pass"
    assert by_id(nccl_tests_checks(parsed, 71), "k8s.nccl.busbw")["status"] == "fail"


def test_real_old_all_reduce_redop_without_root_unchecked():
    parsed = parse_nccl_tests(real("all_reduce_old_redop_no_root_na_superbench.txt"))
    assert [r["size"] for r in parsed["rows"]][-1] == 8589934592
    assert len(parsed["rows"]) == 6  # the NCCL INFO line inside the table is not a row
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {("sum", None)}
    assert parsed["wrong"] is None
    assert parsed["avg_busbw_gbps"] == pytest.approx(68.4048)
    assert by_id(nccl_tests_checks(parsed, 60), "k8s.nccl.wrong")["status"] == "skip"


def test_real_old_broadcast_root_without_redop():
    parsed = parse_nccl_tests(real("broadcast_old_root_no_redop_superbench.txt"))
    assert len(parsed["rows"]) == 6
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {(None, "0")}
    assert parsed["rows"][-1]["in_place"]["busbw_gbps"] == pytest.approx(234.70)
    assert parsed["avg_busbw_gbps"] == pytest.approx(64.8653)


def test_real_old_all_gather_without_redop_or_root():
    parsed = parse_nccl_tests(real("all_gather_old_no_redop_no_root_superbench.txt"))
    assert [r["size"] for r in parsed["rows"]] == [0, 32, 1048576, 134217728, 4294967296, 8589934592]
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {(None, None)}
    assert parsed["rows"][-1]["out_of_place"]["busbw_gbps"] == pytest.approx(223.39)
    assert parsed["peak_busbw_gbps"] == pytest.approx(230.07)
    assert parsed["avg_busbw_gbps"] == pytest.approx(58.2651)
    assert [r["host"] for r in parsed["ranks"]] == ["localhost"] * 8


@pytest.mark.parametrize("name", ["all_reduce_2nodes_h100_a3mega.txt", "all_reduce_old_redop_no_root_na_superbench.txt",
                                  "broadcast_old_root_no_redop_superbench.txt",
                                  "all_gather_old_no_redop_no_root_superbench.txt"])
def test_real_captures_give_strict_json_and_a_finished_run(name):
    parsed = parse_nccl_tests(real(name))
    assert parsed["header_seen"] and parsed["summaries"] == 1
    checks = nccl_tests_checks(parsed, 1)
    assert "incomplete" not in by_id(checks, "k8s.nccl.busbw")["message"]
    assert_strict_json(parsed)
    assert_strict_json(checks)


# ---------------------------------------------------------------- layouts rebuilt from nccl-tests' format strings

def test_open_mpi_tag_output_prefix_hides_nothing():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_tag_output.txt"))
    plain = parse_nccl_tests(real("all_reduce_2nodes_h100_a3mega.txt"))
    assert parsed == plain
    assert len(parsed["rows"]) == 6 and parsed["avg_busbw_gbps"] == pytest.approx(70.742)


def test_two_summaries_means_separate_jobs():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_two_summaries.txt"))
    assert parsed["summaries"] == 2 and len(parsed["rows"]) == 12
    busbw = by_id(nccl_tests_checks(parsed), "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "separate jobs" in busbw["message"]


def test_min_bw_ok_suffix_is_a_finished_run():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_min_bw_ok.txt"))
    assert parsed["avg_busbw_gbps"] == pytest.approx(334.315) and parsed["avg_status"] == "OK"
    busbw = by_id(nccl_tests_checks(parsed), "k8s.nccl.busbw")
    assert busbw["status"] == "pass"
    assert "OK against NCCL_TESTS_MIN_BW" in busbw["message"]
    assert by_id(nccl_tests_checks(parsed, 330), "k8s.nccl.busbw")["status"] == "pass"
    assert by_id(nccl_tests_checks(parsed, 335), "k8s.nccl.busbw")["status"] == "fail"


@pytest.mark.parametrize("succeeded", [True, False])
def test_min_bw_failed_suffix_fails_with_that_reason(succeeded):
    parsed = parse_nccl_tests(fixture("all_reduce_perf_min_bw_failed.txt"))
    assert parsed["avg_status"] == "FAILED"
    busbw = by_id(nccl_tests_checks(parsed, 300, job_succeeded=succeeded), "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "FAILED against NCCL_TESTS_MIN_BW" in busbw["message"]
    assert "incomplete" not in busbw["message"]
    assert busbw["observed"] == pytest.approx(334.315)


def test_report_timestamps_keep_every_row():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_timestamps.txt"))
    assert [r["size"] for r in parsed["rows"]] == [4294967296, 8589934592]
    assert parsed["rows"][1]["timestamp"] == "2025-11-03 09:14:09"
    assert parsed["rows"][1]["in_place"]["busbw_gbps"] == pytest.approx(337.35)
    assert parsed["wrong"] == 0


def test_per_iteration_columns():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_per_iteration.txt"))
    (row,) = parsed["rows"]
    assert row["out_of_place"]["busbw_gbps"] == pytest.approx(338.82)
    assert row["in_place"]["busbw_gbps"] == pytest.approx(337.35)
    assert row["out_of_place"]["per_iteration_us"]["p99"] == pytest.approx(47690.4)
    assert row["in_place"]["wrong"] == 0


@pytest.mark.parametrize("threshold", [None, 0, 10])
def test_nan_average_never_passes_and_result_is_strict_json(threshold):
    parsed = parse_nccl_tests(fixture("all_reduce_perf_nan_average.txt"))
    assert parsed["avg_busbw_gbps"] is None and parsed["avg_busbw_text"] == "-nan"
    assert parsed["rows"][0]["out_of_place"]["busbw_gbps"] is None
    checks = nccl_tests_checks(parsed, threshold)
    busbw = by_id(checks, "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "not a finite number" in busbw["message"]
    assert_strict_json(parsed)
    assert_strict_json(checks)


@pytest.mark.parametrize("figure", ["nan", "inf", "-inf", "NaN", "Infinity"])
def test_non_finite_averages_fail(figure):
    text = "# Avg bus bandwidth    : %s \n" % figure
    busbw = by_id(nccl_tests_checks(text, 1), "k8s.nccl.busbw")
    assert busbw["status"] == "fail" and busbw["observed"] is None


@pytest.mark.parametrize("threshold", ["nan", float("inf")])
def test_non_finite_threshold_is_an_option_error(threshold):
    with pytest.raises(AnsibleFilterError, match="min_busbw_gbps must be a finite number"):
        nccl_tests_checks("# Avg bus bandwidth    : 5.1\n", threshold)


def test_summary_without_hash_of_the_first_releases():
    parsed = parse_nccl_tests(" Out of bounds values : 0 OK\n Avg bus bandwidth    : 10.5 \n")
    assert parsed["avg_busbw_gbps"] == 10.5 and parsed["out_of_bounds"] == 0


def test_srun_label_prefix():
    text = ("0:   8388608  2097152  float  sum  -1  254.1  33.01  61.90  0  251.6  33.34  62.51  0\n"
            "0: # Avg bus bandwidth    : 62.2 \n"
            "0: #\n")
    parsed = parse_nccl_tests(text)
    assert len(parsed["rows"]) == 1 and parsed["avg_busbw_gbps"] == 62.2


# ---------------------------------------------------------------- #wrong as nccl-tests means it
# sendrecv / alltoall(v) print N/A as the in-place #wrong even with -c 1 (no in-place variant;
# nccl-tests a0a1491, src/sendrecv.cu and src/alltoall.cu: reportErrors = in_place ? 0 : 1).

ROW = "  8388608  2097152  float  sum  -1  254.1  33.01  61.90  %s  251.6  33.34  62.51  %s\n"
RUN = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: %d graph: 0\n"
AVG = "# Avg bus bandwidth    : 62.2 \n"


def wrong_check(text):
    return by_id(nccl_tests_checks(text, 10), "k8s.nccl.wrong")


def test_sendrecv_in_place_na_is_checked_on_the_out_of_place_half():
    parsed = parse_nccl_tests(fixture("sendrecv_perf_inplace_na_2hosts.txt"))
    assert len(parsed["rows"]) == 6 and parsed["validation"] == 1 and parsed["wrong_column"] == "#wrong"
    assert parsed["rows"][0]["in_place"]["wrong"] is None and parsed["rows"][0]["in_place"]["busbw_gbps"] == 9.05
    assert parsed["wrong"] == 0 and parsed["wrong_checked_rows"] == 6 and parsed["wrong_problems"] == []
    check = wrong_check(parsed)
    assert check["status"] == "pass"
    assert "6 row(s) checked" in check["message"] and "out-of-place half" in check["message"]


def test_alltoall_wrong_elements_out_of_place_fail():
    parsed = parse_nccl_tests(fixture("alltoall_perf_inplace_na_wrong.txt"))
    assert [r["redop"] for r in parsed["rows"]] == ["none"] * 3
    assert parsed["wrong"] == 2048
    check = wrong_check(parsed)
    assert check["status"] == "fail" and check["observed"]["wrong"] == 2048


@pytest.mark.parametrize("out_of_place, in_place, reason", [
    ("nan", "0", "'nan', not a count"),
    ("0", "nan", "'nan', not a count"),
    ("-nan", "N/A", "'-nan', not a count"),
    ("+5", "0", "5 wrong element(s)"),
    ("-5", "0", "-5, not a count"),
    ("0", "-5", "-5, not a count"),
    ("N/A", "0", "out-of-place #wrong is N/A but in-place is 0"),
])
def test_untrustworthy_wrong_columns_fail(out_of_place, in_place, reason):
    check = wrong_check(RUN % 1 + ROW % (out_of_place, in_place) + AVG)
    assert check["status"] == "fail", check
    assert reason in check["message"]


def test_plus_and_minus_five_do_not_cancel():
    text = RUN % 1 + ROW % ("+5", "0") + ROW % ("-5", "0") + AVG
    assert parse_nccl_tests(text)["wrong"] == 10
    assert wrong_check(text)["status"] == "fail"


@pytest.mark.parametrize("figure, count", [("1", 1), ("1e+06", 1000000), ("1.23457e+06", 1234570)])
def test_g_formatted_counts_fail(figure, count):
    parsed = parse_nccl_tests(RUN % 1 + ROW % (figure, "N/A") + AVG)
    assert parsed["wrong"] == count
    assert wrong_check(parsed)["status"] == "fail"


def test_na_on_both_halves_while_validating_fails():
    check = wrong_check(RUN % 1 + ROW % ("N/A", "N/A") + AVG)
    assert check["status"] == "fail" and "validation: 1" in check["message"]


def test_na_rows_next_to_checked_rows_fail():
    check = wrong_check(ROW % ("0", "0") + ROW % ("N/A", "N/A") + AVG)
    assert check["status"] == "fail" and "other rows checked" in check["message"]


def test_validation_zero_is_not_checked_even_when_sendrecv_prints_zero():
    parsed = parse_nccl_tests(RUN % 0 + ROW % ("0", "N/A") + AVG)
    assert parsed["wrong"] is None
    assert wrong_check(parsed)["status"] == "skip"


def test_whole_in_place_half_na_is_checked_on_the_other_half():
    text = RUN % 1 + "  8388608  2097152  float  sum  -1  254.1  33.01  61.90  0  N/A  N/A  N/A  N/A\n" + AVG
    parsed = parse_nccl_tests(text)
    assert len(parsed["rows"]) == 1 and parsed["rows"][0]["in_place"]["time_us"] is None
    assert wrong_check(parsed)["status"] == "pass"
    assert_strict_json(parsed)


# ---------------------------------------------------------------- a complete average line; no data moved; unread lines
# nccl-tests prints "# Avg bus bandwidth    : %g %s\n" and then "#\n" (NVIDIA/nccl-tests src/common.cu since v2.0.0,
# writeResultFooter in src/util.cu since 2.18); v1.0.0 printed " Avg bus bandwidth    : %g %s\n" and then "\n".

COMPLETE = ["all_reduce_perf_2.13_2nodes_ib.txt", "all_reduce_perf_2.10_old_error_column.txt",
            "all_reduce_perf_min_bw_ok.txt", "all_reduce_perf_per_iteration.txt", "all_reduce_perf_timestamps.txt",
            "all_reduce_perf_tag_output.txt", "all_reduce_perf_wrong_roce.txt", "sendrecv_perf_inplace_na_2hosts.txt"]


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(COMPLETE), data=st.data(), stripped=st.booleans())
def test_output_cut_before_the_hash_line_after_the_average_never_passes(name, data, stripped):
    """Any output cut anywhere before the `#` line that follows its average (inside the figure, right after
    it, after its newline): k8s.nccl.busbw fails, never a pass with a cut figure. Ansible's stdout strips the
    final newline (stripped): still no pass."""
    text = fixture(name)
    hash_line = text.index("\n", text.index("Avg bus bandwidth")) + 1  # start of the line after the average
    cut = data.draw(st.integers(min_value=0, max_value=hash_line + text[hash_line:].index("#")))
    prefix = text[:cut].rstrip("\r\n") if stripped else text[:cut]
    busbw = by_id(nccl_tests_checks(prefix, 0.001), "k8s.nccl.busbw")
    assert busbw["status"] == "fail", (prefix[-80:], busbw)
    whole = by_id(nccl_tests_checks(text.rstrip("\r\n"), 0.001), "k8s.nccl.busbw")
    assert whole["status"] == "pass", whole


def test_real_capture_as_published_without_its_hash_line_is_cut():
    """The a3mega source file stops right after its average line (tests/fixtures/real/captures/README.md)."""
    published = real("all_reduce_2nodes_h100_a3mega.txt")
    assert published.endswith("# Avg bus bandwidth    : 70.742 \n#\n")
    parsed = parse_nccl_tests(published[: -len("#\n")])
    assert parsed["avg_complete"] is False and parsed["avg_busbw_gbps"] is None
    assert parsed["avg_busbw_text"] == "70.742"
    busbw = by_id(nccl_tests_checks(parsed, 1), "k8s.nccl.busbw")
    assert busbw["status"] == "fail" and "cut" in busbw["message"]


@pytest.mark.parametrize("text, complete", [
    (" Avg bus bandwidth    : 10.5 ", True),            # the space "%g %s" prints (Ansible stdout: no newline)
    (" Avg bus bandwidth    : 10.5 \n\n", True),
    (" Avg bus bandwidth    : 10.5 OK", True),
    (" Avg bus bandwidth    : 10.5\n\n", True),          # the empty line v1.0.0 prints after it
    (" Avg bus bandwidth    : 10.5", False),             # cut: 10.5 may be 10.53
    (" Avg bus bandwidth    : 10.5\n", False),
])
def test_first_releases_average_line_complete(text, complete):
    parsed = parse_nccl_tests(" Out of bounds values : 0 OK\n" + text)
    assert parsed["avg_complete"] is complete
    assert by_id(nccl_tests_checks(parsed), "k8s.nccl.busbw")["status"] == ("pass" if complete else "fail")


@pytest.mark.parametrize("figure", ["0", "0 OK", "-0", "0.0"])
@pytest.mark.parametrize("threshold", [None, 0])
def test_zero_average_is_no_data_moved_threshold_or_not(figure, threshold):
    text = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %s \n#\n" % figure
    busbw = by_id(nccl_tests_checks(text, threshold), "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert busbw["message"].startswith("no data moved: average bus bandwidth 0.00 GB/s")
    assert busbw["observed"] == 0


@pytest.mark.parametrize("prefix", ["[0] ", "rank0: ", "0> ", "worker-0 | "])
def test_unknown_line_prefix_failure_names_the_line(prefix):
    text = "".join(prefix + line + "\n" for line in fixture("all_reduce_perf_wrong_roce.txt").splitlines())
    parsed = parse_nccl_tests(text)
    busbw = by_id(nccl_tests_checks(parsed, 1), "k8s.nccl.busbw")
    assert busbw["status"] == "fail"
    assert "run incomplete" not in busbw["message"]
    assert "not understood: %r" % parsed["unread"][0] in busbw["message"]
    assert parsed["unread"][0].startswith(prefix.strip())


def test_nccl_info_lines_are_not_unread():
    parsed = parse_nccl_tests(fixture("all_reduce_perf_2.13_2nodes_ib.txt"))
    assert parsed["unread"] == [] and parsed["avg_complete"] is True
