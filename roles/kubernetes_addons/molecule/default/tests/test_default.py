"""kubernetes_addons against the Kubernetes API double (1.37.1): every object of every template
the role enabled (the list converge.yml wrote) and of the pinned MPI operator manifest is stored
as applied and valid against Kubernetes 1.37's schemas; the RDMA resources and networks come
from the mlx5 facts of the dgx-h100 fixture tree."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "tests", "fake_kube_api", "molecule"))
import verify_objects  # noqa: E402

RENDERED = "/var/lib/gpufleet-test/addons"
DOWNLOADS = "/etc/kubernetes/gpufleet"
MPI = DOWNLOADS + "/mpi-operator-v0.8.0.yaml"
SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def enabled(host):
    return json.loads(host.file(RENDERED + "/enabled.json").content_string)


@pytest.fixture(scope="module")
def templated(host, enabled):
    return verify_objects.fetch(host, ["%s/%s" % (RENDERED, name) for name in enabled])


@pytest.fixture(scope="module")
def downloaded(host):
    """Every manifest the role downloaded (its pinned downloads: the MPI operator, NFD's CRDs ...)."""
    paths = host.check_output("ls -1 %s/*.yaml" % DOWNLOADS).split()
    assert MPI in paths
    return verify_objects.fetch(host, paths)


@pytest.fixture(scope="module")
def mpi(downloaded):
    return [e for e in downloaded if e["file"] == MPI]


def test_the_default_add_ons_are_enabled(enabled):
    assert {"nvidia-device-plugin.yaml", "gpu-feature-discovery.yaml", "rdma-shared-device-plugin.yaml",
            "multus.yaml", "rdma-networks.yaml"} <= set(enabled)


def test_every_object_stored_and_valid_for_1_37(host, templated, downloaded):
    version = host.ansible.get_variables()["gpufleet_kubernetes_version"]  # the schemas of the scenario's version
    assert version.startswith("1.37.")
    # custom resources (NetworkAttachmentDefinitions) are checked against the CRD Multus applied
    checked = verify_objects.check(templated + downloaded, version)
    assert ("DaemonSet", "rdma-shared-device-plugin") in checked
    assert ("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io") in checked


def test_templated_add_ons_applied_client_side(templated):
    unannotated = ["%s/%s" % (e["manifest"]["kind"], e["manifest"]["metadata"]["name"]) for e in templated
                   if "kubectl.kubernetes.io/last-applied-configuration"
                   not in (e["stored"]["metadata"].get("annotations") or {})]
    assert unannotated == []


def test_downloads_from_the_mirror_server_side_applied(host, downloaded, mpi):
    with open(os.path.join(SCENARIO, "files", "mpi-operator.yaml"), "rb") as handle:
        assert host.file(MPI).content == handle.read()
    assert verify_objects.server_side_applied(downloaded) == []
    kinds = {(e["manifest"]["kind"], e["manifest"]["metadata"]["name"]) for e in mpi}
    assert {("Namespace", "mpi-operator"), ("CustomResourceDefinition", "mpijobs.kubeflow.org"),
            ("Deployment", "mpi-operator")} <= kinds


def test_rdma_resources_and_networks_from_the_fixture_facts(templated):
    config = next(e["stored"] for e in templated
                  if e["manifest"]["kind"] == "ConfigMap" and e["manifest"]["metadata"]["name"] == "rdma-devices")
    resources = [r["resourceName"] for r in json.loads(config["data"]["config.json"])["configList"]]
    assert resources and len(resources) == len(set(resources))
    networks = [e["stored"] for e in templated if e["manifest"]["kind"] == "NetworkAttachmentDefinition"]
    # one secondary network per generated resource, annotated with it
    assert sorted(n["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] for n in networks) == \
        sorted("rdma/" + name for name in resources)
