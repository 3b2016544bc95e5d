#!/usr/bin/env bash
# ansible-test sanity of the collection as it is shipped: build the tarball (galaxy.yml
# build_ignore), install it under a temporary ansible_collections/gpufleet/cluster, run every
# sanity test there with Python 3.11. Testing the built collection keeps the checkout's test
# fixtures (real sysfs names with ':') out, as they are out of the tarball.
# ansible-test runs each sanity test in its own virtual environment under ~/.ansible/test/venv
# with its pinned requirements from the package index (PyPI; created once, then reused). Its pip
# bootstrap script comes from ci-files.testing.ansible.com, which is not reachable here:
# scripts/ansible-test-get-pip.py stands in for it (pip from ensurepip, no download).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
unset ANSIBLE_CONFIG
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# the pip version ansible-test bootstraps (its get_venv_packages)
pip_version="$(grep -oP "pip='\K[0-9.]+" "$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" | head -1)"
mkdir -p ~/.ansible/test/cache
cp scripts/ansible-test-get-pip.py ~/.ansible/test/cache/get_pip_"${pip_version//./_}".py
ansible-galaxy collection build --output-path "$work" . >/dev/null
(cd "$work" && ansible-galaxy collection install --no-deps --force -p "$work/collections" "$work"/gpufleet-cluster-*.tar.gz >/dev/null)
cd "$work/collections/ansible_collections/gpufleet/cluster"
ansible-test sanity --python 3.11 --color no "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
exit "${PIPESTATUS[0]}"
