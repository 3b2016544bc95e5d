"""fleet_report enabled from ansible.cfg during a real ansible-playbook run over three local "nodes"."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOKS = os.path.join(REPO, "tests", "integration", "playbooks")
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
FAKE = os.path.join(REPO, "tests", "integration", "bin", "fake_ib_write_bw")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def run_playbook(cwd, report_dir=None):
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(REPO, "ansible.cfg")
    env.pop("GPUFLEET_REPORT_DIR", None)
    if report_dir is not None:
        env["GPUFLEET_REPORT_DIR"] = str(report_dir)
    argv = [ANSIBLE_PLAYBOOK, "-i", os.path.join(PLAYBOOKS, "inventory", "hosts.yml"),
            os.path.join(PLAYBOOKS, "fleet_report.yml"), "-e", "fake_perftest=%s" % FAKE]
    return subprocess.run(argv, check=False, cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("fleet") / "reports"
    proc = run_playbook(REPO, report_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, report_dir


def test_summary_printed_worst_first(fleet_run):
    proc, report_dir = fleet_run
    out = proc.stdout
    assert "FLEET REPORT" in out
    summary = out.split("FLEET REPORT", 1)[1].splitlines()
    assert any(line.startswith("3 host(s): 1 unhealthy, 1 with warnings, 1 healthy") for line in summary)
    hosts = [line.split()[0] for line in summary if line.startswith("node-")]
    assert hosts == ["node-02", "node-03", "node-01"]
    assert "reports: %s" % (report_dir / "fleet-report.json") in out
    assert "Skipping callback plugin" not in proc.stderr


def test_json_report_written(fleet_run):
    _proc, report_dir = fleet_run
    report = json.loads((report_dir / "fleet-report.json").read_text())
    assert list(report["hosts"]) == ["node-02", "node-03", "node-01"]
    node2 = report["hosts"]["node-02"]
    assert node2["healthy"] is False and node2["summary"]["fail"] == 2  # from the failed (rescued) task
    node1 = report["hosts"]["node-01"]
    bandwidth = [c for c in node1["checks"] if c["id"] == "rdma.bandwidth"][0]
    assert (bandwidth["status"], bandwidth["target"], bandwidth["observed"]) == ("pass", "mlx5_0/1", 392.21)
    assert report["totals"]["hosts"] == 3 and report["totals"]["unhealthy"] == 1
    assert report["playbook"] == "fleet_report.yml"
    assert report["bandwidth_matrices"][0]["title"] == "fabric all-to-all"


def test_junit_written(fleet_run):
    _proc, report_dir = fleet_run
    root = ET.parse(str(report_dir / "junit.xml")).getroot()
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert set(suites) == {"node-01", "node-02", "node-03"}
    failures = [case.get("name") for case in suites["node-02"].findall("testcase")
                if case.find("failure") is not None]
    assert failures == ["gpu.count[node]", "gpu.ecc.volatile_uncorrectable[gpu3]"]
    assert root.get("failures") == "2"


def test_html_written(fleet_run):
    _proc, report_dir = fleet_run
    page = (report_dir / "fleet-report.html").read_text()
    assert '<table class="grid">' in page and '<table class="matrix">' in page
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#39;ecc&#39;)&lt;/script&gt;" in page
    for group in ("gpu.count", "gpu.ecc", "gpu.clocks_event", "rdma.port", "rdma.bandwidth"):
        assert "<span>%s</span>" % group in page


def test_default_directory_is_reports_below_the_current_directory(tmp_path):
    proc = run_playbook(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = sorted(os.listdir(str(tmp_path / "reports")))
    assert written == ["fleet-report.html", "fleet-report.json", "junit.xml"]
