"""Issue 42 (day two), items 7, 8 and 10 in the fleet report: the delegate is blamed for an unreachable
delegated task, hosts a stopped serial play never considered are listed, the summary keeps the cause
of a long message, "failing since" from the stored history, the JSON's schema version, no link to
another site, and a gpu_nodes host whose every check skipped is not healthy."""

import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report as model
from test_fleet_report import FakeTask, chk, load, make_callback, make_play, node_checks, result
from ansible.executor.task_result import CallbackTaskResult
from ansible.inventory.host import Host

# ansible-core 2.19's own wording of an unreachable ssh host (as printed by a run against a closed
# port, tests/integration/test_fleet_report_playbook.py, and in the fleet table).
SSH_REFUSED = ('Task failed: Data could not be sent to remote host "127.0.0.2". Make sure this host can be '
               'reached over ssh: ssh: connect to host 127.0.0.2 port 9: Connection refused')
RESOLVE = ("Task failed: Failed to connect to the host via ssh: ssh: Could not resolve hostname dgx-99.example.internal:"
           " Name or service not known")


class DelegatedTask(FakeTask):
    def __init__(self, name, delegate_to):
        super(DelegatedTask, self).__init__(name, "ansible.builtin.command")
        self.delegate_to = delegate_to


# ---------------------------------------------------------------------- item 7
def test_an_unreachable_delegate_is_blamed_not_the_worker(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    callback.v2_playbook_on_play_start(make_play(tmp_path, ["worker-01", "worker-02"]))
    task = DelegatedTask("Read the node from the API", "cp-01")
    callback.v2_runner_on_unreachable(CallbackTaskResult(
        Host("worker-01"), task, {"unreachable": True, "msg": SSH_REFUSED, "changed": False}, {}))
    callback.v2_runner_on_ok(result("worker-02", {"checks": node_checks()}))
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    cp = report["hosts"]["cp-01"]
    assert cp["unreachable"] is True
    assert cp["checks"][0]["message"] == ("unreachable (task 'Read the node from the API', delegated for "
                                          "worker-01): ssh: connect to host 127.0.0.2 port 9: Connection refused")
    worker = report["hosts"]["worker-01"]  # not validated, and the message says why: its delegate
    assert worker["unreachable"] is False and worker["validation_failed"] is True
    assert "its delegate cp-01 is unreachable" in worker["checks"][0]["message"]


def _serial_play(tmp_path, callback, hosts, batches):
    """A serial play run batch by batch as PlaybookExecutor does (inventory restricted per batch)."""
    play = make_play(tmp_path, hosts, name="Remediate one node at a time")
    inventory = play.get_variable_manager()._inventory
    for batch, outcomes in batches:
        inventory.restrict_to_hosts([inventory.get_host(name) for name in batch])
        callback.v2_playbook_on_play_start(play)
        for host, outcome in outcomes:
            if outcome == "unreachable":
                callback.v2_runner_on_unreachable(CallbackTaskResult(
                    Host(host), FakeTask("Drain", "ansible.builtin.command"),
                    {"unreachable": True, "msg": SSH_REFUSED}, {}))
            else:
                callback.v2_runner_on_ok(result(host, {"checks": node_checks()}))
    inventory.remove_restriction()


def test_hosts_a_stopped_serial_play_never_considered_are_listed(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    hosts = ["node-%02d" % n for n in range(1, 6)]
    _serial_play(tmp_path, callback, hosts, [(["node-01"], [("node-01", "ok")]),
                                             (["node-02"], [("node-02", "unreachable")])])
    callback.v2_playbook_on_stats(None)
    report, _junit, page = load(tmp_path)
    assert report["not_considered"] == [{
        "play": "Remediate one node at a time", "hosts": ["node-03", "node-04", "node-05"],
        "reason": "the play stopped after node-02 unreachable"}]
    line = "3 host(s) of play 'Remediate one node at a time' never considered (the play stopped after " \
           "node-02 unreachable): node-03, node-04, node-05"
    assert line in display.lines
    assert "never considered (the play stopped after node-02 unreachable): node-03, node-04, node-05." in page


def test_a_serial_play_that_ran_every_batch_lists_nobody(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    _serial_play(tmp_path, callback, ["node-01", "node-02"], [(["node-01"], [("node-01", "ok")]),
                                                               (["node-02"], [("node-02", "ok")])])
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    assert "not_considered" not in report


# ---------------------------------------------------------------------- item 8
def test_the_summary_keeps_the_cause_of_a_long_message():
    report = model.FleetReport()
    report.task_result("dgx-99", {"unreachable": True, "msg": RESOLVE}, "Validate", "unreachable")
    interpreter = ("The module failed to execute correctly, you probably need to set the interpreter. See "
                   "stdout/stderr for the exact error: interpreter '/usr/bin/python9' was not found")
    report.task_result("dgx-98", {"failed": True, "msg": interpreter}, "Validate", "failed",
                       task_key="v", validation=True)
    # ansible-core 2.19 with ansible_python_interpreter=/usr/bin/python9 (as run on this machine)
    report.task_result("dgx-97", {"failed": True, "rc": 127, "msg": "The module interpreter '/usr/bin/python9' "
                                  "was not found.", "module_stderr": "/bin/sh: 1: /usr/bin/python9: not found",
                                  "module_stdout": ""}, "Run the node checks", "failed", task_key="v2",
                       validation=True)
    lines = dict((line.split()[0], line) for line, _s in report.summary_lines(40)[2:])
    assert lines["dgx-97"].endswith(
        "host.validation[Run the node checks]: The module interpreter '/usr/bin/python9' was not found.")
    assert lines["dgx-99"].endswith(
        "host.unreachable[node]: ssh: Could not resolve hostname dgx-99.example.internal: "
        "Name or service not known")
    assert lines["dgx-98"].endswith("...interpreter '/usr/bin/python9' was not found")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=0, max_value=200))
def test_fit_never_exceeds_its_limit_and_keeps_the_end(message, limit):
    shown = model.fit(message, limit)
    folded = " ".join(message.split())
    assert len(shown) <= max(limit, 8)
    assert shown == folded or (shown.startswith("...") and folded.endswith(shown[3:])) or (
        " | " in folded and folded.startswith(shown + " | "))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_cause_is_one_line_and_never_empty_for_a_message(message):
    line = model.cause(message)
    assert "\n" not in line and line == line.strip()
    wrappers = r"^(Task failed:|unreachable:|no checks returned:|Failed to connect|Data could not)"
    assert line or not message.strip() or re.match(wrappers, " ".join(message.split()))


# ---------------------------------------------------------------------- item 10
def _one_run(callback_dir, started, failing):
    from test_fleet_report_history import run  # the fixed-clock run of the history tests
    payload = {"checks": node_checks(fail_ecc=failing)}
    return run(callback_dir, callback_dir, {"node-01": payload, "node-02": {"checks": node_checks()}}, started)


def test_failing_since_is_the_first_run_of_the_current_streak(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    _one_run(reports, "2026-11-23T00:10:00Z", failing=True)
    _one_run(reports, "2026-11-23T00:20:00Z", failing=False)  # recovered: the streak ends
    _one_run(reports, "2026-11-23T00:30:00Z", failing=True)
    _one_run(reports, "2026-11-23T00:40:00Z", failing=True)
    report, _junit, page = load(reports)
    host = report["hosts"]["node-01"]
    assert [h["status"] for h in host["history"]] == ["fail", "pass", "fail", "fail"]
    assert host["failing_since"] == "20261123T003000Z-validate"
    ecc = [c for c in host["checks"] if c["id"] == "gpu.ecc.volatile_uncorrectable"][0]
    assert ecc["failing_since"] == "20261123T003000Z-validate"
    assert "failing_since" not in report["hosts"]["node-02"]
    assert all("failing_since" not in c for c in report["hosts"]["node-02"]["checks"])
    assert "(failing since 20261123T003000Z-validate)" in page


def test_failing_since_of_an_older_report_comes_from_its_history():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_store as store
    assert store.failing_streak_start([{"run": "a", "status": "fail"}, {"run": "b", "status": "warn"},
                                       {"run": "c", "status": "fail"}, {"run": "d", "status": "fail"}]) == "c"
    assert store.failing_streak_start([{"run": "a", "status": "fail"}, {"run": "b", "status": "pass"}]) is None
    assert store.failing_streak_start([]) is None


def test_the_json_has_a_schema_version_and_the_page_no_outside_link(tmp_path):
    callback, _display = make_callback(dir=str(tmp_path))
    callback.v2_runner_on_ok(result("node-01", {"checks": node_checks(fail_ecc=True, warn_clock=True)}))
    callback.v2_playbook_on_stats(None)
    report, _junit, page = load(tmp_path)
    assert report["schema_version"] == model.SCHEMA_VERSION == 1
    run = yaml.safe_load((tmp_path / "runs" / report["run"]["id"] / "fleet-report.json").read_text())
    assert run["schema_version"] == 1
    links = re.findall(r'href="([^"]*)"', page)
    assert links and all(not re.match(r"^[a-z][a-z0-9+.-]*:", link) for link in links), links
    assert '<span class="cid" title="docs/contracts.md#gpu.ecc.volatile_uncorrectable">' in page


def test_a_gpu_node_whose_every_check_skipped_is_not_healthy(tmp_path):
    callback, display = make_callback(dir=str(tmp_path))
    callback._gpu_hosts = ["dgx-01", "dgx-02"]  # the inventory group gpu_nodes
    skipped = [chk("gpu.count", "node", "skip", "no NVIDIA GPU on the PCI bus"),
               chk("gpu.ecc.volatile_uncorrectable", "node", "skip", "no NVIDIA GPU on the PCI bus")]
    callback.v2_runner_on_ok(result("dgx-01", {"checks": skipped}))
    callback.v2_runner_on_ok(result("dgx-02", {"checks": node_checks()}))
    callback.v2_runner_on_ok(result("cpu-01", {"checks": skipped}))  # not a GPU node: skipped is fine
    callback.v2_playbook_on_stats(None)
    report, _junit, _page = load(tmp_path)
    dgx = report["hosts"]["dgx-01"]
    assert dgx["healthy"] is False and dgx["validation_failed"] is True
    assert [c["message"] for c in dgx["checks"] if c["id"] == "host.validation"] == [
        "not validated: every check of this gpu_nodes host skipped (gpu skipped: no NVIDIA GPU on the PCI bus)"]
    assert report["hosts"]["dgx-02"]["healthy"] is True and report["hosts"]["cpu-01"]["healthy"] is True


def test_a_picture_of_a_newer_schema_is_not_merged_and_said(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_store as store
    path = tmp_path / "fleet-report.json"
    path.write_text('{"schema_version": 2, "hosts": {}}')
    document, problem = store.read_state(str(path))
    assert document is None and "schema_version 2" in problem
    for value in ('"1"', "true", "-1"):
        path.write_text('{"schema_version": %s, "hosts": {}}' % value)
        assert store.read_state(str(path))[0] is None
    path.write_text('{"hosts": {}}')  # before the version: 0
    assert store.read_state(str(path)) == ({"hosts": {}}, None)


# ---------------------------------------------------------------------- the console callback (item 8)
def test_console_unreachable_line_and_failure_said_once():
    from ansible_collections.gpufleet.cluster.plugins.callback import console
    assert console.unreachable_line("w1 -> cp-01", "w1", "cp-01", {"msg": SSH_REFUSED}) == (
        "fatal: [w1 -> cp-01]: UNREACHABLE! cp-01 cannot be reached: ssh: connect to host 127.0.0.2 port 9: "
        "Connection refused")
    assert console.unreachable_line("w1", "w1", None, {"msg": "Task failed: \n\n"}) == \
        "fatal: [w1]: UNREACHABLE! cannot be reached"
    data = console.compact_failure({"msg": "Task failed: Module failed: sysfs tree exploded",
                                    "exception": "(traceback unavailable)"})
    assert data == {"msg": "Module failed: sysfs tree exploded"}
    data = console.compact_failure({"exception": "Traceback (most recent call last):\n  ...\nOSError: no sysfs\n"})
    assert data == {"msg": "OSError: no sysfs"}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["msg", "exception", "rc", "stderr"]),
                       st.one_of(st.none(), st.text(max_size=80), st.integers())))
def test_console_compact_failure_never_crashes_and_drops_only_the_exception(data):
    from ansible_collections.gpufleet.cluster.plugins.callback import console
    before = dict(data)
    after = console.compact_failure(dict(data))
    assert "exception" not in after
    assert dict((k, v) for k, v in after.items() if k != "msg") == dict(
        (k, v) for k, v in before.items() if k not in ("msg", "exception"))
