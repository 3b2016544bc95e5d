# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""health.json, the node health agent's published result (docs/contracts.md, "Node health
agent", "Records read back"): its one strict reader (``parse_health``) and how long its verdict
counts as current (``result_max_age``).

Shared by the agent (agent_state.read_health, agent_cycle: ``--slurm-health-check``, ``--npd``)
and the controller (the filter ``agent_health_check``, from a slurp), so that the controller never
imports the agent's own files: this file imports only ``records``, ``checks`` and the agent's
configuration schema (``agent_config``, shared: the default interval).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import DEFAULT_INTERVAL
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import STATUSES

HEALTH_FILE = "health.json"
DEFAULT_RESULT_MAX_AGE = 300  # seconds a health.json verdict of "healthy" counts as current, at least
# A DGX H100 cycle writes about 35 KiB of health.json and 30 KiB of state; a node with many more
# devices and long messages stays well under this.
MAX_BYTES = 4 * 1024 * 1024
MAX_COUNT = 2 ** 53  # consecutive cycles, flaps, the cycle number
MAX_CHECKS = 20000
MAX_MESSAGE = 64 * 1024


def result_max_age(config):
    """Seconds a health.json verdict counts as current: 3 intervals (``config["interval"]``, the
    agent's; a value that is no positive number counts as the default), at least 300 s."""
    interval = config.get("interval", DEFAULT_INTERVAL)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        interval = DEFAULT_INTERVAL
    return max(DEFAULT_RESULT_MAX_AGE, 3 * interval)


def when(value, record, field):
    """A time as the agent's clock gave it: finite (whether it is current is clock.freshness's)."""
    return records.number(value, record, field)


def check_list(value, record, field):
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
        check_list(agent["failing"], record, "agent.failing")
    if agent["healthy"] and agent.get("failing"):
        raise records.RecordError(record, "healthy with failing checks", "agent.failing")
    if "generated_at" in doc:  # without it the result is never current (clock.freshness: unknown)
        when(doc["generated_at"], record, "generated_at")
    if "cycle" in doc:
        records.integer(doc["cycle"], record, "cycle", 0, MAX_COUNT)
    if "node" in doc:
        records.string(doc["node"], record, "node", 253)
    return doc
