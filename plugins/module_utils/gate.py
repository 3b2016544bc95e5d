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

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import FAIL, failing_statuses
from ansible_collections.gpufleet.cluster.plugins.module_utils.clock import FRESH, freshness, parse_utc, utc_text

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
