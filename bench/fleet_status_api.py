#!/usr/bin/env python3
"""Fleet status without a sweep: playbooks/fleet_status.yml reading the node health agents'
results from the Kubernetes API at N nodes (target: N = 10,000 in <= 10 s of controller CPU, memory
bounded), side by side with the read before it (one unpaged GET of the whole NodeList, through
Jinja: bench/fleet_status_unpaged.yml, the playbook's shape at commit 60b8a9b), and beside the sweep
(playbooks/validate.yml, one node_validate task per host) at a size.

The API is the in-process double tests/fake_kube_api (HTTP on 127.0.0.1, bearer token), serving
the node list in pages as the real server does (limit, continue, remainingItemCount) and realistic
GPU Nodes (tests/fake_kube_api/nodes.py: 50 images, feature-discovery labels, managedFields,
capacity, addresses; about 31 KB of JSON each). Each Node gets its GpufleetHealthy condition as the
agent's own publisher (plugins/module_utils/agent/agent_kube.KubePublisher) writes it, in a pattern
of 10: 8 healthy, 1 unhealthy (gpu.count[node]: a GPU fallen off the bus), 1 without a condition
(agent not publishing: agent.condition fails). The publisher writes the first 10 Nodes through the
API; the other Nodes get a copy of the condition it wrote on the Node of the same kind (the bench
measures the reader, and 10,000 PATCHes of 31 KB Nodes through the double would take minutes).

Printed per N and per read: wall time, CPU time of ansible-playbook and all its children (the
controller's time; the API double runs in this process and is not counted), per host, the largest
RSS of one process of the run (ru_maxrss as os.wait4 reports it in a small launcher process: the run
and every descendant it reaped; before 2026-11-29 14:30 UTC it was read in this process, whose own
RSS, the double's Nodes, the child inherited: the 886 MB printed at N = 10,000 was the bench's)
and the peak PSS of the whole process tree (sampled every 0.5 s); the report's
host count and failing hosts (checked against the pattern), the list requests, and whether the paged
and the unpaged read gave the same fleet report, check by check.

    .venv/bin/python bench/fleet_status_api.py                       # N = 1000 and 10000, both reads, no sweep
    .venv/bin/python bench/fleet_status_api.py --nodes 1000 --sweep-size 100
    .venv/bin/python bench/fleet_status_api.py --unpaged-max 1000    # the unpaged read only up to N = 1000
    .venv/bin/python bench/fleet_status_api.py --nodes 10000 --reads unpaged   # one read only
    .venv/bin/python bench/fleet_status_api.py --smoke   # N = 10, both reads, sweep 2: that it runs (bench/smoke.py)

With --smoke the target is not judged (the exit status says only that the run worked).
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path[:0] = [BENCH, os.path.join(REPO, "tests"), os.path.join(REPO, ".collections")]

from fake_kube_api.server import FakeKubeAPI  # noqa: E402
from fleet_validate import PLAYBOOK, TreeMemory, build, compare_reports, environment, load  # noqa: E402
from fleet_validate import run as run_play  # noqa: E402

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient  # noqa: E402

TARGET_N = 10000
TARGET_S = 10.0
FAILING = [{"id": "gpu.count", "target": "node", "status": "fail",
            "message": "7 GPUs in NVML, 8 on the PCI bus: a GPU fell off the bus"}]
READS = (("paged", "fleet_status.yml kubernetes", os.path.join(REPO, "playbooks", "fleet_status.yml")),
         ("unpaged", "unpaged read (before)", os.path.join(BENCH, "fleet_status_unpaged.yml")))

Measured = collections.namedtuple("Measured", "wall cpu rss pss proc")


def populate(api, count, token_file):
    """N realistic Nodes with their conditions as the agent's publisher writes them; (names, expected failing)."""
    names, failing = [], set()
    client = KubeClient(api.url, token_file=token_file, allow_plain_http=True)  # the double is plain http
    written = {}
    for index in range(count):
        name = "node%05d" % index
        names.append(name)
        api.add_node(name, realistic=True)
        kind = index % 10
        if kind == 9:  # no agent publishing on this node
            failing.add(name)
            continue
        healthy = kind != 8
        if not healthy:
            failing.add(name)
        if kind not in written:
            KubePublisher(client, name).publish(healthy, [] if healthy else FAILING)
            with api.lock:
                written[kind] = [c for c in api.nodes[name]["status"]["conditions"] if c["type"] == "GpufleetHealthy"]
            continue
        with api.lock:
            api.nodes[name]["status"]["conditions"].extend(json.loads(json.dumps(written[kind])))
    return names, failing


# Runs the command and writes its rusage (os.wait4: it and every descendant it reaped) as JSON to
# argv[1]. A process forked from this bench starts with the bench's high-water RSS (Linux keeps the
# largest RSS across fork and exec in the child's rusage), and this bench holds the double's Nodes:
# about 900 MB at N = 10,000. Measured from a small launcher, ru_maxrss is the run's own.
LAUNCHER = (
    "import json, os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[2:])\n"
    "_pid, status, usage = os.wait4(child.pid, 0)\n"
    "with open(sys.argv[1], 'w') as handle:\n"
    "    json.dump({'code': os.waitstatus_to_exitcode(status), 'cpu': usage.ru_utime + usage.ru_stime,\n"
    "               'maxrss': usage.ru_maxrss}, handle)\n")


def measured(argv, env, cwd):
    """Measured(wall s, CPU s, largest RSS MB, tree PSS peak MB, completed process) of one run: CPU
    and RSS from the launcher's os.wait4 rusage of the command (it and every descendant it reaped),
    so each run has its own figures and not the bench's RSS (see LAUNCHER); PSS of the whole tree
    (the launcher's few MB included)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as usage_file:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, usage_file.name] + list(argv), env=env, cwd=cwd,
                                stdout=out, stderr=err)
        memory = TreeMemory(proc.pid, interval=0.5)
        memory.start()
        proc.wait()
        wall = time.perf_counter() - start
        memory.done.set()
        with open(usage_file.name) as handle:
            usage = json.load(handle)
        proc.returncode = usage["code"] if proc.returncode == 0 else proc.returncode
        out.seek(0)
        err.seek(0)
        completed = subprocess.CompletedProcess(argv, proc.returncode, out.read().decode("utf-8", "replace"),
                                                err.read().decode("utf-8", "replace"))
    return Measured(wall, usage["cpu"], usage["maxrss"] / 1024.0, memory.peak / 1024.0, completed)


def fleet_status(api, playbook, names, token_file, workdir, key):
    # fleet_status.yml reads the GPU nodes (gpu_nodes: where an agent belongs)
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": dict((name, {}) for name in names)}}}}
    path = os.path.join(workdir, "status-hosts.json")
    with open(path, "w") as handle:
        json.dump(inventory, handle)
    env = environment(workdir, None)
    reports = os.path.join(workdir, "reports-" + key)
    env["GPUFLEET_REPORT_DIR"] = reports
    # a page's timeout of 300 s: the double serves from this process, on a loaded machine a 15 MB page waits for a core
    extra = json.dumps({"gpufleet_status_source": "kubernetes", "gpufleet_status_kube_server": api.url,
                        "gpufleet_status_kube_token_file": token_file, "gpufleet_status_fail_on": "never",
                        "gpufleet_status_kube_timeout": 300})
    load_before = load()
    with api.lock:
        before = len(api.requests)
    result = measured([PLAYBOOK, "-i", path, playbook, "-e", extra], env, workdir)
    if result.proc.returncode != 0:
        sys.stderr.write(result.proc.stdout[-3000:] + result.proc.stderr[-3000:])
        raise SystemExit("%s (kubernetes) failed with rc %d" % (playbook, result.proc.returncode))
    with open(os.path.join(reports, "fleet-report.json")) as handle:
        report = json.load(handle)
    with api.lock:
        lists = [r for r in api.requests[before:] if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    return result, report, reports, lists, "%s/%s" % (load_before, load())


def sweep(size, workdir):
    inventory = build(workdir, size)
    env = environment(workdir, None)
    load_before = load()
    result = run_play([PLAYBOOK, "-i", inventory, os.path.join(REPO, "playbooks", "validate.yml")], env, workdir)
    wall, cpu, proc = result.wall, result.cpu, result.proc
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit("validate.yml failed with rc %d (N=%d)" % (proc.returncode, size))
    return wall, cpu, "%s/%s" % (load_before, load())


def report_hosts(report):
    hosts = report.get("hosts")
    if isinstance(hosts, dict):
        return dict((name, entry.get("checks") or []) for name, entry in hosts.items())
    return dict((entry["host"], entry.get("checks") or []) for entry in hosts)


HEADER = "  %-38s %8s %12s %8s %12s %9s %9s  %s" % ("", "wall s", "wall/host ms", "CPU s", "CPU/host ms",
                                                   "RSS MB", "PSS MB", "load 1m before/after")


def bench_size(count, token_dir, unpaged, reads=("paged", "unpaged")):
    """The reads at ``count`` Nodes; {read key: Measured}."""
    workdir = tempfile.mkdtemp(prefix="gpufleet-status-bench-%d-" % count)
    rows = {}
    try:
        token_file = os.path.join(token_dir, "token")
        with FakeKubeAPI() as api:
            with open(token_file, "w") as handle:
                handle.write(api.token)
            names, failing = populate(api, count, token_file)
            with api.lock:
                size = len(json.dumps(api.nodes[names[0]]))
            print()
            print("N = %d Nodes (about %d KB of JSON each; started %s UTC)" % (
                count, size // 1024, time.strftime("%H:%M:%S", time.gmtime())))
            print(HEADER)
            reports = {}
            for key, label, playbook in READS:
                if key not in reads:
                    continue
                if key == "unpaged" and not unpaged:
                    print("  %-38s not run (--unpaged-max)" % ("%s N=%d" % (label, count)))
                    continue
                result, report, directory, lists, loads = fleet_status(api, playbook, names, token_file, workdir, key)
                rows[key] = result
                reports[key] = directory
                hosts = report_hosts(report)
                bad = set(name for name, checks in hosts.items() if any(c["status"] == "fail" for c in checks))
                assert set(hosts) == set(names), "%s: report hosts differ from the nodes" % label
                assert bad == failing, "%s: failing hosts differ: %d reported, %d expected (%s: %s)" % (
                    label, len(bad), len(failing), sorted(bad - failing)[:1],
                    [c["message"] for c in hosts.get((sorted(bad - failing) or [None])[0], [])][:1])
                print("  %-38s %8.1f %12.2f %8.1f %12.2f %9.0f %9.0f  %s" % (
                    "%s N=%d" % (label, count), result.wall, result.wall / count * 1000, result.cpu,
                    result.cpu / count * 1000, result.rss, result.pss, loads))
                limits = sorted(set(r["query"].get("limit", "none") for r in lists))
                print("    report: %d hosts, %d failing (expected %d: 1 in 10 unhealthy, 1 in 10 without condition); "
                      "node list requests: %d (limit %s)" % (len(hosts), len(bad), len(failing), len(lists),
                                                             ", ".join(limits)))
                sys.stdout.flush()
            if len(reports) == 2:
                differences, compared = compare_reports(reports["paged"], reports["unpaged"])
                if differences:
                    print("\n".join("    " + line for line in differences[:20]))
                    raise SystemExit("the paged and the unpaged read gave different fleet reports (N=%d)" % count)
                print("    fleet reports of the paged and the unpaged read: identical, %d checks compared" % compared)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, TARGET_N])
    parser.add_argument("--unpaged-max", type=int, default=TARGET_N,
                        help="run the unpaged read (before) only up to this N (it holds the whole list: "
                             "at 10,000 realistic Nodes some GB)")
    parser.add_argument("--reads", nargs="+", choices=[key for key, _label, _playbook in READS],
                        default=[key for key, _label, _playbook in READS], help="the reads to run (default both)")
    parser.add_argument("--sweep-size", type=int, default=0,
                        help="hosts of a validate.yml sweep printed beside (default 0: none; about 0.5 s of CPU per host)")
    parser.add_argument("--smoke", action="store_true",
                        help="N = 10 (one pattern: 8 healthy, 1 unhealthy, 1 without condition), both reads, sweep of "
                             "2 hosts; checks that it runs (bench/smoke.py, in make test), the target is not judged")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.sweep_size = [10], 2
    token_dir = tempfile.mkdtemp(prefix="gpufleet-status-token-")
    try:
        print("fleet status from the Kubernetes API (in-process double, realistic Nodes), controller %d CPU(s)"
              % (os.cpu_count() or 0))
        results = {}
        for count in args.nodes:
            results[count] = bench_size(count, token_dir, count <= args.unpaged_max, args.reads)
        if args.sweep_size and "paged" in args.reads:
            last = args.nodes[-1]
            cpu = results[last]["paged"].cpu
            swall, scpu, sloads = sweep(args.sweep_size, tempfile.mkdtemp(prefix="gpufleet-status-sweep-"))
            print()
            print("  %-38s %8.1f %12.1f %8.1f %12.1f  %s" % (
                "validate.yml sweep N=%d" % args.sweep_size, swall, swall / args.sweep_size * 1000, scpu,
                scpu / args.sweep_size * 1000, sloads))
            if args.sweep_size != last:
                print("  %-38s %8.1f %12s %8.1f %12s  (measured per host x %d, not run at that size)" % (
                    "validate.yml sweep scaled to N=%d" % last, swall / args.sweep_size * last, "",
                    scpu / args.sweep_size * last, "", last))
            print("  sweep / status (CPU, per host) = %.0fx" % ((scpu / args.sweep_size) / (cpu / last)))
        judged = TARGET_N if TARGET_N in results else max(results)
        if "paged" not in results[judged]:
            print()
            print("  target: N=%d <= %.0f s controller CPU: not judged (the paged read was not run)" % (TARGET_N, TARGET_S))
            return 0
        cpu = results[judged]["paged"].cpu
        verdict = "ok" if cpu <= TARGET_S else "OVER"
        if args.smoke or judged != TARGET_N:
            verdict = "not judged (smoke run)" if args.smoke else "not judged (N=%d not run)" % TARGET_N
        print()
        print("  target: N=%d <= %.0f s controller CPU; N=%d measured %.1f s: %s" % (
            TARGET_N, TARGET_S, judged, cpu, verdict))
        return 1 if verdict == "OVER" else 0
    finally:
        shutil.rmtree(token_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
