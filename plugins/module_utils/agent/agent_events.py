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
  buffer (SEEK_END) on a first start, from the start of the buffer (the kernel's first available
  record) when nothing of this boot is known to be seen, or resuming after a sequence number (a
  restart in the same boot: records up to it are not counted again). EPIPE on read means records
  were overwritten before being read: counted, and reading goes on. Bounded work per drain: at
  most ``max_reads`` reads, at most ``max_kept`` relevant lines kept (the rest counted as
  dropped), partial lines cut at ``MAX_LINE`` bytes.
- The stored sequence number (``kmsg-seq.json``, ``{"seq", "boot_id"}``) is kernel state: it
  holds only for the boot that numbered it (``/proc/sys/kernel/random/boot_id``; the kernel
  numbers records from 0 again at each boot). ``resume_point``: a stored number from another
  boot, without a boot id, or unreadable (set aside) suppresses nothing (this boot's log is read
  from its start); one from this boot that lies beyond the kernel's newest record suppresses
  nothing either (the records held back while reading up to it are released).
- ``NvmlEventWatcher(binding)``: a thread waiting on ``nvmlEventSetWait_v2`` for
  ``nvmlEventTypeXidCriticalError`` and ``nvmlEventTypeDoubleBitEccError`` on every GPU (the types
  each supports), writing one byte to a pipe per wake-up so one select() waits on the kernel log,
  the NVML events and the stop signals. It runs through the cycles (no event is lost while one
  runs); ``EventSources.refresh`` replaces it after a full cycle only when it ended or left a GPU
  unregistered.

Imports records (the strict reader of the stored sequence number) and state_files (its writer,
and the set-aside of a damaged one) only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re
import threading
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write, read_record

DEFAULT_KMSG = "/dev/kmsg"
DEFAULT_MIN_GAP = 1.0  # seconds between two event-triggered cycles
SEQ_FILE = "kmsg-seq.json"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
MAX_SEQ = 2 ** 64 - 1  # the kernel's sequence numbers are u64
BOOT_ID_RE = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MAX_LINE = 8192  # bytes of one kernel record kept (the kernel's own limit is about 1 KiB)
READ_SIZE = 8192  # /dev/kmsg: a read smaller than the record fails with EINVAL
RELEVANT = re.compile(r"NVRM: Xid|fallen off the bus", re.IGNORECASE)
# The NVML event types watched (nvml.h, "Event Types", NVML API reference R535 and later): a critical
# XID, and a double-bit (uncorrectable) ECC error, whose event the driver raises for the volatile
# counter gpu.ecc.volatile_uncorrectable reads; each GPU registers those it supports.
EVENT_TYPES = (("nvmlEventTypeXidCriticalError", "critical XID"), ("nvmlEventTypeDoubleBitEccError", "double-bit ECC"))
# nvmlEventSetWait_v2's timeout: how long close() may wait for the thread (the agent's stop); the
# thread runs through the cycles, so the wait bounds nothing else. One wake-up a second idle.
WAIT_MS = 1000
# a replacement watcher whose wait fails with the error that ended the one before wakes nothing,
# unless it delivered an event or ran this long first (a GPU lost again after a recovery): one
# default interval
KNOWN_ERROR_HOLD = 60.0
# Every NVML watcher's ``events``, ``dropped`` and ``_successor``: a thread placing an event chooses its
# watcher (itself, or the newest of the successors it was handed over to, through any number of
# replacements) and appends under it, so a hand-over or a drain that takes the list meanwhile never
# leaves the event in a list nobody reads.
_EVENTS_LOCK = threading.Lock()


def relevant(message):
    """True for a kernel message that triggers a cycle at once (an XID, a GPU off the bus)."""
    return bool(RELEVANT.search(message))


def parse_record(line):
    """(seq or None, message) of one /dev/kmsg line; a line without the header is its own message."""
    header, sep, message = line.partition(";")
    if sep:
        fields = header.split(",")
        # the kernel's sequence is an unsigned decimal (kernel/printk/printk.c devkmsg_read:
        # "%u,%llu,%llu,%c;"): anything else is no sequence number (never stored, never compared)
        if len(fields) >= 3 and records.is_decimal(fields[1]) and int(fields[1]) <= MAX_SEQ:
            return int(fields[1]), message
    return None, line


def read_boot_id(path=None):
    """This boot's id (the kernel's random UUID, new at each boot; ``path`` default BOOT_ID), or
    None when unreadable."""
    try:
        path = BOOT_ID if path is None else path
        with open(path, "rb") as handle:
            text = handle.read(128).decode("ascii").strip().lower()
    except (OSError, UnicodeDecodeError):
        return None
    return text if BOOT_ID_RE.match(text) else None


def parse_seq(raw, record=SEQ_FILE):
    """kmsg-seq.json: ``{"seq": int, "boot_id": uuid or null}`` (``{"seq"}`` alone: written
    before boot ids were recorded). RecordError otherwise."""
    doc = records.mapping(records.load_json(raw, record, max_bytes=4096), record, required=("seq",),
                          allowed=("seq", "boot_id"))
    records.integer(doc["seq"], record, "seq", 0, MAX_SEQ)
    boot = doc.get("boot_id")
    if boot is not None and not BOOT_ID_RE.match(records.string(boot, record, "boot_id", 36)):
        raise records.RecordError(record, "not a boot id: %r" % (boot,), "boot_id")
    return {"seq": doc["seq"], "boot_id": boot}


def read_seq(state_dir, now=None):
    """(stored {"seq", "boot_id"} or None, problem or None): None when there is none; an
    unreadable file is set aside and ``problem`` names it."""
    return read_record(os.path.join(state_dir, SEQ_FILE), parse_seq, now, 4096)


def resume_point(stored, problem, boot_id):
    """(resume_after, from_start, note) of the kernel log for a restart: ``stored``/``problem``
    from read_seq, ``boot_id`` this boot's (None: unknown). Only a number stored in this boot is
    resumed after; anything else reads this boot's log from its start (nothing is "seen")."""
    if problem:
        return None, True, "%s: this boot's log read from its start" % problem
    if stored is None:
        return None, False, ""
    seq, boot = stored["seq"], stored["boot_id"]
    if boot is None or boot_id is None:
        return None, True, "stored record %d has no %s boot id: this boot's log read from its start" % (
            seq, "known" if boot is None else "current")
    if boot != boot_id:
        return None, True, "stored record %d is from another boot (%s): this boot's log read from its start" % (seq, boot)
    return seq, False, "resumed after record %d" % seq


def write_seq(state_dir, seq, boot_id=None):
    atomic_write(os.path.join(state_dir, SEQ_FILE), json.dumps({"seq": seq, "boot_id": boot_id}))


class KmsgWatcher(object):
    """The kernel log as it is written; OSError from the constructor when it cannot be opened."""

    def __init__(self, path=DEFAULT_KMSG, resume_after=None, max_kept=100, max_reads=20000, from_start=False):
        self.path = path
        self.resume_after = resume_after
        self.max_kept = max_kept
        self.max_reads = max_reads
        self.last_seq = resume_after
        self.dropped = 0  # relevant lines beyond max_kept in one drain
        self.overwritten = 0  # EPIPE: records lost before being read
        self.skipped = 0  # records at or before resume_after (already counted before a restart)
        self.records = 0
        self.note = None  # why records held back were released (the stored number was not this log's)
        # Records at or before resume_after are held back (counted, relevant lines kept) until the
        # log reaches resume_after: then they were seen before the restart. A log whose newest
        # record is older than resume_after (a drain that ends first) did not number them: released.
        self._confirming = resume_after is not None
        self._held = 0
        self._held_lines = []
        self._held_relevant = 0
        self._held_last = None
        self._partial = b""
        self.ended = False
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if resume_after is None and not from_start:
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
        else:
            return kept  # max_reads reached: more to read, nothing to conclude yet
        if self._confirming and self._held:  # the newest record is older than the stored number
            self._release(kept)
        return kept

    def _confirm(self):
        """The log reached the stored number: what was held back was seen before the restart."""
        self.skipped += self._held
        self._held, self._held_lines, self._held_relevant, self._confirming = 0, [], 0, False

    def _release(self, kept):
        """The log ends before the stored number: it did not number what we stored (the ring
        was not ours, or the file is wrong); what was held back is news."""
        self.note = ("stored record %d is beyond the kernel's newest record %d: %d record(s) not skipped"
                     % (self.resume_after, self._held_last, self._held))
        self.records += self._held
        self.dropped += self._held_relevant - len(self._held_lines)
        for message in self._held_lines:
            if len(kept) < self.max_kept:
                kept.append(message)
            else:
                self.dropped += 1
        self.last_seq = self._held_last
        self.resume_after = None
        self._held, self._held_lines, self._held_relevant, self._confirming = 0, [], 0, False

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
                    if not self._confirming:
                        self.skipped += 1
                    elif seq == self.resume_after:
                        self._confirm()
                        self.skipped += 1
                    else:
                        self._held += 1
                        self._held_last = seq
                        if relevant(message):
                            self._held_relevant += 1
                            self._held_lines.append(message)
                            del self._held_lines[:-self.max_kept]  # the newest kept: bounded
                    continue
                if self._confirming:  # the log goes on past the stored number: it is this boot's
                    self._confirm()
                # the highest number read is what is stored: a smaller one (a garbled record) never
                # moves it back, so a restart never counts records twice
                self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
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
    """Critical-XID and double-bit ECC events of every GPU, from a thread that writes a byte to a
    pipe per wake-up. ``binding`` is the NVML module (pynvml); RuntimeError from ``start`` names
    what is missing (an old binding without nvmlEventSetWait_v2, no GPU registering the event
    types).

    The thread runs from ``start`` to ``close``, through the cycles (an event while a cycle runs is
    queued in the event set and wakes the loop after it: none is lost for a cycle). It holds its own
    NVML initialisation meanwhile. Each GPU registers the types of ``EVENT_TYPES`` it supports
    (``nvmlDeviceGetSupportedEventTypes``: ``nvmlDeviceRegisterEvents`` refuses a mask with one it
    does not, NOT_SUPPORTED; double-bit ECC events only where ECC is on). An error of the wait other
    than its timeout (GPU_IS_LOST, ...) wakes the loop once and ends the thread: ``healthy`` is then
    False and ``EventSources.refresh`` starts a new watcher after the next full cycle, registered
    before this one stops (``hand_over``: no moment without a registered set). ``known_error``: the
    error that ended the watcher before; the same error wakes nothing (no storm while a GPU stays
    lost) unless this watcher delivered an event or ran ``KNOWN_ERROR_HOLD`` s first (lost again
    after a recovery)."""

    def __init__(self, binding, wait_ms=WAIT_MS, max_kept=100, known_error=None):
        self.nvml = binding
        self.wait_ms = wait_ms
        self.max_kept = max_kept
        self.events = []  # (gpu index, type name, data), under _EVENTS_LOCK
        self.dropped = 0
        self.registered = 0
        self.problems = []  # GPUs whose registration failed ("GPU 3: Not Supported")
        self.kinds = []  # the event type names registered on at least one GPU
        self.error = None  # the wait's error that ended the thread
        self.known_error = known_error  # the previous watcher's: the same error again wakes nothing
        self.waits = 0  # nvmlEventSetWait_v2 calls returned (bench/detect_latency.py counts wake-ups)
        self._stop = False
        self._thread = None
        self._set = None
        self._initialised = False
        self._abandoned = False  # close() did not wait for the thread: it lets go when its wait returns
        self._ended = False  # the thread has ended (set under _lock)
        self._fds_closed = False
        self._successor = None  # hand_over: the watcher this one's late events go to
        self._last_thread = None  # the thread, once close() has been called
        self._delivered = False  # an event delivered: an error after it is news
        self._started = None
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self):
        return self._read

    def status(self):
        return "watching %s events of %d GPU(s)" % (" and ".join(self.kinds) or "no", self.registered)

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    @property
    def healthy(self):
        """Running, with every GPU registered, and no error of the wait (the thread sets ``error``
        and wakes the loop before it ends: a refresh meanwhile still replaces it)."""
        return self.running and not self.problems and self.error is None

    def _mask(self, handle):
        """(the event type mask this GPU supports of EVENT_TYPES, their names)."""
        nvml = self.nvml
        wanted = [(getattr(nvml, name), label) for name, label in EVENT_TYPES if hasattr(nvml, name)]
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
        except Exception:  # an old binding, or the query refused: the critical XID type alone, as before
            wanted = wanted[:1]
            supported = wanted[0][0]
        mask, labels = 0, []
        for value, label in wanted:
            if supported & value:
                mask |= value
                labels.append(label)
        return mask, labels

    def start(self):
        nvml = self.nvml
        for name in ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", EVENT_TYPES[0][0]):
            if not hasattr(nvml, name):
                raise RuntimeError("the NVML binding has no %s" % name)
        nvml.nvmlInit()  # the watcher's own reference, held through the cycles
        self._initialised = True
        try:
            self._set = nvml.nvmlEventSetCreate()
            kinds = set()
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    mask, labels = self._mask(handle)
                    if not mask:
                        self.problems.append("GPU %d: none of the event types supported" % index)
                        continue
                    nvml.nvmlDeviceRegisterEvents(handle, mask, self._set)
                    kinds.update(labels)
                    self.registered += 1
                except Exception as exc:  # the binding's NVMLError, or anything else: this GPU only
                    self.problems.append("GPU %d: %s" % (index, exc))
            if not self.registered:
                raise RuntimeError("no GPU registers critical XID events (%s)" % ("; ".join(self.problems) or "no GPU"))
            self.kinds = [label for _name, label in EVENT_TYPES if label in kinds]
        except Exception as exc:
            self._free()
            if isinstance(exc, RuntimeError):
                raise
            raise RuntimeError("NVML events: %s" % exc)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        nvml = self.nvml
        timeout = getattr(nvml, "NVML_ERROR_TIMEOUT", 10)
        try:
            while not self._stop:
                try:
                    data = nvml.nvmlEventSetWait_v2(self._set, self.wait_ms)
                    self.waits += 1
                except Exception as exc:  # the binding's NVMLError, or anything else it raises
                    self.waits += 1
                    if getattr(exc, "value", None) == timeout and isinstance(exc, nvml.NVMLError):
                        continue
                    if self._stop:
                        break
                    self.error = "%s" % (exc,) or type(exc).__name__
                    news = self.error != self.known_error or self._delivered or \
                        time.monotonic() - self._started >= KNOWN_ERROR_HOLD
                    if news:  # the same error right after a replacement: no new wake-up (no storm)
                        with _EVENTS_LOCK:
                            self.events.append((None, "error", self.error))  # wakes the loop: the cycle looks
                        self._poke()
                    break
                self._keep(data)
                for _more in range(self.max_kept):  # what else is queued, without waiting: one wake-up
                    try:
                        self._keep(nvml.nvmlEventSetWait_v2(self._set, 0))
                    except Exception:  # TIMEOUT: nothing more queued (an error: the next wait says it)
                        break
                self._newest()._poke()
        finally:
            with self._lock:
                self._ended = True
                if not self._stop or self._abandoned:  # ended by an error, or close() gave up waiting
                    self._free()
                if self._abandoned:
                    self._close_fds()

    def _keep(self, data):
        """An event kept (any event wakes a cycle: its fields only name it, read as given). Replaced:
        kept by the newest successor, under its bound (an event that came after it registered is in its own
        set too: twice, one cycle; one from before is in this set alone). Where it goes is chosen
        when it is placed (_EVENTS_LOCK): a hand-over meanwhile sends it to the successor."""
        self._delivered = True
        try:
            index = int(self.nvml.nvmlDeviceGetIndex(data.device))
        except Exception:
            index = getattr(getattr(data, "device", None), "index", None)
        kind, detail = "critical XID", getattr(data, "eventData", None)
        if getattr(data, "eventType", None) == getattr(self.nvml, EVENT_TYPES[1][0], None):
            kind = "double-bit ECC"
        if not isinstance(detail, int) or isinstance(detail, bool):
            detail = "?"
        event = (index if isinstance(index, int) else "?", kind, detail)
        with _EVENTS_LOCK:
            target = self._newest()
            if len(target.events) >= target.max_kept:
                target.dropped += 1
            else:
                target.events.append(event)

    def _newest(self):
        """This watcher, or the newest one it was replaced by (its successor's successor ...)."""
        newest = self
        while newest._successor is not None:
            newest = newest._successor
        return newest

    def _poke(self):
        with self._lock:
            if self._fds_closed:
                return
            try:
                os.write(self._write, b"x")
            except OSError:  # the pipe is full: the loop has a wake-up pending anyway
                pass

    def hand_over(self, successor):
        """Replaced by ``successor`` (started, so registered): what this one kept, and any event its
        thread still takes, goes to it; this one stops without waiting."""
        with _EVENTS_LOCK:
            self._successor = successor
            kept, self.events = self.events, []
            successor.events[:0] = kept
        if kept:
            successor._poke()
        self.close(wait=False)

    def drain(self):
        """The events since the last call, one line each."""
        try:
            while os.read(self._read, 4096):
                pass
        except OSError:
            pass
        with _EVENTS_LOCK:
            taken, self.events = self.events, []
        lines = []
        for index, kind, data in taken:
            if kind == "error":
                lines.append("NVML events: %s" % data)
            elif kind == "critical XID":
                lines.append("NVML critical XID event: GPU %s, Xid %s" % (index, data))
            else:
                lines.append("NVML double-bit ECC event: GPU %s" % index)
        return lines

    def _free(self):
        if self._set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._set)
            except Exception:
                pass
            self._set = None
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass

    def _close_fds(self):
        if not self._fds_closed:
            self._fds_closed = True
            for fd in (self._read, self._write):
                try:
                    os.close(fd)
                except OSError:
                    pass

    @property
    def waiting(self):
        """A thread still in its last wait (replaced or closed without waiting)."""
        thread = self._last_thread
        return thread is not None and thread.is_alive()

    def finish(self):
        """Wait (at most the wait plus 1 s) for a thread left in its last wait: it lets go then."""
        thread = self._last_thread
        if thread is not None:
            thread.join(self.wait_ms / 1000.0 + 1.0)

    def close(self, wait=True):
        """Stop: with ``wait``, the thread's end is waited for at most its wait plus 1 s (the agent's
        stop). The set, the NVML reference and the pipe are let go once the thread has ended, never
        under a thread still in a wait: a thread still waiting (no ``wait``, or a wait that hangs past
        its timeout) lets them go itself when its wait returns."""
        self._stop = True
        thread = self._thread
        if thread is not None:
            self._last_thread = thread
        if thread is not None and wait:
            thread.join(self.wait_ms / 1000.0 + 1.0)
        with self._lock:
            self._thread = None
            if thread is not None and not self._ended:
                self._abandoned = True
                return
            self._free()
            self._close_fds()


def load_binding():
    """The NVML binding the checks use (nvidia-ml-py, imported as pynvml)."""
    import pynvml

    return pynvml


class EventSources(object):
    """The watchers the configuration asks for (``events: {kmsg, nvml, min_gap}``), each optional:
    one that cannot start is reported in ``status`` and the agent polls. ``fds()`` for select(),
    ``drain()`` -> the relevant lines of every source (reading the readable ones only)."""

    def __init__(self, settings, state_dir, interval, binding_loader=load_binding, boot_id_path=None):
        self.settings = settings
        self.state_dir = state_dir
        self.min_gap = settings.get("min_gap", DEFAULT_MIN_GAP)
        self.watchers = []
        self.retired = []  # replaced NVML watchers whose thread may still sit in a wait
        self.status = {}
        self.stored = None  # (seq, boot id) in kmsg-seq.json
        self.boot_id = read_boot_id(BOOT_ID if boot_id_path is None else boot_id_path)
        self.polling = polling = "polling every %g s" % interval
        kmsg = settings.get("kmsg", DEFAULT_KMSG)
        if kmsg:
            stored, problem = read_seq(state_dir)
            if stored is not None:
                self.stored = (stored["seq"], stored["boot_id"])
            resume_after, from_start, note = resume_point(stored, problem, self.boot_id)
            try:
                self.kmsg = KmsgWatcher(kmsg, resume_after=resume_after, from_start=from_start)
                self.watchers.append(self.kmsg)
                self.status["kmsg"] = self.kmsg.status() + (" (%s)" % note if note else "")
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

    def refresh(self):
        """After a full cycle: a new NVML watcher when the last one ended (an error of its wait)
        or left a GPU unregistered (a GPU lost at its start is registered once it answers again),
        tried after each full cycle while that lasts. The new one is registered before the old one
        stops (``hand_over``): no moment without a registered set. A new one that cannot start
        leaves a running old one in place; a healthy one is left alone (its events are never
        interrupted by a cycle)."""
        old = self.nvml
        if self._binding is None or (old is not None and old.healthy):
            return
        known = old.error if old is not None else None
        try:
            new = NvmlEventWatcher(self._binding, known_error=known).start()
        except Exception as exc:
            if old is not None and old.running:
                return  # the old one still watches the GPUs it registered
            if old is not None:
                self.watchers.remove(old)
                old.close()
                self.nvml = None
            self.status["nvml"] = "unavailable: %s%s, %s" % (
                exc, " (after: %s)" % known if known else "", self.polling)
            return
        if old is not None:
            self.watchers.remove(old)
            self.retired = [w for w in self.retired if w.waiting] + ([old] if old.running else [])
            old.hand_over(new)
        self.nvml = new
        self.watchers.append(new)
        self.status["nvml"] = new.status()

    def fds(self):
        return [watcher.fileno() for watcher in self.watchers]

    def drain(self, readable=None):
        """Relevant lines of the sources whose fd is in ``readable`` (all when None)."""
        lines = []
        for watcher in list(self.watchers):
            if readable is None or watcher.fileno() in readable:
                try:
                    lines.extend(watcher.drain())
                    if getattr(watcher, "note", None):  # the stored number was not this log's: said so
                        self.status["kmsg"] = "%s (%s)" % (watcher.status(), watcher.note)
                        watcher.note = None
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

    @property
    def stored_seq(self):
        return None if self.stored is None else self.stored[0]

    def save(self):
        """Store the kmsg sequence number read so far with this boot's id (a restart in the same
        boot resumes after it); only when either changed. A failed write is returned as a
        message, never raised."""
        if self.kmsg is None or self.kmsg.last_seq is None or (self.kmsg.last_seq, self.boot_id) == self.stored:
            return None
        try:
            write_seq(self.state_dir, self.kmsg.last_seq, self.boot_id)
            self.stored = (self.kmsg.last_seq, self.boot_id)
        except OSError as exc:
            return "kmsg sequence number not stored: %s" % (exc.strerror or exc)
        return None

    def close(self):
        """Every watcher stopped; replaced NVML watchers still in a wait are waited for (bounded),
        so the agent's stop lets NVML go."""
        for watcher in self.watchers:
            watcher.close()
        self.watchers = []
        for watcher in self.retired:
            watcher.finish()
        self.retired = []
