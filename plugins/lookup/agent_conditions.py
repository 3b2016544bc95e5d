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
extends_documentation_fragment:
  - gpufleet.cluster.agent_conditions
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
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import fleet_checks


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
