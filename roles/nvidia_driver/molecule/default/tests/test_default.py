"""nvidia_driver, source distro, Debian 12: real packages from Debian's non-free component."""
import json
import re

VERSION = "535.261.03"


def test_nonfree_components_enabled(host):
    sources = host.file("/etc/apt/sources.list.d/gpufleet-debian-nonfree.sources")
    assert sources.mode == 0o644
    assert "Components: contrib non-free non-free-firmware" in sources.content_string
    assert "Suites: bookworm bookworm-updates" in sources.content_string
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in sources.content_string


def test_user_space_installed_at_the_pinned_version(host):
    for name in ("libnvidia-ml1", "nvidia-smi"):
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version.startswith(VERSION + "-"), (name, pkg.version)
    assert host.file("/usr/bin/nvidia-smi").exists


def test_nvidia_smi_is_the_real_binary(host):
    # No GPU and no kernel module in a container: the real nvidia-smi says so.
    result = host.run("nvidia-smi")
    assert result.rc != 0
    out = result.stdout + result.stderr
    # Depending on what the container exposes: no driver, or NVML cannot start.
    assert ("couldn't communicate with the NVIDIA driver" in out
            or "Failed to initialize NVML" in out), out


def test_pin_file(host):
    pin = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref")
    assert pin.mode == 0o644
    text = pin.content_string
    assert "Package: *nvidia* cuda-drivers* libcuda*\nPin: version 535.261.03-*\nPin-Priority: 1000" in text


def test_apt_policy_honours_the_pin(host):
    policy = host.check_output("apt-cache policy libnvidia-ml1")
    assert "Installed: %s-" % VERSION in policy
    # The installed version carries the pin's priority 1000.
    assert re.search(r"\*\*\* %s-\S+ 1000" % re.escape(VERSION), policy), policy


def test_nouveau_blacklisted_and_initramfs_regenerated_once(host):
    blacklist = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert blacklist.mode == 0o644
    assert "blacklist nouveau" in blacklist.content_string
    assert "options nouveau modeset=0" in blacklist.content_string
    # converge + idempotence ran the role twice; only the first run changed the blacklist.
    log = host.file("/var/lib/gpufleet-test/update-initramfs.log").content_string
    assert log.splitlines() == ["update-initramfs -u"]


def test_persistenced_installed_and_enabled(host):
    assert host.package("nvidia-persistenced").is_installed
    assert host.service("nvidia-persistenced").is_enabled


def test_no_reboot_without_a_loaded_driver(host):
    facts = json.loads(host.file("/var/lib/gpufleet-test/nvidia_driver.json").content_string)
    assert facts["installed_version"] == VERSION
    assert facts["loaded_version"] == ""
    assert facts["reboot_required"] is False
    assert not host.file("/var/lib/gpufleet/reboot-required").exists
    assert facts["plan"]["packages"] == [
        "libnvidia-ml1=535.261.03-*", "nvidia-smi=535.261.03-*", "nvidia-persistenced"]


def test_nvml_binding_importable_by_the_module_interpreter(host):
    # tasks/nvml_binding.yml: the pinned nvidia-ml-py wheel unpacked in its own directory and put
    # on /usr/bin/python3's sys.path by a .pth file (no pip, no system package).
    path = host.check_output("/usr/bin/python3 -c 'import pynvml; print(pynvml.__file__)'")
    assert path == "/usr/local/lib/gpufleet/nvml/nvidia_ml_py-13.615.71-py3-none-any/pynvml.py"
    wheel = host.file("/usr/local/lib/gpufleet/nvml/nvidia_ml_py-13.615.71-py3-none-any.whl")
    assert wheel.is_file and wheel.mode == 0o644
    assert wheel.sha256sum == "959bf4adf6fe1308e4bd739e722236b0d1ec8392e2cefad33ff70c311380b9b6"
