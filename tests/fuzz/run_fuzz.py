#!/usr/bin/env python3
"""Fuzz target: hostile sysfs trees and kernel-log / version lines against the fact gatherers,
the RDMA family and the parsers. Not part of the default test run (``make fuzz``).

Per run (defaults): 10,000 trees and 10,000 parser inputs, each case under a 2 s watchdog
(SIGALRM interrupts even a blocking ``open`` on a FIFO). Three figures must stay 0:

- crashes: any exception out of the code under test;
- hangs: a case that did not finish within the watchdog;
- undeliverable: a result that ``json.dumps(..., allow_nan=False)`` refuses, that is not valid
  UTF-8 (lone surrogates from undecodable names), or that ansible's module result encoder refuses.

Tree classes (mixed at random into trees modelled on real nodes): FIFOs and sockets where an
attribute should be, directory/file swaps, looping symlinks, symlinks escaping the root (absolute
and ``../`` chains), non-UTF-8 names, Unicode-digit names and values (``²``, ``١``), huge numbers
(5,000 digits), huge (sparse) files, and kernel logs with garbage dates.

Fault cases (``--faults N``, default 2,000): node_validate (GPU and RDMA families, expected_count 8)
on the DGX H100 fixture tree with the fake NVML, with 1-3 random NVML errors injected (any
function the checks call, any NVML_ERROR_* code, any GPU, or the system calls) or one random
sysfs read fault (EIO, EACCES, ENXIO, empty, vanished) on a file a check compares. A fourth figure
must stay 0: fail-open, a node judged healthy while a fault was injected on a required reading
(an NVML error other than NotSupported / FunctionNotFound, or any error of nvmlInit /
nvmlDeviceGetCount / nvmlDeviceGetHandleByIndex, or a sysfs fault).

Usage: ``python tests/fuzz/run_fuzz.py [--trees N] [--inputs N] [--faults N] [--seed S] [--timeout 2]``;
exit status 1 when any figure is not 0. The first failures are printed with their case seed;
``--case <seed>`` runs that one tree again (``--case <seed> --trees 0`` that parser input,
``--case <seed> --trees 0 --inputs 0`` that fault case).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests", "unit"), os.path.join(REPO, "tests")]

from ansible.module_utils.common import json as ansible_json  # noqa: E402
from runners import ScriptedRunner  # noqa: E402
from sysfs_faults import FaultyOs  # noqa: E402

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import xid as xid_module  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts, pci_link  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import (  # noqa: E402
    gather_mlx5_facts,
    parse_rate,
    parse_state,
    roce_v2_ipv4_gid_index,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import (  # noqa: E402
    loaded_matches_installed,
    normalize_version,
    parse_ofed_info,
    version_compare,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import validate_rdma  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs as sysfs_module  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader, parse_int  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node  # noqa: E402

FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
NOW = 1763640000.0  # 2025-11-20T12:00:00Z
ANSIBLE_ENCODER = ansible_json.get_module_encoder("legacy", ansible_json.Direction.MODULE_TO_CONTROLLER)


class Hang(Exception):
    pass


def _alarm(_signum, _frame):
    raise Hang()


# -- deliverability ---------------------------------------------------------------------------
def deliverable(result):
    """Raise when ``result`` could not travel back from a module as JSON."""
    json.dumps(result, allow_nan=False)
    json.dumps(result, allow_nan=False, ensure_ascii=False).encode("utf-8")  # strict: no lone surrogates
    json.dumps(result, cls=ANSIBLE_ENCODER)


# -- values -----------------------------------------------------------------------------------
PLAUSIBLE = [
    b"4: ACTIVE", b"1: DOWN", b"2: INIT", b"5: LinkUp", b"3: Disabled", b"2: Polling", b"ACTIVE",
    b"400 Gb/sec (4X NDR)", b"200 Gb/sec (4X HDR)", b"100 Gb/sec (4X EDR)", b"25 Gb/sec (1X EDR)",
    b"InfiniBand", b"Ethernet", b"RoCE v2", b"IB/RoCE v1", b"0x1", b"0x0", b"0x15b3", b"0x10de",
    b"0x030200", b"0x068000", b"0x020700", b"-1", b"0", b"1", b"N/A (no PMA)", b"(null)",
    b"0000:0000:0000:0000:0000:ffff:0a00:0001", b"fe80:0000:0000:0000:0000:0000:0000:0001",
    b"24.10-1.1.4", b"5.0-0", b"580.95.05", b"16.0 GT/s PCIe", b"16", b"8", b"eth0", b"",
]
HOSTILE = [
    "\u00b2".encode(), "\u0661\u0662".encode(), "\uff11".encode(), b"1_000", b"0x" + b"f" * 5000,
    b"9" * 5000, b"9" * 400 + b" Gb/sec (4X NDR)", b"1e999 Gb/sec", b"nan", b"inf", b"-0",
    b"\xff\xfe\x00garbage", b"\x00" * 64, b"4: \xff\xfe", b"\x1b[31m4: ACTIVE", b"4:" + b"A" * 5000,
]


def value(rng):
    roll = rng.random()
    if roll < 0.55:
        return rng.choice(PLAUSIBLE) + (b"\n" if rng.random() < 0.8 else b"")
    if roll < 0.85:
        return rng.choice(HOSTILE)
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))


NAME_POOL = [b"mlx5_0", b"mlx5_1", b"mlx5_bond_0", b"ibp12s0", b"mlx5_\xff\xfe", "\u00b2".encode(),
             b"\xc3\x28", "mlx5_\u00e9".encode(), b"x" * 200, b"-", b"0"]


def name(rng):
    return rng.choice(NAME_POOL)


# -- hostile entries --------------------------------------------------------------------------
class Builder(object):
    """Writes a tree below ``root`` (bytes paths throughout, so any name can be created)."""

    def __init__(self, root, rng, outside):
        self.root = root
        self.rng = rng
        self.outside = outside
        self.sockets = []
        self.classes = {}

    def _count(self, kind):
        self.classes[kind] = self.classes.get(kind, 0) + 1

    def path(self, rel):
        return os.path.join(self.root, rel)

    def writable(self, full):
        """Never create anything through a link that leaves the tree (e.g. ``device -> /sys/devices``)."""
        real = os.path.realpath(os.path.dirname(full))
        top = os.path.realpath(self.root)
        return real == top or real.startswith(top + b"/")

    def mkdir(self, rel):
        os.makedirs(self.path(rel), exist_ok=True)

    def put(self, rel, data=None):
        """An attribute: usually a file with a value, sometimes something hostile."""
        full = self.path(rel)
        if not os.path.isdir(os.path.dirname(full)) or os.path.lexists(full) or not self.writable(full):
            return
        roll = self.rng.random()
        try:
            if roll < 0.80:
                with open(full, "wb") as handle:
                    handle.write(value(self.rng) if data is None else data)
                self._count("value")
            elif roll < 0.84:
                os.mkfifo(full)
                self._count("fifo")
            elif roll < 0.86:
                sock = socket.socket(socket.AF_UNIX)
                cwd = os.getcwd()
                os.chdir(os.path.dirname(full))
                try:
                    sock.bind(os.path.basename(full))
                finally:
                    os.chdir(cwd)
                self.sockets.append(sock)
                self._count("socket")
            elif roll < 0.89:
                os.makedirs(os.path.join(full, b"inner"))
                self._count("dir_for_file")
            elif roll < 0.91:
                os.symlink(os.path.basename(full), full)
                self._count("loop")
            elif roll < 0.94:
                target = self.outside if self.rng.random() < 0.5 else b"../" * 12 + b"etc/hostname"
                os.symlink(target, full)
                self._count("escape")
            elif roll < 0.96:
                with open(full, "wb") as handle:
                    handle.truncate(self.rng.choice([1 << 20, 64 << 20, 300 << 20]))  # sparse
                self._count("huge_file")
            elif roll < 0.98:
                os.symlink(b"../nowhere", full)
                self._count("broken")
            # else: missing
        except OSError:
            self._count("not_created")

    def container(self, rel):
        """A directory, or (sometimes) a file, loop or escaping link where a directory should be."""
        full = self.path(rel)
        if not self.writable(full):
            return False
        if os.path.isdir(full):
            return True
        if not os.path.isdir(os.path.dirname(full)) or os.path.lexists(full):
            return False
        roll = self.rng.random()
        if roll < 0.9:
            os.makedirs(full)
            return True
        if roll < 0.94:
            with open(full, "wb") as handle:
                handle.write(b"not a dir")
            self._count("file_for_dir")
        elif roll < 0.97:
            os.symlink(os.path.basename(full), full)
            self._count("loop")
        else:
            os.symlink(os.path.dirname(self.outside), full)
            self._count("escape")
        return False

    def close(self):
        for sock in self.sockets:
            sock.close()


def build_tree(builder):
    rng = builder.rng
    for rel in (b"proc/sys/kernel", b"sys/module", b"sys/bus/pci/devices", b"sys/class/infiniband",
                b"sys/devices/pci0000:00", b"var/log"):
        builder.mkdir(rel)
    builder.put(b"proc/sys/kernel/osrelease", b"6.8.0-45-generic\n")
    for module in (b"mlx5_core", b"nvidia", b"ib_core", b"nvidia_peermem", b"ib_uverbs"):
        if rng.random() < 0.7 and builder.container(b"sys/module/" + module):
            builder.put(b"sys/module/" + module + b"/version")
    # PCI functions: GPUs, NVSwitches, HCAs
    for _ in range(rng.randint(0, 5)):
        address = rng.choice([b"0000:%02x:00.0" % rng.randint(0, 255), name(rng)])
        device = b"sys/devices/pci0000:00/" + address
        if not builder.container(device):
            continue
        builder.put(device + b"/vendor", rng.choice([b"0x10de\n", b"0x15b3\n", None]))
        builder.put(device + b"/class", rng.choice([b"0x030200\n", b"0x068000\n", b"0x020700\n", None]))
        for attr in (b"device", b"numa_node", b"max_link_width", b"max_link_speed", b"current_link_width",
                     b"current_link_speed"):
            builder.put(device + b"/" + attr)
        link = builder.path(b"sys/bus/pci/devices/" + address)
        if not os.path.lexists(link):
            os.symlink(b"../../../devices/pci0000:00/" + address, link)
    # RDMA devices
    for _ in range(rng.randint(0, 3)):
        dev = name(rng)
        base = b"sys/class/infiniband/" + dev
        if not builder.container(base):
            continue
        for attr in (b"node_guid", b"fw_ver", b"hca_type", b"board_id"):
            builder.put(base + b"/" + attr)
        if rng.random() < 0.5 and not os.path.lexists(builder.path(base + b"/device")):
            os.symlink(rng.choice([b"../../../devices/pci0000:00/0000:1a:00.0", b"/sys/devices", b"device"]),
                       builder.path(base + b"/device"))
        if builder.container(base + b"/device/net"):
            for _ in range(rng.randint(0, 2)):
                builder.mkdir(base + b"/device/net/" + name(rng))
        if not builder.container(base + b"/ports"):
            continue
        for _ in range(rng.randint(0, 2)):
            port = base + b"/ports/" + rng.choice([b"1", b"2", "\u00b2".encode(), b"01", b"x", b"9" * 30])
            if not builder.container(port):
                continue
            for attr in (b"state", b"phys_state", b"rate", b"link_layer", b"lid", b"sm_lid"):
                builder.put(port + b"/" + attr)
            for sub in (b"gids", b"gid_attrs/types", b"gid_attrs/ndevs", b"counters"):
                builder.container(port + b"/" + sub)
            for _ in range(rng.randint(0, 4)):
                index = rng.choice([b"0", b"1", b"3", "\u00b2".encode(), "\u0663".encode(), b"1_0",
                                    b"9" * 50, b"\xff"])
                builder.put(port + b"/gids/" + index)
                builder.put(port + b"/gid_attrs/types/" + index)
                builder.put(port + b"/gid_attrs/ndevs/" + index)
            for counter in (b"symbol_error", b"link_downed", b"port_rcv_errors"):
                builder.put(port + b"/counters/" + counter)
    # a kernel log (auto below a root other than / reads var/log/kern.log)
    if rng.random() < 0.5:
        builder.put(b"var/log/kern.log", b"\n".join(log_line(rng).encode("utf-8", "surrogateescape")
                                                    for _ in range(rng.randint(0, 20))))


# -- kernel-log and version lines ----------------------------------------------------------------
STAMPS = [
    "2025-11-20T11:05:42,123456+00:00 ", "2025-11-20T11:05:42+0000 host kernel: ", "Nov 20 11:05:42 host kernel: ",
    "Nov 20 11:05:42.123456 host kernel: ", "[Thu Nov 20 11:05:42 2025] ", "kern  :err   : [Thu Nov 20 11:05:42 2025] ",
    "kern  :err   : 2025-11-20T11:05:42,1+00:00 ", "<3>1 2025-11-20T11:05:42.123Z host kernel - - - ",
    "Thu 2025-11-20 11:05:42 UTC host kernel: ", "[ 1843.308145] ", "[183921.441270] ", "",
    # garbage dates
    "2025-13-01T10:00:00+00:00 host kernel: ", "2025-02-30T10:00:00Z ", "2025-11-20T25:61:61+99:99 ",
    "0000-01-01T00:00:00-23:59 ", "9999-12-31T23:59:59-23:59 ", "[Sun Feb 30 16:24:18 2025] ",
    "[Sun Feb 23 16:24:18 0000] ", "Feb 29 16:24:18 host kernel: ", "Xyz 99 99:99:99 ",
    "\u0662\u0660\u0662\u0665-11-20T11:05:42Z ",
    "2025-11-20T11:05:42+" + "9" * 50 + " ", "[" + "9" * 5000 + ".0] ",
]
BODIES = [
    "NVRM: Xid (PCI:0000:9a:00): 119, pid=48213, name=python3, Timeout after 6s",
    "NVRM: Xid (PCI:00000000:9B:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (0000:03:00): 14, Channel 00000001", "NVRM: Xid (PCI:0000:18:00): 94, Contained: SM (0x1)",
    "NVRM: GPU 0000:db:00.0: GPU has fallen off the bus.", "NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
    "NVRM: The NVIDIA GPU 0000:b3:00.0", "               NVRM: fallen off the bus and is not responding to commands.",
    "NVRM: Xid (PCI:0000:18:00): " + "9" * 5000 + ", x", "NVRM: Xid (PCI:0000:18:00): \u00b2, x",
    "NVRM: Xid (PCI:zzzz:18:00): 48, x", "NVRM: Xid (PCI:0000:18:00): 48", "mlx5_core 0000:9c:00.0: link up",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal",
]


def log_line(rng):
    roll = rng.random()
    if roll < 0.85:
        line = rng.choice(STAMPS) + rng.choice(BODIES)
    else:
        line = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80))).decode("utf-8", "surrogateescape")
    if rng.random() < 0.05:
        line = line.replace("0", "\u0660")
    return line


OFED_LINES = ["MLNX_OFED_LINUX-5.8-1.0.1.1:", "OFED-internal-24.10-1.1.4.0.200:", "MLNX_OFED_LINUX-23.07-0.5.1.2:",
              "MLNX_OFED_LINUX-4.5-1.0.1.0 (OFED-4.5-1.0.1):", "24.10.OFED.24.10.1.1.4.1-1", "version: 24.10-1.1.4",
              "MLNX_OFED_LINUX-" + "9" * 5000 + ":", "OFED-internal-\u00b2.10-1:", "5.0-0", "", "x" * 10000]


def _compare(text, other):
    """OFED comparison through the one comparator; a value that is not a version must be a
    ValueError naming it (versions.not_a_version), nothing else."""
    try:
        return version_compare(text, "<", other)
    except ValueError as exc:
        assert str(exc).startswith("not a version: "), exc
        return "not a version"


def parser_case(rng):
    """One parser input: returns the results of every parser fed with it."""
    kind = rng.randrange(5)
    if kind <= 1:
        lines = [log_line(rng) for _ in range(rng.randint(1, 12))]
        events, stats = xid_module.parse_xid_lines(lines, NOW, rng.choice([0.25, 24, 72, 1e6]))
        stamps = [xid_module.parse_timestamp(line, NOW) for line in lines]
        return {"events": events, "stats": stats, "stamps": [s for s in stamps if s is not None]}
    if kind == 2:
        text = rng.choice(OFED_LINES) if rng.random() < 0.7 else value(rng).decode("utf-8", "replace")
        other = rng.choice(OFED_LINES)
        return {"parsed": parse_ofed_info(text), "normal": normalize_version(text),
                "cmp": _compare(text, other), "match": loaded_matches_installed(text, other)}
    raw = value(rng)
    text = raw.decode("utf-8", "replace")
    return {"state": parse_state(text), "rate": parse_rate(text), "int10": parse_int(text),
            "int16": parse_int(text, 16), "int0": parse_int(text, 0)}


RDMA_OPTIONS = [{}, {"link_layer": "InfiniBand", "min_rate_gbps": 200, "check_counters": True},
                {"link_layer": "Ethernet", "require_roce_v2_gid": True, "expected_devices": 2},
                {"devices": ["mlx5_0", "mlx5_\\xff\\xfe"], "required_modules": ["ib_core"], "require_peermem": True}]


def tree_case(rng, tmp):
    root = os.path.join(tmp, b"root")
    outside = os.path.join(tmp, b"outside-secret")
    with open(outside, "wb") as handle:
        handle.write(b"4: LEAKED\n")  # must never show up in a result
    os.makedirs(root)
    builder = Builder(root, rng, outside)
    try:
        try:
            build_tree(builder)
        except OSError:
            builder._count("build_stopped")  # the tree is used as far as it was built
        reader = SysfsReader(os.fsdecode(root))
        runner = ScriptedRunner(script={"/opt/ofed_info": (0, rng.choice(OFED_LINES), "")})
        mlx5 = gather_mlx5_facts(reader, runner, "/opt/ofed_info")
        nvidia = gather_gpu_facts(reader)
        links = [pci_link(reader, gpu["pci_address"]) for gpu in nvidia["pci_gpus"]]
        gid = [roce_v2_ipv4_gid_index(reader, d["name"], p["port"]) for d in mlx5["devices"] for p in d["ports"]]
        checks = validate_rdma(mlx5, reader, rng.choice(RDMA_OPTIONS)).result()
        log = xid_module.read_xid_source("auto", runner, os.fsdecode(root), 24, NOW)
        events = xid_module.parse_xid_lines(log.lines or [], NOW, 24)[0]
        return {"mlx5": mlx5, "nvidia": nvidia, "links": links, "gid": gid, "checks": checks,
                "xid": {"events": events, "error": log.error, "origin": log.origin}}, builder.classes
    finally:
        builder.close()


def run_tree(seed):
    """One tree case of ``seed`` in a fresh directory (removed afterwards, also after a hang)."""
    tmp = tempfile.mkdtemp(prefix="gpufleet-fuzz-", dir=FAST_TMP).encode()
    try:
        return tree_case(random.Random(seed), tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- fault injection (NVML errors, sysfs read faults) ------------------------------------------
DGX = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
REQUIRED_CALLS = ("nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")
SYSTEM_CALLS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion")
DEVICE_CALLS = (
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetEccMode", "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetHandleByIndex")
NOT_MEASURED_OK = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
SYSFS_FAULTS = ("EIO", "EACCES", "ENXIO", "empty", "vanished")
GPU0 = "sys/bus/pci/devices/0000:18:00.0/"
PORT = "sys/class/infiniband/mlx5_%d/ports/1/"
REQUIRED_FILES = [GPU0 + "vendor", GPU0 + "class", GPU0 + "max_link_width", "sys/bus/pci/devices/0000:05:00.0/vendor",
                  "sys/module/mlx5_core/version"] + [
    PORT % i + name for i in range(8) for name in ("state", "phys_state", "rate", "counters/symbol_error")]
FAULT_PARAMS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
                "rdma": {"min_rate_gbps": 100, "min_ofed_version": "5.8", "check_counters": True},
                "tuning": {"enabled": False}}
_FAKE = {}


def fake_nvml():
    if "module" not in _FAKE:
        from nvml_scenarios import load_fake, scenario
        _FAKE["module"] = load_fake()
        base = scenario("h100-healthy")
        base["device_template"] = dict(base["device_template"], retired_pages={"sbe": 0, "dbe": 0, "pending": 0})
        _FAKE["base"] = base
    return _FAKE["module"], _FAKE["base"]


def fault_case(rng):
    """One node_validate run with injected faults: (result, {"required": bool, "faults": [...]})."""
    fake, base = fake_nvml()
    data = dict(base)
    faults, required = [], False
    if rng.random() < 0.7:
        errors = {}
        for _ in range(rng.randint(1, 3)):
            func = rng.choice(REQUIRED_CALLS + SYSTEM_CALLS + DEVICE_CALLS * 2)
            code = rng.choice(fake.ERROR_NAMES)
            if func in DEVICE_CALLS:
                errors.setdefault(func, {})[str(rng.randrange(8))] = code
            elif func not in errors:
                errors[func] = code
            else:
                continue
            faults.append("%s=%s" % (func, code))
            required = required or func in REQUIRED_CALLS or code not in NOT_MEASURED_OK
        data["errors"] = errors
        patched = None
    else:
        rel = rng.choice(REQUIRED_FILES)
        fault = rng.choice(SYSFS_FAULTS)
        faults.append("%s:%s" % (rel, fault))
        required = True
        patched = FaultyOs(os.path.join(DGX, rel), fault)
    fake.set_scenario(data)
    params = dict(FAULT_PARAMS, root=DGX, fail_on="never")
    if patched is not None:
        sysfs_module.os = patched
    try:
        payload, errors = validate_node(FAMILIES, params, runner=ScriptedRunner(), nvml=NvmlAdapter(fake), now=NOW)
    finally:
        sysfs_module.os = os
    if errors:
        raise AssertionError(errors)
    return payload, {"required": required, "faults": faults}


def run(args):
    signal.signal(signal.SIGALRM, _alarm)
    figures = {"trees": 0, "inputs": 0, "faults": 0, "crashes": 0, "hangs": 0, "undeliverable": 0,
               "escaped_reads": 0, "fail_open": 0, "faults_on_required": 0, "rerun_after_watchdog": 0}
    classes = {}
    failures = []
    slowest = 0.0
    started = time.time()

    def attempt(func, seed):
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        try:
            return func(seed)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def one(label, seed, func):
        nonlocal slowest
        begin = time.time()
        try:
            try:
                result = attempt(func, seed)
            except Hang:
                # The watchdog is wall-clock time (a blocking open uses no CPU), so a starved process
                # on a loaded machine can trip it: the same case is run once more, alone; only a
                # second overrun counts as a hang.
                figures["rerun_after_watchdog"] += 1
                begin = time.time()
                result = attempt(func, seed)
        except Hang:
            figures["hangs"] += 1
            failures.append((label, seed, "hang > %ss (twice)" % args.timeout))
            return None
        except Exception:  # noqa: BLE001 - every exception is a finding
            figures["crashes"] += 1
            failures.append((label, seed, traceback.format_exc(limit=4)))
            return None
        slowest = max(slowest, time.time() - begin)
        payload = result[0] if isinstance(result, tuple) else result
        try:
            deliverable(payload)
        except Exception:  # noqa: BLE001
            figures["undeliverable"] += 1
            failures.append((label, seed, traceback.format_exc(limit=2)))
            return result
        if label == "tree" and "LEAKED" in json.dumps(payload):
            figures["escaped_reads"] += 1
            failures.append((label, seed, "a file outside root was read through a symlink"))
        return result

    for number in range(args.trees):
        outcome = one("tree", args.seed * 1000003 + number, run_tree)
        figures["trees"] += 1
        if outcome:
            for kind, count in outcome[1].items():
                classes[kind] = classes.get(kind, 0) + count
    for number in range(args.inputs):
        one("input", args.seed * 1000003 + number, lambda seed: parser_case(random.Random(seed)))
        figures["inputs"] += 1
    for number in range(getattr(args, "faults", 0)):
        outcome = one("fault", args.seed * 1000003 + number, lambda seed: fault_case(random.Random(seed)))
        figures["faults"] += 1
        if outcome and outcome[1]["required"]:
            figures["faults_on_required"] += 1
            if outcome[0]["healthy"]:
                figures["fail_open"] += 1
                failures.append(("fault", args.seed * 1000003 + number,
                                 "healthy with %s" % ", ".join(outcome[1]["faults"])))
    figures["seconds"] = round(time.time() - started, 1)
    figures["slowest_case_s"] = round(slowest, 3)
    return figures, classes, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", type=int, default=10000)
    parser.add_argument("--inputs", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--case", type=int, help="replay one case seed (printed with a failure)")
    args = parser.parse_args(argv)
    if args.case is not None:
        signal.signal(signal.SIGALRM, _alarm)
        if args.faults and not args.trees and not args.inputs:
            func = lambda: fault_case(random.Random(args.case))  # noqa: E731
        else:
            func = (lambda: parser_case(random.Random(args.case))) if args.inputs and not args.trees else (
                lambda: run_tree(args.case))
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        result = func()
        signal.setitimer(signal.ITIMER_REAL, 0)
        deliverable(result[0] if isinstance(result, tuple) else result)
        print("case %d: ok" % args.case)
        return 0
    figures, classes, failures = run(args)
    print("fuzz: %d trees, %d parser inputs, %d fault cases, seed %d, watchdog %ss per case" % (
        figures["trees"], figures["inputs"], figures["faults"], args.seed, args.timeout))
    print("crashes: %d  hangs: %d  undeliverable: %d  escaped reads: %d  fail-open: %d (of %d cases with a "
          "fault on a required reading)" % (
              figures["crashes"], figures["hangs"], figures["undeliverable"], figures["escaped_reads"],
              figures["fail_open"], figures["faults_on_required"]))
    print("hostile entries created: %s" % ", ".join("%s=%d" % kv for kv in sorted(classes.items())))
    print("time: %.1f s (slowest case %.3f s; %d case(s) run again after the watchdog fired once)" % (
        figures["seconds"], figures["slowest_case_s"], figures["rerun_after_watchdog"]))
    for label, seed, text in failures[:5]:
        print("--- %s seed %d\n%s" % (label, seed, text))
    bad = (figures["crashes"] or figures["hangs"] or figures["undeliverable"] or figures["escaped_reads"]
           or figures["fail_open"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
