# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet status from the Kubernetes API: the node health agents' NodeCondition GpufleetHealthy
(published by plugins/module_utils/agent_kube.py) turned into check results per host, without
running a check (playbooks/fleet_status.yml, gpufleet_status_source=kubernetes).

Documentation: agent_status_checks.yml; contract: docs/contracts.md, "Node health agent".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.clock import FRESH, FUTURE, describe, freshness, parse_utc
from ansible_collections.gpufleet.cluster.plugins.module_utils.gate import CONDITION_TYPE

CONDITION_CHECK = "agent.condition"
_FIRST = re.compile(r"^([A-Za-z0-9_.]+)\[([^\]]*)\]: ")


def _check(check_id, target, status, message):
    return {"id": check_id, "target": target, "status": status, "message": message}


def node_checks(node, now, max_age):
    """The checks of one Node object (None: no such Node)."""
    if node is None:
        return [_check(CONDITION_CHECK, "node", "fail", "no Node of this name in the Kubernetes API")]
    conditions = [c for c in (node.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict) and c.get("type") == CONDITION_TYPE]
    if not conditions:
        return [_check(CONDITION_CHECK, "node", "fail",
                       "no %s condition: is the node health agent publishing to Kubernetes "
                       "(node_health_agent_kubernetes)?" % CONDITION_TYPE)]
    condition = conditions[0]
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
                       "gpufleet-health-agent.timer running?" % (CONDITION_TYPE, age, max_age))]
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


def agent_status_checks(node_list, hosts, now=None, max_age=300):
    """{host: [checks]} for ``hosts`` from a NodeList (``GET /api/v1/nodes``)."""
    if isinstance(node_list, dict):
        items = node_list.get("items")
    else:
        items = node_list
    if not isinstance(items, list):
        raise AnsibleFilterError("agent_status_checks: expected a NodeList (GET /api/v1/nodes) or a list of Nodes, "
                                 "got %s" % type(node_list).__name__)
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("agent_status_checks: hosts must be a list of node names, got %r" % (hosts,))
    nodes = dict(((item.get("metadata") or {}).get("name"), item) for item in items if isinstance(item, dict))
    now = time.time() if now is None else float(now)
    return dict((host, node_checks(nodes.get(host), now, int(max_age))) for host in hosts)


class FilterModule(object):
    def filters(self):
        return {"agent_status_checks": agent_status_checks}
