"""The generic object store of the API double: the built-in kinds Calico and the add-ons use, and
custom resources of the CustomResourceDefinitions written to it.

What it models (the rest of the double is in server.py; FakeKubeAPI.objects is one ObjectStore):

- kinds (BUILTIN): v1 ServiceAccount, ConfigMap, Service, Secret, Namespace; apps/v1 DaemonSet,
  Deployment; rbac.authorization.k8s.io/v1 ClusterRole, ClusterRoleBinding, Role, RoleBinding;
  apiextensions.k8s.io/v1 CustomResourceDefinition; policy/v1 PodDisruptionBudget (stored in
  FakeKubeAPI.pdbs, so evictions see written budgets); admissionregistration.k8s.io/v1
  ValidatingAdmissionPolicy(Binding), Validating/MutatingWebhookConfiguration. A CRD written
  here makes each served version of its group discoverable (/apis, /apis/<group>/<version>) and
  its resource servable (cluster or namespace scope) until the CRD is deleted; its objects go
  with it.
- verbs: list (labelSelector), get, create (POST; 409 AlreadyExists; 404 when the namespace does
  not exist), replace (PUT; 409 Conflict on a stale metadata.resourceVersion), delete, patch:
  application/merge-patch+json (what kubernetes.core sends for client-side ``apply: true``),
  application/json-patch+json, application/strategic-merge-patch+json (built-in kinds only;
  maps merge, lists replaced: no patchMergeKey lists; 415 for custom resources, as the real
  server answers) and server-side apply (application/apply-patch+yaml, fieldManager required,
  force=true): a reasonable model of field ownership, not the real structured-merge-diff. Each
  manager owns the leaf paths it applied (a list is one leaf: lists are atomic here); an apply
  merges its configuration over the object, removes the fields it applied before and no longer
  applies (unless another manager owns them), and is refused with 409 Conflict when it changes a
  field another manager owns, unless force=true (ownership then moves). metadata.managedFields
  lists the managers (operation Apply or Update, fieldsV1). dryRun=All is honoured by every write
  (validated, nothing stored).
- a write that changes nothing (same object, same field ownership) stores nothing and leaves
  metadata.resourceVersion (and managedFields' time) as it was, as the real server does: a
  kubernetes.core re-run reports changed=false. metadata.generation starts at 1 and grows when
  anything outside metadata and status changes (kinds with a spec).
- validation on write: the object is validated against the OpenAPI schema of the double's server
  version shipped in kubernetes_validate (the newest schema set not newer than that version, as
  kubernetes-validate picks it), not strict unless the request says fieldValidation=Strict
  (unknown fields are then an error, as with the real server); custom resources against their
  CRD version's openAPIV3Schema (jsonschema; x-kubernetes-* extensions ignored). Plus what the
  real server checks that the schemas cannot say: metadata.name (a DNS subdomain, RBAC names
  excepted), a selector matching the pod template labels (DaemonSet, Deployment), a CRD named
  <plural>.<group> with exactly one storage version. A violation is a 422 Invalid Status naming
  the field (details.causes), as the real server answers. No schema for a built-in kind and
  version: the write is refused (500), never stored unvalidated.
- server-set fields (simplifications, documented: the double is no kubelet and no controller
  manager): a DaemonSet's status says every node of the double matching its pod template's
  nodeSelector runs a ready, updated pod (taints and tolerations are not considered); a
  Deployment's status says spec.replicas (defaulted to 1) are ready and available; a CRD is
  Established with its names accepted; a PodDisruptionBudget's status is computed from the
  double's pods it selects when it is written (Running pods are healthy); a Service gets a clusterIP from 10.96.0.0/16 (kept on
  later writes). Status in a write to the main resource is ignored for kinds with a status
  subresource; status subresources are readable (GET), not writable.
"""

import copy
import datetime
import functools
import ipaddress
import json
import re
import uuid

try:
    import yaml
except ImportError:  # pragma: no cover - kubernetes_validate depends on PyYAML
    yaml = None

# (group, version, plural, kind, namespaced, status subresource, short names)
BUILTIN = [
    ("", "v1", "serviceaccounts", "ServiceAccount", True, False, ["sa"]),
    ("", "v1", "configmaps", "ConfigMap", True, False, ["cm"]),
    ("", "v1", "services", "Service", True, True, ["svc"]),
    ("", "v1", "secrets", "Secret", True, False, []),
    ("", "v1", "namespaces", "Namespace", False, True, ["ns"]),
    ("apps", "v1", "daemonsets", "DaemonSet", True, True, ["ds"]),
    ("apps", "v1", "deployments", "Deployment", True, True, ["deploy"]),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, False, []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, False, []),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, False, []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, False, []),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False, True,
     ["crd", "crds"]),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True, ["pdb"]),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False,
     True, []),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding",
     False, False, []),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
     False, False, []),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
     False, False, []),
]
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Core v1 resources server.py lists itself (nodes, pods, namespaces' entry is kept from there).
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IGNORED_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                 "managedFields", "selfLink", "deletionTimestamp")
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class Resource:
    """One servable resource: group/version/plural, its kind and scope."""

    def __init__(self, group, version, plural, kind, namespaced, status, short=(), crd=None):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced, self.status, self.short, self.crd = namespaced, status, list(short), crd

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    def discovery(self):
        entries = [{"name": self.plural, "singularName": self.kind.lower(), "namespaced": self.namespaced,
                    "kind": self.kind, "verbs": list(_VERBS)}]
        if self.short:
            entries[0]["shortNames"] = list(self.short)
        if self.status:
            entries.append({"name": self.plural + "/status", "singularName": "", "namespaced": self.namespaced,
                            "kind": self.kind, "verbs": ["get", "patch", "update"]})
        return entries


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- schemas -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _schema_dir(server_version, strict):
    """kubernetes_validate's schema directory for a server version: the newest set not newer."""
    try:
        import importlib_resources
        from packaging.version import Version
    except ImportError as exc:  # fail closed: nothing is stored unvalidated
        raise RuntimeError("kubernetes_validate (and its dependencies) is needed to validate writes: %s" % exc)
    root = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    wanted = Version(".".join(server_version.lstrip("v").split(".")[:2]))
    versions = sorted((Version(m.group(1)) for m in (re.match(r"^v(\d+\.\d+)\.\d+-local$", d.name)
                                                       for d in root.iterdir()) if m), reverse=True)
    chosen = next((v for v in versions if v <= wanted), None)
    if chosen is None:
        raise RuntimeError("kubernetes_validate has no schemas for Kubernetes %s" % server_version)
    name = "v%s.0-local%s" % (chosen, "-strict" if strict else "")
    return str(root.joinpath(name)), "%s" % chosen


@functools.lru_cache(maxsize=None)
def _load_json(path):
    with open(path) as handle:
        return json.load(handle)


@functools.lru_cache(maxsize=None)
def _builtin_validator(server_version, strict, kind, api_version):
    """A jsonschema validator of kind/apiVersion (kubernetes_validate's file naming), or None."""
    import os

    import jsonschema
    from referencing import Registry, Resource as RefResource

    directory, _chosen = _schema_dir(server_version, strict)
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = os.path.join(directory, "%s-%s.json" % (kind.lower(), api))
    if not os.path.exists(path):
        return None
    schema = _load_json(path)
    definitions = _load_json(os.path.join(directory, "_definitions.json"))
    registry = RefResource.from_contents(schema) @ Registry()
    registry = RefResource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def schema_version(server_version):
    """The Kubernetes minor (e.g. "1.37") whose schemas validate writes to a server of that version."""
    return _schema_dir(server_version, False)[1]


def _cause(error):
    field = ".".join(str(p) if not isinstance(p, int) else "[%d]" % p for p in error.absolute_path)
    field = field.replace(".[", "[")
    if error.validator == "required":
        missing = re.match(r"^'([^']+)'", error.message)
        if missing:
            field = (field + "." if field else "") + missing.group(1)
        return {"reason": "FieldValueRequired", "message": "Required value", "field": field}
    if error.validator == "additionalProperties":
        return {"reason": "FieldValueInvalid", "message": "unknown field: %s" % error.message, "field": field}
    if error.validator == "enum":
        return {"reason": "FieldValueNotSupported", "message": "Unsupported value: %s" % error.message,
                "field": field}
    return {"reason": "FieldValueInvalid", "message": "Invalid value: %s" % error.message, "field": field}


def _api_error(code, reason, message, details=None):
    from .server import ApiError  # a Status answer; server.py imports this module, hence here

    return ApiError(code, reason, message, details)


# -- paths and merges ----------------------------------------------------------------------------
def leaf_paths(obj, prefix=()):
    """Field paths a configuration sets: every non-map value (a list is one leaf)."""
    paths = set()
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            if not prefix and key in ("apiVersion", "kind"):
                continue
            if prefix == ("metadata",) and key in _IGNORED_META:
                continue
            paths |= leaf_paths(value, prefix + (key,))
        return paths
    return {prefix}


def _get(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None, False
        obj = obj[key]
    return obj, True


def _delete(obj, path):
    parents = []
    for key in path[:-1]:
        if not isinstance(obj, dict) or key not in obj:
            return
        parents.append((obj, key))
        obj = obj[key]
    if isinstance(obj, dict):
        obj.pop(path[-1], None)
    for parent, key in reversed(parents):  # prune maps the removal emptied
        if parent[key] == {}:
            del parent[key]


def deep_merge(target, overlay):
    """overlay's maps merged into target's, anything else replaced (lists are atomic)."""
    if not isinstance(overlay, dict) or not isinstance(target, dict):
        return copy.deepcopy(overlay)
    result = copy.deepcopy(target)
    for key, value in overlay.items():
        result[key] = deep_merge(result.get(key), value)
    return result


def fields_v1(paths):
    """managedFields' fieldsV1 of a set of leaf paths."""
    tree = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault("f:%s" % key, {})
    return tree


class ObjectStore:
    """Objects of the built-in kinds and of CRD-defined kinds, keyed (group, plural) -> {(ns, name): obj}."""

    def __init__(self, api):
        self.api = api  # the FakeKubeAPI (lock, resourceVersion, nodes, pdbs, namespaces, version)
        self.builtin = {}
        for group, version, plural, kind, namespaced, status, short in BUILTIN:
            self.builtin[(group, version, plural)] = Resource(group, version, plural, kind, namespaced, status, short)
        self.store = {}
        self.owners = {}  # (group, plural, ns, name) -> {manager: {"operation", "paths", "time", "apiVersion"}}
        self._cluster_ip = 10

    # -- discovery ---------------------------------------------------------------------------
    def _crd_resources(self):
        resources = {}
        for crd in self.store.get(("apiextensions.k8s.io", "customresourcedefinitions"), {}).values():
            spec = crd["spec"]
            names = spec["names"]
            for version in spec.get("versions") or []:
                if version.get("served"):
                    resources[(spec["group"], version["name"], names["plural"])] = Resource(
                        spec["group"], version["name"], names["plural"], names["kind"],
                        spec["scope"] == "Namespaced", bool((version.get("subresources") or {}).get("status") is not None),
                        names.get("shortNames") or [], crd=crd)
        return resources

    def resources(self):
        resources = dict(self.builtin)
        resources.update(self._crd_resources())
        return resources

    def resource(self, group, version, plural):
        return self.resources().get((group, version, plural))

    def group_versions(self):
        """{group: [versions]} served by the store (core "" excluded)."""
        groups = {}
        for group, version, _plural in self.resources():
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        return groups

    def resource_list(self, group, version):
        entries = [e for (g, v, _p), r in sorted(self.resources().items()) if (g, v) == (group, version)
                   for e in r.discovery()]
        if not entries:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "%s/%s" % (group, version) if group else version, "resources": entries}

    # -- storage -----------------------------------------------------------------------------
    def _bucket(self, resource):
        if (resource.group, resource.plural) == ("policy", "poddisruptionbudgets"):
            return self.api.pdbs
        return self.store.setdefault((resource.group, resource.plural), {})

    def namespace_exists(self, name):
        return name in BUILTIN_NAMESPACES or name in self.api.namespaces \
            or (None, name) in self.store.get(("", "namespaces"), {})

    def _stored(self, resource, namespace, name):
        bucket = self._bucket(resource)
        key = (namespace if resource.namespaced else None, name)
        if key in bucket:
            return bucket[key]
        if resource.plural == "namespaces" and not resource.group and self.namespace_exists(name):
            return self._synthesised_namespace(name)
        return None

    def _synthesised_namespace(self, name):
        """A namespace the double knows by name only (the built-in ones, those pods were added to)."""
        obj = {"kind": "Namespace", "apiVersion": "v1",
               "metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "resourceVersion": "1",
                            "creationTimestamp": "2026-01-01T00:00:00Z",
                            "labels": {"kubernetes.io/metadata.name": name}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        self.store.setdefault(("", "namespaces"), {})[(None, name)] = obj
        return obj

    def _not_found(self, resource, name):
        return _api_error(404, "NotFound", '%s%s "%s" not found' % (
            resource.plural, "." + resource.group if resource.group else "", name),
            {"name": name, "group": resource.group, "kind": resource.plural})

    def add(self, obj):
        """Put an object in directly (tests): validated and defaulted like a create."""
        resource = self._resource_of(obj)
        with self.api.lock:
            return self.create(resource, obj["metadata"].get("namespace"), obj, {}, "test")

    def get_object(self, api_version, kind, name, namespace=None):
        """A copy of a stored object, or None."""
        with self.api.lock:
            resource = self._resource_of({"apiVersion": api_version, "kind": kind})
            obj = self._stored(resource, namespace, name)
            return self._present(resource, obj) if obj is not None else None

    def objects(self):
        """Every stored object of this store (copies), PDBs included."""
        with self.api.lock:
            out = []
            for resource in self.resources().values():
                for obj in self._bucket(resource).values():
                    if obj.get("apiVersion") == resource.api_version:
                        out.append(self._present(resource, obj))
            return out

    def _resource_of(self, obj):
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        group, _, version = api_version.rpartition("/")
        for resource in self.resources().values():
            if (resource.group, resource.version, resource.kind) == (group, version, kind):
                return resource
        raise _api_error(404, "NotFound", "no resource for %s %s in the double" % (api_version, kind))

    def _present(self, resource, obj):
        out = copy.deepcopy(obj)
        key = (resource.group, resource.plural, out["metadata"].get("namespace"), out["metadata"]["name"])
        managers = self.owners.get(key) or {}
        if managers:
            out["metadata"]["managedFields"] = [
                {"manager": name, "operation": m["operation"], "apiVersion": m["apiVersion"], "time": m["time"],
                 "fieldsType": "FieldsV1", "fieldsV1": fields_v1(m["paths"])}
                for name, m in sorted(managers.items()) if m["paths"] or m["operation"] == "Apply"]
            if not out["metadata"]["managedFields"]:
                del out["metadata"]["managedFields"]
        return out

    # -- routing -----------------------------------------------------------------------------
    def route(self, method, parts, query, content_type, body, user_agent=""):
        """(code, answer) for a request this store serves, None when it is not one of its paths."""
        if parts[:1] == ["api"] and parts[1:2] == ["v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            group = parts[1]
            if len(parts) == 2:
                versions = self.group_versions().get(group)
                if method != "GET" or not versions:
                    return None
                return 200, _group_doc(group, versions, kind="APIGroup")
            version, rest = parts[2], parts[3:]
            if not rest:
                answer = self.resource_list(group, version) if method == "GET" else None
                return (200, answer) if answer else None
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and self.resource(group, version, rest[2]) is not None \
                and self.resource(group, version, rest[2]).namespaced:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        resource = self.resource(group, version, rest[0])
        if resource is None:
            return None
        if resource.namespaced and namespace is None and (len(rest) > 1 or method == "POST"):
            return None
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and (sub != "status" or not resource.status):
            return None
        manager = query.get("fieldManager") or (user_agent.split("/")[0] if user_agent else "") or "unknown"
        with self.api.lock:
            if name is None:
                if method == "GET":
                    return 200, self.list(resource, namespace, query)
                if method == "POST":
                    return 201, self.create(resource, namespace, body, query, manager)
                return None
            if sub == "status":
                if method == "GET":
                    obj = self._stored(resource, namespace, name)
                    if obj is None:
                        raise self._not_found(resource, name)
                    return 200, self._present(resource, obj)
                raise _api_error(405, "MethodNotAllowed", "the double serves status subresources read-only")
            if method == "GET":
                obj = self._stored(resource, namespace, name)
                if obj is None:
                    raise self._not_found(resource, name)
                return 200, self._present(resource, obj)
            if method == "PUT":
                return 200, self.replace(resource, namespace, name, body, query, manager)
            if method == "PATCH":
                return self.patch(resource, namespace, name, content_type, body, query, manager)
            if method == "DELETE":
                return 200, self.delete(resource, namespace, name, query)
        return None

    # -- verbs -------------------------------------------------------------------------------
    def list(self, resource, namespace, query):
        from .server import _label_selector_matches, _parse_label_selector  # one selector parser

        terms = _parse_label_selector(query.get("labelSelector", ""))
        items = []
        for (ns, _name), obj in sorted(self._bucket(resource).items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
            if obj.get("apiVersion") != resource.api_version and resource.crd is None \
                    and resource.plural != "poddisruptionbudgets":
                continue
            if namespace is not None and ns != namespace:
                continue
            if _label_selector_matches(terms, obj["metadata"].get("labels")):
                item = self._present(resource, obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
        return {"kind": resource.kind + "List", "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": str(self.api._resource_version)}, "items": items}

    def _check_body(self, resource, namespace, name, body):
        if not isinstance(body, dict):
            raise _api_error(400, "BadRequest", "the body of the request is not a %s" % resource.kind)
        if body.get("kind") != resource.kind or body.get("apiVersion") != resource.api_version:
            raise _api_error(400, "BadRequest", "the API version in the data (%s) does not match the expected API "
                             "version (%s) or kind %r is not %r" % (body.get("apiVersion"), resource.api_version,
                                                                    body.get("kind"), resource.kind))
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise _api_error(422, "Invalid", "%s is invalid: metadata: Required value" % resource.kind)
        if name is not None and meta.get("name") not in (None, name):
            raise _api_error(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)"
                             % (meta.get("name"), name))
        if resource.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise _api_error(400, "BadRequest", "the namespace of the provided object does not match the "
                                 "namespace sent on the request")
            if not self.namespace_exists(namespace):
                raise _api_error(404, "NotFound", 'namespaces "%s" not found' % namespace,
                                 {"name": namespace, "kind": "namespaces"})

    def create(self, resource, namespace, body, query, manager):
        self._check_body(resource, namespace, None, body)
        name = body["metadata"].get("name")
        if not name:
            raise _api_error(422, "Invalid", "%s is invalid: metadata.name: Required value: name or generateName is "
                             "required" % resource.kind)
        if self._stored(resource, namespace, name) is not None:
            raise _api_error(409, "AlreadyExists", '%s%s "%s" already exists' % (
                resource.plural, "." + resource.group if resource.group else "", name),
                {"name": name, "group": resource.group, "kind": resource.plural})
        obj = copy.deepcopy(body)
        return self._write(resource, namespace, name, None, obj, query, manager, "Update", leaf_paths(body))

    def replace(self, resource, namespace, name, body, query, manager):
        self._check_body(resource, namespace, name, body)
        current = self._stored(resource, namespace, name)
        if current is None:
            raise self._not_found(resource, name)
        self._check_rv(resource, name, current, body)
        return self._write(resource, namespace, name, current, copy.deepcopy(body), query, manager, "Update",
                           leaf_paths(body))

    def patch(self, resource, namespace, name, content_type, body, query, manager):
        from .server import json_merge_patch, json_patch  # the RFCs are implemented once, in server.py

        current = self._stored(resource, namespace, name)
        if content_type == APPLY:
            return self.apply(resource, namespace, name, current, body, query)
        if current is None:
            raise self._not_found(resource, name)
        if content_type == MERGE or (content_type == STRATEGIC and resource.crd is None):
            if not isinstance(body, dict):
                raise _api_error(400, "BadRequest", "a merge patch must be a JSON object")
            obj = json_merge_patch(current, body)
            paths = leaf_paths({k: v for k, v in body.items()})
        elif content_type == JSON_PATCH:
            obj = json_patch(current, body)
            paths = {p for p in leaf_paths(obj) if _get(obj, p) != _get(current, p)}
        elif content_type == STRATEGIC:
            raise _api_error(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                             "accepted media types include: application/json-patch+json, "
                             "application/merge-patch+json, application/apply-patch+yaml")
        else:
            raise _api_error(415, "UnsupportedMediaType", "unsupported patch type %r" % content_type)
        self._check_rv(resource, name, current, obj if content_type == JSON_PATCH else body)
        obj["metadata"]["name"], obj["kind"], obj["apiVersion"] = name, resource.kind, resource.api_version
        return 200, self._write(resource, namespace, name, current, obj, query, manager, "Update", paths)

    def apply(self, resource, namespace, name, current, body, query):
        manager = query.get("fieldManager")
        if not manager:
            raise _api_error(400, "BadRequest", "PATCH requests with apply patch type (application/apply-patch+yaml) "
                             "must specify fieldManager")
        self._check_body(resource, namespace, name, body)
        applied = copy.deepcopy(body)
        if resource.status:
            applied.pop("status", None)
        paths = leaf_paths(applied)
        key = (resource.group, resource.plural, namespace if resource.namespaced else None, name)
        owners = copy.deepcopy(self.owners.get(key) or {})
        base = copy.deepcopy(current) if current is not None else {}
        force = str(query.get("force", "")).lower() == "true"
        conflicts = []
        for path in sorted(paths):
            new, _ = _get(applied, path)
            old, present = _get(base, path)
            if not present or old == new:
                continue
            for other, owned in owners.items():
                if other != manager and path in owned["paths"]:
                    conflicts.append((other, owned["apiVersion"], path))
        if conflicts and not force:
            text = ", ".join('conflict with "%s" using %s: .%s' % (m, v, ".".join(p)) for m, v, p in conflicts)
            raise _api_error(409, "Conflict", "Apply failed with %d conflict%s: %s" % (
                len(conflicts), "" if len(conflicts) == 1 else "s", text),
                {"name": name, "group": resource.group, "kind": resource.plural,
                 "causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "%s"' % m,
                             "field": "." + ".".join(p)} for m, _v, p in conflicts]})
        for _other, _v, path in conflicts:  # force: ownership moves to this manager
            owners[_other]["paths"].discard(path)
        previously = owners.get(manager, {}).get("paths", set())
        obj = deep_merge(base, applied)
        for path in previously - paths:
            if not any(path in m["paths"] for other, m in owners.items() if other != manager):
                _delete(obj, path)
        obj["metadata"]["name"], obj["kind"], obj["apiVersion"] = name, resource.kind, resource.api_version
        answer = self._write(resource, namespace, name, current, obj, query, manager, "Apply", paths,
                             owners=owners, replace_paths=True)
        return (201 if current is None else 200), answer

    def delete(self, resource, namespace, name, query):
        current = self._stored(resource, namespace, name)
        if current is None:
            raise self._not_found(resource, name)
        answer = self._present(resource, current)
        if query.get("dryRun") == "All":
            return answer
        key = (namespace if resource.namespaced else None, name)
        self._bucket(resource).pop(key, None)
        self.owners.pop((resource.group, resource.plural, key[0], name), None)
        self.api._next_rv()
        if resource.plural == "namespaces" and not resource.group:
            self.api.namespaces.discard(name)
        if resource.plural == "customresourcedefinitions":
            spec = current["spec"]
            self.store.pop((spec["group"], spec["names"]["plural"]), None)
        return answer

    # -- the write path ----------------------------------------------------------------------
    def _check_rv(self, resource, name, current, body):
        sent = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if sent and sent != current["metadata"].get("resourceVersion"):
            raise _api_error(409, "Conflict", 'Operation cannot be fulfilled on %s%s "%s": the object has been '
                             "modified; please apply your changes to the latest version and try again" % (
                                 resource.plural, "." + resource.group if resource.group else "", name),
                             {"name": name, "group": resource.group, "kind": resource.plural})

    def _write(self, resource, namespace, name, current, obj, query, manager, operation, paths, owners=None,
               replace_paths=False):
        meta = obj.setdefault("metadata", {})
        meta["name"] = name
        if resource.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for field in ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"):
            meta.pop(field, None)
        if current is not None:
            for field in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
        if resource.status:  # the main resource's writes do not change status
            obj.pop("status", None)
            if current is not None and "status" in current:
                obj["status"] = copy.deepcopy(current["status"])
        self._default(resource, current, obj)
        self.validate(resource, obj, strict=query.get("fieldValidation") == "Strict")
        key = (resource.group, resource.plural, namespace if resource.namespaced else None, name)
        owners = copy.deepcopy(self.owners.get(key) or {}) if owners is None else owners
        if not replace_paths:
            changed = {p for p in paths if current is None or _get(current, p) != _get(obj, p)}
            for other, owned in owners.items():
                if other != manager:
                    owned["paths"] -= changed
            paths = (owners.get(manager, {}).get("paths", set()) | paths)
        previous = owners.get(manager)
        owners[manager] = {"operation": operation, "apiVersion": resource.api_version, "paths": set(paths),
                           "time": previous["time"] if previous and previous["paths"] == set(paths)
                           and previous["operation"] == operation else _now()}
        # an applier keeps its entry (it may own no field, e.g. a ServiceAccount's bare name)
        owners = {m: o for m, o in owners.items() if o["paths"] or o["operation"] == "Apply"}
        comparable = copy.deepcopy(obj)
        if current is not None and comparable == current and owners == (self.owners.get(key) or {}):
            return self._present(resource, current)  # nothing changes: nothing is written
        if query.get("dryRun") == "All":
            return self._present(resource, obj)
        if current is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            if "spec" in obj or resource.kind in ("DaemonSet", "Deployment"):
                meta["generation"] = 1
        elif _without(current) != _without(obj) and "generation" in meta:
            meta["generation"] = int(meta["generation"]) + 1
        meta["resourceVersion"] = self.api._next_rv()
        self._server_status(resource, obj)
        self._bucket(resource)[(key[2], name)] = obj
        self.owners[key] = owners
        if resource.plural == "namespaces" and not resource.group:
            self.api.namespaces.add(name)
        return self._present(resource, obj)

    def _default(self, resource, current, obj):
        """The defaults the real server sets that clients' readiness checks rely on."""
        spec = obj.get("spec")
        if resource.kind == "Deployment" and isinstance(spec, dict) and "replicas" not in spec:
            spec["replicas"] = 1
        if resource.kind == "Service" and isinstance(spec, dict) and spec.get("type", "ClusterIP") != "ExternalName" \
                and "clusterIP" not in spec:
            kept = ((current or {}).get("spec") or {}).get("clusterIP")
            if kept is None:
                self._cluster_ip += 1
                kept = str(ipaddress.ip_address("10.96.0.0") + self._cluster_ip)
            spec["clusterIP"] = kept
            spec["clusterIPs"] = [kept] if kept != "None" else ["None"]
        if resource.kind == "Namespace":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]

    def _server_status(self, resource, obj):
        """Status the double's simplifications set (no kubelet, no controllers: see the docstring)."""
        generation = obj["metadata"].get("generation")
        if resource.kind == "DaemonSet":
            selector = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
            count = sum(1 for node in self.api.nodes.values()
                        if all((node["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()))
            status = {"currentNumberScheduled": count, "desiredNumberScheduled": count, "numberMisscheduled": 0,
                      "numberReady": count, "observedGeneration": generation, "updatedNumberScheduled": count}
            if count:
                status["numberAvailable"] = count
            obj["status"] = status
        elif resource.kind == "Deployment":
            replicas = obj["spec"].get("replicas", 1)
            status = {"observedGeneration": generation}
            if replicas:
                status.update({"replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
                               "availableReplicas": replicas,
                               "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                                               "message": "Deployment has minimum availability."}]})
            obj["status"] = status
        elif resource.kind == "PodDisruptionBudget":
            obj["status"] = self._pdb_status(obj)
        elif resource.kind == "CustomResourceDefinition":
            spec = obj["spec"]
            obj["status"] = {
                "acceptedNames": copy.deepcopy(spec["names"]),
                "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                                "message": "no conflicts found"},
                               {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                                "message": "the initial names have been accepted"}],
                "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")]}
        elif resource.kind == "Namespace":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}

    def _pdb_status(self, pdb):
        """What the disruption controller computes from the pods the budget selects (at write time)."""
        from .server import _matches_labels  # one selector matcher

        spec = pdb.get("spec") or {}
        namespace = pdb["metadata"].get("namespace")
        pods = [p for (ns, _n), p in self.api.pods.items()
                if ns == namespace and _matches_labels(spec.get("selector") or {}, p["metadata"].get("labels"))]
        healthy = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
                      and not p["metadata"].get("deletionTimestamp"))
        expected = len(pods)

        def scaled(value):
            if isinstance(value, str) and value.endswith("%"):
                return -(-int(value[:-1]) * expected // 100)  # rounded up, as the controller does
            return int(value)

        if "minAvailable" in spec:
            desired = scaled(spec["minAvailable"])
        else:
            desired = max(0, expected - scaled(spec.get("maxUnavailable", 0)))
        return {"currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                "disruptionsAllowed": max(0, healthy - desired),
                "observedGeneration": pdb["metadata"].get("generation")}

    # -- validation --------------------------------------------------------------------------
    def validate(self, resource, obj, strict=False):
        """Raise a 422 Invalid ApiError naming the fields, as the real server answers."""
        name = obj["metadata"].get("name", "")
        causes = []
        if resource.group != "rbac.authorization.k8s.io" and not _DNS_SUBDOMAIN.match(name):
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                           "message": "Invalid value: %r: a lowercase RFC 1123 subdomain must consist of lower case "
                                      "alphanumeric characters, '-' or '.'" % name})
        if resource.crd is not None:
            causes += self._validate_custom(resource, obj)
        else:
            validator = _builtin_validator(self.api.version["gitVersion"], bool(strict), resource.kind,
                                           resource.api_version)
            if validator is None:
                raise _api_error(500, "InternalError", "fake kube API: no schema for %s %s in kubernetes_validate "
                                 "for Kubernetes %s: not stored unvalidated" % (
                                     resource.api_version, resource.kind, self.api.version["gitVersion"]))
            causes += [_cause(e) for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]
        causes += self._semantic(resource, obj)
        if causes:
            kind = "%s.%s" % (resource.kind, resource.group) if resource.group else resource.kind
            raise _api_error(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, "; ".join(
                "%s: %s" % (c["field"], c["message"]) for c in causes)),
                {"name": name, "group": resource.group, "kind": resource.kind, "causes": causes})

    def _validate_custom(self, resource, obj):
        import jsonschema

        version = next(v for v in resource.crd["spec"]["versions"] if v["name"] == resource.version)
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
        body = {k: v for k, v in obj.items() if k not in ("metadata",)}
        schema = dict(schema)
        props = dict(schema.get("properties") or {})
        props.pop("metadata", None)
        schema["properties"] = props
        return [_cause(e) for e in jsonschema.Draft4Validator(schema).iter_errors(body)]

    @staticmethod
    def _semantic(resource, obj):
        causes = []
        spec = obj.get("spec") or {}
        if resource.kind in ("DaemonSet", "Deployment") and isinstance(spec, dict):
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            match = (spec.get("selector") or {}).get("matchLabels") or {}
            if any(labels.get(k) != v for k, v in match.items()):
                causes.append({"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                               "message": "Invalid value: %s: `selector` does not match template `labels`"
                                          % json.dumps(labels, sort_keys=True)})
        if resource.kind == "CustomResourceDefinition" and isinstance(spec, dict):
            expected = "%s.%s" % ((spec.get("names") or {}).get("plural"), spec.get("group"))
            if obj["metadata"].get("name") != expected:
                causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                               "message": "Invalid value: %r: must be spec.names.plural+\".\"+spec.group"
                                          % obj["metadata"].get("name")})
            storage = [v for v in spec.get("versions") or [] if v.get("storage")]
            if len(storage) != 1:
                causes.append({"reason": "FieldValueInvalid", "field": "spec.versions",
                               "message": "Invalid value: must have exactly one version marked as storage version"})
        return causes


def _without(obj):
    """An object without metadata and status: what metadata.generation follows."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _group_doc(group, versions, kind="APIGroup"):
    gvs = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions]
    doc = {"name": group, "versions": gvs, "preferredVersion": gvs[0]}
    if kind:
        doc.update(kind=kind, apiVersion="v1")
    return doc


def parse_apply_body(raw):
    """An apply patch is YAML (JSON is YAML)."""
    try:
        return json.loads(raw)
    except ValueError:
        if yaml is None:
            raise
        return yaml.safe_load(raw)
