# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node labels from facts, and the gate's decision as a filter (check results -> labels/taints).

The decision itself lives in ``plugins/module_utils/health/gate.py`` (one place for the filter, role
node_gate's module ``node_write`` and the node health agent); ``health_gate_patch`` is a thin
adapter that turns its GateError into AnsibleFilterError. The tier's taint key default is
``gpufleet_gate_taint_key`` (plugin_utils/gpufleet_tier.py takes it from gate.py). The result
model is in docs/contracts.md.

Documentation: health_gate_patch.yml, gpufleet_node_labels.yml, k8s_label_value.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import k8s_label_value

GATE_TAINT_KEY = gate.DEFAULT_TAINT_KEY
EFFECTS = gate.EFFECTS


def failing_checks(results, fail_on="fail"):
    """The gate's failing checks (gate.failing_checks) with filter errors."""
    try:
        return gate.failing_checks(results, fail_on)
    except gate.GateError as exc:
        raise AnsibleFilterError("health_gate_patch: %s" % exc)


def health_gate_patch(results, current_taints=None, effect="NoSchedule", key=None, fail_on="fail",
                      reason=None, value=None, release=False):
    """The gate's decision for one node and the patch that carries it out (gate.decide).

    Returns ``{healthy, failed_check, failed_checks, reason, taint, labels, taints,
    changed_taints}``: ``failed_checks`` are ``id:target`` (unique, in order); ``reason`` the
    full text for the reason annotation ("validation failed: id:target, ..."); ``taint`` ours or
    null; ``labels`` a merge-patch dict (a null value removes the label); ``taints`` the full
    desired taint list (taints of other owners kept, ours added, replaced or removed);
    ``changed_taints`` whether that list differs from ``current_taints``.
    """
    try:
        return gate.decide(results, current_taints=current_taints, effect=effect, key=key, fail_on=fail_on,
                           reason=reason, value=value, release=release)
    except gate.GateError as exc:
        raise AnsibleFilterError("health_gate_patch: %s" % exc)


def _max_active_rate(mlx5, link_layer):
    rates = [p.get("rate_gbps") for d in mlx5.get("devices") or [] for p in d.get("ports") or []
             if p.get("link_layer") == link_layer and p.get("state") == "ACTIVE" and p.get("rate_gbps")]
    return max(rates) if rates else None


def gpufleet_node_labels(facts, gpus=None, prefix="gpufleet.io/"):
    """Labels describing a node from ``ansible_facts`` (nvidia, mlx5) and optional NVML ``gpus``.

    Only labels with a known value are returned; all values pass ``k8s_label_value``.
    """
    if not isinstance(facts, dict):
        raise AnsibleFilterError("gpufleet_node_labels: expected ansible_facts (a dict)")
    labels = {}
    nvidia = facts.get("nvidia") or {}
    mlx5 = facts.get("mlx5") or {}
    names = [g.get("name") for g in gpus or [] if isinstance(g, dict) and g.get("name")]
    if names:
        labels["gpu.product"] = names[0]
    elif nvidia.get("pci_gpus"):
        labels["gpu.product"] = "pci-10de-%s" % str(nvidia["pci_gpus"][0].get("device_id", "")).replace("0x", "")
    if nvidia:
        labels["gpu.count"] = nvidia.get("gpu_count", len(gpus or []))
    elif gpus:
        labels["gpu.count"] = len(gpus)
    if (nvidia.get("driver") or {}).get("version"):
        labels["gpu.driver"] = nvidia["driver"]["version"]
    if mlx5:
        devices = mlx5.get("devices") or []
        labels["hca.count"] = len(devices)
        ib_rate = _max_active_rate(mlx5, "InfiniBand")
        eth_rate = _max_active_rate(mlx5, "Ethernet")
        if ib_rate:
            labels["hca.ib-rate-gbps"] = ib_rate
        if eth_rate:
            labels["hca.roce-rate-gbps"] = eth_rate
        layers = sorted({p.get("link_layer") for d in devices for p in d.get("ports") or []
                         if p.get("link_layer")})
        if layers:
            labels["rdma.link-layer"] = "-".join(layers)
        if mlx5.get("driver_source"):
            labels["mlx5.driver-source"] = mlx5["driver_source"]
        ofed = (mlx5.get("ofed") or {}).get("package_version") or (
            mlx5.get("version") if mlx5.get("driver_source") == "ofed" else None)
        if ofed:
            labels["ofed.version"] = ofed
    out = {}
    for key, value in labels.items():
        clean = k8s_label_value(value)
        if clean:
            out[prefix + key] = clean
    return out


class FilterModule(object):
    def filters(self):
        return {
            "k8s_label_value": k8s_label_value,
            "health_gate_patch": health_gate_patch,
            "gpufleet_node_labels": gpufleet_node_labels,
        }
