"""Admission burn-in without the API (docs/node-lifecycle.md, "Admission"): node.yml's play "Admission
burn-in of the GPU nodes", taken from playbooks/node.yml as shipped (only its include made absolute),
run on local hosts with the dcgmi stand-in (tests/standins/bin, DCGM 4.2.3 transcripts of
tests/transcripts/dcgmi) and each host's state file under the test's directory.

  loc-new        no state file -> burnt in, passes, the record written to the state file
  loc-fail       DCGM's memtest fails on GPU 0 -> the host fails naming memtest, a failed record kept
  loc-admitted   a valid record (passed, the fixture's driver 580.95.05, level 2) -> no burn-in
  loc-driver     a valid record of another driver -> burnt in again
  loc-garbage    a state file that is not a record -> burnt in again, replaced
  loc-fifo, loc-symlink, loc-directory, loc-oversize
                 a FIFO, a symbolic link (to a valid record), a directory or a file over 16 KiB at the
                 state file's path -> unreadable (read strictly, module state_file state read), named in
                 the decision, set aside, burnt in again, the new record written
  loc-serving    no record, role-state.json with the stamps of an earlier converge -> in service before
                 admission burn-in: not burnt in, record in_service written
  loc-serving-health  no record, health.json of the node health agent -> the same
  loc-stamps-fifo     a FIFO at role-state.json (unreadable evidence) -> burnt in (fail closed)
  loc-stamped-now     no record, no stamps before the run; this run's roles stamp role-state.json
                 (a play before, as node.yml's node stack play, after it read the evidence) -> burnt in
  loc-interrupted     a first run (before the main one) reads the evidence (the node is marked pending),
                 stamps role-state.json and fails before its admission play -> the main run burns it in
                 (trigger new), although it has stamps now
  loc-tags       a first run with --tags nvidia_driver (the evidence read is tagged always: marked pending;
                 the stamp tagged nvidia_driver; the admission play, tagged node, not run) -> the main run
                 (all tags) burns it in
  loc-check      a first run in check mode -> no marker written; the main run burns it in
  loc-pending-damaged  a damaged pending marker and stamps -> unreadable, burnt in (never in service)

Each host's files live in its own directory (role-state.json and health.json are read beside the
admission state file). The play before the admission play is node.yml's first task of its node stack
play (the evidence read before the roles) and a stand-in for the roles' stamp.
"""

import json
import os
import stat
import subprocess

import pytest
import yaml

from playbook_env import ANSIBLE_PLAYBOOK, REPO, VENV_PYTHON

NODE_YML = os.path.join(REPO, "playbooks", "node.yml")
STANDINS = os.path.join(REPO, "tests", "standins", "bin")
PLAY = "Admission burn-in of the GPU nodes"
DRIVER = "580.95.05"  # tests/fixtures/nodes/dgx-h100/sys/module/nvidia/version

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def record(driver=DRIVER):
    return json.dumps({"when": 1790000000.0, "level": 2, "tests": [], "result": "pass", "dcgm_version": "4.2.3",
                       "driver": driver, "checks": []}, sort_keys=True, separators=(",", ":"))


NODES = {
    "loc-new": {"dcgm": "dcgmi/4.2.3/diag-r2-pass"},
    "loc-fail": {"dcgm": "dcgmi/4.2.3/diag-memtest-temp-fail"},
    "loc-admitted": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "state": record()},
    "loc-driver": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "state": record(driver="570.86.15")},
    "loc-garbage": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "state": '{"when": "yesterday"}'},
    "loc-fifo": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "odd": "fifo"},
    "loc-symlink": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "odd": "symlink"},
    "loc-directory": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "odd": "directory"},
    "loc-oversize": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "state": record() + " " * 16384},
    "loc-serving": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "stamps": True},
    "loc-serving-health": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "health": True},
    "loc-stamps-fifo": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "stamps": "fifo"},
    "loc-stamped-now": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "stamp_now": True},
    "loc-interrupted": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "first": []},
    "loc-tags": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "first": ["--tags", "nvidia_driver"]},
    "loc-check": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "first": ["--check"]},
    "loc-pending-damaged": {"dcgm": "dcgmi/4.2.3/diag-r2-pass", "stamps": True,
                            "state": '{"when": 1790000000.0, "level": 2, "result": "pending", "trig'},
}
STAMPS = json.dumps({"roles": {"nvidia_driver": {"inputs": "d" * 64}, "container_runtime": {"inputs": "e" * 64}}})
HEALTH = json.dumps({"agent": {"healthy": True, "failing": []}, "generated_at": 1790000000.0, "cycle": 3,
                     "node": "loc-serving-health"})
EVIDENCE_TASK = "Read the evidence of an earlier gpufleet run before the roles stamp the node"


def _absolute(task):
    """The task with its include_tasks file made absolute (a path, or the file: of include_tasks' mapping)."""
    include = task.get("ansible.builtin.include_tasks")
    if isinstance(include, dict):
        include["file"] = os.path.join(REPO, "playbooks", include["file"])
    elif include is not None:
        task["ansible.builtin.include_tasks"] = os.path.join(REPO, "playbooks", include)
    return task


def _play(tmp, env, playbook, *args):
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / playbook)] + list(args),
                          check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    return data, proc.stdout[-6000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admission-local")
    with open(NODE_YML) as handle:
        plays = yaml.safe_load(handle)
    (play,) = [p for p in plays if p.get("name") == PLAY]
    (stack,) = [p for p in plays if p.get("name", "").startswith("Node stack")]
    (evidence,) = [t for t in stack["tasks"] if t.get("name") == EVIDENCE_TASK]  # node.yml's, as shipped
    stamp = {"name": "Stand-in for this run's roles: stamp role-state.json", "when": "stamp_now | default(false)",
             "ansible.builtin.copy": {"content": STAMPS, "mode": "0644",
                                      "dest": "{{ gpufleet_admission_state_file | dirname }}/role-state.json"}}
    before = {"name": "Node stack (the evidence read before the roles, a stamp)", "hosts": "gpu_nodes",
              "gather_facts": False, "tags": stack["tags"], "tasks": [evidence, stamp]}
    for task in play["tasks"] + before["tasks"]:
        _absolute(task)
    play["hosts"] = "gpu_nodes"
    (tmp / "play.yml").write_text(yaml.safe_dump([before, play]))
    # a first run of this gpufleet version that leaves stamps and no admission: the roles' stamp (tagged
    # as node.yml tags its state write: with the roles' tags), then a failure before the admission play
    first_stamp = dict(stamp, when="true", tags=["nvidia_driver"])
    stop = {"name": "Stand-in for a run that stops after the roles stamped the node", "tags": ["nvidia_driver"],
            "ansible.builtin.fail": {"msg": "stopped before the admission play"},
            "when": "inventory_hostname == 'loc-interrupted'"}
    first = dict(before, tasks=[evidence, first_stamp, stop])
    (tmp / "first.yml").write_text(yaml.safe_dump([first, play]))
    hosts = {}
    for name, spec in NODES.items():
        (tmp / name).mkdir()
        state = tmp / name / "admission.json"
        if "state" in spec:
            state.write_text(spec["state"])
        if spec.get("odd") == "fifo":
            os.mkfifo(str(state))
        elif spec.get("odd") == "symlink":
            (tmp / name / "elsewhere.json").write_text(record())
            os.symlink(str(tmp / name / "elsewhere.json"), str(state))
        elif spec.get("odd") == "directory":
            state.mkdir()
        if spec.get("stamps") == "fifo":
            os.mkfifo(str(tmp / name / "role-state.json"))
        elif spec.get("stamps"):
            (tmp / name / "role-state.json").write_text(STAMPS)
        if spec.get("health"):
            (tmp / name / "health.json").write_text(HEALTH)
        hosts[name] = {
            "stamp_now": bool(spec.get("stamp_now")),
            "gpufleet_sysfs_root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
            "gpufleet_admission_state_file": str(state),
            "gpufleet_burnin": {"timeout": 60},
            "gpufleet_burnin_environment": {
                "PATH": STANDINS + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                "GPUFLEET_REPLAY_CASE": spec["dcgm"],
                "GPUFLEET_REPLAY_ARGV": str(tmp / ("%s-argv.jsonl" % name)),
            },
        }
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON,
                                  "ansible_become": False},
                         "children": {"gpu_nodes": {"hosts": hosts}}}}
    (tmp / "hosts.yml").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               GPUFLEET_REPORT_DIR=str(tmp / "reports"), TMPDIR=str(tmp), ANSIBLE_FORKS="5")
    env.pop("PYTHONPATH", None)
    firsts = {}
    for name, spec in NODES.items():
        if "first" in spec:
            first_data, first_output = _play(tmp, env, "first.yml", "--limit", name, *spec["first"])
            path = tmp / name / "admission.json"
            firsts[name] = {"data": first_data, "output": first_output,
                            "state": path.read_text() if path.exists() else None,
                            "stamped": (tmp / name / "role-state.json").exists(), "argv": argv_of(tmp, name)}
    data, output = _play(tmp, env, "play.yml")
    return {"data": data, "tmp": tmp, "output": output, "first": firsts}


def state(run, name):
    return json.loads((run["tmp"] / name / "admission.json").read_text())


def why(run, name):
    """The message of the task that says why the node is (not) burnt in."""
    for play in run["data"]["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "Say why the node is (not) burnt in" and name in task["hosts"]:
                return task["hosts"][name].get("msg", "")
    return None


def argv_of(tmp, name):
    path = tmp / ("%s-argv.jsonl" % name)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def argv(run, name):
    return argv_of(run["tmp"], name)


def failure(run, name):
    for play in run["data"]["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(name) or {}
            if result.get("failed"):
                return result.get("msg", "")
    return None


def test_only_the_node_that_failed_its_burn_in_fails(run):
    failed = sorted(h for h, s in run["data"]["stats"].items() if s["failures"])
    assert failed == ["loc-fail"], run["output"]
    assert "memtest" in failure(run, "loc-fail") and failure(run, "loc-fail").startswith("not admitted")


def test_a_new_node_is_burnt_in_and_its_record_kept_on_the_node(run):
    assert argv(run, "loc-new") == [["dcgmi", "diag", "-r", "2", "-j"]]
    rec = state(run, "loc-new")
    assert rec["result"] == "pass" and rec["driver"] == DRIVER and rec["trigger"] == "new"


def test_a_failed_burn_in_is_kept_as_failed(run):
    rec = state(run, "loc-fail")
    assert rec["result"] == "fail" and any("memtest" in c for c in rec["checks"])


def test_an_admitted_node_is_not_burnt_in_again(run):
    assert argv(run, "loc-admitted") == []
    assert (run["tmp"] / "loc-admitted" / "admission.json").read_text() == record()


def test_another_driver_or_an_unreadable_record_burns_in_again(run):
    assert argv(run, "loc-driver") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-driver")["trigger"] == "driver" and state(run, "loc-driver")["driver"] == DRIVER
    assert argv(run, "loc-garbage") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-garbage")["trigger"] == "unreadable"


@pytest.mark.parametrize("name, words", [
    ("loc-fifo", "not a regular file"), ("loc-symlink", "a symbolic link"), ("loc-directory", "directory"),
    ("loc-oversize", "more than 16384 bytes"),
])
def test_a_state_file_that_is_no_small_regular_file_is_unreadable_and_burnt_in_again(run, name, words):
    message = why(run, name)
    assert message.startswith("admission of %s: burn-in, unreadable record" % name) and words in message, message
    assert argv(run, name) == [["dcgmi", "diag", "-r", "2", "-j"]]
    path = run["tmp"] / name / "admission.json"
    assert stat.S_ISREG(os.lstat(str(path)).st_mode)  # the odd file set aside, the new record written
    assert state(run, name)["trigger"] == "unreadable" and state(run, name)["result"] == "pass"
    assert [p.name for p in (run["tmp"] / name).iterdir() if p.name.startswith("admission.json.damaged-")]
    if name == "loc-symlink":
        assert (run["tmp"] / name / "elsewhere.json").read_text() == record()  # the link's target untouched


@pytest.mark.parametrize("name, evidence", [
    ("loc-serving", "role-state.json has the stamps of an earlier converge (container_runtime, nvidia_driver)"),
    ("loc-serving-health", "health.json written by the node health agent"),
])
def test_a_node_in_service_before_admission_burn_in_is_recorded_not_burnt_in(run, name, evidence):
    assert argv(run, name) == []
    rec = state(run, name)
    assert rec["result"] == "in_service" and rec["trigger"] == "in_service" and rec["driver"] == DRIVER
    assert evidence in why(run, name) and "in service before admission burn-in" in why(run, name)


def test_unreadable_evidence_or_stamps_of_this_run_are_no_evidence(run):
    assert argv(run, "loc-stamps-fifo") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-stamps-fifo")["trigger"] == "new"
    assert stat.S_ISFIFO(os.lstat(str(run["tmp"] / "loc-stamps-fifo" / "role-state.json")).st_mode)  # not ours: kept
    assert (run["tmp"] / "loc-stamped-now" / "role-state.json").read_text() == STAMPS
    assert argv(run, "loc-stamped-now") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-stamped-now")["trigger"] == "new"


def test_a_first_run_that_stopped_after_the_roles_stamped_the_node_leaves_it_pending_then_burnt_in(run):
    first = run["first"]["loc-interrupted"]
    assert first["data"]["stats"]["loc-interrupted"]["failures"] == 1, first["output"]
    assert first["stamped"] and first["argv"] == []  # stamped, stopped before its burn-in
    marker = json.loads(first["state"])  # the marker written before the roles stamped the node
    assert marker["result"] == "pending" and marker["trigger"] == "new" and marker["level"] == 2
    assert argv(run, "loc-interrupted") == [["dcgmi", "diag", "-r", "2", "-j"]], run["output"]
    rec = state(run, "loc-interrupted")
    assert rec["result"] == "pass" and rec["trigger"] == "new" and rec["driver"] == DRIVER  # the marker replaced
    message = why(run, "loc-interrupted")
    assert "admission pending since" in message and "in service" not in message, message


def test_a_tagged_first_run_then_a_full_run_burns_the_node_in(run):
    first = run["first"]["loc-tags"]
    assert not first["data"]["stats"]["loc-tags"]["failures"], first["output"]
    assert first["stamped"] and first["argv"] == []  # --tags nvidia_driver: the admission play did not run
    assert json.loads(first["state"])["result"] == "pending", first["output"]
    assert argv(run, "loc-tags") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-tags")["trigger"] == "new" and state(run, "loc-tags")["result"] == "pass"


def test_no_marker_in_check_mode_and_none_on_a_node_in_service(run):
    first = run["first"]["loc-check"]
    assert first["state"] is None and not first["stamped"], first["output"]  # check mode writes nothing
    assert state(run, "loc-check")["trigger"] == "new"
    assert state(run, "loc-serving")["result"] == "in_service"  # stamps, no record: no marker, in service


def test_a_damaged_pending_marker_is_burnt_in_not_in_service(run):
    message = why(run, "loc-pending-damaged")
    assert message.startswith("admission of loc-pending-damaged: burn-in, unreadable record"), message
    assert argv(run, "loc-pending-damaged") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-pending-damaged")["trigger"] == "unreadable"
