"""AWX job slicing of playbooks/validate.yml (docs/awx.md): K slices running at once, real
ansible-playbook processes writing ONE report directory, give the fleet report of one run of
the whole inventory, check by check; with keep_runs below K too (the slices of one job are
kept together: no slice pushes another slice's hosts out of the picture)."""

import json
import os
import subprocess

import pytest

from fleet_inventory import FLEET, awx_slices, inventory, report_checks, write

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
VALIDATE = os.path.join(REPO, "playbooks", "validate.yml")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="run `make setup` first")


def start(inventory_path, report_dir, *extra, keep_runs=20):
    env = dict(os.environ)
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO", "GPUFLEET_REPORT_JOB"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "GPUFLEET_REPORT_DIR": str(report_dir),
                "GPUFLEET_REPORT_KEEP_RUNS": str(keep_runs), "GPUFLEET_REPORT_HTML": "false",
                "PATH": BIN + os.pathsep + env.get("PATH", "")})
    return subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "-i", inventory_path, VALIDATE] + list(extra),
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process):
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    return out


def test_three_slices_at_once_give_the_report_of_one_run(tmp_path, whole_fleet_report):
    tests = os.path.join(REPO, "tests")
    python = os.path.join(BIN, "python")
    slices = awx_slices(FLEET, 3)
    assert slices == [["node-01", "node-04"], ["node-02", "node-05"], ["node-03", "node-06"]]
    paths = [write(tmp_path / ("slice-%d.json" % n), inventory(tests, python, hosts)) for n, hosts in
             enumerate(slices, 1)]
    one_dir, sliced_dir = whole_fleet_report, tmp_path / "sliced"
    # the three slices of job 4242 at once (keep_runs 2 < 3 slices)
    processes = [start(path, sliced_dir, "-e", "awx_workflow_job_id=4242", keep_runs=2) for path in paths]
    for process in processes:
        finish(process)

    one, one_checks = report_checks(one_dir)
    sliced, sliced_checks = report_checks(sliced_dir)
    assert sorted(sliced["hosts"]) == sorted(FLEET) == sorted(one["hosts"])
    assert len(one_checks) > 6 * 10
    assert sliced_checks == one_checks  # check by check, every field
    for name in FLEET:
        for field in ("status", "healthy", "severity", "summary", "facts"):
            assert sliced["hosts"][name].get(field) == one["hosts"][name].get(field), (name, field)
    assert sliced["totals"] == one["totals"]
    assert list(sliced["hosts"]) == list(one["hosts"])  # ranked the same, worst first
    assert one["totals"]["unhealthy"] >= 2
    # three runs of one job, all kept although keep_runs is 2; each slice's run holds its hosts
    runs = sorted(n for n in os.listdir(str(sliced_dir / "runs")) if not n.startswith(".") and n != "latest")
    assert len(runs) == 3
    seen = []
    for name in runs:
        with open(str(sliced_dir / "runs" / name / "fleet-report.json")) as handle:
            run = json.load(handle)
        assert run["run"]["job"] == "4242"
        seen.append(sorted(run["hosts"]))
    assert sorted(seen) == sorted(slices)
    assert sorted(r["id"] for r in sliced["runs"]) == runs
    with open(str(sliced_dir / "runs" / ".sequence")) as handle:
        assert json.load(handle)["jobs"] == dict((name, "4242") for name in runs)
