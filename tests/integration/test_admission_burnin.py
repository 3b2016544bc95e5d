"""Admission burn-in (docs/node-lifecycle.md, "Admission"): the health gate of playbooks/kubernetes.yml
(--tags node_gate) against the Kubernetes API double (tests/fake_kube_api), in one run.

Every inventory host is a Node of the fake cluster and runs locally: node_validate reads the dgx-h100
fixture tree through the fake NVML (tests/fake_nvml, scenario h100-healthy: validation passes, driver
580.95.05), dcgmi is the stand-in of tests/standins/bin answering from the transcript corpus
(tests/transcripts/dcgmi/4.2.3, DCGM 4.2.3 documents: sources in tests/fixtures/dcgm/README.md).

  adm-new        no admission record -> burnt in (level 2, passes) -> admitted, record written
  adm-fail       no record, DCGM's memtest fails on GPU 0 -> cordoned, tainted burnin.dcgm, the reason
                 names memtest, a record with result fail
  adm-admitted   a valid record (passed, today's driver, level 2) -> no burn-in, nothing held
  adm-repaired   a valid record, then a GPU reset done by the remediation -> burnt in again
  adm-garbage    an annotation that is not a record -> burnt in (never "admitted")
  adm-old-fail   its last burn-in failed (cordoned, tainted by it); passes now -> released, admitted
  adm-optout     gpufleet_burnin.enabled false for it -> no burn-in, node.admission skip
  adm-serving    in service before admission burn-in (Ready, the gate's label gpufleet.io/healthy=true, no
                 gate taint), no record -> not burnt in, record in_service written (Node and state file)
  adm-serving-held   the same label, but held back by the gate's taint -> burnt in (not in service)
  adm-serving-force  in service, gpufleet_burnin_force -> burnt in (trigger force)
  adm-pending    in service by the Node (the gate's label, Ready), no record on the Node, but the node's state file
                 holds the pending marker of node.yml's evidence read (a first run stopped before its burn-in)
                 -> burnt in (trigger new): the local marker wins over the Node's evidence; the marker replaced
"""

import json
import os
import subprocess

import pytest

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "kubernetes.yml")
STANDINS = os.path.join(REPO, "tests", "standins", "bin")
TAINT_KEY = "gpufleet.io/unhealthy"
REASON_ANNOTATION = "gpufleet.io/unhealthy-reason"
ADMISSION = "gpufleet.io/admission"
PASS = "dcgmi/4.2.3/diag-r2-pass"
MEMTEST_FAIL = "dcgmi/4.2.3/diag-memtest-temp-fail"
DRIVER = "580.95.05"  # tests/fixtures/nvml/h100-healthy.json driver_version

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]


def record(when=1790000000.0, result="pass", driver=DRIVER, level=2, checks=()):
    return json.dumps({"when": when, "level": level, "tests": [], "result": result, "dcgm_version": "4.2.3",
                       "driver": driver, "checks": list(checks)}, sort_keys=True, separators=(",", ":"))


REPAIR = json.dumps([{"step": "reset", "status": "done", "reason": "validate next", "at": "2026-09-01T10:00:00Z",
                      "by": "remediate.yml"}])
NODES = {
    "adm-new": {"dcgm": PASS},
    "adm-fail": {"dcgm": MEMTEST_FAIL},
    "adm-admitted": {"dcgm": PASS, "annotations": {ADMISSION: record()}},
    # admitted 2025-08-24, repaired (a GPU reset) 2026-09-01
    "adm-repaired": {"dcgm": PASS, "annotations": {ADMISSION: record(when=1756000000.0),  # 2025-08-24
                                                   "gpufleet.io/remediation-history": REPAIR}},
    "adm-garbage": {"dcgm": PASS, "annotations": {ADMISSION: '{"when": 1e999, "result": "pass"}'}},
    "adm-old-fail": {"dcgm": PASS, "annotations": {ADMISSION: record(result="fail", checks=["burnin.dcgm:gpu0/memtest"]),
                                                   REASON_ANNOTATION: "validation failed: burnin.dcgm:gpu0/memtest"},
                     "unschedulable": True, "taints": [{"key": TAINT_KEY, "value": "burnin.dcgm", "effect": "NoSchedule"}]},
    "adm-optout": {"dcgm": PASS, "burnin": {"enabled": False}},
    "adm-serving": {"dcgm": PASS, "labels": {"gpufleet.io/healthy": "true"}},
    "adm-serving-held": {"dcgm": PASS, "labels": {"gpufleet.io/healthy": "true"}, "unschedulable": True,
                         "taints": [{"key": TAINT_KEY, "value": "gpu.xid", "effect": "NoSchedule"}]},
    "adm-serving-force": {"dcgm": PASS, "labels": {"gpufleet.io/healthy": "true"}, "force": True},
    "adm-pending": {"dcgm": PASS, "labels": {"gpufleet.io/healthy": "true"},
                    "state": json.dumps({"when": 1790000000.0, "level": 2, "tests": [], "result": "pending",
                                         "dcgm_version": "", "driver": "", "checks": [], "trigger": "new"})},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admission")
    api = FakeKubeAPI().start()
    try:
        for name, spec in NODES.items():
            api.add_node(name, labels=spec.get("labels"), annotations=spec.get("annotations"),
                         unschedulable=spec.get("unschedulable", False), taints=spec.get("taints"))
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        hosts = {}
        for name, spec in NODES.items():
            if "state" in spec:
                (tmp / ("%s-admission.json" % name)).write_text(spec["state"] + "\n")
            hosts[name] = {
                "gpufleet_sysfs_root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
                "gpufleet_gpu_count": 8,
                "gpufleet_validate_gpu": {"xid_source": "none"},
                "gpufleet_kube_api_host": "localhost",
                "gpufleet_kubeconfig": kubeconfig,
                "node_gate_python": VENV_PYTHON,
                "node_gate_allow_plain_http": True,
                "node_gate_describe_node": False,
                "gpufleet_admission_state_file": str(tmp / ("%s-admission.json" % name)),
                "gpufleet_burnin": dict({"dcgm_level": 2, "timeout": 60}, **spec.get("burnin", {})),
                "gpufleet_burnin_force": spec.get("force", False),
                "gpufleet_burnin_environment": {
                    "PATH": STANDINS + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                    "GPUFLEET_REPLAY_CASE": spec["dcgm"],
                    "GPUFLEET_REPLAY_ARGV": str(tmp / ("%s-argv.jsonl" % name)),
                },
            }
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON,
                     "gpufleet_kubernetes_roles": ["node_gate"]},
            "hosts": {"localhost": {}},
            "children": {"gpu_nodes": {"hosts": hosts}, "kube_node": {"hosts": {name: {} for name in NODES}}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", GPUFLEET_REPORT_DIR=str(tmp / "reports"),
                   TMPDIR=str(tmp), ANSIBLE_FORKS="8",
                   # node_validate (the gate) reads the fake NVML; the state file lives under tmp
                   PYTHONPATH=os.path.join(REPO, "tests", "fake_nvml"),
                   GPUFLEET_FAKE_NVML_SCENARIO=os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json"))
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK, "--tags", "node_gate",
                               "-e", "ansible_become=false"],
                              check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        start = proc.stdout.find("{")
        assert start >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
        yield {"api": api, "data": data, "tmp": tmp, "output": proc.stdout[-6000:] + proc.stderr[-3000:]}
    finally:
        api.stop()


def node(run, name):
    return run["api"].node(name)


def annotations(run, name):
    return node(run, name)["metadata"].get("annotations") or {}


def admission(run, name):
    return json.loads(annotations(run, name)[ADMISSION])


def taint(run, name):
    return next((t for t in node(run, name)["spec"].get("taints") or [] if t["key"] == TAINT_KEY), None)


def cordoned(run, name):
    return bool(node(run, name)["spec"].get("unschedulable"))


def argv(run, name):
    path = run["tmp"] / ("%s-argv.jsonl" % name)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def report_checks(run, name):
    with open(str(run["tmp"] / "reports" / "fleet-report.json")) as handle:
        report = json.load(handle)
    hosts = report["hosts"]
    entry = hosts[name] if isinstance(hosts, dict) else next(h for h in hosts if h.get("host") == name)
    return [c for c in entry["checks"] if c["id"] == "node.admission"]


def test_no_host_failed(run):
    failed = sorted(h for h, s in run["data"]["stats"].items() if s["failures"] or s["unreachable"])
    assert failed == [], run["output"]


def test_a_new_node_is_burnt_in_and_admitted(run):
    assert argv(run, "adm-new") == [["dcgmi", "diag", "-r", "2", "-j"]]
    rec = admission(run, "adm-new")
    assert rec["result"] == "pass" and rec["level"] == 2 and rec["driver"] == DRIVER and rec["trigger"] == "new"
    assert rec["dcgm_version"].startswith("4.2")
    assert taint(run, "adm-new") is None and not cordoned(run, "adm-new")
    (check,) = report_checks(run, "adm-new")
    assert check["status"] == "pass" and "admitted: burnt in" in check["message"], check


def test_a_failing_burn_in_holds_the_node_back_naming_the_test(run):
    assert cordoned(run, "adm-fail"), run["output"]
    assert taint(run, "adm-fail")["value"] == "burnin.dcgm"
    assert "burnin.dcgm:gpu0/memtest" in annotations(run, "adm-fail")[REASON_ANNOTATION]
    rec = admission(run, "adm-fail")
    assert rec["result"] == "fail" and any("memtest" in c for c in rec["checks"]), rec
    (check,) = report_checks(run, "adm-fail")
    assert check["status"] == "fail" and "memtest" in check["message"]


def test_an_admitted_node_is_not_burnt_in_again(run):
    assert argv(run, "adm-admitted") == []
    assert annotations(run, "adm-admitted")[ADMISSION] == record()  # left as it was
    assert taint(run, "adm-admitted") is None and not cordoned(run, "adm-admitted")
    (check,) = report_checks(run, "adm-admitted")
    assert check["status"] == "pass" and check["message"].startswith("admitted 2026-09-21")


def test_a_node_repaired_after_its_admission_is_burnt_in_again(run):
    assert argv(run, "adm-repaired") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert admission(run, "adm-repaired")["trigger"] == "repaired"


def test_an_unreadable_record_is_never_admitted(run):
    assert argv(run, "adm-garbage") == [["dcgmi", "diag", "-r", "2", "-j"]]
    rec = admission(run, "adm-garbage")
    assert rec["result"] == "pass" and rec["trigger"] == "unreadable"


def test_a_node_that_failed_before_and_passes_now_is_released(run):
    assert argv(run, "adm-old-fail") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert taint(run, "adm-old-fail") is None and not cordoned(run, "adm-old-fail"), run["output"]
    assert REASON_ANNOTATION not in annotations(run, "adm-old-fail")
    assert admission(run, "adm-old-fail")["trigger"] == "failed"


def test_a_group_that_opts_out_is_not_burnt_in(run):
    assert argv(run, "adm-optout") == []
    assert ADMISSION not in annotations(run, "adm-optout")
    (check,) = report_checks(run, "adm-optout")
    assert check["status"] == "skip"


def test_a_node_in_service_before_admission_burn_in_is_recorded_not_burnt_in(run):
    assert argv(run, "adm-serving") == [], run["output"]
    rec = admission(run, "adm-serving")
    assert rec["result"] == "in_service" and rec["trigger"] == "in_service" and rec["driver"] == DRIVER
    assert rec["dcgm_version"] == "" and rec["checks"] == []
    local = json.loads((run["tmp"] / "adm-serving-admission.json").read_text())
    assert local == rec  # kept on the node as well
    assert taint(run, "adm-serving") is None and not cordoned(run, "adm-serving")
    (check,) = report_checks(run, "adm-serving")
    assert check["status"] == "pass" and check["observed"]["result"] == "in_service"
    assert check["message"].startswith("in service before admission burn-in (Ready, label gpufleet.io/healthy=true")
    assert "gpufleet_burnin_force burns it in" in check["message"]


def test_a_node_held_back_by_the_gate_or_forced_is_burnt_in_although_marked_healthy(run):
    assert argv(run, "adm-serving-held") == [["dcgmi", "diag", "-r", "2", "-j"]]
    assert admission(run, "adm-serving-held")["trigger"] == "new"
    assert argv(run, "adm-serving-force") == [["dcgmi", "diag", "-r", "2", "-j"]]
    rec = admission(run, "adm-serving-force")
    assert rec["trigger"] == "force" and rec["result"] == "pass"


def test_a_local_pending_marker_burns_in_a_node_the_node_shows_in_service(run):
    assert argv(run, "adm-pending") == [["dcgmi", "diag", "-r", "2", "-j"]], run["output"]
    rec = admission(run, "adm-pending")
    assert rec["result"] == "pass" and rec["trigger"] == "new"
    assert json.loads((run["tmp"] / "adm-pending-admission.json").read_text()) == rec  # the marker replaced
    (check,) = report_checks(run, "adm-pending")
    assert check["status"] == "pass" and "admission pending since" in check["message"], check
