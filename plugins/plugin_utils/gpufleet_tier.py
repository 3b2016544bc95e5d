# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``gpufleet_*`` tier: values several roles need, with their defaults, in one place.

Role defaults read a tier value through the lookup ``gpufleet.cluster.gpufleet_tier`` (the
inventory's value, else the default below), so the defaults hold both from a checkout and from
the installed collection, and a role used on its own still has them. ``docs/contracts.md``
("gpufleet_* tier") documents the same table; tests/unit/test_cross_role_refs.py keeps the two
equal.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import DEFAULT_TAINT_KEY
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import resolve_layout

# name -> (default, meaning). A default of None means "not stated": the checks that need the
# value are not run (or, in a module, report `skip`).
TIER = {
    "gpufleet_kube_api_host": (
        None, "inventory host that runs Kubernetes API calls; unset: the first host of "
        "kube_control_plane, else localhost"),
    "gpufleet_kubelet": (
        None, "the node runs the kubelet (the Kubernetes rules of the compatibility matrix apply to "
        "it); unset: the host is in kube_node or kube_control_plane"),
    "gpufleet_kubeconfig": ("/etc/kubernetes/admin.conf", "kubeconfig on gpufleet_kube_api_host"),
    "gpufleet_kube_python": (
        "/opt/gpufleet/k8s-client/bin/python",
        "interpreter on gpufleet_kube_api_host with the Python kubernetes client"),
    "gpufleet_sysfs_root": ("/", "filesystem root the fact and validation modules read (a simulated tree in the lab)"),
    "gpufleet_gate_taint_key": (DEFAULT_TAINT_KEY, "taint key of a node held back by the gate"),
    "gpufleet_gpu_count": (None, "NVIDIA GPUs per node"),
    "gpufleet_driver_branch": (None, "NVIDIA driver branch (major version, e.g. \"580\")"),
    "gpufleet_mig_layout": (
        None, "MIG layout the GPUs of the node have (gpu.mig compares it): a config name of gpufleet_mig_configs "
        "(all-disabled, all-1g.10gb, ...) or an explicit list of mig-parted entries (devices, mig-enabled, "
        "mig-devices); unset: not checked. Applied by the rolling upgrade's component mig (role gpu_mig, "
        "nvidia-mig-parted; opt-in: the node is drained)"),
    "gpufleet_mig_configs": (
        None, "mig-parted configuration document (version: v1, mig-configs: {<name>: [entries]}) the names of "
        "gpufleet_mig_layout are looked up in; unset: the built-in set of module_utils/gpu/mig.py (mig-parted's "
        "example config, and its shapes for 80 GB boards)"),
    "gpufleet_expected_hcas": (None, "RDMA devices per node (mlx5_*, a bond counts once)"),
    "gpufleet_link_layer": (None, "link layer of the RDMA ports: InfiniBand, Ethernet or any"),
    "gpufleet_min_rate_gbps": (None, "minimum active rate of an RDMA port, Gb/s"),
    "gpufleet_peermem": (None, "GPUDirect RDMA through nvidia-peermem is required"),
    "gpufleet_hugepages_2m": (None, "2 MiB huge pages per node (allocated at run time)"),
    "gpufleet_hugepages_1g": (None, "1 GiB huge pages per node (allocated at boot: kernel command line)"),
    "gpufleet_tuned_profile": (None, "tuned profile active on the node"),
    "gpufleet_kubelet_policy": (
        None, "the node's kubelet CPU, topology and memory managers (options of the filter "
        "kubelet_tuning_config: cpu_manager_policy, reserved_system_cpus, topology_manager_policy, "
        "topology_manager_scope, memory_manager_policy, reserved_memory)"),
    "gpufleet_hca_irq_affinity": (None, "the interrupts of the RDMA devices run on CPUs of their NUMA node"),
    "gpufleet_skip_converged": (
        True, "skip a node role (playbooks/node.yml, kubernetes_prereqs) whose stamp records that it converged "
        "with today's inputs and whose managed files and packages are verified unchanged on the node (drift, "
        "or anything not verifiable, runs the role; the run says why); false runs every role in full"),
    "gpufleet_health_agent": (
        True, "install the node health agent on the node (GPU nodes: playbooks/health_agent.yml, run by "
        "site.yml after validation and by node.yml) and have validate.yml check what it publishes "
        "(agent.health); false: not installed, an agent installed before is stopped and disabled"),
    "gpufleet_kubernetes_version": (
        "1.36.5", "Kubernetes version X.Y.Z (or X.Y: newest patch) of the cluster: apt repository and pin "
        "of kubelet/kubeadm/kubectl, kubeadm's kubernetesVersion"),
    "gpufleet_control_plane_ha": (
        "none", "highly available API endpoint of the control plane, written before kubeadm init: none (the "
        "first control plane's address, or kubernetes_control_plane_endpoint), kube_vip (a kube-vip static pod "
        "holds gpufleet_control_plane_vip by ARP with leader election) or haproxy_keepalived (keepalived holds "
        "the VIP, haproxy on every control-plane node forwards it to every API server)"),
    "gpufleet_control_plane_vip": (
        None, "virtual IPv4 address of the API endpoint (required with gpufleet_control_plane_ha other than "
        "none): kubeadm's controlPlaneEndpoint and a SAN of the API server certificate; workers join through it"),
    "gpufleet_control_plane_vip_port": (
        None, "port of the API endpoint on gpufleet_control_plane_vip; unset: 8443 with haproxy_keepalived "
        "(haproxy runs beside the API server, which keeps 6443), else 6443 (kube-vip only moves the address: "
        "it must be the API server's port)"),
    "gpufleet_cert_warn_days": (
        30, "days before a kubeadm certificate expires from which check k8s.certs_expiry warns "
        "(validate.yml on kube_control_plane, and before a rolling upgrade's kubeadm upgrade)"),
    "gpufleet_gpu_allocation": (
        "device_plugin", "how pods get NVIDIA GPUs (nvidia.com/gpu): device_plugin (the NVIDIA device plugin "
        "of kubernetes_addons) or dra (NVIDIA's DRA driver for GPUs, resource.k8s.io/v1, deployed by "
        "kubernetes_addons in place of the device plugin; the compatibility matrix checks the Kubernetes version "
        "and that the device plugin is off)"),
    "gpufleet_gate_device_failures_taint_node": (
        False, "with gpufleet_gpu_allocation dra: a bad device (a GPU, an RDMA device a DRA driver publishes) also "
        "holds its node back (taint); false: only its DeviceTaintRule keeps pods off it, and the node is tainted only "
        "for node-level checks (count, driver, fabric, ...). No effect with device_plugin allocation (the node is "
        "tainted for any failing check)"),
    "gpufleet_remediation": (
        None, "remediation policy of playbooks/remediate.yml (docs/remediation.md): enabled, an action per "
        "failing check class (isolate, drain, reset, reboot), the circuit breaker (group, max_parallel, "
        "max_attempts, window_hours) and the burn-in before a node is admitted; unset: off, a failing node "
        "is only isolated"),
    "gpufleet_burnin": (
        None, "burn-in of a GPU node before the health gate admits it (docs/node-lifecycle.md, Admission): a "
        "mapping over the defaults of module_utils/gpu/burnin.py, the keys of gpufleet_remediation.burn_in: "
        "enabled (true), dcgm_level (dcgmi diag -r 1..4, 2), dcgm_tests, dcgm_parameters, timeout (1800 s), "
        "nccl_command, nccl_min_busbw_gbps; unset: those defaults (on); enabled false per group opts out"),
    "gpufleet_burnin_force": (
        False, "burn in the node even when its admission record is valid, passed, with today's driver and "
        "level and no repair since"),
}

# Which node_validate option each node expectation feeds (family, option).
NODE_VALIDATE_OPTIONS = {
    "gpufleet_gpu_count": ("gpu", "expected_count"),
    "gpufleet_driver_branch": ("gpu", "expected_driver_version"),
    "gpufleet_mig_layout": ("gpu", "expected_mig"),
    "gpufleet_expected_hcas": ("rdma", "expected_devices"),
    "gpufleet_link_layer": ("rdma", "link_layer"),
    "gpufleet_min_rate_gbps": ("rdma", "min_rate_gbps"),
    "gpufleet_peermem": ("rdma", "require_peermem"),
    "gpufleet_hugepages_2m": ("tuning", "hugepages_2m"),
    "gpufleet_hugepages_1g": ("tuning", "hugepages_1g"),
    "gpufleet_tuned_profile": ("tuning", "tuned_profile"),
    "gpufleet_kubelet_policy": ("tuning", "kubelet_policy"),
    "gpufleet_hca_irq_affinity": ("tuning", "irq_affinity"),
}
# Fields of gpufleet_kubelet_policy the drift check compares (reservedMemory is rendered, not compared).
KUBELET_POLICY_CHECKED = ("cpu_manager_policy", "reserved_system_cpus", "topology_manager_policy",
                          "topology_manager_scope", "memory_manager_policy")


def tier_default(name, inventory=None):
    """Default of tier variable ``name``. ``inventory`` is a function returning the inventory's
    groups and the host name, ``(groups, host)``; it is called only for the two defaults computed
    from them (``gpufleet_kube_api_host``, ``gpufleet_kubelet``), since templating a large
    inventory's groups for every variable on every host grows with the square of the fleet."""
    if name not in TIER:
        raise KeyError("%s is not a gpufleet_* tier variable (known: %s)" % (name, ", ".join(sorted(TIER))))
    if name not in ("gpufleet_kube_api_host", "gpufleet_kubelet"):
        return TIER[name][0]
    groups, host = inventory() if inventory is not None else ({}, None)
    groups = groups or {}
    if name == "gpufleet_kube_api_host":
        control_plane = groups.get("kube_control_plane") or []
        return control_plane[0] if control_plane else "localhost"
    return host in (groups.get("kube_node") or []) + (groups.get("kube_control_plane") or [])


def control_plane_vip_port(mode):
    """Default port of the HA API endpoint for ``gpufleet_control_plane_ha`` ``mode``: haproxy listens
    beside the API server on the same node, so not on its 6443; kube-vip only moves the address."""
    return 8443 if mode == "haproxy_keepalived" else 6443


def tier_value(template, variables, name):
    """The value of tier variable ``name``: ``variables[name]`` through ``template`` (a templar's
    ``template``), else (unset or null) its default. Shared by the lookups and the action plugin of
    node_validate, which read the tier from their task variables. Unknown names raise KeyError."""
    if name not in TIER:
        raise KeyError("%r is not a gpufleet_* tier variable (known: %s)" % (name, ", ".join(sorted(TIER))))
    variables = variables or {}
    value = template(variables[name]) if name in variables else None
    if value is None and name == "gpufleet_control_plane_vip_port":
        return control_plane_vip_port(tier_value(template, variables, "gpufleet_control_plane_ha"))
    if value is None:
        value = tier_default(name, lambda: (
            template(variables["groups"]) if "groups" in variables else {},
            template(variables["inventory_hostname"]) if "inventory_hostname" in variables else None))
    return value


def node_validate_options(values, gpu=None, rdma=None, tuning=None):
    """node_validate's ``gpu``, ``rdma`` and ``tuning`` options from the tier ``values`` (name -> value).

    Unset (None) expectations are left out; ``gpu``/``rdma``/``tuning`` are explicit options that win
    over the tier, or ``False`` to turn the family off (node_validate's ``enabled: false``).
    """
    out = {"gpu": {}, "rdma": {}, "tuning": {}}
    for name, (family, option) in NODE_VALIDATE_OPTIONS.items():
        value = (values or {}).get(name)
        if value is None or value == "":
            continue
        if name == "gpufleet_driver_branch":
            value = str(value)
        if name == "gpufleet_mig_layout":
            # a config name becomes its entries; a bad layout or document raises ValueError naming it
            value = resolve_layout(value, (values or {}).get("gpufleet_mig_configs"))
        if name == "gpufleet_kubelet_policy" and isinstance(value, dict):
            value = dict((key, value[key]) for key in KUBELET_POLICY_CHECKED if value.get(key) is not None)
            if not value:
                continue
        out[family][option] = value
    for family, explicit in (("gpu", gpu), ("rdma", rdma), ("tuning", tuning)):
        if explicit is False:
            out[family]["enabled"] = False
        elif explicit:
            if not isinstance(explicit, dict):
                raise TypeError("option %s must be a dict of node_validate %s options or false, got %s"
                                % (family, family, type(explicit).__name__))
            out[family].update(explicit)
    return out


def tier_node_validate_options(template, variables, gpu=None, rdma=None, tuning=None):
    """node_validate's ``gpu``, ``rdma`` and ``tuning`` options from the tier variables of ``variables``
    (each through ``template``) and the explicit options (see node_validate_options): what the lookup
    node_validate_options returns and the action plugin of node_validate applies with ``from_tier``."""
    values = dict((name, tier_value(template, variables, name)) for name in NODE_VALIDATE_OPTIONS)
    values["gpufleet_mig_configs"] = tier_value(template, variables, "gpufleet_mig_configs")
    return node_validate_options(values, gpu=gpu, rdma=rdma, tuning=tuning)
