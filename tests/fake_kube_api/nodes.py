"""Realistic Node objects for the API double: the size and shape of a GPU Node as a real API server
serves it, so that reading the node list costs what it costs against a real fleet.

Shape (the fields, their types and who writes them): the Kubernetes API reference, Node v1
(https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/: metadata,
spec.podCIDR(s)/providerID, status.addresses, allocatable, capacity, conditions, daemonEndpoints,
images, nodeInfo) and "Nodes" (https://kubernetes.io/docs/concepts/architecture/nodes/: the kubelet's
conditions Ready, MemoryPressure, DiskPressure, PIDPressure). Sizes:

- status.images: the kubelet reports at most 50 images, the largest first (kubelet option
  nodeStatusMaxImages, default 50: https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/);
  each with its digest name and its tag name, as ``kubectl get node -o json`` shows them;
- labels: a GPU node carries the labels of node-feature-discovery (feature.node.kubernetes.io/...,
  https://kubernetes-sigs.github.io/node-feature-discovery/stable/usage/features.html) and of NVIDIA
  GPU feature discovery (nvidia.com/gpu.product, gpu.count, gpu.memory, cuda.driver.major ...,
  https://github.com/NVIDIA/k8s-device-plugin, docs of gpu-feature-discovery): some hundred labels;
- annotations of the kubelet, the CNI (Calico's projectcalico.org/IPv4Address) and NFD
  (nfd.node.kubernetes.io/feature-labels lists the labels it manages);
- metadata.managedFields: one entry per writer (kubelet, kube-controller-manager, nfd-master,
  calico-node, the gpufleet agent), each with its fieldsV1 set.

The figures are written here from those documents (no real Node was copied); a Node built here is
about 25-30 KB of JSON, within the "tens of KB" real GPU nodes show.
"""

import hashlib

# (repository, tag, size in bytes): the images a GPU node of a gpufleet cluster runs (GPU operator,
# network operator, Calico, the control-plane add-ons, CUDA and NCCL test images), 50 as the kubelet
# reports at most
_IMAGES = [
    ("nvcr.io/nvidia/cuda", "12.8.1-devel-ubuntu24.04", 4650000000),
    ("nvcr.io/nvidia/pytorch", "25.03-py3", 9850000000),
    ("nvcr.io/nvidia/k8s/dcgm-exporter", "4.2.3-4.1.1-ubuntu22.04", 1540000000),
    ("nvcr.io/nvidia/driver", "580.65.06-ubuntu24.04", 1210000000),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.2", 180000000),
    ("nvcr.io/nvidia/gpu-operator", "v25.3.2", 220000000),
    ("nvcr.io/nvidia/cloud-native/gpu-operator-validator", "v25.3.2", 310000000),
    ("nvcr.io/nvidia/k8s/container-toolkit", "v1.17.8-ubuntu20.04", 140000000),
    ("nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.12.1-ubuntu20.04", 150000000),
    ("nvcr.io/nvidia/cloud-native/dcgm", "4.2.3-1-ubuntu22.04", 1320000000),
    ("nvcr.io/nvidia/cloud-native/k8s-driver-manager", "v0.8.0", 260000000),
    ("nvcr.io/nvidia/mellanox/doca-driver", "25.04-0.6.1.0-2", 1750000000),
    ("nvcr.io/nvidia/mellanox/k8s-rdma-shared-dev-plugin", "v1.5.3", 95000000),
    ("nvcr.io/nvidia/mellanox/ib-kubernetes", "v1.1.1", 60000000),
    ("nvcr.io/nvidia/mellanox/whereabouts", "v0.7.0", 90000000),
    ("nvcr.io/nvidia/mellanox/multus-cni", "v4.1.0", 75000000),
    ("nvcr.io/nvidia/mellanox/plugins", "v1.5.0", 50000000),
    ("nvcr.io/nvidia/mellanox/network-operator-init-container", "v0.0.3", 40000000),
    ("nvcr.io/nvidia/mellanox/nic-feature-discovery", "v0.0.1", 45000000),
    ("nvcr.io/nvidia/mellanox/nv-ipam", "v0.3.7", 55000000),
    ("registry.k8s.io/nfd/node-feature-discovery", "v0.17.3", 75000000),
    ("docker.io/calico/node", "v3.30.2", 150000000),
    ("docker.io/calico/cni", "v3.30.2", 95000000),
    ("docker.io/calico/pod2daemon-flexvol", "v3.30.2", 7000000),
    ("docker.io/calico/csi", "v3.30.2", 9000000),
    ("docker.io/calico/node-driver-registrar", "v3.30.2", 12000000),
    ("docker.io/calico/typha", "v3.30.2", 30000000),
    ("registry.k8s.io/kube-proxy", "v1.33.4", 31000000),
    ("registry.k8s.io/pause", "3.10", 320000),
    ("registry.k8s.io/coredns/coredns", "v1.12.0", 20000000),
    ("registry.k8s.io/metrics-server/metrics-server", "v0.7.2", 19000000),
    ("registry.k8s.io/ingress-nginx/controller", "v1.12.1", 105000000),
    ("quay.io/prometheus/node-exporter", "v1.9.1", 12000000),
    ("quay.io/prometheus-operator/prometheus-config-reloader", "v0.82.2", 15000000),
    ("docker.io/grafana/promtail", "3.4.3", 80000000),
    ("docker.io/fluent/fluent-bit", "4.0.1", 40000000),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.13.0", 10000000),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.15.0", 9000000),
    ("docker.io/rook/ceph", "v1.17.2", 480000000),
    ("quay.io/cephcsi/cephcsi", "v3.14.0", 540000000),
    ("nvcr.io/nvidia/k8s/nccl-tests", "2.14.1-cuda12.8", 2900000000),
    ("nvcr.io/nvidia/hpc-benchmarks", "25.04", 7300000000),
    ("docker.io/volcanosh/vc-scheduler", "v1.11.2", 60000000),
    ("ghcr.io/kubeflow/training-operator", "v1.9.2", 45000000),
    ("docker.io/kubeflow/mpi-operator", "0.6.0", 40000000),
    ("nvcr.io/nvidia/tritonserver", "25.03-py3", 8800000000),
    ("nvcr.io/nvidia/nemo", "25.02", 17500000000),
    ("nvcr.io/nvidia/clara/bionemo-framework", "2.5", 14200000000),
    ("docker.io/library/busybox", "1.37.0", 2200000),
    ("ghcr.io/gpufleet/health-agent", "0.3.0", 95000000),
]

_CPU_FLAGS = ["ADX", "AESNI", "AMXBF16", "AMXINT8", "AMXTILE", "AVX", "AVX2", "AVX512BF16", "AVX512BITALG",
              "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512FP16", "AVX512IFMA", "AVX512VBMI",
              "AVX512VBMI2", "AVX512VL", "AVX512VNNI", "AVX512VPOPCNTDQ", "AVXVNNI", "CETIBT", "CETSS", "CLDEMOTE",
              "CMPXCHG8", "FMA3", "FSRM", "FXSR", "FXSROPT", "GFNI", "HLE", "HYPERVISOR", "IA32_ARCH_CAP", "IBPB",
              "LAHF", "MD_CLEAR", "MOVBE", "MOVDIR64B", "MOVDIRI", "OSXSAVE", "PCONFIG", "RTM", "SERIALIZE",
              "SHA", "SPEC_CTRL_SSBD", "STIBP", "SYSCALL", "SYSEE", "TSXLDTRK", "VAES", "VMX", "VPCLMULQDQ",
              "WAITPKG", "WBNOINVD", "X87", "XGETBV1", "XSAVE", "XSAVEC", "XSAVEOPT", "XSAVES"]


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def labels(name, index=0):
    """The labels of a GPU node (NFD, GPU feature discovery, the kubelet's well-known labels)."""
    out = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
           "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
           "node.kubernetes.io/instance-type": "dgx-h100", "topology.kubernetes.io/zone": "rack-%02d" % (index // 32),
           "topology.kubernetes.io/region": "dc-1"}
    prefix = "feature.node.kubernetes.io/"
    for flag in _CPU_FLAGS:
        out[prefix + "cpu-cpuid." + flag] = "true"
    out.update({
        prefix + "cpu-cstate.enabled": "true", prefix + "cpu-hardware_multithreading": "true",
        prefix + "cpu-model.family": "6", prefix + "cpu-model.id": "143", prefix + "cpu-model.vendor_id": "Intel",
        prefix + "cpu-pstate.scaling_governor": "performance", prefix + "cpu-pstate.status": "active",
        prefix + "cpu-pstate.turbo": "true", prefix + "cpu-rdt.RDTCMT": "true", prefix + "cpu-rdt.RDTL3CA": "true",
        prefix + "cpu-rdt.RDTMBA": "true", prefix + "cpu-rdt.RDTMBM": "true", prefix + "cpu-rdt.RDTMON": "true",
        prefix + "kernel-config.NO_HZ": "true", prefix + "kernel-config.NO_HZ_IDLE": "true",
        prefix + "kernel-version.full": "6.8.0-45-generic", prefix + "kernel-version.major": "6",
        prefix + "kernel-version.minor": "8", prefix + "kernel-version.revision": "0",
        prefix + "memory-numa": "true", prefix + "network-sriov.capable": "true",
        prefix + "pci-10de.present": "true", prefix + "pci-15b3.present": "true", prefix + "pci-15b3.sriov.capable": "true",
        prefix + "rdma.available": "true", prefix + "rdma.capable": "true", prefix + "storage-nonrotationaldisk": "true",
        prefix + "system-os_release.ID": "ubuntu", prefix + "system-os_release.VERSION_ID": "24.04",
        prefix + "system-os_release.VERSION_ID.major": "24", prefix + "system-os_release.VERSION_ID.minor": "04",
    })
    out.update({
        "nvidia.com/cuda.driver-version.full": "580.65.06", "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "65", "nvidia.com/cuda.driver-version.revision": "06",
        "nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "65", "nvidia.com/cuda.driver.rev": "06",
        "nvidia.com/cuda.runtime-version.full": "13.0", "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0", "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0", "nvidia.com/gfd.timestamp": "1764400000",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.dcgm": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true", "nvidia.com/gpu.deploy.mig-manager": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true", "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.machine": "DGXH100", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success", "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false", "nvidia.com/vgpu.present": "false", "network.nvidia.com/operator.mofed.wait": "false",
        "gpufleet.io/role": "gpu", "gpufleet.io/health-agent": "true",
    })
    return out


def annotations(name, index, label_names):
    ip = "10.%d.%d.%d" % (10 + index // 65536, (index // 256) % 256, index % 256)
    return {
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "projectcalico.org/IPv4Address": ip + "/16",
        "projectcalico.org/IPv4VXLANTunnelAddr": "192.168.%d.%d" % ((index // 64) % 256, (index % 64) * 4),
        "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(k.split("/", 1)[1] for k in label_names
                                                               if k.startswith("feature.node.kubernetes.io/"))),
        "nfd.node.kubernetes.io/extended-resources": "",
        "nvidia.com/gpu-driver-upgrade-enabled": "true",
        "csi.volume.kubernetes.io/nodeid": '{"rook-ceph.rbd.csi.ceph.com":"%s","rook-ceph.cephfs.csi.ceph.com":"%s"}'
                                           % (name, name),
    }


def _managed(manager, operation, time, fields, subresource=None):
    entry = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": time,
             "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def managed_fields(label_names, time):
    kubelet_labels = dict(("f:" + k, {}) for k in label_names if not k.startswith(("feature.", "nvidia.com/")))
    nfd_labels = dict(("f:" + k, {}) for k in label_names if k.startswith(("feature.", "nvidia.com/")))
    conditions = dict(('k:{"type":"%s"}' % kind, {".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {},
                                                  "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}})
                      for kind in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready"))
    return [
        _managed("kubelet", "Update", time, {"f:metadata": {"f:annotations": {
            ".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}}, "f:labels": kubelet_labels}}),
        _managed("kubeadm", "Update", time, {"f:metadata": {"f:annotations": {
            "f:kubeadm.alpha.kubernetes.io/cri-socket": {}}}}),
        _managed("kube-controller-manager", "Update", time, {"f:metadata": {"f:annotations": {
            "f:node.alpha.kubernetes.io/ttl": {}}},
            "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"10.244.0.0/24"': {}}}}),
        _managed("nfd-master", "Update", time, {"f:metadata": {"f:annotations": {
            "f:nfd.node.kubernetes.io/feature-labels": {}, "f:nfd.node.kubernetes.io/extended-resources": {}},
            "f:labels": nfd_labels}}),
        _managed("calico-node", "Update", time, {"f:metadata": {"f:annotations": {
            "f:projectcalico.org/IPv4Address": {}, "f:projectcalico.org/IPv4VXLANTunnelAddr": {}}},
            "f:status": {"f:conditions": {'k:{"type":"NetworkUnavailable"}': {
                ".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {},
                "f:status": {}, "f:type": {}}}}}, "status"),
        _managed("kubelet", "Update", time, {"f:status": {
            "f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:nvidia.com/gpu": {},
                              "f:rdma/rdma_shared_device_a": {}},
            "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:nvidia.com/gpu": {},
                           "f:rdma/rdma_shared_device_a": {}},
            "f:conditions": conditions, "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}},
            "status"),
    ]


def images(index):
    out = []
    for repository, tag, size in _IMAGES:
        out.append({"names": ["%s@sha256:%s" % (repository, _digest(repository + tag)),
                              "%s:%s" % (repository, tag)],
                    "sizeBytes": size + index % 4096})
    out.sort(key=lambda image: -image["sizeBytes"])  # largest first, as the kubelet reports them
    return out[:50]


def decorate(node, index, time):
    """Make ``node`` (a dict as FakeKubeAPI.add_node builds it) a realistic GPU Node in place."""
    name = node["metadata"]["name"]
    node["metadata"]["labels"] = dict(labels(name, index), **node["metadata"].get("labels", {}))
    label_names = list(node["metadata"]["labels"])
    node["metadata"]["annotations"] = dict(annotations(name, index, label_names),
                                           **node["metadata"].get("annotations", {}))
    node["metadata"]["managedFields"] = managed_fields(label_names, time)
    node["spec"].update({"podCIDRs": [node["spec"]["podCIDR"]], "providerID": "baremetal://" + name})
    ip = "10.%d.%d.%d" % (10 + index // 65536, (index // 256) % 256, index % 256)
    resources = {"cpu": "224", "ephemeral-storage": "1844284980Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                 "memory": "2113449408Ki", "nvidia.com/gpu": "8", "pods": "110", "rdma/rdma_shared_device_a": "63"}
    status = node["status"]
    status.update({
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "capacity": resources,
        "allocatable": dict(resources, cpu="222", memory="2111249344Ki", **{"ephemeral-storage": "1699693234044"}),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": images(index),
    })
    status["conditions"] = [
        {"type": kind, "status": "False", "reason": reason, "message": message, "lastHeartbeatTime": time,
         "lastTransitionTime": time}
        for kind, reason, message in (
            ("NetworkUnavailable", "CalicoIsUp", "Calico is running on this node"),
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ] + status.get("conditions", [])
    return node
