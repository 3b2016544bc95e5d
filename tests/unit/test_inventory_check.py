"""The inventory check of playbooks/site.yml (plugins/plugin_utils/inventory_check.py): every
problem is listed at once; each check finds its problem and stays quiet on a good inventory."""

import glob
import os
import re

import pytest
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.filter import compatibility as filters
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check
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


def inventory(overrides=None, hosts=("cp1", "gpu1", "gpu2")):
    """hostvars and groups of a small site: one control plane, two GPU+RDMA nodes."""
    hostvars = {h: dict(GOOD_VARS, inventory_hostname=h, **(overrides or {}).get(h, {})) for h in hosts}
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
    assert len(problems) == 5, problems
    assert problems[0].startswith("group gpu_nodes has hosts outside kube_node (stray)")


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
with open(os.path.join(REPO, "plugins", "module_utils", "agent_publish.py")) as _handle:  # prometheus_text
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
