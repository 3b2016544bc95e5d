# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_parted_config, mig_parted_assert, mig_layout_uncovered: the mig-parted configuration file role
gpu_mig writes, the reading of ``nvidia-mig-parted assert`` and the GPUs of a node a layout leaves
out (documentation: mig_parted_config.yml, mig_parted_assert.yml, mig_layout_uncovered.yml).
The logic is module_utils/gpu/mig.py's, the one place of the MIG format."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import assert_state, parted_config, uncovered_gpus


def mig_parted_config(layout, configs=None, what="gpufleet_mig_layout", configs_what="gpufleet_mig_configs"):
    """``layout``: gpufleet_mig_layout (a config name or entries); ``configs``: gpufleet_mig_configs."""
    try:
        name, document = parted_config(layout, configs, what, configs_what)
    except ValueError as exc:
        raise AnsibleFilterError("mig_parted_config: %s" % exc)
    return {"name": name, "document": document}


def mig_parted_assert(result):
    """``result``: the registered result of ``nvidia-mig-parted -d assert -f <file> -c <name>``."""
    if not isinstance(result, dict):
        raise AnsibleFilterError("mig_parted_assert: expected the registered result of nvidia-mig-parted assert, "
                                 "got %s" % type(result).__name__)
    try:
        state = assert_state(result.get("rc"), result.get("stdout") or "",
                             result.get("stderr") or result.get("msg") or "")
    except ValueError as exc:
        raise AnsibleFilterError("mig_parted_assert: the live MIG layout could not be read: %s" % exc)
    return {"state": state, "applied": state == "applied"}


def mig_layout_uncovered(mig, gpu_count):
    """``mig``: the result of mig_parted_config; ``gpu_count``: the node's GPUs. The indexes no entry names."""
    if not isinstance(mig, dict) or not isinstance(mig.get("document"), dict):
        raise AnsibleFilterError("mig_layout_uncovered: expected the result of mig_parted_config, got %r" % (mig,))
    try:
        entries = mig["document"]["mig-configs"][mig["name"]]
        return uncovered_gpus(entries, gpu_count)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("mig_layout_uncovered: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"mig_parted_config": mig_parted_config, "mig_parted_assert": mig_parted_assert,
                "mig_layout_uncovered": mig_layout_uncovered}
