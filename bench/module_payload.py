#!/usr/bin/env python3
"""CPU of one module run as Ansible runs it on a node: the AnsiballZ payload, a fresh interpreter.

Ansible keeps the payloads of one local run (ANSIBLE_KEEP_REMOTE_FILES, no pipelining): ping (the
floor's module) and node_validate on dgx-h100 with the fake NVML. Each payload then runs --runs
times, alternating, in three ways:

  ping                 the floor's module
  node_validate cold   PYTHONDONTWRITEBYTECODE=1: module_cache does nothing, so every run compiles
                       the collection's module_utils from the zip (as before module_cache)
  node_validate warm   the module_utils from the node's cache (module_cache; the first run fills it)

and the median CPU time (user + system of the child) of each is printed, with the differences.

    .venv/bin/python bench/module_payload.py [--runs 30]
    .venv/bin/python bench/module_payload.py --smoke     # 2 runs: that it runs (bench/smoke.py)
"""

import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
SCENARIO = os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")

PLAYBOOK = """---
- name: Keep the payloads
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
    - name: Validate
      gpufleet.cluster.node_validate:
        root: %(root)s
        fail_on: never
        gpu: {expected_count: 8, expected_driver_version: "580", xid_source: none, nvml_binding_path: %(fake)s}
        rdma: {expected_devices: 9, min_rate_gbps: 200}
"""


def payloads(work):
    with open(os.path.join(work, "keep.yml"), "w") as handle:
        handle.write(PLAYBOOK % {"root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
                                 "fake": os.path.join(REPO, "tests", "fake_nvml")})
    inventory = {"all": {"hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                                            "ansible_pipelining": False}}}}
    with open(os.path.join(work, "hosts.json"), "w") as handle:
        json.dump(inventory, handle)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_KEEP_REMOTE_FILES="1",
               ANSIBLE_REMOTE_TMP=os.path.join(work, "remote"), GPUFLEET_REPORT_DIR=os.path.join(work, "reports"),
               GPUFLEET_FAKE_NVML_SCENARIO=SCENARIO)
    subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(work, "hosts.json"),
                    os.path.join(work, "keep.yml")], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    found = {}
    for path in glob.glob(os.path.join(work, "remote", "*", "AnsiballZ_*.py")):
        found[os.path.basename(path)[len("AnsiballZ_"):-3]] = path
    return found["ping"], found["node_validate"]


def cpu_ms(path, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([PYTHON, path], env=env, stdout=subprocess.PIPE, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or (b'"checks"' not in proc.stdout and b'"ping"' not in proc.stdout):
        sys.exit("%s failed (rc %d): %s" % (path, proc.returncode, proc.stdout[-500:]))
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--smoke", action="store_true",
                        help="2 runs each: checks that it runs (bench/smoke.py, in make test); not a measurement")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 2
    with tempfile.TemporaryDirectory(prefix="gpufleet-payload-") as work:
        ping, validate = payloads(work)
        base = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        base.update(GPUFLEET_FAKE_NVML_SCENARIO=SCENARIO, XDG_CACHE_HOME=os.path.join(work, "cache"))
        kinds = [("ping", ping, dict(base, PYTHONDONTWRITEBYTECODE="1")),
                 ("node_validate cold", validate, dict(base, PYTHONDONTWRITEBYTECODE="1")),
                 ("node_validate warm", validate, base)]
        cpu_ms(validate, base)  # fills the cache
        times = {name: [] for name, _, _ in kinds}
        for _ in range(args.runs):
            for name, path, env in kinds:
                times[name].append(cpu_ms(path, env))
        print("python %s, %d CPU(s), %d runs each, load average %.1f" % (
            sys.version.split()[0], os.cpu_count() or 0, args.runs, os.getloadavg()[0]))
        median = {name: statistics.median(values) for name, values in times.items()}
        for name, _, _ in kinds:
            print("%-20s median %6.1f ms CPU  (min %.1f, max %.1f)" % (name, median[name], min(times[name]),
                                                                       max(times[name])))
        cold, warm = median["node_validate cold"] - median["ping"], median["node_validate warm"] - median["ping"]
        print("node_validate above ping: cold %.1f ms, warm %.1f ms; the cache saves %.1f ms per run (%.2f of cold)"
              % (cold, warm, cold - warm, (cold - warm) / cold if cold else 0.0))


if __name__ == "__main__":
    main()
