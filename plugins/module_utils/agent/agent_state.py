# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readers of the agent's own records under its state directory (``/var/lib/gpufleet``),
each the one strict reader of its record kind (docs/contracts.md, "Records read back"), built on
module_utils/core/records.py; the files are written by ``state_files.atomic_write`` (agent_cycle):

- ``parse_state`` / ``read_state``: ``agent-state.json`` (the hysteresis state). Unreadable: set
  aside (``agent-state.json.damaged-<UTC time>``, journalled), and the cycle goes on from a state
  whose history is lost (agent_hysteresis.lost_history): every check counts as failing until it
  passes its ``recover_after`` cycles, so a damaged file never makes a node healthy sooner;
- ``read_health``: ``health.json`` (the last cycle's result, read back by ``--slurm-health-check``
  and ``--npd``; its reader ``parse_health`` is module_utils/agent/health_record.py's, shared with the
  filter ``agent_health_check``, which reads it from a slurp).
  Unreadable: set aside and treated as no result (never "healthy": NPD unknown, no Slurm
  resume, ``agent.health`` failing).

Times in these records are informational (agent-state.json's ``since``, ``updated``) or judged
where they are acted on (health.json's ``generated_at``, by clock.freshness: an implausible,
missing or future stamp is never current, and an unhealthy verdict is acted on whatever its
age): a reader only checks that they are finite numbers. Refusing an implausible time here would
cost a node whose clock was never set, or was stepped, its hysteresis or its unhealthy verdict.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import AGENT_NAME
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import lost_history
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import STATUSES
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.health_record import (
    MAX_BYTES, MAX_CHECKS, MAX_COUNT, MAX_MESSAGE, check_list, parse_health, when)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import read_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import set_aside as _set_aside

STATE_FILE = "agent-state.json"
STATE_KEYS = ("checks", "healthy", "cycle", "updated", "failing")
ENTRY_KEYS = ("failing", "fails", "passes", "flaps", "raw", "since", "message", "status", "held")


def parse_state(raw, record=STATE_FILE):
    """agent-state.json as written by a cycle (agent_hysteresis.step plus ``failing``), checked:
    RecordError naming the field otherwise."""
    doc = records.mapping(records.load_json(raw, record, max_bytes=MAX_BYTES), record, allowed=STATE_KEYS)
    if "healthy" in doc:
        records.boolean(doc["healthy"], record, "healthy")
    if "cycle" in doc:
        records.integer(doc["cycle"], record, "cycle", 0, MAX_COUNT)
    if "updated" in doc:
        when(doc["updated"], record, "updated")
    if "failing" in doc:
        check_list(doc["failing"], record, "failing")
    checks = records.mapping(doc.get("checks", {}), record, "checks")
    if len(checks) > MAX_CHECKS:
        raise records.RecordError(record, "%d checks, more than %d" % (len(checks), MAX_CHECKS), "checks")
    for key, entry in checks.items():
        field = "checks.%s" % key[:200]
        if "|" not in key or len(key) > 512:
            raise records.RecordError(record, "not a check's id|target", field)
        records.mapping(entry, record, field, required=("failing",), allowed=ENTRY_KEYS)
        for name in ("failing", "raw", "held"):
            if name in entry:
                records.boolean(entry[name], record, "%s.%s" % (field, name))
        for name in ("fails", "passes", "flaps"):
            if name in entry:
                records.integer(entry[name], record, "%s.%s" % (field, name), 0, MAX_COUNT)
        if "since" in entry:
            when(entry["since"], record, field + ".since")
        if "message" in entry:
            records.string(entry["message"], record, field + ".message", MAX_MESSAGE)
        if "status" in entry:
            records.string(entry["status"], record, field + ".status", choices=STATUSES)
    return doc


def set_aside(path, reason, now=None, log=None):
    """state_files.set_aside with the agent's journal line."""
    target, reason = _set_aside(path, reason, now)
    if log is not None:
        log("%s: %s is damaged (%s): set aside%s" % (AGENT_NAME, path, reason, " as " + target if target else ""))
    return target


def read_state(path, log=None, now=None):
    """The hysteresis state in ``path``: {} when missing; unreadable: set aside (journalled) and
    a state whose history is lost (agent_hysteresis.lost_history) returned, never a healthy one."""
    state, problem = read_record(path, parse_state, now, MAX_BYTES)
    if problem is None:
        return state or {}
    if log is not None:
        log("%s: %s; its history is lost: every check counts as failing until it passes its "
            "recover_after cycles" % (AGENT_NAME, problem))
    return lost_history(problem)


def read_health(path, log=None, now=None):
    """(health.json's result, None); (None, None) when there is none; (None, problem) when it
    is unreadable: set aside, and ``problem`` (also journalled with ``log``) names the file."""
    result, problem = read_record(path, parse_health, now, MAX_BYTES)
    if problem is not None and log is not None:
        log("%s: %s: treated as no result" % (AGENT_NAME, problem))
    return result, problem
