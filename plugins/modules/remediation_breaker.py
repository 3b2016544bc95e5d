#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: remediation_breaker
short_description: The remediation circuit breaker of a node group, and the remediation steps recorded on the Node
version_added: 0.1.0
description:
  - O(op=acquire) admits O(node) to remediation, or refuses with the reason. At most O(max_parallel) nodes
    of O(group) are in remediation at once, fleet-wide, through a C(coordination.k8s.io/v1) Lease
    C(gpufleet-remediation-<group>) in O(namespace) that holds the set of nodes in remediation, updated
    with the resourceVersion it was read at (a 409 Conflict is read and decided again); at most
    O(max_attempts) attempts per node in O(window_hours), recorded on the Node
    (annotation C(gpufleet.io/remediation-attempts)).
  - A node held by another O(controller) is not admitted; the same O(controller) re-admits it (a failed
    remediation keeps its slot) and that counts as one more attempt.
  - A refusal (breaker open, the node held by another controller, attempts exhausted, conflicts on every
    retry, an API error, an unreadable record, a clock that does not read a plausible time) is not a
    module failure; RV(admitted) is false and RV(reason) says why, and the refusal is recorded on the
    Node. The node stays isolated.
  - Records read back (the Lease's holder set, the Node's attempts and history) are read strictly
    (bounded size and depth, finite numbers, plausible times); an unreadable one refuses, names the
    record (RV(unreadable)) and is left as it is, never read as expired or empty. O(op=record) and
    O(op=release) fail on one, O(op=record) after writing the step as the last step.
  - O(op=release) takes the node out of the Lease; O(op=record) records one step on the Node
    (annotations C(gpufleet.io/remediation) and C(gpufleet.io/remediation-history)).
  - Runs where O(kubeconfig) is (delegate it to the API host), like C(gpufleet.cluster.node_write).
author:
  - gpufleet contributors (@gpufleet)
options:
  op:
    description: acquire, release or record.
    type: str
    required: true
    choices: [acquire, release, record]
  kubeconfig:
    description: Kubeconfig file on the host the module runs on.
    type: path
    required: true
  context:
    description: Context of O(kubeconfig) instead of its current one.
    type: str
  node:
    description:
      - Name of the Node, a Kubernetes object name (DNS-1123 subdomain, 1 to 253 characters of C(a-z),
        C(0-9), C(-) and C(.)); anything else fails before any request.
    type: str
    required: true
  group:
    description: The breaker's group (C(gpufleet_remediation.group)).
    type: str
    default: all
  group_size:
    description: Nodes in the group; needed when O(max_parallel) is a percentage.
    type: int
  max_parallel:
    description: Nodes of the group in remediation at once, a number or a percentage such as C(10%).
    type: str
    default: "1"
  max_attempts:
    description: Remediation attempts per node within O(window_hours).
    type: int
    default: 3
  window_hours:
    description: The attempts window (at least one second, at most 366 days).
    type: float
    default: 24
  namespace:
    description: Namespace of the Lease.
    type: str
    default: kube-system
  ttl:
    description: Seconds after which a holder that was never released frees its slot (1 to 31622400, 366 days).
    type: float
    default: 7200
  controller:
    description:
      - Who acts (recorded on the Lease and the Node), one id per run, for example
        C(ansible@<host>/<run id>) as playbooks/remediate.yml sends it. Two runs with the same id are one
        controller to the breaker (both re-admitted to a node one of them holds).
    type: str
    default: gpufleet
  step:
    description: O(op=record) - the step (drain, reset, reboot, validate, burn_in, release, isolate ...).
    type: str
  status:
    description: O(op=record) - its outcome (started, done, failed, refused, isolated ...).
    type: str
  reason:
    description: O(op=record) and O(op=release) - why, in words.
    type: str
  retries:
    description: Lease updates tried before the breaker gives up (409 Conflict on each).
    type: int
    default: 10
  timeout:
    description: Seconds per API request.
    type: float
    default: 10
  allow_plain_http:
    description: Send credentials to a plain C(http://) API server (a test double or a lab only).
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.cluster.attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; acquire reports the holders and refuses.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Ask the breaker
  gpufleet.cluster.remediation_breaker:
    op: acquire
    kubeconfig: /etc/kubernetes/admin.conf
    node: gpu-17
    group: gpu_a100
    group_size: 64
    max_parallel: "10%"
  delegate_to: "{{ gpufleet_kube_api_host }}"
  register: breaker
"""

RETURN = r"""
admitted:
  description: O(op=acquire) - the node may be remediated now.
  returned: op acquire
  type: bool
reason:
  description: Why (admitted, or the refusal's reason).
  returned: always
  type: str
unreadable:
  description: The record that could not be read and refused admission (for example
    C(Lease kube-system/gpufleet-remediation-all annotation gpufleet.io/remediation-holders)).
  returned: when a record read back is unreadable
  type: str
held_by:
  description: O(op=acquire) - the controller that holds the node, when that is not O(controller).
  returned: when the node is held by another controller
  type: str
holders:
  description: The nodes of the group in remediation (as read or written).
  returned: when known
  type: list
  elements: str
released:
  description: O(op=release) - the node is no longer in the Lease.
  returned: op release
  type: bool
"""

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation.breaker import (
    POLICY_DEFAULTS,
    Breaker,
    BreakerError,
    name_problem,
    record_step,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeconfigClient, KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

ARGUMENT_SPEC = dict(
    op=dict(type="str", required=True, choices=["acquire", "release", "record"]),
    kubeconfig=dict(type="path", required=True),
    context=dict(type="str"),
    node=dict(type="str", required=True),
    # the breaker's defaults are module_utils/remediation/breaker.py's POLICY_DEFAULTS (gpufleet_remediation's too)
    group=dict(type="str", default=POLICY_DEFAULTS["group"]),
    group_size=dict(type="int"),
    max_parallel=dict(type="str", default=str(POLICY_DEFAULTS["max_parallel"])),
    max_attempts=dict(type="int", default=POLICY_DEFAULTS["max_attempts"]),
    window_hours=dict(type="float", default=float(POLICY_DEFAULTS["window_hours"])),
    namespace=dict(type="str", default=POLICY_DEFAULTS["lease_namespace"]),
    ttl=dict(type="float", default=float(POLICY_DEFAULTS["lease_ttl_seconds"])),
    controller=dict(type="str", default="gpufleet"),
    step=dict(type="str"),
    status=dict(type="str"),
    reason=dict(type="str"),
    retries=dict(type="int", default=10),
    timeout=dict(type="float", default=10.0),
    allow_plain_http=dict(type="bool", default=False),
)


def breaker_work(module):
    params = module.params
    problem = name_problem(params["node"])
    if problem:  # before any request: "" would read the list of Nodes, "gpu-0/" is gpu-0 again
        raise ModuleFailure("remediation_breaker: %s" % problem)
    if params["op"] == "record" and not (params["step"] and params["status"]):
        raise ModuleFailure("options step and status are required by op record")
    if params["timeout"] <= 0:
        raise ModuleFailure("option timeout must be more than 0 seconds (got %s)" % params["timeout"])
    try:
        with KubeconfigClient(params["kubeconfig"], context=params["context"], timeout=params["timeout"],
                              allow_plain_http=params["allow_plain_http"]) as client:
            breaker = Breaker(client, params["group"], max_parallel=params["max_parallel"],
                              group_size=params["group_size"], max_attempts=params["max_attempts"],
                              window=params["window_hours"] * 3600.0, namespace=params["namespace"],
                              ttl=params["ttl"], controller=params["controller"], retries=params["retries"])
            if module.check_mode:
                try:
                    holders = sorted(breaker.holders(time.time()))
                except RecordError as exc:
                    return {"changed": False, "admitted": False, "released": False, "unreadable": exc.record,
                            "reason": "check mode: nothing written; breaker: %s: refused (fail closed)" % exc}
                return {"changed": False, "admitted": False, "released": False, "holders": holders,
                        "reason": "check mode: nothing written (%d of %d in remediation)" % (len(holders), breaker.limit)}
            if params["op"] == "acquire":
                outcome = breaker.acquire(params["node"])
                outcome["changed"] = bool(outcome["admitted"] or outcome.get("recorded"))
                return outcome
            if params["op"] == "release":
                outcome = breaker.release(params["node"], reason=params["reason"] or "remediation finished")
                outcome["changed"] = bool(outcome.get("held"))
                if not outcome["released"]:
                    raise ModuleFailure(outcome["reason"], **outcome)
                return outcome
            written = record_step(client, params["node"], params["step"], params["status"], params["reason"] or "",
                                  controller=params["controller"])
            if written.get("history_error") is not None:
                raise ModuleFailure("remediation_breaker: step %s %s written as the last step (gpufleet.io/remediation) "
                                    "only: %s; the history is left as it is" % (params["step"], params["status"],
                                                                                written["history_error"]),
                                    changed=True)
            return {"changed": True, "reason": params["reason"] or "", "step": params["step"],
                    "status": params["status"]}
    except (BreakerError, RecordError) as exc:
        raise ModuleFailure("remediation_breaker: %s" % exc)
    except KubeError as exc:
        raise ModuleFailure("remediation_breaker: %s of %s failed: %s" % (params["op"], params["node"], exc))


def main():
    run_module(ARGUMENT_SPEC, breaker_work)


if __name__ == "__main__":
    main()
