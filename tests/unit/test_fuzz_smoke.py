"""A small run of the fuzz target (tests/fuzz/run_fuzz.py; the full run is `make fuzz`), fault cases included."""

import os
import sys

from conftest import TESTS

sys.path.insert(0, os.path.join(TESTS, "fuzz"))

import run_fuzz  # noqa: E402


def test_fuzz_smoke_run_has_no_crash_hang_or_undeliverable_result():
    args = run_fuzz.argparse.Namespace(trees=60, inputs=300, faults=30, seed=7, timeout=2.0)
    figures, classes, failures = run_fuzz.run(args)
    assert (figures["trees"], figures["inputs"], figures["faults"]) == (60, 300, 30)
    assert figures["crashes"] == figures["hangs"] == figures["undeliverable"] == figures["escaped_reads"] == 0, failures[:3]
    # NVML errors and sysfs read faults on required readings: never a healthy node
    assert figures["fail_open"] == 0 and figures["faults_on_required"] > 10, failures[:3]
    # the hostile classes were really exercised
    assert {"fifo", "socket", "loop", "escape", "dir_for_file", "huge_file"} <= set(classes)
