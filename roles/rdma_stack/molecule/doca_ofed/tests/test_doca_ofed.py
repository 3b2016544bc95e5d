"""rdma_stack, source doca_ofed, against a LOCAL SIGNED STAND-IN of NVIDIA's DOCA repository.

The packages are empty stand-ins (tests/fixtures/apt/make_fake_repo.sh); real are the keyring,
the deb822 source, apt's signature check, the pin and the exact-version install.
"""
import json


def test_keyring(host):
    keyring = host.file("/etc/apt/keyrings/nvidia-doca.asc")
    assert keyring.mode == 0o644
    assert keyring.content_string == host.file("/srv/fake-doca-repo/key.asc").content_string


def deb822_fields(host, path):
    """The one stanza of a deb822 .sources file as {field: value} (comments left out)."""
    source = host.file(path)
    assert source.mode == 0o644
    lines = [line for line in source.content_string.splitlines() if line and not line.startswith("#")]
    return dict(line.split(": ", 1) for line in lines)


def test_deb822_source(host):
    assert deb822_fields(host, "/etc/apt/sources.list.d/nvidia-doca.sources") == {
        "Types": "deb",
        "URIs": "file:///srv/fake-doca-repo/",
        "Suites": "./",
        "Signed-By": "/etc/apt/keyrings/nvidia-doca.asc",
        "X-Repolib-Name": "nvidia-doca",
    }
    # apt itself reads the source: the stand-in repository's index is known to apt.
    assert "file:/srv/fake-doca-repo" in host.check_output("apt-cache policy")


def test_pin_and_pinned_release_installed(host):
    text = host.file("/etc/apt/preferences.d/gpufleet-rdma-stack.pref").content_string
    assert "Package: doca-ofed\nPin: version 2.9.1-*\nPin-Priority: 1000" in text
    assert host.package("doca-ofed").version == "2.9.1-1"  # not the newer 2.10.0-1
    assert host.package("mlnx-ofed-kernel-utils").is_installed


def test_openibd_not_restarted_but_recorded(host):
    marker = host.file("/var/lib/gpufleet/openibd-restart-required")
    assert marker.content_string == "rdma_stack: restart openibd (or reboot): OFED doca_ofed installed in this run\n"
    # The stand-in openibd unit was never started by the role.
    assert not host.service("openibd").is_running
    facts = json.loads(host.file("/var/lib/gpufleet-test/rdma_stack.json").content_string)
    assert facts["restart_required"] is True


def test_plan_recorded_in_check_mode(host):
    plan = json.loads(host.file("/var/lib/gpufleet-test/rdma_stack-check.json").content_string)["plan"]
    assert plan["packages"] == ["doca-ofed=2.9.1-*"]
    assert plan["keyring"] == "/etc/apt/keyrings/nvidia-doca.asc"
