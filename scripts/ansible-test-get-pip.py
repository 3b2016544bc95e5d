"""Stand-in for ansible-test's pip bootstrap script (get-pip.py, downloaded from
ci-files.testing.ansible.com, which this machine cannot reach): pip from the interpreter's own
bundled wheel (ensurepip, no network), then the requested packages (pip==<version>) from the
package index pip is configured with. ansible-test runs this with PIP_CONFIG_FILE=/dev/null, so
the machine's pip configuration is restored for that one install, and the CA bundle of
SSL_CERT_FILE / Debian's /etc/ssl/certs/ca-certificates.crt is passed when present.
scripts/sanity.sh copies this file to ~/.ansible/test/cache/get_pip_<version>.py."""

import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
env = dict(os.environ)
if env.get("PIP_CONFIG_FILE") == os.devnull:
    del env["PIP_CONFIG_FILE"]
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
for bundle in (env.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
    if bundle and os.path.exists(bundle):
        args = ["--cert", bundle] + args
        break
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env))
