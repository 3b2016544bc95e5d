"""The execution environment (docs/awx.md).

- execution-environment.yml (the Galaxy/quay variant): `ansible-builder create` writes the build
  context offline (scripts/ee-context.sh), with this collection's tarball, its Galaxy dependencies,
  the Python and system requirements and the fleet report callback enabled for every job.
- ee/execution-environment-local.yml, built and run for real where Docker is available: the image
  of scripts/ee-build.sh (cached by a hash of its inputs; scripts/molecule-all.sh builds it beside
  the scenarios, this test waits for that build or makes it when the image is missing), run by
  `ansible-runner run --process-isolation` as AWX runs a job: playbooks/validate.yml (through a
  project playbook importing gpufleet.cluster.validate) over a fleet of local-connection hosts
  inside the EE container, each reading a fixture tree (tests/ mounted read-only), leaves the fleet
  report in the job's artifacts, equal check by check to the report of the same run on this machine.
"""

import json
import os
import shutil
import subprocess
import tarfile

import pytest
import yaml

from fleet_inventory import FLEET, inventory, report_checks, write

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
BUILDER = os.path.join(BIN, "ansible-builder")
RUNNER = os.path.join(BIN, "ansible-runner")
TESTS_IN_EE = "/gpufleet-tests"  # where the job's container sees this checkout's tests/

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


def _docker_or_skip():
    if shutil.which("docker") is None and shutil.which("dockerd") is None:
        pytest.skip("Docker is not installed here (scripts/docker-up.sh installs Debian's docker.io; "
                    "the EE is built and run only where a Docker engine is available)")
    if not os.path.exists(RUNNER):
        pytest.skip("ansible-runner is not in .venv: run `make setup`")
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "docker-up.sh")], capture_output=True, text=True,
                          timeout=180, check=False)
    if proc.returncode != 0:
        pytest.skip("no Docker engine answers (scripts/docker-up.sh: %s)" % (proc.stderr.strip()[-300:],))


@pytest.fixture(scope="module")
def ee_image():
    _docker_or_skip()
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "ee-build.sh")], cwd=REPO, capture_output=True,
                          text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    image = proc.stdout.strip().splitlines()[-1]
    assert image.startswith("gpufleet/ee-local:")
    return image


def _job(tmp_path, image):
    """An ansible-runner private data directory as AWX lays one out for a job: project/, inventory/,
    env/; the project's playbook imports the collection's validate playbook."""
    data = tmp_path / "job"
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    (data / "env").mkdir()
    (data / "project" / "validate.yml").write_text(
        "---\n- name: gpufleet validate (the site project's wrapper, docs/awx.md)\n"
        "  ansible.builtin.import_playbook: gpufleet.cluster.validate\n")
    write(data / "inventory" / "hosts.json", inventory(TESTS_IN_EE, "/usr/bin/python3"))
    argv = [RUNNER, "run", str(data), "--playbook", "validate.yml", "--ident", "job-1",
            "--process-isolation", "--process-isolation-executable", "docker", "--container-image", image,
            "--container-volume-mount", "%s:%s:ro" % (os.path.join(REPO, "tests"), TESTS_IN_EE)]
    env = dict(os.environ)
    for name in [n for n in env if n.startswith(("ANSIBLE_", "GPUFLEET_"))] + ["PYTHONPATH"]:
        env.pop(name, None)
    return data, subprocess.run(argv, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600,
                                check=False)


def test_ansible_runner_runs_validate_in_the_ee_and_keeps_the_report_in_the_artifacts(ee_image, tmp_path,
                                                                                       whole_fleet_report):
    data, proc = _job(tmp_path, ee_image)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    artifacts = data / "artifacts"
    assert (artifacts / "job-1" / "rc").read_text().strip() == "0"
    assert (artifacts / "job-1" / "status").read_text().strip() == "successful"
    stdout = (artifacts / "job-1" / "stdout").read_text()
    assert "FLEET REPORT" in stdout  # the image enables the callback for every job
    report_dir = artifacts / "gpufleet-report"
    for name in ("fleet-report.json", "fleet-report.html", "junit.xml", "junit-fleet.xml"):
        assert (report_dir / name).is_file(), name
    ee_report, ee_checks = report_checks(report_dir)
    assert sorted(ee_report["hosts"]) == sorted(FLEET)
    assert ee_report["run"]["ansible_version"] == "2.19.14"
    assert ee_report["run"]["inventory"] == ["/runner/inventory"]

    # the same fleet validated on this machine (the venv, this checkout): the same report
    local_report, local_checks = report_checks(whole_fleet_report)
    assert ee_checks.keys() == local_checks.keys()
    differences = []
    for key, check in local_checks.items():
        if ee_checks[key] != check:
            differences.append("%s: here %s, EE %s" % (key, json.dumps(check), json.dumps(ee_checks[key])))
    assert not differences, "\n".join(differences[:20])
    assert ee_report["totals"] == local_report["totals"]
    assert list(ee_report["hosts"]) == list(local_report["hosts"])
