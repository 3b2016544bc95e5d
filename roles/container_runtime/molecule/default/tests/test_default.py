"""containerd installed and running; the nvidia runtime set through gpufleet's drop-in while the
site's config.toml (kata runtime, CNI paths) stays as its owner wrote it, imports aside; the
toolkit repository rendered; the toolkit honestly reported as not installable here (the node was
accepted with container_runtime_nvidia_toolkit_required=false; converge.yml asserts the failure
with the default)."""

import json

import pytest

CONFIG = "/etc/containerd/config.toml"
RUNTIMES = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'


def dump(host):
    return host.check_output("containerd config dump")


def test_containerd_package_and_service(host):
    assert host.package("containerd").is_installed
    service = host.service("containerd")
    assert service.is_running and service.is_enabled


def test_ctr_talks_to_the_daemon(host):
    out = host.check_output("ctr version")
    assert "Server:" in out and "Version:" in out.split("Server:")[1]


DROPIN = "/etc/containerd/conf.d/99-gpufleet.toml"


def test_config_toml_is_the_owners_file_plus_imports(host):
    text = host.file(CONFIG).content_string
    original = host.file("/root/containerd-config.toml.orig").content_string
    lines = text.splitlines()
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in lines
    lines.remove('imports = ["/etc/containerd/conf.d/*.toml"]')
    assert lines == original.splitlines()
    assert "nvidia" not in text


def test_dropin_has_nvidia_runtime_and_systemd_cgroup(host):
    dropin = host.file(DROPIN)
    assert dropin.mode == 0o644 and dropin.user == "root"
    text = dropin.content_string
    assert text.splitlines()[2] == "# containerd 1.x replaces a whole plugin table with an imported one, so the"
    assert "version = 2" in text.splitlines()
    nvidia = text.split("[%s.nvidia.options]" % RUNTIMES)[1].split("[")[0]
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in nvidia
    assert "SystemdCgroup = true" in nvidia
    runc = text.split("[%s.runc.options]" % RUNTIMES)[1].split("[")[0]
    assert "SystemdCgroup = true" in runc
    # containerd 1.6 replaces the CRI table with the imported one: the site's entries are carried.
    assert "[%s.kata]" % RUNTIMES in text
    assert 'bin_dir = "/usr/lib/cni"' in text


@pytest.mark.parametrize("expected", [
    '[%s.kata]' % RUNTIMES,
    'runtime_type = "io.containerd.kata.v2"',
    '[%s.nvidia.options]' % RUNTIMES,
    'BinaryName = "/usr/bin/nvidia-container-runtime"',
    'bin_dir = "/usr/lib/cni"',
])
def test_containerd_itself_reads_the_merged_config(host, expected):
    assert expected in dump(host)


def test_running_daemon_uses_systemd_cgroups_for_runc(host):
    runc = dump(host).split("[%s.runc.options]" % RUNTIMES)[1].split("\n\n")[0]
    assert "SystemdCgroup = true" in runc


def test_default_runtime_stays_runc_without_toolkit(host):
    assert 'default_runtime_name = "runc"' in dump(host)


def test_toolkit_repository_rendered(host):
    source = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources")
    assert source.mode == 0o644
    lines = [line for line in source.content_string.splitlines() if line and not line.startswith("#")]
    assert dict(line.split(": ", 1) for line in lines) == {
        "Types": "deb",
        "URIs": "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
        "Suites": "/",
        "Signed-By": "/etc/apt/keyrings/nvidia-container-toolkit.asc",
        "X-Repolib-Name": "nvidia-container-toolkit",
    }
    # the one-line file of earlier releases is gone (two files for one URI conflict in apt)
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists
    key = host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert key.mode == 0o644 and key.user == "root"
    assert key.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert key.content_string == host.file("/root/test-nvidia-repo-key.asc").content_string


def test_toolkit_not_installed_and_reported(host):
    assert not host.package("nvidia-container-toolkit").is_installed
    assert not host.file("/usr/bin/nvidia-container-runtime").exists
    report = json.loads(host.file("/etc/ansible/facts.d/gpufleet_container_runtime.fact").content_string)
    assert report["engine"] == "containerd"
    assert report["nvidia_toolkit"]["requested"] is True
    assert report["nvidia_toolkit"]["installed"] is False
    assert report["nvidia_toolkit"]["reason"] == (
        "not installed: no installation candidate for nvidia-container-toolkit %s from "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) "
        "(repository unreachable or version not published there)" % report["nvidia_toolkit"]["version"])
    assert report["default_runtime"] == {"requested": "nvidia", "effective": "runc"}
    assert report["cdi"]["generated"] is False
    assert report["cdi"]["reason"] == "skipped: /usr/bin/nvidia-ctk not found (toolkit not installed)"
    assert not host.file("/etc/cdi/nvidia.yaml").exists


def test_no_other_apt_source_broken(host):
    # The unreachable NVIDIA repository must not have been added to the Debian sources.
    assert host.run("apt-cache policy containerd").rc == 0
    assert "nvidia" not in host.file("/etc/apt/sources.list").content_string
