"""Event-driven detection of the resident agent (plugins/module_utils/agent/agent_events.py and
agent_daemon.Loop with event sources): kernel records from a /dev/kmsg stand-in (a FIFO written in
the dev-kmsg record format), NVML critical-XID events from the fake binding, a storm of lines as
one cycle, a bounded buffer, resuming after the stored sequence number, and polling (said so) when
a source cannot be used. Real time, but every wait is a fraction of a second."""

import errno
import json
import os
import threading
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_daemon, agent_events
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import config_errors, events_settings
from nvml_scenarios import fake_with

XID = "NVRM: Xid (PCI:0000:1b:00): 79, pid=0, name=?, GPU has fallen off the bus."
OFF_BUS = "NVRM: GPU 0000:db:00.0: GPU has fallen off the bus."
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"


def record(seq, message, prio=3):
    """One /dev/kmsg record: header, message, a continuation line (as the kernel adds)."""
    return ("%d,%d,%d,-;%s\n SUBSYSTEM=pci\n" % (prio, seq, seq * 1000, message)).encode()


class Kmsg(object):
    """A FIFO standing in for /dev/kmsg; the test writes records to it."""

    def __init__(self, tmp_path):
        self.path = str(tmp_path / "kmsg")
        os.mkfifo(self.path)
        # a reader of a FIFO without writer sees end of file: open our end first, read-write
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.seq = 0

    def write(self, *messages):
        data = b""
        for message in messages:
            self.seq += 1
            data += record(self.seq, message)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:  # the FIFO is full: the agent has not read yet
                time.sleep(0.001)

    def close(self):
        os.close(self.fd)


@pytest.fixture
def kmsg(tmp_path):
    stand_in = Kmsg(tmp_path)
    yield stand_in
    stand_in.close()


def test_relevant_records_are_returned_and_continuation_lines_are_not_records(kmsg):
    watcher = agent_events.KmsgWatcher(kmsg.path)
    kmsg.write(NOISE, XID, NOISE, OFF_BUS)
    assert watcher.drain() == [XID, OFF_BUS]
    assert (watcher.records, watcher.last_seq, watcher.dropped) == (4, 4, 0)
    assert watcher.drain() == []  # nothing new: never blocks
    watcher.close()


def test_a_record_split_across_reads_is_read_whole(kmsg):
    watcher = agent_events.KmsgWatcher(kmsg.path)
    data = record(1, XID)
    os.write(kmsg.fd, data[:20])
    assert watcher.drain() == []
    os.write(kmsg.fd, data[20:])
    assert watcher.drain() == [XID]
    watcher.close()


def test_a_regular_log_is_read_from_its_end_unless_resuming(tmp_path):
    log = tmp_path / "kmsg"
    log.write_bytes(b"".join(record(seq, XID if seq in (3, 8) else NOISE) for seq in range(1, 11)))
    fresh = agent_events.KmsgWatcher(str(log))
    assert fresh.drain() == [] and fresh.records == 0  # SEEK_END: old records are not news
    resumed = agent_events.KmsgWatcher(str(log), resume_after=5)
    assert resumed.drain() == [XID]  # record 8 only: record 3 was counted before the restart
    assert (resumed.skipped, resumed.records, resumed.last_seq) == (5, 5, 10)
    fresh.close()
    resumed.close()


def test_a_restart_resumes_after_the_stored_sequence_number_without_double_counting(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    log = tmp_path / "kmsg"
    log.write_bytes(b"".join(record(seq, NOISE) for seq in range(1, 4)))
    settings = {"kmsg": str(log), "nvml": False, "min_gap": 1.0}
    boot = tmp_path / "boot_id"  # /proc/sys/kernel/random/boot_id's stand-in
    boot.write_text("51711a17-2a54-4a9c-81eb-36725b63a223\n")
    first = agent_events.EventSources(settings, str(state), 60, boot_id_path=str(boot))
    with open(str(log), "ab") as out:
        out.write(record(4, XID))
    assert first.drain() == [XID]
    assert first.save() is None
    assert json.loads((state / "kmsg-seq.json").read_text()) == {"seq": 4, "boot_id": "51711a17-2a54-4a9c-81eb-36725b63a223"}
    first.close()
    with open(str(log), "ab") as out:  # written while the agent was down
        out.write(record(5, OFF_BUS))
    second = agent_events.EventSources(settings, str(state), 60, boot_id_path=str(boot))
    assert second.status["kmsg"] == "watching %s (resumed after record 4)" % log
    assert second.drain() == [OFF_BUS]  # record 4 is not counted again
    assert second.kmsg.skipped == 4
    second.close()


@pytest.mark.parametrize("content", [b"{not json", b'{"seq": -3}', b'{"seq": 4, "boot_id": "x"}', b'{"seq": NaN}',
                                     b'{"seq": 4, "seq": 5}', b'{"seq": 4.0}', b'{"seq": true}', b"[4]"])
def test_a_damaged_sequence_file_is_set_aside_and_suppresses_nothing(tmp_path, content):
    """Unreadable means never "seen": the log is read from its start (not from its end, which
    would skip what came since the boot), the file is set aside, and the status names it."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "kmsg-seq.json").write_bytes(content)
    stored, problem = agent_events.read_seq(str(state))
    assert stored is None and "kmsg-seq.json is damaged" in problem and "set aside as" in problem
    assert [name for name in os.listdir(str(state)) if name.startswith("kmsg-seq.json.damaged-")]
    (state / "kmsg-seq.json").write_bytes(content)
    log = tmp_path / "kmsg"
    log.write_bytes(b"".join(record(seq, XID if seq == 2 else NOISE) for seq in range(1, 4)))
    sources = agent_events.EventSources({"kmsg": str(log), "nvml": False}, str(state), 60)
    assert "kmsg-seq.json is damaged" in sources.status["kmsg"] and "read from its start" in sources.status["kmsg"]
    assert sources.drain() == [XID]
    sources.close()


def test_overwritten_records_epipe_are_counted_and_reading_goes_on(kmsg, monkeypatch):
    watcher = agent_events.KmsgWatcher(kmsg.path)
    answers = [OSError(errno.EPIPE, "Broken pipe"), record(9, XID), BlockingIOError(errno.EAGAIN, "again")]

    def read(fd, size):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(agent_events.os, "read", read)
    assert watcher.drain() == [XID]
    assert watcher.overwritten == 1 and watcher.last_seq == 9
    monkeypatch.undo()
    watcher.close()


def test_a_flood_of_10000_lines_is_bounded_and_counted(kmsg):
    """Read until the writer has written all (it waits on the full FIFO for our reads) and every
    record is counted. The bound is a hang guard only: it used to be 10 s, then the writer was
    joined without a timeout while it waited on a FIFO nobody read any more, and the run hung (2 of
    8 runs on a loaded 2-core machine, where the flood took 6-12 s)."""
    watcher = agent_events.KmsgWatcher(kmsg.path, max_kept=100)
    writer = threading.Thread(target=kmsg.write, args=[XID] * 10000, daemon=True)
    guard = time.monotonic() + 120
    writer.start()
    kept = []
    while (writer.is_alive() or watcher.records < 10000) and time.monotonic() < guard:
        batch = watcher.drain()
        assert len(batch) <= 100  # the buffer is bounded whatever the flood
        kept.extend(batch)
        assert len(watcher._partial) <= agent_events.MAX_LINE
    assert not writer.is_alive(), "the flood was not read within the hang guard"
    assert watcher.records == 10000
    assert len(kept) + watcher.dropped == 10000 and watcher.dropped > 0
    watcher.close()


def test_an_endless_line_is_cut_not_kept_whole(kmsg):
    watcher = agent_events.KmsgWatcher(kmsg.path)
    for _ in range(40):
        os.write(kmsg.fd, b"x" * 4096)
        watcher.drain()
    assert len(watcher._partial) <= agent_events.MAX_LINE
    watcher.close()


def test_an_unreadable_kernel_log_leaves_the_agent_polling_and_says_so(tmp_path):
    sources = agent_events.EventSources({"kmsg": str(tmp_path / "missing"), "nvml": False, "min_gap": 1}, str(tmp_path), 30)
    assert sources.status == {"kmsg": "unavailable: %s: No such file or directory, polling every 30 s" % (tmp_path / "missing"),
                              "nvml": "off (events.nvml), polling every 30 s"}
    assert sources.fds() == [] and sources.drain() == []
    assert sources.counters() == sources.status


def test_nvml_critical_xid_and_double_bit_ecc_events_wake_the_pipe():
    fake = fake_with("h100-healthy")
    watcher = agent_events.NvmlEventWatcher(fake, wait_ms=50).start()
    try:
        assert watcher.status() == "watching critical XID and double-bit ECC events of 8 GPU(s)"
        assert fake.inject_event(3, 79) == 1
        import select

        assert select.select([watcher.fileno()], [], [], 2)[0] == [watcher.fileno()]
        assert watcher.drain() == ["NVML critical XID event: GPU 3, Xid 79"]
        assert fake.inject_event(2, 0, fake.nvmlEventTypeDoubleBitEccError) == 1
        assert select.select([watcher.fileno()], [], [], 2)[0] == [watcher.fileno()]
        assert watcher.drain() == ["NVML double-bit ECC event: GPU 2"]
        assert fake.inject_event(3, 79, fake.nvmlEventTypePState) == 0  # not registered
        assert watcher.healthy  # the thread goes on after events
    finally:
        watcher.close()
    assert fake._STATE["initialised"] == 0  # the watcher's NVML reference released


def test_a_gpu_with_ecc_off_registers_the_critical_xid_events_alone():
    """nvmlDeviceRegisterEvents refuses a mask with a type the GPU does not support (NOT_SUPPORTED,
    nothing registered): ECC events exist only with ECC on, so such a GPU registers XID events alone."""
    fake = fake_with("h100-healthy", {5: {"ecc": {"mode_current": 0, "mode_pending": 0}}})
    watcher = agent_events.NvmlEventWatcher(fake, wait_ms=50).start()
    try:
        assert watcher.registered == 8 and watcher.problems == []
        assert fake.inject_event(5, 0, fake.nvmlEventTypeDoubleBitEccError) == 0
        assert fake.inject_event(5, 79) == 1 and fake.inject_event(4, 0, fake.nvmlEventTypeDoubleBitEccError) == 1
    finally:
        watcher.close()


def test_a_burst_of_nvml_events_is_one_bounded_wake_up_and_the_watcher_goes_on():
    """A burst is taken without waiting (at most max_kept kept, the rest counted as dropped); the
    thread then waits again: an event after the burst is seen too."""
    fake = fake_with("h100-healthy")
    watcher = agent_events.NvmlEventWatcher(fake, wait_ms=50, max_kept=5)
    watcher.start()
    try:
        burst = threading.Thread(target=lambda: [fake.inject_event(index % 8, 79) for index in range(50)])
        burst.start()
        burst.join(10)
        import select

        assert select.select([watcher.fileno()], [], [], 2)[0]
        deadline = time.monotonic() + 5
        while len(watcher.events) + watcher.dropped < 50 and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread takes the queue
        kept = watcher.drain()
        assert 1 <= len(kept) <= 50 and all(line.endswith("Xid 79") for line in kept)
        assert len(kept) + watcher.dropped == 50
        fake.inject_event(1, 31)
        assert select.select([watcher.fileno()], [], [], 2)[0]
        deadline = time.monotonic() + 5
        while not watcher.events and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watcher.drain() == ["NVML critical XID event: GPU 1, Xid 31"]
    finally:
        watcher.close()
    assert fake._STATE["initialised"] == 0


def test_nvml_events_unavailable_fall_back_to_polling(tmp_path):
    old = fake_with("h100-healthy", missing_functions=["nvmlEventSetWait_v2"])
    sources = agent_events.EventSources({"kmsg": None, "nvml": True}, str(tmp_path), 60, binding_loader=lambda: old)
    assert sources.status == {"kmsg": "off (events.kmsg), polling every 60 s",
                              "nvml": "unavailable: the NVML binding has no nvmlEventSetWait_v2, polling every 60 s"}
    unsupported = fake_with("h100-healthy", errors={"nvmlDeviceRegisterEvents": "NOT_SUPPORTED"})
    sources = agent_events.EventSources({"kmsg": None, "nvml": True}, str(tmp_path), 60,
                                        binding_loader=lambda: unsupported)
    assert sources.status["nvml"].startswith("unavailable: no GPU registers critical XID events (GPU 0: Not Supported")
    assert unsupported._STATE["initialised"] == 0

    def no_binding():
        raise ImportError("No module named 'pynvml'")

    sources = agent_events.EventSources({"kmsg": None, "nvml": True}, str(tmp_path), 60, binding_loader=no_binding)
    assert sources.status["nvml"] == "unavailable: No module named 'pynvml', polling every 60 s"


def loop_with_events(sources, cycles_log, interval=60.0):
    signals = agent_daemon.StopSignals()

    def run_cycle():
        cycles_log.append(time.monotonic())
        return "cycle %d" % len(cycles_log)

    loop = agent_daemon.Loop(run_cycle, interval, signals.wait, notify=lambda message: None,
                             log=lambda line: None, events=sources)
    return loop, signals


def test_a_kernel_xid_line_triggers_a_cycle_at_once(tmp_path, kmsg):
    sources = agent_events.EventSources({"kmsg": kmsg.path, "nvml": False, "min_gap": 0.05}, str(tmp_path), 60)
    starts = []
    loop, signals = loop_with_events(sources, starts)
    timer = threading.Timer(0.1, kmsg.write, (NOISE, XID))
    periodic = loop.run_cycle

    def run_cycle():
        if not starts:  # the periodic cycle has read the log (Loop._cycle): the XID comes after it
            timer.start()  # (a timer started before loop.run fired first on a loaded machine: that
        return periodic()  # cycle read the XID, and the 2nd came 60 s later from the schedule)

    loop.run_cycle = run_cycle
    try:
        assert loop.run(max_cycles=2) == 2  # the 2nd cycle came from the event, not the 60 s schedule
    finally:
        timer.cancel()
        signals.close()
        sources.close()
    assert loop.triggered == 1 and starts[1] - starts[0] < 30  # not the 60 s schedule (a bound, not a latency)
    assert json.loads((tmp_path / "kmsg-seq.json").read_text()) == {"seq": 2, "boot_id": agent_events.read_boot_id()}


def test_noise_does_not_trigger_a_cycle(tmp_path, kmsg):
    sources = agent_events.EventSources({"kmsg": kmsg.path, "nvml": False, "min_gap": 0}, str(tmp_path), 0.3)
    starts = []
    loop, signals = loop_with_events(sources, starts, interval=0.3)
    timer = threading.Timer(0.05, kmsg.write, (NOISE,) * 50)
    timer.start()
    try:
        loop.run(max_cycles=2)
    finally:
        timer.cancel()
        signals.close()
        sources.close()
    assert loop.triggered == 0 and starts[1] - starts[0] >= 0.29  # the schedule's cycle


def test_a_storm_is_one_cycle_per_min_gap_and_never_stalls_the_agent(tmp_path, kmsg):
    sources = agent_events.EventSources({"kmsg": kmsg.path, "nvml": False, "min_gap": 0.2}, str(tmp_path), 60)
    sources.kmsg.max_kept = 100
    starts = []
    loop, signals = loop_with_events(sources, starts)

    def storm():
        for _ in range(10):  # 10,000 XID lines within about a second
            kmsg.write(*[XID] * 1000)
            time.sleep(0.08)

    writer = threading.Thread(target=storm)
    writer.start()
    began = time.monotonic()
    try:
        loop.run(max_cycles=4)
    finally:
        elapsed = time.monotonic() - began
        while writer.is_alive():  # read the rest, or the writer blocks on a full FIFO
            sources.drain()
            time.sleep(0.01)
        signals.close()
    sources.drain()
    counters = sources.counters()
    sources.close()
    assert elapsed < 5  # not stalled: 3 event-triggered cycles, no 60 s wait
    gaps = [b - a for a, b in zip(starts[1:], starts[2:])]
    assert all(gap >= 0.19 for gap in gaps), gaps  # at most one event-triggered cycle per min_gap
    assert counters["kmsg_dropped"] > 0 and counters["kmsg"] == "watching %s" % kmsg.path


def test_the_events_settings_are_checked_by_name():
    assert events_settings({})[0] == {"kmsg": "/dev/kmsg", "nvml": True, "min_gap": 1.0}
    assert events_settings({"events": {"kmsg": None, "nvml": False, "min_gap": 0.5}})[0] == {
        "kmsg": None, "nvml": False, "min_gap": 0.5}
    errors = config_errors({"events": {"kmsg": "dev/kmsg", "nvml": "yes", "min_gap": -1, "gap": 1}})
    assert "events: unknown setting 'gap' (known: kmsg, nvml, min_gap)" in errors
    assert "events.kmsg must be an absolute path (/dev/kmsg) or null (off), got 'dev/kmsg'" in errors
    assert "events.nvml must be true or false, got 'yes'" in errors
    assert "events.min_gap must be a number of seconds in [0, 3600], got -1" in errors
    assert config_errors({"events": []})[0] == "events must be a dict {kmsg, nvml, min_gap}, got list"


def test_the_nvml_watcher_runs_through_cycles_and_an_event_during_one_is_not_lost(tmp_path):
    """The watcher holds its NVML initialisation through every cycle (no stop before a cycle, no
    registration after it: NVML records no event of a set not registered, "All events that occurred
    before this call are not recorded"); an event that comes while a cycle runs wakes the loop after
    it, for one more cycle. A scenario switch of the fake (the hardware's state changed) is seen by
    the cycle's own nvmlInit although the watcher holds one."""
    fake = fake_with("h100-healthy")
    sources = agent_events.EventSources({"kmsg": None, "nvml": True, "min_gap": 0}, str(tmp_path), 60,
                                        binding_loader=lambda: fake)
    watcher = sources.nvml
    held = []
    loop, signals = loop_with_events(sources, [], interval=60)

    def run_cycle():
        held.append(fake._STATE["initialised"])
        if len(held) == 1:  # an event while the first cycle runs
            assert fake.inject_event(6, 79) == 1
        return "cycle %d" % len(held)

    loop.run_cycle = run_cycle
    try:
        loop.run(max_cycles=2)  # the periodic one, then the event's (the interval is 60 s)
        assert held == [1, 1] and loop.triggered == 1
        assert sources.nvml is watcher and watcher.healthy  # the same watcher throughout
    finally:
        signals.close()
        sources.close()
    assert fake._STATE["initialised"] == 0


def test_a_watcher_that_ended_or_left_a_gpu_out_is_replaced_after_a_full_cycle(tmp_path):
    """GPU 4 lost when the watcher starts: 7 registered, replaced after a full cycle once GPU 4
    answers again. An error of the wait (GPU_IS_LOST) wakes the loop once and ends the thread; the
    replacement that fails the same way wakes nothing (no storm of cycles while a GPU is lost)."""
    fake = fake_with("h100-healthy", {4: {"errors": {"nvmlDeviceRegisterEvents": "GPU_IS_LOST"}}})
    sources = agent_events.EventSources({"kmsg": None, "nvml": True}, str(tmp_path), 60, binding_loader=lambda: fake)
    try:
        first = sources.nvml
        assert first.registered == 7 and not first.healthy and "GPU 4: GPU is lost" in first.problems[0]
        sources.refresh()  # still lost: a new watcher, 7 again
        assert sources.nvml is not first and sources.nvml.registered == 7
        fake._STATE["devices"][4].pop("errors")
        sources.refresh()
        assert sources.nvml.registered == 8 and sources.nvml.healthy
        running = sources.nvml
        sources.refresh()
        assert sources.nvml is running  # healthy: left alone
        waits = fake.nvmlEventSetWait_v2

        def lost(event_set, timeout_ms):
            fake._raise("GPU_IS_LOST")

        fake.nvmlEventSetWait_v2 = lost
        fake.inject_event(0, 79)  # wakes the waiting thread, whose next wait fails
        running._thread.join(5)
        assert not running.healthy and running.error == "GPU is lost"
        assert "NVML events: GPU is lost" in sources.drain()  # (with the XID: twice, as the old watcher forwards it)
        sources.refresh()
        again = sources.nvml
        again._thread.join(5)
        # the same error: no wake-up for it (an XID forwarded late by a replaced watcher may still
        # come: an event around a replacement may be reported twice)
        assert again.error == "GPU is lost" and [line for line in sources.drain() if line.startswith("NVML events")] == []
        fake.nvmlEventSetWait_v2 = waits
        sources.refresh()
        assert sources.nvml.healthy and sources.status["nvml"].startswith("watching")
    finally:
        sources.close()
    assert fake._STATE["initialised"] == 0


# -- the reader of kmsg-seq.json and the resume point, as properties ----------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BOOTS = ["0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"]
SEQ_VALUES = st.one_of(st.integers(-5, 2 ** 64 + 5), st.floats(allow_nan=True), st.text(max_size=5), st.booleans(),
                       st.none(), st.lists(st.integers(), max_size=2))
SEQ_DOCS = st.one_of(
    st.fixed_dictionaries({"seq": SEQ_VALUES}, optional={"boot_id": st.one_of(st.sampled_from(BOOTS), st.text(max_size=40),
                                                                              st.none(), st.integers()),
                                                         "other": st.integers()}),
    st.lists(st.integers(), max_size=3), st.integers())


@settings(max_examples=300, deadline=None)
@given(doc=SEQ_DOCS, garble=st.binary(max_size=8))
def test_the_sequence_reader_gives_a_record_or_names_why_not(doc, garble):
    raw = json.dumps(doc).encode() + garble
    try:
        stored = agent_events.parse_seq(raw)
    except agent_events.records.RecordError as exc:
        assert "kmsg-seq.json" in str(exc)
        return
    assert isinstance(stored["seq"], int) and not isinstance(stored["seq"], bool) and 0 <= stored["seq"] < 2 ** 64
    assert stored["boot_id"] is None or stored["boot_id"] in BOOTS


@settings(max_examples=300, deadline=None)
@given(seq=st.integers(0, 10 ** 6), stored_boot=st.sampled_from(BOOTS + [None]), boot=st.sampled_from(BOOTS + [None]),
       problem=st.sampled_from([None, "kmsg-seq.json is damaged"]), absent=st.booleans())
def test_only_a_number_of_this_boot_is_resumed_after(seq, stored_boot, boot, problem, absent):
    stored = None if absent or problem else {"seq": seq, "boot_id": stored_boot}
    resume_after, from_start, note = agent_events.resume_point(stored, problem, boot)
    if resume_after is not None:
        assert stored is not None and boot is not None and stored_boot == boot and resume_after == seq
    else:
        assert from_start == (stored is not None or problem is not None)  # nothing of this boot "seen"
        assert (note == "") == (not from_start)


@settings(max_examples=150, deadline=None)
@given(first=st.integers(0, 50), count=st.integers(0, 30), stored=st.integers(0, 120),
       xids=st.sets(st.integers(0, 29), max_size=8))
def test_a_resumed_log_suppresses_only_what_this_log_numbered_up_to_the_stored_record(tmp_path_factory, first, count,
                                                                                      stored, xids):
    """The ring holds records first..first+count-1: with the stored number inside (or past the
    ring's start) the records up to it are skipped; with it beyond the newest record nothing is."""
    log = tmp_path_factory.mktemp("kmsg") / "kmsg"
    log.write_bytes(b"".join(record(first + index, "%s %d" % (XID, index) if index in xids else NOISE)
                             for index in range(count)))
    watcher = agent_events.KmsgWatcher(str(log), resume_after=stored)
    got = watcher.drain()
    watcher.close()
    newest = first + count - 1
    relevant_seqs = [first + index for index in sorted(xids) if index < count]
    if count and newest < stored:  # the stored number is not this log's
        expected = relevant_seqs
    else:
        expected = [seq for seq in relevant_seqs if seq > stored]
    assert got == ["%s %d" % (XID, seq - first) for seq in expected]
    assert watcher.records + watcher.skipped == count


def test_anything_the_wait_raises_wakes_the_loop_once_and_odd_event_fields_still_wake_it():
    """A binding raising something other than NVMLError from the wait ends the thread the same way
    (one wake-up, replaced after a full cycle); an event whose fields are not what nvml.h says
    (eventData None, a device nvmlDeviceGetIndex refuses) still wakes a cycle, named with '?'."""
    fake = fake_with("h100-healthy")
    watcher = agent_events.NvmlEventWatcher(fake, wait_ms=50).start()
    try:
        real_index = fake.nvmlDeviceGetIndex
        fake.nvmlDeviceGetIndex = lambda device: (_ for _ in ()).throw(ValueError("no index"))
        with fake._EVENT_SETS[0].cond:
            fake._EVENT_SETS[0].queue.append(fake.c_nvmlEventData_t(object(), fake.nvmlEventTypeXidCriticalError, None))
            fake._EVENT_SETS[0].cond.notify_all()
        deadline = time.monotonic() + 5
        while not watcher.events and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watcher.drain() == ["NVML critical XID event: GPU ?, Xid ?"] and watcher.healthy
        fake.nvmlDeviceGetIndex = real_index

        def broken(event_set, timeout_ms):
            raise OSError("ioctl failed")

        fake.nvmlEventSetWait_v2 = broken
        watcher._thread.join(5)
        assert not watcher.healthy and watcher.error == "ioctl failed"
        assert watcher.drain() == ["NVML events: ioctl failed"]
    finally:
        watcher.close()
    assert fake._STATE["initialised"] == 0


def test_events_a_replaced_watcher_still_takes_stay_under_its_successors_bound():
    """After hand_over the old watcher's thread forwards what it still takes to the successor:
    kept there up to the successor's max_kept, the rest counted in its dropped (nvml_dropped)."""
    fake = fake_with("h100-healthy")
    old = agent_events.NvmlEventWatcher(fake, wait_ms=50).start()
    new = agent_events.NvmlEventWatcher(fake, wait_ms=50, max_kept=3).start()
    try:
        old.hand_over(new)
        for xid in range(10):
            old._keep(fake.c_nvmlEventData_t(fake.c_nvmlDevice_t(1), fake.nvmlEventTypeXidCriticalError, xid))
        assert len(new.events) == 3 and new.dropped == 7 and old.events == [] and old.dropped == 0
    finally:
        new.close()
        old.finish()
    assert fake._STATE["initialised"] == 0
