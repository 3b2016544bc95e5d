# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""check_failures: the few console lines of a failed validation (documentation: check_failures.yml).

The lines are built by ``module_utils/checks.py`` (``failure_lines``, ``group_checks``), the
result model's one place, so the console and the fleet report group identical checks alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import (
    FAIL_ON_CHOICES, STATUSES, failure_lines, offending)

NOTE = "(every check of the node, with observed and expected values: the fleet report)"


def check_failures(result, fail_on="fail", limit=10):
    if fail_on not in FAIL_ON_CHOICES:
        raise AnsibleFilterError("check_failures: fail_on must be one of %s, got %r"
                                 % (", ".join(FAIL_ON_CHOICES), fail_on))
    if not isinstance(result, dict) or not isinstance(result.get("checks"), list):
        raise AnsibleFilterError("check_failures: expected a validation result with a 'checks' list "
                                 "(docs/contracts.md, result model)")
    checks = [c for c in result["checks"] if isinstance(c, dict) and c.get("status") in STATUSES and c.get("id")]
    if fail_on == "never" or not offending(checks, fail_on):
        return ""
    try:
        limit = int(limit)
    except (TypeError, ValueError):
        raise AnsibleFilterError("check_failures: limit must be an integer, got %r" % (limit,))
    lines = failure_lines(checks, fail_on, limit=max(limit, 1))
    return "\n".join([lines[0][:-1] + " " + NOTE + ":"] + ["  " + line for line in lines[1:]])


class FilterModule(object):
    def filters(self):
        return {"check_failures": check_failures}
