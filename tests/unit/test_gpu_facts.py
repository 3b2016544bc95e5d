"""gather_gpu_facts against the fixture trees (docs/contracts.md, gpu_facts)."""

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts, pci_link
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from nvml_scenarios import node

DGX_GPUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
            "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
FACT_KEYS = {"pci_gpus", "gpu_count", "nvswitch_count", "driver", "nouveau_loaded", "peermem",
             "fabricmanager_required"}


def facts(name):
    return gather_gpu_facts(SysfsReader(node(name)))


def test_dgx_h100_gpus_switches_and_modules():
    result = facts("dgx-h100")
    assert set(result) == FACT_KEYS
    assert [g["pci_address"] for g in result["pci_gpus"]] == DGX_GPUS
    assert {g["device_id"] for g in result["pci_gpus"]} == {"0x2330"}
    assert [g["numa_node"] for g in result["pci_gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(set(g) == {"pci_address", "device_id", "numa_node"} for g in result["pci_gpus"])
    assert result["gpu_count"] == 8
    # 4 NVSwitches; the ASPEED BMC VGA (class 0x030000, vendor 0x1a03) and the ConnectX HCAs
    # of the same tree are not counted.
    assert result["nvswitch_count"] == 4
    assert result["fabricmanager_required"] is True
    assert result["driver"] == {"loaded": True, "version": "580.95.05"}
    assert result["nouveau_loaded"] is False
    assert result["peermem"] == {"nvidia_peermem": True, "nv_peer_mem": False, "registered": True}


def test_workstation_geforce_counts_the_vga_gpu_only():
    result = facts("workstation-geforce")
    # 0000:01:00.1 is the board's HDMI audio (NVIDIA, class 0x0403); 0000:00:02.0 an Intel iGPU.
    assert result["pci_gpus"] == [{"pci_address": "0000:01:00.0", "device_id": "0x2684", "numa_node": None}]
    assert result["gpu_count"] == 1
    assert result["nvswitch_count"] == 0
    assert result["fabricmanager_required"] is False
    assert result["driver"] == {"loaded": True, "version": "580.95.05"}
    assert result["peermem"] == {"nvidia_peermem": False, "nv_peer_mem": False, "registered": False}


def test_nouveau_host_has_gpu_but_no_nvidia_driver():
    result = facts("gpu-nouveau")
    assert result["gpu_count"] == 1
    assert result["pci_gpus"][0] == {"pci_address": "0000:65:00.0", "device_id": "0x20b5", "numa_node": 0}
    assert result["driver"] == {"loaded": False, "version": None}
    assert result["nouveau_loaded"] is True


def test_host_without_pci_bus(tmp_path):
    result = gather_gpu_facts(SysfsReader(str(tmp_path)))
    assert result["pci_gpus"] == [] and result["gpu_count"] == 0 and result["nvswitch_count"] == 0
    assert result["driver"] == {"loaded": False, "version": None}
    assert result["fabricmanager_required"] is False


def _function(root, address, **files):
    path = root / "sys" / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True)
    for name, value in files.items():
        (path / name).write_text(value + "\n")


def test_malformed_fields_are_skipped_one_by_one(tmp_path):
    _function(tmp_path, "0000:01:00.0", vendor="0x10de", device="0x20B5", **{"class": "0x030200"},
              numa_node="garbage")
    _function(tmp_path, "0000:02:00.0", vendor="0x10de", **{"class": "not-a-class"})  # skipped
    _function(tmp_path, "0000:03:00.0", **{"class": "0x030200"})  # vendor unreadable: skipped
    _function(tmp_path, "0000:04:00.0", vendor="0x10de", **{"class": "0x030000"})  # no device file
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)  # loaded, version file missing
    result = gather_gpu_facts(SysfsReader(str(tmp_path)))
    assert result["pci_gpus"] == [
        {"pci_address": "0000:01:00.0", "device_id": "0x20b5", "numa_node": None},
        {"pci_address": "0000:04:00.0", "device_id": None, "numa_node": None},
    ]
    assert result["driver"] == {"loaded": True, "version": None}


def test_pci_bus_is_listed_once(monkeypatch):
    reader = SysfsReader(node("dgx-h100"))
    calls = []
    real_listdir = os.listdir
    # below a root other than / the reader lists the directory it opened (a descriptor: its path from /proc)
    monkeypatch.setattr(os, "listdir", lambda p: calls.append(
        os.readlink("/proc/self/fd/%d" % p) if isinstance(p, int) else p) or real_listdir(p))
    gather_gpu_facts(reader)
    gather_gpu_facts(reader)
    assert len([c for c in calls if c.endswith("sys/bus/pci/devices")]) == 1


@pytest.mark.parametrize("address,width", [("0000:18:00.0", 16), ("0000:05:00.0", 1)])
def test_pci_link_reads_the_functions_own_capability(address, width):
    link = pci_link(SysfsReader(node("dgx-h100")), address)
    assert link["max_width"] == width
    assert link["max_speed"].endswith("GT/s PCIe")
