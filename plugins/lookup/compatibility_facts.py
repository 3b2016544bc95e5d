# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: compatibility_facts
author: gpufleet contributors (@gpufleet)
version_added: 0.3.0
short_description: The chosen versions in scope, as facts of the compatibility matrix
description:
  - Reads, for every fact of the compatibility matrix (C(plugins/plugin_utils/compatibility.yml))
    that a site chooses (Kubernetes, containerd, container toolkit, driver, kernel module flavour,
    GPUDirect mode), the first of its variables set in scope (inventory, play, role or
    task variables), else the tier default or the literal default of the role that owns it.
  - Returns one dict, fact name -> C({value, origin}); C(origin) names the variable (or default) the
    value came from. Feed it, with node facts added, to the filter
    C(gpufleet.cluster.compatibility_problems).
  - The filter C(gpufleet.cluster.compatibility_facts) does the same from a mapping such as
    C(hostvars[host]) (inventory and extra variables only).
options: {}
"""

EXAMPLES = r"""
- name: Refused combinations of this host's choices and its kernel
  ansible.builtin.debug:
    msg: >-
      {{ lookup('gpufleet.cluster.compatibility_facts')
         | combine({'kernel': ansible_facts['kernel']})
         | gpufleet.cluster.compatibility_problems }}
"""

RETURN = r"""
_raw:
  description: One dict, fact name -> {value, origin}; facts nobody states are left out.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility


class _Templated(object):
    """Read-only view of the variables in scope that templates a value when it is read."""

    def __init__(self, templar, variables):
        self._templar = templar
        self._variables = variables or {}

    def __contains__(self, name):
        return name in self._variables

    def __getitem__(self, name):
        return self._templar.template(self._variables[name])

    def keys(self):
        return self._variables.keys()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("compatibility_facts takes no terms (got %s)" % (terms,))
        try:
            return [compatibility.facts_from_vars(_Templated(self._templar, variables))]
        except compatibility.MatrixError as exc:
            raise AnsibleLookupError("compatibility_facts: %s" % exc)
