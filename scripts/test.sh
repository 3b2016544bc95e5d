#!/usr/bin/env bash
# The whole test suite: lint, unit + integration tests, molecule scenarios. Non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
status=0

step() {
  echo
  echo "=== $1"
  shift
  if ! "$@"; then
    echo "=== FAILED: $*" >&2
    status=1
  fi
}

step "lint" bash scripts/lint.sh
step "pytest (unit + integration)" pytest -q tests
if [[ "${GPUFLEET_SKIP_MOLECULE:-0}" != "1" ]]; then
  step "molecule" bash scripts/molecule-all.sh
fi
exit "$status"
