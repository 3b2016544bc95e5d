# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's Slurm publisher (docs/contracts.md, "Node health agent", "Slurm"), as LBNL NHC does:

- unhealthy: drain the node with the reason ``gpufleet: <id>[<target>]`` (the first failing
  check); a node already drained by gpufleet gets the new reason;
- healthy: resume the node only when gpufleet drained it (DRAIN with a reason starting ``gpufleet:``);
- a node in someone else's hands (an admin's or Slurm's own: DOWN, FAIL, MAINTENANCE, REBOOT_*,
  POWER* states, a reason that is not gpufleet's; ``node_hold``) is never drained, re-reasoned
  or resumed.

``slurm_commands`` builds the scontrol commands from ``scontrol show node`` output (pure, unit
tested): ``--json`` where the installed Slurm has it (23.02 and later), ``-o`` text up to 22.05
(module_utils/slurm/slurm.py reads both); ``SlurmPublisher`` asks ``scontrol --version`` which form, then
runs the commands through the command runner. It runs in each agent cycle
(``slurm.enabled``) and as Slurm's ``HealthCheckProgram`` (``gpufleet-health-agent
--slurm-health-check``, acting on the last result in health.json).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import SLURM_REASON_PREFIX, AgentError
from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm import (
    ShowNodeError, is_json_argv, node_hold, parse_version, read_show_node, show_node_argv)
from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm import (  # noqa: F401  pylint: disable=unused-import
    parse_show_node,
)


def drain_reason(failing):
    first = failing[0]
    return "%s %s[%s]" % (SLURM_REASON_PREFIX, first["id"], first["target"])


def slurm_commands(node, healthy, failing, show_output, scontrol="scontrol", json_form=False):
    """([argv, ...], explanation) for the node's health and its current Slurm state (``show_output``:
    the answer of ``scontrol show node <node> --json`` with ``json_form``, of ``... -o`` without):
    drain (or change our reason) when unhealthy, resume what we drained when healthy; a node held by
    someone else (node_hold) is left alone either way, and so is a node whose answer cannot be read
    without guessing."""
    form = "--json" if json_form else "-o"
    try:
        fields = read_show_node(show_output, node, json_form)
    except ShowNodeError as exc:
        return [], "left alone: the answer of scontrol show node %s %s is unreadable (%s)" % (node, form, exc)
    if not fields.get("NodeName"):
        raise AgentError("scontrol show node %s %s: no node %s in the answer %r"
                         % (node, form, "named %s" % node if json_form else "(no NodeName)",
                            (show_output or "")[:200]))
    # the node named is the node acted on (`scontrol update NodeName=<node>`): NodeName must be the node
    # asked about; NodeHostName is not compared (it may differ: an FQDN or address), nor accepted instead
    if fields["NodeName"] != node:
        raise AgentError("scontrol show node %s %s: the answer is for NodeName=%s, not this node (NodeHostName=%s; "
                         "the agent's node_name must be the Slurm NodeName)"
                         % (node, form, fields["NodeName"], fields.get("NodeHostName", "")))
    state = fields.get("State", "")
    reason = fields.get("Reason", "")
    hold, held = node_hold(state, reason, SLURM_REASON_PREFIX)
    if hold == "other":
        return [], "left alone: State=%s is not gpufleet's (%s)" % (state, "; ".join(held))
    if not healthy:
        wanted = drain_reason(failing)
        if hold == "ours" and reason.split(" [", 1)[0] == wanted:
            return [], "already drained: %s" % wanted
        return [[scontrol, "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % wanted]], "drain: %s" % wanted
    if hold == "ours":
        return [[scontrol, "update", "NodeName=%s" % node, "State=RESUME"]], "resume (was %s)" % reason
    return [], "nothing to do"


class SlurmPublisher(object):
    def __init__(self, node, runner, scontrol="scontrol"):
        self.node = node
        self.runner = runner
        self.scontrol = scontrol

    @classmethod
    def from_config(cls, config):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner

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
        a command ran (``always``: also when nothing was to do, the HealthCheckProgram mode). The
        form of ``show node`` follows ``scontrol --version`` (slurm.show_node_argv: ``--json`` from
        23.02, ``-o`` for older or an answer not of the form "<package> <x.y.z>")."""
        argv = show_node_argv(self.scontrol, self.node, parse_version(self._run([self.scontrol, "--version"], deadline)))
        shown = self._run(argv, deadline)
        commands, why = slurm_commands(self.node, healthy, failing, shown, self.scontrol, is_json_argv(argv))
        for argv in commands:
            self._run(argv, deadline)
        return [why] if commands or always else []
