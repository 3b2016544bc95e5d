#!/bin/sh
# The package manager of ee/execution-environment-local.yml on Debian (ansible-builder's
# options.package_manager_path; its scripts call `$PKGMGR install -y PACKAGES...` and
# `$PKGMGR clean all`, written for dnf). apt-get from Debian's mirror of the base image.
set -eu
command="${1:-}"
[ "$#" -gt 0 ] && shift
case "$command" in
  install)
    packages=""
    for arg in "$@"; do
      [ "$arg" = "-y" ] || packages="$packages $arg"
    done
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $packages
    ;;
  clean)
    apt-get clean
    rm -rf /var/lib/apt/lists/*
    ;;
  *)
    echo "apt-pkgmgr: unsupported command '$command' (install, clean)" >&2
    exit 2
    ;;
esac
