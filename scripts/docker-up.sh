#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when missing, start dockerd in
# the background when not running, and wait for `docker info`. Idempotent.
set -euo pipefail
# apt_get: waits up to GPUFLEET_APT_LOCK_TIMEOUT s (default 600) for another apt/dpkg to finish
# shellcheck source=scripts/apt-lock.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-lock.sh"

if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker-up: installing docker.io (waits up to ${GPUFLEET_APT_LOCK_TIMEOUT} s for a busy apt/dpkg)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq docker.io >/dev/null
fi

if docker info >/dev/null 2>&1; then
  exit 0
fi

if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
  systemctl start docker || true
fi

if ! docker info >/dev/null 2>&1; then
  mkdir -p /var/log
  echo "docker-up: starting dockerd in the background (log: /var/log/gpufleet-dockerd.log)" >&2
  nohup dockerd >/var/log/gpufleet-dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "docker-up: engine ready" >&2
    exit 0
  fi
  sleep 1
done
echo "docker-up: dockerd did not answer within 60 s; see /var/log/gpufleet-dockerd.log" >&2
tail -20 /var/log/gpufleet-dockerd.log >&2 || true
exit 1
