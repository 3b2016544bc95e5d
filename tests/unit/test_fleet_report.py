"""fleet_report callback driven directly with Ansible's CallbackTaskResult and Host objects."""

import gc
import json
import os
import re
import tempfile
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
        self.errors = []

    def display(self, msg, color=None, **_kwargs):
        self.lines.append(msg)

    def banner(self, msg, **_kwargs):
        self.lines.append("== %s" % msg)

    def warning(self, msg, **_kwargs):
        self.warnings.append(msg)

    def error(self, msg, **_kwargs):
        self.errors.append(msg)

    def vvv(self, msg, **_kwargs):
        self.lines.append("vvv: %s" % msg)


class FakeTask:
    delegate_to = None
    no_log = False

    def __init__(self, name, action="gpufleet.cluster.node_validate"):
        self.name = name
        self.action = action

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


def result(host, data, task="validate node", action="gpufleet.cluster.node_validate"):
    return CallbackTaskResult(Host(host), FakeTask(task, action), data, {"name": task})


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
    # a warning is not a pass: skipped with "warning: ..." (2 skip + 1 warn)
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == ("10", "1", "3")
    suites = {suite.get("name"): suite for suite in junit.findall("testsuite")}
    assert list(suites) == ["node-02", "node-01"]
    cases = {case.get("name"): case for case in suites["node-02"].findall("testcase")}
    assert set(cases) == {"gpu.count[node]", "gpu.ecc.volatile_uncorrectable[gpu3]", "gpu.clocks_event[gpu0]",
                          "gpu.nvlink[gpu0]", "rdma.port.state[mlx5_0/1]"}
    failure = cases["gpu.ecc.volatile_uncorrectable[gpu3]"].find("failure")
    assert failure.get("message") == "2 volatile uncorrectable ECC errors"
    assert "observed: 2" in failure.text
    assert cases["gpu.nvlink[gpu0]"].find("skipped").get("message") == "MIG enabled"
    assert cases["gpu.nvlink[gpu0]"].find("skipped").text == "MIG enabled"  # GitLab shows the text
    assert cases["gpu.count[node]"].find("failure") is None
    assert cases["gpu.count[node]"].find("skipped") is None
    warn_case = [c for c in suites["node-01"].findall("testcase")
                 if c.get("name") == "gpu.clocks_event[gpu0]"][0]
    assert warn_case.find("failure") is None
    assert warn_case.find("skipped").get("message") == "warning: HW slowdown active"
    assert warn_case.find("skipped").text.startswith("warning: HW slowdown active")
    assert [(p.get("name"), p.get("value")) for p in warn_case.iter("property")] == [("gpufleet.status", "warn")]
    assert suites["node-02"].get("failures") == "1" and suites["node-02"].get("skipped") == "1"
    assert suites["node-01"].get("skipped") == "2"
    # no duration was measured (no elapsed_ms, no task start): no time rather than a made-up 0
    assert suites["node-01"].get("time") is None and junit.get("time") is None


def test_html_grid_worst_status_and_escaping(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    evil_host = "<script>alert('host')</script>"
    checks = node_checks(fail_ecc=True) + [chk("rdma.port.phys_state", "mlx5_0/1", "warn",
                                                "<script>alert(1)</script> & <b>bold</b>")]
    run_playbook(callback, [result("node-01", {"checks": node_checks()}),
                            result(evil_host, {"checks": checks}),
                            result("node-03", {"checks": [chk("bad\x01id", "x", "fail", "ctl \x02 char")]})])
    _report, junit, page = load(tmp_path)
    assert page.lower().count("<script") == 1  # the page's own sorting/filtering script, after the data
    assert page.index("<script>") > page.index("</tbody>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;" in page
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    for external in ("http://", " src=", "<link", "<script src", "<iframe"):
        assert external not in page
    assert '<table class="grid" id="hosts">' in page
    header = page.split("<thead>")[1].split("</thead>")[0]
    groups = [cell.split("</span>")[0] for cell in header.split("<span>")[1:]]
    # columns grouped by family: a header over each family, the column says the rest of the group
    assert groups == ["bad\x01id", "clocks_event", "count", "ecc", "nvlink", "port"]
    assert re.findall(r'<th class="fam fam-first" id="family-([^"]+)" data-family="[^"]+" colspan="(\d+)">',
                      header) == [("bad\x01id", "1"), ("gpu", "4"), ("rdma", "1")]
    assert '<th class="group fam-first" data-family="gpu" title="gpu.clocks_event">' in header
    evil_row = [row for row in page.split("<tr ") if "alert(&#39;host" in row and 'class="host"' in row][0]
    # rdma.port holds a pass (state) and a warn (phys_state): the cell shows the worst one
    escaped_host = "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"
    assert 'title="rdma.port on %s: 1 warn, 1 pass"' % escaped_host in evil_row
    assert 'class="c s-fail" title="gpu.ecc on' in evil_row
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
    assert lines[6].startswith("fleet picture: 100 host(s), 2 unhealthy; run ")
    assert lines[7].startswith("reports: ")


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
    assert sorted(os.listdir(str(tmp_path))) == ["fleet-report.json", "runs"]
    assert sorted(os.listdir(str(tmp_path / "runs" / "latest"))) == ["fleet-report.json"]


def test_directory_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_REPORT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("GPUFLEET_REPORT_HTML", "false")
    callback, _display = make_callback()
    assert callback.get_option("dir") == str(tmp_path / "from-env")
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert sorted(os.listdir(str(tmp_path / "from-env"))) == ["fleet-report.json", "junit-fleet.xml", "junit.xml",
                                                              "runs"]


def test_the_report_is_built_and_written_with_the_cyclic_gc_paused(tmp_path, monkeypatch):
    """The documents of the report make millions of objects at 10,000 hosts and no reference cycle: no
    collection of the cyclic GC walks the run's inventory and results meanwhile (0.7 s of the main
    process's CPU at 10,000 hosts); the GC is on again after, also after a write that failed."""
    seen = []
    junit, page = fleet_report.junit_xml, fleet_report.render

    def watched_junit(document, *args):
        seen.append(("junit", gc.isenabled()))
        return junit(document, *args)

    def watched_page(document, **kwargs):
        seen.append(("html", gc.isenabled()))
        return page(document, **kwargs)

    monkeypatch.setattr(fleet_report, "junit_xml", watched_junit)
    monkeypatch.setattr(fleet_report, "render", watched_page)
    callback, _display = make_callback(dir=str(tmp_path / "reports"))
    assert gc.isenabled()
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert seen and sorted(set(seen)) == [("html", False), ("junit", False)]
    assert gc.isenabled() and os.path.isfile(str(tmp_path / "reports" / "fleet-report.json"))

    def broken(document, **kwargs):
        raise RuntimeError("no page today")

    monkeypatch.setattr(fleet_report, "render", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    callback, display = make_callback(dir=str(tmp_path / "reports"))
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert any("no page today" in e for e in display.errors) and gc.isenabled()


def test_unwritable_directory_is_an_error_and_the_report_is_written_elsewhere(tmp_path, monkeypatch):
    """Never a run that loses its report quietly: an error line naming the directory, and this run's
    report written unmerged to the temporary directory (the report directory cannot be made)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    callback, display = make_callback(dir=str(blocker / "reports"))
    run_playbook(callback, [result("node-01", {"checks": node_checks()})])
    assert any("cannot write the report to %s" % (blocker / "reports") in e and "written unmerged to" in e
               for e in display.errors), display.errors
    unmerged = [n for n in os.listdir(str(tmp_path / "tmp")) if n.startswith("fleet-report-unmerged-")]
    junit = "junit-unmerged-%s.xml" % unmerged[0][len("fleet-report-unmerged-"):-len(".json")]
    assert len(unmerged) == 1
    assert callback.written == [str(tmp_path / "tmp" / unmerged[0]), str(tmp_path / "tmp" / junit)]
    with open(str(tmp_path / "tmp" / unmerged[0]), encoding="utf-8") as handle:
        assert set(json.load(handle)["hosts"]) == {"node-01"}


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
    assert tbody.count('<tr data-rank="') == 1000
    assert len(page) < 2_500_000
    assert page.index("dgx-0000") < page.index("dgx-0001")
    grid_rows = tbody.split("<tr ")[1:]
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


# ---------------------------------------------------------------------- never lose a host
# Failed results below have the shape ansible-core 2.19 hands to callbacks (captured with a
# module raising RuntimeError, an async job over its time limit and a task over `timeout:`).
CRASH = {"changed": False, "exception": "(traceback unavailable)",
         "msg": "Task failed: Module failed: sysfs tree exploded"}
CRASH_TRACEBACK = {"failed": True, "msg": "MODULE FAILURE: No start of json char found",
                   "module_stderr": "Traceback (most recent call last):\n  File \"x.py\", line 3\n"
                                    "ValueError: invalid literal for int() with base 10: '\u00b2'\n"}
ASYNC_TIMEOUT = {"started": True, "finished": True, "ansible_job_id": "j1717.7375", "msg": "Timeout exceeded",
                 "changed": False, "exception": "(traceback unavailable)"}
TASK_TIMEOUT = {"timedout": {"period": 2}, "exception": "(traceback unavailable)",
                "msg": "Task failed: Timed out after 2 second(s).", "changed": False}


def make_play(tmp_path, hosts, pattern="fleet", name="Validate the fleet"):
    """A real Play over a real inventory (the objects v2_playbook_on_play_start receives)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.vars.manager import VariableManager

    source = tmp_path / "hosts.yml"
    source.write_text(yaml.safe_dump({"all": {"children": {"fleet": {"hosts": dict((h, {}) for h in hosts)},
                                                          "other": {"hosts": {"bystander": {}}}}}}))
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(source)])
    variables = VariableManager(loader=loader, inventory=inventory)
    return Play.load({"name": name, "hosts": pattern, "gather_facts": False, "tasks": []},
                     variable_manager=variables, loader=loader)


def test_crashed_validation_task_is_a_failed_host_everywhere(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    callback.v2_runner_on_ok(result("node-01", {"checks": node_checks()}))
    callback.v2_runner_on_failed(result("node-02", dict(CRASH)))
    callback.v2_runner_on_failed(result("node-03", dict(CRASH_TRACEBACK)), ignore_errors=True)
    callback.v2_playbook_on_stats(None)
    report, junit, page = load(tmp_path)
    assert report["totals"]["hosts"] == 3 and report["totals"]["unhealthy"] == 2
    node2 = report["hosts"]["node-02"]
    assert node2["healthy"] is False and node2["validation_failed"] is True and node2["unreachable"] is False
    assert node2["checks"] == [{
        "id": "host.validation", "target": "validate node", "status": "fail", "task": "validate node",
        "message": "no checks returned: Module failed: sysfs tree exploded",
        "failing_since": report["run"]["id"]}]  # the first failing run of the streak: this one
    node3 = report["hosts"]["node-03"]["checks"][0]
    assert node3["message"].endswith("MODULE FAILURE: No start of json char found | "
                                     "ValueError: invalid literal for int() with base 10: '\u00b2'")
    suites = {suite.get("name"): suite for suite in junit.findall("testsuite")}
    failure = suites["node-02"].find("testcase").find("failure")
    assert suites["node-02"].find("testcase").get("name") == "host.validation[validate node]"
    assert "sysfs tree exploded" in failure.get("message")
    assert "sysfs tree exploded" in page and 'title="host.validation on node-02: 1 fail"' in page
    summary = display.lines[display.lines.index("== FLEET REPORT") + 1:]
    assert summary[0].startswith("3 host(s): 2 unhealthy, 0 with warnings, 1 healthy")
    assert [line.split()[0] for line in summary[2:4]] == ["node-02", "node-03"]


def test_async_and_task_timeouts_fail_the_host():
    report = model.FleetReport()
    report.task_result("node-01", dict(ASYNC_TIMEOUT), "validate node", "failed", "t1", validation=True)
    report.task_result("node-02", dict(TASK_TIMEOUT), "validate node", "failed", "t1", validation=True)
    messages = dict((host, entry[("host.validation", "validate node")]["message"])
                    for host, entry in report.hosts.items())
    assert messages["node-01"] == "no checks returned: Timeout exceeded (async job j1717.7375)"
    assert messages["node-02"] == "no checks returned: Timed out after 2 second(s)."
    assert report.totals(report.host_rows())["unhealthy"] == 2


def test_failure_before_the_task_is_known_as_validation_is_kept():
    """A task of an unknown module becomes a validation task when any host returns checks from it;
    a crash that arrived earlier (forks finish in any order) is then charged to its host."""
    report = model.FleetReport()
    report.start_play("play", ["a", "b", "c"])
    report.task_result("a", dict(CRASH), "run checks", "failed", "u1")
    report.task_result("c", {"skipped": True}, "run checks", "skipped", "u1")
    assert "a" not in report.hosts
    report.task_result("b", {"checks": node_checks()}, "run checks", "ok", "u1")
    assert report.hosts["a"][("host.validation", "run checks")]["status"] == "fail"
    report.end_play()
    assert set(report.hosts) == {"a", "b"}  # c skipped the validation task: reported, not failed


def test_failed_task_of_other_modules_is_not_a_check():
    report = model.FleetReport()
    report.start_play("provision", ["a"])
    report.task_result("a", {"failed": True, "msg": "apt failed"}, "install", "failed", "u1")
    report.end_play()
    assert report.empty


def test_failed_loop_items_without_checks():
    report = model.FleetReport()
    data = {"failed": True, "msg": "One or more items failed", "results": [
        {"checks": [chk("rdma.port.state", "mlx5_0/1", "pass", "ACTIVE")], "item": 0},
        {"failed": True, "msg": "Task failed: Module failed: boom", "item": 1},
        {"failed": True, "msg": "second", "item": 2}]}
    report.task_result("a", data, "validate rails", "failed", "u1", validation=True)
    checks = report.hosts["a"]
    assert checks[("rdma.port.state", "mlx5_0/1")]["status"] == "pass"
    assert checks[("host.validation", "validate rails")]["message"] == (
        "no checks returned: Module failed: boom "
        "(and 1 more failed item(s))")


def test_retry_of_the_same_task_supersedes_the_crash():
    report = model.FleetReport()
    report.task_result("a", dict(CRASH), "validate node", "failed", "u1", validation=True)
    report.task_result("a", {"checks": node_checks()}, "validate node", "ok", "u2", validation=True)
    assert ("host.validation", "validate node") not in report.hosts["a"]
    report.task_result("a", dict(CRASH), "validate rdma", "failed", "u3", validation=True)
    report.task_result("a", {"checks": [chk("gpu.count", "node", "pass", "8")]}, "validate gpu", "ok", "u4",
                       validation=True)
    assert report.hosts["a"][("host.validation", "validate rdma")]["status"] == "fail"


def test_hosts_of_a_validation_play_without_any_result_are_failed(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    play = make_play(tmp_path, ["node-01", "node-02", "node-03", "node-04", "node-05"])
    callback.v2_playbook_on_play_start(play)
    # node-02 fails a preparation task and leaves the play; node-05 skips validation on purpose;
    # node-03 never reports anything (the play ended, for instance by max_fail_percentage)
    callback.v2_runner_on_failed(result("node-02", {"failed": True, "msg": "Could not find python3"},
                                        task="prepare", action="ansible.builtin.raw"))
    callback.v2_runner_on_ok(result("node-01", {"checks": node_checks()}))
    callback.v2_runner_on_unreachable(result("node-04", {"unreachable": True, "msg": "ssh: connect refused"}))
    callback.v2_runner_on_skipped(result("node-05", {"skipped": True}))
    callback.v2_playbook_on_stats(None)
    report, junit, page = load(tmp_path)
    assert sorted(report["hosts"]) == ["node-01", "node-02", "node-03", "node-04"]
    assert report["totals"]["unhealthy"] == 3
    node2 = report["hosts"]["node-02"]["checks"]
    assert [(c["id"], c["target"], c["status"]) for c in node2] == [("host.validation", "node", "fail")]
    assert node2[0]["message"] == ("not validated in play 'Validate the fleet': "
                                   "task 'prepare' failed: Could not find python3")
    assert "the play ended, or the host left it, before its validation tasks ran" in \
        report["hosts"]["node-03"]["checks"][0]["message"]
    assert [c["id"] for c in report["hosts"]["node-04"]["checks"]] == ["host.unreachable"]
    assert "bystander" not in report["hosts"]
    assert {suite.get("name") for suite in junit.findall("testsuite")} == {"node-01", "node-02", "node-03", "node-04"}
    assert "Could not find python3" in page
    assert display.lines[display.lines.index("== FLEET REPORT") + 1].startswith("4 host(s): 3 unhealthy")


def test_play_without_validation_adds_no_hosts(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["node-01", "node-02"], name="Provision"))
    callback.v2_runner_on_failed(result("node-02", {"failed": True, "msg": "apt"}, task="install",
                                        action="ansible.builtin.apt"))
    callback.v2_runner_on_ok(result("node-01", {"changed": True}, task="install", action="ansible.builtin.apt"))
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["node-01", "node-02"], name="Validate"))
    callback.v2_runner_on_ok(result("node-01", {"checks": node_checks()}))
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    # node-02 failed in the provisioning play and never reached the validation play
    assert report["hosts"]["node-02"]["checks"][0]["message"] == (
        "not validated in play 'Validate': task 'install' failed: apt")
    assert report["hosts"]["node-01"]["healthy"] is True


def test_validation_play_recognised_from_task_start_when_every_host_crashes(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["node-01", "node-02"]))
    task = FakeTask("validate node")
    callback.v2_playbook_on_task_start(task, False)
    callback.v2_runner_on_failed(result("node-01", dict(CRASH)))
    callback.v2_runner_on_failed(result("node-02", dict(CRASH)))
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    assert report["totals"] == {"pass": 0, "warn": 0, "fail": 2, "skip": 0, "hosts": 2, "healthy": 0,
                                "unhealthy": 2, "with_warnings": 0}


# ---------------------------------------------------------------------- strict JSON
def _strict(text):
    def reject(constant):
        raise AssertionError("non-JSON constant %s in the report" % constant)
    return json.loads(text, parse_constant=reject)


def test_nan_and_infinity_become_strings_in_strict_json(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    checks = [chk("nccl.busbw", "all_reduce", "fail", "average bus bandwidth is not a number",
                  observed=float("nan"), expected={"min": 150.0, "max": float("inf")}),
              chk("rdma.bandwidth", "mlx5_0/1", "fail", "bogus", observed=[float("-inf"), 1.5])]
    matrix = {"title": "nan matrix", "hosts": ["a", "b"], "gbps": [[None, float("nan")], [float("inf"), None]],
              "min_gbps": 100}
    callback.v2_runner_on_ok(result("a", {"checks": checks, "bandwidth_matrix": matrix}))
    callback.v2_playbook_on_stats(None)
    with open(os.path.join(str(tmp_path), "fleet-report.json")) as handle:
        report = _strict(handle.read())
    busbw, bandwidth = report["hosts"]["a"]["checks"]
    assert busbw["observed"] == "nan" and busbw["expected"] == {"min": 150.0, "max": "inf"}
    assert bandwidth["observed"] == ["-inf", 1.5]
    assert report["bandwidth_matrices"][0]["gbps"] == [[None, "nan"], ["inf", None]]
    _report, junit, page = load(tmp_path)
    assert '<span class="obs">(observed nan; expected min: 150, max: inf)' in page  # read by people, not JSON
    assert 'class="bad" title="a -&gt; b: invalid reading nan">nan<' in page
    assert 'title="b -&gt; a: invalid reading inf">inf<' in page
    assert "NaN" not in ET.tostring(junit, encoding="unicode")


def test_to_json_rejects_nothing_and_keeps_numbers():
    document = {"x": [1, 2.5, float("nan"), True, None, "s"], 3: (float("-inf"),), "set": {1}}
    assert _strict(model.to_json(document)) == {"x": [1, 2.5, "nan", True, None, "s"], "3": ["-inf"], "set": [1]}


# ---------------------------------------------------------------------- heatmaps
def test_heatmap_against_the_configured_minimum_with_legend_and_rails(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    rails = {"mlx5_0": [[None, 395.0, 392.0], [394.0, None, 248.0], [393.0, 391.0, None]],
             "mlx5_1": [[None, 390.0, 391.0], [396.0, None, 390.0], [389.0, 120.0, None]]}
    matrix = {"title": "ib_write_bw all-pairs", "hosts": ["a", "b", "c"], "min_gbps": 360, "per_rail": rails}
    callback.v2_runner_on_ok(result("localhost", {"bandwidth_matrix": matrix}, task="fabric"))
    callback.v2_playbook_on_stats(None)
    report, _junit, page = load(tmp_path)
    stored = report["bandwidth_matrices"][0]
    assert stored["rails"] == ["mlx5_0", "mlx5_1"] and stored["min_gbps"] == 360
    # worst rail per pair, derived when gbps is not given
    assert stored["gbps"] == [[None, 390.0, 391.0], [394.0, None, 248.0], [389.0, 120.0, None]]
    assert page.count('<table class="matrix">') == 3
    assert "<h3>all rails, worst rail per pair</h3>" in page and "<h3>rail mlx5_1</h3>" in page
    # 248 of 360 is 69 %: clearly red (50-75 % class), not "almost green"
    assert ('class="lo3" title="b -&gt; c: 248.00 Gb/s (69 % of the 360 Gb/s minimum) BELOW MINIMUM">248<'
            in page)
    assert 'class="lo4" title="c -&gt; b on mlx5_1: 120.00 Gb/s (33 % of the 360 Gb/s minimum)' in page
    assert 'class="ok" title="a -&gt; b on mlx5_0: 395.00 Gb/s (110 % of the 360 Gb/s minimum)">395<' in page
    legend = page.split('<p class="legend"><span class="ok">')[1].split("</p>")[0]
    for label in ("&ge; 360 Gb/s", "90-100 % of min", "75-90 %", "50-75 %", "&lt; 50 %", "not measured",
                  "invalid (NaN/inf)"):
        assert label in legend
    assert "2 of 6 measured pair(s) below it on their worst rail" in page
    assert 'title="b as sender: 1 of 2 pair(s) below the minimum">1/2<' in page
    assert 'title="b as receiver: 1 of 2 pair(s) below the minimum">1/2<' in page
    assert not display.warnings


def test_heatmap_per_rail_list_form_and_explicit_gbps():
    report = model.FleetReport()
    matrix = {"hosts": ["a", "b"], "gbps": [[None, 1.0], [2.0, None]], "rails": ["r0", "r1"],
              "per_rail": [[[None, 1.0], [2.0, None]], [[None, 3.0], [4.0, None]]]}
    clean = report.add_matrix(matrix, "task")
    assert clean["title"] == "task" and clean["gbps"] == [[None, 1.0], [2.0, None]]
    assert clean["per_rail"] == {"r0": [[None, 1.0], [2.0, None]], "r1": [[None, 3.0], [4.0, None]]}


@pytest.mark.parametrize("matrix, error", [
    ({"hosts": ["a", "b"], "gbps": [[None, 1.0], [2.0, None]], "min_gbps": "fast"}, "min_gbps"),
    ({"hosts": ["a", "b"], "gbps": [[None, 1.0], [2.0, None]], "min_gbps": float("nan")}, "min_gbps"),
    ({"hosts": ["a", "b"], "per_rail": [[[None, 1.0], [2.0, None]]]}, "per_rail: a list needs rails"),
    ({"hosts": ["a", "b"], "per_rail": {"r0": [[None, 1.0]]}}, "per_rail[r0]"),
    ({"hosts": ["a", "b"], "gbps": [[None, "x"], [2.0, None]]}, "gbps"),
    ({"hosts": ["a", "b"], "gbps": [[None, 1.0], [2.0, None]], "rails": ["r0"],
      "per_rail": {"r1": [[None, 1.0], [2.0, None]]}}, "rails: must list the keys of per_rail"),
])
def test_invalid_matrix_is_named(matrix, error):
    report = model.FleetReport()
    assert report.add_matrix(matrix, "t") is None
    assert report.matrix_error.startswith(error)


def test_heatmap_of_64_hosts_is_not_collapsed(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    hosts = ["dgx-h100-%03d" % i for i in range(64)]
    gbps = [[None if i == j else 380.0 - (150.0 if 17 in (i, j) else 0.0) for j in range(64)] for i in range(64)]
    rails = dict(("mlx5_%d" % r, gbps) for r in range(8))
    callback.v2_runner_on_ok(result("localhost", {"bandwidth_matrix": {
        "title": "64 hosts", "hosts": hosts, "gbps": gbps, "min_gbps": 360, "per_rail": rails}}))
    callback.v2_playbook_on_stats(None)
    _report, _junit, page = load(tmp_path)
    assert "<details" not in page  # nothing collapsed
    assert page.count('<table class="matrix compact">') == 9
    assert page.count("<td ") >= 9 * 64 * 64
    first = page.split('<table class="matrix compact">')[1].split("</table>")[0]
    assert first.count('<th class="group"><span>dgx-h100-') == 64  # rotated column headers
    # dgx-h100-017 sends and receives at 230 Gb/s, 64 % of the minimum: the 50-75 % red, both directions
    assert first.count('class="lo3"') == 2 * 63
    assert first.count('class="ok"') == 64 * 63 - 2 * 63
    assert 'title="dgx-h100-017 as sender: 63 of 63 pair(s) below the minimum">63/63<' in first


@pytest.mark.parametrize("value, shown", [
    ({"nvml": 7, "pci": 8}, "nvml: 7, pci: 8"),
    (["ib_core", "mlx5_ib"], "ib_core, mlx5_ib"),
    ([], "none"),
    ({"loaded": False, "pci_functions": 2}, "loaded: no, pci_functions: 2"),
    ({"min": 150.0, "max": float("inf")}, "min: 150, max: inf"),
    (float("nan"), "nan"),
    (0.12500, "0.125"),
    ([{"port": 1, "rate": [100, 200]}], "port: 1, rate: (100, 200)"),
    ("DOWN", "DOWN"),
    (None, "none"),
])
def test_values_are_written_for_people(value, shown):
    assert model.human(value) == shown


def test_rdma_modules_values_are_labelled_missing_and_required():
    # rdma_checks returns the missing modules as observed: with all of them missing, "observed"
    # would equal "expected" on the page
    check = chk("rdma.modules", "node", "fail", "kernel modules not loaded: ib_core, mlx5_ib",
                observed=["ib_core", "mlx5_ib"], expected=["ib_core", "mlx5_ib"])
    assert model.value_detail(check) == "missing ib_core, mlx5_ib; required ib_core, mlx5_ib"
    assert "\nmissing: ib_core, mlx5_ib\nrequired: ib_core, mlx5_ib" in model.check_detail(check)
    other = chk("rdma.port.rate", "mlx5_3/1", "fail", "rate 100 Gb/s below 200 Gb/s", observed=100, expected=200)
    assert model.value_detail(other) == "observed 100; expected 200"


@pytest.mark.parametrize("facts, gpu", [
    ({"gpu_count": 0, "gpu_pci": 0}, "no GPU"),
    ({"gpu_count": 0, "gpu_pci": 8}, "no GPU in NVML (8 on the PCI bus)"),
    ({"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_pci": 8}, "8x H100 80GB HBM3"),
    ({"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 7, "gpu_pci": 8}, "7x H100 80GB HBM3 (8 on the PCI bus)"),
    ({"ofed": "absent", "hcas": 0}, ""),
])
def test_gpu_column_of_the_page(facts, gpu):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_html
    assert fleet_report_html._facts_text(facts)["gpu"] == gpu


def test_grid_columns_are_grouped_by_family():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_html
    families = fleet_report_html._families(["agent.health", "gpu.count", "gpu.ecc", "rdma.port", "tuning.hugepages"])
    assert [(f["name"], [g["label"] for g in f["groups"]]) for f in families] == [
        ("agent", ["health"]), ("gpu", ["count", "ecc"]), ("rdma", ["port"]), ("tuning", ["hugepages"])]
    assert [g["first"] for f in families for g in f["groups"]] == [True, True, False, True, True]
    assert fleet_report_html._run_time("20261123T001000Z-validate") == "11-23 00:10"
