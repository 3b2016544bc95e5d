#!/usr/bin/env bash
# Prints how the systemd test containers get the host's /sys/fs/cgroup (GPUFLEET_CGROUP_MODE):
#   ro  cgroup v1 / hybrid host: systemd in the container runs on the hierarchies Docker gives it
#       (private cgroup namespace). A writable bind mount of the host's v1 tree let one
#       container's systemd remove the cgroups of others (seen: "error adding pid ... to cgroups"
#       in a running lab, and between two molecule scenarios run at once even with a read-only
#       mount, whose controller submounts stay writable). Neither the molecule base config nor
#       scripts/lab-up.sh mounts it.
#   rw  unified cgroup v2 host: systemd needs a writable cgroup2 mount.
# An explicit GPUFLEET_CGROUP_MODE wins.
set -euo pipefail
if [[ -n "${GPUFLEET_CGROUP_MODE:-}" ]]; then
  echo "$GPUFLEET_CGROUP_MODE"
elif [[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" == "cgroup2fs" ]]; then
  echo rw
else
  echo ro
fi
