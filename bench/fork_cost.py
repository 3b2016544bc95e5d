#!/usr/bin/env python3
"""Why a sweep's cost per host grows with the fleet: a forked worker costs in proportion to what the
controller holds (docs/performance.md, "Sweep cost, round 6").

ansible-core forks one worker process per task and host from the controller's main process (the
accelerated mode too: Mitogen's strategy keeps that model). Forking copies the page tables of every
resident page of the parent, the child's exit tears them down, and the parent's own writes to pages
it shares with a live child copy them. So each fork costs in proportion to the main process's
resident memory, and during a sweep that grows with every registered result (``register:`` of
validate.yml, the facts, the fleet report's checks): the later hosts of a large sweep pay more for
the same task than the first.

This script measures that alone, without Ansible: it runs node_validate once on the dgx-h100
fixture (fake NVML, as bench/node_validate_time.py), then for each heap size H holds H decoded
copies of that result (as a controller holding H hosts' registered results would), forks --forks
children one at a time (each does the same small amount of work and exits, while the parent reads a
slice of its results, as the main process does between forks) and prints per fork: the parent's
CPU, the children's CPU (reaped), both together, the parent's resident memory, and the ratio of
both together to the heap without results (H = 0), in the same run.

    .venv/bin/python bench/fork_cost.py                    # H = 0, 200, 1000, 2000; 100 forks each
    .venv/bin/python bench/fork_cost.py --heaps 0 5000 --forks 50
    .venv/bin/python bench/fork_cost.py --smoke            # H = 0 and 20, 10 forks: that it runs
"""

import argparse
import json
import os
import resource
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import node_validate_time  # noqa: E402  (bench/ is not a package: the module run and its options)


def dgx_result():
    """node_validate's result (the module file as a process) on the dgx-h100 fixture, as JSON text."""
    import subprocess
    import tempfile

    root = os.path.join(node_validate_time.NODES, "dgx-h100")
    scenario = os.path.join(node_validate_time.SCENARIOS, "h100-healthy.json")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": dict(node_validate_time.OPTIONS, root=root)}, handle)
        args = handle.name
    try:
        out = subprocess.run([sys.executable, node_validate_time.MODULE, args],
                             env=node_validate_time.environment(scenario),
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(args)
    result = json.loads(out)
    if not result.get("checks") or result.get("failed"):
        raise SystemExit("fork_cost: node_validate on dgx-h100 gave no checks: %s" % result.get("msg"))
    return out


def resident_kb():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu(usage):
    return usage.ru_utime + usage.ru_stime


def measure(text, heap, forks):
    """(parent ms, children ms, resident MB) per fork with ``heap`` decoded results held."""
    held = [json.loads(text) for _ in range(heap)]
    step = max(1, len(held) // forks) if held else 0
    parent0, children0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    for index in range(forks):
        pid = os.fork()
        if pid == 0:  # the same small work in every child, then out without Python's clean-up
            sum(range(20000))
            os._exit(0)
        for result in held[index * step:(index + 1) * step]:  # the parent reads results while the child lives
            len(result["checks"])
        os.waitpid(pid, 0)
    parent1, children1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    resident = resident_kb() / 1024.0
    del held
    return ((cpu(parent1) - cpu(parent0)) * 1000.0 / forks, (cpu(children1) - cpu(children0)) * 1000.0 / forks,
            resident)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heaps", type=int, nargs="+", default=[0, 200, 1000, 2000],
                        help="numbers of DGX results held by the parent (default 0 200 1000 2000)")
    parser.add_argument("--forks", type=int, default=100, help="forks per heap size (default 100)")
    parser.add_argument("--smoke", action="store_true", help="H = 0 and 20, 10 forks: that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.heaps, args.forks = [0, 20], 10
    if args.forks < 1 or any(heap < 0 for heap in args.heaps):
        parser.error("--forks must be at least 1 and --heaps not negative")
    text = dgx_result()
    print("fork cost against the controller's heap: %d forks per size, load average %s" % (
        args.forks, node_validate_time.load_average()))
    print("one DGX node_validate result: %d bytes of JSON, %d checks" % (len(text), len(json.loads(text)["checks"])))
    print("%8s %12s %14s %14s %12s %10s" % ("results", "resident MB", "parent ms/f", "child ms/f", "both ms/f",
                                            "vs H=0"))
    base = None
    for heap in args.heaps:
        parent, children, resident = measure(text, heap, args.forks)
        both = parent + children
        base = both if base is None and heap == 0 else base
        ratio = "%.2f" % (both / base) if base else "-"
        print("%8d %12.1f %14.2f %14.2f %12.2f %10s" % (heap, resident, parent, children, both, ratio))


if __name__ == "__main__":
    main()
