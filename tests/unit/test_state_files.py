"""The one writer of gpufleet's state files (module_utils/core/state_files.py, module state_file): the
agent and the roles write through it; atomic, mode and owner set, markers shared by roles."""

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import state_files
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure


class FakeModule(object):
    def __init__(self, check_mode=False, diff=False, **params):
        self.params = dict({"content": None, "marker_owner": None, "marker_text": "", "state": "present",
                            "mode": "0644", "owner": None, "group": None}, **params)
        self.check_mode = check_mode
        self._diff = diff


MARKERS = [
    # (file before, owner, text, file after)
    (None, "nvidia_driver", "driver 580 installed", "nvidia_driver: driver 580 installed\n"),
    ("rdma_stack: ofed\n", "nvidia_driver", "driver", "rdma_stack: ofed\nnvidia_driver: driver\n"),
    ("nvidia_driver: old\nrdma_stack: ofed\n", "nvidia_driver", "new", "nvidia_driver: new\nrdma_stack: ofed\n"),
    ("nvidia_driver: old\nrdma_stack: ofed\n", "nvidia_driver", "", "rdma_stack: ofed\n"),
    ("nvidia_driver: old\n", "nvidia_driver", "", None),  # no line left: the file goes
    (None, "nvidia_driver", "", None),
    (None, "node_tuning", "two\nlines", "node_tuning: two lines\n"),
    ("nvidia_driver: a\nnvidia_driver: b\n", "nvidia_driver", "c", "nvidia_driver: c\n"),
]


@pytest.mark.parametrize("before,owner,text,after", MARKERS)
def test_marker_lines(tmp_path, before, owner, text, after):
    path = tmp_path / "gpufleet" / "reboot-required"
    if before is not None:
        path.parent.mkdir()
        path.write_text(before)
    result = state_files.state_file_work(FakeModule(path=str(path), marker_owner=owner, marker_text=text))
    assert result["changed"] == (before != after)
    assert (path.read_text() if path.exists() else None) == after
    assert not state_files.state_file_work(FakeModule(path=str(path), marker_owner=owner, marker_text=text))["changed"]


def test_content_mode_and_idempotence(tmp_path):
    path = tmp_path / "role-state.json"
    module = FakeModule(path=str(path), content='{"roles": {}}\n', mode="0600", owner="0", group="0")
    assert state_files.state_file_work(module)["changed"]
    assert oct(os.stat(str(path)).st_mode & 0o777) == "0o600" and path.read_text() == '{"roles": {}}\n'
    assert not state_files.state_file_work(module)["changed"]
    module.params["mode"] = "0644"
    assert state_files.state_file_work(module)["changed"]  # a mode drift is repaired
    assert oct(os.stat(str(path)).st_mode & 0o777) == "0o644"
    assert os.listdir(str(tmp_path)) == ["role-state.json"]  # no temporary left


def test_check_mode_writes_nothing_and_diff_shows_the_change(tmp_path):
    path = tmp_path / "upgrade-state.json"
    path.write_text("old\n")
    result = state_files.state_file_work(FakeModule(check_mode=True, diff=True, path=str(path), content="new\n"))
    assert result["changed"] and result["diff"]["before"] == "old\n" and result["diff"]["after"] == "new\n"
    assert path.read_text() == "old\n"


@pytest.mark.parametrize("params,message", [
    ({"path": "relative/file", "content": "x"}, "option path: relative/file is not an absolute path"),
    ({"content": "x", "mode": "rw-r--r--"}, "option mode: 'rw-r--r--' is not an octal file mode"),
    ({"content": "x", "owner": "no-such-user-gpufleet"}, "option owner: no user named 'no-such-user-gpufleet'"),
    ({}, "one of content or marker_owner is required"),
])
def test_bad_input_names_the_option(tmp_path, params, message):
    params = dict({"path": str(tmp_path / "f")}, **params)
    with pytest.raises(ModuleFailure, match=message):
        state_files.state_file_work(FakeModule(**params))
    assert not (tmp_path / "f").exists()


def test_a_full_disk_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "health.json"
    path.write_text("old")

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_files.os, "fsync", full)
    with pytest.raises(ModuleFailure, match="not written: No space left on device"):
        state_files.state_file_work(FakeModule(path=str(path), content="new"))
    assert path.read_text() == "old" and os.listdir(str(tmp_path)) == ["health.json"]


# -- the reader side: read_record, set_aside ---------------------------------------------------------
def _parse(raw, record):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records

    return records.mapping(records.load_json(raw, record), record, required=("seq",))


def test_read_record_absent_readable_and_damaged(tmp_path):
    path = tmp_path / "kmsg-seq.json"
    assert state_files.read_record(str(path), _parse) == (None, None)  # absent: no record, nothing said
    path.write_text('{"seq": 4}')
    assert state_files.read_record(str(path), _parse) == ({"seq": 4}, None)
    path.write_text('{"seq": 4, "seq": 5}')
    value, problem = state_files.read_record(str(path), _parse, now=1700000000)
    assert value is None and problem.startswith("%s is damaged (not JSON (duplicate key 'seq')" % path)
    assert problem.endswith("set aside as %s.damaged-20231114T221320Z" % path)
    assert not path.exists() and (tmp_path / "kmsg-seq.json.damaged-20231114T221320Z").read_text() == '{"seq": 4, "seq": 5}'


def test_read_record_reads_no_more_than_asked(tmp_path):
    path = tmp_path / "health.json"
    path.write_text('{"seq": 1}' + " " * 10000)
    value, problem = state_files.read_record(str(path), _parse, max_bytes=100)
    assert value is None and "more than" in problem  # the reader refused what was beyond the bound


def test_a_second_damaged_file_in_the_same_second_does_not_replace_the_first(tmp_path):
    path = tmp_path / "agent-state.json"
    for content in ("first", "second", "third"):
        path.write_text(content)
        target, _reason = state_files.set_aside(str(path), "damaged", now=1700000000)
        assert open(target).read() == content
    assert sorted(os.listdir(str(tmp_path))) == ["agent-state.json.damaged-20231114T221320Z",
                                                 "agent-state.json.damaged-20231114T221320Z.1",
                                                 "agent-state.json.damaged-20231114T221320Z.2"]


def test_set_aside_under_a_clock_no_calendar_holds(tmp_path):
    path = tmp_path / "agent-state.json"
    path.write_text("x")
    target, _reason = state_files.set_aside(str(path), "damaged", now=1e300)
    assert target == "%s.damaged-unknown-time" % path and open(target).read() == "x"


def test_a_file_we_may_not_read_is_named_and_left_in_place(tmp_path, monkeypatch):
    path = tmp_path / "health.json"
    path.write_text("{}")
    real_open = os.open

    def refuse(name, *args, **kwargs):  # read_record opens with os.open (O_NONBLOCK, O_NOFOLLOW)
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    value, problem = state_files.read_record(str(path), _parse)
    monkeypatch.undo()
    assert value is None and problem == "%s is unreadable: Permission denied (left in place)" % path
    assert path.read_text() == "{}"


def test_an_unreadable_file_is_set_aside(tmp_path):
    path = tmp_path / "agent-state.json"
    path.mkdir()  # EISDIR
    value, problem = state_files.read_record(str(path), _parse, now=1700000000)
    assert value is None and "unreadable: Is a directory" in problem and "set aside as" in problem
    assert not path.exists()


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "link to a record", "directory"])
def test_only_a_regular_file_is_a_record_and_nothing_blocks(tmp_path, kind):
    """A FIFO in a record's place is refused without waiting for a writer (it blocked the agent for
    good); a link, even one that points nowhere or to a good record, is not a record (set aside)."""
    path = tmp_path / "kmsg-seq.json"
    if kind == "fifo":
        os.mkfifo(str(path))
    elif kind == "dangling link":
        os.symlink(str(tmp_path / "nowhere"), str(path))
    elif kind == "link to a record":
        (tmp_path / "good.json").write_text("{}")
        os.symlink(str(tmp_path / "good.json"), str(path))
    else:
        path.mkdir()
    value, problem = state_files.read_record(str(path), _parse)
    assert value is None and problem.startswith("%s is damaged" % path) and "set aside" in problem
    assert not os.path.lexists(str(path))


def test_the_module_refuses_a_fifo_in_the_files_place_without_waiting(tmp_path):
    """A FIFO where a state file should be: a named module failure, not a hang nor a traceback."""
    path = tmp_path / "reboot-required"
    os.mkfifo(str(path))
    with pytest.raises(ModuleFailure, match="option path: %s cannot be read as a file: not a regular file" % path):
        state_files.state_file_work(FakeModule(path=str(path), content="x\n"))
    assert os.path.exists(str(path)) and not os.path.isfile(str(path))


def test_a_record_written_between_the_read_and_the_set_aside_is_left_in_place(tmp_path):
    """Two agents on one state dir (test_redteam_agent, _race_on_damaged_files): one reads the damaged
    kmsg-seq.json; before it sets it aside the other has set it aside and written its new record. The
    rename by name moved that new record aside as damaged (held here between the read and the rename
    with Events). The file set aside is the one read, or none."""
    import threading

    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

    path = str(tmp_path / "kmsg-seq.json")
    with open(path, "w") as out:
        out.write("{damaged")
    read, written = threading.Event(), threading.Event()

    def parse(raw, record):
        read.set()
        assert written.wait(30)
        raise RecordError(record, "not JSON")

    box = {}
    reader = threading.Thread(target=lambda: box.update(answer=state_files.read_record(path, parse)))
    reader.start()
    assert read.wait(30)
    state_files.atomic_write(path, '{"seq": 2, "boot_id": "b"}')  # the other agent's new record
    written.set()
    reader.join(30)
    value, problem = box["answer"]
    assert value is None and "kmsg-seq.json" in problem and "left in place" in problem, problem
    with open(path) as handle:
        assert handle.read() == '{"seq": 2, "boot_id": "b"}'
    assert sorted(os.listdir(str(tmp_path))) == ["kmsg-seq.json"]
    # the damaged file read, still in place when its reader sets it aside: set aside as before
    with open(path, "w") as out:
        out.write("{damaged")
    value, problem = state_files.read_record(path, lambda raw, record: (_ for _ in ()).throw(RecordError(record, "x")))
    aside = [name for name in os.listdir(str(tmp_path)) if name.startswith("kmsg-seq.json.damaged-")]
    assert value is None and len(aside) == 1 and "set aside as" in problem and not os.path.exists(path), problem
    with open(str(tmp_path / aside[0])) as handle:
        assert handle.read() == "{damaged"
