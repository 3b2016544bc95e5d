# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's Slurm publisher (docs/contracts.md, "Node health agent", "Slurm"), as LBNL NHC does:

- unhealthy: drain the node with the reason ``gpufleet: <id>[<target>]`` (the first failing
  check); a node already drained by gpufleet gets the new reason; a node drained or down for
  another reason (an admin, another tool) is left alone;
- healthy: resume the node only when its reason starts with ``gpufleet:`` (drained by the agent).

``slurm_commands`` builds the scontrol commands from ``scontrol show node -o`` output (pure, unit
tested); ``SlurmPublisher`` runs them through the command runner. It runs in each agent cycle
(``slurm.enabled``) and as Slurm's ``HealthCheckProgram`` (``gpufleet-health-agent
--slurm-health-check``, acting on the last result in health.json).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_config import SLURM_REASON_PREFIX, AgentError

_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|$)")


def parse_show_node(text):
    """{field: value} of ``scontrol show node <name>`` (``-o``: one line; without: one field group per
    line); values may hold spaces (``OS=Linux 5.15.0-153-generic #163-Ubuntu SMP ...``,
    ``Reason=bad dimm [root@2025-09-23T09:46:15]``) and further fields may follow Reason."""
    line = " ".join((text or "").split())
    return dict((m.group(1), m.group(2).strip()) for m in _FIELD.finditer(line))


def drain_reason(failing):
    first = failing[0]
    return "%s %s[%s]" % (SLURM_REASON_PREFIX, first["id"], first["target"])


def slurm_commands(node, healthy, failing, show_output, scontrol="scontrol"):
    """([argv, ...], explanation) for the node's health and its current Slurm state."""
    fields = parse_show_node(show_output)
    if not fields.get("NodeName"):
        raise AgentError("scontrol show node %s: no NodeName in the answer %r" % (node, (show_output or "")[:200]))
    state = fields.get("State", "").upper()
    reason = fields.get("Reason", "")
    ours = reason.startswith(SLURM_REASON_PREFIX)
    drained = "DRAIN" in state or "DOWN" in state
    if not healthy:
        wanted = drain_reason(failing)
        if drained and not ours:
            return [], "left alone: drained or down for another reason (%s)" % (reason or state)
        if drained and reason.split(" [", 1)[0] == wanted:
            return [], "already drained: %s" % wanted
        return [[scontrol, "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % wanted]], "drain: %s" % wanted
    if drained and ours:
        return [[scontrol, "update", "NodeName=%s" % node, "State=RESUME"]], "resume (was %s)" % reason
    return [], "nothing to do"


class SlurmPublisher(object):
    def __init__(self, node, runner, scontrol="scontrol"):
        self.node = node
        self.runner = runner
        self.scontrol = scontrol

    @classmethod
    def from_config(cls, config):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import SubprocessRunner

        slurm = config.get("slurm") or {}
        return cls(slurm.get("node_name") or config.get("node_name"), SubprocessRunner(),
                   slurm.get("scontrol") or "scontrol")

    def _run(self, argv, deadline=None):
        timeout = 30.0
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise AgentError("%s not run: the cycle's publish deadline has passed" % " ".join(argv))
        result = self.runner.run(argv, timeout=timeout)
        if result.rc != 0:
            raise AgentError("%s failed (rc %s): %s" % (" ".join(argv), result.rc, (result.stderr or result.stdout).strip()))
        return result.stdout

    def publish(self, healthy, failing, always=False, deadline=None):
        """Run the scontrol commands the node's health needs; the explanation as a journal line when
        a command ran (``always``: also when nothing was to do, the HealthCheckProgram mode)."""
        shown = self._run([self.scontrol, "show", "node", self.node, "-o"], deadline)
        commands, why = slurm_commands(self.node, healthy, failing, shown, self.scontrol)
        for argv in commands:
            self._run(argv, deadline)
        return [why] if commands or always else []
