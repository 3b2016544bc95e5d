# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubelet's CPU, topology and memory manager settings: the fields and their allowed values
(the filter kubelet_tuning_config renders them, the drift check tuning.kubelet_policy compares them),
and the configuration a kubelet runs with, read below a root.

The kubelet reads ``--config`` (kubeadm: ``/var/lib/kubelet/config.yaml``) and then every ``*.conf``
file of ``--config-dir`` in lexical order, a later file's fields replacing earlier ones (kubelet
configuration drop-in directory, Kubernetes >= 1.30). A field set nowhere has the kubelet's default.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# option -> (KubeletConfiguration field, allowed values, the kubelet's default)
ENUMS = {
    "cpu_manager_policy": ("cpuManagerPolicy", ("none", "static"), "none"),
    "topology_manager_policy": ("topologyManagerPolicy", ("none", "best-effort", "restricted", "single-numa-node"),
                                "none"),
    "topology_manager_scope": ("topologyManagerScope", ("container", "pod"), "container"),
    "memory_manager_policy": ("memoryManagerPolicy", ("None", "Static"), "None"),
}
RESERVED_CPUS = ("reserved_system_cpus", "reservedSystemCPUs")


def _load(text):
    """A kubelet configuration file's mapping (JSON or YAML), or an error string."""
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml  # PyYAML: kubeadm writes YAML
        except ImportError:
            return None, "PyYAML is not installed for this Python (needed to read the kubelet's YAML)"
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return None, "not YAML: %s" % str(exc).splitlines()[0]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, "not a mapping"
    return data, None


def effective_config(reader, config, config_dir):
    """(merged fields, files read, problem): ``config`` then ``config_dir/*.conf`` (paths below the
    reader's root, absolute or not). ``problem`` names the first file that could not be used."""
    config = config.lstrip("/")
    config_dir = config_dir.lstrip("/") if config_dir else None
    files = [config]
    if config_dir:
        files += ["%s/%s" % (config_dir, name) for name in reader.listdir(config_dir) if name.endswith(".conf")]
    merged, used = {}, []
    for rel in files:
        text = reader.read(rel)
        if text is None:
            return merged, used, "cannot read /%s" % rel
        data, error = _load(text)
        if error:
            return merged, used, "/%s: %s" % (rel, error)
        merged.update(data)
        used.append("/" + rel)
    return merged, used, None
