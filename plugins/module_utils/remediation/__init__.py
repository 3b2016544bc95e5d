# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation: the policy (which action a failing check class gets, whether a GPU reset may run)
and the circuit breaker coordinated through the API server. It imports the core, gpu, kube, slurm,
tuning, rdma and health wings, never the agent's.
"""
