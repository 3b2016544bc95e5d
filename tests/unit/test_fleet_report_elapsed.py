# -*- coding: utf-8 -*-
"""fleet_report.module_seconds: a result's elapsed_ms that is no duration (red team round 9: 10**400 raised
OverflowError in the callback's v2_runner_on_ok and stopped the report) is not measured; the others are."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import FleetReport, module_seconds


@pytest.mark.parametrize("value,expected", [
    (10 ** 400, None), (-(10 ** 400), None), (float("nan"), None), (float("inf"), None), (-1, None),
    (True, None), ("12", None), (None, None), (0, 0.0), (1500, 1.5), (12.5, 0.0125), (2 ** 63, 2 ** 63 / 1000.0)])
def test_module_seconds(value, expected):
    assert module_seconds({"elapsed_ms": value}) == expected


def test_a_huge_elapsed_ms_leaves_the_checks_reported_and_the_task_unmeasured():
    report = FleetReport()
    report.task_result("node1", {"checks": [{"id": "gpu.count", "target": "node", "status": "pass", "message": "8"}],
                                 "elapsed_ms": 10 ** 400}, "Validate", "ok", "t1", True, duration=0.25)
    document = report.as_dict("2026-11-30T03:00:00Z")
    assert [check["id"] for check in document["hosts"]["node1"]["checks"]] == ["gpu.count"]
