"""Every Kubernetes manifest template and the kubeadm configuration, rendered by Ansible with the
inventories/example variables and DGX H100 fixture facts, validated against the Kubernetes
OpenAPI schemas (kubernetes_validate, offline) or structurally where no schema exists (CRDs,
kubeadm)."""

import glob
import json
import os
import re
import subprocess
import sys

import celpy
import kubernetes_validate
import pytest
import yaml
from conftest import FIXTURES, REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

K8S_VERSION = "1.37.0"  # the schemas of the newest minor gpufleet sets up (kubernetes-validate 1.37.0)
RENDER_PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "render_k8s.yml")
NO_SCHEMA_KINDS = {"NetworkAttachmentDefinition", "MPIJob"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    dest = tmp_path_factory.mktemp("k8s-render")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CALLBACKS_ENABLED="",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CALLBACKS_ENABLED")
    bindir = os.path.dirname(sys.executable)
    proc = subprocess.run(
        [os.path.join(bindir, "ansible-playbook"), "-i", os.path.join(REPO, "inventories", "example", "hosts.yml"),
         RENDER_PLAYBOOK, "-e", "render_dest=%s" % dest,
         "-e", "tier_default_version=%s" % TIER["gpufleet_kubernetes_version"][0],
         "-e", "fixture_root=%s" % os.path.abspath(os.path.join(FIXTURES, "nodes", "dgx-h100"))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest


def documents(path):
    with open(path) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def manifests(rendered):
    return sorted(glob.glob(os.path.join(str(rendered), "manifests", "*.yaml")))


def test_every_template_rendered(rendered):
    names = {os.path.basename(p) for p in manifests(rendered)}
    addons = os.path.join(REPO, "roles", "kubernetes_addons", "templates", "*.j2")
    templates = {os.path.basename(p)[:-3] for p in glob.glob(addons)}
    templates |= {os.path.basename(p)[:-3].replace(".yaml", "") + ".yaml"
                  for p in glob.glob(os.path.join(REPO, "playbooks", "templates", "k8s-validate", "*.j2"))}
    assert templates <= names | {"gpu-smoke-job.yaml", "nccl-mpijob.yaml"}
    assert len(names) == len(templates)


def test_manifests_validate_against_kubernetes_schemas(rendered):
    validated = 0
    for path in manifests(rendered):
        docs = documents(path)
        assert docs, path
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("kind"), (path, doc)
            assert doc["metadata"]["name"], path
            if doc["kind"] in NO_SCHEMA_KINDS:
                continue
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail("%s %s/%s: %s" % (os.path.basename(path), doc["kind"], doc["metadata"]["name"], err.message))
            validated += 1
    assert validated >= 12


def test_device_plugin_and_gfd_get_the_mig_strategy(rendered):
    """kubernetes_addons_nvidia_device_plugin_mig_strategy (default none) reaches both MIG_STRATEGY."""
    for name in ("nvidia-device-plugin.yaml", "gpu-feature-discovery.yaml"):
        (daemonset,) = [d for d in documents(os.path.join(str(rendered), "manifests", name)) if d["kind"] == "DaemonSet"]
        env = {e["name"]: e.get("value") for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["MIG_STRATEGY"] == "none", name


def _default_image(variable):
    """The image of a kubernetes_addons default (``'<image>' | gpufleet.cluster.mirror_image(...)``):
    the pin of docs/versions.md, read from the one place it is written."""
    with open(os.path.join(REPO, "roles", "kubernetes_addons", "defaults", "main.yml")) as handle:
        text = yaml.safe_load(handle)[variable]
    (image,) = re.findall(r"'([^']+)' \| gpufleet\.cluster\.mirror_image", text)
    return image


def _by_kind(docs):
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _grants(rules, group, resource, verbs):
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and set(verbs) <= set(r["verbs"])
               and not r.get("resourceNames") for r in rules)


def test_gfd_and_nfd_agree_on_the_node_feature_api(rendered):
    """GFD publishes through the NodeFeature API (not feature files), may write NodeFeature objects in
    its namespace, and nfd-master reads them there and lets GFD's nvidia.com labels through."""
    gfd = _by_kind(documents(os.path.join(str(rendered), "manifests", "gpu-feature-discovery.yaml")))
    nfd = _by_kind(documents(os.path.join(str(rendered), "manifests", "node-feature-discovery.yaml")))
    daemonset = gfd[("DaemonSet", "gpu-feature-discovery")]
    namespace = daemonset["metadata"]["namespace"]
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GFD_USE_NODE_FEATURE_API"]["value"] == "true"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # no feature file: nothing of GFD's goes to nfd-worker's features.d
    assert not [v for v in pod.get("volumes", []) if "node-feature-discovery" in v.get("hostPath", {}).get("path", "")]
    # GFD's account may write NodeFeature objects (and read its pod for their owner reference) in its namespace
    account = pod["serviceAccountName"]
    assert gfd[("ServiceAccount", account)]["metadata"]["namespace"] == namespace
    binding = next(d for (kind, _n), d in gfd.items() if kind == "RoleBinding")
    assert binding["metadata"]["namespace"] == namespace
    assert {"kind": "ServiceAccount", "name": account, "namespace": namespace} in binding["subjects"]
    role = gfd[("Role", binding["roleRef"]["name"])]
    assert role["metadata"]["namespace"] == namespace
    assert _grants(role["rules"], "nfd.k8s-sigs.io", "nodefeatures", ["get", "create", "update"])
    assert _grants(role["rules"], "", "pods", ["get"])
    # nfd-master: reads NodeFeature objects cluster-wide, no namespace selector, nvidia.com labels allowed
    master = nfd[("Deployment", "nfd-master")]["spec"]["template"]["spec"]
    master_role = nfd[("ClusterRole", "nfd-master")]
    assert _grants(master_role["rules"], "nfd.k8s-sigs.io", "nodefeatures", ["get", "list", "watch"])
    assert _grants(master_role["rules"], "", "nodes", ["get", "patch", "update"])
    (mount,) = master["containers"][0]["volumeMounts"]
    assert mount["mountPath"] == "/etc/kubernetes/node-feature-discovery"
    volume = next(v for v in master["volumes"] if v["name"] == mount["name"])
    config = yaml.safe_load(nfd[("ConfigMap", volume["configMap"]["name"])]["data"]["nfd-master.conf"])
    assert "nvidia.com" in config["extraLabelNs"]
    assert "nodeFeatureNamespaceSelector" not in (config.get("restrictions") or {})
    assert not (config.get("restrictions") or {}).get("disableLabels")


def test_nfd_objects_hang_together(rendered):
    """Every account a workload or binding names exists in the add-on namespace; the three NFD
    workloads run the one pinned image; nfd-worker reaches the tainted GPU nodes GFD runs on and reads
    the local source's features.d."""
    docs = documents(os.path.join(str(rendered), "manifests", "node-feature-discovery.yaml"))
    nfd = _by_kind(docs)
    namespace = nfd[("Deployment", "nfd-master")]["metadata"]["namespace"]
    accounts = {name for (kind, name) in nfd if kind == "ServiceAccount"}
    assert accounts == {"nfd-master", "nfd-worker", "nfd-gc"}
    images = set()
    for kind, name in (("Deployment", "nfd-master"), ("DaemonSet", "nfd-worker"), ("Deployment", "nfd-gc")):
        pod = nfd[(kind, name)]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == name
        (container,) = pod["containers"]
        assert container["command"] == [name]
        images.add(container["image"])
        assert container["securityContext"]["runAsNonRoot"] is True
    (image,) = images
    assert image.startswith("registry.k8s.io/nfd/node-feature-discovery:v")
    for doc in docs:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert [(s["name"], s["namespace"]) for s in doc["subjects"]] == [(doc["roleRef"]["name"], namespace)]
            assert (doc["roleRef"]["kind"], doc["roleRef"]["name"]) in nfd
        elif doc["kind"] not in ("ClusterRole",):
            assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]
    gfd = _by_kind(documents(os.path.join(str(rendered), "manifests", "gpu-feature-discovery.yaml")))
    gfd_taints = {t["key"] for t in gfd[("DaemonSet", "gpu-feature-discovery")]["spec"]["template"]["spec"]["tolerations"]}
    worker = nfd[("DaemonSet", "nfd-worker")]["spec"]["template"]["spec"]
    assert gfd_taints <= {t["key"] for t in worker["tolerations"]}
    mounts = {m["name"]: m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in worker["volumes"]}
    assert [host[name] for name, path in mounts.items() if path.rstrip("/").endswith("features.d")] == [
        "/etc/kubernetes/node-feature-discovery/features.d/"]


def test_dra_driver_device_classes_select_the_driver_the_device_taints_name(rendered):
    """The DeviceClasses of NVIDIA's DRA driver select the driver whose devices the health gate taints
    (gate.DEVICE_TAINT_DEFAULTS, one place), full GPUs serve nvidia.com/gpu, and the CEL selectors pick
    the devices the driver publishes (cel-python on devices shaped as its ResourceSlices)."""
    driver = gate.DEVICE_TAINT_DEFAULTS["gpu_driver"]
    docs = documents(os.path.join(str(rendered), "manifests", "nvidia-dra-driver-gpu.yaml"))
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
    assert sorted(classes) == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert all(d["apiVersion"] == "resource.k8s.io/v1" for d in classes.values())
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes["mig.nvidia.com"]["spec"]
    env = celpy.Environment()

    def device(driver_name, kind):
        return celpy.json_to_cel({"driver": driver_name, "attributes": {driver_name: {"type": kind}}})

    gpu = device(driver, "gpu")  # gpu-<minor>
    mig = device(driver, "mig")  # gpu-<minor>-mig-<profile>-<id>-<start>, on a GPU in MIG mode
    other = device("compute-domain.nvidia.com", "channel")
    for name, wanted in (("gpu.nvidia.com", gpu), ("mig.nvidia.com", mig)):
        (selector,) = classes[name]["spec"]["selectors"]
        assert "device.driver == '%s'" % driver in selector["cel"]["expression"], name
        program = env.program(env.compile(selector["cel"]["expression"]))
        assert [bool(program.evaluate({"device": d})) for d in (gpu, mig, other)] == [d is wanted for d in (gpu, mig, other)]


def test_dra_driver_kubelet_plugin(rendered):
    docs = documents(os.path.join(str(rendered), "manifests", "nvidia-dra-driver-gpu.yaml"))
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    daemonset = kinds[("DaemonSet", "dra-driver-nvidia-gpu-kubelet-plugin")]
    pod = daemonset["spec"]["template"]["spec"]
    account = kinds[("ServiceAccount", pod["serviceAccountName"])]
    binding = kinds[("ClusterRoleBinding", "dra-driver-nvidia-gpu-kubeletplugin")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    rules = kinds[("ClusterRole", binding["roleRef"]["name"])]["rules"]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"]} in rules
    # chart 0.5 (rbac-kubeletplugin.yaml): the plugin patches its node
    assert _grants(rules, "", "nodes", ["get", "list", "watch", "update", "patch"])
    (container,) = pod["containers"]
    assert container["image"] == _default_image("kubernetes_addons_nvidia_dra_driver_image")
    assert container["image"].endswith(":v0.5.0")
    assert pod["initContainers"][0]["image"] == container["image"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_DRIVER_ROOT"] == "/" and env["IMAGE_NAME"] == container["image"]
    # chart 0.5 (kubeletplugin.yaml): the pull policy of the MPS control daemons the plugin creates
    assert env["IMAGE_PULL_POLICY"] == "IfNotPresent"
    assert {"key": TIER["gpufleet_gate_taint_key"][0], "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gpufleet.io/gpu.count", "operator": "Exists"}]}]


def test_multus_4_3_reads_dra_claims(rendered):
    """Multus 4.3 (multus-cni PR 1492, deployments/multus-daemonset-thick.yml): the daemon reads
    resource.k8s.io/v1 ResourceClaims and ResourceSlices (read only), the CRD has the short name
    nad, the daemon gets 30 s to shut down gracefully (PR 1525); image: the pin."""
    docs = _by_kind(documents(os.path.join(str(rendered), "manifests", "multus.yaml")))
    rules = docs[("ClusterRole", "multus")]["rules"]
    for resource in ("resourceclaims", "resourceclaims/status", "resourceslices"):
        assert _grants(rules, "resource.k8s.io", resource, ["get", "list"]), resource
        assert not _grants(rules, "resource.k8s.io", resource, ["update"]), resource
    crd = docs[("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io")]
    assert crd["spec"]["names"]["shortNames"] == ["nad", "net-attach-def"]
    (daemonset,) = [d for (kind, _name), d in docs.items() if kind == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 30
    images = {c["image"] for c in pod["containers"] + pod.get("initContainers", [])}
    assert images == {_default_image("kubernetes_addons_multus_image")}
    assert images.pop().endswith(":v4.3.1-thick")


def test_rdma_device_plugin_config_generated_from_facts(rendered):
    docs = documents(os.path.join(str(rendered), "manifests", "rdma-shared-device-plugin.yaml"))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    config = json.loads(config_map["data"]["config.json"])
    names = [entry["resourceName"] for entry in config["configList"]]
    assert names == ["ib_rail%d" % i for i in range(8)] + ["roce"]
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]


def test_rdma_networks_one_per_resource(rendered):
    docs = documents(os.path.join(str(rendered), "manifests", "rdma-networks.yaml"))
    assert len(docs) == 9
    for index, doc in enumerate(docs):
        assert doc["apiVersion"] == "k8s.cni.cncf.io/v1"
        assert doc["kind"] == "NetworkAttachmentDefinition"
        config = json.loads(doc["spec"]["config"])
        resource = doc["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        assert config["name"] == doc["metadata"]["name"]
        assert config["ipam"]["range"] == "10.200.%d.0/20" % (16 * index)
        if resource == "rdma/roce":
            assert config["type"] == "macvlan" and config["master"] == "enp170s0f0np0"
        else:
            assert config["type"] == "ipoib"
            assert resource == "rdma/ib_rail%d" % index
    assert json.loads(docs[0]["spec"]["config"])["master"] == "ibp26s0"


def test_nccl_mpijob_structure(rendered):
    (job,) = documents(os.path.join(str(rendered), "manifests", "nccl-mpijob.yaml"))
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    specs = job["spec"]["mpiReplicaSpecs"]
    assert specs["Worker"]["replicas"] == 2
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][launcher["command"].index("-np") + 1] == "16"
    assert "all_reduce_perf" in launcher["command"]
    assert "NCCL_IB_GID_INDEX=3" in launcher["command"]
    # from the DGX H100 fixture's topology: each GPU's ConnectX-7 behind the same PCIe switch
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1" in launcher["command"]
    assert "NCCL_NET_GDR_LEVEL=PIX" in launcher["command"]
    worker = specs["Worker"]["template"]
    limits = worker["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8
    assert sorted(k for k in limits if k.startswith("rdma/")) == sorted(
        ["rdma/ib_rail%d" % i for i in range(8)] + ["rdma/roce"])
    networks = worker["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].split(",")
    assert networks[0] == "rdma-ib-rail0" and networks[-1] == "rdma-roce"
    # the pod template is a core PodSpec: validate it with the Pod schema
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"}, "spec": worker["spec"]}
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_package_repository_per_minor(rendered):
    """pkgs.k8s.io is one repository per minor; X.Y.Z pins that patch, X.Y the newest of the minor."""
    with open(os.path.join(str(rendered), "kubeadm", "repositories.json")) as handle:
        repositories = json.load(handle)
    base = "https://pkgs.k8s.io/core:/stable:"
    assert repositories == {
        "1.36.5": {"url": base + "/v1.36/deb/", "pin": "1.36.5-*", "minor": "1.36"},
        "1.37.2": {"url": base + "/v1.37/deb/", "pin": "1.37.2-*", "minor": "1.37"},
        "1.37": {"url": base + "/v1.37/deb/", "pin": "1.37.*", "minor": "1.37"},
        "v1.33.5": {"url": base + "/v1.33/deb/", "pin": "1.33.5-*", "minor": "1.33"},
    }


# the example inventory selects 1.37 (gpufleet_kubernetes_version "1.37.2"); the tier default is 1.36;
# kubeadm 1.37 refuses v1beta3 (docs/versions.md), so every supported minor renders v1beta4
@pytest.mark.parametrize("version,api", [("1.37.2", "kubeadm.k8s.io/v1beta4"),
                                         (TIER["gpufleet_kubernetes_version"][0], "kubeadm.k8s.io/v1beta4"),
                                         ("1.30.5", "kubeadm.k8s.io/v1beta3")])
def test_kubeadm_config(rendered, version, api):
    path = os.path.join(str(rendered), "kubeadm", "kubeadm-config-%s.yaml" % version)
    docs = {doc["kind"]: doc for doc in documents(path)}
    assert set(docs) == {"InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"}
    assert docs["InitConfiguration"]["apiVersion"] == api
    assert docs["ClusterConfiguration"]["apiVersion"] == api
    cluster = docs["ClusterConfiguration"]
    assert cluster["kubernetesVersion"] == "v" + version
    assert cluster["controlPlaneEndpoint"] == "k8s-api.example.com:6443"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12",
                                     "dnsDomain": "cluster.local"}
    assert cluster["apiServer"]["certSANs"] == ["k8s-api.example.com"]
    registration = docs["InitConfiguration"]["nodeRegistration"]
    assert registration["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert registration["name"] == "k8s-cp-01.example.com"
    assert docs["InitConfiguration"]["localAPIEndpoint"]["bindPort"] == 6443
    kubelet = docs["KubeletConfiguration"]
    assert kubelet["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert kubelet["cgroupDriver"] == "systemd"
    # only known top-level fields (kubeadm rejects unknown ones in strict decoding)
    assert set(cluster) <= {"apiVersion", "kind", "clusterName", "kubernetesVersion", "controlPlaneEndpoint",
                            "imageRepository", "networking", "apiServer", "dns"}
