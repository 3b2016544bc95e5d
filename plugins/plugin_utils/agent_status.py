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

import ipaddress
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, FUTURE, describe, freshness, parse_utc
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient, KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import (
    DUPLICATES,
    MAX_PAGE_SIZE,
    NodeListError,
    read_conditions,
)

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 is not a target
    raise

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


def loopback(server):
    """Whether the URL ``server`` names a loopback address (localhost, 127.0.0.0/8, ::1)."""
    host = urlsplit(str(server)).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_for(server, token_file=None, ca_file=None, cert_file=None, key_file=None, timeout=60.0):
    """The KubeClient of the options (KubeError for a server or credentials it refuses).

    The collection's own client (module_utils/kube/kube_node, the one the node health agent writes
    its condition with), not ansible.builtin.uri / open_url nor kubernetes.core: it re-reads the
    token file per request, never follows a redirect with the Authorization header, bounds every
    request by a deadline and every answer in bytes while reading it, and hands back the Status of an
    error (the 410 Expired of a continue token); kubernetes.core.k8s_info would need the kubernetes
    client on the controller and returns the whole list at once, uri/open_url return it whole too."""
    try:
        return KubeClient(server, token_file=token_file or None, ca_file=ca_file or None, cert_file=cert_file or None,
                          key_file=key_file or None, timeout=timeout, allow_plain_http=loopback(server))
    except (OSError, ValueError) as exc:  # ssl: a CA, certificate or key file that cannot be loaded
        raise KubeError("the API server's credentials cannot be loaded: %s" % exc)


def opted_out(hosts, hostvars, name):
    """The hosts of ``hosts`` whose variable ``name`` is false (its string, lowercased, is "false",
    as the files source of fleet_status.yml reads it); a host not in ``hostvars`` or without the
    variable is not opted out."""
    if hostvars is None:
        raise KubeError("agent_conditions: no hostvars to read %s from" % name)
    out = []
    for host in hosts:
        try:
            value = hostvars[host].get(name)
        except KeyError:
            continue
        if value is not None and str(value).lower() == "false":
            out.append(str(host))
    return out


def page_size_of(value):
    """The page size of ``value`` (an int, or its ASCII decimal text as -e gives it) from 1 to
    MAX_PAGE_SIZE, or None."""
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE_SIZE:
        return None
    return value


def agent_conditions(hosts, client, now=None, max_age=600, page_size=500, max_restarts=3,
                     max_page_bytes=64 * 1024 * 1024):
    """({host: [checks]}, figures or None): the checks of ``hosts`` from the Node list read in pages;
    every host failing agent.condition (naming the page) when the list cannot be read to its end."""
    try:
        conditions, figures = read_conditions(client, CONDITION_TYPE, limit=page_size, max_restarts=max_restarts,
                                              max_page_bytes=max_page_bytes)
    except NodeListError as exc:
        return unread_checks(hosts, str(exc)), None
    now = time.time() if now is None else float(now)
    return host_checks(conditions, hosts, now, int(max_age)), figures


def fleet_checks(hosts, hostvars, option):
    """{host: [checks]} of the Node list read in pages, for the lookup agent_conditions and the action
    fleet_conditions alike: ``hosts`` (node names) less ``option("exclude")`` and the hosts whose
    ``option("agent_var")`` is false in ``hostvars``; ``option(name)`` gives the other options (server,
    credentials, max_age, page_size, max_restarts, max_page_bytes, timeout). A page size or credentials
    that cannot be used fail every host (agent.condition), never raise: the report of the run replaces
    the hosts' earlier verdicts. KubeError only when ``agent_var`` is set and there are no hostvars."""
    excluded = set(str(host) for host in option("exclude") or [])
    agent_var = option("agent_var")
    if agent_var:
        excluded.update(opted_out(hosts, hostvars, agent_var))
    hosts = [str(host) for host in hosts if str(host) not in excluded]
    page_size = page_size_of(option("page_size"))
    if page_size is None:
        # fail every reported host, not the task: a raise would fail localhost only and leave the
        # fleet report with the previous run's verdicts of these hosts
        return unread_checks(hosts, "gpufleet_status_kube_page_size (page_size) must be an integer from 1 "
                                    "to %d, got %r: nothing was read" % (MAX_PAGE_SIZE, option("page_size")))
    try:
        client = client_for(option("server"), option("token_file"), option("ca_file"), option("cert_file"),
                            option("key_file"), float(option("timeout")))
    except KubeError as exc:  # every host fails, as page_size above
        return unread_checks(hosts, "agent_conditions: %s" % exc)
    checks, _figures = agent_conditions(hosts, client, max_age=option("max_age"), page_size=page_size,
                                        max_restarts=option("max_restarts"),
                                        max_page_bytes=option("max_page_bytes"))
    return checks
