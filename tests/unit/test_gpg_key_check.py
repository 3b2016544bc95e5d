"""Filter gpg_key_check: the primary keys of a signing-key file against the pinned fingerprints.

Listings are real `gpg --show-keys --with-colons` output (tests/fixtures/gpg/README.md names the
sources); the Docker key is Docker's real apt key, so the role default that pins it is checked
against the key itself, with the installed gpg when there is one.
"""

import os
import shutil
import subprocess
import tempfile

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from conftest import FIXTURES, REPO

from ansible_collections.gpufleet.cluster.plugins.filter.gpg import gpg_key_check, normalize_fingerprint

DOCKER_FPR = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
DOCKER_SUBKEY_FPR = "D3306A018370199E527AE7997EA0A9C3F273FCD8"
THROWAWAY_FPR = "47D79C9851510C39AE85E7DA31CD70CA0CA54751"


def fixture(name):
    with open(os.path.join(FIXTURES, "gpg", name), encoding="utf-8") as handle:
        return handle.read()


def test_docker_key_matches_the_published_fingerprint():
    verdict = gpg_key_check(fixture("docker-linux-gpg.colons"), ["9DC8 5822 9FC7 DD38 854A  E2D8 8D81 803C 0EBF CD88"])
    assert verdict == {"ok": True, "found": [DOCKER_FPR], "unpinned": [], "bad_pins": []}


def test_subkey_fingerprint_is_not_a_primary_key():
    """Pinning the subkey does not admit the file: vendors publish the primary key's fingerprint."""
    verdict = gpg_key_check(fixture("docker-linux-gpg.colons"), [DOCKER_SUBKEY_FPR])
    assert not verdict["ok"]
    assert verdict["unpinned"] == [DOCKER_FPR]


def test_another_key_is_refused():
    verdict = gpg_key_check(fixture("throwaway-test-key.colons"), [DOCKER_FPR])
    assert verdict == {"ok": False, "found": [THROWAWAY_FPR], "unpinned": [THROWAWAY_FPR], "bad_pins": []}


def test_an_extra_unpinned_key_in_the_file_is_refused():
    both = fixture("docker-linux-gpg.colons") + fixture("throwaway-test-key.colons")
    verdict = gpg_key_check(both, [DOCKER_FPR])
    assert not verdict["ok"]
    assert verdict["found"] == [DOCKER_FPR, THROWAWAY_FPR]
    assert verdict["unpinned"] == [THROWAWAY_FPR]
    assert gpg_key_check(both, [DOCKER_FPR, THROWAWAY_FPR.lower()])["ok"]


@pytest.mark.parametrize("colons", ["", "gpg: no valid OpenPGP data found.\n", "uid:-::::1::x::y:\n"])
def test_a_file_without_keys_is_refused(colons):
    verdict = gpg_key_check(colons, [DOCKER_FPR])
    assert verdict["found"] == [] and not verdict["ok"]


def test_no_pins_or_malformed_pins_never_pass():
    assert not gpg_key_check(fixture("docker-linux-gpg.colons"), [])["ok"]
    assert not gpg_key_check(fixture("docker-linux-gpg.colons"), None)["ok"]
    verdict = gpg_key_check(fixture("docker-linux-gpg.colons"), [DOCKER_FPR, "0EBFCD88"])
    assert verdict["bad_pins"] == ["0EBFCD88"] and not verdict["ok"]


@pytest.mark.parametrize("value,expected", [
    ("9dc8 5822 9fc7 dd38 854a  e2d8 8d81 803c 0ebf cd88", DOCKER_FPR),
    ("0x" + DOCKER_FPR, DOCKER_FPR),
    ("0EBFCD88", None),
    (DOCKER_FPR + "00", None),
    (None, None),
])
def test_normalize_fingerprint(value, expected):
    assert normalize_fingerprint(value) == expected


def test_bad_input_types():
    with pytest.raises(AnsibleFilterError):
        gpg_key_check(42, [DOCKER_FPR])
    with pytest.raises(AnsibleFilterError):
        gpg_key_check("", {"a": 1})


def test_list_of_lines_is_accepted():
    assert gpg_key_check(fixture("docker-linux-gpg.colons").splitlines(), [DOCKER_FPR])["ok"]


def _defaults(role):
    with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg not installed")
def test_container_runtime_default_pin_admits_dockers_real_key():
    """The role default pins the fingerprint the real key file has (read by the installed gpg, the
    same command the role runs)."""
    home = tempfile.mkdtemp()
    try:
        out = subprocess.run(
            ["gpg", "--homedir", home, "--batch", "--no-autostart", "--show-keys", "--with-colons",
             os.path.join(FIXTURES, "gpg", "docker-linux-gpg.asc")],
            check=True, capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)
    pins = _defaults("container_runtime")["container_runtime_docker_repo_key_fingerprints"]
    assert gpg_key_check(out, pins)["ok"]
    assert gpg_key_check(out, pins)["found"] == [DOCKER_FPR]


@pytest.mark.parametrize("role,variable", [
    ("container_runtime", "container_runtime_docker_repo_key_fingerprints"),
    ("container_runtime", "container_runtime_nvidia_repo_key_fingerprints"),
    ("nvidia_driver", "nvidia_driver_cuda_repo_key_fingerprints"),
    ("kubernetes_prereqs", "kubernetes_prereqs_repository_key_fingerprints"),
    ("rdma_stack", "rdma_stack_doca_key_fingerprints"),
])
def test_default_pins_are_well_formed(role, variable):
    pins = _defaults(role)[variable]
    assert isinstance(pins, list)
    assert all(normalize_fingerprint(pin) == pin for pin in pins), pins


def test_every_repository_caller_passes_its_pins():
    """Every include of common_internal's repository entry point passes a fingerprint list and a
    checksum, each with the variable name the messages cite."""
    callers = []
    for root, _dirs, files in os.walk(os.path.join(REPO, "roles")):
        for name in files:
            if not name.endswith(".yml") or "molecule" in root:
                continue
            path = os.path.join(root, name)
            with open(path) as handle:
                docs = yaml.safe_load(handle)
            for task in docs if isinstance(docs, list) else []:
                include = task.get("ansible.builtin.include_role") if isinstance(task, dict) else None
                # a repository signed by a keyring already on the host downloads nothing
                options = task.get("vars", {}) if include else {}
                if include and include.get("tasks_from") == "repository" and "common_internal_repo_key_url" in options:
                    callers.append((os.path.relpath(path, REPO), task.get("vars", {})))
    assert len(callers) == 9, callers
    for path, options in callers:
        for key in ("common_internal_repo_key_fingerprints", "common_internal_repo_key_fingerprints_variable",
                    "common_internal_repo_key_checksum", "common_internal_repo_key_checksum_variable"):
            assert key in options, "%s does not pass %s" % (path, key)
        assert options["common_internal_repo_key_fingerprints_variable"] in options["common_internal_repo_key_fingerprints"]
        assert options["common_internal_repo_key_checksum_variable"] in options["common_internal_repo_key_checksum"]
