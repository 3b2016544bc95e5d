# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a whole inventory before any host changes (first play of playbooks/site.yml).

``inventory_problems(hostvars, groups, ...)`` returns every problem at once, one string each:
groups the selected phases need are empty, a pinned download has no checksum, a ``gpufleet_*``
expectation has the wrong type or range, a ``gpufleet_*`` key is unknown (typo: the closest known
name is suggested), a host's chosen versions form a combination the compatibility matrix refuses.
Only variables are read: nothing is gathered from the hosts (their facts are checked by role
preflight on each node).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

PHASES = ("node", "kubernetes", "validate", "report")
NODE_ROLES = ("preflight", "node_pinning", "nvidia_driver", "rdma_stack", "gpudirect", "container_runtime",
              "node_tuning")
KUBERNETES_ROLES = ("kubernetes_prereqs", "kubernetes_control_plane", "kubernetes_worker", "kubernetes_cni",
                    "kubernetes_addons", "node_gate")

# gpufleet_* variables of the playbooks and inventories that are not tier values (the tier is
# TIER in gpufleet_tier.py). tests/unit/test_inventory_check.py keeps this list complete.
SITE_VARIABLES = {
    "gpufleet_phases": "phases of playbooks/site.yml",
    "gpufleet_lab": "the inventory is the simulated lab",
    "gpufleet_node_roles": "roles of playbooks/node.yml",
    "gpufleet_node_hosts": "hosts of playbooks/node.yml",
    "gpufleet_kubernetes_roles": "roles of playbooks/kubernetes.yml",
    "gpufleet_worker_max_fail_percentage": "workers that may fail the reachability gate (percent)",
    "gpufleet_mirror_url": "air-gapped mirror of downloads",
    "gpufleet_registry_mirror": "air-gapped mirror of images",
    "gpufleet_validate_hosts": "hosts of playbooks/validate.yml",
    "gpufleet_validate_root": "filesystem root of playbooks/validate.yml",
    "gpufleet_validate_fail_on": "fail_on of playbooks/validate.yml",
    "gpufleet_validate_gpu": "more gpu_health options",
    "gpufleet_validate_rdma": "more rdma_validate options",
    "gpufleet_validate_tuning": "more node_validate tuning options, or false",
    "gpufleet_validate_environment": "environment of the validation module",
    "gpufleet_node_validation": "result of playbooks/validate.yml (registered)",
    "gpufleet_sim_root": "lab: simulated sysfs root",
    "gpufleet_sim_environment": "lab: fake NVML environment",
    "gpufleet_status_hosts": "hosts of playbooks/fleet_status.yml",
    "gpufleet_status_file": "the node health agent's result read by playbooks/fleet_status.yml",
    "gpufleet_status_max_age": "seconds after which playbooks/fleet_status.yml calls a result stale",
    "gpufleet_status_fail_on": "fail_on of playbooks/fleet_status.yml",
    "gpufleet_status_source": "files or kubernetes: where playbooks/fleet_status.yml reads the agents' results",
    "gpufleet_status_kube_server": "API server URL of playbooks/fleet_status.yml (source kubernetes)",
    "gpufleet_status_kube_token_file": "bearer token file of playbooks/fleet_status.yml (source kubernetes)",
    "gpufleet_status_kube_ca_file": "CA file of playbooks/fleet_status.yml (source kubernetes)",
    "gpufleet_status_kube_cert_file": "client certificate of playbooks/fleet_status.yml (source kubernetes)",
    "gpufleet_status_kube_key_file": "client key of playbooks/fleet_status.yml (source kubernetes)",
}

# Variables a release renamed: still setting the old name is a problem (the roles refuse it too).
RENAMED = {
    "kubernetes_version": "gpufleet_kubernetes_version",
}

SHA256_PREFIXED = re.compile(r"^sha256:[0-9a-fA-F]{64}$")
SHA256_BARE = re.compile(r"^[0-9a-fA-F]{64}$")
TAINT_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def known_gpufleet_variables():
    return set(TIER) | set(SITE_VARIABLES)


def _get(variables, name, default=None):
    try:
        if name in variables:
            value = variables[name]
            return default if value is None else value
    except Exception:  # an undefined template inside the variable
        return default
    return default


def _setting(variables, name, role):
    """What the role will use on the host (its value, else the role's default); None when the
    default cannot be evaluated."""
    try:
        return compatibility.role_value(variables, role, name)
    except compatibility.MatrixError:
        return None


def _is_int(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().isdigit()


def _is_number(value):
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def tier_problems(variables):
    """Type and range problems of the host's gpufleet_* expectations (unset ones are fine)."""
    out = []

    def val(name):
        return _get(variables, name)

    for name in ("gpufleet_gpu_count", "gpufleet_expected_hcas"):
        value = val(name)
        if value is not None and not (_is_int(value) and int(value) >= 0):
            out.append("%s must be a whole number >= 0, got %r" % (name, value))
    branch = val("gpufleet_driver_branch")
    if branch is not None and not re.match(r"^\d{3}(\.\d+)*$", str(branch)):
        out.append("gpufleet_driver_branch must be a driver branch such as \"580\" (or an exact version "
                   "\"580.95.05\"), got %r" % (branch,))
    layer = val("gpufleet_link_layer")
    if layer is not None and layer not in ("InfiniBand", "Ethernet", "any"):
        out.append("gpufleet_link_layer must be InfiniBand, Ethernet or any, got %r" % (layer,))
    rate = val("gpufleet_min_rate_gbps")
    if rate is not None and not (_is_number(rate) and float(rate) > 0):
        out.append("gpufleet_min_rate_gbps must be a number > 0 (Gb/s), got %r" % (rate,))
    peermem = val("gpufleet_peermem")
    if peermem is not None and not isinstance(peermem, bool):
        out.append("gpufleet_peermem must be true or false, got %r" % (peermem,))
    for name in ("gpufleet_hugepages_2m", "gpufleet_hugepages_1g"):
        value = val(name)
        if value is not None and not (_is_int(value) and int(value) >= 0):
            out.append("%s must be a whole number >= 0, got %r" % (name, value))
    profile = val("gpufleet_tuned_profile")
    if profile is not None and not isinstance(profile, str):
        out.append("gpufleet_tuned_profile must be a tuned profile name, got %r" % (profile,))
    policy = val("gpufleet_kubelet_policy")
    if policy is not None and not isinstance(policy, dict):
        out.append("gpufleet_kubelet_policy must be a dict of kubelet_tuning_config options, got %r" % (policy,))
    irq = val("gpufleet_hca_irq_affinity")
    if irq is not None and not isinstance(irq, bool):
        out.append("gpufleet_hca_irq_affinity must be true or false, got %r" % (irq,))
    taint = val("gpufleet_gate_taint_key")
    if taint is not None and not (isinstance(taint, str) and TAINT_KEY.match(taint) and len(taint) <= 316):
        out.append("gpufleet_gate_taint_key must be a Kubernetes taint key ([prefix/]name), got %r" % (taint,))
    for name in ("gpufleet_sysfs_root", "gpufleet_kubeconfig", "gpufleet_kube_python"):
        value = val(name)
        if value is not None and not (isinstance(value, str) and value.startswith("/")):
            out.append("%s must be an absolute path, got %r" % (name, value))
    # coherence: validation would demand nvidia-peermem where the node runs GPUDirect over dma-buf
    mode = _setting(variables, "gpudirect_mode", "gpudirect")
    if peermem is True and mode == "dmabuf":
        out.append("gpufleet_peermem is true (validation requires nvidia-peermem) but gpudirect_mode is "
                   "dmabuf (nvidia-peermem is not loaded); set gpufleet_peermem: false for dma-buf nodes")
    return out


def unknown_key_problems(variables):
    known = known_gpufleet_variables()
    out = []
    try:
        keys = sorted(k for k in variables.keys() if isinstance(k, str) and k.startswith("gpufleet_"))
    except Exception:
        keys = []
    for key in keys:
        if key in known:
            continue
        # compare what follows the common prefix, or every name would look close
        close = difflib.get_close_matches(key[len("gpufleet_"):], sorted(k[len("gpufleet_"):] for k in known),
                                          n=1, cutoff=0.6)
        out.append("unknown variable %s%s" % (key, " (did you mean gpufleet_%s?)" % close[0] if close else
                                              " (not a gpufleet_* variable: docs/contracts.md lists them)"))
    return out


def renamed_problems(variables):
    out = []
    for old, new in sorted(RENAMED.items()):
        value = _get(variables, old)
        if value is not None:
            out.append("%s was renamed to %s: set %s: %r instead" % (old, new, new, value))
    return out


def _checksum_problem(variables, name, role, pattern, need):
    try:
        value = compatibility.role_value(variables, role, name)
    except compatibility.MatrixError as exc:
        return "%s is required (%s): %s" % (name, need, exc)
    if value is None or not pattern.match(str(value)):
        return "%s is required (%s) and must be %s, got %r" % (
            name, need, "sha256:<64 hex digits>" if pattern is SHA256_PREFIXED else "64 hex digits",
            "" if value is None else value)
    return None


def inventory_problems(hostvars, groups, phases=None, node_roles=None, kubernetes_roles=None, matrix=None):
    """Every problem of the inventory, as a list of strings (empty: the run may start)."""
    problems = []
    groups = groups or {}
    if phases is None:
        phases = list(PHASES)
    if not isinstance(phases, list) or any(p not in PHASES for p in phases):
        problems.append("gpufleet_phases must be a list of %s, got %r" % (", ".join(PHASES), phases))
        phases = [p for p in phases if p in PHASES] if isinstance(phases, list) else []
    node_roles = list(NODE_ROLES) if node_roles is None else node_roles
    kubernetes_roles = list(KUBERNETES_ROLES) if kubernetes_roles is None else kubernetes_roles
    for name, value, known in (("gpufleet_node_roles", node_roles, NODE_ROLES),
                               ("gpufleet_kubernetes_roles", kubernetes_roles, KUBERNETES_ROLES)):
        if not isinstance(value, list) or any(r not in known for r in value):
            problems.append("%s must be a list of %s, got %r" % (name, ", ".join(known), value))

    def members(group):
        return list(groups.get(group) or [])

    # groups
    control_plane, kube_node = members("kube_control_plane"), members("kube_node")
    if "kubernetes" in phases and "kubernetes_control_plane" in kubernetes_roles and not control_plane:
        problems.append("group kube_control_plane is empty: the kubernetes phase needs a control-plane host "
                        "(or leave kubernetes_control_plane out of gpufleet_kubernetes_roles)")
    if ("node" in phases or "kubernetes" in phases) and not kube_node:
        problems.append("group kube_node is empty: the node and kubernetes phases need the nodes in it")
    for group in ("gpu_nodes", "rdma_nodes"):
        outside = [h for h in members(group) if h not in kube_node]
        if outside and ("node" in phases or "kubernetes" in phases):
            problems.append("group %s has hosts outside kube_node (%s): the node stack runs on kube_node only; "
                            "add them to kube_node (e.g. make %s a child of kube_node)"
                            % (group, ", ".join(outside[:5]) + (" ..." if len(outside) > 5 else ""), group))

    # checksums of the downloads the selected phases make
    first_cp = control_plane[:1]
    for host in first_cp:
        variables = hostvars[host]
        if "kubernetes" in phases and "kubernetes_cni" in kubernetes_roles \
                and _setting(variables, "kubernetes_cni_plugin", "kubernetes_cni") == "calico":
            problem = _checksum_problem(variables, "kubernetes_cni_calico_manifest_checksum", "kubernetes_cni",
                                        SHA256_PREFIXED, "the Calico manifest is downloaded")
            if problem:
                problems.append(problem)
        if "kubernetes" in phases and "kubernetes_addons" in kubernetes_roles \
                and _setting(variables, "kubernetes_addons_mpi_operator", "kubernetes_addons") in (True, "true"):
            problem = _checksum_problem(variables, "kubernetes_addons_mpi_operator_manifest_checksum",
                                        "kubernetes_addons", SHA256_PREFIXED, "the MPI operator manifest is downloaded")
            if problem:
                problems.append(problem)
    if "node" in phases and "rdma_stack" in node_roles:
        missing = []
        for host in members("rdma_nodes"):
            if host not in kube_node:
                continue
            variables = hostvars[host]
            if _setting(variables, "rdma_stack_source", "rdma_stack") == "mlnx_ofed" and _checksum_problem(
                    variables, "rdma_stack_mlnx_ofed_sha256", "rdma_stack", SHA256_BARE, ""):
                missing.append(host)
        if missing:
            problems.append("rdma_stack_mlnx_ofed_sha256 is required with rdma_stack_source=mlnx_ofed (the "
                            "tarball is downloaded) and must be 64 hex digits; missing or malformed on %s"
                            % ", ".join(missing[:5] + (["..."] if len(missing) > 5 else [])))

    # per host: tier values, unknown keys, the compatibility matrix
    hosts = sorted(set(control_plane + kube_node + members("gpu_nodes") + members("rdma_nodes")))
    per_problem = {}
    for host in hosts:
        variables = hostvars[host]
        found = tier_problems(variables) + unknown_key_problems(variables) + renamed_problems(variables)
        facts = compatibility.facts_from_vars(variables, matrix=matrix)
        found += ["compatibility %s" % p["message"] for p in compatibility.evaluate(facts, matrix=matrix)]
        for problem in found:
            per_problem.setdefault(problem, []).append(host)
    for problem, where in per_problem.items():
        problems.append("%s [%s]" % (problem, ", ".join(where[:5]) + (" and %d more" % (len(where) - 5)
                                                                      if len(where) > 5 else "")))
    return problems
