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

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_config import (
    AGENT_NAME, DEFAULT_INTERVAL, AgentError, load_config, say)
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_cycle import run_once


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

    def wait(self, timeout):
        """Sleep ``timeout`` seconds; True at once when a stop signal came (before or during)."""
        end = self.clock() + timeout
        while not self.received:
            left = end - self.clock()
            if left <= 0:
                return False
            if self._select([self._read], [], [], left)[0]:
                os.read(self._read, 512)
        return True

    def close(self):
        for name, handler in self._old.items():
            self._signal.signal(getattr(self._signal, name), handler)
        self._signal.set_wakeup_fd(self._old_fd)
        os.close(self._read)
        os.close(self._write)


class Loop(object):
    """The resident agent: ``run_cycle()`` (returns a status line) every ``interval`` seconds on a
    monotonic schedule: cycle k starts at start + k * interval whatever the cycles take (no drift),
    never two at once (one thread; a cycle longer than the interval makes the next start at the
    next slot of the schedule, the slots missed are journalled, none is run late in a burst).
    An exception of a cycle is journalled and the loop goes on (the last good result stays on
    disk). systemd (Type=notify) hears READY=1 after the first cycle (health.json is written
    when ``systemctl start`` returns), WATCHDOG=1 and the status after every cycle, STOPPING=1 at
    the end. ``wait(seconds)`` sleeps and returns True to stop (StopSignals.wait)."""

    def __init__(self, run_cycle, interval, wait, clock=time.monotonic, notify=sd_notify, log=None):
        self.run_cycle = run_cycle
        self.interval = float(interval)
        self.wait = wait
        self.clock = clock
        self.notify = notify
        self.log = log or say
        self.cycles = 0
        self.skipped = 0

    def run(self, max_cycles=None):
        """Cycles until ``wait`` says stop (or ``max_cycles``); returns the number of cycles run."""
        slot = self.clock()
        while max_cycles is None or self.cycles < max_cycles:
            try:
                status = self.run_cycle()
            except Exception as exc:  # run_once reports its own problems; anything else lands here
                import traceback

                self.log("%s: cycle failed, last good result kept: %r\n%s" % (AGENT_NAME, exc, traceback.format_exc()))
                status = "last cycle failed (journal), last good result kept"
            self.cycles += 1
            status = " ".join(str(status).split())  # one line: systemd reads KEY=VALUE lines
            self.notify("%sWATCHDOG=1\nSTATUS=%s" % ("READY=1\n" if self.cycles == 1 else "", status))
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
            if self.wait(slot - now):
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


def resident(path, interval=None, max_cycles=None):
    """``--loop``: the resident agent until SIGTERM (systemd's stop) or SIGINT; returns 0."""
    signals = StopSignals()
    try:
        loop = Loop(lambda: run_once(path), loop_interval(path, interval), signals.wait)
        say("%s: resident, a cycle every %g s (%s)" % (AGENT_NAME, loop.interval, path))
        loop.run(max_cycles)
    finally:
        signals.close()
    say("%s: stopped after %d cycle(s)" % (AGENT_NAME, loop.cycles))
    return 0
