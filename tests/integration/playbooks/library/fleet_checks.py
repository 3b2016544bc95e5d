#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only module: returns the checks it is given, through the collection's check model."""

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
module: fleet_checks
short_description: Test double returning given checks (tests of the fleet_report callback only)
description:
  - Returns O(checks) in the gpufleet check-result model, failing like a validation module
    according to O(fail_on), and optionally a O(bandwidth_matrix).
options:
  checks:
    description: Checks to return.
    type: list
    elements: dict
    required: true
  fail_on:
    description: As for the validation modules.
    type: str
    default: fail
    choices: [fail, warn, never]
  bandwidth_matrix:
    description: Returned as is.
    type: dict
  crash:
    description: Raise a Python exception with this message instead of returning (a module crash).
    type: str
  sleep:
    description: Seconds to sleep before returning (to provoke an async or task timeout).
    type: float
    default: 0
author:
  - gpufleet contributors
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults, exit_with_checks


def main():
    module = AnsibleModule(
        argument_spec=dict(
            checks=dict(type="list", elements="dict", required=True),
            fail_on=dict(type="str", default="fail", choices=["fail", "warn", "never"]),
            bandwidth_matrix=dict(type="dict"),
            crash=dict(type="str"),
            sleep=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    time.sleep(module.params["sleep"])
    if module.params["crash"]:
        raise RuntimeError(module.params["crash"])
    results = CheckResults()
    for check in module.params["checks"]:
        extra = dict((key, check[key]) for key in ("observed", "expected") if key in check)
        results.add(check["id"], check.get("target", "node"), check["status"], check.get("message", ""),
                    **extra)
    extra = {}
    if module.params["bandwidth_matrix"] is not None:
        extra["bandwidth_matrix"] = module.params["bandwidth_matrix"]
    exit_with_checks(module, results, module.params["fail_on"], **extra)


if __name__ == "__main__":
    main()
