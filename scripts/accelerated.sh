#!/usr/bin/env bash
# Accelerated mode (opt-in, docs/performance.md): run an Ansible command with Mitogen for Ansible's
# mitogen_linear strategy, so modules run in interpreters that stay warm between tasks instead of a
# new Python process per task and host. mitogen is pinned in requirements.txt (make setup).
#
#   bash scripts/accelerated.sh .venv/bin/ansible-playbook -i inventories/<site>/hosts.yml playbooks/validate.yml
#
# Everything else (inventory, ansible.cfg, callbacks, fleet report) is unchanged; only
# ANSIBLE_STRATEGY_PLUGINS and ANSIBLE_STRATEGY are set for the command. The strategy is Mitogen's
# mitogen_linear with fixes, each explained where it is made (scripts/accelerated/gpufleet_mitogen_linear.py:
# e.g. the installed collections are listed once per run instead of once per task and host; on a controller
# with fewer than 4 CPUs Mitogen's CPU pinning, which put all but one multiplexer on one CPU, is switched off;
# work every worker repeated after the fork is done once before it; docs/performance.md).
# Mitogen's own settings apply as documented by Mitogen (MITOGEN_CPU_COUNT: multiplexer processes,
# default 1; measured on 2 CPUs without the pinning, a second one gave no gain: docs/performance.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$HERE/.venv/bin/python}"
if [[ $# -eq 0 ]]; then
  echo "usage: $0 ansible-playbook [arguments...]" >&2
  exit 2
fi
if ! STRATEGIES="$("$PYTHON" -c 'import ansible_mitogen, os; print(os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy"))' 2>/dev/null)"; then
  echo "accelerated.sh: mitogen is not installed for $PYTHON (make setup installs the pinned version)" >&2
  exit 2
fi
export ANSIBLE_STRATEGY_PLUGINS="$HERE/scripts/accelerated:$STRATEGIES${ANSIBLE_STRATEGY_PLUGINS:+:$ANSIBLE_STRATEGY_PLUGINS}"
export ANSIBLE_STRATEGY=gpufleet_mitogen_linear
exec "$@"
