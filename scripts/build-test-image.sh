#!/usr/bin/env bash
# Build the systemd test image used by molecule and the lab (Debian bookworm, systemd, python3,
# sudo) with debootstrap + `docker import`. Reused when present; FORCE=1 rebuilds.
#
# --print-pkgs-image: also build (once, then cached) the molecule image, a layer on top with
# fresh apt package lists and the packages of scripts/molecule-image-packages.txt (what scenario
# prepare steps install), tagged gpufleet/bookworm-systemd-pkgs:<hash of the base image id, the
# package list and this script>, and print its name (scripts/molecule-all.sh exports it as
# GPUFLEET_TEST_IMAGE for .config/molecule/config.yml). apt-get update against fresh lists only
# revalidates the Release files, so no scenario downloads the Packages indexes again. The layer
# enables no unit: the links a package's postinst adds (munge, slurmd, node_exporter...) are
# removed, so a container starts only what its scenario starts.
set -euo pipefail
self="$(realpath "$0")"
cd "$(dirname "$self")/.."

BASE_IMAGE="gpufleet/bookworm-systemd:1"
IMAGE="$BASE_IMAGE"
if [[ "${1:-}" != "--print-pkgs-image" ]]; then
  IMAGE="${GPUFLEET_TEST_IMAGE:-$BASE_IMAGE}"
fi
SUITE="${GPUFLEET_TEST_SUITE:-bookworm}"
MIRROR="${GPUFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PKGS_LIST=scripts/molecule-image-packages.txt

build_pkgs_image() {
  local hash pkgs_image container
  hash="$( { docker image inspect -f '{{.Id}}' "$IMAGE"; grep -v '^#' "$PKGS_LIST"; cat "$self"; } |
           sha256sum | cut -c1-12)"
  pkgs_image="gpufleet/bookworm-systemd-pkgs:$hash"
  if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$pkgs_image" >/dev/null 2>&1; then
    echo "build-test-image: $pkgs_image present, reusing it" >&2
    echo "$pkgs_image"
    return 0
  fi
  echo "build-test-image: building $pkgs_image (apt lists + $(grep -vc '^#' "$PKGS_LIST") packages)" >&2
  container="gpufleet-pkgs-build-$$"
  # shellcheck disable=SC2046
  docker run --name "$container" -e DEBIAN_FRONTEND=noninteractive "$IMAGE" \
    sh -c 'find /etc/systemd/system -type l | sort >/tmp/units-before &&
           apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null &&
           apt-get clean &&
           find /etc/systemd/system -type l | sort | comm -13 /tmp/units-before - | xargs -r rm -f &&
           rm -f /tmp/units-before' sh $(grep -v '^#' "$PKGS_LIST") >&2 || {
      docker rm -f "$container" >/dev/null 2>&1; return 1; }
  docker commit "$container" "$pkgs_image" >/dev/null
  docker rm -f "$container" >/dev/null
  echo "build-test-image: built $pkgs_image" >&2
  echo "$pkgs_image"
}

if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-test-image: $IMAGE present, reusing it" >&2
  if [[ "${1:-}" == "--print-pkgs-image" ]]; then build_pkgs_image; fi
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq debootstrap >/dev/null
fi

work="$(mktemp -d /var/tmp/gpufleet-rootfs.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "build-test-image: debootstrap $SUITE into $work" >&2
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,ca-certificates,iproute2,procps,kmod,gnupg \
  "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log" >&2; exit 1; }

root="$work/rootfs"
# Trim what a container never needs and what makes systemd wait in a container.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# An empty, old package list: apt's cache_valid_time must not take it for a fresh one.
touch -d '2000-01-01' "$root/var/lib/apt/lists"
for unit in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
            getty@tty1.service systemd-logind.service systemd-remount-fs.service \
            systemd-timesyncd.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
echo "gpufleet-test" >"$root/etc/hostname"
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" \
  >"$root/etc/apt/sources.list"

echo "build-test-image: importing as $IMAGE" >&2
tar -C "$root" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  - "$IMAGE" >/dev/null
echo "build-test-image: built $IMAGE" >&2
if [[ "${1:-}" == "--print-pkgs-image" ]]; then build_pkgs_image; fi
