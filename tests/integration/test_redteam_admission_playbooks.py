"""Red team, admission burn-in (issue 44 item 1) through the playbooks: the health gate of
playbooks/kubernetes.yml (--tags node_gate) against the Kubernetes API double (tests/fake_kube_api),
node.yml's admission play followed by the gate in one run (as site.yml does), and a --check run.
dcgmi is the stand-in of tests/standins/bin (DCGM 4.2.3 transcripts of tests/transcripts/dcgmi), or,
where the brief asks for output DCGM did not give, a script of the test's own put first on PATH.

Five ansible-playbook runs (two of them one after the other) start together (the suite's time budget);
each test asserts one node's outcome
and quotes its sentence of docs/node-lifecycle.md ("Admission") or docs/contracts.md. The attacks that
fail are in /work/notes/redteam-admission-failing.py (not committed; it imports this file's helpers).

  gate run (kubernetes.yml --tags node_gate)
    rt-admin     cordoned by an admin before, no record; burn-in passes -> stays cordoned
    rt-hang      dcgmi hangs past gpufleet_burnin.timeout -> held back, burnin.dcgm.run, record fail
    rt-garbled   a dcgmi printing no JSON -> held back, burnin.dcgm.run, record fail
    rt-nodcgmi   no dcgmi on PATH -> held back, burnin.dcgm.run, record fail
    rt-huge      a 200 KB annotation in place of the record -> burnt in, the record replaced
    rt-force     gpufleet_burnin_force "yes" (a string) on an admitted node -> burnt in (force)
    rt-nforce    gpufleet_burnin_force "false" (a string) on an admitted node -> not burnt in
    rt-level3    host_vars gpufleet_burnin {dcgm_level: 3} over the group's opt-out -> burnt in at -r 3
    rt-optout    the group's opt-out (group_vars enabled false) -> skip, nothing run
    rt-future    a record written in 2099 by a node with a stepped clock, a GPU reset in 2026 -> burnt in
    rt-unread    held back by its failed admission, then its record damaged; passes now -> burnt in, the
                 taint lifted and uncordoned
    rt-warn      a DCGM Pass carrying a warning, node_gate_fail_on warn -> warn in the report, held back,
                 its record fail
  first/second (two gate runs in a row)
    rt-flip        memtest fails, then passes -> held, then released
    rt-flip-admin  cordoned by an admin, memtest fails, then passes -> the admin's cordon stays
    rt-flip-warn   held for a DCGM warning, burnt in again and held by the second run
  site run (node.yml's admission play, then the gate of kubernetes.yml, one ansible-playbook)
    rt-twice     burnt in once, the record on the Node
  local run (node.yml's admission play alone, no API)
    rt-loc-empty, rt-loc-binary, rt-loc-truncated   burnt in, the state file replaced
    rt-loc-dir   the state file's path is a directory -> burnt in, the node failed naming the file
  check run (kubernetes.yml --tags node_gate --check)
    rt-check-new, rt-check-fail   nothing written, no dcgmi, node.admission fail
"""

import concurrent.futures
import json
import os
import stat
import subprocess

import pytest
import yaml

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

KUBERNETES_YML = os.path.join(REPO, "playbooks", "kubernetes.yml")
NODE_YML = os.path.join(REPO, "playbooks", "node.yml")
STANDINS = os.path.join(REPO, "tests", "standins", "bin")
TRANSCRIPTS = os.path.join(REPO, "tests", "transcripts", "dcgmi")
TAINT_KEY = "gpufleet.io/unhealthy"
REASON = "gpufleet.io/unhealthy-reason"
ADMISSION = "gpufleet.io/admission"
CORDON_MARK = "gpufleet.io/admission-cordon"  # "true": the admission cordoned the node (docs/node-lifecycle.md)
HISTORY = "gpufleet.io/remediation-history"
PASS = "dcgmi/4.2.3/diag-r2-pass"
MEMTEST_FAIL = "dcgmi/4.2.3/diag-memtest-temp-fail"
DRIVER = "580.95.05"  # tests/fixtures/nvml/h100-healthy.json driver_version
R2 = ["dcgmi", "diag", "-r", "2", "-j"]

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]


def record(when=1790000000.0, result="pass", driver=DRIVER, level=2, checks=()):
    return json.dumps({"when": when, "level": level, "tests": [], "result": result, "dcgm_version": "4.2.3",
                       "driver": driver, "checks": list(checks)}, sort_keys=True, separators=(",", ":"))


RESET_2026 = json.dumps([{"step": "reset", "status": "done", "reason": "validate next", "at": "2026-10-01T10:00:00Z",
                          "by": "remediate.yml"}])
HELD = {"unschedulable": True, "taints": [{"key": TAINT_KEY, "value": "burnin.dcgm", "effect": "NoSchedule"}]}

GATE = {
    "rt-admin": {"dcgm": PASS, "unschedulable": True},
    "rt-hang": {"dcgm": PASS, "env": {"GPUFLEET_REPLAY_HANG": "120"}, "burnin": {"timeout": 3}},
    "rt-garbled": {"bin": "garbled"},
    "rt-nodcgmi": {"bin": "empty"},
    "rt-huge": {"dcgm": PASS, "annotations": {ADMISSION: "{" + " " * 200000 + "}"}},
    "rt-force": {"dcgm": PASS, "annotations": {ADMISSION: record()}, "vars": {"gpufleet_burnin_force": "yes"}},
    "rt-nforce": {"dcgm": PASS, "annotations": {ADMISSION: record()}, "vars": {"gpufleet_burnin_force": "false"}},
    "rt-level3": {"dcgm": PASS, "group": "optout_group", "burnin": {"dcgm_level": 3}},
    "rt-optout": {"dcgm": PASS, "group": "optout_group", "burnin": None},
    # 4096000000 = 2099-10-18: a node whose clock was stepped wrote it; reset done 2026-10-01
    "rt-future": {"dcgm": PASS, "annotations": {ADMISSION: record(when=4096000000.0), HISTORY: RESET_2026}},
    "rt-unread": dict(HELD, dcgm=PASS, annotations={ADMISSION: '{"when": "damaged by hand"}',
                                                    REASON: "validation failed: burnin.dcgm:gpu0/memtest"}),
    "rt-warn": {"bin": "warn", "vars": {"node_gate_fail_on": "warn"}},
}
SITE = {"rt-twice": {"dcgm": PASS}}
# two gate runs one after the other on the same Nodes: the first with FIRST's dcgmi, the second with PASS
FIRST = {
    "rt-flip": {"dcgm": MEMTEST_FAIL},                          # fails, then passes
    "rt-flip-admin": {"dcgm": MEMTEST_FAIL, "unschedulable": True},  # cordoned by an admin before both
    "rt-flip-warn": {"bin": "warn", "vars": {"node_gate_fail_on": "warn"}},  # held for a DCGM warning
}


# node.yml's admission play run alone (no API): the state file as found on the node
LOCAL = {
    "rt-loc-dir": {"dcgm": PASS, "state": "dir"},
    "rt-loc-empty": {"dcgm": PASS, "state": b""},
    "rt-loc-binary": {"dcgm": PASS, "state": bytes(range(256)) * 4},
    "rt-loc-truncated": {"dcgm": PASS, "state": record().encode()[:50]},
}
CHECK = {
    "rt-check-new": {"dcgm": PASS},
    "rt-check-fail": dict(HELD, dcgm=PASS, annotations={ADMISSION: record(result="fail",
                                                                          checks=["burnin.dcgm:gpu0/memtest"])}),
}


def _scripts(tmp):
    """dcgmi doubles the stand-in cannot give: no JSON at all (garbled), none on PATH (empty), and DCGM's
    4.2.3 level-2 pass (tests/transcripts/dcgmi/4.2.3/diag-r2-pass.yml) with one Pass result carrying a
    warning, the shape docs/contracts.md burnin.dcgm names ("a `Pass` result carrying DCGM warnings (e.g.
    "Persistence mode for GPU 0 is disabled") -> warn")."""
    dirs = {}
    for name in ("garbled", "empty", "warn"):
        dirs[name] = tmp / ("bin-" + name)
        dirs[name].mkdir()
    with open(os.path.join(TRANSCRIPTS, "4.2.3", "diag-r2-pass.yml")) as handle:
        doc = json.loads(yaml.safe_load(handle)["stdout"])
    first = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    first["warnings"] = [{"error_category": 8, "error_id": 29, "error_severity": 5,
                          "warning": "Persistence Mode: Persistence mode for GPU 0 is disabled."}]
    (tmp / "warn.json").write_text(json.dumps(doc, indent=2))
    scripts = {
        "garbled": "#!/bin/sh\necho \"$0 $*\" >> \"$GPUFLEET_REPLAY_ARGV\"\n"
                   "printf 'Error: \\x01\\xff{\"DCGM Diagnostic\": {\"test_categ'\nexit 0\n",
        "warn": "#!/bin/sh\necho \"$0 $*\" >> \"$GPUFLEET_REPLAY_ARGV\"\ncat '%s'\nexit 0\n" % (tmp / "warn.json"),
    }
    for name, text in scripts.items():
        path = dirs[name] / "dcgmi"
        path.write_text(text)
        path.chmod(stat.S_IRWXU)
    return dirs


def _host(tmp, name, spec, kubeconfig, dirs):
    env = {"GPUFLEET_REPLAY_CASE": spec.get("dcgm", ""), "GPUFLEET_REPLAY_ARGV": str(tmp / ("%s-argv.jsonl" % name))}
    if "bin" in spec:
        env["PATH"] = str(dirs[spec["bin"]]) + ":/usr/bin:/bin"
        if spec["bin"] == "empty":
            env["PATH"] = str(dirs["empty"])  # nothing named dcgmi anywhere on it
    else:
        env["PATH"] = STANDINS + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    env.update(spec.get("env", {}))
    host = {
        "gpufleet_sysfs_root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
        "gpufleet_gpu_count": 8,
        "gpufleet_validate_gpu": {"xid_source": "none"},
        "gpufleet_kube_api_host": "localhost",
        "gpufleet_kubeconfig": kubeconfig,
        "node_gate_python": VENV_PYTHON,
        "node_gate_allow_plain_http": True,
        "node_gate_describe_node": False,
        "gpufleet_admission_state_file": str(tmp / ("%s-admission.json" % name)),
        "gpufleet_burnin_environment": env,
    }
    if spec.get("group") is None:
        host["gpufleet_burnin"] = dict({"dcgm_level": 2, "timeout": 60}, **spec.get("burnin", {}))
    elif spec.get("burnin"):
        host["gpufleet_burnin"] = spec["burnin"]  # host_vars over the group's value
    host.update(spec.get("vars", {}))
    return host


def _play(tmp, api, nodes, dirs, label, extra_args=(), playbook=KUBERNETES_YML):
    kubeconfig = api.kubeconfig(tmp / ("kubeconfig-" + label))
    hosts = {name: _host(tmp, name, spec, kubeconfig, dirs) for name, spec in nodes.items()}
    plain = {n: h for n, h in hosts.items() if nodes[n].get("group") is None}
    grouped = {n: h for n, h in hosts.items() if nodes[n].get("group") is not None}
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON,
                 "gpufleet_kubernetes_roles": ["node_gate"], "__gpufleet_site_run": label == "site"},
        "hosts": {"localhost": {}},
        "children": {"gpu_nodes": {"hosts": plain, "children": {"optout_group": {"hosts": grouped,
                                   "vars": {"gpufleet_burnin": {"enabled": False, "dcgm_level": 2, "timeout": 60}}}}},
                     "kube_node": {"hosts": {name: {} for name in nodes}}},
    }}
    (tmp / ("hosts-%s.yml" % label)).write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", GPUFLEET_REPORT_DIR=str(tmp / ("reports-" + label)),
               TMPDIR=str(tmp), ANSIBLE_FORKS="16",
               PYTHONPATH=os.path.join(REPO, "tests", "fake_nvml"),
               GPUFLEET_FAKE_NVML_SCENARIO=os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / ("hosts-%s.yml" % label)), playbook,
                           "--tags", "node_gate", "-e", "ansible_become=false"] + list(extra_args),
                          check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    return {"data": data, "output": proc.stdout[-8000:] + proc.stderr[-3000:], "label": label}


def _site_playbook(tmp, gate=True):
    """node.yml's play "Admission burn-in of the GPU nodes" as shipped (include made absolute, tagged
    node_gate so --tags node_gate runs it), then kubernetes.yml: the order of site.yml (gate false: the
    play alone, node.yml run for a joining node without the API)."""
    with open(NODE_YML) as handle:
        plays = yaml.safe_load(handle)
    (play,) = [p for p in plays if p.get("name") == "Admission burn-in of the GPU nodes"]
    for task in play["tasks"]:
        if "ansible.builtin.include_tasks" in task:
            task["ansible.builtin.include_tasks"] = os.path.join(REPO, "playbooks",
                                                                 task["ansible.builtin.include_tasks"])
    play["tags"] = ["node", "node_gate"]
    path = tmp / ("site.yml" if gate else "node-admission.yml")
    plays = [play] + ([{"name": "kubernetes.yml", "ansible.builtin.import_playbook": KUBERNETES_YML}] if gate else [])
    path.write_text(yaml.safe_dump(plays))
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redteam-admission")
    dirs = _scripts(tmp)
    api = FakeKubeAPI().start()
    try:
        for name, spec in dict(GATE, **SITE, **CHECK).items():
            api.add_node(name, annotations=spec.get("annotations"), unschedulable=spec.get("unschedulable", False),
                         taints=spec.get("taints"))
        for name, spec in CHECK.items():
            spec["before"] = json.loads(json.dumps(api.node(name)))
        for name, spec in FIRST.items():
            api.add_node(name, unschedulable=spec.get("unschedulable", False))
        for name, spec in LOCAL.items():
            path = tmp / ("%s-admission.json" % name)
            if spec["state"] == "dir":
                path.mkdir()
            else:
                path.write_bytes(spec["state"])
        site = _site_playbook(tmp)
        alone = _site_playbook(tmp, gate=False)
        def twice():
            first = _play(tmp, api, FIRST, dirs, "first")
            snapshot = {name: json.loads(json.dumps(api.node(name))) for name in FIRST}
            second = {name: dict(spec, dcgm=PASS, bin=None) if spec.get("bin") != "warn" else spec
                      for name, spec in FIRST.items()}
            for spec in second.values():
                if spec.get("bin") is None:
                    spec.pop("bin")
            return first, snapshot, _play(tmp, api, second, dirs, "second")

        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            pair = pool.submit(twice)
            gate = pool.submit(_play, tmp, api, GATE, dirs, "gate")
            both = pool.submit(_play, tmp, api, SITE, dirs, "site", playbook=site)
            check = pool.submit(_play, tmp, api, CHECK, dirs, "check", ["--check"])
            local = pool.submit(_play, tmp, api, LOCAL, dirs, "local", playbook=alone)
            first, snapshot, second = pair.result()
            yield {"api": api, "tmp": tmp, "gate": gate.result(), "site": both.result(), "check": check.result(),
                   "local": local.result(), "first": first, "after_first": snapshot, "second": second}
    finally:
        api.stop()


def node(runs, name):
    return runs["api"].node(name)


def annotations(runs, name):
    return node(runs, name)["metadata"].get("annotations") or {}


def admission(runs, name):
    return json.loads(annotations(runs, name)[ADMISSION])


def taint(runs, name):
    return next((t for t in node(runs, name)["spec"].get("taints") or [] if t["key"] == TAINT_KEY), None)


def cordoned(runs, name):
    return bool(node(runs, name)["spec"].get("unschedulable"))


def argv(runs, name):
    path = runs["tmp"] / ("%s-argv.jsonl" % name)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(["dcgmi"] + line.split()[1:])
    return out


def report_checks(runs, label, name, check_id="node.admission"):
    with open(str(runs["tmp"] / ("reports-" + label) / "fleet-report.json")) as handle:
        report = json.load(handle)
    hosts = report["hosts"]
    entry = hosts[name] if isinstance(hosts, dict) else next(h for h in hosts if h.get("host") == name)
    return [c for c in entry["checks"] if c["id"] == check_id]


def failed_hosts(run):
    return sorted(h for h, s in run["data"]["stats"].items() if s["failures"] or s["unreachable"])


def host_failure(run, name):
    for play in run["data"]["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(name) or {}
            if result.get("failed"):
                return str(result.get("msg", ""))
    return ""


def held_for_burn_in(runs, name, check_id):
    """node-lifecycle.md: "A node that fails stays cordoned and tainted: ... the taint
    `gpufleet.io/unhealthy` carries the failing check id (`burnin.dcgm`, `burnin.dcgm.run`,
    `k8s.nccl.busbw`) ... and role `node_gate` cordons it."; the record: "result": "fail"."""
    assert cordoned(runs, name), runs["gate"]["output"]
    assert taint(runs, name) and taint(runs, name)["value"] == check_id, node(runs, name)["spec"]
    assert check_id in annotations(runs, name)[REASON]
    rec = admission(runs, name)
    assert rec["result"] == "fail" and rec["checks"], rec
    (check,) = report_checks(runs, "gate", name)
    assert check["status"] == "fail"


# -- the gate run --------------------------------------------------------------------------------------
def test_the_gate_run_fails_no_host_it_should_not(runs):
    """contracts.md "The gate's decision": the gate holds a node back, it does not fail the run."""
    assert [h for h in failed_hosts(runs["gate"]) if h not in ("rt-force", "rt-nforce")] == [], \
        runs["gate"]["output"]


def test_a_node_an_admin_cordoned_stays_cordoned_after_it_passes(runs):
    """node-lifecycle.md: "when it passes, the cordon and the taint its admission set are removed" (only
    those: this cordon was the admin's)."""
    assert argv(runs, "rt-admin") == [R2]
    assert admission(runs, "rt-admin")["result"] == "pass"
    assert cordoned(runs, "rt-admin"), node(runs, "rt-admin")["spec"]
    assert taint(runs, "rt-admin") is None


def test_a_burn_in_killed_at_its_timeout_holds_the_node_back(runs):
    """node-lifecycle.md settings: "timeout: 3600 # seconds; killed past it: the burn-in fails"."""
    held_for_burn_in(runs, "rt-hang", "burnin.dcgm.run")


def test_a_dcgmi_without_json_holds_the_node_back(runs):
    """contracts.md burnin.dcgm.run: "Fail closed: ... no JSON"."""
    assert argv(runs, "rt-garbled"), "the garbled dcgmi never ran"
    held_for_burn_in(runs, "rt-garbled", "burnin.dcgm.run")


def test_no_dcgmi_holds_the_node_back(runs):
    """contracts.md burnin.dcgm.run: "Fail closed: `dcgmi` missing"."""
    held_for_burn_in(runs, "rt-nodcgmi", "burnin.dcgm.run")


def test_a_huge_annotation_is_burnt_in_and_replaced(runs):
    """node-lifecycle.md: "at most 16 KiB ... Unreadable means not admitted: the node is burnt in again and
    the new record replaces it"."""
    assert argv(runs, "rt-huge") == [R2]
    rec = admission(runs, "rt-huge")
    assert rec["result"] == "pass" and rec["trigger"] == "unreadable"


def test_force_yes_as_a_string_burns_in_or_is_refused_naming_it(runs):
    """contracts.md tier `gpufleet_burnin_force`: "burn the node in even when its admission record is
    valid" (a YAML "yes" in quotes is a string)."""
    if "rt-force" in failed_hosts(runs["gate"]):
        assert "gpufleet_burnin_force" in host_failure(runs["gate"], "rt-force")
        return
    assert argv(runs, "rt-force") == [R2]
    assert admission(runs, "rt-force")["trigger"] == "force"


def test_force_false_as_a_string_does_not_burn_in(runs):
    """contracts.md tier `gpufleet_burnin_force` default `False`: the string "false" is not a request."""
    if "rt-nforce" in failed_hosts(runs["gate"]):
        assert "gpufleet_burnin_force" in host_failure(runs["gate"], "rt-nforce")
        return
    assert argv(runs, "rt-nforce") == []
    assert annotations(runs, "rt-nforce")[ADMISSION] == record()


def test_a_host_value_replaces_the_groups_opt_out(runs):
    """contracts.md `gpufleet_burnin`: "Set per inventory group through group_vars"; Ansible's variable
    precedence: a host's own value of the variable replaces the group's (no merge), so its unset keys take
    the defaults ("unset: on")."""
    assert argv(runs, "rt-level3") == [["dcgmi", "diag", "-r", "3", "-j"]]
    assert admission(runs, "rt-level3")["level"] == 3


def test_the_groups_opt_out_skips(runs):
    """node-lifecycle.md: "false: the group opts out (node.admission skip)"."""
    assert argv(runs, "rt-optout") == []
    assert ADMISSION not in annotations(runs, "rt-optout")
    (check,) = report_checks(runs, "gate", "rt-optout")
    assert check["status"] == "skip"


def test_a_damaged_record_of_a_held_node_is_burnt_in_and_the_taint_lifted(runs):
    """node-lifecycle.md: "Unreadable means not admitted: the node is burnt in again and the new record
    replaces it" (whether its cordon is lifted too: /work/notes/redteam-admission-failing.py)."""
    assert argv(runs, "rt-unread") == [R2]
    rec = admission(runs, "rt-unread")
    assert rec["result"] == "pass" and rec["trigger"] == "unreadable"
    assert taint(runs, "rt-unread") is None


def test_a_dcgm_pass_with_a_warning_is_reported_as_a_warning(runs):
    """contracts.md burnin.dcgm: "a `Pass` result carrying DCGM warnings ... → warn with the text ...:
    visible in the report" (what the record then says: /work/notes/redteam-admission-failing.py)."""
    checks = report_checks(runs, "gate", "rt-warn", "burnin.dcgm")
    assert any(c["status"] == "warn" and "Persistence mode for GPU 0 is disabled" in c["message"] for c in checks), \
        checks


# -- a node failing its burn-in, then passing (two gate runs) -------------------------------------------
def test_a_node_that_failed_is_held_then_released_when_it_passes(runs):
    """node-lifecycle.md: "A node that fails stays cordoned and tainted ... The next run burns it in again
    (`failed`); when it passes, the cordon and the taint its admission set are removed"."""
    before = runs["after_first"]["rt-flip"]
    assert before["spec"].get("unschedulable"), runs["first"]["output"]
    assert [t["value"] for t in before["spec"].get("taints") or [] if t["key"] == TAINT_KEY] == ["burnin.dcgm"]
    assert argv(runs, "rt-flip") == [R2, R2]
    rec = admission(runs, "rt-flip")
    assert rec["result"] == "pass" and rec["trigger"] == "failed"
    assert taint(runs, "rt-flip") is None and not cordoned(runs, "rt-flip"), node(runs, "rt-flip")["spec"]
    assert REASON not in annotations(runs, "rt-flip")


# -- node.yml then kubernetes.yml in one run -----------------------------------------------------------
def test_node_then_gate_burns_in_once_and_records_on_the_node(runs):
    """node-lifecycle.md: "the health gate of `playbooks/kubernetes.yml`, which takes a burn-in of the same
    run as it is (no second one)"; "the gate carries a record found there onto the Node"."""
    assert failed_hosts(runs["site"]) == [], runs["site"]["output"]
    assert argv(runs, "rt-twice") == [R2]
    rec = admission(runs, "rt-twice")
    assert rec["result"] == "pass" and rec["trigger"] == "new"
    with open(str(runs["tmp"] / "rt-twice-admission.json")) as handle:
        assert json.load(handle) == rec


# -- node.yml alone: a damaged state file ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["rt-loc-empty", "rt-loc-binary", "rt-loc-truncated"])
def test_a_damaged_state_file_is_burnt_in_and_replaced(runs, name):
    """node-lifecycle.md: "without an API it keeps the record in the node's state file"; "Unreadable means
    not admitted: the node is burnt in again and the new record replaces it"."""
    assert name not in failed_hosts(runs["local"]), runs["local"]["output"]
    assert argv(runs, name) == [R2]
    with open(str(runs["tmp"] / ("%s-admission.json" % name))) as handle:
        rec = json.load(handle)
    assert rec["result"] == "pass" and rec["trigger"] == "unreadable", rec


def test_a_state_file_that_is_a_directory_is_not_admitted(runs):
    """node-lifecycle.md: "Unreadable means not admitted: the node is burnt in again"; a record that
    cannot be kept fails the node naming the file rather than claiming an admission."""
    assert argv(runs, "rt-loc-dir") == [R2]
    path = runs["tmp"] / "rt-loc-dir-admission.json"
    if "rt-loc-dir" in failed_hosts(runs["local"]):
        assert str(path) in host_failure(runs["local"], "rt-loc-dir") or "admission.json" in \
            host_failure(runs["local"], "rt-loc-dir"), host_failure(runs["local"], "rt-loc-dir")
    else:
        with open(str(path)) as handle:
            assert json.load(handle)["trigger"] == "unreadable"


# -- check mode ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CHECK))
def test_check_mode_runs_no_burn_in_and_writes_nothing(runs, name):
    """contracts.md node.admission: "not admitted → fail: ... or it was due and did not run (check mode)";
    gpu_burnin (ansible-doc): "In check mode nothing is run"."""
    assert argv(runs, name) == []
    assert not (runs["tmp"] / ("%s-admission.json" % name)).exists()
    before = CHECK[name]["before"]
    after = node(runs, name)
    assert (after["metadata"].get("annotations") or {}) == (before["metadata"].get("annotations") or {})
    assert after["spec"].get("taints") == before["spec"].get("taints")
    assert bool(after["spec"].get("unschedulable")) == bool(before["spec"].get("unschedulable"))
    (check,) = report_checks(runs, "check", name)
    assert check["status"] == "fail", check


# -- moved from /work/notes/redteam-admission-failing.py once fixed -------------------------------------
def test_f4_a_record_from_a_stepped_clock_does_not_hide_a_repair(runs):
    """node-lifecycle.md table: "dated later than this controller's clock plus 300 s ... yes: not taken as
    an admission | `clock`" (rt-future: `when` 2099-10-18, a reset of 2026-10-01 in its history)."""
    assert argv(runs, "rt-future") == [R2], annotations(runs, "rt-future")[ADMISSION]
    rec = admission(runs, "rt-future")
    assert rec["result"] == "pass" and rec["trigger"] == "clock" and rec["when"] < 4096000000.0, rec


def test_f5_a_node_held_by_its_failed_admission_is_released_when_it_passes_even_if_its_record_was_damaged(runs):
    """node-lifecycle.md: "What the admission set is read on the Node, not from the record (a record damaged
    since is burnt in as `unreadable` and released all the same)": rt-unread, cordoned and tainted
    burnin.dcgm (no gpufleet.io/admission-cordon: held before the annotation existed)."""
    assert argv(runs, "rt-unread") == [R2]
    assert admission(runs, "rt-unread")["result"] == "pass"
    assert taint(runs, "rt-unread") is None, node(runs, "rt-unread")["spec"]
    assert not cordoned(runs, "rt-unread"), node(runs, "rt-unread")["spec"]
    assert CORDON_MARK not in annotations(runs, "rt-unread")


def test_f6_a_burn_in_warning_that_holds_the_node_is_not_recorded_as_a_pass(runs):
    """node-lifecycle.md table: the last burn-in failed "(with `node_gate_fail_on: warn`, also a burn-in
    check that warned: the record follows what held the node back)"."""
    checks = report_checks(runs, "gate", "rt-warn", "burnin.dcgm")
    assert any(c["status"] == "warn" for c in checks), checks
    held = taint(runs, "rt-warn")
    assert held is not None and held["value"].startswith("burnin"), node(runs, "rt-warn")["spec"]
    record = admission(runs, "rt-warn")
    assert record["result"] == "fail", record
    admitted = report_checks(runs, "gate", "rt-warn")
    assert admitted and all(c["status"] == "fail" for c in admitted), admitted
    assert annotations(runs, "rt-warn")[CORDON_MARK] == "true" and cordoned(runs, "rt-warn")


def test_f9_an_admins_cordon_survives_a_failed_then_passed_burn_in(runs):
    """node-lifecycle.md: "a node that was already cordoned (by an administrator) is not cordoned again and
    gets `"false"`: that cordon is never released by the admission"."""
    before = runs["after_first"]["rt-flip-admin"]
    assert before["spec"].get("unschedulable")
    assert [t["value"] for t in before["spec"].get("taints") or [] if t["key"] == TAINT_KEY] == ["burnin.dcgm"]
    assert before["metadata"]["annotations"][CORDON_MARK] == "false"
    assert argv(runs, "rt-flip-admin") == [R2, R2]
    assert admission(runs, "rt-flip-admin")["result"] == "pass"
    assert cordoned(runs, "rt-flip-admin"), node(runs, "rt-flip-admin")["spec"]
    assert taint(runs, "rt-flip-admin") is None and CORDON_MARK not in annotations(runs, "rt-flip-admin")


def test_f9_the_admissions_own_cordon_is_marked_and_the_mark_removed_on_release(runs):
    """node-lifecycle.md: "role `node_gate` cordons it, marking the cordon as the admission's with
    annotation `gpufleet.io/admission-cordon: "true"`" (rt-flip: schedulable before)."""
    assert runs["after_first"]["rt-flip"]["metadata"]["annotations"][CORDON_MARK] == "true"
    assert CORDON_MARK not in annotations(runs, "rt-flip") and not cordoned(runs, "rt-flip")


def test_f6b_a_node_held_for_a_burn_in_warning_is_burnt_in_again_next_run(runs):
    """node-lifecycle.md: "A node that fails stays cordoned and tainted ... The next run burns it in again"
    (rt-flip-warn: a DCGM Pass with a warning in both runs, node_gate_fail_on warn)."""
    before = runs["after_first"]["rt-flip-warn"]
    held = [t["value"] for t in before["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
    assert held == ["burnin.dcgm"], before["spec"]
    assert len(argv(runs, "rt-flip-warn")) == 2, argv(runs, "rt-flip-warn")
    assert taint(runs, "rt-flip-warn") is not None, node(runs, "rt-flip-warn")["spec"]
    assert admission(runs, "rt-flip-warn")["trigger"] == "failed"


def test_f1_the_module_refuses_a_timeout_it_cannot_wait():
    """ansible-doc gpu_burnin `timeout`: "more than 0, at most 604800, 7 days" (1e300 crashed it with
    Python's "timestamp too large to convert to C _PyTime_t")."""
    env = dict(os.environ, PATH=os.path.join(REPO, "tests", "standins", "bin") + ":" + os.environ["PATH"],
               GPUFLEET_REPLAY_CASE="dcgmi/4.2.3/diag-r2-pass", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible"), "localhost", "-c", "local", "-e",
                           "ansible_python_interpreter=" + str(VENV_PYTHON),
                           "-m", "gpufleet.cluster.gpu_burnin", "-a", "timeout=1e300 fail_on=never"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert "_PyTime_t" not in out and "at most 604800 seconds" in out, out[-2000:]
