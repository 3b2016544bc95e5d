"""Pair planning and result shaping of plugins/filter/fabric.py (playbooks/fabric_test.yml)."""

import itertools
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.fabric import (
    FilterModule,
    fabric_link_checks,
    fabric_matrix,
    fabric_measurement,
    fabric_plan,
    fabric_verdicts,
)

HOSTS = ["n1", "n2", "n3", "n4", "n5", "n6"]


def _rounds_are_conflict_free(plan):
    seen = {}
    for test in plan:
        for host in (test["client"], test["server"]):
            key = (test["round"], test["rail"], host)
            assert key not in seen, "%s in two tests of round %s: %s and %s" % (host, test["round"], seen[key], test)
            seen[key] = test["label"]


@pytest.mark.parametrize("count", [3, 4, 5, 6, 7, 8])
def test_ring_links_every_host_to_the_next(count):
    hosts = ["h%d" % i for i in range(count)]
    plan = fabric_plan(hosts)
    assert sorted((t["client"], t["server"]) for t in plan) == sorted(
        (hosts[i], hosts[(i + 1) % count]) for i in range(count))
    _rounds_are_conflict_free(plan)
    assert max(t["round"] for t in plan) + 1 == (2 if count % 2 == 0 else 3)
    assert all(t["device"] is None and t["rail"] is None and t["tcp_port"] == 18515 for t in plan)


def test_ring_of_two_is_one_pair_and_one_host_is_nothing():
    assert [(t["client"], t["server"], t["round"]) for t in fabric_plan(["a", "b"])] == [("a", "b", 0)]
    assert fabric_plan(["a"]) == []
    assert fabric_plan([]) == []


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6, 9])
def test_all_pairs_covers_each_pair_once_in_optimal_rounds(count):
    hosts = ["h%d" % i for i in range(count)]
    plan = fabric_plan(hosts, pattern="all-pairs")
    pairs = [(t["client"], t["server"]) for t in plan]
    assert sorted(pairs) == sorted(itertools.combinations(hosts, 2))
    assert all(hosts.index(client) < hosts.index(server) for client, server in pairs)
    _rounds_are_conflict_free(plan)
    assert max(t["round"] for t in plan) + 1 == (count - 1 if count % 2 == 0 else count)


def test_per_rail_one_rail_after_the_other_by_default():
    plan = fabric_plan(HOSTS[:4], devices=["mlx5_0", "mlx5_1"])
    assert len(plan) == 8
    rail0 = [t for t in plan if t["device"] == "mlx5_0"]
    rail1 = [t for t in plan if t["device"] == "mlx5_1"]
    assert {t["rail"] for t in rail0} == {0} and {t["tcp_port"] for t in rail0} == {18515}
    assert {t["rail"] for t in rail1} == {1} and {t["tcp_port"] for t in rail1} == {18516}
    assert max(t["round"] for t in rail0) < min(t["round"] for t in rail1)
    assert [t["round"] for t in plan] == sorted(t["round"] for t in plan)
    assert rail1[0]["label"] == "n1->n2/mlx5_1"
    _rounds_are_conflict_free(plan)


def test_per_rail_concurrent_shares_rounds_on_distinct_ports():
    plan = fabric_plan(HOSTS[:4], devices=["mlx5_0", "mlx5_1"], base_port=20000, concurrent_rails=True)
    assert {t["round"] for t in plan} == {0, 1}
    by_round = {}
    for test in plan:
        by_round.setdefault((test["round"], test["server"]), set()).add(test["tcp_port"])
    assert all(ports == {20000, 20001} for ports in by_round.values())
    _rounds_are_conflict_free(plan)


@pytest.mark.parametrize("kwargs, message", [
    ({"pattern": "star"}, "pattern must be one of ring, all-pairs"),
    ({"devices": "mlx5_0"}, "devices must be a list"),
    ({"devices": ["mlx5_0", "mlx5_0"]}, "lists mlx5_0 more than once"),
    ({"base_port": "x"}, "base_port must be an integer"),
    ({"base_port": 65535, "devices": ["a", "b"]}, "leaves no room"),
])
def test_bad_input_names_the_option(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        fabric_plan(HOSTS, **kwargs)


def test_hosts_must_be_a_list_of_unique_names():
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        fabric_plan("n1,n2")
    with pytest.raises(AnsibleFilterError, match="lists n1 more than once"):
        fabric_plan(["n1", "n2", "n1"])


MEASUREMENTS = [
    {"client": "n1", "server": "n2", "device": "mlx5_0", "gbps": 392.2},
    {"client": "n1", "server": "n2", "device": "mlx5_1", "gbps": 195.5},
    {"client": "n2", "server": "n3", "device": "mlx5_0", "gbps": 391.0},
    {"client": "n3", "server": "n1", "device": "mlx5_0", "gbps": None, "error": "Couldn't connect"},
    {"client": "n9", "server": "n1", "device": "mlx5_0", "gbps": 1.0},
]


def test_matrix_rows_are_senders_and_the_worst_rail_wins():
    matrix = fabric_matrix(MEASUREMENTS, ["n1", "n2", "n3"], title="ring")
    assert matrix == {
        "title": "ring",
        "hosts": ["n1", "n2", "n3"],
        "gbps": [[None, 195.5, None], [None, None, 391.0], [None, None, None]],
    }


def test_matrix_of_one_rail():
    matrix = fabric_matrix(MEASUREMENTS, ["n1", "n2", "n3"], device="mlx5_0")
    assert matrix["gbps"][0][1] == 392.2
    assert "title" not in matrix


def test_matrix_rejects_non_dict_measurements():
    with pytest.raises(AnsibleFilterError, match="each measurement must be a dict"):
        fabric_matrix(["n1->n2"], ["n1", "n2"])


def test_link_checks_name_links_below_the_minimum_and_failed_tests():
    checks = fabric_link_checks(MEASUREMENTS[:4], min_gbps=300)
    by_target = {c["target"]: c for c in checks}
    assert by_target["n1->n2/mlx5_0"]["status"] == "pass"
    low = by_target["n1->n2/mlx5_1"]
    assert low["status"] == "fail" and low["id"] == "rdma.fabric.link"
    assert low["observed"] == 195.5 and low["expected"] == ">= 300 Gb/s"
    assert "below the minimum 300" in low["message"]
    missing = by_target["n3->n1/mlx5_0"]
    assert missing["status"] == "fail" and "Couldn't connect" in missing["message"]


def test_link_checks_without_minimum_pass_completed_tests():
    checks = fabric_link_checks(MEASUREMENTS[:2])
    assert [c["status"] for c in checks] == ["pass", "pass"]
    assert all("expected" not in c for c in checks)
    with pytest.raises(AnsibleFilterError, match="min_gbps must be a number"):
        fabric_link_checks(MEASUREMENTS, min_gbps="fast")


def test_measurement_from_an_rdma_bandwidth_client_result():
    test = fabric_plan(["n1", "n2"], devices=["mlx5_0"])[0]
    ok = fabric_measurement({"item": test, "bw_average_gbps": 392.21, "perftest_rc": 0, "checks": []})
    assert ok == {"client": "n1", "server": "n2", "device": "mlx5_0", "rail": 0, "gbps": 392.21, "error": None}
    failed = fabric_measurement({"item": test, "perftest_rc": 1, "timed_out": False})
    assert failed["gbps"] is None and failed["error"] == "perftest exit status 1"
    assert fabric_measurement({"item": test, "timed_out": True})["error"] == "timed out"
    with pytest.raises(AnsibleFilterError, match="expects a looped rdma_bandwidth result"):
        fabric_measurement({"bw_average_gbps": 1.0})


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {"fabric_plan", "fabric_matrix", "fabric_link_checks", "fabric_measurement",
                                             "fabric_verdicts"}


# ---------------------------------------------------------------- link attribution (issue: the fabric test names the bad link)

RAILS = ["mlx5_0", "mlx5_1"]
FLEET = ["gpu%02d" % i for i in range(16)]
GOOD, SLOW = 392.0, 151.0


def measure(plan, slow_hosts=(), slow_receive=(), slow_links=()):
    """Measurements for ``plan`` with injected faults: hosts slow on every rail and direction,
    (host, rail) pairs slow when receiving, and (a, b, rail) links slow both ways."""
    out = []
    for test in plan:
        client, server, rail = test["client"], test["server"], test["device"]
        gbps = GOOD
        if client in slow_hosts or server in slow_hosts:
            gbps = SLOW
        if (server, rail) in slow_receive:
            gbps = 201.5
        if (client, server, rail) in slow_links or (server, client, rail) in slow_links:
            gbps = 288.0
        out.append({"client": client, "server": server, "device": rail, "rail": test["rail"], "gbps": gbps,
                    "error": None})
    return out


def statuses(verdicts, check_id, target=None):
    return dict((host, [c["status"] for c in checks if c["id"] == check_id
                        and (target is None or c["target"] == target)][0])
                for host, checks in verdicts.items())


def failing_hosts(verdicts):
    return sorted(host for host, checks in verdicts.items() if any(c["status"] == "fail" for c in checks))


def test_issue_scenario_16_hosts_two_slow_hosts_and_a_slow_receive_rail():
    plan = fabric_plan(FLEET, pattern="all-pairs", devices=RAILS, directions="both")
    assert len(plan) == 16 * 15 * 2  # every ordered pair on both rails: the matrix is full
    measurements = measure(plan, slow_hosts=("gpu03", "gpu11"), slow_receive=(("gpu07", "mlx5_1"),))
    verdicts = fabric_verdicts(measurements, FLEET, min_gbps=360)
    assert failing_hosts(verdicts) == ["gpu03", "gpu07", "gpu11"]
    hosts = statuses(verdicts, "rdma.fabric.host")
    assert {h for h, s in hosts.items() if s != "pass"} == {"gpu03", "gpu07", "gpu11"}
    gpu03 = verdicts["gpu03"][0]
    assert gpu03["status"] == "fail" and "most of this host's links are low: 60 of 60" in gpu03["message"]
    gpu07 = verdicts["gpu07"][0]
    assert gpu07["status"] == "fail"
    assert "bad rail mlx5_1 (receive)" in gpu07["message"]
    assert statuses(verdicts, "rdma.fabric.rail", "mlx5_1")["gpu07"] == "fail"
    assert statuses(verdicts, "rdma.fabric.rail", "mlx5_0")["gpu07"] == "pass"
    # a good host's low links to the slow ones are named and explained, never blamed on it
    gpu00 = dict((c["target"], c) for c in verdicts["gpu00"])
    assert gpu00["node"]["status"] == "pass"
    assert gpu00["node"]["message"] == "60 link(s) measured, 9 low, all explained by bad peers"
    assert (gpu00["mlx5_1"]["status"], gpu00["mlx5_1"]["message"]) == ("pass", "30 link(s), 5 low, all explained by bad peers")
    to_slow = gpu00["gpu00->gpu03/mlx5_0"]
    assert to_slow["status"] == "skip"
    assert to_slow["message"] == ("151.00 Gb/s below the minimum 360 Gb/s: charged to the bad gpu03 mlx5_0 (receive), "
                                  "not to this host")
    same = dict((c["target"], c) for c in verdicts["gpu03"])["gpu00->gpu03/mlx5_0"]
    assert same["status"] == "fail" and "charged to this host's bad gpu03 mlx5_0 (receive)" in same["message"]
    # no host other than the three has a failing or warning check
    assert {h for h, checks in verdicts.items() if any(c["status"] in ("fail", "warn") for c in checks)} == {
        "gpu03", "gpu07", "gpu11"}
    assert to_slow["observed"] == SLOW and to_slow["expected"] == ">= 360 Gb/s"
    # every measurement is kept, charged to both ends
    assert sum(1 for checks in verdicts.values() for c in checks if c["id"] == "rdma.fabric.link") == 2 * len(plan)
    json.dumps(verdicts, allow_nan=False)


def test_one_way_all_pairs_still_finds_the_receive_rail():
    plan = fabric_plan(FLEET, pattern="all-pairs", devices=RAILS)
    measurements = measure(plan, slow_hosts=("gpu03", "gpu11"), slow_receive=(("gpu07", "mlx5_1"),))
    verdicts = fabric_verdicts(measurements, FLEET, min_gbps=360)
    assert failing_hosts(verdicts) == ["gpu03", "gpu07", "gpu11"]
    assert "mlx5_1 (receive)" in verdicts["gpu07"][0]["message"]


def test_host_with_5_of_30_low_links_is_warn_and_names_the_links():
    plan = fabric_plan(FLEET, pattern="all-pairs", devices=RAILS)
    bad = [("gpu05", peer, "mlx5_0") for peer in ("gpu09", "gpu10", "gpu12", "gpu13", "gpu14")]
    verdicts = fabric_verdicts(measure(plan, slow_links=bad), FLEET, min_gbps=360)
    host = verdicts["gpu05"][0]
    assert host["observed"] == {"links": 30, "low": 5}
    assert host["status"] == "warn"
    assert "5 of 30 links low" in host["message"] and "gpu05->gpu13/mlx5_0" in host["message"]
    assert failing_hosts(verdicts) == []
    link = dict((c["target"], c) for c in verdicts["gpu13"])["gpu05->gpu13/mlx5_0"]
    assert link["status"] == "warn" and "link problem between gpu05 and gpu13 on mlx5_0" in link["message"]
    assert statuses(verdicts, "rdma.fabric.host")["gpu13"] == "warn"
    assert statuses(verdicts, "rdma.fabric.host")["gpu01"] == "pass"


def test_isolated_low_pair_is_a_link_problem_not_a_host():
    hosts = ["a", "b"]
    measurements = measure(fabric_plan(hosts, directions="both"), slow_links=[("a", "b", None)])
    verdicts = fabric_verdicts(measurements, hosts, min_gbps=360)
    assert failing_hosts(verdicts) == []
    assert [c["status"] for c in verdicts["a"]] == ["warn", "warn", "warn"]
    assert "link problem between a and b on default device" in verdicts["a"][1]["message"]


def test_unmeasured_and_non_finite_links_are_low_and_a_host_without_tests_fails():
    hosts = ["a", "b", "c", "d"]
    plan = fabric_plan(hosts, pattern="all-pairs")
    measurements = measure(plan)
    for item in measurements:
        if "d" in (item["client"], item["server"]):
            item["gbps"], item["error"] = (float("nan"), None) if item["client"] == "a" else (None, "timed out")
    verdicts = fabric_verdicts(measurements, hosts + ["e"], min_gbps="360")
    assert failing_hosts(verdicts) == ["d", "e"]
    assert verdicts["e"][0]["message"] == "no link of this host was measured"
    link = dict((c["target"], c) for c in verdicts["b"])["b->d"]
    assert link["observed"] is None and "no bandwidth measured (timed out)" in link["message"]
    json.dumps(verdicts, allow_nan=False)


@pytest.mark.parametrize("minimum", ["fast", float("nan"), float("inf")])
def test_verdicts_reject_a_threshold_that_is_not_a_finite_number(minimum):
    with pytest.raises(AnsibleFilterError, match="min_gbps must be a finite number"):
        fabric_verdicts(MEASUREMENTS, ["n1", "n2", "n3"], min_gbps=minimum)


def test_matrix_full_per_rail_with_the_minimum():
    hosts = ["a", "b", "c"]
    plan = fabric_plan(hosts, pattern="all-pairs", devices=RAILS, directions="both")
    measurements = measure(plan, slow_receive=(("b", "mlx5_1"),))
    matrix = fabric_matrix(measurements, hosts, title="ib_write_bw all-pairs", min_gbps=360, per_rail=True)
    assert set(matrix) == {"title", "hosts", "gbps", "rails", "per_rail", "min_gbps"}
    assert matrix["min_gbps"] == 360.0 and matrix["rails"] == RAILS
    assert matrix["per_rail"]["mlx5_0"] == [[None, GOOD, GOOD], [GOOD, None, GOOD], [GOOD, GOOD, None]]
    assert matrix["per_rail"]["mlx5_1"] == [[None, 201.5, GOOD], [GOOD, None, GOOD], [GOOD, 201.5, None]]
    assert matrix["gbps"] == matrix["per_rail"]["mlx5_1"]  # worst rail per pair
    assert fabric_matrix([{"client": "a", "server": "b", "gbps": float("nan")}], hosts)["gbps"][0][1] is None


def test_plan_both_directions_measures_every_ordered_pair_without_conflicts():
    plan = fabric_plan(HOSTS, pattern="all-pairs", directions="both")
    assert sorted((t["client"], t["server"]) for t in plan) == sorted(itertools.permutations(HOSTS, 2))
    _rounds_are_conflict_free(plan)
    ring = fabric_plan(HOSTS[:3], directions="both")
    assert sorted((t["client"], t["server"]) for t in ring) == sorted(itertools.permutations(HOSTS[:3], 2))
    _rounds_are_conflict_free(ring)
    with pytest.raises(AnsibleFilterError, match="directions must be one of one, both"):
        fabric_plan(HOSTS, directions="up")
