# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The resident agent (``--loop``, a ``Type=notify`` service): the schedule, systemd notification
and stop signals. Time inside is monotonic: a wall-clock step (NTP, a TZ or DST change) neither
skips nor bunches cycles.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import (
    AGENT_NAME, DEFAULT_INTERVAL, AgentError, load_config, say)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_cycle import (
    FULL_CYCLE_NEEDED, run_once, touches_nvml)


def sd_notify(message, environ=None):
    """Send ``message`` (``READY=1``, ``WATCHDOG=1``, ``STATUS=...``, newline-separated) to systemd
    over ``$NOTIFY_SOCKET`` (the sd_notify(3) datagram, with the stdlib socket module: no libsystemd
    binding needed). False when not run by a ``Type=notify`` service or when the send fails."""
    address = (os.environ if environ is None else environ).get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    import socket

    if address[0] == "@":  # abstract namespace
        address = "\0" + address[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.connect(address)
        sock.sendall(message.encode("utf-8"))
        return True
    except OSError:
        return False
    finally:
        sock.close()


class StopSignals(object):
    """SIGTERM and SIGINT end the resident agent between two cycles: the handler only records the
    signal (a cycle in progress finishes and writes its result), ``wait`` sleeps until a deadline or
    the signal (``signal.set_wakeup_fd`` wakes its ``select``: no race with a signal that arrives
    just before the sleep). ``close`` restores the previous handlers."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self, clock=time.monotonic):
        import select
        import signal

        self._select = select.select
        self._signal = signal
        self.clock = clock
        self.received = []
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write)
        self._old = dict((name, signal.signal(getattr(signal, name), self._handler)) for name in self.SIGNALS)

    def _handler(self, signum, frame):
        self.received.append(signum)

    def wait(self, timeout, fds=()):
        """Sleep ``timeout`` seconds; True at once when a stop signal came (before or during).
        With ``fds`` (the event sources' descriptors): False as soon as one is readable too."""
        end = self.clock() + timeout
        while not self.received:
            left = end - self.clock()
            if left <= 0:
                return False
            readable = self._select([self._read] + list(fds), [], [], left)[0]
            if self._read in readable:
                os.read(self._read, 512)
            if len(readable) > (self._read in readable) and not self.received:
                return False
        return True

    def close(self):
        for name, handler in self._old.items():
            self._signal.signal(getattr(self._signal, name), handler)
        self._signal.set_wakeup_fd(self._old_fd)
        os.close(self._read)
        os.close(self._write)


def _readable(fds):
    """The set of ``fds`` readable now (select with no wait), or None when select refuses them
    (then every source is read, as before)."""
    if not fds:
        return None
    import select

    try:
        return set(select.select(fds, [], [], 0)[0])
    except (OSError, ValueError):
        return None


class Loop(object):
    """The resident agent: ``run_cycle()`` (returns a status line) every ``interval`` seconds on a
    monotonic schedule: cycle k starts at start + k * interval whatever the cycles take (no drift),
    never two at once (one thread; a cycle longer than the interval makes the next start at the
    next slot of the schedule, the slots missed are journalled, none is run late in a burst).
    An exception of a cycle is journalled and the loop goes on (the last good result stays on
    disk). systemd (Type=notify) hears READY=1 after the first cycle (health.json is written
    when ``systemctl start`` returns), WATCHDOG=1 and the status after every cycle, STOPPING=1 at
    the end. ``wait(seconds)`` sleeps and returns True to stop (StopSignals.wait).

    ``events`` (agent_events.EventSources, optional): ``wait(seconds, fds)`` also returns when a
    source is readable; what is readable is drained at once (bounded), and when a line or event
    matters one cycle runs now for all of them (a storm is one cycle), at least ``min_gap`` s after
    the previous event-triggered cycle's start. The periodic schedule is unchanged by event-triggered cycles.

    ``signals`` (agent_signals.SignalSources, optional) with ``run_targeted(plan)``: the loop also
    wakes for the fast probe (``signals.due()``) and the netlink/uevent sockets; the signals found
    run one targeted cycle (only the checks they concern, agent_signals.plan), under the same
    ``min_gap`` as the events; signals of the probe's confirmation readings alone
    (agent_signals.CONFIRM_PREFIX) wait ``signals.confirm`` after the previous one instead (those
    readings are bounded by the probe: ``fail_after`` measurements of a reading taken faster).
    The NVML event watcher runs through every cycle (an event during one wakes the loop after it);
    after a full cycle ``events.refresh()`` replaces a watcher that ended or left a GPU unregistered.
    The fast probe lets its NVML go for a cycle (``signals.pause()``) unless the cycle touches none
    (agent_cycle.touches_nvml: a targeted cycle of RDMA ports or the fabric manager alone)."""

    def __init__(self, run_cycle, interval, wait, clock=time.monotonic, notify=sd_notify, log=None, events=None,
                 signals=None, run_targeted=None):
        self.run_cycle = run_cycle
        self.signals = signals  # agent_signals.SignalSources: netlink, uevents, the fast probe
        self.run_targeted = run_targeted  # run_targeted(plan): a cycle of the checks a signal concerns
        self.targeted = 0  # targeted cycles run
        self.confirmed = 0  # of which for a confirmation reading of the probe
        self.interval = float(interval)
        self.wait = wait
        self.clock = clock
        self.notify = notify
        self.log = log or say
        self.cycles = 0
        self.skipped = 0
        self.events = events
        self.triggered = 0  # cycles run for an event
        self.started = None  # monotonic start of the last cycle
        self.max_cycles = None
        self.event_started = None  # monotonic start of the last event-triggered cycle

    def _cycle(self, plan=None):
        self.started = self.clock()
        let_go = touches_nvml(plan)  # a cycle of RDMA ports or the fabric manager alone: the probe keeps NVML
        if self.events is not None and plan is None:
            self.events.drain()  # what is readable now is covered by this cycle
        if self.signals is not None and let_go:
            self.signals.pause()
        try:
            status = self.run_targeted(plan) if plan is not None else self.run_cycle()
        except Exception as exc:  # run_once reports its own problems; anything else lands here
            import traceback

            self.log("%s: cycle failed, last good result kept: %r\n%s" % (AGENT_NAME, exc, traceback.format_exc()))
            status = "last cycle failed (journal), last good result kept"
        finally:
            if self.signals is not None and let_go:
                self.signals.resume()
            if self.events is not None and plan is None:
                self.events.refresh()  # a watcher that ended or left a GPU out: a new one
        if status == FULL_CYCLE_NEEDED:  # no last result to build on: a full cycle, NVML let go first
            return self._cycle()
        self.cycles += 1
        status = " ".join(str(status).split())  # one line: systemd reads KEY=VALUE lines
        self.notify("%sWATCHDOG=1\nSTATUS=%s" % ("READY=1\n" if self.cycles == 1 else "", status))
        if self.events is not None:
            problem = self.events.save()
            if problem:
                self.log("%s: %s" % (AGENT_NAME, problem))

    def _gap(self, min_gap=None):
        """Seconds still to wait before an event-triggered or targeted cycle (``min_gap``, or the
        one given: a confirmation's)."""
        if min_gap is None:
            min_gap = self.events.min_gap if self.events is not None else getattr(self.signals, "min_gap", 1.0)
        return (self.event_started + min_gap - self.clock()) if self.event_started is not None else 0

    def _sleep_until(self, slot):
        """Wait for the slot, running a cycle for each event that matters (a targeted one for a
        signal); True to stop."""
        while True:
            now = self.clock()
            fds = list(self.events.fds()) if self.events is not None else []
            until = slot
            if self.signals is not None:
                fds += self.signals.fds()
                until = min(slot, self.signals.due())
            if now >= slot:
                return False
            if self.wait(max(0.0, until - now), fds) if fds else self.wait(max(0.0, until - now)):
                return True
            if self.clock() >= slot or (not fds and self.signals is None):
                continue
            readable = _readable(fds)  # one select() instead of a failing read per source (idle CPU)
            lines = self.events.drain(readable) if self.events is not None else []
            if lines:
                gap = self._gap()
                if gap > 0:  # lines arriving meanwhile stay in the kernel's buffer: drained below
                    if self.wait(gap):
                        return True
                    lines += self.events.drain()
                more = " (+%d more)" % (len(lines) - 1) if len(lines) > 1 else ""
                self.log("%s: %d event(s), cycle now: %s%s" % (AGENT_NAME, len(lines), lines[0][:200], more))
                self.triggered += 1
                self.event_started = self.clock()
                self._cycle()
            elif self.signals is not None and self._signalled(readable):
                return True
            if self.max_cycles is not None and self.cycles >= self.max_cycles:
                return True

    def _signalled(self, readable=None):
        """Signals readable or due now: one targeted cycle for all of them; True to stop.
        ``readable``: the descriptors readable now (None: not known, every socket is read)."""
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_signals import CONFIRM_PREFIX, plan

        found = self.signals.poll(readable) if readable is not None else self.signals.poll()
        if not found:
            return False
        confirm = getattr(self.signals, "confirm", None)
        gap = self._gap(confirm if confirm and all(why.startswith(CONFIRM_PREFIX) for _key, why in found) else None)
        if gap > 0:  # announcements arriving meanwhile wait in their sockets: read below
            if self.wait(gap):
                return True
            found += self.signals.poll()
        what = plan(found)
        if what is None:
            return False
        take = getattr(self.signals, "take_credits", None)
        credits = take() if take is not None else None
        if credits:  # the probe's confirmed readings: the hysteresis counts them (agent_signals.credited)
            what["credit"] = credits
        more = " (+%d more)" % (len(what["why"]) - 1) if len(what["why"]) > 1 else ""
        self.log("%s: signal, checks of %s now: %s%s" % (
            AGENT_NAME, ", ".join(k if k != "rdma" else "rdma %s" % (what[k] if what[k] == "all" else " ".join(what[k]))
                                  for k in ("gpu", "rdma", "fabricmanager") if what[k]),
            what["why"][0][:200], more))
        self.targeted += 1
        if found[0][1].startswith(CONFIRM_PREFIX):
            self.confirmed += 1
        self.event_started = self.clock()
        self._cycle(what)
        return False

    def run(self, max_cycles=None):
        """Cycles until ``wait`` says stop (or ``max_cycles``); returns the number of cycles run."""
        self.max_cycles = max_cycles
        slot = self.clock()
        while max_cycles is None or self.cycles < max_cycles:
            self._cycle()
            if max_cycles is not None and self.cycles >= max_cycles:
                break
            slot += self.interval
            now = self.clock()
            if now >= slot:
                missed = int((now - slot) // self.interval) + 1
                slot += missed * self.interval
                self.skipped += missed
                self.log("%s: a cycle took longer than the interval (%g s): %d cycle(s) skipped"
                         % (AGENT_NAME, self.interval, missed))
            if self._sleep_until(slot):
                break
        self.notify("STOPPING=1")
        return self.cycles


def loop_interval(path, override=None):
    """Seconds between two cycles: ``--interval``, else the configuration's ``interval`` (the
    role writes node_health_agent_interval), else 60. An unreadable configuration gives 60 here:
    each cycle reports it."""
    value = override
    if value is None:
        try:
            value = load_config(path).get("interval", DEFAULT_INTERVAL)
        except AgentError:
            value = DEFAULT_INTERVAL
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = 0
    if not value > 0:
        say("%s: interval must be a number of seconds > 0, got %r: %g s" % (AGENT_NAME, value, DEFAULT_INTERVAL))
        value = DEFAULT_INTERVAL
    return value


def event_sources(path, interval, log=say):
    """The event sources the configuration asks for (agent_events.EventSources), or None: events
    off, or a configuration that cannot be read (each cycle reports it; the loop polls)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import (
        DEFAULT_STATE_DIR, add_python_path, events_settings)
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_events import EventSources

    try:
        config = load_config(path)
    except AgentError:
        return None
    settings, errors = events_settings(config)
    if errors:
        log("%s: events: %s; polling every %g s" % (AGENT_NAME, "; ".join(errors), interval))
        return None
    if not settings["kmsg"] and not settings["nvml"]:
        return None
    add_python_path(config)
    sources = EventSources(settings, config.get("state_dir") or DEFAULT_STATE_DIR, interval)
    for name in ("kmsg", "nvml"):
        log("%s: events: %s: %s" % (AGENT_NAME, name, sources.status[name]))
    return sources


def signal_sources(path, log=say, binding_loader=None, sockets=None):
    """The fast signals the configuration asks for (agent_signals.SignalSources), or None: all
    off, or a configuration that cannot be read (each cycle reports it)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import (
        add_python_path, events_settings, hysteresis_settings, node_params, signals_settings)
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_events import load_binding
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import thresholds
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_signals import (
        PORT_CHECKS, UNIT_CHECKS, SignalSources)

    try:
        config = load_config(path)
        root = node_params(config)["root"]
    except AgentError:
        return None
    settings, errors = signals_settings(config)
    if errors:
        log("%s: signals: %s; no fast signals" % (AGENT_NAME, "; ".join(errors)))
        return None
    if not (settings["netlink"] or settings["uevent"] or settings["fast_probe_interval"]):
        return None
    add_python_path(config)
    hysteresis = hysteresis_settings(config)[0] or {"fail_after": 3, "per_check": {}}
    # a bad reading persisting is signalled until a check with fail_after N has failed N times
    repeat = max([hysteresis["fail_after"]] + [v.get("fail_after", 1) for v in hysteresis["per_check"].values()]) - 1
    # the fail_after of the checks a port's and the fabric manager's confirmed reading count for (a
    # setting in error: the probe's own, repeat + 1; each cycle reports the error)
    hysteresis = dict({"immediate": (), "recover_after": 2}, **hysteresis)
    needs = dict((kind, [n for n in (thresholds(hysteresis, check)[0] for check in checks)
                         if isinstance(n, int) and not isinstance(n, bool) and n >= 1] or None)
                 for kind, checks in (("port", PORT_CHECKS), ("unit", UNIT_CHECKS)))
    gpu = (node_params(config).get("gpu") or {})
    sources = SignalSources(settings, root if isinstance(root, str) else "/", repeat=max(1, repeat),
                            binding_loader=None if gpu.get("enabled") is False else (binding_loader or load_binding),
                            sockets=sockets, needs=needs)
    events = events_settings(config)[0] or {}
    sources.min_gap = events.get("min_gap", 1.0)
    for name in ("netlink", "uevent", "probe"):
        log("%s: signals: %s: %s" % (AGENT_NAME, name, sources.status[name]))
    return sources


def resident(path, interval=None, max_cycles=None):
    """``--loop``: the resident agent until SIGTERM (systemd's stop) or SIGINT; returns 0."""
    signals = StopSignals()
    events = fast = None
    try:
        every = loop_interval(path, interval)
        say("%s: resident, a cycle every %g s (%s)" % (AGENT_NAME, every, path))
        events = event_sources(path, every)
        fast = signal_sources(path)

        def counters():
            found = events.counters() if events is not None else None
            if fast is not None:
                found = dict(found or {}, **fast.counters())
            return found

        loop = Loop(lambda: run_once(path, events=counters()), every, signals.wait, events=events, signals=fast,
                    run_targeted=lambda what: run_once(path, events=counters(), only=what))
        loop.run(max_cycles)
    finally:
        signals.close()
        if events is not None:
            events.close()
        if fast is not None:
            fast.close()
    say("%s: stopped after %d cycle(s)" % (AGENT_NAME, loop.cycles))
    return 0
