# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rdma_shared_device_config: k8s-rdma-shared-dev-plugin config generated from mlx5 facts.

Documentation: rdma_shared_device_config.yml next to this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

MELLANOX_VENDOR = "15b3"
LINK_TYPES = {"InfiniBand": "infiniband", "Ethernet": "ether"}
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9_]{1,63}$")


def _pci_key(device):
    address = device.get("pci_address") or ""
    return (address == "", address, device.get("name") or "")


def _link_layer(device):
    """Link layer of the device's first port that reports one (ConnectX ports share it)."""
    for port in device.get("ports") or []:
        if port.get("link_layer") in LINK_TYPES:
            return port["link_layer"]
    return None


def _as_fact_list(facts):
    """Accept one mlx5 facts dict, a list of them, or a dict host -> facts (hostvars style)."""
    if isinstance(facts, dict) and "devices" in facts:
        return [facts]
    if isinstance(facts, dict):
        return [facts[name] for name in sorted(facts)]
    if isinstance(facts, (list, tuple)):
        return list(facts)
    raise AnsibleFilterError("rdma_shared_device_config: expected mlx5 facts (dict with 'devices'), "
                             "a list of them or a dict host -> facts, got %s" % type(facts).__name__)


def _add(names, new):
    for name in new:
        if name not in names:
            names.append(name)


def classify_rails(facts):
    """``({rail_index: [netdevs]}, [roce netdevs], [unselectable device names])`` over all nodes.

    InfiniBand devices are ordered by PCI address on each node, so ``rail N`` is the N-th IB HCA in
    bus order (the order DGX/HGX cabling follows); the same rail on different nodes may have
    different netdev names, the selector lists all of them. Devices with no netdev cannot be
    selected by ``ifNames`` and are returned separately.
    """
    rails = {}
    roce = []
    unselectable = []
    for node in _as_fact_list(facts):
        if not isinstance(node, dict):
            raise AnsibleFilterError("rdma_shared_device_config: a node's mlx5 facts is not a dict")
        ib_index = 0
        for device in sorted(node.get("devices") or [], key=_pci_key):
            layer = _link_layer(device)
            netdevs = [n for n in device.get("netdevs") or [] if n]
            if layer is None:
                continue
            if not netdevs:
                _add(unselectable, [device.get("name") or "?"])
                if layer == "InfiniBand":
                    ib_index += 1
                continue
            if layer == "InfiniBand":
                _add(rails.setdefault(ib_index, []), netdevs)
                ib_index += 1
            else:
                _add(roce, netdevs)
    return rails, roce, unselectable


def classify_numa(facts):
    """``{numa_node: (netdevs, link types)}`` over all nodes: every selectable device (IB and RoCE)
    goes to the pool of its NUMA node. A selectable device without a NUMA node fails: placing it
    in a guessed pool would hand pods a far HCA."""
    pools = {}
    for node in _as_fact_list(facts):
        if not isinstance(node, dict):
            raise AnsibleFilterError("rdma_shared_device_config: a node's mlx5 facts is not a dict")
        for device in sorted(node.get("devices") or [], key=_pci_key):
            layer = _link_layer(device)
            netdevs = [n for n in device.get("netdevs") or [] if n]
            if layer is None or not netdevs:
                continue
            numa = device.get("numa_node")
            if not isinstance(numa, int) or isinstance(numa, bool) or numa < 0:
                raise AnsibleFilterError(
                    "rdma_shared_device_config: pool_by=numa but RDMA device %s (%s) has no NUMA node "
                    "(numa_node %r); use pool_by=rail on this node" % (device.get("name") or "?",
                                                                       device.get("pci_address"), numa))
            names, types = pools.setdefault(numa, ([], []))
            _add(names, netdevs)
            _add(types, [LINK_TYPES[layer]])
    return pools


def rdma_shared_device_config(facts, rdma_hca_max=1000, ib_resource_prefix="ib_rail",
                              roce_resource_name="roce", periodic_update_interval=300,
                              drivers=None, pool_by="rail", numa_resource_prefix="rdma_numa"):
    """The plugin's ``config.json`` dict: one resource per InfiniBand rail plus one for RoCE, or
    (``pool_by='numa'``) one resource per NUMA node."""
    if pool_by not in ("rail", "numa"):
        raise AnsibleFilterError("rdma_shared_device_config: option pool_by=%r must be rail or numa" % (pool_by,))
    for option, value in (("ib_resource_prefix", ib_resource_prefix),
                          ("roce_resource_name", roce_resource_name),
                          ("numa_resource_prefix", numa_resource_prefix)):
        if not _RESOURCE_NAME.match(str(value) + ("0" if option.endswith("_prefix") else "")):
            raise AnsibleFilterError("rdma_shared_device_config: option %s=%r is not a valid resource "
                                     "name ([A-Za-z0-9_], at most 63 characters)" % (option, value))
    try:
        hca_max = int(rdma_hca_max)
    except (TypeError, ValueError):
        raise AnsibleFilterError("rdma_shared_device_config: option rdma_hca_max must be an integer")
    if hca_max < 1:
        raise AnsibleFilterError("rdma_shared_device_config: option rdma_hca_max must be >= 1")
    drivers = list(drivers) if drivers else ["mlx5_core"]
    if pool_by == "numa":
        pools = classify_numa(facts)
        return {"periodicUpdateInterval": int(periodic_update_interval), "configList": [{
            "resourceName": "%s%d" % (numa_resource_prefix, numa),
            "rdmaHcaMax": hca_max,
            "selectors": {"vendors": [MELLANOX_VENDOR], "drivers": drivers,
                          "ifNames": pools[numa][0], "linkTypes": pools[numa][1]},
        } for numa in sorted(pools)]}
    rails, roce, _unselectable = classify_rails(facts)
    config_list = []
    for index in sorted(rails):
        config_list.append({
            "resourceName": "%s%d" % (ib_resource_prefix, index),
            "rdmaHcaMax": hca_max,
            "selectors": {"vendors": [MELLANOX_VENDOR], "drivers": drivers,
                          "ifNames": rails[index], "linkTypes": [LINK_TYPES["InfiniBand"]]},
        })
    if roce:
        config_list.append({
            "resourceName": roce_resource_name,
            "rdmaHcaMax": hca_max,
            "selectors": {"vendors": [MELLANOX_VENDOR], "drivers": drivers,
                          "ifNames": roce, "linkTypes": [LINK_TYPES["Ethernet"]]},
        })
    return {"periodicUpdateInterval": int(periodic_update_interval), "configList": config_list}


def rdma_unselectable_devices(facts):
    """RDMA devices the generated config cannot select (no netdev), for a warning."""
    return classify_rails(facts)[2]


class FilterModule(object):
    def filters(self):
        return {
            "rdma_shared_device_config": rdma_shared_device_config,
            "rdma_unselectable_devices": rdma_unselectable_devices,
        }
