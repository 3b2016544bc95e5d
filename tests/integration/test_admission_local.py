"""Admission burn-in without the API (docs/node-lifecycle.md, "Admission"): node.yml's play "Admission
burn-in of the GPU nodes", taken from playbooks/node.yml as shipped (only its include made absolute),
run on local hosts with the dcgmi stand-in (tests/standins/bin, DCGM 4.2.3 transcripts of
tests/transcripts/dcgmi) and each host's state file under the test's directory.

  loc-new        no state file -> burnt in, passes, the record written to the state file
  loc-fail       DCGM's memtest fails on GPU 0 -> the host fails naming memtest, a failed record kept
  loc-admitted   a valid record (passed, the fixture's driver 580.95.05, level 2) -> no burn-in
  loc-driver     a valid record of another driver -> burnt in again
  loc-garbage    a state file that is not a record -> burnt in again, replaced
"""

import json
import os
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
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admission-local")
    with open(NODE_YML) as handle:
        plays = yaml.safe_load(handle)
    (play,) = [p for p in plays if p.get("name") == PLAY]
    for task in play["tasks"]:
        if "ansible.builtin.include_tasks" in task:
            task["ansible.builtin.include_tasks"] = os.path.join(REPO, "playbooks", task["ansible.builtin.include_tasks"])
    play["hosts"] = "gpu_nodes"
    (tmp / "play.yml").write_text(yaml.safe_dump([play]))
    hosts = {}
    for name, spec in NODES.items():
        state = tmp / ("%s-admission.json" % name)
        if "state" in spec:
            state.write_text(spec["state"])
        hosts[name] = {
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
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml")], check=False,
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    return {"data": data, "tmp": tmp, "output": proc.stdout[-6000:] + proc.stderr[-3000:]}


def state(run, name):
    return json.loads((run["tmp"] / ("%s-admission.json" % name)).read_text())


def argv(run, name):
    path = run["tmp"] / ("%s-argv.jsonl" % name)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


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
    assert (run["tmp"] / "loc-admitted-admission.json").read_text() == record()


def test_another_driver_or_an_unreadable_record_burns_in_again(run):
    assert argv(run, "loc-driver") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-driver")["trigger"] == "driver" and state(run, "loc-driver")["driver"] == DRIVER
    assert argv(run, "loc-garbage") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert state(run, "loc-garbage")["trigger"] == "unreadable"
