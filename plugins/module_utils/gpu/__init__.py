# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPUs: facts from sysfs (gpu), the GPU family of checks (gpu_checks), MIG layouts (mig), XID
events and policy (xid), DCGM diagnostics (dcgm), the burn-in settings (burnin) and the nccl-tests parser and its checks
(nccl). It
imports only the core wing.
"""
