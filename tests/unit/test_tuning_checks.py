"""The tuning family of node_validate (module_utils/tuning/tuning_checks.py; docs/contracts.md, "Tuning family")."""

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, TUNING
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.tuning_checks import validate_tuning
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
from runners import ScriptedRunner


def tree(tmp_path, files):
    for rel, content in files.items():
        path = os.path.join(str(tmp_path), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content)
    return str(tmp_path)


HP2 = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
HP1 = "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"


def checks(root, **options):
    return validate_tuning(SysfsReader(root), TUNING.defaults(options)).as_list()


def brief(results):
    return [(c["id"], c["target"], c["status"]) for c in results]


def test_nothing_configured_adds_no_check(tmp_path):
    assert checks(tree(tmp_path, {HP2: "0\n"})) == []


def test_hugepages_as_configured_short_and_over(tmp_path):
    root = tree(tmp_path, {HP2: "4096\n", HP1: "8\n"})
    assert brief(checks(root, hugepages_2m=4096, hugepages_1g=8)) == [
        ("tuning.hugepages", "2048kB", "pass"), ("tuning.hugepages", "1048576kB", "pass")]
    short = checks(root, hugepages_2m=8192)
    assert brief(short) == [("tuning.hugepages", "2048kB", "fail")]
    assert short[0]["message"] == "4096 of 8192 configured 2048kB huge pages allocated"
    assert short[0]["observed"] == 4096 and short[0]["expected"] == 8192
    assert brief(checks(root, hugepages_1g=4)) == [("tuning.hugepages", "1048576kB", "warn")]


@pytest.mark.parametrize("content", [None, "many\n", "\n"])
def test_hugepages_unreadable_fail_closed(tmp_path, content):
    root = tree(tmp_path, {} if content is None else {HP1: content})
    result = checks(root, hugepages_1g=4)
    assert brief(result) == [("tuning.hugepages", "1048576kB", "fail")]
    assert result[0]["message"].startswith("cannot read /%s" % HP1) and result[0]["observed"] is None


def test_tuned_profile(tmp_path):
    root = tree(tmp_path, {"etc/tuned/active_profile": "network-latency\n"})
    assert brief(checks(root, tuned_profile="network-latency")) == [("tuning.tuned_profile", "node", "pass")]
    wrong = checks(root, tuned_profile="throughput-performance")
    assert wrong[0]["status"] == "fail"
    assert wrong[0]["message"] == "tuned profile 'network-latency' active, 'throughput-performance' configured"
    missing = checks(str(tmp_path / "nothing"), tuned_profile="network-latency")
    assert missing[0]["status"] == "fail" and "cannot read /etc/tuned/active_profile" in missing[0]["message"]


def test_merged_tuned_profiles_compare_by_name(tmp_path):
    root = tree(tmp_path, {"etc/tuned/active_profile": "throughput-performance  gpufleet-gpu\n"})
    assert brief(checks(root, tuned_profile="throughput-performance gpufleet-gpu")) == [
        ("tuning.tuned_profile", "node", "pass")]


@pytest.mark.parametrize("options, message", [
    ({"hugepages_2m": -1}, "option tuning.hugepages_2m: must be >= 0, got -1"),
    ({"tuned_profile": "../etc/passwd"}, "option tuning.tuned_profile: '../etc/passwd' is not a tuned profile name"),
])
def test_bad_options_are_named(tmp_path, options, message):
    payload, errors = validate_node(FAMILIES, {"root": str(tmp_path), "tuning": options}, runner=ScriptedRunner())
    assert payload is None
    assert any(error.startswith(message) for error in errors), errors


def test_node_validate_runs_the_tuning_family(tmp_path):
    root = tree(tmp_path, {HP2: "1024\n", "etc/tuned/active_profile": "balanced\n"})
    payload, errors = validate_node(FAMILIES, {"root": root, "gpu": {"enabled": False}, "rdma": {"enabled": False},
                                               "tuning": {"hugepages_2m": 2048, "tuned_profile": "balanced"}},
                                    runner=ScriptedRunner())
    assert errors == []
    assert brief(payload["checks"]) == [("tuning.hugepages", "2048kB", "fail"), ("tuning.tuned_profile", "node", "pass")]
    assert payload["healthy"] is False
    assert payload["readiness"]["tuning"]["status"] == "fail"
    assert payload["msg"].endswith("tuning: fail (tuning.hugepages[2048kB]: 1024 of 2048 configured 2048kB huge "
                                   "pages allocated)")
    off, _ = validate_node(FAMILIES, {"root": root, "tuning": {"enabled": False, "hugepages_2m": 2048}},
                           runner=ScriptedRunner())
    assert off["readiness"]["tuning"]["status"] == "off"
    assert not [c for c in off["checks"] if c["id"].startswith("tuning.")]


# kubeadm's /var/lib/kubelet/config.yaml (fields as kubeadm init writes them; trimmed) and the drop-in
# role node_tuning writes (filter kubelet_tuning_config).
KUBEADM_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
cpuManagerReconcilePeriod: 0s
staticPodPath: /etc/kubernetes/manifests
"""
DROPIN = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
reservedSystemCPUs: 0-1,56-57
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
"""
POLICY = {"cpu_manager_policy": "static", "reserved_system_cpus": "0,1,56,57",
          "topology_manager_policy": "single-numa-node", "topology_manager_scope": "pod"}


def test_kubelet_policy_from_config_and_dropins(tmp_path):
    root = tree(tmp_path, {"var/lib/kubelet/config.yaml": KUBEADM_CONFIG,
                           "var/lib/kubelet/config.d/50-gpufleet-tuning.conf": DROPIN})
    assert brief(checks(root, kubelet_policy=POLICY)) == [
        ("tuning.kubelet_policy", "cpuManagerPolicy", "pass"),
        ("tuning.kubelet_policy", "topologyManagerPolicy", "pass"),
        ("tuning.kubelet_policy", "topologyManagerScope", "pass"),
        ("tuning.kubelet_policy", "reservedSystemCPUs", "pass")]
    # a later drop-in wins (lexical order), a file without .conf is ignored
    tree(tmp_path, {"var/lib/kubelet/config.d/60-site.conf": '{"topologyManagerPolicy": "restricted"}',
                    "var/lib/kubelet/config.d/70-ignored.yaml": "cpuManagerPolicy: none\n"})
    result = [c for c in checks(root, kubelet_policy=POLICY) if c["status"] == "fail"]
    assert [(c["target"], c["message"]) for c in result] == [
        ("topologyManagerPolicy", "topologyManagerPolicy is 'restricted', 'single-numa-node' configured (read "
         "/var/lib/kubelet/config.yaml, /var/lib/kubelet/config.d/50-gpufleet-tuning.conf, "
         "/var/lib/kubelet/config.d/60-site.conf)")]


def test_kubelet_policy_defaults_when_unset(tmp_path):
    root = tree(tmp_path, {"var/lib/kubelet/config.yaml": KUBEADM_CONFIG})
    result = checks(root, kubelet_policy={"cpu_manager_policy": "static", "topology_manager_scope": "container"})
    assert brief(result) == [("tuning.kubelet_policy", "cpuManagerPolicy", "fail"),
                             ("tuning.kubelet_policy", "topologyManagerScope", "pass")]
    assert result[0]["message"].startswith("cpuManagerPolicy is 'none' (not set: the kubelet's default), 'static'")


@pytest.mark.parametrize("files, problem", [
    ({}, "cannot read /var/lib/kubelet/config.yaml"),
    ({"var/lib/kubelet/config.yaml": "- a list\n"}, "/var/lib/kubelet/config.yaml: not a mapping"),
    ({"var/lib/kubelet/config.yaml": KUBEADM_CONFIG, "var/lib/kubelet/config.d/50-x.conf": "a: [\n"},
     "/var/lib/kubelet/config.d/50-x.conf: not YAML"),
])
def test_kubelet_policy_unreadable_fails_closed(tmp_path, files, problem):
    result = checks(tree(tmp_path, files), kubelet_policy={"cpu_manager_policy": "static"})
    assert brief(result) == [("tuning.kubelet_policy", "config", "fail")]
    assert result[0]["message"].startswith("kubelet configuration unreadable: " + problem)


def test_kubelet_policy_bad_cpuset_option():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.tuning_checks import validate_options
    assert validate_options({"kubelet_policy": {"reserved_system_cpus": "0-"}}, "tuning.") == [
        "option tuning.kubelet_policy.reserved_system_cpus: '0-' is not a cpuset list such as 0-1,56-57"]
