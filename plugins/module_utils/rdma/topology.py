# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU <-> RDMA device topology from sysfs alone (docs/contracts.md, "Facts", topology_facts).

Each PCI function's place in the PCIe hierarchy is the resolved target of
``/sys/bus/pci/devices/<address>`` (``../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/...``):
the ``pciDDDD:BB`` component is the host bridge (root complex), the PCI addresses after it are
the bridges from the root port down. A pair of devices gets the class ``nvidia-smi topo -m``
prints, best first:

- ``PIX``: the path traverses at most a single PCIe bridge -- a PCIe switch (its upstream port
  and downstream ports) counts as one bridge;
- ``PXB``: multiple PCIe bridges, without the host bridge;
- ``PHB``: through a PCIe host bridge (same root complex, different root ports);
- ``NODE``: between host bridges within one NUMA node;
- ``SYS``: across the SMP interconnect between NUMA nodes, and whenever the NUMA node of
  either side is unknown (``numa_node`` ``-1`` or unreadable) -- the worst case is assumed.

A device whose position cannot be resolved (missing link, a path outside the root, a layout
without a ``pciDDDD:BB`` host bridge) has ``pci_path`` null and no class towards anything (null).
Switches are recognised by depth below the root port (upstream port at odd depth, its
downstream ports at the next): that is how PCIe switches appear in sysfs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import nvidia_pci_functions
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import is_index

PCI_DEVICES = "sys/bus/pci/devices"
IB_CLASS = "sys/class/infiniband"
CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")  # best first
_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")


def class_rank(name):
    """Position of a class in ``CLASSES`` (0 = PIX); unknown names and None rank last."""
    return CLASSES.index(name) if name in CLASSES else len(CLASSES)


def pci_position(reader, address):
    """``{'host_bridge': 'pci0000:15', 'bridges': [...]}`` of a PCI function, or None.

    ``bridges`` are the PCI addresses from the root port down to the function's parent."""
    parts = reader.real_parts("%s/%s" % (PCI_DEVICES, address))
    if not parts or parts[-1] != address or parts[:2] != ["sys", "devices"]:
        return None
    hosts = [i for i, part in enumerate(parts) if _HOST_BRIDGE.match(part)]
    if not hosts:
        return None
    chain = parts[hosts[-1] + 1:]
    if not chain or not all(_ADDRESS.match(part) for part in chain):
        return None
    return {"host_bridge": parts[hosts[-1]], "bridges": chain[:-1]}


def _switch_key(bridges, depth):
    """The upstream port of the switch a bridge at ``depth`` (0 = root port) belongs to."""
    upstream = 2 * ((depth + 1) // 2) - 1
    return bridges[upstream]


def link_class(a, b):
    """Class of the path between two devices ``{'position': ..., 'numa_node': ...}``, or None
    when either position is unknown."""
    pos_a, pos_b = a.get("position"), b.get("position")
    if pos_a is None or pos_b is None:
        return None
    if pos_a["host_bridge"] != pos_b["host_bridge"]:
        numa_a, numa_b = a.get("numa_node"), b.get("numa_node")
        if numa_a is None or numa_b is None or numa_a != numa_b:
            return "SYS"
        return "NODE"
    bridges_a, bridges_b = pos_a["bridges"], pos_b["bridges"]
    common = 0
    while common < min(len(bridges_a), len(bridges_b)) and bridges_a[common] == bridges_b[common]:
        common += 1
    if common == 0:
        return "PHB"
    units = set()
    lca_depth = common - 1
    for bridges, start in ((bridges_a, lca_depth), (bridges_b, common)):
        for depth in range(start, len(bridges)):
            units.add("root port" if depth == 0 else _switch_key(bridges, depth))
    return "PIX" if len(units) <= 1 else "PXB"


def _numa(reader, address):
    value = reader.read_int("%s/%s/numa_node" % (PCI_DEVICES, address))
    return value if value is not None and value >= 0 else None


def _device(reader, address):
    position = pci_position(reader, address)
    return {
        "pci_address": address,
        "numa_node": _numa(reader, address),
        "host_bridge": position["host_bridge"] if position else None,
        "pci_path": position["bridges"] + [address] if position else None,
        "position": position,
    }


def rdma_devices(reader):
    """RDMA devices of ``/sys/class/infiniband`` with their PCI function and ports."""
    devices = []
    for name in reader.listdir(IB_CLASS):
        base = "%s/%s" % (IB_CLASS, name)
        address = reader.real_name(base + "/device")
        if not address or not _ADDRESS.match(address):
            address = None
        ports = []
        for port in reader.listdir(base + "/ports"):
            if not is_index(port):
                continue
            ports.append({"port": int(port), "link_layer": reader.read("%s/ports/%s/link_layer" % (base, port))})
        ports.sort(key=lambda item: item["port"])
        device = _device(reader, address) if address else {
            "pci_address": None, "numa_node": None, "host_bridge": None, "pci_path": None, "position": None}
        device.update({"name": name, "ports": ports})
        devices.append(device)
    return devices


def gather_topology_facts(reader):
    """The ``ansible_facts.gpu_topology`` dict (docs/contracts.md, "Facts")."""
    gpu_addresses, _switches = nvidia_pci_functions(reader)
    gpus = [_device(reader, address) for address in gpu_addresses]
    hcas = rdma_devices(reader)
    numa_nodes = {}
    for index, gpu in enumerate(gpus):
        gpu["index"] = index
        links = {}
        for hca in hcas:
            links[hca["name"]] = link_class(gpu, hca)
        gpu["rdma"] = links
        known = [cls for cls in links.values() if cls is not None]
        best = min(known, key=class_rank) if known else None
        gpu["nearest_class"] = best
        gpu["nearest_rdma"] = sorted(name for name, cls in links.items() if best is not None and cls == best)
    for kind, items in (("gpus", gpus), ("rdma_devices", hcas)):
        for item in items:
            key = str(item["numa_node"]) if item["numa_node"] is not None else "unknown"
            node = numa_nodes.setdefault(key, {"gpus": [], "rdma_devices": []})
            node[kind].append(item["pci_address"] if kind == "gpus" else item["name"])
    for item in gpus + hcas:
        item.pop("position")
    return {
        "gpus": gpus,
        "rdma_devices": hcas,
        "numa_nodes": numa_nodes,
        "complete": all(item["pci_path"] is not None for item in gpus + hcas),
    }
