# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readers of the agent's own records under its state directory (``/var/lib/gpufleet``),
each the one strict reader of its record kind (docs/contracts.md, "Records read back"), built on
module_utils/records.py; the files are written by ``state_files.atomic_write`` (agent_cycle):

- ``parse_state`` / ``read_state``: ``agent-state.json`` (the hysteresis state). Unreadable: set
  aside (``agent-state.json.damaged-<UTC time>``, journalled), and the cycle goes on from a state
  whose history is lost (agent_hysteresis.lost_history): every check counts as failing until it
  passes its ``recover_after`` cycles, so a damaged file never makes a node healthy sooner;
- ``parse_health`` / ``read_health``: ``health.json`` (the last cycle's result, read back by
  ``--slurm-health-check``, ``--npd`` and, from a slurp, the filter ``agent_health_check``).
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

from ansible_collections.gpufleet.cluster.plugins.module_utils import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_config import AGENT_NAME
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_hysteresis import lost_history
from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import STATUSES
from ansible_collections.gpufleet.cluster.plugins.module_utils.state_files import read_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.state_files import set_aside as _set_aside

STATE_FILE = "agent-state.json"
HEALTH_FILE = "health.json"
# A DGX H100 cycle writes about 35 KiB of health.json and 30 KiB of state; a node with many more
# devices and long messages stays well under this.
MAX_BYTES = 4 * 1024 * 1024
MAX_COUNT = 2 ** 53  # consecutive cycles, flaps, the cycle number
MAX_CHECKS = 20000
MAX_MESSAGE = 64 * 1024
STATE_KEYS = ("checks", "healthy", "cycle", "updated", "failing")
ENTRY_KEYS = ("failing", "fails", "passes", "flaps", "raw", "since", "message", "status", "held")


def _when(value, record, field):
    """A time as the agent's clock gave it: finite (see the module's note on times)."""
    return records.number(value, record, field)


def _check_list(value, record, field):
    """[{id, target, status, message}] as the agent publishes its failing checks."""
    records.listing(value, record, field, MAX_CHECKS)
    for index, item in enumerate(value):
        where = "%s[%d]" % (field, index)
        records.mapping(item, record, where, required=("id", "target"), allowed=("id", "target", "status", "message"))
        records.string(item["id"], record, where + ".id", 256, allow_empty=False)
        records.string(item["target"], record, where + ".target", 256)
        if "status" in item:
            records.string(item["status"], record, where + ".status", choices=STATUSES)
        if "message" in item:
            records.string(item["message"], record, where + ".message", MAX_MESSAGE)
    return value


def parse_state(raw, record=STATE_FILE):
    """agent-state.json as written by a cycle (agent_hysteresis.step plus ``failing``), checked:
    RecordError naming the field otherwise."""
    doc = records.mapping(records.load_json(raw, record, max_bytes=MAX_BYTES), record, allowed=STATE_KEYS)
    if "healthy" in doc:
        records.boolean(doc["healthy"], record, "healthy")
    if "cycle" in doc:
        records.integer(doc["cycle"], record, "cycle", 0, MAX_COUNT)
    if "updated" in doc:
        _when(doc["updated"], record, "updated")
    if "failing" in doc:
        _check_list(doc["failing"], record, "failing")
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
            _when(entry["since"], record, field + ".since")
        if "message" in entry:
            records.string(entry["message"], record, field + ".message", MAX_MESSAGE)
        if "status" in entry:
            records.string(entry["status"], record, field + ".status", choices=STATUSES)
    return doc


def parse_health(raw, record=HEALTH_FILE):
    """health.json as a cycle writes it, checked where it is acted on: ``agent.healthy`` (a
    boolean), ``agent.failing`` (the published failing checks), ``generated_at`` (a finite
    number; whether it is current is clock.freshness's: missing is never current), ``cycle``,
    ``node``. The rest (the node_validate
    payload) is bounded in size and depth by records.load_json. RecordError otherwise."""
    doc = records.mapping(records.load_json(raw, record, max_bytes=MAX_BYTES), record)
    agent = doc.get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("healthy"), bool):
        raise records.RecordError(record, "no agent verdict (true or false): not written by the node health agent",
                                  "agent.healthy")
    records.mapping(agent, record, "agent")
    if "failing" in agent:
        _check_list(agent["failing"], record, "agent.failing")
    if agent["healthy"] and agent.get("failing"):
        raise records.RecordError(record, "healthy with failing checks", "agent.failing")
    if "generated_at" in doc:  # without it the result is never current (clock.freshness: unknown)
        _when(doc["generated_at"], record, "generated_at")
    if "cycle" in doc:
        records.integer(doc["cycle"], record, "cycle", 0, MAX_COUNT)
    if "node" in doc:
        records.string(doc["node"], record, "node", 253)
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
