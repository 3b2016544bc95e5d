"""The one writer of gpufleet's state files (module_utils/state_files.py, module state_file): the
agent and the roles write through it; atomic, mode and owner set, markers shared by roles."""

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import state_files
from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure


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
