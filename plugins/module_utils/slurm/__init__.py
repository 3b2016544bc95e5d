# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm: reading what scontrol says about a node (both forms, strictly), below both the agent's Slurm
publisher and the remediation. It imports only the core wing.
"""
