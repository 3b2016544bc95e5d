"""GPU <-> RDMA topology from sysfs (module_utils/rdma/topology.py, module topology_facts) and the NCCL
filters built on it (plugins/filter/topology.py)."""

import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.topology import (
    FilterModule,
    nccl_ib_hca,
    nccl_topology_env,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.topology import (
    gather_topology_facts,
    link_class,
    pci_position,
)
from nvml_scenarios import node

DGX_HCAS = ["mlx5_%d" % i for i in range(8)]


def facts(name):
    return gather_topology_facts(SysfsReader(node(name)))


def row(gpu):
    return [gpu["rdma"][name] for name in sorted(gpu["rdma"])]


def test_dgx_h100_each_gpu_shares_a_switch_with_one_connectx7():
    result = facts("dgx-h100")
    assert result["complete"] is True
    gpus = result["gpus"]
    assert [g["pci_address"] for g in gpus] == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                                "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["nearest_rdma"] for g in gpus] == [[name] for name in DGX_HCAS]
    assert {g["nearest_class"] for g in gpus} == {"PIX"}
    # The matrix nvidia-smi topo -m prints on such a host: PIX to its own NIC, NODE to the other
    # NICs of its socket, SYS across; the storage LAG on GPU 5's root complex is PHB.
    assert row(gpus[0]) == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS", "SYS"]
    assert row(gpus[4]) == ["SYS", "SYS", "SYS", "SYS", "PIX", "NODE", "NODE", "NODE", "NODE"]
    assert gpus[5]["rdma"]["mlx5_bond_0"] == "PHB"
    assert gpus[0]["host_bridge"] == "pci0000:10"
    assert gpus[0]["pci_path"] == ["0000:10:03.0", "0000:11:00.0", "0000:12:00.0", "0000:18:00.0"]
    assert result["numa_nodes"]["0"] == {"gpus": ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"],
                                         "rdma_devices": DGX_HCAS[:4]}
    assert result["numa_nodes"]["1"]["rdma_devices"] == DGX_HCAS[4:] + ["mlx5_bond_0"]
    bond = [d for d in result["rdma_devices"] if d["name"] == "mlx5_bond_0"][0]
    assert bond["pci_address"] == "0000:aa:00.0" and bond["ports"] == [{"port": 1, "link_layer": "Ethernet"}]
    # NVSwitches and the ASPEED VGA are not GPUs here either
    assert len(gpus) == 8


def test_dual_socket_pcie_server_without_switches():
    gpus = facts("pcie-2s")["gpus"]
    assert [(g["pci_address"], g["nearest_class"], g["nearest_rdma"]) for g in gpus] == [
        ("0000:01:00.0", "NODE", ["mlx5_0"]),  # other root complex, same socket
        ("0000:41:00.0", "PHB", ["mlx5_0"]),   # same root complex, another root port
        ("0000:81:00.0", "PHB", ["mlx5_1"]),
        ("0000:c1:00.0", "NODE", ["mlx5_1"]),
    ]
    assert [row(g) for g in gpus] == [["NODE", "SYS"], ["PHB", "SYS"], ["SYS", "PHB"], ["SYS", "NODE"]]


def dev(host, bridges, numa=0):
    return {"position": {"host_bridge": host, "bridges": bridges}, "numa_node": numa}


@pytest.mark.parametrize("a, b, expected", [
    # two functions on one downstream port / below one root port: one bridge
    (dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0"]), dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0"]), "PIX"),
    (dev("pci0000:00", ["00:01.0"]), dev("pci0000:00", ["00:01.0"]), "PIX"),
    # two downstream ports of one switch
    (dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0"]), dev("pci0000:00", ["00:01.0", "01:00.0", "02:01.0"]), "PIX"),
    # two-level switch (DGX A100 style): GPU below the second level, NIC on the first
    (dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0", "03:00.0", "04:00.0"]),
     dev("pci0000:00", ["00:01.0", "01:00.0", "02:01.0"]), "PXB"),
    # two switches joined at the root port
    (dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0", "03:00.0", "04:00.0"]),
     dev("pci0000:00", ["00:01.0", "01:00.0", "02:00.0", "05:00.0", "06:00.0"]), "PXB"),
    (dev("pci0000:00", ["00:01.0"]), dev("pci0000:00", ["00:03.0"]), "PHB"),
    (dev("pci0000:00", ["00:01.0"]), dev("pci0000:40", ["40:01.0"]), "NODE"),
    (dev("pci0000:00", ["00:01.0"]), dev("pci0000:80", ["80:01.0"], numa=1), "SYS"),
    # an unknown NUMA node is the worst case
    (dev("pci0000:00", ["00:01.0"], numa=None), dev("pci0000:40", ["40:01.0"], numa=None), "SYS"),
    ({"position": None, "numa_node": 0}, dev("pci0000:00", ["00:01.0"]), None),
])
def test_link_class(a, b, expected):
    assert link_class(a, b) == expected
    assert link_class(b, a) == expected


def test_unresolvable_positions_are_null_not_guessed(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"))
    os.makedirs(os.path.join(root, "outside/0000:01:00.0"))
    # a link leaving the root, a link to a path without a host bridge, a dangling link
    os.symlink(os.path.join(root, "outside/0000:01:00.0"), os.path.join(root, "sys/bus/pci/devices/0000:01:00.0"))
    os.makedirs(os.path.join(root, "sys/devices/platform/0000:02:00.0"))
    os.symlink("../../../devices/platform/0000:02:00.0", os.path.join(root, "sys/bus/pci/devices/0000:02:00.0"))
    os.symlink("../../../devices/pci0000:00/0000:03:00.0", os.path.join(root, "sys/bus/pci/devices/0000:03:00.0"))
    reader = SysfsReader(os.path.join(root, "sys", ".."))
    for address in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"):
        assert pci_position(reader, address) is None
    for address, klass in (("0000:02:00.0", "0x030200"),):
        base = os.path.join(root, "sys/devices/platform", address)
        for name, value in (("vendor", "0x10de"), ("class", klass), ("numa_node", "-1")):
            with open(os.path.join(base, name), "w") as handle:
                handle.write(value + "\n")
    result = gather_topology_facts(SysfsReader(root))
    assert result["gpus"][0]["pci_path"] is None and result["gpus"][0]["nearest_class"] is None
    assert result["complete"] is False
    assert result["numa_nodes"] == {"unknown": {"gpus": ["0000:02:00.0"], "rdma_devices": []}}


def test_nccl_ib_hca_dgx_h100():
    topology = facts("dgx-h100")
    assert nccl_ib_hca(topology, max_class="PIX") == "=" + ",".join("%s:1" % d for d in DGX_HCAS)
    assert nccl_topology_env(topology) == {"NCCL_IB_HCA": "=" + ",".join("%s:1" % d for d in DGX_HCAS),
                                           "NCCL_NET_GDR_LEVEL": "PIX"}
    # RoCE only: the LAG is the one Ethernet device, PHB from GPU 5 and NODE from the others
    with pytest.raises(AnsibleFilterError, match="GPU 0000:18:00.0 has no Ethernet RDMA device within PXB"):
        nccl_ib_hca(topology, link_layer="Ethernet")
    assert nccl_topology_env(topology, max_class="SYS", link_layer="Ethernet") == {
        "NCCL_IB_HCA": "=mlx5_bond_0:1", "NCCL_NET_GDR_LEVEL": "SYS"}


def test_nccl_env_dual_socket_pcie():
    topology = facts("pcie-2s")
    with pytest.raises(AnsibleFilterError, match="GPU 0000:01:00.0 has no InfiniBand RDMA device within PXB "
                                                 r"\(nearest: NODE\)"):
        nccl_ib_hca(topology)
    assert nccl_topology_env(topology, max_class="NODE") == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
                                                             "NCCL_NET_GDR_LEVEL": "PHB"}


@pytest.mark.parametrize("topology, options, message", [
    ({}, {}, "expected ansible_facts.gpu_topology"),
    ({"gpus": [], "rdma_devices": []}, {}, "has no NVIDIA GPU"),
    ({"gpus": [], "rdma_devices": []}, {"max_class": "NV18"}, "max_class='NV18' is not one of"),
    ({"gpus": [], "rdma_devices": []}, {"link_layer": "ib"}, "link_layer='ib' is not one of"),
    ({"gpus": [{"pci_address": "0000:18:00.0", "rdma": {"mlx5_0": None}}],
      "rdma_devices": [{"name": "mlx5_0", "ports": [{"port": 1, "link_layer": "InfiniBand"}]}]}, {},
     "nearest: none with a known PCIe position"),
])
def test_filter_errors_name_the_problem(topology, options, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nccl_ib_hca(topology, **options)


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {"nccl_ib_hca", "nccl_topology_env"}
