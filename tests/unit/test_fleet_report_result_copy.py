"""fleet_report reads a validation module's result from the callback's own copy, not through
CallbackTaskResult.result (a second, native-typed copy of the whole result: docs/performance.md, sweep cost)."""

import json
import os

from ansible._internal._datatag._tags import Origin, TrustedAsTemplate
from ansible.executor.task_result import CallbackTaskResult
from ansible.inventory.host import Host

from ansible_collections.gpufleet.cluster.plugins.callback import fleet_report
from test_fleet_report import FakeTask, chk, make_callback, node_checks, run_playbook


class CountingResult(CallbackTaskResult):
    """A CallbackTaskResult that counts the uses of ``result`` (its copy made by transform_to_native_types)."""

    reads = 0

    @property
    def result(self):
        CountingResult.reads += 1
        return super().result


def counted(host, data, action="gpufleet.cluster.node_validate", task="validate node"):
    return CountingResult(Host(host), FakeTask(task, action), data, {"name": task})


def dgx_like(host_index):
    """A node_validate-shaped result: checks, gpus, facts, elapsed_ms, some values tagged as ansible-core tags
    templated or file-read text (as a result holding such values would carry them)."""
    origin = Origin(path="/inventory/hosts.yml", line_num=host_index + 1)
    checks = node_checks(fail_ecc=host_index % 2 == 1)
    checks.append(chk("rdma.port.rate", origin.tag("mlx5_%d/1" % host_index), "pass",
                      TrustedAsTemplate().tag("200 Gb/sec (4X HDR)"), observed={"rate": 200}, expected=">= 200"))
    return {"changed": False, "checks": checks, "elapsed_ms": 12.5 + host_index,
            "gpus": [{"index": 0, "name": origin.tag("NVIDIA H100 80GB HBM3")}],
            "nvml": {"available": True, "driver_version": "580.95.05"},
            "ansible_facts": {"nvidia": {"gpu_count": 1, "driver": {"version": "580.95.05"}},
                              "mlx5": {"devices": {"mlx5_0": {"ports": {"1": {"state": "ACTIVE"}}}}}},
            "summary": {"pass": 5, "warn": 0, "fail": 0, "skip": 1}, "healthy": True, "msg": "gpu: pass"}


def report_hosts(directory):
    with open(os.path.join(directory, "fleet-report.json")) as handle:
        report = json.load(handle)
    for entry in report["hosts"].values():
        for check in entry["checks"]:
            check.pop("failing_since", None)  # the run's own id
    return report["hosts"], report.get("facts")


def test_validation_module_result_is_not_copied_again(tmp_path):
    """Fails before the change: the callback read ``result.result`` for every result."""
    callback, _display = make_callback(dir=str(tmp_path))
    CountingResult.reads = 0
    results = [counted("node-%02d" % index, dgx_like(index)) for index in range(4)]
    results.append(counted("node-09", {"checks": [chk("gpu.count", "node", "pass", "8")], "changed": False},
                           action="gpufleet.cluster.gpu_health"))
    run_playbook(callback, results)
    assert CountingResult.reads == 0
    hosts, _facts = report_hosts(str(tmp_path))
    assert sorted(hosts) == ["node-00", "node-01", "node-02", "node-03", "node-09"]
    assert any(check["target"] == "mlx5_3/1" for check in hosts["node-03"]["checks"])


def test_other_results_still_read_through_result(tmp_path):
    """fleet_conditions (made on the controller) and non-validation tasks: through ``result`` as before."""
    callback, _display = make_callback(dir=str(tmp_path))
    CountingResult.reads = 0
    run_playbook(callback, [
        counted("node-01", {"checks": [chk("k8s.node.ready", "node", "pass", "Ready")], "changed": False},
                action="gpufleet.cluster.fleet_conditions"),
        counted("node-01", {"changed": False, "ping": "pong"}, action="ansible.builtin.ping", task="ping"),
    ])
    assert CountingResult.reads == 2
    hosts, _facts = report_hosts(str(tmp_path))
    assert [check["id"] for check in hosts["node-01"]["checks"]] == ["k8s.node.ready"]


def test_same_report_as_through_result(tmp_path, monkeypatch):
    """The report from the callback's copy equals the one from ``result`` (native values), check by check
    and fact by fact, with tagged values in the results."""
    # One clock for both runs: a host entry names its run (last_run, history) and when it was seen
    # (last_seen), to the second; two runs either side of a second boundary differed there alone.
    monkeypatch.setattr(fleet_report, "_utc_now", lambda: "2026-11-29T23:00:00Z")
    direct, through = str(tmp_path / "direct"), str(tmp_path / "through")
    callback, _display = make_callback(dir=direct)
    run_playbook(callback, [counted("node-%02d" % index, dgx_like(index)) for index in range(6)])
    monkeypatch.setattr(fleet_report, "_result_data", lambda result, task: result.result)
    callback, _display = make_callback(dir=through)
    run_playbook(callback, [counted("node-%02d" % index, dgx_like(index)) for index in range(6)])
    assert report_hosts(direct) == report_hosts(through)
    with open(os.path.join(direct, "junit.xml")) as one, open(os.path.join(through, "junit.xml")) as other:
        assert one.read().split("<testsuite", 1)[1].split(">", 1)[1] == \
            other.read().split("<testsuite", 1)[1].split(">", 1)[1]
