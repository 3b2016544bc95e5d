"""kubernetes_cni against the Kubernetes API double (1.37.1): the pinned manifest downloaded
through the mirror, every object of it stored as applied (server-side apply, field manager
gpufleet) and valid against Kubernetes 1.37's schemas."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "tests", "fake_kube_api", "molecule"))
import verify_objects  # noqa: E402

MANIFEST = "/etc/kubernetes/gpufleet/calico-v3.32.1.yaml"
SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def entries(host):
    return verify_objects.fetch(host, [MANIFEST])


def test_manifest_is_the_pinned_file_from_the_mirror(host):
    downloaded = host.file(MANIFEST)
    assert downloaded.mode == 0o644 and downloaded.user == "root"
    with open(os.path.join(SCENARIO, "files", "calico.yaml"), "rb") as handle:
        assert downloaded.content == handle.read()


def test_every_object_stored_and_valid_for_1_37(host, entries):
    version = host.ansible.get_variables()["gpufleet_kubernetes_version"]  # the schemas of the scenario's version
    assert version.startswith("1.37.")
    checked = verify_objects.check(entries, version)
    kinds = {kind for kind, _name in checked}
    assert {"ConfigMap", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
            "DaemonSet", "Deployment", "PodDisruptionBudget"} <= kinds
    assert ("DaemonSet", "calico-node") in checked and ("Deployment", "calico-kube-controllers") in checked


def test_server_side_applied_by_gpufleet(entries):
    assert verify_objects.server_side_applied(entries) == []


def test_calico_node_ready_on_the_node(entries):
    node = next(e["stored"] for e in entries if e["manifest"]["kind"] == "DaemonSet")
    # the double counts its one node (the container) as running a ready calico-node
    assert node["status"]["desiredNumberScheduled"] == node["status"]["numberReady"] == 1
    assert node["metadata"]["generation"] == 1  # the idempotence run changed nothing


def test_crds_make_calico_kinds_servable(host):
    out = host.check_output(
        "%s -c \"from kubernetes import config, dynamic; c = dynamic.DynamicClient(config.new_client_from_config("
        "config_file='%s')); print(c.resources.get(api_version='crd.projectcalico.org/v1', kind='IPPool').name)\""
        % (verify_objects.KUBE_PYTHON, verify_objects.KUBECONFIG))
    assert out.strip() == "ippools"
