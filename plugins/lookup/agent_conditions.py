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

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import (  # noqa: F401 (the lookup's API, tests)
    agent_conditions,
    client_for,
    fleet_checks,
    loopback,
    opted_out,
    page_size_of,
)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if terms:
            raise AnsibleLookupError("agent_conditions takes no terms, only options (hosts, server, ...)")
        hosts = self.get_option("hosts")
        if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
            raise AnsibleLookupError("agent_conditions: hosts must be a list of node names, got %r" % (hosts,))
        try:
            checks = fleet_checks(hosts, (variables or {}).get("hostvars"), self.get_option)
        except KubeError as exc:
            raise AnsibleLookupError(str(exc))
        return [checks]
