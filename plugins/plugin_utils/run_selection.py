# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run of playbooks/site.yml (or node.yml, kubernetes.yml, lab.yml) does: its phases and
roles, and which of them ``--tags`` / ``--skip-tags`` and the role selectors (gpufleet_node_roles,
gpufleet_kubernetes_roles) leave to run (``tag_selection``). The inventory check
(inventory_check.py) checks only what runs: the groups the phases need and the variables of the
roles that run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PHASES = ("node", "kubernetes", "validate", "report")
NODE_ROLES = ("preflight", "node_pinning", "nvidia_driver", "rdma_stack", "gpudirect", "container_runtime",
              "node_tuning")
KUBERNETES_ROLES = ("kubernetes_prereqs", "kubernetes_control_plane", "kubernetes_worker", "kubernetes_cni",
                    "kubernetes_addons", "node_gate")

# Tags of the plays of the validate and report phases of playbooks/site.yml (docs/tags.md), one
# tuple per play: a phase runs when one of its plays runs (--tags selects one of the play's tags,
# --skip-tags none of them). The node and kubernetes phases are one tag per role (NODE_ROLES,
# KUBERNETES_ROLES) plus the phase's tag.
PHASE_TAGS = {
    # the sweep; the kubeadm certificate check of the control plane; the node health agent's play
    "validate": (("validate",), ("validate", "certs"), ("validate", "node_health_agent")),
    "report": (("report", "validate"),),  # the Report play is tagged [report, validate]
}

# Roles run by a task inside a role's play that the role's selector (gpufleet_kubernetes_roles) also
# governs: {selector role: {role: its task's tags}}. --tags etcd_snapshot runs the etcd snapshot task
# (role etcd_snapshot) of kubernetes.yml's control-plane play, which runs where kubernetes_control_plane
# is selected, so it selects the kubernetes phase with that role (and its kube_control_plane check), as
# site.yml's control-plane reachability play does; the role kubernetes_control_plane itself does not run
# (its task is tagged kubernetes_control_plane), so its variables are not checked.
ROLE_PARTS = {
    "kubernetes_control_plane": {"etcd_snapshot": ("etcd_snapshot",)},
}
ROLE_PART_TAGS = {role: tuple(tag for tags in parts.values() for tag in tags) for role, parts in ROLE_PARTS.items()}


def tag_selection(phases, node_roles=None, kubernetes_roles=None, run_tags=None, skip_tags=None):
    """What ``--tags`` (``ansible_run_tags``) and ``--skip-tags`` (``ansible_skip_tags``) leave of the
    run: ``{"phases": [...], "node_roles": [...], "kubernetes_roles": [...], "skipped_roles": [...]}``,
    in the given order. A phase stays when a task of it runs (Ansible's rule: one of its tags selected,
    or ``all`` / ``tagged``; none of its tags skipped). Names that are not phases or roles are kept (the
    check reports them). ``skipped_roles``: the roles of the given node and kubernetes phases that do
    not run (not selected, or left out by the tags; a role that only a part of runs, as
    kubernetes_control_plane under --tags etcd_snapshot, is skipped, the part's role is not); their
    variables are not checked. Roles of a phase not given are not skipped (another entry point,
    e.g. rolling_upgrade.yml with no phase, may run them)."""
    run = set(run_tags or ["all"])
    skip = set(skip_tags or [])
    everything = bool(run & set(("all", "tagged")))

    def runs(tags):
        if "all" in skip or skip & set(tags):
            return False
        return everything or bool(run & set(tags))

    node_roles = list(NODE_ROLES) if node_roles is None else node_roles
    kubernetes_roles = list(KUBERNETES_ROLES) if kubernetes_roles is None else kubernetes_roles
    out = {"phases": [], "node_roles": [], "kubernetes_roles": [], "skipped_roles": []}
    if isinstance(node_roles, list):
        out["node_roles"] = [r for r in node_roles if r not in NODE_ROLES or runs(("node", r))]
    else:
        out["node_roles"] = node_roles
    if isinstance(kubernetes_roles, list):
        out["kubernetes_roles"] = [r for r in kubernetes_roles
                                   if r not in KUBERNETES_ROLES or runs(("kubernetes", r))
                                   or any(runs(("kubernetes", part)) for part in ROLE_PART_TAGS.get(r, ()))]
    else:
        out["kubernetes_roles"] = kubernetes_roles
    if not isinstance(phases, list):
        out["phases"] = phases
        return out
    for phase in phases:
        if phase == "node":
            keep = isinstance(node_roles, list) and any(r in NODE_ROLES for r in out["node_roles"])
        elif phase == "kubernetes":
            keep = isinstance(kubernetes_roles, list) and any(r in KUBERNETES_ROLES for r in out["kubernetes_roles"])
        elif phase in PHASE_TAGS:
            keep = any(runs(tags) for tags in PHASE_TAGS[phase])
        else:
            keep = True  # not a phase: inventory_problems names it
        if keep:
            out["phases"].append(phase)
    out["skipped_roles"] = _skipped_roles(phases, node_roles, kubernetes_roles, out, runs)
    return out


def _skipped_roles(phases, node_roles, kubernetes_roles, out, runs):
    skipped = []
    if "node" in phases and isinstance(node_roles, list):
        skipped += [r for r in NODE_ROLES if "node" not in out["phases"] or r not in out["node_roles"]]
    if "kubernetes" in phases and isinstance(kubernetes_roles, list):
        running = out["kubernetes_roles"] if "kubernetes" in out["phases"] else []
        for role in KUBERNETES_ROLES:
            if role not in running or not runs(("kubernetes", role)):
                skipped.append(role)
            for part, tags in sorted(ROLE_PARTS.get(role, {}).items()):
                if role not in running or not any(runs(("kubernetes", tag)) for tag in tags):
                    skipped.append(part)
    return skipped
