"""The accelerated mode (scripts/accelerated.sh: Mitogen with gpufleet_mitogen_linear) gives the same
fleet report and the same failed nodes as the plain mode, on 10 simulated hosts of bench/fleet_validate.py
(6 DGX H100 with the fake NVML, 2 degraded HDR nodes, 2 empty nodes) with fail_on: fail, so the
failing-node play runs too. Correctness only: the speed is measured by bench/fleet_validate.py."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))

import fleet_validate as bench  # noqa: E402  (bench/ is not a package)

try:
    import ansible_mitogen  # noqa: F401
except ImportError:
    ansible_mitogen = None

pytestmark = [
    pytest.mark.skipif(not os.path.exists(bench.PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(ansible_mitogen is None, reason="mitogen is not installed (make setup installs the pinned version)"),
]


def sweep(workdir, inventory, accelerated):
    env = bench.environment(str(workdir), None)
    env["GPUFLEET_REPORT_DIR"] = str(workdir / ("reports-accelerated" if accelerated else "reports-plain"))
    env["ANSIBLE_NOCOLOR"] = "1"
    argv = [bench.PLAYBOOK, "-i", inventory, bench.os.path.join(REPO, "playbooks", "validate.yml"),
            "-e", "gpufleet_validate_fail_on=fail"]
    if accelerated:
        argv = ["bash", bench.ACCELERATED] + argv
    proc = subprocess.run(argv, cwd=str(workdir), env=env, capture_output=True, text=True, timeout=600, check=False)
    return proc, bench.recap_counts(proc.stdout), env["GPUFLEET_REPORT_DIR"]


def test_accelerated_sweep_equals_the_plain_one(tmp_path):
    inventory = bench.build(str(tmp_path), 10)
    plain, plain_recap, plain_dir = sweep(tmp_path, inventory, accelerated=False)
    fast, fast_recap, fast_dir = sweep(tmp_path, inventory, accelerated=True)
    for proc in (plain, fast):
        assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # the degraded nodes fail
    assert "gpufleet_mitogen_linear" not in plain.stdout + plain.stderr
    failed = sorted(host for host, counts in plain_recap.items() if counts["failed"])
    assert failed == ["node0006", "node0007"]  # PATTERN: hosts 6 and 7 of each 10 are hdr-degraded
    assert sorted(host for host, counts in fast_recap.items() if counts["failed"]) == failed
    assert plain_recap == fast_recap
    # the few-line failure, not the whole result, in both modes
    for proc in (plain, fast):
        assert sorted(line.split()[1] for line in proc.stdout.splitlines()
                      if line.startswith("fatal: ")) == ["[node0006]:", "[node0007]:"]
        assert "failing check(s): rdma.port." in proc.stdout  # one line at the default verbosity
        assert "elapsed_ms" not in proc.stdout  # a key of every whole result
    differences, compared = bench.compare_reports(plain_dir, fast_dir)
    assert compared > 400 and differences == []
