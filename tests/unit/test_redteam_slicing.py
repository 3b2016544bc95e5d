"""Red team: AWX job slicing into one shared fleet report directory (issue 45 items 1-2).

Attacks written from docs/awx.md section 4, docs/reports.md, docs/contracts.md "Reports" and
`ansible-doc -t callback gpufleet.cluster.fleet_report` only; the store is driven as
tests/unit/test_fleet_report_slicing.py drives it. Every store call that could block (a FIFO, a
lock) runs in a forked child with a bound, so a hang is a failing assertion, not a stuck suite.
"""

import json
import multiprocessing
import os
import signal
import subprocess
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_store as store
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import FleetReport

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAY = "Validate GPU and RDMA readiness"
CONTEXT = multiprocessing.get_context("fork")


def document(results, minute, job=None, hour=10):
    """A run document as the callback makes it (as in test_fleet_report_slicing.py)."""
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
    started = "2026-11-29T%02d:%02d:00Z" % (hour, minute % 60)
    meta = {"id": store.run_id(started, "validate.yml"), "playbook": "validate.yml", "started_at": started,
            "generated_at": started}
    if job is not None:
        meta["job"] = job
    return report.as_dict(started, run=meta)


def ok(hosts, status="pass"):
    return dict((h, [("gpu.count", status)]) for h in hosts)


def fleet(directory):
    with open(os.path.join(str(directory), store.JSON_NAME), encoding="utf-8") as handle:
        return json.load(handle)


def run_dirs(directory):
    return sorted(n for n in os.listdir(os.path.join(str(directory), "runs")) if store.RUN_DIR.match(n))


def bounded(target, *args, seconds=20):
    """Run target(*args) in a forked child; return its exit code, or 'hung' (child killed)."""
    child = CONTEXT.Process(target=target, args=args)
    child.start()
    child.join(seconds)
    if child.is_alive():
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        return "hung"
    return child.exitcode


def _write(directory, results, minute, job=None, keep_runs=20):
    store.ReportStore(str(directory), keep_runs=keep_runs).write(document(results, minute, job=job))


def all_json_parse(directory):
    """No half file: every JSON file the store left under the directory parses."""
    for base, _dirs, files in os.walk(str(directory)):
        for name in files:
            path = os.path.join(base, name)
            if name.endswith(".json") and os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    json.load(handle)


# --- many slices at once ---------------------------------------------------------------------------

def _slice_at_once(directory, hosts, barrier, job, keep_runs):
    barrier.wait()
    _write(directory, ok(hosts), 7, job=job, keep_runs=keep_runs)


@pytest.mark.parametrize("keep_runs", [1, 2])
def test_sixteen_slices_of_one_job_at_once_lose_no_host(tmp_path, keep_runs):
    """docs/awx.md: 'A slice therefore never pushes another slice's hosts out of the picture, whatever
    `keep_runs` and the slice count are.' 16 slices, all started at the same second (same run name)."""
    directory = tmp_path / "reports"
    hosts = ["dgx-%03d" % n for n in range(64)]
    slices = [hosts[k::16] for k in range(16)]
    barrier = CONTEXT.Barrier(16)
    workers = [CONTEXT.Process(target=_slice_at_once, args=(str(directory), s, barrier, "4711", keep_runs))
               for s in slices]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert sorted(fleet(directory)["hosts"]) == hosts
    assert fleet(directory)["totals"]["hosts"] == 64
    names = run_dirs(directory)
    assert len(names) == 16 and len(set(names)) == 16  # '-2', '-3' ... when runs start in the same second
    index = store.read_sequence(str(directory / "runs"))
    assert sorted(index["runs"].values()) == list(range(1, 17))
    all_json_parse(directory)


def test_sixteen_unrelated_runs_at_once_keep_exactly_keep_runs(tmp_path):
    """contracts.md: 'the newest `keep_runs` (default 20) runs are kept', 'newest by write order';
    'A host whose last run is no longer kept leaves the picture.' 16 separate jobs at once, keep_runs 3."""
    directory = tmp_path / "reports"
    barrier = CONTEXT.Barrier(16)
    workers = [CONTEXT.Process(target=_slice_at_once, args=(str(directory), ["n-%02d" % k], barrier, None, 3))
               for k in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    names = run_dirs(directory)
    assert len(names) == 3
    index = store.read_sequence(str(directory / "runs"))
    kept_hosts = set()
    for name in names:
        with open(os.path.join(str(directory), "runs", name, store.JSON_NAME), encoding="utf-8") as handle:
            kept_hosts |= set(json.load(handle)["hosts"])
    assert set(fleet(directory)["hosts"]) == kept_hosts
    assert sorted(index["runs"][n] for n in names) == [14, 15, 16]  # the last three writes


# --- a slice killed mid-write ----------------------------------------------------------------------

def _write_forever(directory, count):
    big = dict(("big-%04d" % n, [("gpu.count", "fail"), ("gpu.ecc", "pass"), ("rdma.port_state", "warn")])
               for n in range(count))
    minute = 0
    while True:
        minute += 1
        _write(directory, big, minute, job="killed", keep_runs=2)


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.45, 0.8])
def test_a_slice_killed_mid_write_leaves_a_readable_store(tmp_path, delay):
    """awx.md: 'every file written whole and renamed into place'; a SIGKILLed writer must leave the
    previous picture or the new one, never half a file, and the next run must work (the lock is an
    flock, released with the dead process)."""
    directory = tmp_path / "reports"
    _write(directory, ok(["before-1", "before-2"]), 1, job="old")
    child = CONTEXT.Process(target=_write_forever, args=(str(directory), 600))
    child.start()
    time.sleep(delay)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    all_json_parse(directory)
    picture = fleet(directory)
    assert {"before-1", "before-2"} <= set(picture["hosts"])
    assert bounded(_write, str(directory), ok(["after"]), 59, "new", 5, seconds=20) == 0
    picture = fleet(directory)
    assert {"before-1", "before-2", "after"} <= set(picture["hosts"])
    all_json_parse(directory)


# --- stale lock ------------------------------------------------------------------------------------

def _hold_lock_and_die(runs):
    import fcntl
    handle = open(os.path.join(runs, ".lock"), "a+")  # pylint: disable=consider-using-with
    fcntl.flock(handle, fcntl.LOCK_EX)
    os._exit(0)  # dies holding it: the kernel releases an flock with its holder


@pytest.mark.parametrize("content", [b"", b"12345\n", b"\x00" * 4096, b"not a pid"])
def test_a_stale_lock_file_or_a_dead_holder_does_not_block(tmp_path, content):
    """awx.md: the lock is 'fcntl.flock on runs/.lock': a lock file left behind (any content) or a
    holder that died must not stop the next slice."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1)
    runs = str(directory / "runs")
    with open(os.path.join(runs, ".lock"), "wb") as handle:
        handle.write(content)
    assert bounded(_hold_lock_and_die, runs, seconds=10) == 0
    assert bounded(_write, str(directory), ok(["b"]), 2, seconds=20) == 0
    assert {"a", "b"} <= set(fleet(directory)["hosts"])


def test_a_lock_directory_instead_of_a_lock_file_fails_clearly_or_works(tmp_path):
    """A hand-made runs/.lock directory: the write must not hang (a clear error or success)."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1)
    os.unlink(str(directory / "runs" / ".lock")) if os.path.lexists(str(directory / "runs" / ".lock")) else None
    os.mkdir(str(directory / "runs" / ".lock"))
    assert bounded(_write, str(directory), ok(["b"]), 2, seconds=20) != "hung"
    all_json_parse(directory)


# --- damaged runs/.sequence ------------------------------------------------------------------------

SEQUENCE_DAMAGE = {
    "garbage": b"\x89PNG\r\n\x1a\n garbage",
    "empty": b"",
    "huge": b'{"last": 1' + b"0" * 400 + b', "runs": {}, "jobs": {}}',
    "huge_bare": b"9" * 5000,
    "negative": b'{"last": -5, "runs": {}, "jobs": {}}',
    "nan": b'{"last": NaN, "runs": {}, "jobs": {}}',
    "infinity": b'{"last": Infinity, "runs": {}, "jobs": {}}',
    "float": b'{"last": 2.5, "runs": {}, "jobs": {}}',
    "deep": b'{"last": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    "list": b"[1, 2, 3]",
    "string_last": b'{"last": "3", "runs": {}, "jobs": {}}',
    "bool_last": b'{"last": true, "runs": {}, "jobs": {}}',
    "runs_negative": b'{"last": 2, "runs": {"x": -1}, "jobs": {}}',
    "duplicate_numbers": b'{"last": 1, "runs": {"a": 1, "b": 1}, "jobs": {}}',
    "truncated": b'{"last": 2, "runs": {"2026',
}


def _damaged_store(tmp_path):
    directory = tmp_path / "reports"
    _write(directory, ok(["a-1", "a-2"]), 1, job="A")
    _write(directory, ok(["b-1"]), 2)
    return directory


def _new_sequence_is_newest(directory):
    """The run just written has a sequence above every other kept run (monotonic, write order)."""
    runs = str(directory / "runs")
    latest = os.path.basename(os.path.realpath(os.path.join(runs, "latest")))
    with open(os.path.join(runs, latest, store.JSON_NAME), encoding="utf-8") as handle:
        newest = json.load(handle)["run"]["sequence"]
    for name in run_dirs(directory):
        if name == latest:
            continue
        with open(os.path.join(runs, name, store.JSON_NAME), encoding="utf-8") as handle:
            other = json.load(handle)["run"].get("sequence")
        assert isinstance(other, int) and isinstance(newest, int) and other < newest, (name, other, newest)
    return latest


# bool_last, deep, duplicate_numbers, huge, infinity, negative: found mishandled by the red team (a
# RecursionError or OverflowError crashed the write, bool/negative/400-digit numbers were taken): the
# strict reader fleet_report_store.parse_sequence refuses them, the index is rebuilt from the runs
SEQUENCE_DAMAGE_HELD = ("bool_last", "deep", "duplicate_numbers", "empty", "float", "garbage", "huge", "huge_bare",
                        "infinity", "list", "nan", "negative", "runs_negative", "string_last", "truncated")


@pytest.mark.parametrize("damage", SEQUENCE_DAMAGE_HELD)
def test_a_damaged_sequence_never_hangs_and_never_drops_hosts(tmp_path, damage):
    """contracts.md: 'newest by write order: a monotonic sequence number (runs/.sequence, run.sequence in
    the run's report) ... the run just written ... is never pruned'; 'A host whose last run is no
    longer kept leaves the picture' - so with keep_runs 20 and three runs, no host may leave."""
    directory = _damaged_store(tmp_path)
    with open(str(directory / "runs" / store.SEQUENCE_NAME), "wb") as handle:
        handle.write(SEQUENCE_DAMAGE[damage])
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1"}
    assert len(run_dirs(directory)) == 3
    _new_sequence_is_newest(directory)
    # and once more: the repaired index keeps counting
    assert bounded(_write, str(directory), ok(["d-1"]), 4, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1", "d-1"}
    _new_sequence_is_newest(directory)


def test_a_huge_sequence_number_does_not_stop_pruning_by_write_order(tmp_path):
    """A hand-edited .sequence with last = 2**63: the next runs still count up and keep_runs still
    keeps the newest by write order."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1, keep_runs=2)
    index = store.read_sequence(str(directory / "runs"))
    with open(str(directory / "runs" / store.SEQUENCE_NAME), "w", encoding="utf-8") as handle:
        json.dump({"last": 2 ** 63, "runs": index["runs"], "jobs": index["jobs"]}, handle)
    for minute, host in ((2, "b"), (3, "c"), (4, "d")):
        assert bounded(_write, str(directory), ok([host]), minute, None, 2, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"c", "d"}
    assert len(run_dirs(directory)) == 2


def test_a_sequence_symlink_to_a_foreign_file_is_not_written_through(tmp_path):
    """awx.md: 'every file written whole and renamed into place': a .sequence symlinked to a file
    elsewhere is replaced, the file it points at is left as it was."""
    directory = _damaged_store(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch\n")
    sequence = str(directory / "runs" / store.SEQUENCE_NAME)
    os.unlink(sequence)
    os.symlink(str(victim), sequence)
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) == 0
    assert victim.read_text() == "do not touch\n"
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1"}


@pytest.mark.parametrize("target", ["dangling", "/dev/zero", "/dev/urandom"])
def test_a_sequence_symlink_to_an_endless_device_never_hangs(tmp_path, target):
    directory = _damaged_store(tmp_path)
    sequence = str(directory / "runs" / store.SEQUENCE_NAME)
    os.unlink(sequence)
    os.symlink(target if target.startswith("/") else str(tmp_path / "nowhere"), sequence)
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1"}
    _new_sequence_is_newest(directory)


def test_a_sequence_fifo_never_hangs(tmp_path):
    """A FIFO at runs/.sequence blocked the writer forever while it held the lock (red team F1): it is
    set aside and the index rebuilt from the runs."""
    directory = _damaged_store(tmp_path)
    sequence = str(directory / "runs" / store.SEQUENCE_NAME)
    os.unlink(sequence)
    os.mkfifo(sequence)
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1"}
    _new_sequence_is_newest(directory)
    assert os.path.isfile(sequence) and not os.path.islink(sequence)
    assert any(n.startswith(store.SEQUENCE_NAME + ".damaged-") for n in os.listdir(str(directory / "runs")))


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "dangling", "directory"])
def test_a_lock_that_is_not_a_file_never_hangs(tmp_path, kind):
    """runs/.lock replaced by a FIFO, a link or a directory: set aside, a new lock file made, the run written."""
    directory = _damaged_store(tmp_path)
    lock = str(directory / "runs" / store.LOCK_NAME)
    os.unlink(lock)
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "directory":
        os.mkdir(lock)
    else:
        os.symlink(kind if kind.startswith("/") else str(tmp_path / "nowhere"), lock)
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1", "c-1"}
    assert os.path.isfile(lock) and not os.path.islink(lock)


def test_a_damaged_sequence_is_named_in_the_warnings(tmp_path):
    directory = _damaged_store(tmp_path)
    with open(str(directory / "runs" / store.SEQUENCE_NAME), "wb") as handle:
        handle.write(SEQUENCE_DAMAGE["deep"])
    writer = store.ReportStore(str(directory))
    writer.write(document(ok(["c-1"]), 3))
    assert any(store.SEQUENCE_NAME in w and "rebuilt" in w for w in writer.warnings), writer.warnings


def test_a_sequence_directory_never_hangs(tmp_path):
    directory = _damaged_store(tmp_path)
    sequence = str(directory / "runs" / store.SEQUENCE_NAME)
    os.unlink(sequence)
    os.mkdir(sequence)
    assert bounded(_write, str(directory), ok(["c-1"]), 3, seconds=20) != "hung"


# --- hostile job ids through the callback ------------------------------------------------------------

def _callback_run(tmp_path, reports, host, extra_vars=None, **options):
    from test_fleet_report import chk, make_callback, make_play, result
    callback, display = make_callback(dir=str(reports), html=False, **options)
    play = make_play(tmp_path, [host])
    if extra_vars:
        play.get_variable_manager()._extra_vars = extra_vars  # what -e gives the VariableManager
    callback.v2_playbook_on_play_start(play)
    callback.v2_runner_on_ok(result(host, {"checks": [chk("gpu.count", "node", "pass", "8 GPUs")]}))
    callback.v2_playbook_on_stats(None)
    return display


HOSTILE_JOBS = {
    "traversal": "../../etc",
    "traversal_abs": "/etc/passwd",
    "newline": "311\n20261129T000000Z-validate",
    "ten_kb": "j" * 10240,
    "unicode": "jöb-\u2603-\U0001f525-\u202e-\u0000-x",
    "dots": "..",
    "latest": "latest",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_JOBS))
@pytest.mark.parametrize("via", ["option", "awx_workflow_job_id"])
def test_a_hostile_job_id_is_only_a_label(tmp_path, name, via):
    """ansible-doc: 'job: The job this run belongs to (run.job in the JSON)'. A job id is a label: it
    makes no path, the run directory is still runs/<UTC start>-<playbook>, run.job is the text given."""
    job = HOSTILE_JOBS[name]
    reports = tmp_path / "site" / "reports"
    before = set(os.listdir(str(tmp_path)))
    if via == "option":
        _callback_run(tmp_path, reports, "node-01", job=job)
    else:
        _callback_run(tmp_path, reports, "node-01", {"awx_workflow_job_id": job})
    picture = fleet(reports)
    assert picture["run"]["job"] == job
    assert set(picture["hosts"]) == {"node-01"}
    names = run_dirs(reports)
    assert len(names) == 1 and names[0].endswith("-validate") or store.RUN_DIR.match(names[0])
    assert set(os.listdir(str(tmp_path))) - before - {"hosts.yml"} == {"site"}  # hosts.yml: make_play's
    assert os.listdir(str(reports)) and not [n for n in os.listdir(str(reports / "runs"))
                                             if n not in names + ["latest", ".lock", store.SEQUENCE_NAME]]
    # the same hostile job again: one job, kept together with keep_runs 1
    if via == "option":
        _callback_run(tmp_path, reports, "node-02", job=job, keep_runs=1)
    else:
        _callback_run(tmp_path, reports, "node-02", {"awx_workflow_job_id": job}, keep_runs=1)
    assert set(fleet(reports)["hosts"]) == {"node-01", "node-02"}
    assert len(run_dirs(reports)) == 2


# --- retention and ordering ------------------------------------------------------------------------

def test_the_same_job_id_reused_a_week_later_does_not_resurrect_pruned_hosts(tmp_path):
    """A job id set by hand (GPUFLEET_REPORT_JOB=nightly) reused the next week: hosts pruned meanwhile
    ('A host whose last run is no longer kept leaves the picture') do not come back."""
    directory = tmp_path / "reports"
    _write(directory, ok(["gone-1"]), 1, job="nightly", keep_runs=2)
    _write(directory, ok(["gone-2"]), 2, job="nightly", keep_runs=2)
    for minute in (3, 4, 5):
        _write(directory, ok(["other-%d" % minute]), minute, keep_runs=2)
    assert not {"gone-1", "gone-2"} & set(fleet(directory)["hosts"])
    _write(directory, ok(["gone-1"]), 6, job="nightly", keep_runs=2)
    hosts = set(fleet(directory)["hosts"])
    assert "gone-2" not in hosts and "gone-1" in hosts
    assert len(run_dirs(directory)) == 2


def test_a_reused_job_id_keeps_old_slices_alive_beyond_keep_runs(tmp_path):
    """Not a promise, a question for the docs: with a reused job id (never AWX's, whose workflow job
    ids are unique) the old week's slices still in the store join the new job and are kept with it."""
    directory = tmp_path / "reports"
    _write(directory, ok(["week1-only"]), 1, job="nightly", keep_runs=2)
    _write(directory, ok(["x"]), 2, keep_runs=2)
    _write(directory, ok(["week2"]), 3, job="nightly", keep_runs=2)
    _write(directory, ok(["y"]), 4, keep_runs=2)
    # keep_runs 2 jobs: 'nightly' (as new as its newest slice, run 3) and run 4
    assert set(fleet(directory)["hosts"]) == {"week1-only", "week2", "y"}


def test_a_slice_with_zero_hosts_writes_nothing_and_keeps_the_picture(tmp_path):
    """ansible-doc: 'Nothing is written when no task returned checks or a bandwidth matrix.'"""
    from test_fleet_report import make_callback, make_play
    reports = tmp_path / "reports"
    _write(reports, ok(["a", "b"]), 1, job="9")
    before = fleet(reports)
    callback, _display = make_callback(dir=str(reports), html=False, job="9", keep_runs=1)
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["a"]))
    callback.v2_playbook_on_stats(None)
    assert fleet(reports) == before
    assert len(run_dirs(reports)) == 1


def test_a_slice_document_with_zero_hosts_drops_no_host(tmp_path):
    directory = tmp_path / "reports"
    _write(directory, ok(["a", "b"]), 1, job="9", keep_runs=1)
    _write(directory, {}, 2, job="9", keep_runs=1)
    assert set(fleet(directory)["hosts"]) == {"a", "b"}


def test_a_host_renamed_between_slices_is_two_hosts(tmp_path):
    """contracts.md: 'A host the run did not report ... is kept as it was'."""
    directory = tmp_path / "reports"
    _write(directory, ok(["dgx-01"], "fail"), 1, job="5", keep_runs=1)
    _write(directory, ok(["dgx-01.site"], "pass"), 2, job="5", keep_runs=1)
    picture = fleet(directory)
    assert set(picture["hosts"]) == {"dgx-01", "dgx-01.site"}
    assert picture["totals"]["hosts"] == 2 and picture["totals"]["unhealthy"] == 1


@pytest.mark.parametrize("keep_runs", [1, 2])
def test_a_clock_step_backwards_orders_by_write_order(tmp_path, keep_runs):
    """contracts.md: 'newest by write order ... never the wall-clock name or mtime, so a clock set back
    never prunes the run just written'; awx.md: 'the run that writes last wins for that host ... the
    write order decides, never a clock.'"""
    directory = tmp_path / "reports"
    store.ReportStore(str(directory), keep_runs=keep_runs).write(
        document(ok(["shared", "early"], "fail"), 30, hour=23))
    store.ReportStore(str(directory), keep_runs=keep_runs).write(
        document(ok(["shared", "late"], "pass"), 5, hour=1))  # the clock went back 22 hours
    picture = fleet(directory)
    assert picture["hosts"]["shared"]["status"] == "pass"
    assert "late" in picture["hosts"]
    latest = os.path.basename(os.path.realpath(str(directory / "runs" / "latest")))
    assert latest.startswith("20261129T0105")
    assert latest in run_dirs(directory)
    if keep_runs == 1:
        assert run_dirs(directory) == [latest] and "early" not in picture["hosts"]


def test_a_clock_step_backwards_between_slices_of_one_job(tmp_path):
    directory = tmp_path / "reports"
    store.ReportStore(str(directory), keep_runs=1).write(document(ok(["a"]), 30, job="8", hour=23))
    store.ReportStore(str(directory), keep_runs=1).write(document(ok(["b"]), 5, job="8", hour=1))
    store.ReportStore(str(directory), keep_runs=1).write(document(ok(["c"]), 10, job="8", hour=0))
    assert set(fleet(directory)["hosts"]) == {"a", "b", "c"}
    assert len(run_dirs(directory)) == 3


def test_the_same_second_twice_gets_suffixed_run_directories(tmp_path):
    """contracts.md: '-2, -3 ... when two runs start in the same second'."""
    directory = tmp_path / "reports"
    for host in ("a", "b", "c"):
        _write(directory, ok([host]), 1, keep_runs=5)
    names = run_dirs(directory)
    assert len(names) == 3 and any(n.endswith("-2") for n in names) and any(n.endswith("-3") for n in names)


# --- keep_runs out of range ----------------------------------------------------------------------------

@pytest.mark.parametrize("keep_runs", [0, -1, -100])
def test_keep_runs_below_one_never_prunes_the_run_just_written(tmp_path, keep_runs):
    """ansible-doc keep_runs: 'At least 1.'; contracts.md: the run just written 'is never pruned'."""
    from test_fleet_report import make_callback
    reports = tmp_path / "reports"
    _write(reports, ok(["old"]), 1)
    try:
        _callback_run(tmp_path, reports, "node-01", keep_runs=keep_runs)
    except Exception as error:  # pylint: disable=broad-except
        assert "keep_runs" in str(error)  # a clear refusal naming the option is fine
        assert set(fleet(reports)["hosts"]) == {"old"}
        return
    picture = fleet(reports)
    assert "node-01" in picture["hosts"]
    latest = os.path.basename(os.path.realpath(str(reports / "runs" / "latest")))
    assert latest in run_dirs(reports)
    assert make_callback  # imported for the fixtures' configuration


@pytest.mark.parametrize("keep_runs", [0, -3])
def test_keep_runs_below_one_in_the_store(tmp_path, keep_runs):
    directory = tmp_path / "reports"
    _write(directory, ok(["old"]), 1)
    try:
        _write(directory, ok(["new"]), 2, keep_runs=keep_runs)
    except (ValueError, TypeError) as error:
        assert "keep_runs" in str(error)
        return
    assert "new" in fleet(directory)["hosts"]
    assert run_dirs(directory)


@pytest.mark.parametrize("value", ["abc", "1.5", ""])
def test_keep_runs_not_an_integer_is_a_clear_error(tmp_path, value):
    """keep_runs: 'type: int' - a string is refused at configuration, naming the option, or ignored
    for the default; never a crash inside the write that leaves no report."""
    from ansible.errors import AnsibleError
    reports = tmp_path / "reports"
    try:
        _callback_run(tmp_path, reports, "node-01", keep_runs=value)
    except AnsibleError as error:
        assert "keep_runs" in str(error) or "int" in str(error)
        return
    assert "node-01" in fleet(reports)["hosts"]


# --- hostile report directory ------------------------------------------------------------------------

def test_foreign_files_in_runs_are_left_alone(tmp_path):
    """ansible-doc: 'The newest keep_runs run directories are kept, older ones deleted' - run
    directories; a README, notes, a file named like a run are not the store's to delete or choke on."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1, keep_runs=1)
    runs = directory / "runs"
    (runs / "README.txt").write_text("ours\n")
    (runs / "notes").mkdir()
    (runs / "notes" / "x").write_text("ours\n")
    (runs / "20200101T000000Z-validate.tar.gz").write_text("backup\n")
    (runs / ".nfs000000001").write_text("nfs silly rename\n")
    for minute, host in ((2, "b"), (3, "c")):
        assert bounded(_write, str(directory), ok([host]), minute, None, 1, seconds=20) == 0
    assert (runs / "README.txt").read_text() == "ours\n"
    assert (runs / "notes" / "x").read_text() == "ours\n"
    assert (runs / "20200101T000000Z-validate.tar.gz").exists()
    assert (runs / ".nfs000000001").exists()
    assert set(fleet(directory)["hosts"]) == {"c"}


def test_a_file_named_like_a_run_does_not_break_the_store(tmp_path):
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1, keep_runs=1)
    runs = directory / "runs"
    (runs / "20200101T000000Z-validate").write_text("a file, not a run directory\n")
    (runs / "20200101T000001Z-validate").mkdir()  # an empty run directory: no report in it
    for minute, host in ((2, "b"), (3, "c")):
        assert bounded(_write, str(directory), ok([host]), minute, None, 1, seconds=20) == 0
    assert "c" in fleet(directory)["hosts"]
    all_json_parse(directory)


def test_latest_as_a_regular_file_or_a_directory(tmp_path):
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1)
    latest = directory / "runs" / "latest"
    os.unlink(str(latest))
    latest.write_text("not a link\n")
    assert bounded(_write, str(directory), ok(["b"]), 2, seconds=20) == 0
    assert os.path.islink(str(latest))
    assert {"a", "b"} <= set(fleet(directory)["hosts"])


def test_a_foreign_json_in_a_run_directory_is_not_a_crash(tmp_path):
    """A kept run whose report was hand-edited to garbage: the next slice still writes and its hosts
    are in the picture."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a"]), 1, job="J")
    name = run_dirs(directory)[0]
    (directory / "runs" / name / store.JSON_NAME).write_text('{"run": {"sequence": "NaN"}, "hosts": 7}')
    assert bounded(_write, str(directory), ok(["b"]), 2, "J", seconds=20) == 0
    assert "b" in fleet(directory)["hosts"]


def _mounted(path, options):
    os.makedirs(path, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True,
                          check=False).returncode == 0


def _umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)


def test_a_read_only_report_directory_keeps_the_picture_and_does_not_hang(tmp_path):
    mount = str(tmp_path / "ro")
    if os.geteuid() != 0 or not _mounted(mount, "size=4m"):
        pytest.skip("needs root and tmpfs to make a read-only report directory")
    try:
        directory = os.path.join(mount, "reports")
        _write(directory, ok(["a"]), 1)
        before = fleet(directory)
        subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
        code = bounded(_write, directory, ok(["b"]), 2, seconds=20)
        assert code != "hung"
        assert fleet(directory) == before
    finally:
        _umount(mount)


def _fill(path):
    try:
        with open(os.path.join(path, "filler"), "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass


def test_a_full_disk_leaves_the_previous_picture_whole(tmp_path):
    """awx.md: 'every file written whole and renamed into place': out of space, the write fails and
    the picture is the previous one, no half file; once space is freed the next slice writes."""
    mount = str(tmp_path / "full")
    if os.geteuid() != 0 or not _mounted(mount, "size=2m"):
        pytest.skip("needs root and a small tmpfs")
    try:
        directory = os.path.join(mount, "reports")
        _write(directory, ok(["a", "b"]), 1, job="7")
        before = fleet(directory)
        _fill(mount)
        big = dict(("big-%04d" % n, [("gpu.count", "fail"), ("gpu.ecc", "warn")]) for n in range(400))
        code = bounded(_write, directory, big, 2, "7", seconds=30)
        assert code != "hung"
        all_json_parse(directory)
        if code != 0:
            assert fleet(directory) == before
        os.unlink(os.path.join(mount, "filler"))
        assert bounded(_write, directory, ok(["c"]), 3, "7", seconds=20) == 0
        assert {"a", "b", "c"} <= set(fleet(directory)["hosts"])
        all_json_parse(directory)
        assert not [n for n in os.listdir(directory) if n.startswith(".")]
    finally:
        _umount(mount)


# --- the execution environment, checked without building it ------------------------------------------

def _yaml(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("definition", ["execution-environment.yml", "ee/execution-environment-local.yml"])
def test_ee_enables_the_callback_and_the_report_dir_the_docs_name(definition):
    """awx.md: 'enable the fleet report callback for every job
    (ANSIBLE_CALLBACKS_ENABLED=gpufleet.cluster.fleet_report) and write the report to
    GPUFLEET_REPORT_DIR=/runner/artifacts/gpufleet-report'."""
    steps = _yaml(definition)["additional_build_steps"]["append_final"]
    env = dict(s.split(None, 1)[1].split("=", 1) for s in steps if s.startswith("ENV "))
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "gpufleet.cluster.fleet_report"
    assert env["GPUFLEET_REPORT_DIR"] == "/runner/artifacts/gpufleet-report"
    assert _yaml(definition)["version"] == 3  # 'ansible-builder v3'


def test_ee_pins_match_requirements_txt():
    """awx.md: 'ansible-core and ansible-runner pins = requirements.txt'; 'Both images have ansible-core 2.19'."""
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as handle:
        pins = dict(line.split("#")[0].strip().split("==") for line in handle
                    if "==" in line.split("#")[0])
    assert pins["ansible-core"].startswith("2.19.")
    for definition in ("execution-environment.yml", "ee/execution-environment-local.yml"):
        deps = _yaml(definition)["dependencies"]
        assert deps["ansible_core"]["package_pip"] == "ansible-core==" + pins["ansible-core"]
        assert deps["ansible_runner"]["package_pip"] == "ansible-runner==" + pins["ansible-runner"]


def test_ee_base_images_and_sources_are_the_documented_ones():
    """awx.md table: base images quay.io/centos/centos:stream9 and gpufleet/bookworm-systemd:1 (the
    test image of scripts/build-test-image.sh); collections from ee/requirements.yml (Galaxy) and
    ee/requirements-local.yml; system packages ee/bindep.txt: ssh client, rsync, sshpass, git."""
    assert _yaml("execution-environment.yml")["images"]["base_image"]["name"] == "quay.io/centos/centos:stream9"
    local = _yaml("ee/execution-environment-local.yml")
    assert local["images"]["base_image"]["name"] == "gpufleet/bookworm-systemd:1"
    with open(os.path.join(ROOT, "scripts/build-test-image.sh"), encoding="utf-8") as handle:
        assert 'BASE_IMAGE="gpufleet/bookworm-systemd:1"' in handle.read()
    galaxy = [c["name"] for c in _yaml("ee/requirements.yml")["collections"]]
    assert {"ansible.posix", "community.general", "kubernetes.core"} <= set(galaxy)
    local_names = [c["name"].rsplit("/", 2) for c in _yaml("ee/requirements-local.yml")["collections"]]
    assert sorted("%s.%s" % (n[-2], n[-1]) for n in local_names) == [
        "ansible.posix", "community.general", "kubernetes.core"]
    with open(os.path.join(ROOT, "ee/bindep.txt"), encoding="utf-8") as handle:
        names = set(line.split()[0] for line in handle if line.strip() and not line.startswith("#"))
    assert {"openssh-client", "rsync", "sshpass", "git"} <= names
    assert local["dependencies"]["system"] == "bindep.txt"
    assert _yaml("execution-environment.yml")["dependencies"]["system"] == "ee/bindep.txt"


def test_make_ee_is_scripts_ee_build_sh():
    """awx.md: 'make ee  # = scripts/ee-build.sh'."""
    proc = subprocess.run(["make", "-n", "ee"], cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, MAKEFLAGS=""), timeout=30)
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        makefile = handle.read()
    assert "\nee:" in makefile
    assert "scripts/ee-build.sh" in makefile.split("\nee:", 1)[1].split("\n\n", 1)[0]
    assert os.access(os.path.join(ROOT, "scripts/ee-build.sh"), os.R_OK)
    assert proc.returncode == 0 or "ee-build.sh" in proc.stdout


def test_the_galaxy_definition_reads_the_tarball_where_the_docs_put_it():
    """awx.md: '(ansible-builder build -f execution-environment.yml -t ... does both steps after the
    tarball is in ee/gpufleet-cluster.tar.gz.)'"""
    files = _yaml("execution-environment.yml")["additional_build_files"]
    assert {"src": "ee/gpufleet-cluster.tar.gz", "dest": "collections"} in files
    assert os.path.exists(os.path.join(ROOT, "scripts/ee-context.sh"))


@pytest.mark.parametrize("damage", ["negative", "bool_last", "duplicate_numbers", "huge", "string_last"])
def test_after_a_damaged_sequence_keep_runs_still_keeps_the_newest_writes(tmp_path, damage):
    """contracts.md: 'the newest keep_runs ... runs are kept ... newest by write order: a monotonic
    sequence number'. After .sequence was damaged, the runs written next are the newest: with keep_runs 2
    and two more writes, the picture is those two writes' hosts, the older runs pruned."""
    directory = tmp_path / "reports"
    _write(directory, ok(["a-1"]), 1, keep_runs=2)
    _write(directory, ok(["b-1"]), 2, keep_runs=2)
    with open(str(directory / "runs" / store.SEQUENCE_NAME), "wb") as handle:
        handle.write(SEQUENCE_DAMAGE[damage])
    assert bounded(_write, str(directory), ok(["c-1"]), 3, None, 2, seconds=20) == 0
    assert bounded(_write, str(directory), ok(["d-1"]), 4, None, 2, seconds=20) == 0
    assert set(fleet(directory)["hosts"]) == {"c-1", "d-1"}
    assert len(run_dirs(directory)) == 2


# --- the strict reader of runs/.sequence (red team F2/F3) ---------------------------------------------

_SEQUENCE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(last=_SEQUENCE_VALUES, runs=st.dictionaries(st.text(max_size=6), _SEQUENCE_VALUES, max_size=5),
       raw_tail=st.binary(max_size=40))
def test_the_sequence_reader_gives_a_strict_index_or_refuses(last, runs, raw_tail):
    """Any .sequence is either an index whose numbers are integers 0 <= n < 2**63, unique and none
    above last, or a RecordError (unreadable: rebuilt) - never another exception."""
    for raw in (json.dumps({"last": last, "runs": runs, "jobs": {}}, allow_nan=True).encode("utf-8"),
                json.dumps({"last": last, "runs": runs}).encode("utf-8", "surrogatepass")[:40] + raw_tail):
        try:
            index = store.parse_sequence(raw, ".sequence")
        except RecordError:
            continue
        numbers = list(index["runs"].values()) + [index["last"]]
        assert all(type(n) is int and 0 <= n < 2 ** 63 for n in numbers)  # pylint: disable=unidiomatic-typecheck
        assert len(set(index["runs"].values())) == len(index["runs"])
        assert all(n <= index["last"] for n in index["runs"].values())


# --- keep_runs and store errors in the callback (red team F4, F2) -----------------------------------

@pytest.mark.parametrize("value", ["lots", "0", "-1", "", " ", "1e3", "2.5", "\u00b2", "\u0663", "1" * 400])
def test_a_bad_keep_runs_is_an_error_and_the_report_is_still_written(tmp_path, value):
    """GPUFLEET_REPORT_KEEP_RUNS=lots made ansible-core drop the callback (type int): a green run with no
    report. Now read as text and checked by the callback: an error line naming the variable, the report
    written keeping the default 20 runs. 0 and -1 are refused the same way (docs: 'at least 1')."""
    reports = tmp_path / "reports"
    display = _callback_run(tmp_path, reports, "node-01", keep_runs=value)
    assert any("GPUFLEET_REPORT_KEEP_RUNS" in e and "keep_runs" in e and "20" in e for e in display.errors), \
        display.errors
    assert set(fleet(reports)["hosts"]) == {"node-01"}


@pytest.mark.parametrize("value", ["1", "3", " 7 ", "20"])
def test_a_good_keep_runs_text_is_taken(tmp_path, value):
    reports = tmp_path / "reports"
    display = _callback_run(tmp_path, reports, "node-01", keep_runs=value)
    assert not display.errors
    for _ in range(int(value) + 1):
        _callback_run(tmp_path, reports, "node-01", keep_runs=value)
    assert len(run_dirs(reports)) == int(value)


@settings(max_examples=200, deadline=None)
@given(value=st.text(max_size=12) | st.integers() | st.booleans() | st.none())
def test_keep_runs_of_is_a_verdict(value):
    from ansible_collections.gpufleet.cluster.plugins.callback.fleet_report import MAX_KEEP_RUNS, keep_runs_of
    number, problem = keep_runs_of(value)
    if problem is None:
        assert type(number) is int and 1 <= number <= MAX_KEEP_RUNS  # pylint: disable=unidiomatic-typecheck
        assert number == int(value)
    else:
        assert number == 20 and "GPUFLEET_REPORT_KEEP_RUNS" in problem


def test_a_store_error_is_loud_and_the_run_report_is_written(tmp_path, monkeypatch):
    """Any error of the store (not only OSError) never loses the run's report: an error line naming the
    directory and this run's report written unmerged next to the picture."""
    def broken(self, *_args, **_kwargs):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(store.ReportStore, "write", broken)
    reports = tmp_path / "reports"
    display = _callback_run(tmp_path, reports, "node-01")
    assert any(str(reports) in e and "RecursionError" in e and "written unmerged" in e for e in display.errors)
    unmerged = [n for n in os.listdir(str(reports)) if n.startswith("fleet-report-unmerged-")]
    assert len(unmerged) == 1
    with open(str(reports / unmerged[0]), encoding="utf-8") as handle:
        assert set(json.load(handle)["hosts"]) == {"node-01"}


def test_a_deeply_nested_picture_is_not_merged_and_the_run_is_written(tmp_path):
    directory = tmp_path / "reports"
    _write(directory, ok(["a-1"]), 1)
    (directory / store.JSON_NAME).write_bytes(b'{"hosts": ' + b"[" * 100000 + b"]" * 100000 + b"}")
    writer = store.ReportStore(str(directory))
    writer.write(document(ok(["b-1"]), 2))
    assert any("not merged" in w for w in writer.warnings)
    assert set(fleet(directory)["hosts"]) == {"b-1"}


def test_the_galaxy_definitions_own_comment_names_the_tarball_path_the_docs_name():
    """The header comment of execution-environment.yml told the reader to build the tarball into ee-build/
    (red team F5); it names where additional_build_files reads it (ee/gpufleet-cluster.tar.gz, docs/awx.md)
    and the script that puts it there."""
    with open(os.path.join(ROOT, "execution-environment.yml"), encoding="utf-8") as handle:
        header = "".join(line for line in handle if line.startswith("#"))
    assert "ee-build/" not in header
    assert "ee/gpufleet-cluster.tar.gz" in header and "scripts/ee-context.sh" in header


def _slice_behind_a_fifo_lock(directory, host, barrier):
    barrier.wait()
    _write(directory, ok([host]), 9, job="fifo-lock")


def test_slices_at_once_behind_a_fifo_lock_all_land(tmp_path):
    """Eight slices find a FIFO at runs/.lock at once: one sets it aside, none sets aside the new lock
    file another already holds (every slice's host is in the picture, no run number twice)."""
    directory = _damaged_store(tmp_path)
    lock = str(directory / "runs" / store.LOCK_NAME)
    os.unlink(lock)
    os.mkfifo(lock)
    barrier = CONTEXT.Barrier(8)
    hosts = ["s-%d" % k for k in range(8)]
    workers = [CONTEXT.Process(target=_slice_behind_a_fifo_lock, args=(str(directory), h, barrier)) for h in hosts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert set(fleet(directory)["hosts"]) == {"a-1", "a-2", "b-1"} | set(hosts)
    numbers = list(store.read_sequence(str(directory / "runs"))["runs"].values())
    assert len(numbers) == len(set(numbers)) == 10


def test_each_document_is_rendered_once_and_the_run_s_junit_is_the_same_text_twice(tmp_path):
    """Issue 45 item 3: the run's JUnit was rendered twice (runs/<run>/junit.xml, dir/junit.xml);
    one render per document (the run's, the fleet picture's), the files as before."""
    rendered = []

    def junit(doc):
        rendered.append(("junit", doc["run"]["id"], doc.get("scope")))
        return store_junit(doc)

    def html(doc):
        rendered.append(("html", doc["run"]["id"], doc.get("scope")))
        return "<p>%s %d</p>" % (doc.get("scope"), len(doc["hosts"]))

    store_junit = __import__("ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report",
                             fromlist=["junit_xml"]).junit_xml
    writer = store.ReportStore(str(tmp_path))
    written = writer.write(document(ok(["a", "b"]), 1), render_html=html, render_junit=junit)
    assert sorted(rendered) == sorted(set(rendered)) and len(rendered) == 4  # junit and html, run and fleet
    latest = os.path.join(str(tmp_path), "runs", run_dirs(tmp_path)[0])
    with open(os.path.join(latest, store.JUNIT_NAME), encoding="utf-8") as run_file, \
            open(os.path.join(str(tmp_path), store.JUNIT_NAME), encoding="utf-8") as dir_file:
        assert run_file.read() == dir_file.read() != ""
    assert [os.path.basename(path) for path in written] == [
        store.JSON_NAME, store.FLEET_JUNIT_NAME, store.HTML_NAME, store.JUNIT_NAME,
        store.JSON_NAME, store.JUNIT_NAME, store.HTML_NAME]
