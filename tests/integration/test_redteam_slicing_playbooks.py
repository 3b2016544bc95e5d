"""Red team slicing (issue 45 items 1-2) through a real ansible-playbook: the fleet_report callback's
options as AWX passes them (environment variables of the job's execution environment)."""

import os
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
PLAY = "Validate GPU and RDMA readiness"

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="run `make setup` first")


@pytest.mark.parametrize("value", ["lots", "0"])
def test_keep_runs_from_the_environment_not_a_number(tmp_path, value):
    """GPUFLEET_REPORT_KEEP_RUNS=lots made ansible-core drop the callback with a warning (option type
    int): the run ended green without a report. Now: an error line naming the variable, and the report
    written keeping the default 20 runs (docs/reports.md)."""
    reports = tmp_path / "reports"
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": PLAY, "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "record", "gpufleet.cluster.record_checks": {
            "checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8"}]}}]}]))
    env = dict(os.environ, GPUFLEET_REPORT_DIR=str(reports), GPUFLEET_REPORT_KEEP_RUNS=value,
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    env.pop("GPUFLEET_REPORT_JOB", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + os.path.join(BIN, "python"), str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert "GPUFLEET_REPORT_KEEP_RUNS" in output and "keep_runs" in output, output[-1500:]
    assert "ERROR" in output, output[-1500:]
    assert os.path.exists(str(reports / "fleet-report.json")), (proc.returncode, output[-1500:])
