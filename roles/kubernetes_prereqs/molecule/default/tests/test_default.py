"""State left by kubernetes_prereqs in a systemd container (read-only /proc/sys, no modprobe)."""

import json

FINGERPRINT = "47D79C9851510C39AE85E7DA31CD70CA0CA54751"


def test_sysctl_file(host):
    conf = host.file("/etc/sysctl.d/99-kubernetes.conf")
    assert conf.is_file
    assert conf.user == "root"
    assert conf.mode == 0o644
    lines = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "net.bridge.bridge-nf-call-ip6tables = 1",
        "net.bridge.bridge-nf-call-iptables = 1",
        "net.ipv4.ip_forward = 1",
    ]


def test_modules_load_file(host):
    conf = host.file("/etc/modules-load.d/kubernetes.conf")
    assert conf.mode == 0o644
    modules = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert modules == ["overlay", "br_netfilter"]


def test_fstab_swap_commented(host):
    lines = host.file("/etc/fstab").content_string.splitlines()
    root = [line for line in lines if " / " in line]
    assert root and not root[0].startswith("#"), "the root entry must be left alone"
    swap = [line for line in lines if " swap " in line]
    assert len(swap) == 3
    assert all(line.startswith("#") for line in swap)
    assert sum("disabled by gpufleet" in line for line in swap) == 2
    # the already commented entry is not commented twice
    assert "# UUID=deadbeef-0000 none swap sw 0 0" in lines


def test_deb822_source(host):
    source = host.file("/etc/apt/sources.list.d/kubernetes.sources")
    assert source.mode == 0o644
    fields = dict(line.split(": ", 1) for line in source.content_string.splitlines()
                  if line and not line.startswith("#"))
    assert fields == {
        "Types": "deb",
        "URIs": "https://pkgs.k8s.io/core:/stable:/v1.36/deb/",
        "Suites": "/",
        "Signed-By": "/etc/apt/keyrings/kubernetes-apt-keyring.asc",
        "X-Repolib-Name": "kubernetes",
    }


def test_keyring_holds_the_key(host):
    # apt reads armored .asc keyrings named in Signed-By; the key is the one served, nothing else.
    keyring = host.file("/etc/apt/keyrings/kubernetes-apt-keyring.asc")
    assert keyring.is_file
    assert keyring.mode == 0o644
    assert keyring.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    shown = host.check_output("gpg --show-keys --with-colons /etc/apt/keyrings/kubernetes-apt-keyring.asc")
    assert "fpr:::::::::%s:" % FINGERPRINT in shown
    assert shown.count("\npub:") + shown.startswith("pub:") == 1, shown
    assert host.file("/etc/apt/keyrings").mode == 0o755
    # no dearmored copy of earlier releases left behind
    assert not host.file("/etc/apt/keyrings/kubernetes-apt-keyring.gpg").exists


def test_apt_accepts_the_source(host):
    # apt parses the deb822 file and the pin without contacting the repository
    out = host.check_output("apt-cache policy kubeadm")
    assert "kubeadm" in out or out == ""
    policy = host.run("apt-get -s -o Debug::NoLocking=1 check")
    assert policy.rc == 0, policy.stderr
    assert "kubernetes.sources" not in policy.stderr


def test_version_pin(host):
    pref = host.file("/etc/apt/preferences.d/kubernetes")
    fields = dict(line.split(": ", 1) for line in pref.content_string.splitlines()
                  if line and not line.startswith("#"))
    assert fields == {"Package": "kubelet kubeadm kubectl", "Pin": "version 1.36.4-*", "Pin-Priority": "1001"}


def test_report_of_what_was_not_applied(host):
    fact = host.file("/etc/ansible/facts.d/gpufleet_kubernetes_prereqs.fact")
    assert fact.mode == 0o644
    report = json.loads(fact.content_string)
    assert report["in_container"] is True
    assert report["sysctl"]["applied"] is False
    assert report["sysctl"]["message"].startswith(
        "sysctl values persisted to /etc/sysctl.d/99-kubernetes.conf; "
        "not applied: /proc/sys is read-only (container)")
    assert report["kernel_modules"]["message"].startswith("kernel modules persisted to")
    assert report["packages"]["install"] is False
    assert report["packages"]["candidates"] == {"kubelet": "(none)", "kubeadm": "(none)", "kubectl": "(none)"}
    assert "not installable here: no candidate for kubelet, kubeadm, kubectl" in report["packages"]["message"]


def test_proc_sys_really_is_read_only(host):
    # the premise of the report above: writing a sysctl fails in this container
    assert host.run("sysctl -w net.ipv4.ip_forward=1").rc != 0


def test_no_kubernetes_packages_pretended(host):
    assert not host.package("kubeadm").is_installed
    assert not host.package("kubelet").is_installed
