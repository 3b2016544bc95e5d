# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's Kubernetes publisher (docs/contracts.md, "Node health agent", "Kubernetes").

Per cycle, for its own Node only:

- the NodeCondition ``GpufleetHealthy`` (status True / False, reason the first failing check id
  or ``GpufleetChecksPass``, message ``id[target]: message (+N more)``), written through the
  status subresource (``PATCH /api/v1/nodes/<name>/status``, strategic merge: conditions merge by
  type, the kubelet's own conditions are untouched) when it changes or its heartbeat is older
  than ``heartbeat_seconds``;
- opt-in (``taint: true``): the gate's taint, decided by the one gate filter
  ``health_gate_patch`` (plugins/filter/health_gate.py, imported, not copied) and written with the
  Node's resourceVersion in the merge patch, redone on 409 Conflict, so another controller's
  taint written in between is never lost (as role node_gate does).

Plain urllib (no kubernetes client on the node): bearer token file and/or client certificate.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import CONDITION_TYPE, AgentError, summary_message

PASS_REASON = "GpufleetChecksPass"
WRITE_RETRIES = 5


def _utc(now):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _parse_utc(text):
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    except (TypeError, ValueError):
        return 0


class ApiStatusError(AgentError):
    def __init__(self, code, message):
        AgentError.__init__(self, "API server answered %s: %s" % (code, message))
        self.code = code


class KubeClient(object):
    """The few calls the agent makes: GET a node, PATCH a node or its status."""

    def __init__(self, server, token_file=None, ca_file=None, cert_file=None, key_file=None, timeout=10):
        if not server:
            raise AgentError("kubernetes.server is not set")
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self.context = None
        if self.server.startswith("https://"):
            self.context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
            if cert_file:
                self.context.load_cert_chain(cert_file, key_file)

    def _headers(self, content_type=None):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        if self.token_file:
            try:
                with open(self.token_file) as handle:  # re-read: projected tokens rotate
                    headers["Authorization"] = "Bearer " + handle.read().strip()
            except OSError as exc:
                raise AgentError("kubernetes.token_file %s is unreadable: %s" % (self.token_file, exc))
        return headers

    def request(self, method, path, body=None, content_type=None):
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers=self._headers(content_type))
        try:
            # urllib's opener, not ansible.module_utils.urls.open_url: the agent runs on the node
            # without Ansible (only the collection's module_utils are installed with it).
            opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.context))
            with opener.open(req, timeout=self.timeout) as answer:
                return json.loads(answer.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read().decode("utf-8")).get("message")
            except (ValueError, AttributeError):
                message = exc.reason
            raise ApiStatusError(exc.code, message)
        except (urllib.error.URLError, OSError) as exc:
            raise AgentError("API server %s unreachable: %s" % (self.server, getattr(exc, "reason", exc)))

    def node_path(self, name, status=False):
        return "/api/v1/nodes/%s%s" % (urllib.parse.quote(name, safe=""), "/status" if status else "")

    def get_node(self, name):
        return self.request("GET", self.node_path(name))

    def patch_node(self, name, body, content_type="application/merge-patch+json", status=False):
        return self.request("PATCH", self.node_path(name, status), body, content_type)


def desired_condition(healthy, failing, current=None, now=None):
    """The GpufleetHealthy condition for the node's health; lastTransitionTime kept while the
    status does not change."""
    now = time.time() if now is None else now
    status = "True" if healthy else "False"
    condition = {"type": CONDITION_TYPE, "status": status,
                 "reason": PASS_REASON if healthy else failing[0]["id"],
                 "message": summary_message(failing), "lastHeartbeatTime": _utc(now),
                 "lastTransitionTime": _utc(now)}
    if current and current.get("status") == status and current.get("lastTransitionTime"):
        condition["lastTransitionTime"] = current["lastTransitionTime"]
    return condition


def find_condition(node):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == CONDITION_TYPE:
            return condition
    return None


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
                            timeout=kube.get("timeout", 10))
        return cls(client, kube.get("node_name") or config.get("node_name"), taint=bool(kube.get("taint")),
                   taint_key=kube.get("taint_key"), taint_effect=kube.get("taint_effect") or "NoSchedule",
                   heartbeat_seconds=kube.get("heartbeat_seconds", 300))

    def publish(self, healthy, failing):
        """Lines for the journal (what changed)."""
        lines = []
        node = self.client.get_node(self.node)
        current = find_condition(node)
        now = self.clock()
        wanted = desired_condition(healthy, failing, current, now)
        same = current is not None and all(current.get(k) == wanted[k] for k in ("status", "reason", "message"))
        if not same or now - _parse_utc(current.get("lastHeartbeatTime")) >= self.heartbeat:
            self.client.patch_node(self.node, {"status": {"conditions": [wanted]}},
                                   "application/strategic-merge-patch+json", status=True)
            if not same:
                lines.append("condition %s=%s reason %s: %s" % (CONDITION_TYPE, wanted["status"], wanted["reason"],
                                                                wanted["message"]))
        if self.taint:
            lines.extend(self._taint(healthy, failing, node))
        return lines

    def _taint(self, healthy, failing, node):
        """The gate's taint through health_gate_patch, with a resourceVersion-guarded merge patch."""
        from ansible_collections.gpufleet.cluster.plugins.filter.health_gate import health_gate_patch

        result = {"checks": failing, "healthy": healthy}
        for attempt in range(WRITE_RETRIES):
            if attempt:
                node = self.client.get_node(self.node)
            current = (node.get("spec") or {}).get("taints") or []
            decision = health_gate_patch(result, current_taints=current, effect=self.taint_effect, key=self.taint_key)
            if not decision["changed_taints"]:
                return []
            body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": decision["taints"]}}
            try:
                self.client.patch_node(self.node, body)
            except ApiStatusError as exc:
                if exc.code == 409:
                    continue
                raise
            if decision["taint"]:
                return ["taint %s=%s:%s added" % (decision["taint"]["key"], decision["taint"]["value"],
                                                  decision["taint"]["effect"])]
            return ["gate taint removed"]
        raise AgentError("taint not written: the Node changed under every one of %d attempts (409 Conflict)"
                         % WRITE_RETRIES)
