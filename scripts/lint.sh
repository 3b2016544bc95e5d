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
for playbook in playbooks/*.yml; do
  run ansible-playbook --syntax-check -i inventories/example/hosts.yml "$playbook"
done
for module in plugins/modules/*.py; do
  name="$(basename "$module" .py)"
  echo "--- ansible-doc gpufleet.cluster.$name"
  if ! ansible-doc "gpufleet.cluster.$name" >/dev/null 2>"/tmp/ansible-doc-$name.err"; then
    cat "/tmp/ansible-doc-$name.err"
    status=1
  elif grep -qi 'warning\|error' "/tmp/ansible-doc-$name.err"; then
    cat "/tmp/ansible-doc-$name.err"
    status=1
  fi
done
exit "$status"
