"""node_pinning_state=unheld lifts the holds an earlier run set and removes the drop-in."""

import pytest


@pytest.mark.parametrize("name", ["rdma-core", "ibverbs-utils"])
def test_holds_are_lifted(host, name):
    assert host.check_output("dpkg --get-selections %s", name).split() == [name, "install"]


def test_no_package_is_held(host):
    assert host.check_output("apt-mark showhold") == ""


def test_drop_in_removed(host):
    assert not host.file("/etc/apt/apt.conf.d/51gpufleet-unattended-upgrades").exists


def test_apt_can_change_them_again(host):
    assert host.run("apt-get -s -y remove rdma-core").rc == 0
