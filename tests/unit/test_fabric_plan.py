"""Pair planning and result shaping of plugins/filter/fabric.py (playbooks/fabric-test.yml)."""

import itertools

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.fabric import (
    FilterModule,
    fabric_link_checks,
    fabric_matrix,
    fabric_measurement,
    fabric_plan,
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
    assert set(FilterModule().filters()) == {"fabric_plan", "fabric_matrix", "fabric_link_checks", "fabric_measurement"}
