# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpufleet.cluster.node_validate: with ``from_tier``, the module's ``root``,
``gpu``, ``rdma`` and ``tuning`` are filled on the controller from the node's ``gpufleet_*`` tier
variables, the same mapping as the lookup ``node_validate_options`` (plugin_utils/gpufleet_tier.py),
then the module runs as it would without this plugin.

Why an action plugin and not the lookup in the task: ansible-core 2.19 compiles a task's Jinja
templates again in each host's worker process and loads a lookup plugin there (parsing its
documentation) for every host; reading the tier here in Python costs a fraction of that
(docs/performance.md). Without ``from_tier`` the arguments go to the module unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import (
    tier_node_validate_options,
    tier_value,
)

FAMILIES = ("gpu", "rdma", "tuning")


def tier_args(args, template, task_vars):
    """The module arguments for ``args`` (``from_tier`` removed): with ``from_tier`` true, an unset or
    null ``root`` is the tier's ``gpufleet_sysfs_root`` and each family's options are the tier's with the
    explicit ones over them (``false`` turns the family off, as in the lookup)."""
    args = dict(args)
    from_tier = args.pop("from_tier", None)
    if from_tier is None:
        return args
    try:
        from_tier = boolean(from_tier, strict=True)
    except TypeError:
        raise AnsibleActionFail("node_validate: option from_tier must be a boolean, got %r" % (from_tier,))
    if not from_tier:
        return args
    try:
        options = tier_node_validate_options(template, task_vars, **dict((name, args.get(name)) for name in FAMILIES))
    except (TypeError, ValueError) as exc:
        raise AnsibleActionFail("node_validate (from_tier): %s" % exc)
    args.update(options)
    if args.get("root") is None:
        args["root"] = tier_value(template, task_vars, "gpufleet_sysfs_root")
    return args


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        module_args = tier_args(self._task.args, self._templar.template, task_vars or {})
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_name="gpufleet.cluster.node_validate",
                                                         module_args=module_args, task_vars=task_vars,
                                                         wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # pylint: disable=protected-access
        return result
