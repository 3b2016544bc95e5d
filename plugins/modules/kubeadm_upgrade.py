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
  - "Versions: the target (O(version)) is a release, exactly X.Y.Z (C(v) optional); anything else (C(1.37),
    C(v1.36.0-rc.1), C(1.36.3+k3s1), C(v1.37.1.2)) fails naming the variable. A component's version is read
    as reported (Semantic Versioning, C(vX.Y.Z[-pre][+build])) and is the target only when it is exactly the
    release C(vX.Y.Z): a release candidate, a development build or a distribution's build (C(+k3s1)) is not."
  - C(preflight) reads the API server's version (C(kubectl version -o json) with O(kubeconfig)) and, with
    O(node_name), that Node's kubelet version, and refuses, naming C(rolling_upgrade_target.kubernetes), a
    target that skips a minor or goes down (first control-plane node), that the API server does not run
    (every other node - a release of the target's minor, at least its patch, the rule C(verify) applies), or
    that is older than the node's kubelet (every node).
  - C(plan) reads kubeadm's own version (C(kubeadm version -o short)) and the API server's, runs
    C(kubeadm upgrade plan <version>) (with C(-o json) for a kubeadm 1.30 or newer, read strictly - exact kind
    and apiVersion, known keys typed, unknown keys ignored; the text of an older kubeadm) and refuses when it
    exits non-zero, a component config needs a manual upgrade, it does not offer the version, kubeadm is not
    a release (a pre-release or build kubeadm), or kubeadm's version policy
    (cmd/kubeadm/app/phases/upgrade/policy.go, mandatory and skippable errors alike, since gpufleet never
    passes C(--force)) forbids it.
  - C(apply) plans, then runs C(kubeadm upgrade apply --yes <version>) on the first control-plane node;
    nothing when the API server already runs the version (a resumed run). It succeeded only when kubeadm
    exited 0 AND the API server's C(/version) then reports the version (looked at for up to
    O(observe_timeout) seconds). kubeadm's closing line is returned as information (RV(banner)) and
    decides nothing (it changed in 1.32).
  - C(node) runs C(kubeadm upgrade node) (other control-plane nodes, workers); repeating it is harmless.
  - C(verify) (after the kubelet restart) looks, for up to O(observe_timeout) seconds, until the API server
    runs the version (first control-plane node) or a release of its minor, at least its patch (other nodes) and the
    kubelet of O(node_name) reports the version (C(status.nodeInfo.kubeletVersion)); fails otherwise.
author:
  - gpufleet contributors (@gpufleet)
options:
  action:
    description: The step.
    type: str
    required: true
    choices: [preflight, plan, apply, node, verify]
  version:
    description: The target Kubernetes version, X.Y.Z (C(v) optional).
    type: str
    required: true
  first_control_plane:
    description: This node is the first control-plane node (the one that runs C(kubeadm upgrade apply)).
    type: bool
    default: false
  node_name:
    description:
      - The Node whose kubelet C(verify) looks at, and C(preflight) compares with the target (never down).
        Without it C(preflight) does not read the kubelet (role rolling_upgrade always passes it).
    type: str
  kubeadm:
    description: The kubeadm command.
    type: str
    default: kubeadm
  kubectl:
    description: The kubectl command (C(preflight), C(plan), C(apply), C(verify)).
    type: str
    default: kubectl
  kubeconfig:
    description:
      - Kubeconfig of the kubectl calls (C(/etc/kubernetes/kubelet.conf) on workers; any credential may read
        C(/version), and a kubelet's may read its own Node).
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
  observe_timeout:
    description: Seconds C(apply) and C(verify) look for the version before they fail.
    type: int
    default: 180
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
  description: The API server's version as reported, verbatim (C(preflight), C(verify)).
  returned: actions preflight and verify
  type: str
cluster_version:
  description: The API server's version before the plan (C(plan), C(apply)).
  returned: actions plan and apply
  type: str
kubeadm_version:
  description: kubeadm's own version (C(kubeadm version -o short)).
  returned: actions plan and apply
  type: str
observed_version:
  description: The API server's version seen after C(kubeadm upgrade apply), verbatim (e.g. C(v1.37.1-rc.1)).
  returned: action apply, when kubeadm upgrade apply ran
  type: str
banner:
  description:
    - Information only - kubeadm's closing line, C(wording) (C(1.31-) or C(1.32+)) and C(version), or null.
  returned: action apply, when kubeadm upgrade apply ran
  type: dict
kubelet_version:
  description: The kubelet version node_name reports, verbatim (C(verify); C(preflight) with node_name).
  returned: action verify, action preflight with node_name
  type: str
target_version:
  description: The target, C(vX.Y.Z).
  returned: actions preflight, plan, apply and verify
  type: str
cluster_at_target:
  description: The API server runs exactly the release of the target (a pre-release or build of it is not).
  returned: actions preflight, plan and apply
  type: bool
plan:
  description:
    - The parsed plan - C(format) (C(json) or C(text)), C(cluster_version), C(kubeadm_version), C(up_to_date),
      C(apply_versions), C(components), C(blocking), C(update_kubeadm_to), C(kubelet_versions).
  returned: actions plan and apply
  type: dict
output:
  description: The last lines of kubeadm's output.
  returned: when kubeadm upgrade apply or node ran
  type: str
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kubeadm import UPGRADE_ARGSPEC, upgrade_work

ARGUMENT_SPEC = UPGRADE_ARGSPEC


def main():
    run_module(ARGUMENT_SPEC, upgrade_work)


if __name__ == "__main__":
    main()
