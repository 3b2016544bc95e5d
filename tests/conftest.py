"""Make the checkout importable as ansible_collections.gpufleet.cluster for unit tests; the fixtures
shared by tests of several directories (one conftest.py only: tests import names from `conftest`)."""

import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
TESTS = os.path.join(REPO, "tests")
FIXTURES = os.path.join(TESTS, "fixtures")
VENV_BIN = os.path.join(REPO, ".venv", "bin")

for path in (COLLECTIONS, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test (dmesg --ctime and syslog lines print the host's local time;
    the captures' clocks are read as UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def local_tz():
    """A function that sets the process's TZ (os.environ + time.tzset) for the test; the TZ of
    before is restored after it (time is checked in several zones: docs/contracts.md, "Time")."""
    saved = os.environ.get("TZ")

    def use(zone):
        os.environ["TZ"] = zone
        time.tzset()

    yield use
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


@pytest.fixture(scope="session")
def whole_fleet_report(tmp_path_factory):
    """The report directory of one ansible-playbook run of playbooks/validate.yml over the whole
    fleet of fleet_inventory.FLEET on this machine (the venv, this checkout): what a sliced run
    (test_job_slicing) and a job in the execution environment (test_execution_environment) are
    compared with, check by check."""
    if not os.path.exists(os.path.join(VENV_BIN, "ansible-playbook")):
        pytest.skip("run `make setup` first")
    work = tmp_path_factory.mktemp("whole-fleet")
    env = dict(os.environ)
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO", "GPUFLEET_REPORT_JOB"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "GPUFLEET_REPORT_DIR": str(work / "reports"),
                "GPUFLEET_REPORT_HTML": "false", "PATH": VENV_BIN + os.pathsep + env.get("PATH", "")})
    from fleet_inventory import inventory, write  # pylint: disable=import-outside-toplevel

    hosts = write(work / "hosts.json", inventory(os.path.join(REPO, "tests"), os.path.join(VENV_BIN, "python")))
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", hosts,
                           os.path.join(REPO, "playbooks", "validate.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return work / "reports"
