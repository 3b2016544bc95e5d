#!/bin/sh
# A stand-in for Slurm's scontrol in the remediation flow (tests only; never installed on a node).
# The node's state lives in GPUFLEET_STANDIN_SLURM_DIR:
#   state           the State field before any drain (default MIXED: jobs are running)
#   drained         present: DRAIN is set; holds the Reason (an admin's drain: written by the test)
#   jobs_end_after  the jobs end after this many `show` polls once DRAIN is set (-1: never; default 0)
#   calls           every argument vector, one a line (written here)
# `show node <name> -o` prints one line shaped as Slurm 23.x prints it (fields as in the captures of
# tests/unit/test_agent_slurm.py; state names from the scontrol man page: MIXED+DRAIN is DRAINING,
# IDLE+DRAIN is DRAINED); `update NodeName=<n> State=DRAIN Reason=<r>` sets DRAIN with the reason
# (Slurm appends [user@time] to it), `update ... State=RESUME` clears DRAIN, the jobs are gone.
dir=${GPUFLEET_STANDIN_SLURM_DIR:?GPUFLEET_STANDIN_SLURM_DIR is not set}
echo "$*" >> "$dir/calls"
case "$1" in
show)
  node=$3
  state=$(cat "$dir/state" 2>/dev/null || echo MIXED)
  if [ -f "$dir/drained" ]; then
    polls=$(( $(cat "$dir/polls" 2>/dev/null || echo 0) + 1 ))
    echo "$polls" > "$dir/polls"
    after=$(cat "$dir/jobs_end_after" 2>/dev/null || echo 0)
    if [ "$after" -ge 0 ] && [ "$polls" -gt "$after" ]; then state=IDLE; fi
    echo "NodeName=$node Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Gres=gpu:h100:8 NodeAddr=$node State=$state+DRAIN ThreadsPerCore=2 Partitions=gpu Reason=$(cat "$dir/drained")"
  else
    echo "NodeName=$node Arch=x86_64 CoresPerSocket=56 CPUAlloc=112 CPUTot=224 Gres=gpu:h100:8 NodeAddr=$node State=$state ThreadsPerCore=2 Partitions=gpu"
  fi ;;
update)
  case "$3" in
  State=DRAIN) reason=${4#Reason=}; echo "$reason [root@2026-11-26T04:00:00]" > "$dir/drained" ;;
  State=RESUME) rm -f "$dir/drained" "$dir/polls"; echo IDLE > "$dir/state" ;;
  *) echo "scontrol: stand-in: unsupported update $*" >&2; exit 1 ;;
  esac ;;
*) echo "scontrol: stand-in: unsupported command $*" >&2; exit 1 ;;
esac
