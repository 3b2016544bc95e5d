"""Red-team attacks on the node health agent's records and restarts, from what the docs promise
(docs/contracts.md, "Node health agent", "Time", "Hysteresis", "Records read back";
roles/node_health_agent/README.md):

- kmsg-seq.json keyed on the boot id: after a reboot, an unreadable boot id or an unreadable
  record nothing of this boot is skipped; an XID read is never lost;
- unreadable records (kmsg-seq.json, agent-state.json, health.json, agent.json) are read in the
  safe direction (never healthy, never "seen"), set aside (the agent's files) and named;
- hysteresis counts cycles, not seconds; a damaged/lying state never makes a node healthy sooner;
- crashes mid-write, concurrent agents, temporary files, permissions.
"""

import json
import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent, agent_events, agent_publish, agent_state
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import clock, records, state_files
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import load_config
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import agent_health_check
from nvml_scenarios import NODES, fake_with
from runners import ScriptedRunner

XID = "NVRM: Xid (PCI:0000:1b:00): 79, pid=0, name=?, GPU has fallen off the bus."
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"
BOOT_A = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
BOOT_B = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
NOW = 1700000000.0
DGX = os.path.join(NODES, "dgx-h100")
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}


def record(seq, message, prio=3):
    return ("%s,%s,%s,-;%s\n SUBSYSTEM=pci\n" % (prio, seq, 17, message)).encode()


@pytest.fixture(autouse=True)
def no_busy_publishers():
    agent_publish._BUSY.clear()
    yield
    agent_publish._BUSY.clear()


def in_thread(function, timeout=5.0, unblock=None):
    """Run ``function`` in a thread; returns (finished, result or exception). A reader blocked
    on a FIFO is released afterwards by ``unblock()`` so the test process never hangs."""
    box = {}

    def run():
        try:
            box["result"] = function()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    finished = not thread.is_alive()
    if not finished and unblock is not None:
        unblock()
        thread.join(5)
    return finished, box


def open_fifo_writer_and_close(path):
    """Unblock a reader stuck in open() of a FIFO."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


# -- kmsg-seq.json and the boot id -------------------------------------------------------------
class Disk(object):
    """A state dir, a regular file standing in for the kernel ring, a boot id file."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.log = tmp_path / "kmsg"
        self.boot = tmp_path / "boot_id"

    def ring(self, *messages, first=0):
        self.log.write_bytes(b"".join(record(first + index, message) for index, message in enumerate(messages)))

    def seq_file(self, content):
        path = self.state / "kmsg-seq.json"
        if isinstance(content, (dict, list)):
            content = json.dumps(content)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)
        return path

    def sources(self, boot_id_path=None):
        return agent_events.EventSources({"kmsg": str(self.log), "nvml": False}, str(self.state), 60,
                                         boot_id_path=str(boot_id_path or self.boot))

    def aside(self, prefix="kmsg-seq.json"):
        return sorted(name for name in os.listdir(str(self.state)) if name.startswith(prefix + ".damaged-"))


@pytest.fixture
def disk(tmp_path):
    return Disk(tmp_path)


BOOT_ID_FILES = {
    "missing": None,
    "empty": b"",
    "only a newline": b"\n",
    "whitespace": b"   \n",
    "garbage": b"not-a-boot-id\n",
    "binary": b"\xff\xfe\x00\x01",
    "huge": b"a" * (1 << 20),
}


@pytest.mark.parametrize("content", list(BOOT_ID_FILES.values()), ids=list(BOOT_ID_FILES))
def test_an_unusable_boot_id_never_makes_this_boots_records_seen(disk, content):
    """The stored number is of boot A (equal text or not): with no usable current boot id it is
    never resumed after; the XID logged at record 1 is read."""
    if content is not None:
        disk.boot.write_bytes(content)
    disk.ring(NOISE, XID, NOISE)
    disk.seq_file({"seq": 2, "boot_id": BOOT_A})
    sources = disk.sources()
    try:
        assert sources.drain() == [XID], sources.status
    finally:
        sources.close()


@pytest.mark.parametrize("content", [None, b"", b"not-a-boot-id\n"], ids=["missing", "empty", "garbage"])
def test_a_number_stored_while_the_boot_id_was_unusable_is_not_resumed_after(disk, content):
    """"one stored while the boot id was unreadable ... reads this boot's log from its start":
    the agent stores with an unusable boot id, restarts with the same unusable boot id, and must
    read the XID again (it cannot know it is the same boot)."""
    if content is not None:
        disk.boot.write_bytes(content)
    disk.ring(NOISE, NOISE, XID)
    disk.seq_file({"seq": 0, "boot_id": BOOT_B})  # another boot: read from the start
    first = disk.sources()
    try:
        assert first.drain() == [XID]
        first.save()
    finally:
        first.close()
    stored = (disk.state / "kmsg-seq.json").read_text() if (disk.state / "kmsg-seq.json").exists() else None
    second = disk.sources()
    status = second.status["kmsg"]
    try:
        assert second.drain() == [XID], (status, stored)
    finally:
        second.close()


def test_the_same_boot_id_written_differently_is_still_resumed_only_when_it_is_this_boots(disk):
    """The kernel writes the id lower-case with a newline; a stored id for boot A never resumes in
    boot B, whatever the case or whitespace of the stored text."""
    disk.boot.write_text(BOOT_B + "\n")
    disk.ring(NOISE, XID, NOISE)
    for stored in (BOOT_A.upper(), " " + BOOT_A, BOOT_A + "\n"):
        disk.seq_file({"seq": 2, "boot_id": stored})
        sources = disk.sources()
        try:
            assert sources.drain() == [XID], (stored, sources.status)
        finally:
            sources.close()


def test_off_by_one_at_the_kernels_newest_record(disk):
    """Stored = a record of the ring: resumed after it exactly; stored = the newest record:
    nothing new; stored = newest + 1 (the same boot id, a smaller kernel sequence): beyond,
    released, the XID is read."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE, XID)  # 0, 1, 2, 3
    for stored, expected in ((2, [XID]), (3, []), (0, [XID, XID])):
        disk.seq_file({"seq": stored, "boot_id": BOOT_A})
        sources = disk.sources()
        status = sources.status["kmsg"]
        try:
            assert sources.drain() == expected, (stored, status)
        finally:
            sources.close()
    disk.ring(NOISE, XID, NOISE)
    disk.seq_file({"seq": 3, "boot_id": BOOT_A})
    sources = disk.sources()
    try:
        assert sources.drain() == [XID], sources.status
    finally:
        sources.close()


@pytest.mark.parametrize("seq", [2 ** 63, 2 ** 64 + 5, 10 ** 30])
def test_a_huge_stored_number_of_this_boot_skips_nothing(disk, seq):
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    disk.seq_file({"seq": seq, "boot_id": BOOT_A})
    sources = disk.sources()
    status = sources.status["kmsg"]
    try:
        assert sources.drain() == [XID], status
    finally:
        sources.close()


SEQ_FILE_CONTENTS = {
    "0 bytes": b"",
    "whitespace": b"  \n",
    "null": b"null",
    "seq float": b'{"seq": 1.5, "boot_id": "%s"}' % BOOT_A.encode(),
    "seq string": b'{"seq": "1", "boot_id": "%s"}' % BOOT_A.encode(),
    "seq Infinity": b'{"seq": Infinity, "boot_id": "%s"}' % BOOT_A.encode(),
    "seq bool": b'{"seq": false, "boot_id": "%s"}' % BOOT_A.encode(),
    "boot_id a number": b'{"seq": 1, "boot_id": 7}',
    "boot_id a list": b'{"seq": 1, "boot_id": ["%s"]}' % BOOT_A.encode(),
    "duplicate boot_id, last this boot's": b'{"seq": 1, "boot_id": "%s", "boot_id": "%s"}' % (
        BOOT_B.encode(), BOOT_A.encode()),
    "nested": b"[" * 10000 + b"]" * 10000,
    "BOM": b"\xef\xbb\xbf" + b'{"seq": 1, "boot_id": "%s"}' % BOOT_A.encode(),
    "not UTF-8": b'{"seq": 1, "boot_id": "\xff"}',
}


@pytest.mark.parametrize("content", list(SEQ_FILE_CONTENTS.values()), ids=list(SEQ_FILE_CONTENTS))
def test_a_hostile_seq_file_of_this_boot_makes_nothing_seen(disk, content):
    """Whatever the file holds, the XID at record 1 of this boot is read (never "seen"), and a
    file that was not used is named."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    disk.seq_file(content)
    sources = disk.sources()
    status = sources.status["kmsg"]
    try:
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status, status
    finally:
        sources.close()


def test_a_seq_file_that_is_a_directory_is_set_aside_and_nothing_is_seen(disk):
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    (disk.state / "kmsg-seq.json").mkdir()
    sources = disk.sources()
    status = sources.status["kmsg"]
    try:
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status, status
        assert disk.aside() and not (disk.state / "kmsg-seq.json").exists()
    finally:
        sources.close()


def test_a_one_gigabyte_sparse_seq_file_is_refused_quickly(disk):
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    path = disk.state / "kmsg-seq.json"
    with open(str(path), "wb") as out:
        out.write(b'{"seq": 2, "boot_id": "%s"' % BOOT_A.encode())
        out.truncate(1 << 30)
    started = time.monotonic()
    sources = disk.sources()
    status = sources.status["kmsg"]
    try:
        assert time.monotonic() - started < 3
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status and disk.aside(), status
    finally:
        sources.close()


def test_a_seq_file_symlinked_to_dev_zero_is_refused(disk):
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    os.symlink("/dev/zero", str(disk.state / "kmsg-seq.json"))
    finished, box = in_thread(disk.sources, timeout=5)
    assert finished
    sources = box["result"]
    status = sources.status["kmsg"]
    try:
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status, status
    finally:
        sources.close()
    assert os.path.exists("/dev/zero")


def test_a_seq_file_the_agent_may_not_read_makes_nothing_seen_and_stays(disk, monkeypatch):
    """Permission denied is not "no file": the log is read from its start (a first start would read
    it from its end), the file is named and left in place."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    path = disk.seq_file({"seq": 2, "boot_id": BOOT_A})
    real_open = open
    real_os_open = os.open

    def refuse(name, *args, **kwargs):
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    def refuse_os(name, *args, **kwargs):
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_os_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    monkeypatch.setattr(os, "open", refuse_os)
    try:
        sources = disk.sources()
        status = sources.status["kmsg"]
    finally:
        monkeypatch.undo()
    try:
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status and "Permission denied" in status
        assert path.exists() and not disk.aside()
    finally:
        sources.close()


def test_temporaries_with_the_seq_files_prefix_are_never_read(disk):
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    for name in ("kmsg-seq.json.tmp", ".kmsg-seq.json.4242.0badc0de", "kmsg-seq.json~", "kmsg-seq.json.1"):
        (disk.state / name).write_text(json.dumps({"seq": 99, "boot_id": BOOT_A}))
    disk.seq_file({"seq": 0, "boot_id": BOOT_A})
    sources = disk.sources()
    try:
        assert sources.drain() == [XID]
    finally:
        sources.close()


def test_a_set_aside_name_already_taken_keeps_both(disk):
    """The set-aside name of this second already exists (a file, a directory): neither the old
    nor the damaged content is lost."""
    disk.boot.write_text(BOOT_A + "\n")
    path = disk.seq_file(b"{garbage")
    first, _reason = state_files.set_aside(str(path), "damaged", now=NOW)
    assert open(first).read() == "{garbage"
    path.write_text("{second")
    os.mkdir(first + ".1")
    second, _reason = state_files.set_aside(str(path), "damaged", now=NOW)
    assert second not in (first, first + ".1") and open(second).read() == "{second"
    assert open(first).read() == "{garbage" and os.path.isdir(first + ".1")


# -- kernel records with hostile headers ------------------------------------------------------------
class Fifo(object):
    def __init__(self, tmp_path):
        self.path = str(tmp_path / "kmsg-fifo")
        os.mkfifo(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)

    def write(self, data):
        os.write(self.fd, data)

    def close(self):
        os.close(self.fd)


@pytest.fixture
def fifo(tmp_path):
    ring = Fifo(tmp_path)
    yield ring
    ring.close()


HEADERS = {
    "negative seq": b"3,-5,17,-;",
    "non-numeric seq": b"3,abc,17,-;",
    "huge seq": b"3,%d,17,-;" % (10 ** 40),
    "empty seq": b"3,,17,-;",
    "no flags": b"3,7,17;",
    "extra fields": b"3,7,17,-,caller=T1;",
}


@pytest.mark.parametrize("header", list(HEADERS.values()), ids=list(HEADERS))
def test_an_xid_in_a_record_with_an_odd_header_still_triggers_and_never_crashes(fifo, header):
    watcher = agent_events.KmsgWatcher(fifo.path)
    try:
        fifo.write(record(1, NOISE))
        fifo.write(header + XID.encode() + b"\n SUBSYSTEM=pci\n")
        fifo.write(record(2, NOISE))
        kept = watcher.drain()
        assert any(XID in line for line in kept), kept  # a record that matters: a cycle at once
        assert watcher.last_seq is None or watcher.last_seq >= 1
    finally:
        watcher.close()


def test_a_continuation_line_never_counts_as_a_record_or_moves_the_number(fifo):
    watcher = agent_events.KmsgWatcher(fifo.path)
    try:
        fifo.write(b"3,5,17,-;" + NOISE.encode() + b"\n SUBSYSTEM=pci\n DEVICE=+pci:0000:1b:00.0\n")
        fifo.write(b"3,6,17,-;" + XID.encode() + b"\n 9,9999,1,-;fake\n")
        assert watcher.drain() == [XID]
        assert watcher.records == 2 and watcher.last_seq == 6
    finally:
        watcher.close()


# -- agent-state.json ------------------------------------------------------------------------------------
def make_agent(tmp_path, scenario="h100-healthy", now=None, **extra):
    state = tmp_path / "state"
    os.makedirs(str(state), exist_ok=True)
    config = {"node_name": "dgx-1", "state_dir": str(state), "node_validate": dict(OPTIONS, root=DGX)}
    config.update(extra)
    lines = []
    clock_box = now if now is not None else [NOW]
    instance = agent.Agent(config, log=lines.append, runner=ScriptedRunner(),
                           nvml=NvmlAdapter(fake_with(scenario)), clock=lambda: clock_box[0])
    return instance, lines, clock_box


def health(tmp_path):
    return json.loads((tmp_path / "state" / "health.json").read_text())


def agent_state_doc(tmp_path):
    return json.loads((tmp_path / "state" / "agent-state.json").read_text())


def healthy_state_with(tmp_path, mutate):
    """A healthy node's agent-state.json after two cycles, edited by ``mutate(doc)`` (returns
    raw bytes or a doc)."""
    instance, lines, box = make_agent(tmp_path)
    instance.cycle()
    instance.cycle()
    doc = agent_state_doc(tmp_path)
    assert doc["healthy"] is True
    new = mutate(doc)
    raw = new if isinstance(new, bytes) else json.dumps(new, allow_nan=True).encode()
    (tmp_path / "state" / "agent-state.json").write_bytes(raw)
    return instance, lines


def _first_key(doc):
    return sorted(doc["checks"])[0]


STATE_EDITS = {
    "NaN counter": lambda d: json.dumps(d).replace('"passes": ', '"passes": NaN, "x_": ', 1).encode(),
    "Infinity cycle": lambda d: json.dumps(dict(d, cycle=0)).replace('"cycle": 0', '"cycle": Infinity').encode(),
    "fails a bool": lambda d: _edit(d, fails=True),
    "passes a bool": lambda d: _edit(d, passes=True),
    "flaps a bool": lambda d: _edit(d, flaps=False),
    "failing null": lambda d: _edit(d, failing=None),
    "fails a nested list": lambda d: _edit(d, fails=[[[1]]]),
    "passes a float": lambda d: _edit(d, passes=1.0),
    "updated a string": lambda d: dict(d, updated="yesterday"),
    "updated a bool": lambda d: dict(d, updated=True),
    "healthy a number": lambda d: dict(d, healthy=1),
    "checks nested lists": lambda d: dict(d, checks=[[["gpu.xid|gpu0"]]]),
    "duplicate failing, last false": lambda d: _dup_failing(d),  # noqa: PLW0108 - defined below
    "duplicate checks, last empty": lambda d: (json.dumps(d)[:-1] + ', "checks": {}}').encode(),
}


def _edit(doc, **values):
    key = _first_key(doc)
    doc["checks"][key].update(values)
    return doc


def _dup_failing(doc):
    key = _first_key(doc)
    doc["checks"][key]["failing"] = True
    text = json.dumps(doc)
    return text.replace('"failing": true', '"failing": true, "failing": false', 1).encode()


@pytest.mark.parametrize("edit", list(STATE_EDITS.values()), ids=list(STATE_EDITS))
def test_a_hostile_state_file_is_set_aside_and_held_failing_on_a_healthy_node(tmp_path, edit):
    """NaN, Infinity, bools as numbers, nested lists, duplicate keys: set aside, journalled, the
    history lost: the healthy node is published unhealthy for recover_after - 1 = 1 cycle."""
    instance, lines = healthy_state_with(tmp_path, edit)
    raw = (tmp_path / "state" / "agent-state.json").read_bytes()
    with pytest.raises(records.RecordError):
        agent_state.parse_state(raw)
    del lines[:]
    instance.cycle()
    first = health(tmp_path)["agent"]
    instance.cycle()
    second = health(tmp_path)["agent"]
    assert first["healthy"] is False and second["healthy"] is True
    assert any("agent-state.json is damaged" in line for line in lines), lines
    aside = [n for n in os.listdir(str(tmp_path / "state")) if n.startswith("agent-state.json.damaged-")]
    assert len(aside) == 1 and (tmp_path / "state" / aside[0]).read_bytes() == raw


NEGATIVE_COUNTERS = {"fails": -5, "passes": -5, "flaps": -1}


@pytest.mark.parametrize("name,value", list(NEGATIVE_COUNTERS.items()))
def test_negative_counters_are_not_accepted(name, value):
    """"fields typed and ranged": a negative count of consecutive cycles is damage."""
    doc = {"checks": {"gpu.temperature|gpu0": {"failing": False, "fails": 0, "passes": 3, "flaps": 0, name: value}},
           "healthy": True, "cycle": 3}
    with pytest.raises(records.RecordError):
        agent_state.parse_state(json.dumps(doc).encode())


def test_a_lying_state_with_huge_counters_never_holds_a_failing_check_healthy(tmp_path):
    """A hand-edited state that claims a long passing run for a non-immediate check cannot delay
    its failure past fail_after (3) consecutive failing cycles."""
    instance, lines, box = make_agent(tmp_path, scenario="h100-temperature-slowdown")
    instance.cycle()
    doc = agent_state_doc(tmp_path)
    for entry in doc["checks"].values():
        entry.update(failing=False, fails=0, passes=2 ** 62, flaps=2 ** 62)
    doc["healthy"] = True
    (tmp_path / "state" / "agent-state.json").write_text(json.dumps(doc))
    verdicts = []
    for _ in range(3):
        instance.cycle()
        verdicts.append(health(tmp_path)["agent"]["healthy"])
    assert verdicts[-1] is False, (verdicts, health(tmp_path)["checks"][:3])


@pytest.mark.parametrize("updated", [NOW + 86400 * 365 * 50, 0, -1e12, 1e300, 4102444800.0])
def test_a_future_or_far_past_update_time_is_no_damage_and_changes_no_verdict(tmp_path, updated):
    """"A time in the agent's records is checked finite only": a stamp a year ahead, at 1970 or far
    away is read; it neither sets the file aside nor flips a verdict."""
    instance, lines = healthy_state_with(tmp_path, lambda d: dict(d, updated=updated))
    instance.cycle()
    assert health(tmp_path)["agent"]["healthy"] is True
    assert not [n for n in os.listdir(str(tmp_path / "state")) if ".damaged-" in n]


def test_unknown_keys_never_make_a_failing_check_healthy(tmp_path):
    """Unknown keys (a newer agent's) are either ignored or the file is set aside; either way
    the failing GPU is reported at once."""
    instance, lines, box = make_agent(tmp_path, scenario="h100-gpu-is-lost")
    instance.cycle()
    doc = agent_state_doc(tmp_path)
    doc["future_key"] = {"healthy": True}
    for entry in doc["checks"].values():
        entry["override"] = "healthy"
    doc["checks"]["made.up|node"] = {"failing": False, "fails": 0, "passes": 9, "flaps": 0}
    (tmp_path / "state" / "agent-state.json").write_text(json.dumps(doc))
    instance.cycle()
    assert health(tmp_path)["agent"]["healthy"] is False


def test_a_state_claiming_healthy_while_a_check_is_failing_is_not_believed(tmp_path):
    """The node is healthy exactly when no check is failing: a state whose 'healthy' says true with a
    check held failing and still failing in this cycle publishes unhealthy."""
    instance, lines, box = make_agent(tmp_path, scenario="h100-temperature-slowdown")
    for _ in range(3):
        instance.cycle()
    assert health(tmp_path)["agent"]["healthy"] is False
    doc = agent_state_doc(tmp_path)
    doc["healthy"] = True
    doc["failing"] = []
    (tmp_path / "state" / "agent-state.json").write_text(json.dumps(doc))
    instance.cycle()
    assert health(tmp_path)["agent"]["healthy"] is False


def test_a_one_gigabyte_sparse_state_file_is_refused_quickly(tmp_path):
    instance, lines, box = make_agent(tmp_path)
    path = tmp_path / "state" / "agent-state.json"
    with open(str(path), "wb") as out:
        out.write(b'{"checks": {}, "healthy": true')
        out.truncate(1 << 30)
    started = time.monotonic()
    assert instance.cycle() == 0
    assert time.monotonic() - started < 5
    assert health(tmp_path)["agent"]["healthy"] is False  # held failing: history lost
    assert any("agent-state.json" in line for line in lines)


def test_a_state_file_the_agent_may_not_read_is_left_in_place_and_never_healthy_sooner(tmp_path, monkeypatch):
    """Permission denied on agent-state.json: named, left in place (not set aside), and read in the
    safe direction (history lost: the healthy node is held failing for one cycle)."""
    instance, lines, box = make_agent(tmp_path)
    instance.cycle()
    instance.cycle()
    path = tmp_path / "state" / "agent-state.json"
    real_open = open

    def refuse(name, *args, **kwargs):
        if str(name) == str(path) and (not args or "r" in args[0]):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    real_os_open = os.open

    def refuse_os(name, *args, **kwargs):  # the readers open with os.open (O_NONBLOCK, O_NOFOLLOW)
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_os_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    monkeypatch.setattr(os, "open", refuse_os)
    del lines[:]
    instance.cycle()
    monkeypatch.undo()
    assert any("agent-state.json" in line and "Permission denied" in line for line in lines), lines
    assert health(tmp_path)["agent"]["healthy"] is False
    assert not [n for n in os.listdir(str(tmp_path / "state")) if ".damaged-" in n]


def test_temporaries_with_the_state_files_prefix_are_never_read(tmp_path):
    instance, lines, box = make_agent(tmp_path, scenario="h100-gpu-is-lost")
    healthy = json.dumps({"checks": {}, "healthy": True, "cycle": 99})
    for name in ("agent-state.json.tmp", ".agent-state.json.1.deadbeef", "agent-state.json.damaged-x"):
        (tmp_path / "state" / name).write_text(healthy)
    instance.cycle()
    assert health(tmp_path)["agent"]["healthy"] is False and health(tmp_path)["cycle"] == 1


# -- clock steps between cycles -----------------------------------------------------------------------
@pytest.mark.parametrize("steps", [
    [0, -86400, 86400 * 365],
    [86400 * 365, -86400 * 366, 0],
    [-86400, -86400, -86400],
    [0, 1e9, -2e9],
])
def test_clock_steps_between_cycles_change_no_verdict(tmp_path, steps):
    """Hysteresis counts cycles, not seconds: a non-immediate failure turns the node unhealthy in
    exactly the 3rd failing cycle and it recovers after exactly 2 passing cycles, whatever the clock."""
    fault, lines, box = make_agent(tmp_path, scenario="h100-temperature-slowdown")
    verdicts = []
    for delta in steps:
        box[0] = NOW + delta
        fault.cycle()
        verdicts.append(health(tmp_path)["agent"]["healthy"])
    fine, lines2, box2 = make_agent(tmp_path, scenario="h100-healthy")
    for delta in (-86400 * 365, 86400 * 400):
        box2[0] = NOW + delta
        fine.cycle()
        verdicts.append(health(tmp_path)["agent"]["healthy"])
    assert verdicts == [True, True, False, False, True], verdicts
    assert not [n for n in os.listdir(str(tmp_path / "state")) if ".damaged-" in n]


def test_a_result_written_before_a_clock_step_back_is_never_healthy_to_npd(tmp_path, capsys):
    """health.json written with the clock a year ahead, read after the step back: unknown."""
    instance, lines, box = make_agent(tmp_path, now=[NOW + 86400 * 365])
    instance.cycle()
    result = agent_state.parse_health((tmp_path / "state" / "health.json").read_bytes())
    code, message = agent.npd_status(result, NOW)
    assert code == agent.NPD_UNKNOWN and "future" in message


# -- health.json ---------------------------------------------------------------------------------------
HOSTILE_HEALTH = {
    "healthy with failing a dict": {"generated_at": NOW, "agent": {"healthy": True, "failing": {"gpu.xid": 1}}},
    "healthy with failing a string": {"generated_at": NOW, "agent": {"healthy": True, "failing": "gpu.xid[gpu0]"}},
    "healthy with failing [null]": {"generated_at": NOW, "agent": {"healthy": True, "failing": [None]}},
    "healthy as 1": {"generated_at": NOW, "agent": {"healthy": 1, "failing": []}},
    "healthy as 'true'": {"generated_at": NOW, "agent": {"healthy": "true", "failing": []}},
    "healthy at the top only": {"generated_at": NOW, "healthy": True},
    "generated_at a bool": {"generated_at": True, "agent": {"healthy": True, "failing": []}},
    "generated_at a string": {"generated_at": str(NOW), "agent": {"healthy": True, "failing": []}},
    "generated_at negative": {"generated_at": -NOW, "agent": {"healthy": True, "failing": []}},
}
HOSTILE_HEALTH_RAW = {
    "duplicate agent, last healthy": b'{"generated_at": %d, "agent": {"healthy": false, "failing": '
                                     b'[{"id": "gpu.xid", "target": "gpu0", "status": "fail", "message": "x"}]}, '
                                     b'"agent": {"healthy": true, "failing": []}}' % NOW,
    "duplicate healthy, last true": b'{"generated_at": %d, "agent": {"healthy": false, "healthy": true, "failing": []}}' % NOW,
    "duplicate failing, last empty": b'{"generated_at": %d, "agent": {"healthy": true, "failing": '
                                     b'[{"id": "gpu.xid", "target": "gpu0", "status": "fail", "message": "x"}], '
                                     b'"failing": []}}' % NOW,
    "NaN generated_at": b'{"generated_at": NaN, "agent": {"healthy": true, "failing": []}}',
    "healthy, failing checks in checks[]": json.dumps({
        "generated_at": NOW, "healthy": False,
        "checks": [{"id": "gpu.xid", "target": "gpu0", "status": "fail", "message": "Xid 79"}],
        "agent": {"healthy": True, "failing": [{"id": "gpu.xid", "target": "gpu0", "status": "fail",
                                                  "message": "Xid 79"}]}}).encode(),
    "trailing second document": b'{"generated_at": %d, "agent": {"healthy": false, "failing": []}}'
                                b'{"generated_at": %d, "agent": {"healthy": true, "failing": []}}' % (NOW, NOW),
}


def _raw(value):
    return value if isinstance(value, bytes) else json.dumps(value).encode()


ALL_HEALTH = dict((name, _raw(doc)) for name, doc in HOSTILE_HEALTH.items())
ALL_HEALTH.update(HOSTILE_HEALTH_RAW)


def show(state="IDLE", reason=None):
    line = "NodeName=dgx-1 Arch=x86_64 State=%s Partitions=gpu" % state
    return line + (" Reason=%s [root@2025-11-20T08:00:00]" % reason if reason else "")


@pytest.mark.parametrize("raw", list(ALL_HEALTH.values()), ids=list(ALL_HEALTH))
def test_a_hostile_health_json_is_never_healthy_anywhere(tmp_path, capsys, monkeypatch, raw):
    runner = ScriptedRunner({("scontrol", "show", "node", "dgx-1", "-o"): (
        0, show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"), ""), "scontrol": (0, "", "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("dgx-1", runner)))
    (tmp_path / "health.json").write_bytes(raw)
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}, now=NOW) == 0
    assert not [call for call in runner.calls if "State=RESUME" in call], runner.calls
    (tmp_path / "health.json").write_bytes(raw)
    (tmp_path / "agent.json").write_text(json.dumps({"state_dir": str(tmp_path)}))
    code = agent.main(["--npd", str(tmp_path / "agent.json")])
    assert code != agent.NPD_OK, capsys.readouterr().out
    import base64

    check = agent_health_check({"content": base64.b64encode(raw).decode(), "encoding": "base64"}, now=NOW)
    assert check["status"] == "fail", check


def test_a_health_json_the_reader_may_not_read_is_left_in_place_and_never_healthy(tmp_path, monkeypatch, capsys):
    (tmp_path / "health.json").write_text(json.dumps({"generated_at": NOW, "agent": {"healthy": True, "failing": []}}))
    (tmp_path / "agent.json").write_text(json.dumps({"state_dir": str(tmp_path)}))
    path = str(tmp_path / "health.json")
    real_open = open

    def refuse(name, *args, **kwargs):
        if str(name) == path:
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    real_os_open = os.open

    def refuse_os(name, *args, **kwargs):  # the readers open with os.open (O_NONBLOCK, O_NOFOLLOW)
        if str(name) == path:
            raise PermissionError(13, "Permission denied", str(name))
        return real_os_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    monkeypatch.setattr(os, "open", refuse_os)
    code = agent.main(["--npd", str(tmp_path / "agent.json")])
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert code == agent.NPD_UNKNOWN and str(tmp_path)[:20] in out  # the line is cut to 80 characters
    assert os.path.exists(path) and not [n for n in os.listdir(str(tmp_path)) if ".damaged-" in n]


# -- agent.json -----------------------------------------------------------------------------------------
AGENT_JSON = {
    "duplicate state_dir": b'{"state_dir": "/a", "state_dir": "/b"}',
    "NaN interval": b'{"interval": NaN}',
    "Infinity interval": b'{"interval": Infinity}',
    "not UTF-8": b'{"node_name": "\xff"}',
    "nested": b"[" * 10000 + b"]" * 10000,
    "empty": b"",
    "trailing garbage": b'{"node_name": "a"} x',
}


@pytest.mark.parametrize("raw", list(AGENT_JSON.values()), ids=list(AGENT_JSON))
def test_a_hostile_agent_json_is_named_and_never_set_aside(tmp_path, raw):
    path = tmp_path / "agent.json"
    path.write_bytes(raw)
    with pytest.raises(agent.AgentError) as caught:
        load_config(str(path))
    assert str(path) in str(caught.value)
    assert path.read_bytes() == raw and os.listdir(str(tmp_path)) == ["agent.json"]


def test_a_hostile_agent_json_runs_no_cycle_and_returns_0(tmp_path, capsys):
    state = tmp_path / "state"
    state.mkdir()
    path = tmp_path / "agent.json"
    path.write_bytes(b'{"state_dir": "%s", "state_dir": "%s"}' % (str(state).encode(), str(state).encode()))
    assert agent.main([str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    assert not (state / "health.json").exists() and path.exists()


# -- two agents at once on one state dir ------------------------------------------------------------
def test_two_agents_on_one_state_dir_never_damage_each_others_records(tmp_path):
    """Two agents started at once (a unit started twice, a manual run beside the service): every
    write is atomic with its own temporary, so no reader ever finds a damaged record and no
    temporary is left behind."""
    one, lines_one, _ = make_agent(tmp_path)
    two, lines_two, _ = make_agent(tmp_path)
    errors = []

    def run(instance):
        try:
            for _ in range(8):
                instance.cycle()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(instance,)) for instance in (one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    names = os.listdir(str(tmp_path / "state"))
    assert not [n for n in names if ".damaged-" in n], names
    assert sorted(names) == ["agent-state.json", "health.json"], names
    agent_state.parse_state((tmp_path / "state" / "agent-state.json").read_bytes())
    assert agent_state.parse_health((tmp_path / "state" / "health.json").read_bytes())["agent"]["healthy"] is True
    assert not [line for line in lines_one + lines_two if "damaged" in line]


def test_two_event_sources_saving_at_once_leave_a_readable_seq_file(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    boot = tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    log = tmp_path / "kmsg"
    log.write_bytes(b"".join(record(seq, NOISE) for seq in range(0, 5)))
    state_seq = {"seq": 0, "boot_id": BOOT_A}
    (state / "kmsg-seq.json").write_text(json.dumps(state_seq))
    pair = [agent_events.EventSources({"kmsg": str(log), "nvml": False}, str(state), 60, boot_id_path=str(boot))
            for _ in range(2)]
    errors = []

    def run(sources, offset):
        try:
            for seq in range(5, 200):
                with open(str(log), "ab") as out:
                    out.write(record(seq * 2 + offset, NOISE))
                sources.drain()
                sources.save()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(sources, index)) for index, sources in enumerate(pair)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for sources in pair:
        sources.close()
    assert not errors
    stored, problem = agent_events.read_seq(str(state))
    assert problem is None and stored is not None
    assert sorted(os.listdir(str(state))) == ["kmsg-seq.json"]


# -- the seq reader under any bytes ------------------------------------------------------------------
SEQ_DOCS = st.one_of(
    st.fixed_dictionaries({"seq": st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True), st.booleans(),
                                            st.none(), st.text(max_size=5)),
                           "boot_id": st.one_of(st.just(BOOT_A), st.just(BOOT_B), st.text(max_size=40), st.none(),
                                                st.integers())},
                          optional={"extra": st.integers()}),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=10))


@settings(max_examples=100, deadline=None)
@given(doc=SEQ_DOCS, garble=st.sampled_from([b"", b"", b"}", b"\xff", b"\x00"]))
def test_any_seq_file_content_never_hides_this_boots_xid(tmp_path_factory, doc, garble):
    """The one outcome that must never happen: a record of this boot that holds an XID is not
    returned by the first drain. Any stored number at or above 1 of this boot would skip it, so
    only well-formed numbers of this boot at or beyond 1 and within the ring may resume."""
    base = tmp_path_factory.mktemp("seq")
    state = base / "state"
    state.mkdir()
    boot = base / "boot_id"
    boot.write_text(BOOT_A + "\n")
    log = base / "kmsg"
    log.write_bytes(b"".join(record(seq, XID if seq == 1 else NOISE) for seq in range(0, 3)))
    raw = json.dumps(doc, allow_nan=True).encode() + garble
    (state / "kmsg-seq.json").write_bytes(raw)
    sources = agent_events.EventSources({"kmsg": str(log), "nvml": False}, str(state), 60, boot_id_path=str(boot))
    try:
        kept = sources.drain()
    finally:
        sources.close()
    legit = (not garble.strip(b" ") and isinstance(doc, dict) and set(doc) == {"seq", "boot_id"}
             and doc["boot_id"] == BOOT_A and type(doc["seq"]) is int and 1 <= doc["seq"] <= 2)
    if not legit:
        assert kept == [XID], (raw, sources.status)
    elif set(doc) == {"seq", "boot_id"}:
        assert kept == [], (raw, sources.status)


def test_clock_is_not_used_by_the_seq_record(tmp_path):
    """A set-aside under a clock far ahead or never set still keeps the damaged content."""
    path = tmp_path / "kmsg-seq.json"
    for now in (-1.0, 0.0, 4102444800.0 * 10, float("nan")):
        path.write_text("{x")
        try:
            target, _reason = state_files.set_aside(str(path), "damaged", now=now)
        except Exception as exc:  # noqa: BLE001
            pytest.fail("set_aside(now=%r) raised %r" % (now, exc))
        assert open(target).read() == "{x"
    assert clock  # imported: the one rule of time


def test_an_xid_split_across_two_records_still_triggers(fifo):
    """A driver line cut in two records (a KERN_CONT the kernel did not merge): the part holding
    'NVRM: Xid' is a record that matters."""
    watcher = agent_events.KmsgWatcher(fifo.path)
    try:
        fifo.write(record(1, "NVRM: Xid (PCI:0000:1b:00): 79, pid=0,"))
        fifo.write(record(2, "name=?, GPU has fallen off the bus."))
        fifo.write(record(3, NOISE))
        kept = watcher.drain()
        assert any("NVRM: Xid" in line for line in kept), kept
    finally:
        watcher.close()


def test_a_restart_between_failing_cycles_keeps_counting(tmp_path):
    """The service restarted (a new process) between the 2nd and 3rd failing cycle: the count read
    back from agent-state.json goes on, the node is unhealthy in the 3rd failing cycle, not later."""
    first, _lines, _box = make_agent(tmp_path, scenario="h100-temperature-slowdown")
    first.cycle()
    first.cycle()
    assert health(tmp_path)["agent"]["healthy"] is True
    (tmp_path / "state" / ".agent-state.json.77.cafe").write_text('{"checks": {}, "healthy": true}')
    second, _lines, _box = make_agent(tmp_path, scenario="h100-temperature-slowdown")
    second.cycle()
    assert health(tmp_path)["agent"]["healthy"] is False
    assert health(tmp_path)["cycle"] == 3


@pytest.mark.parametrize("now", [0.0, -1e12, 1e300, 4102444800.0 * 3])
def test_a_clock_never_set_or_far_ahead_still_publishes_and_sets_damage_aside(tmp_path, now):
    instance, lines, box = make_agent(tmp_path, scenario="h100-gpu-is-lost", now=[now])
    (tmp_path / "state" / "agent-state.json").write_text("{broken")
    assert instance.cycle() == 0
    assert health(tmp_path)["agent"]["healthy"] is False
    aside = [n for n in os.listdir(str(tmp_path / "state")) if n.startswith("agent-state.json.damaged-")]
    assert len(aside) == 1 and (tmp_path / "state" / aside[0]).read_text() == "{broken"


@pytest.mark.parametrize("recover_after", [1, 4])
def test_a_damaged_state_holds_a_healthy_node_exactly_recover_after_minus_one_cycles(tmp_path, recover_after):
    """"a healthy node is published unhealthy for recover_after - 1 cycles" (never healthy sooner,
    never held longer), with recover_after from the configuration."""
    instance, lines, box = make_agent(tmp_path, hysteresis={"recover_after": recover_after})
    instance.cycle()
    (tmp_path / "state" / "agent-state.json").write_bytes(b"\x00" * 64)
    verdicts = []
    for _ in range(recover_after + 1):
        instance.cycle()
        verdicts.append(health(tmp_path)["agent"]["healthy"])
    assert verdicts == [False] * (recover_after - 1) + [True] * 2, verdicts


def test_a_health_json_that_cannot_be_replaced_never_stops_the_cycle(tmp_path):
    """health.json is a non-empty directory (the rename onto it fails): journalled, the cycle
    returns 0 and agent-state.json is still written."""
    instance, lines, box = make_agent(tmp_path, scenario="h100-gpu-is-lost")
    blocker = tmp_path / "state" / "health.json"
    blocker.mkdir()
    (blocker / "x").write_text("x")
    assert instance.cycle() == 0
    assert any("health.json not written" in line for line in lines), lines
    assert agent_state_doc(tmp_path)["healthy"] is False


def test_a_seq_file_that_cannot_be_replaced_never_raises_and_is_read_safely_next_start(disk, fifo):
    """kmsg-seq.json turned into a non-empty directory while the agent runs: save() does not raise;
    the next start sets the directory aside and reads the log from its start."""
    disk.boot.write_text(BOOT_A + "\n")
    sources = agent_events.EventSources({"kmsg": fifo.path, "nvml": False}, str(disk.state), 60,
                                        boot_id_path=str(disk.boot))
    try:
        fifo.write(record(5, NOISE))
        fifo.write(record(6, NOISE))
        sources.drain()
        blocker = disk.state / "kmsg-seq.json"
        blocker.mkdir()
        (blocker / "x").write_text("x")
        sources.save()
    finally:
        sources.close()
    disk.ring(NOISE, XID, NOISE)
    again = disk.sources()
    status = again.status["kmsg"]
    try:
        assert again.drain() == [XID], status
        assert "kmsg-seq.json" in status
    finally:
        again.close()


def test_after_a_reboot_with_no_boot_id_a_fatal_xid_is_isolated_by_the_first_event_read(tmp_path, monkeypatch):
    """The full resident loop (tests/unit/test_agent_restarts.py's harness): boot A left
    kmsg-seq.json at 5000; after the reboot the boot id file is missing. Nothing of this boot is
    skipped: the XID logged after the first cycle is isolated (health.json unhealthy on gpu.xid,
    the Slurm drain) by the cycle the first event read triggered."""
    import test_agent_restarts as restarts

    node = restarts.Node(tmp_path)
    monkeypatch.setattr(agent_events, "BOOT_ID", str(node.boot_id), raising=False)
    try:
        restarts.before_reboot(node)
        node.boot(restarts.BOOT_B, first_seq=0, since_boot=3)
        os.unlink(str(node.boot_id))
        loop, harness, calls, lines, counters = restarts.run_agent(node, 2, after_first=lambda: node.log_kernel(XID))
        restarts.assert_isolated_by_the_first_event(node, loop, harness, calls)
    finally:
        node.shutdown()


def test_records_lost_while_the_agent_was_down_skip_nothing_newer(disk):
    """The same boot, stored 2, but the ring now starts at 10 (3..9 overwritten while down): the
    XID at 11 is read."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE, first=10)
    disk.seq_file({"seq": 2, "boot_id": BOOT_A})
    sources = disk.sources()
    try:
        assert sources.drain() == [XID]
    finally:
        sources.close()


def _race_on_damaged_files(base):
    """Two agents on one state dir meet a damaged agent-state.json and kmsg-seq.json at once;
    returns (cycle results, errors, what each event source's first drain kept)."""
    one, _lines_one, _ = make_agent(base, scenario="h100-gpu-is-lost")
    two, _lines_two, _ = make_agent(base, scenario="h100-gpu-is-lost")
    (base / "state" / "agent-state.json").write_text("{damaged")
    (base / "state" / "kmsg-seq.json").write_text("{damaged")
    boot = base / "boot_id"
    boot.write_text(BOOT_A + "\n")
    log = base / "kmsg"
    log.write_bytes(b"".join(record(seq, XID if seq == 1 else NOISE) for seq in range(3)))
    barrier = threading.Barrier(2)
    results, errors, kept = [], [], []

    def run(instance):
        try:
            barrier.wait(5)
            sources = agent_events.EventSources({"kmsg": str(log), "nvml": False}, str(base / "state"), 60,
                                                boot_id_path=str(boot))
            kept.append(sources.drain())
            sources.close()
            results.append(instance.cycle())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(instance,)) for instance in (one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results, errors, kept


def test_two_agents_finding_the_same_damaged_files_at_once_both_go_on(tmp_path):
    """Both agents read the damaged agent-state.json and kmsg-seq.json at the same moment and both
    set them aside: neither crashes, the damaged content is kept once, both publish unhealthy."""
    for attempt in range(5):
        base = tmp_path / ("try%d" % attempt)
        base.mkdir()
        results, errors, kept = _race_on_damaged_files(base)
        assert not errors and results == [0, 0], errors
        assert [XID] in kept and all(batch in ([XID], []) for batch in kept), kept  # see the report: [] is possible
        names = os.listdir(str(base / "state"))
        for prefix in ("agent-state.json.damaged-", "kmsg-seq.json.damaged-"):
            aside = [n for n in names if n.startswith(prefix)]
            assert len(aside) == 1 and (base / "state" / aside[0]).read_text() == "{damaged", names
        assert agent_state.parse_health((base / "state" / "health.json").read_bytes())["agent"]["healthy"] is False


def test_a_result_written_under_an_absurd_clock_is_never_healthy_to_any_reader(tmp_path):
    instance, lines, box = make_agent(tmp_path, now=[1e300])
    assert instance.cycle() == 0
    raw = (tmp_path / "state" / "health.json").read_bytes()
    try:
        result = agent_state.parse_health(raw)
    except records.RecordError:
        result = None
    assert agent.npd_status(result, NOW)[0] != agent.NPD_OK
    import base64

    assert agent_health_check({"content": base64.b64encode(raw).decode(), "encoding": "base64"}, now=NOW)["status"] == "fail"


@pytest.mark.parametrize("message", [b"NVRM: Xid (PCI:0000:1b:00): 79, \xff\xfe bad bytes",
                                     b"NVRM: Xid (PCI:0000:1b:00): 79\x00, nul"])
def test_an_xid_record_with_undecodable_bytes_still_triggers(fifo, message):
    watcher = agent_events.KmsgWatcher(fifo.path)
    try:
        fifo.write(b"3,1,17,-;" + message + b"\n")
        fifo.write(record(2, NOISE))
        kept = watcher.drain()
        assert any("NVRM: Xid" in line for line in kept), kept
    finally:
        watcher.close()


def test_the_writer_replaces_a_symlink_never_writes_through_it(tmp_path, disk):
    """health.json, agent-state.json and kmsg-seq.json symlinked to files elsewhere: the atomic
    write replaces the link; the files they pointed to are untouched."""
    instance, lines, box = make_agent(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("health.json", "agent-state.json"):
        (outside / name).write_text("precious")
        os.symlink(str(outside / name), str(tmp_path / "state" / name))
    instance.cycle()
    for name in ("health.json", "agent-state.json"):
        assert (outside / name).read_text() == "precious"
        assert not os.path.islink(str(tmp_path / "state" / name))
    disk.boot.write_text(BOOT_A + "\n")
    (outside / "kmsg-seq.json").write_text("precious")
    os.symlink(str(outside / "kmsg-seq.json"), str(disk.state / "kmsg-seq.json"))
    disk.ring(NOISE, XID)
    sources = disk.sources()
    try:
        sources.drain()
        sources.save()
    finally:
        sources.close()
    assert (outside / "kmsg-seq.json").read_text() == "precious"


# -- found failing by the red team, fixed (state_files.open_regular: O_NONBLOCK, O_NOFOLLOW, regular
# files only; agent_events keeps the highest ASCII-decimal sequence number) ----------------------------
def test_a_seq_file_that_is_a_fifo_does_not_hang_the_agent(disk):
    """A FIFO in place of kmsg-seq.json (no writer): open() for reading blocks forever unless the
    reader refuses it; the start must not hang, and nothing is seen."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    fifo = str(disk.state / "kmsg-seq.json")
    os.mkfifo(fifo)
    finished, box = in_thread(disk.sources, timeout=5, unblock=lambda: open_fifo_writer_and_close(fifo))
    assert finished, "EventSources hung opening a FIFO named kmsg-seq.json"
    sources = box["result"]
    status = sources.status["kmsg"]
    try:
        assert sources.drain() == [XID], status
        assert "kmsg-seq.json" in status, status
    finally:
        sources.close()


def test_a_dangling_seq_symlink_is_not_a_first_start(disk):
    """A dangling symlink named kmsg-seq.json exists (it is not "no file"): a first start would
    read the log from its end and lose this boot's XID; the safe reading is from its start."""
    disk.boot.write_text(BOOT_A + "\n")
    disk.ring(NOISE, XID, NOISE)
    os.symlink(str(disk.tmp / "nowhere" / "kmsg-seq.json"), str(disk.state / "kmsg-seq.json"))
    sources = disk.sources()
    try:
        assert sources.drain() == [XID], sources.status
    finally:
        sources.close()


def test_a_malformed_sequence_number_never_moves_the_stored_number_back(tmp_path, fifo):
    """After records 10..12, a record with a negative or garbled number: the number saved stays
    12 (a restart then resumes after 12, not earlier nor beyond)."""
    state = tmp_path / "state"
    state.mkdir()
    boot = tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    sources = agent_events.EventSources({"kmsg": fifo.path, "nvml": False}, str(state), 60, boot_id_path=str(boot))
    try:
        for seq in (10, 11, 12):
            fifo.write(record(seq, NOISE))
        fifo.write(b"3,-1,17,-;" + NOISE.encode() + b"\n")
        fifo.write(b"3,xyz,17,-;" + NOISE.encode() + b"\n")
        sources.drain()
        sources.save()
    finally:
        sources.close()
    stored = json.loads((state / "kmsg-seq.json").read_text())
    assert stored == {"seq": 12, "boot_id": BOOT_A}


def test_a_state_file_that_is_a_fifo_does_not_hang_a_cycle(tmp_path):
    instance, lines, box = make_agent(tmp_path)
    fifo = str(tmp_path / "state" / "agent-state.json")
    os.mkfifo(fifo)
    finished, result = in_thread(instance.cycle, timeout=10, unblock=lambda: open_fifo_writer_and_close(fifo))
    assert finished, "a cycle hung opening a FIFO named agent-state.json"
    assert health(tmp_path)["cycle"] == 1


def test_a_health_json_fifo_does_not_hang_npd_or_the_slurm_check(tmp_path, monkeypatch, capsys):
    runner = ScriptedRunner({"scontrol": (0, "", "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("dgx-1", runner)))
    fifo = str(tmp_path / "health.json")
    os.mkfifo(fifo)
    (tmp_path / "agent.json").write_text(json.dumps({"state_dir": str(tmp_path)}))
    finished, box = in_thread(lambda: agent.main(["--npd", str(tmp_path / "agent.json")]), timeout=5,
                              unblock=lambda: open_fifo_writer_and_close(fifo))
    assert finished, "--npd hung opening a FIFO named health.json"
    assert box.get("result") == agent.NPD_UNKNOWN
    if not os.path.exists(fifo):  # set aside by the first reader: a FIFO again
        os.mkfifo(fifo)
    finished, box = in_thread(lambda: agent.slurm_health_check({"state_dir": str(tmp_path)}, now=NOW), timeout=5,
                              unblock=lambda: open_fifo_writer_and_close(fifo))
    assert finished, "--slurm-health-check hung opening a FIFO named health.json"
    assert not [call for call in runner.calls if "State=RESUME" in call]


def test_an_agent_json_fifo_does_not_hang_the_agent(tmp_path, capsys):
    fifo = str(tmp_path / "agent.json")
    os.mkfifo(fifo)
    finished, box = in_thread(lambda: agent.main([fifo]), timeout=5, unblock=lambda: open_fifo_writer_and_close(fifo))
    assert finished, "the agent hung opening a FIFO named agent.json"
    assert box.get("result") == 0 and os.path.exists(fifo)
