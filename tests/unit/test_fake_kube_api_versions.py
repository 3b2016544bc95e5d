"""The Kubernetes API double answers as a server of the configured version: /version (the shape
of 1.33+ servers), the resource.k8s.io/v1 DRA API from 1.34 (DeviceTaintRule from 1.37, when
device taints went GA) and coordination.k8s.io/v1, read with the pinned Python kubernetes client
(requirements.txt) as kubernetes.core reads them."""

import pytest
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER
from fake_kube_api.server import FakeKubeAPI
from kubernetes import client
from kubernetes.client.rest import ApiException


def api_client(server):
    config = client.Configuration(host=server.url)
    config.api_key = {"authorization": "Bearer %s" % server.token}
    return client.ApiClient(config)


def test_version_defaults_to_the_tier_version():
    with FakeKubeAPI() as server:
        info = client.VersionApi(api_client(server)).get_code()
    assert info.git_version == "v" + TIER["gpufleet_kubernetes_version"][0]
    assert (info.major, info.minor) == tuple(TIER["gpufleet_kubernetes_version"][0].split(".")[:2])


def test_version_1_37_with_emulation_and_compatibility_versions():
    with FakeKubeAPI(server_version="v1.37.1") as server:
        server.add_node("gpu-1")
        info = client.VersionApi(api_client(server)).get_code()
        node = client.CoreV1Api(api_client(server)).read_node("gpu-1")
    assert info.git_version == "v1.37.1"
    assert (info.emulation_minor, info.min_compatibility_minor) == ("37", "36")
    assert node.status.node_info.kubelet_version == "v1.37.1"


def test_dra_v1_on_1_37():
    with FakeKubeAPI(server_version="1.37.1") as server:
        server.add_dra("resourceslices", "gpu-1-gpu.nvidia.com", {
            "driver": "gpu.nvidia.com", "nodeName": "gpu-1",
            "pool": {"name": "gpu-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-%d" % index} for index in range(8)]})
        server.add_dra("deviceclasses", "gpu.nvidia.com", {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"})
        server.add_dra("resourceclaims", "nccl", {"devices": {"requests": []}}, namespace="default")
        resource = client.ResourceV1Api(api_client(server))
        slices = resource.list_resource_slice()
        classes = resource.list_device_class()
        claims = resource.list_namespaced_resource_claim("default")
        groups = {g.name: g.preferred_version.group_version for g in client.ApisApi(api_client(server)).get_api_versions().groups}
        served = {r.name for r in resource.get_api_resources().resources}
        with pytest.raises(ApiException) as missing:
            resource.read_resource_slice("gpu-2-gpu.nvidia.com")
    assert [s.spec.node_name for s in slices.items] == ["gpu-1"] and len(slices.items[0].spec.devices) == 8
    assert classes.items[0].metadata.name == "gpu.nvidia.com"
    assert claims.items[0].metadata.namespace == "default"
    assert groups["resource.k8s.io"] == "resource.k8s.io/v1"
    assert groups["coordination.k8s.io"] == "coordination.k8s.io/v1"
    assert "devicetaintrules" in served and "resourceslices" in served
    assert missing.value.status == 404


@pytest.mark.parametrize("version, dra, taint_rules", [("1.33.5", False, False), ("1.36.4", True, False),
                                                        ("1.37.1", True, True)])
def test_what_each_version_serves(version, dra, taint_rules):
    with FakeKubeAPI(server_version=version) as server:
        apis = client.ApisApi(api_client(server))
        groups = {g.name for g in apis.get_api_versions().groups}
        assert ("resource.k8s.io" in groups) is dra
        if not dra:
            with pytest.raises(ApiException) as refused:
                client.ResourceV1Api(api_client(server)).list_resource_slice()
            assert refused.value.status == 404
            with pytest.raises(ValueError, match="not served by Kubernetes 1.33"):
                server.add_dra("resourceslices", "x", {})
            return
        served = {r.name for r in client.ResourceV1Api(api_client(server)).get_api_resources().resources}
        assert ("devicetaintrules" in served) is taint_rules


def test_bad_server_version_is_refused():
    with pytest.raises(ValueError, match="server_version must be X.Y.Z, got '1.37'"):
        FakeKubeAPI(server_version="1.37")
