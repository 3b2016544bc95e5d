"""Every role default (defaults/main.yml, vars/main.yml, vars/<os>.yml) that is a URL or an image,
rendered by Ansible for Debian, Ubuntu and RHEL facts: upstream without a mirror, entirely on the
mirror with gpufleet_mirror_url and gpufleet_registry_mirror set (issue 6: one switch for an
air-gapped site). One ansible-playbook run per case, local connection, no facts gathered."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

MIRROR = "https://mirror.example.com/gpufleet"
REGISTRY = "registry.example.com"
FACTS = {
    "debian": {"distribution": "Debian", "os_family": "Debian", "distribution_version": "12",
               "distribution_major_version": "12", "distribution_release": "bookworm", "architecture": "x86_64"},
    "ubuntu": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_version": "22.04",
               "distribution_major_version": "22", "distribution_release": "jammy", "architecture": "x86_64"},
    "rhel": {"distribution": "RedHat", "os_family": "RedHat", "distribution_version": "9.4",
             "distribution_major_version": "9", "distribution_release": "Plow", "architecture": "aarch64"},
}
# A value the site chooses (the DOCA URLs need a release) and what kubernetes_prereqs' set_vars.yml
# computes from the base URL (its key URL derives from it).
EXTRA = {"rdma_stack_version": "2.9.1",
         "__kubernetes_prereqs_repository_url":
             "{{ kubernetes_prereqs_repository_base_url | regex_replace('/+$', '') }}/v1.36/deb/"}
IMAGE_NAME = re.compile(r"(_image|_image_repository)$")
URL_NAME = re.compile(r"(_url|_mirror)$")
DOWNLOAD = re.compile(r"(https?|ftp)://")


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _is_download(name, value):
    if not isinstance(value, str):
        return False
    return bool(DOWNLOAD.search(value) or IMAGE_NAME.search(name) or (URL_NAME.search(name) and value))


def _var_files(os_key):
    """{role: [files]} with at least one URL or image variable, and {variable: kind}."""
    files, kinds = {}, {}
    for role_dir in sorted(glob.glob(os.path.join(REPO, "roles", "*"))):
        # the roles load vars/<os_family>.yml and/or vars/<distribution>.yml (the latter wins)
        candidates = [os.path.join(role_dir, "defaults", "main.yml"), os.path.join(role_dir, "vars", "main.yml")]
        candidates += sorted({os.path.join(role_dir, "vars", FACTS[os_key][fact] + ".yml")
                              for fact in ("os_family", "distribution")},
                             key=lambda path: not path.endswith(FACTS[os_key]["os_family"] + ".yml"))
        found = []
        for path in candidates:
            if not os.path.exists(path):
                continue
            data = _load(path)
            found.append(path)
            for name, value in data.items():
                if _is_download(name, value):
                    kinds[name] = "image" if IMAGE_NAME.search(name) else "url"
        if any(name for name in kinds if name.startswith(("%s_" % os.path.basename(role_dir),
                                                          "__%s_" % os.path.basename(role_dir)))):
            files[os.path.basename(role_dir)] = found
    return files, kinds


def _render(tmp_path, mirror):
    plays, expected = [], {}
    for os_key, facts in FACTS.items():
        files, kinds = _var_files(os_key)
        expected[os_key] = kinds
        names = sorted(kinds)
        out = str(tmp_path / ("%s.json" % os_key))
        tasks = [{"name": "Load the role variables", "ansible.builtin.include_vars": {"file": "{{ item }}"},
                  "loop": [path for role in files for path in files[role]]}]
        tasks.append({"name": "Render", "ansible.builtin.copy": {
            "dest": out, "mode": "0644",
            "content": "{{ dict(%r | zip(query('ansible.builtin.vars', *%r))) | to_json }}" % (names, names)}})
        play_vars = dict(ansible_facts=facts, ansible_connection="local",
                         ansible_python_interpreter=sys.executable)
        if mirror:
            play_vars.update(gpufleet_mirror_url=MIRROR, gpufleet_registry_mirror=REGISTRY)
        plays.append({"name": os_key, "hosts": os_key, "gather_facts": False, "vars": play_vars, "tasks": tasks})
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(EXTRA))  # extra vars: above the include_vars'd role defaults
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "debian,ubuntu,rhel,", "-e", "@%s" % extra,
         str(playbook)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rendered = {}
    for os_key in FACTS:
        with open(tmp_path / ("%s.json" % os_key)) as handle:
            rendered[os_key] = json.load(handle)
    return rendered, expected


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("mirror-off"), mirror=False)


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("mirror-on"), mirror=True)


def _host(kind, value):
    if kind == "url":
        return value.split("://", 1)[1].split("/", 1)[0]
    return value.split("/", 1)[0]


def test_the_known_downloads_are_covered(upstream):
    rendered, _kinds = upstream
    names = set(rendered["debian"]) | set(rendered["rhel"])
    assert {"kubernetes_prereqs_repository_base_url", "kubernetes_cni_calico_manifest_url",
            "kubernetes_addons_mpi_operator_manifest_url", "container_runtime_nvidia_repo_key_url",
            "nvidia_driver_debian_mirror", "kubernetes_control_plane_image_repository",
            "kubernetes_addons_nvidia_device_plugin_image", "kubernetes_addons_dcgm_exporter_image",
            "__nvidia_driver_cuda_repo_default_url", "__nvidia_driver_cuda_repo_default_key_url",
            "__rdma_stack_doca_default_repo_url", "__rdma_stack_doca_default_key_url",
            "__container_runtime_nvidia_repo_default_url", "__container_runtime_docker_repo_default_url",
            "__container_runtime_docker_repo_default_key_url"} <= names


def test_without_a_mirror_the_defaults_are_upstream(upstream):
    rendered, _kinds = upstream
    deb, ubuntu, rhel = rendered["debian"], rendered["ubuntu"], rendered["rhel"]
    assert deb["kubernetes_prereqs_repository_base_url"] == "https://pkgs.k8s.io/core:/stable:"
    assert deb["nvidia_driver_debian_mirror"] == "http://deb.debian.org/debian"
    assert deb["kubernetes_control_plane_image_repository"] == "registry.k8s.io"
    assert deb["kubernetes_addons_nvidia_device_plugin_image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    assert deb["kubernetes_cni_calico_manifest_url"] == (
        "https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml")
    assert deb["__nvidia_driver_cuda_repo_default_url"] == (
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/")
    assert ubuntu["__nvidia_driver_cuda_repo_default_key_url"] == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub")
    assert rhel["__nvidia_driver_cuda_repo_default_url"] == (
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/sbsa/")
    assert deb["__container_runtime_nvidia_repo_default_url"] == (
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)")
    assert ubuntu["__container_runtime_docker_repo_default_key_url"] == "https://download.docker.com/linux/ubuntu/gpg"
    assert rhel["__rdma_stack_doca_default_repo_url"] == "https://linux.mellanox.com/public/repo/doca/2.9.1/rhel9.4/aarch64/"


@pytest.mark.parametrize("os_key", sorted(FACTS))
def test_with_a_mirror_no_upstream_host_remains(upstream, mirrored, os_key):
    plain, kinds = upstream[0][os_key], upstream[1][os_key]
    on_mirror = mirrored[0][os_key]
    upstream_hosts = {_host(kinds[name], value) for name, value in plain.items()
                      if value and not value.startswith("file://")}
    assert "pkgs.k8s.io" in upstream_hosts and "nvcr.io" in upstream_hosts
    for name, value in on_mirror.items():
        if not value or value.startswith("file://"):  # unset (site input) or local: nothing to mirror
            continue
        prefix = REGISTRY if kinds[name] == "image" else MIRROR
        assert value == prefix + "/" + plain[name].split("://", 1)[-1], (name, value)
        assert _host(kinds[name], value) not in upstream_hosts, (name, value)
