# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The group_vars / host_vars files of an inventory that do not parse, each named with its file and line.

Why: ansible-core 2.19 loads these files (vars plugin ``host_group_vars``) when a host's variables are
first needed, and when one does not parse it reports only "YAML parsing failed: ...": its
``get_vars`` re-raises the parser's error as ``AnsibleParserError(to_native(e))``, which drops the
error's Origin (the file, line and column). Every entry point's check play runs on ``localhost:all``,
and every host of a play gets ``group_vars/all``, so a broken ``group_vars/all`` file (or, under
``--limit``, any group_vars file of the first limited host) aborts the run before the inventory check
can name it. The lookup ``gpufleet.cluster.inventory_vars_parsed`` runs this over the inventory when
the check play's ``hosts`` is templated, before any host's variables are loaded.

The files are found and parsed exactly as ``host_group_vars`` does (``DataLoader.find_vars_files`` for
every group and host name below ``group_vars`` / ``host_vars`` beside each inventory source and the
playbook, then ``DataLoader.load_from_file``: JSON first, then Ansible's YAML with its tags); only
parse errors are reported (a vaulted file without its password is left to Ansible)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.errors import AnsibleError, AnsibleParserError

SUBDIRS = ("group_vars", "host_vars")


def vars_dirs(sources, playbook_dir=None):
    """The directories whose group_vars / host_vars ``host_group_vars`` reads: each inventory source's
    directory (the source itself when it is a directory; host lists such as ``a,b,`` have none), then
    the playbook's directory. Absolute, in order, once each."""
    found = []
    for source in list(sources or []) + ([playbook_dir] if playbook_dir else []):
        if not isinstance(source, str) or not source:
            continue
        if "," in source and not os.path.exists(source):  # a host list, as ansible-core skips it
            continue
        base = os.path.abspath(source if os.path.isdir(source) else os.path.dirname(source))
        if base not in found:
            found.append(base)
    return found


def entity_names(groups):
    """{subdir: names} from the ``groups`` magic variable: group_vars are read for the group names,
    host_vars for the host names and ``localhost`` (the implicit host reads ``host_vars/localhost``)."""
    group_names, host_names = set(), {"localhost"}
    for group, hosts in dict(groups or {}).items():
        group_names.add(str(group))
        host_names.update(str(host) for host in (hosts or []))
    return {"group_vars": sorted(group_names | {"all"}), "host_vars": sorted(host_names)}


def _marks(exc):
    """(line, column, context) of a parse error: its Origin (ansible-core 2.19 tags the YAML error with
    one), else the PyYAML mark it was raised from; context: where the construct the parser was in
    started ("while parsing a flow sequence" at ...), when PyYAML says so. Causes are followed."""
    line = column = context = None
    seen = 0
    while exc is not None and seen < 20:
        origin = getattr(exc, "obj", None)
        if line is None and isinstance(getattr(origin, "line_num", None), int):
            line, column = origin.line_num, getattr(origin, "col_num", None)
        problem = getattr(exc, "problem_mark", None)
        if line is None and problem is not None:
            line, column = problem.line + 1, problem.column + 1
        mark = getattr(exc, "context_mark", None)
        if context is None and mark is not None and getattr(exc, "context", None):
            what = re.sub(r"^(while \w+ )?(an? |the )?", "", str(exc.context))
            context = "the %s starts at line %d, column %d" % (what, mark.line + 1, mark.column + 1)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return line, column, context


def describe(path, exc):
    """One problem: '<path> (line L, column C): <Ansible's message> (<context>)'; file first."""
    line, column, context = _marks(exc)
    where = ""
    if line is not None:
        where = " (line %d%s)" % (line, ", column %d" % column if column else "")
    message = str(getattr(exc, "message", None) or exc).strip().rstrip(".")
    return "%s%s: %s%s." % (path, where, message, " (%s)" % context if context else "")


def unparsable_vars_files(loader, sources, groups, playbook_dir=None):
    """Every group_vars / host_vars file of the inventory that ``loader`` (an ansible DataLoader) cannot
    parse: a list of problems (``describe``), in the order Ansible would meet them; empty when all parse."""
    problems, seen = [], set()
    names = entity_names(groups)
    for base in vars_dirs(sources, playbook_dir):
        for subdir in SUBDIRS:
            where = os.path.join(base, subdir)
            if not os.path.isdir(where):
                continue
            for name in names[subdir]:
                for path in loader.find_vars_files(where, name):
                    if path in seen:
                        continue
                    seen.add(path)
                    try:
                        loader.load_from_file(path, cache="none", unsafe=True)
                    except AnsibleParserError as exc:
                        problems.append(describe(path, exc))
                    except AnsibleError:  # not a parse error (a vault password missing): Ansible says it
                        continue
    return problems
