"""Controller-side checks of the kubernetes_cni / kubernetes_addons molecule scenarios (testinfra):
every document of the applied manifests is stored in the API double (read back on the node by
fetch_objects.py through the Python kubernetes client), holds what the manifest says, and is
valid against the OpenAPI schema of the scenario's Kubernetes version (kubernetes_validate,
strict: unknown fields are errors). Custom resources, which kubernetes_validate has no schema
for, must belong to a CRD the same run stored (the double validated them against it on write).
"""

import json

import jsonschema
import kubernetes_validate

FETCH = "/opt/gpufleet-src/tests/fake_kube_api/molecule/fetch_objects.py"
KUBE_PYTHON = "/opt/gpufleet/k8s-client/bin/python"
KUBECONFIG = "/etc/kubernetes/admin.conf"


def fetch(host, paths):
    """The fetch_objects.py entries of the manifest files ``paths`` on the node."""
    for path in paths:
        assert host.file(path).exists, "manifest %s is not on the node" % path
    return json.loads(host.check_output("%s %s %s %s" % (KUBE_PYTHON, FETCH, KUBECONFIG, " ".join(paths))))


def missing_values(manifest, stored, path=""):
    """Fields of ``manifest`` whose value ``stored`` does not hold ([] when it holds them all)."""
    if isinstance(manifest, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        out = []
        for key, value in manifest.items():
            if path == ".metadata" and key in ("namespace",) or (path == "" and key == "status"):
                continue
            out += missing_values(value, stored.get(key), "%s.%s" % (path, key))
        return out
    return [] if manifest == stored else ["%s (%r != %r)" % (path, manifest, stored)]


def check(entries, version):
    """Assert every entry stored, as applied and schema-valid for ``version``; return the
    (kind, name) pairs checked."""
    assert entries, "no manifest documents to check"
    crds = {(e["stored"]["spec"]["group"], e["stored"]["spec"]["names"]["kind"]): e["stored"]
            for e in entries if e.get("stored") and e["stored"]["kind"] == "CustomResourceDefinition"}
    checked = []
    for entry in entries:
        doc, stored = entry["manifest"], entry["stored"]
        what = "%s %s/%s (%s)" % (doc["apiVersion"], doc["kind"], doc["metadata"]["name"], entry["file"])
        assert stored is not None, "%s is not in the API server: %s" % (what, entry.get("error"))
        assert missing_values(doc, stored) == [], "%s differs from the manifest: %s" % (
            what, missing_values(doc, stored))
        try:
            kubernetes_validate.validate(stored, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:  # a custom resource: its CRD's schema
            group, _, version_name = doc["apiVersion"].rpartition("/")
            crd = crds.get((group, doc["kind"]))
            assert crd is not None, "%s: no schema in kubernetes_validate and no CRD applied with it" % what
            schema = next(v for v in crd["spec"]["versions"] if v["name"] == version_name)["schema"]["openAPIV3Schema"]
            schema = dict(schema, properties={k: v for k, v in (schema.get("properties") or {}).items()
                                              if k != "metadata"})
            errors = [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(stored)]
            assert errors == [], "%s is not valid against its CRD: %s" % (what, errors)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError("%s is not valid for Kubernetes %s: %s: %s" % (
                what, version, ".".join(str(p) for p in exc.path), exc.message))
        checked.append((doc["kind"], doc["metadata"]["name"]))
    return checked


def server_side_applied(entries, manager="gpufleet"):
    """Objects whose managedFields do not show an Apply by ``manager`` (server-side apply)."""
    return ["%s/%s" % (e["manifest"]["kind"], e["manifest"]["metadata"]["name"]) for e in entries
            if not any(m.get("manager") == manager and m.get("operation") == "Apply"
                       for m in (e["stored"] or {}).get("metadata", {}).get("managedFields") or [])]
