# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: node_validate_options
author: gpufleet contributors (@gpufleet)
version_added: 0.2.0
short_description: node_validate options gpu, rdma and tuning from a node's gpufleet_* expectations
description:
  - Maps the node expectations of the C(gpufleet_*) tier to the options of
    C(gpufleet.cluster.node_validate) (C(gpufleet_gpu_count) -> C(gpu.expected_count),
    C(gpufleet_driver_branch) -> C(gpu.expected_driver_version), C(gpufleet_expected_hcas) ->
    C(rdma.expected_devices), C(gpufleet_link_layer) -> C(rdma.link_layer),
    C(gpufleet_min_rate_gbps) -> C(rdma.min_rate_gbps), C(gpufleet_peermem) -> C(rdma.require_peermem),
    C(gpufleet_hugepages_2m) -> C(tuning.hugepages_2m), C(gpufleet_hugepages_1g) -> C(tuning.hugepages_1g),
    C(gpufleet_tuned_profile) -> C(tuning.tuned_profile), C(gpufleet_kubelet_policy) -> C(tuning.kubelet_policy)
    (its compared fields), C(gpufleet_hca_irq_affinity) -> C(tuning.irq_affinity)).
    Unset expectations are left out.
  - The same mapping as the option C(from_tier) of C(gpufleet.cluster.node_validate) (one function,
    C(plugins/plugin_utils/gpufleet_tier.py)). A node_validate task takes C(from_tier) instead (no
    lookup per host); this lookup is for the options needed elsewhere, such as the configuration of
    the node health agent (role C(node_health_agent)).
options:
  gpu:
    description:
      - Explicit gpu options, applied over the tier's.
      - C(false) turns the GPU family off (node_validate option C(enabled) false).
    type: raw
    default: {}
  rdma:
    description:
      - Explicit rdma options, applied over the tier's.
      - C(false) turns the RDMA family off (node_validate option C(enabled) false).
    type: raw
    default: {}
  tuning:
    description:
      - Explicit tuning options, applied over the tier's.
      - C(false) turns the tuning family off (node_validate option C(enabled) false).
    type: raw
    default: {}
"""

EXAMPLES = r"""
- name: Write the node's expectations into a configuration file
  ansible.builtin.copy:
    content: "{{ lookup('gpufleet.cluster.node_validate_options', gpu={'xid_source': 'none'}) | to_nice_json }}"
    dest: /etc/example/node_validate.json
    mode: "0644"

# A node_validate task takes the same values with from_tier
- name: Validate the node against the inventory's expectations
  gpufleet.cluster.node_validate:
    from_tier: true
    gpu:
      xid_source: none
"""

RETURN = r"""
_raw:
  description: One dict C({gpu, rdma, tuning}), each a dict of options.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_node_validate_options


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if terms:
            raise AnsibleLookupError("node_validate_options takes no terms, only the options gpu, rdma and tuning")
        try:
            return [tier_node_validate_options(self._templar.template, variables, gpu=self.get_option("gpu"),
                                               rdma=self.get_option("rdma"), tuning=self.get_option("tuning"))]
        except (TypeError, ValueError) as exc:
            raise AnsibleLookupError("node_validate_options: %s" % exc)
