"""Red-team attacks on gpufleet's parsers of real tool outputs (area "tool_outputs"), written from the
documentation only (docs/contracts.md "Bandwidth and collective checks", "Burn-in and remediation checks",
"`mlx5_facts` -> `ansible_facts.mlx5`"; the filter docs plugins/filter/nccl_tests_parse.yml,
nccl_tests_checks.yml, ofed_version.yml; `ansible-doc gpufleet.cluster.rdma_bandwidth`).

Every input below is WRITTEN HERE from what a public issue thread or repository shows (layout, column set,
figures); the source is named next to it. None of these outputs is in tests/fixtures or tests/transcripts.
Where a line had to be added (a summary the thread did not quote), the comment says so and how its figure
was computed.

Promises attacked:
- nccl-tests (k8s.nccl.busbw / k8s.nccl.wrong): a supported layout parses to the printed values; an
  incomplete, garbled or non-finite summary is a failing k8s.nccl.busbw, never a pass; out-of-bounds values or
  a non-zero wrong count fail k8s.nccl.wrong.
- perftest (rdma.bandwidth): "perftest average below min_gbps, no result, or a non-finite figure" fails; the
  average is the 4th column; MB/sec and MiB/sec are converted x 8 x 1048576 / 1e9; warning lines inside the
  table are skipped.
- ofed_info -s: `MLNX_OFED_LINUX-<v>:` -> mlnx_ofed, `OFED-internal-<v>:` -> doca_ofed.
- dcgmi diag -j (3.x): a failing result fails; a run in which no test executed is not a pass.
"""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runners import ScriptedRunner

from ansible_collections.gpufleet.cluster.plugins.filter.nccl import nccl_tests_checks, nccl_tests_parse
from ansible_collections.gpufleet.cluster.plugins.filter.ofed import FilterModule as OfedFilters
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import dcgm
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.nccl import nccl_checks, parse_nccl_tests
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import perftest
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import parse_ofed_info

MIB_PER_SEC_IN_GBPS = 8 * 1048576 / 1e9


def by_id(checks, check_id):
    found = [c for c in checks if c["id"] == check_id]
    assert len(found) == 1, checks
    return found[0]


def statuses(text, min_busbw_gbps=None):
    checks = nccl_checks(parse_nccl_tests(text), min_busbw_gbps=min_busbw_gbps)
    json.dumps(checks, allow_nan=False)  # strict JSON, whatever the input
    return {c["id"]: c for c in checks}


# =====================================================================================================
# nccl-tests: real layouts not in the corpus
# =====================================================================================================

# nccl-tests 2.20.0, two DGX Spark (GB10) hosts: the new first lines `# nccl-tests version ...` and
# `# Collective test starting: ...`, `unalign: 0` in the parameter line, PCI domain `000f` in the bus ids, a
# wider `#wrong` column (printed 7 wide) and `# Collective test concluded: ...` at the end.
# Source: NVIDIA/dgx-spark-playbooks pull request #103 (https://github.com/NVIDIA/dgx-spark-playbooks/pull/103),
# first four rows of the table as quoted there. The two summary lines are added here (the quote is cut after
# the rows): out-of-bounds 0 OK, and the average nccl-tests computes over both halves of the rows kept,
# (0.23+0.27+0.52+0.53+0.83+0.88+0.96+1.01)/8 = 0.65375, printed with %g.
NCCL_220_GB10 = """\
# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23102 nccl-library=23102
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8192 maxBytes 8589934592 step: 2(factor) warmup iters: 10 iters: 100 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid 1666603 on spark-d708 device  0 [000f:01:00] NVIDIA GB10
#  Rank  1 Group  0 Pid 1669515 on spark-dbf4 device  0 [000f:01:00] NVIDIA GB10
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        8192          2048     float     sum      -1    35.15    0.23    0.23       0    30.33    0.27    0.27       0
       16384          4096     float     sum      -1    31.67    0.52    0.52       0    30.75    0.53    0.53       0
       32768          8192     float     sum      -1    39.56    0.83    0.83       0    37.44    0.88    0.88       0
       65536         16384     float     sum      -1    67.93    0.96    0.96       0    64.71    1.01    1.01       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.65375 
#
# Collective test concluded: all_reduce_perf
"""  # noqa: E501, W291 (the output as printed: long lines, trailing spaces)

# Two GPUs on one host (`-g 2`, one process): the last row of a run, NCCL's `Destroy COMPLETE` INFO lines
# printed between the table and the summary, the summary with a trailing space after the average.
# Source: NVIDIA/nccl issue #1706 (https://github.com/NVIDIA/nccl/issues/1706), the quoted tail of the output
# (row 134217728, two INFO lines, `# Out of bounds values : 0 OK`, `# Avg bus bandwidth    : 8.62002 `).
# The header lines above the row are the 2.13+ header (as in the other real captures); only the quoted row
# is kept, so the average (of the whole run) is not the mean of the rows here.
NCCL_1706_TWO_GPUS = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 2081594 on   deepseek device  0 [0xf0] NVIDIA GeForce RTX 4090
#  Rank  1 Group  0 Pid 2081594 on   deepseek device  1 [0x34] NVIDIA GeForce RTX 4090
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
   134217728      33554432     float     sum      -1   5190.8   25.86   25.86      0   5186.6   25.88   25.88      0
deepseek:2081594:2081611 [0] NCCL INFO comm 0x55f6848de3b0 rank 0 nranks 2 cudaDev 0 busId f000 - Destroy COMPLETE
deepseek:2081594:2081611 [1] NCCL INFO comm 0x55f68495f4f0 rank 1 nranks 2 cudaDev 1 busId 34000 - Destroy COMPLETE
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 8.62002 
#
"""  # noqa: E501, W291 (the output as printed: long lines, trailing spaces)

# alltoall_perf on ONE GPU (RTX 5090): bus bandwidth 0.00 (one rank moves nothing over a bus), in-place
# `#wrong` N/A (alltoall has no in-place variant), `# Avg bus bandwidth    : 0 ` (%g of zero).
# Source: NVIDIA/nccl-tests issue #287 (https://github.com/NVIDIA/nccl-tests/issues/287), the full output quoted
# in the closing comment (device line, table, both summary lines).
NCCL_287_ONE_GPU_ALLTOALL = """\
# nThread 1 nGpus 1 minBytes 33554432 maxBytes 33554432 step: 1048576(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 2181762 on   GENOA-01 device  0 [0x01] NVIDIA GeForce RTX 5090
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
    33554432       8388608     float    none      -1    19.56  1715.44    0.00      0     0.78  43046.10    0.00    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0 
#
"""  # noqa: E501, W291 (the output as printed: long lines, trailing spaces)

# The old layout of nccl-tests around NCCL 2.4/2.5 (2020): no `#` in front of the header and summary lines,
# neither `redop` nor `root`, an `error` column, and a real data corruption: error 1e+00 and
# `Out of bounds values : 2 FAILED`. Source: NVIDIA/nccl-tests issue #37
# (https://github.com/NVIDIA/nccl-tests/issues/37), all_gather_perf -g 8 on V100-SXM2, the whole quoted output.
# The space after the average and the empty last line are put back here: this layout (nccl-tests v1.0.0,
# `src/common.cu`) prints `" Avg bus bandwidth    : %g %s\n"` and then `"\n"`; the quote lost both.
NCCL_37_OLD_OOB_FAILED = """\
                                             out-of-place                       in-place
       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  4294967296     134217728   float    29122  129.05  129.05  1e+00    29169  128.84  128.84  1e+00
 Out of bounds values : 2 FAILED
 Avg bus bandwidth    : 128.942 

"""  # noqa: W291 (the space nccl-tests prints after the figure)

# An MPI that prefixes every WRITE (not every line) with the rank, `[0]`: nccl-tests prints a row in three
# writes, so `[0]` appears three times inside each row. Source: NVIDIA/nccl issue #1453
# (https://github.com/NVIDIA/nccl/issues/1453), rows 1048576 and 2097152 as quoted. The header and summary
# lines are written here in the same prefixed form (the quote shows only rows); the average is our figure.
# Not a prefix the docs list (Open MPI --tag-output and srun --label are): must not pass.
NCCL_1453_RANK_LABEL_PER_WRITE = """\
[0]# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
[0]#
[0]#                                                              out-of-place                       in-place          
[0]#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
[0]#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
[0]      1048576        262144     float     sum      -1[0]    1626.5    0.64    1.24      0[0]    2302.3    0.46    0.87      0
[0]      2097152        524288     float     sum      -1[0]    2325.3    0.90    1.73      0[0]     416.7    5.03    9.65      0
[0]# Out of bounds values : 0 OK
[0]# Avg bus bandwidth    : 3.3725 
"""  # noqa: E501, W291 (the output as printed: long lines, trailing spaces)


def test_nccl_220_gb10_layout_values():
    parsed = parse_nccl_tests(NCCL_220_GB10)
    assert [r["size"] for r in parsed["rows"]] == [8192, 16384, 32768, 65536]
    assert [(r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"]) for r in parsed["rows"]] == [
        (0.23, 0.27), (0.52, 0.53), (0.83, 0.88), (0.96, 1.01)]
    last = parsed["rows"][-1]
    assert (last["out_of_place"]["time_us"], last["in_place"]["algbw_gbps"]) == (67.93, 1.01)
    assert parsed["avg_busbw_gbps"] == pytest.approx(0.65375)
    assert parsed["validation"] == 1 and parsed["wrong"] == 0 and parsed["out_of_bounds"] == 0
    assert parsed["summaries"] == 1
    assert [(r["rank"], r["host"], r["device"], r["bus_id"], r["name"]) for r in parsed["ranks"]] == [
        (0, "spark-d708", 0, "000f:01:00", "NVIDIA GB10"), (1, "spark-dbf4", 0, "000f:01:00", "NVIDIA GB10")]


def test_nccl_220_gb10_layout_checks():
    passing = statuses(NCCL_220_GB10, 0.6)
    assert passing["k8s.nccl.busbw"]["status"] == "pass"
    assert passing["k8s.nccl.busbw"]["observed"] == pytest.approx(0.65375)
    assert passing["k8s.nccl.wrong"]["status"] == "pass"
    assert statuses(NCCL_220_GB10, 0.66)["k8s.nccl.busbw"]["status"] == "fail"


def test_nccl_1706_info_lines_between_table_and_summary():
    parsed = parse_nccl_tests(NCCL_1706_TWO_GPUS)
    (row,) = parsed["rows"]
    assert (row["size"], row["count"], row["type"], row["redop"], row["root"]) == (
        134217728, 33554432, "float", "sum", "-1")
    assert (row["out_of_place"]["time_us"], row["out_of_place"]["busbw_gbps"]) == (5190.8, 25.86)
    assert (row["in_place"]["time_us"], row["in_place"]["busbw_gbps"]) == (5186.6, 25.88)
    assert parsed["avg_busbw_gbps"] == pytest.approx(8.62002)
    assert (parsed["out_of_bounds"], parsed["out_of_bounds_status"]) == (0, "OK")
    assert [r["bus_id"] for r in parsed["ranks"]] == ["0xf0", "0x34"]
    assert statuses(NCCL_1706_TWO_GPUS, 8.6)["k8s.nccl.busbw"]["status"] == "pass"
    assert statuses(NCCL_1706_TWO_GPUS, 8.7)["k8s.nccl.busbw"]["status"] == "fail"


def test_nccl_1706_through_the_filter_plugins():
    checks = nccl_tests_checks(nccl_tests_parse(NCCL_1706_TWO_GPUS), min_busbw_gbps=8, target="burnin")
    assert {(c["id"], c["status"], c["target"]) for c in checks} == {
        ("k8s.nccl.busbw", "pass", "burnin"), ("k8s.nccl.wrong", "pass", "burnin")}
    failed_job = nccl_tests_checks(NCCL_1706_TWO_GPUS, min_busbw_gbps=8, job_succeeded=False)
    assert by_id(failed_job, "k8s.nccl.busbw")["status"] == "fail"


def test_nccl_287_single_gpu_zero_average_fails_any_threshold():
    found = statuses(NCCL_287_ONE_GPU_ALLTOALL, 1)
    assert found["k8s.nccl.busbw"]["status"] == "fail"
    assert found["k8s.nccl.busbw"]["observed"] == 0.0
    # alltoall: in-place N/A next to an out-of-place count -> checked on the out-of-place half
    assert found["k8s.nccl.wrong"]["status"] == "pass"
    parsed = parse_nccl_tests(NCCL_287_ONE_GPU_ALLTOALL)
    assert parsed["rows"][0]["redop"] == "none"
    assert parsed["rows"][0]["in_place"]["wrong_text"] == "N/A"
    assert parsed["rows"][0]["in_place"]["algbw_gbps"] == 43046.10


def test_nccl_37_old_layout_out_of_bounds_failed_is_data_corruption():
    parsed = parse_nccl_tests(NCCL_37_OLD_OOB_FAILED)
    (row,) = parsed["rows"]
    assert (row["size"], row["count"], row["redop"], row["root"]) == (4294967296, 134217728, None, None)
    assert (row["out_of_place"]["busbw_gbps"], row["in_place"]["busbw_gbps"]) == (129.05, 128.84)
    assert (parsed["out_of_bounds"], parsed["out_of_bounds_status"]) == (2, "FAILED")
    assert parsed["avg_busbw_gbps"] == pytest.approx(128.942)
    found = statuses(NCCL_37_OLD_OOB_FAILED, 100)
    assert found["k8s.nccl.wrong"]["status"] == "fail"
    assert found["k8s.nccl.busbw"]["status"] == "pass"  # the bandwidth itself was measured and is above 100


def test_nccl_37_without_its_out_of_bounds_line_still_fails_on_the_error_column():
    """The `error` 1e+00 alone (the OOB line lost) is still a corruption, not a pass."""
    text = NCCL_37_OLD_OOB_FAILED.replace(" Out of bounds values : 2 FAILED\n", "")
    assert statuses(text, 100)["k8s.nccl.wrong"]["status"] == "fail"


def test_nccl_1453_per_write_rank_labels_never_pass():
    found = statuses(NCCL_1453_RANK_LABEL_PER_WRITE, 1)
    assert found["k8s.nccl.busbw"]["status"] == "fail"
    assert found["k8s.nccl.wrong"]["status"] != "pass"
    assert statuses(NCCL_1453_RANK_LABEL_PER_WRITE)["k8s.nccl.busbw"]["status"] == "fail"


# ---------------------------------------------------------------- nccl-tests: hostile variants of the real ones
REAL_NCCL = {"2.20-gb10": (NCCL_220_GB10, 0.65375), "nccl-1706": (NCCL_1706_TWO_GPUS, 8.62002)}


@pytest.mark.parametrize("name", sorted(REAL_NCCL))
def test_nccl_crlf_reads_the_same(name):
    text, average = REAL_NCCL[name]
    crlf = parse_nccl_tests(text.replace("\n", "\r\n"))
    plain = parse_nccl_tests(text)
    assert crlf["avg_busbw_gbps"] == pytest.approx(average)
    assert crlf["rows"] == plain["rows"] and crlf["out_of_bounds"] == plain["out_of_bounds"]


@pytest.mark.parametrize("name", sorted(REAL_NCCL))
@pytest.mark.parametrize("token", ["nan", "-nan", "inf", "-inf", "1e+400", "0,65375", "8,62002", "", "N/A",
                                   "65375e-5x", "0x1p3", "8.62002.1", "--8.6"])
def test_nccl_garbled_average_is_never_a_pass(name, token):
    text, average = REAL_NCCL[name]
    printed = "%g" % average
    garbled = text.replace("# Avg bus bandwidth    : %s " % printed, "# Avg bus bandwidth    : %s " % token)
    assert garbled != text
    busbw = statuses(garbled, 0.1)["k8s.nccl.busbw"]
    assert busbw["status"] == "fail", busbw


NOISE = st.sampled_from([
    "[GENOA-01:2181762] *** Process received signal ***",
    "GENOA-01:2181762:2181762 [0] NCCL INFO Bootstrap : Using eth0:192.168.0.183<0>",
    "spark-d708:1666603:1666603 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    "Warning: Permanently added '[192.168.173.233]:2022' (RSA) to the list of known hosts.",
    "--------------------------------------------------------------------------",
    "WARNING: There are more than one active ports on host 'seedsmed-f02hpc02', but the",
    "#",
    "",
    "\x1b[31merror\x1b[0m",
    "\ufeff",
])


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(REAL_NCCL)), data=st.data())
def test_nccl_interleaved_stderr_lines_never_change_a_pass(name, data):
    """stderr merged into stdout (kubectl logs, mpirun): whole foreign lines between any two lines. The
    verdict on the printed average never changes to a pass with another figure."""
    text, average = REAL_NCCL[name]
    lines = text.split("\n")
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), NOISE), max_size=6))
    for position, noise in sorted(inserts, reverse=True):
        lines.insert(position, noise)
    busbw = statuses("\n".join(lines), 0.1)["k8s.nccl.busbw"]
    if busbw["status"] == "pass":
        assert busbw["observed"] == pytest.approx(average)
    else:
        assert busbw["status"] == "fail"


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(REAL_NCCL)), cut=st.integers(min_value=0))
def test_nccl_truncated_output_never_passes_without_or_above_its_average(name, cut):
    """A job killed or a log cut at any byte: k8s.nccl.busbw passes only when the average line was printed
    whole -- followed by the `#` line nccl-tests prints after it -- and then with the figure measured (a cut
    INSIDE the figure passed with the cut figure before: finding F2, fixed)."""
    text, average = REAL_NCCL[name]
    cut %= len(text) + 1
    prefix = text[:cut]
    busbw = statuses(prefix, 0.1)["k8s.nccl.busbw"]
    if busbw["status"] == "pass":
        assert "# Avg bus bandwidth    : %g \n#" % average in prefix
        assert busbw["observed"] == pytest.approx(average)
    if "# Avg bus bandwidth    : " not in prefix:
        assert busbw["status"] == "fail"


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("# 0123456789.e+-naifNA/:OKFAILEDvgbusdwthr\n\t\r[],x")),
                    max_size=400))
def test_nccl_any_text_is_a_verdict_never_a_crash(text):
    checks = nccl_checks(parse_nccl_tests(text), min_busbw_gbps=1)
    json.dumps(checks, allow_nan=False)
    busbw = by_id(checks, "k8s.nccl.busbw")
    assert busbw["status"] in ("pass", "fail")
    if busbw["status"] == "pass":
        assert math.isfinite(busbw["observed"]) and busbw["observed"] >= 1


@settings(max_examples=100, deadline=None)
@given(count=st.one_of(st.integers(min_value=1, max_value=10 ** 12), st.integers(max_value=-1)),
       half=st.sampled_from(["out", "in"]), fmt=st.sampled_from(["%d", "%g", "%e"]))
def test_nccl_220_any_nonzero_wrong_count_fails(count, half, fmt):
    """%6g of a count (1e+06 for a million) in either half of a real row: k8s.nccl.wrong fails."""
    row = "       16384          4096     float     sum      -1    31.67    0.52    0.52       0    30.75    0.53    0.53       0"
    printed = fmt % count
    if half == "out":
        bad = row.replace("0.52       0    30.75", "0.52 %7s    30.75" % printed)
    else:
        bad = row[: row.rfind("0")] + printed
    assert bad != row
    assert statuses(NCCL_220_GB10.replace(row, bad), 0.1)["k8s.nccl.wrong"]["status"] == "fail"


# =====================================================================================================
# perftest: real reports not in the corpus
# =====================================================================================================
EXE = "/usr/bin/ib_write_bw"


def perf_params(**overrides):
    base = {"mode": "client", "server": "10.20.1.12", "device": None, "ib_port": None, "gid_index": None,
            "tcp_port": None, "size": None, "all_sizes": False, "duration": None, "qps": None,
            "use_cuda": None, "extra_args": [], "min_gbps": None, "executable": "ib_write_bw",
            "timeout": 120, "root": "/", "fail_on": "fail"}
    base.update(overrides)
    return base


def run_perf(tmp_path, out, rc=0, err="", **overrides):
    runner = ScriptedRunner(script={EXE: (rc, out, err)}, paths={"ib_write_bw": EXE})
    error, checks, extra = perftest.run_bandwidth(perf_params(**overrides), runner, SysfsReader(str(tmp_path)))
    assert error is None
    (check,) = checks.as_list()
    json.dumps(check, allow_nan=False)
    return check, extra


# `RDMA_Write Post List BW Test` (perftest with -l 128) over RoCE (`Link type : Ethernet`, `Transport type : IB`),
# `--report_gbits`, `-D 60`: peak 0.00 (not measured), 8-byte messages, average 0.48 Gb/sec, tab-padded
# MsgRate 7.498617. Source: linux-rdma/perftest issue #273 (https://github.com/linux-rdma/perftest/issues/273),
# the report as quoted in the description.
PERFTEST_273_POST_LIST = """\
                    RDMA_Write Post List BW Test
 Dual-port       : OFF\t\tDevice         : ib0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 256
 Post List       : 128
 CQ Moderation   : 128
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 2
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 8          224958464        0.00               0.48   \t\t   7.498617
---------------------------------------------------------------------------------------
"""

# An older ib_send_bw report: header and row WITHOUT the leading space, `MB/sec` units (MiB/s), peak 0.00.
# Source: linux-rdma/perftest issue #65 (https://github.com/linux-rdma/perftest/issues/65), "Case1" as quoted
# (the ** markdown emphasis around the average removed). The dashed line after the row is added here (the quote
# stops at the row): perftest prints RESULT_LINE after every table (src/send_bw.c, RESULT_LINE in
# src/perftest_parameters.h), and a report without it is read as cut.
PERFTEST_65_NO_LEADING_SPACE = """\
#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
1024       1000             0.00               5544.28\t\t   5.677340
---------------------------------------------------------------------------------------
"""

# perftest 5.60 printed NEGATIVE bandwidth averages (and t_avg) under load, `ib_send_bw ... -F --report_gbits
# -D 205200 -x 3` over mlx5_bond_0 (RoCE). Source of the fact and the banner: linux-rdma/perftest issue #82
# (https://github.com/linux-rdma/perftest/issues/82); the result row's figures are ours (the thread's rows are
# not quoted in the index): a negative average with the layout of the same generation.
PERFTEST_82_NEGATIVE = """\
---------------------------------------------------------------------------------------
                    Send BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_bond_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : rdma_cm
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1802170608       0.00               -12.48   \t\t   -0.023804
---------------------------------------------------------------------------------------
"""


def test_perftest_273_post_list_roce_gbits(tmp_path):
    parsed = perftest.parse_output(PERFTEST_273_POST_LIST)
    assert parsed["unit"] == "Gb/sec"
    assert parsed["rows"] == [{"msg_size": 8, "iterations": 224958464, "bw_peak_gbps": 0.0,
                               "bw_average_gbps": 0.48, "msg_rate_mpps": 7.498617}]
    check, extra = run_perf(tmp_path, PERFTEST_273_POST_LIST, min_gbps=0.4)
    assert (check["id"], check["status"], check["observed"]) == ("rdma.bandwidth", "pass", 0.48)
    assert extra["msg_size"] == 8
    check, _extra = run_perf(tmp_path, PERFTEST_273_POST_LIST, min_gbps=0.5)
    assert (check["status"], check["observed"]) == ("fail", 0.48)


def test_perftest_65_legacy_mb_sec_without_leading_space(tmp_path):
    (row,) = perftest.parse_output(PERFTEST_65_NO_LEADING_SPACE)["rows"]
    # by hand: 5544.28 MiB/s x 8 x 1048576 / 1e9 = 46.508792... Gb/s
    assert row["bw_average_gbps"] == pytest.approx(46.508792, abs=1e-6)
    assert (row["msg_size"], row["iterations"], row["msg_rate_mpps"]) == (1024, 1000, 5.67734)
    check, _extra = run_perf(tmp_path, PERFTEST_65_NO_LEADING_SPACE, min_gbps=46.6)
    assert check["status"] == "fail"
    check, _extra = run_perf(tmp_path, PERFTEST_65_NO_LEADING_SPACE, min_gbps=46.5)
    assert check["status"] == "pass"


@pytest.mark.parametrize("min_gbps", [None, 10.0])
def test_perftest_82_negative_average_never_passes(tmp_path, min_gbps):
    check, extra = run_perf(tmp_path, PERFTEST_82_NEGATIVE, min_gbps=min_gbps)
    assert check["status"] == "fail"
    assert extra["bw_average_gbps"] is None or extra["bw_average_gbps"] < 0


# (an EMPTY average column: finding F1, fixed, test_f1_... below)
@pytest.mark.parametrize("token", ["nan", "-nan", "inf", "-inf", "0,48", "1" + "0" * 400 + ".00", "0.48.1", "-0.48",
                                   "0.48x", "N/A"])
@pytest.mark.parametrize("min_gbps", [None, 0.1])
def test_perftest_garbled_average_is_a_failure(tmp_path, token, min_gbps):
    garbled = PERFTEST_273_POST_LIST.replace("0.48   \t\t", "%s   \t\t" % token)
    check, _extra = run_perf(tmp_path, garbled, min_gbps=min_gbps)
    assert check["status"] == "fail", check


def test_perftest_crlf_reads_the_same(tmp_path):
    check, extra = run_perf(tmp_path, PERFTEST_273_POST_LIST.replace("\n", "\r\n"), min_gbps=0.4)
    assert (check["status"], check["observed"], extra["msg_size"]) == ("pass", 0.48, 8)


def test_perftest_table_with_nonzero_exit_fails(tmp_path):
    check, _extra = run_perf(tmp_path, PERFTEST_273_POST_LIST, rc=1, min_gbps=0.1)
    assert check["status"] == "fail"


PERF_NOISE = st.sampled_from([
    # linux-rdma/perftest#372 (quoted in NVIDIA/nccl-tests#374): the warning perftest prints inside the table
    "Conflicting CPU frequency values detected: 1500.000000 != 3500.000000. CPU Frequency is not max.",
    " WARNING: BW peak won't be measured in this run.",
    "Requested mtu is higher than active mtu ",
    "Changing to active mtu - 1024",
    "ethernet_read_keys: Couldn't read remote address",
    "",
    "\t",
])


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_perftest_interleaved_warning_lines_never_change_the_figure(tmp_path_factory, data):
    lines = PERFTEST_273_POST_LIST.split("\n")
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), PERF_NOISE), max_size=5))
    for position, noise in sorted(inserts, reverse=True):
        lines.insert(position, noise)
    check, _extra = run_perf(tmp_path_factory.mktemp("root"), "\n".join(lines), min_gbps=0.1)
    if check["status"] == "pass":
        assert check["observed"] == 0.48
    else:
        assert check["status"] == "fail"


@settings(max_examples=80, deadline=None)
@given(cut=st.integers(min_value=0))
def test_perftest_truncated_report_passes_only_with_its_whole_row(tmp_path_factory, cut):
    """A report cut at any byte passes only once its result row and the dashed line perftest prints after it
    were printed, and then with the measured 0.48 (a cut INSIDE the average, "0.4", passed with 0.4 before:
    finding F6, fixed)."""
    text = PERFTEST_273_POST_LIST
    cut %= len(text) + 1
    check, _extra = run_perf(tmp_path_factory.mktemp("root"), text[:cut], min_gbps=0.1)
    if check["status"] == "pass":
        assert "7.498617\n-----" in text[:cut]
        assert check["observed"] == 0.48
    else:
        assert check["status"] == "fail"


# perftest of MLNX_OFED 24.10 (banner fields `Lock-free` and `Using DDP` next to `PCIe relax order` /
# `ibv_wr* API`), RoCE on a ConnectX-5 Ex at 100 Gb/s, MTU 1024, no --report_gbits: `MiB/sec`; the client's
# report (the server printed the same table). Source: a public Debian 12 NFS-over-RDMA setup note (Chinese,
# ConnectX-5 Ex, `modinfo mlx5_core` version 24.10-2.1.8) found in the public-code index as document
# 20239065587; the index did not name its repository (the same author's notes are skyao/learning-* on GitHub).
PERFTEST_2410_ROCE_MIB_CLIENT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON\t\tLock-free      : OFF
 ibv_wr* API     : ON\t\tUsing DDP      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x009b PSN 0x57bb8f RKey 0x1fd4bc VAddr 0x007f0e0c8aa000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:119:02
 remote address: LID 0000 QPN 0x0146 PSN 0x860b7f RKey 0x23c6bc VAddr 0x007fb25aea4000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:119:01
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
 65536      5000             11030.78            11030.45\t\t     0.176487
---------------------------------------------------------------------------------------
"""


def test_perftest_2410_roce_mib_report(tmp_path):
    (row,) = perftest.parse_output(PERFTEST_2410_ROCE_MIB_CLIENT)["rows"]
    # by hand: 11030.45 x 8 = 88243.6; x 1048576 = 92530121113.6 B/s -> 92.530121 Gb/s; cross-check with the
    # printed message rate: 0.176487 Mpps x 65536 B x 8 = 92.53 Gb/s
    assert row["bw_average_gbps"] == pytest.approx(92.530121, abs=1e-6)
    assert row["bw_peak_gbps"] == pytest.approx(11030.78 * MIB_PER_SEC_IN_GBPS, abs=1e-6)
    assert (row["msg_size"], row["iterations"], row["msg_rate_mpps"]) == (65536, 5000, 0.176487)
    assert row["bw_average_gbps"] == pytest.approx(0.176487 * 65536 * 8 / 1e3, rel=1e-4)
    check, extra = run_perf(tmp_path, PERFTEST_2410_ROCE_MIB_CLIENT, min_gbps=90)
    assert (check["status"], extra["unit"]) == ("pass", "MiB/sec")
    check, _extra = run_perf(tmp_path, PERFTEST_2410_ROCE_MIB_CLIENT, min_gbps=93)
    assert check["status"] == "fail"


@pytest.mark.parametrize("text, version", [
    # the same note: `modinfo mlx5_core` line and the Debian package version of MLNX_OFED 24.10-2.1.8's nfsrdma
    ("version:        24.10-2.1.8", "24.10-2.1.8"),
    ("24.10.OFED.24.10.2.1.8.1-1", "24.10-2.1.8.1"),
])
def test_ofed_version_filter_on_modinfo_and_package_forms(text, version):
    assert OfedFilters().filters()["ofed_version"](text) == version


# =====================================================================================================
# ofed_info -s: real strings not in the corpus
# =====================================================================================================
@pytest.mark.parametrize("output, version, flavor", [
    # Mellanox/k8s-rdma-sriov-dev-plugin issue #30 (https://github.com/Mellanox/k8s-rdma-sriov-dev-plugin/issues/30)
    ("MLNX_OFED_LINUX-5.0-2.1.8.0:\n", "5.0-2.1.8.0", "mlnx_ofed"),
    # scitix/sichek components/infiniband/checker/ofed_test.go @ dedb41cf1ad87ee8906c6f0fb72cd8ad70b512c2
    # (TestParseOFEDVersion inputs): MLNX_OFED 5.9 and 24.10, and DOCA's OFED-internal with THREE components
    ("MLNX_OFED_LINUX-5.9-0.5.6.0:\n", "5.9-0.5.6.0", "mlnx_ofed"),
    ("MLNX_OFED_LINUX-24.10-2.1.8.0:\n", "24.10-2.1.8.0", "mlnx_ofed"),
    ("OFED-internal-23.10-1.1.9:\n", "23.10-1.1.9", "doca_ofed"),
    ("OFED-internal-24.01-2.0.0:\n", "24.01-2.0.0", "doca_ofed"),
    # weka/tools install/scripts.d/ta/195_ofed.sh: the `ofed_info -n` versions it accepts, here as -s prints them
    ("MLNX_OFED_LINUX-5.8-3.0.7.0:\n", "5.8-3.0.7.0", "mlnx_ofed"),
    ("MLNX_OFED_LINUX-23.10-0.5.5.0:\n", "23.10-0.5.5.0", "mlnx_ofed"),
])
def test_ofed_info_real_strings(output, version, flavor):
    assert parse_ofed_info(output) == (version, flavor)
    assert parse_ofed_info(output.replace("\n", "\r\n")) == (version, flavor)
    assert OfedFilters().filters()["ofed_version"](output) == version


@pytest.mark.parametrize("noise", [
    "bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)\n",
    "modprobe: FATAL: Module mlx5_core not found in directory /lib/modules/6.8.0-45-generic\n",
])
def test_ofed_info_with_a_stderr_line_before_it(noise):
    assert parse_ofed_info(noise + "OFED-internal-24.01-2.0.0:\n") == ("24.01-2.0.0", "doca_ofed")


@pytest.mark.parametrize("output", ["MLNX_OFED_LINUX-:", "OFED-internal-:\n", "random-string",
                                    "ofed_info: command not found", "MLNX_OFED_LINUX-5,8-1.0.1.1:"])
def test_ofed_info_garbage_is_not_installed(output):
    assert parse_ofed_info(output) == (None, None)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=80))
def test_ofed_info_any_text_is_a_verdict_never_a_crash(text):
    version, flavor = parse_ofed_info(text)
    assert (version is None) == (flavor is None)
    assert flavor in (None, "mlnx_ofed", "doca_ofed")
    if version is not None:
        assert version in text


# =====================================================================================================
# dcgmi diag -j, DCGM 3.x: results keyed `gpu_id` (one GPU) as dcgmi printed them
# =====================================================================================================
def _dcgm_checks(output, rc=0):
    try:
        parsed, error = dcgm.parse_diag(output), None
    except dcgm.DiagError as exc:
        parsed, error = None, str(exc)
    checks = dcgm.diag_checks(parsed, rc=rc, error=error).as_list()
    json.dumps(checks, allow_nan=False)
    return checks


def _run_status(checks):
    found = [c for c in checks if c["id"] == dcgm.RUN_CHECK]
    assert found, checks
    return "fail" if any(c["status"] == "fail" for c in found) else found[0]["status"]


def _result(status):
    return {"gpu_id": "0", "status": status}


def _dcgm_139(memory_status="Skip"):
    """`dcgmi diag -r 3 -j` on a T400, DCGM 3.x: Integration, Hardware and Stress tests every one `Skip`, each
    result keyed `gpu_id` "0". Source: NVIDIA/DCGM issue #139 (https://github.com/NVIDIA/DCGM/issues/139), the
    JSON as quoted (its first category is elided there as {"..."}, so it is left out here); `version` 3.3.1
    is the version named in that thread."""
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Integration", "tests": [{"name": "PCIe", "results": [_result("Skip")]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [_result(memory_status)]},
                                           {"name": "Diagnostic", "results": [_result("Skip")]},
                                           {"name": "EUD Test", "results": [_result("Skip")]}]},
        {"category": "Stress", "tests": [{"name": "Targeted Stress", "results": [_result("Skip")]}]}],
        "version": "3.3.1"}}, indent="\t")


def test_dcgm_139_everything_skipped_is_not_a_pass():
    checks = _dcgm_checks(_dcgm_139())
    assert _run_status(checks) == "fail"
    assert not any(c["status"] == "pass" for c in checks)


def test_dcgm_139_a_failing_gpu_id_result_fails_on_its_gpu():
    checks = _dcgm_checks(_dcgm_139("Fail"))
    failing = [c for c in checks if c["id"] == dcgm.TEST_CHECK and c["status"] == "fail"]
    assert [c["target"] for c in failing] == ["gpu0/GPU Memory"]


@pytest.mark.parametrize("status", ["SKIPPED", "skip", "Skipped", "Passed", "PASSED ", "N/A", ""])
def test_dcgm_139_a_status_dcgm_never_writes_fails_the_run(status):
    checks = _dcgm_checks(_dcgm_139().replace('"Skip"', json.dumps(status), 1))
    assert _run_status(checks) == "fail"


# =====================================================================================================
# nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader (filter gpu_reset_decision):
# "a reset is allowed only when the listing worked and shows no process ... A failed or unreadable listing
# refuses (fail closed)."
# =====================================================================================================
UUID = "GPU-96ab329d-7a1f-73a8-a9b7-18b4b2855f92"  # the UUID form of gpuopenanalytics/pynvml#19's nvidia-smi output


@pytest.mark.parametrize("listing", [
    # nvidia-smi(1) RETURN VALUE (quoted in Ricks-Lab/gpu-utils#88): 9 driver not loaded, 14 infoROM corrupted,
    # 6 object not found, 4 no permission, 2 invalid field; microsoft/pai#3756: a corrupted infoROM makes
    # nvidia-smi exit 14 (the warning text as in NVIDIA/gpu-operator#20).
    {"rc": 14, "stdout": "WARNING: infoROM is corrupted at gpu 0000:B3:00.0\n", "stderr": ""},
    {"rc": 9, "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                        "that the latest NVIDIA driver is installed and running.\n", "stderr": ""},
    {"rc": 6, "stdout": "No devices were found\n", "stderr": ""},
    {"rc": 4, "stdout": "", "stderr": ""},
    {"rc": 2, "stdout": 'Field "process_name" is not a valid field to query.\n', "stderr": ""},
    # the same texts under exit status 0 (a wrapper that swallows the status): unreadable, refused
    {"rc": 0, "stdout": "WARNING: infoROM is corrupted at gpu 0000:B3:00.0\n", "stderr": ""},
    {"rc": 0, "stdout": "No devices were found\n", "stderr": ""},
    {"rc": 0, "stdout": "Failed to initialize NVML: Driver/library version mismatch\n", "stderr": ""},
    # utkuozdemir/nvidia_gpu_exporter#438: permission-restricted rows carry [N/A]-style tokens
    {"rc": 0, "stdout": "[N/A], [N/A], %s\n" % UUID, "stderr": ""},
    {"rc": 0, "stdout": "[Not Supported]\n", "stderr": ""},
    # a header line (csv without noheader) is not "no process"
    {"rc": 0, "stdout": "pid, process_name, gpu_uuid\n", "stderr": ""},
    # a process whose name NVML cannot read is still a process
    {"rc": 0, "stdout": "48213, [Insufficient Permissions], %s\n" % UUID, "stderr": ""},
    {"rc": 0, "stdout": "48213, /usr/bin/python3, %s\r\n" % UUID, "stderr": ""},
    # not a registered command result
    {"skipped": True, "changed": False},
    {"rc": "0", "stdout": "", "stderr": ""},
])
def test_gpu_reset_refused_unless_the_listing_worked_and_is_empty(listing):
    from ansible_collections.gpufleet.cluster.plugins.filter.remediation import gpu_reset_decision
    decision = gpu_reset_decision(listing)
    assert decision["allowed"] is False, decision
    assert decision["reason"].startswith("reset refused")


@settings(max_examples=150, deadline=None)
@given(rc=st.one_of(st.integers(min_value=1, max_value=255), st.integers(max_value=-1)),
       stdout=st.text(max_size=120), stderr=st.text(max_size=40))
def test_gpu_reset_never_allowed_on_a_nonzero_exit(rc, stdout, stderr):
    from ansible_collections.gpufleet.cluster.plugins.filter.remediation import gpu_reset_decision
    assert gpu_reset_decision({"rc": rc, "stdout": stdout, "stderr": stderr})["allowed"] is False


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(st.text(max_size=60), st.sampled_from(
    ["", " ", "No running processes found", "48213, /usr/bin/python3, " + UUID, "[N/A]", "WARNING"])), max_size=5),
    newline=st.sampled_from(["\n", "\r\n"]))
def test_gpu_reset_allowed_only_on_an_empty_listing(lines, newline):
    """Exit 0: allowed only when nothing but blank lines (or the table's "No running processes found") was
    printed; any other text is a process or an unreadable listing."""
    from ansible_collections.gpufleet.cluster.plugins.filter.remediation import gpu_reset_decision
    decision = gpu_reset_decision({"rc": 0, "stdout": newline.join(lines), "stderr": ""})
    if decision["allowed"]:
        assert all(line.strip() in ("", "No running processes found") for line in lines), decision
        assert decision["processes"] == []


# =====================================================================================================
# Findings F1-F6 of this red team (were failing; fixed, see changelogs/fragments/tool-output-parsers-redteam.yml)
# =====================================================================================================

# F1: the real report of linux-rdma/perftest#273 with its average field left empty:
#   " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
#   " 8          224958464        0.00                  \t\t   7.498617"
# was a pass at 7.498617 "Gb/s" (the message rate read as the average: a 4-field row taken as a layout without
# MsgRate although its header has that column). Now an incomplete result row: the run fails naming it.
@pytest.mark.parametrize("min_gbps", [None, 0.1])
def test_f1_empty_average_column_is_not_the_message_rate(tmp_path, min_gbps):
    garbled = PERFTEST_273_POST_LIST.replace("0.48   \t\t", "   \t\t")
    check, extra = run_perf(tmp_path, garbled, min_gbps=min_gbps)
    assert check["status"] == "fail", check
    assert "incomplete result row" in check["message"] and "8 224958464 0.00 7.498617" in check["message"]
    assert extra["bw_average_gbps"] is None and extra["rows"] == []


# F2: the real output of NVIDIA/nccl#1706 cut inside its last figure (a log truncated by bytes, a job killed
# mid-write): "# Avg bus bandwidth    : 8.6" (printed: 8.62002) passed with 8.6. Now the average line counts
# only when the `#` line nccl-tests prints after it follows (src/common.cu, src/util.cu writeResultFooter).
@pytest.mark.parametrize("cut_after", ["8", "8.6", "8.620", "8.62002", "8.62002 "])
def test_f2_average_line_cut_inside_the_figure_is_incomplete(cut_after):
    text = NCCL_1706_TWO_GPUS
    prefix = text[: text.index("8.62002") + len(cut_after)]
    busbw = statuses(prefix, 0.1)["k8s.nccl.busbw"]
    assert busbw["status"] == "fail", busbw
    assert "cut" in busbw["message"] and busbw["observed"] is None
    assert statuses(text, 0.1)["k8s.nccl.busbw"]["status"] == "pass"


# F3: the real output of NVIDIA/nccl-tests#287 (alltoall_perf on one GPU, every busbw 0.00,
# "# Avg bus bandwidth    : 0 ") passed without a threshold (the burn-in default). A run that moved nothing
# over any bus now fails, threshold or not (contract change, docs/contracts.md k8s.nccl.busbw).
def test_f3_zero_average_is_not_a_pass_without_threshold():
    busbw = statuses(NCCL_287_ONE_GPU_ALLTOALL)["k8s.nccl.busbw"]
    assert busbw["status"] == "fail"
    assert busbw["message"].startswith("no data moved: average bus bandwidth 0.00 GB/s")
    assert busbw["observed"] == 0.0


def test_f3_burnin_nccl_zero_average_is_not_a_pass():
    command = ["/opt/nccl-tests/alltoall_perf", "-b", "32M", "-e", "32M", "-g", "1"]
    runner = ScriptedRunner(script={command[0]: (0, NCCL_287_ONE_GPU_ALLTOALL, "")})
    checks = dcgm.run_nccl(runner, command, timeout=30).as_list()
    assert [c["status"] for c in checks if c["id"] == "k8s.nccl.busbw"] == ["fail"], checks


# F4: the real report of linux-rdma/perftest#273 with the average 0.00 and MsgRate 0.000000 (a stalled link)
# passed without min_gbps. Now "no data moved" fails, min_gbps or not (contract change, rdma.bandwidth).
@pytest.mark.parametrize("min_gbps", [None, 0.0])
def test_f4_zero_perftest_average_is_not_a_pass_without_min_gbps(tmp_path, min_gbps):
    zero = PERFTEST_273_POST_LIST.replace("0.48   \t\t   7.498617", "0.00   \t\t   0.000000")
    check, _extra = run_perf(tmp_path, zero, min_gbps=min_gbps)
    assert check["status"] == "fail", check
    assert check["message"].startswith("no data moved: average 0.00 Gb/s")


# F5: rows of NVIDIA/nccl#1453 with the `[0]` label an MPI puts before every write failed as "no '# Avg bus
# bandwidth' line ... (run incomplete)" although the line is there. Now the failure names the first line that
# looks like a summary, header or row and was not understood.
def test_f5_unknown_prefix_failure_names_the_prefix():
    busbw = statuses(NCCL_1453_RANK_LABEL_PER_WRITE, 1)["k8s.nccl.busbw"]
    assert busbw["status"] == "fail"
    assert "incomplete" not in busbw["message"]
    assert "not understood: '[0]#       size         count      type" in busbw["message"], busbw["message"]
    assert parse_nccl_tests(NCCL_1453_RANK_LABEL_PER_WRITE)["unread"][-1].startswith("[0]# Avg bus bandwidth")


# F6: the real report of linux-rdma/perftest#273 cut inside the average ("... 0.00               0.4") passed
# with 0.4; cut inside its MsgRate it passed too. Now the row is incomplete (4 of 5 columns), and a report
# whose last row is not followed by perftest's dashed RESULT_LINE was cut (src/write_bw.c).
@pytest.mark.parametrize("cut_at, words", [("0.48   ", "incomplete result row"), ("7.49", "report cut"),
                                           ("7.498617\n", "report cut")])
def test_f6_report_cut_inside_the_average_is_no_result(tmp_path, cut_at, words):
    text = PERFTEST_273_POST_LIST
    prefix = text[: text.index(cut_at) + (3 if cut_at == "0.48   " else len(cut_at))]
    check, _extra = run_perf(tmp_path, prefix, min_gbps=0.1)
    assert check["status"] == "fail", check
    assert words in check["message"]
