#!/usr/bin/env bash
# The whole test suite: lint, unit + integration tests, molecule scenarios. Non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
# Prints the duration of every step and the total (scripts/molecule-all.sh adds per scenario
# and per molecule step figures). GPUFLEET_SKIP_MOLECULE=1 leaves molecule out.
status=0
t0=$(date +%s)
timings=()

step() {
  local name="$1" start rc=0
  shift
  echo
  echo "=== $name"
  start=$(date +%s)
  "$@" || rc=$?
  timings+=("$(printf '%-30s %5d s  %s' "$name" "$(( $(date +%s) - start ))" "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)")")
  if [[ "$rc" -ne 0 ]]; then
    echo "=== FAILED: $*" >&2
    status=1
  fi
}

step "lint" bash scripts/lint.sh
step "pytest (unit + integration)" pytest -q tests
# Every bench/ script at a tiny size (--smoke): that it runs and prints its figures, not what they are.
step "bench smoke" python bench/smoke.py
step "ansible-test sanity" bash scripts/sanity.sh
if [[ "${GPUFLEET_SKIP_MOLECULE:-0}" != "1" ]]; then
  step "molecule" bash scripts/molecule-all.sh
fi
echo
echo "=== timings"
printf '  %s\n' "${timings[@]}"
printf '  %-30s %5d s  %s\n' "total" "$(( $(date +%s) - t0 ))" "$([[ $status -eq 0 ]] && echo ok || echo FAILED)"
exit "$status"
