"""What an air-gapped site must copy for kubernetes_addons is listed: every image default is in the
registry layout of docs/airgap.md, every downloaded file (manifest, CRDs) in its web-root layout and
in the mirror_files example of inventories/example/group_vars/all/mirror.yml (what
playbooks/mirror.yml puts into the bundle)."""

import os
import re

import pytest
import yaml
from conftest import REPO

ROLE = "kubernetes_addons"
AIRGAP = os.path.join(REPO, "docs", "airgap.md")
EXAMPLE = os.path.join(REPO, "inventories", "example", "group_vars", "all", "mirror.yml")


def _defaults():
    with open(os.path.join(REPO, "roles", ROLE, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


def _read(path):
    with open(path) as handle:
        return handle.read()


def _images():
    """variable -> upstream repository (registry/path, no tag) of each image default."""
    out = {}
    for name, value in _defaults().items():
        if name.endswith("_image"):
            found = re.search(r"'([a-z0-9.-]+\.[a-z]+/[^':]+):", value)
            assert found, "%s: no upstream image in its default %r" % (name, value)
            out[name] = found.group(1)
    return out


def _downloads():
    """variable -> (host/owner/repo of the URL, its path after the version) of each downloaded file."""
    out = {}
    for name, value in _defaults().items():
        if name.endswith("_url") and "raw.githubusercontent.com" in str(value):
            parts = re.findall(r"'([^']*)'", value.split("gpufleet.cluster.mirror_url")[0])
            assert len(parts) == 2, "%s: expected '<base>/' ~ version ~ '/<path>' in %r" % (name, value)
            out[name] = (parts[0].split("://", 1)[1].rstrip("/"), parts[1].lstrip("/"))
    return out


def test_the_listing_covers_nfd():
    assert _images()["kubernetes_addons_node_feature_discovery_image"] == "registry.k8s.io/nfd/node-feature-discovery"
    assert _downloads()["kubernetes_addons_node_feature_discovery_crds_url"] == (
        "raw.githubusercontent.com/kubernetes-sigs/node-feature-discovery", "deployment/base/nfd-crds/nfd-api-crds.yaml")


@pytest.mark.parametrize("name", sorted(_images()))
def test_image_in_the_registry_layout(name):
    assert re.search(r"^\s+%s:<tag>" % re.escape(_images()[name]), _read(AIRGAP), re.M), (
        "%s: add %s:<tag> to the registry layout of docs/airgap.md" % (name, _images()[name]))


@pytest.mark.parametrize("name", sorted(_downloads()))
def test_download_in_the_web_root_and_the_bundle_example(name):
    base, path = _downloads()[name]
    version = name.replace("_manifest_url", "_version").replace("_crds_url", "_version")
    assert version in _defaults(), name
    listed = "%s/<%s>/%s" % (base, version, path)
    assert listed in _read(AIRGAP), "docs/airgap.md: %s not in the web-root layout" % listed
    assert "url: https://" + listed in _read(EXAMPLE), "%s: not in the mirror_files example" % listed
    checksum = name.replace("_url", "_checksum")
    assert checksum in _defaults() and '"<%s>"' % checksum in _read(EXAMPLE), checksum
