# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The result model and what every check and module stands on: the check-result model and the one table
of failing statuses (checks), the record readers' strict primitives (records), checked time (clock),
the rooted tolerant reader of sysfs/procfs (sysfs), plain trees (plain: the test and copy that let
ansible-core's generic walks be skipped), command runners (runner), the NVML binding
adapter the validation Context hands out (nvml), the one module shape (framework) and the validation
framework every validation module runs on (validation), the one writer of the state files and the
converged-role stamps (state_files, role_stamps), the version parser (versions), the TOML line
editor (toml_merge) and the module_utils cache of the node (module_cache). It imports nothing of the
collection outside itself; every other wing may import it.
"""
