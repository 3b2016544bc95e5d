# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl_ib_hca, nccl_topology_env: NCCL settings from ansible_facts.gpu_topology (topology_facts).

Documentation: nccl_ib_hca.yml and nccl_topology_env.yml next to this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.topology import CLASSES, class_rank

LINK_LAYERS = ("InfiniBand", "Ethernet")
# NCCL_NET_GDR_LEVEL takes LOC, PIX, PXB, PHB, SYS; NCCL counts a path between host bridges of one
# NUMA node as PHB, so NODE maps to PHB.
GDR_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def _check(topology, max_class, link_layer, name):
    if not isinstance(topology, dict) or not isinstance(topology.get("gpus"), list) \
            or not isinstance(topology.get("rdma_devices"), list):
        raise AnsibleFilterError("%s: expected ansible_facts.gpu_topology of gpufleet.cluster.topology_facts "
                                 "(a dict with 'gpus' and 'rdma_devices')" % name)
    if max_class not in CLASSES:
        raise AnsibleFilterError("%s: option max_class=%r is not one of %s" % (name, max_class, ", ".join(CLASSES)))
    if link_layer is not None and link_layer not in LINK_LAYERS:
        raise AnsibleFilterError("%s: option link_layer=%r is not one of %s (or null for any)"
                                 % (name, link_layer, ", ".join(LINK_LAYERS)))


def _selection(topology, max_class, link_layer, name):
    """[(device, [ports])] nearest each GPU within max_class, in GPU order, and the worst class used."""
    _check(topology, max_class, link_layer, name)
    if not topology["gpus"]:
        raise AnsibleFilterError("%s: the node has no NVIDIA GPU in its topology facts" % name)
    ports = {}
    for device in topology["rdma_devices"]:
        ports[device.get("name")] = [p["port"] for p in device.get("ports") or []
                                     if link_layer is None or p.get("link_layer") == link_layer]
    chosen, worst = [], None
    for gpu in topology["gpus"]:
        links = {dev: cls for dev, cls in (gpu.get("rdma") or {}).items() if ports.get(dev)}
        known = [cls for cls in links.values() if cls in CLASSES]
        best = min(known, key=class_rank) if known else None
        if best is None or class_rank(best) > class_rank(max_class):
            raise AnsibleFilterError(
                "%s: GPU %s has no %sRDMA device within %s (nearest: %s); raise max_class or check the "
                "node's topology facts" % (name, gpu.get("pci_address"), (link_layer + " ") if link_layer else "",
                                           max_class, best or "none with a known PCIe position"))
        if worst is None or class_rank(best) > class_rank(worst):
            worst = best
        for dev in sorted(d for d, cls in links.items() if cls == best):
            if dev not in [d for d, _p in chosen]:
                chosen.append((dev, ports[dev]))
    return chosen, worst


def nccl_ib_hca(topology, max_class="PXB", link_layer="InfiniBand"):
    """``=mlx5_0:1,mlx5_1:1,...``: the RDMA devices nearest each GPU (at most ``max_class`` away)."""
    chosen, _worst = _selection(topology, max_class, link_layer, "nccl_ib_hca")
    return "=" + ",".join("%s:%d" % (dev, port) for dev, dev_ports in chosen for port in dev_ports)


def nccl_topology_env(topology, max_class="PXB", link_layer="InfiniBand"):
    """``{'NCCL_IB_HCA': ..., 'NCCL_NET_GDR_LEVEL': ...}`` for the NCCL test job."""
    chosen, worst = _selection(topology, max_class, link_layer, "nccl_topology_env")
    return {
        "NCCL_IB_HCA": "=" + ",".join("%s:%d" % (dev, port) for dev, dev_ports in chosen for port in dev_ports),
        "NCCL_NET_GDR_LEVEL": GDR_LEVEL[worst],
    }


class FilterModule(object):
    def filters(self):
        return {
            "nccl_ib_hca": nccl_ib_hca,
            "nccl_topology_env": nccl_topology_env,
        }
