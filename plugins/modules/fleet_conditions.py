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
extends_documentation_fragment:
  - gpufleet.cluster.agent_conditions
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

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import FLEET_CONDITIONS_SPEC

# one spec for the action plugin and this module (module_utils/kube/node_list.py)
ARGUMENT_SPEC = FLEET_CONDITIONS_SPEC


def controller_only(module):
    """The module itself never reads the API: the action plugin does, on the controller."""
    raise ModuleFailure("gpufleet.cluster.fleet_conditions runs on the controller through its action plugin "
                        "(plugins/action/fleet_conditions.py), not as a module")


def main():
    run_module(ARGUMENT_SPEC, controller_only)


if __name__ == "__main__":
    main()
