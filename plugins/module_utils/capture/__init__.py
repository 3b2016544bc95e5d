# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node capture (module node_capture): the walk of the tree below root (capture_walk), the NVML and
kernel-log recordings (capture_sources), the pseudonyms (capture_pseudonym) and the archive that
replays (capture). It imports the core, gpu, kube, slurm, tuning, rdma and health wings, never the
agent's.
"""
