"""node_validate through Ansible: ad-hoc with the short module name on dgx-h100 and the fake NVML,
playbooks/validate.yml on a small inventory of local hosts (one task per host, check mode, the real
nvidia-ml-py on a GPU tree without a driver, a failing host, a bad nested option), and
validate.yml on inventories/local with the fleet report. Three ansible runs in all."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
VENV_PYTHON = os.path.join(BIN, "python")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
VALIDATE = os.path.join(REPO, "playbooks", "validate.yml")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible")), reason="run `make setup` first")


def environment(tmp_path, **extra):
    env = dict(os.environ)
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO", "ANSIBLE_STDOUT_CALLBACK"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                "GPUFLEET_REPORT_DIR": str(tmp_path / "reports")})
    env.update(extra)
    return env


def first_json(text):
    document, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    return document


def adhoc_dgx_h100(tmp_path, **extra):
    """node_validate ad-hoc (short module name) on dgx-h100 with the fake NVML; the host's result."""
    env = environment(tmp_path, PYTHONPATH=FAKE_NVML, ANSIBLE_PYTHON_INTERPRETER=VENV_PYTHON,
                      GPUFLEET_FAKE_NVML_SCENARIO=os.path.join(SCENARIOS, "h100-healthy.json"),
                      ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json", **extra)
    if "PYTHONDONTWRITEBYTECODE" not in extra:
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a node: the controller's setting stays here
    args = {"root": os.path.join(NODES, "dgx-h100"),
            "gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
            "rdma": {"expected_devices": 9, "min_rate_gbps": 200, "require_peermem": True}}
    proc = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-m", "node_validate", "-a", json.dumps(args)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return first_json(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_adhoc_short_name_on_dgx_h100_with_fake_nvml(tmp_path):
    result = adhoc_dgx_h100(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert result["healthy"] is True and result["changed"] is False
    assert result["summary"]["fail"] == 0 and result["summary"]["warn"] == 0
    # Values only the fake gives prove the environment reached the module's interpreter.
    assert result["nvml"]["driver_version"] == "580.95.05" and result["nvml"]["cuda_driver_version"] == "13.0"
    assert len(result["gpus"]) == 8
    assert result["ansible_facts"]["nvidia"]["nvswitch_count"] == 4
    assert result["ansible_facts"]["mlx5"]["driver_source"] == "ofed"
    ids = {c["id"] for c in result["checks"]}
    assert {"gpu.nvml", "gpu.nvlink", "gpu.fabric", "rdma.port.rate", "rdma.roce_gid", "rdma.peermem"} <= ids
    assert result["msg"].startswith("gpu: pass (") and "; rdma: pass (" in result["msg"]
    assert 0 < result["elapsed_ms"] < 60000


def test_module_utils_are_compiled_once_per_node(tmp_path):
    """The second run imports the collection's module_utils from the node's cache (module_cache), same result."""
    cache = tmp_path / "cache"
    first = adhoc_dgx_h100(tmp_path, XDG_CACHE_HOME=str(cache))
    [copy] = list((cache / "gpufleet" / "module_utils").iterdir())
    compiled = {str(path.relative_to(copy)): path.stat().st_mtime_ns for path in copy.glob("*/__pycache__/*.pyc")}
    tag = sys.implementation.cache_tag
    assert {"gpu/__pycache__/gpu_checks.%s.pyc" % tag, "rdma/__pycache__/rdma_checks.%s.pyc" % tag,
            "core/__pycache__/validation.%s.pyc" % tag} <= set(compiled)  # every wing from the copy
    second = adhoc_dgx_h100(tmp_path, XDG_CACHE_HOME=str(cache))
    assert {str(path.relative_to(copy)): path.stat().st_mtime_ns for path in copy.glob("*/__pycache__/*.pyc")} == compiled
    assert list((cache / "gpufleet" / "module_utils").iterdir()) == [copy]
    assert second["checks"] == first["checks"] and second["summary"] == first["summary"]

    off = tmp_path / "off"
    assert adhoc_dgx_h100(tmp_path, XDG_CACHE_HOME=str(off), PYTHONDONTWRITEBYTECODE="1")["checks"] == first["checks"]
    assert not off.exists()


HOSTS = {
    # a healthy DGX H100 with the fake NVML
    "dgx": {"gpufleet_validate_root": os.path.join(NODES, "dgx-h100"),
            "gpufleet_validate_gpu": {"expected_count": 8, "xid_source": "none"},
            "gpufleet_validate_rdma": {"expected_devices": 9},
            "gpufleet_validate_environment": {
                "PYTHONPATH": FAKE_NVML,
                "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(SCENARIOS, "h100-healthy.json")}},
    # the same node stated through the gpufleet_* tier (root, GPUs, driver, rate), one explicit option over it
    "tier": {"gpufleet_sysfs_root": os.path.join(NODES, "dgx-h100"), "gpufleet_gpu_count": 8,
             "gpufleet_driver_branch": 580, "gpufleet_expected_hcas": 4, "gpufleet_min_rate_gbps": 200,
             "gpufleet_validate_gpu": {"xid_source": "none"}, "gpufleet_validate_rdma": {"expected_devices": 9},
             "gpufleet_validate_environment": {
                 "PYTHONPATH": FAKE_NVML,
                 "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(SCENARIOS, "h100-healthy.json")}},
    # GPUs on the bus, the real nvidia-ml-py and no driver libraries on this machine
    "dgx-real-nvml": {"gpufleet_validate_root": os.path.join(NODES, "dgx-h100"),
                      "gpufleet_validate_gpu": {"xid_source": "none"}, "gpufleet_validate_rdma": False,
                      "gpufleet_validate_fail_on": "never"},
    # no GPU, no HCA, the real nvidia-ml-py (never imported: no GPU on the bus)
    "empty": {"gpufleet_validate_root": os.path.join(NODES, "empty")},
    # a port down and a link at half rate: the host fails (fail_on: fail)
    "degraded": {"gpufleet_validate_root": os.path.join(NODES, "hdr-degraded"),
                 "gpufleet_validate_gpu": False, "gpufleet_validate_rdma": {"min_rate_gbps": 200}},
    # a bad nested option
    "badopt": {"gpufleet_validate_root": os.path.join(NODES, "empty"),
               "gpufleet_validate_rdma": {"min_rate_gbps": "fast"}},
    # a nested option of the wrong type (Ansible's check) and one out of range (the family's rule)
    "badgpu": {"gpufleet_validate_root": os.path.join(NODES, "empty"),
               "gpufleet_validate_gpu": {"expected_count": "eight"}},
    "neggpu": {"gpufleet_validate_root": os.path.join(NODES, "empty"),
               "gpufleet_validate_gpu": {"expected_count": -1}},
}
BAD_OPTIONS = ["badgpu", "badopt", "neggpu"]


def _fleet_inventory(tmp_path):
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
        "hosts": HOSTS}}))
    return str(inventory)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """validate.yml over HOSTS with its inventory check skipped (--skip-tags always, the documented
    way: docs/tags.md): the module's own option checks stay a second line of defence and are tested
    here; test_the_inventory_check_refuses_bad_options_first tests the first line."""
    tmp_path = tmp_path_factory.mktemp("node_validate")
    inventory = _fleet_inventory(tmp_path)
    env = environment(tmp_path, ANSIBLE_STDOUT_CALLBACK="json")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, VALIDATE, "--check",
                           "--skip-tags", "always"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    report = json.loads((tmp_path / "reports" / "fleet-report.json").read_text())
    return proc, first_json(proc.stdout), report


def _play(document, name):
    """The play of validate.yml whose name starts with ``name`` (plays are found by name: the
    inventory check and the certificate play come and go with tags)."""
    return [play for play in document["plays"] if play["play"]["name"].startswith(name)][0]


def _task(play, name):
    return [task for task in play["tasks"] if task["task"]["name"].startswith(name)][0]


SWEEP, FAILURES, REPORT = "Validate GPU and RDMA readiness", "Fail the nodes", "Fleet report"


def test_the_inventory_check_refuses_bad_options_first(tmp_path):
    """Without --skip-tags always, the bad nested options are refused before any host is contacted,
    named by the inventory variable (gpufleet_validate_gpu.expected_count), not the module option;
    a value the family's own rule refuses (expected_count -1) is left to the module (above)."""
    inventory = _fleet_inventory(tmp_path)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, VALIDATE, "--check"],
                          cwd=REPO, env=environment(tmp_path), capture_output=True, text=True, timeout=600,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "validate.yml: the inventory has 2 problem(s).\nNo host was contacted or changed." in out
    assert ("- gpufleet_validate_gpu.expected_count must be of type int (node_validate option gpu.expected_count), "
            "got 'eight' [badgpu]") in out
    assert ("- gpufleet_validate_rdma.min_rate_gbps must be of type float (node_validate option "
            "rdma.min_rate_gbps), got 'fast' [badopt]") in out
    assert "TASK [Validate the node" not in out


def test_validate_yml_runs_one_task_per_host(fleet):
    proc, document, report = fleet
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # degraded and badopt fail
    # the sweep, the few-line failure of the failing nodes, and the report location (only said when
    # the callback is off); the inventory check (skipped: --skip-tags always) and the certificate
    # play (no kube_control_plane here) have no task
    assert [t["hosts"]["localhost"].get("skipped") for t in _play(document, REPORT)["tasks"]] == [True]
    assert not _play(document, "Check the inventory")["tasks"]
    sweep = _play(document, SWEEP)
    # the module on every node (fail_on: never; it also reads the agent's health.json where one
    # belongs), then ONE task each for the play: agent.health and the pick of failing nodes
    assert [t["task"]["name"] for t in sweep["tasks"]] == [
        "Validate the node (GPU health and RDMA readiness in one module run)",
        "Report what the node health agents publish (agent.health; no check is run)",
        "Pick the nodes with failing checks (one task for the play)"]
    tasks = sweep["tasks"]
    assert set(tasks[0]["hosts"]) == set(HOSTS)
    assert len(tasks[1]["hosts"]) == 1 and len(tasks[2]["hosts"]) == 1  # once, not once per node
    picked = [item["item"] for item in list(tasks[2]["hosts"].values())[0]["results"]]
    # the failing node, then one passing node so that the failure play does not end the playbook
    assert picked[0] == "degraded" and len(picked) == 2
    assert picked[1] in set(HOSTS) - set(BAD_OPTIONS) - {"degraded"}
    failures = _play(document, FAILURES)["tasks"]
    assert len(failures) == 1 and set(failures[0]["hosts"]) == set(picked)
    assert failures[0]["hosts"][picked[1]].get("skipped") is True
    stats = document["stats"]
    assert sorted(h for h in HOSTS if stats[h]["failures"]) == sorted(BAD_OPTIONS + ["degraded"])
    # the module on each node that passed its options, + agent.health and add_host (one host each)
    assert sum(stats[h]["ok"] for h in HOSTS) == len(HOSTS) - len(BAD_OPTIONS) + 2
    assert sum(stats[h]["skipped"] for h in HOSTS) == 1  # the passing node of the failure play
    # Every host is in the fleet report; the bad-option hosts failed before any check: host.validation
    # with the reason.
    assert sorted(report["hosts"]) == sorted(BAD_OPTIONS + ["degraded", "dgx", "dgx-real-nvml", "empty", "tier"])
    assert report["totals"]["unhealthy"] == 2 + len(BAD_OPTIONS)
    badopt = report["hosts"]["badopt"]["checks"]
    assert [(c["id"], c["status"]) for c in badopt] == [("host.validation", "fail")]
    assert "min_rate_gbps" in badopt[0]["message"]


def test_validate_yml_host_results(fleet):
    _proc, document, report = fleet
    results = _play(document, SWEEP)["tasks"][0]["hosts"]
    dgx = results["dgx"]
    assert dgx["healthy"] is True and dgx["nvml"]["driver_version"] == "580.95.05"
    # the report adds agent.health (skip: no agent belongs where gpu_nodes is empty) to the module's checks
    agent = [c for c in report["hosts"]["dgx"]["checks"] if c["id"] == "agent.health"]
    assert [c["status"] for c in agent] == ["skip"]
    assert report["hosts"]["dgx"]["summary"] == dict(dgx["summary"], skip=dgx["summary"]["skip"] + 1)

    # from_tier: the action plugin built the options from the host's gpufleet_* variables; the module got them
    tier = results["tier"]
    used = tier["invocation"]["module_args"]
    assert used["from_tier"] is False and used["root"] == os.path.join(NODES, "dgx-h100")  # never passed on
    assert (used["gpu"]["expected_count"], used["gpu"]["expected_driver_version"], used["gpu"]["xid_source"]) == (
        8, "580", "none")
    assert (used["rdma"]["expected_devices"], used["rdma"]["min_rate_gbps"]) == (9, 200)  # explicit 9 over the tier's 4
    assert tier["healthy"] is True and tier["summary"]["fail"] == 0
    driver = [c for c in tier["checks"] if c["id"] == "gpu.driver_version"]
    assert [(c["status"], c["expected"]) for c in driver] == [("pass", "580")]  # dgx (no driver stated): skip
    assert [c["status"] for c in dgx["checks"] if c["id"] == "gpu.driver_version"] == ["skip"]

    real = results["dgx-real-nvml"]
    nvml = [c for c in real["checks"] if c["id"] == "gpu.nvml"][0]
    assert nvml["status"] == "fail" and "NVML is unusable" in nvml["message"]
    assert real["nvml"]["available"] is False
    assert "mlx5" not in real["ansible_facts"] and real["readiness"]["rdma"]["status"] == "off"
    assert real.get("failed") is not True  # fail_on: never

    empty = results["empty"]
    assert empty["summary"]["skip"] == len(empty["checks"]) and empty["healthy"] is True
    assert empty["msg"] == ("gpu: skip (no NVIDIA GPU on the PCI bus); "
                            "rdma: skip (no RDMA devices; mlx5_core not loaded); "
                            "tuning: skip (no checks)")

    degraded = results["degraded"]
    assert degraded.get("failed") is not True and degraded["healthy"] is False  # the module: fail_on never
    assert not [c for c in degraded["checks"] if c["id"].startswith("gpu.")]
    # The host fails in the next play with its failing checks in a few lines, not its whole result.
    failure = _play(document, FAILURES)["tasks"][0]["hosts"]["degraded"]
    lines = failure["msg"].splitlines()
    assert failure["failed"] is True and "checks" not in failure
    # one line at the default verbosity (ansible-core 2.19 prints a failed task's msg twice)
    assert lines[0].startswith("%d failing check(s): " % degraded["summary"]["fail"])
    assert "rdma.port.state[mlx5_2/1]: " in lines[0], lines
    assert len(lines) == 1 and len(failure["msg"]) < 400
    assert "dgx-real-nvml" not in _play(document, FAILURES)["tasks"][0]["hosts"] or \
        _play(document, FAILURES)["tasks"][0]["hosts"]["dgx-real-nvml"].get("skipped") is True  # fail_on: never

    badopt = results["badopt"]
    assert badopt["failed"] is True and "checks" not in badopt
    # Ansible's own check of the nested spec names the option and its family
    assert "'min_rate_gbps'" in badopt["msg"] and "found in 'rdma'" in badopt["msg"], badopt["msg"]


def test_bad_gpu_expected_count_is_named(fleet):
    """A bad gpu.expected_count fails the host with an error naming gpu.expected_count: Ansible
    names the option and the family for a wrong type, the family's rule for a bad value."""
    _proc, document, _report = fleet
    results = _play(document, SWEEP)["tasks"][0]["hosts"]
    badgpu = results["badgpu"]
    assert badgpu["failed"] is True and "checks" not in badgpu
    assert "'expected_count'" in badgpu["msg"] and "found in 'gpu'" in badgpu["msg"], badgpu["msg"]
    assert "eight" in badgpu["msg"] and "int" in badgpu["msg"]
    neggpu = results["neggpu"]
    assert neggpu["failed"] is True and "checks" not in neggpu
    assert neggpu["msg"] == "option gpu.expected_count must be >= 0, got -1"


def test_validate_yml_on_this_machine_prints_a_readiness_result(tmp_path):
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), VALIDATE], cwd=str(tmp_path),
                          env=environment(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    # the inventory check (4 tasks, playbooks/tasks/check-inventory.yml: the hosts --limit leaves, the
    # phases and roles --tags leave with the problems, stop, and the mark that this run has checked so that
    # the playbooks it imports skip the check), validation, agent.health (skip: no agent belongs here), the
    # pick of failing nodes (skipped: healthy), the report notice (skipped: callback on)
    assert out.count("TASK [") == 8 and "ok: [localhost]" in out
    check = out.split("PLAY [Check the inventory before validating]", 1)[1].split("PLAY [", 1)[0]
    assert [line.split("]", 1)[0] for line in check.split("TASK [")[1:]] == [
        "Select the hosts this run touches (the playbook's host pattern, narrowed by --limit)",
        "Check the inventory (groups, checksums, gpufleet_* variables, compatibility matrix)",
        "Stop with every problem of the inventory",
        "Remember that this run has checked the inventory (playbooks it imports skip the check)"]
    assert "TASK [Validate the node (GPU health and RDMA readiness in one module run)]" in out
    summary = out.split("FLEET REPORT", 1)[1]
    assert "1 host(s): 0 unhealthy" in summary
    line = [row for row in summary.splitlines() if row.startswith("localhost")][0]
    assert "gpu skipped: no NVIDIA GPU on the PCI bus" in line
    assert "rdma skipped: no RDMA devices; mlx5_core not loaded" in line
    assert (tmp_path / "reports" / "fleet-report.json").exists()


@pytest.mark.parametrize("value,kind", [(False, "bool"), (3, "int"), ("gpu", "str")])
def test_scalar_family_option_is_named(tmp_path, value, kind):
    """ansible-core answers a scalar for a nested dict option with a bare TypeError ("argument of
    type 'bool' is not iterable"); node_validate names the option and the accepted forms."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"root": str(tmp_path), "gpu": value}}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run(
        [os.path.join(BIN, "python"), "-m", "ansible_collections.gpufleet.cluster.plugins.modules.node_validate",
         str(args)], env=env, capture_output=True, text=True, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert result["failed"] is True and "checks" not in result
    assert result["msg"] == ("option gpu must be a dict of that family's options (use {enabled: false} "
                             "to turn the family off), got %s" % kind)
