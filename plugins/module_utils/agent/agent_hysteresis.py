# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's hysteresis (docs/contracts.md, "Hysteresis"): a check turns failing after
``fail_after`` consecutive failing cycles (1 for the immediate checks) and back after
``recover_after`` consecutive other cycles. Which statuses count as failing is the result
model's one table (``checks.failing_statuses``). Counts cycles, never clock time: a clock that
jumps cannot change a verdict.

A state whose history is lost (``lost_history``: agent-state.json was unreadable and set aside,
agent_state.read_state) is read in the safe direction: every check starts as failing ("held"),
so it is failing at once when it fails and healthy again only after its ``recover_after``
passing cycles, as if it had been failing before; a damaged file never makes a node healthy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import thresholds
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, failing_statuses


LOST = "history_lost"


def lost_history(reason):
    """The state a cycle goes on from when agent-state.json was unreadable (``reason``)."""
    return {"checks": {}, "healthy": False, "cycle": 0, LOST: reason}


def check_key(check):
    return "%s|%s" % (check["id"], check["target"])


def step(state, checks, settings, fail_on="fail", now=None, ran=None, credit=None):
    """One cycle of hysteresis: (new state, events).

    ``state``: ``{"checks": {"id|target": {failing, fails, passes, flaps, raw, since, message}},
    "healthy": bool, "cycle": int}`` (empty for the first cycle; ``lost_history`` after a damaged
    one: agent_state.read_state). A check counts as failing in a cycle when its status fails under
    ``fail_on``. A flap is a change of the raw outcome between two cycles. The node is healthy
    when no check is failing. Events are journal lines. ``now`` is only recorded (``since``).
    ``ran`` (a targeted cycle: agent_signals): the ``id|target`` keys measured in this cycle; the
    other checks keep their entries as they are (not counted: they were not measured).
    ``credit`` (a targeted cycle for a confirmed reading of the fast probe: agent_signals.credited):
    ``{"id|target": n}``: such a check failing in this cycle has failed at least ``n`` times in a
    row (the probe's ``n`` bad readings, each at least 0.9 confirmation intervals after the
    previous, are its measurements; this cycle's failure is that they were the check's); a check
    passing in this cycle is not credited."""
    now = time.time() if now is None else now
    bad = failing_statuses(fail_on)
    old = (state or {}).get("checks") or {}
    lost = bool((state or {}).get(LOST))
    new, events = {}, []
    for check in checks:
        key = check_key(check)
        if ran is not None and key not in ran and key in old:
            new[key] = old[key]
            continue
        raw = check["status"] in bad
        entry = dict(old.get(key) or {"failing": lost, "fails": 0, "passes": 0, "flaps": 0, "raw": raw,
                                      "since": now})
        if lost and key not in old:
            entry["held"] = True  # failing until recover_after passes: its history is unknown
        if key in old and entry.get("raw") != raw:
            entry["flaps"] = entry.get("flaps", 0) + 1
        entry["raw"] = raw
        entry["fails"] = entry.get("fails", 0) + 1 if raw else 0
        if raw and credit and credit.get(key, 0) > entry["fails"]:
            entry["fails"] = credit[key]
        entry["passes"] = 0 if raw else entry.get("passes", 0) + 1
        entry["message"] = check.get("message", "")
        entry["status"] = check["status"]
        fail_after, recover_after = thresholds(settings, check["id"])
        if not entry["failing"] and raw and entry["fails"] >= fail_after:
            entry["failing"], entry["since"] = True, now
            events.append("check %s[%s] unhealthy after %d failing cycle(s): %s"
                          % (check["id"], check["target"], entry["fails"], entry["message"]))
        elif entry["failing"] and not raw and entry["passes"] >= recover_after:
            entry["failing"], entry["since"] = False, now
            entry.pop("held", None)
            events.append("check %s[%s] healthy again after %d passing cycle(s): %s"
                          % (check["id"], check["target"], entry["passes"], entry["message"]))
        elif entry.get("held") and entry["failing"] and not raw:
            entry["message"] = ("held failing: agent-state.json was unreadable, its history is lost (%d of %d passing "
                                "cycles): %s" % (entry["passes"], recover_after, entry["message"]))
        new[key] = entry
    for key, entry in old.items():
        if key not in new and entry.get("failing"):
            check_id, target = key.split("|", 1)
            events.append("check %s[%s] no longer reported (was failing): dropped" % (check_id, target))
    failing = failing_after_hysteresis({"checks": new}, checks)
    healthy = not failing
    was = (state or {}).get("healthy")
    if was is None or was != healthy:
        if healthy:
            events.append("node healthy" + ("" if was is None else " again"))
        else:
            first = failing[0]
            events.append("node unhealthy: %s[%s]: %s%s" % (
                first["id"], first["target"], first["message"],
                " (+%d more)" % (len(failing) - 1) if len(failing) > 1 else ""))
    return {"checks": new, "healthy": healthy, "cycle": (state or {}).get("cycle", 0) + 1,
            "updated": now}, events


def failing_after_hysteresis(state, checks):
    """The checks (in report order) that are failing after hysteresis, status forced to fail;
    those failing in this cycle before those only held failing (lost history): the first names
    the node's problem (the condition's reason, the Slurm drain reason)."""
    entries = state.get("checks") or {}
    out, held = [], []
    for check in checks:
        entry = entries.get(check_key(check))
        if entry and entry.get("failing"):
            (held if entry.get("held") and not entry.get("raw") else out).append(
                {"id": check["id"], "target": check["target"], "status": FAIL,
                 "message": entry.get("message", check.get("message", ""))})
    return out + held
