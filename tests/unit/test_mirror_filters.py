"""Filters mirror_url and mirror_image (docs/airgap.md): the one-switch air-gapped mirror."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.mirror import FilterModule, mirror_image, mirror_url

MIRROR = "https://mirror.example.com/gpufleet"


def test_filter_module_exports_both_filters():
    assert FilterModule().filters() == {"mirror_url": mirror_url, "mirror_image": mirror_image}


# -- mirror_url ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mirror", [None, ""])
@pytest.mark.parametrize("url", [
    "https://pkgs.k8s.io/core:/stable:",
    "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
    "http://deb.debian.org/debian",
])
def test_url_kept_without_mirror(url, mirror):
    assert mirror_url(url, mirror) == url
    assert mirror_url(url) == url


@pytest.mark.parametrize("url, expected", [
    ("https://pkgs.k8s.io/core:/stable:", MIRROR + "/pkgs.k8s.io/core:/stable:"),
    ("https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
     MIRROR + "/nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"),
    ("https://download.docker.com/linux/rhel/$releasever/$basearch/stable",
     MIRROR + "/download.docker.com/linux/rhel/$releasever/$basearch/stable"),
    ("https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/",
     MIRROR + "/developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"),
    ("http://deb.debian.org/debian", MIRROR + "/deb.debian.org/debian"),
    ("https://example.com", MIRROR + "/example.com"),
    ("https://Example.COM/Path/File.txt", MIRROR + "/example.com/Path/File.txt"),
    ("https://user:secret@example.com:8443/a/b", MIRROR + "/example.com:8443/a/b"),
])
def test_url_mapped_to_host_and_path(url, expected):
    assert mirror_url(url, MIRROR) == expected


@pytest.mark.parametrize("mirror", [MIRROR + "/", MIRROR + "//", "http://10.0.0.1:8080/"])
def test_trailing_slashes_of_the_mirror_are_ignored(mirror):
    base = mirror.rstrip("/")
    assert mirror_url("https://pkgs.k8s.io/core:/stable:/", mirror) == base + "/pkgs.k8s.io/core:/stable:/"


def test_mirror_may_be_an_absolute_path():
    # playbooks/mirror.yml stores dest-less files with the same mapping
    assert mirror_url("https://h.example/a/b.yaml", "/srv/bundle/") == "/srv/bundle/h.example/a/b.yaml"


@pytest.mark.parametrize("url", ["file:///srv/fake-cuda-repo/", "FILE:///x", "/srv/ofed/MLNX_OFED.tgz"])
def test_local_urls_and_paths_unchanged(url):
    assert mirror_url(url, MIRROR) == url


def test_url_already_on_the_mirror_unchanged():
    url = MIRROR + "/pkgs.k8s.io/core:/stable:"
    assert mirror_url(url, MIRROR) == url
    assert mirror_url(url, MIRROR + "/") == url


@pytest.mark.parametrize("url", [None, 42, ["https://a/b"], "", "   "])
def test_url_must_be_a_string(url):
    with pytest.raises(AnsibleFilterError, match="mirror_url: the URL must be a non-empty string"):
        mirror_url(url, MIRROR)


@pytest.mark.parametrize("url", ["pkgs.k8s.io/core", "relative/path", "https:/one-slash/x"])
def test_url_without_scheme_fails(url):
    with pytest.raises(AnsibleFilterError, match="is not a URL"):
        mirror_url(url, MIRROR)


@pytest.mark.parametrize("url", ["https:///path/only", "https://user@/x"])
def test_url_without_host_fails(url):
    with pytest.raises(AnsibleFilterError, match="has no host"):
        mirror_url(url, MIRROR)


def test_bad_url_fails_without_a_mirror_too():
    with pytest.raises(AnsibleFilterError):
        mirror_url("pkgs.k8s.io/core", "")


def test_url_with_whitespace_fails():
    with pytest.raises(AnsibleFilterError, match="whitespace"):
        mirror_url(" https://a.example/b", MIRROR)


@pytest.mark.parametrize("mirror", ["mirror.example.com/gpufleet", "relative/dir", "https://"])
def test_mirror_must_be_a_url_or_absolute_path(mirror):
    with pytest.raises(AnsibleFilterError, match="the mirror must be a URL"):
        mirror_url("https://pkgs.k8s.io/x", mirror)


@pytest.mark.parametrize("mirror", [42, ["https://m"], True])
def test_mirror_must_be_a_string(mirror):
    with pytest.raises(AnsibleFilterError, match="gpufleet_mirror_url"):
        mirror_url("https://pkgs.k8s.io/x", mirror)


# -- mirror_image --------------------------------------------------------------------------------
REG = "registry.example.com"


@pytest.mark.parametrize("mirror", [None, ""])
@pytest.mark.parametrize("image", ["nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "busybox:1.36", "calico/node:v3.28.2"])
def test_image_kept_without_mirror(image, mirror):
    assert mirror_image(image, mirror) == image
    assert mirror_image(image) == image


@pytest.mark.parametrize("image, expected", [
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", REG + "/nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
    ("ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.2", REG + "/ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.2"),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
     REG + "/nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"),
    ("registry.k8s.io/pause:3.10", REG + "/registry.k8s.io/pause:3.10"),
    ("localhost/img:1", REG + "/localhost/img:1"),
    ("myregistry:5000/team/img", REG + "/myregistry:5000/team/img"),
    ("nvcr.io/nvidia/cuda@sha256:" + "a" * 64, REG + "/nvcr.io/nvidia/cuda@sha256:" + "a" * 64),
])
def test_image_mapped_under_its_registry(image, expected):
    assert mirror_image(image, REG) == expected


@pytest.mark.parametrize("image, expected", [
    ("calico/node:v3.28.2", REG + "/docker.io/calico/node:v3.28.2"),
    ("mpioperator/mpi-operator:0.6.0", REG + "/docker.io/mpioperator/mpi-operator:0.6.0"),
    ("busybox:1.36", REG + "/docker.io/library/busybox:1.36"),
    ("busybox", REG + "/docker.io/library/busybox"),
    ("docker.io/busybox:1.36", REG + "/docker.io/library/busybox:1.36"),
    ("docker.io/library/busybox:1.36", REG + "/docker.io/library/busybox:1.36"),
    ("index.docker.io/calico/node:v3", REG + "/docker.io/calico/node:v3"),
])
def test_image_without_registry_is_docker_hub(image, expected):
    assert mirror_image(image, REG) == expected


@pytest.mark.parametrize("mirror", [REG + "/", REG + "//", "registry.example.com:5000/mirror/"])
def test_trailing_slashes_of_the_registry_mirror_are_ignored(mirror):
    assert mirror_image("nvcr.io/nvidia/x:1", mirror) == mirror.rstrip("/") + "/nvcr.io/nvidia/x:1"


def test_image_already_on_the_mirror_unchanged():
    image = REG + "/nvcr.io/nvidia/x:1"
    assert mirror_image(image, REG) == image


def test_repository_prefix():
    assert mirror_image("registry.k8s.io", REG, repository=True) == REG + "/registry.k8s.io"
    assert mirror_image("registry.k8s.io", "", repository=True) == "registry.k8s.io"
    assert mirror_image("quay.io/prefix", REG + "/", repository=True) == REG + "/quay.io/prefix"


@pytest.mark.parametrize("image", [None, 3, "", ["a"]])
def test_image_must_be_a_string(image):
    with pytest.raises(AnsibleFilterError, match="mirror_image: the image must be a non-empty string"):
        mirror_image(image, REG)


@pytest.mark.parametrize("image", ["https://nvcr.io/nvidia/x:1", "/abs/img", "nvcr.io//x", "nvcr.io/x/"])
def test_not_an_image_fails(image):
    with pytest.raises(AnsibleFilterError, match="mirror_image"):
        mirror_image(image, REG)


def test_registry_mirror_given_as_url_fails():
    with pytest.raises(AnsibleFilterError, match="not a URL"):
        mirror_image("nvcr.io/nvidia/x:1", "https://registry.example.com")


def test_registry_mirror_must_be_a_string():
    with pytest.raises(AnsibleFilterError, match="gpufleet_registry_mirror"):
        mirror_image("nvcr.io/nvidia/x:1", 5)
