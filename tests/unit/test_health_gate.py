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
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

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
    # id:target, the form of the reason annotation and of the rolling-upgrade summary
    assert patch["failed_checks"] == ["gpu.ecc.volatile_uncorrectable:gpu3", "rdma.port.state:mlx5_2/1",
                                      "rdma.port.phys_state:mlx5_2/1"]
    assert patch["reason"] == ("validation failed: gpu.ecc.volatile_uncorrectable:gpu3, rdma.port.state:mlx5_2/1, "
                               "rdma.port.phys_state:mlx5_2/1")
    assert patch["taint"] == GATE


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


def test_no_result_at_all_holds_the_node_back():
    # fail closed: a node that was not checked is never admitted
    for empty in (None, [], [None]):
        patch = health_gate_patch(empty, current_taints=[OTHER])
        assert patch["healthy"] is False
        assert patch["failed_check"] == "gate.no_results"
        assert patch["taints"] == [OTHER, {"key": "gpufleet.io/unhealthy", "value": "gate.no_results",
                                           "effect": "NoSchedule"}]


def test_fail_on_warn_holds_warnings_back():
    assert health_gate_patch(HEALTHY_GPU)["healthy"] is True
    patch = health_gate_patch(HEALTHY_GPU, fail_on="warn")
    assert patch["healthy"] is False
    assert patch["failed_checks"] == ["gpu.temperature:gpu0"]
    assert patch["taint"]["value"] == "gpu.temperature"
    with pytest.raises(AnsibleFilterError, match="fail_on"):
        health_gate_patch(HEALTHY_GPU, fail_on="never")


def test_same_check_on_one_target_is_named_once():
    twice = result(("gpu.xid", "gpu1", "fail", "XID 79"), ("gpu.xid", "gpu1", "fail", "XID 48"))
    assert health_gate_patch(twice)["failed_checks"] == ["gpu.xid:gpu1"]


def test_hold_for_a_reason_without_results():
    patch = health_gate_patch(None, current_taints=[OTHER], reason="reboot required", value="reboot-required")
    assert patch["healthy"] is False
    assert patch["reason"] == "reboot required"
    assert patch["failed_checks"] == []
    assert patch["taints"] == [OTHER, {"key": "gpufleet.io/unhealthy", "value": "reboot-required", "effect": "NoSchedule"}]
    # without a value the reason itself is made label-safe (the one sanitiser, k8s_label_value)
    reason = "validation failed: gpu.ecc.volatile_uncorrectable:gpu3 rdma.port.state:mlx5_1/1"
    assert health_gate_patch(None, reason=reason)["taint"]["value"] == \
        "validation-failed-gpu.ecc.volatile_uncorrectable-gpu3-rdma.port"


def test_release_removes_only_our_taint():
    patch = health_gate_patch(None, current_taints=[OTHER, GATE], release=True)
    assert patch["healthy"] is True
    assert patch["taint"] is None
    assert patch["taints"] == [OTHER]
    assert patch["changed_taints"] is True


def test_taint_key_is_an_option():
    patch = health_gate_patch(SICK_GPU, current_taints=[GATE], key="example.com/held")
    assert patch["taints"] == [GATE, {"key": "example.com/held", "value": "gpu.ecc.volatile_uncorrectable",
                                      "effect": "NoSchedule"}]
    with pytest.raises(AnsibleFilterError, match="key"):
        health_gate_patch(SICK_GPU, key="")


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


def test_failed_validation_task_holds_the_node_back():
    # node_validate registered with failed_when: false after a crash or bad options: no checks
    patch = health_gate_patch({"failed": True, "msg": "option gpu.expected_count: must be >= 0"})
    assert patch["healthy"] is False
    assert patch["failed_checks"] == ["result.unhealthy:node"]
