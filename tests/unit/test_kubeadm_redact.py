"""kubeadm_redact on failure output laid out as kubeadm prints it.

The lines follow kubeadm's own format strings (phases bootstrap-token: "[bootstrap-token] Using
token: %s", upload-certs: "[upload-certs] Using certificate key:\\n%s", the join command printed by
`kubeadm init` and `kubeadm token create --print-join-command`, `kubeadm token list` columns);
tokens and keys are made up, in kubeadm's formats ([a-z0-9]{6}.[a-z0-9]{16}, 32 bytes hex).
"""

import os

import pytest
from ansible.errors import AnsibleFilterError

from conftest import FIXTURES

from ansible_collections.gpufleet.cluster.plugins.filter.kubeadm import kubeadm_redact

TOKEN = "9a08jv.c0izixklcxtmnze7"
KEY = "8c2d6f3d2e4b5a69c0b1e7f4d3a2b1c0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4"
CA_HASH = "sha256:" + "1f" * 32


def fixture(name):
    with open(os.path.join(FIXTURES, "kubeadm", name), encoding="utf-8") as handle:
        return handle.read()


INIT_FAILED = fixture("init_failed.txt")
JOIN_COMMAND = ("kubeadm join 10.0.0.10:6443 --token %s \\\n\t--discovery-token-ca-cert-hash %s \\\n"
                "\t--control-plane --certificate-key %s" % (TOKEN, CA_HASH, KEY))

TOKEN_LIST = fixture("token_list.txt")


@pytest.mark.parametrize("text", [INIT_FAILED, JOIN_COMMAND, TOKEN_LIST])
def test_no_secret_survives(text):
    out = kubeadm_redact(text, limit=0)
    assert TOKEN not in out and KEY not in out
    assert "9a08jv" not in out and "c0izixklcxtmnze7" not in out


def test_init_failure_keeps_the_error_and_marks_what_was_removed():
    out = kubeadm_redact(INIT_FAILED, limit=0)
    assert "[bootstrap-token] Using token: <redacted-token>" in out
    assert "[upload-certs] Using certificate key:\n<redacted>" in out
    assert "error execution phase addon/coredns: unable to create RBAC clusterrole" in out
    assert "connection refused" in out


def test_join_command_and_list_of_lines():
    out = kubeadm_redact(JOIN_COMMAND.splitlines(), limit=0)
    assert "--token <redacted" in out and "--certificate-key <redacted>" in out
    assert out.startswith("kubeadm join 10.0.0.10:6443")


def test_token_flag_with_equals_and_limit():
    out = kubeadm_redact("kubeadm join --token=%s %s" % (TOKEN, "x" * 3000))
    assert TOKEN not in out and out.startswith("kubeadm join --token=<redacted")
    assert len(out) == 2000 + len(" ...")


def test_other_text_is_untouched():
    text = "[kubelet-start] Writing kubelet configuration to file \"/var/lib/kubelet/config.yaml\" v1.31.4"
    assert kubeadm_redact(text) == text
    assert kubeadm_redact(None) == ""


@pytest.mark.parametrize("value,limit", [({"a": 1}, 10), ("x", -1), ("x", True), ("x", "5")])
def test_bad_input_names_the_argument(value, limit):
    with pytest.raises(AnsibleFilterError, match="kubeadm_redact: (input|limit)"):
        kubeadm_redact(value, limit=limit)
