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

All requests go through kube_node.KubeClient (https only with credentials, no redirects, a hard
deadline per request: the cycle's publish deadline).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube_node import (
    DEFAULT_RETRIES, STRATEGIC_MERGE_PATCH, KubeClient, guarded_write)

desired_condition = gate.condition


class KubePublisher(object):
    """Condition (always) and taint (opt-in) of the agent's own Node."""

    def __init__(self, client, node_name, taint=False, taint_key=None, taint_effect="NoSchedule",
                 heartbeat_seconds=300, clock=time.time):
        self.client = client
        self.node = node_name
        self.taint = taint
        self.taint_key = taint_key
        self.taint_effect = taint_effect
        self.heartbeat = heartbeat_seconds
        self.clock = clock

    @classmethod
    def from_config(cls, config):
        kube = config.get("kubernetes") or {}
        client = KubeClient(kube.get("server"), token_file=kube.get("token_file"), ca_file=kube.get("ca_file"),
                            cert_file=kube.get("cert_file"), key_file=kube.get("key_file"),
                            timeout=kube.get("timeout", 10), allow_plain_http=bool(kube.get("allow_plain_http")))
        return cls(client, kube.get("node_name") or config.get("node_name"), taint=bool(kube.get("taint")),
                   taint_key=kube.get("taint_key"), taint_effect=kube.get("taint_effect") or "NoSchedule",
                   heartbeat_seconds=kube.get("heartbeat_seconds", 300))

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
        """The gate's taint with a resourceVersion-guarded merge patch (kube_node.guarded_write)."""
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
