"""Read back, from the API server of a kubeconfig, every object of the given manifest files.

Run on the control-plane host of the kubernetes_cni / kubernetes_addons molecule scenarios with
the Python kubernetes client's interpreter (gpufleet_kube_python), the way kubernetes.core finds
objects (dynamic client: discovery, then GET):

    python fetch_objects.py /etc/kubernetes/admin.conf manifest.yaml [manifest.yaml ...]

Prints a JSON list, one entry per document: {"file", "manifest", "stored"} (stored: the object
the server returns, or null with "error": the reason it could not be read).
"""

import json
import sys

import yaml
from kubernetes import config, dynamic
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError


def main(kubeconfig, paths):
    client = dynamic.DynamicClient(config.new_client_from_config(config_file=kubeconfig))
    out = []
    for path in paths:
        with open(path) as handle:
            docs = [doc for doc in yaml.safe_load_all(handle) if doc]
        for doc in docs:
            entry = {"file": path, "manifest": doc, "stored": None}
            meta = doc.get("metadata") or {}
            try:
                resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                namespace = (meta.get("namespace") or "default") if resource.namespaced else None
                entry["stored"] = resource.get(name=meta["name"], namespace=namespace).to_dict()
            except (NotFoundError, ResourceNotFoundError) as exc:
                entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            out.append(entry)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
