# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One cycle of the node health agent (docs/contracts.md, "Node health agent"): the checks
(``validation.node_payload`` over ``families.FAMILIES``, exactly what the module node_validate
runs), hysteresis, the local files, then every publisher. The same in both modes (a resident
``--loop`` process or a timer's process per cycle: ``run_once``).

Fail closed and always publish:

- a damaged ``agent-state.json`` is set aside and the cycle goes on from fresh state;
- checks that crash give the failing check ``host.validation`` (immediate): a node whose health
  cannot be measured is not healthy;
- a local write that fails (a full disk) is journalled and does not stop publishing: metrics,
  Kubernetes and Slurm are each told, at once, each with its own deadline (agent_publish);
- a cycle is bounded: the checks (each command they run has its own timeout) plus
  ``publish_timeout`` seconds (default 20) for all publishers together.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import (
    AGENT_NAME, DEFAULT_STATE_DIR, AgentError, add_python_path,
    hysteresis_settings, load_config, node_params, publish_timeout, say, signals_settings)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import failing_after_hysteresis, step
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_publish import MetricsPublisher, run_publishers
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_signals import (
    credited, fabricmanager_check, merge_targeted, previous_checks, targeted_params)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_state import read_health, read_state
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, json_safe
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, describe, freshness
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import summary_message
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.health_record import result_max_age
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write


# Agent.cycle's status for a targeted cycle that touches no NVML (touches_nvml) and has no last result
# to keep the other checks of: it ran nothing, the caller runs a full cycle, NVML let go (agent_daemon.Loop)
FULL_CYCLE_NEEDED = "a targeted cycle without NVML has no last result to build on: a full cycle"


def touches_nvml(only):
    """Whether a cycle for ``only`` (a signal's plan, agent_signals.plan; None: a full cycle) may
    initialise and shut down NVML. Only the GPU family uses it (validation.Context builds its NVML
    adapter at the first use); the RDMA family and agent.fabricmanager read sysfs and the cgroup. So
    a targeted cycle of RDMA ports or the fabric manager alone does not, and the resident loop does
    not stop the NVML event watcher (up to its 300 ms wait) nor the probe's NVML for it. Such a cycle
    without a last result runs nothing (FULL_CYCLE_NEEDED) instead of a full cycle of its own."""
    return only is None or bool(only.get("gpu"))


def run_checks(params, runner=None, nvml=None, now=None, reader=None):
    """node_validate's payload for ``params`` (the one check engine); AgentError on option errors."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import Context, node_payload

    if runner is None:
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner

        runner = SubprocessRunner()
    ctx = Context(params["root"], runner=runner, reader=reader, nvml=nvml, now=now)
    try:
        payload, errors = node_payload(FAMILIES, params, time.perf_counter(), ctx=ctx)
    finally:
        ctx.close()  # NVML shut down after each cycle: the resident agent initialises it again next cycle
    if errors:
        raise AgentError("node_validate options: " + "; ".join(errors))
    return payload


def crashed_payload(exc):
    """The result of a cycle whose checks crashed: not healthy, and the message says why."""
    check = {"id": "host.validation", "target": "node", "status": FAIL,
             "message": "the agent's checks crashed, the node's health could not be measured: %s: %s"
                        % (type(exc).__name__, exc)}
    return {"checks": [check], "summary": {"pass": 0, "warn": 0, "fail": 1, "skip": 0}, "healthy": False}


class Agent(object):
    """One agent cycle (``cycle``) with its configuration; ``log`` prints a journal line."""

    def __init__(self, config, log=None, runner=None, nvml=None, kube=None, slurm=None, clock=time.time,
                 check_engine=None):
        self.config = config
        self.log = log or say
        self.runner = runner
        self.nvml = nvml
        self.kube = kube
        self.slurm = slurm
        self.clock = clock
        self.check_engine = check_engine or run_checks
        self.state_dir = config.get("state_dir") or DEFAULT_STATE_DIR
        self.textfile_dir = config.get("textfile_dir")
        self.node = config.get("node_name") or os.uname()[1]
        self.status = "no cycle yet"  # one line for systemd's STATUS= (resident mode)
        self.events = None  # the resident agent's event sources' status (health.json agent.events)
        self.outcomes = {}

    @property
    def health_path(self):
        return os.path.join(self.state_dir, "health.json")

    @property
    def state_path(self):
        return os.path.join(self.state_dir, "agent-state.json")

    def _previous(self, started):
        """The last result and its checks, the base of a targeted cycle; None: a full cycle runs."""
        result, _problem = read_health(self.health_path, self.log, started)
        return result if result is not None and previous_checks(result) is not None else None

    def cycle(self, only=None):
        """Run one cycle; returns 0 (every problem is a journal line). ``only`` (a signal's plan,
        agent_signals.plan): a targeted cycle that measures only the checks the signal concerns
        and keeps the others of the last result (a full cycle when there is none; for a plan that
        touches no NVML nothing runs, the status is FULL_CYCLE_NEEDED: touches_nvml)."""
        started = self.clock()
        mono = time.monotonic()
        cpu = time.process_time()
        previous = self._previous(started) if only else None
        if previous is None and not touches_nvml(only):
            self.status = FULL_CYCLE_NEEDED  # the NVML event watcher may hold NVML: the loop lets it go first
            return 0
        if previous is None:
            only = None
        try:
            settings, errors = hysteresis_settings(self.config)
            if errors:
                raise AgentError("bad hysteresis settings, last good result kept: " + "; ".join(errors))
            params = node_params(self.config)
            run = params
            if only:
                run = targeted_params(params, only)
            if only is None or only.get("gpu") or only.get("rdma"):
                payload = self.check_engine(run, runner=self.runner, nvml=self.nvml, now=started)
            else:
                payload = {"checks": []}
            payload = self._fabricmanager(payload, params, only)
        except AgentError as exc:  # the configuration is wrong: nothing can be decided from it
            self.log("%s: %s" % (AGENT_NAME, exc))
            self.status = "last cycle failed (journal), last good result kept"
            return 0
        except Exception as exc:  # the check engine crashed: fail closed, and say why
            import traceback

            self.log("%s: the checks crashed: %r\n%s" % (AGENT_NAME, exc, traceback.format_exc()))
            payload = crashed_payload(exc)
        ran = None
        if only:
            payload, ran = merge_targeted(previous, payload, only)
        fail_on = "warn" if params["fail_on"] == "warn" else "fail"
        state = read_state(self.state_path, self.log, started)
        checks = payload["checks"]
        credit = credited(only.get("credit"), checks, ran) if only else None
        state, events = step(state, checks, settings, fail_on=fail_on, now=started, ran=ran, credit=credit)
        for event in events:
            self.log("%s: %s" % (AGENT_NAME, event))
        failing = failing_after_hysteresis(state, checks)
        duration = time.monotonic() - mono
        result = dict(json_safe(payload))
        result.update({
            "node": self.node, "generated_at": started, "cycle": state["cycle"],
            "agent": {"healthy": state["healthy"], "failing": failing,
                      "cpu_ms": round((time.process_time() - cpu) * 1000.0, 1)},
        })
        if self.events is not None:
            result["agent"]["events"] = self.events
        if only:
            result["agent"]["signal"] = {"checks": dict((k, only[k]) for k in ("gpu", "rdma", "fabricmanager")),
                                         "why": only.get("why") or []}
        state["failing"] = failing
        written = self._write_local(state, result)
        publishers = [("kubernetes", self.kube), ("slurm", self.slurm)]
        if self.textfile_dir:
            publishers.insert(0, ("metrics", MetricsPublisher(self.textfile_dir, result, state, started, duration)))
        self.outcomes = run_publishers(publishers, state["healthy"], failing, publish_timeout(self.config), self.log)
        self.status = "cycle %d: %s, %.1f ms CPU%s" % (
            state["cycle"], "healthy" if state["healthy"] else "unhealthy: " + summary_message(failing, 200),
            result["agent"]["cpu_ms"], "" if written else "; health.json not written (journal)")
        return 0

    def _fabricmanager(self, payload, params, only):
        """The agent's own check agent.fabricmanager (agent_signals.fabricmanager_check) added to a
        full cycle and to a targeted one for the fabric manager."""
        if only is not None and not only.get("fabricmanager"):
            return payload
        settings, _errors = signals_settings(self.config)
        unit = (settings or {}).get("fabricmanager_unit")
        check = fabricmanager_check(params["root"] if isinstance(params.get("root"), str) else "/", unit)
        if check is not None:
            payload = dict(payload, checks=list(payload["checks"]) + [check])
        return payload

    def _write_local(self, state, result):
        """agent-state.json and health.json; a failure is journalled, never stops the cycle."""
        ok = True
        for path, text, what in ((self.state_path, lambda: json.dumps(state, sort_keys=True), "hysteresis state"),
                                 (self.health_path, lambda: json.dumps(result, sort_keys=True, allow_nan=False),
                                  "result")):
            try:
                atomic_write(path, text())
            except (AgentError, OSError, ValueError) as exc:
                ok = False
                self.log("%s: %s not written (%s), publishing goes on: %s"
                         % (AGENT_NAME, path, what, getattr(exc, "strerror", None) or exc))
        return ok


def build_agent(config):
    """The Agent with the publishers its configuration turns on."""
    add_python_path(config)
    kube = slurm = None
    if (config.get("kubernetes") or {}).get("enabled"):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher

        kube = KubePublisher.from_config(config)
    if (config.get("slurm") or {}).get("enabled"):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher

        slurm = SlurmPublisher.from_config(config)
    return Agent(config, kube=kube, slurm=slurm)


def run_once(path, events=None, only=None):
    """One cycle, the same in both modes: the configuration read, the publishers built (a rotated
    client certificate or token is picked up), ``Agent.cycle``. Returns the cycle's status line;
    never raises (each problem is a journal line). ``events``: the resident agent's event sources
    (agent_events.EventSources.counters), written to health.json as ``agent.events``. ``only``: a
    targeted cycle for a signal (Agent.cycle)."""
    try:
        config = load_config(path)
    except AgentError as exc:
        say("%s: %s; last good result kept" % (AGENT_NAME, exc))
        return "no cycle: %s" % exc
    try:
        agent = build_agent(config)
    except Exception as exc:  # a publisher that cannot be built (e.g. credentials over plain http)
        say("%s: publishers not started: %s; the checks run and are written locally" % (AGENT_NAME, exc))
        agent = Agent(config)
    agent.events = events
    agent.cycle(only)
    return agent.status


def slurm_health_check(config, log=None, now=None):
    """Slurm HealthCheckProgram mode: drain or resume the node from the last result (health.json).
    An unhealthy verdict is acted on whatever its age; a healthy one only while current (a result
    that is stale or dated in the future resumes nothing)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher

    log = log or say
    now = time.time() if now is None else now
    path = os.path.join(config.get("state_dir") or DEFAULT_STATE_DIR, "health.json")
    result, problem = read_health(path, now=now)
    if result is None:
        log("%s: slurm: %s: node left as it is" % (AGENT_NAME, problem or "no agent result in %s yet" % path))
        return 0
    healthy = result["agent"].get("healthy") is True
    max_age = result_max_age(config)
    verdict, age = freshness(result.get("generated_at"), now, max_age)
    if healthy and verdict != FRESH:
        log("%s: slurm: the last result (healthy) is %s: not current, node left as it is"
            % (AGENT_NAME, describe(verdict, age, max_age)))
        return 0
    publisher = SlurmPublisher.from_config(config)
    failing = result["agent"].get("failing") or []
    if not healthy and not failing:
        failing = [{"id": "host.validation", "target": "node", "status": FAIL, "message": "unhealthy"}]
    for line in publisher.publish(healthy, failing, always=True):
        log("%s: slurm: %s" % (AGENT_NAME, line))
    return 0
