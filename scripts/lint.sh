#!/usr/bin/env bash
# Lint everything: yamllint, ruff, ansible-lint (production, offline), syntax-check of every
# playbook, and ansible-doc rendering of every module.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
status=0

run() {
  echo "--- $*"
  "$@" || status=1
}

run yamllint -s .
run ruff check plugins tests bench scripts
run ansible-lint -q
run bash scripts/changelog.sh --check   # CHANGELOG.md is generated from changelogs/fragments/
# One ansible-playbook process checks every playbook (each process start is about a CPU second; the
# test suite's time budget); if that fails, one run per playbook names each one that fails.
echo "--- ansible-playbook --syntax-check -i inventories/example/hosts.yml playbooks/*.yml"
if ! ansible-playbook --syntax-check -i inventories/example/hosts.yml playbooks/*.yml >/dev/null 2>/tmp/ansible-syntax.err; then
  cat /tmp/ansible-syntax.err
  status=1
  for playbook in playbooks/*.yml; do
    run ansible-playbook --syntax-check -i inventories/example/hosts.yml "$playbook"
  done
fi
# Likewise one ansible-doc renders every module; any error, or a warning naming a module (a
# module not found, a documentation problem), fails the lint, and one run per module names it.
modules=()
for module in plugins/modules/*.py; do
  modules+=("gpufleet.cluster.$(basename "$module" .py)")
done
echo "--- ansible-doc ${modules[*]}"
if ! ansible-doc "${modules[@]}" >/dev/null 2>/tmp/ansible-doc-all.err \
   || grep -qi 'warning\|error' /tmp/ansible-doc-all.err; then
  cat /tmp/ansible-doc-all.err
  status=1
  for name in "${modules[@]}"; do
    echo "--- ansible-doc $name"
    if ! ansible-doc "$name" >/dev/null 2>"/tmp/ansible-doc-$name.err"; then
      cat "/tmp/ansible-doc-$name.err"
    elif grep -qi 'warning\|error' "/tmp/ansible-doc-$name.err"; then
      cat "/tmp/ansible-doc-$name.err"
    fi
  done
fi
exit "$status"
