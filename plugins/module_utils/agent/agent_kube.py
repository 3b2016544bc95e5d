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

The taint and the device taints are the one Node health write of module_utils/health/kube_node_write.py
(write_health_taints), which the module node_write calls too. All requests go through
kube_node.KubeClient (https only with credentials, no redirects, a hard
deadline per request: the cycle's publish deadline).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import CONDITION_TYPE
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import STRATEGIC_MERGE_PATCH, KubeClient
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.kube_node_write import write_health_taints

desired_condition = gate.condition


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
        if self.taint:  # the one Node health write (kube_node_write), shared with the module node_write
            lines.extend(write_health_taints(
                self.client, self.node, failing, key=self.taint_key, effect=self.taint_effect,
                allocation=self.allocation, settings=self.device_settings, taint_node=self.taint_node_always,
                node=node, deadline=deadline))
        return lines
