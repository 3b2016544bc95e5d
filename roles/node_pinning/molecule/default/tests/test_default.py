"""Installed packages are held, absent ones skipped; unattended-upgrades blacklists all of them."""

import pytest

DROP_IN = "/etc/apt/apt.conf.d/51gpufleet-unattended-upgrades"


def selections(host):
    out = host.check_output("dpkg --get-selections")
    return dict(line.split() for line in out.splitlines())


@pytest.mark.parametrize("name", ["rdma-core", "ibverbs-utils", "libibverbs1:amd64", "libstdc++6:amd64"])
def test_installed_packages_are_held(host, name):
    assert selections(host)[name] == "hold"


@pytest.mark.parametrize("name", ["mlnx-ofed-kernel-dkms", "kubelet", "kubeadm", "linux-image-amd64"])
def test_absent_packages_are_not_selected(host, name):
    assert name not in selections(host)


def test_only_the_pinned_packages_are_held(host):
    held = sorted(name for name, state in selections(host).items() if state == "hold")
    assert held == ["ibverbs-utils", "libibverbs1:amd64", "libstdc++6:amd64", "rdma-core"]


def test_apt_refuses_to_remove_a_held_package(host):
    cmd = host.run("apt-get -s -y remove rdma-core")
    assert cmd.rc != 0
    assert "Held packages were changed and -y was used without --allow-change-held-packages" in cmd.stderr


def test_unattended_upgrades_blacklist(host):
    f = host.file(DROP_IN)
    assert f.is_file and f.user == "root" and f.mode == 0o644
    content = f.content_string
    for entry in ['"^rdma-core$";', '"^ibverbs-utils$";', '"^mlnx-ofed-kernel-dkms$";',
                  '"^kubelet$";', '"^kubeadm$";', '"^kubectl$";', '"^linux-image-amd64$";',
                  '"^libstdc[+][+]6$";']:
        assert entry in content


def test_apt_parses_the_blacklist(host):
    # apt-config reads every apt.conf.d file: a syntax error would make it fail.
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert 'Unattended-Upgrade::Package-Blacklist:: "^rdma-core$";' in dump
    assert 'Unattended-Upgrade::Package-Blacklist:: "^libstdc[+][+]6$";' in dump
