# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node labels from facts and the gate's decision (check results -> labels/taints patch).

``health_gate_patch`` is the one place that decides the gate's taint: its key (tier variable
gpufleet_gate_taint_key), effect, value (``k8s_label_value``, the one sanitiser) and which
statuses hold a node back (``fail_on``). Role node_gate (actions taint, release, health) and
role rolling_upgrade use it, and so does the node health agent (plugins/module_utils/agent_kube.py,
which imports this file on nodes without Ansible); the result model is in docs/contracts.md.

Documentation: health_gate_patch.yml, gpufleet_node_labels.yml, k8s_label_value.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # the node health agent imports this filter on nodes without Ansible

    class AnsibleFilterError(ValueError):
        pass


from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_default

GATE_TAINT_KEY = tier_default("gpufleet_gate_taint_key")
GATE_LABEL_KEY = "gpufleet.io/failed-check"
HEALTH_LABEL_KEY = "gpufleet.io/healthy"
_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def k8s_label_value(value, max_length=63):
    """Sanitise to the label value grammar: ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``, <= 63."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = _INVALID.sub("-", str(value).strip())
    text = re.sub(r"-{2,}", "-", text)
    text = _EDGE.sub("", text)
    text = text[:max_length]
    return _EDGE.sub("", text)


def _results(value):
    """A result dict, a list of them, or None entries (a family not run) -> list of dicts."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            out.extend(_results(item))
        return out
    raise AnsibleFilterError("health_gate_patch: expected a check result dict (checks/summary/healthy) "
                             "or a list of them, got %s" % type(value).__name__)


EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
FAIL_ON = {"fail": ("fail",), "warn": ("fail", "warn")}


def failing_checks(results, fail_on="fail"):
    """Checks that hold a node back: status ``fail`` (``fail_on=fail``) or ``fail``/``warn``
    (``fail_on=warn``). No result at all is a failure too (fail closed): a node that was not
    checked is never admitted."""
    if fail_on not in FAIL_ON:
        raise AnsibleFilterError("health_gate_patch: option fail_on=%r must be fail or warn" % (fail_on,))
    items = _results(results)
    if not items:
        return [{"id": "gate.no_results", "target": "node", "status": "fail",
                 "message": "no check results: the gate does not admit a node that was not checked"}]
    statuses = FAIL_ON[fail_on]
    failed = []
    for result in items:
        checks = result.get("checks")
        if checks is None and "healthy" not in result and not result.get("failed"):
            raise AnsibleFilterError("health_gate_patch: a result has neither 'checks' nor 'healthy'")
        own = [c for c in checks or [] if isinstance(c, dict) and c.get("status") in statuses]
        # a validation task that failed (bad options, crash) registers failed=true: fail closed
        if not own and (result.get("healthy") is False or result.get("failed")):
            own = [{"id": "result.unhealthy", "target": "node", "status": "fail",
                    "message": result.get("msg") or "result reported healthy=false or failed"}]
        failed.extend(own)
    return failed


def health_gate_patch(results, current_taints=None, effect="NoSchedule", key=None, fail_on="fail",
                      reason=None, value=None, release=False):
    """The gate's decision for one node and the patch that carries it out.

    Three ways to decide: from check ``results`` (held back when a check has a status in
    ``fail_on``, or when there is no result at all); ``reason`` without results (held back for
    that reason, e.g. "reboot required"); ``release=True`` (let back in).

    Returns ``{healthy, failed_check, failed_checks, reason, taint, labels, taints,
    changed_taints}``: ``failed_checks`` are ``id:target`` (unique, in order); ``reason`` the
    full text for the reason annotation ("validation failed: id:target, ..."); ``taint`` ours or
    null; ``labels`` a merge-patch dict (a null value removes the label); ``taints`` the full
    desired taint list (taints of other owners kept, ours added, replaced or removed);
    ``changed_taints`` whether that list differs from ``current_taints``. The taint value is
    ``value`` or the first failing check id (or ``reason``), made label-safe by
    ``k8s_label_value``.
    """
    key = GATE_TAINT_KEY if key is None else key
    if effect not in EFFECTS:
        raise AnsibleFilterError("health_gate_patch: option effect=%r must be NoSchedule, "
                                 "PreferNoSchedule or NoExecute" % (effect,))
    if not isinstance(key, str) or not key.strip():
        raise AnsibleFilterError("health_gate_patch: option key must be a non-empty taint key, got %r" % (key,))
    current = [dict(t) for t in current_taints or []]
    others = [t for t in current if t.get("key") != key]
    reason = str(reason).strip() if reason is not None else ""
    if release:
        failed, ids = [], []
    elif reason and not _results(results):
        failed, ids = None, []
    else:
        failed = failing_checks(results, fail_on)
        ids = []
        for check in failed:
            ident = "%s:%s" % (check.get("id"), check.get("target"))
            if ident not in ids:
                ids.append(ident)
        reason = ("validation failed: " + ", ".join(ids)) if ids else ""
    held = failed is None or bool(failed)
    if held:
        raw = value if value not in (None, "") else (failed[0].get("id") if failed else reason)
        check_id = k8s_label_value(raw) or "unknown"
        taint = {"key": key, "value": check_id, "effect": effect}
        taints = others + [taint]
        labels = {GATE_LABEL_KEY: check_id, HEALTH_LABEL_KEY: "false"}
    else:
        check_id = None
        taint = None
        taints = others
        labels = {GATE_LABEL_KEY: None, HEALTH_LABEL_KEY: "true"}

    def _key(item):
        return (item.get("key"), item.get("value"), item.get("effect"))

    return {
        "healthy": not held,
        "failed_check": check_id,
        "failed_checks": ids,
        "reason": reason,
        "taint": taint,
        "labels": labels,
        "taints": taints,
        "changed_taints": sorted(map(_key, taints), key=str) != sorted(map(_key, current), key=str),
    }


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
