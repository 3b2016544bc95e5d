#!/usr/bin/env python3
"""Module time of node_validate on a DGX-class fixture tree (target in docs/performance.md: <= 150 ms).

Runs node_validate's logic (option checks, sysfs facts for GPUs and HCAs, NVML checks, RDMA
checks) on tests/fixtures/nodes/dgx-h100 (8 GPUs, 4 NVSwitches, 9 HCAs) with the fake NVML
binding answering the h100-healthy scenario, and prints min / median / max over --runs runs:

* in-process, warm: a fresh SysfsReader and NvmlAdapter per run (every file read again, NVML
  initialised again), the binding already imported;
* in-process, cold: the first run of a fresh interpreter, with the imports of our module_utils
  and the CPU time of the logic alone (which imports the binding and reads the scenario) --
  measured in --processes separate interpreters;
* the module file itself as a process (what Ansible runs, without AnsiballZ): its reported
  elapsed_ms and the wall time of the whole process (interpreter start-up and imports).

Wall time and CPU time (time.process_time of this process) are both printed: on a loaded
machine wall time includes waiting for a core, CPU time does not.

    .venv/bin/python bench/node_validate_time.py [--runs 30] [--node dgx-h100] [--scenario h100-healthy]
    .venv/bin/python bench/node_validate_time.py --smoke   # 2 runs, 2 processes: that it runs (bench/smoke.py)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
MODULE = os.path.join(REPO, "plugins", "modules", "node_validate.py")

# Options of a DGX H100 sweep (the lab's), XIDs from log files below root (none in the fixture).
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}


def stats(values):
    return "min %7.1f  median %7.1f  max %7.1f" % (min(values), statistics.median(values), max(values))


def load_average():
    try:
        return "%.1f %.1f %.1f" % os.getloadavg()
    except OSError:
        return "n/a"


def in_process(root, runs):
    """(wall ms, cpu ms, elapsed_ms) lists of warm in-process runs."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node

    params = dict(OPTIONS, root=root, fail_on="fail")
    walls, cpus, elapsed = [], [], []
    validate_node(FAMILIES, params, runner=SubprocessRunner())  # imports the binding once
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        payload, errors = validate_node(FAMILIES, params, runner=SubprocessRunner())
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        assert not errors and payload["healthy"], errors or payload["msg"]
        elapsed.append(payload["elapsed_ms"])
    return walls, cpus, elapsed


COLD = r"""
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
logic = time.process_time()
payload, errors = validate_node(FAMILIES, json.loads(sys.argv[1]), runner=SubprocessRunner())
now = time.process_time()
print(json.dumps([(time.perf_counter() - wall) * 1000, (now - cpu) * 1000, payload["elapsed_ms"],
                  (now - logic) * 1000]))
"""


def environment(scenario):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([FAKE_NVML, COLLECTIONS])
    env["GPUFLEET_FAKE_NVML_SCENARIO"] = scenario
    return env


def cold(root, scenario, processes):
    """(wall ms, cpu ms, elapsed_ms) of the first run in fresh interpreters (imports included)."""
    params = json.dumps(dict(OPTIONS, root=root, fail_on="fail"))
    walls, cpus, elapsed, logic = [], [], [], []
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", COLD, params], env=environment(scenario),
                             capture_output=True, text=True, check=True).stdout
        wall, cpu, ms, logic_cpu = json.loads(out)
        walls.append(wall)
        cpus.append(cpu)
        elapsed.append(ms)
        logic.append(logic_cpu)
    return walls, cpus, elapsed, logic


def module_process(root, scenario, processes):
    """(process wall ms, process cpu ms, elapsed_ms) of the module file run as Ansible runs it."""
    walls, cpus, elapsed = [], [], []
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": dict(OPTIONS, root=root)}, handle)
        args = handle.name
    try:
        for _ in range(processes):
            before = os.times()
            wall = time.perf_counter()
            out = subprocess.run([sys.executable, MODULE, args], env=environment(scenario),
                                 capture_output=True, text=True, check=False).stdout
            walls.append((time.perf_counter() - wall) * 1000)
            after = os.times()
            cpus.append(((after.children_user - before.children_user)
                         + (after.children_system - before.children_system)) * 1000)
            result = json.loads(out)
            assert result.get("healthy") and not result.get("failed"), result.get("msg")
            elapsed.append(result["elapsed_ms"])
    finally:
        os.unlink(args)
    return walls, cpus, elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="warm in-process runs (default 30)")
    parser.add_argument("--processes", type=int, default=10,
                        help="fresh interpreters for the cold and module-process rows (default 10)")
    parser.add_argument("--node", default="dgx-h100", help="fixture node under tests/fixtures/nodes")
    parser.add_argument("--scenario", default="h100-healthy", help="fake NVML scenario under tests/fixtures/nvml")
    parser.add_argument("--smoke", action="store_true",
                        help="2 runs and 2 processes: checks that it runs (bench/smoke.py, in make test); not a "
                             "measurement")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.processes = 2, 2

    root = os.path.join(NODES, args.node)
    scenario = os.path.join(SCENARIOS, args.scenario + ".json")
    os.environ["GPUFLEET_FAKE_NVML_SCENARIO"] = scenario
    for path in (COLLECTIONS, FAKE_NVML):
        sys.path.insert(0, path)

    print("node_validate on %s, fake NVML %s, options %s" % (args.node, args.scenario, json.dumps(OPTIONS)))
    print("python %s, %d CPU(s), load average before: %s" % (sys.version.split()[0], os.cpu_count() or 0,
                                                             load_average()))
    print("%-44s %-44s %s" % ("", "wall ms", "CPU ms"))
    walls, cpus, elapsed = in_process(root, args.runs)
    print("%-44s %s   %s" % ("in-process, warm (%d runs)" % args.runs, stats(walls), stats(cpus)))
    print("%-44s %s" % ("  elapsed_ms reported", stats(elapsed)))
    walls, cpus, elapsed, logic = cold(root, scenario, args.processes)
    print("%-44s %s   %s" % ("in-process, cold incl. imports (%d procs)" % args.processes, stats(walls),
                             stats(cpus)))
    print("%-44s %s   %s" % ("  elapsed_ms reported / logic CPU", stats(elapsed), stats(logic)))
    walls, cpus, elapsed = module_process(root, scenario, args.processes)
    print("%-44s %s   %s" % ("module file as a process (%d procs)" % args.processes, stats(walls), stats(cpus)))
    print("%-44s %s" % ("  elapsed_ms reported", stats(elapsed)))
    print("load average after: %s; target (docs/performance.md): module time <= 150 ms" % load_average())


if __name__ == "__main__":
    main()
