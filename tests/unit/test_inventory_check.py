"""The inventory check of playbooks/site.yml (plugins/plugin_utils/inventory_check.py): every
problem is listed at once; each check finds its problem and stays quiet on a good inventory."""

import glob
import os
import re

import pytest
import yaml
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter import inventory_problems as filters
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check, run_selection
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

SHA = "sha256:" + "ab" * 32
GOOD_VARS = {
    "kubernetes_cni_calico_manifest_checksum": SHA,
    "kubernetes_addons_mpi_operator_manifest_checksum": SHA,
    "gpufleet_gpu_count": 8,
    "gpufleet_driver_branch": "580",
    "gpufleet_expected_hcas": 9,
    "gpufleet_link_layer": "any",
    "gpufleet_min_rate_gbps": 200,
    "gpufleet_peermem": True,
    "gpufleet_kubernetes_version": "1.35.4",
    "inventory_hostname": "x",  # magic variables are present in hostvars too
}


# Expectations of GPU / RDMA nodes: set for gpu_nodes / rdma_nodes, not for the control plane.
NODE_EXPECTATIONS = ("gpufleet_gpu_count", "gpufleet_driver_branch", "gpufleet_expected_hcas", "gpufleet_link_layer",
                     "gpufleet_min_rate_gbps")


def inventory(overrides=None, hosts=("cp1", "gpu1", "gpu2")):
    """hostvars and groups of a small site: one control plane, two GPU+RDMA nodes."""
    hostvars = {h: dict(((k, v) for k, v in GOOD_VARS.items() if h != hosts[0] or k not in NODE_EXPECTATIONS),
                        inventory_hostname=h, **(overrides or {}).get(h, {})) for h in hosts}
    groups = {"all": list(hosts), "kube_control_plane": [hosts[0]], "kube_node": list(hosts[1:]),
              "gpu_nodes": list(hosts[1:]), "rdma_nodes": list(hosts[1:])}
    return hostvars, groups


def everywhere(**values):
    return {h: dict(values) for h in ("cp1", "gpu1", "gpu2")}


def test_good_inventory_has_no_problem():
    assert inventory_check.inventory_problems(*inventory()) == []


def test_empty_groups():
    hostvars, groups = inventory()
    groups["kube_control_plane"] = []
    groups["kube_node"] = []
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith("group kube_control_plane is empty") for p in problems), problems
    assert any(p.startswith("group kube_node is empty") for p in problems), problems
    # the validate phase alone needs neither
    assert not any("is empty" in p for p in
                   inventory_check.inventory_problems(hostvars, groups, phases=["validate", "report"]))
    # without the control-plane role the group may be empty
    assert not any("kube_control_plane is empty" in p for p in inventory_check.inventory_problems(
        hostvars, groups, kubernetes_roles=["kubernetes_prereqs"]))


def test_gpu_nodes_outside_kube_node():
    hostvars, groups = inventory()
    groups["kube_node"] = ["gpu1"]
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith("group gpu_nodes has hosts outside kube_node (gpu2)") for p in problems), problems


def test_missing_checksums_are_listed_together():
    hostvars, groups = inventory(everywhere(kubernetes_cni_calico_manifest_checksum="",
                                            kubernetes_addons_mpi_operator_manifest_checksum="sha256:1234"))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert ("kubernetes_cni_calico_manifest_checksum is required (the Calico manifest is downloaded) and "
            "must be sha256:<64 hex digits>, got ''") in problems
    assert ("kubernetes_addons_mpi_operator_manifest_checksum is required (the MPI operator manifest is "
            "downloaded) and must be sha256:<64 hex digits>, got 'sha256:1234'") in problems


def test_checksums_not_required_when_not_downloaded():
    hostvars, groups = inventory(everywhere(kubernetes_cni_calico_manifest_checksum="",
                                            kubernetes_addons_mpi_operator_manifest_checksum="",
                                            kubernetes_addons_mpi_operator=False))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert [p for p in problems if "mpi_operator" in p] == []
    assert len([p for p in problems if "calico" in p]) == 1
    assert inventory_check.inventory_problems(hostvars, groups, phases=["node", "validate"]) == []
    assert inventory_check.inventory_problems(hostvars, groups, kubernetes_roles=["kubernetes_prereqs"]) == []


def test_mlnx_ofed_needs_its_sha256():
    hostvars, groups = inventory({"gpu2": {"rdma_stack_source": "mlnx_ofed"}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert problems == ["rdma_stack_mlnx_ofed_sha256 is required with rdma_stack_source=mlnx_ofed (the tarball "
                        "is downloaded) and must be 64 hex digits; missing or malformed on gpu2"]
    hostvars["gpu2"]["rdma_stack_mlnx_ofed_sha256"] = "cd" * 32
    assert inventory_check.inventory_problems(hostvars, groups) == []


@pytest.mark.parametrize("name, value, fragment", [
    ("gpufleet_gpu_count", -1, "gpufleet_gpu_count must be a whole number >= 0, got -1"),
    ("gpufleet_gpu_count", "eight", "gpufleet_gpu_count must be a whole number >= 0, got 'eight'"),
    ("gpufleet_expected_hcas", True, "gpufleet_expected_hcas must be a whole number >= 0, got True"),
    ("gpufleet_driver_branch", "r580", "gpufleet_driver_branch must be a driver branch"),
    ("gpufleet_link_layer", "infiniband", "gpufleet_link_layer must be InfiniBand, Ethernet or any, got 'infiniband'"),
    ("gpufleet_min_rate_gbps", 0, "gpufleet_min_rate_gbps must be a number > 0 (Gb/s), got 0"),
    ("gpufleet_peermem", "yes", "gpufleet_peermem must be true or false, got 'yes'"),
    ("gpufleet_gate_taint_key", "bad key!", "gpufleet_gate_taint_key must be a Kubernetes taint key"),
    ("gpufleet_sysfs_root", "relative/root", "gpufleet_sysfs_root must be an absolute path"),
])
def test_tier_types_and_ranges(name, value, fragment):
    hostvars, groups = inventory({"gpu1": {name: value}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert len(problems) == 1 and problems[0].startswith(fragment) and problems[0].endswith("[gpu1]"), problems


def test_peermem_expectation_with_dmabuf_is_incoherent():
    hostvars, groups = inventory(everywhere(gpudirect_mode="dmabuf", gpufleet_peermem=True))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert problems == ["gpufleet_peermem is true (validation requires nvidia-peermem) but gpudirect_mode is "
                        "dmabuf (nvidia-peermem is not loaded); set gpufleet_peermem: false for dma-buf nodes "
                        "[cp1, gpu1, gpu2]"]


def test_unknown_gpufleet_key_suggests_the_closest_name():
    hostvars, groups = inventory({"gpu1": {"gpufleet_gpu_cont": 8}, "gpu2": {"gpufleet_zzz": 1}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert "unknown variable gpufleet_gpu_cont (did you mean gpufleet_gpu_count?) [gpu1]" in problems
    assert ("unknown variable gpufleet_zzz (not a gpufleet_* variable: docs/contracts.md lists them) [gpu2]"
            in problems)


def test_refused_versions_name_the_rule_and_the_hosts():
    hostvars, groups = inventory(everywhere(nvidia_driver_branch="470"))
    (problem,) = inventory_check.inventory_problems(hostvars, groups)
    assert problem.startswith(
        "compatibility open-modules-driver-branch: kernel_modules=open (from nvidia_driver_kernel_modules, "
        "default of role nvidia_driver) requires driver >= 515, but driver=470 (from nvidia_driver_branch).")
    assert problem.endswith("[cp1, gpu1, gpu2]")


def test_renamed_variable_is_named_with_its_new_name():
    hostvars, groups = inventory(everywhere(kubernetes_version="1.33.2"))
    assert inventory_check.inventory_problems(hostvars, groups) == [
        "kubernetes_version was renamed to gpufleet_kubernetes_version: set gpufleet_kubernetes_version: "
        "'1.33.2' instead [cp1, gpu1, gpu2]"]


def test_every_problem_at_once():
    hostvars, groups = inventory({
        "cp1": {"kubernetes_cni_calico_manifest_checksum": ""},
        "gpu1": {"gpufleet_link_layer": "IB", "gpudirect_mode": "dmabuf", "nvidia_driver_kernel_modules": "proprietary",
                 "gpufleet_peermem": False},
        "gpu2": {"gpufleet_gpu_cuont": 8},
    })
    groups["gpu_nodes"].append("stray")
    hostvars["stray"] = dict(GOOD_VARS)
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert len(problems) == 6, problems
    assert problems[0].startswith("group gpu_nodes has hosts outside kube_node (stray)")
    # stray expects 9 RDMA devices but is in gpu_nodes only
    assert any(p.startswith("expects 9 RDMA device(s) (gpufleet_expected_hcas) but is not in group rdma_nodes")
               and p.endswith("[stray]") for p in problems), problems


def test_phase_and_role_lists_are_checked():
    hostvars, groups = inventory()
    problems = inventory_check.inventory_problems(hostvars, groups, phases=["node", "deploy"],
                                                  node_roles=["preflight", "nvidia"])
    assert "gpufleet_phases must be a list of node, kubernetes, validate, report, got ['node', 'deploy']" in problems
    assert any(p.startswith("gpufleet_node_roles must be a list of preflight") for p in problems)


def test_filter_wraps_the_check():
    assert filters.inventory_problems(*inventory()) == []


# --- the list of known gpufleet_* variables is complete ------------------------------------------

PLUGIN_NAMES = {os.path.splitext(os.path.basename(p))[0] for p in
                glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml"))
                + glob.glob(os.path.join(REPO, "plugins", "lookup", "*.py"))}
# Prometheus metric names of the node health agent (its alert rules name them), not variables.
with open(os.path.join(REPO, "plugins", "module_utils", "agent", "agent_publish.py")) as _handle:  # prometheus_text
    PLUGIN_NAMES |= set(re.findall(r"# TYPE (gpufleet_[a-z0-9_]+) ", _handle.read()))


def _variables_read_in_repo():
    names = set()
    for pattern in ("playbooks/**/*.yml", "roles/**/*.yml", "roles/**/*.j2", "inventories/**/*.yml"):
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True):
            with open(path) as handle:
                text = handle.read()
            for match in re.finditer(r"(?<![\w.'/])gpufleet_[a-z0-9_]+(?!\w)", text):
                end = text[match.end():match.end() + 5]
                if end.startswith(".fact"):  # /etc/ansible/facts.d/gpufleet_*.fact files
                    continue
                names.add(match.group(0))
    return names - PLUGIN_NAMES


def test_known_variables_cover_every_gpufleet_variable_of_the_repo():
    missing = _variables_read_in_repo() - inventory_check.known_gpufleet_variables()
    assert not missing, "add to SITE_VARIABLES or the tier: %s" % sorted(missing)


def test_site_variables_do_not_shadow_the_tier():
    assert not set(inventory_check.SITE_VARIABLES) & set(TIER)


# --- expectations by group (the example inventory's control planes expect no GPU) ----------------

def test_gpu_expectation_outside_gpu_nodes_is_refused():
    hostvars, groups = inventory({"cp1": {"gpufleet_gpu_count": 8, "gpufleet_expected_hcas": 9}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert problems == [
        "expects 8 GPU(s) (gpufleet_gpu_count) but is not in group gpu_nodes, where the driver is installed and "
        "checked: set gpufleet_gpu_count in group_vars/gpu_nodes (not group_vars/all), or add the host to gpu_nodes "
        "[cp1]",
        "expects 9 RDMA device(s) (gpufleet_expected_hcas) but is not in group rdma_nodes, where the RDMA stack is "
        "installed and checked: set gpufleet_expected_hcas in group_vars/rdma_nodes (not group_vars/all), or add the "
        "host to rdma_nodes [cp1]"]
    # 0 expects nothing; validate alone holds only inventories that use the groups to it
    hostvars["cp1"]["gpufleet_gpu_count"] = 0
    hostvars["cp1"]["gpufleet_expected_hcas"] = 0
    assert inventory_check.inventory_problems(hostvars, groups) == []
    hostvars = {"workstation": dict(GOOD_VARS)}
    assert inventory_check.inventory_problems(hostvars, {"all": ["workstation"]}, phases=["validate"],
                                              hosts=["workstation"]) == []


# --- Kubespray-style inventories ----------------------------------------------------------------

def kubespray_groups():
    return {"all": ["cp1", "gpu1", "gpu2"], "kube_control_plane": ["cp1"], "etcd": ["cp1"],
            "kube_node": ["gpu1", "gpu2"], "k8s_cluster": ["cp1", "gpu1", "gpu2"], "calico_rr": []}


def test_kubespray_inventory_is_refused_with_the_groups_to_add():
    hostvars, _ = inventory(everywhere(gpufleet_gpu_count=None, gpufleet_expected_hcas=None))
    problems = inventory_check.inventory_problems(hostvars, kubespray_groups())
    assert len(problems) == 1, problems
    problem = problems[0]
    assert problem.startswith("groups gpu_nodes and rdma_nodes are empty (a Kubespray-style inventory: "
                              "kube_control_plane, kube_node, etcd, k8s_cluster): ")
    assert "install no GPU or RDMA software on any host" in problem
    snippet = problem[problem.index("\n") + 1:problem.rindex("\n")]
    import yaml
    example = yaml.safe_load(snippet)
    assert example["all"]["children"]["kube_node"] == {"children": {"gpu_nodes": None, "rdma_nodes": None}}
    assert set(example["all"]["children"]) == {"kube_control_plane", "kube_node", "gpu_nodes", "rdma_nodes"}
    # a sweep alone does not need the groups
    assert inventory_check.inventory_problems(hostvars, kubespray_groups(), phases=["validate", "report"]) == []


def test_kubespray_group_names_are_named():
    hostvars, _ = inventory()
    groups = {"all": ["cp1", "gpu1"], "kube-master": ["cp1"], "kube-node": ["gpu1"], "gpu_nodes": ["gpu1"]}
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith("group kube_control_plane is empty") and p.endswith(
        "the inventory has kube-master, Kubespray's name for it: rename the group to kube_control_plane")
        for p in problems), problems
    assert any(p.startswith("group kube_node is empty") and "kube-node, Kubespray's name" in p for p in problems)


@pytest.mark.parametrize("name, value, ours", [
    ("kube_version", "v1.33.2", "gpufleet_kubernetes_version"),
    ("kube_network_plugin", "calico", "kubernetes_cni_plugin"),
    ("kube_pods_subnet", "10.233.64.0/18", "kubernetes_control_plane_pod_subnet"),
    ("container_manager", "containerd", "container_runtime_engine"),
])
def test_kubespray_variables_name_ours(name, value, ours):
    hostvars, groups = inventory(everywhere(**{name: value}))
    (problem,) = inventory_check.inventory_problems(hostvars, groups)
    assert problem.startswith("%s is a Kubespray variable that gpufleet does not read: use %s" % (name, ours))
    assert problem.endswith("[cp1, gpu1, gpu2]")


def test_kubespray_table_points_at_real_variables():
    specs = inventory_check.role_specs()
    known = set(TIER) | {name for options in specs.values() for name in options}
    for name, use in inventory_check.KUBESPRAY_VARIABLES.items():
        target = use.split()[0]
        assert target == "the" or target in known, (name, use)


# --- role variables (from roles/*/meta/argument_specs.yml) ----------------------------------------

def test_unknown_role_variables_suggest_the_closest_name():
    hostvars, groups = inventory({"gpu1": {"nvidia_driver_brach": "580", "rdma_stack_sorce": "inbox",
                                           "node_gate_zzzzzz": 1}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert sorted(problems) == [
        "unknown variable node_gate_zzzzzz (role node_gate has no such variable: "
        "roles/node_gate/meta/argument_specs.yml lists them) [gpu1]",
        "unknown variable nvidia_driver_brach (did you mean nvidia_driver_branch?) [gpu1]",
        "unknown variable rdma_stack_sorce (did you mean rdma_stack_source?) [gpu1]"]


@pytest.mark.parametrize("name, value, expected", [
    ("nvidia_driver_reboot", "maybe",
     "nvidia_driver_reboot must be of type bool (argument spec of role nvidia_driver), got 'maybe'"),
    ("nvidia_driver_reboot_timeout", "soon",
     "nvidia_driver_reboot_timeout must be of type int (argument spec of role nvidia_driver), got 'soon'"),
    ("rdma_stack_source", "ofed",
     "rdma_stack_source: value must be one of: "),
])
def test_role_variable_values_are_checked_against_the_argument_spec(name, value, expected):
    hostvars, groups = inventory({"gpu2": {name: value}})
    (problem,) = inventory_check.inventory_problems(hostvars, groups)
    assert problem.startswith(expected) and problem.endswith("[gpu2]"), problem


def test_good_role_values_and_playbook_inputs_pass():
    hostvars, groups = inventory(everywhere(nvidia_driver_reboot=False, nvidia_driver_reboot_timeout="900",
                                            rdma_stack_source="inbox", rolling_upgrade_serial="25%",
                                            rolling_upgrade_hosts="gpu_nodes"))
    assert inventory_check.inventory_problems(hostvars, groups) == []


def test_role_specs_are_read_once():
    first = inventory_check.role_specs()
    assert inventory_check.role_specs() is first
    assert "nvidia_driver_branch" in first["nvidia_driver"]
    assert "rolling_upgrade_run_id" in first["rolling_upgrade"]  # every entry point, not only main


# --- --tags and --skip-tags ---------------------------------------------------------------------

ALL = ["node", "kubernetes", "validate", "report"]


@pytest.mark.parametrize("run, skip, phases", [
    (None, None, ALL),
    (["all"], [], ALL),
    (["validate"], [], ["validate", "report"]),
    (["report"], [], ["report"]),
    (["nvidia_driver"], [], ["node"]),
    (["kubernetes_addons", "node_gate"], [], ["kubernetes"]),
    (["etcd_snapshot"], [], ["kubernetes"]),  # a task of the control-plane play (issue 42)
    (["all"], ["etcd_snapshot"], ALL),
    (["etcd_snapshot"], ["kubernetes"], []),
    (["all"], ["node"], ["kubernetes", "validate", "report"]),
    (["all"], ["validate"], ["node", "kubernetes"]),
    (["validate"], ["node_health_agent"], ["validate", "report"]),
    (["node_health_agent"], [], ["validate"]),
    (["tagged"], [], ALL),
    (["always"], [], []),
    (["untagged"], [], []),
    (["all"], ["all"], []),
])
def test_tags_select_the_phases(run, skip, phases):
    assert run_selection.tag_selection(list(ALL), run_tags=run, skip_tags=skip)["phases"] == phases


def test_tags_select_the_roles():
    chosen = run_selection.tag_selection(list(ALL), run_tags=["nvidia_driver"])
    assert chosen["node_roles"] == ["nvidia_driver"] and chosen["kubernetes_roles"] == []
    chosen = run_selection.tag_selection(list(ALL), run_tags=["node"], skip_tags=["rdma_stack"])
    assert "rdma_stack" not in chosen["node_roles"] and "nvidia_driver" in chosen["node_roles"]
    # the inventory's own lists come first; unknown names are kept for the check to name
    chosen = run_selection.tag_selection(["node", "deploy"], node_roles=["preflight", "nvidia"])
    assert chosen["phases"] == ["node", "deploy"] and chosen["node_roles"] == ["preflight", "nvidia"]


def test_etcd_snapshot_tag_selects_the_control_plane():
    # --tags etcd_snapshot runs the etcd snapshot task of kubernetes.yml's control-plane play (its
    # `when`: kubernetes_control_plane selected), so the check needs kube_control_plane (issue 42)
    chosen = run_selection.tag_selection(list(ALL), run_tags=["etcd_snapshot"])
    assert chosen == {"phases": ["kubernetes"], "node_roles": [], "kubernetes_roles": ["kubernetes_control_plane"],
                      # the role kubernetes_control_plane itself does not run, only the etcd_snapshot role's task
                      "skipped_roles": list(inventory_check.NODE_ROLES) + list(inventory_check.KUBERNETES_ROLES)}
    hostvars, groups = inventory()
    groups["kube_control_plane"] = []
    problems = inventory_check.inventory_problems(hostvars, groups, **chosen)
    assert any(p.startswith("group kube_control_plane is empty") for p in problems), problems
    # gpufleet_kubernetes_roles without the control plane: the snapshot task does not run either
    chosen = run_selection.tag_selection(list(ALL), run_tags=["etcd_snapshot"], kubernetes_roles=["kubernetes_cni"])
    assert chosen["phases"] == [] and chosen["kubernetes_roles"] == []


def test_etcd_snapshot_checks_only_the_control_plane():
    # issue 42 F3: --tags etcd_snapshot touches only the control plane; a GPU node's driver variable
    # (nvidia_driver_kernel_modules: opn) is not this run's to refuse, the etcd_snapshot role's are
    hostvars, groups = inventory({"gpu1": {"nvidia_driver_kernel_modules": "opn", "kubernetes_worker_x": 1},
                                  "cp1": {"kubernetes_control_plane_bind_port": "six"}})
    chosen = filters.selected_phases(list(ALL), ("etcd_snapshot",), ())
    assert filters.inventory_problems(hostvars, groups, **chosen) == []
    hostvars["cp1"]["etcd_snapshot_keep"] = "seven"
    hostvars["cp1"]["etcd_snapshot_kep"] = 7
    problems = filters.inventory_problems(hostvars, groups, **chosen)
    assert len(problems) == 2 and all("etcd_snapshot_" in p for p in problems), problems
    # the whole run, --tags nvidia_driver and an entry point without phases (rolling_upgrade.yml runs the
    # driver role) still check the driver's value
    for phases, tags in ((ALL, None), (ALL, ["nvidia_driver"]), ([], ["etcd_snapshot"])):
        chosen = filters.selected_phases(list(phases), tags, None)
        problems = filters.inventory_problems(hostvars, groups, **chosen)
        assert any(p.startswith("nvidia_driver_kernel_modules") or "nvidia_driver_kernel_modules" in p
                   for p in problems), (phases, tags, problems)


def test_etcd_snapshot_without_kube_groups_names_the_control_plane_only():
    # issue 42: an inventory without kube groups is refused under --tags etcd_snapshot for what that
    # run needs (a kube_control_plane host), not for kube_node or gpu_nodes outside it
    hostvars, _ = inventory()
    groups = {"all": ["cp1", "gpu1", "gpu2"], "gpu_nodes": ["gpu1", "gpu2"], "rdma_nodes": ["gpu1", "gpu2"]}
    chosen = filters.selected_phases(list(ALL), ["etcd_snapshot"], [])
    problems = filters.inventory_problems(hostvars, groups, **chosen)
    assert len(problems) == 1 and problems[0].startswith("group kube_control_plane is empty"), problems
    # --tags kubernetes_control_plane runs on kube_control_plane only, too; the whole kubernetes phase does not
    chosen = filters.selected_phases(list(ALL), ["kubernetes_control_plane"], [])
    assert len(filters.inventory_problems(hostvars, groups, **chosen)) == 1
    chosen = filters.selected_phases(list(ALL), ["kubernetes"], [])
    problems = filters.inventory_problems(hostvars, groups, **chosen)
    assert any(p.startswith("group kube_node is empty") for p in problems), problems
    assert any(p.startswith("group gpu_nodes has hosts outside kube_node") for p in problems), problems


TAG_UNIVERSE = sorted(set(ALL) | set(inventory_check.NODE_ROLES) | set(inventory_check.KUBERNETES_ROLES)
                      | {"etcd_snapshot", "certs", "node_health_agent", "all", "tagged", "untagged", "always"})


@settings(max_examples=200, deadline=None)
@given(run=st.one_of(st.none(), st.lists(st.sampled_from(TAG_UNIVERSE), max_size=4)),
       skip=st.lists(st.sampled_from(TAG_UNIVERSE), max_size=3),
       phases=st.lists(st.sampled_from(ALL), unique=True),
       node_roles=st.one_of(st.none(), st.lists(st.sampled_from(inventory_check.NODE_ROLES), unique=True)))
def test_a_role_variable_is_checked_exactly_when_its_role_can_run(run, skip, phases, node_roles):
    # the driver's value is refused when the node phase runs nvidia_driver, or when the entry point has no
    # node phase at all (another playbook, e.g. rolling_upgrade.yml, may run the role); never otherwise
    hostvars, groups = inventory({"gpu1": {"nvidia_driver_kernel_modules": "opn"}})
    chosen = run_selection.tag_selection(list(phases), node_roles=node_roles, run_tags=run, skip_tags=skip)
    assert set(chosen["skipped_roles"]) <= set(inventory_check.NODE_ROLES) | set(inventory_check.KUBERNETES_ROLES) \
        | {"etcd_snapshot"}
    assert not set(chosen["skipped_roles"]) & set(chosen["node_roles"] if "node" in chosen["phases"] else [])
    problems = inventory_check.inventory_problems(hostvars, groups, **chosen)
    driver_runs = "node" in chosen["phases"] and "nvidia_driver" in chosen["node_roles"]
    checked = any("nvidia_driver_kernel_modules" in p for p in problems)
    assert checked == (driver_runs or "node" not in phases), (chosen, problems)


def _play_tags(path):
    """Every tag set a task of ``path`` runs under (play tags + block/task tags; import_playbook skipped)."""
    with open(os.path.join(REPO, "playbooks", path)) as handle:
        plays = yaml.safe_load(handle)
    out = set()

    def walk(tasks, inherited):
        for task in tasks or []:
            tags = inherited | set(task.get("tags") or [])
            for key in ("block", "rescue", "always"):
                if key in task:
                    walk(task[key], tags)
            if not any(key in task for key in ("block", "rescue", "always")):
                out.add(frozenset(tags))

    for play in plays:
        if "import_playbook" not in play:
            walk(play.get("tasks"), set(play.get("tags") or []))
    return out


@pytest.mark.parametrize("path, phase", [("node.yml", "node"), ("kubernetes.yml", "kubernetes"),
                                         ("validate.yml", "validate")])
def test_every_tag_of_a_phase_selects_it(path, phase):
    # --tags <any tag a task of the phase carries> keeps the phase, so the inventory check covers what
    # that task needs (--tags etcd_snapshot once left the kubernetes phase out, issue 42)
    for tags in _play_tags(path):
        for tag in sorted(tags - {"always"}):
            chosen = run_selection.tag_selection(list(ALL), run_tags=[tag])
            # (a tag that is a phase of its own selects that one: validate.yml's report play, --tags report)
            assert phase in chosen["phases"] or tag in chosen["phases"], (path, tag, sorted(tags), chosen)


def test_tags_validate_needs_no_kube_group():
    hostvars, groups = inventory()
    groups["kube_control_plane"] = []
    groups["kube_node"] = []
    chosen = filters.selected_phases(list(ALL), ("validate",), ())  # tuples, as ansible-core 2.19 passes them
    assert chosen["phases"] == ["validate", "report"]
    assert filters.inventory_problems(hostvars, groups, phases=chosen["phases"], node_roles=chosen["node_roles"],
                                      kubernetes_roles=chosen["kubernetes_roles"]) == []
    # --tags nvidia_driver: the node phase needs kube_node, the kubernetes phase is not run
    chosen = filters.selected_phases(list(ALL), ["nvidia_driver"], [])
    problems = filters.inventory_problems(hostvars, groups, phases=chosen["phases"], node_roles=chosen["node_roles"],
                                          kubernetes_roles=chosen["kubernetes_roles"])
    assert problems[0].startswith("group kube_node is empty")
    assert not any("kube_control_plane" in p for p in problems), problems


def test_mlnx_ofed_checksum_only_when_rdma_stack_runs():
    hostvars, groups = inventory({"gpu2": {"rdma_stack_source": "mlnx_ofed"}})
    chosen = run_selection.tag_selection(list(ALL), run_tags=["nvidia_driver"])
    assert inventory_check.inventory_problems(hostvars, groups, **chosen) == []


def test_more_tier_and_site_types():
    hostvars, groups = inventory({"gpu1": {"gpufleet_kubernetes_version": 1.36, "gpufleet_validate_fail_on": "error",
                                           "gpufleet_validate_gpu": "yes", "gpufleet_skip_converged": "nope"}})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert sorted(p.split(" must ")[0] for p in problems) == [
        "gpufleet_kubernetes_version", "gpufleet_skip_converged", "gpufleet_validate_fail_on", "gpufleet_validate_gpu"]
    # -e name=false arrives as a string
    hostvars, groups = inventory(everywhere(gpufleet_skip_converged="false", gpufleet_kubernetes_version="1.35"))
    assert inventory_check.inventory_problems(hostvars, groups) == []
    # X.Y.Z or X.Y, as the message says: a "v" prefix is refused with the version meant
    hostvars, groups = inventory(everywhere(gpufleet_kubernetes_version="v1.35"))
    assert [p.split(" [")[0] for p in inventory_check.inventory_problems(hostvars, groups)] == [
        "gpufleet_kubernetes_version must be a Kubernetes version X.Y.Z or X.Y as a string (e.g. \"1.37.1\"), "
        "got 'v1.35' (did you mean '1.35'?)"]


def test_a_problem_of_every_host_says_all():
    hosts = tuple("n%02d" % i for i in range(8))
    hostvars, groups = inventory(dict((h, {"gpufleet_zzz": 1}) for h in hosts), hosts=hosts)
    (problem,) = inventory_check.inventory_problems(hostvars, groups)
    assert problem.endswith("[all 8 hosts: n00, n01, n02 ...]"), problem


def test_family_options_are_named_by_the_inventory_variable():
    hostvars, groups = inventory({"gpu1": {
        "gpufleet_validate_gpu": {"require_persistence_mode": "maybe", "requre_ecc": True, "xid_source": "none"},
        "gpufleet_validate_rdma": {"link_layer": "ib"},
        "gpufleet_validate_tuning": False,
    }})
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert sorted(problems) == [
        "gpufleet_validate_gpu.require_persistence_mode must be of type bool (node_validate option "
        "gpu.require_persistence_mode), got 'maybe' [gpu1]",
        "gpufleet_validate_rdma.link_layer: value must be one of: any, InfiniBand, Ethernet, got: ib "
        "(node_validate option rdma.link_layer) [gpu1]",
        "unknown option gpufleet_validate_gpu.requre_ecc (did you mean gpufleet_validate_gpu.require_ecc?) [gpu1]"]


# --- ASCII-strict numbers, never an exception (issue 41) ------------------------------------------
# "²".isdigit() is true and int("²") raises; "٣" (Arabic-Indic three) and "８" (fullwidth) are
# digits int() and float() accept. An inventory value is ASCII or it is refused, by name.
NON_ASCII_DIGITS = ["²", "٣", "８", "8\u0660", "１２"]
WHOLE_NUMBERS = ["gpufleet_gpu_count", "gpufleet_expected_hcas", "gpufleet_hugepages_2m", "gpufleet_hugepages_1g",
                 "gpufleet_cert_warn_days"]


@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
@pytest.mark.parametrize("name", WHOLE_NUMBERS + ["gpufleet_min_rate_gbps", "gpufleet_status_max_age",
                                                  "gpufleet_control_plane_vip_port"])
def test_a_non_ascii_digit_is_refused_by_name_and_the_other_problems_still_reported(name, digits):
    values = {name: digits, "gpufleet_link_layer": "ib"}
    if name == "gpufleet_control_plane_vip_port":
        values.update(gpufleet_control_plane_ha="haproxy_keepalived", gpufleet_control_plane_vip="10.0.0.10")
    hostvars, groups = inventory(everywhere(**values))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith(name + " must be") and repr(digits) in p for p in problems), problems
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


@pytest.mark.parametrize("name, value", [
    ("gpufleet_min_rate_gbps", "nan"), ("gpufleet_min_rate_gbps", "inf"), ("gpufleet_min_rate_gbps", float("inf")),
    ("gpufleet_status_max_age", "1e999"), ("gpufleet_status_max_age", "1_000"),
    ("gpufleet_driver_branch", "٥٨٠"), ("gpufleet_kubernetes_version", "١.٣٥.٤"),
])
def test_numbers_and_versions_are_ascii_and_finite(name, value):
    hostvars, groups = inventory(everywhere(**{name: value}))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith(name + " must be") for p in problems), problems


def test_a_role_port_with_a_non_ascii_digit_is_a_problem_not_a_crash():
    hostvars, groups = inventory(everywhere(gpufleet_control_plane_ha="haproxy_keepalived",
                                            gpufleet_control_plane_vip="10.0.0.10",
                                            kubernetes_control_plane_bind_port="²"))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any("kubernetes_control_plane_bind_port" in p for p in problems), problems


def test_a_remediation_policy_that_crashes_its_checker_is_a_problem_naming_it():
    hostvars, groups = inventory(everywhere(gpufleet_remediation={"burn_in": "x"}))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith("gpufleet_remediation") for p in problems), problems


def test_validate_options_with_keys_of_mixed_types_are_reported():
    hostvars, groups = inventory(everywhere(gpufleet_validate_gpu={1: True, "require_ecc": True}))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(p.startswith("unknown option gpufleet_validate_gpu.1") for p in problems), problems


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
              st.text(max_size=12), st.sampled_from(NON_ASCII_DIGITS + ["nan", "inf", "-1", "0", "10%", "1e999",
                                                                        "0.0.0.0", "224.0.0.18", "10.0.0.10"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 3)), inner, max_size=3)),
    max_leaves=8)
CHECKED_NAMES = sorted(TIER) + ["kubernetes_control_plane_bind_port", "kubernetes_control_plane_endpoint",
                                "rdma_stack_source", "gpudirect_mode", "nvidia_driver_branch"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(CHECKED_NAMES), JSON_VALUES, min_size=1, max_size=3))
def test_any_inventory_value_is_problems_or_ok_never_an_exception(values):
    hostvars, groups = inventory(everywhere(**values))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    # the good hosts' variables are still checked: a bad value is added to what is found, never instead
    hostvars["gpu1"]["gpufleet_link_layer"] = "ib"
    assert any(p.startswith("gpufleet_link_layer must be") for p in inventory_check.inventory_problems(hostvars, groups))


def test_a_check_that_fails_is_one_problem_naming_it_and_the_others_are_still_reported(monkeypatch):
    def broken(variables):
        raise TypeError("unhashable type: 'dict'")
    monkeypatch.setattr(inventory_check, "renamed_problems", broken)
    hostvars, groups = inventory(everywhere(gpufleet_link_layer="ib"))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert "renamed variables could not be checked: TypeError: unhashable type: 'dict' (a value of an unexpected " \
           "type or form among them) [cp1, gpu1, gpu2]" in problems
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


def test_a_mig_layout_with_a_number_as_key_is_a_problem_not_a_crash():
    # found by the test above: module_utils/gpu/mig.py layout_errors joins the unknown keys as strings
    hostvars, groups = inventory(everywhere(gpufleet_mig_layout=[{0: None}], gpufleet_link_layer="ib"))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any("compatibility" in p or "gpufleet_mig_layout" in p for p in problems), problems
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems
