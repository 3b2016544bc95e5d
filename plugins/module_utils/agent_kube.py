# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's Kubernetes publisher (docs/contracts.md, "Node health agent", "Kubernetes").

Per cycle, for its own Node only:

- the NodeCondition ``GpufleetHealthy`` (gate.condition_write: status True / False, reason the
  first failing check id or ``GpufleetChecksPass``), written through the status subresource
  (strategic merge: conditions merge by type, the kubelet's own conditions are untouched) when it
  changes or its heartbeat is older than ``heartbeat_seconds`` or dated in the future;
- opt-in (``taint: true``): the gate's taint (gate.decide, gate.node_write mode ``taints``)
  through the guarded write (kube_node.guarded_write: resourceVersion, redone on 409 Conflict),
  so another controller's taint written in between is never lost.

- with ``gpu_allocation: dra`` (and ``taint: true``): per-device health (docs/contracts.md,
  "Device taints"): a DeviceTaintRule (resource.k8s.io/v1) for each bad GPU (and RDMA device,
  where ``device_taints.rdma_driver`` names the DRA driver that publishes it), from the same
  checks after the same hysteresis; rules of devices no longer failing (recovered after the
  recovery hysteresis) are deleted; the node taint only for node-level checks (count, driver,
  fabric, ...) or, with ``device_failures_taint_node``, for any. Rules that cannot be written
  (API error) fall back to the node taint, and the journal says so (fail closed).

All requests go through kube_node.KubeClient (https only with credentials, no redirects, a hard
deadline per request: the cycle's publish deadline).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils import gate, records
from ansible_collections.gpufleet.cluster.plugins.module_utils.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube_node import (
    DEFAULT_RETRIES, STRATEGIC_MERGE_PATCH, KubeClient, KubeError, guarded_write)

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2
    from urllib import quote

desired_condition = gate.condition
LIST_RECORD = "DeviceTaintRule list"


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
    cycle converges), records.RecordError for a list it cannot read. Shared by the agent and the
    module node_write, which fall back to the node taint on any exception of it."""
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


class KubePublisher(object):
    """Condition (always), taint (opt-in) of the agent's own Node and, under DRA, device taints."""

    def __init__(self, client, node_name, taint=False, taint_key=None, taint_effect="NoSchedule",
                 heartbeat_seconds=300, clock=time.time, gpu_allocation="device_plugin",
                 device_failures_taint_node=False, device_taints=None):
        if gpu_allocation not in gate.ALLOCATIONS:
            raise gate.GateError("kubernetes.gpu_allocation=%r must be device_plugin or dra" % (gpu_allocation,))
        self.client = client
        self.node = node_name
        self.taint = taint
        self.taint_key = taint_key
        self.taint_effect = taint_effect
        self.heartbeat = heartbeat_seconds
        self.clock = clock
        self.allocation = gpu_allocation
        self.taint_node_always = bool(device_failures_taint_node)
        self.device_settings = gate.device_settings(device_taints)  # GateError naming a bad setting

    @classmethod
    def from_config(cls, config):
        kube = config.get("kubernetes") or {}
        client = KubeClient(kube.get("server"), token_file=kube.get("token_file"), ca_file=kube.get("ca_file"),
                            cert_file=kube.get("cert_file"), key_file=kube.get("key_file"),
                            timeout=kube.get("timeout", 10), allow_plain_http=bool(kube.get("allow_plain_http")))
        return cls(client, kube.get("node_name") or config.get("node_name"), taint=bool(kube.get("taint")),
                   taint_key=kube.get("taint_key"), taint_effect=kube.get("taint_effect") or "NoSchedule",
                   heartbeat_seconds=kube.get("heartbeat_seconds", 300),
                   gpu_allocation=kube.get("gpu_allocation") or "device_plugin",
                   device_failures_taint_node=bool(kube.get("device_failures_taint_node")),
                   device_taints=kube.get("device_taints"))

    def publish(self, healthy, failing, deadline=None):
        """Lines for the journal (what changed)."""
        lines = []
        node = self.client.get_node(self.node, deadline=deadline)
        patch, changed = gate.condition_write(node, healthy, failing, self.clock(), self.heartbeat)
        if patch is not None:
            self.client.patch_node(self.node, patch, STRATEGIC_MERGE_PATCH, status=True, deadline=deadline)
            if changed:
                wanted = patch["status"]["conditions"][0]
                lines.append("condition %s=%s reason %s: %s" % (CONDITION_TYPE, wanted["status"], wanted["reason"],
                                                                wanted["message"]))
        if self.taint:
            lines.extend(self._taint(healthy, failing, node, deadline))
        return lines

    def _taint(self, healthy, failing, node, deadline):
        """The gate's taint with a resourceVersion-guarded merge patch (kube_node.guarded_write);
        under DRA first the device taints, and the node taint for what holds the node back."""
        lines = []
        held = failing
        if self.allocation == "dra":
            split = gate.split_failing(failing, rdma=bool(self.device_settings["rdma_driver"]))
            try:
                rules = gate.device_taint_rules(self.node, split["devices"], key=self.taint_key,
                                                settings=self.device_settings)
                lines.extend(write_device_taints(self.client, self.node, rules, deadline)["lines"])
                held = failing if self.taint_node_always else split["node"]
            except Exception as exc:  # pylint: disable=broad-except  # any failure: fail closed
                held = failing  # a bad device nobody can see tainted takes the node out
                if split["devices"]:
                    lines.append("device taints not written (%s): the node is tainted instead" % failure_text(exc))
                else:
                    lines.append("device taint rules not reconciled (%s)" % failure_text(exc))
        return lines + self._node_taint(not held, held, node, deadline)

    def _node_taint(self, healthy, failing, node, deadline):
        result = {"checks": failing, "healthy": healthy}
        decisions = []

        def compute(current):
            decision = gate.decide(result, current_taints=(current.get("spec") or {}).get("taints") or [],
                                   effect=self.taint_effect, key=self.taint_key)
            decisions.append(decision)
            return gate.node_write(current, "taints", decision)

        written = guarded_write(_FirstReadCached(self.client, node), self.node, compute, DEFAULT_RETRIES, deadline)
        if not written["changed"]:
            return []
        decision = decisions[-1]
        if decision["taint"]:
            return ["taint %s=%s:%s added" % (decision["taint"]["key"], decision["taint"]["value"],
                                              decision["taint"]["effect"])]
        return ["gate taint removed"]


class _FirstReadCached(object):
    """The client, answering the first get_node with the Node already read this cycle (one GET
    less per cycle); later reads (after a 409) go to the server."""

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
