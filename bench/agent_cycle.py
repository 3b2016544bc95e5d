#!/usr/bin/env python3
"""CPU time of one node health agent cycle on the DGX H100 fixture tree (target: <= 50 ms).

The agent (plugins/module_utils/agent.py) runs node_validate's checks on
tests/fixtures/nodes/dgx-h100 (8 GPUs, 4 NVSwitches, 9 HCAs) with the fake NVML binding answering
the h100-healthy scenario, applies hysteresis and writes health.json, agent-state.json and the
Prometheus textfile into a temporary directory. Printed, min / median / max over --runs cycles:

* process: what systemd runs every interval: a fresh interpreter with the service's flags
  (``python3 -s -S``: no site module, no .pth file, so no Ansible on the path) running the role's
  entry point next to the collection's module_utils, as installed in /opt/gpufleet/agent; CPU time
  of the child (user + system, resource.getrusage(RUSAGE_CHILDREN)) including interpreter
  start-up and imports. The fake NVML binding comes through PYTHONPATH, as in the lab;
* in-process: the cycle alone (Agent.cycle) in a warm interpreter, CPU time (time.process_time).

    .venv/bin/python bench/agent_cycle.py [--runs 20]
"""

import argparse
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

ENTRY = os.path.join(REPO, "roles", "node_health_agent", "files", "gpufleet-health-agent")
# ExecStart of roles/node_health_agent/templates/gpufleet-health-agent.service.j2
FLAGS = ["-s", "-S"]


def config(work):
    for name in ("state", "textfile"):
        os.makedirs(os.path.join(work, name), exist_ok=True)
    path = os.path.join(work, "agent.json")
    with open(path, "w") as handle:
        json.dump({"node_name": "dgx-h100", "state_dir": os.path.join(work, "state"),
                   "textfile_dir": os.path.join(work, "textfile"),
                   "node_validate": {"root": NODE, "gpu": {"expected_count": 8, "expected_driver_version": "580"},
                                     "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}}, handle)
    return path


def stats(values):
    return "min %6.1f  median %6.1f  max %6.1f" % (min(values), statistics.median(values), max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gpufleet-agent-bench-")
    try:
        path = config(work)
        # /opt/gpufleet/agent: the entry point and the collection tree beside it
        entry = os.path.join(work, "gpufleet-health-agent")
        shutil.copy(ENTRY, entry)
        os.symlink(os.path.join(COLLECTIONS, "ansible_collections"), os.path.join(work, "ansible_collections"))
        env = dict(os.environ, GPUFLEET_FAKE_NVML_SCENARIO=SCENARIO, PYTHONPATH=FAKE_NVML)
        process = []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([sys.executable] + FLAGS + [entry, path], env=env,
                                 capture_output=True, text=True, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            process.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000)
            if "Traceback" in out.stdout or "not written" in out.stdout:
                raise SystemExit("agent cycle reported a problem:\n" + out.stdout)
        fake = []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable] + FLAGS + ["-c", "import pynvml"], env=env, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            fake.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000)
        bare = []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable] + FLAGS + ["-c", "pass"], check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            bare.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000)
        with open(os.path.join(work, "state", "health.json")) as handle:
            health = json.load(handle)
        assert health["healthy"] and health["agent"]["healthy"], health["msg"]
        imported = [name for name in sys.modules if name == "ansible" or name.startswith("ansible.")]

        os.environ["GPUFLEET_FAKE_NVML_SCENARIO"] = SCENARIO
        sys.path[:0] = [COLLECTIONS, FAKE_NVML]
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import Agent, load_config

        agent = Agent(load_config(path), log=lambda line: None)
        agent.cycle()
        inproc = []
        for _ in range(args.runs):
            cpu = time.process_time()
            agent.cycle()
            inproc.append((time.process_time() - cpu) * 1000)
        print("agent cycle on %s (%d checks), %d runs, CPU ms (load %s)" % (
            os.path.relpath(NODE, REPO), len(health["checks"]), args.runs,
            "%.1f %.1f %.1f" % os.getloadavg()))
        print("  process (python3 -s -S, start-up + imports + cycle): %s" % stats(process))
        print("  of which the fake NVML binding's import (test double: JSON scenario, interpreter start-up): %s"
              % stats(fake))
        print("  an empty interpreter (python3 -s -S -c pass)    : %s" % stats(bare))
        agent_ms = statistics.median(process) - statistics.median(fake) + statistics.median(bare)
        print("  process without the fake binding (median)       : %6.1f" % agent_ms)
        print("  in-process cycle                                : %s" % stats(inproc))
        print("  ansible imported by the bench before the cycles : %s" % (imported or "no"))
        verdict = "ok" if statistics.median(inproc) <= TARGET_MS else "OVER"
        print("  target <= %.0f ms CPU per cycle (median, in-process cycle): %s; per process: %s" % (
            TARGET_MS, verdict, "ok" if agent_ms <= TARGET_MS else "over (interpreter start-up and imports)"))
        return 0 if verdict == "ok" else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
