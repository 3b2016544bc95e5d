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
- node, kubernetes, health_agent, fabric_test, k8s_validate, mirror, remediate: the same check play
  (playbooks/tasks/check-inventory.yml on localhost:all): it runs under --limit, names the problem
  of the limited host, and a host pattern or --limit that leaves no host is refused (did-you-mean
  for a variable the user set; the group to add for a playbook's own group).
- site --tags etcd_snapshot alone: the check covers the control plane that task runs on.
- destructive scope: a bare remediate.yml (gpufleet_remediation unset) isolates a failing node and
  drains, resets or reboots nothing (drain / reset / reboot are opt-in per check class).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from installed_collection import BIN, LOCAL, NVML, PYTHON, REPO, clean_env, simulated_gpu
from playbook_env import HAS_K8S_CLIENT


pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="run `make setup` first")

GPU = dict(simulated_gpu(), gpufleet_status_file="/nonexistent/gpufleet/health.json")


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
    # the other entry points: the check runs under --limit, a run that touches no host is refused
    "node_limit": ("typo.yml", "gpufleet.cluster.node", "--limit", "gpu1"),
    "node_hosts_typo": ("hosts.yml", "gpufleet.cluster.node", "-e", "gpufleet_node_hosts=gpu_node"),
    "kubernetes_limit": ("typo.yml", "gpufleet.cluster.kubernetes", "--limit", "gpu1"),
    "agent_limit": ("typo.yml", "gpufleet.cluster.health_agent", "--limit", "gpu1"),
    "agent_outside": ("hosts.yml", "gpufleet.cluster.health_agent", "--limit", "cp1"),
    "agent_no_gpu_nodes": ("kubespray.yml", "gpufleet.cluster.health_agent"),
    "fabric_limit": ("typo.yml", "gpufleet.cluster.fabric_test", "--limit", "gpu1,gpu2"),
    "fabric_typo": ("hosts.yml", "gpufleet.cluster.fabric_test", "-e", "fabric_test_hosts=rdma_node"),
    "fabric_one": ("hosts.yml", "gpufleet.cluster.fabric_test", "--limit", "gpu1"),
    "k8s_validate_limit": ("hosts.yml", "gpufleet.cluster.k8s_validate", "--limit", "gpu1"),
    "mirror_typo": ("hosts.yml", "gpufleet.cluster.mirror", "-e", "mirror_hosts=cp2"),
    "remediate_limit": ("typo.yml", "gpufleet.cluster.remediate", "--limit", "gpu1"),
    "remediate_typo": ("hosts.yml", "gpufleet.cluster.remediate", "-e", "gpufleet_remediate_hosts=gpu_nodez"),
    # --tags etcd_snapshot alone runs the control-plane play's snapshot task: the check needs kube_control_plane
    "site_etcd_snapshot": ("nocp.yml", "gpufleet.cluster.site", "--tags", "etcd_snapshot"),
    # make lab's playbook (the checkout's: the tarball has no lab) with the lab's own inventory: it checks
    # before role lab_sim changes a container (none is contacted)
    "lab_phase_typo": (os.path.join(REPO, "inventories", "lab", "hosts.yml"), os.path.join(REPO, "playbooks", "lab.yml"),
                       "-e", '{"gpufleet_phases": ["valdate"]}'),
    # a driver swap that needs a reboot (535 loaded, 580 installed), nvidia_driver_reboot left unset
    "driver_swap": ("hosts.yml", "driver_swap.yml"),
    # gpufleet_remediation unset: a failing node is only isolated (the Kubernetes API double)
    "remediate_no_policy": ("remediate.yml", "gpufleet.cluster.remediate"),
}
# the runs that write reports get a directory each (the admin's directory, where ./reports goes)
OWN_DIR = ("capture_typo", "upgrade_bare", "upgrade_drivr", "upgrade_dir", "upgrade_no_api", "status_no_agent",
           "validate_first", "remediate_no_policy")


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
    # the admin's own playbook: the reboot decision of role nvidia_driver after a driver change
    (site / "driver_swap.yml").write_text(yaml.safe_dump([{
        "name": "Finish a driver change", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Apply the driver's reboot policy", "ansible.builtin.include_role": {
            "name": "gpufleet.cluster.nvidia_driver", "tasks_from": "reboot"},
            "vars": {"nvidia_driver_loaded_version": "535.261.03", "nvidia_driver_installed_version": "580.95.05",
                     "nvidia_driver_blacklist_nouveau": False}}]}]))
    (site / "broken" / "group_vars").mkdir(parents=True)
    (site / "broken" / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": LOCAL, "children": {
        "gpu_nodes": {"hosts": {"gpu1": None}}}}}))
    (site / "broken" / "group_vars" / "gpu_nodes.yml").write_text("gpufleet_gpu_count: 8\n  gpufleet_driver_branch: [\n")
    api = None
    if HAS_K8S_CLIENT:
        from fake_kube_api import FakeKubeAPI  # pylint: disable=import-outside-toplevel
        api = FakeKubeAPI().start()
        api.add_node("gpu9")
        api.add_pod("train-0", "gpu9", namespace="ml", owner_kind="StatefulSet", labels={"app": "train"})
        (site / "remediate.yml").write_text(yaml.safe_dump({"all": {"vars": LOCAL, "children": {
            "gpu_nodes": {"hosts": {"gpu9": dict(
                GPU, gpufleet_gpu_count=8, gpufleet_validate_rdma=False, gpufleet_kube_api_host="localhost",
                gpufleet_kubeconfig=api.kubeconfig(site / "kubeconfig"), node_gate_python=PYTHON,
                node_gate_allow_plain_http=True, gpufleet_remediate_allow_plain_http=True,
                # a lost GPU: with a policy it would be drained, reset or rebooted
                gpufleet_remediate_environment=dict(GPU["gpufleet_validate_environment"],
                                                    GPUFLEET_FAKE_NVML_SCENARIO=os.path.join(
                                                        NVML, "h100-gpu-is-lost.json")))}}}}}))
    env = clean_env(os.path.join(REPO, ".collections"))
    env.update(ANSIBLE_CALLBACKS_ENABLED="gpufleet.cluster.fleet_report", ANSIBLE_HOST_KEY_CHECKING="False",
               ANSIBLE_SSH_ARGS="-o ConnectTimeout=5")
    procs = {}
    for name, (inventory, *argv) in RUNS.items():
        if not (site / inventory).exists():
            continue  # remediate_no_policy without the Python kubernetes client
        cwd = site / name if name in OWN_DIR else site
        cwd.mkdir(exist_ok=True)
        procs[name] = (cwd, subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "-i", str(site / inventory)] + argv,
                                             cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True))
    out = {}
    for name, (cwd, proc) in procs.items():
        text, _ = proc.communicate(timeout=600)
        out[name] = (proc.returncode, text, cwd)
    out["api"] = api
    yield out
    if api is not None:
        api.stop()


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
    # named before any host's variables are loaded (lookup inventory_vars_parsed in the first play's hosts)
    assert os.path.join("broken", "group_vars", "gpu_nodes.yml") + " (line 2, column 25): YAML parsing failed" \
        in out, out
    assert "No host was contacted or changed." in out, out


# --- the other entry points (issue 42): the same check play, under --limit and host-pattern variables


def test_node_checks_the_limited_host_and_refuses_a_pattern_without_hosts(runs):
    _refused(runs["node_limit"], "node.yml: the inventory has 1 problem(s).",
             "- nvidia_driver_kernel_modules: value must be one of: open, proprietary, got: opn (did you mean open?) "
             "(argument spec of role nvidia_driver) [gpu1]")
    assert "TASK [Gather the facts the node roles use]" not in runs["node_limit"][1]
    _refused(runs["node_hosts_typo"], "- gpufleet_node_hosts=gpu_node matches no host of the inventory: gpu_node is "
                                      "not a group or host of the inventory (did you mean gpu_nodes?)")


def test_kubernetes_checks_the_limited_host(runs):
    _refused(runs["kubernetes_limit"], "kubernetes.yml: the inventory has 1 problem(s).",
             "got: opn (did you mean open?) (argument spec of role nvidia_driver) [gpu1]")
    assert "TASK [Apply the kubeadm prerequisites]" not in runs["kubernetes_limit"][1]


def test_health_agent_checks_the_limited_host_and_refuses_no_gpu_node(runs):
    _refused(runs["agent_limit"], "health_agent.yml: the inventory has 1 problem(s).", "got: opn", "[gpu1]")
    _refused(runs["agent_outside"], "- --limit cp1 leaves none of the hosts of this playbook (gpu_nodes) "
                                    "(2 host(s): gpu1, gpu2): this run would touch no host")
    # a Kubespray inventory has no gpu_nodes: the group to add, not a did-you-mean of kube_node
    _refused(runs["agent_no_gpu_nodes"], "- the hosts of this playbook (gpu_nodes) match no host of the inventory: "
                                         "gpu_nodes is not in the inventory (groups: etcd, k8s_cluster, "
                                         "kube_control_plane, kube_node); add the hosts this playbook is for to "
                                         "gpu_nodes")
    assert "did you mean" not in runs["agent_no_gpu_nodes"][1]
    for name in ("agent_limit", "agent_outside", "agent_no_gpu_nodes"):
        assert "TASK [Install and start the node health agent]" not in runs[name][1]


def test_fabric_test_checks_and_pairs_the_limited_hosts(runs):
    # the check and the plan used to run on localhost only, so --limit left both out
    _refused(runs["fabric_limit"], "fabric_test.yml: the inventory has 1 problem(s).", "got: opn", "[gpu1]")
    _refused(runs["fabric_typo"], "- fabric_test_hosts=rdma_node matches no host of the inventory: rdma_node is not "
                                  "a group or host of the inventory (did you mean rdma_nodes?)")
    # --limit gpu1 leaves one host of rdma_nodes: nothing to pair, said before any measurement
    _refused(runs["fabric_one"], "fabric_test.yml: fewer than two hosts in rdma_nodes (--limit gpu1) (gpu1); "
                                 "nothing to pair.")
    assert "PLAY [Measure, round by round]" not in runs["fabric_one"][1]


def test_k8s_validate_needs_the_control_plane_in_the_limit(runs):
    # without it the Jobs are never created and the run used to end green
    _refused(runs["k8s_validate_limit"], "k8s_validate.yml: the first control-plane host cp1 is outside --limit gpu1",
             "Add cp1 to --limit.")
    assert "TASK [Gather mlx5 facts]" not in runs["k8s_validate_limit"][1]


def test_mirror_refuses_a_builder_that_is_not_in_the_inventory(runs):
    _refused(runs["mirror_typo"], "- mirror_hosts=cp2 matches no host of the inventory: cp2 is not a group or host "
                                  "of the inventory (did you mean cp1?)")
    assert "TASK [Create the bundle directories]" not in runs["mirror_typo"][1]


def test_remediate_checks_the_limited_host_and_refuses_a_pattern_without_hosts(runs):
    # the check play was on localhost, so --limit left it (and the run's controller id) out
    _refused(runs["remediate_limit"], "remediate.yml: the inventory has 1 problem(s).", "got: opn", "[gpu1]")
    _refused(runs["remediate_typo"], "- gpufleet_remediate_hosts=gpu_nodez matches no host of the inventory: "
                                     "gpu_nodez is not a group or host of the inventory (did you mean gpu_nodes?)")
    for name in ("remediate_limit", "remediate_typo"):
        assert "TASK [Reach the node]" not in runs[name][1]


def test_site_tags_etcd_snapshot_checks_the_control_plane(runs):
    # --tags etcd_snapshot runs the snapshot task of the control-plane play: the kubernetes phase is selected
    _refused(runs["site_etcd_snapshot"], "site.yml: the inventory has",
             "- group kube_control_plane is empty: the kubernetes phase needs a control-plane host")
    assert "TASK [Reach the control-plane host]" not in runs["site_etcd_snapshot"][1]


def test_reboots_and_restarts_are_opt_in():
    # every reboot / restart a role may do is off or "stop and explain" unless the inventory says so;
    # rolling_upgrade's drain and reboot need its explicit scope (a bare run is refused, above)
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "defaults", "main.yml"))):
        role = path.split(os.sep)[-3]
        with open(path) as handle:
            defaults = yaml.safe_load(handle) or {}
        for name, value in defaults.items():
            if role != "rolling_upgrade" and re.search(r"_(reboot|restart\w*|drain)$", name):
                assert value in (None, False), (name, value)


def test_a_driver_swap_needing_a_reboot_stops_and_names_the_choice(runs):
    rc, out, _ = runs["driver_swap"]
    assert rc == 2, out
    assert "nvidia kernel module 535.261.03 is loaded but 580.95.05 is installed" in out, out
    assert "nvidia_driver_reboot is not set: set nvidia_driver_reboot=true to let the role reboot the host now, " \
           "or nvidia_driver_reboot=false to record it" in out.replace("\n", " "), out
    assert "TASK [gpufleet.cluster.common_internal : Reboot now]" not in out


def test_lab_checks_before_it_changes_a_container(runs):
    _refused(runs["lab_phase_typo"], "lab.yml: the inventory has 1 problem(s).",
             "- gpufleet_phases must be a list of node, kubernetes, validate, report, got ['valdate'] "
             "(did you mean validate?)")
    assert "TASK [gpufleet.cluster.lab_sim" not in runs["lab_phase_typo"][1]


@pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)")
def test_a_bare_remediate_isolates_and_drains_reboots_nothing(runs):
    rc, out, _ = runs["remediate_no_policy"]
    api = runs["api"]
    assert "gpu9: isolate (remediation is off (gpufleet_remediation.enabled false): isolated for gpu." in out, out
    node = api.node("gpu9")
    assert node["spec"].get("unschedulable") and any(t["key"] == "gpufleet.io/unhealthy"
                                                     for t in node["spec"].get("taints") or []), node
    # the pod still runs: no eviction was even asked for, no GPU reset, no reboot
    assert api.pod_names(node="gpu9") == ["ml/train-0"]
    assert not api.recorded(method="POST", path_contains="eviction")
    assert "TASK [Remediate the node (drain, reset or reboot)] *****************************\nskipping: [gpu9]" in out, out
    assert rc == 0, out  # isolation is the outcome remediation-off asks for (as the health gate's), not a failure


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
