# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a whole inventory before any host changes: the first play of every entry point
(playbooks/tasks/check-inventory.yml, imported by site.yml, validate.yml, rolling_upgrade.yml,
fabric_test.yml and fleet_status.yml).

``inventory_problems(hostvars, groups, ...)`` returns every problem at once, one string each:
groups the selected phases need are empty (a Kubespray-style inventory without ``gpu_nodes`` /
``rdma_nodes`` is refused with the groups to add), a host expects GPUs or RDMA devices outside
the group that gets them, a pinned download has no checksum, a ``gpufleet_*`` variable has the
wrong type or range, a ``gpufleet_*`` or role variable (``<role>_*`` of the collection's roles,
known from ``roles/*/meta/argument_specs.yml``, read once per run) is unknown (typo: the closest
known name is suggested) or has a value its role's argument spec refuses (named by the
inventory variable), a Kubespray variable is set that means something else here, a host's
chosen versions form a combination the compatibility matrix refuses. ``tag_selection`` tells
which phases and roles ``--tags`` / ``--skip-tags`` leave to run, so a check is only made for
what runs. Only variables are read: nothing is gathered from the hosts (their facts are checked
by role preflight on each node).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import ipaddress
import math
import os
import re


from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import PolicyError
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.remediation import policy as remediation_policy
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility, gpufleet_tier
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER
# the phases and roles of site.yml (run_selection.py, which also tells what --tags leaves of them)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_selection import KUBERNETES_ROLES, NODE_ROLES, PHASES

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
    "gpufleet_kubeadm_certs": "result of the kubeadm certificate check of playbooks/validate.yml (registered)",
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
    "gpufleet_status_kube_page_size": "Nodes per page of the node list read by playbooks/fleet_status.yml (source kubernetes)",
    "gpufleet_status_kube_timeout": "seconds for one page of the node list read by playbooks/fleet_status.yml",
    "gpufleet_remediate_hosts": "hosts of playbooks/remediate.yml",
    "gpufleet_remediate_serial": "nodes playbooks/remediate.yml handles at once",
    "gpufleet_remediate_environment": "environment of the validation module in playbooks/remediate.yml",
    "gpufleet_remediate_allow_plain_http": "playbooks/remediate.yml: credentials to a plain http:// API server (test double)",
    "gpufleet_burnin_environment": "environment of the admission burn-in (module gpu_burnin)",
    "gpufleet_admission_state_file": "the node's admission record without the API (default /var/lib/gpufleet/admission.json)",
}

# Variables a release renamed: still setting the old name is a problem (the roles refuse it too).
RENAMED = {
    "kubernetes_version": "gpufleet_kubernetes_version",
}

# Kubespray variables (inventory/sample/group_vars/k8s_cluster/k8s-cluster.yml and all/all.yml of
# kubernetes-sigs/kubespray) that a site coming from Kubespray keeps setting: here they are not read,
# so each is refused with the variable that does the job (docs/inventory.md has the same table).
KUBESPRAY_VARIABLES = {
    "kube_version": "gpufleet_kubernetes_version (X.Y.Z, e.g. \"1.37.1\")",
    "kube_network_plugin": "kubernetes_cni_plugin",
    "kube_network_plugin_multus": "kubernetes_addons_multus",
    "kube_pods_subnet": "kubernetes_control_plane_pod_subnet",
    "kube_service_addresses": "kubernetes_control_plane_service_subnet",
    "kube_image_repo": "kubernetes_control_plane_image_repository",
    "kube_apiserver_port": "kubernetes_control_plane_bind_port",
    "apiserver_loadbalancer_domain_name": "kubernetes_control_plane_endpoint (host:port of the load balancer)",
    "kube_vip_enabled": "gpufleet_control_plane_ha (kube_vip, or haproxy_keepalived) with gpufleet_control_plane_vip",
    "kube_vip_address": "gpufleet_control_plane_vip (with gpufleet_control_plane_ha: kube_vip)",
    "loadbalancer_apiserver": "gpufleet_control_plane_vip and gpufleet_control_plane_vip_port (with "
                              "gpufleet_control_plane_ha), or kubernetes_control_plane_endpoint for an external "
                              "load balancer",
    "supplementary_addresses_in_ssl_keys": "kubernetes_control_plane_cert_sans",
    "dns_domain": "kubernetes_control_plane_dns_domain",
    "container_manager": "container_runtime_engine",
    "calico_version": "kubernetes_cni_calico_version (with kubernetes_cni_calico_manifest_checksum)",
    "nvidia_accelerator_enabled": "the group gpu_nodes (hosts.yml) and gpufleet_gpu_count in group_vars/gpu_nodes",
    "nvidia_gpu_nodes": "the group gpu_nodes (hosts.yml)",
}

# Group names of Kubespray (old and new) and what this collection calls the group.
FOREIGN_GROUPS = {
    "kube-master": "kube_control_plane",
    "kube_master": "kube_control_plane",
    "kube-node": "kube_node",
}

# Role-prefixed variables that are playbook inputs, not role options (play keywords of
# playbooks/rolling_upgrade.yml, which must be set with -e): known, though no argument spec has them.
PLAYBOOK_ROLE_VARIABLES = {
    "rolling_upgrade_hosts": "hosts of playbooks/rolling_upgrade.yml",
    "rolling_upgrade_serial": "batch size of playbooks/rolling_upgrade.yml",
    "rolling_upgrade_max_fail_percentage": "failures per batch that stop playbooks/rolling_upgrade.yml",
}

# Variables that hold node_validate family options (a dict, or false to turn the family off): their
# keys and values are checked against the family's options and named by the inventory variable.
MODULE_OPTION_VARIABLES = {
    "gpufleet_validate_gpu": "gpu",
    "gpufleet_validate_rdma": "rdma",
    "gpufleet_validate_tuning": "tuning",
    "rolling_upgrade_gpu_health": "gpu",
    "rolling_upgrade_rdma_validate": "rdma",
    "node_health_agent_gpu": "gpu",
    "node_health_agent_rdma": "rdma",
    "node_health_agent_tuning": "tuning",
}

KUBESPRAY_SNIPPET = """  all:
    children:
      kube_control_plane:
        hosts:
          cp1:
      kube_node:
        children:
          gpu_nodes:
          rdma_nodes:
      gpu_nodes:        # hosts with NVIDIA GPUs: driver, GPUDirect, GPU validation
        hosts:
          node1:
      rdma_nodes:       # hosts with ConnectX HCAs: RDMA stack, RDMA validation, fabric test
        hosts:
          node1:"""

# \Z, never $: $ also matches before a final newline ("sha256:<hex>\n" of a YAML block scalar)
SHA256_PREFIXED = re.compile(r"^sha256:[0-9a-fA-F]{64}\Z")
SHA256_BARE = re.compile(r"^[0-9a-fA-F]{64}\Z")
TAINT_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


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


# ASCII only: str.isdigit() is true for "²" (int() refuses it) and int() and float() take "٣" or
# "８"; an inventory number is written with 0-9 or it is refused by name.
_ASCII_INT = re.compile(r"[0-9]+\Z")
_ASCII_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
# X.Y.Z or X.Y, nothing around it: "v1.35.4" would become the apt pin "v1.35.4-*"
_KUBERNETES_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?\Z")


def _is_int(value):
    """An int (not a bool) or a string of ASCII digits and nothing else (no sign, no whitespace:
    "8 ", " 8", "8\\n" are refused): int(value) then never raises."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and bool(_ASCII_INT.match(value))


def _is_number(value):
    """A finite int or float (not a bool) or an ASCII decimal string of one, nothing around it (no
    whitespace): float(value) then never raises and is finite."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if not (isinstance(value, str) and _ASCII_NUMBER.match(value)):
        return False
    return math.isfinite(float(value))


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
    if branch is not None and not re.match(r"^[0-9]{3}(\.[0-9]+)*\Z", str(branch)):
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
    for name in ("gpufleet_skip_converged", "gpufleet_kubelet", "gpufleet_lab", "gpufleet_health_agent"):
        value = val(name)
        # -e name=false passes a string: the playbooks read these through | bool
        if value is not None and not (isinstance(value, bool) or str(value).lower() in ("true", "false")):
            out.append("%s must be true or false, got %r" % (name, value))
    version = val("gpufleet_kubernetes_version")
    if version is not None and not (isinstance(version, str) and _KUBERNETES_VERSION.match(version)):
        bare = version[1:] if isinstance(version, str) and version[:1] in ("v", "V") else None
        hint = " (did you mean %r?)" % bare if bare and _KUBERNETES_VERSION.match(bare) else ""
        out.append("gpufleet_kubernetes_version must be a Kubernetes version X.Y.Z or X.Y as a string "
                   "(e.g. \"1.37.1\"), got %r%s" % (version, hint))
    for name, choices in (("gpufleet_validate_fail_on", ("fail", "warn", "never")),
                          ("gpufleet_status_fail_on", ("fail", "warn", "never")),
                          ("gpufleet_status_source", ("files", "kubernetes"))):
        value = val(name)
        if value is not None and value not in choices:
            out.append("%s must be one of %s, got %r" % (name, ", ".join(choices), value))
    for name in ("gpufleet_validate_gpu", "gpufleet_validate_rdma", "gpufleet_validate_tuning"):
        value = val(name)
        if value is not None and value is not False and not isinstance(value, dict):
            out.append("%s must be a dict of node_validate options or false, got %r" % (name, value))
    for name in ("gpufleet_validate_environment", "gpufleet_sim_environment"):
        value = val(name)
        if value is not None and not isinstance(value, dict):
            out.append("%s must be a dict (environment variables), got %r" % (name, value))
    days = val("gpufleet_cert_warn_days")
    if days is not None and not (_is_int(days) and int(days) >= 0):
        out.append("gpufleet_cert_warn_days must be a whole number of days >= 0, got %r" % (days,))
    remediation = val("gpufleet_remediation")
    if remediation is not None:
        try:
            remediation_policy(remediation)
        except PolicyError as exc:
            out.append(str(exc))
        except Exception as exc:  # pylint: disable=broad-except  # a shape the policy's checker did not expect
            out.append("gpufleet_remediation is not a valid remediation policy (docs/remediation.md): %s: %s, got %r"
                       % (type(exc).__name__, exc, remediation))
    burn_in = val("gpufleet_burnin")
    if burn_in is not None:
        try:
            burnin.settings(burn_in, "gpufleet_burnin")
        except burnin.SettingsError as exc:
            out.append(str(exc))
    force = val("gpufleet_burnin_force")
    if force is not None and str(force).lower() not in ("true", "false", "yes", "no"):  # -e gives text
        out.append("gpufleet_burnin_force must be true or false, got %r" % (force,))
    allocation = val("gpufleet_gpu_allocation")
    if allocation is not None and allocation not in ("device_plugin", "dra"):
        out.append("gpufleet_gpu_allocation must be device_plugin or dra, got %r" % (allocation,))
    age = val("gpufleet_status_max_age")
    if age is not None and not (_is_number(age) and float(age) > 0):
        out.append("gpufleet_status_max_age must be a number of seconds > 0, got %r" % (age,))
    out.extend(control_plane_ha_problems(variables))
    # coherence: validation would demand nvidia-peermem where the node runs GPUDirect over dma-buf
    mode = _setting(variables, "gpudirect_mode", "gpudirect")
    if peermem is True and mode == "dmabuf":
        out.append("gpufleet_peermem is true (validation requires nvidia-peermem) but gpudirect_mode is "
                   "dmabuf (nvidia-peermem is not loaded); set gpufleet_peermem: false for dma-buf nodes")
    return out


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def _vip_refusal(value):
    """Why ``value`` cannot be the HA endpoint's VIP (None: a unicast IPv4 address). Refused:
    not IPv4; unspecified (0.0.0.0/8, "this network"); loopback (127.0.0.0/8); multicast
    (224.0.0.0/4: 224.0.0.18 is VRRP's own group); link-local (169.254.0.0/16, not routed);
    reserved (240.0.0.0/4, which holds the broadcast address 255.255.255.255). A subnet's
    directed broadcast needs the netmask, which the inventory does not give: not checked."""
    try:
        address = ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        address = None
    if not isinstance(address, ipaddress.IPv4Address):
        return "not an IPv4 address"
    for refused, what in ((address in _THIS_NETWORK, "unspecified (0.0.0.0/8)"),
                          (address.is_loopback, "a loopback address (127.0.0.0/8)"),
                          (address.is_multicast, "a multicast address (224.0.0.0/4; 224.0.0.18 is VRRP's group)"),
                          (address.is_link_local, "a link-local address (169.254.0.0/16)"),
                          (address.is_reserved, "reserved (240.0.0.0/4, with the broadcast address 255.255.255.255)")):
        if refused:
            return what
    return None


def control_plane_ha_problems(variables):
    """The HA API endpoint (gpufleet_control_plane_ha, _vip, _vip_port) against the control plane's
    own settings: a mode, an IPv4 VIP, a port that neither clashes with the API server (haproxy on
    the same node) nor differs from it (kube-vip only moves the address), one endpoint."""
    out = []
    mode = _get(variables, "gpufleet_control_plane_ha")
    vip = _get(variables, "gpufleet_control_plane_vip")
    port = _get(variables, "gpufleet_control_plane_vip_port")
    modes = ("none", "kube_vip", "haproxy_keepalived")
    if mode is not None and mode not in modes:
        out.append("gpufleet_control_plane_ha must be one of %s, got %r" % (", ".join(modes), mode))
        return out
    if port is not None and not (_is_int(port) and 0 < int(port) < 65536):
        out.append("gpufleet_control_plane_vip_port must be a port number 1-65535, got %r" % (port,))
        port = None
    if mode in (None, "none"):
        if vip is not None or port is not None:
            out.append("gpufleet_control_plane_vip%s is set but gpufleet_control_plane_ha is none: set "
                       "gpufleet_control_plane_ha to kube_vip or haproxy_keepalived, or remove it"
                       % ("_port" if vip is None else ""))
        return out
    refusal = _vip_refusal(vip)
    if refusal == "not an IPv4 address":
        out.append("gpufleet_control_plane_vip must be the IPv4 address of the API endpoint with "
                   "gpufleet_control_plane_ha=%s, got %r" % (mode, vip))
    elif refusal:
        out.append("gpufleet_control_plane_vip must be a unicast IPv4 address every node reaches (the API endpoint "
                   "with gpufleet_control_plane_ha=%s), got %r: %s" % (mode, vip, refusal))
    port = int(port) if port is not None else gpufleet_tier.control_plane_vip_port(mode)
    bind_port = _setting(variables, "kubernetes_control_plane_bind_port", "kubernetes_control_plane")
    bind_port = int(bind_port) if _is_int(bind_port) else None
    if mode == "haproxy_keepalived" and bind_port is not None and port == bind_port:
        out.append("gpufleet_control_plane_vip_port %s is the API server's port (kubernetes_control_plane_bind_port): "
                   "haproxy runs on the control-plane nodes beside the API server and cannot listen on it; "
                   "leave gpufleet_control_plane_vip_port unset (8443) or choose another port" % port)
    if mode == "kube_vip" and bind_port is not None and port != bind_port:
        out.append("gpufleet_control_plane_vip_port %s differs from the API server's port %s "
                   "(kubernetes_control_plane_bind_port): kube-vip (ARP) only moves the address, it forwards no "
                   "port; leave gpufleet_control_plane_vip_port unset or make the two equal" % (port, bind_port))
    endpoint = _get(variables, "kubernetes_control_plane_endpoint")
    if not refusal and endpoint and endpoint != "%s:%s" % (vip, port):
        out.append("kubernetes_control_plane_endpoint %r contradicts the HA endpoint %s:%s (gpufleet_control_plane_ha=%s): "
                   "leave kubernetes_control_plane_endpoint empty, the endpoint is the VIP" % (endpoint, vip, port, mode))
    return out


def unknown_key_problems(variables, keys=None):
    known = known_gpufleet_variables()
    out = []
    keys = sorted(k for k in (_keys(variables) if keys is None else keys) if k.startswith("gpufleet_"))
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


_ROLE_SPECS = {}


def role_specs(root=None):
    """{role: {variable: argument spec}} of the collection's roles, read from
    roles/<role>/meta/argument_specs.yml (every entry point; the first spec of a name wins), once per
    run and root. A role without the file has no entry (its variables are not checked)."""
    root = root or compatibility.COLLECTION_ROOT
    if root not in _ROLE_SPECS:
        specs = {}
        roles_dir = os.path.join(root, "roles")
        for role in sorted(os.listdir(roles_dir)) if os.path.isdir(roles_dir) else []:
            path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
            if not os.path.isfile(path):
                continue
            with open(path) as handle:
                data = compatibility.safe_load(handle) or {}
            options = {}
            for entry in (data.get("argument_specs") or {}).values():
                for name, spec in ((entry or {}).get("options") or {}).items():
                    options.setdefault(name, spec or {})
            specs[role] = options
        _ROLE_SPECS[root] = specs
    return _ROLE_SPECS[root]


def _role_of(name, specs):
    """The role whose ``<role>_`` prefix ``name`` has (the longest), or None. Remembered per name for
    the run's specs (every host has nearly the same names)."""
    if _ROLE_OF[0] is not specs:
        _ROLE_OF[:] = [specs, {}]
    if name in _ROLE_OF[1]:
        return _ROLE_OF[1][name]
    best = None
    for role in specs:
        if name.startswith(role + "_") and (best is None or len(role) > len(best)):
            best = role
    _ROLE_OF[1][name] = best
    return best


_ROLE_OF = [None, {}]  # [the specs, {variable name: its role or None}]


_VALUE_PROBLEMS = {}


def _spec_type(spec):
    kind = spec.get("type", "str")
    if kind == "list" and spec.get("elements"):
        return "list of %s" % spec["elements"]
    return kind


def _value_problem(name, spec, value, owner):
    """Why ``value`` of ``name`` is refused by ``spec`` (one line naming ``name``), or None. Ansible's own
    validator decides (the role or module would fail the same way, deep in the run); cached per value."""
    try:
        key = (name, owner, repr(value))
    except Exception:  # pylint: disable=broad-except
        key = None
    if key is not None and key in _VALUE_PROBLEMS:
        return _VALUE_PROBLEMS[key]
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.module_utils.errors import ArgumentTypeError
    spec = dict((k, v) for k, v in spec.items() if k not in ("required", "default", "description"))
    problem = None
    try:
        errors = list(ArgumentSpecValidator({"value": spec}).validate({"value": value}).errors)
    except Exception as exc:  # pylint: disable=broad-except
        errors = [exc]
    if errors:
        error = errors[0]
        if isinstance(error, ArgumentTypeError) and not spec.get("options"):
            problem = "%s must be of type %s (%s), got %r" % (name, _spec_type(spec), owner, value)
        else:
            text = str(error).replace("argument 'value' ", "").replace("value of value ", "value ")
            text = re.sub(r"\bvalue\.", name + ".", text).replace("'value'", name)
            problem = "%s: %s%s (%s)" % (name, text, _did_you_mean(value, [str(c) for c in spec.get("choices") or []])
                                         if spec.get("choices") else "", owner)
    if key is not None:
        _VALUE_PROBLEMS[key] = problem
    return problem


def role_value_problem(role, name, spec, value):
    """Why ``value`` of role variable ``name`` is refused by the role's argument spec, or None."""
    return _value_problem(name, spec, value, "argument spec of role %s" % role)


_FAMILY_OPTIONS = {}


def family_options(family):
    """node_validate's sub-options of ``family`` (gpu, rdma, tuning): the module's own spec."""
    if not _FAMILY_OPTIONS:
        from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import nested_options
        for item in FAMILIES:
            _FAMILY_OPTIONS[item.name] = nested_options(item)
    return _FAMILY_OPTIONS[family]


def module_option_problems(variables, keys):
    """Keys and values of the variables that hold node_validate family options (MODULE_OPTION_VARIABLES),
    named by the inventory variable (``gpufleet_validate_gpu.require_ecc``), not the module option."""
    out = []
    for name in sorted(set(keys) & set(MODULE_OPTION_VARIABLES)):
        value = _get(variables, name)
        if not isinstance(value, dict):
            continue  # false / null, or a type the variable's own check reports
        family = MODULE_OPTION_VARIABLES[name]
        options = family_options(family)
        for option in sorted(value, key=str):
            label = "%s.%s" % (name, option)
            if option not in options:
                close = difflib.get_close_matches(str(option), sorted(options), n=1, cutoff=0.6)
                out.append("unknown option %s%s" % (label, " (did you mean %s.%s?)" % (name, close[0]) if close else
                                                    " (node_validate's %s options: ansible-doc "
                                                    "gpufleet.cluster.node_validate)" % family))
                continue
            if value[option] is None:
                continue
            problem = _value_problem(label, options[option], value[option],
                                     "node_validate option %s.%s" % (family, option))
            if problem:
                out.append(problem)
    return out


def _keys(variables):
    try:
        return sorted(k for k in variables.keys() if isinstance(k, str))
    except Exception:  # pylint: disable=broad-except
        return []


def role_variable_problems(variables, keys=None, root=None, skipped_roles=()):
    """Unknown ``<role>_*`` variables of the collection's roles (with the closest known name) and
    values their role's argument spec refuses, named by the inventory variable. The variables of
    ``skipped_roles`` (roles this run does not run, tag_selection) are not checked."""
    specs = role_specs(root)
    out = []
    for key in _keys(variables) if keys is None else keys:
        role = _role_of(key, specs)
        if role is None or key in PLAYBOOK_ROLE_VARIABLES or role in skipped_roles:
            continue
        known = specs[role]
        if key not in known:
            prefix = role + "_"
            suffixes = sorted(k[len(prefix):] for k in known if k.startswith(prefix))
            close = difflib.get_close_matches(key[len(prefix):], suffixes, n=1, cutoff=0.6)
            out.append("unknown variable %s%s" % (key, " (did you mean %s%s?)" % (prefix, close[0]) if close else
                                                  " (role %s has no such variable: roles/%s/meta/argument_specs.yml "
                                                  "lists them)" % (role, role)))
            continue
        value = _get(variables, key)
        if value is None:
            continue
        problem = role_value_problem(role, key, known[key], value)
        if problem:
            out.append(problem)
    return out


def kubespray_problems(variables, keys=None):
    out = []
    present = set(_keys(variables) if keys is None else keys)
    for name in sorted(present & set(KUBESPRAY_VARIABLES)):
        if _get(variables, name) is None:
            continue
        out.append("%s is a Kubespray variable that gpufleet does not read: use %s instead (docs/inventory.md, "
                   "\"Coming from Kubespray\")" % (name, KUBESPRAY_VARIABLES[name]))
    return out


def expectation_problems(variables, host, groups, strict):
    """A host that expects GPUs (RDMA devices) outside gpu_nodes (rdma_nodes): the driver (RDMA
    stack) is installed by group, so the expectation belongs in that group's variables. ``strict``:
    the node or kubernetes phase runs; else only inventories that use the groups are held to it."""
    out = []
    for name, group, what in (("gpufleet_gpu_count", "gpu_nodes", "GPU(s)"),
                              ("gpufleet_expected_hcas", "rdma_nodes", "RDMA device(s)")):
        value = _get(variables, name)
        members = groups.get(group) or []
        if not (_is_int(value) and int(value) > 0) or host in members or not (strict or members):
            continue
        out.append("expects %d %s (%s) but is not in group %s, where the %s installed and checked: set %s in "
                   "group_vars/%s (not group_vars/all), or add the host to %s"
                   % (int(value), what, name, group,
                      "driver is" if group == "gpu_nodes" else "RDMA stack is", name, group, group))
    return out


def _checksum_problem(variables, name, role, pattern, need):
    try:
        null = name in variables and variables[name] is None
    except Exception:  # pylint: disable=broad-except  # an undefined template inside the variable
        null = False
    if null:
        # Ansible: a null inventory value overrides the role's default (the pinned checksum) with None
        return "%s is required (%s) and is null in the inventory, which overrides the role's pinned default: " \
               "remove the line or set it to %s" % (name, need, "sha256:<64 hex digits>" if pattern is SHA256_PREFIXED
                                                    else "64 hex digits")
    try:
        value = compatibility.role_value(variables, role, name)
    except compatibility.MatrixError as exc:
        return "%s is required (%s): %s" % (name, need, exc)
    if value is None or not pattern.match(str(value)):
        return "%s is required (%s) and must be %s, got %r" % (
            name, need, "sha256:<64 hex digits>" if pattern is SHA256_PREFIXED else "64 hex digits",
            "" if value is None else value)
    return None


def _checked(what, check, *args):
    """``check(*args)``'s problems; an exception (a value of a shape no check expected) is one
    problem naming what could not be checked, so every other problem is still reported."""
    try:
        return check(*args)
    except Exception as exc:  # pylint: disable=broad-except
        return ["%s could not be checked: %s: %s (a value of an unexpected type or form among them)"
                % (what, type(exc).__name__, exc)]


def _compatibility_problems(variables, matrix):
    matrix = matrix or compatibility.load_matrix()
    facts = compatibility.facts_from_vars(variables, matrix=matrix)
    # the same facts give the same verdict: evaluated once per run for each set of facts (a fleet has few)
    if _EVALUATED[0] is not matrix:
        _EVALUATED[:] = [matrix, {}]
    key = _facts_key(facts)
    if key is not None and key in _EVALUATED[1]:
        return list(_EVALUATED[1][key])
    found = ["compatibility %s" % p["message"] for p in compatibility.evaluate(facts, matrix=matrix)]
    if key is not None:
        _EVALUATED[1][key] = tuple(found)
    return found


_EVALUATED = [None, {}]  # [the matrix, {facts key: problems}]


def _facts_key(facts):
    try:
        frozen = compatibility.frozen
        return tuple(sorted((name, frozen(item.get("value")), frozen(item.get("origin")), len(item))
                            for name, item in facts.items()))
    except (ValueError, TypeError, AttributeError):
        return None


def _foreign_group_hint(groups, group):
    found = [name for name, ours in sorted(FOREIGN_GROUPS.items()) if ours == group and groups.get(name)]
    return ("; the inventory has %s, Kubespray's name for it: rename the group to %s" % (" and ".join(found), group)
            if found else "")


def _did_you_mean(values, known):
    """" (did you mean X for Y?)" for each string of ``values`` that is not in ``known`` but close to one."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    hints = []
    for value in values:
        if not isinstance(value, str) or value in known:
            continue
        close = difflib.get_close_matches(value, sorted(known), n=1, cutoff=0.6)
        if close:
            hints.append((close[0], value))
    if len(hints) == 1:
        return " (did you mean %s?)" % hints[0][0]
    return " (did you mean %s?)" % ", ".join("%s for %r" % hint for hint in hints) if hints else ""


_PATTERN_SPLIT = re.compile(r"[:,]")


def target_problem(pattern, matched, targets, variable=None, limit=None, groups=None):
    """The problem of the hosts a run would touch, or None.

    ``pattern``: the host pattern of the entry point's plays (``variable`` names the extra variable
    that sets it, or None when it is fixed); ``matched``: the inventory hosts it matches (the
    ``inventory_hostnames`` lookup, before ``--limit``); ``targets``: those that ``--limit``
    (``limit``, ``ansible_limit``) leaves. A run that would touch no host is a problem: a typo in a
    pattern or a limit outside the entry point's hosts is not a successful run of nothing."""
    if targets:
        return None
    groups = groups or {}
    named = "%s=%s" % (variable, pattern) if variable else "the hosts of this playbook (%s)" % pattern
    if matched:
        return ("--limit %s leaves none of %s (%d host(s): %s): this run would touch no host; "
                "limit to hosts of %s, or choose other hosts%s"
                % (limit, named, len(matched), ", ".join(list(matched)[:5]) + (" ..." if len(matched) > 5 else ""),
                   pattern, " with -e %s=<pattern>" % variable if variable else ""))
    names = set(groups) | set(("all", "ungrouped")) | set(groups.get("all") or [])
    parts = [p.lstrip("&!") for p in _PATTERN_SPLIT.split(str(pattern)) if p.strip("&!")]
    unknown = [p for p in parts if p not in names and not any(ch in p for ch in "*?~[")]
    if unknown and not variable:
        # the playbook's own groups, not a name the user typed: no did-you-mean (gpu_nodes missing from a
        # Kubespray inventory is not a typo of kube_node); say which group to add
        return ("%s match no host of the inventory: %s %s not in the inventory (groups: %s); add the hosts this "
                "playbook is for to %s (docs/inventory.md); this run would touch no host"
                % (named, ", ".join(unknown), "is" if len(unknown) == 1 else "are",
                   ", ".join(sorted(g for g in groups if g not in ("all", "ungrouped"))[:10]) or "none",
                   " and ".join(unknown)))
    if unknown:
        hint = _did_you_mean(unknown, names)
        return ("%s matches no host of the inventory: %s %s not a group or host of the inventory%s; "
                "this run would touch no host" % (named, ", ".join(unknown), "is" if len(unknown) == 1 else "are",
                                                  hint or " (groups: %s)" % ", ".join(sorted(
                                                      g for g in groups if g not in ("all", "ungrouped"))[:10])))
    return "%s matches no host of the inventory: its groups are empty; this run would touch no host" % named


def inventory_problems(hostvars, groups, phases=None, node_roles=None, kubernetes_roles=None, matrix=None,
                       hosts=None, root=None, run_time_names=None, skipped_roles=None):
    """Every problem of the inventory, as a list of strings (empty: the run may start).

    ``phases``, ``node_roles``, ``kubernetes_roles``: what the run does (after tag_selection); the
    groups and checksums they need are checked. ``hosts``: the hosts whose variables are checked
    (the entry point's hosts); default: every host of kube_control_plane, kube_node, gpu_nodes and
    rdma_nodes. ``run_time_names``: {host: names set during this run} (set_fact, register,
    include_vars: a playbook that imports node.yml before validate.yml has them in hostvars); they
    are not inventory variables, so they are not checked as such. ``skipped_roles``: roles the run does
    not run (tag_selection): their variables are not checked."""
    problems = []
    skipped_roles = [r for r in skipped_roles if isinstance(r, str)] if isinstance(skipped_roles, list) else []
    run_time_names = run_time_names or {}
    groups = groups or {}
    if phases is None:
        phases = list(PHASES)
    if not isinstance(phases, list) or any(p not in PHASES for p in phases):
        problems.append("gpufleet_phases must be a list of %s, got %r%s" % (", ".join(PHASES), phases,
                                                                            _did_you_mean(phases, PHASES)))
        phases = [p for p in phases if p in PHASES] if isinstance(phases, list) else []
    node_roles = list(NODE_ROLES) if node_roles is None else node_roles
    kubernetes_roles = list(KUBERNETES_ROLES) if kubernetes_roles is None else kubernetes_roles
    for name, value, known in (("gpufleet_node_roles", node_roles, NODE_ROLES),
                               ("gpufleet_kubernetes_roles", kubernetes_roles, KUBERNETES_ROLES)):
        if not isinstance(value, list) or any(r not in known for r in value):
            problems.append("%s must be a list of %s, got %r" % (name, ", ".join(known), value))

    def members(group):
        return list(groups.get(group) or [])

    missing_hosts = []

    def known(host, where):
        """Whether ``host`` is a host of the inventory (in ``hostvars``); a problem naming it and
        ``where`` it was listed otherwise (hosts=[\"ghost\"], [None], a group listing a stray name)."""
        try:
            if isinstance(host, str) and host in hostvars:
                return True
        except Exception:  # pylint: disable=broad-except  # an inventory that cannot answer for the name
            pass
        if (host, where) not in missing_hosts:
            missing_hosts.append((host, where))
        return False

    if hosts is not None:
        hosts = [host for host in hosts if known(host, "hosts")]

    # groups
    control_plane, kube_node = members("kube_control_plane"), members("kube_node")
    # the node stack's hosts are touched by the node phase and by every kubernetes role but the control
    # plane's (--tags etcd_snapshot / kubernetes_control_plane run on kube_control_plane only)
    nodes_run = "node" in phases or ("kubernetes" in phases and isinstance(kubernetes_roles, list) and any(
        r in KUBERNETES_ROLES and r != "kubernetes_control_plane" for r in kubernetes_roles))
    if "kubernetes" in phases and "kubernetes_control_plane" in kubernetes_roles and not control_plane:
        problems.append("group kube_control_plane is empty: the kubernetes phase needs a control-plane host "
                        "(or leave kubernetes_control_plane out of gpufleet_kubernetes_roles)"
                        + _foreign_group_hint(groups, "kube_control_plane"))
    if nodes_run and not kube_node:
        problems.append("group kube_node is empty: the node and kubernetes phases need the nodes in it"
                        + _foreign_group_hint(groups, "kube_node"))
    if nodes_run and kube_node \
            and not members("gpu_nodes") and not members("rdma_nodes"):
        problems.append(
            "groups gpu_nodes and rdma_nodes are empty%s: the NVIDIA driver, GPUDirect, the RDMA stack, the "
            "device plugins and the GPU/RDMA expectations apply to these groups only, so this run would "
            "install no GPU or RDMA software on any host. Add them as children of kube_node (etcd and "
            "k8s_cluster are not used: kubeadm runs etcd on kube_control_plane), e.g. in hosts.yml:\n%s\n"
            "(docs/inventory.md, \"Coming from Kubespray\")"
            % (" (a Kubespray-style inventory: %s)" % ", ".join(
                g for g in ("kube_control_plane", "kube_node", "etcd", "k8s_cluster") if g in groups)
               if "k8s_cluster" in groups or "etcd" in groups else "", KUBESPRAY_SNIPPET))
    for group in ("gpu_nodes", "rdma_nodes"):
        outside = [h for h in members(group) if h not in kube_node]
        if outside and nodes_run:
            problems.append("group %s has hosts outside kube_node (%s): the node stack runs on kube_node only; "
                            "add them to kube_node (e.g. make %s a child of kube_node)"
                            % (group, ", ".join(outside[:5]) + (" ..." if len(outside) > 5 else ""), group))

    # checksums of the downloads the selected phases make
    # (only for the hosts this run touches: a --limit without the control plane downloads no manifest)
    first_cp = [h for h in control_plane[:1] if (hosts is None or h in hosts) and known(h, "group kube_control_plane")]
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
            if host not in kube_node or (hosts is not None and host not in hosts) \
                    or not known(host, "group rdma_nodes"):
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
    if hosts is None:
        hosts = [host for group in ("kube_control_plane", "kube_node", "gpu_nodes", "rdma_nodes")
                 for host in members(group) if known(host, "group %s" % group)]
    hosts = sorted(set(hosts))
    for host, where in missing_hosts:
        problems.append("host %r (%s) is not a host of the inventory: it has no variables to check; "
                        "check the name" % (host, where))
    strict = nodes_run
    per_problem = {}
    for host in hosts:
        variables = hostvars[host]
        set_now = run_time_names.get(host) or ()
        keys = [k for k in _keys(variables) if k not in set_now]
        found = (_checked("the gpufleet_* values", tier_problems, variables)
                 + _checked("the gpufleet_* names", unknown_key_problems, variables, keys)
                 + _checked("renamed variables", renamed_problems, variables)
                 + _checked("the role variables", role_variable_problems, variables, keys, root, skipped_roles)
                 + _checked("Kubespray variables", kubespray_problems, variables, keys)
                 + _checked("the node_validate options", module_option_problems, variables, keys)
                 + _checked("the GPU and RDMA expectations", expectation_problems, variables, host, groups, strict)
                 + _checked("the compatibility matrix", _compatibility_problems, variables, matrix))
        for problem in found:
            per_problem.setdefault(problem, []).append(host)
    for problem, where in per_problem.items():
        if len(where) > 5 and len(where) == len(hosts):
            problems.append("%s [all %d hosts: %s ...]" % (problem, len(where), ", ".join(where[:3])))
            continue
        problems.append("%s [%s]" % (problem, ", ".join(where[:5]) + (" and %d more" % (len(where) - 5)
                                                                      if len(where) > 5 else "")))
    return problems
