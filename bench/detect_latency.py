#!/usr/bin/env python3
"""From a fault to isolation: latency of the resident node health agent (daemon mode) with its
event sources (issue 31; docs/contracts.md, "Node health agent", events).

In one process: the agent's Loop (agent_daemon.Loop, run_once per cycle, agent_events.EventSources)
in a thread over a copy of the DGX H100 fixture tree, the fake NVML double (tests/fake_nvml,
h100-healthy), the in-process Kubernetes API double (tests/fake_kube_api: PATCH times recorded as
they arrive) and a Slurm stand-in (an ``scontrol`` shell script that logs the time of each
``update``). The kernel log is a FIFO written in the /dev/kmsg record format. Faults, in turn:

* ``xid``: a fatal XID line (Xid 79) written to the kmsg FIFO and to the tree's var/log/kern.log
  (the cycle's XID source, as the journal would hold it);
* ``off-bus``: a "GPU has fallen off the bus" line, the same way;
* ``nvml-event``: an NVML critical-XID event (fake ``inject_event``) and the kern.log line;
* ``gpu-lost``: GPU 0 answers NVML_ERROR_GPU_IS_LOST from the next NVML call, with no event: seen by
  the next periodic cycle (this one measures the interval, not the events).

Measured from the write (or injection) to (a) health.json ``agent.healthy`` false (polled every
2 ms), (b) the GpufleetHealthy=False PATCH received by the API double, (c) the drain command
issued (the stand-in's clock). After each fault the fault is removed and the node recovers (a
periodic cycle) before the next. Printed: p50 / p99 / max per fault kind and over all, and the
agent's CPU seconds per hour with no fault, twice: the whole process over --idle seconds at the
bench's interval (API double and polling included: an upper bound), and the figure of record, the
agent's own threads alone (a fresh loop at the default 60 s interval, both event sources on, each
thread's CPU from /proc/self/task/<tid>/schedstat) plus a cycle a minute (health.json's
agent.cpu_ms).

    nice -n 10 .venv/bin/python bench/detect_latency.py [--faults 20] [--interval 2] [--idle 20]
    .venv/bin/python bench/detect_latency.py --smoke   # 4 faults, short idle: that it runs (bench/smoke.py)
"""

import argparse
import json
import os
import select
import shutil
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests", "fake_nvml"), os.path.join(REPO, "tests")]

import pynvml  # noqa: E402  (the fake double: tests/fake_nvml first on the path)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon, agent_events  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import run_once  # noqa: E402
from fake_kube_api.server import FakeKubeAPI  # noqa: E402

NODE = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
SCENARIO = os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")
NAME = "dgx-h100"
KINDS = ("xid", "off-bus", "nvml-event", "gpu-lost")
XID_LINE = "NVRM: Xid (PCI:0000:1b:00): 79, pid=0, name=?, GPU has fallen off the bus."
OFF_BUS_LINE = "NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus."
SCONTROL = """#!/bin/sh
dir=$(dirname "$0")
case "$1" in
show) if [ -f "$dir/slurm-state" ]; then cat "$dir/slurm-state"; else echo "NodeName=$3 State=IDLE"; fi ;;
update) echo "$(date +%s.%N) $*" >> "$dir/scontrol-calls"
  case "$*" in
  *State=DRAIN*) echo "NodeName=dgx-h100 State=IDLE+DRAIN Reason=${4#Reason=}" > "$dir/slurm-state" ;;
  *State=RESUME*) rm -f "$dir/slurm-state" ;;
  esac ;;
esac
"""


class StampedList(list):
    """The API double's request log, each request stamped with its arrival time."""

    def append(self, item):
        item = dict(item, at=time.time())
        super().append(item)


class Waiter(object):
    """Loop.wait for a Loop in a thread: select on the event fds and a stop pipe."""

    def __init__(self):
        self.read, self.write = os.pipe()
        self.stopped = False

    def __call__(self, timeout, fds=()):
        readable = select.select([self.read] + list(fds), [], [], max(0, timeout))[0]
        return self.stopped or (self.read in readable)

    def stop(self):
        self.stopped = True
        os.write(self.write, b"x")


def kern_line(message):
    return "%s kernel: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), message)


def setup(work, interval):
    root = os.path.join(work, "node")
    shutil.copytree(NODE, root, symlinks=True)
    os.makedirs(os.path.join(root, "var", "log"), exist_ok=True)
    open(os.path.join(root, "var", "log", "kern.log"), "w").close()
    state = os.path.join(work, "state")
    os.makedirs(state)
    scontrol = os.path.join(work, "scontrol")
    with open(scontrol, "w") as out:
        out.write(SCONTROL)
    os.chmod(scontrol, 0o755)
    fifo = os.path.join(work, "kmsg")
    os.mkfifo(fifo)
    return root, state, scontrol, fifo


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def figures(values):
    if not values:
        return "no samples"
    return "p50 %7.1f  p99 %7.1f  max %7.1f ms (n=%d)" % (
        statistics.median(values) * 1000, percentile(values, 0.99) * 1000, max(values) * 1000, len(values))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20, help="faults injected (at least 20 for the record)")
    parser.add_argument("--interval", type=float, default=2.0, help="the agent's periodic interval, s")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measurement")
    parser.add_argument("--smoke", action="store_true", help="4 faults, 2 s idle: that it runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.faults, args.idle, args.interval = 4, 2.0, 1.0
    work = tempfile.mkdtemp(prefix="gpufleet-detect-")
    api = FakeKubeAPI()
    api.requests = StampedList()
    api.add_node(NAME)
    api.start()
    pynvml.set_scenario(SCENARIO)
    writer = None
    try:
        root, state, scontrol, fifo = setup(work, args.interval)
        writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        config = {"node_name": NAME, "state_dir": state, "interval": args.interval,
                  "node_validate": {"root": root, "gpu": {"expected_count": 8, "expected_driver_version": "580",
                                                          "xid_source": "var/log/kern.log"},
                                    "rdma": {"expected_devices": 9, "min_rate_gbps": 200}},
                  "hysteresis": {"recover_after": 1},
                  "kubernetes": {"enabled": True, "server": api.url, "token_file": os.path.join(work, "token"),
                                 "allow_plain_http": True},
                  "slurm": {"enabled": True, "scontrol": scontrol},
                  "events": {"kmsg": fifo, "nvml": True, "min_gap": 1}}
        with open(os.path.join(work, "token"), "w") as out:
            out.write(api.token)
        path = os.path.join(work, "agent.json")
        with open(path, "w") as out:
            json.dump(config, out)
        sources = agent_events.EventSources(config["events"], state, args.interval, binding_loader=lambda: pynvml)
        waiter = Waiter()
        loop = agent_daemon.Loop(lambda: run_once(path, events=sources.counters()), args.interval, waiter,
                                 notify=lambda message: None, log=lambda line: None, events=sources)
        with open(os.devnull, "w") as quiet:  # run_once's journal lines
            real_stdout, sys.stdout = sys.stdout, quiet
            thread = threading.Thread(target=loop.run, daemon=True)
            thread.start()
            try:
                results = run_faults(args, root, state, work, api, writer, loop)
                idle = idle_cpu(args.idle, loop)
            finally:
                waiter.stop()
                thread.join(30)
                sources.close()
            try:
                quiet_idle = idle_threads(args.idle, path, state, fifo)
            finally:
                sys.stdout = real_stdout
        report(args, results, idle, sources, loop, quiet_idle)
    finally:
        if writer is not None:
            os.close(writer)
        api.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def healthy_now(state):
    try:
        with open(os.path.join(state, "health.json")) as handle:
            return json.load(handle)["agent"]["healthy"]
    except (OSError, ValueError, KeyError):
        return None


def condition_patches(api, status):
    return [r for r in api.recorded("PATCH") if r["path"].endswith("/status")
            and '"status": "%s"' % status in json.dumps(r.get("body"))]


def drains(work, what):
    try:
        with open(os.path.join(work, "scontrol-calls")) as handle:
            return [float(line.split()[0]) for line in handle if what in line]
    except OSError:
        return []


def wait_for(test, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = test()
        if value:
            return value
        time.sleep(0.002)
    raise SystemExit("bench: nothing happened within %g s" % limit)


def inject(kind, root, writer):
    """Inject the fault; returns its wall-clock time."""
    if kind == "gpu-lost":
        at = time.time()
        pynvml._STATE["scenario"]["errors"] = {"nvmlDeviceGetUUID": {"0": "GPU_IS_LOST"}}
        return at
    line = OFF_BUS_LINE if kind == "off-bus" else XID_LINE
    with open(os.path.join(root, "var", "log", "kern.log"), "a") as log:
        log.write(kern_line(line))
    at = time.time()
    if kind == "nvml-event":
        pynvml.inject_event(0, 79)
    else:
        os.write(writer, ("3,%d,%d,-;%s\n" % (int(at * 1000) % 10 ** 9, int(at * 1e6) % 10 ** 12, line)).encode())
    return at


def clear(root):
    pynvml._STATE["scenario"].pop("errors", None)
    open(os.path.join(root, "var", "log", "kern.log"), "w").close()


def run_faults(args, root, state, work, api, writer, loop):
    wait_for(lambda: healthy_now(state) is True, 60)
    results = dict((kind, {"health": [], "patch": [], "drain": []}) for kind in KINDS)
    limit = 10 * args.interval + 30
    for number in range(args.faults):
        kind = KINDS[number % len(KINDS)]
        patches, drained = len(condition_patches(api, "False")), len(drains(work, "State=DRAIN"))
        at = inject(kind, root, writer)
        wait_for(lambda: healthy_now(state) is False, limit)
        results[kind]["health"].append(time.time() - at)  # polled: within 2 ms
        patch = wait_for(lambda seen=patches: condition_patches(api, "False")[seen:], limit)
        results[kind]["patch"].append(patch[0]["at"] - at)
        drain = wait_for(lambda seen=drained: drains(work, "State=DRAIN")[seen:], limit)
        results[kind]["drain"].append(drain[0] - at)
        clear(root)
        wait_for(lambda: healthy_now(state) is True, limit)
        time.sleep(1.1)  # past min_gap after the recovery cycle: the next fault is not held back by it
    return results


def idle_cpu(seconds, loop):
    """(CPU s of the process over ``seconds`` with no fault, cycles run meanwhile)."""
    cycles, cpu = loop.cycles, time.process_time()
    time.sleep(seconds)
    return time.process_time() - cpu, loop.cycles - cycles


def thread_cpu(native_id):
    """CPU seconds of one thread of this process so far (the scheduler's ns figure, not clock ticks)."""
    with open("/proc/self/task/%d/schedstat" % native_id) as handle:
        return int(handle.read().split()[0]) / 1e9


def idle_threads(seconds, path, state, fifo):
    """The agent alone, idle: a fresh EventSources + Loop at the default interval (60 s) after its
    first cycle, both event sources on (the kmsg FIFO, no line written; the NVML watcher); the CPU of
    its own threads (the loop, which select()s on the kernel log, and the NVML watcher) over ``seconds``, read
    per thread from /proc/self/task/<tid>/schedstat, so the API double's server thread and this
    bench's polling are not counted. Returns (CPU s of the agent's threads, cycles meanwhile, wake-ups
    of the NVML watcher meanwhile)."""
    sources = agent_events.EventSources({"kmsg": fifo, "nvml": True, "min_gap": 1}, state, 60,
                                        binding_loader=lambda: pynvml)
    waiter = Waiter()
    loop = agent_daemon.Loop(lambda: run_once(path, events=sources.counters()), 60.0, waiter,
                             notify=lambda message: None, log=lambda line: None, events=sources)
    thread = threading.Thread(target=loop.run, name="agent-loop", daemon=True)
    thread.start()
    try:
        wait_for(lambda: loop.cycles >= 1, 120)
        time.sleep(0.5)  # the watcher restarted after the first cycle
        ours = [t for t in threading.enumerate() if t.name in ("agent-loop", "nvml-events")]
        watcher = sources.nvml
        waits = watcher.waits if watcher is not None else 0
        cycles = loop.cycles
        before = sum(thread_cpu(t.native_id) for t in ours)
        time.sleep(seconds)
        after = sum(thread_cpu(t.native_id) for t in ours if t.is_alive())
        if loop.cycles != cycles or any(not t.is_alive() for t in ours):
            raise SystemExit("bench: the idle window had a cycle or lost a thread; measure again")
        return after - before, loop.cycles - cycles, (watcher.waits - waits) if watcher is not None else 0
    finally:
        waiter.stop()
        thread.join(30)
        sources.close()


def report(args, results, idle, sources, loop, quiet_idle):
    print("detect latency: %d faults, periodic interval %g s, events min_gap 1 s, kmsg FIFO stand-in, fake NVML, "
          "API double, scontrol stand-in (%s)" % (args.faults, args.interval, "smoke" if args.smoke else "full"))
    print("  events: kmsg: %s; nvml: %s" % (sources.status["kmsg"], sources.status["nvml"]))
    for stage, label in (("health", "(a) health.json unhealthy"), ("patch", "(b) condition PATCH received"),
                         ("drain", "(c) drain command issued")):
        for kind in KINDS:
            print("  %-30s %-11s %s" % (label, kind, figures(results[kind][stage])))
        events = [v for kind in KINDS[:3] for v in results[kind][stage]]
        print("  %-30s %-11s %s" % (label, "all events", figures(events)))
    cpu, cycles = idle
    with open(os.path.join(sources.state_dir, "health.json")) as handle:
        cycle_ms = json.load(handle)["agent"]["cpu_ms"]
    per_hour = cpu * 3600.0 / args.idle
    print("  idle (no fault) over %g s: %.3f s CPU, %d cycle(s) at interval %g s -> %.1f s CPU per hour" % (
        args.idle, cpu, cycles, args.interval, per_hour))
    wakeups = max(0.0, cpu - cycles * cycle_ms / 1000.0) * 3600.0 / args.idle
    print("  idle CPU per hour: wake-ups alone %.1f s; with a cycle every 60 s (%.1f ms CPU each) %.1f s" % (
        wakeups, cycle_ms, wakeups + 60 * cycle_ms / 1000.0))
    print("  cycles run %d, of which %d event-triggered" % (loop.cycles, loop.triggered))
    cpu, _cycles, waits = quiet_idle
    print("  agent threads alone, idle at interval 60 s (loop + NVML watcher, per-thread schedstat) over %g s: "
          "%.4f s CPU, %d watcher wake-ups -> %.2f s CPU per hour; with a cycle a minute (%.1f ms CPU each) %.2f s" % (
              args.idle, cpu, waits, cpu * 3600.0 / args.idle, cycle_ms, cpu * 3600.0 / args.idle + 60 * cycle_ms / 1000.0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
