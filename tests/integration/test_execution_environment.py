"""execution-environment.yml (ansible-builder v3): `ansible-builder create` writes the build context
offline (scripts/ee-context.sh), with this collection's tarball, its Galaxy dependencies, the
Python and system requirements and the fleet report callback enabled for every job."""

import os
import subprocess
import tarfile

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILDER = os.path.join(REPO, ".venv", "bin", "ansible-builder")

pytestmark = pytest.mark.skipif(not os.path.exists(BUILDER), reason="run `make setup` first")


def test_builder_create_writes_the_context(tmp_path):
    context = tmp_path / "context"
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "ee-context.sh"), str(context)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.19.14 ansible-runner==2.4.1"' in containerfile
    assert "COPY _build/collections/gpufleet-cluster.tar.gz /tmp/gpufleet-cluster.tar.gz" in containerfile
    # the tarball is copied before the galaxy stage installs the collections from requirements.yml
    assert containerfile.index("gpufleet-cluster.tar.gz") < containerfile.index("ansible-galaxy collection install")
    assert "ENV ANSIBLE_CALLBACKS_ENABLED=gpufleet.cluster.fleet_report" in containerfile
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    names = [c["name"] for c in requirements["collections"]]
    assert names == ["/tmp/gpufleet-cluster.tar.gz", "ansible.posix", "community.general", "kubernetes.core"]
    galaxy = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml")).read())
    assert set(galaxy["dependencies"]) <= set(names)
    assert "kubernetes==" in (context / "_build" / "requirements.txt").read_text()
    assert "openssh-client" in (context / "_build" / "bindep.txt").read_text()
    with tarfile.open(str(context / "_build" / "collections" / "gpufleet-cluster.tar.gz")) as archive:
        assert "playbooks/validate.yml" in archive.getnames()
