# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the compatibility matrix (plugins/plugin_utils/compatibility.yml). The logic lives in
plugins/plugin_utils/compatibility.py; the inventory check's filters are in inventory_problems.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility


def compatibility_facts(variables):
    """The site's chosen versions of one host (its variables, e.g. hostvars[inventory_hostname])
    as matrix facts: name -> {value, origin}."""
    if not hasattr(variables, "keys"):
        raise AnsibleFilterError("compatibility_facts: input must be a host's variables (a mapping), got %s"
                                 % type(variables).__name__)
    try:
        return compatibility.facts_from_vars(variables)
    except compatibility.MatrixError as exc:
        raise AnsibleFilterError("compatibility_facts: %s" % exc)


def compatibility_problems(facts):
    """Refused combinations of ``facts`` (name -> value or {value, origin}): a list of
    {id, message, reason, sources, when, require}; empty when the combination is accepted."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError("compatibility_problems: input must be a mapping fact -> value, got %s"
                                 % type(facts).__name__)
    unknown = sorted(set(facts) - set(compatibility.load_matrix()["facts"]))
    if unknown:
        raise AnsibleFilterError("compatibility_problems: unknown fact(s) %s (known: %s)" % (
            ", ".join(unknown), ", ".join(sorted(compatibility.load_matrix()["facts"]))))
    try:
        return compatibility.evaluate(facts)
    except compatibility.MatrixError as exc:
        raise AnsibleFilterError("compatibility_problems: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "compatibility_facts": compatibility_facts,
            "compatibility_problems": compatibility_problems,
        }
