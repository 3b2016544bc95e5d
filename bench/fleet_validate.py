#!/usr/bin/env python3
"""Fleet sweep cost: validate.yml against Ansible's floor, shell-style checks and the accelerated mode (docs/performance.md).

Builds N simulated hosts in a temporary inventory (local connection, the venv's python, each
host with its own filesystem root -- a symlink to a fixture tree, mixing dgx-h100, hdr-degraded
and empty -- and its own fake NVML scenario: the binding from tests/fake_nvml through
node_validate's gpu.nvml_binding_path, the scenario file through the task environment), then
times, one after the other in the same run:

  (a) floor:          one no-op module task per host (ansible.builtin.ping)
  (d) accel floor:    (a) in the accelerated mode (scripts/accelerated.sh: Mitogen's mitogen_linear + our fixes)
  (b) validate:       playbooks/validate.yml (one gpufleet.cluster.node_validate task per host)
  (e) accel validate: (b) in the accelerated mode; its fleet report must equal (b)'s check by
                      check (host, id, target and every field of the check), else the run fails
  (c) shell:          bench/shell_checks.yml (the same checks as 8 shell/command tasks per host,
                      one command per file family)

and prints wall time, per-host cost, CPU time of ansible-playbook and all its children, the
controller's memory peak (PSS of the whole ansible-playbook process tree sampled every 2 s, and
the largest single process RSS from getrusage), and the ratios b/a, c/b, d/a, e/a (targets:
b/a <= 1.3, c/b >= 5, e/a <= 0.5). With --rounds R (default 3), a and b run R - 1 more times,
next to each other in alternating order, and b/a is also printed per round and as the median of
the rounds: one pair varies by about 0.1 on a shared machine, more than the changes it should show.
node_validate's module time (fresh interpreters, dgx-h100,
target <= 150 ms) is measured in the same run. The load average is printed with each row: on a
loaded machine wall time includes waiting for a core, CPU time does not.

    .venv/bin/python bench/fleet_validate.py              # N = 50 and 200
    .venv/bin/python bench/fleet_validate.py --large      # also N = 1000
    .venv/bin/python bench/fleet_validate.py --sizes 20 --forks 20 --keep
    .venv/bin/python bench/fleet_validate.py --no-shell   # without the (long) shell baseline
    .venv/bin/python bench/fleet_validate.py --sizes 1000 --rounds 1   # one pair of a and b
    .venv/bin/python bench/fleet_validate.py --sizes --site-lab   # only site.yml twice in a fresh lab (Docker)
    .venv/bin/python bench/fleet_validate.py --smoke      # N = 2, 2 rounds: that it runs (bench/smoke.py)
"""

import argparse
import collections
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
PLAYBOOK = os.path.join(BIN, "ansible-playbook")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")
ACCELERATED = os.path.join(REPO, "scripts", "accelerated.sh")

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
            # The binding through nvml_binding_path (also works in a warm interpreter); PYTHONPATH
            # stays for the shell baseline's new interpreters (its nvidia-smi stand-in).
            "gpufleet_validate_gpu": dict(gpu, xid_source="none", nvml_binding_path=FAKE_NVML),
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
    # PYTHONDONTWRITEBYTECODE too: the simulated nodes' modules inherit this environment, and on a real node
    # the module's interpreter does not get the controller's (it turns the module_utils cache off).
    # PYTHONUNBUFFERED too, for every play (floor, validate, accelerated, shell): with it CPython reads a
    # script from stdin -- a pipelined module -- one byte per read(2) (strace: 300,044 reads for a 300 kB
    # script, 99 without), ~0.4 ms of CPU per kB, which the floor pays as well; nodes reached over SSH do
    # not inherit it (docs/performance.md, issue 45).
    for name in ("PYTHONPATH", "GPUFLEET_FAKE_NVML_SCENARIO", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"):
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                "GPUFLEET_REPORT_DIR": os.path.join(workdir, "reports"),
                "PATH": BIN + os.pathsep + env.get("PATH", "")})
    if forks:
        env["ANSIBLE_FORKS"] = str(forks)
    return env


class TreeMemory(threading.Thread):
    """Peak PSS (kB) of a process and all its descendants, sampled every ``interval`` s."""

    def __init__(self, pid, interval=2.0):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self.done = threading.Event()

    @staticmethod
    def _children():
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/stat" % entry) as handle:
                        ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                parents.setdefault(ppid, []).append(int(entry))
        return parents

    @staticmethod
    def _pss(pid):
        try:
            with open("/proc/%d/smaps_rollup" % pid) as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def sample(self):
        parents, todo, total = self._children(), [self.pid], 0
        while todo:
            pid = todo.pop()
            total += self._pss(pid)
            todo.extend(parents.get(pid, ()))
        self.peak = max(self.peak, total)

    def run(self):
        while not self.done.wait(self.interval):
            self.sample()


# What run() returns. A named tuple, so callers in other scripts (bench/fleet_status_api.py) read the
# fields by name: adding one (the memory figures were added with the accelerated mode) broke their
# three-value unpacking ("too many values to unpack").
Run = collections.namedtuple("Run", "wall cpu proc pss rss")


def run(argv, env, cwd):
    """Run(wall s, CPU s of the process tree, completed process, PSS peak of the tree in MB, largest
    process RSS in MB as text). ru_maxrss of RUSAGE_CHILDREN is the largest RSS of any waited-for
    descendant so far: it is this run's figure only when it grew during the run (else "<=" it)."""
    before = os.times()
    rss_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = TreeMemory(proc.pid)
    memory.start()
    stdout, stderr = proc.communicate()
    memory.done.set()
    wall = time.perf_counter() - start
    after = os.times()
    rss_after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    completed = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    largest = "%.0f" % (rss_after / 1024.0) if rss_after > rss_before else "<=%.0f" % (rss_before / 1024.0)
    return Run(wall, cpu, completed, memory.peak / 1024.0, largest)


def recap_counts(stdout):
    """{host: {ok, changed, unreachable, failed, skipped, rescued, ignored}} from the last PLAY RECAP."""
    counts = {}
    recap = stdout.split("PLAY RECAP", 1)[-1]
    for line in recap.splitlines():
        if " ok=" in line:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            counts[line.split()[0]] = dict((k, int(v)) for k, v in fields.items() if v.isdigit())
    return counts


def task_results(counts):
    """Task results of a recap: ok + failed + skipped + unreachable (``changed`` is part of ``ok``;
    ``rescued`` and ``ignored`` are also counted in ok/failed, so they are not added)."""
    return sum(c.get("ok", 0) + c.get("failed", 0) + c.get("skipped", 0) + c.get("unreachable", 0)
               for c in counts.values())


def report_checks(directory):
    """{(host, check id, target): check} of a fleet-report.json."""
    with open(os.path.join(directory, "fleet-report.json")) as handle:
        report = json.load(handle)
    checks = {}
    for host, entry in report["hosts"].items():
        for check in entry["checks"]:
            checks[(host, check["id"], check.get("target"))] = check
    return checks


# Fields that name the run itself, not what it found: a check's failing_since is the run id that
# started its failing streak (in two separate report directories, each report's own run).
RUN_FIELDS = ("failing_since",)


def compare_reports(plain_dir, accelerated_dir):
    """(differences as lines, checks compared) between two fleet reports, check by check (the
    fields of RUN_FIELDS left out)."""
    plain, accelerated = report_checks(plain_dir), report_checks(accelerated_dir)
    for checks in (plain, accelerated):
        for check in checks.values():
            for field in RUN_FIELDS:
                check.pop(field, None)
    differences = []
    for key in sorted(set(plain) | set(accelerated), key=str):
        if key not in plain or key not in accelerated:
            differences.append("%s %s %s: only in the %s report" % (key + ("plain" if key in plain else "accelerated",)))
        elif plain[key] != accelerated[key]:
            fields = sorted(k for k in set(plain[key]) | set(accelerated[key])
                            if plain[key].get(k) != accelerated[key].get(k))
            differences.append("%s %s %s: %s differ (plain %s, accelerated %s)" % (
                key + (", ".join(fields), json.dumps([plain[key].get(k) for k in fields]),
                       json.dumps([accelerated[key].get(k) for k in fields]))))
    return differences, len(plain)


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


# (key, label, play, accelerated, task results per host, task results per play), in the order they
# run; validate.yml's two tasks per play: agent.health of every node (record_checks, once, from what
# node_validate read) and the pick of the failing nodes (add_host runs once, not per host).
PLAYS = (
    ("a", "floor (ping)", "floor", False, 1, 0),
    ("d", "accel floor", "floor", True, 1, 0),
    ("b", "validate.yml", "validate", False, 1, 2),
    ("e", "accel validate", "validate", True, 1, 2),
    ("c", "shell checks", "shell", False, 8, 0),
)
HEADER = "  %-3s%-16s %8s %8s %8s %8s %8s %8s %8s  %s" % (
    "", "play", "wall s", "ms/host", "CPU s", "CPU ms/h", "PSS MB", "RSS MB", "results", "load 1m before/after")


def run_play(key, label, argv, env, count, tasks, per_play, workdir):
    """Runs one play and prints its row; returns (label, wall, CPU, results, load, PSS, RSS)."""
    load_before = load()
    wall, cpu, proc, pss, rss = run(argv, env, workdir)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit("%s failed with rc %d (N=%d)" % (label, proc.returncode, count))
    counts = recap_counts(proc.stdout)
    counts.pop("localhost", None)  # validate.yml's report play (a skipped note)
    results = task_results(counts)  # ok + failed + skipped + unreachable of the simulated hosts
    if results != tasks * count + per_play:
        raise SystemExit("%s: %d task results, expected %d" % (label, results, tasks * count + per_play))
    row = (label, wall, cpu, results, "%s/%s" % (load_before, load()), pss, rss)
    print("  %-3s%-16s %8.1f %8.0f %8.1f %8.0f %8.0f %8s %8d  %s" % (
        key, label, wall, wall / count * 1000, cpu, cpu / count * 1000, pss, rss, results, row[4]))
    sys.stdout.flush()
    return row


def bench_size(count, forks, keep, shell=True, rounds=1):
    """Runs the plays for ``count`` hosts, printing each row as it finishes; returns the rows and the
    (a, b) pairs of every round: round 1 is the sequence of PLAYS, each further round runs a and b
    once more, next to each other, in alternating order (b then a, a then b, ...)."""
    workdir = tempfile.mkdtemp(prefix="gpufleet-bench-%d-" % count)
    print()
    print("N = %d hosts (started %s UTC)" % (count, time.strftime("%H:%M:%S", time.gmtime())))
    print(HEADER)
    sys.stdout.flush()
    try:
        inventory = build(workdir, count)
        playbooks = {"floor": os.path.join(workdir, "floor.yml"),
                     "validate": os.path.join(REPO, "playbooks", "validate.yml"),
                     "shell": os.path.join(REPO, "bench", "shell_checks.yml")}
        plays = dict((play[0], play) for play in PLAYS)

        def play_row(key, suffix=""):
            _key, label, play, accelerated, tasks, per_play = plays[key]
            env = environment(workdir, forks)
            env["GPUFLEET_REPORT_DIR"] = os.path.join(workdir, "reports-" + key + suffix)
            argv = [PLAYBOOK, "-i", inventory, playbooks[play]]
            if accelerated:
                argv = ["bash", ACCELERATED] + argv
            return run_play(key + suffix, label, argv, env, count, tasks, per_play, workdir)

        rows = {}
        for key, _label, play, _accelerated, _tasks, _per_play in PLAYS:
            if play == "shell" and not shell:
                continue
            rows[key] = play_row(key)
            if key == "e":
                differences, compared = compare_reports(os.path.join(workdir, "reports-b"),
                                                        os.path.join(workdir, "reports-e"))
                if differences:
                    print("  fleet reports of b and e DIFFER (%d of %d checks):" % (len(differences), compared))
                    for line in differences[:20]:
                        print("    " + line)
                    raise SystemExit("the accelerated mode gave different results (N=%d)" % count)
                print("     fleet reports of b (plain) and e (accelerated): identical, %d checks compared one by one"
                      % compared)
        pairs = [(rows["a"], rows["b"])]
        for number in range(2, rounds + 1):
            suffix = str(number)
            order = ("b", "a") if number % 2 == 0 else ("a", "b")
            pair = dict((key, play_row(key, suffix)) for key in order)
            pairs.append((pair["a"], pair["b"]))
        return rows, pairs
    finally:
        if keep:
            print("kept %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


# Targets: b/a <= 1.3 and e/a <= 0.5 at every size (the first sweep issue); at N >= 1,000 issue 45 item 4 asks
# b/a <= 1.2 (median of the rounds, CPU) and e/a <= 0.25.
def targets(count):
    return ("1.2", "0.25") if count >= 1000 else ("1.3", "0.5")


def print_ratios(count, rows, pairs):
    def ratio(x, y, index):
        return rows[x][index] / rows[y][index]

    plain, accelerated = targets(count)
    line = "  N=%d  b/a = %.2f wall, %.2f CPU (target <= %s)" % (count, ratio("b", "a", 1), ratio("b", "a", 2), plain)
    if "c" in rows:
        line += ";  c/b = %.1f wall, %.1f CPU (target >= 5)" % (ratio("c", "b", 1), ratio("c", "b", 2))
    print(line)
    print("  N=%d  d/a = %.2f wall, %.2f CPU;  e/a = %.2f wall, %.2f CPU (target <= %s);  e/b = %.2f wall, %.2f CPU"
          % (count, ratio("d", "a", 1), ratio("d", "a", 2), ratio("e", "a", 1), ratio("e", "a", 2), accelerated,
             ratio("e", "b", 1), ratio("e", "b", 2)))
    if len(pairs) > 1:
        walls = [b[1] / a[1] for a, b in pairs]
        cpus = [b[2] / a[2] for a, b in pairs]
        print("  N=%d  b/a in %d rounds (round 1 above, then a and b next to each other): CPU %s, wall %s"
              % (count, len(pairs), " ".join("%.2f" % x for x in cpus), " ".join("%.2f" % x for x in walls)))
        print("  N=%d  b/a median of the rounds = %.2f wall, %.2f CPU (target <= %s; min %.2f, max %.2f CPU)"
              % (count, statistics.median(walls), statistics.median(cpus), plain, min(cpus), max(cpus)))


def module_time(processes):
    """node_validate's module time on dgx-h100 with the fake NVML (bench/node_validate_time.py's
    "module file as a process"): elapsed_ms the module reports, median and max over ``processes``."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import node_validate_time  # pylint: disable=import-outside-toplevel

    _walls, _cpus, elapsed = node_validate_time.module_process(
        os.path.join(NODES, "dgx-h100"), os.path.join(SCENARIOS, "h100-healthy.json"), processes)
    return statistics.median(elapsed), max(elapsed)


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
    walls, changes, results = [], [], []
    for attempt in ("run 1 (first)", "run 2 (converged)"):
        wall, cpu, proc, _pss, _rss = run([PLAYBOOK, "-i", inventory, site], env, REPO)
        counts = dict((host, c) for host, c in recap_counts(proc.stdout).items() if host != "localhost")
        changed = sum(c.get("changed", 0) for c in counts.values())
        per_host = dict((host, task_results({host: c})) for host, c in counts.items())
        print("  %-18s rc %d  wall %6.1f s  CPU %6.1f s  changed=%-3d load %.1f" % (
            attempt, proc.returncode, wall, cpu, changed, os.getloadavg()[0]))
        print("  %-18s task results per host (ok+failed+skipped+unreachable of the recap): %s" % (
            "", ", ".join("%s %d" % item for item in sorted(per_host.items()))))
        if proc.returncode != 0:
            print("\n".join(proc.stdout.splitlines()[-20:]))
            return
        walls.append(wall)
        changes.append(changed)
        results.append(max(per_host.values() or [0]))
    print("  re-run / first run = %.0f %% wall (target <= 25 %%); re-run changed=%d (target 0); "
          "task results per host %d -> %d (target <= 70)" % (100.0 * walls[1] / walls[0], changes[1],
                                                             results[0], results[1]))
    print("  the lab stays up: make lab-down removes it")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 200],
                        help="fleet sizes (default 50 200; none with --site-lab: only the lab timing)")
    parser.add_argument("--large", action="store_true", help="also N = 1000")
    parser.add_argument("--forks", type=int, help="override forks (default: ansible.cfg)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary inventories")
    parser.add_argument("--no-shell", action="store_true", help="skip the shell baseline (c)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of a and b per size (default 3): b/a is also printed as the median of the "
                             "rounds, because one pair on a shared machine varies by about 0.1")
    parser.add_argument("--site-lab", action="store_true",
                        help="also time site.yml twice in a freshly created lab (recreates the lab containers)")
    parser.add_argument("--smoke", action="store_true",
                        help="N = 2, 2 rounds, 2 module-time processes: checks that every play runs (bench/smoke.py, "
                             "in make test); its figures are not measurements")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.rounds, args.large = [2], 2, False
    sizes = list(args.sizes) + ([1000] if args.large and 1000 not in args.sizes else [])
    processes = 2 if args.smoke else 10

    env = environment(tempfile.gettempdir(), args.forks)
    print("gpufleet fleet validation benchmark, %s UTC" % time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
    print("controller: %d CPU(s), python %s, load average %s" % (
        os.cpu_count() or 0, sys.version.split()[0], " ".join("%.1f" % x for x in os.getloadavg())))
    print("settings: forks=%s, gathering=explicit (gather_facts: false), connection=local, pipelining=true "
          "(inventory), fleet_report callback on; strategy linear (a, b, c), gpufleet_mitogen_linear (d, e: "
          "scripts/accelerated.sh)" % (args.forks or configured_forks(env)))
    print("environment: PYTHONUNBUFFERED unset: with it CPython reads a pipelined module from stdin one byte per "
          "read(2); nodes reached over SSH do not inherit it")
    print("hosts: pattern of 10 = 6 x dgx-h100 (8 GPUs, 9 HCAs), 2 x hdr-degraded, 2 x empty; fake NVML")
    if args.smoke:
        print("smoke run: tiny sizes, so the figures below are not measurements")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    all_rows = {}
    if sizes:
        median, worst = module_time(processes)
        print("node_validate module time (dgx-h100, the module file as a process, %d runs): elapsed_ms "
              "median %.1f, max %.1f (target <= 150)" % (processes, median, worst))
    for count in sizes:
        all_rows[count] = bench_size(count, args.forks, args.keep, shell=not args.no_shell, rounds=args.rounds)
        print_ratios(count, *all_rows[count])
        sys.stdout.flush()
    if len(all_rows) > 1:
        print()
        print("ratios of this run (wall / CPU):")
        for count, (rows, pairs) in all_rows.items():
            print_ratios(count, rows, pairs)
    if args.site_lab:
        site_lab(environment(tempfile.gettempdir(), args.forks))


if __name__ == "__main__":
    main()
