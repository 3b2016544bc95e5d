"""roles/etcd_snapshot/files/gpufleet-etcd-snapshot: the scheduled snapshot's script, run with a
stand-in snapshot command (sh writing the file it is given) instead of etcdctl."""

import os
import shutil
import subprocess

import pytest
from conftest import REPO

SCRIPT = os.path.join(REPO, "roles", "etcd_snapshot", "files", "gpufleet-etcd-snapshot")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")


def run(directory, keep, *command):
    return subprocess.run([SCRIPT, str(directory), str(keep), "--"] + list(command),
                          capture_output=True, text=True, timeout=30, check=False)


def scheduled(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("etcd-scheduled-"))


WRITE = ["sh", "-c", 'echo snapshot > "$0"']


def test_snapshot_saved_and_older_ones_rotated(tmp_path):
    old = ["etcd-scheduled-20260101T030000Z.db", "etcd-scheduled-20260102T030000Z.db",
           "etcd-scheduled-20260103T030000Z.db"]
    for name in old:
        (tmp_path / name).write_text("old")
    (tmp_path / "etcd-20260101T000000Z-ab12.db").write_text("upgrade")  # a rolling upgrade's: kept
    result = run(tmp_path, 2, *WRITE)
    assert result.returncode == 0, result.stderr
    names = scheduled(tmp_path)
    assert len(names) == 2 and names[0] == old[-1] and names[1] > old[-1]
    assert (tmp_path / names[1]).read_text() == "snapshot\n"
    assert (tmp_path / "etcd-20260101T000000Z-ab12.db").exists()
    assert "deleted" in result.stdout and oct(os.stat(tmp_path).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("command", [["sh", "-c", "exit 3"], ["sh", "-c", ': > "$0"'], ["true"]])
def test_failed_or_empty_snapshot_fails_and_deletes_nothing(tmp_path, command):
    (tmp_path / "etcd-scheduled-20260101T030000Z.db").write_text("old")
    result = run(tmp_path, 1, *command)
    assert result.returncode == 1
    assert scheduled(tmp_path) == ["etcd-scheduled-20260101T030000Z.db"]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".part")]


@pytest.mark.parametrize("keep", ["0", "x", "-1", ""])
def test_bad_keep_is_refused_naming_the_variable(tmp_path, keep):
    result = run(tmp_path, keep, *WRITE)
    assert result.returncode == 2 and "etcd_snapshot_keep" in result.stderr
    assert scheduled(tmp_path) == []


def test_usage_without_a_command(tmp_path):
    result = subprocess.run([SCRIPT, str(tmp_path), "3", "--"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "usage" in result.stderr
