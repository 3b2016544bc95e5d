"""Day two as an admin runs it (issue 42): the playbooks by FQCN from the admin's own directory
(not the checkout; the collection found on ANSIBLE_COLLECTIONS_PATH, no ansible.cfg), with the
mistakes of a week of operation. Every run is started at once and waited for together (the
suite's time budget): each test asserts one run's outcome and message.

- site --limit gpu1 with a bad role value on gpu1 and a misspelt phase: the inventory check still
  runs (it used to be a localhost play that --limit left out) and names both; --limit gpu2 --tags
  report leaves gpu1's problem out (the check is for the hosts the run touches).
- validate -e gpufleet_validate_hosts=gpu_node, capture -e capture_hosts=gpu_nodez: a run that
  would touch no host is an error with the group it meant; capture_options with an unknown key.
- rolling_upgrade bare: refused before any node or file is touched, naming rolling_upgrade_components;
  ["drivr"]: refused by the argument spec's choices with did-you-mean, before the run directory;
  with rolling_upgrade_revalidate the run directory is ./reports/upgrades of the admin's directory.
- fleet_status with no agent installed: one agent.health failure per host saying so, and a report;
  on a Kubespray-style inventory without gpu_nodes: an error, not rc 0.
- validate before site.yml: agent.health names the opt-out (gpufleet_health_agent=false), a control
  plane without kubeadm says kubeadm is not installed (not "[Errno 2] ... 'kubeadm'").
- a YAML error in group_vars: the message names the file and line.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
NVML = os.path.join(REPO, "tests", "fixtures", "nvml")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="run `make setup` first")

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON}
GPU = {"gpufleet_validate_root": os.path.join(NODES, "dgx-h100"), "gpufleet_validate_gpu": {"xid_source": "none"},
       "gpufleet_validate_environment": {"PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml"),
                                         "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(NVML, "h100-healthy.json")},
       "gpufleet_status_file": "/nonexistent/gpufleet/health.json"}


def _inventory(gpu1=None):
    return {"all": {
        "vars": dict(LOCAL, gpufleet_validate_fail_on="fail"),
        "children": {
            # no kubeadm here, and no sudo: the certificate play runs without become
            "kube_control_plane": {"hosts": {"cp1": {"ansible_become": False, "gpufleet_validate_gpu": False,
                                                     "gpufleet_validate_rdma": False,
                                                     "gpufleet_validate_tuning": False}}},
            "kube_node": {"children": {"gpu_nodes": None, "rdma_nodes": None},
                          # a node no run reaches (nothing listens on port 1): the upgrade run's node
                          "hosts": {"far1": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                                             "ansible_port": 1, "gpufleet_validate_gpu": False,
                                             "gpufleet_validate_rdma": False}}},
            "gpu_nodes": {"hosts": {"gpu1": dict(GPU, **(gpu1 or {})), "gpu2": dict(GPU)},
                          "vars": {"gpufleet_gpu_count": 8, "gpufleet_driver_branch": "580"}},
            "rdma_nodes": {"hosts": {"gpu1": None, "gpu2": None}, "vars": {"gpufleet_expected_hcas": 9}},
        }}}


RUNS = {
    "site_limit": ("typo.yml", "gpufleet.cluster.site", "--limit", "gpu1", "-e", '{"gpufleet_phases": ["valdate"]}'),
    "site_other": ("typo.yml", "gpufleet.cluster.site", "--limit", "gpu2", "--tags", "report"),
    "validate_typo": ("hosts.yml", "gpufleet.cluster.validate", "-e", "gpufleet_validate_hosts=gpu_node"),
    "capture_typo": ("hosts.yml", "gpufleet.cluster.capture", "-e", "capture_hosts=gpu_nodez"),
    "capture_options": ("hosts.yml", "gpufleet.cluster.capture", "--limit", "gpu1",
                        "-e", '{"capture_options": {"xid_windows_hours": 2}}'),
    "upgrade_bare": ("hosts.yml", "gpufleet.cluster.rolling_upgrade"),
    "upgrade_drivr": ("hosts.yml", "gpufleet.cluster.rolling_upgrade", "-e", '{"rolling_upgrade_components": ["drivr"]}'),
    "upgrade_dir": ("hosts.yml", "gpufleet.cluster.rolling_upgrade", "-e",
                    '{"rolling_upgrade_hosts": "far1", "rolling_upgrade_revalidate": true, "rolling_upgrade_run_id": "t1"}'),
    "upgrade_no_api": ("nocp.yml", "gpufleet.cluster.rolling_upgrade", "-e",
                       '{"rolling_upgrade_hosts": "gpu_nodes", "rolling_upgrade_components": ["driver"]}'),
    "status_no_agent": ("hosts.yml", "gpufleet.cluster.fleet_status"),
    "status_no_gpu_nodes": ("kubespray.yml", "gpufleet.cluster.fleet_status"),
    "validate_first": ("hosts.yml", "gpufleet.cluster.validate", "--limit", "cp1,gpu1"),
    "yaml_error": ("broken/hosts.yml", "gpufleet.cluster.validate"),
}
# the runs that write reports get a directory each (the admin's directory, where ./reports goes)
OWN_DIR = ("capture_typo", "upgrade_bare", "upgrade_drivr", "upgrade_dir", "upgrade_no_api", "status_no_agent",
           "validate_first")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    site = tmp_path_factory.mktemp("day_two")
    (site / "hosts.yml").write_text(yaml.safe_dump(_inventory()))
    (site / "typo.yml").write_text(yaml.safe_dump(_inventory({"nvidia_driver_kernel_modules": "opn"})))
    (site / "kubespray.yml").write_text(yaml.safe_dump({"all": {"vars": LOCAL, "children": {
        "kube_control_plane": {"hosts": {"cp1": None}}, "kube_node": {"hosts": {"node1": None}},
        "etcd": {"hosts": {"cp1": None}}, "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}}}}}))
    # no kube_control_plane and no gpufleet_kube_api_host: nowhere to reach the Kubernetes API from
    (site / "nocp.yml").write_text(yaml.safe_dump({"all": {"vars": LOCAL, "children": {
        "gpu_nodes": {"hosts": {"gpu1": dict(GPU)}, "vars": {"gpufleet_gpu_count": 8}}}}}))
    (site / "broken" / "group_vars").mkdir(parents=True)
    (site / "broken" / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": LOCAL, "children": {
        "gpu_nodes": {"hosts": {"gpu1": None}}}}}))
    (site / "broken" / "group_vars" / "gpu_nodes.yml").write_text("gpufleet_gpu_count: 8\n  gpufleet_driver_branch: [\n")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ANSIBLE_", "GPUFLEET_")) and key != "PYTHONPATH"}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="gpufleet.cluster.fleet_report", ANSIBLE_HOST_KEY_CHECKING="False",
               ANSIBLE_SSH_ARGS="-o ConnectTimeout=5", PATH=BIN + os.pathsep + env.get("PATH", ""))
    procs = {}
    for name, (inventory, *argv) in RUNS.items():
        cwd = site / name if name in OWN_DIR else site
        cwd.mkdir(exist_ok=True)
        procs[name] = (cwd, subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "-i", str(site / inventory)] + argv,
                                             cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True))
    out = {}
    for name, (cwd, proc) in procs.items():
        text, _ = proc.communicate(timeout=600)
        out[name] = (proc.returncode, text, cwd)
    return out


def _refused(result, *lines):
    rc, out, _ = result
    assert rc == 2, out
    assert "No host was contacted or changed" in out or "No node was cordoned or changed" in out \
        or "No host was contacted" in out, out
    for line in lines:
        assert line in out, line + "\n---\n" + out


def test_limit_does_not_switch_the_inventory_check_off(runs):
    _refused(runs["site_limit"],
             "site.yml: the inventory has 2 problem(s).",
             "- gpufleet_phases must be a list of node, kubernetes, validate, report, got ['valdate'] "
             "(did you mean validate?)",
             "- nvidia_driver_kernel_modules: value must be one of: open, proprietary, got: opn (did you mean open?) "
             "(argument spec of role nvidia_driver) [gpu1]")
    out = runs["site_limit"][1]
    assert "TASK [Reach" not in out and "skipping: no hosts matched" not in out.split("PLAY RECAP")[0][:400], out


def test_the_check_is_for_the_hosts_the_run_touches(runs):
    rc, out, _ = runs["site_other"]
    assert rc == 0, out  # gpu1's problem is not this run's: --limit gpu2
    assert "opn" not in out and "gpufleet site run, phases: report" in out, out


def test_a_sweep_that_matches_no_host_is_an_error(runs):
    _refused(runs["validate_typo"], "- gpufleet_validate_hosts=gpu_node matches no host of the inventory: gpu_node is "
                                    "not a group or host of the inventory (did you mean gpu_nodes?)")
    assert "TASK [Validate the node" not in runs["validate_typo"][1]
    _refused(runs["capture_typo"], "- capture_hosts=gpu_nodez matches no host of the inventory: gpu_nodez is not a "
                                   "group or host of the inventory (did you mean gpu_nodes?)")
    assert not (runs["capture_typo"][2] / "reports").exists()


def test_capture_checks_its_options_before_any_host(runs):
    _refused(runs["capture_options"], "capture_options must be a dict of xid_source, xid_window_hours",
             "unknown: xid_windows_hours")
    assert "TASK [Make a private directory" not in runs["capture_options"][1]


def test_a_bare_rolling_upgrade_is_refused_before_any_node(runs):
    rc, out, cwd = runs["upgrade_bare"]
    _refused(runs["upgrade_bare"], "rolling_upgrade.yml: rolling_upgrade_components is empty",
             "rolling_upgrade_revalidate=true")
    assert "PLAY [Upgrade nodes" not in out and not (cwd / "reports").exists(), out


def test_an_unknown_component_is_refused_before_the_run_directory(runs):
    rc, out, cwd = runs["upgrade_drivr"]
    _refused(runs["upgrade_drivr"], "- rolling_upgrade_components: value must be one or more of: driver, ofed, "
                                    "kubernetes, mig. Got no match for: drivr (did you mean driver?)")
    assert not (cwd / "reports").exists() and "TASK [Create the run directory]" not in out, out


def test_an_upgrade_without_a_kubernetes_api_is_refused_before_any_node(runs):
    _refused(runs["upgrade_no_api"], "rolling_upgrade.yml: no Kubernetes API for gpu1",
             "kube_control_plane", "gpufleet_kube_api_host")
    assert not os.path.exists(os.path.join(str(runs["upgrade_no_api"][2]), "reports", "upgrades"))


def test_the_run_directory_is_where_the_admin_runs_from(runs):
    rc, out, cwd = runs["upgrade_dir"]
    assert rc != 0, out  # far1 cannot be reached
    summary = json.loads((cwd / "reports" / "upgrades" / "t1" / "summary.json").read_text())
    assert summary["run_id"] == "t1" and summary["not_reached"] == ["far1"], summary
    assert os.readlink(str(cwd / "reports" / "upgrades" / "latest")) == "t1"
    assert not os.path.exists(os.path.join(REPO, "reports", "upgrades", "t1"))


def test_fleet_status_without_agents_fails_closed_with_a_report(runs):
    rc, out, cwd = runs["status_no_agent"]
    assert rc == 2, out
    hosts = json.loads((cwd / "reports" / "fleet-report.json").read_text())["hosts"]
    assert sorted(hosts) == ["gpu1", "gpu2"], hosts
    for host in ("gpu1", "gpu2"):
        assert [(c["id"], c["status"]) for c in hosts[host]["checks"]] == [("agent.health", "fail")], hosts[host]
        assert "the node health agent is not installed yet" in hosts[host]["checks"][0]["message"]
    # one failure per host, the reason in it
    assert out.count("fatal: [") == 2 and out.count("no /nonexistent/gpufleet/health.json: the node health agent") >= 2


def test_fleet_status_without_gpu_nodes_is_an_error(runs):
    _refused(runs["status_no_gpu_nodes"], "- gpufleet_status_hosts=gpu_nodes matches no host of the inventory: "
                                          "gpu_nodes is not a group or host of the inventory")


def test_validate_before_site_names_the_way_out(runs):
    rc, out, cwd = runs["validate_first"]
    assert rc == 2, out
    hosts = json.loads((cwd / "reports" / "fleet-report.json").read_text())["hosts"]
    assert sorted(hosts) == ["cp1", "gpu1"], hosts  # --limit cp1,gpu1
    agent = [c for c in hosts["gpu1"]["checks"] if c["id"] == "agent.health"]
    assert agent and agent[0]["status"] == "fail", hosts["gpu1"]
    assert "gpufleet_health_agent=false" in agent[0]["message"] and "not installed yet" in agent[0]["message"]
    if shutil.which("kubeadm") is None:
        certs = [c for c in hosts["cp1"]["checks"] if c["id"] == "k8s.certs_expiry"]
        assert certs and certs[0]["status"] == "fail", hosts["cp1"]
        assert "kubeadm is not installed on this control-plane host" in certs[0]["message"], certs
        assert "Errno 2" not in json.dumps(hosts["cp1"]) and "--skip-tags certs" in certs[0]["message"]


def test_a_yaml_error_in_group_vars_names_the_file(runs):
    rc, out, _ = runs["yaml_error"]
    assert rc != 0, out
    assert os.path.join("broken", "group_vars", "gpu_nodes.yml") + " (line 2) cannot be read: YAML parsing failed" \
        in out.replace("\n        ", " "), out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
