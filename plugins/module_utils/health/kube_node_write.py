# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one health write of a Kubernetes Node (docs/contracts.md, "The gate's decision", "Device
taints"), written once here for its two callers:

- the module ``node_write`` (role node_gate, kubernetes backend): ``run`` reads the Node,
  computes the gate's patch of a mode (cordon, taint, release, health, annotate) from what was
  read, and sends it through the guarded write (kube_node.guarded_write: resourceVersion, redone
  on 409 Conflict); ``status`` reads it only. The module is a thin adapter over ``run``;
- the node health agent (``agent_kube.KubePublisher``, opt-in taint): ``write_health_taints``, the
  gate's taint of its own Node after hysteresis, through the same guarded write.

Both go through ``write_device_health`` under DRA (``gpu_allocation: dra``): a DeviceTaintRule
(resource.k8s.io/v1) for each bad device, the rules of devices no longer failing deleted, the node
held back only for node-level checks (or for any, ``taint_node``); rules that cannot be written
(any exception of that path) fall back to the node taint for every failing check (fail closed),
and the reason and the journal say so.

Layering (docs/contracts.md, "Health pipeline"): above ``gate`` (the decision and patches),
``records`` and ``kube_node`` (the client), below the agent's publishers and the modules; imports
no agent file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import (
    DEFAULT_RETRIES,
    ApiStatusError,
    ConflictError,
    KubeconfigClient,
    KubeError,
    guarded_write,
)

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2
    from urllib import quote

LIST_RECORD = "DeviceTaintRule list"
MODES = ("cordon", "taint", "release", "health", "annotate", "status")
DECIDING_MODES = ("taint", "release", "health")


# --- DeviceTaintRules (DRA) ---------------------------------------------------------------------

def listed_device_taint_rules(listed):
    """The items of a DeviceTaintRuleList as the API server answered it (GET resource.k8s.io/v1
    devicetaintrules), read strictly: an object with a list ``items`` (none at all is not "no
    rules"), each item an object with ``metadata.name`` a non-empty string, ``metadata.annotations``
    (when set) strings, ``metadata.resourceVersion`` (when set) a string and ``spec``,
    ``spec.taint`` (when set) objects. records.RecordError naming the list and the item
    otherwise: the caller falls back to the node taint (fail closed)."""
    document = records.mapping(listed, LIST_RECORD, required=("items",))
    items = records.listing(document["items"], LIST_RECORD, "items")
    for index, item in enumerate(items):
        field = "items[%d]" % index
        records.mapping(item, LIST_RECORD, field, required=("metadata",))
        metadata = records.mapping(item["metadata"], LIST_RECORD, field + ".metadata", required=("name",))
        records.string(metadata["name"], LIST_RECORD, field + ".metadata.name", max_length=253, allow_empty=False)
        if metadata.get("resourceVersion") is not None:
            records.string(metadata["resourceVersion"], LIST_RECORD, field + ".metadata.resourceVersion")
        if metadata.get("annotations") is not None:
            annotations = records.mapping(metadata["annotations"], LIST_RECORD, field + ".metadata.annotations")
            for key, value in annotations.items():
                records.string(value, LIST_RECORD, "%s.metadata.annotations[%s]" % (field, key), max_length=262144)
        if item.get("spec") is not None:
            spec = records.mapping(item["spec"], LIST_RECORD, field + ".spec")
            if spec.get("taint") is not None:
                records.mapping(spec["taint"], LIST_RECORD, field + ".spec.taint")
    return items


def failure_text(exc):
    """What went wrong on the DeviceTaintRule path, for the journal and the module's result: the
    message of an expected error, the type too of anything else."""
    if isinstance(exc, (KubeError, gate.GateError, records.RecordError)):
        return str(exc)
    return "%s: %s" % (type(exc).__name__, exc)


def write_device_taints(client, node, rules, deadline=None, dry_run=False):
    """Make ``node``'s DeviceTaintRules (resource.k8s.io/v1) the ``rules`` wanted
    (gate.device_taint_rules): list ours (label gpufleet.io/node), then create, update (carrying the
    resourceVersion listed) and delete what gate.device_rules_plan says (``dry_run``: list and
    plan only). Returns ``{create, update, delete: [names], lines: [journal lines]}``; KubeError
    (ApiStatusError) on the first request that fails, with what was done before it kept (the next
    cycle converges), records.RecordError for a list it cannot read."""
    selector = "%s=%s" % (gate.DEVICE_NODE_LABEL, gate.k8s_label_value(node) or "unknown")
    listed = client.request("GET", "%s?labelSelector=%s" % (gate.DEVICE_TAINT_API, quote(selector, safe="")),
                            deadline=deadline)
    plan = gate.device_rules_plan(node, rules, listed_device_taint_rules(listed))
    done = {"create": [r["metadata"]["name"] for r in plan["create"]],
            "update": [r["metadata"]["name"] for r in plan["update"]], "delete": list(plan["delete"]), "lines": []}
    if dry_run:
        return done
    lines = done["lines"]
    for rule in plan["create"]:
        client.request("POST", gate.DEVICE_TAINT_API, rule, "application/json", deadline=deadline)
        lines.append(_rule_line("added", rule))
    for rule in plan["update"]:
        client.request("PUT", "%s/%s" % (gate.DEVICE_TAINT_API, quote(rule["metadata"]["name"], safe="")), rule,
                       "application/json", deadline=deadline)
        lines.append(_rule_line("updated", rule))
    for name in plan["delete"]:
        client.request("DELETE", "%s/%s" % (gate.DEVICE_TAINT_API, quote(name, safe="")), deadline=deadline)
        lines.append("device taint rule %s removed (device healthy again)" % name)
    return done


def _rule_line(verb, rule):
    spec = rule["spec"]
    return "device taint %s=%s:%s %s on %s/%s/%s (rule %s): %s" % (
        spec["taint"]["key"], spec["taint"].get("value", ""), spec["taint"]["effect"], verb,
        spec["deviceSelector"]["driver"], spec["deviceSelector"]["pool"], spec["deviceSelector"]["device"],
        rule["metadata"]["name"], rule["metadata"]["annotations"].get(gate.DEVICE_MESSAGE_ANNOTATION, ""))


def write_device_health(client, node, failing, settings, key=None, taint_node=False, deadline=None,
                        dry_run=False):
    """Per-device health under DRA, and its fallback, for both callers: the DeviceTaintRules of
    ``node``'s bad devices among ``failing`` (the gate's failing checks, or the agent's after
    hysteresis) made what they should be (write_device_taints; ``settings``: gate.device_settings).

    Returns ``{held, rules, create, update, delete, error, note, lines}``: ``held`` the failing
    checks that hold the node back (node-level ones, or all with ``taint_node``); ``rules`` the
    names wanted. On any exception of the rule path (an API error, a list it cannot read, a bug)
    the node is held back for every failing check instead (fail closed): ``error`` says why,
    ``note`` (when a device was bad) is the sentence for the reason annotation, and ``lines`` (the
    journal) carry it."""
    split = gate.split_failing(failing, rdma=bool(settings["rdma_driver"]))
    out = {"held": list(failing) if taint_node else split["node"], "rules": [], "create": [], "update": [],
           "delete": [], "error": None, "note": None, "lines": []}
    try:
        rules = gate.device_taint_rules(node, split["devices"], key=key, settings=settings)
        out["rules"] = [r["metadata"]["name"] for r in rules]
        done = write_device_taints(client, node, rules, deadline=deadline, dry_run=dry_run)
        out.update((k, done[k]) for k in ("create", "update", "delete", "lines"))
    except Exception as exc:  # pylint: disable=broad-except  # any failure of the rule path: fail closed
        out["held"] = list(failing)  # a bad device nobody can see tainted takes the node out
        out["error"] = failure_text(exc)
        if split["devices"]:
            out["note"] = "device taints not written (%s): the node is tainted instead" % out["error"]
            out["lines"] = [out["note"]]
        else:
            out["lines"] = ["device taint rules not reconciled (%s)" % out["error"]]
    return out


# --- the agent's taint of its own Node ----------------------------------------------------------

class FirstReadCached(object):
    """The client, answering the first get_node with the Node already read (one GET less per agent
    cycle); later reads (after a 409) go to the server."""

    def __init__(self, client, node):
        self._client = client
        self._node = node

    def get_node(self, name, deadline=None):
        if self._node is not None:
            node, self._node = self._node, None
            return node
        return self._client.get_node(name, deadline=deadline)

    def patch_node(self, name, body, deadline=None):
        return self._client.patch_node(name, body, deadline=deadline)


def write_health_taints(client, name, failing, key=None, effect="NoSchedule", allocation="device_plugin",
                        settings=None, taint_node=False, node=None, deadline=None):
    """The gate's taint of Node ``name`` from ``failing`` (the agent's failing checks after
    hysteresis; none: healthy): under DRA (``allocation``) first the device taints
    (write_device_health), then the node taint for what holds the node back, through the guarded
    write (gate.decide, gate.node_write mode ``taints``). ``node``: the Node already read (used for
    the first attempt). Journal lines of what changed; KubeError when the node write fails."""
    lines = []
    held = failing
    if allocation == "dra":
        devices = write_device_health(client, name, failing, settings or gate.device_settings(None), key=key,
                                      taint_node=taint_node, deadline=deadline)
        lines.extend(devices["lines"])
        held = devices["held"]
    result = {"checks": held, "healthy": not held}
    decisions = []

    def compute(current):
        decision = gate.decide(result, current_taints=(current.get("spec") or {}).get("taints") or [],
                               effect=effect, key=key)
        decisions.append(decision)
        return gate.node_write(current, "taints", decision)

    written = guarded_write(FirstReadCached(client, node), name, compute, DEFAULT_RETRIES, deadline)
    if not written["changed"]:
        return lines
    taint = decisions[-1]["taint"]
    if taint:
        return lines + ["taint %s=%s:%s added" % (taint["key"], taint["value"], taint["effect"])]
    return lines + ["gate taint removed"]


# --- the module node_write ----------------------------------------------------------------------

class WriteError(Exception):
    """Bad input or a failed write; the message names the option or the Node."""


def check_params(params):
    """The options' meaning beyond their types; WriteError naming the option."""
    mode = params["mode"]
    if not (params["node"] or "").strip():
        raise WriteError("option node must name a Node")
    if not (params["taint_key"] or "").strip():
        raise WriteError("option taint_key must not be empty")
    if params["retries"] < 1:
        raise WriteError("option retries must be at least 1 (got %d)" % params["retries"])
    if params["timeout"] <= 0:
        raise WriteError("option timeout must be more than 0 seconds (got %s)" % params["timeout"])
    if mode == "taint" and not (params["reason"] or "").strip():
        raise WriteError("option reason is required by mode taint (why the node is held back)")
    for option in ("annotations", "labels"):
        value = params[option]
        wrong = sorted(str(k) for k, v in (value or {}).items() if v is not None and not isinstance(v, str))
        if wrong:
            raise WriteError("option %s: values must be strings or null (to remove one); not so for %s"
                             % (option, ", ".join(wrong)))
    if mode == "annotate" and not params["annotations"]:
        raise WriteError("option annotations is required by mode annotate (annotation -> string, null removes it)")


def reason_annotation(params):
    return params["reason_annotation"] or params["taint_key"] + "-reason"


def device_gate(params):
    """Mode health under DRA: (the failing checks, the device settings); else (None, None). The
    options are checked here (WriteError naming them), before any request."""
    if params["mode"] != "health" or params.get("gpu_allocation", "device_plugin") != "dra":
        return None, None
    try:
        settings = gate.device_settings(params.get("device_taints"))
        split = gate.device_gate(params["results"], "dra", params["fail_on"],
                                 taint_node=params.get("device_failures_taint_node"),
                                 rdma=bool(settings["rdma_driver"]))
        gate.device_taint_rules(params["node"], split["devices"], key=params["taint_key"], settings=settings)
        return split["failing"], settings
    except gate.GateError as exc:
        raise WriteError("option results or device_taints: %s" % exc)


def decide(params, node, held=None, note=None):
    """The gate's decision from the Node as read (None for modes that decide nothing). ``held``:
    mode health under DRA, the failing checks that hold the node back (write_device_health);
    ``note``: appended to the reason (why the device taints were not written)."""
    mode = params["mode"]
    if mode not in DECIDING_MODES:
        return None
    if held is not None:
        decision = gate.decide({"checks": held, "healthy": not held}, current_taints=gate.node_view(node)["taints"],
                               effect=params["taint_effect"], key=params["taint_key"], fail_on=params["fail_on"])
        if note:
            decision["reason"] = ("%s; %s" % (decision["reason"], note)) if decision["reason"] else note
        return decision
    try:
        return gate.decide(params["results"] if mode == "health" else None,
                           current_taints=gate.node_view(node)["taints"], effect=params["taint_effect"],
                           key=params["taint_key"], fail_on=params["fail_on"],
                           reason=params["reason"] if mode == "taint" else None,
                           value=(params["taint_value"] or None) if mode == "taint" else None,
                           release=mode == "release")
    except gate.GateError as exc:
        raise WriteError("option results: %s" % exc if mode == "health" else str(exc))


def node_status(params, node):
    """node_gate_status (backend kubernetes, without simulated and drained) of the Node as given."""
    view = gate.node_view(node)
    ours = [t for t in view["taints"] if isinstance(t, dict) and t.get("key") == params["taint_key"]]
    return {"backend": "kubernetes", "node": params["node"], "cordoned": view["cordoned"],
            "taint": ours[0] if ours else None,
            "reason": view["annotations"].get(reason_annotation(params), ""),
            "taints": view["taints"], "annotations": view["annotations"], "labels": view["labels"],
            # type and status of each condition (admission: Ready, GpufleetHealthy as an earlier run left them)
            "conditions": [{"type": c.get("type"), "status": c.get("status")}
                           for c in ((node or {}).get("status") or {}).get("conditions") or [] if isinstance(c, dict)],
            "resource_version": view["resource_version"]}


def merge_patch(target, patch):
    """RFC 7386: ``patch`` applied to ``target`` (what check mode predicts)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def written_fields(node):
    """What a gate write can change (an empty taint list and no list are the same, as
    spec.unschedulable false and none: the API server drops empty fields)."""
    view = gate.node_view(node)
    return view["taints"], view["cordoned"], view["labels"], view["annotations"]


def _write(client, params, check_mode, failing=None, settings=None):
    """The guarded write of mode ``params["mode"]`` with ``client`` (``failing``, ``settings``:
    device_gate's) -> {changed, patch, attempts, node_status[, decision][, device_taints]}."""
    mode, name = params["mode"], params["node"]
    decisions, reads = [], []
    devices, held, note = None, None, None

    def compute(node):
        reads.append(node)
        decision = decide(params, node, held, note)
        decisions.append(decision)
        try:
            return gate.node_write(node, mode, decision, reason_annotation=reason_annotation(params),
                                   reason=params["reason"] if mode == "taint" else None,
                                   annotations=params["annotations"], labels=params["labels"])
        except gate.GateError as exc:
            raise WriteError("%s of Node %s: %s" % (mode, name, exc))

    if failing is not None:  # DRA: the device taints first; the node's decision depends on them
        outcome = write_device_health(client, name, failing, settings, key=params["taint_key"],
                                      taint_node=params.get("device_failures_taint_node"), dry_run=check_mode)
        held, note = outcome["held"], outcome["note"]
        devices = dict((k, outcome[k]) for k in ("rules", "create", "update", "delete", "error"))
    if check_mode:  # no write at all: what would be sent, from the Node as read
        node = client.get_node(name)
        patch = compute(node)
        outcome = {"patch": patch, "attempts": 1, "node": node,
                   "after": merge_patch(node, patch) if patch is not None else node}
    else:
        outcome = guarded_write(client, name, compute, retries=params["retries"])
        outcome["after"] = outcome["node"]
    # changed: the Node is (would be) different; the health gate always sends its labels and
    # taints, which can leave the Node as it was
    changed = outcome["patch"] is not None and written_fields(reads[-1]) != written_fields(outcome["after"])
    result = {"changed": changed, "patch": outcome["patch"], "attempts": outcome["attempts"],
              "node_status": node_status(params, outcome["node"])}
    if mode in DECIDING_MODES:
        result["decision"] = decisions[-1]
    if devices is not None:
        result["device_taints"] = devices
        result["changed"] = result["changed"] or any(devices[k] for k in ("create", "update", "delete"))
    return result


def run(params, check_mode=False, client_class=KubeconfigClient):
    """The module node_write's work: mode ``status`` reads the Node ({changed: false, patch: null,
    attempts: 1, node_status}); the other modes write it (or, in check mode, read it and return the
    patch they would send) -> {changed, patch, attempts, node_status[, decision][, device_taints]}.
    WriteError naming the option or the Node."""
    check_params(params)
    failing, settings = device_gate(params)
    mode, name = params["mode"], params["node"]
    try:
        with client_class(params["kubeconfig"], context=params["context"], timeout=params["timeout"],
                          allow_plain_http=params["allow_plain_http"]) as client:
            if mode == "status":
                return {"changed": False, "patch": None, "attempts": 1,
                        "node_status": node_status(params, client.get_node(name))}
            return _write(client, params, check_mode, failing, settings)
    except ConflictError:
        raise WriteError(
            "%s of %s was refused %d times with 409 Conflict (another writer kept changing the Node); nothing "
            "was written by this attempt" % (mode, name, params["retries"]))
    except ApiStatusError as exc:
        if exc.code == 404:
            raise WriteError("no Node named %s in the cluster of kubeconfig %s (option node)"
                             % (name, params["kubeconfig"]))
        raise WriteError("%s of %s failed: %s" % (mode, name, exc))
    except KubeError as exc:
        raise WriteError("%s of %s failed: %s" % (mode, name, exc))
