"""Health gate filter (results -> labels/taints patch) and node labels from facts."""

import os

import pytest
from ansible.errors import AnsibleFilterError
from conftest import FIXTURES

from ansible_collections.gpufleet.cluster.plugins.filter.health_gate import (
    gpufleet_node_labels,
    health_gate_patch,
    k8s_label_value,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import SysfsReader

LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
GATE = {"key": "gpufleet.io/unhealthy", "value": "gpu.ecc.volatile_uncorrectable", "effect": "NoSchedule"}
OTHER = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


def result(*checks):
    checks = [dict(zip(("id", "target", "status", "message"), c)) for c in checks]
    summary = {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail", "skip")}
    return {"checks": checks, "summary": summary, "healthy": summary["fail"] == 0}


HEALTHY_GPU = result(("gpu.count", "node", "pass", "8 GPUs"), ("gpu.temperature", "gpu0", "warn", "hot"))
SICK_GPU = result(("gpu.count", "node", "pass", "8"), ("gpu.ecc.volatile_uncorrectable", "gpu3", "fail", "2 DBE"))
SICK_RDMA = result(("rdma.port.state", "mlx5_2/1", "fail", "DOWN"), ("rdma.port.phys_state", "mlx5_2/1", "fail", "Polling"))


def test_unhealthy_node_gets_taint_and_label():
    patch = health_gate_patch([SICK_GPU, SICK_RDMA], current_taints=[OTHER])
    assert patch["healthy"] is False
    assert patch["failed_check"] == "gpu.ecc.volatile_uncorrectable"
    assert patch["labels"] == {"gpufleet.io/failed-check": "gpu.ecc.volatile_uncorrectable",
                               "gpufleet.io/healthy": "false"}
    assert patch["taints"] == [OTHER, GATE]
    assert patch["changed_taints"] is True
    assert patch["failed_checks"] == ["gpu.ecc.volatile_uncorrectable[gpu3]", "rdma.port.state[mlx5_2/1]",
                                      "rdma.port.phys_state[mlx5_2/1]"]


def test_rdma_only_failure():
    patch = health_gate_patch([HEALTHY_GPU, SICK_RDMA])
    assert patch["taints"] == [{"key": "gpufleet.io/unhealthy", "value": "rdma.port.state", "effect": "NoSchedule"}]


def test_node_that_passes_again_is_untainted_and_unlabelled():
    patch = health_gate_patch([HEALTHY_GPU], current_taints=[OTHER, GATE])
    assert patch["healthy"] is True
    assert patch["taints"] == [OTHER]  # other owners' taints are kept
    assert patch["labels"] == {"gpufleet.io/failed-check": None, "gpufleet.io/healthy": "true"}
    assert patch["changed_taints"] is True


def test_already_gated_node_is_stable():
    patch = health_gate_patch(SICK_GPU, current_taints=[GATE])
    assert patch["taints"] == [GATE]
    assert patch["changed_taints"] is False


def test_gate_taint_value_follows_the_current_failure():
    patch = health_gate_patch(SICK_RDMA, current_taints=[GATE])
    assert patch["taints"] == [{"key": "gpufleet.io/unhealthy", "value": "rdma.port.state", "effect": "NoSchedule"}]


def test_warnings_and_skips_do_not_gate():
    skipped = result(("gpu.nvml", "node", "skip", "no GPU"))
    assert health_gate_patch([HEALTHY_GPU, skipped, None])["healthy"] is True


def test_unhealthy_without_failing_check_still_gates():
    patch = health_gate_patch({"healthy": False, "checks": [], "msg": "NVML init failed"})
    assert patch["failed_check"] == "result.unhealthy"


def test_effect_and_bad_input():
    assert health_gate_patch(SICK_GPU, effect="NoExecute")["taints"][0]["effect"] == "NoExecute"
    with pytest.raises(AnsibleFilterError, match="effect"):
        health_gate_patch(SICK_GPU, effect="Sometimes")
    with pytest.raises(AnsibleFilterError, match="check result"):
        health_gate_patch("unhealthy")
    with pytest.raises(AnsibleFilterError, match="neither"):
        health_gate_patch({"summary": {}})


@pytest.mark.parametrize("value,expected", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("gpu.ecc.volatile_uncorrectable", "gpu.ecc.volatile_uncorrectable"),
    ("mlx5_2/1", "mlx5_2-1"),
    ("  --weird__value--  ", "weird__value"),
    ("24.10-1.1.4.0.200", "24.10-1.1.4.0.200"),
    (400.0, "400"),
    (True, "true"),
    (None, ""),
    ("x" * 70 + "-" + "y", "x" * 63),
    ("a" * 62 + ".b", "a" * 62),
])
def test_label_values(value, expected):
    import re
    assert k8s_label_value(value) == expected
    assert re.match(LABEL_VALUE, k8s_label_value(value))


def test_node_labels_from_dgx_facts():
    mlx5 = gather_mlx5_facts(SysfsReader(os.path.join(FIXTURES, "nodes", "dgx-h100")), None)
    mlx5["ofed"]["package_version"] = "24.10-1.1.4.0.200"
    nvidia = {"gpu_count": 8, "pci_gpus": [{"pci_address": "0000:18:00.0", "device_id": "0x2330"}] * 8,
              "driver": {"loaded": True, "version": "580.95.05"}}
    labels = gpufleet_node_labels({"mlx5": mlx5, "nvidia": nvidia}, gpus=[{"name": "NVIDIA H100 80GB HBM3"}])
    assert labels == {
        "gpufleet.io/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "gpufleet.io/gpu.count": "8",
        "gpufleet.io/gpu.driver": "580.95.05",
        "gpufleet.io/hca.count": "9",
        "gpufleet.io/hca.ib-rate-gbps": "400",
        "gpufleet.io/hca.roce-rate-gbps": "200",
        "gpufleet.io/rdma.link-layer": "Ethernet-InfiniBand",
        "gpufleet.io/mlx5.driver-source": "ofed",
        "gpufleet.io/ofed.version": "24.10-1.1.4.0.200",
    }


def test_node_labels_without_nvml_use_pci_id():
    labels = gpufleet_node_labels({"nvidia": {"gpu_count": 2, "pci_gpus": [{"device_id": "0x20b2"}]}})
    assert labels["gpufleet.io/gpu.product"] == "pci-10de-20b2"


def test_node_labels_degraded_ports_not_counted_in_rate():
    mlx5 = gather_mlx5_facts(SysfsReader(os.path.join(FIXTURES, "nodes", "hdr-degraded")), None)
    labels = gpufleet_node_labels({"mlx5": mlx5})
    assert labels["gpufleet.io/hca.ib-rate-gbps"] == "200"
    assert "gpufleet.io/gpu.count" not in labels
