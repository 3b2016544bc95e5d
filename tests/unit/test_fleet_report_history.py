"""The fleet report keeps history (plugins/plugin_utils/fleet_report_store.py): one directory per run
with a ``latest`` link, the fleet picture merged over runs (``--limit``, the fabric test), ranking by
severity (module_utils/core/checks.py CHECK_SEVERITY = docs/contracts.md "Severity"), node facts, run
metadata, grouped lines and check-id links in the page. Results are node_validate's own on the
fixture nodes (dgx-h100 with the fake NVML's scenarios, hdr-degraded), as the callback receives them."""

import json
import os
import re

import pytest

from ansible_collections.gpufleet.cluster.plugins.callback import fleet_report as fleet_report_callback
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import gpu_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning import tuning_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CHECK_SEVERITY, SEVERITIES, severity
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_store as store
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import host_facts
from conftest import REPO
from nvml_scenarios import fake_with
from test_fleet_report import make_callback, make_play, result
from test_node_validate import node_validate

SWEEP_PLAY = "Validate GPU and RDMA readiness"  # playbooks/validate.yml
DGX = {"expected_count": 8, "xid_source": "none"}
_PAYLOADS = {}


def dgx(scenario):
    """node_validate's result on dgx-h100 with an NVML scenario (computed once per scenario)."""
    if scenario not in _PAYLOADS:
        _PAYLOADS[scenario] = node_validate("dgx-h100", DGX, {}, adapter=NvmlAdapter(fake_with(scenario)))
    return json.loads(json.dumps(_PAYLOADS[scenario]))


def degraded():
    return node_validate("hdr-degraded", {"enabled": False}, {"min_rate_gbps": 200})


def run(report_dir, tmp_path, results, started, playbook="validate.yml", play=SWEEP_PLAY, **options):
    """One playbook run of the callback: a play over the hosts of ``results`` ({host: payload}),
    started and finished at ``started`` (the clock is fixed: two runs in the same second of wall time
    must still have the times the test gives them, e.g. for sorting by last seen)."""
    callback, display = make_callback(dir=str(report_dir), **options)
    callback.started_at = started
    callback.report.playbook = playbook
    clock = fleet_report_callback._utc_now
    fleet_report_callback._utc_now = lambda: started
    try:
        callback.v2_playbook_on_play_start(make_play(tmp_path, list(results), name=play))
        for host, payload in results.items():
            callback.v2_runner_on_ok(result(host, payload))
        callback.v2_playbook_on_stats(None)
    finally:
        fleet_report_callback._utc_now = clock
    return callback, display


def fleet(report_dir):
    with open(os.path.join(str(report_dir), "fleet-report.json")) as handle:
        return json.load(handle)


def run_dirs(report_dir):
    return sorted(n for n in os.listdir(os.path.join(str(report_dir), "runs")) if not n.startswith("."))


# ---------------------------------------------------------------------- severity, one table
def _contracts():
    with open(os.path.join(REPO, "docs", "contracts.md"), encoding="utf-8") as handle:
        return handle.read()


def test_severity_table_of_the_code_is_the_one_of_docs_contracts():
    text = _contracts()
    section = text.split("### Severity\n", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in SEVERITIES:
            for check_id in re.findall(r"`([^`]+)`", cells[2]):
                documented[check_id] = cells[0]
    assert documented == CHECK_SEVERITY


def test_every_check_id_has_a_severity_and_an_anchor_in_docs_contracts():
    text = _contracts()
    known = set(gpu_checks.CHECK_IDS) | set(tuning_checks.CHECK_IDS) | set(agent.known_check_ids())
    known |= {"host.validation", "host.unreachable", "rdma.bandwidth", "rdma.fabric.link", "rdma.fabric.rail",
              "rdma.fabric.host", "k8s.nccl.busbw", "k8s.nccl.wrong"}
    assert known <= set(CHECK_SEVERITY), sorted(known - set(CHECK_SEVERITY))
    for check_id in CHECK_SEVERITY:
        assert text.count('<a id="%s"></a>' % check_id) == 1, check_id
    assert "\n### Severity\n" in text  # the page links #severity


@pytest.mark.parametrize("check_id, level", [("gpu.count", "critical"), ("gpu.fabric", "high"),
                                             ("rdma.fabric.link", "medium"), ("gpu.clocks_event", "low"),
                                             ("gpu.ecc.volatile_uncorrectable", "critical"),
                                             ("rdma.port.new_attribute", "medium"), ("site.custom", "medium")])
def test_severity_of_ids_and_prefixes(check_id, level):
    assert severity(check_id) == level


# ---------------------------------------------------------------------- ranking, facts, metadata
def test_a_gpu_fallen_off_the_bus_outranks_eight_fabric_lines(tmp_path):
    reports = tmp_path / "reports"
    callback, display = run(reports, tmp_path, {
        "dgx-fab": dgx("h100-fabric-not-started"), "dgx-bus": dgx("h100-gpu-fell-off-bus"),
        "ib-degraded": degraded(), "dgx-ok": dgx("h100-healthy")}, "2026-11-23T00:10:00Z")
    document = fleet(reports)
    assert list(document["hosts"]) == ["dgx-bus", "dgx-fab", "ib-degraded", "dgx-ok"]
    assert document["hosts"]["dgx-fab"]["summary"]["fail"] == 8 and document["hosts"]["dgx-bus"]["summary"]["fail"] == 1
    assert [document["hosts"][h]["severity"] for h in document["hosts"]] == ["critical", "high", "high", None]
    summary = display.lines[display.lines.index("== FLEET REPORT") + 3:]
    assert [line.split()[0] for line in summary[:3]] == ["dgx-bus", "dgx-fab", "ib-degraded"]
    page = (reports / "fleet-report.html").read_text()
    rows = re.findall(r'<tr data-rank="(\d+)" data-host="([^"]+)"', page)
    assert rows == [("1", "dgx-bus"), ("2", "dgx-fab"), ("3", "ib-degraded"), ("4", "dgx-ok")]
    assert callback.written[0] == str(reports / "fleet-report.json")


def test_facts_from_the_results():
    healthy, bus = host_facts(dgx("h100-healthy")), host_facts(dgx("h100-gpu-fell-off-bus"))
    assert healthy == {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_pci": 8, "driver": "580.95.05",
                       "ofed": "24.10-1.1.4", "hcas": healthy["hcas"]}
    assert healthy["hcas"] >= 8
    assert (bus["gpu_count"], bus["gpu_pci"]) == (7, 8)  # NVML sees 7 of the 8 on the bus
    assert host_facts(degraded()) == {"ofed": "5.8-1.0.1", "hcas": 4}  # GPU family off: no GPU facts
    inbox = dgx("h100-healthy")
    inbox["ansible_facts"]["mlx5"].update({"driver_source": "inbox", "version": None})
    assert host_facts(inbox)["ofed"] == "inbox"
    assert host_facts({"checks": []}) == {}


def test_run_metadata_facts_and_grouped_lines_in_the_page(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-fab": dgx("h100-fabric-not-started"), "dgx-bus": dgx("h100-gpu-fell-off-bus")},
        "2026-11-23T00:10:00Z", contracts_url="https://docs.example/contracts.md")
    document = fleet(reports)
    meta = document["run"]
    assert meta["id"] == "20261123T001000Z-validate" and meta["playbook"] == "validate.yml"
    assert meta["started_at"] == "2026-11-23T00:10:00Z" and meta["gpufleet_version"] == "0.1.0"
    assert meta["inventory"] and meta["inventory"][0].endswith("hosts.yml")
    assert document["hosts"]["dgx-bus"]["facts"]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    checks = document["hosts"]["dgx-fab"]["checks"]
    assert {c["play"] for c in checks} == {SWEEP_PLAY}
    page = (reports / "fleet-report.html").read_text()
    assert "<td>validate.yml</td>" in page and "<td>0.1.0 (ansible-core " in page
    assert '<a class="cid" href="https://docs.example/contracts.md#gpu.fabric"><code>gpu.fabric</code></a>' \
           '<code>[gpu0\u20137]</code> NVSwitch fabric state NOT_STARTED' in page
    assert page.count("<code>gpu.fabric</code></a>") == 1  # eight identical lines, one line
    assert "(8 checks)" in page
    assert '<td class="t gpu">8x H100 80GB HBM3</td><td class="t">580.95.05</td><td class="t ofed">24.10-1.1.4' in page
    assert "7x H100 80GB HBM3 (8 on the PCI bus)" in page


# ---------------------------------------------------------------------- run directories
def test_each_run_has_its_directory_and_latest_points_at_the_newest(tmp_path):
    reports = tmp_path / "reports"
    hosts = {"dgx-ok": dgx("h100-healthy")}
    run(reports, tmp_path, hosts, "2026-11-23T00:10:00Z")
    run(reports, tmp_path, hosts, "2026-11-23T00:20:00Z", playbook="site.yml")
    run(reports, tmp_path, hosts, "2026-11-23T00:20:00Z", playbook="site.yml")  # same second: -2
    names = run_dirs(reports)
    assert names == ["20261123T001000Z-validate", "20261123T002000Z-site", "20261123T002000Z-site-2", "latest"]
    assert os.readlink(str(reports / "runs" / "latest")) == "20261123T002000Z-site-2"
    for name in names[:-1]:
        assert sorted(os.listdir(str(reports / "runs" / name))) == ["fleet-report.html", "fleet-report.json",
                                                                   "junit.xml"]
    document = fleet(reports)
    assert [r["id"] for r in document["runs"]] == names[:-1]
    assert document["hosts"]["dgx-ok"]["history"] == [{"run": n, "status": "pass"} for n in names[:-1]]


def test_only_keep_runs_directories_are_kept(tmp_path):
    reports = tmp_path / "reports"
    for minute in range(4):
        run(reports, tmp_path, {"dgx-ok": dgx("h100-healthy")}, "2026-11-23T00:1%d:00Z" % minute, keep_runs=2)
    assert run_dirs(reports) == ["20261123T001200Z-validate", "20261123T001300Z-validate", "latest"]
    document = fleet(reports)
    assert [h["run"] for h in document["hosts"]["dgx-ok"]["history"]] == run_dirs(reports)[:2]
    assert len(document["runs"]) == 2


# ---------------------------------------------------------------------- merging runs
def test_a_limit_run_updates_its_hosts_and_keeps_the_others(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy"), "dgx-02": dgx("h100-gpu-fell-off-bus"),
                            "dgx-03": dgx("h100-fabric-not-started")}, "2026-11-23T00:10:00Z")
    # --limit dgx-02 after the GPU was reseated
    _callback, display = run(reports, tmp_path, {"dgx-02": dgx("h100-healthy")}, "2026-11-23T01:00:00Z")
    document = fleet(reports)
    assert sorted(document["hosts"]) == ["dgx-01", "dgx-02", "dgx-03"]
    assert list(document["hosts"]) == ["dgx-03", "dgx-01", "dgx-02"]  # dgx-03 (fabric) is now the worst
    first, second = "20261123T001000Z-validate", "20261123T010000Z-validate"
    two = document["hosts"]["dgx-02"]
    assert two["healthy"] is True and two["last_run"] == second and two["last_seen"].endswith("Z")
    assert not [c for c in two["checks"] if c["id"] == "gpu.count" and c["status"] == "fail"]
    assert two["history"] == [{"run": first, "status": "fail"}, {"run": second, "status": "pass"}]
    assert document["hosts"]["dgx-03"]["last_run"] == first and document["hosts"]["dgx-03"]["healthy"] is False
    assert document["totals"]["hosts"] == 3 and document["totals"]["unhealthy"] == 1
    # the run's own report holds its host only
    with open(str(reports / "runs" / second / "fleet-report.json")) as handle:
        assert list(json.load(handle)["hosts"]) == ["dgx-02"]
    assert any(line.startswith("fleet picture: 3 host(s), 1 unhealthy; 2 not in this run") for line in display.lines)
    page = (reports / "fleet-report.html").read_text()
    assert "2 host(s) were not in the latest run" in page
    assert '<td class="t stale" title="' in page


def test_the_fabric_test_does_not_replace_the_sweeps_picture(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-01": dgx("h100-gpu-fell-off-bus"), "dgx-02": dgx("h100-healthy")},
        "2026-11-23T00:10:00Z")
    fabric = {"checks": [{"id": "rdma.fabric.host", "target": "node", "status": "pass", "message": "all rails fine"}]}
    run(reports, tmp_path, {"dgx-01": fabric}, "2026-11-23T00:30:00Z", playbook="fabric_test.yml",
        play="Fabric test: verdicts")
    document = fleet(reports)
    one = document["hosts"]["dgx-01"]
    ids = [c["id"] for c in one["checks"]]
    assert "gpu.count" in ids and "rdma.fabric.host" in ids  # both pictures of dgx-01
    assert one["healthy"] is False and one["severity"] == "critical"
    assert one["facts"]["gpu_count"] == 7  # facts of the sweep kept (the fabric result has none)
    assert document["hosts"]["dgx-02"]["last_run"] == "20261123T001000Z-validate"
    assert len(document["hosts"]["dgx-02"]["checks"]) == len(dgx("h100-healthy")["checks"])


def test_a_play_that_ran_again_replaces_its_checks_and_a_failed_run_stays_failed(tmp_path):
    reports = tmp_path / "reports"
    callback, _display = make_callback(dir=str(reports))
    callback.started_at = "2026-11-23T00:10:00Z"
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["dgx-01"], name=SWEEP_PLAY))
    callback.v2_runner_on_failed(result("dgx-01", {"failed": True, "msg": "Task failed: Module failed: boom"}))
    callback.v2_playbook_on_stats(None)
    assert [c["id"] for c in fleet(reports)["hosts"]["dgx-01"]["checks"]] == ["host.validation"]
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy")}, "2026-11-23T00:20:00Z")
    one = fleet(reports)["hosts"]["dgx-01"]
    assert one["healthy"] is True and "host.validation" not in [c["id"] for c in one["checks"]]
    # an unreachable host in a later run of another playbook: the picture says so
    callback, _display = make_callback(dir=str(reports))
    callback.started_at = "2026-11-23T00:30:00Z"
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["dgx-01"], name="Fabric test"))
    callback.v2_runner_on_unreachable(result("dgx-01", {"unreachable": True, "msg": "ssh: timed out"}))
    callback.v2_playbook_on_stats(None)
    one = fleet(reports)["hosts"]["dgx-01"]
    assert one["healthy"] is False and one["unreachable"] is True
    assert [h["status"] for h in one["history"]] == ["fail", "pass", "fail"]


def test_merge_off_and_a_broken_previous_picture(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy")}, "2026-11-23T00:10:00Z")
    run(reports, tmp_path, {"dgx-02": dgx("h100-healthy")}, "2026-11-23T00:20:00Z", merge=False)
    assert list(fleet(reports)["hosts"]) == ["dgx-02"]
    (reports / "fleet-report.json").write_text("{not json")
    _callback, display = run(reports, tmp_path, {"dgx-03": dgx("h100-healthy")}, "2026-11-23T00:30:00Z")
    assert list(fleet(reports)["hosts"]) == ["dgx-03"]
    assert any("previous fleet picture" in w and "not merged: not JSON" in w for w in display.warnings)


@pytest.mark.parametrize("started, playbook, name", [
    ("2026-11-23T00:17:36Z", "validate.yml", "20261123T001736Z-validate"),
    ("2026-11-23T00:17:36Z", "/abs/path/fabric_test.yaml", "20261123T001736Z-fabric_test"),
    ("2026-11-23T00:17:36Z", None, "20261123T001736Z-adhoc"),
    ("2026-11-23T00:17:36Z", "we ird/../na me!.yml", "20261123T001736Z-na_me"),
])
def test_run_id(started, playbook, name):
    assert store.run_id(started, playbook) == name
    assert store.RUN_DIR.match(name)


def test_the_run_page_shows_the_run_and_links_the_fleet_picture(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-bus": dgx("h100-gpu-fell-off-bus")}, "2026-11-23T00:10:00Z")
    page = (reports / "runs" / "latest" / "fleet-report.html").read_text()
    assert "run 20261123T001000Z-validate" in page and '<a href="../../fleet-report.html">' in page
    assert '<td class="hist"><i class="fail"></i></td>' in page
    fleet_page = (reports / "fleet-report.html").read_text()
    assert '<a href="runs/20261123T001000Z-validate/fleet-report.html">' in fleet_page


# ---------------------------------------------------------------------- retention by write order
# local_tz: the fixture of tests/conftest.py


def test_a_clock_set_back_never_prunes_the_run_just_written(tmp_path):
    reports = tmp_path / "reports"
    hosts = {"dgx-ok": dgx("h100-healthy")}
    run(reports, tmp_path, hosts, "2026-11-23T00:30:00Z", keep_runs=2)
    run(reports, tmp_path, hosts, "2026-11-23T00:40:00Z", keep_runs=2)
    run(reports, tmp_path, hosts, "2026-11-23T00:05:00Z", keep_runs=2)  # the clock was set back 35 min
    # by name the 00:05 run is the oldest; by write order it is the newest and stays
    assert run_dirs(reports) == ["20261123T000500Z-validate", "20261123T004000Z-validate", "latest"]
    assert os.readlink(str(reports / "runs" / "latest")) == "20261123T000500Z-validate"
    document = fleet(reports)
    assert [r["id"] for r in document["runs"]] == ["20261123T004000Z-validate", "20261123T000500Z-validate"]
    assert [r["sequence"] for r in document["runs"]] == [2, 3]
    assert document["hosts"]["dgx-ok"]["last_run"] == "20261123T000500Z-validate"
    with open(str(reports / "runs" / ".sequence")) as handle:
        index = json.load(handle)
    assert index == {"last": 3, "runs": {"20261123T004000Z-validate": 2, "20261123T000500Z-validate": 3}}
    run(reports, tmp_path, hosts, "2026-11-23T00:06:00Z", keep_runs=1)
    assert run_dirs(reports) == ["20261123T000600Z-validate", "latest"]


def test_keep_one_keeps_the_newest_written_even_when_it_sorts_first(tmp_path):
    reports = tmp_path / "reports"
    hosts = {"dgx-ok": dgx("h100-healthy")}
    run(reports, tmp_path, hosts, "2026-11-23T10:00:00Z", keep_runs=1)
    run(reports, tmp_path, hosts, "2025-01-01T00:00:00Z", keep_runs=1)  # RTC reset to an old date
    assert run_dirs(reports) == ["20250101T000000Z-validate", "latest"]
    assert fleet(reports)["run"]["sequence"] == 2


@pytest.mark.parametrize("zones", [("UTC", "America/New_York", "Asia/Kolkata"),
                                   ("Europe/Berlin", "Pacific/Chatham", "America/Los_Angeles")])
def test_retention_ignores_the_time_zone_of_the_controller(tmp_path, local_tz, zones):
    reports = tmp_path / "reports"
    hosts = {"dgx-ok": dgx("h100-healthy")}
    # the same instants, each run under another TZ; the last one is written last
    for zone, started in zip(zones, ("2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-03-29T00:59:59Z")):
        local_tz(zone)
        run(reports, tmp_path, hosts, started, keep_runs=2)
    assert run_dirs(reports) == ["20260329T005959Z-validate", "20260329T013000Z-validate", "latest"]
    assert os.readlink(str(reports / "runs" / "latest")) == "20260329T005959Z-validate"
    assert [r["id"] for r in fleet(reports)["runs"]] == ["20260329T013000Z-validate", "20260329T005959Z-validate"]


def test_run_directories_from_before_the_sequence_are_older_than_numbered_ones(tmp_path):
    reports = tmp_path / "reports"
    legacy = reports / "runs" / "20991231T000000Z-validate"  # no number, a name that sorts last
    legacy.mkdir(parents=True)
    hosts = {"dgx-ok": dgx("h100-healthy")}
    run(reports, tmp_path, hosts, "2026-11-23T00:10:00Z", keep_runs=1)
    assert run_dirs(reports) == ["20261123T001000Z-validate", "latest"]


def test_an_unreadable_sequence_file_is_rebuilt_from_the_runs(tmp_path):
    reports = tmp_path / "reports"
    hosts = {"dgx-ok": dgx("h100-healthy")}
    run(reports, tmp_path, hosts, "2026-11-23T00:30:00Z", keep_runs=3)
    run(reports, tmp_path, hosts, "2026-11-23T00:20:00Z", keep_runs=3)
    (reports / "runs" / ".sequence").write_text("{broken")
    run(reports, tmp_path, hosts, "2026-11-23T00:10:00Z", keep_runs=2)
    assert run_dirs(reports) == ["20261123T001000Z-validate", "20261123T002000Z-validate", "latest"]
    assert fleet(reports)["run"]["sequence"] == 3


# ---------------------------------------------------------------------- JUnit: the run, the picture, time
def _junit(path):
    import xml.etree.ElementTree as ET
    return ET.parse(str(path)).getroot()


def test_junit_xml_is_this_run_and_the_picture_has_its_own_name(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy"), "dgx-02": dgx("h100-gpu-fell-off-bus"),
                            "dgx-03": dgx("h100-fabric-not-started")}, "2026-11-23T00:10:00Z")
    # a passing --limit run: CI reads junit.xml and must see this run's host only, no old failures
    callback, _display = run(reports, tmp_path, {"dgx-01": dgx("h100-healthy")}, "2026-11-23T01:00:00Z")
    this_run = _junit(reports / "junit.xml")
    assert [s.get("name") for s in this_run.findall("testsuite")] == ["dgx-01"]
    assert this_run.get("failures") == "0" and this_run.get("name") == "gpufleet run 20261123T010000Z-validate"
    assert (reports / "junit.xml").read_text() == (reports / "runs" / "20261123T010000Z-validate" / "junit.xml").read_text()
    picture = _junit(reports / "junit-fleet.xml")
    assert sorted(s.get("name") for s in picture.findall("testsuite")) == ["dgx-01", "dgx-02", "dgx-03"]
    assert picture.get("name") == "gpufleet fleet picture" and int(picture.get("failures")) == 9
    assert str(reports / "junit.xml") in callback.written and str(reports / "junit-fleet.xml") in callback.written


def test_a_host_removed_from_the_inventory_is_not_in_the_runs_junit(tmp_path):
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy"), "old-02": dgx("h100-gpu-fell-off-bus")},
        "2026-11-23T00:10:00Z")
    run(reports, tmp_path, {"dgx-01": dgx("h100-healthy")}, "2026-11-23T01:00:00Z")  # old-02 decommissioned
    assert [s.get("name") for s in _junit(reports / "junit.xml").findall("testsuite")] == ["dgx-01"]
    assert "old-02" in fleet(reports)["hosts"]  # the picture says when it was last seen, until keep_runs drops it


def test_junit_time_is_the_modules_measured_duration(tmp_path):
    reports = tmp_path / "reports"
    payload = dgx("h100-healthy")
    payload["elapsed_ms"] = 1234.0  # node_validate's own measurement of its logic
    run(reports, tmp_path, {"dgx-01": payload}, "2026-11-23T00:10:00Z")
    document = fleet(reports)
    task = "validate node"  # test_fleet_report.result's task name
    assert document["hosts"]["dgx-01"]["durations"] == {task: 1.234}
    suite = _junit(reports / "junit.xml").find("testsuite")
    assert suite.get("time") == "1.234"
    cases = suite.findall("testcase")
    assert len(cases) == len(payload["checks"])
    assert abs(sum(float(c.get("time")) for c in cases) - 1.234) < 0.001 * len(cases)
    assert _junit(reports / "junit.xml").get("time") == suite.get("time")


def test_wall_time_when_the_result_has_no_elapsed_ms(tmp_path, monkeypatch):
    from ansible.inventory.host import Host
    from test_fleet_report import FakeTask, chk, result
    callback, _display = make_callback(dir=str(tmp_path))
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(fleet_report_callback.time, "monotonic", lambda: next(clock))
    callback.v2_runner_on_start(Host("ib-01"), FakeTask("measure bandwidth", "gpufleet.cluster.rdma_bandwidth"))
    callback.v2_runner_on_ok(result("ib-01", {"checks": [chk("rdma.bandwidth", "mlx5_0/1", "pass", "392 Gb/s"),
                                                         chk("rdma.bandwidth", "mlx5_1/1", "pass", "391 Gb/s")]},
                                    task="measure bandwidth", action="gpufleet.cluster.rdma_bandwidth"))
    monkeypatch.undo()
    callback.v2_playbook_on_stats(None)
    assert fleet(tmp_path)["hosts"]["ib-01"]["durations"] == {"measure bandwidth": 2.5}
    suite = _junit(tmp_path / "junit.xml").find("testsuite")
    assert suite.get("time") == "2.500"
    assert [c.get("time") for c in suite.findall("testcase")] == ["1.250", "1.250"]
