"""The report store under AWX job slicing (plugins/plugin_utils/fleet_report_store.py, docs/awx.md):
the slices of a job, written in any order and at once, leave the fleet picture that one run of
their hosts leaves, check by check, whatever keep_runs is; writers in separate processes at once
lose nothing (fcntl.flock + atomic rename)."""

import json
import multiprocessing
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_store as store
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import FleetReport

PLAY = "Validate GPU and RDMA readiness"
IDS = ("gpu.count", "gpu.ecc", "rdma.port_state", "rdma.link_rate")
STATUSES = ("pass", "fail", "warn", "skip")


def document(results, minute, job=None):
    """A run document as the callback makes it: ``results`` {host: [(id, status), ...]}."""
    report = FleetReport()
    report.playbook = "validate.yml"
    report.start_play(PLAY, sorted(results))
    report.validation_task("validate")
    for host in sorted(results):
        checks = [{"id": check_id, "target": "node", "status": status, "message": "%s is %s" % (check_id, status)}
                  for check_id, status in results[host]]
        report.task_result(host, {"checks": checks}, "Validate the node", "ok", "validate", True)
    report.end_play()
    report.finish(())
    started = "2026-11-29T10:%02d:00Z" % (minute % 60)
    meta = {"id": store.run_id(started, "validate.yml"), "playbook": "validate.yml", "started_at": started,
            "generated_at": started}
    if job is not None:
        meta["job"] = job
    return report.as_dict(started, run=meta)


def picture(directory):
    """{host: {(id, target): check}} of the fleet picture, without failing_since (a run id)."""
    with open(os.path.join(directory, store.JSON_NAME), encoding="utf-8") as handle:
        fleet = json.load(handle)
    hosts = {}
    for host, entry in fleet["hosts"].items():
        hosts[host] = dict(((c["id"], c["target"]), dict((k, v) for k, v in c.items() if k != "failing_since"))
                           for c in entry["checks"])
    return hosts, fleet["totals"]


HOSTS = ["node-%02d" % n for n in range(1, 9)]
host_results = st.lists(st.tuples(st.sampled_from(IDS), st.sampled_from(STATUSES)), min_size=1, max_size=4,
                        unique_by=lambda item: item[0])
# a job: the hosts it validates with their results, its slice count and the order its slices write in
jobs = st.lists(
    st.tuples(st.dictionaries(st.sampled_from(HOSTS), host_results, min_size=1, max_size=8),
              st.integers(min_value=1, max_value=5), st.randoms(use_true_random=False)),
    min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs, keep_runs=st.integers(min_value=1, max_value=3))
def test_sliced_jobs_in_any_order_leave_the_picture_of_whole_runs(jobs, keep_runs):
    sliced, whole = tempfile.mkdtemp(), tempfile.mkdtemp()
    try:
        minute = 0
        for number, (results, count, order) in enumerate(jobs, 1):
            names = sorted(results)
            slices = [names[k::count] for k in range(count)]
            slices = [s for s in slices if s]
            order.shuffle(slices)
            for hosts in slices:  # the slices of the job, one after the other in a random order
                minute += 1
                store.ReportStore(sliced, keep_runs=keep_runs).write(
                    document(dict((h, results[h]) for h in hosts), minute, job="job-%d" % number))
            minute += 1
            store.ReportStore(whole, keep_runs=keep_runs).write(document(results, minute))
            # after every job: the same hosts, the same checks, the same totals
            assert picture(sliced) == picture(whole)
        # the last job's hosts are all there, whatever keep_runs is
        assert set(jobs[-1][0]) <= set(picture(sliced)[0])
    finally:
        shutil.rmtree(sliced)
        shutil.rmtree(whole)


def test_retention_counts_jobs_and_keeps_the_slices_of_one_together(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    names = ["20261129T10%02d00Z-validate" % n for n in range(7)]
    for name in names:
        (runs / name).mkdir()
    sequence = dict((name, n + 1) for n, name in enumerate(names))
    # run 0 alone; runs 1-3 job A; run 4 alone; runs 5-6 job B
    jobs = {names[1]: "A", names[2]: "A", names[3]: "A", names[5]: "B", names[6]: "B"}
    kept = store.prune(str(runs), 2, dict(sequence), newest=names[6], jobs=dict(jobs))
    assert kept == names[4:]  # run 4 and job B
    kept = store.prune(str(runs), 3, dict(sequence), newest=names[6], jobs=dict(jobs))
    assert kept == names[4:]  # already deleted stay deleted


def test_a_job_is_as_new_as_its_newest_slice(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    names = ["20261129T10%02d00Z-validate" % n for n in range(4)]
    for name in names:
        (runs / name).mkdir()
    sequence = dict((name, n + 1) for n, name in enumerate(names))
    # job A's first slice wrote first, an unrelated run second, job A's last slice third
    jobs = {names[0]: "A", names[2]: "A"}
    assert store.prune(str(runs), 2, dict(sequence), newest=names[3], jobs=jobs) == [names[0], names[2], names[3]]


def test_the_job_is_recorded_in_the_sequence_and_rebuilt_from_the_runs(tmp_path):
    directory = str(tmp_path / "reports")
    store.ReportStore(directory).write(document({"node-01": [("gpu.count", "pass")]}, 1, job="77"))
    store.ReportStore(directory).write(document({"node-02": [("gpu.count", "fail")]}, 2))
    runs = os.path.join(directory, "runs")
    index = store.read_sequence(runs)
    assert list(index["jobs"].values()) == ["77"] and len(index["runs"]) == 2
    os.unlink(os.path.join(runs, store.SEQUENCE_NAME))
    assert store.read_sequence(runs) == index
    with open(os.path.join(runs, store.SEQUENCE_NAME), "w") as handle:
        handle.write('{"last": 2, "runs": {"x": 1}, "jobs": {"x": ["not", "text"], "y": "not a run"}}')
    assert store.read_sequence(runs)["jobs"] == {}


def _write_slice(directory, hosts, barrier):
    barrier.wait()  # every writer starts at once
    store.ReportStore(directory, keep_runs=1).write(
        document(dict((h, [("gpu.count", "fail" if h.endswith("3") else "pass")]) for h in hosts), 5, job="9"))


def test_slices_writing_at_once_from_separate_processes_lose_nothing(tmp_path):
    directory = str(tmp_path / "reports")
    hosts = ["node-%02d" % n for n in range(1, 25)]
    slices = [hosts[k::8] for k in range(8)]
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(slices))
    workers = [context.Process(target=_write_slice, args=(directory, s, barrier)) for s in slices]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    found, totals = picture(directory)
    assert sorted(found) == hosts
    assert totals["hosts"] == 24 and totals["unhealthy"] == 3  # node-03, node-13, node-23
    runs = os.path.join(directory, "runs")
    index = store.read_sequence(runs)
    assert sorted(index["runs"].values()) == list(range(1, 9))  # one number each, none lost
    assert len([n for n in os.listdir(runs) if store.RUN_DIR.match(n)]) == 8  # keep_runs 1 = one job
    assert not [n for n in os.listdir(directory) if n.startswith(".")]  # no temporary file left


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.dictionaries(st.sampled_from(HOSTS[:4]), host_results, min_size=1, max_size=4),
       second=st.dictionaries(st.sampled_from(HOSTS[4:]), host_results, min_size=1, max_size=4),
       counts=st.tuples(st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=4)),
       interleaving=st.randoms(use_true_random=False), keep_runs=st.integers(min_value=2, max_value=3))
def test_two_sliced_jobs_interleaved_leave_the_picture_of_two_whole_runs(first, second, counts, interleaving,
                                                                          keep_runs):
    """Two sliced jobs running at the same time (AWX: slicing implies allow_simultaneous) over
    disjoint hosts, their slices' writes interleaved in any order: the picture of the two jobs
    written whole, the job whose last slice wrote last second. keep_runs at least the number of
    jobs writing at once (2 here): with keep_runs 1 a job written between two slices of the other
    prunes that job's first slices (the documented limit, docs/awx.md; found by this test)."""
    sliced, whole = tempfile.mkdtemp(), tempfile.mkdtemp()
    try:
        writes = []
        for label, results, count in (("A", first, counts[0]), ("B", second, counts[1])):
            names = sorted(results)
            writes += [(label, dict((h, results[h]) for h in names[k::count])) for k in range(count) if names[k::count]]
        interleaving.shuffle(writes)
        for minute, (label, results) in enumerate(writes, 1):
            store.ReportStore(sliced, keep_runs=keep_runs).write(document(results, minute, job=label))
        last = writes[-1][0]
        order = [("B", second), ("A", first)] if last == "A" else [("A", first), ("B", second)]
        for minute, (_label, results) in enumerate(order, 1):
            store.ReportStore(whole, keep_runs=keep_runs).write(document(results, minute))
        assert picture(sliced) == picture(whole)
    finally:
        shutil.rmtree(sliced)
        shutil.rmtree(whole)


def _callback_run(tmp_path, reports, host, extra_vars=None, **options):
    from test_fleet_report import chk, make_callback, make_play, result
    callback, _display = make_callback(dir=str(reports), html=False, **options)
    play = make_play(tmp_path, [host])
    if extra_vars:
        play.get_variable_manager()._extra_vars = extra_vars  # what -e gives the VariableManager
    callback.v2_playbook_on_play_start(play)
    callback.v2_runner_on_ok(result(host, {"checks": [chk("gpu.count", "node", "pass", "8 GPUs")]}))
    callback.v2_playbook_on_stats(None)
    with open(os.path.join(str(reports), store.JSON_NAME)) as handle:
        return json.load(handle)["run"]


def test_the_job_of_a_run_is_awx_workflow_job_id_unless_the_option_says(tmp_path):
    assert "job" not in _callback_run(tmp_path, tmp_path / "a", "node-01")
    assert _callback_run(tmp_path, tmp_path / "b", "node-01", {"awx_workflow_job_id": 311})["job"] == "311"
    assert _callback_run(tmp_path, tmp_path / "c", "node-01", {"awx_workflow_job_id": 311}, job="sweep-7")["job"] \
        == "sweep-7"
    assert "job" not in _callback_run(tmp_path, tmp_path / "d", "node-01", {"awx_workflow_job_id": {"not": "text"}})
