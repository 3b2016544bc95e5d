# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # The options of the paged Node list read (gpufleet.cluster.agent_conditions): the lookup
    # agent_conditions and the action/module fleet_conditions take the same ones, read by the same
    # code (plugin_utils/agent_status.fleet_checks); their argument spec is
    # module_utils/kube/node_list.FLEET_CONDITIONS_SPEC.
    DOCUMENTATION = r"""
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
