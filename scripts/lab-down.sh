#!/usr/bin/env bash
# Remove the SIMULATION lab containers (gpufleet-lab-*) and their network. Only containers this
# lab created (label gpufleet.lab=simulation) are removed.
set -euo pipefail
ids="$(docker ps -aq --filter label=gpufleet.lab=simulation)"
if [[ -n "$ids" ]]; then
  # shellcheck disable=SC2086
  docker rm -f $ids >/dev/null
  echo "lab-down: removed $(echo "$ids" | wc -w) lab container(s)"
else
  echo "lab-down: no lab containers"
fi
docker network rm gpufleet-lab >/dev/null 2>&1 && echo "lab-down: removed network gpufleet-lab" || true
