# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes and its node-side parts, without the health decision: the Node client and its guarded
write (kube_node), the Node list read in pages (node_list), kubeadm's answers, policy and plans
(kubeadm, kubeadm_output, kubeadm_policy), containerd's drop-in settings (containerd_config) and the
reader of rolling_upgrade's records (upgrade_record). It imports only the core wing.
"""
