"""HCA interrupt affinity: the reading (module_utils/tuning/irq_affinity.py), the module hca_irq_affinity that
writes it and the drift check tuning.irq_affinity, on a fixture tree (root option: /proc/irq cannot be
written in a container).

The tree: tests/irq_fixture.py (kernel ABI sources named there).
"""

import builtins
import errno
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.tuning_checks import validate_tuning
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import TUNING
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.irq_affinity import apply_affinity
from irq_fixture import NODE0, NODE1, node


def affinity(root, irq):
    with open(os.path.join(root, "proc/irq/%d/smp_affinity_list" % irq)) as handle:
        return handle.read().strip()


def tuning(root, **options):
    return [(c["id"], c["target"], c["status"], c["message"])
            for c in validate_tuning(SysfsReader(root), TUNING.defaults(options)).as_list()]


def test_cpulist_round_trip():
    assert parse_cpulist(NODE0) == set(range(0, 56)) | set(range(112, 168))
    assert format_cpulist(parse_cpulist(NODE0)) == NODE0
    assert format_cpulist({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    for bad in ("", "1-0", "a", "1,,2", None):
        assert parse_cpulist(bad) is None


def test_drift_then_apply_then_no_drift(tmp_path):
    root = node(tmp_path)
    before = tuning(root, irq_affinity=True)
    assert [c[:3] for c in before] == [("tuning.irq_affinity", "mlx5_0", "fail"), ("tuning.irq_affinity", "mlx5_4", "pass")]
    assert before[0][3] == "2 of 3 interrupts off NUMA node 0 (CPUs 0-55,112-167): IRQ 151 on 0-223, IRQ 152 on 60"

    devices, moved, errors = apply_affinity(SysfsReader(root), check_mode=True)
    assert (moved, errors) == (2, []) and affinity(root, 151) == "0-223"  # check mode writes nothing
    assert devices[0]["moved"] == [{"irq": 151, "before": "0-223", "after": NODE0},
                                   {"irq": 152, "before": "60", "after": NODE0}]

    devices, moved, errors = apply_affinity(SysfsReader(root))
    assert (moved, errors) == (2, [])
    assert [affinity(root, irq) for irq in (150, 151, 152, 190, 191)] == [NODE0] * 3 + [NODE1] * 2
    assert [c[2] for c in tuning(root, irq_affinity=True)] == ["pass", "pass"]
    assert apply_affinity(SysfsReader(root))[1:] == (0, [])  # idempotent


def test_selected_devices_only(tmp_path):
    root = node(tmp_path)
    assert [c[1] for c in tuning(root, irq_affinity=True, irq_devices=["mlx5_4"])] == ["mlx5_4"]
    _devices, moved, _errors = apply_affinity(SysfsReader(root), devices=["mlx5_4"])
    assert moved == 0 and affinity(root, 151) == "0-223"


def test_unset_adds_no_check(tmp_path):
    assert tuning(node(tmp_path)) == []


def test_fail_closed_nothing_written(tmp_path):
    root = node(tmp_path)
    os.remove(os.path.join(root, "sys/devices/pci0000:00/0000:00:01.0/0000:9a:00.0/local_cpulist"))
    _devices, moved, errors = apply_affinity(SysfsReader(root))
    assert moved == 0 and affinity(root, 151) == "0-223"
    assert errors == ["cannot read /sys/class/infiniband/mlx5_4/device/local_cpulist"]
    assert tuning(root, irq_affinity=True)[1][2:] == (
        "fail", "cannot read /sys/class/infiniband/mlx5_4/device/local_cpulist")
    checks = tuning(root, irq_affinity=True, irq_devices=["mlx5_9"])
    assert checks == [("tuning.irq_affinity", "mlx5_9", "fail", "no RDMA device mlx5_9 under /sys/class/infiniband")]


def test_no_rdma_device(tmp_path):
    assert tuning(str(tmp_path), irq_affinity=True) == [
        ("tuning.irq_affinity", "node", "fail",
         "no RDMA device under /sys/class/infiniband; HCA interrupt affinity configured")]
    assert apply_affinity(SysfsReader(str(tmp_path)))[2] == ["no RDMA device under /sys/class/infiniband"]


def test_unreadable_affinity_is_named(tmp_path):
    root = node(tmp_path)
    path = os.path.join(root, "proc/irq/152")
    os.remove(os.path.join(path, "smp_affinity_list"))
    os.mkdir(os.path.join(path, "smp_affinity_list"))  # not writable as a file: the write fails
    _devices, _moved, errors = apply_affinity(SysfsReader(root))
    assert len(errors) == 1 and errors[0].startswith("mlx5_0: cannot read /proc/irq/152/smp_affinity_list")


def test_refused_write_is_named(tmp_path, monkeypatch):
    """The kernel answers EIO for a kernel-managed interrupt and EROFS for a read-only /proc."""
    root = node(tmp_path)
    real_open = open

    def refusing_open(path, mode="r", *args, **kwargs):
        if "w" in mode and path.endswith("/151/smp_affinity_list"):
            raise OSError(errno.EIO, "Input/output error")
        if "w" in mode and path.endswith("/152/smp_affinity_list"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    _devices, moved, errors = apply_affinity(SysfsReader(root))
    assert moved == 2
    assert errors == [
        "mlx5_0: cannot write /proc/irq/151/smp_affinity_list: Input/output error (a kernel-managed interrupt)",
        "mlx5_0: cannot write /proc/irq/152/smp_affinity_list: Read-only file system (read-only /proc: a container?)"]
