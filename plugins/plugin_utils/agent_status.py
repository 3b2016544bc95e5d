# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict of fleet status from the Kubernetes API (playbooks/fleet_status.yml,
gpufleet_status_source=kubernetes): the node health agent's NodeCondition GpufleetHealthy of one
Node turned into its checks (``node_checks``), and the checks of every reported host from the
conditions read (``host_checks``) or from a Node list that could not be read (``unread_checks``).

One verdict for both readers: the filter ``agent_status_checks`` (a NodeList or list of Nodes, as
``ansible.builtin.uri`` returns it) and the lookup ``agent_conditions`` (the list read in pages by
module_utils/kube/node_list, reduced to the condition per Node). Contract: docs/contracts.md, the
check id agent.condition.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, FUTURE, describe, freshness, parse_utc
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import DUPLICATES

CONDITION_CHECK = "agent.condition"
_FIRST = re.compile(r"^([A-Za-z0-9_.]+)\[([^\]]*)\]: ")
NO_NODE = "no Node of this name in the Kubernetes API"


def _check(check_id, target, status, message):
    return {"id": check_id, "target": target, "status": status, "message": message}


def node_condition(node):
    """The GpufleetHealthy condition of a Node object (a dict) or None; when the Node carries more than
    one of that type, the first with ``DUPLICATES`` set to the index of the second (``condition_checks``
    fails it), as module_utils/kube/node_list reduces a Node of a page."""
    found = None
    for index, condition in enumerate((node.get("status") or {}).get("conditions") or []):
        if isinstance(condition, dict) and condition.get("type") == CONDITION_TYPE:
            if found is not None:
                return dict(found, **{DUPLICATES: index})
            found = dict(condition)
            found.pop(DUPLICATES, None)
    return found


def condition_checks(condition, now, max_age):
    """The checks of one Node from its GpufleetHealthy ``condition`` (a dict; None: the Node has none)."""
    if condition is None:
        return [_check(CONDITION_CHECK, "node", "fail",
                       "no %s condition: is the node health agent publishing to Kubernetes "
                       "(node_health_agent_kubernetes)?" % CONDITION_TYPE)]
    duplicate = condition.get(DUPLICATES)
    if duplicate is not None:
        # two conditions of one type: the API server merges conditions by type, a JSON patch or a
        # PUT can still leave two; neither is the verdict (which one would a reader take?): fail closed
        return [_check(CONDITION_CHECK, "node", "fail",
                       "the Node carries more than one %s condition (status.conditions[%s] repeats the type): "
                       "its verdict is unknown; remove the duplicate (kubectl edit node --subresource=status)"
                       % (CONDITION_TYPE, duplicate))]
    heartbeat = parse_utc(condition.get("lastHeartbeatTime"))
    verdict, age = freshness(heartbeat, now, max_age)
    if verdict == FUTURE:
        return [_check(CONDITION_CHECK, "node", "fail",
                       "%s condition's last heartbeat is %s: its verdict is unknown, not current"
                       % (CONDITION_TYPE, describe(verdict, age, max_age)))]
    if verdict != FRESH:
        age = "never" if heartbeat is None else "%d s ago" % (now - heartbeat)
        return [_check(CONDITION_CHECK, "node", "fail",
                       "%s condition is stale (last heartbeat %s, more than %d s): is "
                       "gpufleet-health-agent running? (systemctl status gpufleet-health-agent)"
                       % (CONDITION_TYPE, age, max_age))]
    message = condition.get("message") or ""
    if condition.get("status") == "True":
        return [_check(CONDITION_CHECK, "node", "pass", message or "all gpufleet checks pass")]
    if condition.get("status") == "False":
        match = _FIRST.match(message)
        check_id = condition.get("reason") or CONDITION_CHECK
        target = match.group(2) if match and match.group(1) == check_id else "node"
        return [_check(check_id, target, "fail", message or "unhealthy")]
    return [_check(CONDITION_CHECK, "node", "fail", "%s condition status %r: %s"
                   % (CONDITION_TYPE, condition.get("status"), message))]


def node_checks(node, now, max_age):
    """The checks of one Node object (None: no such Node)."""
    if node is None:
        return [_check(CONDITION_CHECK, "node", "fail", NO_NODE)]
    return condition_checks(node_condition(node), now, max_age)


def host_checks(conditions, hosts, now, max_age):
    """{host: [checks]} for ``hosts`` from ``conditions`` ({Node name: its GpufleetHealthy condition
    or None}, every Node listed); a host without a Node fails."""
    return dict((host, condition_checks(conditions[host], now, max_age) if host in conditions
                 else [_check(CONDITION_CHECK, "node", "fail", NO_NODE)]) for host in hosts)


def unread_checks(hosts, reason):
    """{host: [agent.condition failing]}: the Node list could not be read (``reason`` names the page
    and why). Fail closed: no host is reported healthy from a list that was not read to its end."""
    message = ("the Node list could not be read, so %s is unknown: %s" % (CONDITION_TYPE, reason))
    return dict((host, [_check(CONDITION_CHECK, "node", "fail", message)]) for host in hosts)
