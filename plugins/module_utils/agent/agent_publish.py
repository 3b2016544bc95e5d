# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's publishers and how a cycle runs them (docs/contracts.md, "Node health agent"):

- metrics: the node_exporter textfile ``gpufleet.prom`` (``MetricsPublisher``);
- Kubernetes: the Node condition and opt-in taint (``agent_kube.KubePublisher``);
- Slurm: drain/resume (``agent_slurm.SlurmPublisher``);
- node-problem-detector: ``npd_status`` answers NPD's custom plugin from health.json.

``run_publishers`` runs every publisher of a cycle at once, each in its own thread with its own
deadline (``publish_timeout``): a hung or slow API server cannot delay the Slurm drain, the
metrics or the next cycle. A publisher still running at the deadline is journalled and left
behind (a daemon thread, ended by its own socket/command timeouts); while it runs, later cycles
skip that one publisher ("still busy") instead of piling up threads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import threading
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import AGENT_NAME
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import check_key
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, PASS, SKIP, WARN
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, describe, freshness
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import summary_message

STATUS_VALUES = {PASS: 0, SKIP: 0, WARN: 1, FAIL: 2}


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(result, state, started, duration):
    """The textfile: per check and target its status (0 pass/skip, 1 warn, 2 fail) and flaps, the
    node's health after hysteresis, the last run's timestamp and duration."""
    lines = [
        "# HELP gpufleet_check_status Status of a gpufleet check in the last cycle (0 pass or skip, 1 warn, 2 fail).",
        "# TYPE gpufleet_check_status gauge",
    ]
    entries = state.get("checks") or {}
    for check in result["checks"]:
        lines.append('gpufleet_check_status{id="%s",target="%s",status="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), _label(check["status"]),
            STATUS_VALUES.get(check["status"], 2)))
    lines += ["# HELP gpufleet_check_failing 1 when the check is failing after hysteresis.",
              "# TYPE gpufleet_check_failing gauge"]
    for check in result["checks"]:
        entry = entries.get(check_key(check)) or {}
        lines.append('gpufleet_check_failing{id="%s",target="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), 1 if entry.get("failing") else 0))
    lines += ["# HELP gpufleet_check_flaps_total Changes of a check's outcome between two cycles.",
              "# TYPE gpufleet_check_flaps_total counter"]
    for check in result["checks"]:
        entry = entries.get(check_key(check)) or {}
        lines.append('gpufleet_check_flaps_total{id="%s",target="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), entry.get("flaps", 0)))
    lines += [
        "# HELP gpufleet_node_healthy 1 when no check is failing after hysteresis.",
        "# TYPE gpufleet_node_healthy gauge",
        "gpufleet_node_healthy %d" % (1 if state.get("healthy") else 0),
        "# HELP gpufleet_agent_last_run_timestamp_seconds End of the agent's last cycle (Unix time).",
        "# TYPE gpufleet_agent_last_run_timestamp_seconds gauge",
        "gpufleet_agent_last_run_timestamp_seconds %.3f" % (started + duration),
        "# HELP gpufleet_agent_run_duration_seconds Wall time of the agent's last cycle.",
        "# TYPE gpufleet_agent_run_duration_seconds gauge",
        "gpufleet_agent_run_duration_seconds %.6f" % duration,
    ]
    return "\n".join(lines) + "\n"


class MetricsPublisher(object):
    """The node_exporter textfile collector's file."""

    def __init__(self, textfile_dir, result, state, started, duration):
        self.path = os.path.join(textfile_dir, "gpufleet.prom")
        self.text = prometheus_text(result, state, started, duration)

    def publish(self, healthy, failing, deadline=None):
        atomic_write(self.path, self.text)
        return []


_BUSY = {}  # publisher name -> (thread, start) of a publish left behind at its deadline
_BUSY_LOCK = threading.Lock()


def _publish(publisher, healthy, failing, deadline, box):
    """One publisher's publish in its thread; the outcome goes into ``box``."""
    try:
        box["lines"] = publisher.publish(healthy, failing, deadline=deadline) or []
    except Exception as exc:  # an unreachable API server or slurmctld is reported, never fatal
        box["error"] = exc


def run_publishers(publishers, healthy, failing, timeout, log, clock=time.monotonic):
    """Run ``publishers`` ([(name, publisher)]) at once; each gets ``timeout`` seconds (its
    ``publish(healthy, failing, deadline=...)`` receives the monotonic deadline). Every outcome is
    journalled. Returns {name: "ok" | "error" | "timeout" | "busy"}. Never raises."""
    start = clock()
    deadline = start + timeout
    outcomes, running = {}, []
    for name, publisher in publishers:
        if publisher is None:
            continue
        with _BUSY_LOCK:
            left_behind = _BUSY.get(name)
            if left_behind is not None and left_behind[0].is_alive():
                outcomes[name] = "busy"
                log("%s: %s: not updated this cycle: the previous cycle's publish (started %.0f s ago) is still "
                    "waiting for an answer" % (AGENT_NAME, name, start - left_behind[1]))
                continue
            _BUSY.pop(name, None)
        box = {}
        thread = threading.Thread(target=_publish, args=(publisher, healthy, failing, deadline, box),
                                  name="gpufleet-publish-%s" % name)
        thread.daemon = True
        thread.start()
        running.append((name, thread, box))
    for name, thread, box in running:
        thread.join(max(0.0, deadline - clock()))
        if thread.is_alive():
            outcomes[name] = "timeout"
            with _BUSY_LOCK:
                _BUSY[name] = (thread, start)
            log("%s: %s: not updated: no answer within %g s (publish_timeout); the other outlets were not held up"
                % (AGENT_NAME, name, timeout))
        elif "error" in box:
            outcomes[name] = "error"
            log("%s: %s: not updated: %s" % (AGENT_NAME, name, box["error"]))
        else:
            outcomes[name] = "ok"
            for line in box.get("lines") or []:
                log("%s: %s: %s" % (AGENT_NAME, name, line))
    return outcomes


NPD_OK, NPD_NONOK, NPD_UNKNOWN = 0, 1, 2


def npd_status(result, now, max_age=300, max_length=80):
    """(exit code, message) for a node-problem-detector custom plugin: 0 healthy, 1 unhealthy
    (message: the first failing check), 2 unknown (no result, older than ``max_age`` s, or dated in
    the future: clock.freshness). The message is cut to ``max_length`` characters (NPD's
    ``max_output_length``, default 80)."""
    agent = (result or {}).get("agent") if isinstance(result, dict) else None
    verdict, age = freshness((result or {}).get("generated_at") if isinstance(result, dict) else None, now, max_age)
    if not isinstance(agent, dict):
        code, message = NPD_UNKNOWN, "gpufleet: no agent result yet"
    elif verdict != FRESH:
        code, message = NPD_UNKNOWN, "gpufleet: agent result %s" % describe(verdict, age, max_age)
    elif agent.get("healthy") is True:
        code, message = NPD_OK, "gpufleet: all checks pass"
    else:
        code, message = NPD_NONOK, "gpufleet: " + summary_message(agent.get("failing") or [])
    return code, message[:max_length]
