"""Fixtures shared by integration tests."""

import os
import subprocess

import pytest

from fleet_inventory import inventory, write

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")


@pytest.fixture(scope="session")
def whole_fleet_report(tmp_path_factory):
    """The report directory of one ansible-playbook run of playbooks/validate.yml over the whole
    fleet of fleet_inventory.FLEET on this machine (the venv, this checkout): what a sliced run
    (test_job_slicing) and a job in the execution environment (test_execution_environment) are
    compared with, check by check."""
    if not os.path.exists(os.path.join(BIN, "ansible-playbook")):
        pytest.skip("run `make setup` first")
    work = tmp_path_factory.mktemp("whole-fleet")
    env = dict(os.environ)
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO", "GPUFLEET_REPORT_JOB"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "GPUFLEET_REPORT_DIR": str(work / "reports"),
                "GPUFLEET_REPORT_HTML": "false", "PATH": BIN + os.pathsep + env.get("PATH", "")})
    hosts = write(work / "hosts.json", inventory(os.path.join(REPO, "tests"), os.path.join(BIN, "python")))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", hosts,
                           os.path.join(REPO, "playbooks", "validate.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return work / "reports"
