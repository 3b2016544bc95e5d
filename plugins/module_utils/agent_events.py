# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Event sources that wake the resident agent between two periodic cycles (docs/contracts.md,
"Node health agent", events): kernel messages as they are written (``/dev/kmsg``) and NVML
critical-XID events. Both are optional: one that cannot be opened leaves the agent polling every
interval, and says so (``status``, written to health.json's ``agent.events``).

- ``KmsgWatcher(path)``: ``fileno()`` for select(), ``drain()`` -> the relevant records read since
  the last call (an NVRM Xid line, a GPU fallen off the bus). /dev/kmsg returns one record per
  read (``prio,seq,usec,flags;message`` then continuation lines starting with a space, see the
  kernel's Documentation/ABI/testing/dev-kmsg); a pipe or FIFO written in that format (tests)
  returns any number of bytes: both are read the same way, by lines. Opened at the end of the
  buffer (SEEK_END) unless resuming after a sequence number (a restart: records up to it are not
  counted again). EPIPE on read means records were overwritten before being read: counted, and
  reading goes on. Bounded work per drain: at most ``max_reads`` reads, at most ``max_kept``
  relevant lines kept (the rest counted as dropped), partial lines cut at ``MAX_LINE`` bytes.
- ``NvmlEventWatcher(binding)``: a thread waiting on ``nvmlEventSetWait_v2`` for
  ``nvmlEventTypeXidCriticalError`` on every GPU, writing one byte to a pipe per event so one
  select() waits on the kernel log, the NVML events and the stop signals.

Lowest agent layer but one: imports agent_config (constants) and state_files (the writer of the
stored sequence number) only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.state_files import atomic_write

DEFAULT_KMSG = "/dev/kmsg"
DEFAULT_MIN_GAP = 1.0  # seconds between two event-triggered cycles
SEQ_FILE = "kmsg-seq.json"
MAX_LINE = 8192  # bytes of one kernel record kept (the kernel's own limit is about 1 KiB)
READ_SIZE = 8192  # /dev/kmsg: a read smaller than the record fails with EINVAL
RELEVANT = re.compile(r"NVRM: Xid|fallen off the bus", re.IGNORECASE)


def relevant(message):
    """True for a kernel message that triggers a cycle at once (an XID, a GPU off the bus)."""
    return bool(RELEVANT.search(message))


def parse_record(line):
    """(seq or None, message) of one /dev/kmsg line; a line without the header is its own message."""
    header, sep, message = line.partition(";")
    if sep:
        fields = header.split(",")
        if len(fields) >= 3:
            try:
                return int(fields[1]), message
            except ValueError:
                pass
    return None, line


def read_seq(state_dir):
    """The last kmsg sequence number stored in ``state_dir`` (None: none or unreadable)."""
    try:
        with open(os.path.join(state_dir, SEQ_FILE)) as handle:
            value = json.load(handle).get("seq")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def write_seq(state_dir, seq):
    atomic_write(os.path.join(state_dir, SEQ_FILE), json.dumps({"seq": seq}))


class KmsgWatcher(object):
    """The kernel log as it is written; OSError from the constructor when it cannot be opened."""

    def __init__(self, path=DEFAULT_KMSG, resume_after=None, max_kept=100, max_reads=20000):
        self.path = path
        self.resume_after = resume_after
        self.max_kept = max_kept
        self.max_reads = max_reads
        self.last_seq = resume_after
        self.dropped = 0  # relevant lines beyond max_kept in one drain
        self.overwritten = 0  # EPIPE: records lost before being read
        self.skipped = 0  # records at or before resume_after (already counted before a restart)
        self.records = 0
        self._partial = b""
        self.ended = False
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if resume_after is None:
            try:
                os.lseek(self.fd, 0, os.SEEK_END)
            except OSError:  # a pipe or FIFO (tests): nothing to skip
                pass

    def fileno(self):
        return self.fd

    def status(self):
        return "watching %s" % self.path

    def drain(self):
        """The relevant messages readable now (at most ``max_kept``; more are counted in
        ``dropped``). Never blocks; reads at most ``max_reads`` times (a flood is finished by the
        next drain: the descriptor stays readable)."""
        kept = []
        for _read in range(self.max_reads):
            try:
                data = os.read(self.fd, READ_SIZE)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote records we had not read
                    self.overwritten += 1
                    continue
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                raise
            if not data:  # a pipe whose writer closed (tests); /dev/kmsg never ends
                self.ended = True
                break
            self._lines(data, kept)
        return kept

    def _lines(self, data, kept):
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()[:MAX_LINE]
        for raw in lines:
            if raw[:1] in (b" ", b"\t"):  # a continuation line (KEY=value) of the previous record
                continue
            seq, message = parse_record(raw[:MAX_LINE].decode("utf-8", "replace"))
            if seq is not None:
                if self.resume_after is not None and seq <= self.resume_after:
                    self.skipped += 1
                    continue
                self.last_seq = seq
            self.records += 1
            if relevant(message):
                if len(kept) < self.max_kept:
                    kept.append(message)
                else:
                    self.dropped += 1

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class NvmlEventWatcher(object):
    """Critical-XID events of every GPU, from a thread that writes a byte to a pipe per event.
    ``binding`` is the NVML module (pynvml); RuntimeError from ``start`` names what is missing
    (an old binding without nvmlEventSetWait_v2, no GPU registering the event type)."""

    def __init__(self, binding, wait_ms=300, max_kept=100):
        self.nvml = binding
        self.wait_ms = wait_ms
        self.max_kept = max_kept
        self.events = []  # (gpu index, xid), guarded by the GIL's list.append/pop atomicity
        self.dropped = 0
        self.registered = 0
        self.waits = 0  # nvmlEventSetWait_v2 calls returned (bench/detect_latency.py counts wake-ups)
        self._stop = False
        self._thread = None
        self._set = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self):
        return self._read

    def status(self):
        return "watching critical XID events of %d GPU(s)" % self.registered

    def start(self):
        nvml = self.nvml
        for name in ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
                     "nvmlEventTypeXidCriticalError"):
            if not hasattr(nvml, name):
                raise RuntimeError("the NVML binding has no %s" % name)
        nvml.nvmlInit()  # the watcher's own reference: each cycle's init/shutdown pair is separate
        try:
            self._set = nvml.nvmlEventSetCreate()
            problems = []
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
                    self.registered += 1
                except nvml.NVMLError as exc:
                    problems.append("GPU %d: %s" % (index, exc))
            if not self.registered:
                raise RuntimeError("no GPU registers critical XID events (%s)" % ("; ".join(problems) or "no GPU"))
        except Exception as exc:
            self._free()
            if isinstance(exc, RuntimeError):
                raise
            raise RuntimeError("NVML events: %s" % exc)
        import threading

        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        nvml = self.nvml
        while not self._stop:
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, self.wait_ms)
                self.waits += 1
            except nvml.NVMLError as exc:
                self.waits += 1
                if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_TIMEOUT", 10):
                    continue
                if self._stop:
                    break
                self.events.append((None, "error: %s" % exc))  # wakes the loop: the cycle looks
                self._poke()
                break
            self._keep(data)
            # An event means a cycle follows, and the cycle stops this watcher (pause): the thread
            # takes what else is queued without waiting (at most max_kept more), and ends, so that stop does not wait for a
            # wait_ms timeout. The cycle's resume starts a new watcher.
            for _more in range(self.max_kept):  # bounded: a storm of events is one cycle
                try:
                    self._keep(nvml.nvmlEventSetWait_v2(self._set, 0))
                except nvml.NVMLError:
                    break
            self._poke()
            break

    def _keep(self, data):
        if len(self.events) < self.max_kept:
            try:
                index = self.nvml.nvmlDeviceGetIndex(data.device)
            except Exception:
                index = getattr(data.device, "index", None)
            self.events.append((index, int(data.eventData)))
        else:
            self.dropped += 1

    def _poke(self):
        try:
            os.write(self._write, b"x")
        except OSError:  # the pipe is full: the loop has a wake-up pending anyway
            pass

    def drain(self):
        """[(gpu index, xid)] since the last call."""
        try:
            while os.read(self._read, 4096):
                pass
        except OSError:
            pass
        taken, self.events = self.events, []
        return ["NVML critical XID event: GPU %s, Xid %s" % (index, xid) for index, xid in taken]

    def _free(self):
        if self._set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._set)
            except Exception:
                pass
            self._set = None
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass

    def close(self):
        self._stop = True
        if self._thread is not None:
            self._thread.join(self.wait_ms / 1000.0 + 1.0)
            self._thread = None
            self._free()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


def load_binding():
    """The NVML binding the checks use (nvidia-ml-py, imported as pynvml)."""
    import pynvml

    return pynvml


class EventSources(object):
    """The watchers the configuration asks for (``events: {kmsg, nvml, min_gap}``), each optional:
    one that cannot start is reported in ``status`` and the agent polls. ``fds()`` for select(),
    ``drain()`` -> the relevant lines of every source (reading the readable ones only)."""

    def __init__(self, settings, state_dir, interval, binding_loader=load_binding):
        self.settings = settings
        self.state_dir = state_dir
        self.min_gap = settings.get("min_gap", DEFAULT_MIN_GAP)
        self.watchers = []
        self.status = {}
        self.stored_seq = None
        self.polling = polling = "polling every %g s" % interval
        kmsg = settings.get("kmsg", DEFAULT_KMSG)
        if kmsg:
            self.stored_seq = read_seq(state_dir)
            try:
                self.kmsg = KmsgWatcher(kmsg, resume_after=self.stored_seq)
                self.watchers.append(self.kmsg)
                self.status["kmsg"] = self.kmsg.status() + (
                    " (resumed after record %d)" % self.stored_seq if self.stored_seq is not None else "")
            except OSError as exc:
                self.kmsg = None
                self.status["kmsg"] = "unavailable: %s: %s, %s" % (kmsg, exc.strerror or exc, polling)
        else:
            self.kmsg = None
            self.status["kmsg"] = "off (events.kmsg), %s" % polling
        self.nvml = self._binding = None
        if settings.get("nvml", True):
            try:
                self._binding = binding_loader()
            except Exception as exc:  # no binding
                self.status["nvml"] = "unavailable: %s, %s" % (exc, polling)
            else:
                self._start_nvml()
        else:
            self.nvml = None
            self.status["nvml"] = "off (events.nvml), %s" % polling

    def _start_nvml(self):
        try:
            self.nvml = NvmlEventWatcher(self._binding).start()
            self.watchers.append(self.nvml)
            self.status["nvml"] = self.nvml.status()
        except Exception as exc:  # no library, an old binding, no GPU
            self.nvml = self._binding = None  # not tried again: polling
            self.status["nvml"] = "unavailable: %s, %s" % (exc, self.polling)

    def pause(self):
        """Before a cycle: the NVML watcher lets NVML go (its events are covered by the cycle), so
        the cycle's nvmlInit after a full shutdown enumerates the GPUs again, as without events."""
        if self.nvml is not None:
            self.nvml.drain()
            self.nvml.close()
            self.watchers.remove(self.nvml)
            self.nvml = None

    def resume(self):
        """After a cycle: the NVML watcher again (when it worked before)."""
        if self._binding is not None and self.nvml is None:
            self._start_nvml()

    def fds(self):
        return [watcher.fileno() for watcher in self.watchers]

    def drain(self, readable=None):
        """Relevant lines of the sources whose fd is in ``readable`` (all when None)."""
        lines = []
        for watcher in list(self.watchers):
            if readable is None or watcher.fileno() in readable:
                try:
                    lines.extend(watcher.drain())
                except OSError as exc:  # the kernel log stopped being readable: polling from now on
                    self.watchers.remove(watcher)
                    self.status["kmsg"] = "unavailable: read failed: %s, %s" % (exc.strerror or exc, self.polling)
                if getattr(watcher, "ended", False):  # a pipe whose writer closed (tests)
                    self.watchers.remove(watcher)
                    self.status["kmsg"] = "unavailable: %s ended, %s" % (watcher.path, self.polling)
        return lines

    def counters(self):
        """Counters for health.json (agent.events)."""
        result = dict(self.status)
        if self.kmsg is not None:
            result.update({"kmsg_records": self.kmsg.records, "kmsg_dropped": self.kmsg.dropped,
                           "kmsg_overwritten": self.kmsg.overwritten, "kmsg_last_seq": self.kmsg.last_seq})
        if self.nvml is not None:
            result["nvml_dropped"] = self.nvml.dropped
        return result

    def save(self):
        """Store the kmsg sequence number read so far (a restart resumes after it); only when it
        changed. A failed write is returned as a message, never raised."""
        if self.kmsg is None or self.kmsg.last_seq is None or self.kmsg.last_seq == self.stored_seq:
            return None
        try:
            write_seq(self.state_dir, self.kmsg.last_seq)
            self.stored_seq = self.kmsg.last_seq
        except OSError as exc:
            return "kmsg sequence number not stored: %s" % (exc.strerror or exc)
        return None

    def close(self):
        for watcher in self.watchers:
            watcher.close()
        self.watchers = []
