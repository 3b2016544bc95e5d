"""Role preflight reads the node's containerd config versions (root config and every drop-in),
the installed kubelet and kubeadm and passes them to the compatibility matrix: a drop-in whose
version differs from the root config's, or a kubelet two minors behind, is refused naming the
rule, the file and the fix. One ansible-playbook run for every case: one local host per case, each
with its stand-ins (config files in its own temporary directory, kubelet/kubeadm/containerd scripts
on its PATH) and its variables (as -e gave them to a run per case before)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "preflight_compat.yml")


def _stand_in(bindir, name, output):
    path = bindir / name
    path.write_text("#!/bin/sh\necho '%s'\n" % output)
    path.chmod(0o755)


def prepare_case(tmp_path, root_config, dropins, kubelet=None, kubeadm=None, extra=None):
    """The stand-ins and the variables of one case in ``tmp_path`` -> (host variables, etc directory)."""
    etc = tmp_path / "containerd"
    (etc / "conf.d").mkdir(parents=True)
    if root_config is not None:
        (etc / "config.toml").write_text(root_config)
    for name, text in dropins.items():
        (etc / "conf.d" / name).write_text(text)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # containerd 2.3 installed (so the config-version rules of the containerd line hold)
    _stand_in(bindir, "containerd", "containerd github.com/containerd/containerd/v2 v2.3.4 0000000")
    if kubelet:
        _stand_in(bindir, "kubelet", "Kubernetes %s" % kubelet)
    if kubeadm:
        _stand_in(bindir, "kubeadm", kubeadm)
    case_vars = {"result_file": str(tmp_path / "problems.json"),
                 "fixture_root": os.path.join(FIXTURES, "nodes", "dgx-h100"),
                 "__preflight_containerd_root_config": str(etc / "config.toml"),
                 "__preflight_containerd_dropin_dir": str(etc / "conf.d")}
    case_vars.update(extra or {})
    (tmp_path / "vars.json").write_text(json.dumps(case_vars))
    host = {"case_vars": str(tmp_path / "vars.json"), "case_path": "%s:%s" % (bindir, os.environ.get("PATH", ""))}
    return host, etc


def run_preflight(tmp_path, hosts):
    """One run over ``hosts`` (name -> host variables of prepare_case) -> name -> refused rules."""
    (tmp_path / "hosts.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts.json"),
         PLAYBOOK], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = {}
    for name, host in hosts.items():
        with open(host["case_vars"]) as handle:
            result = json.load(handle)["result_file"]
        with open(result) as handle:
            # the cgroup hierarchy is this machine's own (v1 on some CI hosts): that rule is not under test
            results[name] = [p for p in json.load(handle) if p["id"] != "kubernetes-cgroup-v2"]
    return results


def _grace_blackwell_tree(tmp_path, efa):
    """The DGX H100 fixture tree with its GPUs' PCI device ids made GB200's (0x2941), and, with efa,
    one PCI function bound to the efa driver (as /sys/bus/pci/drivers/efa/<address> is on a p6e-gb200
    instance; the address is the one NVIDIA AICR PR 2439 measured)."""
    root = tmp_path / "node"
    shutil.copytree(os.path.join(FIXTURES, "nodes", "dgx-h100"), root, symlinks=True)
    for path in root.glob("sys/devices/**/device"):
        if path.is_file() and not path.is_symlink() and path.read_text().strip() == "0x2330":
            path.write_text("0x2941\n")
    if efa:
        drivers = root / "sys" / "bus" / "pci" / "drivers" / "efa"
        drivers.mkdir(parents=True)
        (drivers / "0000:97:00.0").symlink_to("../../../../devices/pci0000:84/0000:84:00.0/0000:97:00.0")
    return root


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Every case of this module in one run -> name -> (refused rules, etc directory, node root or None)."""
    tmp = tmp_path_factory.mktemp("preflight_compat")
    hosts, etcs, roots = {}, {}, {}

    def case(name, *args, **kwargs):
        (tmp / name).mkdir()
        hosts[name], etcs[name] = prepare_case(tmp / name, *args, **kwargs)

    # an nvidia-ctk drop-in of toolkit 1.19+ (version 4, containerd 2.3's) next to a version 2 root config
    case("dropin", 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n',
         {"99-gpufleet.toml": "version = 2\n", "99-nvidia.toml": "version = 4\nimports = []\n"},
         kubelet="v1.36.4", kubeadm="v1.36.4")
    case("matching", "version = 4\n", {"99-gpufleet.toml": "version = 4\n"}, kubelet="v1.35.9", kubeadm="v1.36.4")
    case("two-minors", None, {}, kubelet="v1.34.2", kubeadm="v1.36.4",
         extra={"gpufleet_kubernetes_version": "1.36.4"})
    for efa in (True, False):
        name = "efa" if efa else "no-efa"
        (tmp / (name + "-tree")).mkdir()
        roots[name] = root = _grace_blackwell_tree(tmp / (name + "-tree"), efa)
        case(name, "version = 4\n", {}, kubelet="v1.36.5", kubeadm="v1.36.5",
             extra={"fixture_root": str(root), "preflight_sysfs_root": str(root),
                    "__preflight_cpu_architecture": "aarch64", "nvidia_driver_branch": "595",
                    "gpufleet_kubernetes_version": "1.36.5"})
    results = run_preflight(tmp, hosts)
    return {name: (results[name], etcs[name], roots.get(name)) for name in hosts}


def test_dropin_in_another_version_than_the_root_config_is_refused(cases):
    problems, etc, _ = cases["dropin"]
    assert [p["id"] for p in problems] == ["containerd-dropin-root-version"], problems
    message = problems[0]["message"]
    assert "containerd_config_version=2 (from %s)" % (etc / "config.toml") in message
    assert "%s=4" % (etc / "conf.d" / "99-nvidia.toml") in message
    assert "Fix: rewrite the named drop-in" in message


def test_matching_versions_and_a_kubelet_one_minor_behind_pass(cases):
    problems, _, _ = cases["matching"]
    assert problems == []


def test_kubelet_two_minors_behind_and_no_containerd_config(cases):
    problems, _, _ = cases["two-minors"]
    assert [p["id"] for p in problems] == ["kubelet-one-minor-upgrade"], problems
    assert "kubelet=v1.34.2 (from installed kubelet)" in problems[0]["message"]


def test_efa_on_grace_blackwell_with_driver_595_is_refused(cases):
    """preflight reads the EFA devices and the CPU architecture: a Grace-Blackwell node with EFA on
    branch 595 is refused naming the rule, the efa directory and the fix; without EFA it passes."""
    for efa in (True, False):
        problems, _, root = cases["efa" if efa else "no-efa"]
        ids = [p["id"] for p in problems]
        if not efa:
            assert ids == [], problems
            continue
        assert ids == ["efa-grace-blackwell-driver-580"], problems
        message = problems[0]["message"]
        assert "efa=present (from %s/sys/bus/pci/drivers/efa)" % root in message
        assert "cpu_architecture=aarch64" in message and "driver=595 (from nvidia_driver_branch)" in message
        assert 'Fix: set nvidia_driver_branch to "580"' in message
