"""node_capture (module_utils/capture/capture.py, capture_walk.py, capture_sources.py): the allow-list follows
the readers, a capture replays to the same results on every fixture node, nothing identifying leaves the node,
reads are bounded."""

import calendar
import copy
import json
import os
import pathlib
import shutil
import tarfile
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.capture import capture, capture_walk
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning.irq_affinity import hca_irqs
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.topology import gather_topology_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
from nvml_scenarios import NODES, fake_with, load_fake, scenario_files
from runners import ScriptedRunner

NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
ALL_NODES = sorted(n for n in os.listdir(NODES) if os.path.isdir(os.path.join(NODES, n)))
SCENARIO = {"dgx-h100": "h100-healthy", "workstation-geforce": "geforce-rtx4090", "pcie-2s": "h100-healthy",
            "gpu-nouveau": "nvml-driver-not-loaded"}
# every check of every family runs (the tuning family only with its options set)
TUNING = {"hugepages_2m": 1024, "hugepages_1g": 8, "tuned_profile": "throughput-performance",
          "kubelet_policy": {"cpu_manager_policy": "static", "topology_manager_policy": "single-numa-node"},
          "irq_affinity": True}
OPTION_SETS = {
    "defaults": {"gpu": {}, "rdma": {}},
    "strict": {"gpu": {"expected_count": 8, "expected_driver_version": "580", "require_persistence_mode": True},
               "rdma": {"expected_devices": 4, "min_rate_gbps": 200, "require_peermem": True,
                        "check_counters": True},
               "tuning": TUNING},
}


class RecordingReader(SysfsReader):
    """A SysfsReader that notes every path a reader looks at (read, list, link, exists)."""

    def __init__(self, root):
        super(RecordingReader, self).__init__(root)
        self.seen = set()

    def path(self, rel):
        self.seen.add(rel.lstrip("/"))
        return super(RecordingReader, self).path(rel)


def everything(root, adapter, reader=None, options="strict"):
    """What every read-only entry point answers on ``root``: node_validate's payload (its timing
    left out) and the three fact gatherers."""
    params = dict(copy.deepcopy(OPTION_SETS[options]), root=root, fail_on="never")
    payload, errors = validate_node(FAMILIES, params, runner=ScriptedRunner(), nvml=adapter, now=NOW,
                                    reader=reader)
    assert errors == []
    payload.pop("elapsed_ms")
    reader = reader or SysfsReader(root)
    return {"node_validate": payload, "gpu_facts": gather_gpu_facts(reader),
            "mlx5_facts": gather_mlx5_facts(reader, ScriptedRunner()),
            "topology_facts": gather_topology_facts(reader), "irqs": hca_irqs(reader)}


def adapter_for(name):
    return NvmlAdapter(fake_with(SCENARIO.get(name, "h100-healthy")))


def capture_to(tmp_path, root, binding, hostnames=("gpu-node-17.example.org", "gpu-node-17"), **params):
    """Capture ``root`` into an archive, unpack it: (capture, unpacked directory, archive path)."""
    params = dict(params, root=root)
    original = capture.host_names
    capture.host_names = lambda: sorted(hostnames)
    try:
        result = capture.capture_node(params, ScriptedRunner(), binding=binding, now=NOW)
        dest = str(tmp_path / "capture.tar.gz")
        capture.write_archive(result, dest)
    finally:
        capture.host_names = original
    unpack(dest, str(tmp_path / "unpacked"))
    return result, str(tmp_path / "unpacked" / capture.ARCHIVE_TOP), dest


def unpack(dest, target):
    """Unpack an archive the way Python 3.14 does by default (tarfile's ``data`` filter: no absolute
    link, no link or member outside the destination, no device): every capture of the tests goes
    through here, so each one is an archive the receiver can unpack safely."""
    with tarfile.open(dest) as tar:
        tar.extractall(target, filter="data")
    return target


_CAPTURES = {}


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """capture_to of (node, scenario), made once per module (the dgx-h100 capture serves the
    round trip and the lab's healthy node)."""
    def get(name, scenario):
        if (name, scenario) not in _CAPTURES:
            directory = tmp_path_factory.mktemp("capture")
            _CAPTURES[(name, scenario)] = capture_to(directory, os.path.join(NODES, name), fake_with(scenario))
        return _CAPTURES[(name, scenario)]
    yield get
    _CAPTURES.clear()


def replay_adapter(unpacked):
    fake = load_fake()
    path = os.path.join(unpacked, capture.NVML_FILE)
    if os.path.exists(path):
        fake.set_scenario(path)
    return NvmlAdapter(fake)


def as_text(result, root):
    return json.dumps(result, sort_keys=True, default=sorted).replace(root.rstrip("/"), "<root>")


# -- the allow-list follows the code ------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_NODES)
def test_every_path_the_readers_look_at_is_captured(name):
    reader = RecordingReader(os.path.join(NODES, name))
    everything(reader.root, adapter_for(name), reader=reader)
    assert reader.seen  # the readers ran
    assert sorted(p for p in reader.seen if not capture_walk.allowed(p, capture.capture_patterns())) == []


def test_allowed_knows_what_is_not_in_the_list():
    patterns = capture.capture_patterns()
    assert capture_walk.allowed("sys/class/infiniband/mlx5_0/ports/1/gids/3", patterns)
    assert capture_walk.allowed("sys/bus/pci/devices", patterns)  # a listed directory
    assert not capture_walk.allowed("etc/shadow", patterns)
    assert not capture_walk.allowed("sys/class/net/eth0/address", patterns)
    assert not capture_walk.allowed("proc/self/environ", patterns)


# -- replay -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_NODES)
def test_a_capture_replays_to_the_same_results(captured, name):
    root = os.path.join(NODES, name)
    result, unpacked, _dest = captured(name, SCENARIO.get(name, "h100-healthy"))
    before = everything(root, adapter_for(name))
    after = everything(os.path.join(unpacked, "root"), replay_adapter(unpacked))
    # modulo pseudonyms: the original's values go through the capture's own mapping
    expected = json.loads(result.pseudo.text(as_text(before, root)))
    assert json.loads(as_text(after, os.path.join(unpacked, "root"))) == expected
    checks = before["node_validate"]["checks"]
    assert len(checks) > 10 and any(c["id"].startswith("tuning.") for c in checks)


# The lab's simulated nodes (inventories/lab): the dgx-h100 tree, h100-healthy (gpufleet-lab-1, -2) and
# the ECC fault of gpufleet-lab-3, validated with the lab's tier (8 GPUs, driver 580, 9 HCAs, no XID scan).
LAB = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
       "rdma": {"expected_devices": 9}, "tuning": {}}


@pytest.mark.parametrize("scenario", ["h100-healthy", "h100-ecc-volatile-uncorrectable"])
def test_the_lab_nodes_replay(captured, scenario):
    root = os.path.join(NODES, "dgx-h100")
    result, unpacked, _dest = captured("dgx-h100", scenario)
    params = dict(LAB, fail_on="never")
    before, errors = validate_node(FAMILIES, dict(params, root=root), runner=ScriptedRunner(),
                                   nvml=NvmlAdapter(fake_with(scenario)), now=NOW)
    after, errors2 = validate_node(FAMILIES, dict(params, root=os.path.join(unpacked, "root")),
                                   runner=ScriptedRunner(), nvml=replay_adapter(unpacked), now=NOW)
    assert errors == errors2 == []
    for payload in (before, after):
        payload.pop("elapsed_ms")
    assert json.loads(as_text(after, os.path.join(unpacked, "root"))) == json.loads(
        result.pseudo.text(as_text(before, root)))
    assert after["healthy"] is (scenario == "h100-healthy")


@pytest.mark.parametrize("scenario", scenario_files())
def test_every_nvml_scenario_is_recorded_so_that_it_replays(scenario):
    """The recorder over the GPU family, then the fake loaded with what it wrote: the same GPU
    checks, gpus and nvml keys (errors, lost GPUs, old bindings, missing functions included)."""
    node = "workstation-geforce" if scenario.startswith("geforce") else "dgx-h100"
    reader = SysfsReader(os.path.join(NODES, node))
    facts = gather_gpu_facts(reader)
    recorded, status = capture.record_nvml(reader, facts, binding=fake_with(scenario))
    assert status["recorded"] is True and status["calls"] > 0
    fake = load_fake()
    fake.set_scenario(json.loads(json.dumps(recorded)))  # as written to nvml.json
    params = {"gpu": {"xid_source": "none"}, "rdma": {"enabled": False}}
    original = everything_gpu(reader.root, NvmlAdapter(fake_with(scenario)), params)
    replayed = everything_gpu(reader.root, NvmlAdapter(fake), params)
    assert replayed == original
    assert status["notes"] == []


def test_answers_and_errors_of_single_queries_are_recorded():
    """Errors of one link, one counter, one threshold, one field, one device's call, one index."""
    overrides = {0: {"nvlink": [1, "NOT_SUPPORTED", 0, 1]}, 1: {"nvlink": [1, 1, "UNKNOWN"]},
                 2: {"ecc": {"volatile_uncorrected": "UNKNOWN"}, "retired_pages": {"dbe": "UNKNOWN"}},
                 3: {"errors": {"nvmlDeviceGetMigMode": "GPU_IS_LOST"}},
                 5: {"temperature_thresholds": {"slowdown": "NOT_SUPPORTED"}, "recovery_action": "UNKNOWN"}}
    top = {"errors": {"nvmlDeviceGetTemperature": {"4": 999}, "nvmlSystemGetCudaDriverVersion": "UNKNOWN"}}
    reader = SysfsReader(os.path.join(NODES, "dgx-h100"))
    recorded, status = capture.record_nvml(reader, gather_gpu_facts(reader),
                                           binding=fake_with("h100-healthy", overrides, **top))
    fake = load_fake()
    fake.set_scenario(json.loads(json.dumps(recorded)))
    params = {"gpu": {"xid_source": "none"}, "rdma": {"enabled": False}}
    original = everything_gpu(reader.root, NvmlAdapter(fake_with("h100-healthy", overrides, **top)), params)
    replayed = everything_gpu(reader.root, NvmlAdapter(fake), params)
    assert replayed == original and status["notes"] == []
    failed = sorted(set((c["id"], c["target"]) for c in original["checks"] if c["status"] == "fail"))
    assert ("gpu.nvlink", "gpu0") in failed and ("gpu.nvlink", "gpu1") in failed and ("gpu.lost", "gpu3") in failed
    assert ("gpu.temperature", "gpu4") in failed and ("gpu.recovery_action", "gpu5") in failed


def everything_gpu(root, adapter, params):
    payload, errors = validate_node(FAMILIES, dict(params, root=root, fail_on="never"), runner=ScriptedRunner(),
                                    nvml=adapter, now=NOW)
    assert errors == []
    return {key: payload[key] for key in ("checks", "gpus", "nvml")}


def test_no_gpu_no_nvml_no_kernel_log(tmp_path):
    result, unpacked, _dest = capture_to(tmp_path, os.path.join(NODES, "empty"), fake_with("h100-healthy"))
    assert result.nvml == {"recorded": False, "reason": capture.NO_GPU}
    assert not os.path.exists(os.path.join(unpacked, capture.NVML_FILE))
    assert result.xid_status["recorded"] is False


def test_nvml_binding_missing_is_said(tmp_path, monkeypatch):
    def missing(self):
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(NvmlAdapter, "binding", property(missing))
    result, _unpacked, _dest = capture_to(tmp_path, os.path.join(NODES, "workstation-geforce"), None)
    assert result.nvml["recorded"] is False and "not importable" in result.nvml["reason"]


# -- safe to share ------------------------------------------------------------------------------
SECRETS = {
    "node_guid": "b83f:d203:006c:5f5a",
    "port_guid_in_gid": "b83f:d203:006c:5f5b",
    "global_prefix": "2001:0db8:0aaa:0bbb",
    "roce_ip": "192.168.100.1",  # in the RoCE v2 GID as c0a8:6401
    "mac": "0c:42:a1:b2:c3:d4",
    "enx": "enx0c42a1b2c3d5",
    "ipoib": "00:00:10:87:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:6c:5f:5c",
    "gpu_uuid": "GPU-5d1cbe3a-2f4e-4b6c-9d8e-7f6a5b4c3d2e",
    "nvml_uuid": "GPU-aaaaaaaa-1111-4222-8333-444444444444",
    "board_serial": "1654922003455",
    "cluster_dns": "10.96.0.10",
    "node_ip": "172.16.5.21",
    "node_ip6": "fd12:3456:789a::21",
    "hostname": "gpu-node-17",
    "fqdn": "gpu-node-17.example.org",
    "redacted": "cluster-blue",
}


def seeded_tree(root):
    """A small node tree holding every kind of identifying value in files, names and log lines."""
    def put(rel, text):
        path = os.path.join(root, rel)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        with open(path, "w") as handle:
            handle.write(text)

    def link(rel, target):
        path = os.path.join(root, rel)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        os.symlink(target, path)

    gpu, hca = "0000:18:00.0", "0000:1a:00.0"
    base = "sys/devices/pci0000:00/0000:00:01.0"
    for address, vendor, klass, device in ((gpu, "0x10de", "0x030200", "0x2330"),
                                           (hca, "0x15b3", "0x020000", "0x1021")):
        for attr, value in (("vendor", vendor), ("class", klass), ("device", device), ("numa_node", "0"),
                            ("max_link_width", "16"), ("max_link_speed", "32.0 GT/s PCIe"),
                            ("current_link_width", "16"), ("current_link_speed", "32.0 GT/s PCIe"),
                            ("local_cpulist", "0-3")):
            put("%s/%s/%s" % (base, address, attr), value + "\n")
        link("sys/bus/pci/devices/%s" % address, "../../../devices/pci0000:00/0000:00:01.0/%s" % address)
    dev = "%s/%s/infiniband/mlx5_0" % (base, hca)
    link("sys/class/infiniband/mlx5_0", "../../devices/pci0000:00/0000:00:01.0/%s/infiniband/mlx5_0" % hca)
    link(dev + "/device", "../../../%s" % hca)
    put(dev + "/node_guid", SECRETS["node_guid"] + "\n")
    put(dev + "/fw_ver", "28.39.1002\n")
    put(dev + "/hca_type", "MT4129\n")
    put(dev + "/board_id", "MT_0000000838\n")
    port = dev + "/ports/1"
    for attr, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "200 Gb/sec (4X HDR)"),
                        ("link_layer", "Ethernet"), ("lid", "0x0"), ("sm_lid", "0x0")):
        put("%s/%s" % (port, attr), value + "\n")
    gids = ["fe80:0000:0000:0000:" + SECRETS["port_guid_in_gid"],
            SECRETS["global_prefix"] + ":" + SECRETS["port_guid_in_gid"],
            "0000:0000:0000:0000:0000:ffff:c0a8:6401", "0000:0000:0000:0000:0000:0000:0000:0000"]
    for index, gid in enumerate(gids):
        put("%s/gids/%d" % (port, index), gid + "\n")
        put("%s/gid_attrs/types/%d" % (port, index), "RoCE v2\n")
        put("%s/gid_attrs/ndevs/%d" % (port, index), SECRETS["enx"] + "\n")
    os.makedirs(os.path.join(root, base, hca, "net", SECRETS["enx"]))
    put("%s/%s/msi_irqs/120" % (base, hca), "msix\n")
    put("proc/irq/120/smp_affinity_list", "0-3\n")
    for module, version in (("mlx5_core", "24.10-1.1.4"), ("ib_core", None), ("ib_uverbs", None),
                            ("rdma_ucm", None), ("nvidia", "580.95.05"), ("nvidia_peermem", "580.95.05")):
        os.makedirs(os.path.join(root, "sys/module", module))
        if version:
            put("sys/module/%s/version" % module, version + "\n")
    link("sys/module/ib_core/holders/nvidia_peermem", "../../nvidia_peermem")
    put("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n")
    put("proc/driver/nvidia/gpus/%s/information" % gpu,
        "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t %s\nBoard serial: \t %s\n"
        % (SECRETS["gpu_uuid"], SECRETS["board_serial"]))
    put("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "1024\n")
    put("sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "8\n")
    put("etc/tuned/active_profile", "throughput-performance\n")
    put("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "clusterDNS: [%s]\naddress: %s\nhealthzBindAddress: %s\ncpuManagerPolicy: static\n"
        "providerID: %s/%s\n" % (SECRETS["cluster_dns"], SECRETS["node_ip"], SECRETS["node_ip6"],
                                 SECRETS["redacted"], SECRETS["fqdn"]))
    put("var/lib/kubelet/config.d/10-topology.conf", "topologyManagerPolicy: single-numa-node\n"
        "# tuned on %s, nic %s\n" % (SECRETS["hostname"], SECRETS["mac"]))
    put("var/lib/kubelet/config.d/20-ipoib.conf", "# ipoib %s\n" % SECRETS["ipoib"])
    put("dev/infiniband/uverbs0", "")
    put("var/log/kern.log",
        "2025-11-20T11:00:00+0000 %s kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.\n2025-11-20T11:00:01+0000 %s kernel: eth0: link up %s\n"
        % (SECRETS["hostname"], SECRETS["hostname"], SECRETS["node_ip"]))
    put("etc/shadow", "root:secret-hash:19000:0:99999:7:::\n")  # never captured
    return root


def seeded_scenario():
    data = fake_with("h100-healthy")._STATE["scenario"]
    data = copy.deepcopy(data)
    data["devices"] = [dict(data["devices"][0], uuid=SECRETS["nvml_uuid"], serial=SECRETS["board_serial"],
                            pci_bus_id="00000000:18:00.0")]
    return data


def archive_bytes(dest):
    """Every name, link target and content of the archive, in one blob."""
    blob = []
    with tarfile.open(dest) as tar:
        for member in tar.getmembers():
            blob.append(member.name.encode())
            blob.append(member.linkname.encode())
            if member.isfile():
                blob.append(tar.extractfile(member).read())
    return b"\n".join(blob).lower()


def test_no_identifying_value_leaves_the_node(tmp_path):
    root = seeded_tree(str(tmp_path / "node"))
    fake = load_fake()
    fake.set_scenario(seeded_scenario())
    result, unpacked, dest = capture_to(tmp_path, root, fake, redact=[SECRETS["redacted"]])
    blob = archive_bytes(dest)
    forms = []
    for value in SECRETS.values():
        forms += [value.lower(), value.lower().replace(":", "")]
    forms += ["c0a8:6401", "b83fd203006c5f5a", "0c42a1b2c3d4", "secret-hash", "5d1cbe3a"]
    assert [form for form in forms if form.encode() in blob] == []
    assert b"shadow" not in blob
    counts = result.pseudonym_counts()
    for kind in ("guid", "mac", "ipv4", "uuid", "hostname", "redacted", "prefix"):
        assert counts.get(kind), kind
    # the same value gets the same pseudonym everywhere (file, path name, GID, NVML, log)
    with open(os.path.join(unpacked, "root/var/lib/kubelet/config.yaml")) as handle:
        kubelet = handle.read()
    assert "clusterDNS: [198.18.0." in kubelet and "redacted-1/host-" in kubelet
    enx = os.listdir(os.path.join(unpacked, "root/sys/devices/pci0000:00/0000:00:01.0/0000:1a:00.0/net"))
    assert len(enx) == 1 and enx[0].startswith("enx02")
    with open(os.path.join(unpacked, "root/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0")) as handle:
        assert handle.read().strip() == enx[0]
    with open(os.path.join(unpacked, "root/var/log/kern.log")) as handle:
        log = handle.read()
    assert log.count("NVRM") == 1 and "link up" not in log  # only the lines the XID reader uses
    # and the tree still replays to the same results, tuning family included
    before = everything(root, NvmlAdapter(_fake(seeded_scenario())))
    after = everything(os.path.join(unpacked, "root"), replay_adapter(unpacked))
    assert json.loads(as_text(after, os.path.join(unpacked, "root"))) == json.loads(
        result.pseudo.text(as_text(before, root)))
    statuses = dict((c["id"], c["status"]) for c in after["node_validate"]["checks"] if c["target"] in ("node", "gpu0"))
    assert statuses["gpu.xid"] == "fail" and statuses["tuning.tuned_profile"] == "pass"


def _fake(data):
    fake = load_fake()
    fake.set_scenario(data)
    return fake


def test_pseudonyms_keep_the_shape_the_checks_read():
    pseudo = capture.Pseudonymiser()
    gid = pseudo.text("0000:0000:0000:0000:0000:ffff:c0a8:6401")
    assert gid.startswith("0000:0000:0000:0000:0000:ffff:") and gid != "0000:0000:0000:0000:0000:ffff:c0a8:6401"
    assert pseudo.text("192.168.100.1") == "198.18.0.1"  # the IPv4 inside the GID got this one
    assert pseudo.text("0000:0000:0000:0000") == "0000:0000:0000:0000"
    assert pseudo.text("0.0.0.0 127.0.0.1 ::1 00:00:00:00:00:00") == "0.0.0.0 127.0.0.1 ::1 00:00:00:00:00:00"
    # PCI addresses, versions and times are not identifiers
    kept = ("0000:18:00.0 00000000:18:00.0 PCI:0000:18:00 MLNX_OFED_LINUX-23.10-1.1.9.0 28.39.1002 "
            "2025-11-20T11:00:00+00:00 Nov 20 11:00:00 535.104.05 6.1.0-18-amd64")
    assert pseudo.text(kept) == kept
    first = pseudo.text("GPU-5d1cbe3a-2f4e-4b6c-9d8e-7f6a5b4c3d2e")
    assert first == pseudo.text("GPU-5D1CBE3A-2F4E-4B6C-9D8E-7F6A5B4C3D2E")  # same value, any case
    assert first.startswith("GPU-00000000-0000-4000-8000-")


# The NVIDIA driver names a GPU's board serial in the kernel log, in two lines of
# NVIDIA/open-gpu-kernel-modules: with the first Xid of a GPU, src/nvidia/src/kernel/gpu/rc/kernel_rc.c
# (_krcLogUuidOnce) prints "NVRM: GPU at PCI:%04x:%02x:%02x: %s" (the UUID) and "NVRM: GPU Board Serial
# Number: %s" before krcReportXid's "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"; when a
# GPU falls off the bus, src/nvidia/arch/nvalloc/unix/src/osinit.c prints "GPU has fallen off the
# bus." and "GPU serial number is %s." through NV_DEV_PRINTF ("NVRM: GPU %04x:%02x:%02x.%x: " first,
# kernel-open/common/inc/nv.h). Real dmesg with the first pair: akash-network/support#244 (535.183.01,
# Xid 43/31/94, one serial per GPU) and leptonai/gpud's testdata (tests/fixtures/real/captures/xid,
# test_real_captures.py); a GPU without a serial prints "[N/A]". Serials and UUIDs below are made up.
KERNEL_LOG = [
    "2025-11-20T10:59:58+0000 gpu-node-17 kernel: NVRM: GPU at PCI:0000:18:00: GPU-3b6ec030-5adc-1847-e155-79f635584b4e",
    "2025-11-20T10:59:58+0000 gpu-node-17 kernel: NVRM: GPU Board Serial Number: 1652923099001",
    "2025-11-20T10:59:58+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.",
    "2025-11-20T10:59:58+0000 gpu-node-17 kernel: NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
    "2025-11-20T10:59:58+0000 gpu-node-17 kernel: NVRM: GPU 0000:18:00.0: GPU serial number is 1652923099002.",
    "2025-11-20T10:59:59+0000 gpu-node-17 kernel: NVRM: GPU at PCI:0000:19:00: GPU-c24840ec-8de1-83d5-b126-08000173ae32",
    "2025-11-20T10:59:59+0000 gpu-node-17 kernel: NVRM: GPU Board Serial Number: [N/A]",
    "2025-11-20T10:59:59+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:19:00): 43, pid=1045242, "
    "name=pt_main_thread, Ch 00000008",
]


def small_gpu_tree(root, kernel_log, information=""):
    """One NVIDIA function on the PCI bus (so the GPU family reads the kernel log), its driver
    information file and ``var/log/kern.log`` (read by xid_source auto below a root other than /)."""
    function = os.path.join(root, "sys/bus/pci/devices/0000:18:00.0")
    os.makedirs(function)
    for attr, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2330")):
        with open(os.path.join(function, attr), "w") as handle:
            handle.write(value + "\n")
    os.makedirs(os.path.join(root, "proc/driver/nvidia/gpus/0000:18:00.0"))
    with open(os.path.join(root, "proc/driver/nvidia/gpus/0000:18:00.0/information"), "w") as handle:
        handle.write(information)
    os.makedirs(os.path.join(root, "var/log"))
    with open(os.path.join(root, "var/log/kern.log"), "w") as handle:
        handle.write("".join(line + "\n" for line in kernel_log))
    return root


def test_serials_the_driver_writes_to_the_kernel_log_are_pseudonymised(tmp_path):
    """Both serial lines of the driver, NVML not recorded (nothing else names the serials): the
    serials are replaced; one that a captured file names too gets the same pseudonym in both."""
    root = small_gpu_tree(str(tmp_path / "node"), KERNEL_LOG,
                          "Model: \t\t NVIDIA H100 80GB HBM3\nBoard serial: \t 1652923099002\n")
    result, unpacked, dest = capture_to(tmp_path, root, None, nvml=False)
    blob = archive_bytes(dest)
    for value in ("1652923099001", "1652923099002", "3b6ec030", "c24840ec", "gpu-node-17"):
        assert value.encode() not in blob, value
    with open(os.path.join(unpacked, "root/var/log/kern.log")) as handle:
        log = handle.read().splitlines()
    assert len(log) == len(KERNEL_LOG)
    assert log[1].endswith("NVRM: GPU Board Serial Number: serial-2")
    assert log[4].endswith("NVRM: GPU 0000:18:00.0: GPU serial number is serial-1.")
    assert log[6].endswith("NVRM: GPU Board Serial Number: [N/A]")  # no serial: nothing to replace
    with open(os.path.join(unpacked, "root/proc/driver/nvidia/gpus/0000:18:00.0/information")) as handle:
        assert "Board serial: \t serial-1\n" in handle.read()  # the file's and the log's: the same pseudonym
    assert result.pseudonym_counts()["serial"] == 2


def test_serials_are_found_in_every_form():
    pseudo = capture.Pseudonymiser()
    for text in ("NVRM: GPU Board Serial Number: 1652923099001", "GPU serial number is 1652923099002.",
                 "Serial No.: MT2234X00001", "serial=ABC123", "Board serial: \t 0422318024689"):
        pseudo.collect_serials(text)
    for text in ("NVRM: GPU Board Serial Number: [N/A]", "Serial Number: N/A", "serial: 000000000000",
                 "the serial is fine"):
        pseudo.collect_serials(text)
    assert pseudo.text("1652923099001 1652923099002 MT2234X00001 ABC123 0422318024689") == (
        "serial-1 serial-2 serial-3 serial-4 serial-5")
    assert pseudo.text("[N/A] N/A 000000000000 fine") == "[N/A] N/A 000000000000 fine"
    # a long serial is replaced inside a longer word too; a short one only as a whole word
    assert pseudo.text("gpu_1652923099001.log ABC1234 xABC123") == "gpu_serial-1.log ABC1234 xABC123"


# -- bounded ------------------------------------------------------------------------------------
def test_links_out_of_the_trees_are_recorded_not_followed(tmp_path):
    root = tmp_path / "node"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "vendor").write_text("0x10de\n")
    devices = root / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    os.symlink(str(tmp_path / "outside"), str(devices / "0000:01:00.0"))  # absolute, outside root
    os.symlink("../../../../../outside", str(devices / "0000:02:00.0"))  # past the top
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0\n")
    os.symlink("../../../../etc", str(devices / "0000:03:00.0"))  # inside root, outside the trees
    os.mkfifo(str(root / "sys" / "bus" / "pci" / "devices" / "fifo"))  # listed: an empty placeholder, unread
    os.symlink("loop", str(root / "sys" / "bus" / "pci" / "devices" / "loop"))
    walker = capture.TreeWalker(str(root))
    for pattern in capture.capture_patterns():
        walker.expand(pattern)
    assert "links in a row" in walker.skipped["sys/bus/pci/devices/loop"]
    walker.settle_links()
    links = dict((k, v[1]) for k, v in walker.nodes.items() if v[0] == "link")
    # kept: the link that stays inside root (not followed out of the trees); out of root or in a
    # loop: an empty placeholder, so that the directory lists the same and the archive unpacks safely
    assert links == {"sys/bus/pci/devices/0000:03:00.0": "../../../../etc"}
    assert not any(v[0] == "file" for v in walker.nodes.values())
    for name in ("fifo", "0000:01:00.0", "0000:02:00.0", "loop"):
        assert walker.nodes["sys/bus/pci/devices/" + name][0] == "device", name
    assert "into a loop" in walker.skipped["sys/bus/pci/devices/loop"]
    assert "leaves root (absolute)" in walker.skipped["sys/bus/pci/devices/0000:01:00.0"]
    assert "leaves root (relative)" in walker.skipped["sys/bus/pci/devices/0000:02:00.0"]
    assert "outside the captured trees" in walker.skipped["sys/bus/pci/devices/0000:03:00.0"]
    assert str(tmp_path) not in json.dumps(walker.skipped)  # where an outside link leads is not said


def test_where_a_link_leads_below_the_host_root_and_another(tmp_path):
    """Below ``/`` an absolute target is below root and ``..`` of root is root (the kernel's
    reading); below another root an absolute target counts when it names a path below that root."""
    walker = capture.TreeWalker(str(tmp_path))
    parent = ("sys", "bus", "pci", "devices")
    assert walker._link_target(parent, "../../../devices/pci0000:00/0000:00:01.0") == (
        "sys", "devices", "pci0000:00", "0000:00:01.0")
    assert walker._link_target(parent, "../../../../../../etc") is None
    assert walker._link_target(parent, str(tmp_path / "sys" / "devices" / "x")) == ("sys", "devices", "x")
    assert walker._link_target(parent, str(tmp_path) + "/../elsewhere/sys") is None
    assert walker._link_target(parent, "/sys/devices/x") is None
    walker.host_root = True
    assert walker._link_target(parent, "/sys/./devices//x") == ("sys", "devices", "x")
    assert walker._link_target(parent, "../../../../../../etc") == ("etc",)
    assert capture._relative(("sys", "devices", "x"), parent) == "../../../devices/x"


def archive_links(dest):
    """{member name: link target} of every symbolic link of the archive."""
    with tarfile.open(dest) as tar:
        return dict((m.name, m.linkname) for m in tar.getmembers() if m.issym() or m.islnk())


def assert_links_inside_root(dest):
    top = capture.ARCHIVE_TOP + "/root"
    for name, target in archive_links(dest).items():
        assert not os.path.isabs(target), (name, target)
        where = os.path.normpath(os.path.join(os.path.dirname(name), target))
        assert where == top or where.startswith(top + "/"), (name, target)


def test_links_are_stored_relative_and_inside_root(tmp_path):
    """An absolute link below root is stored relative (and followed, as the readers follow it); a
    link out of root, absolute or climbing, and the links of a loop are empty placeholders listed
    in the MANIFEST: the archive unpacks with tarfile's data filter (capture_to's unpack)."""
    root = tmp_path / "node"
    function = root / "sys" / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:1a:00.0"
    function.mkdir(parents=True)
    for attr, value in (("vendor", "0x15b3"), ("class", "0x020700"), ("device", "0x1021")):
        (function / attr).write_text(value + "\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "vendor").write_text("0x10de\n")
    devices = root / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    os.symlink(str(function), str(devices / "0000:1a:00.0"))  # absolute, below root
    os.symlink(str(tmp_path / "outside"), str(devices / "0000:01:00.0"))  # absolute, outside root
    os.symlink("../../../../../outside", str(devices / "0000:02:00.0"))  # climbs out of root
    ib = root / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    os.symlink("loop1", str(ib / "loop1"))
    os.symlink("loop3", str(ib / "loop2"))
    os.symlink("loop2", str(ib / "loop3"))
    os.symlink("loop2/ports", str(ib / "through"))  # a link through a loop
    result, unpacked, dest = capture_to(tmp_path, str(root), None)
    assert_links_inside_root(dest)
    links = archive_links(dest)
    top = capture.ARCHIVE_TOP + "/root/"
    assert links == {top + "sys/bus/pci/devices/0000:1a:00.0": "../../../devices/pci0000:00/0000:00:01.0/0000:1a:00.0"}
    with open(os.path.join(unpacked, "root/sys/bus/pci/devices/0000:1a:00.0/vendor")) as handle:
        assert handle.read() == "0x15b3\n"  # followed: captured as the readers see it
    with open(os.path.join(unpacked, "MANIFEST")) as handle:
        manifest = handle.read().splitlines()
    for name in ("bus/pci/devices/0000:01:00.0", "bus/pci/devices/0000:02:00.0", "class/infiniband/loop1",
                 "class/infiniband/loop2", "class/infiniband/loop3", "class/infiniband/through"):
        path = os.path.join(unpacked, "root/sys", name)
        assert os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) == 0, name
        assert any(line.startswith("placeholder 0 ") and line.endswith(" root/sys/" + name) for line in manifest), name
        assert any(line.startswith("skipped - - root/sys/%s: " % name) and "placeholder" in line
                   for line in manifest), name
    assert "rewritten - - root/sys/bus/pci/devices/0000:1a:00.0: absolute link target made relative" in manifest
    with open(os.path.join(unpacked, "capture.json")) as handle:
        assert json.load(handle)["counts"]["links_rewritten"] == 1
    assert str(tmp_path).encode().lower() not in archive_bytes(dest)
    # the readers see the same below the original root and in the replay
    before = everything(str(root), None, options="defaults")
    after = everything(os.path.join(unpacked, "root"), None, options="defaults")
    assert json.loads(as_text(after, os.path.join(unpacked, "root")))["mlx5_facts"] == json.loads(
        result.pseudo.text(as_text(before, str(root))))["mlx5_facts"]


def test_each_file_read_once_and_capped(tmp_path, monkeypatch):
    root = tmp_path / "node"
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text("word " * 20)
    opened = []
    real = capture.TreeWalker.read_file

    def counting(self, parts, max_bytes):
        opened.append(parts)
        return real(self, parts, max_bytes)

    monkeypatch.setattr(capture.TreeWalker, "read_file", counting)
    walker = capture.TreeWalker(os.path.join(NODES, "dgx-h100"))
    for pattern in capture.capture_patterns() * 2:
        walker.expand(pattern)
    assert opened and len(opened) == len(set(opened)) == walker.reads
    small = capture.TreeWalker(str(root), max_file_bytes=12)
    small.expand("proc/sys/kernel/osrelease")
    # cut at 12 bytes ("word word wo"), the token the cut split dropped
    assert small.nodes["proc/sys/kernel/osrelease"] == ("file", b"word word ")
    assert small.truncated == ["proc/sys/kernel/osrelease"]
    with pytest.raises(capture.CaptureError, match="option max_entries"):
        tiny = capture.TreeWalker(os.path.join(NODES, "dgx-h100"), max_entries=50)
        tiny.expand("sys/bus/pci/devices/*/vendor")
    with pytest.raises(capture.CaptureError, match="option max_total_bytes"):
        capped = capture.TreeWalker(os.path.join(NODES, "dgx-h100"), max_total_bytes=100)
        capped.expand("sys/bus/pci/devices/*/vendor")


def test_manifest_lists_every_member(captured):
    _result, unpacked, dest = captured("hdr-degraded", "h100-healthy")
    with open(os.path.join(unpacked, "MANIFEST")) as handle:
        listed = set(line.rstrip("\n").split(" ", 3)[3].split(" -> ")[0] for line in handle
                     if not line.startswith("#") and line.split(" ")[0] in ("file", "dir", "link", "device",
                                                                            "placeholder"))
    with tarfile.open(dest) as tar:
        names = set(m.name[len(capture.ARCHIVE_TOP) + 1:] for m in tar.getmembers())
    assert names - {"", "MANIFEST"} == listed
    with open(os.path.join(unpacked, "capture.json")) as handle:
        meta = json.load(handle)
    assert meta["format"] == 1 and meta["counts"]["files_read"] > 100 and meta["nvml"]["recorded"] is False


# -- hostile trees (hypothesis) -------------------------------------------------------------------
# Identifiers of every kind capture recognises, none of them in the pseudonyms' own ranges (a MAC
# 02:00:…, a GUID 0200:00ff:fe…, 198.18.x.y, serial-N) nor kept on purpose (all-zero, broadcast).
MACS = st.integers(1 << 40, (1 << 48) - 2).filter(lambda v: v >> 40 != 0x02).map(
    lambda v: ":".join("%02x" % ((v >> s) & 0xFF) for s in range(40, -8, -8)))
GUIDS = st.integers(1 << 48, (1 << 64) - 1).filter(lambda v: v >> 24 != 0x020000FFFE).map(
    lambda v: ":".join("%04x" % ((v >> s) & 0xFFFF) for s in (48, 32, 16, 0)))
UUIDS = st.uuids().map(lambda u: "GPU-%s" % u).filter(lambda u: not u.startswith("GPU-00000000"))
IPV4S = st.ip_addresses(v=4).filter(lambda a: a.is_global).map(str)
SERIALS = st.text("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ", min_size=10, max_size=16).filter(lambda v: len(set(v)) > 2)
HOSTNAMES = st.from_regex(r"[a-z]{2,6}-node-[0-9]{1,3}", fullmatch=True)
NOISE = st.text("abcxyz019:._- ", max_size=12)
# a shape is recognised between characters that cannot continue it; a serial (long) anywhere
SEPARATORS = st.sampled_from([" ", ",", ";", "=", "(", ")", "[", "]", "'", '"'])


@st.composite
def hostile_trees(draw):
    """(plan, identifiers): files, link names and targets and kernel-log lines holding identifiers
    in noise, names with ``..``, absolute links in and out of root, links climbing out, loops."""
    idents = {"mac": draw(MACS), "guid": draw(GUIDS), "uuid": draw(UUIDS), "ip": draw(IPV4S),
              "serial": draw(SERIALS), "hostname": draw(HOSTNAMES), "log_serial": draw(SERIALS),
              "nvml_uuid": draw(UUIDS)}

    def embedded(kind):
        if kind.endswith("serial"):  # inside a word too
            return draw(NOISE) + idents[kind] + draw(NOISE)
        return draw(NOISE) + draw(SEPARATORS) + idents[kind] + draw(SEPARATORS) + draw(NOISE)

    kinds = sorted(idents)
    links = []
    for index in range(draw(st.integers(1, 6))):
        name = "%d%s%s" % (index, draw(st.sampled_from(["..", "...", ".", "-", " "])), embedded(draw(st.sampled_from(kinds))))
        kind = draw(st.sampled_from(["abs-inside", "abs-outside", "climb", "inside", "loop", "self"]))
        links.append((name.replace("/", "_"), kind, embedded(draw(st.sampled_from(kinds))).replace("/", "_"),
                      draw(st.integers(1, 8))))
    confs = [("%d%s%s.conf" % (i, draw(SEPARATORS), embedded(draw(st.sampled_from(kinds))))).replace("/", "_")
             for i in range(draw(st.integers(0, 3)))]
    texts = ["\n".join(embedded(kind) for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=6)))
             for _conf in confs]
    log = ["NVRM: GPU at PCI:0000:18:00: " + idents["uuid"], "NVRM: GPU Board Serial Number: " + idents["serial"],
           "NVRM: GPU 0000:18:00.0: GPU serial number is %s." % idents["log_serial"]]
    log += ["NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, " + embedded(kind).replace("\n", " ")
            for kind in draw(st.lists(st.sampled_from(kinds), max_size=4))]
    return {"links": links, "confs": list(zip(confs, texts)), "log": log}, idents


def build_hostile(root, outside, plan, idents):
    small_gpu_tree(root, ["2025-11-20T11:00:%02d+0000 %s kernel: %s" % (i, idents["hostname"], line)
                          for i, line in enumerate(plan["log"])], "GPU UUID: \t %s\n" % idents["uuid"])
    ib = os.path.join(root, "sys/class/infiniband")
    os.makedirs(ib)
    os.makedirs(os.path.join(root, "sys/devices/virtual"))
    for name, kind, target, depth in plan["links"]:
        inside = os.path.join(root, "sys/devices/virtual", target)
        text = {"abs-inside": inside, "abs-outside": os.path.join(outside, target), "climb": "../" * (depth + 3) + target,
                "inside": "../../devices/virtual/" + target, "loop": name + "-peer", "self": name}[kind]
        if kind == "abs-inside" and not os.path.exists(inside):
            os.makedirs(inside)
        if kind == "loop":
            os.symlink(name, os.path.join(ib, name + "-peer"))
        os.symlink(text, os.path.join(ib, name))
    conf_dir = os.path.join(root, "var/lib/kubelet/config.d")
    os.makedirs(conf_dir)
    for name, text in plan["confs"]:
        with open(os.path.join(conf_dir, name), "w") as handle:
            handle.write(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_trees())
def test_a_hostile_tree_leaves_no_identifier_and_unpacks_safely(case):
    plan, idents = case
    work = tempfile.mkdtemp(prefix="hostile-")
    try:
        root, outside = os.path.join(work, "node"), os.path.join(work, "outside")
        os.makedirs(outside)
        build_hostile(root, outside, plan, idents)
        data = copy.deepcopy(fake_with("h100-healthy")._STATE["scenario"])
        # (the GPU family does not ask NVML for the serial: only the UUID is recorded)
        data["devices"] = [dict(data["devices"][0], uuid=idents["nvml_uuid"], pci_bus_id="00000000:18:00.0")]
        out = os.path.join(work, "out")
        os.makedirs(out)
        _result, _unpacked, dest = capture_to(py_path(out), root, _fake(data), hostnames=(idents["hostname"],))
        assert_links_inside_root(dest)
        blob = archive_bytes(dest)
        assert [kind for kind, value in idents.items() if value.lower().encode() in blob] == []
        assert work.lower().encode() not in blob  # nor where the node's root or an outside link is
    finally:
        shutil.rmtree(work)


def py_path(path):
    return pathlib.Path(path)


# -- the module's work ---------------------------------------------------------------------------
class FakeModule(object):
    def __init__(self, check_mode=False, **params):
        self.params = dict(root="/", nvml=True, nvml_binding_path=None, xid_source="auto", xid_window_hours=24.0,
                           kubelet_config=capture.DEFAULT_KUBELET_CONFIG,
                           kubelet_config_dir=capture.DEFAULT_KUBELET_CONFIG_DIR, ofed_info=None, redact=[],
                           max_file_bytes=65536, max_entries=200000, max_total_bytes=67108864)
        self.params.update(params)
        self.check_mode = check_mode

    def get_bin_path(self, name, required=False):
        return None


def test_check_mode_writes_nothing(tmp_path):
    dest = str(tmp_path / "c.tar.gz")
    module = FakeModule(check_mode=True, dest=dest, root=os.path.join(NODES, "inbox-50"))
    result = capture.node_capture_work(module)
    assert result["changed"] is True and result["entries"] > 100 and not os.path.exists(dest)
    module.check_mode = False
    assert capture.node_capture_work(module)["changed"] is True and os.path.isfile(dest)
    assert oct(os.stat(dest).st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("params,option", [
    ({"max_entries": 0}, "max_entries"),
    ({"xid_window_hours": 0}, "xid_window_hours"),
    ({"ofed_info": "/nonexistent/ofed_info"}, "ofed_info"),
    ({"dest": "/"}, "dest"),
    ({"root": "/nonexistent"}, "root"),
])
def test_bad_options_are_named(tmp_path, params, option):
    module = FakeModule(**dict({"dest": str(tmp_path / "c.tar.gz"), "root": os.path.join(NODES, "empty")}, **params))
    with pytest.raises(ModuleFailure, match="option %s" % option):
        capture.node_capture_work(module)


def test_a_hostile_tree_replays_too(tmp_path):
    """Link loops, a FIFO where a PCI function's directory should be, a FIFO attribute, a name of
    undecodable bytes: captured without reading what is not a file, and replayed to equal results."""
    root = tmp_path / "node"
    ib = root / "sys" / "class" / "infiniband"
    devices = root / "sys" / "bus" / "pci" / "devices"
    ib.mkdir(parents=True)
    devices.mkdir(parents=True)
    os.symlink("loop1", str(ib / "loop1"))
    os.symlink("loop3", str(ib / "loop2"))
    os.symlink("loop2", str(ib / "loop3"))
    odd = os.path.join(str(devices).encode(), b"0000:\xff:00.0")
    os.mkdir(odd)
    with open(os.path.join(odd, b"vendor"), "w") as handle:
        handle.write("0x10de\n")
    os.mkfifo(str(devices / "fifo"))
    (devices / "0000:00:00.0").mkdir()
    os.mkfifo(str(devices / "0000:00:00.0" / "vendor"))
    result, unpacked, _dest = capture_to(tmp_path, str(root), None)
    before = everything(str(root), None, options="defaults")
    after = everything(os.path.join(unpacked, "root"), None, options="defaults")
    assert json.loads(as_text(after, os.path.join(unpacked, "root"))) == json.loads(
        result.pseudo.text(as_text(before, str(root))))
    assert result.walker.reads == 1  # the one regular file; the FIFO is never opened
