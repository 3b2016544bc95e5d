#!/usr/bin/env python3
"""From a fault to isolation: latency of the resident node health agent (daemon mode) with its
event sources (issue 31) and its fast signals (issue 46; docs/contracts.md, "Node health agent",
events and signals), every fault class, with the fast signals off (today's periodic-only path for
what announces nothing) and on, side by side.

In one process: the agent's Loop (agent_daemon.Loop, run_once per cycle, agent_events.EventSources,
agent_daemon.signal_sources) in a thread over a copy of the DGX H100 fixture tree (plus an installed
``nvidia-fabricmanager.service`` and its cgroup ``cgroup.events``), the fake NVML double
(tests/fake_nvml, h100-healthy), the in-process Kubernetes API double (tests/fake_kube_api: PATCH
times recorded as they arrive) and a Slurm stand-in (an ``scontrol`` shell script that logs the time
of each ``update``). Stand-ins, not kernel sources: the kernel log is a FIFO written in the
/dev/kmsg record format; the netlink (NETLINK_ROUTE, RTMGRP_LINK) and uevent sockets are
``socketpair(AF_UNIX, SOCK_DGRAM)`` ends fed with messages in the kernel's layout
(agent_netlink.build_link_message / build_uevent); sysfs and cgroup files are fixture files the
bench rewrites; NVML is the fake double. Faults, in turn:

* ``xid``: a fatal XID line (Xid 79) written to the kmsg FIFO and to the tree's var/log/kern.log;
* ``off-bus``: a "GPU has fallen off the bus" line, the same way;
* ``nvml-event``: an NVML critical-XID event (fake ``inject_event``) and the kern.log line;
* ``gpu-lost``: silent GPU loss: GPU 0 answers NVML_ERROR_GPU_IS_LOST to every query, with no event
  and no kernel line (gpu.lost, immediate);
* ``port-down``: mlx5_0 port 1 ``state`` DOWN / ``phys_state`` Disabled in sysfs, and an RTM_NEWLINK
  of its netdev ibp26s0 with operstate down (rdma.port.state, fail_after 3);
* ``link-down``: link downgrade: mlx5_1 port 1 ``rate`` retrains from 400 to 100 Gb/sec
  (rdma.port.rate below min_rate_gbps 200, fail_after 3);
* ``ecc-jump``: counter jump: GPU 2's volatile uncorrected ECC count goes from 0 to 1, with the
  NVML double-bit ECC event the driver raises for it (gpu.ecc.volatile_uncorrectable, immediate);
* ``fm-stop``: the fabric manager stops: its cgroup says ``populated 0`` (agent.fabricmanager,
  fail_after 3).

Measured from the write (or injection) to (d) the check failing in health.json's checks (the
first failing observation), (a) health.json ``agent.healthy`` false (after hysteresis; both polled
every 2 ms), (b) the GpufleetHealthy=False PATCH received by the API double, (c) the drain command
issued (the stand-in's clock). After each fault the fault is removed and the node recovers before
the next, which comes ``min_gap`` + 0.1 s plus a random part (uniform, seeded) of a probe
interval later: the fault lands at any phase of the probe, not always at the same one. Printed
per mode: p50 / p99 / max per fault kind; and the agent's CPU seconds per hour with no fault: the
figure of record is the agent's own threads alone (a fresh loop at the default 60 s interval,
event sources and fast signals on, probe every 1 s, each thread's CPU from
/proc/self/task/<tid>/schedstat) plus a cycle a minute (health.json's agent.cpu_ms); and the
fast probe's CPU per probe (and per quick probe of the ports, the fabric manager's cgroup and the
GPUs' NVML query, every ``fast_probe_interval / 2``) on the DGX tree with the fake NVML.

    nice -n 10 .venv/bin/python bench/detect_latency.py [--faults 5] [--interval 2] [--idle 20] [--mode both]
    .venv/bin/python bench/detect_latency.py --smoke   # one fault per kind, signals on: that it runs (bench/smoke.py)
"""

import argparse
import json
import os
import random
import select
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests", "fake_nvml"), os.path.join(REPO, "tests")]

import pynvml  # noqa: E402  (the fake double: tests/fake_nvml first on the path)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon, agent_events  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_heldfiles  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_netlink, agent_signals  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import run_once  # noqa: E402
from fake_kube_api.server import FakeKubeAPI  # noqa: E402

NODE = os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100")
SCENARIO = os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")
NAME = "dgx-h100"
KINDS = ("xid", "off-bus", "nvml-event", "gpu-lost", "port-down", "link-down", "ecc-jump", "fm-stop")
EVENT_KINDS = KINDS[:3]  # announced by the kernel log or NVML events, with or without fast signals
SMOKE_KINDS = ("xid", "gpu-lost", "port-down")  # --smoke: that each path runs (bench/smoke.py's time budget)
CHECK = {"xid": "gpu.xid", "off-bus": "gpu.xid", "nvml-event": "gpu.xid", "gpu-lost": "gpu.lost",
         "port-down": "rdma.port.state", "link-down": "rdma.port.rate", "ecc-jump": "gpu.ecc.volatile_uncorrectable",
         "fm-stop": "agent.fabricmanager"}
UNIT = "nvidia-fabricmanager.service"
PORT = ("mlx5_0", "ibp26s0")
RATE = "mlx5_1"
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


class FdCloser(object):
    def __init__(self, fd):
        self.fd = fd

    def close(self):
        os.close(self.fd)


def kern_line(message):
    return "%s kernel: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), message)


def setup(work, interval):
    """The node tree (copied once per ``work``: runs share it, each fault is cleared), a fresh state
    directory, the scontrol stand-in and the kmsg FIFO."""
    root = os.path.join(work, "node")
    fresh = not os.path.isdir(root)
    if fresh:
        shutil.copytree(NODE, root, symlinks=True)
    os.makedirs(os.path.join(root, "var", "log"), exist_ok=True)
    open(os.path.join(root, "var", "log", "kern.log"), "w").close()
    state = tempfile.mkdtemp(prefix="state-", dir=work)
    scontrol = os.path.join(work, "scontrol")
    with open(scontrol, "w") as out:
        out.write(SCONTROL)
    os.chmod(scontrol, 0o755)
    fifo = os.path.join(state, "kmsg")
    os.mkfifo(fifo)
    if fresh:
        os.makedirs(os.path.join(root, "lib", "systemd", "system"))
        with open(os.path.join(root, "lib", "systemd", "system", UNIT), "w") as out:
            out.write("[Service]\nExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n")
        os.makedirs(os.path.join(root, "sys", "fs", "cgroup", "system.slice", UNIT))
    set_fm(root, True)
    return root, state, scontrol, fifo


def set_fm(root, running):
    with open(os.path.join(root, "sys", "fs", "cgroup", "system.slice", UNIT, "cgroup.events"), "w") as out:
        out.write("populated %d\nfrozen 0\n" % (1 if running else 0))


def port_file(root, device, name):
    return os.path.join(root, "sys", "class", "infiniband", device, "ports", "1", name)


def write(path, text):
    with open(path, "w") as out:
        out.write(text)


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
    parser.add_argument("--faults", type=int, default=5,
                        help="faults injected per kind (at least 5 for the record; 0: idle CPU only)")
    parser.add_argument("--interval", type=float, default=2.0, help="the agent's periodic interval, s")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measurement")
    parser.add_argument("--mode", choices=("both", "on", "off"), default="both",
                        help="fast signals off (periodic only for what announces nothing), on, or both")
    parser.add_argument("--smoke", action="store_true", help="one fault per kind, signals on, short idle: that it runs")
    parser.add_argument("--probe", type=float, default=1.0, help="signals.fast_probe_interval, s (default 1)")
    parser.add_argument("--kinds", default=None, dest="only_kinds",
                        help="comma-separated fault kinds to inject (default all: %s)" % ",".join(KINDS))
    args = parser.parse_args(argv)
    args.min_gap = 1.0
    if args.smoke:
        args.faults, args.idle, args.interval, args.mode = 1, 1.0, 1.0, "on"
        args.min_gap, args.probe = 0.1, 0.1
    args.kinds = SMOKE_KINDS if args.smoke else KINDS
    if args.only_kinds:
        args.kinds = tuple(kind.strip() for kind in args.only_kinds.split(","))
        unknown = [kind for kind in args.kinds if kind not in KINDS]
        if unknown:
            parser.error("unknown fault kind(s): %s (known: %s)" % (", ".join(unknown), ", ".join(KINDS)))
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.mode]
    runs = {}
    work = tempfile.mkdtemp(prefix="gpufleet-detect-")
    with open(os.devnull, "w") as quiet:  # run_once's journal lines
        real_stdout, sys.stdout = sys.stdout, quiet
        try:
            for signals_on in modes:
                runs[signals_on] = run_mode(args, signals_on, work)
            probe_us = probe_cost(200 if args.smoke else 3000, os.path.join(work, "node"))
            quiet_idle = dict((signals_on, idle_threads(args.idle, work, signals_on, args.probe))
                              for signals_on in modes)
        finally:
            sys.stdout = real_stdout
            shutil.rmtree(work, ignore_errors=True)
    report(args, runs, probe_us, quiet_idle)
    return 0


def agent_config(args, work, root, state, scontrol, fifo, api, signals_on, interval=None):
    config = {"node_name": NAME, "state_dir": state, "interval": interval or args.interval,
              "node_validate": {"root": root, "gpu": {"expected_count": 8, "expected_driver_version": "580",
                                                      "xid_source": "var/log/kern.log"},
                                "rdma": {"expected_devices": 9, "min_rate_gbps": 200}},
              "hysteresis": {"recover_after": 1},
              "events": {"kmsg": fifo, "nvml": True, "min_gap": args.min_gap},
              "signals": {"netlink": signals_on, "uevent": signals_on,
                          "fast_probe_interval": args.probe if signals_on else 0,
                          "fabricmanager_unit": UNIT}}
    if api is not None:
        config.update({"kubernetes": {"enabled": True, "server": api.url, "token_file": os.path.join(work, "token"),
                                      "allow_plain_http": True},
                       "slurm": {"enabled": True, "scontrol": scontrol}})
    path = os.path.join(work, "agent.json")
    with open(path, "w") as out:
        json.dump(config, out)
    return path


def start_loop(path, state, interval, fifo_events, loop_name="agent-loop"):
    """(loop, waiter, thread, event sources, signal sources, stand-in socket ends) of a fresh agent."""
    with open(path) as handle:
        config = json.load(handle)
    sources = agent_events.EventSources(config["events"], state, interval, binding_loader=lambda: pynvml)
    route, route_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    uevent, uevent_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    fast = agent_daemon.signal_sources(path, log=lambda line: None, binding_loader=lambda: pynvml,
                                       sockets={"netlink": route, "uevent": uevent})
    if fast is None:
        route.close()
        uevent.close()

    def counters():
        found = sources.counters()
        if fast is not None:
            found.update(fast.counters())
        return found

    waiter = Waiter()
    loop = agent_daemon.Loop(lambda: run_once(path, events=counters()), interval, waiter,
                             notify=lambda message: None, log=lambda line: None, events=sources, signals=fast,
                             run_targeted=lambda what: run_once(path, events=counters(), only=what))
    thread = threading.Thread(target=loop.run, name=loop_name, daemon=True)
    thread.start()
    return loop, waiter, thread, sources, fast, (route_in, uevent_in)


def stop_loop(waiter, thread, sources, fast, ends):
    waiter.stop()
    thread.join(30)
    sources.close()
    if fast is not None:
        fast.close()
    for end in ends:
        end.close()


def run_mode(args, signals_on, work):
    """{kind: {stage: [seconds]}} and the loop's counters, the fast signals on or off."""
    api = FakeKubeAPI()
    api.requests = StampedList()
    api.add_node(NAME)
    api.start()
    pynvml.set_scenario(SCENARIO)
    writer = None
    try:
        root, state, scontrol, fifo = setup(work, args.interval)
        writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        with open(os.path.join(work, "token"), "w") as out:
            out.write(api.token)
        path = agent_config(args, work, root, state, scontrol, fifo, api, signals_on)
        loop, waiter, thread, sources, fast, ends = start_loop(path, state, args.interval, True)
        try:
            results = run_faults(args, root, state, work, api, writer, ends[0] if fast is not None else None)
            with open(os.path.join(state, "health.json")) as handle:
                events = json.load(handle)["agent"].get("events") or {}
        finally:
            stop_loop(waiter, thread, sources, fast, ends)
        return {"results": results, "cycles": loop.cycles, "triggered": loop.triggered, "targeted": loop.targeted,
                "confirmed": loop.confirmed, "events": events}
    finally:
        if writer is not None:
            os.close(writer)
        api.stop()
        clear(os.path.join(work, "node"), None)


def health(state):
    try:
        with open(os.path.join(state, "health.json")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def healthy_now(state):
    doc = health(state)
    try:
        return doc["agent"]["healthy"]
    except (TypeError, KeyError):
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


def inject(kind, root, writer, route_in):
    """Inject the fault; returns its wall-clock time."""
    device = pynvml._STATE["devices"]
    if kind == "gpu-lost":
        at = time.time()
        device[0]["errors"] = {"*": "GPU_IS_LOST"}
        return at
    if kind == "ecc-jump":
        at = time.time()
        device[2]["ecc"] = dict(device[2]["ecc"], volatile_uncorrected=1)
        # the driver raises a double-bit ECC event for the volatile counter's increment (NVML API
        # reference, Event Types); a GPU without ECC events would leave it to the fast probe
        pynvml.inject_event(2, 0, pynvml.nvmlEventTypeDoubleBitEccError)
        return at
    if kind == "port-down":
        at = time.time()
        write(port_file(root, PORT[0], "state"), "1: DOWN\n")
        write(port_file(root, PORT[0], "phys_state"), "3: Disabled\n")
        if route_in is not None:
            route_in.send(agent_netlink.build_link_message(PORT[1], index=7, flags=agent_netlink.IFF_UP, operstate=2))
        return at
    if kind == "link-down":
        at = time.time()
        write(port_file(root, RATE, "rate"), "100 Gb/sec (1X NDR)\n")
        return at
    if kind == "fm-stop":
        at = time.time()
        set_fm(root, False)
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


def clear(root, route_in):
    for device in pynvml._STATE["devices"]:
        device.pop("errors", None)
        device["ecc"] = dict(device["ecc"], volatile_uncorrected=0)
    open(os.path.join(root, "var", "log", "kern.log"), "w").close()
    write(port_file(root, PORT[0], "state"), "4: ACTIVE\n")
    write(port_file(root, PORT[0], "phys_state"), "5: LinkUp\n")
    write(port_file(root, RATE, "rate"), "400 Gb/sec (4X NDR)\n")
    set_fm(root, True)
    if route_in is not None:
        route_in.send(agent_netlink.build_link_message(PORT[1], index=7))


def failing_in_checks(state, check_id):
    doc = health(state)
    return bool(doc) and any(c.get("id") == check_id and c.get("status") == "fail" for c in doc.get("checks", []))


def run_faults(args, root, state, work, api, writer, route_in):
    wait_for(lambda: healthy_now(state) is True, 60)
    results = dict((kind, {"check": [], "health": [], "patch": [], "drain": []}) for kind in KINDS)
    limit = 10 * args.interval + 30
    phase = random.Random(46)  # the same phases in every run
    for number in range(args.faults * len(args.kinds)):
        kind = args.kinds[number % len(args.kinds)]
        patches, drained = len(condition_patches(api, "False")), len(drains(work, "State=DRAIN"))
        at = inject(kind, root, writer, route_in)
        seen = None
        end = time.monotonic() + limit
        while healthy_now(state) is not False:
            if seen is None and failing_in_checks(state, CHECK[kind]):
                seen = time.time()
            if time.monotonic() > end:
                raise SystemExit("bench: %s not unhealthy within %g s" % (kind, limit))
            time.sleep(0.002)
        now = time.time()
        results[kind]["check"].append((seen or now) - at)  # polled: within 2 ms
        results[kind]["health"].append(now - at)
        patch = wait_for(lambda seen=patches: condition_patches(api, "False")[seen:], limit)
        results[kind]["patch"].append(patch[0]["at"] - at)
        drain = wait_for(lambda seen=drained: drains(work, "State=DRAIN")[seen:], limit)
        results[kind]["drain"].append(drain[0] - at)
        clear(root, route_in)
        wait_for(lambda: healthy_now(state) is True, limit)
        # past min_gap after the recovery cycle (the next fault is not held back by it), then a random
        # part of a probe interval: the recovery was seen by a probe, and a fault a fixed time after
        # it would come at the same phase of the probe every time (a bias, not a latency)
        time.sleep(args.min_gap + 0.1 + phase.uniform(0, args.probe))
    return results


def thread_cpu(native_id):
    """CPU seconds of one thread of this process so far (the scheduler's ns figure, not clock ticks)."""
    with open("/proc/self/task/%d/schedstat" % native_id) as handle:
        return int(handle.read().split()[0]) / 1e9


def probe_cost(count, root):
    """CPU microseconds of one fast probe (agent_signals.FastProbe.poll) over the DGX H100 tree with
    the fake NVML (8 GPUs, 9 HCAs, the fabric manager's cgroup), median of 5 runs of ``count``."""
    pynvml.set_scenario(SCENARIO)
    probe = agent_signals.FastProbe(root, UNIT, pynvml)
    probe.hold_nvml()
    probe.poll()
    figures_ = []
    for quick in (False, True):  # the full probe, then the quick one (the ports and the unit)
        runs = []
        for _run in range(5):
            cpu = time.process_time()
            for _probe in range(count):
                probe.poll(quick=quick)
            runs.append((time.process_time() - cpu) / count * 1e6)
        figures_.append(statistics.median(runs))
    probe.release_nvml()
    probe.files.close()
    return figures_[0], len(probe.last), figures_[1]


def sysfs_read_cost(count=2000):
    """(us per read opened by path, us per read of a held descriptor, files) over this machine's
    own sysfs attributes (/sys/class/net/*/{operstate,mtu,carrier}: what a real node's probe reads
    is the same kernfs), or None without them: read_small against HeldFiles (check_inode False,
    the probe's mode under root /)."""
    import glob

    paths = sorted(glob.glob("/sys/class/net/*/operstate") + glob.glob("/sys/class/net/*/mtu"))[:36]
    if not paths:
        return None
    held = agent_heldfiles.HeldFiles(check_inode=False)
    figures_ = []
    for read in (agent_netlink.read_small, held.read):
        best = None
        for _run in range(5):
            cpu = time.process_time()
            for _round in range(count):
                for path in paths:
                    read(path, 64)
            spent = (time.process_time() - cpu) / count / len(paths) * 1e6
            best = spent if best is None else min(best, spent)
        figures_.append(best)
    held.close()
    return figures_[0], figures_[1], len(paths)


def idle_threads(seconds, work, signals_on=True, probe=1.0):
    """The agent alone, idle: a fresh loop at the default interval (60 s) after its first cycle, the
    event sources (the kmsg FIFO, no line written; the NVML watcher) and the fast signals (the two
    stand-in sockets, the probe every 1 s) on; the CPU of its own threads (the loop, which select()s
    and probes, and the NVML watcher) over ``seconds``, read per thread from
    /proc/self/task/<tid>/schedstat. Returns (CPU s, cycles meanwhile, watcher wake-ups, probes, cycle ms)."""
    pynvml.set_scenario(SCENARIO)
    root, state, scontrol, fifo = setup(work, 60)
    args = argparse.Namespace(interval=60.0, min_gap=1.0, probe=probe)
    path = agent_config(args, work, root, state, scontrol, fifo, None, signals_on)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # the kernel log stays open, silent
    loop, waiter, thread, sources, fast, ends = start_loop(path, state, 60.0, True)
    ends += (FdCloser(writer),)
    try:
        wait_for(lambda: loop.cycles >= 1, 120)
        time.sleep(0.5)  # the watcher restarted after the first cycle
        ours = [t for t in threading.enumerate() if t.name in ("agent-loop", "nvml-events")]
        watcher = sources.nvml
        waits = watcher.waits if watcher is not None else 0
        cycles, probes = loop.cycles, fast.probe.runs if fast is not None else 0
        before = sum(thread_cpu(t.native_id) for t in ours)
        time.sleep(seconds)
        after = sum(thread_cpu(t.native_id) for t in ours if t.is_alive())
        if loop.cycles != cycles or any(not t.is_alive() for t in ours):
            raise SystemExit("bench: the idle window had a cycle or lost a thread; measure again")
        with open(os.path.join(state, "health.json")) as handle:
            cycle_ms = json.load(handle)["agent"]["cpu_ms"]
        return (after - before, loop.cycles - cycles, (watcher.waits - waits) if watcher is not None else 0,
                (fast.probe.runs - probes) if fast is not None else 0, cycle_ms)
    finally:
        stop_loop(waiter, thread, sources, fast, ends)


def report(args, runs, probe_us, quiet_idle):
    print("detect latency: %d fault(s) per kind, periodic interval %g s, min_gap %g s, fast probe every %g s; "
          "stand-ins: kmsg FIFO, netlink/uevent socketpairs (kernel layout), fixture sysfs/cgroup files, fake NVML, "
          "API double, scontrol stand-in (%s)" % (args.faults, args.interval, args.min_gap, args.probe,
                                                  "smoke" if args.smoke else "full"))
    stages = (("check", "(d) check failing in health.json"), ("health", "(a) health.json unhealthy"),
              ("patch", "(b) condition PATCH received"), ("drain", "(c) drain command issued"))
    for signals_on in sorted(runs):
        run = runs[signals_on]
        results = run["results"]
        print(" fast signals %s: cycles %d, of which %d event-triggered, %d targeted (signals; %d for a "
              "confirmation reading; %s confirmation readings)" % (
                  "on" if signals_on else "off (periodic only for what announces nothing)", run["cycles"],
                  run["triggered"], run["targeted"], run["confirmed"], run["events"].get("probe_confirms", "-")))
        events = run["events"]
        print("  sources: kmsg: %s; nvml: %s; netlink: %s; uevent: %s; probe: %s" % tuple(
            events.get(k, "-") for k in ("kmsg", "nvml", "netlink", "uevent", "probe")))
        for stage, label in stages:
            for kind in args.kinds:
                print("  %-34s %-11s %s" % (label, kind, figures(results[kind][stage])))
            every = [v for kind in EVENT_KINDS for v in results[kind][stage]]
            print("  %-34s %-11s %s" % (label, "all events", figures(every)))
            rest = [v for kind in KINDS[3:] for v in results[kind][stage]]
            print("  %-34s %-11s %s" % (label, "all others", figures(rest)))
    us, observations, quick_us = probe_us
    quicks = agent_signals.QUICK_DIVISOR - 1 if args.probe / agent_signals.QUICK_DIVISOR >= agent_signals.CONFIRM_MIN \
        else 0
    print("  fast probe: %.1f us CPU per probe (%d observations: 8 GPUs NVML + PCI, 9 HCAs PCI, RDMA ports, "
          "fabric manager cgroup), %.1f us per quick probe (RDMA ports, fabric manager cgroup, GPUs NVML; %d between two "
          "probes) -> %.2f s CPU per hour at one probe every %g s, in a tight loop" % (
              us, observations, quick_us, quicks, (us + quicks * quick_us) * 3600 / 1e6 / args.probe, args.probe))
    cost = sysfs_read_cost(200 if args.smoke else 2000)
    if cost is not None:
        print("  this machine's sysfs (%d attributes): %.2f us per read opened by path, %.2f us per pread of a held "
              "descriptor (the probe under root /)" % (cost[2], cost[0], cost[1]))
    for signals_on in sorted(quiet_idle):
        cpu, cycles, waits, probes, cycle_ms = quiet_idle[signals_on]
        per_hour = cpu * 3600.0 / args.idle
        print("  idle CPU per hour: wake-ups alone %.2f s, fast signals %s (agent threads: loop%s + NVML watcher, "
              "per-thread schedstat, interval 60 s, %d probes, %d watcher wake-ups over %g s, %d cycle(s)); with a "
              "cycle a minute (%.1f ms CPU each) %.2f s" % (
                  per_hour, "on" if signals_on else "off", " + probe" if signals_on else "", probes, waits, args.idle,
                  cycles, cycle_ms, per_hour + 60 * cycle_ms / 1000.0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
