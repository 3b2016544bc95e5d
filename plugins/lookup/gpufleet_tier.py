# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpufleet_tier
author: gpufleet contributors (@gpufleet)
version_added: 0.2.0
short_description: Value of a gpufleet_* tier variable, or its default
description:
  - Returns the value of each named C(gpufleet_*) variable as the inventory (or any other
    variable source) sets it; when it is unset or null, the tier default. The tier and its
    defaults are listed once, in C(plugins/plugin_utils/gpufleet_tier.py), and documented in
    C(docs/contracts.md) ("gpufleet_* tier").
  - Role defaults use it, for example C(node_gate_kubeconfig) is
    C({{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_kubeconfig') }}), so a role has the
    tier's defaults from a checkout, from the installed collection and when it is used on its own.
  - The default of C(gpufleet_kube_api_host) is the first host of group C(kube_control_plane),
    else C(localhost); the default of C(gpufleet_kubelet) is whether the host is in group
    C(kube_node) or C(kube_control_plane).
options:
  _terms:
    description: Names of tier variables.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Kubeconfig used for API calls
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_kubeconfig') }}"
"""

RETURN = r"""
_raw:
  description: One value per term (null for an unset expectation such as gpufleet_gpu_count).
  type: list
  elements: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import gpufleet_tier


def tier_value(templar, variables, name):
    """The templated value of tier variable ``name`` in ``variables``, else its default."""
    try:
        return gpufleet_tier.tier_value(templar.template, variables, name)
    except KeyError as exc:
        if name in gpufleet_tier.TIER:  # not the unknown name: let it through as it is
            raise
        raise AnsibleLookupError("gpufleet_tier: %s" % exc.args[0])


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [tier_value(self._templar, variables, term) for term in terms]
