"""playbooks/remediate.yml against the Kubernetes API double (tests/fake_kube_api), in one run.

Every inventory host is a Node of the fake cluster and runs locally: node_validate reads the
dgx-h100 fixture tree through the fake NVML (tests/fake_nvml, its scenario a symlink per host),
nvidia-smi and dcgmi are the stand-ins of tests/standins/bin (the stand-in's GPU reset points the
scenario at a healthy one, as a reset that clears the fault would). The hosts run in parallel
(gpufleet_remediate_serial), so the two nodes of one breaker group really race for its one slot.

  gpu-fixed     recovery action pending -> reset -> healthy -> burn-in passes -> released
  gpu-burnfail  the same, but DCGM's memtest fails on GPU 0 -> stays isolated, keeps its slot
  gpu-busy      recovery action pending, a process holds a GPU -> reset refused, isolated
  gpu-lost-a/b  a GPU lost, policy drain only, one slot for both: one is drained and stays isolated
                (validation still fails), the other is refused by the open breaker
  gpu-ok        healthy: nothing is done, nothing written
  gpu-pdb       a PodDisruptionBudget refuses the eviction: the drain fails, no reset, isolated
  gpu-reboot    policy reboot, the reboot fails (Ansible refuses to reboot over a local connection):
                isolated with the reason, never released
  gpu-slurm-*   in slurm_nodes, scontrol the stand-in of tests/standins (scontrol.py): -ok's jobs end
                after 2 polls (drained, reset, resumed), -stuck's never end within slurm_drain_timeout
                (stays drained with our reason, isolated, no reset), -admin was drained by an admin
                beforehand (remediated, released in Kubernetes, never resumed in Slurm); these run
                Slurm 25.11 (`scontrol --version`, then `show node --json`), -old runs 22.05 (Debian 12's,
                which refuses --json: `show node -o`) and is drained, reset and resumed like -ok
"""

import json
import os
import subprocess

import pytest
import yaml

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "remediate.yml")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
DCGM = os.path.join(REPO, "tests", "fixtures", "dcgm")
# the dcgmi transcripts of these documents (tests/transcripts/dcgmi; dcgm_rc is the transcript's status)
DCGM_CASES = {"dcgm4_level2_pass.json": "dcgmi/4.2.3/diag-r2-pass",
              "dcgm4_memtest_temp_fail.json": "dcgmi/4.2.3/diag-memtest-temp-fail"}
STANDINS = os.path.join(REPO, "tests", "standins", "bin")
REASON_ANNOTATION = "gpufleet.io/unhealthy-reason"
TAINT_KEY = "gpufleet.io/unhealthy"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]

DRAIN_ONLY = {"gpu_lost": "drain", "xid_fatal": "drain", "ecc": "drain", "row_remap": "drain"}
NODES = {
    "gpu-fixed": {"scenario": "h100-recovery-action.json", "group": "fixed", "dcgm": "dcgm4_level2_pass.json"},
    "gpu-burnfail": {"scenario": "h100-recovery-action.json", "group": "burnfail",
                     "dcgm": "dcgm4_memtest_temp_fail.json", "dcgm_rc": 226},
    "gpu-busy": {"scenario": "h100-recovery-action.json", "group": "busy", "dcgm": "dcgm4_level2_pass.json",
                 "apps": "48213, /usr/bin/python3, GPU-4c4aaa9c-e3af-30e7-e9e9-e3f630e0158b\n"},
    # a lost GPU fails ECC and recovery checks too: every class of it drained only, so the repair
    # cannot clear the fault and the node must stay out
    "gpu-lost-a": {"scenario": "h100-gpu-is-lost.json", "group": "rackA", "dcgm": "dcgm4_level2_pass.json",
                   "actions": DRAIN_ONLY},
    "gpu-lost-b": {"scenario": "h100-gpu-is-lost.json", "group": "rackA", "dcgm": "dcgm4_level2_pass.json",
                   "actions": DRAIN_ONLY},
    "gpu-ok": {"scenario": "h100-healthy.json", "group": "ok", "dcgm": "dcgm4_level2_pass.json"},
    # policy reboot: ansible.builtin.reboot refuses a local connection (it would reboot the machine
    # running the test), standing in for a node that does not come back within reboot_timeout
    "gpu-reboot": {"scenario": "h100-gpu-is-lost.json", "group": "reboot", "dcgm": "dcgm4_level2_pass.json",
                   "actions": {"gpu_lost": "reboot"}},
    # a PodDisruptionBudget refuses the eviction: the drain fails, the node stays out
    "gpu-pdb": {"scenario": "h100-recovery-action.json", "group": "pdb", "dcgm": "dcgm4_level2_pass.json",
                "drain_timeout": 2},
    "gpu-slurm-ok": {"scenario": "h100-recovery-action.json", "group": "slurm-ok", "dcgm": "dcgm4_level2_pass.json",
                     "slurm": {"jobs_end_after": "2"}},
    "gpu-slurm-stuck": {"scenario": "h100-recovery-action.json", "group": "slurm-stuck",
                        "dcgm": "dcgm4_level2_pass.json", "slurm": {"jobs_end_after": "-1"}},
    "gpu-slurm-admin": {"scenario": "h100-recovery-action.json", "group": "slurm-admin",
                        "dcgm": "dcgm4_level2_pass.json",
                        "slurm": {"state": "IDLE", "drained": "bad dimm [admin@2026-11-20T10:00:00]"}},
    "gpu-slurm-old": {"scenario": "h100-recovery-action.json", "group": "slurm-old", "dcgm": "dcgm4_level2_pass.json",
                      "slurm": {"jobs_end_after": "2", "version": "22.05"}},
}
SLURM_ADMIN_REASON = "bad dimm [admin@2026-11-20T10:00:00]"
# reached over ssh on a port nothing listens on: unreachable at once (connection refused)
UNREACHABLE = {"gpu-unreachable": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
                                   "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"}}


def host_vars(tmp, name, spec, kubeconfig):
    scenario = tmp / ("%s-nvml.json" % name)
    os.symlink(os.path.join(SCENARIOS, spec["scenario"]), str(scenario))
    apps = tmp / ("%s-apps.txt" % name)
    apps.write_text(spec.get("apps", ""))
    slurm = tmp / ("%s-slurm" % name)
    slurm.mkdir()
    for key, value in spec.get("slurm", {}).items():
        (slurm / key).write_text(value + "\n")
    return {
        "gpufleet_sysfs_root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
        "gpufleet_gpu_count": 8,
        "gpufleet_validate_gpu": {"xid_source": "none"},
        "gpufleet_validate_rdma": False,
        "gpufleet_kube_api_host": "localhost",
        "gpufleet_kubeconfig": kubeconfig,
        "node_gate_python": VENV_PYTHON,
        "node_gate_allow_plain_http": True,
        "node_gate_drain_timeout": spec.get("drain_timeout", 20),
        "gpufleet_remediate_allow_plain_http": True,
        "gpufleet_remediation": {
            "enabled": True, "group": spec["group"], "max_parallel": 1,
            # never a reboot of the machine running the test
            "actions": dict({"gpu_lost": "drain"}, **spec.get("actions", {})),
            "burn_in": {"dcgm_level": 2, "timeout": 60}, "slurm_drain_timeout": 3, "slurm_poll_interval": 1},
        "gpufleet_remediate_environment": {
            "PATH": STANDINS + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml"),
            "GPUFLEET_FAKE_NVML_SCENARIO": str(scenario),
            "GPUFLEET_STANDIN_RESET_SCENARIO": os.path.join(SCENARIOS, "h100-healthy.json"),
            "GPUFLEET_STANDIN_COMPUTE_APPS": str(apps),
            # dcgmi answers from the transcript corpus (tests/transcripts/dcgmi), with its exit status
            "GPUFLEET_REPLAY_CASE": DCGM_CASES[spec["dcgm"]],
            "GPUFLEET_REPLAY_ARGV": str(tmp / ("%s-argv.jsonl" % name)),
            "GPUFLEET_STANDIN_SLURM_DIR": str(slurm),
        },
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("remediate")
    api = FakeKubeAPI().start()
    try:
        for name in list(NODES) + list(UNREACHABLE):
            api.add_node(name)
        api.add_pod("train-0", "gpu-fixed", namespace="ml", owner_kind="StatefulSet", labels={"app": "train"})
        api.add_pod("web-1", "gpu-lost-a", labels={"app": "web"})
        api.add_pod("web-2", "gpu-lost-b", labels={"app": "web"})
        api.add_pod("job-9", "gpu-reboot", namespace="ml", owner_kind="Job")
        api.add_pod("db-0", "gpu-pdb", namespace="data", owner_kind="StatefulSet", labels={"app": "db"})
        api.add_pdb("db", {"app": "db"}, namespace="data", disruptions_allowed=0)
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"gpu_nodes": {"hosts": dict({name: host_vars(tmp, name, spec, kubeconfig)
                                                      for name, spec in NODES.items()}, **UNREACHABLE)},
                         "slurm_nodes": {"hosts": {name: {} for name, spec in NODES.items() if "slurm" in spec}}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", GPUFLEET_REPORT_DIR=str(tmp / "reports"),
                   TMPDIR=str(tmp), ANSIBLE_FORKS="8")
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK,
                               "-e", "gpufleet_remediate_hosts=gpu_nodes", "-e", "gpufleet_remediate_serial=10"],
                              check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        start = proc.stdout.find("{")
        assert start >= 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        data, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
        yield {"api": api, "data": data, "tmp": tmp, "output": proc.stdout[-6000:] + proc.stderr[-3000:]}
    finally:
        api.stop()


def annotations(run, node):
    return run["api"].node(node)["metadata"].get("annotations") or {}


def history(run, node):
    return [(h["step"], h["status"]) for h in json.loads(annotations(run, node).get("gpufleet.io/remediation-history",
                                                                                        "[]"))]


def held(run, node):
    obj = run["api"].node(node)
    return bool(obj["spec"].get("unschedulable")) and any(
        t["key"] == TAINT_KEY for t in obj["spec"].get("taints") or [])


def lease_holders(run, group):
    lease = run["api"].lease("kube-system", "gpufleet-remediation-" + group.lower())
    return sorted(json.loads(lease["metadata"]["annotations"]["gpufleet.io/remediation-holders"])) if lease else []


def argv(run, node):
    path = run["tmp"] / ("%s-argv.jsonl" % node)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def failed_hosts(run):
    return sorted(host for host, stats in run["data"]["stats"].items() if stats["failures"])


def test_the_run_fails_exactly_the_nodes_that_stay_isolated_by_a_failure(run):
    assert set(failed_hosts(run)) - {"gpu-lost-a", "gpu-lost-b"} == {"gpu-burnfail", "gpu-busy", "gpu-pdb",
                                                                          "gpu-reboot", "gpu-slurm-stuck"}, \
        run["output"]
    assert all(r["status"] != 401 for r in run["api"].requests)


def test_reset_validate_burn_in_release(run):
    assert not held(run, "gpu-fixed"), run["output"]
    assert REASON_ANNOTATION not in annotations(run, "gpu-fixed")
    assert history(run, "gpu-fixed") == [("breaker", "admitted"), ("drain", "done"), ("reset", "done"),
                                         ("release", "done"), ("breaker", "released")], run["output"]
    assert run["api"].pod_names("gpu-fixed") == []  # drained
    calls = argv(run, "gpu-fixed")
    assert [c[:2] for c in calls] == [["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid"],
                                      ["nvidia-smi", "--gpu-reset"], ["dcgmi", "diag"]]
    assert calls[-1] == ["dcgmi", "diag", "-r", "2", "-j"]
    assert lease_holders(run, "fixed") == []
    attempts = json.loads(annotations(run, "gpu-fixed")["gpufleet.io/remediation-attempts"])
    assert len(attempts) == 1
    # the burn-in after the repair is its admission: recorded, later than the reset (the gate admits it)
    admission = json.loads(annotations(run, "gpu-fixed")["gpufleet.io/admission"])
    assert admission["result"] == "pass" and admission["trigger"] == "repaired" and admission["level"] == 2


def test_a_failed_burn_in_is_never_released(run):
    assert held(run, "gpu-burnfail")
    reason = annotations(run, "gpu-burnfail")[REASON_ANNOTATION]
    assert reason.startswith("remediation failed (reset): burn-in:") and "memtest" in reason, reason
    assert history(run, "gpu-burnfail")[-1] == ("Stop when the burn-in fails", "failed")
    assert lease_holders(run, "burnfail") == ["gpu-burnfail"]  # the slot is kept: the breaker trips
    assert "gpufleet.io/admission" not in annotations(run, "gpu-burnfail")  # never admitted


def test_reset_refused_while_a_process_holds_a_gpu(run):
    assert held(run, "gpu-busy")
    reason = annotations(run, "gpu-busy")[REASON_ANNOTATION]
    assert "reset refused: 1 process(es) use the GPUs: 48213 /usr/bin/python3" in reason, reason
    assert ["nvidia-smi", "--gpu-reset"] not in argv(run, "gpu-busy")
    last = json.loads(annotations(run, "gpu-busy")["gpufleet.io/remediation"])
    assert last["status"] == "failed" and "reset refused" in last["reason"]


def test_two_nodes_racing_for_one_slot(run):
    reasons = {node: annotations(run, node).get(REASON_ANNOTATION) for node in ("gpu-lost-a", "gpu-lost-b")}
    assert all(reasons.values()), (reasons, [annotations(run, n) for n in reasons], run["output"])
    refused = [node for node, reason in reasons.items() if "breaker open: 1 of 1 node(s) of group rackA" in reason]
    assert len(refused) == 1, reasons
    (admitted,) = {"gpu-lost-a", "gpu-lost-b"} - set(refused)
    assert held(run, admitted) and held(run, refused[0])
    assert reasons[admitted].startswith("remediation failed (drain): validation after drain:"), reasons
    assert history(run, refused[0]) == [("breaker", "refused")]
    assert run["api"].pod_names(refused[0]) != []  # never drained
    assert lease_holders(run, "rackA") == [admitted]


def test_a_healthy_node_is_left_alone(run):
    assert not held(run, "gpu-ok") and history(run, "gpu-ok") == []
    assert argv(run, "gpu-ok") == []


def test_a_fault_during_drain_keeps_the_node_out_without_a_reset(run):
    assert held(run, "gpu-pdb")
    reason = annotations(run, "gpu-pdb")[REASON_ANNOTATION]
    assert reason.startswith("remediation failed (reset): node_gate: drain of gpu-pdb did not complete"), reason
    assert "disruption budget" in reason
    assert argv(run, "gpu-pdb") == []  # neither the process listing nor the reset ran
    assert run["api"].pod_names("gpu-pdb") == ["data/db-0"]
    assert history(run, "gpu-pdb")[0] == ("breaker", "admitted") and history(run, "gpu-pdb")[-1][1] == "failed"


def test_a_reboot_that_fails_keeps_the_node_out(run):
    assert held(run, "gpu-reboot")
    reason = annotations(run, "gpu-reboot")[REASON_ANNOTATION]
    assert reason.startswith("remediation failed (reboot): Running ") and "would reboot the control node" in reason
    assert history(run, "gpu-reboot")[-1] == ("Reboot the node (it stays isolated if it does not come back)", "failed")
    assert run["api"].pod_names("gpu-reboot") == []  # drained before the reboot


def test_the_outcome_of_every_remediated_node_is_in_the_fleet_report(run):
    with open(str(run["tmp"] / "reports" / "fleet-report.json")) as handle:
        hosts = json.load(handle)["hosts"]

    def outcome(host):
        found = [c for c in hosts[host]["checks"] if c["id"] == "remediation.outcome"]
        return (found[0]["status"], found[0]["message"]) if found else None

    assert outcome("gpu-fixed")[0] == "pass" and outcome("gpu-fixed")[1].startswith(
        "reset done, validation and burn-in passed: released")
    for host in ("gpu-burnfail", "gpu-busy", "gpu-pdb", "gpu-reboot", "gpu-lost-a", "gpu-lost-b"):
        assert outcome(host)[0] == "fail" and outcome(host)[1].startswith("isolated, "), (host, outcome(host))
    assert outcome("gpu-ok") is None
    memtest = [c for c in hosts["gpu-burnfail"]["checks"] if c["id"] == "burnin.dcgm" and c["status"] == "fail"]
    assert [c["target"] for c in memtest] == ["gpu0/memtest"]


def test_every_step_is_in_the_fleet_report(run):
    with open(str(run["tmp"] / "reports" / "fleet-report.json")) as handle:
        hosts = json.load(handle)["hosts"]

    def steps(host):
        return [(c["target"], c["status"]) for c in hosts[host]["checks"] if c["id"] == "remediation.step"]

    assert steps("gpu-fixed") == [("1:breaker", "pass"), ("2:taint", "pass"), ("3:drain", "pass"), ("4:reset", "pass"),
                                  ("5:validate", "pass"), ("6:burn_in", "pass"), ("7:release", "pass")]
    assert steps("gpu-burnfail")[5:] == [("6:burn_in", "fail"), ("7:release", "skip")]
    assert steps("gpu-pdb") == [("1:breaker", "pass"), ("2:taint", "pass"), ("3:drain", "fail"), ("4:reset", "skip"),
                                ("5:validate", "skip"), ("6:burn_in", "skip"), ("7:release", "skip")]
    assert steps("gpu-reboot")[3] == ("4:reboot", "fail")
    refused = [h for h in ("gpu-lost-a", "gpu-lost-b") if steps(h)[0] == ("1:breaker", "fail")]
    assert len(refused) == 1 and all(s == "skip" for _t, s in steps(refused[0])[1:])
    (admitted,) = {"gpu-lost-a", "gpu-lost-b"} - set(refused)
    assert steps(admitted)[2:5] == [("3:drain", "pass"), ("4:repair", "skip"), ("5:validate", "fail")]
    message = [c["message"] for c in hosts["gpu-pdb"]["checks"] if c["target"] == "3:drain"][0]
    assert message.startswith("stopped at drain: ") and "did not complete" in message, message
    assert steps("gpu-ok") == []


def slurm(run, node):
    """(the scontrol calls, the Reason while DRAIN is set or None) of a node of slurm_nodes."""
    path = run["tmp"] / ("%s-slurm" % node)
    drained = path / "drained"
    calls = (path / "calls").read_text().splitlines() if (path / "calls").exists() else []
    return calls, drained.read_text().strip() if drained.exists() else None


@pytest.mark.parametrize("node,form", [("gpu-slurm-ok", "--json"), ("gpu-slurm-old", "-o")])
def test_a_slurm_node_is_drained_waited_for_and_resumed(run, node, form):
    """Slurm 25.11 is read as JSON, 22.05 (which refuses --json) as text: `scontrol --version` decides
    before each read of the drain and of the resume, as for the node health agent."""
    calls, reason = slurm(run, node)
    assert not held(run, node) and reason is None, run["output"]
    updates = [c for c in calls if c.startswith("update")]
    assert updates[0].startswith("update NodeName=%s State=DRAIN Reason=gpufleet remediation: " % node)
    assert updates[1:] == ["update NodeName=%s State=RESUME" % node]
    show = "show node %s %s" % (node, form)
    assert calls[:calls.index(updates[0])] == ["--version", show]
    polls = calls[calls.index(updates[0]) + 1:calls.index(updates[1])]
    # 2 busy, 1 drained, then the resume's version and read
    assert polls == [show, show, show, "--version", show], calls
    assert ["nvidia-smi", "--gpu-reset"] in argv(run, node)
    drain = [h for h in json.loads(annotations(run, node)["gpufleet.io/remediation-history"]) if h["step"] == "drain"]
    assert drain[0]["reason"].endswith("Slurm drained: State=IDLE+DRAIN (scontrol show node %s %s)" % (node, form))


def test_slurm_jobs_that_never_end_keep_the_node_drained_and_isolated(run):
    calls, reason = slurm(run, "gpu-slurm-stuck")
    assert reason.startswith("gpufleet remediation: "), reason
    assert not any("State=RESUME" in c for c in calls)
    assert held(run, "gpu-slurm-stuck")
    why = annotations(run, "gpu-slurm-stuck")[REASON_ANNOTATION]
    assert "Slurm jobs still running on gpu-slurm-stuck after gpufleet_remediation.slurm_drain_timeout (3 s)" in why
    assert "State=MIXED+DRAIN (scontrol show node gpu-slurm-stuck --json)" in why
    assert "State=MIXED+DRAIN" in why, why
    assert ["nvidia-smi", "--gpu-reset"] not in argv(run, "gpu-slurm-stuck")  # no reset under running jobs
    with open(str(run["tmp"] / "reports" / "fleet-report.json")) as handle:
        checks = json.load(handle)["hosts"]["gpu-slurm-stuck"]["checks"]
    drain = [c for c in checks if c["id"] == "remediation.step" and c["target"] == "3:drain"]
    assert drain[0]["status"] == "fail" and "Slurm jobs still running" in drain[0]["message"], drain


def test_a_node_an_admin_drained_is_never_resumed(run):
    calls, reason = slurm(run, "gpu-slurm-admin")
    assert reason == SLURM_ADMIN_REASON, reason
    assert [c for c in calls if c.startswith("update")] == []  # neither our reason nor a resume
    assert not held(run, "gpu-slurm-admin"), run["output"]  # remediated and released in Kubernetes


def test_the_run_is_one_controller_of_its_own(run):
    """Every step this run recorded, on every node, is by one controller id of this run,
    ansible@<host>/<UTC start>-<random> (two runs from one host are two controllers to the breaker)."""
    import re

    ids = set()
    for node in NODES:
        raw = annotations(run, node).get("gpufleet.io/remediation-history")
        ids.update(step["by"] for step in json.loads(raw or "[]"))
    assert len(ids) == 1, ids
    assert re.fullmatch(r"ansible@[^/]+/[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}", ids.pop())


def test_an_unreachable_node_is_reported_left_alone_and_the_run_goes_on(run):
    """The run neither fails nor stops on a node it cannot reach (with serial, a batch of one
    unreachable host would end the play for every later node): reported, nothing done to it."""
    assert "gpu-unreachable" not in failed_hosts(run), run["output"]
    stats = run["data"]["stats"]["gpu-unreachable"]
    assert stats["unreachable"] == 0 and stats["failures"] == 0, stats
    node = run["api"].node("gpu-unreachable")
    assert not held(run, "gpu-unreachable") and not annotations(run, "gpu-unreachable")
    writes = [r for r in run["api"].requests if "gpu-unreachable" in r["path"] and r["method"] != "GET"]
    assert writes == [] and "unschedulable" not in node["spec"]
    with open(str(run["tmp"] / "reports" / "fleet-report.json")) as handle:
        checks = json.load(handle)["hosts"]["gpu-unreachable"]["checks"]
    outcome = [c for c in checks if c["id"] == "remediation.outcome"]
    assert [c["status"] for c in outcome] == ["fail"], checks
    assert outcome[0]["message"].startswith("unreachable, not remediated"), outcome


def test_the_first_contact_with_a_node_may_find_it_unreachable():
    """Every later node is considered: the first task reaches the node with ignore_unreachable and
    an unreachable node ends only its own remediation (meta end_host), before anything else runs."""
    with open(PLAYBOOK) as handle:
        plays = yaml.safe_load(handle)
    tasks = [play for play in plays if play["name"] == "Remediate the failing nodes"][0]["tasks"]
    assert tasks[0].get("ansible.builtin.ping", "missing") is None and tasks[0]["ignore_unreachable"] is True
    assert [t for t in tasks[1]["block"] if "ansible.builtin.meta" in t][0]["ansible.builtin.meta"] == "end_host"
