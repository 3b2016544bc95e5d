"""roles/etcd_snapshot/files/gpufleet-etcd-snapshot: the snapshot script of the timer and of the
rolling upgrade's pre-upgrade snapshot, run with stand-in commands (sh copying a file) instead of
etcdctl. A stand-in snapshot has the layout of a real one: the database then the SHA-256 of the
database (32 bytes), which etcd's server appends to every snapshot it streams and which
`etcdutl snapshot restore` checks when the size modulo 512 is 32 (etcd-io/etcd,
etcdutl/snapshot/v3_snapshot.go saveDB: `hasHash := (off % 512) == sha256.Size`, "expected sha256").
The molecule scenario roles/etcd_snapshot/molecule/default runs the script against a real etcd
(Debian's etcd-server 3.4) and restores the snapshot it takes."""

import hashlib
import os
import shutil
import subprocess

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

SCRIPT = os.path.join(REPO, "roles", "etcd_snapshot", "files", "gpufleet-etcd-snapshot")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")

# The JSON of `etcdctl snapshot status -w json` as etcd-io/etcd etcdctl/README.md showed it before
# v3.6 (`{"hash":3474280699,"revision":3,"totalKey":3,"totalSize":24576}`), other numbers here; the
# molecule scenario parses Debian's etcdctl 3.4 output of the same command.
STATUS_JSON = '{"hash":3167489467,"revision":5,"totalKey":4,"totalSize":20480}'


def snapshot_bytes(database):
    """A snapshot as etcd streams it: the database, then its SHA-256."""
    return database + hashlib.sha256(database).digest()


def good_database():
    return bytes(range(256)) * 32  # 8192 bytes: two 4 KiB bolt pages' worth


def run(*args):
    return subprocess.run([SCRIPT] + [str(a) for a in args], capture_output=True, text=True, timeout=30,
                          check=False)


def scheduled(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("etcd-scheduled-"))


def parts(directory):
    return [name for name in os.listdir(directory) if name.endswith(".part")]


def copy_of(path):
    """A stand-in snapshot command: copies path to the file it is given (its last argument)."""
    return ["cp", str(path)]


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.snapshot"
    path.write_bytes(snapshot_bytes(good_database()))
    return path


def damaged_variants(tmp_path):
    data = snapshot_bytes(good_database())
    flipped = bytearray(data)
    flipped[5000] ^= 0x01
    variants = {
        "a flipped bit in the database": bytes(flipped),
        "a flipped bit in the hash": data[:-1] + bytes([data[-1] ^ 0x80]),
        "truncated by one byte": data[:-1],
        "without the hash (a copied member/snap/db)": data[:-32],
        "a 512-byte block appended": data + b"\0" * 512,
    }
    paths = {}
    for name, content in variants.items():
        path = tmp_path / ("damaged-%d.snapshot" % len(paths))
        path.write_bytes(content)
        paths[name] = path
    return paths


def test_scheduled_snapshot_saved_verified_and_older_ones_rotated(tmp_path, good):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    old = ["etcd-scheduled-20260101T030000Z.db", "etcd-scheduled-20260102T030000Z.db",
           "etcd-scheduled-20260103T030000Z.db"]
    for name in old:
        (snaps / name).write_bytes(snapshot_bytes(name.encode().ljust(1024, b"\0")))  # whole older snapshots
    (snaps / "etcd-20260101T000000Z-ab12.db").write_text("upgrade")  # a rolling upgrade's: kept
    result = run(snaps, 2, "--", *copy_of(good))
    assert result.returncode == 0, result.stderr
    names = scheduled(snaps)
    assert len(names) == 2 and names[0] == old[-1] and names[1] > old[-1]
    assert (snaps / names[1]).read_bytes() == good.read_bytes()
    assert (snaps / "etcd-20260101T000000Z-ab12.db").exists()
    digest = hashlib.sha256(good_database()).hexdigest()
    assert "saved and verified %s/%s: 8224 bytes, sha256 %s" % (snaps, names[1], digest) in result.stdout
    assert "deleted" in result.stdout and oct(os.stat(snaps).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("command", [["sh", "-c", "exit 3"], ["sh", "-c", ': > "$0"'], ["true"]])
def test_failed_or_empty_snapshot_fails_and_deletes_nothing(tmp_path, command):
    (tmp_path / "etcd-scheduled-20260101T030000Z.db").write_text("old")
    result = run(tmp_path, 1, "--", *command)
    assert result.returncode == 1
    assert scheduled(tmp_path) == ["etcd-scheduled-20260101T030000Z.db"]
    assert not parts(tmp_path)


def test_damaged_scheduled_snapshot_is_refused_and_deletes_nothing(tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    (snaps / "etcd-scheduled-20260101T030000Z.db").write_text("old")
    for name, path in damaged_variants(tmp_path).items():
        result = run(snaps, 1, "--", *copy_of(path))
        assert result.returncode == 1, name
        assert "is refused; nothing deleted" in result.stderr, (name, result.stderr)
        assert scheduled(snaps) == ["etcd-scheduled-20260101T030000Z.db"], name
        assert not parts(snaps), name


def test_verify_refuses_each_damage_naming_it(tmp_path, good):
    assert run("--verify", good).returncode == 0
    reasons = {
        "a flipped bit in the database": "is damaged: the SHA-256 of its database is",
        "a flipped bit in the hash": "is damaged: the SHA-256 of its database is",
        "truncated by one byte": "(8223 bytes) does not end in the SHA-256",
        "without the hash (a copied member/snap/db)": "size % 512 is 0, not 32",
        "a 512-byte block appended": "is damaged",
    }
    for name, path in damaged_variants(tmp_path).items():
        result = run("--verify", path)
        assert result.returncode == 1, name
        assert reasons[name] in result.stderr, (name, result.stderr)
        assert "verified" not in result.stdout


def test_verify_missing_and_empty(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert "no such snapshot" in run("--verify", tmp_path / "absent").stderr
    result = run("--verify", tmp_path / "empty")
    assert result.returncode == 1 and "is empty" in result.stderr


def status_args(script):
    """--status options for `sh -c SCRIPT` (the file becomes $0)."""
    return ["--status", "sh", "--status", "-c", "--status", script]


def test_status_command_checked_and_reported(good):
    result = run(*status_args("echo '%s'" % STATUS_JSON), "--verify", good)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(", revision 5, 4 keys")
    assert "sha256 %s" % hashlib.sha256(good_database()).hexdigest() in result.stdout


@pytest.mark.parametrize("script,reason", [
    ("echo 'Error: invalid database' >&2; exit 1", "failed (exit 1): Error: invalid database"),
    ("echo '| HASH | REVISION |'", "printed no revision (JSON status expected: -w json)"),
    ("echo '{\"hash\":1,\"revision\":5}'", "printed no totalKey"),
    ("echo '{\"hash\":1,\"revision\":0,\"totalKey\":0,\"totalSize\":0}'", "revision 0: not a snapshot"),
])
def test_status_command_refusals(tmp_path, good, script, reason):
    result = run(*status_args(script), "--verify", good)
    assert result.returncode == 1 and reason in result.stderr, result.stderr
    # the same status refusal stops a snapshot being saved
    saved = run(*status_args(script), "--save", tmp_path / "out" / "x.db", "--", *copy_of(good))
    assert saved.returncode == 1 and reason in saved.stderr
    assert not (tmp_path / "out" / "x.db").exists() and not parts(tmp_path / "out")


def test_status_command_runs_after_the_hash_check(tmp_path):
    marker = tmp_path / "status-ran"
    damaged = damaged_variants(tmp_path)["a flipped bit in the database"]
    result = run(*status_args("touch %s; echo '%s'" % (marker, STATUS_JSON)), "--verify", damaged)
    assert result.returncode == 1 and not marker.exists()


def test_save_takes_verifies_then_keeps_an_existing_snapshot(tmp_path, good):
    target = tmp_path / "deep" / "etcd-run-1.db"
    result = run("--save", target, "--", *copy_of(good))
    assert result.returncode == 0, result.stderr
    assert target.read_bytes() == good.read_bytes()
    assert result.stdout.startswith("gpufleet-etcd-snapshot: saved and verified %s: 8224 bytes" % target)
    # taken before (a resumed upgrade): verified, not taken again (the command would fail)
    again = run("--save", target, "--", "false")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("gpufleet-etcd-snapshot: kept and verified %s: 8224 bytes" % target)


def test_save_refuses_a_damaged_existing_snapshot(tmp_path):
    damaged = damaged_variants(tmp_path)["truncated by one byte"]
    before = damaged.read_bytes()
    result = run("--save", damaged, "--", "false")
    assert result.returncode == 1 and "does not end in the SHA-256" in result.stderr
    assert damaged.read_bytes() == before and "verified" not in result.stdout


@pytest.mark.parametrize("name", ["a flipped bit in the database", "without the hash (a copied member/snap/db)"])
def test_save_refuses_a_damaged_new_snapshot(tmp_path, name):
    source = damaged_variants(tmp_path)[name]
    target = tmp_path / "out" / "x.db"
    result = run("--save", target, "--", *copy_of(source))
    assert result.returncode == 1 and "is refused; nothing deleted" in result.stderr
    assert not target.exists() and not parts(tmp_path / "out")


@pytest.mark.parametrize("keep", ["0", "x", "-1", ""])
def test_bad_keep_is_refused_naming_the_variable(tmp_path, good, keep):
    result = run(tmp_path, keep, "--", *copy_of(good))
    assert result.returncode == 2 and "etcd_snapshot_keep" in result.stderr
    assert scheduled(tmp_path) == []


@pytest.mark.parametrize("args", [["dir", "3", "--"], ["--save", "x.db", "--"], ["--save", "x.db", "cp"], ["--verify"],
                                  ["--verify", "a", "b"], ["--status"], []])
def test_usage(tmp_path, args):
    result = subprocess.run([SCRIPT] + args,
                            capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 2 and "usage" in result.stderr
    assert os.listdir(tmp_path) == []


@settings(max_examples=30, deadline=None)  # each example runs the script twice (about 0.1 s)
@given(database=st.binary(min_size=1, max_size=2048), position=st.integers(min_value=0), bit=st.integers(0, 7),
       pad=st.booleans())
def test_any_change_to_a_snapshot_is_refused(tmp_path_factory, database, position, bit, pad):
    """Any snapshot whose size is right (size % 512 == 32) passes exactly when its last 32 bytes are
    the SHA-256 of the rest; one flipped bit anywhere is refused."""
    if pad:
        database = database + b"\0" * (-len(database) % 512)
    data = snapshot_bytes(database)
    path = tmp_path_factory.mktemp("h") / "s.db"
    path.write_bytes(data)
    expected = 0 if len(data) % 512 == 32 else 1
    assert run("--verify", path).returncode == expected
    changed = bytearray(data)
    changed[position % len(data)] ^= 1 << bit
    path.write_bytes(bytes(changed))
    result = run("--verify", path)
    assert result.returncode == 1 and "verified" not in result.stdout


def test_a_command_that_does_not_return_is_stopped_and_cleaned_up(tmp_path):
    """etcdctl waits for ever on an etcd that does not answer (seen with Debian's etcdctl 3.4 in the
    molecule scenario) and leaves its own <file>.part when stopped."""
    (tmp_path / "etcd-scheduled-20260101T030000Z.db").write_text("old")
    hang = ["sh", "-c", 'echo partial > "$0.part"; sleep 30']
    result = run("--timeout", 1, tmp_path, 1, "--", *hang)
    assert result.returncode == 1
    assert "timed out after 1 s (etcd_snapshot_timeout); no snapshot, nothing deleted" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["etcd-scheduled-20260101T030000Z.db"]


def test_a_status_command_that_does_not_return_is_stopped(good):
    result = run("--timeout", 1, *status_args("sleep 30"), "--verify", good)
    assert result.returncode == 1 and "timed out after 1 s (etcd_snapshot_timeout)" in result.stderr


@pytest.mark.parametrize("value", ["0", "x", "-1", "", "1.5"])
def test_bad_timeout_is_refused_naming_the_variable(tmp_path, good, value):
    result = run("--timeout", value, "--save", tmp_path / "x.db", "--", *copy_of(good))
    assert result.returncode == 2 and "etcd_snapshot_timeout" in result.stderr
    assert not (tmp_path / "x.db").exists()
