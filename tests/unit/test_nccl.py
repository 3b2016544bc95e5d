"""nccl-tests output parser and the k8s.nccl.* checks."""

import os

import pytest
from conftest import FIXTURES

from ansible_collections.gpufleet.cluster.plugins.filter.nccl import nccl_tests_checks, nccl_tests_parse
from ansible_collections.gpufleet.cluster.plugins.module_utils.nccl import parse_nccl_tests, parse_row


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
