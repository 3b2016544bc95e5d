"""The API double's generic object store (tests/fake_kube_api/objects.py), driven with the pinned
Python kubernetes client's dynamic client, as kubernetes.core drives it: create, client-side apply
(merge patch) and server-side apply re-runs that leave the resourceVersion alone, 422 for an object
the server version's schema refuses, a CRD then its custom resource, 404 for what is not served."""

import json
import urllib.error
import urllib.request

import pytest
from ansible_collections.kubernetes.core.plugins.module_utils.apply import k8s_apply
from fake_kube_api.server import FakeKubeAPI
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

VERSION = "1.37.1"


def daemonset(image="registry.k8s.io/pause:3.10", **extra):
    spec = {"selector": {"matchLabels": {"k8s-app": "calico-node"}},
            "template": {"metadata": {"labels": {"k8s-app": "calico-node"}},
                         "spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                  "containers": [{"name": "calico-node", "image": image}]}}}
    spec.update(extra)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "calico-node", "namespace": "kube-system"}, "spec": spec}


NAD_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
    "spec": {"group": "k8s.cni.cncf.io", "scope": "Namespaced",
             "names": {"plural": "network-attachment-definitions", "singular": "network-attachment-definition",
                       "kind": "NetworkAttachmentDefinition", "shortNames": ["net-attach-def"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {
                     "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                     "spec": {"type": "object", "properties": {"config": {"type": "string"}}}}}}}]},
}


@pytest.fixture(scope="module")
def server():
    with FakeKubeAPI(server_version=VERSION) as api:
        api.add_node("cp-1")
        yield api


def dyn(server):
    config = client.Configuration(host=server.url)
    config.api_key = {"authorization": "Bearer %s" % server.token}
    return dynamic.DynamicClient(client.ApiClient(config))


def test_create_then_get_and_list_with_server_fields(server):
    api = dyn(server)
    deployments = api.resources.get(api_version="apps/v1", kind="Deployment")
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "calico-kube-controllers", "namespace": "kube-system",
                         "labels": {"k8s-app": "calico-kube-controllers"}},
            "spec": {"selector": {"matchLabels": {"k8s-app": "calico-kube-controllers"}},
                     "template": {"metadata": {"labels": {"k8s-app": "calico-kube-controllers"}},
                                  "spec": {"containers": [{"name": "c", "image": "docker.io/calico/kube-controllers"}]}}}}
    created = deployments.create(body=body, namespace="kube-system")
    assert created.metadata.generation == 1 and created.metadata.uid
    assert created.spec.replicas == 1  # defaulted, as the real server does
    assert (created.status.readyReplicas, created.status.observedGeneration) == (1, 1)
    with pytest.raises(ApiException) as exists:
        deployments.create(body=body, namespace="kube-system")
    assert exists.value.status == 409 and json.loads(exists.value.body)["reason"] == "AlreadyExists"
    listed = deployments.get(namespace="kube-system", label_selector="k8s-app=calico-kube-controllers")
    assert [item.metadata.name for item in listed.items] == ["calico-kube-controllers"]
    with pytest.raises(ApiException) as missing_ns:
        deployments.create(body=dict(body, metadata={"name": "x", "namespace": "nowhere"}), namespace="nowhere")
    assert missing_ns.value.status == 404 and json.loads(missing_ns.value.body)["message"] == 'namespaces "nowhere" not found'


def test_server_side_apply_rerun_keeps_the_resource_version(server):
    api = dyn(server)
    daemonsets = api.resources.get(api_version="apps/v1", kind="DaemonSet")
    first = daemonsets.server_side_apply(body=daemonset(), name="calico-node", namespace="kube-system",
                                         field_manager="gpufleet", force_conflicts=True)
    again = daemonsets.server_side_apply(body=daemonset(), name="calico-node", namespace="kube-system",
                                         field_manager="gpufleet", force_conflicts=True)
    assert again.metadata.resourceVersion == first.metadata.resourceVersion
    assert again.to_dict() == first.to_dict()
    assert [m.manager for m in first.metadata.managedFields] == ["gpufleet"]
    # one node matches the nodeSelector: the double reports its pod ready (no kubelet)
    assert (first.status.desiredNumberScheduled, first.status.numberReady) == (1, 1)
    changed = daemonsets.server_side_apply(body=daemonset(image="registry.k8s.io/pause:3.11"), name="calico-node",
                                           namespace="kube-system", field_manager="gpufleet", force_conflicts=True)
    assert int(changed.metadata.resourceVersion) > int(first.metadata.resourceVersion)
    assert changed.metadata.generation == 2 and changed.status.observedGeneration == 2
    # another manager changing a field gpufleet owns: 409 without force, ownership moves with it
    other = daemonset(image="registry.k8s.io/pause:3.12")
    with pytest.raises(ApiException) as conflict:
        daemonsets.server_side_apply(body=other, name="calico-node", namespace="kube-system", field_manager="kubectl")
    assert conflict.value.status == 409 and 'conflict with "gpufleet"' in json.loads(conflict.value.body)["message"]
    # a field gpufleet stops applying is removed
    removed = daemonset()
    del removed["spec"]["template"]["spec"]["nodeSelector"]
    pruned = daemonsets.server_side_apply(body=removed, name="calico-node", namespace="kube-system",
                                          field_manager="gpufleet", force_conflicts=True)
    assert pruned.spec.template.spec.nodeSelector is None


def test_client_side_apply_merge_patch_rerun_is_a_no_op(server):
    api = dyn(server)
    configmaps = api.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "calico-config", "namespace": "kube-system"},
            "data": {"veth_mtu": "0"}}
    # kubernetes.core's client-side apply: create with the last-applied annotation, then GET + merge patch
    created = k8s_apply(configmaps, body)
    assert "kubectl.kubernetes.io/last-applied-configuration" in created.to_dict()["metadata"]["annotations"]
    again = k8s_apply(configmaps, body)
    assert again.metadata.resourceVersion == created.metadata.resourceVersion
    patched = configmaps.patch(body={"data": {"veth_mtu": "1450"}}, name="calico-config", namespace="kube-system",
                               content_type="application/merge-patch+json")
    assert patched.data.veth_mtu == "1450" and patched.metadata.resourceVersion != created.metadata.resourceVersion
    same = configmaps.patch(body={"data": {"veth_mtu": "1450"}}, name="calico-config", namespace="kube-system",
                            content_type="application/merge-patch+json")
    assert same.metadata.resourceVersion == patched.metadata.resourceVersion


def test_schema_violation_is_a_422_naming_the_field(server):
    api = dyn(server)
    daemonsets = api.resources.get(api_version="apps/v1", kind="DaemonSet")
    bad = daemonset()
    bad["metadata"]["name"] = "bad-ds"
    bad["spec"]["template"]["spec"]["containers"] = [{"name": "c", "image": "x", "ports": [{"containerPort": "80"}]}]
    with pytest.raises(ApiException) as invalid:
        daemonsets.create(body=bad, namespace="kube-system")
    status = json.loads(invalid.value.body)
    assert (invalid.value.status, status["reason"], status["details"]["kind"]) == (422, "Invalid", "DaemonSet")
    assert status["details"]["causes"][0]["field"] == "spec.template.spec.containers[0].ports[0].containerPort"
    no_selector = daemonset()
    no_selector["metadata"]["name"] = "no-selector"
    del no_selector["spec"]["selector"]
    with pytest.raises(ApiException) as required:
        daemonsets.create(body=no_selector, namespace="kube-system")
    assert json.loads(required.value.body)["details"]["causes"][0] == {
        "reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"}
    assert server.objects.get_object("apps/v1", "DaemonSet", "bad-ds", "kube-system") is None


def test_unknown_field_refused_only_with_strict_field_validation(server):
    api = dyn(server)
    configmaps = api.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo", "namespace": "default"},
            "dta": {"a": "b"}}
    with pytest.raises(ApiException) as strict:
        configmaps.create(body=body, namespace="default", query_params=[("fieldValidation", "Strict")])
    assert strict.value.status == 422 and "dta" in strict.value.body
    assert configmaps.create(body=body, namespace="default").metadata.name == "typo"


def test_crd_then_custom_resource_then_gone_with_its_crd(server):
    api = dyn(server)
    with pytest.raises(dynamic.exceptions.ResourceNotFoundError):
        api.resources.get(api_version="k8s.cni.cncf.io/v1", kind="NetworkAttachmentDefinition")
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crd = crds.create(body=NAD_CRD)
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    api = dyn(server)  # a fresh discovery, as the next kubernetes.core task makes
    nads = api.resources.get(api_version="k8s.cni.cncf.io/v1", kind="NetworkAttachmentDefinition")
    assert nads.namespaced
    nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"name": "rdma-ib-rail0", "namespace": "default"}, "spec": {"config": "{}"}}
    nads.create(body=nad, namespace="default")
    assert nads.get(name="rdma-ib-rail0", namespace="default").spec.config == "{}"
    with pytest.raises(ApiException) as invalid:
        nads.create(body=dict(nad, metadata={"name": "bad", "namespace": "default"}, spec={"config": 1}),
                    namespace="default")
    assert invalid.value.status == 422 and json.loads(invalid.value.body)["details"]["causes"][0]["field"] == "spec.config"
    with pytest.raises(ApiException) as strategic:
        nads.patch(body={"spec": {"config": "{}"}}, name="rdma-ib-rail0", namespace="default",
                   content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415  # no strategic merge for custom resources, as the real server
    crds.delete(name="network-attachment-definitions.k8s.cni.cncf.io")
    groups = {g.name for g in client.ApisApi(api.client).get_api_versions().groups}
    assert "k8s.cni.cncf.io" not in groups
    crds.create(body=NAD_CRD)  # the CRD again: its custom resources went with the deleted one
    nads = dyn(server).resources.get(api_version="k8s.cni.cncf.io/v1", kind="NetworkAttachmentDefinition")
    assert nads.get(namespace="default").items == []


def test_unknown_kind_or_version_is_404(server):
    for path in ("/apis/apps/v1beta1/namespaces/default/deployments", "/apis/example.com/v1/widgets",
                 "/api/v1/namespaces/default/widgets", "/apis/example.com/v1",
                 "/apis/apps/v2"):
        request = urllib.request.Request(server.url + path, headers={"Authorization": "Bearer %s" % server.token})
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(request, timeout=5)
        assert missing.value.code == 404, path
        assert json.loads(missing.value.read())["reason"] == "NotFound"
    with pytest.raises(ApiException) as missing_object:
        dyn(server).resources.get(api_version="v1", kind="Secret").get(name="nope", namespace="default")
    assert missing_object.value.status == 404 and json.loads(missing_object.value.body)["message"] == 'secrets "nope" not found'


def test_written_budget_gets_the_disruption_controllers_status(server):
    server.add_pod("kc-1", "cp-1", namespace="kube-system", labels={"k8s-app": "kube-controllers"})
    budgets = dyn(server).resources.get(api_version="policy/v1", kind="PodDisruptionBudget")
    pdb = budgets.create(namespace="kube-system", body={
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "kube-controllers", "namespace": "kube-system"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"k8s-app": "kube-controllers"}}}})
    assert (pdb.status.expectedPods, pdb.status.desiredHealthy, pdb.status.disruptionsAllowed) == (1, 0, 1)
    server.evict("kube-system", "kc-1", {"metadata": {"name": "kc-1"}})  # the budget lets one go
    assert "kc-1" not in server.pod_names()
