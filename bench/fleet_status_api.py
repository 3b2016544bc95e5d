#!/usr/bin/env python3
"""Fleet status without a sweep: playbooks/fleet_status.yml reading the node health agents'
results from the Kubernetes API at N nodes (target: N = 1000 in <= 10 s of controller time),
printed beside the sweep (playbooks/validate.yml, one node_validate task per host) at a size.

The API is the in-process double tests/fake_kube_api (HTTP on 127.0.0.1, bearer token). Each of
the N Nodes gets its GpufleetHealthy condition from the agent's own publisher
(plugins/module_utils/agent/agent_kube.KubePublisher), as the agents would write it: in a pattern of 10,
8 healthy, 1 unhealthy (gpu.count[node]: a GPU fallen off the bus), 1 without a condition (agent not
publishing: agent.condition fails). Then ``ansible-playbook playbooks/fleet_status.yml -e
gpufleet_status_source=kubernetes`` with an inventory of the N hosts; printed: wall time, CPU
time of ansible-playbook and all its children (the controller time), per host, and the report's
host count and failing hosts (checked against the pattern).

The sweep (bench/fleet_validate.py's inventory: fixture roots, fake NVML, local connection) is
run at --sweep-size hosts (default N; about 0.5 s of CPU per host on this machine, so 1000 hosts
take many minutes) and scaled to N when smaller, the scaling printed as such.

    .venv/bin/python bench/fleet_status_api.py                        # N = 1000, sweep 1000
    .venv/bin/python bench/fleet_status_api.py --sweep-size 100        # sweep measured at 100
    .venv/bin/python bench/fleet_status_api.py --smoke   # N = 10, sweep 2: that it runs (bench/smoke.py)

With --smoke the target is not judged (the exit status says only that the run worked).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path[:0] = [BENCH, os.path.join(REPO, "tests"), os.path.join(REPO, ".collections")]

from fake_kube_api.server import FakeKubeAPI  # noqa: E402
from fleet_validate import PLAYBOOK, build, environment, load, run  # noqa: E402

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient  # noqa: E402

TARGET_S = 10.0
FAILING = [{"id": "gpu.count", "target": "node", "status": "fail",
            "message": "7 GPUs in NVML, 8 on the PCI bus: a GPU fell off the bus"}]


def populate(api, count, token_file):
    """N Nodes, their conditions written by the agent's publisher; (names, expected failing)."""
    names, failing = [], set()
    client = KubeClient(api.url, token_file=token_file, allow_plain_http=True)  # the double is plain http
    for index in range(count):
        name = "node%04d" % index
        names.append(name)
        api.add_node(name)
        kind = index % 10
        if kind == 9:  # no agent publishing on this node
            failing.add(name)
            continue
        healthy = kind != 8
        if not healthy:
            failing.add(name)
        KubePublisher(client, name).publish(healthy, [] if healthy else FAILING)
    return names, failing


def fleet_status(api, names, token_file, workdir):
    # fleet_status.yml reads the GPU nodes (gpu_nodes: where an agent belongs)
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": dict((name, {}) for name in names)}}}}
    path = os.path.join(workdir, "status-hosts.json")
    with open(path, "w") as handle:
        json.dump(inventory, handle)
    env = environment(workdir, None)
    extra = json.dumps({"gpufleet_status_source": "kubernetes", "gpufleet_status_kube_server": api.url,
                        "gpufleet_status_kube_token_file": token_file, "gpufleet_status_fail_on": "never"})
    load_before = load()
    result = run([PLAYBOOK, "-i", path, os.path.join(REPO, "playbooks", "fleet_status.yml"), "-e", extra], env, workdir)
    wall, cpu, proc = result.wall, result.cpu, result.proc
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit("fleet_status.yml (kubernetes) failed with rc %d" % proc.returncode)
    with open(os.path.join(workdir, "reports", "fleet-report.json")) as handle:
        report = json.load(handle)
    return wall, cpu, report, "%s/%s" % (load_before, load())


def sweep(size, workdir):
    inventory = build(workdir, size)
    env = environment(workdir, None)
    load_before = load()
    result = run([PLAYBOOK, "-i", inventory, os.path.join(REPO, "playbooks", "validate.yml")], env, workdir)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--sweep-size", type=int, help="hosts of the validate.yml sweep (default --nodes; 0: none)")
    parser.add_argument("--smoke", action="store_true",
                        help="N = 10 (one pattern: 8 healthy, 1 unhealthy, 1 without condition), sweep of 2 hosts; "
                             "checks that it runs (bench/smoke.py, in make test), the target is not judged")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.sweep_size = 10, 2
    sweep_size = args.nodes if args.sweep_size is None else args.sweep_size
    workdir = tempfile.mkdtemp(prefix="gpufleet-status-bench-")
    try:
        token_file = os.path.join(workdir, "token")
        with FakeKubeAPI() as api:
            with open(token_file, "w") as handle:
                handle.write(api.token)
            names, failing = populate(api, args.nodes, token_file)
            wall, cpu, report, loads = fleet_status(api, names, token_file, workdir)
            lists = [r for r in api.requests if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
        hosts = report_hosts(report)
        bad = set(name for name, checks in hosts.items() if any(c["status"] == "fail" for c in checks))
        assert set(hosts) == set(names), "report hosts differ from the nodes"
        assert bad == failing, "failing hosts differ: %d reported, %d expected" % (len(bad), len(failing))
        print("fleet status from the Kubernetes API (in-process double), controller %d CPU(s)" % (os.cpu_count() or 0))
        print("  %-34s %9s %12s %9s %12s  %s" % ("", "wall s", "wall/host ms", "CPU s", "CPU/host ms",
                                                 "load 1m before/after"))
        print("  %-34s %9.1f %12.1f %9.1f %12.1f  %s" % (
            "fleet_status.yml kubernetes N=%d" % args.nodes, wall, wall / args.nodes * 1000, cpu,
            cpu / args.nodes * 1000, loads))
        print("    report: %d hosts, %d failing (expected %d: 1 in 10 unhealthy, 1 in 10 without condition); "
              "node list requests: %d" % (len(hosts), len(bad), len(failing), len(lists)))
        if sweep_size:
            swall, scpu, sloads = sweep(sweep_size, os.path.join(workdir, "sweep"))
            print("  %-34s %9.1f %12.1f %9.1f %12.1f  %s" % (
                "validate.yml sweep N=%d" % sweep_size, swall, swall / sweep_size * 1000, scpu,
                scpu / sweep_size * 1000, sloads))
            if sweep_size != args.nodes:
                print("  %-34s %9.1f %12s %9.1f %12s  (measured per host x %d, not run at that size)" % (
                    "validate.yml sweep scaled to N=%d" % args.nodes, swall / sweep_size * args.nodes, "",
                    scpu / sweep_size * args.nodes, "", args.nodes))
            print("  sweep / status (CPU, per host) = %.0fx" % ((scpu / sweep_size) / (cpu / args.nodes)))
        verdict = "ok" if cpu <= TARGET_S else "OVER"
        if args.smoke:
            verdict = "not judged (smoke run)"
        print("  target: N=1000 <= %.0f s controller CPU; N=%d measured %.1f s: %s" % (
            TARGET_S, args.nodes, cpu, verdict))
        return 1 if verdict == "OVER" else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
