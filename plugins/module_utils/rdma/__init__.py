# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA fabric: mlx5 driver, OFED and RDMA device facts (mlx5, ofed), the RDMA family of checks
(rdma_checks), the perftest runner and parser (perftest) and the GPU-RDMA PCIe topology (topology,
which reads the GPUs' PCI functions). It imports the core and gpu wings.
"""
