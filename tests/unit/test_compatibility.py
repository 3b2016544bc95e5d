"""The compatibility matrix (plugins/plugin_utils/compatibility.yml): version comparison, every
rule refusing its impossible combination and accepting a possible one, facts read from variables
and role defaults, the filters, and docs/compatibility.md generated from the data."""

import copy
import importlib.util
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import REPO

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter import compatibility as filters
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

MATRIX = compatibility.load_matrix()


@pytest.mark.parametrize("text, parsed", [
    ("580", (580,)),
    ("580.95.05", (580, 95, 5)),
    ("1.36", (1, 36)),
    ("v3.32.0", (3, 32, 0)),
    ("2.1.4-1", (2, 1, 4)),
    ("6.1.0-27-amd64", (6, 1, 0)),
    ("1:1.7.24~ds1-1", (1, 7, 24)),
    ("5.15.0-1063-nvidia", (5, 15, 0)),
    # field 3 of `containerd --version`: upstream 2.x build, Debian 12's package (build machine)
    ("v2.1.4", (2, 1, 4)),
    ("1.6.20~ds1", (1, 6, 20)),
    (580, (580,)),
    (1.36, (1, 36)),
])
def test_parse_version(text, parsed):
    assert compatibility.parse_version(text) == parsed


@pytest.mark.parametrize("text", ["latest", "", None, True, "x1.2"])
def test_parse_version_refuses_non_versions(text):
    with pytest.raises(compatibility.MatrixError, match="not a version"):
        compatibility.parse_version(text)


@pytest.mark.parametrize("left, right, result", [
    ("580", "580.95.05", -1),
    ("1.36", "1.36.0", 0),
    ("1.35.4", "1.36", -1),
    ("v3.32.0", "3.28.2", 1),
    ("2.1.4-1", "2.0", 1),
    ("1.7.28-1", "2.0", -1),
    ("6.1.0-27-amd64", "5.12", 1),
    ("5.10.0-28-amd64", "5.12", -1),
    ("1.17.8-1", "1.17.4", 1),
    ("1.17.3-1", "1.17.4", -1),
])
def test_compare_versions(left, right, result):
    assert compatibility.compare_versions(left, right) == result


# Rule by rule: (facts refused, facts accepted). Every rule of the matrix must be listed.
CASES = {
    "open-modules-driver-branch": (
        {"kernel_modules": "open", "driver": "470.256.02"},
        {"kernel_modules": "open", "driver": "515"}),
    "open-modules-turing": (
        {"kernel_modules": "open", "gpu_device_ids": ["0x2330", "0x1db4"]},  # H100 + V100
        {"kernel_modules": "open", "gpu_device_ids": ["0x1e02", "0x2330"]}),  # TITAN RTX (Turing), H100
    "blackwell-open-modules": (
        {"gpu_device_ids": ["0x2901"] * 8, "kernel_modules": "proprietary"},  # B200
        {"gpu_device_ids": ["0x2330"] * 8, "kernel_modules": "proprietary"}),  # H100 may stay proprietary
    "grace-hopper-open-modules": (
        {"gpu_device_ids": ["0x2342"], "kernel_modules": "proprietary"},
        {"gpu_device_ids": ["0x2342"], "kernel_modules": "open"}),
    "dmabuf-open-modules": (
        {"gpudirect_mode": "dmabuf", "kernel_modules": "proprietary"},
        {"gpudirect_mode": "dmabuf", "kernel_modules": "open"}),
    "dmabuf-kernel": (
        {"gpudirect_mode": "dmabuf", "kernel": "5.10.0-28-amd64"},
        {"gpudirect_mode": "dmabuf", "kernel": "6.1.0-27-amd64"}),
    "peermem-driver-branch": (
        {"gpudirect_mode": "peermem", "driver": "460.106.00"},
        {"gpudirect_mode": "peermem", "driver": "470"}),
    "kubernetes-containerd-2": (
        {"kubernetes": "1.36.1", "containerd": "1.7.28-1"},
        {"kubernetes": "1.35.4", "containerd": "1.7.28-1"}),
    "kubernetes-cgroup-v2": (
        {"kubernetes": "v1.35.0", "cgroup": "v1"},
        {"kubernetes": "1.34.3", "cgroup": "v1"}),
    "containerd-2-toolkit": (
        {"containerd": "2.1.4-1", "container_toolkit": "1.17.3-1"},
        {"containerd": "2.1.4-1", "container_toolkit": "1.19.0-1"}),
    # config versions per containerd line: 2 on 1.x, 2-3 on 2.0-2.2, 2-4 on 2.3+
    "containerd-config-v3": (
        {"containerd_config_version": 3, "containerd": "1.7.28-1"},
        {"containerd_config_version": 3, "containerd": "2.0.0"}),
    "containerd-config-v4": (
        {"containerd_config_version": "4", "containerd": "2.2.1-1"},
        {"containerd_config_version": "4", "containerd": "2.3.0"}),
    # GPU architecture (from the PCI device id) -> driver branch
    "volta-last-driver-branch": (
        {"gpu_device_ids": ["0x1db1"], "driver": "595"},  # V100 SXM2 on the 595 branch
        {"gpu_device_ids": ["0x1db1"], "driver": "580.95.05"}),
    "volta-driver-branch": (
        {"gpu_device_ids": ["0x1db4"], "driver": "375.26"},
        {"gpu_device_ids": ["0x1db4"], "driver": "384.81"}),
    "turing-driver-branch": (
        {"gpu_device_ids": ["0x1eb8"], "driver": "396"},  # T4
        {"gpu_device_ids": ["0x1eb8"], "driver": "410"}),
    "ampere-driver-branch": (
        {"gpu_device_ids": ["0x20b5"], "driver": "440.33"},  # A100 80GB PCIe
        {"gpu_device_ids": ["0x20b5"], "driver": "450.36.06"}),
    "hopper-driver-branch": (
        {"gpu_device_ids": ["0x2330"] * 8, "driver": "520"},  # H100 80GB HBM3
        {"gpu_device_ids": ["0x2330"] * 8, "driver": "525"}),
    "grace-hopper-driver-branch": (
        {"gpu_device_ids": ["0x2342"], "driver": "530"},
        {"gpu_device_ids": ["0x2342"], "driver": "535"}),
    "blackwell-driver-branch": (
        {"gpu_device_ids": ["0x2901"] * 8, "driver": "550"},  # B200
        {"gpu_device_ids": ["0x2901"] * 8, "driver": "570"}),
    "blackwell-ultra-driver-branch": (
        {"gpu_device_ids": ["0x3182"] * 8, "driver": "575"},  # B300 SXM6 AC
        {"gpu_device_ids": ["0x3182"] * 8, "driver": "580.82.07"}),
    # a drop-in (ours or another tool's) in another version than the root config
    "containerd-dropin-root-version": (
        {"containerd_config_version": "2", "containerd_dropin_versions": ["2", "4"]},  # nvidia-ctk's v4 next to a v2 root
        {"containerd_config_version": "3", "containerd_dropin_versions": ["3", "3"]}),
    # Kubernetes minors gpufleet knows, one minor per upgrade (installed kubelet/kubeadm)
    "kubernetes-oldest-minor": (
        {"kubernetes": "1.32.9"},
        {"kubernetes": "1.33.0"}),
    "kubernetes-newest-minor": (
        {"kubernetes": "1.38.0"},
        {"kubernetes": "1.37.1"}),
    "kubelet-one-minor-upgrade": (
        {"kubernetes": "1.37.1", "kubelet": "v1.35.4"},  # two minors in one step
        {"kubernetes": "1.37.1", "kubelet": "v1.36.4"}),
    "kubeadm-one-minor-upgrade": (
        {"kubernetes": "1.36.4", "kubeadm": "v1.37.1"},  # a kubeadm newer than the cluster
        {"kubernetes": "1.36.4", "kubeadm": "v1.36.4"}),
    # device plugin or DRA driver for nvidia.com/gpu
    "gpu-allocation-choice": (
        {"gpu_allocation": "mig"},
        {"gpu_allocation": "dra"}),
    "dra-resource-api-v1": (
        {"gpu_allocation": "dra", "kubernetes": "1.33.5"},
        {"gpu_allocation": "device_plugin", "kubernetes": "1.33.5"}),
    "dra-extended-resource": (
        {"gpu_allocation": "dra", "kubernetes": "1.36.4"},
        {"gpu_allocation": "dra", "kubernetes": "1.37.1"}),
    "dra-without-device-plugin": (
        {"gpu_allocation": "dra", "nvidia_device_plugin": True},
        {"gpu_allocation": "dra", "nvidia_device_plugin": False}),
    # the DRA driver kubernetes_addons deploys (kubernetes_addons_nvidia_dra_driver)
    "nvidia-dra-driver-without-device-plugin": (
        {"nvidia_dra_driver": True, "nvidia_device_plugin": True},
        {"nvidia_dra_driver": True, "nvidia_device_plugin": False}),
    "nvidia-dra-driver-allocation": (
        {"nvidia_dra_driver": True, "gpu_allocation": "device_plugin"},
        {"nvidia_dra_driver": True, "gpu_allocation": "dra"}),
    "dra-mig-taints-node": (
        {"gpu_allocation": "dra", "mig_layout": "all-1g.10gb", "device_failures_taint_node": False},
        {"gpu_allocation": "dra", "mig_layout": "all-1g.10gb", "device_failures_taint_node": True}),
    # GPU feature discovery and node-feature-discovery (kubernetes_addons)
    "gfd-needs-nfd": (
        {"gpu_feature_discovery": True, "node_feature_discovery": False},
        {"gpu_feature_discovery": True, "node_feature_discovery": "external"}),
    "gfd-in-device-plugin-image": (
        {"gpu_feature_discovery": True, "nvidia_device_plugin_version": "v0.14.5"},
        {"gpu_feature_discovery": True, "nvidia_device_plugin_version": "v0.19.3"}),
    "nfd-supported-release": (
        {"node_feature_discovery": True, "node_feature_discovery_version": "v0.17.4"},
        {"node_feature_discovery": True, "node_feature_discovery_version": "v0.18.3"}),
    # MIG layout (gpufleet_mig_layout) and the device plugin's MIG strategy (more in test_mig.py)
    "mig-layout-resolves": ({"mig_layout": "no-such-config"}, {"mig_layout": "all-1g.10gb"}),
    "mig-strategy-single-uniform": (
        {"nvidia_device_plugin": True, "mig_strategy": "single", "mig_layout": "all-balanced-80gb"},
        {"nvidia_device_plugin": True, "mig_strategy": "single", "mig_layout": "all-3g.40gb"}),
    "mig-strategy-for-mig": (
        {"nvidia_device_plugin": True, "mig_strategy": "none", "mig_layout": "all-1g.10gb"},
        {"nvidia_device_plugin": True, "mig_strategy": "mixed", "mig_layout": "all-1g.10gb"}),
    # DCGM 3.x end of life (NVSentinel drops it 2026-11-30): the DCGM inside the exporter image
    "dcgm-3-end-of-support": (
        {"dcgm_exporter": True, "dcgm_exporter_image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"},
        {"dcgm_exporter": True, "dcgm_exporter_image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.1-4.8.4-distroless"}),
    # R595 on AWS P6e Grace-Blackwell with EFA (0x2941: GB200)
    "efa-grace-blackwell-driver-580": (
        {"efa": "present", "cpu_architecture": "aarch64", "gpu_device_ids": ["0x2941"], "driver": "595"},
        {"efa": "present", "cpu_architecture": "aarch64", "gpu_device_ids": ["0x2941"], "driver": "580.173.02"}),
}


def test_every_rule_has_cases():
    assert sorted(CASES) == sorted(rule["id"] for rule in MATRIX["rules"])


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_refuses(rule_id):
    refused, _ = CASES[rule_id]
    problems = compatibility.evaluate(refused)
    assert [p["id"] for p in problems] == [rule_id]
    rule = next(r for r in MATRIX["rules"] if r["id"] == rule_id)
    message = problems[0]["message"]
    # both sides named with their values, the reason and the first source
    for fact, value in refused.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        assert "%s=%s" % (fact, shown) in message, message
    assert " ".join(rule["reason"].split()) in message
    assert message.endswith("(source: %s)" % rule["sources"][0])
    assert problems[0]["sources"] == rule["sources"]


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_accepts(rule_id):
    _, accepted = CASES[rule_id]
    assert compatibility.evaluate(accepted) == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_not_evaluated_without_its_facts(rule_id):
    refused, _ = CASES[rule_id]
    for fact in refused:
        partial = {k: v for k, v in refused.items() if k != fact}
        assert compatibility.evaluate(partial) == []


def test_message_names_the_origin_of_each_side():
    facts = {"gpudirect_mode": {"value": "dmabuf", "origin": "gpudirect_mode"},
             "kernel": {"value": "5.4.0-150-generic", "origin": "running kernel"}}
    (problem,) = compatibility.evaluate(facts)
    assert problem["message"].startswith(
        "dmabuf-kernel: gpudirect_mode=dmabuf (from gpudirect_mode) requires kernel >= 5.12, "
        "but kernel=5.4.0-150-generic (from running kernel). ")


def test_uncomparable_value_is_a_problem():
    (problem,) = compatibility.evaluate({"kernel_modules": "open", "driver": "latest"})
    assert problem["id"] == "open-modules-driver-branch"
    assert "cannot compare" in problem["message"] and "'latest'" in problem["message"]


def test_several_rules_at_once():
    facts = {"gpudirect_mode": "dmabuf", "kernel_modules": "proprietary", "kernel": "5.4.0-1-generic",
             "gpu_device_ids": ["0x2901"]}
    assert sorted(p["id"] for p in compatibility.evaluate(facts)) == [
        "blackwell-open-modules", "dmabuf-kernel", "dmabuf-open-modules"]


def test_node_feature_discovery_follows_gfd_unless_set():
    """kubernetes_addons_node_feature_discovery defaults to GFD's switch (a templated role default); GFD
    on with NFD off is refused, external (the site's own NFD) is accepted, and NFD's own rules apply
    only to an NFD gpufleet deploys."""
    def problems(variables):
        return sorted(p["id"] for p in compatibility.evaluate(compatibility.facts_from_vars(variables)))

    facts = compatibility.facts_from_vars({})
    assert facts["node_feature_discovery"] == {
        "value": True, "origin": "kubernetes_addons_node_feature_discovery, default of role kubernetes_addons"}
    assert compatibility.facts_from_vars({"kubernetes_addons_gpu_feature_discovery": False})[
        "node_feature_discovery"]["value"] is False
    assert problems({}) == []
    assert problems({"kubernetes_addons_node_feature_discovery": False}) == ["gfd-needs-nfd"]
    assert problems({"kubernetes_addons_node_feature_discovery": "false"}) == ["gfd-needs-nfd"]
    assert problems({"kubernetes_addons_gpu_feature_discovery": False,
                     "kubernetes_addons_node_feature_discovery": False}) == []
    old = {"kubernetes_addons_node_feature_discovery_version": "v0.16.6"}
    assert problems(old) == ["nfd-supported-release"]
    assert problems(dict(old, kubernetes_addons_node_feature_discovery="external")) == []
    assert problems({"kubernetes_addons_nvidia_device_plugin_version": "v0.14.5"}) == ["gfd-in-device-plugin-image"]


def test_role_defaults_are_compatible():
    """The collection's own defaults (on a Turing+ node with a current kernel, cgroup v2) pass."""
    facts = compatibility.facts_from_vars({})
    facts.update({"kernel": "6.1.0-27-amd64", "cgroup": "v2", "gpu_device_ids": ["0x2330"]})
    assert compatibility.evaluate(facts) == []


def test_facts_from_vars_first_variable_set_wins_else_role_default():
    facts = compatibility.facts_from_vars({"nvidia_driver_version": "", "nvidia_driver_branch": "535",
                                           "gpufleet_kubernetes_version": "1.33.2"})
    assert facts["driver"] == {"value": "535", "origin": "nvidia_driver_branch"}
    assert facts["kubernetes"] == {"value": "1.33.2", "origin": "gpufleet_kubernetes_version"}
    # unset: the tier default
    assert compatibility.facts_from_vars({})["kubernetes"] == {
        "value": TIER["gpufleet_kubernetes_version"][0], "origin": "gpufleet_kubernetes_version, tier default"}
    assert facts["kernel_modules"]["origin"] == "nvidia_driver_kernel_modules, default of role nvidia_driver"
    assert facts["kernel_modules"]["value"] == compatibility.role_default("nvidia_driver",
                                                                          "nvidia_driver_kernel_modules")
    facts = compatibility.facts_from_vars({"nvidia_driver_version": "580.95.05", "nvidia_driver_branch": "535"})
    assert facts["driver"] == {"value": "580.95.05", "origin": "nvidia_driver_version"}
    # node facts are never read from variables
    assert "kernel" not in compatibility.facts_from_vars({"kernel": "5.4"})


def test_role_default_skips_templates_and_missing(tmp_path):
    defaults = tmp_path / "roles" / "r" / "defaults"
    defaults.mkdir(parents=True)
    (defaults / "main.yml").write_text("a: '1.2'\nb: \"{{ x }}\"\nc: ''\n")
    assert compatibility.role_default("r", "a", root=str(tmp_path)) == "1.2"
    assert compatibility.role_default("r", "b", root=str(tmp_path)) is None
    assert compatibility.role_default("r", "c", root=str(tmp_path)) is None
    assert compatibility.role_default("r", "d", root=str(tmp_path)) is None
    assert compatibility.role_default("missing", "a", root=str(tmp_path)) is None


@pytest.mark.parametrize("mutate, error", [
    (lambda m: m["rules"].append(copy.deepcopy(m["rules"][0])), "unique id"),
    (lambda m: m["rules"][0].pop("sources"), "needs sources"),
    (lambda m: m["rules"][0].update(sources=["http://example.com"]), "not an https URL"),
    (lambda m: m["rules"][0]["when"].update(nonsense={"eq": 1}), "unknown fact nonsense"),
    (lambda m: m["rules"][0]["require"].update(driver={"version_gt": "1"}), "unknown operator"),
    (lambda m: m["rules"][0]["require"].update(driver={"version_ge": "abc"}), "not a version"),
    (lambda m: m["rules"][0]["require"].update(driver={"in": "580"}), "needs a list"),
    (lambda m: m["facts"]["driver"].pop("description"), "needs a description"),
    (lambda m: m["facts"]["driver"].update(default={"role": "x"}), "default must be"),
])
def test_validate_matrix_names_the_mistake(mutate, error):
    broken = copy.deepcopy(MATRIX)
    mutate(broken)
    with pytest.raises(compatibility.MatrixError, match=error):
        compatibility.validate_matrix(broken)


def test_filters():
    problems = filters.compatibility_problems({"gpudirect_mode": "dmabuf", "kernel": "5.4.0"})
    assert [p["id"] for p in problems] == ["dmabuf-kernel"]
    with pytest.raises(AnsibleFilterError, match="unknown fact"):
        filters.compatibility_problems({"kernal": "5.4"})
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        filters.compatibility_problems(["kernel"])
    assert filters.compatibility_facts({"gpudirect_mode": "dmabuf"})["gpudirect_mode"]["value"] == "dmabuf"
    with pytest.raises(AnsibleFilterError, match="host's variables"):
        filters.compatibility_facts("nope")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_compat_doc", os.path.join(REPO, "scripts", "gen-compat-doc.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_doc_is_generated_from_the_matrix():
    generator = _generator()
    with open(os.path.join(REPO, "docs", "compatibility.md")) as handle:
        committed = handle.read()
    assert committed == generator.render(MATRIX), "run: python3 scripts/gen-compat-doc.py"


def test_doc_lists_every_rule_and_source():
    text = _generator().render(MATRIX)
    for rule in MATRIX["rules"]:
        assert "`%s`" % rule["id"] in text
        for url in rule["sources"]:
            assert "<%s>" % url in text


def test_gpu_allocation_chooses_the_device_plugin_or_the_dra_driver():
    """kubernetes_addons' defaults follow the tier's gpufleet_gpu_allocation (read from its
    gpufleet_tier lookup without a plugin loader): one allocator of nvidia.com/gpu either way."""
    def chosen(variables):
        facts = compatibility.facts_from_vars(variables)
        return facts["nvidia_device_plugin"]["value"], facts["nvidia_dra_driver"]["value"]

    assert chosen({}) == (True, False)
    assert chosen({"gpufleet_gpu_allocation": "device_plugin"}) == (True, False)
    assert chosen({"gpufleet_gpu_allocation": "dra"}) == (False, True)
    facts = compatibility.facts_from_vars({"gpufleet_gpu_allocation": "dra", "gpufleet_kubernetes_version": "1.37.1"})
    assert facts["nvidia_dra_driver"]["origin"] == "kubernetes_addons_nvidia_dra_driver, default of role kubernetes_addons"
    assert compatibility.evaluate(facts) == []
    # the device plugin turned back on beside the driver: refused, naming both rules' fix
    facts = compatibility.facts_from_vars({"gpufleet_gpu_allocation": "dra", "gpufleet_kubernetes_version": "1.37.1",
                                           "kubernetes_addons_nvidia_device_plugin": True})
    assert sorted(p["id"] for p in compatibility.evaluate(facts)) == [
        "dra-without-device-plugin", "nvidia-dra-driver-without-device-plugin"]
    # the driver without DRA allocation: the node would be tainted for one GPU
    facts = compatibility.facts_from_vars({"kubernetes_addons_nvidia_dra_driver": True,
                                           "kubernetes_addons_nvidia_device_plugin": False})
    (problem,) = compatibility.evaluate(facts)
    assert problem["id"] == "nvidia-dra-driver-allocation"
    assert "gpu_allocation=device_plugin (from gpufleet_gpu_allocation, tier default)" in problem["message"]


def test_role_value_reads_the_tier_without_the_lookup_plugin(tmp_path):
    root = tmp_path
    (root / "roles" / "r" / "defaults").mkdir(parents=True)
    (root / "roles" / "r" / "defaults" / "main.yml").write_text(
        "uses_dra: \"{{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_gpu_allocation') == 'dra' }}\"\n"
        "bad: \"{{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_no_such') }}\"\n")
    assert compatibility.role_value({}, "r", "uses_dra", root=str(root)) is False
    assert compatibility.role_value({"gpufleet_gpu_allocation": "dra"}, "r", "uses_dra", root=str(root)) is True
    with pytest.raises(compatibility.MatrixError, match="default of bad .role r.: tier gpufleet_no_such"):
        compatibility.role_value({}, "r", "bad", root=str(root))


def test_role_value_templates_a_default_with_the_hosts_values(tmp_path):
    """A checksum default that depends on the version variable (as kubernetes_cni's does)."""
    defaults = tmp_path / "roles" / "r" / "defaults"
    defaults.mkdir(parents=True)
    digest = "sha256:" + "a1" * 32
    (defaults / "main.yml").write_text(
        "ver: v3.32.1\n"
        "sum: >-\n  {{ '%s'\n     if ver == 'v3.32.1' else '' }}\n"
        "broken: \"{{ ver | no_such_filter }}\"\n" % digest)
    root = str(tmp_path)
    assert compatibility.role_value({}, "r", "sum", root=root) == digest
    assert compatibility.role_value({"ver": "v3.28.2"}, "r", "sum", root=root) == ""
    assert compatibility.role_value({"sum": "sha256:" + "b" * 64}, "r", "sum", root=root) == "sha256:" + "b" * 64
    assert compatibility.role_value({}, "r", "ver", root=root) == "v3.32.1"
    assert compatibility.role_value({}, "r", "missing", root=root) is None
    with pytest.raises(compatibility.MatrixError, match="cannot evaluate the default of broken"):
        compatibility.role_value({}, "r", "broken", root=root)


# Ids from NVIDIA/open-gpu-kernel-modules README "Compatible GPUs" (595.45.04) and the V100's.
@pytest.mark.parametrize("device_id, arch", [
    ("0x1db1", "volta"), ("0x1e02", "turing"), ("0x1eb8", "turing"), ("0x2182", "turing"),
    ("0x20b0", "ampere"), ("0x20b7", "ampere"), ("0x2236", "ampere"), ("0x2330", "hopper"),
    ("0x2331", "hopper"), ("0x2342", "hopper"), ("0x2348", "hopper"), ("0x26b9", "ada"), ("0x27b8", "ada"),
    ("0x2901", "blackwell"), ("0x2941", "blackwell"), ("0x2bb5", "blackwell"), ("0x2f04", "blackwell"),
    ("0x3182", "blackwell-ultra"), ("0x31C2", "blackwell-ultra"), ("0x1b80", None), ("0x2489", "ampere"),
])
def test_gpu_architecture_of_device_id(device_id, arch):
    assert compatibility.gpu_architecture(device_id) == arch


def test_gpu_architecture_ranges_do_not_overlap():
    ranges = sorted((int(low, 16), int(high, 16), arch["name"])
                    for arch in MATRIX["gpu_architectures"] for low, high in arch["device_ids"])
    for (_lo, high, name), (low, _hi, other) in zip(ranges, ranges[1:]):
        assert high < low, "%s overlaps %s" % (name, other)


def test_blackwell_on_driver_550_refused_naming_rule_and_fix():
    facts = {"gpu_device_ids": {"value": ["0x2901"] * 8, "origin": "gpu_facts"},
             "driver": {"value": "550", "origin": "nvidia_driver_branch"},
             "kernel_modules": {"value": "open", "origin": "nvidia_driver_kernel_modules"}}
    (problem,) = compatibility.evaluate(facts)
    assert problem["id"] == "blackwell-driver-branch"
    message = problem["message"]
    assert message.startswith("blackwell-driver-branch: gpu_architectures=blackwell (from gpu_device_ids=")
    assert "0x2901=blackwell" in message and "requires driver >= 570" in message
    assert "but driver=550 (from nvidia_driver_branch)" in message
    assert "set nvidia_driver_branch to 570 or later" in message  # the fix
    # and with the proprietary modules the open-modules rule joins it
    facts["kernel_modules"] = "proprietary"
    assert sorted(p["id"] for p in compatibility.evaluate(facts)) == [
        "blackwell-driver-branch", "blackwell-open-modules"]


def test_blackwell_ultra_needs_open_modules_too():
    facts = {"gpu_device_ids": ["0x31c2"], "driver": "580", "kernel_modules": "proprietary"}
    assert [p["id"] for p in compatibility.evaluate(facts)] == ["blackwell-open-modules"]


def test_mixed_node_every_architecture_judged():
    facts = {"gpu_device_ids": ["0x1db1", "0x2330"], "driver": "595"}  # V100 + H100 on 595
    assert [p["id"] for p in compatibility.evaluate(facts)] == ["volta-last-driver-branch"]


def test_unknown_device_id_gives_no_architecture_rule():
    assert compatibility.evaluate({"gpu_device_ids": ["0x1b80"], "driver": "300"}) == []


@pytest.mark.parametrize("containerd, config_versions", [
    ("1.6.20~ds1", [2]), ("1.7.28-1", [2]), ("2.0.0", [2, 3]), ("2.2.1-1", [2, 3]),
    ("2.3.0", [2, 3, 4]), ("v2.4.0", [2, 3, 4]),
])
def test_config_versions_each_containerd_reads(containerd, config_versions):
    for version in (2, 3, 4):
        problems = compatibility.evaluate({"containerd": containerd, "containerd_config_version": version})
        assert (problems == []) == (version in config_versions), (containerd, version, problems)


def test_config_version_rules_agree_with_the_module():
    """containerd_config.FIRST_READER (the module's refusal) and the matrix state the same lines."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.containerd_config import FIRST_READER
    for version in (3, 4):
        rule = next(r for r in MATRIX["rules"] if r["id"] == "containerd-config-v%d" % version)
        assert rule["require"]["containerd"]["version_ge"] == "%d.%d" % FIRST_READER[version]


def test_matrix_refuses_unknown_architecture_name():
    matrix = copy.deepcopy(MATRIX)
    matrix["rules"][-1]["when"] = {"gpu_architectures": {"any_in": ["rubin"]}}
    with pytest.raises(compatibility.MatrixError, match="unknown GPU architecture"):
        compatibility.validate_matrix(matrix)


def test_same_as_names_the_drop_in_and_the_root_version():
    facts = {"containerd_config_version": {"value": "2", "origin": "/etc/containerd/config.toml"},
             "containerd_dropin_versions": {"value": ["4"], "origin": "/etc/containerd/conf.d/99-nvidia.toml=4"}}
    (problem,) = compatibility.evaluate(facts)
    assert problem["id"] == "containerd-dropin-root-version"
    assert "containerd_dropin_versions=4 (from /etc/containerd/conf.d/99-nvidia.toml=4)" in problem["message"]
    assert "containerd_config_version=2 (from /etc/containerd/config.toml)" in problem["message"]
    assert "Fix: rewrite the named drop-in" in problem["message"]
    # a single drop-in given as a scalar, in the root's version
    assert compatibility.evaluate({"containerd_config_version": 4, "containerd_dropin_versions": "4"}) == []


@pytest.mark.parametrize("kubelet, ok", [
    ("v1.37.0", True), ("1.36.9", True), ("v1.35.4", False), ("v1.38.0", False), ("v2.37.0", False)])
def test_minor_skew_one_minor_behind_never_ahead(kubelet, ok):
    problems = compatibility.evaluate({"kubernetes": "1.37.1", "kubelet": kubelet})
    assert ([p["id"] for p in problems] == []) is ok, problems


def test_minor_skew_needs_two_components():
    (problem,) = compatibility.evaluate({"kubernetes": "1.37.1", "kubelet": "1"})
    assert problem["id"] == "kubelet-one-minor-upgrade" and "cannot compare" in problem["message"]


@pytest.mark.parametrize("clause, error", [
    ({"same_as": ["kubernetes"]}, "same_as on kubelet needs a fact name"),
    ({"same_as": "nosuchfact"}, "names unknown fact nosuchfact"),
    ({"minor_skew": {"of": "kubernetes"}}, "minor_skew on kubelet needs"),
    ({"minor_skew": {"of": "kubernetes", "max_behind": -1}}, "minor_skew on kubelet needs"),
    ({"minor_skew": {"of": "nosuchfact", "max_behind": 1}}, "names unknown fact nosuchfact"),
])
def test_fact_comparing_clauses_are_validated(clause, error):
    matrix = {"facts": dict(MATRIX["facts"]), "rules": [{
        "id": "x", "description": "d", "when": {"kubernetes": {"version_ge": "1.0"}}, "require": {"kubelet": clause},
        "reason": "r", "sources": ["https://example.org"]}]}
    with pytest.raises(compatibility.MatrixError, match=error):
        compatibility.validate_matrix(matrix)


@pytest.mark.parametrize("facts", [
    {"driver": "595.91.07"},                                   # an exact version of the branch
    {"driver": "610"},                                         # a later branch
    {"gpu_device_ids": ["0x3182"]},                            # Blackwell Ultra (GB300)
])
def test_efa_grace_blackwell_refuses_595_and_later(facts):
    base = {"efa": "present", "cpu_architecture": "aarch64", "gpu_device_ids": ["0x2941"], "driver": "595"}
    (problem,) = compatibility.evaluate(dict(base, **facts))
    assert problem["id"] == "efa-grace-blackwell-driver-580"
    assert "Fix: set nvidia_driver_branch to \"580\"" in problem["message"]


@pytest.mark.parametrize("facts", [
    {"efa": "absent"},                    # no EFA: R595's topology check is EFA's
    {"cpu_architecture": "x86_64"},       # P6-B200 (x86, Blackwell): not the Grace topology
    {"gpu_device_ids": ["0x2330"]},       # Hopper (H100)
])
def test_efa_rule_only_on_grace_blackwell_with_efa(facts):
    base = {"efa": "present", "cpu_architecture": "aarch64", "gpu_device_ids": ["0x2941"], "driver": "595"}
    assert compatibility.evaluate(dict(base, **facts)) == []


@pytest.mark.parametrize("image, tag", [
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.7.0-4.9.0-distroless", ("4.7.0", "4.9.0")),
    ("mirror.example.com:5000/nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04", ("3.3.9", "3.6.1")),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.1", ("4.4.2", "4.7.1")),
    # upstream's short form is the DCGM version (NVIDIA/dcgm-exporter RELEASE.md, "Versioning")
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.8.4", ("4.8.4", None)),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9", ("3.3.9", None)),
    ("nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "a" * 64, None),              # a digest alone
    # a digest beside the tag: the tag is judged
    ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubi9@sha256:" + "a" * 64, ("3.3.9", "3.6.1")),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:latest@sha256:" + "a" * 64, None),
    # as the manifest holds it: YAML strips the folded scalar's trailing newline
    ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04\n", ("3.3.9", "3.6.1")),
    ("mirror.example.com:5000/dcgm-exporter", None),                            # no tag (a port is no tag)
    ("nvcr.io/nvidia/k8s/dcgm-exporter:latest", None),
    (None, None),
])
def test_dcgm_exporter_tag(image, tag):
    assert compatibility.dcgm_exporter_tag(image) == tag


def test_dcgm_exporter_image_default_read_through_the_mirror_filter():
    """The role default wraps the image in gpufleet.cluster.mirror_image (a controller filter): the
    matrix reads the upstream reference, the tag being what its rules judge; a site's own image wins."""
    facts = compatibility.facts_from_vars({"kubernetes_addons_dcgm_exporter": True, "gpufleet_registry_mirror": "m.example"})
    assert facts["dcgm_exporter_image"]["value"].startswith("nvcr.io/nvidia/k8s/dcgm-exporter:4.")
    assert compatibility.evaluate(facts) == []
    old = "m.example/nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8-3.6.0-ubuntu22.04"
    facts = compatibility.facts_from_vars({"kubernetes_addons_dcgm_exporter": True,
                                           "kubernetes_addons_dcgm_exporter_image": old})
    (problem,) = compatibility.evaluate(facts)
    assert problem["id"] == "dcgm-3-end-of-support"
    assert "dcgm_exporter_dcgm=3.3.8 (from dcgm_exporter_image=%s from kubernetes_addons_dcgm_exporter_image" % old \
        in problem["message"]
    # the exporter off: its image is not judged
    assert compatibility.evaluate(compatibility.facts_from_vars({"kubernetes_addons_dcgm_exporter_image": old})) == []


def test_derived_fact_needs_a_derivation():
    matrix = copy.deepcopy(MATRIX)
    matrix["facts"]["made_up"] = {"description": "x", "derived": "from nothing"}
    with pytest.raises(compatibility.MatrixError, match="made_up: derived, but no derivation"):
        compatibility.validate_matrix(matrix)



@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), st.none(), st.integers(), st.lists(st.text(max_size=5), max_size=2),
                 st.builds(lambda a, b, c, d: "%s/dcgm-exporter:%s-%s%s" % (a, b, c, d),
                           st.text(max_size=15), st.from_regex(r"\d{1,2}\.\d{1,2}\.\d{1,2}", fullmatch=True),
                           st.from_regex(r"\d{1,2}\.\d{1,2}\.\d{1,2}", fullmatch=True),
                           st.sampled_from(["", "-distroless", "-ubuntu22.04", ":x", "@sha256:ab"]))))
def test_dcgm_exporter_image_any_value_is_judged_or_left_unknown(image):
    """Any image value gives a (DCGM, exporter) pair of dotted versions or None (no verdict), and the
    matrix answers with at most the DCGM 3 refusal: never a crash, never a pass of a 3.x it parsed."""
    tag = compatibility.dcgm_exporter_tag(image)
    assert tag is None or (compatibility.parse_version(tag[0])
                           and (tag[1] is None or compatibility.parse_version(tag[1])))
    problems = compatibility.evaluate({"dcgm_exporter": True, "dcgm_exporter_image": image})
    assert [p["id"] for p in problems] in ([], ["dcgm-3-end-of-support"])
    assert bool(problems) == bool(tag and compatibility.compare_versions(tag[0], "4") < 0)


@pytest.mark.parametrize("image", ["x/dcgm-exporter:\u0663.3.9-3.6.1", "x/dcgm-exporter:3.3.9-3.6.1\nx",
                                   "x/dcgm-exporter:3.3.9-3.6.1@sha256:ab\n@x"])
def test_dcgm_exporter_tag_ascii_digits_whole_tag(image):
    """Found by hypothesis: Python's \\d takes any Unicode digit and $ a trailing newline; neither is
    a tag NVIDIA writes, so neither is judged (no crash in the version comparison). The blanks YAML
    strips around the value are stripped first (image_as_deployed); a line break inside stays."""
    assert compatibility.dcgm_exporter_tag(image) is None
