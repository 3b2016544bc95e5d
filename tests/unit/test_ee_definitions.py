"""The two execution environment definitions describe one image (docs/awx.md): execution-environment.yml
(sites with Galaxy and quay.io) and ee/execution-environment-local.yml (built here, scripts/ee-build.sh)
differ only in where the parts come from; ansible-core, ansible-runner, the Python and system
requirements and the final environment are the same, the collections are the same ones (the local
build installs gpufleet.cluster's tarball last, so that a change of it rebuilds seconds of the image),
and the pins are those of requirements.txt."""

import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


GALAXY = load("execution-environment.yml")
LOCAL = load("ee/execution-environment-local.yml")


def pins():
    found = {}
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as handle:
        for line in handle:
            match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line)
            if match:
                found[match.group(1).lower()] = match.group(2)
    return found


def test_shared_dependencies_are_the_same():
    for key in ("ansible_core", "ansible_runner"):
        assert GALAXY["dependencies"][key] == LOCAL["dependencies"][key], key
    # both name the same files (paths relative to each definition)
    assert os.path.normpath(GALAXY["dependencies"]["python"]) == os.path.normpath(
        os.path.join("ee", LOCAL["dependencies"]["python"]))
    assert os.path.normpath(GALAXY["dependencies"]["system"]) == os.path.normpath(
        os.path.join("ee", LOCAL["dependencies"]["system"]))


def test_the_pins_are_those_of_requirements_txt():
    pinned = pins()
    assert LOCAL["dependencies"]["ansible_core"]["package_pip"] == "ansible-core==%s" % pinned["ansible-core"]
    assert LOCAL["dependencies"]["ansible_runner"]["package_pip"] == "ansible-runner==%s" % pinned["ansible-runner"]


def test_same_final_environment_and_the_collection_tarball():
    def env(definition):
        return [s for s in definition["additional_build_steps"]["append_final"] if s.startswith("ENV ")]
    assert env(GALAXY) == env(LOCAL)
    tarball = GALAXY["additional_build_steps"]["prepend_galaxy"][0]
    assert tarball == "COPY _build/collections/gpufleet-cluster.tar.gz /tmp/gpufleet-cluster.tar.gz"
    # the local build installs it last (after the ENV lines), from the same file
    final = LOCAL["additional_build_steps"]["append_final"]
    assert final.index(tarball) > max(final.index(s) for s in env(LOCAL))
    assert "ansible-galaxy collection install --offline --no-deps /tmp/gpufleet-cluster.tar.gz" in final[-1]
    galaxy_file, local_file = GALAXY["additional_build_files"][0], LOCAL["additional_build_files"][0]
    assert galaxy_file["dest"] == local_file["dest"] == "collections"
    assert os.path.normpath(galaxy_file["src"]) == os.path.normpath(os.path.join("ee", local_file["src"]))


def test_same_collections():
    def names(path):
        return [c["name"].replace("/tmp/local-collections/", "").replace("/", ".") if c.get("type") == "dir"
                else c["name"] for c in load(path)["collections"]]
    assert names("ee/requirements.yml") == ["/tmp/gpufleet-cluster.tar.gz"] + names("ee/requirements-local.yml")
    galaxy = load("galaxy.yml")
    assert sorted(galaxy["dependencies"]) == sorted(names("ee/requirements-local.yml"))
