#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubeadm_upgrade
short_description: One step of a kubeadm upgrade, with kubeadm's version-skew rules checked first
version_added: 0.1.0
description:
  - "The steps role rolling_upgrade runs for component C(kubernetes):"
  - C(preflight) reads the API server's version (C(kubectl version -o json) with O(kubeconfig)) and
    refuses, naming C(rolling_upgrade_target.kubernetes), a target that skips a minor or goes down (first
    control-plane node), or that would make the node's kubelet newer than the API server (every other node).
  - C(plan) runs C(kubeadm upgrade plan <version>) and refuses when it prints a blocking message (FATAL,
    C([ERROR ...]), C(error execution phase), an installed kubeadm older than the target) or does
    not offer the version.
  - C(apply) plans, then runs C(kubeadm upgrade apply --yes <version>) on the first control-plane node;
    nothing when the cluster already runs the version (a resumed run).
  - C(node) runs C(kubeadm upgrade node) (other control-plane nodes, workers); repeating it is harmless.
author:
  - gpufleet contributors (@gpufleet)
options:
  action:
    description: The step.
    type: str
    required: true
    choices: [preflight, plan, apply, node]
  version:
    description: The target Kubernetes version, X.Y.Z (C(v) optional).
    type: str
    required: true
  first_control_plane:
    description: This node is the first control-plane node (the one that runs C(kubeadm upgrade apply)).
    type: bool
    default: false
  kubeadm:
    description: The kubeadm command.
    type: str
    default: kubeadm
  kubectl:
    description: The kubectl command (C(preflight)).
    type: str
    default: kubectl
  kubeconfig:
    description: Kubeconfig of C(preflight) (C(/etc/kubernetes/kubelet.conf) on workers; any credential may read C(/version)).
    type: path
    default: /etc/kubernetes/admin.conf
  etcd_upgrade:
    description: Let C(kubeadm upgrade apply) upgrade the stacked etcd (its C(--etcd-upgrade)).
    type: bool
    default: true
  timeout:
    description: Seconds C(apply) and C(node) may take.
    type: int
    default: 1800
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Upgrade the control plane (first control-plane node)
  gpufleet.cluster.kubeadm_upgrade:
    action: apply
    version: 1.29.2
    first_control_plane: true
"""

RETURN = r"""
server_version:
  description: The API server's version (C(preflight)).
  returned: action preflight
  type: str
cluster_version:
  description: The cluster version kubeadm reports (C(plan), C(apply)).
  returned: actions plan and apply
  type: str
target_version:
  description: The target, C(vX.Y.Z).
  returned: actions preflight, plan and apply
  type: str
cluster_at_target:
  description: The API server (preflight) or the cluster (plan, apply) already runs the target or newer.
  returned: actions preflight, plan and apply
  type: bool
plan:
  description:
    - The parsed plan - C(cluster_version), C(kubeadm_version), C(up_to_date), C(apply_versions),
      C(components), C(blocking), C(update_kubeadm_to).
  returned: actions plan and apply
  type: dict
output:
  description: The last lines of kubeadm's output.
  returned: when kubeadm upgrade apply or node ran
  type: str
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kubeadm import UPGRADE_ARGSPEC, upgrade_work

ARGUMENT_SPEC = UPGRADE_ARGSPEC


def main():
    run_module(ARGUMENT_SPEC, upgrade_work)


if __name__ == "__main__":
    main()
