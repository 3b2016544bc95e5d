# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's health as one decision and one write: the families of checks node_validate and the agent
run (families), the gate's decision and the Node changes that carry it out (gate) and the one Node
health write both the module node_write and the agent call (kube_node_write). It imports the core,
gpu, kube, slurm, tuning and rdma wings.
"""
