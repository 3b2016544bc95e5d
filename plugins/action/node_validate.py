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

With pipelining (this collection's ``ansible.cfg``, and the sweep's setting), ansible-core hands the
module's AnsiballZ script to the node's Python on standard input, and CPython (3.11, measured) reads a
script from standard input at about 0.42 ms of CPU per kB, against about 0.01 ms per kB for
``exec(compile(stdin.read()))``: for node_validate's ≈ 300 kB that is ≈ 100 ms of the node's CPU per
run, more than the checks take. So :func:`stdin_command` runs the same interpreter with ``-c`` and a
one-line loader that reads the same bytes from standard input and executes them as ``__main__``
(the script is unchanged; it sees the same ``__name__``, ``sys.path`` and no ``__file__``, as with
standard input). Only the exact command ansible-core built for a pipelined run of this module's
payload is rewritten; any other command (no pipelining, async, another shell, Mitogen, which runs
modules its own way) is left as it is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import shlex

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

# Reads the whole pipelined script from standard input and runs it as __main__ with the globals Python gives a
# script on stdin (__file__ '<stdin>', __cached__ None); compile() honours its encoding declaration and __future__ imports.
STDIN_LOADER = '__file__="<stdin>";__cached__=None;exec(compile(__import__("sys").stdin.buffer.read(),__file__,"exec"))'


def stdin_command(cmd, shebang, quote=shlex.quote):
    """``cmd`` (the command ansible-core built to run a pipelined module with interpreter ``shebang``)
    with the interpreter given ``-c`` :data:`STDIN_LOADER`, or None when ``cmd`` is not exactly that
    command (it must end with the quoted interpreter, with only an environment string before it)."""
    interpreter = (shebang or "").removeprefix("#!").strip()
    if not interpreter:
        return None
    quoted = quote(interpreter)
    if not (cmd == quoted or cmd.endswith(" " + quoted)):
        return None
    return "%s -c %s" % (cmd, quote(STDIN_LOADER))


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
        gpu_nodes = (template(task_vars["groups"]) if "groups" in task_vars else {}).get("gpu_nodes") or []
        agent = str(tier_value(template, task_vars, "gpufleet_health_agent")).lower() == "true"
        args["agent_health_file"] = (AGENT_HEALTH_FILE if agent and task_vars.get("inventory_hostname") in gpu_nodes
                                     else None)
    return args


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
    _gpufleet_pipelined = None  # (module bytes, shebang) of the run being executed, set by _configure_module

    def _configure_module(self, module_name, module_args, task_vars):
        module_bits, module_path = super(ActionModule, self)._configure_module(module_name, module_args, task_vars)
        if module_name == "gpufleet.cluster.node_validate" and module_bits.module_style == "new":
            self._gpufleet_pipelined = (module_bits.b_module_data, module_bits.shebang)
        return module_bits, module_path

    def _low_level_execute_command(self, cmd, sudoable=True, in_data=None, **kwargs):
        pipelined = self._gpufleet_pipelined
        if pipelined is not None and in_data is not None and in_data is pipelined[0]:  # the module's own run
            self._gpufleet_pipelined = None
            cmd = stdin_command(cmd, pipelined[1]) or cmd
        return super(ActionModule, self)._low_level_execute_command(cmd, sudoable=sudoable, in_data=in_data, **kwargs)

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
