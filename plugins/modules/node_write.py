#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_write
short_description: One guarded write of a Kubernetes Node (cordon, taint, release, health gate, annotations)
version_added: 0.1.0
description:
  - Reads the Node O(node), computes from what was read the JSON merge patch that carries out
    O(mode) (the gate's decision and patch of docs/contracts.md, "The gate's decision"), and sends
    it carrying the C(metadata.resourceVersion) it was computed from. When another writer changed
    the Node in between, the API server answers 409 Conflict instead of applying a patch built
    from a stale read; the Node is then read and the patch computed again, O(retries) attempts in
    all, then the module fails with nothing of this attempt written.
  - Only what changes is sent; nothing at all is sent when the Node already is as wanted (no
    change, no resourceVersion bump). Taints of other owners are kept (C(spec.taints) has no merge
    key, so the whole list is sent, with only ours replaced).
  - The write of role C(gpufleet.cluster.node_gate) (kubernetes backend) and, through the same
    C(module_utils/health/kube_node_write.py), of the node health agent.
  - Talks to the API server with Python's C(http.client) (no kubernetes client needed, only PyYAML
    to read the kubeconfig); run it where O(kubeconfig) is, for example delegated to the first
    control plane host. A bearer token or client certificate is never sent over plain C(http://)
    unless O(allow_plain_http), and redirects are never followed.
author:
  - gpufleet contributors (@gpufleet)
options:
  kubeconfig:
    description:
      - Kubeconfig file (on the host the module runs on). Its current context is used, or
        O(context). Error messages name the file, never its content.
    type: path
    required: true
  context:
    description: Context of O(kubeconfig) to use instead of its current context.
    type: str
  node:
    description: Name of the Node object.
    type: str
    required: true
  mode:
    description:
      - What to write.
      - C(cordon) sets C(spec.unschedulable).
      - C(taint) cordons, puts our taint C(<taint_key>=<value>:<taint_effect>) (value O(taint_value),
        or derived from O(reason)) and the reason annotation O(reason_annotation) in one write, so
        a held node is never tainted without being cordoned.
      - C(release) removes our taint and the reason annotation and uncordons, in one write.
      - C(health) is the health gate; from O(results) (a check failing under O(fail_on), or no
        result at all, holds the node back) it sets or removes our taint and the reason annotation,
        and sets the labels C(gpufleet.io/healthy), C(gpufleet.io/failed-check) and O(labels).
        It neither cordons nor uncordons.
      - C(annotate) sets O(annotations) (a null value removes one); other annotations are kept.
      - C(status) writes nothing; it reads the Node and returns RV(node_status) (role node_gate's
        action C(status)).
    type: str
    required: true
    choices: [cordon, taint, release, health, annotate, status]
  results:
    description:
      - Mode C(health) only. Check results (C(checks), C(summary), C(healthy), see
        docs/contracts.md), for example registered from C(gpufleet.cluster.node_validate); one dict
        or a list of them. None at all holds the node back (fail closed), as does a result that
        says C(failed) or C(healthy=false).
    type: raw
  fail_on:
    description: Mode C(health) only. C(fail) holds a node back on failing checks, C(warn) on warnings too.
    type: str
    choices: [fail, warn]
    default: fail
  taint_key:
    description: Key of our taint (tier variable C(gpufleet_gate_taint_key)).
    type: str
    default: gpufleet.io/unhealthy
  taint_effect:
    description: Effect of our taint.
    type: str
    choices: [NoSchedule, PreferNoSchedule, NoExecute]
    default: NoSchedule
  reason:
    description:
      - Mode C(taint) only, and required there. Why the node is held back; written to the
        annotation O(reason_annotation). Ignored by the other modes (C(health) derives the reason
        from O(results)).
    type: str
  taint_value:
    description:
      - Mode C(taint) only. Value of our taint, made label-safe (63 characters at most). Empty
        derives it from O(reason).
    type: str
  reason_annotation:
    description:
      - Annotation holding the full reason (modes C(taint), C(release), C(health)).
      - Default is O(taint_key) followed by C(-reason).
    type: str
  annotations:
    description:
      - Mode C(annotate) only, and required there (not empty). Annotations to set, string values;
        a null value removes the annotation.
    type: dict
  labels:
    description:
      - Mode C(health) only. Extra labels to set with the gate's labels (string values, a null
        value removes one), for example from the filter C(gpufleet.cluster.gpufleet_node_labels).
        The gate's own labels win over a label of the same name.
    type: dict
  gpu_allocation:
    description:
      - Mode C(health) only. How pods get GPUs (tier variable C(gpufleet_gpu_allocation)).
      - C(device_plugin) holds the node back on any failing check (taint), as before DRA.
      - C(dra) gives each bad device (a GPU check whose target is C(gpuN); an RDMA device check,
        when O(device_taints.rdma_driver) is set) a DeviceTaintRule (C(resource.k8s.io/v1),
        Kubernetes 1.37) carrying the check id (taint value) and message (annotation
        C(gpufleet.io/message)), deletes the rules of this node's devices that no longer fail, and
        holds the node back only for node-level checks (C(gpu.count), C(gpu.driver_version),
        C(gpu.fabric), C(gpu.nvml), C(rdma.devices), RDMA driver and modules, C(tuning.*), any
        check without a device target) or, with O(device_failures_taint_node), for any. When the
        rules cannot be written (an API error), the node is held back for every failing check and
        the reason annotation says so (fail closed).
    type: str
    choices: [device_plugin, dra]
    default: device_plugin
  device_failures_taint_node:
    description:
      - Mode C(health) with O(gpu_allocation=dra) only. Hold the node back for a bad device too
        (tier variable C(gpufleet_gate_device_failures_taint_node)); the device taints are written
        all the same.
    type: bool
    default: false
  device_taints:
    description:
      - Mode C(health) with O(gpu_allocation=dra) only. How a bad device is named in the rule's
        C(spec.deviceSelector) (docs/contracts.md, "Device taints"). Unset keys keep their default.
    type: dict
    suboptions:
      gpu_driver:
        description: DRA driver of the GPUs (C(spec.deviceSelector.driver)).
        type: str
        default: gpu.nvidia.com
      gpu_device:
        description:
          - Device name of GPU C(gpuN) (C({index}) is N). NVIDIA's DRA driver names a full GPU
            C(gpu-<minor>).
        type: str
        default: gpu-{index}
      rdma_driver:
        description:
          - DRA driver publishing the RDMA devices; unset, a failing RDMA device holds the node back.
        type: str
      rdma_device:
        description: Device name of RDMA device C({name}) (for example C(mlx5_0)).
        type: str
        default: "{name}"
      pool:
        description: Pool of the node's devices (C({node}) is the node's name).
        type: str
        default: "{node}"
      effect:
        description: Effect of the device taint.
        type: str
        choices: [NoSchedule, NoExecute, None]
        default: NoSchedule
  retries:
    description: Attempts in all when the API server answers 409 Conflict; at least 1.
    type: int
    default: 5
  timeout:
    description: Seconds each request to the API server may take, answer included.
    type: float
    default: 10
  allow_plain_http:
    description:
      - Send the kubeconfig's credentials to a plain C(http://) server. Only for a local test
        double or a lab; off, such a server is refused before any request is sent.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the Node and returns the patch it would send (RV(patch)) and C(changed=true)
        when that patch would change the Node; sends no write at all (not even a server-side dry
        run).
  diff_mode:
    support: none
    details:
      - The patch is returned in C(patch).
notes:
  - Needs PyYAML on the host it runs on (a JSON kubeconfig works without it).
  - Verified against the in-process API server double of C(tests/fake_kube_api) only.
"""

EXAMPLES = r"""
- name: Hold the node back (cordon, taint, reason annotation)
  gpufleet.cluster.node_write:
    kubeconfig: /etc/kubernetes/admin.conf
    node: gpu-node-17
    mode: taint
    reason: "validation failed: gpu.ecc.volatile_uncorrectable:gpu3"
    taint_value: gpu.ecc.volatile_uncorrectable
  delegate_to: "{{ groups['kube_control_plane'][0] }}"

- name: Health gate from node_validate results, with the description labels
  gpufleet.cluster.node_write:
    kubeconfig: /etc/kubernetes/admin.conf
    node: "{{ inventory_hostname }}"
    mode: health
    results: "{{ validation }}"
    labels: "{{ ansible_facts | gpufleet.cluster.gpufleet_node_labels(gpus=validation.gpus | default([])) }}"
  delegate_to: "{{ groups['kube_control_plane'][0] }}"
  register: gate

- name: Remove an annotation
  gpufleet.cluster.node_write:
    kubeconfig: /etc/kubernetes/admin.conf
    node: gpu-node-17
    mode: annotate
    annotations:
      gpufleet.io/upgrade-state: null
  delegate_to: "{{ groups['kube_control_plane'][0] }}"
"""

RETURN = r"""
patch:
  description:
    - The JSON merge patch sent (in check mode, the one that would be sent), carrying
      C(metadata.resourceVersion); null when nothing needed to change.
  returned: always
  type: dict
  sample: {metadata: {resourceVersion: "1042", annotations: {gpufleet.io/unhealthy-reason: "reboot required"}},
           spec: {unschedulable: true, taints: [{key: gpufleet.io/unhealthy, value: reboot-required, effect: NoSchedule}]}}
attempts:
  description: Reads of the Node (1, plus one for each 409 Conflict).
  returned: always
  type: int
  sample: 1
decision:
  description:
    - The gate's decision computed from the Node as last read (filter C(gpufleet.cluster.health_gate_patch)
      returns the same), with C(healthy), C(failed_check), C(failed_checks), C(reason), C(taint),
      C(labels), C(taints) and C(changed_taints).
  returned: when O(mode) is C(health), C(taint) or C(release)
  type: dict
  sample: {healthy: false, failed_check: gpu.ecc.volatile_uncorrectable,
           failed_checks: ["gpu.ecc.volatile_uncorrectable:gpu3"],
           reason: "validation failed: gpu.ecc.volatile_uncorrectable:gpu3",
           taint: {key: gpufleet.io/unhealthy, value: gpu.ecc.volatile_uncorrectable, effect: NoSchedule},
           labels: {gpufleet.io/failed-check: gpu.ecc.volatile_uncorrectable, gpufleet.io/healthy: "false"},
           taints: [{key: gpufleet.io/unhealthy, value: gpu.ecc.volatile_uncorrectable, effect: NoSchedule}],
           changed_taints: true}
device_taints:
  description:
    - Mode C(health) with O(gpu_allocation=dra). The DeviceTaintRules of this node wanted
      (C(rules), names), created, updated and deleted (in check mode, what would be), and
      C(error) (why they could not be written; the node is then held back instead) or null.
  returned: when O(mode) is C(health) and O(gpu_allocation) is C(dra)
  type: dict
  sample: {rules: [gpufleet-gpu-node-17-gpu-3], create: [gpufleet-gpu-node-17-gpu-3], update: [], delete: [],
           error: null}
node_status:
  description:
    - The Node after the write (as read when nothing was sent, and in check mode), in the shape of
      role node_gate's fact C(node_gate_status) (without C(simulated) and C(drained)).
  returned: success
  type: dict
  contains:
    backend:
      description: Always C(kubernetes).
      type: str
    node:
      description: Name of the Node.
      type: str
    cordoned:
      description: C(spec.unschedulable).
      type: bool
    taint:
      description: Our taint (key O(taint_key)), or null.
      type: dict
    reason:
      description: Value of the annotation O(reason_annotation), empty when there is none.
      type: str
    taints:
      description: Every taint of the Node.
      type: list
      elements: dict
    annotations:
      description: Every annotation of the Node.
      type: dict
    labels:
      description: Every label of the Node.
      type: dict
    conditions:
      description: The Node's conditions, C(type) and C(status) of each (C(Ready), C(GpufleetHealthy)).
      type: list
      elements: dict
    resource_version:
      description: C(metadata.resourceVersion).
      type: str
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.health import kube_node_write
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeconfigClient

WriteError = kube_node_write.WriteError

ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path", required=True),
    context=dict(type="str"),
    node=dict(type="str", required=True),
    mode=dict(type="str", required=True, choices=list(kube_node_write.MODES)),
    results=dict(type="raw"),
    fail_on=dict(type="str", default="fail", choices=list(gate.GATE_FAIL_ON)),
    taint_key=dict(type="str", default=gate.DEFAULT_TAINT_KEY, no_log=False),
    taint_effect=dict(type="str", default="NoSchedule", choices=list(gate.EFFECTS)),
    reason=dict(type="str"),
    taint_value=dict(type="str"),
    reason_annotation=dict(type="str"),
    annotations=dict(type="dict"),
    labels=dict(type="dict"),
    gpu_allocation=dict(type="str", default="device_plugin", choices=list(gate.ALLOCATIONS)),
    device_failures_taint_node=dict(type="bool", default=False),
    device_taints=dict(type="dict", options=dict(
        gpu_driver=dict(type="str", default=gate.DEVICE_TAINT_DEFAULTS["gpu_driver"]),
        gpu_device=dict(type="str", default=gate.DEVICE_TAINT_DEFAULTS["gpu_device"]),
        rdma_driver=dict(type="str"),
        rdma_device=dict(type="str", default=gate.DEVICE_TAINT_DEFAULTS["rdma_device"]),
        pool=dict(type="str", default=gate.DEVICE_TAINT_DEFAULTS["pool"]),
        effect=dict(type="str", default=gate.DEVICE_TAINT_DEFAULTS["effect"], choices=list(gate.DEVICE_TAINT_EFFECTS)),
    )),
    retries=dict(type="int", default=5),
    timeout=dict(type="float", default=10.0),
    allow_plain_http=dict(type="bool", default=False),
)


def run(params, check_mode=False):
    """module_utils/health/kube_node_write.run with the kubeconfig's client."""
    return kube_node_write.run(params, check_mode=check_mode, client_class=KubeconfigClient)


def write(module):
    try:
        return run(module.params, check_mode=module.check_mode)
    except WriteError as exc:
        raise ModuleFailure("node_write: %s" % exc)


def main():
    run_module(ARGUMENT_SPEC, write)


if __name__ == "__main__":
    main()
