"""HA control-plane endpoint (tier gpufleet_control_plane_ha): the tier's port default, the inventory
check's refusals (named by variable), and the templates of role kubernetes_control_plane rendered with
the values its tasks derive: the kube-vip static pod (validated against the Kubernetes schemas, the
kubeconfig it reads during and after kubeadm init), haproxy.cfg, keepalived.conf and its check script,
and kubeadm's controlPlaneEndpoint / certSANs. haproxy -c, keepalived -t and the services are run by
the molecule scenario roles/kubernetes_control_plane/molecule/default (haproxy_keepalived)."""

import os
import re
import subprocess
import sys

import jinja2
import kubernetes_validate
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import gpufleet_tier
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.inventory_check import (
    control_plane_ha_problems, kubespray_problems, tier_problems)

TEMPLATES = os.path.join(REPO, "roles", "kubernetes_control_plane", "templates")
K8S_VERSION = "1.37.0"  # the schemas test_k8s_render.py validates against
HOSTS = ["cp1", "cp2", "cp3"]
ADDRESSES = {"cp1": "10.0.0.11", "cp2": "10.0.0.12", "cp3": "10.0.0.13"}


def render(name, **extra):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    env.tests["search"] = lambda value, pattern: re.search(pattern, value) is not None
    variables = {
        "ansible_managed": "Ansible managed",
        "inventory_hostname": "cp1",
        "groups": {"kube_control_plane": HOSTS},
        "hostvars": {h: {"__kubernetes_control_plane_address": a} for h, a in ADDRESSES.items()},
        "kubernetes_control_plane_group": "kube_control_plane",
        "kubernetes_control_plane_bind_port": 6443,
        "kubernetes_control_plane_ha_router_id": 51,
        "kubernetes_control_plane_kube_vip_image": "ghcr.io/kube-vip/kube-vip:vTEST",
        "__kubernetes_control_plane_ha_vip": "10.0.0.10",
        "__kubernetes_control_plane_ha_port": 8443,
        "__kubernetes_control_plane_ha_nic": "bond0",
        "__kubernetes_control_plane_is_first": True,
        "__kubernetes_control_plane_keepalived_check": "/etc/keepalived/check_apiserver.sh",
    }
    variables.update(extra)
    return env.get_template(name).render(**variables)


# tier: the port follows the mode unless set

def tier(values, name):
    return gpufleet_tier.tier_value(lambda v: v, values, name)


@pytest.mark.parametrize("values, port", [
    ({}, 6443),
    ({"gpufleet_control_plane_ha": "kube_vip"}, 6443),
    ({"gpufleet_control_plane_ha": "haproxy_keepalived"}, 8443),
    ({"gpufleet_control_plane_ha": "haproxy_keepalived", "gpufleet_control_plane_vip_port": 9443}, 9443),
])
def test_vip_port_default_follows_the_mode(values, port):
    assert tier(values, "gpufleet_control_plane_vip_port") == port
    assert tier({}, "gpufleet_control_plane_ha") == "none"
    assert tier({}, "gpufleet_control_plane_vip") is None


# the inventory check

HA = {"gpufleet_control_plane_ha": "haproxy_keepalived", "gpufleet_control_plane_vip": "10.0.0.10"}


@pytest.mark.parametrize("values", [
    {},
    {"gpufleet_control_plane_ha": "none"},
    HA,
    dict(HA, kubernetes_control_plane_endpoint="10.0.0.10:8443"),
    dict(HA, gpufleet_control_plane_vip_port=9443, kubernetes_control_plane_bind_port=6443),
    dict(HA, gpufleet_control_plane_vip_port="6443", kubernetes_control_plane_bind_port=7443),
    {"gpufleet_control_plane_ha": "kube_vip", "gpufleet_control_plane_vip": "10.0.0.10"},
    {"gpufleet_control_plane_ha": "kube_vip", "gpufleet_control_plane_vip": "10.0.0.10",
     "gpufleet_control_plane_vip_port": 7443, "kubernetes_control_plane_bind_port": 7443},
])
def test_consistent_ha_settings_pass(values):
    assert control_plane_ha_problems(values) == []


@pytest.mark.parametrize("values, named, said", [
    ({"gpufleet_control_plane_ha": "keepalived"}, "gpufleet_control_plane_ha", "one of none, kube_vip"),
    ({"gpufleet_control_plane_ha": "kube_vip"}, "gpufleet_control_plane_vip", "IPv4 address"),
    (dict(HA, gpufleet_control_plane_vip="10.0.0.300"), "gpufleet_control_plane_vip", "got '10.0.0.300'"),
    (dict(HA, gpufleet_control_plane_vip="api.example.com"), "gpufleet_control_plane_vip", "IPv4 address"),
    (dict(HA, gpufleet_control_plane_vip="fd00::10"), "gpufleet_control_plane_vip", "IPv4 address"),
    ({"gpufleet_control_plane_vip": "10.0.0.10"}, "gpufleet_control_plane_vip is set", "ha is none"),
    ({"gpufleet_control_plane_vip_port": 8443}, "gpufleet_control_plane_vip_port is set", "ha is none"),
    (dict(HA, gpufleet_control_plane_vip_port=6443), "kubernetes_control_plane_bind_port", "cannot listen on it"),
    (dict(HA, gpufleet_control_plane_vip_port=7443, kubernetes_control_plane_bind_port=7443),
     "gpufleet_control_plane_vip_port 7443", "cannot listen"),
    (dict(HA, gpufleet_control_plane_vip_port=70000), "gpufleet_control_plane_vip_port", "1-65535"),
    ({"gpufleet_control_plane_ha": "kube_vip", "gpufleet_control_plane_vip": "10.0.0.10",
      "gpufleet_control_plane_vip_port": 8443}, "kubernetes_control_plane_bind_port", "only moves the address"),
    (dict(HA, kubernetes_control_plane_endpoint="lb.example.com:6443"), "kubernetes_control_plane_endpoint",
     "contradicts the HA endpoint 10.0.0.10:8443"),
])
def test_bad_ha_settings_refused_by_name(values, named, said):
    problems = control_plane_ha_problems(values)
    assert len(problems) == 1, problems
    assert named in problems[0] and said in problems[0], problems[0]
    assert problems[0] in tier_problems(values)  # the inventory check of every entry point reports it


@pytest.mark.parametrize("name, value, ours", [
    ("kube_vip_enabled", True, "gpufleet_control_plane_ha"),
    ("kube_vip_address", "10.0.0.10", "gpufleet_control_plane_vip"),
    ("loadbalancer_apiserver", {"address": "10.0.0.10", "port": 8443}, "gpufleet_control_plane_vip"),
])
def test_kubespray_ha_variables_point_at_the_tier(name, value, ours):
    (problem,) = kubespray_problems({name: value})
    assert problem.startswith("%s is a Kubespray variable that gpufleet does not read: use %s" % (name, ours))


# kube-vip static pod

@pytest.mark.parametrize("kubeconfig", ["/etc/kubernetes/super-admin.conf", "/etc/kubernetes/admin.conf"])
def test_kube_vip_pod_validates_and_reads_the_given_kubeconfig(kubeconfig):
    pod = yaml.safe_load(render("kube-vip.yaml.j2", __kubernetes_control_plane_ha_port=6443,
                                __kubernetes_control_plane_kube_vip_kubeconfig=kubeconfig))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert (pod["kind"], pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("Pod", "kube-vip", "kube-system")
    spec = pod["spec"]
    assert spec["hostNetwork"] is True
    container = spec["containers"][0]
    assert container["image"] == "ghcr.io/kube-vip/kube-vip:vTEST"
    assert container["args"] == ["manager"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["vip_arp"] == "true" and env["vip_leaderelection"] == "true" and env["cp_enable"] == "true"
    assert env["address"] == "10.0.0.10" and env["port"] == "6443" and env["vip_interface"] == "bond0"
    assert "svc_enable" not in env  # the control plane endpoint only, no Service load balancer
    # names kube-vip v1 reads (pkg/kubevip/config_envvar.go): vip_subnet, not the older vip_cidr/vip_address
    assert env["vip_subnet"] == "32" and "vip_cidr" not in env and "vip_address" not in env
    assert env["vip_leasename"] == "plndr-cp-lock"
    assert set(container["securityContext"]["capabilities"]["add"]) == {"NET_ADMIN", "NET_RAW"}
    # kube-vip always reads /etc/kubernetes/admin.conf in its container; the host file is the choice
    assert container["volumeMounts"] == [{"mountPath": "/etc/kubernetes/admin.conf", "name": "kubeconfig"}]
    assert spec["volumes"] == [{"name": "kubeconfig", "hostPath": {"path": kubeconfig, "type": "File"}}]


# haproxy and keepalived

def test_haproxy_forwards_the_vip_port_to_every_api_server():
    text = render("haproxy.cfg.j2")
    lines = [line.strip() for line in text.splitlines()]
    assert "bind *:8443" in lines
    assert not any(line.startswith("bind") and "6443" in line for line in lines)
    servers = [line.split() for line in lines if line.startswith("server ")]
    assert servers == [["server", h, "%s:6443" % ADDRESSES[h], "check", "verify", "none"] for h in HOSTS]
    assert "http-check send meth GET uri /healthz" in lines and "http-check expect status 200" in lines
    assert "mode tcp" in lines


@pytest.mark.parametrize("first, state, priority", [(True, "MASTER", 101), (False, "BACKUP", 100)])
def test_keepalived_holds_the_vip_with_the_api_check(first, state, priority):
    text = render("keepalived.conf.j2", __kubernetes_control_plane_is_first=first)
    lines = [line.strip() for line in text.splitlines()]
    assert "state %s" % state in lines and "priority %d" % priority in lines
    assert "interface bond0" in lines and "virtual_router_id 51" in lines and "10.0.0.10/32" in lines
    assert 'script "/etc/keepalived/check_apiserver.sh"' in lines and "check_apiserver" in lines
    assert "enable_script_security" in lines and "script_user root" in lines
    script = render("check_apiserver.sh.j2")
    assert script.startswith("#!/bin/sh\n")
    assert "https://localhost:8443/" in script and "https://10.0.0.10:8443/" in script


# kubeadm: controlPlaneEndpoint and certSANs as set_vars.yml derives them

def test_kubeadm_config_names_the_vip():
    text = render("kubeadm-config.yaml.j2", __kubernetes_control_plane_kubeadm_api="kubeadm.k8s.io/v1beta4",
                  __kubernetes_control_plane_semver="1.36.4", __kubernetes_control_plane_address="10.0.0.11",
                  __kubernetes_control_plane_endpoint="10.0.0.10:8443",
                  __kubernetes_control_plane_cert_sans=["api.example.com", "10.0.0.10"],
                  kubernetes_control_plane_cri_socket="unix:///run/containerd/containerd.sock",
                  kubernetes_control_plane_cluster_name="gpufleet",
                  kubernetes_control_plane_image_repository="registry.k8s.io",
                  kubernetes_control_plane_pod_subnet="10.244.0.0/16",
                  kubernetes_control_plane_service_subnet="10.96.0.0/12",
                  kubernetes_control_plane_dns_domain="cluster.local", kubernetes_control_plane_cgroup_driver="systemd",
                  kubernetes_control_plane_kubelet_config={})
    docs = {d["kind"]: d for d in yaml.safe_load_all(text) if d}
    cluster = docs["ClusterConfiguration"]
    assert cluster["controlPlaneEndpoint"] == "10.0.0.10:8443"
    assert cluster["apiServer"]["certSANs"] == ["api.example.com", "10.0.0.10"]
    assert docs["InitConfiguration"]["localAPIEndpoint"] == {"advertiseAddress": "10.0.0.11", "bindPort": 6443}


# the role's own tasks (set_vars.yml, ha_kube_vip.yml) on this machine, one ansible-playbook run per mode

RENDER_PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "render_ha_endpoint.yml")


def _run_render_playbook(dest, vip):
    """ansible-playbook of RENDER_PLAYBOOK (the role's own set_vars.yml and HA tasks) on three
    control-plane nodes of this machine, with gpufleet_control_plane_vip ``vip``."""
    inventory = dest / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"kube_control_plane": {"hosts": {
        h: {"kubernetes_control_plane_advertise_address": a, "kubernetes_control_plane_ha_interface": "bond0"}
        for h, a in ADDRESSES.items()}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), RENDER_PLAYBOOK,
         "-e", "render_dest=%s" % dest, "-e", "gpufleet_control_plane_vip=%s" % vip,
         "-e", "gpufleet_kubernetes_version=1.36.4", "-e", '{"kubernetes_control_plane_cert_sans": ["api.example.com"]}'],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def role_run(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ha-render")
    proc = _run_render_playbook(dest, "10.0.0.10")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest


def test_role_refuses_what_the_inventory_check_refuses(tmp_path):
    """The role used on its own runs the inventory check's HA check (filter control_plane_ha_problems)
    on the values it resolved: the same message, naming the variable, before anything is written."""
    proc = _run_render_playbook(tmp_path, "10.0.0.300")
    assert proc.returncode != 0
    (expected,) = control_plane_ha_problems({"gpufleet_control_plane_ha": "kube_vip",
                                             "gpufleet_control_plane_vip": "10.0.0.300"})
    assert "kubernetes_control_plane: " + expected in proc.stdout, proc.stdout[-4000:]
    assert not list(tmp_path.glob("*/*/kubeadm-config.yaml"))


def test_the_filter_is_the_inventory_checks_function():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.gpufleet.cluster.plugins.filter.inventory_problems import FilterModule as Ours

    check = Ours().filters()["control_plane_ha_problems"]
    values = dict(HA, gpufleet_control_plane_vip_port=6443)
    assert check(values) == control_plane_ha_problems(values) != []
    with pytest.raises(AnsibleFilterError, match="expected a dict of settings"):
        check(["kube_vip"])


@pytest.fixture(params=["kube_vip", "haproxy_keepalived"])
def role_rendered(request, role_run):
    return request.param, role_run / request.param


def test_role_sets_endpoint_and_sans_from_the_vip(role_rendered):
    mode, dest = role_rendered
    port = 6443 if mode == "kube_vip" else 8443
    for host in HOSTS:
        docs = {d["kind"]: d for d in yaml.safe_load_all((dest / host / "kubeadm-config.yaml").read_text()) if d}
        cluster = docs["ClusterConfiguration"]
        assert cluster["controlPlaneEndpoint"] == "10.0.0.10:%d" % port
        assert cluster["apiServer"]["certSANs"] == ["api.example.com", "10.0.0.10"]
        assert docs["InitConfiguration"]["localAPIEndpoint"]["advertiseAddress"] == ADDRESSES[host]
        # kubernetes_worker refuses a join command through anything else: both roles name one endpoint
        assert (dest / host / "worker-endpoint").read_text() == cluster["controlPlaneEndpoint"]


def test_role_kube_vip_reads_super_admin_conf_only_while_the_first_node_initialises(role_rendered):
    mode, dest = role_rendered
    if mode != "kube_vip":
        assert not (dest / "cp1" / "before").exists()
        return
    for host in HOSTS:
        pod = yaml.safe_load((dest / host / "before" / "kube-vip.yaml").read_text())
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["address"], env["port"], env["vip_interface"]) == ("10.0.0.10", "6443", "bond0")
        assert pod["spec"]["containers"][0]["image"].startswith("ghcr.io/kube-vip/kube-vip:v")
        during = "super-admin.conf" if host == "cp1" else "admin.conf"
        assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/" + during
        after = yaml.safe_load((dest / host / "after" / "kube-vip.yaml").read_text())
        assert after["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/admin.conf"
        assert oct(os.stat(dest / host / "before" / "kube-vip.yaml").st_mode & 0o777) == "0o600"


def test_role_haproxy_keepalived_per_node(role_rendered):
    mode, dest = role_rendered
    if mode != "haproxy_keepalived":
        assert not (dest / "cp1" / "haproxy.cfg").exists()
        return
    for host in HOSTS:
        haproxy = (dest / host / "haproxy.cfg").read_text()
        assert "bind *:8443" in haproxy
        assert ["server %s %s:6443 check verify none" % (h, ADDRESSES[h]) for h in HOSTS] == [
            line.strip() for line in haproxy.splitlines() if line.strip().startswith("server ")]
        keepalived = (dest / host / "keepalived.conf").read_text()
        assert ("state MASTER" in keepalived) == (host == "cp1")
        assert "interface bond0" in keepalived and "10.0.0.10/32" in keepalived


@pytest.mark.parametrize("vip, what", [
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"),
    ("127.0.0.1", "loopback"), ("127.1.2.3", "loopback"),
    ("224.0.0.18", "multicast"), ("239.1.1.1", "multicast"),
    ("169.254.10.10", "link-local"),
    ("255.255.255.255", "reserved"), ("240.0.0.1", "reserved"),
])
def test_a_vip_no_node_can_reach_is_refused_by_name(vip, what):
    for mode in ("kube_vip", "haproxy_keepalived"):
        problems = control_plane_ha_problems({"gpufleet_control_plane_ha": mode, "gpufleet_control_plane_vip": vip})
        assert len(problems) == 1, problems
        assert problems[0].startswith("gpufleet_control_plane_vip must be") and what in problems[0], problems[0]
        assert repr(vip) in problems[0]


@pytest.mark.parametrize("vip", ["10.0.0.10", "192.168.1.250", "172.16.0.5", "100.64.0.10", "203.0.113.7"])
def test_a_unicast_vip_passes(vip):
    assert control_plane_ha_problems({"gpufleet_control_plane_ha": "kube_vip", "gpufleet_control_plane_vip": vip}) == []


@pytest.mark.parametrize("port", ["²", "６４４３", "٦٤٤٣", "-1", "0x1bb"])
def test_a_vip_port_that_is_not_ascii_digits_is_refused_by_name(port):
    problems = control_plane_ha_problems(dict(HA, gpufleet_control_plane_vip_port=port))
    assert problems == ["gpufleet_control_plane_vip_port must be a port number 1-65535, got %r" % (port,)]
