#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when missing, start dockerd in
# the background when not running, and wait for `docker info`. Idempotent.
set -euo pipefail

if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker-up: installing docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
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
