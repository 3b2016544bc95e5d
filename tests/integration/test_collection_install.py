"""The collection as users get it: `ansible-galaxy collection build` holds only the collection
(galaxy.yml build_ignore), the tarball installs into a temporary path, and from a directory outside
any checkout `ansible-playbook gpufleet.cluster.validate` runs on simulated nodes (fixture sysfs,
fake NVML) and writes the fleet report once the callback is enabled the documented way."""

import json
import os
import subprocess
import tarfile

import pytest
import yaml
from installed_collection import BIN, LOCAL, build_and_install, clean_env, simulated_gpu

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-galaxy")),
                                reason="run `make setup` first")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("collection")
    tarball, collections = build_and_install(base)
    assert os.path.basename(tarball) == "gpufleet-cluster-0.1.0.tar.gz", tarball
    # the only gpufleet.cluster Ansible sees is the installed one (not the checkout's .collections)
    proc = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "list", "gpufleet.cluster"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=str(base),
                          env=clean_env(collections))
    assert proc.stdout.count("gpufleet.cluster") == 1 and str(collections) in proc.stdout, proc.stdout
    return tarball, collections


def test_tarball_holds_only_the_collection(installed):
    tarball, _ = installed
    with tarfile.open(str(tarball)) as archive:
        names = archive.getnames()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.md", "changelogs", "meta", "plugins",
                    "roles", "playbooks", "docs", "inventories"}, tops
    # the example inventory only (the README's first step copies it from the installed collection)
    assert {n.split("/")[1] for n in names if n.startswith("inventories/") and n.count("/") > 1} == {"example"}
    assert "inventories/example/group_vars/gpu_nodes/gpufleet.yml" in names
    for name in names:
        parts = name.split("/")
        assert "molecule" not in parts and "__pycache__" not in parts and not name.endswith(".pyc"), name
        assert not name.startswith(("roles/lab_sim", "playbooks/lab.yml", "playbooks/lab_agent.yml")), name
    for needed in ("plugins/modules/node_validate.py", "plugins/callback/fleet_report.py",
                   "plugins/plugin_utils/templates/fleet_report.html.j2", "playbooks/validate.yml",
                   "playbooks/site.yml", "playbooks/fabric_test.yml", "playbooks/k8s_validate.yml",
                   "playbooks/rolling_upgrade.yml", "playbooks/health_agent.yml",
                   "roles/nvidia_driver/meta/argument_specs.yml"):
        assert needed in names, needed


def _site(tmp_path):
    """An admin's directory outside the checkout: inventory of two simulated DGX H100 nodes."""
    site = tmp_path / "site"
    site.mkdir()
    hosts = {"node-ok": simulated_gpu(), "node-ecc": simulated_gpu("h100-ecc-volatile-uncorrectable.json")}
    inventory = {"all": {"vars": dict(LOCAL, **{
                                  "gpufleet_validate_fail_on": "never", "gpufleet_gpu_count": 8,
                                  "gpufleet_driver_branch": "580", "gpufleet_expected_hcas": 9}),
                         "hosts": hosts}}
    (site / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return site


def _playbook(site, collections, *argv, **extra_env):
    env = clean_env(collections)
    env.update(extra_env)
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "hosts.yml"] + list(argv),
                          cwd=str(site), env=env, capture_output=True, text=True, timeout=600, check=False)


def test_validate_by_fqcn_from_outside_a_checkout_writes_the_report(installed, tmp_path):
    _, collections = installed
    site = _site(tmp_path)
    proc = _playbook(site, collections, "gpufleet.cluster.validate",
                     ANSIBLE_CALLBACKS_ENABLED="gpufleet.cluster.fleet_report")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "FLEET REPORT" in out, out
    report = json.loads((site / "reports" / "fleet-report.json").read_text())
    assert list(report["hosts"]) == ["node-ecc", "node-ok"], report["hosts"].keys()
    assert report["hosts"]["node-ok"]["healthy"] is True
    failed = [c["id"] for c in report["hosts"]["node-ecc"]["checks"] if c["status"] == "fail"]
    assert failed == ["gpu.ecc.volatile_uncorrectable"], failed
    assert (site / "reports" / "fleet-report.html").is_file() and (site / "reports" / "junit.xml").is_file()
    assert "reports: %s" % (site / "reports" / "fleet-report.json") in out, out
    assert "NO fleet report" not in out


def test_without_the_callback_the_run_says_how_to_enable_it(installed, tmp_path):
    _, collections = installed
    site = _site(tmp_path)
    proc = _playbook(site, collections, "gpufleet.cluster.validate")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "NO fleet report: the callback gpufleet.cluster.fleet_report is not enabled" in out, out
    assert "ANSIBLE_CALLBACKS_ENABLED=gpufleet.cluster.fleet_report" in out
    assert not (site / "reports").exists()


def test_every_playbook_resolves_by_fqcn(installed, tmp_path):
    _, collections = installed
    site = _site(tmp_path)
    for name in ("site", "node", "kubernetes", "validate", "fabric_test", "k8s_validate", "rolling_upgrade", "mirror"):
        proc = _playbook(site, collections, "--syntax-check", "gpufleet.cluster." + name)
        assert proc.returncode == 0, name + "\n" + proc.stdout + proc.stderr
