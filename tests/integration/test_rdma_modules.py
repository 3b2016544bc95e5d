"""mlx5_facts / rdma_validate / OFED filters run by real ansible and ansible-playbook.

Every command runs once (concurrently, in a module-scoped fixture) from the repository root
with ANSIBLE_CONFIG=ansible.cfg and the json stdout callback, against the fixture trees. This
exercises AnsiballZ packaging of the collection's module_utils, the library/ symlinks (short
module names), argument validation errors, check mode, and the filters inside a play.
"""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
NODES = "tests/fixtures/nodes"
DOCA = "tests/fixtures/ofed_info/doca-ofed-24.10/ofed_info"
ALL_NODES = ["dgx-h100", "hdr-degraded", "port-init", "inbox-noversion", "inbox-50", "mlx5-absent", "quirks",
             "empty"]

# Relative paths in a play resolve from the playbook's directory (local connection), so the
# playbook gets the checkout as extra var ``repo``.
PLAYBOOK = """
- name: RDMA modules against every fixture node, in check mode
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Validate every fixture node without failing
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/{{ item }}"
        fail_on: never
        min_rate_gbps: 200
        min_ofed_version: "5.8"
        check_counters: true
      loop: %(nodes)s
      register: sweep

    - name: Gather mlx5 facts of the DGX H100 with DOCA-OFED
      gpufleet.cluster.mlx5_facts:
        root: "{{ repo }}/tests/fixtures/nodes/dgx-h100"
        ofed_info: "{{ repo }}/%(doca)s"

    - name: Validate the DGX H100 InfiniBand fabric strictly
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/dgx-h100"
        link_layer: InfiniBand
        expected_devices: 8
        min_rate_gbps: 400
        require_peermem: true
        min_ofed_version: "24.10"

    - name: Use the facts with the collection filters
      ansible.builtin.debug:
        msg:
          driver_ok: "{{ ansible_facts['mlx5']['version'] | gpufleet.cluster.ofed_version_compare('>=', '24.10') }}"
          userspace: "{{ ansible_facts['mlx5']['version']
                         | gpufleet.cluster.ofed_best_match(['5.8-1.0.1.1', '24.10-1.1.4.0.200']) }}"
          installed: "{{ 'OFED-internal-24.10-1.1.4.0.200:' | gpufleet.cluster.ofed_version }}"
          rate: "{{ '400 Gb/sec (4X NDR)' | gpufleet.cluster.ib_rate_gbps }}"
          sdr: "{{ '2.5 Gb/sec (1X SDR)' | gpufleet.cluster.ib_rate_gbps }}"
          older: "{{ '5.9' | gpufleet.cluster.ofed_version_compare('<', '23.04') }}"

    - name: Degraded node fails with the default fail_on
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/hdr-degraded"
        min_rate_gbps: 200
      ignore_errors: true  # the failure is what this test looks at

    - name: Port in INIT fails with fail_on warn
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/port-init"
        fail_on: warn
      ignore_errors: true

    - name: Bad link_layer
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/empty"
        link_layer: bogus
      ignore_errors: true

    - name: Bad min_ofed_version
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/empty"
        min_ofed_version: latest
      ignore_errors: true

    - name: Bad expected_devices
      gpufleet.cluster.rdma_validate:
        root: "{{ repo }}/tests/fixtures/nodes/empty"
        expected_devices: -1
      ignore_errors: true

    - name: Nonexistent root for rdma_validate
      gpufleet.cluster.rdma_validate:
        root: /nonexistent/gpufleet-root
      ignore_errors: true

    - name: Nonexistent root for mlx5_facts
      gpufleet.cluster.mlx5_facts:
        root: /nonexistent/gpufleet-root
      ignore_errors: true

    - name: Nonexistent ofed_info
      gpufleet.cluster.mlx5_facts:
        root: "{{ repo }}/tests/fixtures/nodes/empty"
        ofed_info: /nonexistent/ofed_info
      ignore_errors: true
"""


def ansible_env():
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        # Keep stdout pure JSON: replace the configured aggregate callback (fleet_report, tested on
        # its own) by a stdout-type one, which ansible then skips.
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.minimal",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
    })
    return env


def adhoc(module, args):
    return [os.path.join(BIN, "ansible"), "localhost", "-m", module, "-a", args]


def parse_json(stdout):
    """The json callback's document (anything ansible prints after it is ignored)."""
    start = stdout.index("{")
    document, _end = json.JSONDecoder().raw_decode(stdout[start:])
    return document


def host_results(document):
    return [task["hosts"]["localhost"] for play in document["plays"] for task in play["tasks"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    playbook = tmp_path_factory.mktemp("play") / "rdma.yml"
    playbook.write_text(PLAYBOOK % {"nodes": json.dumps(ALL_NODES), "doca": DOCA})
    commands = {
        "facts_dgx": adhoc("gpufleet.cluster.mlx5_facts", "root=%s/dgx-h100 ofed_info=%s" % (NODES, DOCA)),
        "facts_short_empty": adhoc("mlx5_facts", "root=%s/empty" % NODES),
        "validate_short_dgx": adhoc("rdma_validate", "root=%s/dgx-h100 expected_devices=9 min_rate_gbps=200 "
                                    "require_peermem=true min_ofed_version=24.10" % NODES),
        "bad_rate": adhoc("gpufleet.cluster.rdma_validate", "root=%s/empty min_rate_gbps=fast" % NODES),
        "playbook_check": [os.path.join(BIN, "ansible-playbook"), "--check", "-e", "repo=" + REPO, str(playbook)],
        "doc_modules": [os.path.join(BIN, "ansible-doc"), "gpufleet.cluster.mlx5_facts",
                        "gpufleet.cluster.rdma_validate"],
        "doc_filters": [os.path.join(BIN, "ansible-doc"), "-t", "filter", "gpufleet.cluster.ib_rate_gbps",
                        "gpufleet.cluster.ofed_version", "gpufleet.cluster.ofed_version_compare",
                        "gpufleet.cluster.ofed_best_match"],
    }

    def execute(argv):
        return subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=300,
                              check=False)

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(execute, argv) for name, argv in commands.items()}
        return {name: future.result() for name, future in futures.items()}


def result_of(runs, name):
    proc = runs[name]
    results = host_results(parse_json(proc.stdout))
    assert len(results) == 1, proc.stdout
    return proc.returncode, results[0]


@pytest.fixture(scope="module")
def play(runs):
    """(json document, {task name: localhost result}) of the check-mode playbook."""
    proc = runs["playbook_check"]
    document = parse_json(proc.stdout)
    # every failing task in the playbook is expected (ignore_errors), so the run itself succeeds
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = {}
    for each in document["plays"]:
        for task in each["tasks"]:
            tasks[task["task"]["name"]] = task["hosts"]["localhost"]
    return document, tasks


def checks_by(result, check_id):
    return {c["target"]: c["status"] for c in result["checks"] if c["id"] == check_id}


# -- ad-hoc runs -------------------------------------------------------------------------------------
def test_mlx5_facts_adhoc_dgx(runs):
    rc, result = result_of(runs, "facts_dgx")
    assert rc == 0, result
    assert result["changed"] is False
    facts = result["ansible_facts"]["mlx5"]
    assert facts["driver_source"] == "ofed"
    assert facts["version"] == "24.10-1.1.4"
    assert facts["ofed"] == {"installed": True, "package_version": "24.10-1.1.4.0.200", "flavor": "doca_ofed",
                             "loaded_matches_installed": True}
    assert facts["pci_functions"] == 10
    assert len(facts["devices"]) == 9
    bond = facts["devices"][-1]
    assert bond["name"] == "mlx5_bond_0"
    assert bond["ports"][0]["roce_v2_gid_index"] == 5
    assert result["invocation"]["module_args"]["root"] == "tests/fixtures/nodes/dgx-h100"


def test_mlx5_facts_short_name_through_library_symlink(runs):
    rc, result = result_of(runs, "facts_short_empty")
    assert rc == 0, result
    assert result["ansible_facts"]["mlx5"]["driver_source"] == "absent"
    assert result["ansible_facts"]["mlx5"]["devices"] == []


def test_rdma_validate_short_name_healthy_dgx(runs):
    rc, result = result_of(runs, "validate_short_dgx")
    assert rc == 0, result
    assert result["healthy"] is True
    assert result["summary"]["fail"] == 0 and result["summary"]["warn"] == 0
    assert checks_by(result, "rdma.roce_gid") == {"mlx5_bond_0/1": "pass"}
    assert result["ansible_facts"]["mlx5"]["version"] == "24.10-1.1.4"


@pytest.mark.parametrize("name, fragments", [
    ("bad_rate", ["min_rate_gbps", "float"]),
])
def test_adhoc_bad_argument_fails_naming_the_option(runs, name, fragments):
    rc, result = result_of(runs, name)
    assert rc != 0
    assert result["failed"] is True
    for fragment in fragments:
        assert fragment in result["msg"]
    assert "checks" not in result


# -- playbook in check mode ----------------------------------------------------------------------------
def test_playbook_sweep_in_check_mode(play):
    document, tasks = play
    assert document["stats"]["localhost"]["changed"] == 0
    sweep = tasks["Validate every fixture node without failing"]
    facts = tasks["Gather mlx5 facts of the DGX H100 with DOCA-OFED"]
    strict = tasks["Validate the DGX H100 InfiniBand fabric strictly"]
    filters = tasks["Use the facts with the collection filters"]

    by_node = {item["item"]: item for item in sweep["results"]}
    assert set(by_node) == set(ALL_NODES)
    for item in sweep["results"]:
        assert item["changed"] is False
        assert not item.get("skipped"), "the module must run in check mode"
        assert not item.get("failed")

    assert by_node["dgx-h100"]["healthy"] is True
    empty = by_node["empty"]
    assert empty["healthy"] is True
    assert empty["summary"] == {"pass": 0, "warn": 0, "fail": 0, "skip": 5}
    assert "no RDMA devices; mlx5_core not loaded" in [c["message"] for c in empty["checks"]]
    # fail closed: mlx5_1/1's state file holds no readable state, so the port (and node) fails;
    # the other unreadable fields (counters "N/A (no PMA)", firmware) only skip
    assert by_node["quirks"]["healthy"] is False
    assert checks_by(by_node["quirks"], "rdma.port.state") == {"mlx5_0/1": "pass", "mlx5_1/1": "fail"}
    assert by_node["port-init"]["healthy"] is True and by_node["port-init"]["summary"]["warn"] == 1
    for node in ("hdr-degraded", "inbox-noversion", "inbox-50", "mlx5-absent", "quirks"):
        assert by_node[node]["healthy"] is False, node

    degraded = by_node["hdr-degraded"]
    assert checks_by(degraded, "rdma.port.state")["mlx5_2/1"] == "fail"
    assert checks_by(degraded, "rdma.port.phys_state")["mlx5_2/1"] == "fail"
    assert checks_by(degraded, "rdma.port.rate")["mlx5_3/1"] == "fail"
    assert checks_by(degraded, "rdma.counters")["mlx5_1/1"] == "warn"
    assert checks_by(by_node["inbox-noversion"], "rdma.roce_gid") == {"mlx5_0/1": "pass", "mlx5_1/1": "fail"}
    assert checks_by(by_node["inbox-noversion"], "rdma.ofed_version") == {"node": "fail"}
    assert by_node["inbox-noversion"]["ansible_facts"]["mlx5"]["driver_source"] == "inbox"
    assert checks_by(by_node["inbox-50"], "rdma.uverbs") == {"mlx5_0": "pass", "mlx5_1": "fail"}
    assert checks_by(by_node["mlx5-absent"], "rdma.driver") == {"node": "fail"}
    quirks = by_node["quirks"]
    assert checks_by(quirks, "rdma.port.rate") == {"mlx5_0/1": "fail", "mlx5_1/1": "fail"}  # unreadable: fail closed
    assert checks_by(quirks, "rdma.counters")["mlx5_0/1"] == "skip"

    assert facts["changed"] is False
    assert facts["ansible_facts"]["mlx5"]["ofed"]["flavor"] == "doca_ofed"

    assert strict["healthy"] is True and strict["changed"] is False
    assert strict["summary"]["fail"] == 0
    assert checks_by(strict, "rdma.devices") == {"node": "pass"}

    assert filters["msg"] == {"driver_ok": True, "userspace": "24.10-1.1.4.0.200",
                              "installed": "24.10-1.1.4.0.200", "rate": 400.0, "sdr": 2.5, "older": True}


def test_playbook_degraded_node_fails_by_default(play):
    result = play[1]["Degraded node fails with the default fail_on"]
    assert result["failed"] is True
    assert result["healthy"] is False
    assert "rdma.port.state[mlx5_2/1]" in result["msg"]
    assert checks_by(result, "rdma.port.rate")["mlx5_3/1"] == "fail"
    assert checks_by(result, "rdma.peermem") == {"node": "warn"}
    # the full result comes back even when the module fails
    assert result["summary"] == {"pass": 15, "warn": 1, "fail": 3, "skip": 2}
    assert result["ansible_facts"]["mlx5"]["version"] == "5.8-1.0.1"


def test_playbook_fail_on_warn(play):
    result = play[1]["Port in INIT fails with fail_on warn"]
    assert result["failed"] is True
    assert result["healthy"] is True  # only a warning
    assert checks_by(result, "rdma.port.state") == {"mlx5_0/1": "pass", "mlx5_1/1": "warn"}


@pytest.mark.parametrize("task, fragments", [
    ("Bad link_layer", ["link_layer", "any, InfiniBand, Ethernet", "bogus"]),
    ("Bad min_ofed_version", ["option min_ofed_version", "latest"]),
    ("Bad expected_devices", ["option expected_devices", "-1"]),
    ("Nonexistent root for rdma_validate", ["option root", "/nonexistent/gpufleet-root"]),
    ("Nonexistent root for mlx5_facts", ["option root", "/nonexistent/gpufleet-root"]),
    ("Nonexistent ofed_info", ["option ofed_info", "/nonexistent/ofed_info"]),
])
def test_playbook_bad_arguments_fail_naming_the_option(play, task, fragments):
    result = play[1][task]
    assert result["failed"] is True
    for fragment in fragments:
        assert fragment in result["msg"]
    assert "Traceback" not in result.get("module_stderr", "")
    assert "checks" not in result


# -- documentation ------------------------------------------------------------------------------------
def test_ansible_doc_renders_modules_without_warnings(runs):
    proc = runs["doc_modules"]
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower() and "error" not in proc.stderr.lower(), proc.stderr
    for text in ("gpufleet.cluster.mlx5_facts", "gpufleet.cluster.rdma_validate", "min_rate_gbps",
                 "roce_v2_gid_index", "ofed_info"):
        assert text in proc.stdout


def test_ansible_doc_renders_filters(runs):
    proc = runs["doc_filters"]
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    for name in ("ib_rate_gbps", "ofed_version", "ofed_version_compare", "ofed_best_match"):
        assert "gpufleet.cluster.%s" % name in proc.stdout
    assert "400 Gb/sec (4X NDR)" in proc.stdout
