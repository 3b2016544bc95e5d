# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""remediation_policy, remediation_plan, gpu_reset_decision, remediation_step_checks,
remediation_slurm_state, remediation_slurm_show_argv: the remediation policy of playbooks/remediate.yml
(documentation: the <name>.yml beside this file). The logic is module_utils/remediation/remediation.py's, the one place of it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import GateError
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import (
    PolicyError,
    plan,
    policy,
    reset_decision,
    slurm_state,
    step_checks,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm import is_json_argv, parse_version, show_node_argv


def remediation_policy(value):
    try:
        return policy(value)
    except PolicyError as exc:
        raise AnsibleFilterError(str(exc))


def remediation_plan(results, value=None, fail_on="fail"):
    try:
        return plan(results, value, fail_on)
    except (PolicyError, GateError) as exc:
        raise AnsibleFilterError("remediation_plan: %s" % exc)


def gpu_reset_decision(listing):
    """``listing``: the registered result of the nvidia-smi process query (stdout, rc, stderr)."""
    if not isinstance(listing, dict):
        raise AnsibleFilterError("gpu_reset_decision: expected the registered result of the nvidia-smi query, got %s"
                                 % type(listing).__name__)
    return reset_decision(listing.get("stdout") or "", listing.get("rc", 1) if "rc" in listing else 1,
                          listing.get("stderr") or listing.get("msg") or "")


def remediation_step_checks(done, action, stopped=None, burn_in=True):
    """``done``: the steps done (a list of names); see module_utils/remediation/remediation.py step_checks."""
    try:
        return step_checks(action, done, stopped, burn_in)
    except PolicyError as exc:
        raise AnsibleFilterError("remediation_step_checks: %s" % exc)


def remediation_slurm_show_argv(version, node):
    """``version``: the registered result of ``scontrol --version``; the argv of ``scontrol show node
    <node>`` in the form that version prints best (module_utils/slurm/slurm.py show_node_argv, the agent's
    decision: ``--json`` from Slurm 23.02, ``-o`` for 22.05 and older or a version answer not of the
    form "<package> <x.y.z>"). A failed command fails (as the agent's cycle does)."""
    if not isinstance(version, dict) or version.get("rc", 1) != 0:
        raise AnsibleFilterError("remediation_slurm_show_argv: scontrol --version failed: %s" % (
            (version.get("stderr") or version.get("msg") or "rc %s" % version.get("rc")) if isinstance(version, dict)
            else "not a registered command result"))
    stdout = version.get("stdout") or ""
    if not isinstance(stdout, str):
        raise AnsibleFilterError("remediation_slurm_show_argv: the answer of scontrol --version is not text but %s"
                                 % type(stdout).__name__)
    return show_node_argv("scontrol", node, parse_version(stdout))


def remediation_slurm_state(show, node):
    """``show``: the registered result of ``scontrol show node <node> --json`` or ``... -o`` (the
    form read from its ``cmd``, the argv of remediation_slurm_show_argv; ``-o`` without one); a
    failed command fails."""
    if not isinstance(show, dict) or show.get("rc", 1) != 0:
        raise AnsibleFilterError("remediation_slurm_state: scontrol show node %s failed: %s" % (
            node, (show.get("stderr") or show.get("msg") or "rc %s" % show.get("rc")) if isinstance(show, dict)
            else "not a registered command result"))
    cmd = show.get("cmd")
    json_form = isinstance(cmd, list) and bool(cmd) and is_json_argv(cmd)
    stdout = show.get("stdout") or ""
    if not isinstance(stdout, str):
        raise AnsibleFilterError("remediation_slurm_state: the answer of scontrol show node %s %s is not text but %s"
                                 % (node, "--json" if json_form else "-o", type(stdout).__name__))
    try:
        return slurm_state(stdout, node, json_form)
    except PolicyError as exc:
        raise AnsibleFilterError("remediation_slurm_state: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"remediation_policy": remediation_policy, "remediation_plan": remediation_plan,
                "gpu_reset_decision": gpu_reset_decision, "remediation_step_checks": remediation_step_checks,
                "remediation_slurm_state": remediation_slurm_state,
                "remediation_slurm_show_argv": remediation_slurm_show_argv}
