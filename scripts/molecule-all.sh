#!/usr/bin/env bash
# Run every molecule scenario (roles/*/molecule/* and molecule/*) against the local Docker
# engine, MOLECULE_JOBS (default 2) at a time. Starts dockerd and builds the test image (with
# the package layer of scripts/build-test-image.sh) when needed.
#   MOLECULE_SCENARIOS="role/scenario ./scenario ..."  restricts the run (keys as printed)
#   MOLECULE_JOBS=1                                     one scenario at a time
#   GPUFLEET_MOLECULE_CALLBACKS=ansible.posix.timer,ansible.posix.profile_tasks
#                                                       every task's duration in the logs (profiling)
# Each scenario's output goes to $MOLECULE_LOG_DIR/<key>.log (default .cache/molecule-logs/),
# printed in full when the scenario fails. Per scenario: the duration of each step; at the end:
# every scenario's duration, the time per step summed over scenarios, and the wall time.
# Scenarios are independent: every platform name is unique in the repository (checked below),
# none declares a Docker network, and each has its own molecule ephemeral directory.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"
# Plain logs (timestamps and step markers are parsed below).
export NO_COLOR=1 ANSIBLE_NOCOLOR=1 PY_COLORS=0 ANSIBLE_FORCE_COLOR=0
jobs_max="${MOLECULE_JOBS:-2}"
log_dir="${MOLECULE_LOG_DIR:-$root/.cache/molecule-logs}"
times_file="$root/.cache/molecule-times"
mkdir -p "$log_dir"
t0=$(date +%s)

bash scripts/docker-up.sh || exit 1
# The image with the packages most scenarios install (.config/molecule/config.yml reads it).
GPUFLEET_TEST_IMAGE="$(bash scripts/build-test-image.sh --print-pkgs-image)" || exit 1
export GPUFLEET_TEST_IMAGE
# The base config mounts /sys/fs/cgroup with this mode (scripts/cgroup-mode.sh).
GPUFLEET_CGROUP_MODE="$(bash scripts/cgroup-mode.sh)"
export GPUFLEET_CGROUP_MODE
# The create and destroy playbooks of .config/molecule/ (its config.yml reads this).
export GPUFLEET_MOLECULE_DIR="$root/.config/molecule"
echo "molecule: image $GPUFLEET_TEST_IMAGE ready after $(( $(date +%s) - t0 )) s"
# The execution environment image (scripts/ee-build.sh, reused while its inputs are unchanged), built
# beside the scenarios: tests/integration/test_execution_environment.py waits on its lock instead of
# building it inside pytest. Detached from this shell's jobs (the `wait -n` below counts scenarios).
if [[ "${GPUFLEET_SKIP_EE:-0}" != "1" ]]; then
  mkdir -p "$root/.cache/ee"
  ( bash scripts/ee-build.sh >"$root/.cache/ee/molecule-prep.log" 2>&1 & )
  echo "molecule: execution environment image building in the background (log: .cache/ee/molecule-prep.log)"
fi

# Two scenarios running at once must not share a container name.
dupes="$(grep -h '^  - name:' roles/*/molecule/*/molecule.yml molecule/*/molecule.yml | sort | uniq -d)"
if [[ -n "$dupes" ]]; then
  echo "molecule: platform names used by more than one scenario:" >&2
  echo "$dupes" >&2
  exit 1
fi

keys=()
declare -A key_base key_scenario
for dir in roles/*/molecule/*/ molecule/*/; do
  [[ -f "$dir/molecule.yml" ]] || continue
  scenario="$(basename "$dir")"
  base="$(dirname "$(dirname "$dir")")"
  key="${base#roles/}/$scenario"
  if [[ -n "${MOLECULE_SCENARIOS:-}" ]] && [[ " $MOLECULE_SCENARIOS " != *" $key "* ]]; then
    continue
  fi
  keys+=("$key")
  key_base[$key]="$base"
  key_scenario[$key]="$scenario"
done
if [[ ${#keys[@]} -eq 0 ]]; then
  echo "molecule: no scenario matches MOLECULE_SCENARIOS='${MOLECULE_SCENARIOS:-}'" >&2
  exit 1
fi

# Longest first, so the two job slots finish together: durations of this checkout's last run, else
# those recorded in the repository (.config/molecule/durations, from a clean-clone run), else unknown
# (counted as longest). Without the recorded ones a clean clone ran the scenarios in reverse name
# order, the longest (./rolling_upgrade, about 14 minutes) last and mostly alone.
declare -A last
for file in "$root/.config/molecule/durations" "$times_file"; do
  [[ -f "$file" ]] || continue
  while read -r k s; do
    [[ -z "$k" || "$k" == \#* ]] || last[$k]="$s"
  done <"$file"
done
mapfile -t keys < <(for k in "${keys[@]}"; do echo "${last[$k]:-99999} $k"; done | sort -rn | cut -d' ' -f2)

# Prefix every line with the epoch second it was written (bash builtin, no extra process).
stamp() {
  local line
  while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done
}

run_one() {  # key log
  local key="$1" log="$2"
  cd "${key_base[$key]}" && molecule test -s "${key_scenario[$key]}" 2>&1 | stamp >"$log"
}

# "destroy 4 s, syntax 3 s, ..." from the step markers of a stamped log.
step_times() {
  awk -v end="$2" '
    / > [a-z_]+\] Executing$/ {
      step = $0; sub(/\] Executing$/, "", step); sub(/.* > /, "", step)
      if (name != "") { printf "%s%s %d s", sep, name, $1 - start; sep = ", " }
      name = step; start = $1
    }
    END { if (name != "") printf "%s%s %d s", sep, name, end - start; print "" }' "$1"
}

declare -A pid_key started duration
passed=0
failed=0
failures=()
running=0

finish() {  # pid status
  local pid="$1" rc="$2" key now log
  key="${pid_key[$pid]}"
  unset "pid_key[$pid]"
  now=$(date +%s)
  duration[$key]=$(( now - started[$key] ))
  log="$log_dir/${key//\//_}.log"
  running=$((running - 1))
  if [[ "$rc" -eq 0 ]]; then
    passed=$((passed + 1))
    echo "--- molecule $key passed in ${duration[$key]} s: $(step_times "$log" "$now")"
  else
    failed=$((failed + 1))
    failures+=("$key")
    echo "--- molecule $key FAILED after ${duration[$key]} s: $(step_times "$log" "$now")" >&2
    echo "--- log of $key ($log):" >&2
    cut -d' ' -f2- "$log" >&2
    echo "--- end of log of $key" >&2
  fi
}

# Another checkout on this Docker engine running the same scenario has containers of the same
# names, which this run's first destroy would remove: wait for them (up to
# MOLECULE_FOREIGN_WAIT seconds, default 1200; leftovers of an aborted run go with that destroy).
wait_for_foreign() {  # key
  local names waited=0
  names="$(sed -n 's/^  - name: //p' "${key_base[$1]}/molecule/${key_scenario[$1]}/molecule.yml")"
  while [[ "$waited" -lt "${MOLECULE_FOREIGN_WAIT:-1200}" ]]; do
    local busy=""
    for n in $names; do
      [[ "$(docker inspect -f '{{.State.Running}}' "$n" 2>/dev/null)" == "true" ]] && busy="$n"
    done
    [[ -z "$busy" ]] && return 0
    [[ "$waited" -eq 0 ]] && echo "--- molecule $1: container $busy is running (another checkout?), waiting"
    sleep 10
    waited=$((waited + 10))
  done
}

for key in "${keys[@]}"; do
  while [[ "$running" -ge "$jobs_max" ]]; do
    wait -n -p done_pid
    finish "$done_pid" "$?"
  done
  wait_for_foreign "$key"
  log="$log_dir/${key//\//_}.log"
  echo "--- molecule test: $key (log: $log)"
  started[$key]=$(date +%s)
  run_one "$key" "$log" &
  pid_key[$!]="$key"
  running=$((running + 1))
done
while [[ "$running" -gt 0 ]]; do
  wait -n -p done_pid
  finish "$done_pid" "$?"
done

# Remember the durations for the ordering of the next run.
for k in "${!duration[@]}"; do last[$k]="${duration[$k]}"; done
mkdir -p "$(dirname "$times_file")"
for k in "${!last[@]}"; do echo "$k ${last[$k]}"; done | sort >"$times_file"

echo
echo "molecule: duration per scenario"
for k in "${keys[@]}"; do printf '  %-34s %5s s\n' "$k" "${duration[$k]:-?}"; done
echo "molecule: time per step, summed over scenarios"
for k in "${keys[@]}"; do step_times "$log_dir/${k//\//_}.log" "$(stat -c %Y "$log_dir/${k//\//_}.log")"; done |
  tr ',' '\n' | awk '{ sum[$1] += $2 } END { for (s in sum) printf "  %-12s %5d s\n", s, sum[s] }'
# A digest of each failure last, where a truncated CI log still shows it: the failing step and
# the error lines of its log (the whole log was printed when the scenario failed).
for k in "${failures[@]}"; do
  echo "molecule: digest of $k"
  cut -d' ' -f2- "$log_dir/${k//\//_}.log" |
    grep -E '^(fatal:|failed:|ERROR|CRITICAL|\[ERROR\]|E +|.* Executed: Failed)' | tail -n 25 | cut -c1-400 | sed 's/^/  | /'
done
echo "molecule: ${failures[*]:-no failures}"
echo "molecule: $passed passed, $failed failed, ${#keys[@]} scenarios, $jobs_max at a time, wall time $(( $(date +%s) - t0 )) s"
[[ "$failed" -eq 0 ]]
