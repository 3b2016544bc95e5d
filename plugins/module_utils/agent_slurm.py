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

_KEY = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_]*)=")
# The fields Slurm prints after Reason= (src/api/node_info.c, slurm_sprint_node_table, the same order
# from slurm-20-11-1-1 to 25.11: NodeName= first, State= on an earlier line, then the power line, then
# Reason=<text> [<user>@<time>] (a multi-line reason's further lines follow it), then these optional
# lines). Comment= and Extra= are free text like the reason itself.
AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName", "TLSCertTokenSet",
                "TLSCertLastRenewal", "Topology", "Parameters")


class ShowNodeError(ValueError):
    """The answer of ``scontrol show node`` cannot be read field by field without guessing."""


def parse_show_node(text):
    """{field: value} of ``scontrol show node <name>`` (``-o``: one line; without: one field group per
    line); values may hold spaces (``OS=Linux 5.15.0-153-generic #163-Ubuntu SMP ...``,
    ``Reason=bad dimm [root@2025-09-23T09:46:15]``) and further fields may follow Reason.

    A key is a word followed by ``=`` at the start or after whitespace. Reason= is read as Slurm
    prints it: its raw text (whitespace kept, nothing normalised; only the separator before the next
    field is dropped) up to the next field Slurm prints after it (AFTER_REASON) or the end; what looks
    like a key inside it is part of the reason. Free text (a reason, a comment) can hold text that looks
    like a field, so the answer is refused (ShowNodeError naming the key) when a key appears twice or
    Reason= appears after a field Slurm prints after it: which one is Slurm's cannot be told."""
    text = text or ""
    keys = list(_KEY.finditer(text))
    seen = {}
    for match in keys:
        name = match.group(1)
        if name in seen:
            raise ShowNodeError("%s= appears more than once (free text holding a field?): which is Slurm's cannot "
                                "be told" % name)
        seen[name] = match.start()
    if "Reason" in seen:
        early = [name for name in AFTER_REASON if seen.get(name, len(text)) < seen["Reason"]]
        if early:
            raise ShowNodeError("Reason= follows %s= (Slurm prints it before them): the reason cannot be told from "
                                "free text" % "=, ".join(early))
    fields, index = {}, 0
    while index < len(keys):
        match, after = keys[index], index + 1
        if match.group(1) == "Reason":
            while after < len(keys) and keys[after].group(1) not in AFTER_REASON:
                after += 1
        end = keys[after].start() if after < len(keys) else len(text)
        value = text[match.end():end]
        fields[match.group(1)] = value.rstrip() if match.group(1) == "Reason" else value.strip()
        index = after
    return fields


# `scontrol show node`'s State= (Slurm src/common/slurm_protocol_defs.c, node_states[] and
# node_state_flags[]; src/api/node_info.c prints node_state_string_complete(): BASE+FLAG+FLAG...
# since Slurm 21.08, e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING, MIXED+MAINTENANCE; up to 20.11 it printed
# node_state_string() with a suffix symbol and +CLOUD, +COMPLETING, +DRAIN, +FAIL, +POWER,
# +POWERING_DOWN, e.g. DOWN*+DRAIN, IDLE~, MAINT, REBOOT^).
BASE_STATES = ("DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN")
STATE_FLAGS = ("BLOCKED", "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "EXTERNAL",
               "INVALID_REG", "FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN",
               "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED",
               "POWERING_UP", "POWERING_DOWN", "PERFCTRS")
# node_state_string()'s suffixes (Slurm <= 20.11 show node, sinfo's short form)
_SUFFIXES = {"*": "NOT_RESPONDING", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
             "#": "POWERING_UP", "%": "POWERING_DOWN", "~": "POWERED_DOWN", "!": "POWER_DOWN", "-": "PLANNED"}
# node_state_string()'s words that are not a base state: (base, flags)
_WORDS = {"DRAINED": ("IDLE", ("DRAIN",)), "DRAINING": ("ALLOCATED", ("DRAIN",)), "FAILING": ("ALLOCATED", ("FAIL",)),
          "MAINT": ("IDLE", ("MAINTENANCE",)), "REBOOT": ("IDLE", ("REBOOT_REQUESTED",)), "INVAL": (None, ("INVALID_REG",)),
          "POWER": (None, ("POWERED_DOWN",)), "CANCEL_REBOOT": (None, ("REBOOT_REQUESTED",)), "UNDRAIN": (None, ("DRAIN",))}
# Bases and flags that say the node is in someone else's hands (an admin's or Slurm's own): gpufleet
# neither drains it with its reason, nor changes the reason, nor resumes it. DRAIN counts as ours
# only with our reason. The other flags (BLOCKED, CLOUD, COMPLETING, DYNAMIC_*, EXTERNAL, RESERVED,
# PLANNED, NOT_RESPONDING, PERFCTRS) say how Slurm schedules or reaches the node, not who holds it.
USABLE_BASES = ("IDLE", "ALLOCATED", "MIXED")
FOREIGN_FLAGS = ("FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN",
                 "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "RESUME")


def parse_state(state):
    """(base or None, set of flags, [tokens not understood]) of a State= value in either form. Slurm
    prints states in upper case: a token in another case is not understood (fail closed)."""
    tokens = (state or "").strip().split("+")
    base, flags, unknown = None, set(), []
    for index, token in enumerate(tokens):
        word = token.rstrip("".join(_SUFFIXES))
        flags.update(_SUFFIXES[char] for char in token[len(word):])
        if index == 0 and word in BASE_STATES:
            base = word
        elif index == 0 and word in _WORDS:
            base = _WORDS[word][0]
            flags.update(_WORDS[word][1])
        elif word in STATE_FLAGS:
            flags.add(word)
        elif word == "POWER":  # Slurm <= 20.11: +POWER is the power-saving (powered down) flag
            flags.add("POWERED_DOWN")
        else:
            unknown.append(token)
    return base, flags, unknown


def node_hold(state, reason, prefix):
    """Who holds the node, from its State= and Reason= (``prefix``: our reason's start):
    ``("ours", [])`` DRAIN set with our reason (``prefix`` at position 0 of the raw reason: whitespace
    or case is never normalised) and nothing else held; ``("free", [])`` neither
    drained nor held; ``("other", [what])`` anything else: a base other than IDLE, ALLOCATED,
    MIXED (DOWN, ERROR, FUTURE, UNKNOWN), a flag of FOREIGN_FLAGS, DRAIN or any reason that is not
    ours, or a state not understood (fail closed: left alone)."""
    base, flags, unknown = parse_state(state)
    reason = reason or ""
    ours = reason.startswith(prefix)  # the raw reason: no whitespace or case normalised
    held = []
    if base not in USABLE_BASES:
        held.append(base or "no base state")
    held.extend(flag for flag in FOREIGN_FLAGS if flag in flags)
    held.extend("%s (not understood)" % token for token in unknown)
    if reason and not ours:
        held.append("Reason=%s" % reason)
    elif "DRAIN" in flags and not ours:
        held.append("DRAIN without a reason of gpufleet")
    if held:
        return "other", held
    return ("ours", []) if "DRAIN" in flags else ("free", [])


def drain_reason(failing):
    first = failing[0]
    return "%s %s[%s]" % (SLURM_REASON_PREFIX, first["id"], first["target"])


def slurm_commands(node, healthy, failing, show_output, scontrol="scontrol"):
    """([argv, ...], explanation) for the node's health and its current Slurm state: drain (or
    change our reason) when unhealthy, resume what we drained when healthy; a node held by
    someone else (node_hold) is left alone either way."""
    try:
        fields = parse_show_node(show_output)
    except ShowNodeError as exc:
        return [], "left alone: the answer of scontrol show node %s is unreadable (%s)" % (node, exc)
    if not fields.get("NodeName"):
        raise AgentError("scontrol show node %s: no NodeName in the answer %r" % (node, (show_output or "")[:200]))
    if node not in (fields["NodeName"], fields.get("NodeHostName")):
        raise AgentError("scontrol show node %s: the answer is for NodeName=%s, not this node"
                         % (node, fields["NodeName"]))
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
