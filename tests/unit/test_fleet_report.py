"""fleet_report callback driven directly with Ansible's CallbackTaskResult and Host objects."""

import json
import os
import xml.etree.ElementTree as ET

import pytest
import yaml
from ansible import constants as C
from ansible.executor.task_result import CallbackTaskResult
from ansible.inventory.host import Host

from ansible_collections.gpufleet.cluster.plugins.callback import fleet_report
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report as model

PLUGIN = "gpufleet.cluster.fleet_report"


class RecordingDisplay:
    """Stands in for ansible.utils.display.Display and keeps what would have been printed."""

    verbosity = 0

    def __init__(self):
        self.lines = []
        self.warnings = []

    def display(self, msg, color=None, **_kwargs):
        self.lines.append(msg)

    def banner(self, msg, **_kwargs):
        self.lines.append("== %s" % msg)

    def warning(self, msg, **_kwargs):
        self.warnings.append(msg)

    def vvv(self, msg, **_kwargs):
        self.lines.append("vvv: %s" % msg)


class FakeTask:
    delegate_to = None
    no_log = False
    action = "gpufleet.cluster.node_validate"

    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


def make_callback(monkeypatch=None, **options):
    C.config.initialize_plugin_configuration_definitions(
        "callback", PLUGIN, yaml.safe_load(fleet_report.DOCUMENTATION)["options"])
    display = RecordingDisplay()
    callback = fleet_report.CallbackModule(display=display)
    callback._load_name = PLUGIN
    callback.set_options(direct=options or None)
    return callback, display


def result(host, data, task="validate node"):
    return CallbackTaskResult(Host(host), FakeTask(task), data, {"name": task})


def chk(check_id, target, status, message="", **extra):
    check = {"id": check_id, "target": target, "status": status, "message": message}
    check.update(extra)
    return check


def node_checks(fail_ecc=False, warn_clock=False):
    return [
        chk("gpu.count", "node", "pass", "8 GPUs"),
        chk("gpu.ecc.volatile_uncorrectable", "gpu3", "fail" if fail_ecc else "pass",
            "2 volatile uncorrectable ECC errors" if fail_ecc else "0",
            observed=2 if fail_ecc else 0, expected=0),
        chk("gpu.clocks_event", "gpu0", "warn" if warn_clock else "pass",
            "HW slowdown active" if warn_clock else ""),
        chk("gpu.nvlink", "gpu0", "skip", "MIG enabled"),
        chk("rdma.port.state", "mlx5_0/1", "pass", "ACTIVE"),
    ]


def run_playbook(callback, results, failed=()):
    for res in results:
        if res in failed:
            callback.v2_runner_on_failed(res)
        else:
            callback.v2_runner_on_ok(res)
    callback.v2_playbook_on_stats(None)


def load(tmp_path):
    with open(os.path.join(str(tmp_path), "fleet-report.json")) as handle:
        report = json.load(handle)
    junit = ET.parse(os.path.join(str(tmp_path), "junit.xml")).getroot()
    with open(os.path.join(str(tmp_path), "fleet-report.html")) as handle:
        page = handle.read()
    return report, junit, page


def test_json_collects_ok_and_failed_results_latest_wins(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    bad = result("node-02", {"failed": True, "msg": "1 check failed", "checks": node_checks(fail_ecc=True)})
    results = [
        result("node-01", {"checks": node_checks()}),
        bad,
        result("node-03", {"checks": node_checks(warn_clock=True)}),
        result("node-04", {"changed": False}),  # no checks: not part of the report
        # re-validation of node-03 after remediation: replaces the warn, keeps the others
        result("node-03", {"checks": [chk("gpu.clocks_event", "gpu0", "pass", "no throttling")]},
               task="revalidate"),
    ]
    run_playbook(callback, results, failed=[bad])
    report, _junit, _page = load(tmp_path)
    assert list(report["hosts"]) == ["node-02", "node-01", "node-03"]  # worst first, then by name
    node2 = report["hosts"]["node-02"]
    assert node2["healthy"] is False
    assert node2["summary"] == {"pass": 3, "warn": 0, "fail": 1, "skip": 1}
    ecc = [c for c in node2["checks"] if c["id"] == "gpu.ecc.volatile_uncorrectable"][0]
    assert ecc["observed"] == 2 and ecc["expected"] == 0 and ecc["task"] == "validate node"
    node3 = report["hosts"]["node-03"]
    assert node3["summary"]["warn"] == 0 and len(node3["checks"]) == 5
    assert [c["id"] for c in node3["checks"]][2] == "gpu.clocks_event"  # position of first sighting kept
    assert node3["checks"][2]["task"] == "revalidate"
    assert report["totals"] == {"pass": 11, "warn": 0, "fail": 1, "skip": 3, "hosts": 3, "healthy": 2,
                                "unhealthy": 1, "with_warnings": 0}
    assert report["generated_at"].endswith("Z")
    assert "== FLEET REPORT" in display.lines
    assert any(line.startswith("reports: ") for line in display.lines)


def test_loop_items_and_unreachable_hosts(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    looped = result("node-01", {"results": [
        {"checks": [chk("rdma.port.state", "mlx5_0/1", "pass", "ACTIVE")]},
        {"checks": [chk("rdma.port.state", "mlx5_1/1", "fail", "DOWN")]},
        {"skipped": True}]})
    callback.v2_runner_on_ok(looped)
    callback.v2_runner_on_unreachable(result("node-09", {"unreachable": True, "msg": "ssh: timed out"}))
    callback.v2_runner_on_unreachable(result("node-10", {"unreachable": True, "msg": "ssh: refused"}))
    callback.v2_runner_on_ok(result("node-10", {"checks": [chk("gpu.count", "node", "pass", "8")]}))
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    assert [c["target"] for c in report["hosts"]["node-01"]["checks"]] == ["mlx5_0/1", "mlx5_1/1"]
    node9 = report["hosts"]["node-09"]
    assert node9["unreachable"] is True and node9["healthy"] is False
    assert node9["checks"][0]["id"] == "host.unreachable"
    assert "ssh: timed out" in node9["checks"][0]["message"]
    assert report["hosts"]["node-10"]["unreachable"] is False  # a later result supersedes it


def test_junit_one_suite_per_host_one_case_per_check(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    run_playbook(callback, [result("node-01", {"checks": node_checks(warn_clock=True)}),
                            result("node-02", {"checks": node_checks(fail_ecc=True)})])
    _report, junit, _page = load(tmp_path)
    assert junit.tag == "testsuites"
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == ("10", "1", "2")
    suites = {suite.get("name"): suite for suite in junit.findall("testsuite")}
    assert list(suites) == ["node-02", "node-01"]
    cases = {case.get("name"): case for case in suites["node-02"].findall("testcase")}
    assert set(cases) == {"gpu.count[node]", "gpu.ecc.volatile_uncorrectable[gpu3]", "gpu.clocks_event[gpu0]",
                          "gpu.nvlink[gpu0]", "rdma.port.state[mlx5_0/1]"}
    failure = cases["gpu.ecc.volatile_uncorrectable[gpu3]"].find("failure")
    assert failure.get("message") == "2 volatile uncorrectable ECC errors"
    assert "observed: 2" in failure.text
    assert cases["gpu.nvlink[gpu0]"].find("skipped").get("message") == "MIG enabled"
    assert cases["gpu.count[node]"].find("failure") is None
    assert cases["gpu.count[node]"].find("skipped") is None
    warn_case = [c for c in suites["node-01"].findall("testcase")
                 if c.get("name") == "gpu.clocks_event[gpu0]"][0]
    assert warn_case.find("failure") is None
    assert warn_case.find("system-out").text.startswith("WARN: HW slowdown active")
    assert suites["node-02"].get("failures") == "1" and suites["node-02"].get("skipped") == "1"


def test_html_grid_worst_status_and_escaping(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    evil_host = "<script>alert('host')</script>"
    checks = node_checks(fail_ecc=True) + [chk("rdma.port.phys_state", "mlx5_0/1", "warn",
                                                "<script>alert(1)</script> & <b>bold</b>")]
    run_playbook(callback, [result("node-01", {"checks": node_checks()}),
                            result(evil_host, {"checks": checks}),
                            result("node-03", {"checks": [chk("bad\x01id", "x", "fail", "ctl \x02 char")]})])
    _report, junit, page = load(tmp_path)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;" in page
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    for external in ("http://", "https://", " src=", "<link", "<script"):
        assert external not in page
    assert '<table class="grid">' in page
    header = page.split("<thead>")[1].split("</thead>")[0]
    groups = [cell.split("</span>")[0] for cell in header.split("<span>")[1:]]
    assert groups == ["bad\x01id", "gpu.clocks_event", "gpu.count", "gpu.ecc", "gpu.nvlink", "rdma.port"]
    evil_row = [row for row in page.split("<tr>") if "alert(&#39;host" in row and 'class="host"' in row][0]
    # rdma.port holds a pass (state) and a warn (phys_state): the cell shows the worst one
    escaped_host = "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"
    assert 'title="rdma.port on %s: 1 warn, 1 pass"' % escaped_host in evil_row
    assert 'class="s-fail" title="gpu.ecc on' in evil_row
    assert "<details" in page and "all 6 checks" in page
    node3 = [suite for suite in junit.findall("testsuite") if suite.get("name") == "node-03"][0]
    assert node3.find("testcase").get("name") == "bad?id[x]"  # XML-invalid control character replaced


def test_summary_sorted_worst_first_and_truncated(tmp_path):
    callback, display = make_callback(dir=str(tmp_path), summary_limit=5)
    results = [result("node-%03d" % i, {"checks": node_checks()}) for i in range(100)]
    results.append(result("node-050", {"checks": node_checks(warn_clock=True)}))
    results.append(result("node-077", {"checks": node_checks(fail_ecc=True, warn_clock=True)}))
    results.append(result("node-012", {"checks": node_checks(fail_ecc=True)}))
    run_playbook(callback, results)
    start = display.lines.index("== FLEET REPORT")
    lines = display.lines[start + 1:]
    assert lines[0].startswith("100 host(s): 2 unhealthy, 1 with warnings, 97 healthy")
    assert lines[1].split()[:5] == ["HOST", "FAIL", "WARN", "PASS", "SKIP"]
    assert [line.split()[0] for line in lines[2:5]] == ["node-077", "node-012", "node-050"]
    assert "gpu.ecc.volatile_uncorrectable[gpu3]: 2 volatile uncorrectable ECC errors" in lines[2]
    assert lines[5] == "... 97 healthy host(s) without warnings not listed"
    assert lines[6].startswith("reports: ")


def test_summary_lists_everything_for_small_fleets_and_counts_hidden_problems():
    report = model.FleetReport()
    for i in range(3):
        report.add_checks("n%d" % i, node_checks(fail_ecc=i == 1))
    assert len(report.summary_lines(10)) == 2 + 3
    many = model.FleetReport()
    for i in range(8):
        many.add_checks("n%d" % i, node_checks(fail_ecc=True))
    many.add_checks("ok", node_checks())
    lines = [text for text, _status in many.summary_lines(3)]
    assert len(lines) == 2 + 3 + 2
    assert lines[-2] == "... 5 more host(s) with failures or warnings not listed (see the report)"
    assert lines[-1] == "... 1 healthy host(s) without warnings not listed"


def test_bandwidth_matrix_heatmap_and_invalid_matrix(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    matrix = {"title": "fabric <all-to-all>", "hosts": ["a", "b", "c"],
              "gbps": [[None, 392.2, 195.0], [391.8, None, 390.1], [None, 389.9, None]]}
    callback.v2_runner_on_ok(result("a", {"bandwidth_matrix": matrix, "checks": []}, task="fabric"))
    broken = {"hosts": ["a"], "gbps": [[1, 2]]}
    callback.v2_runner_on_ok(result("a", {"bandwidth_matrix": broken}, task="broken"))
    callback.v2_playbook_on_stats(None)
    report, _junit, page = load(tmp_path)
    assert report["bandwidth_matrices"] == [dict(matrix)]
    assert report["hosts"] == {}
    assert "<h2>fabric &lt;all-to-all&gt;</h2>" in page
    assert '<table class="matrix">' in page
    assert 'style="background:hsl(120,70%,72%)" title="a -&gt; b: 392.20 Gb/s">392<' in page
    assert 'style="background:hsl(59,70%,72%)" title="a -&gt; c: 195.00 Gb/s">195<' in page
    assert "a -&gt; a: not measured" in page
    assert any("ignoring bandwidth_matrix of task 'broken'" in w for w in display.warnings)


def test_nothing_written_without_checks(tmp_path):
    callback, display = make_callback(dir=str(tmp_path / "reports"))
    run_playbook(callback, [result("node-01", {"changed": True})])
    assert not (tmp_path / "reports").exists()
    assert "== FLEET REPORT" not in display.lines


def test_html_and_junit_can_be_turned_off(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path), html=False, junit=False)
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert sorted(os.listdir(str(tmp_path))) == ["fleet-report.json"]


def test_directory_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_REPORT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("GPUFLEET_REPORT_HTML", "false")
    callback, _display = make_callback()
    assert callback.get_option("dir") == str(tmp_path / "from-env")
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert sorted(os.listdir(str(tmp_path / "from-env"))) == ["fleet-report.json", "junit.xml"]


def test_unwritable_directory_warns_instead_of_crashing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    callback, display = make_callback(dir=str(blocker / "reports"))
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert any("cannot write the report" in w for w in display.warnings)


def test_thousand_hosts_page_stays_compact(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    checks = node_checks() + [chk("gpu.ecc.mode", "gpu%d" % g, "pass", "on") for g in range(8)]
    results = [result("dgx-%04d" % i, {"checks": checks}) for i in range(1000)]
    results += [result("dgx-%04d" % i, {"checks": node_checks(fail_ecc=True)}) for i in range(0, 1000, 100)]
    run_playbook(callback, results)
    report, _junit, page = load(tmp_path)
    assert report["totals"]["hosts"] == 1000 and report["totals"]["unhealthy"] == 10
    assert page.count("<details") == 2 * 10  # problems and their full tables only for the 10 failing hosts
    tbody = page.split("<tbody>")[1].split("</tbody>")[0]
    assert tbody.count('<tr><th class="host">') == 1000
    assert len(page) < 2_500_000
    assert page.index("dgx-0000") < page.index("dgx-0001")
    grid_rows = tbody.split("<tr>")[1:]
    assert all("s-fail" in row for row in grid_rows[:10]) and "s-fail" not in grid_rows[10]


@pytest.mark.parametrize("check_id, group", [("gpu.ecc.volatile_uncorrectable", "gpu.ecc"),
                                             ("rdma.port.state", "rdma.port"), ("gpu.count", "gpu.count"),
                                             ("rdma.bandwidth", "rdma.bandwidth"), ("solo", "solo")])
def test_check_group(check_id, group):
    assert model.check_group(check_id) == group


@pytest.mark.parametrize("stdout_callback", ["ansible.posix.json", "json", "ansible.posix.jsonl"])
def test_summary_not_printed_under_json_stdout_callback(tmp_path, monkeypatch, stdout_callback):
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", stdout_callback)
    callback, display = make_callback(dir=str(tmp_path))
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert "== FLEET REPORT" not in display.lines
    assert not any(line.startswith("reports: ") for line in display.lines)
    assert (tmp_path / "fleet-report.json").exists()


def test_summary_can_be_turned_off(tmp_path):
    callback, display = make_callback(dir=str(tmp_path), summary=False)
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert "== FLEET REPORT" not in display.lines
    assert (tmp_path / "junit.xml").exists()


def test_summary_names_skipped_families_of_hosts_without_problems():
    report = model.FleetReport()
    skipped = [{"id": "gpu.nvml", "target": "node", "status": "skip",
                "message": "no NVIDIA GPU on the PCI bus: NVML not queried"}]
    skipped += [{"id": "gpu.%s" % name, "target": "node", "status": "skip", "message": "no NVIDIA GPU on the PCI bus"}
                for name in ("count", "xid")]
    skipped += [{"id": "rdma.modules", "target": "node", "status": "skip",
                 "message": "no RDMA devices; mlx5_core not loaded"},
                {"id": "rdma.peermem", "target": "node", "status": "skip",
                 "message": "peermem not required and not loaded"},
                {"id": "rdma.devices", "target": "node", "status": "skip",
                 "message": "no RDMA devices;\n mlx5_core not loaded"}]
    report.add_checks("cpu-box", skipped)
    report.add_checks("gpu-box", node_checks())
    lines = dict((text.split()[0], text) for text, _status in report.summary_lines(10)[2:])
    assert lines["cpu-box"].endswith(
        "gpu skipped: no NVIDIA GPU on the PCI bus; rdma skipped: no RDMA devices; mlx5_core not loaded")
    assert "skipped" not in lines["gpu-box"]
    assert model.skipped_families(node_checks(fail_ecc=True)) == ""
