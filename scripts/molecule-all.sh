#!/usr/bin/env bash
# Run every molecule scenario (roles/*/molecule/* and molecule/*) against the local Docker
# engine. Starts dockerd and builds the systemd test image when needed.
# MOLECULE_SCENARIOS="role/scenario ..." restricts the run.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
bash scripts/docker-up.sh || exit 1
bash scripts/build-test-image.sh || exit 1
# molecule.yml mounts /sys/fs/cgroup with this mode (scripts/cgroup-mode.sh).
GPUFLEET_CGROUP_MODE="$(bash scripts/cgroup-mode.sh)"
export GPUFLEET_CGROUP_MODE

passed=0
failed=0
failures=()
for dir in roles/*/molecule/*/ molecule/*/; do
  [[ -f "$dir/molecule.yml" ]] || continue
  scenario="$(basename "$dir")"
  base="$(dirname "$(dirname "$dir")")"
  [[ "$base" == "." ]] && base="."
  key="${base#roles/}/$scenario"
  if [[ -n "${MOLECULE_SCENARIOS:-}" ]] && [[ " $MOLECULE_SCENARIOS " != *" $key "* ]]; then
    continue
  fi
  echo "--- molecule test: $key"
  start=$(date +%s)
  if (cd "$base" && molecule test -s "$scenario"); then
    passed=$((passed + 1))
    echo "--- molecule $key passed in $(( $(date +%s) - start )) s"
  else
    failed=$((failed + 1))
    failures+=("$key")
    echo "--- molecule $key FAILED after $(( $(date +%s) - start )) s" >&2
  fi
done
echo "molecule: ${failures[*]:-no failures}"
echo "molecule: $passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
