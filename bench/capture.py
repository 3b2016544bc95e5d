#!/usr/bin/env python3
"""Time of a node capture (module_utils/capture/capture.py, module node_capture; target < 5 s on a DGX H100).

Two trees, each captured with the fake NVML (tests/fake_nvml, scenario h100-healthy) and packed
into an archive, as the module does:

- the DGX H100 fixture (tests/fixtures/nodes/dgx-h100: GID tables cut to 4-16 entries);
- the same tree at a real node's size, built in a temporary directory: every port's GID table at
  the kernel's 255 entries (with types and ndevs), 48 more PCI functions (bridges, NVMe, USB) and
  1,024 IRQs under /proc/irq, roughly what a DGX H100's sysfs holds.

Wall time of the whole capture (walk, NVML recording, pseudonymising, gzip'ed tar) is printed per
tree as min / median / max of the runs. Not a timed test: the figures are judged by a reader.

    .venv/bin/python bench/capture.py            # 5 runs per tree
    .venv/bin/python bench/capture.py --smoke    # 1 run per tree
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "unit")]

from ansible_collections.gpufleet.cluster.plugins.module_utils.capture import capture  # noqa: E402
from nvml_scenarios import fake_with  # noqa: E402
from runners import ScriptedRunner  # noqa: E402

DGX = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
TARGET_S = 5.0


def real_size_tree(target):
    """The DGX fixture grown to a real node's size (see the module docstring)."""
    shutil.copytree(DGX, target, symlinks=True)
    ib = os.path.join(target, "sys", "class", "infiniband")
    for device in os.listdir(ib):
        ports = os.path.join(ib, device, "ports")
        for port in os.listdir(ports):
            base = os.path.join(ports, port)
            for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
                os.makedirs(os.path.join(base, sub), exist_ok=True)
            for index in range(255):
                gid = os.path.join(base, "gids", str(index))
                if not os.path.exists(gid):
                    with open(gid, "w") as handle:
                        handle.write("0000:0000:0000:0000:0000:0000:0000:0000\n")
    devices = os.path.join(target, "sys", "devices", "pci0000:f0")
    links = os.path.join(target, "sys", "bus", "pci", "devices")
    for number in range(48):
        address = "0000:f%x:%02x.0" % (1 + number // 32, number % 32)
        path = os.path.join(devices, address)
        os.makedirs(path)
        for attr, value in (("vendor", "0x8086"), ("class", "0x060400"), ("device", "0x347a"), ("numa_node", "1")):
            with open(os.path.join(path, attr), "w") as handle:
                handle.write(value + "\n")
        os.symlink("../../../devices/pci0000:f0/%s" % address, os.path.join(links, address))
    for irq in range(1024):
        path = os.path.join(target, "proc", "irq", str(irq))
        os.makedirs(path)
        with open(os.path.join(path, "smp_affinity_list"), "w") as handle:
            handle.write("0-223\n")


def time_capture(root, runs, workdir):
    """(wall seconds of each run, entries, files read) of capture + archive of ``root``."""
    times, entries, files = [], 0, 0
    for run in range(runs):
        start = time.perf_counter()
        result = capture.capture_node({"root": root}, ScriptedRunner(), binding=fake_with("h100-healthy"))
        members, meta = capture.write_archive(result, os.path.join(workdir, "capture-%d.tar.gz" % run))
        times.append(time.perf_counter() - start)
        entries, files = len(members), meta["counts"]["files_read"]
    return times, entries, files


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="1 run per tree")
    args = parser.parse_args(argv)
    runs = 1 if args.smoke else args.runs
    workdir = tempfile.mkdtemp(prefix="bench-capture-")
    try:
        big = os.path.join(workdir, "dgx-h100-real-size")
        real_size_tree(big)
        worst = 0.0
        for label, root in (("dgx-h100 fixture", DGX), ("dgx-h100 real size", big)):
            times, entries, files = time_capture(root, runs, workdir)
            worst = max(worst, statistics.median(times))
            print("capture %-20s (%d run(s)): %6d entries, %6d files read, wall min %.3f median %.3f max %.3f s"
                  % (label, runs, entries, files, min(times), statistics.median(times), max(times)))
        print("target < %.0f s per capture: %s (worst median %.3f s)"
              % (TARGET_S, "met" if worst < TARGET_S else "NOT met", worst))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
