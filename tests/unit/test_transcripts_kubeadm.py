"""The kubeadm stand-in of the molecule scenarios (roles/kubernetes_{control_plane,worker}/molecule/default/
files/kubeadm, a bash script handing every call to tests/transcripts/kubeadm/replay.py) prints no line that
no kubeadm transcript has: init, join, token create, config validate and init phase upload-certs as well as
version, upgrade and certs. Run as real subprocesses over a node's files (KUBEADM_DOUBLE_ROOT), from the
YAML corpus and from its JSON export (what molecule's prepare.yml installs in a container without PyYAML)."""

import contextlib
import io
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transcripts import corpus

STANDIN = os.path.join(REPO, "roles", "kubernetes_control_plane", "molecule", "default", "files", "kubeadm")
REPLAY = os.path.join(REPO, "tests", "transcripts", "kubeadm", "replay.py")
replay = corpus.KUBEADM_REPLAY
CONFIG = "/etc/kubernetes/kubeadm-config.yaml"
KEY = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")


@pytest.fixture
def node(tmp_path):
    """A node's root (etc/kubernetes with the configuration kubernetes_control_plane writes) and a runner."""
    etc = tmp_path / "etc" / "kubernetes"
    etc.mkdir(parents=True)
    (etc / "kubeadm-config.yaml").write_text(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: \"192.0.2.77:8443\"\n")

    def run(*args, **env):
        full = dict(os.environ, KUBEADM_DOUBLE_ROOT=str(tmp_path), KUBEADM_DOUBLE_LOG=str(tmp_path / "calls.log"),
                    KUBEADM_DOUBLE_PYTHON=sys.executable, **env)
        for name in ("KUBEADM_DOUBLE_MINOR", "KUBEADM_DOUBLE_CASES", "KUBEADM_DOUBLE_ENDPOINT", "KUBEADM_DOUBLE_CORPUS"):
            if name not in env:
                full.pop(name, None)
        return subprocess.run([STANDIN] + list(args), env=full, capture_output=True, text=True, timeout=60,
                              check=False)
    run.root = tmp_path
    run.config = str(etc / "kubeadm-config.yaml")
    return run


def _known(*results):
    for result in results:
        unknown = corpus.unknown_lines("kubeadm", result.stdout) + corpus.unknown_lines("kubeadm", result.stderr)
        assert unknown == [], (result.args, unknown)


def test_the_two_stand_ins_are_one_and_print_nothing_of_their_own():
    other = STANDIN.replace("kubernetes_control_plane", "kubernetes_worker")
    with open(STANDIN, encoding="utf-8") as one, open(other, encoding="utf-8") as two:
        text = one.read()
        assert text == two.read()
    # every line printed on stdout is replay.py's; the script's own messages are refusals on stderr (exit 2)
    assert "echo \"$*\" >> " in text
    assert [line for line in text.splitlines() if line.strip().startswith(("echo", "printf"))
            and ">&2" not in line and ">>" not in line and "> \"$2\"" not in line] == []


def test_a_first_control_plane_then_a_second_and_a_worker(node):
    """The molecule scenarios' calls, in their order: every answer a transcript's, cases chosen by state."""
    validated = node("config", "validate", "--config", node.config)
    init = node("init", "--config", node.config, "--upload-certs")
    again = node("init", "--config", node.config, "--upload-certs")
    certs = node("init", "phase", "upload-certs", "--upload-certs", "--config", node.config)
    key = certs.stdout.splitlines()[-1]
    control = node("token", "create", "--print-join-command", "--ttl", "30m", "--certificate-key", key)
    worker = node("token", "create", "--print-join-command", "--ttl", "30m")
    _known(validated, init, again, certs, control, worker)
    assert [r.returncode for r in (validated, init, again, certs, control, worker)] == [0, 0, 1, 0, 0, 0]
    assert validated.stdout == "ok\n"
    assert "Your Kubernetes control-plane has initialized successfully!" in init.stdout
    assert "kubeadm join 192.0.2.77:8443 --token " in init.stdout  # the configuration's endpoint
    assert "[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]" in again.stderr
    assert key == KEY
    # what the roles read: the last line split, [2] the endpoint, the key given, no --control-plane for a worker
    control_line = control.stdout.splitlines()[-1].split()
    worker_line = worker.stdout.splitlines()[-1].split()
    assert control_line[:3] == worker_line[:3] == ["kubeadm", "join", "192.0.2.77:8443"]
    assert control_line[-3:] == ["--control-plane", "--certificate-key", KEY] and "--control-plane" not in worker_line
    assert (node.root / "etc" / "kubernetes" / "admin.conf").exists()
    # a second control plane and a worker, each on its own (fresh) node
    for extra, case in ((["--apiserver-advertise-address", "10.0.0.13", "--apiserver-bind-port", "6443",
                          "--cri-socket", "unix:///run/containerd/containerd.sock"], "join-control-plane-success"),
                        (["--cri-socket", "unix:///run/containerd/containerd.sock", "--node-name", "gpu-7"],
                         "join-worker-success")):
        argv = (control_line if "control-plane" in case else worker_line)[1:] + extra
        (node.root / "etc" / "kubernetes" / "kubelet.conf").unlink()
        (node.root / "etc" / "kubernetes" / "admin.conf").unlink()
        joined = node(*argv)
        refused = node(*argv)
        _known(joined, refused)
        expected = corpus.find("kubeadm", case)
        assert (joined.returncode, joined.stdout, joined.stderr) == (expected["rc"], expected["stdout"], expected["stderr"])
        assert refused.returncode == 1 and "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]" in refused.stderr
        assert (node.root / "etc" / "kubernetes" / "admin.conf").exists() == ("control-plane" in case)


def test_a_missing_configuration_and_calls_no_transcript_has(node):
    missing = node("config", "validate", "--config", str(node.root / "none.yaml"))
    _known(missing)
    assert missing.returncode == 1 and missing.stderr.startswith("open %s: no such file" % (node.root / "none.yaml"))
    bad = node.root / "bad.yaml"
    bad.write_text("kind: InitConfiguration\n")
    for args in (["config", "validate", "--config", str(bad)], ["reset", "-f"], ["token", "list"],
                 ["init", "phase", "upload-certs"], ["join", "x:6443", "--token", "t"], ["version"]):
        result = node(*args)
        assert result.returncode == 2 and result.stdout == "" and "stand-in" in result.stderr, (args, result)


def test_certs_and_upgrade_through_the_stand_in(node):
    """version, upgrade and certs go to replay.py unchanged (every transcript of them is replayed in-process
    by tests/unit/test_kubeadm.py; here two through the bash script)."""
    for case in ("certs-check-expiration-json-expired", "upgrade-node-failure"):
        doc = corpus.get("kubeadm/1.33/" + case)
        result = node(*doc["argv"][1:], KUBEADM_DOUBLE_MINOR="1.33", KUBEADM_DOUBLE_CASES=case)
        assert (result.returncode, result.stdout, result.stderr) == (doc["rc"], doc["stdout"], doc["stderr"])
        _known(result)


def test_the_json_export_answers_without_pyyaml(node, tmp_path_factory):
    """molecule: prepare.yml installs replay.py and `replay.py --export <minor>` in the container, whose
    Python has no PyYAML; the stand-in answers the same from there."""
    share = tmp_path_factory.mktemp("share")
    shutil.copy(REPLAY, share / "replay.py")
    export = subprocess.run([sys.executable, REPLAY, "--export", "1.36"], capture_output=True, text=True,
                            timeout=60, check=True).stdout
    (share / "transcripts.json").write_text(export)
    no_yaml = tmp_path_factory.mktemp("noyaml")
    (no_yaml / "yaml.py").write_text("raise ImportError('no PyYAML here')\n")
    env = {"KUBEADM_DOUBLE_REPLAY": str(share / "replay.py"), "PYTHONPATH": str(no_yaml)}
    init = node("init", "--config", node.config, "--upload-certs", **env)
    version = node("version", "-o", "short", **env)
    direct = node("version", "-o", "short")
    assert init.returncode == 0 and "initialized successfully" in init.stdout, init.stderr
    assert version.stdout == "v1.36.5\n" and direct.stdout != version.stdout  # only 1.36 exported
    _known(init, version)


# -- any call: a transcript's answer (with the call's own values) or a refusal, never an invented line ------
_WORD = st.from_regex(r"\A[A-Za-z0-9.:/_=-]{1,24}\Z")
_CALLS = st.one_of(
    st.lists(st.one_of(_WORD, st.sampled_from(["--token", "--control-plane", "--config", "-o", "json", "join",
                                               "init", "token", "create", "--print-join-command", "upgrade"])),
             max_size=8),
    st.builds(lambda doc, i, word: doc["argv"][1:][:i] + [word] + doc["argv"][1:][i + 1:],
              st.sampled_from(replay.transcripts(replay.HERE)), st.integers(0, 20), _WORD),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=_CALLS, minor=st.sampled_from(replay.minors(replay.HERE)))
def test_any_call_is_a_transcript_or_a_refusal(args, minor):
    out, err = io.StringIO(), io.StringIO()
    env = {"KUBEADM_DOUBLE_MINOR": minor, "KUBEADM_DOUBLE_CASES": ""}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = replay.main(list(args))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if rc == 2 and out.getvalue() == "":
        assert err.getvalue().startswith("kubeadm stand-in: ")
        return
    assert corpus.unknown_lines("kubeadm", out.getvalue()) == [], args
    assert corpus.unknown_lines("kubeadm", err.getvalue()) == [], args
    doc = replay.choose(list(args), minor, [])
    assert rc == doc["rc"]


def test_every_kubeadm_transcript_names_its_source_and_the_corpus_loader_agrees():
    for doc in replay.transcripts(replay.HERE):
        loaded = corpus.get("kubeadm/%s/%s" % (doc["minor"], doc["case"]))
        assert loaded["stdout"] == doc["stdout"] and corpus.source_problem(doc["source"]) is None
        with open(os.path.join(replay.HERE, doc["minor"], doc["case"] + ".yml"), encoding="utf-8") as handle:
            assert yaml.safe_load(handle)["argv"] == doc["argv"]
