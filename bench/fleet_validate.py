#!/usr/bin/env python3
"""Fleet sweep cost: validate.yml against Ansible's floor and against shell-style checks (targets: docs/performance.md).

Builds N simulated hosts in a temporary inventory (local connection, the venv's python, each
host with its own filesystem root -- a symlink to a fixture tree, mixing dgx-h100, hdr-degraded
and empty -- and its own fake NVML scenario through the task environment), then times, one
after the other in the same run:

  (a) floor:    one no-op module task per host (ansible.builtin.ping)
  (b) validate: playbooks/validate.yml (one gpufleet.cluster.node_validate task per host)
  (c) shell:    bench/shell_checks.yml (the same checks as 8 shell/command tasks per host,
                one command per file family)

and prints wall time, per-host cost, CPU time of ansible-playbook and all its children, and
the ratios b/a and c/b (targets: b/a <= 1.3, c/b >= 5 at N = 200). The load average is printed
with each row: on a loaded machine wall time includes waiting for a core, CPU time does not.

    .venv/bin/python bench/fleet_validate.py              # N = 50 and 200
    .venv/bin/python bench/fleet_validate.py --large      # also N = 1000
    .venv/bin/python bench/fleet_validate.py --sizes 20 --forks 20 --keep
    .venv/bin/python bench/fleet_validate.py --site-lab   # also site.yml twice in a fresh lab (Docker)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
PLAYBOOK = os.path.join(BIN, "ansible-playbook")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")

# (fixture node, NVML scenario, gpu options, rdma options) in a repeating pattern of 10 hosts:
# 6 healthy DGX H100, 2 degraded HDR nodes (a port down, a link at half rate, peermem not
# registered), 2 hosts without GPU or HCA.
PATTERN = (
    [("dgx-h100", "h100-healthy", {"expected_count": 8, "expected_driver_version": "580"},
      {"expected_devices": 9, "min_rate_gbps": 200})] * 6
    + [("hdr-degraded", "h100-healthy", {}, {"expected_devices": 4, "min_rate_gbps": 200})] * 2
    + [("empty", "h100-healthy", {}, {})] * 2
)

FLOOR = """---
- name: Floor (one no-op module task per host)
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def build(workdir, count):
    """Inventory of ``count`` hosts with their own roots below ``workdir``; returns its path."""
    roots = os.path.join(workdir, "roots")
    os.makedirs(roots, exist_ok=True)
    hosts = {}
    for index in range(count):
        node, scenario, gpu, rdma = PATTERN[index % len(PATTERN)]
        name = "node%04d" % index
        root = os.path.join(roots, name)
        os.symlink(os.path.join(NODES, node), root)
        hosts[name] = {
            "gpufleet_validate_root": root,
            "gpufleet_validate_gpu": dict(gpu, xid_source="none"),
            "gpufleet_validate_rdma": rdma,
            "gpufleet_validate_environment": {
                "PYTHONPATH": FAKE_NVML,
                "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(SCENARIOS, scenario + ".json"),
            },
        }
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                                  "ansible_pipelining": True, "gpufleet_validate_fail_on": "never"},
                         "hosts": hosts}}
    path = os.path.join(workdir, "hosts.json")
    with open(path, "w") as handle:
        json.dump(inventory, handle)
    with open(os.path.join(workdir, "floor.yml"), "w") as handle:
        handle.write(FLOOR)
    return path


def environment(workdir, forks):
    env = dict(os.environ)
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                "GPUFLEET_REPORT_DIR": os.path.join(workdir, "reports"),
                "PATH": BIN + os.pathsep + env.get("PATH", "")})
    if forks:
        env["ANSIBLE_FORKS"] = str(forks)
    return env


def run(argv, env, cwd):
    """(wall s, CPU s of the process tree, completed process)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, proc


def recap_tasks(stdout):
    """Sum of ok + failed over the PLAY RECAP lines (task results per host)."""
    total = 0
    recap = stdout.split("PLAY RECAP", 1)[-1]
    for line in recap.splitlines():
        if " ok=" in line:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            total += int(fields.get("ok", 0)) + int(fields.get("failed", 0))
    return total


def load():
    try:
        return "%.1f" % os.getloadavg()[0]
    except OSError:
        return "n/a"


def configured_forks(env):
    out = subprocess.run([os.path.join(BIN, "ansible-config"), "dump"], env=env, capture_output=True,
                         text=True, check=False).stdout
    for line in out.splitlines():
        if line.startswith("DEFAULT_FORKS"):
            return line.split("=", 1)[1].strip()
    return "?"


def bench_size(count, forks, keep):
    workdir = tempfile.mkdtemp(prefix="gpufleet-bench-%d-" % count)
    try:
        inventory = build(workdir, count)
        env = environment(workdir, forks)
        plays = (("a floor (ping)", os.path.join(workdir, "floor.yml"), 1),
                 ("b validate.yml", os.path.join(REPO, "playbooks", "validate.yml"), 1),
                 ("c shell checks", os.path.join(REPO, "bench", "shell_checks.yml"), 8))
        rows = {}
        for label, playbook, tasks in plays:
            load_before = load()
            wall, cpu, proc = run([PLAYBOOK, "-i", inventory, playbook], env, workdir)
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
                raise SystemExit("%s failed with rc %d (N=%d)" % (label, proc.returncode, count))
            results = recap_tasks(proc.stdout)
            if results != tasks * count:
                raise SystemExit("%s: %d task results, expected %d" % (label, results, tasks * count))
            rows[label[0]] = (label, wall, cpu, results, "%s/%s" % (load_before, load()))
        return rows
    finally:
        if keep:
            print("kept %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def print_table(count, rows):
    print()
    print("N = %d hosts" % count)
    print("  %-16s %9s %12s %9s %12s %9s  %s" % ("play", "wall s", "wall/host ms", "CPU s", "CPU/host ms",
                                               "results", "load 1m before/after"))
    for key in "abc":
        label, wall, cpu, results, loads = rows[key]
        print("  %-16s %9.1f %12.0f %9.1f %12.0f %9d  %s" % (label, wall, wall / count * 1000, cpu,
                                                             cpu / count * 1000, results, loads))
    a, b, c = rows["a"], rows["b"], rows["c"]
    print("  b/a = %.2f wall, %.2f CPU (target <= 1.3);  c/b = %.1f wall, %.1f CPU (target >= 5)"
          % (b[1] / a[1], b[2] / a[2], c[1] / b[1], c[2] / b[2]))


def site_lab(env):
    """Time site.yml in a fresh lab: first run, then the converged re-run (target in docs/performance.md: <= 25 %)."""
    inventory = os.path.join(REPO, "inventories", "lab", "hosts.yml")
    site = os.path.join(REPO, "playbooks", "site.yml")
    if not shutil.which("docker"):
        print("\nsite.yml in the lab: skipped (no docker command; the lab needs Docker)")
        return
    # A fresh lab: new containers with their simulated hardware (lab.yml with no site phases), so
    # run 1 really is a first run (packages installed, services configured).
    print("\nsite.yml in the lab (%s): recreating the lab containers" % inventory)
    subprocess.run(["bash", "scripts/lab-down.sh"], cwd=REPO, env=env, capture_output=True, check=False)
    lab_env = dict(env, ANSIBLE_ARGS='-e {"gpufleet_phases":[]}')
    up = subprocess.run(["bash", "scripts/lab-up.sh"], cwd=REPO, env=lab_env, capture_output=True, text=True,
                        check=False)
    if up.returncode != 0:
        print("  lab-up.sh failed (rc %d); last lines:\n%s" % (up.returncode, "\n".join(up.stdout.splitlines()[-15:])))
        return
    walls, changes = [], []
    for attempt in ("run 1 (first)", "run 2 (converged)"):
        wall, cpu, proc = run([PLAYBOOK, "-i", inventory, site], env, REPO)
        recap = proc.stdout.split("PLAY RECAP", 1)[-1].strip().splitlines()
        counts = [dict(p.split("=", 1) for p in line.split() if "=" in p) for line in recap if " ok=" in line]
        changed = sum(int(c.get("changed", 0)) for c in counts)
        tasks = sum(int(c.get("ok", 0)) + int(c.get("skipped", 0)) for c in counts)
        print("  %-18s rc %d  wall %6.1f s  CPU %6.1f s  changed=%-3d task results %d  load %.1f" % (
            attempt, proc.returncode, wall, cpu, changed, tasks, os.getloadavg()[0]))
        if proc.returncode != 0:
            print("\n".join(proc.stdout.splitlines()[-20:]))
            return
        walls.append(wall)
        changes.append(changed)
    print("  re-run / first run = %.0f %% wall (target <= 25 %%); re-run changed=%d (target 0)" % (
        100.0 * walls[1] / walls[0], changes[1]))
    print("  the lab stays up: make lab-down removes it")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 200],
                        help="fleet sizes (default 50 200; none with --site-lab: only the lab timing)")
    parser.add_argument("--large", action="store_true", help="also N = 1000")
    parser.add_argument("--forks", type=int, help="override forks (default: ansible.cfg)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary inventories")
    parser.add_argument("--site-lab", action="store_true",
                        help="also time site.yml twice in a freshly created lab (recreates the lab containers)")
    args = parser.parse_args()
    sizes = list(args.sizes) + ([1000] if args.large and 1000 not in args.sizes else [])

    env = environment(tempfile.gettempdir(), args.forks)
    print("gpufleet fleet validation benchmark")
    print("controller: %d CPU(s), python %s, load average %s" % (
        os.cpu_count() or 0, sys.version.split()[0], " ".join("%.1f" % x for x in os.getloadavg())))
    print("settings: forks=%s, strategy=linear, gathering=explicit (gather_facts: false), "
          "connection=local, pipelining=true (inventory), fleet_report callback on" % (
              args.forks or configured_forks(env)))
    print("hosts: pattern of 10 = 6 x dgx-h100 (8 GPUs, 9 HCAs), 2 x hdr-degraded, 2 x empty; fake NVML")
    for count in sizes:
        print_table(count, bench_size(count, args.forks, args.keep))
        sys.stdout.flush()
    if args.site_lab:
        site_lab(environment(tempfile.gettempdir(), args.forks))


if __name__ == "__main__":
    main()
