# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""check_failures: the few console lines of a failed validation (documentation: check_failures.yml);
failing_hosts: which hosts of a play have such lines (documentation: failing_hosts.yml).

The lines are built by ``module_utils/core/checks.py`` (``failure_lines``, ``group_checks``), the
result model's one place, so the console and the fleet report group identical checks alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    FAIL, FAIL_ON_CHOICES, STATUSES, failing_statuses, failure_lines, group_checks, offending)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import value_detail

NOTE = "(every check of the node, with observed and expected values: the fleet report)"
ONE_LINE_WIDTH = 300


def _one_line(checks, fail_on):
    """``3 failing check(s): a[x]: msg; b[y]: msg; +1 more (-v lists them, the fleet report has all)``."""
    bad = offending(checks, fail_on)
    kind = "failing" if fail_on == "fail" else "failing or warning"
    head = "%d %s check(s): " % (len(bad), kind)
    shown, used = [], len(head)
    groups = group_checks(bad)
    for group in groups:
        part = "%s[%s]: %s" % (group["id"], group["target"], " ".join(group["message"].split()))
        if shown and used + len(part) + 2 > ONE_LINE_WIDTH:
            break
        if not shown and len(head) + len(part) > ONE_LINE_WIDTH:
            part = part[:ONE_LINE_WIDTH - len(head) - 3] + "..."
        shown.append(part)
        used += len(part) + 2
    line = head + "; ".join(shown)
    rest = sum(len(g["checks"]) for g in groups[len(shown):])
    if rest:
        line += "; +%d more (-v lists them; every check: the fleet report)" % rest
    return line


def _with_values(lines, checks, fail_on, limit):
    """The lines of ``failure_lines`` with each single check's observed and expected values."""
    groups = group_checks(offending(checks, fail_on))[:limit]
    out = [lines[0]]
    for line, group in zip(lines[1:], groups):
        detail = value_detail(group["checks"][0], limit=120, separator=", ") if len(group["checks"]) == 1 else ""
        out.append("%s (%s)" % (line, detail) if detail else line)
    return out + lines[1 + len(groups):]


def check_failures(result, fail_on="fail", limit=10, verbosity=1):
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
    if isinstance(verbosity, bool) or not isinstance(verbosity, int) or verbosity < 0:
        raise AnsibleFilterError("check_failures: verbosity must be an integer >= 0 (ansible_verbosity), got %r"
                                 % (verbosity,))
    if verbosity == 0:
        return _one_line(checks, fail_on)
    lines = failure_lines(checks, fail_on, limit=max(limit, 1))
    if verbosity >= 2:
        lines = _with_values(lines, checks, fail_on, max(limit, 1))
    return "\n".join([lines[0][:-1] + " " + NOTE + ":"] + ["  " + line for line in lines[1:]])


def _counted(result):
    """``result``'s ``summary`` (checks per status, which the module counts from the same checks it
    returns) when it is whole: an int >= 0 for every status, adding up to the number of checks and
    agreeing with ``healthy``; else None. Reading it instead of the checks keeps failing_hosts cheap:
    in ansible-core 2.19 every check of a registered result reached through hostvars is a lazy
    template container, and walking them all cost validate.yml's pick 0.75 s at N = 200 DGX-like
    nodes (0.2 s this way), in one worker while the fleet waits."""
    summary = result.get("summary")
    if not isinstance(summary, dict):
        return None
    counts = dict((status, summary.get(status)) for status in STATUSES)
    if any(isinstance(count, bool) or not isinstance(count, int) or count < 0 for count in counts.values()):
        return None
    if sum(counts.values()) != len(result["checks"]):
        return None
    if "healthy" in result and result["healthy"] is not (counts[FAIL] == 0):
        return None
    return counts


def _failing(result, fail_on):
    """Whether ``result`` has checks at or above ``fail_on``: from its summary when that is whole,
    else from the checks themselves (check_failures)."""
    if not isinstance(result["checks"], list):
        return bool(check_failures(result, fail_on, limit=1))  # raises, naming the result model
    if fail_on == "never":
        return False
    counts = _counted(result)
    if counts is None:
        return bool(check_failures(result, fail_on, limit=1))
    return any(counts[status] > 0 for status in failing_statuses(fail_on))


def failing_hosts(hosts, hostvars, result_var="gpufleet_node_validation",
                  fail_on_var="gpufleet_validate_fail_on", fail_on="fail"):
    """The hosts of ``hosts`` whose registered ``result_var`` has checks at or above their own
    ``fail_on_var`` (default ``fail_on``): one template for the whole play instead of one task per
    host. A host without the result (it failed before, or was skipped) is not listed."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("failing_hosts: expected a list of host names (ansible_play_hosts), got %r"
                                 % (type(hosts).__name__,))
    failing = []
    for host in hosts:
        try:
            host_vars = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("failing_hosts: %r is not in hostvars" % (host,))
        result = host_vars[result_var] if result_var in host_vars else None
        if not isinstance(result, dict) or "checks" not in result:
            continue
        own = host_vars[fail_on_var] if fail_on_var in host_vars else None
        own = fail_on if own is None else own
        if own not in FAIL_ON_CHOICES:
            raise AnsibleFilterError("failing_hosts: host %s: fail_on must be one of %s, got %r (%s)"
                                     % (host, ", ".join(FAIL_ON_CHOICES), own, fail_on_var))
        if _failing(result, own):
            failing.append(host)
    return failing


class FilterModule(object):
    def filters(self):
        return {"check_failures": check_failures, "failing_hosts": failing_hosts}
