#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: record_checks
short_description: Return check results computed by a playbook in the gpufleet check model
version_added: 0.1.0
description:
  - Takes checks built by a playbook (for example from a Kubernetes validation Job's output with
    the C(nccl_tests_checks) filter) and returns them as C(checks), C(summary) and C(healthy), so
    that the C(fleet_report) callback collects them like any validation module's result.
  - Validates every check (id, target, status, message) and fails naming the offending entry.
  - With O(hosts) instead of O(checks), one task on the controller reports checks for many hosts
    (C(host_checks)), which the C(fleet_report) callback files under those hosts. Fleet status
    from the Kubernetes API (playbooks/fleet_status.yml) costs one task, not one per host.
  - Never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  checks:
    description: List of checks, each a dict with C(id), C(target), C(status) (pass, warn, fail or
      skip), C(message) and optionally C(observed) and C(expected).
    type: list
    elements: dict
  hosts:
    description:
      - Checks of other hosts, a dict host name -> list of checks as in O(checks) (for example
        from the C(agent_status_checks) filter). Mutually exclusive with O(checks); one of them is
        required. O(fail_on) applies to the checks of all hosts.
    type: dict
extends_documentation_fragment:
  - gpufleet.cluster.validation.fail_on
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Report NCCL bandwidth
  gpufleet.cluster.record_checks:
    checks: "{{ nccl_log | gpufleet.cluster.nccl_tests_checks(min_busbw_gbps=150, target='nccl-allreduce') }}"
    fail_on: never
"""

RETURN = r"""
checks:
  description: The checks, validated.
  returned: when O(checks) is set
  type: list
  elements: dict
summary:
  description: Count per status.
  returned: always
  type: dict
  sample: {pass: 1, warn: 0, fail: 0, skip: 0}
healthy:
  description: True when no check has status fail.
  returned: always
  type: bool
host_checks:
  description: With O(hosts), the checks per host, validated (no C(checks) then).
  returned: when O(hosts) is set
  type: dict
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    record_checks_argspec,
    record_checks_work,
)

ARGUMENT_SPEC = record_checks_argspec()


def main():
    run_module(ARGUMENT_SPEC, record_checks_work,
               mutually_exclusive=[("checks", "hosts")], required_one_of=[("checks", "hosts")])


if __name__ == "__main__":
    main()
