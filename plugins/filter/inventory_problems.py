# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the inventory check every entry point runs first (playbooks/tasks/check-inventory.yml):
``inventory_problems``, ``selected_phases`` and ``target_problem`` (a run that would touch no host);
``control_plane_ha_problems``, the same check of the HA API endpoint for role kubernetes_control_plane
used on its own. The logic lives in plugins/plugin_utils/inventory_check.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleError, AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility, inventory_check, run_selection


def run_time_names(hostvars):
    """{host: names set during this run} from the variable manager behind ``hostvars``: facts and
    registered results (set_fact, register) and include_vars. Ansible has no public API that tells
    an inventory variable from a variable set by an earlier play of the same run, and a playbook that
    runs node.yml's roles before validate.yml (site.yml, the molecule scenarios) has both in hostvars:
    without this, ``nvidia_driver_plan`` (a registered result) would be reported as an unknown role
    variable. Private attributes, read defensively: when they are missing every name is checked."""
    manager = getattr(hostvars, "_variable_manager", None)
    names = {}
    for cache in ("_nonpersistent_fact_cache", "_vars_cache"):
        try:
            for host, values in dict(getattr(manager, cache, None) or {}).items():
                names.setdefault(host, set()).update(k for k in values if isinstance(k, str))
        except (AttributeError, TypeError):
            continue
    return names


def _origin_of(exc):
    """(path, line) of the file an Ansible error comes from (its ``obj``: ansible-core 2.19 tags a YAML
    error with the Origin of the file), following the causes; None when no error names a file."""
    seen = 0
    while exc is not None and seen < 20:
        origin = getattr(exc, "obj", None)
        path = getattr(origin, "path", None)
        if isinstance(path, str) and path:
            return path, getattr(origin, "line_num", None)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def inventory_problems(hostvars, groups, phases=None, node_roles=None, kubernetes_roles=None, hosts=None,
                       skipped_roles=None):
    """Every problem of the inventory (a list of strings; empty: the run may start). ``skipped_roles``
    (selected_phases): roles the run does not run, whose variables are not checked."""
    if hosts is not None and not isinstance(hosts, list):
        raise AnsibleFilterError("inventory_problems: hosts must be a list of inventory host names, got %r" % (hosts,))
    try:
        return _inventory_problems(hostvars, groups, phases, node_roles, kubernetes_roles, hosts, skipped_roles)
    except AnsibleFilterError:
        raise
    except AnsibleError as exc:
        # group_vars / host_vars are read when a host's variables are first used (ansible-core 2.19
        # then says "YAML parsing failed" without the file): name the file and line
        where = _origin_of(exc)
        if where is None:
            raise
        message = (getattr(exc, "message", None) or str(exc)).rstrip(".")
        raise AnsibleFilterError("the inventory file %s%s cannot be read: %s. No host was contacted or changed."
                                 % (where[0], " (line %s)" % where[1] if where[1] else "", message))


def _inventory_problems(hostvars, groups, phases, node_roles, kubernetes_roles, hosts, skipped_roles):
    try:
        return inventory_check.inventory_problems(hostvars, groups, phases=phases, node_roles=node_roles,
                                                  kubernetes_roles=kubernetes_roles, hosts=hosts,
                                                  run_time_names=run_time_names(hostvars),
                                                  skipped_roles=None if skipped_roles is None else list(skipped_roles))
    except compatibility.MatrixError as exc:
        raise AnsibleFilterError("inventory_problems: %s" % exc)
    except (OSError, ValueError) as exc:  # a role's argument spec cannot be read
        raise AnsibleFilterError("inventory_problems: %s" % exc)


def selected_phases(phases, run_tags=None, skip_tags=None, node_roles=None, kubernetes_roles=None):
    """The phases and roles --tags / --skip-tags leave to run: {phases, node_roles, kubernetes_roles,
    skipped_roles}.
    ``phases`` None: every phase of site.yml (``inventory_check.PHASES``, the one phase list)."""
    if phases is None:
        phases = list(inventory_check.PHASES)
    for name, value in (("run_tags", run_tags), ("skip_tags", skip_tags)):
        # ansible_run_tags is a tuple on ansible-core 2.19, a list before
        if value is not None and not isinstance(value, (list, tuple, set, frozenset)):
            raise AnsibleFilterError("selected_phases: %s must be a list (ansible_run_tags / ansible_skip_tags), "
                                     "got %r" % (name, value))
    return run_selection.tag_selection(phases, node_roles=node_roles, kubernetes_roles=kubernetes_roles,
                                       run_tags=None if run_tags is None else list(run_tags),
                                       skip_tags=None if skip_tags is None else list(skip_tags))


def target_problem(matched, targets, pattern, variable=None, limit=None, groups=None):
    """``matched``: the inventory hosts of the entry point's host ``pattern`` (set by the extra
    variable ``variable``); ``targets``: those ``--limit`` (``limit``) leaves -> the problem (a string)
    when the run would touch no host, else an empty string."""
    for name, value in (("matched", matched), ("targets", targets)):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("target_problem: %s must be a list of inventory host names, got %r" % (name, value))
    if groups is not None and not isinstance(groups, dict):
        raise AnsibleFilterError("target_problem: groups must be the groups magic variable, got %r" % (groups,))
    return inventory_check.target_problem(str(pattern), list(matched), list(targets), variable=variable,
                                          limit=limit, groups=groups) or ""


def target_hosts(matched, play_hosts):
    """``matched`` (the hosts of the entry point's pattern) that are in ``play_hosts`` (the check play's
    hosts, which --limit narrows), sorted as Jinja's ``intersect | sort`` sorts them (case-insensitive);
    the one pass over each list in Python that check-inventory.yml's host selection makes (each Jinja
    filter over a list of 10,000 names walks it through ansible-core's lazy templating again)."""
    for name, value in (("matched", matched), ("play_hosts", play_hosts)):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("target_hosts: %s must be a list of inventory host names, got %r" % (name, value))
    return sorted(set(matched) & set(play_hosts), key=lambda name: (str(name).lower(), str(name)))


def control_plane_ha_problems(settings):
    """``settings``: {gpufleet_control_plane_ha, gpufleet_control_plane_vip, gpufleet_control_plane_vip_port,
    kubernetes_control_plane_bind_port, kubernetes_control_plane_endpoint} as a role resolved them ->
    the problems of that HA endpoint (a list of strings), as the inventory check reports them."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("control_plane_ha_problems: expected a dict of settings, got %r" % (settings,))
    return inventory_check.control_plane_ha_problems(settings)


class FilterModule(object):
    def filters(self):
        return {
            "inventory_problems": inventory_problems,
            "selected_phases": selected_phases,
            "control_plane_ha_problems": control_plane_ha_problems,
            "target_problem": target_problem,
            "target_hosts": target_hosts,
        }
