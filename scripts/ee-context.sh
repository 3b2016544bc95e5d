#!/usr/bin/env bash
# Build context of the execution environment (execution-environment.yml, docs/awx.md), offline:
# the collection tarball into ee/gpufleet-cluster.tar.gz, then `ansible-builder create`.
#   scripts/ee-context.sh [context dir, default ./ee-context]
#   podman build -f ee-context/Containerfile -t gpufleet-ee:0.1.0 ee-context   # where a registry is reachable
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
context="${1:-ee-context}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build --output-path "$work" . >/dev/null
cp "$work"/gpufleet-cluster-*.tar.gz ee/gpufleet-cluster.tar.gz
ansible-builder create --file execution-environment.yml --context "$context" --output-filename Containerfile
