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
    # gpufleet_control_plane_ha haproxy_keepalived: the VIP and haproxy's port, the VIP in the SANs
    assert cluster["controlPlaneEndpoint"] == "192.0.2.10:8443"
    assert cluster["apiServer"]["certSANs"] == ["k8s-api.molecule.test", "192.0.2.10"]
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
    assert joins[0].startswith("join 192.0.2.10:8443 "), joins[0]  # through the HA endpoint
    assert "--apiserver-advertise-address" in joins[0]
    assert "--cri-socket unix:///run/containerd/containerd.sock" in joins[0]
    assert host.file("/etc/kubernetes/kubelet.conf").exists


# HA endpoint haproxy + keepalived (every control-plane node, the pre-initialised one too)

def test_haproxy_config_valid_and_forwards_to_every_api_server(host):
    cfg = host.file("/etc/haproxy/haproxy.cfg")
    assert cfg.mode == 0o644
    assert host.run("haproxy -c -f /etc/haproxy/haproxy.cfg").rc == 0
    text = cfg.content_string
    assert "bind *:8443" in text and ":6443\n" not in text.split("backend", 1)[0]
    servers = [line.split() for line in text.splitlines() if line.strip().startswith("server ")]
    assert [s[1] for s in servers] == ["k8s-cp-a", "k8s-cp-b", "k8s-cp-c"], servers
    for server in servers:
        assert server[2].endswith(":6443") and server[2] != ":6443", server
        assert server[3:] == ["check", "verify", "none"], server
    assert "http-check send meth GET uri /healthz" in text


def test_haproxy_running_on_the_vip_port_not_the_api_servers(host):
    service = host.service("haproxy")
    assert service.is_enabled and service.is_running
    assert host.socket("tcp://0.0.0.0:8443").is_listening
    assert not host.socket("tcp://0.0.0.0:6443").is_listening


def test_keepalived_config_valid_and_running(host):
    conf = host.file("/etc/keepalived/keepalived.conf")
    assert host.run("keepalived -t -f /etc/keepalived/keepalived.conf").rc == 0
    text = conf.content_string
    first = host.backend.get_hostname() == "k8s-cp-a"
    assert ("state MASTER" in text) == first and ("state BACKUP" in text) != first
    assert "192.0.2.10/32" in text and "virtual_router_id 51" in text
    check = host.file("/etc/keepalived/check_apiserver.sh")
    assert check.mode == 0o755 and check.user == "root"
    assert "https://localhost:8443/" in check.content_string
    service = host.service("keepalived")
    assert service.is_enabled and service.is_running


@pytest.mark.parametrize("command, said", [
    # haproxy.cfg with an unknown keyword
    ("printf 'frontend x\\n    bind *:8443\\n    no_such_keyword\\n' > /tmp/bad.cfg && haproxy -c -f /tmp/bad.cfg",
     "unknown keyword 'no_such_keyword'"),
    # keepalived.conf with an unknown keyword, and with an interface the node does not have (a wrong
    # kubernetes_control_plane_ha_interface is refused when the role writes the file)
    ("sed 's/^\\( *\\)priority /\\1no_such_keyword\\n\\1priority /' /etc/keepalived/keepalived.conf > /tmp/bad.conf"
     " && keepalived -t -f /tmp/bad.conf", "Unknown keyword 'no_such_keyword'"),
    ("sed 's/^\\( *\\)interface .*/\\1interface nosuchif0/' /etc/keepalived/keepalived.conf > /tmp/bad.conf"
     " && keepalived -t -f /tmp/bad.conf", "interface nosuchif0"),
])
def test_the_validators_refuse_a_broken_file(host, command, said):
    """The role's `validate:` commands are not a formality: Debian's haproxy and keepalived refuse these."""
    result = host.run(command)
    assert result.rc != 0, result.stdout + result.stderr
    assert said in result.stdout + result.stderr
