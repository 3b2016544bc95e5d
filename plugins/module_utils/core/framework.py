# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one shape of every gpufleet module (the idea of community.general's ModuleHelper, kept small).

A module file holds its documentation, its ``ARGUMENT_SPEC`` (one expression: the spec in one
place) and a thin ``main`` calling ``run_module(ARGUMENT_SPEC, work)``. ``work(module)`` lives in
``module_utils`` (or is a few lines over it) and either returns the result for ``exit_json`` or
ends the run through the one exit path of the validation modules, ``checks.exit_with_checks``.
A problem is raised as ``ModuleFailure(msg, **context)`` and becomes ``fail_json`` with that
context. Every module supports check mode.

The ``root`` option is owned here: declared once (``ROOT_OPTION``), normalised once
(``given_root``: unset or null is ``/``; an empty string is kept, and refused by
``checked_root`` naming the option), checked once (``checked_root``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.plain import NotPlain, plain_copy
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import validate_root

DEFAULT_ROOT = "/"
# The root option of every module reading a node's files (validation and fact modules).
ROOT_OPTION = {"type": "path", "default": DEFAULT_ROOT}


def given_root(params):
    """The root a run reads below: ``params["root"]``; unset or null is ``/`` (the option's
    default). Any other value is kept as given: ``""`` is an error (``checked_root``), never ``/``."""
    root = params.get("root")
    return DEFAULT_ROOT if root is None else root


def root_error(params):
    """The error naming option root when ``given_root(params)`` cannot serve as a root, else None."""
    return validate_root(given_root(params))


def checked_root(params):
    """``given_root(params)``, or ModuleFailure naming option root."""
    error = root_error(params)
    if error:
        raise ModuleFailure(error)
    return given_root(params)


class ModuleFailure(Exception):
    """A module's run cannot go on: ``msg`` (names the option or file) and ``context``, other
    return keys of the failure (what was done, what was found)."""

    def __init__(self, msg, **context):
        super(ModuleFailure, self).__init__(msg)
        self.msg = msg
        self.context = context


def run_module(spec, work, module_class=None, **module_options):
    """Build the module (``spec`` copied, check mode supported, ``module_options`` such as
    ``required_if``), run ``work(module)``; a returned dict goes to ``exit_json``, a
    ``ModuleFailure`` to ``fail_json(msg=..., **context)``. ``module_class`` defaults to
    AnsibleModule (a factory with the same signature may check the raw parameters first)."""
    if module_class is None:
        from ansible.module_utils.basic import AnsibleModule as module_class
    install_plain_exit()
    module = module_class(argument_spec=copy.deepcopy(spec), supports_check_mode=True, **module_options)
    try:
        result = work(module)
    except ModuleFailure as exc:
        module.fail_json(msg=exc.msg, **exc.context)
    if result is not None:
        module.exit_json(**result)
    return module


# The module's exit (docs/performance.md, "Sweep cost, round 7"): ansible-core's exit_json and fail_json pass the
# whole result through ``remove_values(result, module.no_log_values)`` (AnsibleModule._return_formatted), which
# copies it node by node with ABC checks at each -- 6.4 ms of CPU for a DGX node's 36 kB node_validate result --
# also when ``no_log_values`` is empty. With nothing to remove, its copy of a plain tree (core/plain.py) is the
# same values in new containers, which ``plain_remove_values`` makes itself; any no_log value, any value that is
# not a plain tree, and an int too long for ``str()`` (ansible-core converts each int to text and fails on it)
# go to ansible-core's. Installed where _return_formatted looks the name up (ansible.module_utils.basic), only
# while that is ansible-core's own function; in the process of one module run (AnsiballZ) or in an interpreter
# Mitogen keeps per node, where every module then gets the same answers.
_EMPTY_COLLECTIONS = (set, frozenset, list, tuple)  # no_log_strings as AnsibleModule and ansible-core pass them


def _int_bits():
    """Bits an int may have and still be sure to convert to text (None: any int converts)."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    return limit * 3 if limit else None  # 3 bits a digit (log2(10) is 3.32): no int near the limit is judged here


def plain_remove_values(value, no_log_strings, _remove_values=None):
    """ansible-core's ``remove_values(value, no_log_strings)``; with no ``no_log_strings`` (an empty set, list or
    tuple) a plain tree is copied here."""
    kind = type(no_log_strings)
    if not no_log_strings and any(kind is empty for empty in _EMPTY_COLLECTIONS):
        try:
            return plain_copy(value, _int_bits())
        except NotPlain:
            pass
    if _remove_values is None:
        from ansible.module_utils.common.parameters import remove_values as _remove_values
    return _remove_values(value, no_log_strings)


def install_plain_exit(basic=None, parameters=None):
    """Put ``plain_remove_values`` in place of ansible-core's ``remove_values`` in ``basic`` (default
    ``ansible.module_utils.basic``) while that is ``parameters.remove_values``; returns whether it is in place."""
    if basic is None:
        from ansible.module_utils import basic
    if parameters is None:
        from ansible.module_utils.common import parameters
    current = getattr(basic, "remove_values", None)
    if current is plain_remove_values:
        return True
    original = getattr(parameters, "remove_values", None)
    if current is None or current is not original or not callable(current):
        return False  # not ansible-core's (absent, another patch, a changed ansible-core): left as it is
    basic.remove_values = plain_remove_values
    return True
