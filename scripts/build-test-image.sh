#!/usr/bin/env bash
# Build the systemd test image used by molecule and the lab (Debian bookworm, systemd, python3,
# sudo) with debootstrap + `docker import`. Reused when present; FORCE=1 rebuilds.
set -euo pipefail

IMAGE="${GPUFLEET_TEST_IMAGE:-gpufleet/bookworm-systemd:1}"
SUITE="${GPUFLEET_TEST_SUITE:-bookworm}"
MIRROR="${GPUFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-test-image: $IMAGE present, reusing it" >&2
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
