#!/bin/sh
# A stand-in for systemctl in role gpu_mig's GPU-client handling (tests only; never installed on a node).
# Not linked in bin/ (tests put bin/ on PATH; the real systemctl must stay reachable there): name it by path.
# GPUFLEET_STANDIN_SYSTEMD_DIR/active lists the active units, one a line (written by the test);
# every argument vector is appended to GPUFLEET_STANDIN_SYSTEMD_DIR/calls. `is-active u...` prints
# active or inactive per unit in order (exit 0 when one is active, 3 otherwise, as systemctl does);
# `stop u...` / `start u...` take the units out of / put them into the active list; daemon-reload is recorded.
dir=${GPUFLEET_STANDIN_SYSTEMD_DIR:?GPUFLEET_STANDIN_SYSTEMD_DIR is not set}
echo "$*" >> "$dir/calls"
touch "$dir/active"
command=$1
shift
case "$command" in
is-active)
  rc=3
  for unit in "$@"; do
    if grep -qx "$unit" "$dir/active"; then echo active; rc=0; else echo inactive; fi
  done
  exit $rc ;;
stop)
  for unit in "$@"; do grep -vx "$unit" "$dir/active" > "$dir/active.new"; mv "$dir/active.new" "$dir/active"; done ;;
start)
  for unit in "$@"; do grep -qx "$unit" "$dir/active" || echo "$unit" >> "$dir/active"; done ;;
daemon-reload) ;;
*)
  echo "stand-in systemctl: unsupported command $command" >&2
  exit 2 ;;
esac
