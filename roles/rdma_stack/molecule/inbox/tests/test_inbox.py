"""rdma_stack, source inbox, Debian 12: real rdma-core packages from the distribution."""
import json
import re

VERSION = "44.0-2"


def test_packages_installed(host):
    for name in ("rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags"):
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == VERSION, (name, pkg.version)
    assert host.package("perftest").is_installed


def test_tools_run(host):
    # No HCA in a container: the real tools run and find no device.
    devices = host.run("ibv_devices")
    # libibverbs finds no RDMA device (no /sys/class/infiniband_verbs in a container).
    assert ("node GUID" in devices.stdout
            or "Failed to get IB devices list" in devices.stderr), (devices.stdout, devices.stderr)
    # perftest prints its usage and exits 1 for --help.
    assert "Usage:" in host.run("ib_write_bw --help").stdout
    assert host.file("/usr/sbin/ibstat").exists


def test_pin_file(host):
    text = host.file("/etc/apt/preferences.d/gpufleet-rdma-stack.pref").content_string
    assert ("Package: rdma-core ibverbs-providers ibverbs-utils infiniband-diags\n"
            "Pin: version 44.0-2*\nPin-Priority: 1000") in text
    policy = host.check_output("apt-cache policy rdma-core")
    assert re.search(r"\*\*\* 44\.0-2 1000", policy), policy


def test_no_openibd_restart_for_inbox(host):
    assert not host.file("/var/lib/gpufleet/openibd-restart-required").exists


def test_mlx5_facts_gathered(host):
    facts = json.loads(host.file("/var/lib/gpufleet-test/rdma_stack.json").content_string)
    assert facts["mlx5"]["loaded"] is False
    assert facts["mlx5"]["driver_source"] == "absent"
    assert facts["mlx5"]["ofed"]["installed"] is False
