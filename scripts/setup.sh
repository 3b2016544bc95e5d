#!/usr/bin/env bash
# Create the project virtualenv with everything pinned in requirements.txt. Idempotent.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
# apt_get: waits up to GPUFLEET_APT_LOCK_TIMEOUT s (default 600) for another apt/dpkg to finish
# shellcheck source=scripts/apt-lock.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-lock.sh"

if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "setup: installing python3-venv (waits up to ${GPUFLEET_APT_LOCK_TIMEOUT} s for a busy apt/dpkg)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq && apt_get install -y -qq python3-venv >/dev/null
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
# The pins of requirements.txt are installed with uv (pinned here, put into the venv by the venv's own
# pip) where it can be had: it downloads and unpacks in parallel and compiles the bytecode on every
# core, where pip does one package after the other (the setup of a clean clone is on the critical
# path of `make test`, nothing runs beside it). Same pins, same resolution (pip freeze of a pip-made
# and a uv-made venv: the same 96 packages and versions; pip itself upgraded in the same run, as
# before). uv's cache is ~/.cache/uv (UV_CACHE_DIR).
# When uv cannot be installed or fails (another index in pip.conf, no route to its download), or with
# GPUFLEET_SETUP_PIP=1, pip installs as before.
UV_VERSION=0.13.8
if [[ "${GPUFLEET_SETUP_PIP:-0}" != "1" ]] \
   && "$VENV/bin/python" -m pip install -q "uv==$UV_VERSION" >/dev/null 2>&1 \
   && "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --compile-bytecode \
        -r requirements.txt pip --upgrade-package pip; then
  echo "setup: requirements.txt installed with uv $UV_VERSION" >&2
else
  [[ "${GPUFLEET_SETUP_PIP:-0}" == "1" ]] || echo "setup: uv unavailable or failed, installing with pip" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -r requirements.txt
fi
"$VENV/bin/ansible" --version | sed -n 1p
# promtool (Debian package prometheus) for the agent's alert rule tests (tests/unit/test_agent_rules.py).
# Optional: without it that test is skipped with the reason.
if ! command -v promtool >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing promtool (Debian package prometheus, no recommends)" >&2
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends prometheus >/dev/null \
    || echo "setup: prometheus not installed; the promtool rule tests will be skipped" >&2
fi
# chromium (Debian package) for the fleet report page test in a real browser
# (tests/unit/test_fleet_report_browser.py: headless --dump-dom and --screenshot).
# Optional: without it that test is skipped with the reason.
if ! command -v chromium >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (Debian package, no recommends)" >&2
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends chromium >/dev/null \
    || echo "setup: chromium not installed; the fleet report browser test will be skipped" >&2
fi
