"""rdma_shared_device_config on mlx5 facts gathered from the fixture trees (docs/contracts.md, mlx5_facts)."""

import copy
import os

import pytest
from ansible.errors import AnsibleFilterError
from conftest import FIXTURES

from ansible_collections.gpufleet.cluster.plugins.filter.rdma_device_plugin import (
    rdma_shared_device_config,
    rdma_unselectable_devices,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader


def facts(node):
    return gather_mlx5_facts(SysfsReader(os.path.join(FIXTURES, "nodes", node)), None)


def resources(config):
    return {entry["resourceName"]: entry for entry in config["configList"]}


def test_dgx_h100_eight_ib_rails_and_one_roce():
    config = rdma_shared_device_config(facts("dgx-h100"))
    res = resources(config)
    assert sorted(res) == ["ib_rail%d" % i for i in range(8)] + ["roce"]
    # rails follow PCI bus order: mlx5_0 (0000:1a:00.0) first, mlx5_7 (0000:dc:00.0) last
    assert res["ib_rail0"]["selectors"]["ifNames"] == ["ibp26s0"]
    assert res["ib_rail7"]["selectors"]["ifNames"] == ["ibp220s0"]
    for index in range(8):
        selectors = res["ib_rail%d" % index]["selectors"]
        assert selectors["linkTypes"] == ["infiniband"]
        assert selectors["vendors"] == ["15b3"]
        assert selectors["drivers"] == ["mlx5_core"]
    assert res["roce"]["selectors"]["linkTypes"] == ["ether"]
    assert "enp170s0f0np0" in res["roce"]["selectors"]["ifNames"]
    assert config["periodicUpdateInterval"] == 300
    assert all(entry["rdmaHcaMax"] == 1000 for entry in config["configList"])


def test_every_netdev_is_in_exactly_one_resource():
    config = rdma_shared_device_config(facts("dgx-h100"))
    names = [n for entry in config["configList"] for n in entry["selectors"]["ifNames"]]
    assert len(names) == len(set(names))


def test_rail_order_is_bus_order_not_listing_order():
    node = facts("dgx-h100")
    shuffled = copy.deepcopy(node)
    shuffled["devices"].reverse()
    assert rdma_shared_device_config(shuffled) == rdma_shared_device_config(node)


def test_two_nodes_same_rail_with_different_netdev_names():
    first = facts("dgx-h100")
    second = copy.deepcopy(first)
    for device in second["devices"]:
        device["netdevs"] = ["x" + n for n in device["netdevs"]]
    res = resources(rdma_shared_device_config({"dgx-01": first, "dgx-02": second}))
    assert res["ib_rail0"]["selectors"]["ifNames"] == ["ibp26s0", "xibp26s0"]
    assert len(res) == 9


def test_roce_only_node():
    res = resources(rdma_shared_device_config(facts("inbox-noversion")))
    assert list(res) == ["roce"]
    assert res["roce"]["selectors"]["ifNames"] == ["enp59s0f0np0", "enp59s0f1np1"]


def test_hdr_node_keeps_degraded_rail():
    # a down port is a health matter (rdma_validate), not a reason to renumber the rails
    res = resources(rdma_shared_device_config(facts("hdr-degraded")))
    assert sorted(res) == ["ib_rail0", "ib_rail1", "ib_rail2", "ib_rail3"]
    assert res["ib_rail2"]["selectors"]["ifNames"] == ["ibp97s0"]


@pytest.mark.parametrize("node", ["mlx5-absent", "empty"])
def test_no_devices_no_resources(node):
    assert rdma_shared_device_config(facts(node))["configList"] == []


def test_devices_without_netdev_are_reported_not_selected():
    node = facts("quirks")
    config = rdma_shared_device_config(node)
    assert config["configList"] == []
    assert rdma_unselectable_devices(node) == ["mlx5_0", "mlx5_1"]


def test_spec_shaped_facts_dict():
    node = {"devices": [
        {"name": "mlx5_1", "pci_address": "0000:3c:00.0", "netdevs": ["ib1"],
         "ports": [{"port": 1, "link_layer": "InfiniBand"}]},
        {"name": "mlx5_0", "pci_address": "0000:1a:00.0", "netdevs": ["ib0"],
         "ports": [{"port": 1, "link_layer": "InfiniBand"}]},
        {"name": "mlx5_2", "pci_address": "0000:aa:00.0", "netdevs": ["eth2"],
         "ports": [{"port": 1, "link_layer": "Ethernet"}]},
    ]}
    config = rdma_shared_device_config([node], rdma_hca_max=63, ib_resource_prefix="ib", roce_resource_name="roce_a")
    assert [(e["resourceName"], e["selectors"]["ifNames"], e["rdmaHcaMax"]) for e in config["configList"]] == [
        ("ib0", ["ib0"], 63), ("ib1", ["ib1"], 63), ("roce_a", ["eth2"], 63)]


@pytest.mark.parametrize("kwargs,message", [
    ({"rdma_hca_max": 0}, "rdma_hca_max"),
    ({"rdma_hca_max": "many"}, "rdma_hca_max"),
    ({"ib_resource_prefix": "ib/rail"}, "ib_resource_prefix"),
    ({"roce_resource_name": ""}, "roce_resource_name"),
])
def test_bad_options_name_the_option(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        rdma_shared_device_config(facts("dgx-h100"), **kwargs)


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="expected mlx5 facts"):
        rdma_shared_device_config("mlx5_0")


def test_numa_pools_dgx_h100():
    config = rdma_shared_device_config(facts("dgx-h100"), pool_by="numa")
    res = resources(config)
    assert sorted(res) == ["rdma_numa0", "rdma_numa1"]
    assert res["rdma_numa0"]["selectors"]["ifNames"] == ["ibp26s0", "ibp60s0", "ibp77s0", "ibp94s0"]
    assert res["rdma_numa0"]["selectors"]["linkTypes"] == ["infiniband"]
    # socket 1, in PCI bus order: four IB HCAs and the RoCE LAG at 0000:aa:00.0 (the first PF's netdev and bond0)
    numa1 = res["rdma_numa1"]["selectors"]
    assert [n for n in numa1["ifNames"] if n.startswith("ibp")] == ["ibp156s0", "ibp188s0", "ibp204s0", "ibp220s0"]
    assert set(numa1["ifNames"]) - {"ibp156s0", "ibp188s0", "ibp204s0", "ibp220s0"} == {
        "enp170s0f0np0", "bond0"}
    assert len(numa1["ifNames"]) == 6
    assert numa1["linkTypes"] == ["infiniband", "ether"]
    assert res["rdma_numa1"]["rdmaHcaMax"] == 1000 and numa1["vendors"] == ["15b3"]
    # default stays per rail
    assert "ib_rail0" in resources(rdma_shared_device_config(facts("dgx-h100")))


def test_numa_pools_custom_prefix_and_two_sockets():
    config = rdma_shared_device_config(facts("pcie-2s"), pool_by="numa", numa_resource_prefix="hca_socket")
    assert [(e["resourceName"], e["selectors"]["ifNames"]) for e in config["configList"]] == [
        ("hca_socket0", ["ibp66s0"]), ("hca_socket1", ["ibp130s0"])]


def test_numa_pools_fail_closed_without_numa_node():
    node = facts("dgx-h100")
    node["devices"][0]["numa_node"] = None
    with pytest.raises(AnsibleFilterError, match=r"pool_by=numa but RDMA device mlx5_0 \(0000:1a:00.0\) has no NUMA"):
        rdma_shared_device_config(node, pool_by="numa")
    with pytest.raises(AnsibleFilterError, match="pool_by='socket' must be rail or numa"):
        rdma_shared_device_config(node, pool_by="socket")
    with pytest.raises(AnsibleFilterError, match="numa_resource_prefix"):
        rdma_shared_device_config(node, pool_by="numa", numa_resource_prefix="bad-name")
