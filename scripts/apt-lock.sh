# shellcheck shell=bash
# Sourced by scripts/setup.sh and scripts/docker-up.sh: apt_get, apt-get that waits (with a bound) for
# another package manager to let go of the apt/dpkg locks instead of failing at once. A fresh cloud
# machine runs unattended-upgrades (or cloud-init's apt) at boot and holds the locks for minutes.
#
# - install/remove: apt-get waits for the dpkg frontend lock itself with -o DPkg::Lock::Timeout=<s>
#   (apt >= 1.9.11);
# - update: apt-get does not apply that option to the lists lock (apt 2.6.1 fails at once with
#   "E: Could not get lock /var/lib/apt/lists/lock. It is held by process N (...)"), so any apt-get
#   that fails on a lock is run again every GPUFLEET_APT_LOCK_POLL seconds until the same bound.
# The bound: GPUFLEET_APT_LOCK_TIMEOUT seconds (default 600); 0 fails at once as apt-get does.
GPUFLEET_APT_LOCK_TIMEOUT="${GPUFLEET_APT_LOCK_TIMEOUT:-600}"
GPUFLEET_APT_LOCK_POLL="${GPUFLEET_APT_LOCK_POLL:-5}"

apt_get() {
  local who="${APT_LOCK_WHO:-${0##*/}}" deadline=$((SECONDS + GPUFLEET_APT_LOCK_TIMEOUT)) err rc said=""
  err="$(mktemp)"
  while :; do
    rc=0
    { apt-get -o DPkg::Lock::Timeout="$GPUFLEET_APT_LOCK_TIMEOUT" "$@" 2>&1 1>&3 3>&- | tee "$err" >&2; } 3>&1 \
      || rc=$?
    # held by another process (not "Permission denied ... are you root?": waiting would not help)
    if [[ $rc -ne 0 ]] && grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock" "$err" \
        && ! grep -qE "Permission denied|are you root" "$err"; then
      if (( SECONDS < deadline )); then
        if [[ -z "$said" ]]; then
          echo "$who: another package manager holds the apt/dpkg lock (see above); waiting up to" \
               "${GPUFLEET_APT_LOCK_TIMEOUT} s for it (GPUFLEET_APT_LOCK_TIMEOUT)" >&2
          said=1
        fi
        sleep "$GPUFLEET_APT_LOCK_POLL"
        continue
      fi
      echo "$who: the apt/dpkg lock was still held after ${GPUFLEET_APT_LOCK_TIMEOUT} s (GPUFLEET_APT_LOCK_TIMEOUT);" \
           "wait for the other package manager (unattended-upgrades at boot?) and run again" >&2
    fi
    rm -f "$err"
    return "$rc"
  done
}
