"""fleet_report enabled from ansible.cfg during a real ansible-playbook run over three local "nodes"."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
import test_collection_install
from installed_collection import clean_env

installed = test_collection_install.installed  # the collection built and installed from its tarball

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
    assert '<table class="grid" id="hosts">' in page and '<table class="matrix">' in page
    assert page.count("<script") == 1 and "<script src" not in page  # the page's own sort/filter script
    assert "&lt;script&gt;alert(&#39;ecc&#39;)&lt;/script&gt;" in page
    for group in ("gpu.count", "gpu.ecc", "gpu.clocks_event", "rdma.port", "rdma.bandwidth"):  # grouped by family
        family, label = group.split(".", 1)
        assert 'data-family="%s" title="%s"><span>%s</span>' % (family, group, label) in page


def test_default_directory_is_reports_below_the_current_directory(tmp_path):
    proc = run_playbook(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = sorted(os.listdir(str(tmp_path / "reports")))
    assert written == ["fleet-report.html", "fleet-report.json", "junit-fleet.xml", "junit.xml", "runs"]
    runs = sorted(name for name in os.listdir(str(tmp_path / "reports" / "runs")) if not name.startswith("."))
    assert len(runs) == 2 and runs[1] == "latest" and runs[0].endswith("Z-fleet_report"), runs
    assert os.readlink(str(tmp_path / "reports" / "runs" / "latest")) == runs[0]
    assert sorted(os.listdir(str(tmp_path / "reports" / "runs" / runs[0]))) == [
        "fleet-report.html", "fleet-report.json", "junit.xml"]


@pytest.fixture(scope="module")
def lost_hosts_run(tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("lost") / "reports"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(report_dir))
    argv = [ANSIBLE_PLAYBOOK, "-i", os.path.join(PLAYBOOKS, "inventory", "lost_hosts.yml"),
            os.path.join(PLAYBOOKS, "fleet_report_lost_hosts.yml")]
    proc = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout  # failed and unreachable hosts fail the run
    assert "fatal: [node-crash]" in proc.stdout and "UNREACHABLE!" in proc.stdout, proc.stdout + proc.stderr
    return proc, report_dir


def _no_constants(constant):
    raise AssertionError("non-JSON constant %s" % constant)


def test_crashed_timed_out_early_failed_and_unreachable_hosts_are_reported(lost_hosts_run):
    proc, report_dir = lost_hosts_run
    with open(str(report_dir / "fleet-report.json")) as handle:
        report = json.loads(handle.read(), parse_constant=_no_constants)
    hosts = report["hosts"]
    assert sorted(hosts) == ["node-crash", "node-down", "node-early", "node-ok", "node-slow"]
    assert report["totals"]["hosts"] == 5 and report["totals"]["unhealthy"] == 4
    assert hosts["node-ok"]["healthy"] is True
    by_host = dict((name, dict(((c["id"], c["target"]), c) for c in host["checks"])) for name, host in hosts.items())
    crash = by_host["node-crash"][("host.validation", "Run the node checks")]
    assert crash["status"] == "fail" and "sysfs tree exploded" in crash["message"]
    slow = by_host["node-slow"][("host.validation", "Run the node checks")]
    assert slow["status"] == "fail" and "Timeout exceeded" in slow["message"]
    early = by_host["node-early"][("host.validation", "node")]
    assert early["message"] == ("not validated in play 'Validate a fleet where hosts crash, "
                                "time out, fail early or cannot be reached': task 'Prepare the node' failed: "
                                "preparation failed on purpose")
    down = by_host["node-down"][("host.unreachable", "node")]
    assert down["status"] == "fail" and down["message"].startswith("unreachable: ")
    assert hosts["node-down"]["unreachable"] is True and hosts["node-crash"]["validation_failed"] is True
    for name in ("node-crash", "node-slow", "node-early", "node-down"):
        assert hosts[name]["healthy"] is False

    summary = proc.stdout.split("FLEET REPORT", 1)[1].splitlines()
    assert any(line.startswith("5 host(s): 4 unhealthy, 0 with warnings, 1 healthy") for line in summary)

    root = ET.parse(str(report_dir / "junit.xml")).getroot()
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert set(suites) == set(hosts) and root.get("failures") == "4"
    assert suites["node-crash"].find("testcase").get("name") == "host.validation[Run the node checks]"
    assert "sysfs tree exploded" in suites["node-crash"].find("testcase").find("failure").get("message")

    page = (report_dir / "fleet-report.html").read_text()
    for needle in ("node-crash", "node-slow", "node-early", "node-down", "sysfs tree exploded", "Timeout exceeded",
                   "preparation failed on purpose", "host.unreachable[node]"):
        assert needle in page


def test_ansible_config_validate_is_clean_for_the_checkout_and_the_readme_snippet(tmp_path):
    """`ansible-config validate -t all` on the checkout's ansible.cfg and on the site ansible.cfg the
    README shows (collections path pointed at this checkout)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    snippet = readme.split("cat > ansible.cfg <<'CFG'\n", 1)[1].split("\nCFG\n", 1)[0]
    assert "callbacks_enabled = gpufleet.cluster.fleet_report" in snippet
    site_cfg = tmp_path / "ansible.cfg"
    site_cfg.write_text(snippet.replace("[defaults]\n", "[defaults]\ncollections_path = %s\n"
                                        % os.path.join(REPO, ".collections"), 1) + "\n")
    for config in (os.path.join(REPO, "ansible.cfg"), str(site_cfg)):
        env = dict(os.environ, ANSIBLE_CONFIG=config)
        proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-config"), "validate", "-t", "all"],
                              cwd=os.path.dirname(config), env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0 and "All configurations seem valid!" in proc.stdout, (
            config, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def daytwo_run(tmp_path_factory):
    """Issue 42 items 7 and 8: a task delegated to a control plane that cannot be reached, a GPU node
    whose every check skips, a serial play stopped by an unreachable host; the console callback of
    the README's ansible.cfg (stdout_callback = gpufleet.cluster.console, callback_result_format = yaml)."""
    report_dir = tmp_path_factory.mktemp("daytwo") / "reports"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(report_dir),
               ANSIBLE_STDOUT_CALLBACK="gpufleet.cluster.console", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    argv = [ANSIBLE_PLAYBOOK, "-i", os.path.join(PLAYBOOKS, "inventory", "daytwo.yml"),
            os.path.join(PLAYBOOKS, "fleet_report_daytwo.yml")]
    proc = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # unreachable hosts
    return proc, report_dir


def test_console_one_line_per_unreachable_host_naming_the_delegate(daytwo_run):
    proc, _report_dir = daytwo_run
    out = proc.stdout
    lines = out.splitlines()
    delegated = [line for line in lines if "UNREACHABLE!" in line]
    assert delegated == [
        "fatal: [worker-01 -> cp-down]: UNREACHABLE! cp-down cannot be reached: ssh: connect to host 127.0.0.2 "
        "port 9: Connection refused",
        "fatal: [cp-down]: UNREACHABLE! ssh: connect to host 127.0.0.2 port 9: Connection refused"]
    # nothing else of the unreachable results: no [ERROR] copy, no source lines, no result dump
    assert "[ERROR]" not in out + proc.stderr and "Origin:" not in out and "unreachable: true" not in out
    summary = out.split("FLEET REPORT", 1)[1].splitlines()
    assert ("2 host(s) of play 'Remediate one node at a time' never considered (the play stopped after cp-down "
            "unreachable): worker-04, worker-05") in summary
    cp = [line for line in summary if line.startswith("cp-down ")][0]
    assert cp.endswith("host.unreachable[node]: ssh: connect to host 127.0.0.2 port 9: Connection refused")
    worker = [line for line in summary if line.startswith("worker-01 ")][0]
    assert worker.endswith("its delegate cp-down is unreachable: ssh: connect to host 127.0.0.2 port 9: "
                           "Connection refused")


def test_report_blames_the_delegate_lists_unconsidered_hosts_and_unvalidated_gpu_nodes(daytwo_run):
    _proc, report_dir = daytwo_run
    report = json.loads((report_dir / "fleet-report.json").read_text())
    assert report["schema_version"] == 1
    hosts = report["hosts"]
    assert sorted(hosts) == ["cp-down", "worker-01", "worker-02", "worker-03"]
    assert hosts["cp-down"]["unreachable"] is True
    assert hosts["worker-01"]["unreachable"] is False and hosts["worker-01"]["validation_failed"] is True
    assert hosts["worker-02"]["healthy"] is False  # a gpu_nodes host whose every check skipped
    assert hosts["worker-03"]["healthy"] is True
    assert report["not_considered"] == [{"play": "Remediate one node at a time", "hosts": ["worker-04", "worker-05"],
                                         "reason": "the play stopped after cp-down unreachable"}]
    page = (report_dir / "fleet-report.html").read_text()
    assert "https://" not in page and "http://" not in page


def test_installed_collection_with_the_readme_config_prints_one_line_per_unreachable_host(tmp_path, request):
    """As a user runs it: the collection built and installed from its tarball, the README's site
    ansible.cfg (stdout_callback = gpufleet.cluster.console, callback_result_format = yaml, the
    fleet_report callback), a directory outside the checkout."""
    _tarball, collections = request.getfixturevalue("installed")
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        snippet = handle.read().split("cat > ansible.cfg <<'CFG'\n", 1)[1].split("\nCFG\n", 1)[0]
    site = tmp_path / "site"
    site.mkdir()
    (site / "ansible.cfg").write_text(snippet.replace("inventory = ./inventory/hosts.yml",
                                                      "inventory = %s" % os.path.join(PLAYBOOKS, "inventory",
                                                                                      "daytwo.yml")) + "\n")
    env = clean_env(collections)
    env["ANSIBLE_CONFIG"] = str(site / "ansible.cfg")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, os.path.join(PLAYBOOKS, "fleet_report_daytwo.yml")], cwd=str(site),
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 4, out + proc.stderr
    assert [line for line in out.splitlines() if "UNREACHABLE!" in line] == [
        "fatal: [worker-01 -> cp-down]: UNREACHABLE! cp-down cannot be reached: ssh: connect to host 127.0.0.2 "
        "port 9: Connection refused",
        "fatal: [cp-down]: UNREACHABLE! ssh: connect to host 127.0.0.2 port 9: Connection refused"]
    assert "[ERROR]" not in out and "never considered" in out
    report = json.loads((site / "reports" / "fleet-report.json").read_text())
    assert report["schema_version"] == 1 and report["hosts"]["cp-down"]["unreachable"] is True
