"""Identical checks grouped (module_utils/core/checks.py group_checks) and the few console lines of a
failed validation (filter check_failures, used by playbooks/validate.yml), on node_validate
results of the fixture nodes (dgx-h100 with the fake NVML's scenarios, hdr-degraded)."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.checks import check_failures, failing_hosts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import compress_targets, group_checks, summarize
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from nvml_scenarios import fake_with
from test_node_validate import node_validate

DGX = {"expected_count": 8, "xid_source": "none"}


def dgx(scenario):
    return node_validate("dgx-h100", DGX, {}, adapter=NvmlAdapter(fake_with(scenario)))


@pytest.mark.parametrize("targets, text", [
    (["gpu%d" % i for i in range(8)], "gpu0\u20137"),
    (["gpu5", "gpu0", "gpu1", "gpu2"], "gpu0\u20132,5"),
    (["gpu3"], "gpu3"),
    (["mlx5_0/1", "mlx5_1/1"], "mlx5_0/1, mlx5_1/1"),
    (["node"], "node"),
    (["2048kB", "1048576kB"], "2048kB, 1048576kB"),
])
def test_compress_targets(targets, text):
    assert compress_targets(targets) == text


def test_eight_fabric_failures_are_one_group():
    result = dgx("h100-fabric-not-started")
    failing = [c for c in result["checks"] if c["status"] == "fail"]
    assert len(failing) == 8
    groups = group_checks(failing)
    assert [(g["id"], g["target"], len(g["checks"])) for g in groups] == [("gpu.fabric", "gpu0\u20137", 8)]


def test_messages_differing_only_by_their_target_are_grouped():
    checks = [{"id": "gpu.pcie", "target": "gpu%d" % i, "status": "warn",
               "message": "gpu%d: link x8, max x16" % i} for i in (0, 1, 2)]
    checks.append({"id": "gpu.pcie", "target": "gpu3", "status": "warn", "message": "gpu3: link gen3, max gen5"})
    groups = group_checks(checks)
    assert [(g["target"], g["message"]) for g in groups] == [("gpu0\u20132", "gpu0: link x8, max x16"),
                                                             ("gpu3", "gpu3: link gen3, max gen5")]


def test_failed_validation_in_a_few_lines():
    text = check_failures(dgx("h100-fabric-not-started"))
    lines = text.splitlines()
    assert lines[0].startswith("8 check(s) at or above fail_on=fail")
    assert lines[1:] == ["  gpu.fabric[gpu0\u20137]: NVSwitch fabric state NOT_STARTED (is nvidia-fabricmanager running?)"]
    bus = check_failures(dgx("h100-gpu-fell-off-bus")).splitlines()
    assert len(bus) == 2 and bus[1].startswith("  gpu.count[node]: NVML sees 7 of the 8 GPUs")


def test_degraded_rdma_node_and_fail_on():
    result = node_validate("hdr-degraded", {"enabled": False}, {"min_rate_gbps": 200})
    lines = check_failures(result, "fail").splitlines()
    assert lines[0].startswith("3 check(s) at or above fail_on=fail")
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  rdma.port.state[mlx5_2/1]", "  rdma.port.phys_state[mlx5_2/1]", "  rdma.port.rate[mlx5_3/1]"]
    assert check_failures(result, "warn").startswith("4 check(s) at or above fail_on=warn")
    assert check_failures(result, "never") == ""
    assert check_failures(dgx("h100-healthy")) == ""


def test_limit_counts_the_rest_and_lines_stay_short():
    checks = [{"id": "x.%d" % i, "target": "node", "status": "fail", "message": "m" * 500} for i in range(15)]
    lines = check_failures({"checks": checks}, limit=3).splitlines()
    assert len(lines) == 1 + 3 + 1 and lines[-1] == "  ... and 12 more"
    assert all(len(line) <= 202 for line in lines[1:4])


@pytest.mark.parametrize("result, fail_on, words", [
    ({"checks": []}, "sometimes", "fail_on must be one of fail, warn, never, got 'sometimes'"),
    ({"msg": "crashed"}, "fail", "expected a validation result with a 'checks' list"),
    ({"checks": []}, "fail", None),
])
def test_bad_input_is_named(result, fail_on, words):
    if words is None:
        assert check_failures(result, fail_on) == ""
        return
    with pytest.raises(AnsibleFilterError, match=words):
        check_failures(result, fail_on)


def test_failing_hosts_one_template_for_the_play():
    """validate.yml's pick of the nodes to fail: each host's own fail_on, hosts without a result
    (failed before, skipped) left out, input order kept."""
    healthy, fabric = dgx("h100-healthy"), dgx("h100-fabric-not-started")
    warned = {"checks": [{"id": "gpu.persistence_mode", "target": "gpu0", "status": "warn", "message": "off"}]}
    hostvars = {
        "n1": {"gpufleet_node_validation": fabric},
        "n2": {"gpufleet_node_validation": healthy},
        "n3": {"gpufleet_node_validation": fabric, "gpufleet_validate_fail_on": "never"},
        "n4": {"gpufleet_node_validation": warned, "gpufleet_validate_fail_on": "warn"},
        "n5": {"gpufleet_node_validation": warned},
        "n6": {},  # the module failed on it (bad option): no result registered
        "n7": {"gpufleet_node_validation": {"skipped": True, "changed": False}},
    }
    hosts = ["n7", "n6", "n5", "n4", "n3", "n2", "n1"]
    assert failing_hosts(hosts, hostvars) == ["n4", "n1"]
    assert failing_hosts(hosts, hostvars, fail_on="warn") == ["n5", "n4", "n1"]
    assert failing_hosts([], hostvars) == []


@pytest.mark.parametrize("hosts, message", [
    ("n1", "expected a list of host names"),
    (["ghost"], "'ghost' is not in hostvars"),
])
def test_failing_hosts_bad_input_is_named(hosts, message):
    with pytest.raises(AnsibleFilterError, match=message):
        failing_hosts(hosts, {"n1": {}})


def test_failing_hosts_bad_fail_on_is_named():
    with pytest.raises(AnsibleFilterError, match="fail_on must be one of"):
        failing_hosts(["n1"], {"n1": {"gpufleet_node_validation": dgx("h100-healthy"),
                                      "gpufleet_validate_fail_on": "sometimes"}})


class Unwalkable(list):
    """A checks list that fails the test when walked (its length can be read)."""

    def __iter__(self):
        raise AssertionError("the checks were walked")


def test_failing_hosts_reads_the_summary_not_the_checks():
    """The module's summary (counts per status of the same checks) decides, so the play's one
    template does not walk every check of every node (each a lazy container under ansible-core
    2.19); fail_on never reads nothing."""
    fabric, healthy = dgx("h100-fabric-not-started"), dgx("h100-healthy")
    hostvars = {}
    for name, result, fail_on in (("f", fabric, None), ("h", healthy, None), ("n", fabric, "never")):
        entry = {"gpufleet_node_validation": dict(result, checks=Unwalkable(result["checks"]))}
        if fail_on:
            entry["gpufleet_validate_fail_on"] = fail_on
        hostvars[name] = entry
    assert failing_hosts(["f", "h", "n"], hostvars) == ["f"]
    warned = [{"id": "x", "target": "node", "status": "warn", "message": "m"}]
    hostvars["w"] = {"gpufleet_node_validation": {"checks": Unwalkable(warned), "summary": summarize(warned),
                                                  "healthy": True}}
    assert failing_hosts(["w"], hostvars) == []
    assert failing_hosts(["w"], hostvars, fail_on="warn") == ["w"]


@pytest.mark.parametrize("summary, healthy", [
    (None, None),                                    # no summary
    ({"pass": 1, "warn": 0, "fail": 0}, True),       # a status missing
    ({"pass": 1, "warn": 0, "fail": 0, "skip": 0}, True),  # counts 1 check of 2
    ({"pass": 2, "warn": 0, "fail": 0, "skip": 0}, False),  # disagrees with healthy
    ({"pass": 1, "warn": 0, "fail": False, "skip": 1}, True),  # a bool is not a count
    ({"pass": 3, "warn": 0, "fail": -1, "skip": 0}, True),  # negative
    ("2 pass", True),                                # not a dict
])
def test_failing_hosts_walks_the_checks_when_the_summary_is_not_whole(summary, healthy):
    """A summary that does not account for every check (or disagrees with healthy) is not trusted:
    the checks themselves decide, so a failing check is never missed (fail closed)."""
    checks = [{"id": "a", "target": "node", "status": "pass", "message": "ok"},
              {"id": "b", "target": "node", "status": "fail", "message": "broken"}]
    result = {"checks": checks}
    if summary is not None:
        result["summary"] = summary
    if healthy is not None:
        result["healthy"] = healthy
    assert failing_hosts(["n"], {"n": {"gpufleet_node_validation": result}}) == ["n"]


def test_failing_hosts_names_a_result_without_a_checks_list():
    with pytest.raises(AnsibleFilterError, match="expected a validation result with a 'checks' list"):
        failing_hosts(["n"], {"n": {"gpufleet_node_validation": {"checks": "none", "summary": {}}}})


def test_default_verbosity_is_one_line_with_every_group_that_fits():
    # validate.yml passes ansible_verbosity: ansible-core 2.19 prints a failed task's msg twice
    bus_and_fabric = dgx("h100-fabric-not-started")
    text = check_failures(bus_and_fabric, verbosity=0)
    assert text == ("8 failing check(s): gpu.fabric[gpu0\u20137]: NVSwitch fabric state NOT_STARTED "
                    "(is nvidia-fabricmanager running?)")
    degraded = node_validate("hdr-degraded", {"enabled": False}, {"min_rate_gbps": 200})
    line = check_failures(degraded, verbosity=0)
    assert "\n" not in line and line.startswith("3 failing check(s): rdma.port.state[mlx5_2/1]: port DOWN; ")
    assert line.count("; ") == 2 and "more" not in line
    assert check_failures(degraded, "warn", verbosity=0).startswith("4 failing or warning check(s): ")


def test_one_line_counts_what_does_not_fit():
    checks = [{"id": "gpu.temperature", "target": "gpu%d" % i, "status": "fail",
               "message": "gpu%d at %d C, above the %d C slowdown threshold of this board" % (i, 90 + i, 87 + i)}
              for i in range(8)]
    line = check_failures({"checks": checks}, verbosity=0)
    assert len(line) <= 300 + len("; +8 more (-v lists them; every check: the fleet report)")
    shown = line.count("gpu.temperature[")
    assert 1 <= shown < 8 and line.endswith("; +%d more (-v lists them; every check: the fleet report)" % (8 - shown))


def test_verbosity_two_adds_observed_and_expected_values():
    degraded = node_validate("hdr-degraded", {"enabled": False}, {"min_rate_gbps": 200})
    lines = check_failures(degraded, verbosity=2).splitlines()
    assert lines[1] == "  rdma.port.state[mlx5_2/1]: port DOWN (observed DOWN, expected ACTIVE)"
    assert lines[3].endswith("(observed 100, expected 200)")
    assert check_failures(degraded, verbosity=1).splitlines()[1] == "  rdma.port.state[mlx5_2/1]: port DOWN"


@pytest.mark.parametrize("verbosity", [-1, "1", True, None])
def test_bad_verbosity_is_named(verbosity):
    with pytest.raises(AnsibleFilterError, match="verbosity must be an integer"):
        check_failures(dgx("h100-fabric-not-started"), verbosity=verbosity)
