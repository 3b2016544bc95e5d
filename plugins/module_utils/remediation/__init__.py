# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation: the policy (which action a failing check class gets, whether a GPU reset may run)
the circuit breaker coordinated through the API server, and the admission of a node after its
burn-in (admission: the record's reader, the decision). It imports the core, gpu, kube, slurm,
tuning, rdma and health wings, never the agent's.
"""
