# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OS tuning of a node: kernel cpu lists (cpulist), the interrupts of the RDMA devices and the CPUs of
their NUMA node (irq_affinity), the kubelet's CPU, topology and memory manager settings
(kubelet_config) and the tuning family of checks (tuning_checks). It imports only the core wing.
"""
