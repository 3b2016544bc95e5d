"""Each pinned version is set in one place and listed in docs/versions.md.

The table "Defaults" of docs/versions.md names every pin (variable, default); this test checks that
- every pinned default of roles/*/defaults (a *_version, *_branch, *_image, *_checksum or a
  package==version list) and the tier's Kubernetes version and the Python client of
  requirements.txt is a row, and the row shows the value the code has;
- no pin is written a second time in roles (molecule tests aside), plugins, playbooks,
  inventories, docs, README, ee/, bench or scripts (a value copied into an example or a description
  silently stays behind when the default moves), except the copies named in ALLOWED_COPIES, each
  kept equal by a test.
"""

import glob
import os
import re

import pytest
import yaml
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

VERSIONS_MD = os.path.join(REPO, "docs", "versions.md")
PIN_SUFFIXES = ("_version", "_branch", "_image", "_checksum", "_packages", "_url")
# a version: digits.digits, an image tag, a sha256 or a pip pin
VERSIONISH = re.compile(r"\d+\.\d+|sha256:[0-9a-f]{64}|==")
# copies another test keeps equal to the one place (file relative to the repository, pin variable)
ALLOWED_COPIES = {
    ("docs/contracts.md", "gpufleet_kubernetes_version"): "tier table, tests/unit/test_cross_role_refs.py",
    ("roles/kubernetes_control_plane/defaults/main.yml", "kubernetes"): "test_python_client_one_pin",
    ("ee/requirements.txt", "kubernetes"): "test_python_client_one_pin",
    # the agent README says which device plugin's health logic it read (and that it is the pinned one)
    ("roles/node_health_agent/README.md", "kubernetes_addons_nvidia_device_plugin_version"):
        "test_agent_readme_names_the_pinned_device_plugin",
}
SCANNED = ["roles/**/*", "plugins/**/*", "playbooks/**/*", "inventories/**/*", "docs/*.md", "README.md",
           "CONTRIBUTING.md", "ee/*", "bench/**/*", "scripts/**/*", "requirements.txt", "galaxy.yml",
           "execution-environment.yml", "meta/*"]
# versions.md is the table; CHANGELOG.md is history; performance.md quotes the output of measured runs
# (the package versions those runs installed), which is a record, not a pin
NOT_SCANNED = ("docs/versions.md", "CHANGELOG.md", "docs/performance.md")


def _table():
    """(variable, shown default) pairs of the Defaults table of docs/versions.md."""
    with open(VERSIONS_MD) as handle:
        text = handle.read()
    section = text.split("\n## Defaults\n", 1)[1].split("\n## ", 1)[0]
    pairs = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split("|")
        names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[1])
        values = re.findall(r"`([^`]+)`", cells[2])
        assert len(names) == len(values), "docs/versions.md: row %s needs one default per variable" % names
        pairs.extend(zip(names, values))
    return pairs


def _role_defaults():
    out = {}
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "defaults", "main.yml"))):
        with open(path) as handle:
            for name, value in (yaml.safe_load(handle) or {}).items():
                out[name] = (value, os.path.relpath(path, REPO))
    return out


def _requirements_pin(path, package):
    with open(os.path.join(REPO, path)) as handle:
        found = [line.split("#")[0].strip() for line in handle if line.startswith(package + "==")]
    assert len(found) == 1, "%s: one %s== line expected, got %s" % (path, package, found)
    return found[0]


def _pins():
    """variable -> (text of its default, file that owns it)."""
    pins = {"gpufleet_kubernetes_version": (TIER["gpufleet_kubernetes_version"][0],
                                            "plugins/plugin_utils/gpufleet_tier.py"),
            "kubernetes": (_requirements_pin("requirements.txt", "kubernetes"), "requirements.txt")}
    for name, (value, path) in _role_defaults().items():
        if name.startswith("__") or not name.endswith(PIN_SUFFIXES):
            continue
        text = " ".join(value) if isinstance(value, list) else str(value if value is not None else "")
        if name.endswith("_packages") and "==" not in text:
            continue
        if VERSIONISH.search(text) or name.endswith("_branch"):
            pins[name] = (text, path)
    return pins


PINS = _pins()
TABLE = _table()


def test_every_pin_is_a_row_with_the_code_value():
    shown = dict(TABLE)
    missing = sorted(set(PINS) - set(shown) - {"kubernetes_control_plane_k8s_client_packages"})
    assert not missing, "pins missing from the Defaults table of docs/versions.md: %s" % missing
    for name, value in TABLE:
        assert name in PINS, "docs/versions.md lists %s, which is no pinned default" % name
        actual = PINS[name][0]
        assert str(value) in str(actual), "docs/versions.md shows %s = %s, the code has %s" % (name, value, actual)


def test_python_client_one_pin():
    pin = _requirements_pin("requirements.txt", "kubernetes")
    assert pin.startswith("kubernetes==")
    assert _role_defaults()["kubernetes_control_plane_k8s_client_packages"][0] == [pin]
    assert _requirements_pin("ee/requirements.txt", "kubernetes") == pin


def test_agent_readme_names_the_pinned_device_plugin():
    """roles/node_health_agent/README.md describes the device plugin "pinned by kubernetes_addons (vX)":
    X is the pin (when the pin moves, that account of its health logic must be read again)."""
    with open(os.path.join(REPO, "roles", "node_health_agent", "README.md")) as handle:
        quoted = re.findall(r"pinned by `kubernetes_addons` \((v[\w.-]+)\)", handle.read())
    assert quoted == [PINS["kubernetes_addons_nvidia_device_plugin_version"][0]]


def _needles(name, value):
    """What a copy of the pin looks like: the image's name:tag, a long value itself, or the
    assignment of a short one ("2.3", "580")."""
    found = re.findall(r"[\w.-]+:[\w.-]*\d[\w.-]*", value) if name.endswith("_image") else []
    if found:
        return [re.escape(found[-1].rsplit("/", 1)[-1])]
    if value.count(".") >= 2 or value.startswith("sha256:") or "==" in value:
        return [r"(?<![\w.])%s(?![\w])" % re.escape(value)]
    return [r"\b%s\s*:\s*[\"']?%s\b" % (re.escape(name), re.escape(value))]


def _spec_default(rel, owner, text, needles):
    """The owner role's meta/argument_specs.yml may state the default (`default:` lines only):
    tests/unit/test_role_argument_specs.py keeps those equal to defaults/main.yml."""
    if rel != owner.replace("defaults/main.yml", "meta/argument_specs.yml") or rel == owner:
        return False
    lines = [line for line in text.splitlines() if any(re.search(n, line) for n in needles)]
    return all(re.match(r"^\s*default:", line) for line in lines)


def _scanned_files():
    files = set()
    for pattern in SCANNED:
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True):
            rel = os.path.relpath(path, REPO)
            if os.path.isfile(path) and rel not in NOT_SCANNED and "/molecule/" not in "/" + rel \
                    and "__pycache__" not in rel:
                files.add(rel)
    return sorted(files)


@pytest.fixture(scope="module")
def texts():
    out = {}
    for rel in _scanned_files():
        try:
            with open(os.path.join(REPO, rel), encoding="utf-8") as handle:
                out[rel] = handle.read()
        except (UnicodeDecodeError, OSError):
            continue
    return out


@pytest.mark.parametrize("name, shown", TABLE, ids=[name for name, _ in TABLE])
def test_pin_is_written_once(texts, name, shown):
    owner = PINS[name][1]
    needles = _needles(name, shown)
    places = sorted(rel for rel, text in texts.items() if any(re.search(n, text) for n in needles))
    copies = [rel for rel in places if rel != owner and (rel, name) not in ALLOWED_COPIES
              and not _spec_default(rel, owner, texts[rel], needles)]
    assert owner in places, "%s: %s not found in %s" % (name, needles, owner)
    assert not copies, "%s = %s is set in %s and written again in %s: say it once (docs/versions.md)" % (
        name, shown, owner, ", ".join(copies))


def test_the_scan_finds_a_copy(texts):
    """The duplicate check is live: a copy of the device plugin tag in an example is found."""
    name, shown = next((n, v) for n, v in TABLE if n == "kubernetes_addons_nvidia_device_plugin_version")
    example = "# kubernetes_addons_nvidia_device_plugin_image: registry.example.com/nvcr.io/nvidia/k8s-device-plugin:%s" % shown
    assert any(re.search(n, example) for n in _needles(name, shown))
