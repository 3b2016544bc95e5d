# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The families of checks node_validate runs, in report order (gpu, rdma, then tuning).

Each is a ``validation.Family`` defined next to its rules (gpu_checks.py, rdma_checks.py,
tuning_checks.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import FAMILY as GPU
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import FAMILY as RDMA
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.tuning_checks import FAMILY as TUNING

FAMILIES = (GPU, RDMA, TUNING)
