# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health agent (role node_health_agent copies exactly this wing's import closure to the
nodes; no Ansible there): configuration, hysteresis, the readers of its own records, event sources,
the publishers (metrics and node-problem-detector, Kubernetes, Slurm), one cycle, the resident loop
and the command line. It may import every other wing; no file outside this wing imports it, except
its two shared schemas: the configuration (agent_config) and health.json, its published result
(health_record, read by the filter agent_health_check).
"""
