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
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -r requirements.txt
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
