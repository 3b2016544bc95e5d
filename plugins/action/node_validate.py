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

# from_validate_vars: the options playbooks/validate.yml's sweep takes from its gpufleet_validate_* variables
# (option -> variable, value when the variable is unset), and where the node health agent's health.json is.
VALIDATE_VARS = (("root", "gpufleet_validate_root", None), ("gpu", "gpufleet_validate_gpu", {}),
                 ("rdma", "gpufleet_validate_rdma", {}), ("tuning", "gpufleet_validate_tuning", {}))
VALIDATE_ENVIRONMENT = "gpufleet_validate_environment"
AGENT_HEALTH_FILE = "/var/lib/gpufleet/health.json"


def validate_vars_args(args, template, task_vars):
    """The module arguments for ``args`` (``from_validate_vars`` removed): with ``from_validate_vars`` true,
    ``root``, ``gpu``, ``rdma`` and ``tuning`` not given in ``args`` are the sweep's ``gpufleet_validate_*``
    variables (unset: root null, a family ``{}``), and an unset ``agent_health_file`` is the node health
    agent's health.json on a gpu_nodes host whose tier ``gpufleet_health_agent`` is true, else null. What
    validate.yml's task templated per host before (docs/performance.md), read here once in Python."""
    args = dict(args)
    from_vars = args.pop("from_validate_vars", None)
    if from_vars is None:
        return args
    try:
        from_vars = boolean(from_vars, strict=True)
    except TypeError:
        raise AnsibleActionFail("node_validate: option from_validate_vars must be a boolean, got %r" % (from_vars,))
    if not from_vars:
        return args
    for option, name, unset in VALIDATE_VARS:
        if option not in args:
            args[option] = template(task_vars[name]) if name in task_vars else unset
    if "agent_health_file" not in args:
        agent = str(tier_value(template, task_vars, "gpufleet_health_agent")).lower() == "true"
        args["agent_health_file"] = AGENT_HEALTH_FILE if agent and in_group(task_vars, "gpu_nodes") else None
    return args


def in_group(task_vars, group):
    """Whether the task's host is in inventory ``group`` (``groups[group]``). The membership list is read as
    the inventory built it, not templated: an inventory's group lists hold host names, never templates, and
    templating ``groups`` cost every host's worker time in proportion to the whole fleet (9.5 ms a host at
    1,000 hosts with two groups of them; more with more groups: docs/performance.md)."""
    members = (task_vars.get("groups") or {}).get(group) or ()
    return task_vars.get("inventory_hostname") in members


def validate_vars_environment(args, task_vars):
    """The task environment entry ``from_validate_vars`` adds (the variable ``gpufleet_validate_environment``,
    templated and checked by ansible-core as a task's ``environment``), or None."""
    if not boolean(args.get("from_validate_vars") or False, strict=False):
        return None
    return task_vars.get(VALIDATE_ENVIRONMENT) or None


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
        task_vars = task_vars or {}
        template = self._templar.template
        module_args = tier_args(validate_vars_args(self._task.args, template, task_vars), template, task_vars)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        environment = validate_vars_environment(self._task.args, task_vars)
        if environment is not None:  # after the play's and the block's, as a task's own environment
            saved = self._task.environment
            self._task.environment = (saved if isinstance(saved, list) else [saved] if saved else []) + [environment]
        try:
            result = merge_hash(result, self._execute_module(module_name="gpufleet.cluster.node_validate",
                                                             module_args=module_args, task_vars=task_vars,
                                                             wrap_async=wrap_async))
        finally:
            if environment is not None:
                self._task.environment = saved
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # pylint: disable=protected-access
        return result
