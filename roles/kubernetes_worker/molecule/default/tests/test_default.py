"""kubeadm join decisions of kubernetes_worker, with a recording kubeadm test double."""

import pytest


def calls(host):
    log = host.file("/var/log/kubeadm-calls.log")
    return log.content_string.splitlines() if log.exists else []


def name(host):
    return host.backend.get_hostname()


def test_control_plane_created_one_token(host):
    if name(host) != "k8s-w-cp":
        pytest.skip("control plane only")
    log = calls(host)
    # one token for the fresh node's join; none on the converged re-run (idempotence)
    assert [line.split(" --ttl")[0] for line in log] == ["token create --print-join-command"]
    assert "--ttl 30m" in log[0]


def test_joined_node_left_alone(host):
    if name(host) != "k8s-w-joined":
        pytest.skip("pre-joined node only")
    assert calls(host) == []
    assert "a joined node" in host.file("/etc/kubernetes/kubelet.conf").content_string


def test_fresh_node_joined_once(host):
    if name(host) != "k8s-w-fresh":
        pytest.skip("fresh node only")
    joins = [line for line in calls(host) if line.startswith("join")]
    assert len(joins) == 1, joins
    assert "--token abcdef.0123456789abcdef" in joins[0]
    assert "--discovery-token-ca-cert-hash sha256:" in joins[0]
    assert "--cri-socket unix:///run/containerd/containerd.sock" in joins[0]
    assert "--node-name k8s-w-fresh" in joins[0]
    assert "--control-plane" not in joins[0]
    assert host.file("/etc/kubernetes/kubelet.conf").exists
