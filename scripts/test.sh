#!/usr/bin/env bash
# The whole test suite: lint, unit + integration tests, molecule scenarios. Non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
# Prints the duration of every step and the total (scripts/molecule-all.sh adds per scenario
# and per molecule step figures). GPUFLEET_SKIP_MOLECULE=1 leaves molecule out.
#
# Molecule starts first, in the background, and the other steps run beside it: they are mostly
# one process at a time (one core of two), and molecule's start (Docker engine, test image build:
# network and disk) and its two scenario slots use what they leave. Its output goes to
# .cache/test-molecule.log and is shown once the other steps are done, then followed to its end.
# The other steps' durations include waiting for a core while molecule runs; "molecule" is its
# wall time from the start. GPUFLEET_TEST_SERIAL=1 runs molecule last, alone (as before).
status=0
t0=$(date +%s)
timings=()
molecule_pid=""
molecule_log="$PWD/.cache/test-molecule.log"

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

molecule_on=0
[[ "${GPUFLEET_SKIP_MOLECULE:-0}" != "1" ]] && molecule_on=1
if [[ "$molecule_on" -eq 1 && "${GPUFLEET_TEST_SERIAL:-0}" != "1" ]]; then
  mkdir -p "$(dirname "$molecule_log")"
  molecule_start=$(date +%s)
  # Its own process group (setsid), so an interrupted test run stops all of it.
  setsid -w bash scripts/molecule-all.sh >"$molecule_log" 2>&1 &
  molecule_pid=$!
  trap 'kill -- -"$molecule_pid" 2>/dev/null; exit 130' INT
  trap 'kill -- -"$molecule_pid" 2>/dev/null; exit 143' TERM
  echo "=== molecule started in the background (scripts/molecule-all.sh, output: $molecule_log)"
fi

step "lint" bash scripts/lint.sh
step "pytest (unit + integration)" pytest -q tests
# Every bench/ script at a tiny size (--smoke): that it runs and prints its figures, not what they are.
step "bench smoke" python bench/smoke.py
step "ansible-test sanity" bash scripts/sanity.sh
if [[ -n "$molecule_pid" ]]; then
  echo
  echo "=== molecule (running since $(( $(date +%s) - molecule_start )) s; its output so far, then followed)"
  tail -n +1 -f --pid="$molecule_pid" "$molecule_log"
  rc=0
  wait "$molecule_pid" || rc=$?
  trap - INT TERM
  timings+=("$(printf '%-30s %5d s  %s' "molecule (from the start)" "$(( $(date +%s) - molecule_start ))" \
               "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)")")
  if [[ "$rc" -ne 0 ]]; then
    echo "=== FAILED: bash scripts/molecule-all.sh" >&2
    status=1
  fi
elif [[ "$molecule_on" -eq 1 ]]; then
  step "molecule" bash scripts/molecule-all.sh
fi
echo
echo "=== timings"
printf '  %s\n' "${timings[@]}"
printf '  %-30s %5d s  %s\n' "total" "$(( $(date +%s) - t0 ))" "$([[ $status -eq 0 ]] && echo ok || echo FAILED)"
exit "$status"
