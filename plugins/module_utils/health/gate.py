# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate's decision and the Node changes that carry it out (docs/contracts.md, "The gate's
decision"), built once, here, for every caller:

- the filter ``health_gate_patch`` and role node_gate (through the module ``node_write``),
- role rolling_upgrade (through node_gate),
- the node health agent (``agent_kube``: taint and ``GpufleetHealthy`` condition).

Layering (docs/contracts.md, "Health pipeline"): this file sits right above the result model
(``checks.py``: which statuses fail under which ``fail_on``) and below the Kubernetes client
(``kube_node.py``) and the publishers. It imports nothing but ``checks`` and ``clock``; nothing here needs
Ansible, so it runs on nodes with the agent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL, failing_statuses
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import FRESH, freshness, parse_utc, utc_text

DEFAULT_TAINT_KEY = "gpufleet.io/unhealthy"  # tier default of gpufleet_gate_taint_key
GATE_LABEL_KEY = "gpufleet.io/failed-check"
HEALTH_LABEL_KEY = "gpufleet.io/healthy"
CONDITION_TYPE = "GpufleetHealthy"
PASS_REASON = "GpufleetChecksPass"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GATE_FAIL_ON = ("fail", "warn")  # the gate never uses fail_on=never: an unchecked node is not admitted
WRITE_MODES = ("cordon", "taint", "release", "health", "annotate", "taints")

_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


class GateError(ValueError):
    """Bad input to the gate (names the option)."""


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


def results_list(value):
    """A result dict, a list of them, or None entries (a family not run) -> list of dicts."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            out.extend(results_list(item))
        return out
    raise GateError("expected a check result dict (checks/summary/healthy) or a list of them, got %s"
                    % type(value).__name__)


def failing_checks(results, fail_on="fail"):
    """Checks that hold a node back: a status failing under ``fail_on`` (``checks.failing_statuses``,
    the one table). No result at all is a failure too (fail closed): a node that was not checked
    is never admitted; so is a result that says healthy=false or failed without such a check."""
    if fail_on not in GATE_FAIL_ON:
        raise GateError("option fail_on=%r must be fail or warn" % (fail_on,))
    items = results_list(results)
    if not items:
        return [{"id": "gate.no_results", "target": "node", "status": FAIL,
                 "message": "no check results: the gate does not admit a node that was not checked"}]
    statuses = failing_statuses(fail_on)
    failed = []
    for result in items:
        checks = result.get("checks")
        if checks is None and "healthy" not in result and not result.get("failed"):
            raise GateError("a result has neither 'checks' nor 'healthy'")
        if checks is not None and not isinstance(checks, list):
            raise GateError("'checks' must be a list, got %s" % type(checks).__name__)
        own = [c for c in checks or [] if isinstance(c, dict) and c.get("status") in statuses]
        # a validation task that failed (bad options, crash) registers failed=true: fail closed
        if not own and (result.get("healthy") is False or result.get("failed")):
            own = [{"id": "result.unhealthy", "target": "node", "status": FAIL,
                    "message": result.get("msg") or "result reported healthy=false or failed"}]
        failed.extend(own)
    return failed


def _taint_key(item):
    return (item.get("key"), item.get("value"), item.get("effect"))


def decide(results, current_taints=None, effect="NoSchedule", key=None, fail_on="fail",
           reason=None, value=None, release=False):
    """The gate's decision for one node: ``{healthy, failed_check, failed_checks, reason, taint,
    labels, taints, changed_taints}`` (see the filter ``health_gate_patch``'s documentation).

    Three ways to decide: from check ``results`` (held back when a check has a status failing
    under ``fail_on``, or when there is no result at all); ``reason`` without results (held back
    for that reason); ``release=True`` (let back in). Taints of other owners are kept."""
    key = DEFAULT_TAINT_KEY if key is None else key
    if effect not in EFFECTS:
        raise GateError("option effect=%r must be NoSchedule, PreferNoSchedule or NoExecute" % (effect,))
    if not isinstance(key, str) or not key.strip():
        raise GateError("option key must be a non-empty taint key, got %r" % (key,))
    current = [dict(t) for t in current_taints or []]
    others = [t for t in current if t.get("key") != key]
    reason = str(reason).strip() if reason is not None else ""
    if release:
        failed, ids = [], []
    elif reason and not results_list(results):
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
    return {
        "healthy": not held,
        "failed_check": check_id,
        "failed_checks": ids,
        "reason": reason,
        "taint": taint,
        "labels": labels,
        "taints": taints,
        "changed_taints": sorted(map(_taint_key, taints), key=str) != sorted(map(_taint_key, current), key=str),
    }


def node_view(node):
    """What the gate reads of a Node object: {taints, cordoned, annotations, labels, resource_version}."""
    node = node or {}
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return {"taints": list(spec.get("taints") or []), "cordoned": bool(spec.get("unschedulable")),
            "annotations": dict(metadata.get("annotations") or {}), "labels": dict(metadata.get("labels") or {}),
            "resource_version": metadata.get("resourceVersion")}


def node_write(node, mode, decision=None, reason_annotation=None, reason=None, annotations=None, labels=None):
    """The JSON merge patch (``application/merge-patch+json``) that carries out ``mode`` on ``node``
    (the Node as read), guarded by the resourceVersion read, or None when the Node already is as
    wanted (nothing is sent, no resourceVersion bump). Modes:

    cordon    spec.unschedulable true
    taint     spec.unschedulable true, the decision's taints, the reason annotation: one write, so a
              held node is never tainted without being cordoned
    release   the decision's taints (ours removed), the reason annotation removed,
              spec.unschedulable false
    health    the decision's taints, the reason annotation and ``labels`` (always sent, no cordon)
    annotate  ``annotations`` (a None value removes one)
    taints    the decision's taints only, when they change (the node health agent)
    """
    if mode not in WRITE_MODES:
        raise GateError("write mode %r must be one of %s" % (mode, ", ".join(WRITE_MODES)))
    if mode in ("taint", "release", "health", "taints") and decision is None:
        raise GateError("write mode %s needs the gate's decision" % mode)
    if mode in ("taint", "release", "health") and not reason_annotation:
        raise GateError("write mode %s needs the reason annotation's name" % mode)
    view = node_view(node)
    if not view["resource_version"]:
        raise GateError("the Node as read has no metadata.resourceVersion")
    unschedulable = {"cordon": True, "taint": True, "release": False}.get(mode)
    spec = {}
    if mode in ("health",) or (mode in ("taint", "release", "taints") and decision["changed_taints"]):
        spec["taints"] = decision["taints"]
    if unschedulable is not None and unschedulable != view["cordoned"]:
        spec["unschedulable"] = unschedulable
    if mode == "annotate":
        wanted_annotations = dict(annotations or {})
    elif mode in ("cordon", "taints"):
        wanted_annotations = {}
    elif mode == "taint":
        wanted_annotations = {reason_annotation: reason if reason is not None else decision.get("reason")}
    else:
        wanted_annotations = {reason_annotation: decision.get("reason") or None}
    after = dict(view["annotations"])
    for name, value in wanted_annotations.items():
        if value is None:
            after.pop(name, None)
        else:
            after[name] = value
    metadata = {"resourceVersion": view["resource_version"]}
    if after != view["annotations"]:
        metadata["annotations"] = wanted_annotations
    if mode == "health":
        wanted_labels = dict(labels or {})
        wanted_labels.update(decision["labels"])
        metadata["labels"] = wanted_labels
    if mode != "health" and not spec and "annotations" not in metadata:
        return None
    patch = {"metadata": metadata}
    if spec:
        patch["spec"] = spec
    return patch


def summary_message(failing, limit=1024):
    """``id[target]: message (+N more)`` for the first failing check, cut to ``limit`` characters."""
    if not failing:
        return "all gpufleet checks pass"
    first = failing[0]
    text = "%s[%s]: %s" % (first["id"], first["target"], first["message"])
    if len(failing) > 1:
        text += " (+%d more)" % (len(failing) - 1)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def find_condition(node):
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == CONDITION_TYPE:
            return condition
    return None


def condition(healthy, failing, current=None, now=None):
    """The ``GpufleetHealthy`` NodeCondition: status True / False, reason the first failing check id
    or ``GpufleetChecksPass``, message ``id[target]: message (+N more)``; lastTransitionTime kept
    while the status does not change."""
    now = time.time() if now is None else now
    status = "True" if healthy else "False"
    wanted = {"type": CONDITION_TYPE, "status": status,
              "reason": PASS_REASON if healthy else failing[0]["id"],
              "message": summary_message(failing), "lastHeartbeatTime": utc_text(now),
              "lastTransitionTime": utc_text(now)}
    if current and current.get("status") == status and current.get("lastTransitionTime"):
        wanted["lastTransitionTime"] = current["lastTransitionTime"]
    return wanted


def condition_write(node, healthy, failing, now, heartbeat_seconds):
    """(patch or None, changed): the strategic merge patch of the Node's status subresource that
    keeps ``GpufleetHealthy`` current, or None when it is current and its heartbeat fresh. A
    heartbeat that is unreadable or lies in the future (a clock ahead, or set back since) is not
    fresh: the condition is written again."""
    current = find_condition(node)
    wanted = condition(healthy, failing, current, now)
    same = current is not None and all(current.get(k) == wanted[k] for k in ("status", "reason", "message"))
    verdict, _age = freshness(parse_utc((current or {}).get("lastHeartbeatTime")), now, heartbeat_seconds,
                              tolerance=0)
    if same and verdict == FRESH and _age < heartbeat_seconds:
        return None, False
    return {"status": {"conditions": [wanted]}}, not same


# -- per-device health under DRA (docs/contracts.md, "Device taints") -------------------------------
# Kubernetes 1.37 serves DeviceTaintRule (KEP 5055, GA in 1.37) as resource.k8s.io/v1; a rule is
# cluster-scoped and taints the devices its spec.deviceSelector {driver, pool, device} selects.
DEVICE_TAINT_API = "/apis/resource.k8s.io/v1/devicetaintrules"
DEVICE_TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")  # DeviceTaint.effect (no PreferNoSchedule)
DEVICE_NODE_LABEL = "gpufleet.io/node"  # label of our rules: the node (label-safe), for the list
DEVICE_NODE_ANNOTATION = "gpufleet.io/node"  # the node's full name: which rules are this node's
DEVICE_LABEL = "gpufleet.io/device"
DEVICE_MESSAGE_ANNOTATION = "gpufleet.io/message"
ALLOCATIONS = ("device_plugin", "dra")  # tier gpufleet_gpu_allocation
# NVIDIA's DRA driver for GPUs (github.com/NVIDIA/k8s-dra-driver-gpu) publishes its GPUs as driver
# gpu.nvidia.com, one pool per node named after the node, a full GPU as device "gpu-<minor>"
# (cmd/gpu-kubelet-plugin/deviceinfo.go: GpuInfo.CanonicalName returns fmt.Sprintf("gpu-%d", d.minor),
# the /dev/nvidia<minor> number; gpufleet's target gpuN is the NVML index, the same number on
# the usual systems; where it is not, set the device name template).
DEVICE_TAINT_DEFAULTS = {
    "gpu_driver": "gpu.nvidia.com",
    "gpu_device": "gpu-{index}",
    "rdma_driver": None,  # no RDMA DRA driver: a failing RDMA device holds the node back
    "rdma_device": "{name}",
    "pool": "{node}",
    "effect": "NoSchedule",
}
# Checks that are about the node whatever their target: no single device to blame.
NODE_LEVEL_CHECKS = ("gpu.nvml", "gpu.count", "gpu.driver_version", "gpu.fabric", "rdma.devices",
                     "rdma.modules", "rdma.driver", "rdma.peermem", "rdma.ofed_version")
NODE_LEVEL_PREFIXES = ("tuning.", "gate.", "result.", "k8s.", "agent.")
_GPU_TARGET = re.compile(r"^gpu(\d+)$")
_RDMA_TARGET = re.compile(r"^([A-Za-z][A-Za-z0-9_]*_\d+)(?:/\d+)?$")  # mlx5_0, mlx5_0/1 (a port)
_DNS_LABEL_INVALID = re.compile(r"[^a-z0-9.-]+")


def device_of(check, rdma=False):
    """The device a failing check blames, ``("gpu", "3")`` / ``("rdma", "mlx5_0")``, or None when
    the check is about the node (count, driver, fabric, tuning, a target that is no device; an RDMA
    device when no DRA driver publishes RDMA devices, ``rdma`` false)."""
    check_id = str(check.get("id") or "")
    if check_id in NODE_LEVEL_CHECKS or check_id.startswith(NODE_LEVEL_PREFIXES):
        return None
    target = str(check.get("target") or "")
    match = _GPU_TARGET.match(target)
    if match and check_id.startswith("gpu."):
        return ("gpu", match.group(1))
    match = _RDMA_TARGET.match(target)
    if rdma and match and check_id.startswith("rdma."):
        return ("rdma", match.group(1))
    return None


def split_failing(failing, rdma=False):
    """Failing checks (gate.failing_checks, or the agent's after hysteresis) split into
    ``{"node": [checks that hold the node back], "devices": {(kind, id): [checks]}}`` (report
    order kept). Pure."""
    node, devices = [], {}
    for check in failing or []:
        device = device_of(check, rdma=rdma)
        if device is None:
            node.append(check)
        else:
            devices.setdefault(device, []).append(check)
    return {"node": node, "devices": devices}


def device_settings(settings=None):
    """DEVICE_TAINT_DEFAULTS with ``settings`` over them; GateError naming a bad setting."""
    out = dict(DEVICE_TAINT_DEFAULTS)
    for name, value in (settings or {}).items():
        if name not in out:
            raise GateError("device taint setting %r is unknown (known: %s)" % (name, ", ".join(sorted(out))))
        if value is not None:
            out[name] = value
    if out["effect"] not in DEVICE_TAINT_EFFECTS:
        raise GateError("device taint effect=%r must be NoSchedule, NoExecute or None" % (out["effect"],))
    for name in ("gpu_driver", "gpu_device", "rdma_device", "pool"):
        if not isinstance(out[name], str) or not out[name].strip():
            raise GateError("device taint setting %s must be a non-empty string, got %r" % (name, out[name]))
    if out["rdma_driver"] is not None and not isinstance(out["rdma_driver"], str):
        raise GateError("device taint setting rdma_driver must be a DRA driver name or null, got %r"
                        % (out["rdma_driver"],))
    return out


def _template(text, setting, **values):
    try:
        return text.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise GateError("device taint setting %s=%r: %s (fields: %s)" % (setting, text, exc, ", ".join(sorted(values))))


def rule_name(node, device):
    """Deterministic DeviceTaintRule name of ``device`` (``gpu-3``, ``mlx5_0``) on ``node``:
    ``gpufleet-<node>-<device>``, made a DNS subdomain (lower case, ``_`` -> ``-``, 253 at most)."""
    text = _DNS_LABEL_INVALID.sub("-", ("gpufleet-%s-%s" % (node, device)).lower())
    text = re.sub(r"-{2,}", "-", text).strip("-.")
    return text[:253].rstrip("-.")


def device_taint_rules(node, devices, key=None, settings=None):
    """The DeviceTaintRule objects (resource.k8s.io/v1) for the bad ``devices`` of ``node``
    (split_failing's ``devices``): one rule per device, name rule_name, labels gpufleet.io/node and
    gpufleet.io/device, the node's full name and the message (``summary_message``) as annotations,
    selector {driver, pool, device} from ``settings`` (device_settings), taint key ``key`` (the
    gate's), value the first failing check id (label-safe), effect the setting (NoSchedule). Sorted
    by name. Pure: spec.taint.timeAdded is left to the server."""
    key = DEFAULT_TAINT_KEY if key is None else key
    if not isinstance(key, str) or not key.strip():
        raise GateError("option key must be a non-empty taint key, got %r" % (key,))
    if not isinstance(node, str) or not node.strip():
        raise GateError("device taints need the node's name, got %r" % (node,))
    conf = device_settings(settings)
    pool = _template(conf["pool"], "pool", node=node)
    rules = []
    for (kind, ident), checks in (devices or {}).items():
        if kind == "gpu":
            driver, device = conf["gpu_driver"], _template(conf["gpu_device"], "gpu_device", index=ident, node=node)
        elif kind == "rdma" and conf["rdma_driver"]:
            driver, device = conf["rdma_driver"], _template(conf["rdma_device"], "rdma_device", name=ident, node=node)
        else:
            raise GateError("no DRA driver set for %s device %s (device taint setting %s_driver)" % (kind, ident, kind))
        rules.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node, device),
                         "labels": {DEVICE_NODE_LABEL: k8s_label_value(node) or "unknown",
                                    DEVICE_LABEL: k8s_label_value(device) or "unknown"},
                         "annotations": {DEVICE_NODE_ANNOTATION: node,
                                         DEVICE_MESSAGE_ANNOTATION: summary_message(checks)}},
            "spec": {"deviceSelector": {"driver": driver, "pool": pool, "device": device},
                     "taint": {"key": key, "value": k8s_label_value(checks[0].get("id")) or "unknown",
                               "effect": conf["effect"]}},
        })
    return sorted(rules, key=lambda rule: rule["metadata"]["name"])


def _rule_content(rule):
    taint = dict((rule.get("spec") or {}).get("taint") or {})
    taint.pop("timeAdded", None)
    meta = rule.get("metadata") or {}
    return ((rule.get("spec") or {}).get("deviceSelector"), taint, meta.get("labels") or {},
            meta.get("annotations") or {})


def device_rules_plan(node, wanted, current):
    """What to send so that ``node``'s rules are ``wanted`` (device_taint_rules), from the rules
    listed (``current``: items of a DeviceTaintRuleList; only those whose annotation names this
    node count, a rule of another node with the same label-safe name is never touched):
    ``{"create": [rules], "update": [rules carrying resourceVersion], "delete": [names]}``. An
    update keeps spec.taint.timeAdded while the taint (key, value, effect) stays. Pure."""
    mine = dict((r["metadata"]["name"], r) for r in current or []
                if ((r.get("metadata") or {}).get("annotations") or {}).get(DEVICE_NODE_ANNOTATION) == node)
    plan = {"create": [], "update": [], "delete": []}
    for rule in wanted:
        name = rule["metadata"]["name"]
        old = mine.pop(name, None)
        if old is None:
            plan["create"].append(rule)
            continue
        if _rule_content(old) == _rule_content(rule):
            continue
        new = {"apiVersion": rule["apiVersion"], "kind": rule["kind"],
               "metadata": dict(rule["metadata"], resourceVersion=old["metadata"].get("resourceVersion")),
               "spec": {"deviceSelector": rule["spec"]["deviceSelector"], "taint": dict(rule["spec"]["taint"])}}
        old_taint = (old.get("spec") or {}).get("taint") or {}
        if old_taint.get("timeAdded") and all(old_taint.get(k, "") == rule["spec"]["taint"].get(k, "")
                                              for k in ("key", "value", "effect")):
            new["spec"]["taint"]["timeAdded"] = old_taint["timeAdded"]
        plan["update"].append(new)
    plan["delete"] = sorted(mine)
    return plan


def device_gate(results, allocation="device_plugin", fail_on="fail", taint_node=False, rdma=False):
    """Which failing checks hold the node back and which taint devices: ``{"failing": all,
    "node": [...], "devices": {...}}``. ``device_plugin`` allocation: every failing check holds the
    node back, no device is tainted (as before DRA). ``dra``: device checks taint their device; the
    node is held back by node-level checks, or by any failing check with ``taint_node``
    (gpufleet_gate_device_failures_taint_node)."""
    if allocation not in ALLOCATIONS:
        raise GateError("option allocation=%r must be device_plugin or dra" % (allocation,))
    failing = failing_checks(results, fail_on)
    if allocation == "device_plugin":
        return {"failing": failing, "node": failing, "devices": {}}
    split = split_failing(failing, rdma=rdma)
    return {"failing": failing, "node": failing if taint_node else split["node"], "devices": split["devices"]}
