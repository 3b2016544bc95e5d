#!/usr/bin/env bash
# Accelerated mode (opt-in, docs/performance.md): run an Ansible command with Mitogen for Ansible's
# mitogen_linear strategy, so modules run in interpreters that stay warm between tasks instead of a
# new Python process per task and host. mitogen is pinned in requirements.txt (make setup).
#
#   bash scripts/accelerated.sh .venv/bin/ansible-playbook -i inventories/<site>/hosts.yml playbooks/validate.yml
#
# Everything else (inventory, ansible.cfg, callbacks, fleet report) is unchanged; only
# ANSIBLE_STRATEGY_PLUGINS and ANSIBLE_STRATEGY are set for the command. The strategy is Mitogen's
# mitogen_linear with one fix (scripts/accelerated/gpufleet_mitogen_linear.py: the installed
# collections are listed once per run instead of once per task and host).
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
# One Mitogen multiplexer process per CPU (Mitogen's default is one for all connections, which
# limits a large sweep to one core of the controller; docs/performance.md). Set it to override.
export MITOGEN_CPU_COUNT="${MITOGEN_CPU_COUNT:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}"
exec "$@"
