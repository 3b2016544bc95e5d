# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health agent's command line (docs/contracts.md, "Node health agent").

The agent is split by job, imports pointing down only (tests/unit/test_layering.py):

- ``agent_config``: constants, the configuration and its checks (``--check-config``);
- ``agent_hysteresis``: the hysteresis step; ``agent_state``: the strict readers of the agent's
  records in its state directory (damaged files set aside; the writer is ``state_files``);
- publishers: ``agent_publish`` (metrics, NPD, running them with deadlines), ``agent_kube``
  (over ``gate`` and ``kube_node``), ``agent_slurm``;
- ``agent_cycle``: one cycle (checks -> hysteresis -> files -> publishers), ``run_once``;
- ``agent_daemon``: the resident loop, systemd notification, stop signals;
- ``agent`` (this file): ``main``, the CLI. Nothing here imports Ansible: the role copies these
  files and the module_utils they need to ``/opt/gpufleet/agent``.

Modes: ``[CONFIG]`` one cycle (a timer's oneshot service); ``--loop [--interval S] [--cycles N]``
resident; ``--check-config``; ``--npd`` (node-problem-detector custom plugin);
``--slurm-health-check`` (Slurm's HealthCheckProgram).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# This file is the agent's command line and its public names (tests, bench, the role's wrapper):
# the imports below re-export them, hence:
# pylint: disable=unused-import

import os
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import (  # noqa: F401 (the agent's API)
    AGENT_NAME, DEFAULT_CONFIG, DEFAULT_FAIL_AFTER, DEFAULT_INTERVAL, DEFAULT_RECOVER_AFTER,
    DEFAULT_STATE_DIR, IMMEDIATE_CHECKS, SLURM_REASON_PREFIX, AgentError, add_python_path, config_errors,
    hysteresis_settings, known_check_ids, load_config, node_params, say, thresholds)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import (  # noqa: F401
    Agent, build_agent, crashed_payload, result_max_age, run_checks, run_once, slurm_health_check)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_daemon import (  # noqa: F401
    Loop, StopSignals, loop_interval, resident, sd_notify)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import (  # noqa: F401
    failing_after_hysteresis,
    step,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_publish import (  # noqa: F401
    NPD_NONOK, NPD_OK, NPD_UNKNOWN, STATUS_VALUES, npd_status, prometheus_text, run_publishers)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_state import (  # noqa: F401
    read_health,
    read_state,
    set_aside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE, summary_message  # noqa: F401
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write  # noqa: F401


def _option_value(argv, name):
    """Remove ``name VALUE`` from argv and return VALUE (None when absent)."""
    if name not in argv:
        return None
    index = argv.index(name)
    if index + 1 >= len(argv):
        raise AgentError("%s needs a value" % name)
    value = argv[index + 1]
    del argv[index:index + 2]
    return value


def _npd(argv):
    try:
        config = load_config(argv[0] if argv else DEFAULT_CONFIG)
        result, problem = read_health(os.path.join(config.get("state_dir") or DEFAULT_STATE_DIR, "health.json"))
        if problem:  # NPD reads the first line of the output: the problem is the message
            raise AgentError(problem)
        code, message = npd_status(result, time.time(), max_age=(config.get("npd") or {}).get("max_age", 300))
    except AgentError as exc:
        code, message = NPD_UNKNOWN, ("gpufleet: %s" % exc)[:80]
    say(message)
    return code


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--npd" in argv:
        argv.remove("--npd")
        return _npd(argv)
    if "--slurm-health-check" in argv:
        argv.remove("--slurm-health-check")
        try:
            return slurm_health_check(load_config(argv[0] if argv else DEFAULT_CONFIG))
        except AgentError as exc:
            say("%s: slurm: %s" % (AGENT_NAME, exc))
            return 0
    check_only = "--check-config" in argv
    if check_only:
        argv.remove("--check-config")
    loop = "--loop" in argv
    if loop:
        argv.remove("--loop")
        try:
            interval = _option_value(argv, "--interval")
            cycles = _option_value(argv, "--cycles")
            cycles = None if cycles is None else int(cycles)
        except (AgentError, ValueError) as exc:
            say("%s: --loop [--interval SECONDS] [--cycles N] [CONFIG]: %s" % (AGENT_NAME, exc))
            return 2
    path = argv[0] if argv else os.environ.get("GPUFLEET_AGENT_CONFIG", DEFAULT_CONFIG)
    if loop:
        return resident(path, interval, cycles)
    if check_only:
        try:
            errors = config_errors(load_config(path))
        except AgentError as exc:
            errors = [str(exc)]
        for error in errors:
            say("%s: %s: %s" % (AGENT_NAME, path, error))
        return 1 if errors else 0
    run_once(path)
    return 0
