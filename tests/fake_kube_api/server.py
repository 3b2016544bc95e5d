"""A small in-process test double of the Kubernetes API server.

It serves what the Python kubernetes client and kubernetes.core (k8s, k8s_info, k8s_drain) need
to cordon, drain, taint and release a node, and nothing else:

- discovery: /version, /api, /api/v1, /apis, /apis/policy/v1 (APIVersions, APIGroupList,
  APIResourceList with nodes, pods, pods/eviction, poddisruptionbudgets), and the groups a GPU
  cluster of the configured version serves: coordination.k8s.io/v1 (leases) and, from 1.34,
  resource.k8s.io/v1 (DRA: deviceclasses, resourceclaims, resourceclaimtemplates, resourceslices;
  devicetaintrules from 1.37, when device taints went GA). /version answers the configured server
  version (`FakeKubeAPI(server_version="1.37.2")`; default: the tier's gpufleet_kubernetes_version)
  in the shape of a 1.33+ server (emulation and minimum compatibility versions included)
- resource.k8s.io/v1 objects put in with `add_dra()`: list (cluster-wide, or one namespace for
  resourceclaims) and get; a group or resource the configured version does not serve is 404
- resource.k8s.io/v1 devicetaintrules (cluster-scoped, KEP 5055, GA in Kubernetes 1.37: the group
  version is v1 there; alpha v1alpha3 in 1.33-1.35, beta v1beta2 in 1.36): create (POST; 409
  AlreadyExists), list (labelSelector), get, update (PUT; 409 Conflict on a stale
  metadata.resourceVersion), delete. Validated as the real server does for the fields used:
  metadata.name a DNS subdomain, spec.taint.key a qualified name, spec.taint.value a label value,
  spec.taint.effect NoSchedule, NoExecute or None (PreferNoSchedule is not a device taint effect),
  spec.taint.timeAdded set by the server when not sent; metadata.generation grows when the spec
  changes. `device_taint_outage(code)` makes every devicetaintrules request answer `code` (403:
  no RBAC for the group, 503 ...) until `end_device_taint_outage()`
- nodes/<name>/status: get, patch (only status changes; strategic merge merges status.conditions
  by type, as the real server does for NodeStatus)
- nodes: list, get, patch (application/strategic-merge-patch+json as CoreV1Api.patch_node sends
  it, application/merge-patch+json as the k8s module sends it with merge_type merge,
  application/json-patch+json); taints and annotations are validated like the real server does
  (annotations: all keys and values together at most 256 KiB in bytes, else 422 Invalid, as
  apimachinery's ValidateAnnotations; Lease writes too)
- pods: list (all namespaces or one; fieldSelector spec.nodeName / metadata.name /
  metadata.namespace, simple labelSelector), get, delete, POST pods/<name>/eviction (201 and the
  pod is gone; 429 TooManyRequests when a PodDisruptionBudget matching the pod's labels has
  status.disruptionsAllowed 0; 500 when more than one budget matches, as the real server answers)
- poddisruptionbudgets: list and get
- coordination.k8s.io/v1 leases (the remediation circuit breaker): get, create (POST; 409
  AlreadyExists when it exists), update (PUT; 409 Conflict when metadata.resourceVersion is not the
  stored one, as the real server answers), delete; `interleave_lease()` lets another writer update
  the lease before a client's PUT, `lease_outage()` makes lease requests answer 503 or no answer
- optimistic concurrency: a patch whose metadata.resourceVersion is not the stored one is refused
  with 409 Conflict, as the real server does; `interleave()` makes another writer change a node
  between a client's read and its patch; `outage()` makes it answer 503 for a node mid-run, or
  (unreachable=True) close the connection without an answer, as when the server is gone

- the generic object store (objects.py, its docstring says what it models): the built-in kinds
  Calico and the add-ons use (ServiceAccount, ConfigMap, Service, Secret, Namespace, DaemonSet,
  Deployment, RBAC, CRDs, PodDisruptionBudget writes, admission policies and webhooks) and the
  custom resources of written CRDs, with discovery; create/get/list/replace/patch/delete,
  client-side apply (merge patch) and server-side apply (field managers, conflicts, force); writes
  validated against the server version's OpenAPI schemas (kubernetes_validate), 422 Invalid like
  the real server; a write that changes nothing keeps the resourceVersion; DaemonSets and
  Deployments report ready (the double is no kubelet). `python -m fake_kube_api` serves it as a
  process (__main__.py: molecule scenarios run it as a systemd service)

The model is deliberately simple: a deleted or evicted pod disappears at once, unless it was
added with stuck=True (it then only gets metadata.deletionTimestamp, like a pod held by a
finalizer or a kubelet that never confirms). No admission, no watch, no protobuf; apply and
server-side dry run (dryRun=All) only for the generic store's kinds (the node, pod, lease and DRA
routes do not honour dryRun; the check-mode test asserts that no write at all is sent).
Objects are serialised the way the real server does it: omitempty fields (spec.unschedulable
false, empty taint lists, empty annotation maps) are dropped, metadata.resourceVersion grows on
every write, errors are Status objects with code and reason.

State lives in memory; every request is recorded in `requests` so tests can assert on what the
client sent. Start it with `FakeKubeAPI().start()` (127.0.0.1, a random port), stop with `stop()`.
"""

import base64
import copy
import datetime
import functools
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

from .nodes import decorate as realistic_node
from .objects import APPLY, ObjectStore, parse_apply_body

DEFAULT_SERVER_VERSION = TIER["gpufleet_kubernetes_version"][0]


def version_info(version):
    """/version of a kube-apiserver at ``version`` ("1.37.1" or "v1.37.1"), shaped as servers from
    1.33 answer it (curl https://<server>/version on 1.33.2 and 1.35.1, quoted in public write-ups):
    major, minor, emulationMajor/emulationMinor (the version it behaves as: its own),
    minCompatibilityMajor/minCompatibilityMinor (one minor below), then the build fields."""
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)$", str(version))
    if not match:
        raise ValueError("server_version must be X.Y.Z, got %r" % (version,))
    major, minor, patch = match.groups()
    return {
        "major": major, "minor": minor,
        "emulationMajor": major, "emulationMinor": minor,
        "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": "v%s.%s.%s" % (major, minor, patch),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-11-01T00:00:00Z",
        "goVersion": "go1.25.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


SERVER_VERSION = version_info(DEFAULT_SERVER_VERSION)

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

CORE_V1_RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": ["ns"]},
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": _VERBS,
         "shortNames": ["no"]},
        {"name": "nodes/status", "singularName": "", "namespaced": False, "kind": "Node",
         "verbs": ["get", "patch", "update"]},
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": _VERBS,
         "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy", "version": "v1",
         "kind": "Eviction", "verbs": ["create"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "patch", "update"]},
    ],
}

POLICY_V1_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "policy/v1",
    "resources": [
        {"name": "poddisruptionbudgets", "singularName": "poddisruptionbudget", "namespaced": True,
         "kind": "PodDisruptionBudget", "verbs": _VERBS, "shortNames": ["pdb"]},
        {"name": "poddisruptionbudgets/status", "singularName": "", "namespaced": True,
         "kind": "PodDisruptionBudget", "verbs": ["get", "patch", "update"]},
    ],
}

COORDINATION_V1_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "coordination.k8s.io/v1",
    "resources": [
        {"name": "leases", "singularName": "lease", "namespaced": True, "kind": "Lease", "verbs": _VERBS},
    ],
}

# resource.k8s.io/v1 (DRA, GA in 1.34): resource name -> (kind, namespaced, first minor served)
DRA_V1_RESOURCES = {
    "deviceclasses": ("DeviceClass", False, 34),
    "resourceclaims": ("ResourceClaim", True, 34),
    "resourceclaimtemplates": ("ResourceClaimTemplate", True, 34),
    "resourceslices": ("ResourceSlice", False, 34),
    "devicetaintrules": ("DeviceTaintRule", False, 37),  # KEP 5055, GA in 1.37
}
DRA_MINOR = 34


def _group(name, version="v1"):
    gv = {"groupVersion": "%s/%s" % (name, version), "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def api_groups(minor):
    """The APIGroupList of a server of Kubernetes 1.<minor> (the groups this double serves)."""
    groups = [_group("policy"), _group("coordination.k8s.io")]
    if minor >= DRA_MINOR:
        groups.append(_group("resource.k8s.io"))
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def dra_resources(minor):
    """The APIResourceList of resource.k8s.io/v1 on Kubernetes 1.<minor>."""
    resources = []
    for name, (kind, namespaced, since) in sorted(DRA_V1_RESOURCES.items()):
        if minor >= since:
            resources.append({"name": name, "singularName": kind.lower(), "namespaced": namespaced,
                              "kind": kind, "verbs": _VERBS})
            if name == "resourceclaims":
                resources.append({"name": "resourceclaims/status", "singularName": "", "namespaced": True,
                                  "kind": kind, "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "resource.k8s.io/v1",
            "resources": resources}


API_GROUPS = api_groups(int(SERVER_VERSION["minor"]))

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEVICE_TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")  # DeviceTaint.effect, resource.k8s.io/v1
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


class Unreachable(Exception):
    """The request is dropped: the connection is closed without an answer."""


class ApiError(Exception):
    """Answered as a Kubernetes Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    list_meta = None  # ListMeta of the Status (the 410 Expired of a continue token carries one)
    headers = None  # extra response headers (Retry-After of a 429)
    plain = None  # a text/plain body instead of a Status (what the API server's throttling filter writes)

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": dict(self.list_meta or {}), "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


# The real API server's bound on all of an object's annotations together: the keys and the values in
# bytes (Go len of the strings), at most TotalAnnotationSizeLimitB = 256 * (1 << 10); more is 422
# Invalid "metadata.annotations: Too long: must have at most 262144 bytes". Source: kubernetes/apimachinery,
# pkg/api/validation/objectmeta.go (ValidateAnnotations, TotalAnnotationSizeLimitB; called for every
# create and update through ValidateObjectMeta/ValidateObjectMetaUpdate), and its objectmeta_test.go
# TestValidateAnnotations (limit - 1 passes, limit + 1 fails).
TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


def _check_annotation_size(annotations, what, name, kind):
    total = sum(len(key.encode("utf-8", "surrogatepass")) + len(value.encode("utf-8", "surrogatepass"))
                for key, value in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        message = "Too long: must have at most %d bytes" % TOTAL_ANNOTATION_SIZE_LIMIT_B
        raise ApiError(422, "Invalid", "%s is invalid: metadata.annotations: %s" % (what, message),
                       {"name": name, "kind": kind, "causes": [{"reason": "FieldValueTooLong", "message": message,
                                                                "field": "metadata.annotations"}]})


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def json_merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch):
    """Strategic merge as far as Node needs it: maps merge, null deletes, lists are replaced.

    Node fields have no patchMergeKey lists that matter here (spec.taints has none: the whole
    list is replaced, as with the real server). Directives ($patch, $retainKeys,
    $deleteFromPrimitiveList) are refused rather than silently misapplied.
    """
    if isinstance(patch, dict):
        for key in patch:
            if key.startswith("$"):
                raise ApiError(422, "Invalid", "fake kube API: strategic merge directive %s not supported" % key)
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value)
        return result
    return copy.deepcopy(patch)


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", "invalid JSON pointer %r" % path)
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json_patch(target, operations):
    """RFC 6902: add, remove, replace, test (what kubernetes.core and kubectl send)."""
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        parts = _pointer(op.get("path", ""))
        if not parts:
            raise ApiError(422, "Invalid", "fake kube API: patching the whole document is not supported")
        parent = doc
        for part in parts[:-1]:
            try:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            except (KeyError, IndexError, ValueError):
                raise ApiError(422, "Invalid", "json patch: path %s does not exist" % op.get("path"))
        last = parts[-1]
        kind = op.get("op")
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, op.get("value"))
            elif kind == "remove":
                del parent[index]
            elif kind == "replace":
                parent[index] = op.get("value")
            elif kind == "test":
                if parent[index] != op.get("value"):
                    raise ApiError(422, "Invalid", "json patch test failed at %s" % op.get("path"))
            else:
                raise ApiError(422, "Invalid", "json patch op %r not supported" % kind)
        elif kind == "add":
            parent[last] = op.get("value")
        elif kind in ("remove", "replace", "test") and last not in parent:
            raise ApiError(422, "Invalid", "json patch: %s: path %s does not exist" % (kind, op.get("path")))
        elif kind == "remove":
            del parent[last]
        elif kind == "replace":
            parent[last] = op.get("value")
        elif kind == "test":
            if parent[last] != op.get("value"):
                raise ApiError(422, "Invalid", "json patch test failed at %s" % op.get("path"))
        else:
            raise ApiError(422, "Invalid", "json patch op %r not supported" % kind)
    return doc


def _matches_labels(selector, labels):
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator, values = expr["key"], expr["operator"], expr.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _parse_label_selector(text):
    terms = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            terms.append((key.strip(), "=", value.lstrip("=").strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!", None))
        else:
            terms.append((term, "exists", None))
    return terms


def _label_selector_matches(terms, labels):
    labels = labels or {}
    for key, operator, value in terms:
        if operator == "=" and labels.get(key) != value:
            return False
        if operator == "!=" and labels.get(key) == value:
            return False
        if operator == "exists" and key not in labels:
            return False
        if operator == "!" and key in labels:
            return False
    return True


POD_FIELDS = {
    "spec.nodeName": lambda pod: pod["spec"].get("nodeName", ""),
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "status.phase": lambda pod: pod.get("status", {}).get("phase", ""),
}


def _parse_field_selector(text, fields):
    terms = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        match = re.match(r"^([^!=]+)(==|=|!=)(.*)$", term)
        if not match:
            raise ApiError(400, "BadRequest", 'invalid selector: "%s"' % text)
        field, operator, value = match.groups()
        if field not in fields:
            raise ApiError(400, "BadRequest", 'field label not supported: %s' % field)
        terms.append((fields[field], operator != "!=", value))
    return terms


class FakeKubeAPI:
    """Kubernetes API server double; thread-safe in-memory state, recorded requests."""

    def __init__(self, token="gpufleet-fake-token", server_version=DEFAULT_SERVER_VERSION):
        self.token = token
        self.version = version_info(server_version)
        self.minor = int(self.version["minor"])
        self.dra = dict((name, {}) for name in DRA_V1_RESOURCES)
        self._device_taint_outage = None
        self.lock = threading.RLock()
        self.nodes = {}
        self.pods = {}
        self.pdbs = {}
        self.leases = {}
        self._lease_interleaved = {}
        self._lease_outage = None
        self.namespaces = {"default", "kube-system"}
        self.objects = ObjectStore(self)  # objects.py: built-in kinds, CRDs and their custom resources
        self.requests = []
        self._resource_version = 1000
        self._interleaved = {}
        self._outages = {}
        self._compacted_rv = 0  # continue tokens of lists older than this are expired (compact())
        self._expire_continue = 0  # the next n requests with a continue token answer 410 (expire_continue())
        self._throttle_list = (0, None)  # the next n node list GETs answer 429 (throttle_list())
        self._httpd = None
        self._thread = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, host="127.0.0.1", port=0):
        handler = type("FakeKubeAPIHandler", (_Handler,), {"api": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        # a short poll interval: stop() (shutdown) waits up to one interval
        self._thread = threading.Thread(target=functools.partial(self._httpd.serve_forever, poll_interval=0.02),
                                        name="fake-kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(5)
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def url(self):
        return "http://%s:%d" % (self._httpd.server_address[0], self.port)

    def kubeconfig(self, path):
        """Write a kubeconfig for this server (plain http, bearer token) and return its path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-admin", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-admin"}}],
            "current-context": "fake",
        }
        with open(str(path), "w") as handle:
            json.dump(config, handle, indent=2)  # JSON is YAML
        return str(path)

    # -- state -----------------------------------------------------------------------------
    def _next_rv(self):
        self._resource_version += 1
        return str(self._resource_version)

    def _metadata(self, name, namespace=None, labels=None, annotations=None):
        meta = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": self._next_rv(),
                "creationTimestamp": _now()}
        if namespace is not None:
            meta["namespace"] = namespace
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        return meta

    def add_node(self, name, labels=None, annotations=None, unschedulable=False, taints=None, realistic=False):
        """A Ready node. ``realistic``: with what a real GPU Node carries (nodes.py: image list,
        feature-discovery labels, managedFields, capacity, addresses: about 25-30 KB of JSON)."""
        with self.lock:
            labels = dict({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}, **(labels or {}))
            node = {
                "kind": "Node", "apiVersion": "v1",
                "metadata": self._metadata(name, labels=labels, annotations=annotations),
                "spec": {"podCIDR": "10.244.0.0/24"},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "kubelet is posting ready status",
                                    "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
                    "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()),
                                 "containerRuntimeVersion": "containerd://1.7.22",
                                 "kernelVersion": "6.8.0-45-generic", "kubeProxyVersion": "",
                                 "kubeletVersion": self.version["gitVersion"], "machineID": uuid.uuid4().hex,
                                 "operatingSystem": "linux", "osImage": "Ubuntu 24.04.1 LTS",
                                 "systemUUID": str(uuid.uuid4())},
                },
            }
            if unschedulable:
                node["spec"]["unschedulable"] = True
            if taints:
                node["spec"]["taints"] = [dict(t) for t in taints]
            if realistic:
                realistic_node(node, len(self.nodes), _now())
            self.nodes[name] = node
            return copy.deepcopy(node)

    def add_pod(self, name, node, namespace="default", labels=None, owner_kind="ReplicaSet", owner_name=None,
                phase="Running", volumes=None, annotations=None, stuck=False):
        """A pod bound to `node`. owner_kind None: no controller (a bare pod). stuck: evicting or
        deleting it only sets deletionTimestamp (it never goes away)."""
        with self.lock:
            self.namespaces.add(namespace)
            meta = self._metadata(name, namespace=namespace, labels=labels, annotations=annotations)
            if owner_kind:
                api_version = "apps/v1" if owner_kind in ("ReplicaSet", "DaemonSet", "StatefulSet") else "batch/v1"
                meta["ownerReferences"] = [{"apiVersion": api_version, "kind": owner_kind,
                                            "name": owner_name or "%s-owner" % name, "uid": str(uuid.uuid4()),
                                            "controller": True, "blockOwnerDeletion": True}]
            if stuck:
                meta["finalizers"] = ["gpufleet.io/fake-stuck"]
            pod = {
                "kind": "Pod", "apiVersion": "v1", "metadata": meta,
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                         "terminationGracePeriodSeconds": 30},
                "status": {"phase": phase},
            }
            if volumes:
                pod["spec"]["volumes"] = copy.deepcopy(volumes)
            self.pods[(namespace, name)] = pod
            return copy.deepcopy(pod)

    def add_pdb(self, name, match_labels, namespace="default", disruptions_allowed=0):
        with self.lock:
            self.namespaces.add(namespace)
            pdb = {
                "kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
                "metadata": self._metadata(name, namespace=namespace),
                "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(match_labels)}},
                "status": {"disruptionsAllowed": disruptions_allowed, "currentHealthy": 1, "desiredHealthy": 1,
                           "expectedPods": 1, "observedGeneration": 1},
            }
            self.pdbs[(namespace, name)] = pdb
            return copy.deepcopy(pdb)

    def add_dra(self, resource, name, spec, namespace=None):
        """Store a resource.k8s.io/v1 object (e.g. a ResourceSlice a DRA driver publishes)."""
        with self.lock:
            kind, namespaced, since = DRA_V1_RESOURCES[resource]
            if self.minor < since:
                raise ValueError("resource.k8s.io/v1 %s is not served by Kubernetes 1.%d" % (resource, self.minor))
            if namespaced != (namespace is not None):
                raise ValueError("%s is %s" % (resource, "namespaced" if namespaced else "cluster-scoped"))
            obj = {"kind": kind, "apiVersion": "resource.k8s.io/v1",
                   "metadata": self._metadata(name, namespace=namespace), "spec": copy.deepcopy(spec)}
            self.dra[resource][(namespace, name)] = obj
            return copy.deepcopy(obj)

    def _dra_get(self, method, rest):
        """GET resource.k8s.io/v1 <resource>[/<name>] or namespaces/<ns>/<resource>[/<name>]."""
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if method != "GET" or not rest or rest[0] not in DRA_V1_RESOURCES \
                or self.minor < DRA_V1_RESOURCES[rest[0]][2] or len(rest) > 2:
            return None
        resource = rest[0]
        kind, namespaced, _since = DRA_V1_RESOURCES[resource]
        if namespace is not None and not namespaced:
            return None
        with self.lock:
            store = self.dra[resource]
            if len(rest) == 1:
                items = [_list_item(obj) for (ns, _n), obj in sorted(store.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
                         if namespace is None or ns == namespace]
                return _list(kind + "List", "resource.k8s.io/v1", items, self._resource_version)
            key = (namespace if namespaced else None, rest[1])
            if key not in store or (namespaced and namespace is None):
                raise self._not_found(resource, rest[1], "resource.k8s.io")
            return copy.deepcopy(store[key])

    # -- resource.k8s.io/v1 devicetaintrules (cluster-scoped; writes) ---------------------------------
    def device_taint_outage(self, code=403):
        """Every devicetaintrules request answers `code` (403 Forbidden: the writer has no RBAC for
        the group; 503 ...) until `end_device_taint_outage()`."""
        with self.lock:
            self._device_taint_outage = code

    def end_device_taint_outage(self):
        with self.lock:
            self._device_taint_outage = None

    def device_taint_rules(self):
        """name -> stored DeviceTaintRule (copies)."""
        with self.lock:
            return dict((name, copy.deepcopy(obj)) for (_ns, name), obj in self.dra["devicetaintrules"].items())

    def _check_device_taint_outage(self, method):
        with self.lock:
            code = self._device_taint_outage
        if code is None:
            return
        if code == 403:
            verb = {"GET": "list", "POST": "create", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())
            raise ApiError(403, "Forbidden", 'devicetaintrules.resource.k8s.io is forbidden: User '
                                             '"system:serviceaccount:gpufleet:agent" cannot %s resource '
                                             '"devicetaintrules" in API group "resource.k8s.io" at the cluster scope'
                           % verb)
        reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}.get(code, "Failure")
        raise ApiError(code, reason, "the server is currently unable to handle the request")

    @staticmethod
    def _invalid_rule(name, field, value, detail):
        return ApiError(422, "Invalid", 'DeviceTaintRule.resource.k8s.io "%s" is invalid: %s: Invalid value: %s: %s'
                        % (name, field, json.dumps(value), detail),
                        {"name": name, "group": "resource.k8s.io", "kind": "DeviceTaintRule",
                         "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]})

    def _validate_device_taint_rule(self, rule, name):
        if not isinstance(rule, dict):
            raise ApiError(400, "BadRequest", "DeviceTaintRule must be a JSON object")
        meta = rule.get("metadata") or {}
        if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise self._invalid_rule(name, "metadata.name", name, "a lowercase RFC 1123 subdomain must consist of "
                                     "lower case alphanumeric characters, '-' or '.'")
        if meta.get("namespace"):
            raise ApiError(400, "BadRequest", "DeviceTaintRule is cluster-scoped: metadata.namespace must be empty")
        for field in ("labels", "annotations"):
            value = meta.get(field) or {}
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ApiError(400, "BadRequest", "metadata.%s: values must be strings" % field)
        for key, value in (meta.get("labels") or {}).items():
            if not _QUALIFIED_NAME.match(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
                raise self._invalid_rule(name, "metadata.labels", value, "a valid label must be 63 characters or less")
        spec = rule.get("spec")
        if not isinstance(spec, dict):
            raise self._invalid_rule(name, "spec", spec, "Required value")
        selector = spec.get("deviceSelector")
        if selector is not None:
            if not isinstance(selector, dict) or set(selector) - {"driver", "pool", "device"}:
                raise ApiError(400, "BadRequest", 'strict decoding error: unknown field in spec.deviceSelector '
                                                  '(known: driver, pool, device)')
        taint = spec.get("taint")
        if not isinstance(taint, dict):
            raise self._invalid_rule(name, "spec.taint", taint, "Required value")
        key, value, effect = taint.get("key"), taint.get("value", ""), taint.get("effect")
        if not isinstance(key, str) or not _QUALIFIED_NAME.match(key):
            raise self._invalid_rule(name, "spec.taint.key", key, "name part must consist of alphanumeric characters")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise self._invalid_rule(name, "spec.taint.value", value, "a valid label must be an empty string or "
                                     "consist of alphanumeric characters, '-', '_' or '.' (63 at most)")
        if effect not in DEVICE_TAINT_EFFECTS:
            raise ApiError(422, "Invalid", 'DeviceTaintRule.resource.k8s.io "%s" is invalid: spec.taint.effect: '
                           'Unsupported value: %s: supported values: "NoExecute", "NoSchedule", "None"'
                           % (name, json.dumps(effect)))

    def _stored_device_taint_rule(self, rule, name, current=None):
        stored = copy.deepcopy(rule)
        stored["kind"], stored["apiVersion"] = "DeviceTaintRule", "resource.k8s.io/v1"
        meta = stored.setdefault("metadata", {})
        meta["name"] = name
        for field in ("labels", "annotations"):
            if not meta.get(field):
                meta.pop(field, None)
        taint = stored["spec"]["taint"]
        if not taint.get("value"):
            taint.pop("value", None)
        if current is None:
            meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": _now(), "generation": 1})
        else:
            for key in ("uid", "creationTimestamp"):
                meta[key] = current["metadata"][key]
            changed = stored["spec"] != current["spec"]
            meta["generation"] = current["metadata"].get("generation", 1) + (1 if changed else 0)
        # "Added automatically during create or update if not set" (DeviceTaint.timeAdded)
        taint.setdefault("timeAdded", _now())
        stored.pop("status", None)
        if current is not None and current.get("status"):
            stored["status"] = copy.deepcopy(current["status"])
        meta["resourceVersion"] = self._next_rv()
        return stored

    def create_device_taint_rule(self, body):
        with self.lock:
            name = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
            if not name:
                raise ApiError(422, "Invalid", "DeviceTaintRule.resource.k8s.io is invalid: metadata.name: Required value")
            self._validate_device_taint_rule(body, name)
            if (None, name) in self.dra["devicetaintrules"]:
                raise ApiError(409, "AlreadyExists", 'devicetaintrules.resource.k8s.io "%s" already exists' % name,
                               {"name": name, "group": "resource.k8s.io", "kind": "devicetaintrules"})
            if (body.get("metadata") or {}).get("resourceVersion"):
                raise ApiError(500, "InternalError", "resourceVersion should not be set on objects to be created")
            self.dra["devicetaintrules"][(None, name)] = self._stored_device_taint_rule(body, name)
            return copy.deepcopy(self.dra["devicetaintrules"][(None, name)])

    def update_device_taint_rule(self, name, body):
        with self.lock:
            current = self.dra["devicetaintrules"].get((None, name))
            if current is None:
                raise self._not_found("devicetaintrules", name, "resource.k8s.io")
            if ((body or {}).get("metadata") or {}).get("name") != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)"
                               % (((body or {}).get("metadata") or {}).get("name"), name))
            self._validate_device_taint_rule(body, name)
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
            if not wanted_rv:
                raise self._invalid_rule(name, "metadata.resourceVersion", "", "must be specified for an update")
            if wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on devicetaintrules.resource.k8s.io "%s": '
                               "the object has been modified; please apply your changes to the latest version and "
                               "try again" % name, {"name": name, "group": "resource.k8s.io", "kind": "devicetaintrules"})
            self.dra["devicetaintrules"][(None, name)] = self._stored_device_taint_rule(body, name, current)
            return copy.deepcopy(self.dra["devicetaintrules"][(None, name)])

    def delete_device_taint_rule(self, name):
        with self.lock:
            current = self.dra["devicetaintrules"].pop((None, name), None)
            if current is None:
                raise self._not_found("devicetaintrules", name, "resource.k8s.io")
            return current  # the real server answers a deleted object without finalizers with the object

    def _device_taint_rules_route(self, method, rest, query, body):
        """resource.k8s.io/v1 devicetaintrules[/<name>]: the writes and the label-selected list (plain
        GETs go through _dra_get). None when the request is not one of these."""
        if self.minor < DRA_V1_RESOURCES["devicetaintrules"][2] or not rest or rest[0] != "devicetaintrules" \
                or len(rest) > 2:
            return None
        self._check_device_taint_outage(method)
        if len(rest) == 1 and method == "POST":
            return 201, self.create_device_taint_rule(body)
        if len(rest) == 1 and method == "GET":
            terms = _parse_label_selector(query.get("labelSelector", ""))
            with self.lock:
                items = [_list_item(obj) for (_ns, _n), obj in sorted(self.dra["devicetaintrules"].items(),
                                                                     key=lambda kv: kv[0][1])
                         if _label_selector_matches(terms, obj["metadata"].get("labels"))]
                return 200, _list("DeviceTaintRuleList", "resource.k8s.io/v1", items, self._resource_version)
        if len(rest) == 2 and method == "PUT":
            return 200, self.update_device_taint_rule(rest[1], body)
        if len(rest) == 2 and method == "DELETE":
            return 200, self.delete_device_taint_rule(rest[1])
        return None

    def interleave(self, node, writer, times=1, content_type=None):
        """A concurrent writer: before each of the next `times` PATCH requests to `node`, call
        `writer(api)` (e.g. another controller adding its taint). It lands between the client's read
        and its write, so a patch that carries the resourceVersion it read gets 409 Conflict, and a
        patch without one overwrites what the writer did (the lost update this double can show).
        content_type: only before patches of that type (e.g. the merge patches of the taint write,
        not the strategic-merge cordon of k8s_drain)."""
        with self.lock:
            self._interleaved[node] = [writer, times, content_type]

    def _run_interleaved(self, node, content_type):
        with self.lock:
            entry = self._interleaved.get(node)
            if not entry or entry[1] <= 0 or entry[2] not in (None, content_type):
                return
            entry[1] -= 1
            entry[0](self)

    def outage(self, node, after_patches=0, unreachable=False):
        """The API server becomes unavailable for `node` once `after_patches` more PATCH requests
        to it have been answered: from then on every request naming the node (its URL, or a
        fieldSelector/labelSelector mentioning it) gets 503 ServiceUnavailable, or with
        `unreachable` no answer at all (the connection is closed, as by a server or load balancer
        that went away), until `end_outage(node)`. Models an API server that goes away in the
        middle of a run."""
        with self.lock:
            self._outages[node] = {"patches_left": after_patches, "unreachable": unreachable}

    def end_outage(self, node):
        with self.lock:
            self._outages.pop(node, None)

    def _check_outage(self, method, path, query):
        with self.lock:
            for node, outage in self._outages.items():
                mentioned = path.endswith("/nodes/" + node) or any(node in str(v).split("=")[-1:] for v in query.values())
                if not mentioned:
                    continue
                if outage["patches_left"] > 0:
                    if method == "PATCH":
                        outage["patches_left"] -= 1
                    continue
                if outage["unreachable"]:
                    raise Unreachable()
                raise ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")

    # -- leases (coordination.k8s.io/v1) ------------------------------------------------------
    def lease(self, namespace, name):
        with self.lock:
            return copy.deepcopy(self.leases.get((namespace, name)))

    def interleave_lease(self, namespace, name, writer, times=1):
        """Before each of the next `times` PUTs of the lease, call `writer(api)` (another controller
        updating it): a PUT carrying the resourceVersion its client read then gets 409 Conflict."""
        with self.lock:
            self._lease_interleaved[(namespace, name)] = [writer, times]

    def lease_outage(self, unreachable=False, code=503):
        """Every lease request answers `code` (503, 500 ...) or, with `unreachable`, nothing, until
        `end_lease_outage()`."""
        with self.lock:
            self._lease_outage = {"unreachable": unreachable, "code": code}

    def end_lease_outage(self):
        with self.lock:
            self._lease_outage = None

    def _check_lease_outage(self):
        with self.lock:
            outage = self._lease_outage
        if outage is None:
            return
        if outage["unreachable"]:
            raise Unreachable()
        reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}.get(outage["code"], "Failure")
        raise ApiError(outage["code"], reason, "the server is currently unable to handle the request")

    def _lease_conflict(self, name):
        return ApiError(409, "Conflict", 'Operation cannot be fulfilled on leases.coordination.k8s.io "%s": the object '
                                         "has been modified; please apply your changes to the latest version and try "
                                         "again" % name, {"name": name, "group": "coordination.k8s.io", "kind": "leases"})

    def _validate_lease(self, lease, namespace, name):
        if not isinstance(lease, dict):
            raise ApiError(400, "BadRequest", "lease must be a JSON object")
        meta = lease.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)"
                           % (meta.get("name"), name))
        if meta.get("namespace") not in (None, namespace):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                              "sent on the request")
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            raise ApiError(400, "BadRequest", "metadata.annotations: values must be strings")
        _check_annotation_size(annotations, 'Lease.coordination.k8s.io "%s"' % name, name, "Lease")
        spec = lease.get("spec") or {}
        if not isinstance(spec, dict):
            raise ApiError(400, "BadRequest", "spec must be an object")
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds")
        if holder is not None and not isinstance(holder, str):
            raise ApiError(400, "BadRequest", "spec.holderIdentity must be a string")
        if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0):
            raise ApiError(422, "Invalid", 'Lease.coordination.k8s.io "%s" is invalid: spec.leaseDurationSeconds: '
                                           "Invalid value: %r: must be greater than 0" % (name, duration))

    def _stored_lease(self, lease, namespace, name, current=None):
        stored = copy.deepcopy(lease)
        stored["kind"], stored["apiVersion"] = "Lease", "coordination.k8s.io/v1"
        meta = stored.setdefault("metadata", {})
        meta["namespace"] = namespace
        if current is None:
            meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": _now()})
        else:
            for key in ("uid", "creationTimestamp"):
                meta[key] = current["metadata"][key]
        if not meta.get("annotations"):
            meta.pop("annotations", None)
        stored.setdefault("spec", {})
        meta["resourceVersion"] = self._next_rv()
        return stored

    def create_lease(self, namespace, body):
        with self.lock:
            if namespace not in self.namespaces:
                raise self._not_found("namespaces", namespace)
            name = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
            if not name:
                raise ApiError(422, "Invalid", "Lease.coordination.k8s.io is invalid: metadata.name: Required value")
            self._validate_lease(body, namespace, name)
            if (namespace, name) in self.leases:
                raise ApiError(409, "AlreadyExists", 'leases.coordination.k8s.io "%s" already exists' % name,
                               {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
            if (body.get("metadata") or {}).get("resourceVersion"):
                raise ApiError(500, "InternalError", "resourceVersion should not be set on objects to be created")
            self.leases[(namespace, name)] = self._stored_lease(body, namespace, name)
            return copy.deepcopy(self.leases[(namespace, name)])

    def update_lease(self, namespace, name, body):
        with self.lock:
            entry = self._lease_interleaved.get((namespace, name))
            if entry and entry[1] > 0:
                entry[1] -= 1
                entry[0](self)
            current = self.leases.get((namespace, name))
            if current is None:
                raise self._not_found("leases", name, "coordination.k8s.io")
            self._validate_lease(body, namespace, name)
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
            # Lease allows an unconditional update (no resourceVersion); a stale one is a conflict
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise self._lease_conflict(name)
            self.leases[(namespace, name)] = self._stored_lease(body, namespace, name, current)
            return copy.deepcopy(self.leases[(namespace, name)])

    def delete_lease(self, namespace, name):
        with self.lock:
            if (namespace, name) not in self.leases:
                raise self._not_found("leases", name, "coordination.k8s.io")
            del self.leases[(namespace, name)]
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    def node(self, name):
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def pod_names(self, node=None):
        with self.lock:
            return sorted("%s/%s" % key for key, pod in self.pods.items()
                          if node is None or pod["spec"].get("nodeName") == node)

    def recorded(self, method=None, path_contains=None):
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r["method"] == method)
                    and (path_contains is None or path_contains in r["path"])]

    # -- behaviour -------------------------------------------------------------------------
    @staticmethod
    def _not_found(resource, name, group=""):
        return ApiError(404, "NotFound", '%s%s "%s" not found' % (resource, "." + group if group else "", name),
                        {"name": name, "group": group, "kind": resource})

    def _validate_node(self, node, name):
        causes = []
        if node.get("metadata", {}).get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)"
                           % (node.get("metadata", {}).get("name"), name))
        annotations = node["metadata"].get("annotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            raise ApiError(400, "BadRequest", "metadata.annotations: values must be strings")
        _check_annotation_size(annotations, 'Node "%s"' % name, name, "Node")
        taints = node.get("spec", {}).get("taints") or []
        if not isinstance(taints, list):
            raise ApiError(400, "BadRequest", "spec.taints must be a list")
        seen = set()
        for index, taint in enumerate(taints):
            field = "spec.taints[%d]" % index
            key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
            if not isinstance(key, str) or not _QUALIFIED_NAME.match(key):
                causes.append({"reason": "FieldValueInvalid", "field": field + ".key",
                               "message": "Invalid value: %r: name part must consist of alphanumeric characters" % key})
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                causes.append({"reason": "FieldValueInvalid", "field": field + ".value",
                               "message": "Invalid value: %r: a valid label must be an empty string or consist of "
                                          "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                          "alphanumeric character (63 characters at most)" % (value,)})
            if effect not in TAINT_EFFECTS:
                causes.append({"reason": "FieldValueNotSupported", "field": field + ".effect",
                               "message": 'Unsupported value: "%s": supported values: "%s"'
                                          % (effect, '", "'.join(TAINT_EFFECTS))})
            if (key, effect) in seen:
                causes.append({"reason": "FieldValueDuplicate", "field": field,
                               "message": "Duplicate value: taints must be unique by key and effect pair"})
            seen.add((key, effect))
        if causes:
            raise ApiError(422, "Invalid", 'Node "%s" is invalid: %s' % (name, "; ".join(
                "%s: %s" % (c["field"], c["message"]) for c in causes)),
                {"name": name, "kind": "Node", "causes": causes})

    @staticmethod
    def _omit_empty(node):
        """What the real server's omitempty serialisation does to the fields patches touch."""
        meta = node["metadata"]
        for key in ("annotations", "labels"):
            if key in meta and not meta[key]:
                del meta[key]
        spec = node.setdefault("spec", {})
        if not spec.get("unschedulable"):
            spec.pop("unschedulable", None)
        if "taints" in spec and not spec["taints"]:
            del spec["taints"]

    # -- the node list, in pages --------------------------------------------------------------
    def compact(self):
        """What etcd's compaction does to lists read in pages: every continue token handed out so far
        is expired (410 Gone, reason Expired, with an inconsistent continue token), a new list works."""
        with self.lock:
            self._resource_version += 1
            self._compacted_rv = self._resource_version

    def throttle_list(self, times=1, retry_after="1"):
        """The next ``times`` GETs of the node list answer 429, as the API server's throttling does
        (API Priority and Fairness / max-in-flight: k8s.io/apiserver pkg/server/filters, tooManyRequests:
        header Retry-After, a text/plain body "Too many requests, please try again later."; client-go
        waits Retry-After seconds and retries, rest/request.go checkWait). ``retry_after`` None: no
        header. 0 ends it."""
        with self.lock:
            self._throttle_list = (int(times), retry_after)

    def expire_continue(self, times=1):
        """The next ``times`` requests with a continue token answer 410 Gone / Expired (None: every
        one from now on, a token that keeps expiring); 0 ends it."""
        with self.lock:
            self._expire_continue = -1 if times is None else int(times)

    @staticmethod
    def _continue_token(list_rv, start):
        # shaped like the real token (apiserver storage.EncodeContinue: base64 of
        # {"v":"meta.k8s.io/v1","rv":<list rv>,"start":<next key>}); opaque to clients
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": start}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @staticmethod
    def _decode_continue(token):
        try:
            padded = token + "=" * (-len(token) % 4)
            value = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
            if value.get("v") != "meta.k8s.io/v1" or not isinstance(value.get("start"), str) \
                    or isinstance(value.get("rv"), bool) or not isinstance(value.get("rv"), int):
                raise ValueError("unknown version or fields")
            return value["rv"], value["start"]
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ApiError(400, "BadRequest", "continue key is not valid: %s" % exc)

    def list_nodes(self, query):
        """GET /api/v1/nodes[?labelSelector=][&limit=N][&continue=T], as the real server pages a list:
        items in name order (etcd key order), at most ``limit``; ``metadata.continue`` the opaque token
        of the next page (absent on the last), ``metadata.remainingItemCount`` the Nodes after this page
        (only without a selector, as the real server). A token whose list is older than the last
        compact(), or while expire_continue() holds, is 410 Gone, reason Expired, the Status carrying an
        inconsistent continue token from which the rest can still be read (apiserver storage,
        handleCompactedErrorForPaging). Pages are read from the current state (no MVCC): Nodes written
        between pages show up as in the real server's inconsistent continuation."""
        with self.lock:
            times, retry_after = self._throttle_list
            if times:
                self._throttle_list = (times - 1, retry_after)
                throttled = ApiError(429, "TooManyRequests", "Too many requests, please try again later.")
                throttled.plain = "Too many requests, please try again later.\n"
                throttled.headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
                raise throttled
            selector = query.get("labelSelector", "")
            labels = _parse_label_selector(selector)
            raw_limit = query.get("limit", "")
            try:
                limit = int(raw_limit) if raw_limit != "" else 0
                if limit < 0:
                    raise ValueError(raw_limit)
            except ValueError:
                raise ApiError(400, "BadRequest", "limit: Invalid value: %r: must be a non-negative integer" % raw_limit)
            token = query.get("continue", "")
            list_rv, start = self._resource_version, ""
            if token:
                list_rv, start = self._decode_continue(token)
                if self._expire_continue or 0 <= list_rv < self._compacted_rv:
                    if self._expire_continue > 0:
                        self._expire_continue -= 1
                    expired = ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                       "consistent list result. You can start a new list without the continue "
                                       "parameter, or use the continue token in this response to retrieve the "
                                       "remainder of the results. Continuing with the provided token results in an "
                                       "inconsistent list - objects that were created, modified, or deleted between "
                                       "the time the first chunk was returned and now may show up in the list.")
                    expired.list_meta = {"continue": self._continue_token(-1, start)}
                    raise expired
                if list_rv == -1:  # an inconsistent token: the rest at the current version
                    list_rv = self._resource_version
            names = [name for name in sorted(self.nodes) if name >= start
                     and _label_selector_matches(labels, self.nodes[name]["metadata"].get("labels"))]
            page = names[:limit] if limit else names
            metadata = {"resourceVersion": str(list_rv)}
            if limit and len(names) > limit:
                metadata["continue"] = self._continue_token(list_rv, names[limit])
                if not selector:
                    metadata["remainingItemCount"] = len(names) - limit
            # serialised here, under the lock: a Node is dumped once per page, never deep-copied (a
            # realistic Node is tens of KB, a page of 500 of them some MB)
            head = json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": metadata})[:-1]
            parts = [json.dumps(dict((k, v) for k, v in self.nodes[name].items() if k not in ("kind", "apiVersion")))
                     for name in page]
            return _Serialised(("%s, \"items\": [%s]}" % (head, ", ".join(parts))).encode())

    def get_node(self, name):
        """A copy of Node ``name`` (GET of the node and of its status subresource)."""
        with self.lock:
            if name not in self.nodes:
                raise self._not_found("nodes", name)
            return copy.deepcopy(self.nodes[name])

    def patch_node(self, name, content_type, body):
        with self.lock:
            if name not in self.nodes:
                raise self._not_found("nodes", name)
            current = self.nodes[name]
            if content_type == "application/json-patch+json":
                patched = json_patch(current, body)
            elif content_type == "application/merge-patch+json":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "merge patch must be a JSON object")
                patched = json_merge_patch(current, body)
            elif content_type == "application/strategic-merge-patch+json":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "strategic merge patch must be a JSON object")
                patched = strategic_merge_patch(current, body)
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types include: "
                               + ", ".join(PATCH_TYPES))
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on nodes "%s": the object has been '
                                                "modified; please apply your changes to the latest version and try "
                                                "again" % name, {"name": name, "kind": "nodes"})
            for immutable in ("uid", "creationTimestamp"):
                patched["metadata"][immutable] = current["metadata"][immutable]
            patched["kind"], patched["apiVersion"] = "Node", "v1"
            self._validate_node(patched, name)
            self._omit_empty(patched)
            probe_old = copy.deepcopy(current)
            probe_old["metadata"].pop("resourceVersion")
            probe_new = copy.deepcopy(patched)
            probe_new["metadata"].pop("resourceVersion", None)
            if probe_old == probe_new:  # a no-op patch does not bump resourceVersion
                patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            else:
                patched["metadata"]["resourceVersion"] = self._next_rv()
            self.nodes[name] = patched
            return copy.deepcopy(patched)

    def patch_node_status(self, name, content_type, body):
        with self.lock:
            if name not in self.nodes:
                raise self._not_found("nodes", name)
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "patch must be a JSON object")
            current = self.nodes[name]
            status = (body.get("status") or {}) if isinstance(body.get("status"), dict) else {}
            conditions = status.get("conditions")
            if content_type == "application/strategic-merge-patch+json" and isinstance(conditions, list):
                merged = [dict(c) for c in current.get("status", {}).get("conditions") or []]
                for condition in conditions:
                    for index, old in enumerate(merged):
                        if old.get("type") == condition.get("type"):
                            merged[index] = dict(old, **condition)
                            break
                    else:
                        merged.append(dict(condition))
                status = dict(status, conditions=merged)
            meta = {"resourceVersion": (body.get("metadata") or {}).get("resourceVersion")}
            only_status = {"status": status, "metadata": {k: v for k, v in meta.items() if v}}
            kind = content_type if content_type != "application/strategic-merge-patch+json" else \
                "application/merge-patch+json"
            return self.patch_node(name, kind, only_status)

    def _pdbs_for(self, pod):
        namespace = pod["metadata"]["namespace"]
        return [pdb for (ns, _), pdb in sorted(self.pdbs.items())
                if ns == namespace and _matches_labels(pdb["spec"].get("selector") or {}, pod["metadata"].get("labels"))]

    def _remove_pod(self, key, grace_period=None):
        pod = self.pods[key]
        if pod["metadata"].get("finalizers"):
            pod["metadata"].setdefault("deletionTimestamp", _now())
            pod["metadata"]["deletionGracePeriodSeconds"] = (
                grace_period if grace_period is not None else pod["spec"].get("terminationGracePeriodSeconds", 30))
            pod["metadata"]["resourceVersion"] = self._next_rv()
            return copy.deepcopy(pod)
        del self.pods[key]
        gone = copy.deepcopy(pod)
        gone["metadata"]["deletionTimestamp"] = _now()
        return gone

    def evict(self, namespace, name, body):
        with self.lock:
            key = (namespace, name)
            if key not in self.pods:
                raise self._not_found("pods", name)
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "eviction body must be a JSON object")
            body_name = (body.get("metadata") or {}).get("name")
            if body_name and body_name != name:
                raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
            pod = self.pods[key]
            delete_options = body.get("deleteOptions") or {}
            grace = delete_options.get("gracePeriodSeconds")
            if pod["metadata"].get("deletionTimestamp"):
                # Already terminating: the real server lets the eviction through.
                self._remove_pod(key, grace)
                return
            if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                pdbs = self._pdbs_for(pod)
                if len(pdbs) > 1:
                    raise ApiError(500, "InternalError",
                                   "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                   "does not support.")
                if pdbs:
                    pdb = pdbs[0]
                    status = pdb.setdefault("status", {})
                    if status.get("disruptionsAllowed", 0) <= 0:
                        raise ApiError(
                            429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                            {"causes": [{"reason": "DisruptionBudget",
                                         "message": "The disruption budget %s needs %d healthy pods and has %d currently"
                                                    % (pdb["metadata"]["name"], status.get("desiredHealthy", 1),
                                                       status.get("currentHealthy", 1))}]})
                    status["disruptionsAllowed"] -= 1
                    pdb["metadata"]["resourceVersion"] = self._next_rv()
            self._remove_pod(key, grace)

    def delete_pod(self, namespace, name, body):
        with self.lock:
            key = (namespace, name)
            if key not in self.pods:
                raise self._not_found("pods", name)
            grace = body.get("gracePeriodSeconds") if isinstance(body, dict) else None
            return self._remove_pod(key, grace)

    def list_pods(self, namespace, query):
        with self.lock:
            fields = _parse_field_selector(query.get("fieldSelector", ""), POD_FIELDS)
            labels = _parse_label_selector(query.get("labelSelector", ""))
            items = []
            for (ns, _), pod in sorted(self.pods.items()):
                if namespace is not None and ns != namespace:
                    continue
                if not all((get(pod) == value) == equal for get, equal, value in fields):
                    continue
                if not _label_selector_matches(labels, pod["metadata"].get("labels")):
                    continue
                items.append(_list_item(pod))
            return _list("PodList", "v1", items, self._resource_version)


class _Serialised:
    """An answer already serialised (a page of the node list: each Node is dumped once, not copied)."""

    def __init__(self, data):
        self.data = data

    def json(self):
        return json.loads(self.data)


def _list_item(obj):
    item = copy.deepcopy(obj)
    item.pop("kind", None)
    item.pop("apiVersion", None)
    return item


def _list(kind, api_version, items, resource_version):
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(resource_version)},
            "items": items}


class _Handler(BaseHTTPRequestHandler):
    api = None  # set on the subclass made by FakeKubeAPI.start
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver/1.31"

    def log_message(self, format, *args):  # noqa: A002 - quiet; requests are recorded instead
        pass

    def _send(self, code, body):
        data = body.data if isinstance(body, _Serialised) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_plain(self, code, text, headers=None):
        data = text.encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() == APPLY:
                return parse_apply_body(raw)  # an apply patch is YAML (JSON is YAML)
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "request body is not valid JSON")

    def _handle(self, method):
        split = urlsplit(self.path)
        path = unquote(split.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        record = {"method": method, "path": path, "query": query, "content_type": content_type, "body": None}
        code = 500
        try:
            body = self._body() if method in ("POST", "PATCH", "PUT", "DELETE") else None
            record["body"] = body
            if self.headers.get("Authorization") != "Bearer %s" % self.api.token:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self.api._check_outage(method, path, query)
            code, answer = self._route(method, path, query, content_type, body,
                                       self.headers.get("User-Agent") or "")
        except Unreachable:
            record["status"] = None  # dropped: no answer
            with self.api.lock:
                self.api.requests.append(record)
            self.close_connection = True
            return
        except ApiError as exc:
            if exc.plain is not None:
                record["status"] = exc.code
                with self.api.lock:
                    self.api.requests.append(record)
                self._send_plain(exc.code, exc.plain, exc.headers)
                return
            code, answer = exc.code, exc.status()
        except Exception as exc:  # a bug in the double must show up as a 500, not a hang
            code, answer = 500, ApiError(500, "InternalError", "fake kube API: %r" % exc).status()
        record["status"] = code
        with self.api.lock:
            self.api.requests.append(record)
        self._send(code, answer)

    def do_GET(self):
        self._handle("GET")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PUT(self):
        self._handle("PUT")

    def _route(self, method, path, query, content_type, body, user_agent=""):
        api = self.api
        parts = path.strip("/").split("/") if path != "/" else []
        if method == "GET" and path == "/version":
            return 200, api.version
        if method == "GET" and path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % api.port}]}
        if method == "GET" and path == "/api/v1":
            listed = {r["name"] for r in CORE_V1_RESOURCES["resources"]}
            return 200, dict(CORE_V1_RESOURCES, resources=CORE_V1_RESOURCES["resources"] + [
                r for r in api.objects.resource_list("", "v1")["resources"] if r["name"] not in listed])
        if method == "GET" and path == "/apis":
            groups = api_groups(api.minor)
            served = {g["name"] for g in groups["groups"]}
            for name, versions in sorted(api.objects.group_versions().items()):
                if name not in served:
                    gvs = [{"groupVersion": "%s/%s" % (name, v), "version": v} for v in versions]
                    groups["groups"].append({"name": name, "versions": gvs, "preferredVersion": gvs[0]})
            return 200, groups
        if method == "GET" and path == "/apis/policy":
            return 200, dict(_group("policy"), kind="APIGroup", apiVersion="v1")
        if method == "GET" and path == "/apis/policy/v1":
            return 200, POLICY_V1_RESOURCES
        if method == "GET" and path == "/apis/coordination.k8s.io":
            return 200, dict(_group("coordination.k8s.io"), kind="APIGroup", apiVersion="v1")
        if method == "GET" and path == "/apis/coordination.k8s.io/v1":
            return 200, COORDINATION_V1_RESOURCES
        if parts[:2] == ["apis", "resource.k8s.io"] and api.minor >= DRA_MINOR:
            if method == "GET" and len(parts) == 2:
                return 200, dict(_group("resource.k8s.io"), kind="APIGroup", apiVersion="v1")
            if method == "GET" and len(parts) == 3 and parts[2] == "v1":
                return 200, dra_resources(api.minor)
            if parts[2:3] == ["v1"]:
                written = api._device_taint_rules_route(method, parts[3:], query, body)
                if written is not None:
                    return written
                answer = api._dra_get(method, parts[3:])
                if answer is not None:
                    return 200, answer

        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            if rest == ["nodes"] and method == "GET":
                return 200, api.list_nodes(query)
            if len(rest) == 3 and rest[0] == "nodes" and rest[2] == "status":
                # the status subresource: only status changes (spec and metadata other than
                # resourceVersion are ignored, as by the real server); strategic merge merges
                # status.conditions by type (patchMergeKey), as NodeStatus declares
                name = rest[1]
                if method == "GET":
                    return 200, api.get_node(name)
                if method == "PATCH":
                    return 200, api.patch_node_status(name, content_type, body)
            if len(rest) == 2 and rest[0] == "nodes":
                name = rest[1]
                if method == "GET":
                    return 200, api.get_node(name)
                if method == "PATCH":
                    api._run_interleaved(name, content_type)
                    return 200, api.patch_node(name, content_type, body)
            if rest == ["pods"] and method == "GET":
                return 200, api.list_pods(None, query)
            if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == "pods":
                namespace = rest[1]
                if len(rest) == 3 and method == "GET":
                    return 200, api.list_pods(namespace, query)
                if len(rest) == 4:
                    name = rest[3]
                    if method == "GET":
                        with api.lock:
                            if (namespace, name) not in api.pods:
                                raise api._not_found("pods", name)
                            return 200, copy.deepcopy(api.pods[(namespace, name)])
                    if method == "DELETE":
                        return 200, api.delete_pod(namespace, name, body)
                if len(rest) == 5 and rest[4] == "eviction" and method == "POST":
                    api.evict(namespace, rest[3], body)
                    return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                 "code": 201}

        if parts[:3] == ["apis", "coordination.k8s.io", "v1"] and len(parts) in (6, 7) and parts[3] == "namespaces" \
                and parts[5] == "leases":
            api._check_lease_outage()
            namespace = parts[4]
            if len(parts) == 6 and method == "POST":
                return 201, api.create_lease(namespace, body)
            if len(parts) == 7:
                name = parts[6]
                if method == "GET":
                    with api.lock:
                        if (namespace, name) not in api.leases:
                            raise api._not_found("leases", name, "coordination.k8s.io")
                        return 200, copy.deepcopy(api.leases[(namespace, name)])
                if method == "PUT":
                    return 200, api.update_lease(namespace, name, body)
                if method == "DELETE":
                    return 200, api.delete_lease(namespace, name)

        # policy/v1 poddisruptionbudgets (list, get, writes): the generic store, over api.pdbs
        answer = api.objects.route(method, parts, query, content_type, body, user_agent)
        if answer is not None:
            return answer

        if method in ("GET", "PATCH", "POST", "DELETE", "PUT"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
