#!/usr/bin/env python3
"""CPU time of one node health agent cycle on the DGX H100 fixture tree (target: <= 50 ms).

The agent (plugins/module_utils/agent/agent.py) runs node_validate's checks on
tests/fixtures/nodes/dgx-h100 (8 GPUs, 4 NVSwitches, 9 HCAs), applies hysteresis and writes
health.json, agent-state.json and the Prometheus textfile into a temporary directory. The entry
point runs as installed in /opt/gpufleet/agent (the role's file next to the collection's
module_utils) with the service's flags (``python3 -s -S``: no site module, so no Ansible on the
path). CPU time is user + system of the child (resource.getrusage(RUSAGE_CHILDREN)), measured
from outside. Printed, min / median / max over --runs:

* resident (daemon mode, ``--loop``): the entry point with ``--interval 0.2 --cycles 1+K``, then
  exit, minus the median of runs with ``--cycles 1`` (start-up: interpreter, imports, the first
  cycle, which imports the check modules), divided by K: the steady state of a resident agent.
  The cycles are counted from health.json's cycle counter. The GPUs
  answer through the fake NVML double (tests/fake_nvml, h100-healthy scenario): without
  libnvidia-ml the real binding fails closed and the GPU checks would not run. Its import, once
  per process, is not part of the per-cycle figure;
* per process (timer mode, a process per cycle): the whole process with the fake double; and,
  since the real binding cannot run a cycle here, the imports of a cycle (the modules one cycle
  loads, listed by a run) with the real nvidia-ml-py ``import pynvml`` (PYTHONPATH = the directory
  this interpreter finds it in), beside the same imports with the fake double; the estimate for a
  real node is the fake process's figure with the fake imports swapped for the real ones;
* in-process: Agent.cycle alone in a warm interpreter (time.process_time), fake double.

    nice -n 10 .venv/bin/python bench/agent_cycle.py [--runs 10] [--cycles 10]
    .venv/bin/python bench/agent_cycle.py --smoke    # 2 runs of 2 cycles: that it runs (bench/smoke.py)

With --smoke the target is not judged (the exit status says only that the run worked).
"""

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")
NODE = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
SCENARIO = os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")
TARGET_MS = 50.0
INTERVAL = 0.2

ENTRY = os.path.join(REPO, "roles", "node_health_agent", "files", "gpufleet-health-agent")
# ExecStart of roles/node_health_agent/templates/gpufleet-health-agent.service.j2
FLAGS = ["-s", "-S"]

# Run in a child with the service's flags: one cycle, then the modules it loaded beyond an empty
# interpreter's (printed as JSON), without the NVML binding itself.
LIST_IMPORTS = """
import json, sys
base = set(sys.modules)
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent import run_once
run_once(sys.argv[2])
print(json.dumps(sorted(m for m in set(sys.modules) - base if m != "pynvml")))
"""
# Imports those modules (and the binding with --nvml), nothing else.
IMPORT_ONLY = """
import json, sys
sys.path.insert(0, sys.argv[1])
for name in json.loads(sys.argv[2]):
    __import__(name)
if sys.argv[3] == "nvml":
    import pynvml
"""


def config(work):
    for name in ("state", "textfile"):
        os.makedirs(os.path.join(work, name), exist_ok=True)
    path = os.path.join(work, "agent.json")
    with open(path, "w") as handle:
        json.dump({"node_name": "dgx-h100", "state_dir": os.path.join(work, "state"),
                   "textfile_dir": os.path.join(work, "textfile"), "interval": 60,
                   "node_validate": {"root": NODE, "gpu": {"expected_count": 8, "expected_driver_version": "580"},
                                     "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}}, handle)
    return path


def child_cpu(argv, env=None, check_output=False):
    """(CPU ms of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check_output and ("Traceback" in out.stdout or "not written" in out.stdout or "failed" in out.stdout):
        raise SystemExit("agent reported a problem:\n" + out.stdout)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000, out.stdout


def cycle_count(work):
    with open(os.path.join(work, "state", "health.json")) as handle:
        return json.load(handle)["cycle"]


def stats(values):
    return "min %6.1f  median %6.1f  max %6.1f" % (min(values), statistics.median(values), max(values))


def real_binding():
    """(directory holding nvidia-ml-py's pynvml, its version) or (None, None)."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin or os.path.dirname(spec.origin) == FAKE_NVML:
        return None, None
    try:
        from importlib.metadata import version

        release = version("nvidia-ml-py")
    except Exception:  # the binding without its distribution metadata
        release = "?"
    return os.path.dirname(spec.origin), release


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=10, help="cycles per resident run")
    parser.add_argument("--smoke", action="store_true",
                        help="2 runs of 2 cycles: checks that it runs (bench/smoke.py, in make test); the target "
                             "is not judged")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.cycles = 2, 2
    real_dir, real_version = real_binding()
    work = tempfile.mkdtemp(prefix="gpufleet-agent-bench-")
    try:
        path = config(work)
        # /opt/gpufleet/agent: the entry point and the collection tree beside it
        entry = os.path.join(work, "gpufleet-health-agent")
        shutil.copy(ENTRY, entry)
        os.symlink(os.path.join(COLLECTIONS, "ansible_collections"), os.path.join(work, "ansible_collections"))
        fake_env = dict(os.environ, GPUFLEET_FAKE_NVML_SCENARIO=SCENARIO, PYTHONPATH=FAKE_NVML)
        python = [sys.executable] + FLAGS

        # resident: 1 + K cycles minus start-up and first cycle (1 cycle), per cycle
        startup, resident = [], []
        for _ in range(args.runs):
            startup.append(child_cpu(python + [entry, "--loop", "--cycles", "1", path], fake_env, True)[0])
        for _ in range(args.runs):
            before = cycle_count(work) if os.path.exists(os.path.join(work, "state", "health.json")) else 0
            cpu, _out = child_cpu(python + [entry, "--loop", "--interval", str(INTERVAL), "--cycles",
                                            str(1 + args.cycles), path], fake_env, True)
            ran = cycle_count(work) - before
            if ran != 1 + args.cycles:
                raise SystemExit("resident run published %d cycles, %d asked" % (ran, 1 + args.cycles))
            resident.append(cpu)
        per_cycle = [(cpu - statistics.median(startup)) / args.cycles for cpu in resident]

        # per process (timer mode)
        process = [child_cpu(python + [entry, path], fake_env, True)[0] for _ in range(args.runs)]
        modules = json.loads(subprocess.run(python + ["-c", LIST_IMPORTS, work, path], env=fake_env,
                                            capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        listed = json.dumps(modules)
        imports_only = [child_cpu(python + ["-c", IMPORT_ONLY, work, listed, "-"], fake_env)[0]
                        for _ in range(args.runs)]
        imports_fake = [child_cpu(python + ["-c", IMPORT_ONLY, work, listed, "nvml"], fake_env)[0]
                        for _ in range(args.runs)]
        imports_real = []
        if real_dir:
            real_env = dict(os.environ, PYTHONPATH=real_dir)
            real_env.pop("GPUFLEET_FAKE_NVML_SCENARIO", None)
            imports_real = [child_cpu(python + ["-c", IMPORT_ONLY, work, listed, "nvml"], real_env)[0]
                            for _ in range(args.runs)]
        bare = [child_cpu(python + ["-c", "pass"])[0] for _ in range(args.runs)]
        with open(os.path.join(work, "state", "health.json")) as handle:
            health = json.load(handle)
        assert health["healthy"] and health["agent"]["healthy"], health["msg"]
        imported = [name for name in sys.modules if name == "ansible" or name.startswith("ansible.")]

        # in-process
        os.environ["GPUFLEET_FAKE_NVML_SCENARIO"] = SCENARIO
        sys.path[:0] = [COLLECTIONS, FAKE_NVML]
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent import Agent, load_config

        agent = Agent(load_config(path), log=lambda line: None)
        agent.cycle()
        inproc = []
        for _ in range(args.runs):
            cpu = time.process_time()
            agent.cycle()
            inproc.append((time.process_time() - cpu) * 1000)

        med = statistics.median
        print("agent cycle on %s (%d checks), %d runs, CPU ms (%s, load %s)" % (
            os.path.relpath(NODE, REPO), len(health["checks"]), args.runs,
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "%.1f %.1f %.1f" % os.getloadavg()))
        print("resident (daemon mode: --loop --interval %g, 1 + %d cycles per run, fake NVML double)" % (
            INTERVAL, args.cycles))
        print("  per cycle ((run - start-up median) / %2d)         : %s" % (args.cycles, stats(per_cycle)))
        print("  start-up + first cycle, once (--cycles 1)        : %s" % stats(startup))
        print("per process (timer mode: python3 -s -S, a process per cycle)")
        print("  whole process, fake NVML double                  : %s" % stats(process))
        print("  empty interpreter (-c pass)                      : %s" % stats(bare))
        print("  imports of a cycle (%3d modules), no binding     : %s" % (len(modules), stats(imports_only)))
        print("  imports of a cycle + fake double's import pynvml : %s" % stats(imports_fake))
        if imports_real:
            print("  imports of a cycle + real import pynvml          : %s  (nvidia-ml-py %s)"
                  % (stats(imports_real), real_version))
            real = med(process) - med(imports_fake) + med(imports_real)
            print("  estimate with the real binding (whole process, fake imports swapped for the real): %6.1f"
                  % real)
        else:
            real = None
            print("  real binding: nvidia-ml-py not installed for %s, not measured" % sys.executable)
        print("in-process cycle (Agent.cycle, warm interpreter)   : %s" % stats(inproc))
        print("ansible imported by the bench before the cycles    : %s" % (imported or "no"))
        verdict = "ok" if med(per_cycle) <= TARGET_MS else "OVER"
        if args.smoke:
            verdict = "not judged (smoke run)"
        print("target <= %.0f ms CPU per cycle, resident per-cycle median %.1f: %s" % (
            TARGET_MS, med(per_cycle), verdict))
        print("per process (timer mode): %.1f with the fake double, %s with the real binding: %s" % (
            med(process), "n/a" if real is None else "%.1f" % real,
            "over the target (interpreter start-up and imports every cycle)"
            if max(med(process), real or 0) > TARGET_MS else "within the target"))
        return 1 if verdict == "OVER" else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
