# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report directory of the fleet report: one directory per run, the fleet picture merged over runs.

Layout of the report directory (``dir`` option of the ``fleet_report`` callback)::

    fleet-report.json, fleet-report.html,             the fleet picture: every host ever reported
    junit-fleet.xml                                   (as long as its last run is kept), each with
                                                      its latest checks, facts, last run and history
    junit.xml                                         this run only (its hosts, its checks): what a
                                                      CI job reads
    runs/<YYYYmmddTHHMMSSZ>-<playbook>/               one run: its own fleet-report.json, junit.xml
                                                      and fleet-report.html, this run's hosts only
    runs/latest -> <newest run directory>

Merge rule (``merge``): a host the run did not report keeps its entry as it was (its ``last_run``
and ``last_seen`` say when it was seen). For a host the run reported, an earlier check is dropped
when this run has a check with the same id and target, when it came from a play that reported this
host in this run (the play ran again: its result is the new truth, checks it no longer returns
disappear), when it came from an older report without play names, or when it is
``host.unreachable`` and the host returned checks now; every other earlier check stays (the fabric
test does not erase the sweep's GPU checks of the hosts it measured). Bandwidth matrices are kept
per title, the newest wins. Each host keeps a history ``[{run, status}]`` over the kept runs.

``keep_runs`` run directories are kept (the newest); older ones are deleted, and the history only
names kept runs. "Newest" is the order the runs were written, never the wall clock: every run gets
the next number of a monotonic sequence (``runs/.sequence``, JSON ``{"last": N, "runs": {name:
N}}``, also written as ``run.sequence`` in the run's fleet-report.json), and retention orders by
it. A clock set back (or a run directory whose UTC name sorts before older ones) can therefore
not make retention delete the run just written; the run just written is never deleted. Run
directories from before the sequence (no number) count as older than every numbered run, by name.
A lock file serialises concurrent runs writing the same directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re
import shutil
import stat
import tempfile

try:
    import fcntl
except ImportError:  # pragma: no cover - not on the controllers Ansible supports
    fcntl = None

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import (
    FAIL, SCHEMA_VERSION, SYNTHETIC_IDS, UNREACHABLE_ID, host_entry, host_status, normalise_check, rank_hosts, text,
    totals_of)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.report_json import to_json
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records, state_files

RUNS = "runs"
LATEST = "latest"
JSON_NAME = "fleet-report.json"
HTML_NAME = "fleet-report.html"
JUNIT_NAME = "junit.xml"  # the run's, in the run directory and in dir
FLEET_JUNIT_NAME = "junit-fleet.xml"  # the fleet picture's, in dir
LOCK_NAME = ".lock"  # in runs/
SEQUENCE_NAME = ".sequence"  # in runs/: the write order of the runs
RUN_DIR = re.compile(r"^\d{8}T\d{6}Z-[A-Za-z0-9._-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_id(started_at, playbook):
    """``20261123T001736Z-validate`` from the start time (``2026-11-23T00:17:36Z``) and the playbook."""
    stamp = re.sub(r"[-:]", "", started_at)
    name = os.path.basename(playbook or "adhoc")
    for suffix in (".yml", ".yaml"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    name = _UNSAFE.sub("_", name).strip("._-") or "adhoc"
    return "%s-%s" % (stamp, name[:60])


def write_file(directory, name, content):
    """Atomic write (temporary file, then rename) of a text file; returns its path."""
    fd, tmp = tempfile.mkstemp(prefix="." + name, dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return os.path.join(directory, name)


def point_latest(runs_dir, name):
    """``runs/latest`` -> ``name`` (relative), replaced atomically."""
    tmp = os.path.join(runs_dir, ".%s.%d" % (LATEST, os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(name, tmp)
    os.replace(tmp, os.path.join(runs_dir, LATEST))


def new_run_dir(runs_dir, name):
    """Create ``runs/<name>`` (``<name>-2``, ``-3`` ... when a run of the same second exists)."""
    candidate, number = name, 1
    while True:
        try:
            os.makedirs(os.path.join(runs_dir, candidate))
            return candidate
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
        number += 1
        candidate = "%s-%d" % (name, number)


def _run_names(runs_dir):
    return [n for n in os.listdir(runs_dir)
            if RUN_DIR.match(n) and os.path.isdir(os.path.join(runs_dir, n))
            and not os.path.islink(os.path.join(runs_dir, n))]


def _job_text(value):
    """A job id as stored (a non-empty string), else None."""
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    value = text(value).strip()
    return value or None


MAX_SEQUENCE = 2 ** 63 - 1  # run numbers: 0 <= n < 2**63
SEQUENCE_MAX_BYTES = 4 * 1024 * 1024  # runs/.sequence: a few hundred runs take some KB
RUN_JSON_MAX_BYTES = 512 * 1024 * 1024  # a run's fleet-report.json read while rebuilding the sequence


def parse_sequence(raw, record):
    """The strict reader of ``runs/.sequence``: ``{"last": N, "runs": {name: N}, "jobs": {name: job}}``
    with ``last`` and every run number an integer (never a bool), ``0 <= n < 2**63``, the run numbers
    unique and none above ``last``; RecordError naming the record otherwise (the caller rebuilds)."""
    index = records.mapping(records.load_json(raw, record, max_bytes=SEQUENCE_MAX_BYTES), record, required=("runs",))
    last = records.integer(index.get("last", 0), record, "last", 0, MAX_SEQUENCE)
    runs = {}
    for name, number in records.mapping(index["runs"], record, "runs").items():
        runs[name] = records.integer(number, record, "runs.%s" % name[:80], 0, last)
    if len(set(runs.values())) != len(runs):
        raise records.RecordError(record, "two runs with one number", "runs")
    jobs = index.get("jobs") or {}
    jobs = dict((k, _job_text(v)) for k, v in records.mapping(jobs, record, "jobs").items()
                if k in runs and _job_text(v) is not None)
    return {"last": last, "runs": runs, "jobs": jobs}


def _run_sequence(path):
    """``run.sequence`` and ``run.job`` of a run's fleet-report.json; None when unreadable (only a
    regular file is read, never a FIFO or a device; its number an integer 0 <= n < 2**63)."""
    try:
        raw = state_files.read_bytes(path, max_bytes=RUN_JSON_MAX_BYTES, follow_links=False)
        meta = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant).get("run", {})
        number = records.integer(meta.get("sequence"), path, "run.sequence", 0, MAX_SEQUENCE)
    except (OSError, ValueError, AttributeError, RecursionError):  # RecordError is a ValueError
        return None
    return number, _job_text(meta.get("job"))


def _refuse_constant(name):
    raise ValueError("%s is not a JSON number" % name)


def read_sequence(runs_dir, warnings=None):
    """``{"last": N, "runs": {name: N}, "jobs": {name: job}}`` of ``runs/.sequence`` (parse_sequence);
    rebuilt from the runs' own fleet-report.json (``run.sequence``, ``run.job``) when the file is
    missing or unreadable. An unreadable file (damaged JSON, numbers out of range or repeated, a
    FIFO, a device or a link in its place) is set aside (``.sequence.damaged-<UTC time>``) and named
    in ``warnings``; the next write replaces it."""
    path = os.path.join(runs_dir, SEQUENCE_NAME)
    index, problem = state_files.read_record(path, parse_sequence, max_bytes=SEQUENCE_MAX_BYTES)
    if problem is not None and warnings is not None:
        warnings.append("fleet_report: %s; rebuilt from the run directories" % problem)
    if index is not None:
        return index
    runs, jobs = {}, {}
    for name in sorted(_run_names(runs_dir)):
        found = _run_sequence(os.path.join(runs_dir, name, JSON_NAME))
        if found is None or found[0] in runs.values():
            continue
        runs[name] = found[0]
        if found[1] is not None:
            jobs[name] = found[1]
    return {"last": max(runs.values()) if runs else 0, "runs": runs, "jobs": jobs}


def open_lock(runs_dir, warnings=None):
    """``runs/.lock`` opened for ``flock`` (created when missing): only a regular file, opened without
    blocking and without following a link (O_NONBLOCK, O_NOFOLLOW), so a FIFO or a link to a device
    in its place cannot hang the writer; such a file is set aside (named in ``warnings``) and a new
    lock file made."""
    path = os.path.join(runs_dir, LOCK_NAME)
    flags = (os.O_RDONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    for attempt in range(5):
        try:
            handle = os.fdopen(os.open(path, flags, 0o644), "rb")
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR) or attempt == 4:
                raise
            reason = "not a regular file (%s)" % (exc.strerror or exc)
        else:
            if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return handle
            handle.close()
            reason = "not a regular file"
        if attempt == 4:
            break
        # Set aside under a lock of runs/ itself (a directory is always one), checked again there: two
        # writers that both saw the FIFO must not set aside the regular lock file a third made and holds.
        guard = os.open(runs_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            if fcntl is not None:
                fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                replaced = stat.S_ISREG(os.lstat(path).st_mode)
            except FileNotFoundError:
                replaced = True
            if not replaced:
                target, reason = state_files.set_aside(path, reason)
        finally:
            os.close(guard)
        if replaced:
            continue  # another writer set it aside and made a new lock file meanwhile: lock that one
        if warnings is not None:
            warnings.append("fleet_report: lock file %s is %s: set aside as %s, a new lock file made"
                            % (path, reason, target))
    raise OSError(errno.EINVAL, "lock file is not a regular file", path)


def locked(runs_dir, warnings=None, tries=20):
    """``runs/.lock`` opened (:func:`open_lock`) and held (``flock``), and still the file at that path
    once held: a writer that set a FIFO aside, or a racing one, may have put another lock file there
    between our open and our lock, and two writers holding two different files would both write
    (the classic lock-file check: the locked descriptor's inode is the path's, else open again)."""
    path = os.path.join(runs_dir, LOCK_NAME)
    for _attempt in range(tries):
        lock = open_lock(runs_dir, warnings)
        if fcntl is None:
            return lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = os.fstat(lock.fileno())
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return lock
        lock.close()  # set aside or replaced meanwhile: lock the file that is there now
    raise OSError(errno.EAGAIN, "lock file kept changing while it was locked", path)


def write_sequence(runs_dir, index):
    """``runs/.sequence`` (``jobs`` only when a run has one: the file of runs without jobs is as before)."""
    index = dict(index)
    if not index.get("jobs"):
        index.pop("jobs", None)
    write_file(runs_dir, SEQUENCE_NAME, json.dumps(index, sort_keys=True) + "\n")


def prune(runs_dir, keep, sequence=None, newest=None, jobs=None):
    """Delete the run directories of the oldest jobs beyond ``keep`` jobs; returns the names kept,
    oldest first.

    A job is the runs of one ``jobs`` value (name -> job id); a run without one is a job of its own.
    Order: the write sequence (``sequence``: name -> number); directories without a number come
    first, by name; a job is as new as its newest run. The job of ``newest`` (the run just written)
    is never deleted."""
    sequence = sequence or {}
    jobs = jobs if jobs is not None else {}
    names = sorted(_run_names(runs_dir), key=lambda n: (n in sequence, sequence.get(n, 0), n))
    if newest in names:
        names.remove(newest)
        names.append(newest)

    def unit(name):
        job = jobs.get(name)
        return ("job", job) if job is not None else ("run", name)

    newest_of = {}  # job -> position of its newest run
    for position, name in enumerate(names):
        newest_of[unit(name)] = position
    kept_units = set(sorted(newest_of, key=newest_of.get)[-max(int(keep), 1):])
    kept = []
    for name in names:
        if unit(name) in kept_units:
            kept.append(name)
            continue
        shutil.rmtree(os.path.join(runs_dir, name), ignore_errors=True)
        sequence.pop(name, None)
        jobs.pop(name, None)
    return kept


def read_state(path):
    """(previous fleet document, None) or (None, reason); (None, None) when there is none."""
    try:
        raw = state_files.read_bytes(path)  # a regular file only, never blocking (a FIFO in its place)
        if raw is None:
            return None, None
        document = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        return None, str(exc)
    except (ValueError, RecursionError) as exc:
        return None, "not JSON (%s)" % exc
    if not isinstance(document, dict) or not isinstance(document.get("hosts"), dict):
        return None, "not a fleet report (no hosts mapping)"
    version = document.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return None, "schema_version %r is not a version number" % (version,)
    if version > SCHEMA_VERSION:
        return None, "written with schema_version %d, this gpufleet reads up to %d (a newer gpufleet wrote it)" % (
            version, SCHEMA_VERSION)
    return document, None


def _valid_checks(checks):
    """The checks of an earlier document that are checks (normalised again)."""
    valid = []
    for check in checks if isinstance(checks, list) else []:
        clean = normalise_check(check) if isinstance(check, dict) else None
        if clean is not None:
            for key in ("task", "play", "failing_since"):
                if check.get(key) is not None:
                    clean[key] = text(check[key])
            valid.append(clean)
    return valid


def _merge_checks(previous, current):
    """The host's checks after this run (see the module docstring)."""
    now = set((c["id"], c["target"]) for c in current)
    plays = set(c.get("play") for c in current if c.get("play") is not None)
    returned = any(c["id"] not in SYNTHETIC_IDS for c in current)
    kept = []
    for check in previous:
        if (check["id"], check["target"]) in now or check.get("play") is None or check.get("play") in plays:
            continue
        if check["id"] == UNREACHABLE_ID and returned:
            continue
        kept.append(check)
    return kept + list(current)


def failing_streak_start(history):
    """The run (id) that began the current failing streak of a host's ``history`` ``[{run,
    status}]`` (oldest first): the first of the trailing entries whose status is fail; None when
    the last entry does not fail."""
    start = None
    for mark in reversed([h for h in history or [] if isinstance(h, dict)]):
        if mark.get("status") != FAIL:
            break
        start = mark.get("run")
    return None if start is None else text(start)


def _failing_since(checks, previous_checks, run_id, host_since):
    """``failing_since`` (a run id) on each failing check of this run: kept from the previous
    picture when that check (same id and target) was already failing there (its own mark, else the
    host's failing streak in the stored history, ``host_since``), else this run. Checks that do
    not fail carry none."""
    before = dict(((c["id"], c["target"]), c) for c in previous_checks)
    for check in checks:
        if check["status"] != FAIL:
            check.pop("failing_since", None)
            continue
        old = before.get((check["id"], check["target"]))
        if old is not None and old["status"] == FAIL:
            check["failing_since"] = old.get("failing_since") or host_since or run_id
        else:
            check["failing_since"] = run_id
    return checks


def merge(previous, run, kept_runs):
    """The fleet document after ``run`` (this run's document) over ``previous`` (or None).

    ``kept_runs``: names of the kept run directories; history and the runs list only name them."""
    previous = previous or {}
    kept = set(kept_runs)
    run_meta = run["run"]
    hosts = {}
    for name, old in (previous.get("hosts") or {}).items():
        if not isinstance(old, dict) or name in run["hosts"] or old.get("last_run") not in kept:
            continue  # reported now (below), or its last run is no longer kept: forgotten
        entry = host_entry(_valid_checks(old.get("checks")), old.get("facts") or None, old.get("durations"))
        entry.update({"last_run": old["last_run"], "last_seen": old.get("last_seen"),
                      "history": [h for h in old.get("history") or [] if isinstance(h, dict) and h.get("run") in kept]})
        since = failing_streak_start(entry["history"])
        if since is not None and entry["status"] == FAIL:
            entry["failing_since"] = since
        hosts[name] = entry
    for name, entry in run["hosts"].items():
        before = (previous.get("hosts") or {}).get(name) or {}
        earlier = _valid_checks(before.get("checks"))
        earlier_history = [h for h in before.get("history") or [] if isinstance(h, dict)
                           and h.get("run") != run_meta["id"]]
        _failing_since(entry["checks"], earlier, run_meta["id"], failing_streak_start(earlier_history))
        checks = _merge_checks(earlier, entry["checks"])
        facts = dict(before.get("facts") or {})
        facts.update(entry.get("facts") or {})
        history = [h for h in before.get("history") or [] if isinstance(h, dict) and h.get("run") in kept
                   and h.get("run") != run_meta["id"]]
        history.append({"run": run_meta["id"], "status": host_status(entry["checks"])})
        durations = dict(before.get("durations") or {}) if isinstance(before.get("durations"), dict) else {}
        durations.update(entry.get("durations") or {})
        merged = host_entry(checks, facts, durations)
        merged.update({"last_run": run_meta["id"], "last_seen": run_meta["generated_at"], "history": history})
        since = failing_streak_start(history)
        if since is not None and merged["status"] == FAIL:
            merged["failing_since"] = since
        hosts[name] = merged
    matrices = dict((m.get("title"), m) for m in previous.get("bandwidth_matrices") or [] if isinstance(m, dict))
    for matrix in run.get("bandwidth_matrices") or []:
        matrices[matrix["title"]] = matrix
    runs = [r for r in previous.get("runs") or [] if isinstance(r, dict) and r.get("id") in kept
            and r.get("id") != run_meta["id"]]
    runs.append(dict(run_meta, hosts=run["totals"]["hosts"], unhealthy=run["totals"]["unhealthy"]))
    ranked = rank_hosts(hosts)
    document = {"schema_version": SCHEMA_VERSION, "generated_at": run["generated_at"], "playbook": run["playbook"],
                "scope": "fleet", "run": run_meta, "runs": runs, "totals": totals_of(ranked), "hosts": dict(ranked),
                "bandwidth_matrices": list(matrices.values())}
    if run.get("not_considered"):
        document["not_considered"] = run["not_considered"]  # this run's: the picture keeps no older ones
    return document


def write_unmerged(directory, run_document, render_junit=None):
    """This run's report when the store could not write it (the report directory unwritable, its
    index or picture damaged beyond what the store repairs): ``fleet-report-unmerged-<run id>.json``
    (and ``junit-unmerged-<run id>.xml``) directly in ``directory``, else in the system's temporary
    directory. Returns the paths written (empty when neither can be written)."""
    name = _UNSAFE.sub("_", text(run_document.get("run", {}).get("id") or "run"))[:80]
    for target in (directory, tempfile.gettempdir()):
        try:
            os.makedirs(target, exist_ok=True)
            written = [write_file(target, "fleet-report-unmerged-%s.json" % name, to_json(run_document))]
            if render_junit is not None:
                written.append(write_file(target, "junit-unmerged-%s.xml" % name, render_junit(run_document)))
            return written
        except (OSError, ValueError):
            continue
    return []


class ReportStore(object):
    """Writes one run into the report directory and merges it into the fleet picture."""

    def __init__(self, directory, keep_runs=20, merge_runs=True):
        self.directory = directory
        if isinstance(keep_runs, bool) or not isinstance(keep_runs, int) or keep_runs < 1:
            raise ValueError("keep_runs must be a whole number, at least 1, not %r" % (keep_runs,))
        self.keep_runs = keep_runs
        self.merge_runs = merge_runs
        self.warnings = []
        self.fleet = None

    def write(self, run_document, render_html=None, render_junit=None):
        """Write the run directory and the fleet picture; returns the paths written.

        ``render_html(document)`` and ``render_junit(document)`` return the page and the JUnit
        text of a document (None: not written)."""
        directory = self.directory
        runs_dir = os.path.join(directory, RUNS)
        os.makedirs(runs_dir, exist_ok=True)
        lock = locked(runs_dir, self.warnings)
        try:
            sequence = read_sequence(runs_dir, self.warnings)
            number = sequence["last"] + 1
            name = new_run_dir(runs_dir, run_document["run"]["id"])
            run_document["run"]["id"] = name
            run_document["run"]["sequence"] = number
            sequence["last"] = number
            sequence["runs"][name] = number
            job = _job_text(run_document["run"].get("job"))
            if job is not None:
                sequence["jobs"][name] = job
            write_sequence(runs_dir, sequence)
            for entry in run_document["hosts"].values():
                entry.update({"last_run": name, "last_seen": run_document["generated_at"]})
            run_dir = os.path.join(runs_dir, name)
            # the run's JUnit is rendered once: runs/<run>/junit.xml and dir/junit.xml are the same text
            junit_text = render_junit(run_document) if render_junit is not None else None
            written = run_written = self._write_set(run_dir, run_document, render_html,
                                                    render_junit and (lambda _doc: junit_text))
            run_junit = None
            if junit_text is not None:  # dir/junit.xml is this run's: what CI reads after the run
                run_junit = write_file(directory, JUNIT_NAME, junit_text)
            point_latest(runs_dir, name)
            kept = prune(runs_dir, self.keep_runs, sequence["runs"], newest=name, jobs=sequence["jobs"])
            write_sequence(runs_dir, sequence)
            previous = None
            if self.merge_runs:
                previous, problem = read_state(os.path.join(directory, JSON_NAME))
                if problem:
                    self.warnings.append("fleet_report: previous fleet picture %s not merged: %s"
                                         % (os.path.join(directory, JSON_NAME), problem))
            fleet = self.fleet = merge(previous, run_document, kept)
            written = self._write_set(directory, fleet, render_html, render_junit, FLEET_JUNIT_NAME) + written
            if run_junit is not None:
                written.insert(len(written) - len(run_written), run_junit)
        finally:
            lock.close()
        return written

    @staticmethod
    def _write_set(target, document, render_html, render_junit, junit_name=JUNIT_NAME):
        written = [write_file(target, JSON_NAME, to_json(document))]
        if render_junit is not None:
            written.append(write_file(target, junit_name, render_junit(document)))
        if render_html is not None:
            written.append(write_file(target, HTML_NAME, render_html(document)))
        return written
