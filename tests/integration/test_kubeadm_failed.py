"""The Kubernetes roles run kubeadm with no_log (its output holds the bootstrap token and the
certificate key) and stop through common_internal's kubeadm_failed entry point: the error must
name the command and kubeadm's reason, with every secret redacted."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "kubeadm_failed.yml")
TOKEN = "9a08jv.c0izixklcxtmnze7"
CERT_KEY = "8c2d6f3d2e4b5a69c0b1e7f4d3a2b1c0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4"

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def _run(tmp, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", GPUFLEET_REPORT_DIR=str(tmp))
    cmd = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + VENV_PYTHON,
           PLAYBOOK] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_failed_kubeadm_names_command_and_reason_without_secrets(tmp_path):
    proc = _run(tmp_path, "-v")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "kubeadm init failed (rc=1):" in out
    assert "error execution phase addon/coredns: unable to create RBAC clusterrole" in out
    assert "Using token: <redacted-token>" in out and "Using certificate key:" in out and "<redacted>" in out
    assert TOKEN not in out and CERT_KEY not in out
    assert "kubeadm succeeded" not in out


def test_successful_kubeadm_goes_on(tmp_path):
    proc = _run(tmp_path, "-e", "kubeadm_rc=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "kubeadm succeeded" in out
    assert TOKEN not in out
