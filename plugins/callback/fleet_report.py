# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
name: fleet_report
type: aggregate
short_description: Fleet health report from validation checks (summary table, JSON, JUnit, HTML)
version_added: 0.1.0
description:
  - Collects every task result that carries a C(checks) list (the gpufleet check-result model with
    C(id), C(target), C(status), C(message), optional C(observed) and C(expected)), from ok and
    failed tasks alike, including the items of looped tasks.
  - Per host, the latest result for a check C(id) and C(target) replaces an earlier one (a
    re-validation after remediation supersedes the first run); checks keep the position where they
    were first seen.
  - "No host is lost: synthetic failing checks stand for hosts that could not be validated.
    C(host.unreachable) (target C(node)) for a host a task could not reach (dropped again when a
    later task on that host returns checks). C(host.validation) (target = the task name) for a
    validation task that failed without returning checks (module exception, timeout of the task or
    of its async job), with Ansible's C(msg) and the last line of the exception. C(host.validation)
    (target C(node)) for a host of a validation play that returned no validation result at all (it
    failed or was unreachable in an earlier task or play, or the play ended first), naming its last
    failure. A validation task is a task of C(node_validate), C(gpu_health), C(rdma_validate),
    C(record_checks) or C(rdma_bandwidth), or any task that returned C(checks) on some host; a host
    whose validation tasks were all skipped counts as reported. See C(docs/contracts.md)."
  - "At the end of the playbook prints a per-host summary of the run's hosts ranked worst first
    (worst status, then the worst severity among those checks, then most failed checks and most
    warnings; severities per check id in C(docs/contracts.md#severity)) with the first failing
    (else warning) check of each host, and a line on the fleet picture. For a host
    without failures or warnings it names the check families whose checks were all skipped and
    why (for example C(gpu skipped: no NVIDIA GPU on the PCI bus)). With more hosts than
    O(summary_limit) only hosts with failures or warnings are listed (up to the limit) and the
    rest are counted."
  - "Each run gets its own directory C(runs/<UTC start YYYYmmddTHHMMSSZ>-<playbook>/) in O(dir) with
    this run's C(fleet-report.json), C(junit.xml) and C(fleet-report.html); C(runs/latest) links to
    the newest. The newest O(keep_runs) run directories are kept, older ones deleted."
  - "C(junit.xml) directly in O(dir) is this run's too (the hosts this run validated, nothing older):
    the file a CI job reads after the run."
  - "C(fleet-report.json), C(junit-fleet.xml) and C(fleet-report.html) directly in O(dir) are the fleet
    picture: the previous picture merged with this run (O(merge)). A host this run did not report
    (C(--limit), the fabric test) keeps its entry with C(last_run) and C(last_seen); for a host it
    reported, checks of the plays that ran again and checks with the same id and target are
    replaced, others stay (the fabric test does not erase the sweep's GPU checks). A host whose last
    run is no longer kept is dropped. Each host keeps its history (run, worst status) over the kept
    runs."
  - "A task delegated to a host that cannot be reached puts C(host.unreachable) on the delegate, not on
    the host the task ran for (that one, in a validation play, gets C(host.validation) naming its
    delegate). A host of the inventory group C(gpu_nodes) whose every check skipped gets
    C(host.validation) failing (not validated). Hosts of a play that never ran a task of it (a serial
    play stopped after a failed or unreachable batch) are listed after the summary and in the JSON
    (C(not_considered)). The summary's first-problem column keeps the end of a long message, where its
    cause is."
  - JSON (docs/contracts.md "Reports", C(schema_version) 1) - hosts with their checks (each with its C(task) and
    C(play)), summary, health, C(status), C(severity), the flags C(unreachable) and
    C(validation_failed), node C(facts) from the results (GPU model and count, driver, OFED), and
    in the picture C(last_run), C(last_seen), C(history) and, when failing, C(failing_since) (the run
    that began the current failing streak; also on each failing check); totals; C(run) (id, playbook, inventory,
    limit, start and end time, gpufleet and ansible-core versions) and C(runs).
  - "JUnit - one testsuite per host, one testcase C(<id>[<target>]) per check; fail is a failure,
    skip is skipped, warn is skipped with C(message=\"warning: ...\") and the property
    C(gpufleet.status=warn) (CI tools show it as not passed cleanly). C(time) of a testsuite is the
    host's measured validation time (the module's own C(elapsed_ms), else the wall time from the
    task's start on the host to its result), of a testcase its task's time shared by that task's
    checks; absent when not measured."
  - "HTML - a self-contained page (inline CSS and one inline script, no external assets; works from
    a file) rendered from the Jinja2 template C(plugins/plugin_utils/templates/fleet_report.html.j2)
    with autoescape: run metadata, the kept runs, hosts ranked worst first with their facts, history
    and last run, a host x check-group grid (group = the id up to its second dot) coloured by the
    worst status with its columns grouped by check family (the id up to its first dot; a family
    picker scrolls the grid to a family), values written for people (not JSON), sorting by column
    and filtering by text and health, failing and warning lines per
    host with identical lines grouped (C(gpu.fabric[gpu0-7])), each failing one with C(failing since
    <run id>), check ids as plain text titled with their place in C(docs/contracts.md) (links only to
    O(contracts_url) when set: the page points to no other site), the hosts a stopped play never
    considered, and any bandwidth matrix."
  - "The JSON report is strict JSON: NaN becomes the string C(nan), infinities C(inf) and C(-inf)
    (in observed and expected values and in bandwidth matrices alike)."
  - "A task result may carry C(bandwidth_matrix), a dict C({title, hosts: [...], gbps: [[...]]}) with
    one row per sender and one column per receiver (null for a pair not measured), optionally
    C(min_gbps) (the configured minimum per link), C(rails) and C(per_rail) (a dict rail -> matrix,
    or a list of matrices in the order of C(rails)); without C(gbps) the worst rail per pair is
    used. The latest matrix per title (default the task name) is stored in the JSON and rendered
    as full heatmaps (both directions; worst rail, then each rail) coloured against C(min_gbps)
    (green at or above it, four reds by the share reached below it, NaN/inf as invalid and below),
    or relative to the best pair when no minimum is given, with a legend and per-host counts of
    low pairs; 64 hosts stay readable (small cells, rotated headers, scrolling tables)."
  - "Runs writing one O(dir) at once (the slices of an AWX sliced job) are merged one after the other
    under a lock (C(fcntl.flock) on C(runs/.lock)), each file written whole and renamed into place:
    the picture after K slices holds every slice's hosts, check by check as one run would
    (C(docs/awx.md)). A host in two overlapping runs keeps the checks of the run that wrote last."
  - Nothing is written when no task returned checks or a bandwidth matrix.
requirements:
  - Enabled in C(callbacks_enabled) (the C(ansible.cfg) of this collection does).
options:
  dir:
    description:
      - Directory the reports are written to; created when missing.
      - A relative path is relative to the current directory (to the directory of C(ansible.cfg)
        when set there).
    type: path
    default: ./reports
    env:
      - name: GPUFLEET_REPORT_DIR
    ini:
      - section: fleet_report
        key: dir
  html:
    description: Write C(fleet-report.html).
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_HTML
    ini:
      - section: fleet_report
        key: html
  junit:
    description: Write C(junit.xml).
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_JUNIT
    ini:
      - section: fleet_report
        key: junit
  summary:
    description:
      - Print the summary at the end of the playbook.
      - It is never printed while the stdout callback writes JSON (C(json), C(jsonl), for example
        C(ansible.posix.json)), whose output must stay parseable; the files are written anyway.
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_SUMMARY
    ini:
      - section: fleet_report
        key: summary
  keep_runs:
    description:
      - How many runs are kept (their directories C(runs/<time>-<playbook>/)); older ones are deleted,
        and hosts whose last run is gone leave the fleet picture. A whole number, at least 1.
      - The runs of one job (O(job), the slices of an AWX sliced job) count as one and are kept or
        deleted together.
      - "Any other value (C(GPUFLEET_REPORT_KEEP_RUNS=lots), C(0), C(-1)) is an error: the report is
        still written, keeping 20 runs, and an error line naming C(GPUFLEET_REPORT_KEEP_RUNS) /
        C(keep_runs) and the value is printed (read as text and checked by this callback, so a bad
        value never makes Ansible drop the callback and the run end without a report)."
    type: str
    default: "20"
    env:
      - name: GPUFLEET_REPORT_KEEP_RUNS
    ini:
      - section: fleet_report
        key: keep_runs
  merge:
    description:
      - Merge the run into the previous fleet picture (C(fleet-report.json) in O(dir)). With
        C(false) the picture holds this run's hosts only (history of the kept runs is lost).
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_MERGE
    ini:
      - section: fleet_report
        key: merge
  job:
    description:
      - The job this run belongs to (C(run.job) in the JSON). Runs of one job, such as the slices of
        an AWX sliced job writing one report directory, are kept or deleted together (O(keep_runs)),
        so one slice never pushes another slice's hosts out of the fleet picture.
      - Unset, the extra variable C(awx_workflow_job_id) when present (AWX gives every slice of a
        sliced job the id of the workflow job it made of them), else none (a job of its own).
    type: str
    env:
      - name: GPUFLEET_REPORT_JOB
    ini:
      - section: fleet_report
        key: job
  contracts_url:
    description:
      - Address of C(docs/contracts.md) the HTML page links check ids to (C(<url>#<check id>)), for
        example a site's internal Git server.
      - Unset (the default), check ids are plain text titled C(docs/contracts.md#<id>) and the page links
        to no other site (air-gapped sites; the document ships with the collection).
    type: str
    env:
      - name: GPUFLEET_REPORT_CONTRACTS_URL
    ini:
      - section: fleet_report
        key: contracts_url
  summary_limit:
    description:
      - Most host lines in the printed summary. Fleets above it list only hosts with failures or
        warnings and print a count for the others.
    type: int
    default: 40
    env:
      - name: GPUFLEET_REPORT_SUMMARY_LIMIT
    ini:
      - section: fleet_report
        key: summary_limit
"""

import datetime
import gc
import os
import time

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ansible_version

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import gc_paused
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import (
    GPU_GROUP, FleetReport, collection_info, is_validation_action, junit_xml, run_summary_line)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report_html import render
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report_store import (
    ReportStore, run_id, write_unmerged)

DEFAULTS = {"dir": "./reports", "html": True, "junit": True, "summary": True, "summary_limit": 40,
            "keep_runs": 20, "merge": True, "contracts_url": None, "job": None}
MAX_KEEP_RUNS = 100000
# Validation actions whose result is made on the controller (an action plugin, no module): read through
# CallbackTaskResult.result, which makes its values native (see _result_data).
CONTROLLER_VALIDATION_ACTIONS = ("fleet_conditions",)
AWX_JOB_VARIABLE = "awx_workflow_job_id"  # awx/main/models/unified_jobs.py awx_meta_vars(): shared by the slices


def keep_runs_of(value):
    """(keep_runs, None) for a whole number of at least 1 (an int or its decimal text), else
    (the default 20, an error naming GPUFLEET_REPORT_KEEP_RUNS / keep_runs and the value)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 9:
        number = int(value.strip())
    if number is not None and 1 <= number <= MAX_KEEP_RUNS:
        return number, None
    return DEFAULTS["keep_runs"], (
        "fleet_report: keep_runs (GPUFLEET_REPORT_KEEP_RUNS, [fleet_report] keep_runs) is %r, not a whole number "
        "from 1 to %d: the report is written keeping %d runs; set a valid number" % (
            value, MAX_KEEP_RUNS, DEFAULTS["keep_runs"]))


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _json_stdout():
    """Whether the stdout callback prints JSON (json, jsonl, ansible.posix.json, ...)."""
    try:
        name = C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or ""
    except Exception:  # pylint: disable=broad-except
        return False
    return str(name).rsplit(".", 1)[-1] in ("json", "jsonl")


def _inventory_sources(play):
    """The inventory sources of the run (paths or host lists as given), None when not resolvable."""
    try:
        inventory = play.get_variable_manager()._inventory  # pylint: disable=protected-access
        return [str(source) for source in inventory._sources]  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
        return None


def _play_hosts(play, every_batch=False):
    """Names of the hosts of a play (of the current serial batch; with ``every_batch``, of all its
    batches, ``--limit`` applied), None when not resolvable."""
    try:
        inventory = play.get_variable_manager()._inventory  # pylint: disable=protected-access
        return [host.name for host in inventory.get_hosts(play.hosts, order=play.order,
                                                          ignore_restrictions=every_batch)]
    except Exception:  # pylint: disable=broad-except
        return None


def _group_hosts(play, group):
    """Names of the hosts of an inventory group (empty when not resolvable)."""
    try:
        inventory = play.get_variable_manager()._inventory  # pylint: disable=protected-access
        found = inventory.groups.get(group)
        return [host.name for host in found.get_hosts()] if found is not None else []
    except Exception:  # pylint: disable=broad-except
        return []


def _awx_job(play):
    """The extra variable ``awx_workflow_job_id`` of the run as text, None when absent."""
    try:
        value = play.get_variable_manager().extra_vars.get(AWX_JOB_VARIABLE)
    except Exception:  # pylint: disable=broad-except
        return None
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    return str(value).strip() or None


def _delegate(result, task):
    """The host a task result ran on when delegated to another host, else None."""
    data = getattr(result, "result", None)
    if not isinstance(data, dict):
        data = getattr(result, "_result", None) or {}
    delegated = data.get("_ansible_delegated_vars")
    if isinstance(delegated, dict) and delegated.get("ansible_delegated_host"):
        return str(delegated["ansible_delegated_host"])
    value = getattr(task, "delegate_to", None) if task is not None else None
    return str(value) if isinstance(value, str) and value and "{{" not in value else None


def _result_data(result, task):
    """The data of a task result the report reads. ansible-core (2.19) hands each callback its own copy of
    a result (``CallbackTaskResult``: a deep copy, internal keys stripped), and its ``result`` property makes
    a second copy of the whole of it on first use (``transform_to_native_types``): 2 ms of the controller's
    main process for a DGX node's 35 kB node_validate result, per host and sweep (docs/performance.md). A
    validation module's result is JSON its module printed (never a template), the report normalises every
    check of it (``normalise_check``) and writes every value through its strict JSON writer, so the
    callback's copy of such a result is read as it is. Any other result (fleet_conditions: made on the
    controller), or a result object without that copy, is read through ``result`` as before: a module's JSON
    carries no controller object such as a vaulted value (EncryptedString), which ``result`` would redact
    (red team round 8, F2: only a result made on the controller could hold one)."""
    action = getattr(task, "action", None) if task is not None else None
    if is_validation_action(action) and str(action).rsplit(".", 1)[-1] not in CONTROLLER_VALIDATION_ACTIONS:
        data = getattr(result, "_return_data", None)  # this callback's own copy (task_result.py)
        if isinstance(data, dict):
            return data
    data = getattr(result, "result", None)
    return data if isinstance(data, dict) else result._result


class CallbackModule(CallbackBase):
    """Aggregate callback writing the gpufleet fleet report (logic in plugin_utils/fleet_report)."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.fleet_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super(CallbackModule, self).__init__(display=display)
        self.report = FleetReport()
        self.written = []
        self._froze = False  # gc.freeze() made by this callback (v2_playbook_on_start)
        self.started_at = _utc_now()
        self.inventory = None
        self.awx_job = None
        self._task_starts = {}
        self._gpu_hosts = []
        # the play being run over its serial batches: {uuid, name, hosts, batched, stopped_by}
        self._serial = None

    def _option(self, name):
        try:
            value = self.get_option(name)
        except KeyError:
            value = None
        return DEFAULTS[name] if value is None else value

    @staticmethod
    def _task_of(result):
        return getattr(result, "task", None) or result._task

    def _record(self, result, outcome):
        host = (getattr(result, "host", None) or result._host).get_name()
        task = self._task_of(result)
        data = _result_data(result, task)
        try:
            task_name = result.task_name
        except AttributeError:
            task_name = task.get_name() if task is not None else None
        task_key = getattr(task, "_uuid", None) or task_name
        validation = task is not None and is_validation_action(getattr(task, "action", None))
        started = self._task_starts.pop((host, task_key), None)
        duration = time.monotonic() - started if started is not None else None
        delegate = _delegate(result, task) if outcome == "unreachable" else None
        self.report.task_result(host, data, task_name, outcome, task_key, validation, duration=duration,
                                delegate=delegate)
        if outcome in ("failed", "unreachable") and self._serial is not None and not (
                outcome == "failed" and getattr(task, "ignore_errors", False)):
            what = "%s unreachable" % (delegate or host) if outcome == "unreachable" else "%s failed" % host
            if what not in self._serial["stopped_by"]:
                self._serial["stopped_by"].append(what)
        for warning in self.report.matrix_warnings:
            self._display.warning(warning)
        del self.report.matrix_warnings[:]

    def v2_playbook_on_start(self, playbook):
        # What the run holds from its start (the inventory, the playbook, the plugins: millions of objects at
        # 10,000 hosts, alive to the end) is moved out of the cyclic GC's reach (gc.freeze, as the Python docs
        # advise before forking workers): each full collection in the main process walked it again, and
        # each one in a forked worker also copied its pages; objects made later are collected as before,
        # refcounting frees frozen ones as ever. 0.25-0.3 s of the main process's CPU at 10,000 hosts
        # (docs/performance.md, "Fleet status from the Kubernetes API"); set back in v2_playbook_on_stats.
        # A process that froze objects itself before the run (a program driving ansible-core's API) is
        # left as it is: gc.unfreeze() cannot give back only what this callback froze.
        if not self._froze and gc.get_freeze_count() == 0:
            gc.freeze()
            self._froze = True
        self.started_at = _utc_now()
        name = os.path.basename(getattr(playbook, "_file_name", None) or "")
        self.report.playbook = name if name and not name.startswith("__adhoc") else None

    def v2_playbook_on_play_start(self, play):
        if self.inventory is None:
            self.inventory = _inventory_sources(play)
            self._gpu_hosts = _group_hosts(play, GPU_GROUP)
            self.awx_job = _awx_job(play)
        batch = _play_hosts(play)
        uuid = getattr(play, "_uuid", None) or id(play)
        if self._serial is None or self._serial["uuid"] != uuid:
            self._close_serial()
            self._serial = {"uuid": uuid, "name": play.get_name(), "hosts": _play_hosts(play, every_batch=True),
                            "batched": set(), "stopped_by": []}
        self._serial["batched"].update(batch or ())
        self.report.start_play(play.get_name(), batch)

    def _close_serial(self):
        """The hosts of the play that was run that never were in one of its batches: the play
        stopped early (a serial batch failed or was unreachable): named in the report."""
        serial, self._serial = self._serial, None
        if not serial or serial["hosts"] is None:
            return
        missing = [host for host in serial["hosts"] if host not in serial["batched"]]
        if missing:
            why = "the play stopped after %s" % ", ".join(serial["stopped_by"][:5]) if serial["stopped_by"] \
                else "the play stopped before their batch"
            self.report.add_not_considered(serial["name"], missing, why)

    def _run_metadata(self, generated_at):
        info = collection_info()
        try:
            limit = context.CLIARGS.get("subset")
        except Exception:  # pylint: disable=broad-except
            limit = None
        meta = {"id": run_id(self.started_at, self.report.playbook), "playbook": self.report.playbook,
                "inventory": self.inventory, "limit": limit or None, "started_at": self.started_at,
                "generated_at": generated_at, "gpufleet_version": info["version"],
                "ansible_version": ansible_version}
        job = self._option("job") or self.awx_job
        if job:
            meta["job"] = str(job)
        return meta

    def v2_playbook_on_task_start(self, task, is_conditional):
        if is_validation_action(getattr(task, "action", None)):
            self.report.validation_task(getattr(task, "_uuid", None) or task.get_name())

    def v2_runner_on_start(self, host, task):
        """A task starts on a host (the clock of the task's wall time on that host)."""
        self._task_starts[(host.get_name(), getattr(task, "_uuid", None) or task.get_name())] = time.monotonic()

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_async_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_async_failed(self, result):
        self._record(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def _error(self, message):
        """An error line on the console (Display.error; a display without one: a warning)."""
        getattr(self._display, "error", self._display.warning)(message)

    def v2_playbook_on_stats(self, stats):
        # the report is built and written with the cyclic GC paused (module_utils/core/records.gc_paused):
        # its documents make millions of objects and no reference cycle, and each collection they started
        # also walked everything the run holds (the inventory, the results): 0.7 of the 2.2 s of CPU the
        # report of 10,000 hosts took (docs/performance.md, "Fleet status from the Kubernetes API")
        try:
            with gc_paused():
                self._write_report()
        finally:
            if self._froze:
                self._froze = False
                gc.unfreeze()

    def _write_report(self):
        self.report.end_play()
        self._close_serial()
        self.report.finish(self._gpu_hosts)
        if self.report.empty:
            self._display.vvv("fleet_report: no task returned checks; no report written")
            return
        generated_at = _utc_now()
        printing = self._option("summary") and not _json_stdout()
        if printing:
            self._display.banner("FLEET REPORT")
            colours = {"fail": C.COLOR_ERROR, "warn": C.COLOR_WARN, "pass": C.COLOR_OK}
            for line, status in self.report.summary_lines(self._option("summary_limit")):
                self._display.display(line, color=colours.get(status))
        directory = self._option("dir")
        url = self._option("contracts_url") or None  # no address: check ids are plain text (air-gapped)
        keep_runs, problem = keep_runs_of(self._option("keep_runs"))
        if problem:
            self._error(problem)
        store = ReportStore(directory, keep_runs=keep_runs, merge_runs=self._option("merge"))
        document = self.report.as_dict(generated_at, run=self._run_metadata(generated_at))
        try:
            self.written = store.write(
                document,
                render_html=(lambda doc: render(doc, contracts=url)) if self._option("html") else None,
                render_junit=junit_xml if self._option("junit") else None)
        except Exception as exc:  # pylint: disable=broad-except  # never lose the run's report
            written = write_unmerged(directory, document, junit_xml if self._option("junit") else None)
            self._error("fleet_report: cannot write the report to %s (%s: %s); this run's report %s" % (
                directory, type(exc).__name__, exc,
                "written unmerged to %s" % ", ".join(written) if written else "could not be written anywhere"))
            self.written = written
            return
        finally:
            for warning in store.warnings:
                self._display.warning(warning)
        if printing:
            self._display.display(run_summary_line(store.fleet))
            self._display.display("reports: %s" % ", ".join(self.written))
        else:
            self._display.vvv("fleet_report: reports written: %s" % ", ".join(self.written))
