"""nvidia_driver, source cuda_repo, against a LOCAL SIGNED STAND-IN of NVIDIA's repository.

The packages are empty stand-ins built by tests/fixtures/apt/make_fake_repo.sh; what is real is
the keyring, the deb822 source, apt's signature check, the pin and the exact-version install.
Sysfs comes from the dgx-h100 fixture (4 NVSwitches) with 535.161.08 loaded.
"""
import json
import re

VERSION = "535.183.01"


def facts(host, name="nvidia_driver.json"):
    return json.loads(host.file("/var/lib/gpufleet-test/" + name).content_string)


def test_keyring(host):
    keyring = host.file("/etc/apt/keyrings/nvidia-cuda.asc")
    assert keyring.mode == 0o644
    assert keyring.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert keyring.content_string == host.file("/srv/fake-cuda-repo/key.asc").content_string


def deb822_fields(host, path):
    """The one stanza of a deb822 .sources file as {field: value} (comments left out)."""
    source = host.file(path)
    assert source.mode == 0o644
    lines = [line for line in source.content_string.splitlines() if line and not line.startswith("#")]
    return dict(line.split(": ", 1) for line in lines)


def test_deb822_source(host):
    assert deb822_fields(host, "/etc/apt/sources.list.d/nvidia-cuda.sources") == {
        "Types": "deb",
        "URIs": "file:///srv/fake-cuda-repo/",
        "Suites": "/",
        "Signed-By": "/etc/apt/keyrings/nvidia-cuda.asc",
        "X-Repolib-Name": "nvidia-cuda",
    }
    # apt itself reads the source: the stand-in repository's index is known to apt.
    assert "file:/srv/fake-cuda-repo" in host.check_output("apt-cache policy")


def test_pin_file(host):
    text = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref").content_string
    assert "Package: *nvidia* cuda-drivers* libcuda*\nPin: version 535.183.01-*\nPin-Priority: 1000" in text


def test_exact_version_installed_not_the_newest(host):
    for name in ("cuda-drivers-535", "libnvidia-ml1", "nvidia-fabricmanager-535"):
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == VERSION + "-1", (name, pkg.version)
    policy = host.check_output("apt-cache policy cuda-drivers-535")
    assert "Candidate: 535.183.01-1" in policy
    # The newer version stays at the default priority, below the pin.
    assert re.search(r"535\.216\.03-1 500\n", policy), policy


def test_services_enabled_and_started(host):
    # Fixture says the nvidia module is loaded: services are started (stand-in units).
    for name in ("nvidia-persistenced", "nvidia-fabricmanager"):
        assert host.service(name).is_enabled, name
        assert host.service(name).is_running, name


def test_reboot_recorded_with_policy_false(host):
    marker = host.file("/var/lib/gpufleet/reboot-required")
    assert marker.exists
    assert marker.content_string == (
        "nvidia_driver: nvidia kernel module 535.161.08 is loaded but 535.183.01 is installed\n")
    data = facts(host)
    assert data["reboot_required"] is True
    assert data["loaded_version"] == "535.161.08"
    assert data["installed_version"] == VERSION


def test_null_policy_fails_and_explains(host):
    text = host.file("/var/lib/gpufleet-test/reboot-null.txt").content_string
    assert "nvidia kernel module 535.161.08 is loaded but 535.183.01 is installed" in text
    assert "nvidia_driver_reboot is not set" in text
    assert "nvidia_driver_reboot=true" in text and "nvidia_driver_reboot=false" in text


def test_plan_recorded_in_check_mode_before_anything_existed(host):
    plan = facts(host, "nvidia_driver-check.json")["plan"]
    assert plan["packages"] == ["cuda-drivers-535=535.183.01-*", "nvidia-fabricmanager-535=535.183.01-*"]
    assert plan["command"] == (
        "apt-get install --no-install-recommends -y cuda-drivers-535=535.183.01-* nvidia-fabricmanager-535=535.183.01-*")
    assert plan["repository"] == {
        "keyring": "/etc/apt/keyrings/nvidia-cuda.asc",
        "sources": "/etc/apt/sources.list.d/nvidia-cuda.sources",
        "pin": "/etc/apt/preferences.d/gpufleet-nvidia-driver.pref",
    }
    assert plan["fabricmanager"] == "nvidia-fabricmanager-535"


def test_initramfs_regenerated_once(host):
    log = host.file("/var/lib/gpufleet-test/update-initramfs.log").content_string
    assert log.splitlines() == ["update-initramfs -u"]
