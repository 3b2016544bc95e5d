"""No task output, at -vvv, carries a key, token, kubeconfig or certificate key.

One ansible-playbook run (tests/integration/playbooks/no_secrets.yml, local connection) of the
role task files that handle credentials, against secrets generated for this test: a key pair in
the kubeconfigs (client-key-data, client-certificate-data), a kubeadm bootstrap token and
certificate key printed by a `kubeadm` stand-in first on PATH, the fake API server's bearer token.
The whole output and the fleet report's files are scanned for each secret, raw and inside base64
(slurp returns base64; a kubeconfig's key data is base64 of the PEM), and for the generic shapes
of secrets.
"""

import base64
import binascii
import datetime
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import textwrap

import pytest
import yaml

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "no_secrets.yml")
FIXTURE_ROOT = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]

# Generic shapes, searched in the output and in everything base64 in it that decodes to text.
PATTERNS = {
    "PEM private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "PEM certificate": re.compile(r"-----BEGIN CERTIFICATE-----"),
    "client-key-data value": re.compile(r"client-key-data\W{0,4}[A-Za-z0-9+/]{16}"),
    "client-certificate-data value": re.compile(r"client-certificate-data\W{0,4}[A-Za-z0-9+/]{16}"),
    "bearer token": re.compile(r"Bearer\s+[A-Za-z0-9._~+/-]{8,}"),
    "kubeadm token": re.compile(r"(?<![a-z0-9.])[a-z0-9]{6}\.[a-z0-9]{16}(?![a-z0-9])"),
    # a certificate key; a digest written as sha256:<hex> is not one
    "certificate key": re.compile(r"(?<![0-9a-fA-F:])[0-9a-f]{64}(?![0-9a-fA-F])"),
}
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")

FAKE_KUBEADM = '''\
#!/bin/sh
# kubeadm stand-in: prints what the real one prints around its secrets (kubeadm's own format
# strings, as tests/fixtures/kubeadm), exits as told by the node name.
TOKEN='{token}'
CERT_KEY='{cert_key}'
CA_HASH='sha256:{ca_hash}'
case "$1 $2 $3" in
  "config validate "*) exit 0 ;;
  "init phase upload-certs")
    echo "[upload-certs] Storing the certificates in Secret \\"kubeadm-certs\\" in the \\"kube-system\\" Namespace"
    echo "[upload-certs] Using certificate key:"
    echo "$CERT_KEY"
    exit 0 ;;
  "token create --print-join-command")
    shift 3
    extra=""
    while [ $# -gt 0 ]; do
      [ "$1" = "--certificate-key" ] && extra=" --control-plane --certificate-key $2"
      shift
    done
    echo "kubeadm join 127.0.0.1:6443 --token $TOKEN --discovery-token-ca-cert-hash $CA_HASH$extra"
    exit 0 ;;
esac
case "$1" in
  init)
    config=""
    while [ $# -gt 0 ]; do [ "$1" = "--config" ] && config="$2"; shift; done
    cp '{admin_conf}' "$(dirname "$config")/admin.conf"
    echo "[upload-certs] Using certificate key:"
    echo "$CERT_KEY"
    echo "[bootstrap-token] Using token: $TOKEN"
    echo "kubeadm join 127.0.0.1:6443 --token $TOKEN --discovery-token-ca-cert-hash $CA_HASH \\\\"
    echo "    --control-plane --certificate-key $CERT_KEY"
    exit 0 ;;
  join)
    case "$*" in
      *wk-2*)
        echo "error execution phase preflight: couldn't validate the identity of the API Server:" \\
          "token id \\"${{TOKEN%%.*}}\\" is invalid for this cluster or it has expired (token $TOKEN)" >&2
        exit 1 ;;
    esac
    echo "[preflight] Running pre-flight checks"
    echo "This node has joined the cluster (token $TOKEN)"
    exit 0 ;;
esac
echo "kubeadm stand-in: unexpected arguments: $*" >&2
exit 3
'''


def key_pair():
    """A fresh EC key and a self-signed certificate for it, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:gpufleet-secrets-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    return key_pem, cert.public_bytes(serialization.Encoding.PEM).decode()


def kubeconfig(server, key_pem, cert_pem, token=None):
    user = {"client-certificate-data": base64.b64encode(cert_pem.encode()).decode(),
            "client-key-data": base64.b64encode(key_pem.encode()).decode()}
    if token:
        user["token"] = token
    return textwrap.dedent("""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: gpufleet
          cluster:
            certificate-authority-data: {ca}
            server: {server}
        contexts:
        - name: system:node@gpufleet
          context: {{cluster: gpufleet, user: system:node}}
        current-context: system:node@gpufleet
        users:
        - name: system:node
          user:
            client-certificate-data: {cert}
            client-key-data: {key}
        """).format(ca=base64.b64encode(cert_pem.encode()).decode(), server=server,
                    cert=user["client-certificate-data"], key=user["client-key-data"])


def decoded_texts(text, depth=3):
    """The text and, recursively, every base64 run in it that decodes to text."""
    found = [text]
    if depth == 0:
        return found
    for run in set(BASE64_RUN.findall(text)):
        for candidate in (run, run[: len(run) - len(run) % 4]):
            try:
                data = base64.b64decode(candidate + "=" * (-len(candidate) % 4), validate=True)
                decoded = data.decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            found.extend(decoded_texts(decoded, depth - 1))
            break
    return found


class Run:
    def __init__(self, proc, seeded, reports=()):
        self.proc = proc
        self.output = proc.stdout + proc.stderr
        self.seeded = seeded
        self.texts = [text for source in [self.output, *reports] for text in decoded_texts(source)]

    def recap(self, host):
        match = re.search(r"^%s\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)" % re.escape(host),
                          self.proc.stdout, re.M)
        assert match, self.proc.stdout[-3000:]
        return {"ok": int(match.group(1)), "failed": int(match.group(4))}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("no_secrets")
    token = "%s.%s" % (secrets.token_hex(3), secrets.token_hex(8))
    cert_key = secrets.token_hex(32)
    bearer = "gpufleet-bearer-" + secrets.token_urlsafe(24)
    key_pem, cert_pem = key_pair()
    api = FakeKubeAPI(token=bearer).start()
    try:
        api.add_node("gate-node", labels={"nvidia.com/gpu.present": "true"})
        secrets_dir = tmp / "hosts"
        agents = ["agent-ok", "agent-json", "agent-pem", "agent-missing"]
        hosts = ["cp-1", "cp-2", "wk-1", "wk-2", *agents, "gate-node"]
        for host in hosts:
            (secrets_dir / host).mkdir(parents=True)
        admin_conf = tmp / "admin.conf"
        admin_conf.write_text(kubeconfig("https://127.0.0.1:6443", key_pem, cert_pem))
        kubelet_conf = kubeconfig("https://k8s-api.secrets-test.example:6443", key_pem, cert_pem)
        (secrets_dir / "agent-ok" / "kubelet.conf").write_text(kubelet_conf)
        json_conf = json.dumps(yaml.safe_load(kubelet_conf.replace("k8s-api.", "k8s-api-json.")))  # compact JSON
        (secrets_dir / "agent-json" / "kubelet.conf").write_text(json_conf)
        # not a kubeconfig: the kubelet's client certificate and key (kubelet-client-current.pem)
        (secrets_dir / "agent-pem" / "kubelet.conf").write_text(cert_pem + key_pem)
        bindir = tmp / "bin"
        bindir.mkdir()
        fake = bindir / "kubeadm"
        fake.write_text(FAKE_KUBEADM.format(token=token, cert_key=cert_key, ca_hash=secrets.token_hex(32),
                                            admin_conf=admin_conf))
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        local = {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON}
        inventory = {"all": {"vars": dict(local, secrets_dir=str(secrets_dir)), "children": {
            "kube_control_plane": {"hosts": {"cp-1": {}, "cp-2": {}}},
            "workers": {"hosts": {"wk-1": {}, "wk-2": {}}},
            "agents": {"hosts": {host: {} for host in agents},
                       "vars": {"node_health_agent_root": FIXTURE_ROOT,
                                "node_health_agent_kube_kubeconfig": "%s/{{ inventory_hostname }}/kubelet.conf"
                                % secrets_dir}},
            "gate": {"hosts": {"gate-node": {}},
                     "vars": {"node_gate_python": VENV_PYTHON,
                              "node_gate_allow_plain_http": True,  # the fake API server is plain http
                              "node_gate_kubeconfig": api.kubeconfig(tmp / "gate-kubeconfig")}},
        }}}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        per_host = "%s/{{ inventory_hostname }}" % secrets_dir
        extra = {  # role vars (vars/main.yml) of the two roles, per host under the temp directory
            "__kubernetes_control_plane_config_path": per_host + "/kubeadm-config.yaml",
            "__kubernetes_control_plane_admin_conf": per_host + "/admin.conf",
            "__kubernetes_control_plane_kubelet_conf": per_host + "/kubelet.conf",
            "__kubernetes_worker_kubelet_conf": per_host + "/kubelet.conf",
        }
        (tmp / "extra.json").write_text(json.dumps(extra))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", GPUFLEET_REPORT_DIR=str(tmp / "reports"),
                   TMPDIR=str(tmp), PATH="%s:%s" % (bindir, os.environ.get("PATH", "")))
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", str(tmp / "hosts.yml"), "-e", "@%s" % (tmp / "extra.json"),
                               PLAYBOOK], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
        (tmp / "output.txt").write_text(proc.stdout + proc.stderr)  # for a human reading a failure
        seeded = {
            "kubeadm token": token,
            "certificate key": cert_key,
            "bearer token": bearer,
            "private key body": key_pem.strip().splitlines()[1],  # its first base64 line
            "client-key-data": base64.b64encode(key_pem.encode()).decode(),
        }
        # what the fleet_report callback (ansible.cfg) wrote: failure messages end up there too
        reports = [path for path in (tmp / "reports").rglob("*") if path.is_file()]
        result = Run(proc, seeded, [path.read_text(errors="replace") for path in reports])
        result.reports = reports
        result.api = api
        result.secrets_dir = secrets_dir
        yield result
    finally:
        api.stop()


def test_the_credential_tasks_ran(run):
    """The scan means something only if the tasks that handle the secrets ran."""
    out = run.output
    assert "Run kubeadm init" in out and "Create a fresh control-plane join command" in out, out[-3000:]
    assert "Join this control plane" in out and "Join this node" in out
    assert os.path.exists(os.path.join(str(run.secrets_dir), "cp-1", "kube", "config"))  # admin kubeconfig copied
    assert run.recap("cp-1")["failed"] == 0 and run.recap("cp-2")["failed"] == 0, out[-3000:]
    assert run.recap("wk-1")["failed"] == 0 and run.recap("wk-2")["failed"] == 1
    assert run.recap("agent-ok")["failed"] == 0 and run.recap("agent-json")["failed"] == 0
    assert "__node_health_agent_settings.kubernetes.server: https://k8s-api.secrets-test.example:6443" in out
    assert "__node_health_agent_settings.kubernetes.server: https://k8s-api-json.secrets-test.example:6443" in out
    assert run.recap("gate-node")["failed"] == 0
    taints = run.api.node("gate-node")["spec"].get("taints", [])
    assert [t["key"] for t in taints] == ["gpufleet.io/unhealthy"], out[-3000:]
    assert all(r["status"] != 401 for r in run.api.requests)  # the bearer token was used


def test_failures_name_the_file_or_command_not_the_secret(run):
    out = run.output
    assert "kubeadm join failed (rc=1):" in out and "<redacted-token>" in out
    pem = os.path.join(str(run.secrets_dir), "agent-pem", "kubelet.conf")
    missing = os.path.join(str(run.secrets_dir), "agent-missing", "kubelet.conf")
    message = "node_health_agent: no API server URL (server: https://...) in node_health_agent_kube_kubeconfig %s"
    assert " ".join((message % pem + ";").split()) in " ".join(out.split())
    assert " ".join((message % missing + " (File not found").split()) in " ".join(out.split())
    assert run.recap("agent-pem")["failed"] == 1 and run.recap("agent-missing")["failed"] == 1
    # the fleet report files the failures too, and is scanned with the output
    assert any(path.name == "junit.xml" and "agent-pem/kubelet.conf" in path.read_text() for path in run.reports)


@pytest.mark.parametrize("name", ["kubeadm token", "certificate key", "bearer token", "private key body",
                                  "client-key-data"])
def test_no_seeded_secret_in_the_output(run, name):
    secret = run.seeded[name]
    leaks = [text for text in run.texts if secret in text]
    assert not leaks, "%s found in the -vvv output:\n%s" % (name, leaks[0][max(0, leaks[0].find(secret) - 800):][:1600])


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_secret_shape_in_the_output(run, name):
    pattern = PATTERNS[name]
    for text in run.texts:
        match = pattern.search(text)
        assert match is None, "%s in the -vvv output: ...%s..." % (
            name, text[max(0, match.start() - 300):match.end() + 100])


def test_the_scan_finds_what_it_looks_for():
    """The scan itself: a slurped kubeconfig (base64 of base64 key data) and a join line are caught."""
    key_pem, cert_pem = key_pair()
    slurped = base64.b64encode(kubeconfig("https://x:6443", key_pem, cert_pem).encode()).decode()
    texts = decoded_texts('ok: [h] => {"content": "%s", "encoding": "base64"}' % slurped)
    assert any(PATTERNS["PEM private key"].search(t) for t in texts)
    assert any(PATTERNS["client-key-data value"].search(t) for t in texts)
    line = "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --certificate-key %s" % ("ab" * 32)
    assert PATTERNS["kubeadm token"].search(line) and PATTERNS["certificate key"].search(line)
    assert not PATTERNS["certificate key"].search("--discovery-token-ca-cert-hash sha256:%s" % ("ab" * 32))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
