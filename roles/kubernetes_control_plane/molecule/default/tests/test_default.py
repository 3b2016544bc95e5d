"""kubeadm decisions and files of kubernetes_control_plane, with a recording kubeadm test double."""

import pytest
import yaml


def calls(host):
    log = host.file("/var/log/kubeadm-calls.log")
    return log.content_string.splitlines() if log.exists else []


def test_kubeadm_config_rendered(host):
    conf = host.file("/etc/kubernetes/kubeadm-config.yaml")
    assert conf.mode == 0o600
    docs = {d["kind"]: d for d in yaml.safe_load_all(conf.content_string) if d}
    assert set(docs) == {"InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"}
    cluster = docs["ClusterConfiguration"]
    assert cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert cluster["kubernetesVersion"] == "v1.36.4"
    assert cluster["controlPlaneEndpoint"] == "k8s-api.molecule.test:6443"
    assert cluster["networking"]["podSubnet"] == "10.244.0.0/16"
    assert docs["InitConfiguration"]["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert docs["KubeletConfiguration"]["cgroupDriver"] == "systemd"


def test_admin_kubeconfig_copied_0600(host):
    for path in ("/root/.kube/config", "/etc/kubernetes/admin.conf"):
        f = host.file(path)
        assert f.exists, path
        assert f.mode == 0o600, path
    assert host.file("/root/.kube").mode == 0o700


@pytest.mark.parametrize("node", ["k8s-cp-a"])
def test_first_control_plane_initialised_exactly_once(host, node):
    if host.backend.get_hostname() != node:
        pytest.skip("first control plane only")
    log = calls(host)
    assert sum(line.startswith("init --config") for line in log) == 1, log
    assert sum(line.startswith("init phase upload-certs") for line in log) == 1, log
    # one token for k8s-cp-c's join, none on the converged re-run
    assert sum(line.startswith("token create") for line in log) == 1, log
    assert not any(line.startswith("join") for line in log)


def test_initialised_control_plane_left_alone(host):
    if host.backend.get_hostname() != "k8s-cp-b":
        pytest.skip("pre-initialised control plane only")
    assert calls(host) == []
    assert "written before this test" in host.file("/etc/kubernetes/admin.conf").content_string


def test_additional_control_plane_joined_once(host):
    if host.backend.get_hostname() != "k8s-cp-c":
        pytest.skip("joining control plane only")
    joins = [line for line in calls(host) if line.startswith("join")]
    assert len(joins) == 1, joins
    assert "--control-plane --certificate-key fedcba9876543210" in joins[0]
    assert "--apiserver-advertise-address" in joins[0]
    assert "--cri-socket unix:///run/containerd/containerd.sock" in joins[0]
    assert host.file("/etc/kubernetes/kubelet.conf").exists
