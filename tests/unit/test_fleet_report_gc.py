"""The fleet_report callback moves what the run holds at its start out of the cyclic GC's reach
(gc.freeze in v2_playbook_on_start) and sets it back when the report is written (gc.unfreeze in
v2_playbook_on_stats, also when writing fails): docs/performance.md, "Fleet status from the
Kubernetes API" (issue 45 item 3)."""

import gc
import json
import os

import pytest

from test_fleet_report import chk, make_callback, result, run_playbook


class FakePlaybook(object):
    _file_name = "fleet_status.yml"


@pytest.fixture(autouse=True)
def _unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_run_start_is_frozen_and_the_report_sets_it_back(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    held = [[index] for index in range(3)]  # containers the cyclic GC tracks, alive from the start of the run
    assert gc.get_freeze_count() == 0
    callback.v2_playbook_on_start(FakePlaybook())
    assert gc.get_freeze_count() >= len(held)
    run_playbook(callback, [result("node-01", {"checks": [chk("gpu.count", "node", "pass", "8 GPUs")]})])
    assert gc.get_freeze_count() == 0
    with open(os.path.join(str(tmp_path), "fleet-report.json")) as handle:
        report = json.load(handle)
    assert report["playbook"] == "fleet_status.yml"
    assert list(report["hosts"]) == ["node-01"]
    assert held == [[0], [1], [2]]


def test_cyclic_garbage_made_after_the_start_is_still_collected(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    callback.v2_playbook_on_start(FakePlaybook())

    class Node(object):
        pass

    node = Node()
    node.self = node
    del node
    assert gc.collect() >= 1  # the cycle made after the freeze is found
    callback.v2_playbook_on_stats(None)
    assert gc.get_freeze_count() == 0


def test_unfrozen_when_the_report_cannot_be_written(tmp_path, monkeypatch):
    callback, _display = make_callback(dir=str(tmp_path))
    callback.v2_playbook_on_start(FakePlaybook())

    def broken():
        raise RuntimeError("disk gone")

    monkeypatch.setattr(callback, "_write_report", broken)
    with pytest.raises(RuntimeError):
        callback.v2_playbook_on_stats(None)
    assert gc.get_freeze_count() == 0
