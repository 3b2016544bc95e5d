# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: agent_conditions
author: gpufleet contributors (@gpufleet)
version_added: 0.3.0
short_description: Check results per host from the node health agents' conditions, the Node list read in pages
description:
  - Fleet status without a sweep (playbooks/fleet_status.yml with C(gpufleet_status_source=kubernetes)).
    Reads C(GET /api/v1/nodes) from the controller in pages of O(page_size) Nodes (C(limit) and
    C(continue), as kubectl reads a list), keeps of each Node only its name and its NodeCondition
    C(GpufleetHealthy), and returns per host the checks that C(record_checks) (option C(hosts))
    hands to the fleet_report callback. The whole NodeList is never held in memory.
  - The verdict per Node is the filter C(agent_status_checks)' (one function in
    plugins/plugin_utils/agent_status.py).
  - A continue token the API server no longer serves (C(410 Gone), reason C(Expired)) starts the
    list again from its first page, at most O(max_restarts) times.
  - "Fail closed: when the list cannot be read to its end (API server unreachable, 401/403, an
    answer that is not a NodeList page, a page larger than O(max_page_bytes), continue tokens that
    keep expiring), every host fails C(agent.condition) with the reason, naming the page. A page size
    or credentials that cannot be used fail every host the same way (the lookup does not raise: the
    report of the run replaces the hosts' earlier verdicts)."
  - Plain C(http://) is accepted only for a loopback address (C(kubectl proxy), a test double);
    credentials are never sent unencrypted elsewhere, and redirects are never followed.
options:
  hosts:
    description: Node names to report (the inventory hosts); a host without a Node fails.
    type: list
    elements: str
    required: true
  exclude:
    description: Hosts of O(hosts) not to report.
    type: list
    elements: str
    default: []
  agent_var:
    description:
      - A host of O(hosts) whose variable of this name is false (C(gpufleet_health_agent), the node
        health agent opted out) is not reported; unset is true. Read here, once per host from
        C(hostvars), not through a Jinja chain of filters per host (C(map), C(extract), C(zip),
        C(selectattr), C(reject('in', ...))), which costs several times more at 10,000 hosts.
      - Empty to report every host of O(hosts).
    type: str
    default: gpufleet_health_agent
  server:
    description: The API server URL (C(https://host:6443)).
    type: str
    required: true
  token_file:
    description: File with a bearer token (read again for each page, projected tokens rotate).
    type: str
  ca_file:
    description: CA bundle to verify the API server's certificate (default the system's).
    type: str
  cert_file:
    description: Client certificate (PEM).
    type: str
  key_file:
    description: Key of O(cert_file) (PEM).
    type: str
  max_age:
    description: Seconds after which a condition's lastHeartbeatTime is stale.
    type: int
    default: 600
  page_size:
    description:
      - Nodes per page (C(limit)); kubectl's default chunk size. An integer from 1 to 5000 (or its
        decimal text, as C(-e) gives it).
      - Any other value fails every reported host (C(agent.condition) naming
        C(gpufleet_status_kube_page_size)), so that the report of the run replaces earlier verdicts.
    type: raw
    default: 500
  max_restarts:
    description: Times the list is started again after an expired continue token before it fails.
    type: int
    default: 3
  max_page_bytes:
    description: Largest answer accepted for one page, in bytes.
    type: int
    default: 67108864
  timeout:
    description: Seconds for one page (connect, send, the whole answer).
    type: float
    default: 60
"""

EXAMPLES = r"""
- name: Report the agents' published results
  gpufleet.cluster.record_checks:
    hosts: >-
      {{ lookup('gpufleet.cluster.agent_conditions', hosts=groups['gpu_nodes'],
                server='https://api.example.com:6443', token_file='token', ca_file='ca.crt') }}
"""

RETURN = r"""
_raw:
  description: "One dict: host name -> list of checks (C(id), C(target), C(status), C(message))."
  type: list
  elements: dict
"""

import ipaddress
import time

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient, KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import (
    MAX_PAGE_SIZE,
    NodeListError,
    read_conditions,
)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import host_checks, unread_checks

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 is not a target
    raise


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


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if terms:
            raise AnsibleLookupError("agent_conditions takes no terms, only options (hosts, server, ...)")
        hosts = self.get_option("hosts")
        if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
            raise AnsibleLookupError("agent_conditions: hosts must be a list of node names, got %r" % (hosts,))
        excluded = set(str(host) for host in self.get_option("exclude") or [])
        agent_var = self.get_option("agent_var")
        if agent_var:
            try:
                excluded.update(opted_out(hosts, (variables or {}).get("hostvars"), agent_var))
            except KubeError as exc:
                raise AnsibleLookupError(str(exc))
        hosts = [str(host) for host in hosts if str(host) not in excluded]
        page_size = page_size_of(self.get_option("page_size"))
        if page_size is None:
            # fail every reported host, not the lookup: a raise would fail localhost only and leave the
            # fleet report with the previous run's verdicts of these hosts
            return [unread_checks(hosts, "gpufleet_status_kube_page_size (page_size) must be an integer from 1 "
                                         "to %d, got %r: nothing was read" % (MAX_PAGE_SIZE, self.get_option("page_size")))]
        try:
            client = client_for(self.get_option("server"), self.get_option("token_file"), self.get_option("ca_file"),
                                self.get_option("cert_file"), self.get_option("key_file"),
                                float(self.get_option("timeout")))
        except KubeError as exc:  # every host fails, as page_size above
            return [unread_checks(hosts, "agent_conditions: %s" % exc)]
        checks, _figures = agent_conditions(hosts, client, max_age=self.get_option("max_age"),
                                            page_size=page_size,
                                            max_restarts=self.get_option("max_restarts"),
                                            max_page_bytes=self.get_option("max_page_bytes"))
        return [checks]
