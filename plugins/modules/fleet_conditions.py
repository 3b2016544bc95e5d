#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_conditions
short_description: Fleet status from the node health agents' conditions, the Node list read in pages
version_added: 0.3.0
description:
  - Fleet status without a sweep in one controller task (playbooks/fleet_status.yml with
    C(gpufleet_status_source=kubernetes)). Runs on the controller only, through its action plugin
    (plugins/action/fleet_conditions.py); this file documents it.
  - Reads C(GET /api/v1/nodes) in pages as the lookup C(agent_conditions) does (same options, same
    verdict per Node, same fail-closed rules, so a list that cannot be read to its end fails every
    host with C(agent.condition) naming the page) and returns the checks per host as
    C(record_checks) with O(hosts) returns them (C(host_checks), C(summary), C(healthy)), so that the
    C(fleet_report) callback files them under those hosts.
  - The lookup's answer is not templated and no module runs (docs/performance.md).
author:
  - gpufleet contributors (@gpufleet)
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
extends_documentation_fragment:
  - gpufleet.cluster.validation.fail_on
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Report the agents' published results
  gpufleet.cluster.fleet_conditions:
    hosts: "{{ groups['gpu_nodes'] }}"
    server: https://api.example.com:6443
    token_file: token
    ca_file: ca.crt
    fail_on: never
"""

RETURN = r"""
host_checks:
  description: The checks per host (id, target, status, message), validated.
  returned: always
  type: dict
summary:
  description: Count per status over all hosts.
  returned: always
  type: dict
  sample: {pass: 8, warn: 0, fail: 2, skip: 0}
healthy:
  description: True when no check of any host has status fail.
  returned: always
  type: bool
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL_ON_CHOICES
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, run_module

# the action plugin's ARGUMENT_SPEC (plugins/action/fleet_conditions.py; tests/unit/test_fleet_conditions_action.py
# checks that they are the same)
ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "agent_var": {"type": "str", "default": "gpufleet_health_agent"},
    "server": {"type": "str", "required": True},
    "token_file": {"type": "str"},
    "ca_file": {"type": "str"},
    "cert_file": {"type": "str"},
    "key_file": {"type": "str"},
    "max_age": {"type": "int", "default": 600},
    "page_size": {"type": "raw", "default": 500},
    "max_restarts": {"type": "int", "default": 3},
    "max_page_bytes": {"type": "int", "default": 67108864},
    "timeout": {"type": "float", "default": 60},
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
}


def controller_only(module):
    """The module itself never reads the API: the action plugin does, on the controller."""
    raise ModuleFailure("gpufleet.cluster.fleet_conditions runs on the controller through its action plugin "
                        "(plugins/action/fleet_conditions.py), not as a module")


def main():
    run_module(ARGUMENT_SPEC, controller_only)


if __name__ == "__main__":
    main()
