# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node health agents publish, turned into check results without running a check:

- ``agent_status_checks``: the agents' NodeCondition GpufleetHealthy (published by
  plugins/module_utils/agent/agent_kube.py) per host (playbooks/fleet_status.yml,
  gpufleet_status_source=kubernetes);
- ``agent_health_check``: one node's health.json, read by playbooks/validate.yml, as the check
  ``agent.health`` (fresh and healthy, unhealthy, stale, dated in the future, unreadable, absent).

Documentation: agent_status_checks.yml, agent_health_check.yml; contract: docs/contracts.md,
"Node health agent" and the check id agent.health.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import time

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL_ON_CHOICES, offending
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, describe, freshness
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import summary_message
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.health_record import parse_health, result_max_age
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import node_checks
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_default

HEALTH_CHECK = "agent.health"
# health.json absent where the agent belongs: the agent is not installed yet (a first validate.yml
# before site.yml) or never ran. The message names the way in and the opt-out variable.
NOT_INSTALLED = ("no %s: the node health agent is not installed yet or never published a result. Install it "
                 "with gpufleet.cluster.health_agent (site.yml does, after validation), or leave this check out "
                 "with -e gpufleet_health_agent=false (gpufleet_health_agent: false in group_vars/gpu_nodes: no "
                 "agent on these nodes)")
HEALTH_FILE = "/var/lib/gpufleet/health.json"


def agent_status_checks(node_list, hosts, now=None, max_age=300):
    """{host: [checks]} for ``hosts`` from a NodeList (``GET /api/v1/nodes``); the verdict is
    plugin_utils/agent_status.node_checks, the one the paged reader (lookup agent_conditions) uses."""
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


def _health_result(read, path):
    """(health.json as a dict, None) from a slurp result, or (None, why) when absent (why None) or
    unreadable (why the reason)."""
    if not isinstance(read, dict):
        raise AnsibleFilterError("agent_health_check: expected the registered result of ansible.builtin.slurp "
                                 "of %s, got %s" % (path, type(read).__name__))
    if read.get("failed") or "content" not in read:
        message = str(read.get("msg") or "not read")
        if read.get("skipped") or "not found" in message.lower() or "no such file" in message.lower():
            return None, None
        return None, "cannot read %s: %s" % (path, message)
    try:
        raw = base64.b64decode(read["content"]) if read.get("encoding", "base64") == "base64" else str(read["content"])
    except (TypeError, ValueError, binascii.Error) as exc:
        return None, "%s is not the agent's JSON result: %s" % (path, exc)
    try:  # the one reader of health.json (docs/contracts.md, "Records read back")
        return parse_health(raw, path), None
    except RecordError as exc:
        if exc.field == "agent.healthy":
            return None, "%s has no agent verdict (agent.healthy): not written by the node health agent" % path
        return None, "%s is not the agent's JSON result: %s" % (path, exc)


def agent_health_check(read, expected=True, reason=None, installing=False, interval=60, now=None,
                       path=HEALTH_FILE):
    """The check ``agent.health`` (target ``node``) of one node from the slurp result ``read`` of its
    health.json (docs/contracts.md): fresh and healthy → pass; published unhealthy → fail; stale,
    dated in the future, unreadable, or absent where the agent belongs → fail. ``installing`` (a
    site.yml run, which installs and starts the agent after validation): absent → skip, stale, future
    or unreadable → warn. No agent expected (``expected`` false: ``reason`` says why) → skip. A result
    is current for 3 agent intervals, at least 300 s (the agent's own rule, health_record.result_max_age)."""
    def check(status, message):
        return {"id": HEALTH_CHECK, "target": "node", "status": status, "message": message,
                "expected": "a current, healthy result of the node health agent"}

    def not_current(message):
        if installing:
            return check("warn", message + "; this site.yml run (re)starts the agent after validation")
        return check("fail", message)

    if not expected:
        return check("skip", reason or "no node health agent expected on this node")
    result, why = _health_result(read, path)
    if why:
        return not_current(why)
    if result is None:
        if installing:
            return check("skip", "no %s yet: this site.yml run installs the node health agent after validation" % path)
        return check("fail", NOT_INSTALLED % path)
    try:
        max_age = result_max_age({"interval": float(interval)})
    except (TypeError, ValueError):
        raise AnsibleFilterError("agent_health_check: interval must be the agent's interval in seconds, got %r"
                                 % (interval,))
    now = time.time() if now is None else float(now)
    verdict, age = freshness(result.get("generated_at"), now, max_age)
    if verdict != FRESH:
        return not_current("the agent's last result (%s) is %s: its verdict is not current; is it running? "
                           "(systemctl status gpufleet-health-agent)" % (path, describe(verdict, age, max_age)))
    cycle = result.get("cycle")
    when = "%d s old, cycle %s" % (max(age, 0), cycle if cycle is not None else "?")
    if result["agent"]["healthy"]:
        return check("pass", "the agent publishes the node healthy (%s)" % when)
    failing = [{"id": item.get("id") or "?", "target": item.get("target") or "node", "message": item.get("message") or ""}
               for item in result["agent"].get("failing") or [] if isinstance(item, dict)]
    return check("fail", "the agent publishes the node unhealthy (%s; its Kubernetes condition and Slurm "
                         "drain follow it): %s" % (when, summary_message(failing) if failing else "no check named"))


def _host_var(host_vars, name, default=None):
    value = host_vars[name] if name in host_vars else None
    return default if value is None else value


def _read_of(host_vars, read_var):
    """The host's read of health.json at ``read_var``: a variable name, or a dotted path into one
    (``gpufleet_node_validation.agent_health_file``: node_validate's return); skipped when absent."""
    name, _dot, rest = read_var.partition(".")
    value = _host_var(host_vars, name, None)
    for key in rest.split(".") if rest else ():
        value = value.get(key) if isinstance(value, dict) else None
    return {"skipped": True} if value is None else value


def agent_health_checks(hosts, hostvars, agent_hosts, installing=False, now=None,
                        read_var="gpufleet_node_validation.agent_health_file"):
    """{host: [agent.health]} for the hosts of a play (playbooks/validate.yml: one controller task for
    the play). The agent belongs on a host of ``agent_hosts`` (gpu_nodes) whose ``gpufleet_health_agent``
    (tier, default true) is true; ``read_var`` is where the host's read of health.json is (the shape
    ansible.builtin.slurp registers): by default what node_validate returned for its
    ``agent_health_file`` option, read in the validation's own module run; its interval is
    ``node_health_agent_interval`` (default 60); ``installing``: see agent_health_check."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("agent_health_checks: expected a list of host names (ansible_play_hosts), got %r"
                                 % (hosts,))
    if isinstance(agent_hosts, str) or not isinstance(agent_hosts, (list, tuple)):
        raise AnsibleFilterError("agent_health_checks: agent_hosts must be a list of host names (groups['gpu_nodes']), "
                                 "got %r" % (agent_hosts,))
    default = tier_default("gpufleet_health_agent")
    now = time.time() if now is None else float(now)
    out = {}
    for host in hosts:
        try:
            host_vars = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("agent_health_checks: %r is not in hostvars" % (host,))
        wanted = _host_var(host_vars, "gpufleet_health_agent", default)
        if not isinstance(wanted, bool):
            if str(wanted).lower() not in ("true", "false"):
                raise AnsibleFilterError("agent_health_checks: host %s: gpufleet_health_agent must be true or false, "
                                         "got %r" % (host, wanted))
            wanted = str(wanted).lower() == "true"
        if host not in agent_hosts:
            expected, reason = False, "no node health agent on this node: not in group gpu_nodes"
        elif not wanted:
            expected, reason = False, "no node health agent: opted out (gpufleet_health_agent is false)"
        else:
            expected, reason = True, None
        out[host] = [agent_health_check(_read_of(host_vars, read_var), expected=expected,
                                        reason=reason, installing=installing,
                                        interval=_host_var(host_vars, "node_health_agent_interval", 60), now=now)]
    return out


def agent_health_failing(host_checks, hostvars, fail_on_var="gpufleet_validate_fail_on", fail_on="fail"):
    """The hosts of ``host_checks`` ({host: [checks]}, agent_health_checks' output as record_checks
    returns it) whose checks are at or above the host's own ``fail_on_var`` (default ``fail_on``): the
    nodes validate.yml fails on agent.health, like failing_hosts for node_validate's result."""
    if not isinstance(host_checks, dict):
        raise AnsibleFilterError("agent_health_failing: expected {host: [checks]} (record_checks' host_checks), got %s"
                                 % type(host_checks).__name__)
    out = []
    for host, checks in host_checks.items():
        own = _host_var(hostvars[host], fail_on_var, fail_on) if host in hostvars else fail_on
        if own not in FAIL_ON_CHOICES:
            raise AnsibleFilterError("agent_health_failing: host %s: fail_on must be one of %s, got %r (%s)"
                                     % (host, ", ".join(FAIL_ON_CHOICES), own, fail_on_var))
        if own != "never" and offending([c for c in checks or [] if isinstance(c, dict) and "status" in c], own):
            out.append(host)
    return out


class FilterModule(object):
    def filters(self):
        return {"agent_status_checks": agent_status_checks, "agent_health_check": agent_health_check,
                "agent_health_checks": agent_health_checks, "agent_health_failing": agent_health_failing}
