"""Red-team attacks on (1) the etcd snapshot script's verification, retention and timeouts
(roles/etcd_snapshot/README.md, docs/upgrades.md) run as a black box, and (2) the filter
gpufleet.cluster.upgrade_record (plugins/filter/upgrade_record.yml, docs/contracts.md "Records
read back"). Each test asserts what those docs promise."""

import hashlib
import json
import os
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter.upgrade_record import upgrade_record

SCRIPT = os.path.join(REPO, "roles", "etcd_snapshot", "files", "gpufleet-etcd-snapshot")
STATUS_OK = '{"hash":3167489467,"revision":5,"totalKey":4,"totalSize":20480}'


def snap(database):
    return database + hashlib.sha256(database).digest()


def good_db():
    return bytes(range(256)) * 32


def run(*args, timeout=30):
    return subprocess.run([SCRIPT] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def status_args(script):
    return ["--status", "sh", "--status", "-c", "--status", script]


def scheduled(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith("etcd-scheduled-"))


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.endswith(".part") or ".tmp" in n]


@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.snapshot"
    p.write_bytes(snap(good_db()))
    return p


# ---------------------------------------------------------------- (1) etcd snapshot: odd files

def test_symlink_to_damaged_snapshot_refused(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(snap(good_db())[:-1])
    link = tmp_path / "link.db"
    link.symlink_to(bad)
    r = run("--verify", link)
    assert r.returncode == 1 and "verified" not in r.stdout


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    r = run("--timeout", 2, "--verify", fifo, timeout=20)
    assert r.returncode != 0 and "verified" not in r.stdout


def test_directory_is_refused(tmp_path):
    d = tmp_path / "dir.db"
    d.mkdir()
    r = run("--verify", d)
    assert r.returncode != 0 and "verified" not in r.stdout


def test_sparse_whole_snapshot_is_verified(tmp_path):
    # a sparse database of zeros (a hole) with its correct trailer: whole by the documented rule
    p = tmp_path / "sparse.db"
    size = 1024 * 1024
    with open(p, "wb") as f:
        f.truncate(size)
        f.seek(size)
        f.write(hashlib.sha256(b"\0" * size).digest())
    r = run("--verify", p)
    assert r.returncode == 0, r.stderr


def test_correct_hash_wrong_size_refused(tmp_path):
    for n in (1, 100, 511, 513, 1000):  # database sizes with (n + 32) % 512 != 32
        p = tmp_path / ("s%d.db" % n)
        p.write_bytes(snap(b"x" * n))
        r = run("--verify", p)
        assert r.returncode == 1 and "verified" not in r.stdout, n


def test_zero_database_with_hash_refused_by_status(tmp_path):
    """512 zero bytes + their hash pass the hash rule; a status command saying revision 0 refuses it."""
    p = tmp_path / "zeros.db"
    p.write_bytes(snap(b"\0" * 512))
    r = run(*status_args("echo '{\"hash\":0,\"revision\":0,\"totalKey\":0,\"totalSize\":0}'"), "--verify", p)
    assert r.returncode == 1 and "revision 0" in r.stderr


@pytest.mark.parametrize("out", [
    '{"hash":1,"revision":NaN,"totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":-5,"totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":"5","totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":true,"totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":0.5,"totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":null,"totalKey":1,"totalSize":1}',
    '{"hash":1,"revision":Infinity,"totalKey":1,"totalSize":1}',
    'revision: 5 totalKey: 4',
    '',
])
def test_status_outputs_without_a_revision_of_at_least_one_refused(good, out):
    r = run(*status_args("printf '%%s\\n' '%s'" % out), "--verify", good)
    assert r.returncode == 1 and "verified" not in r.stdout, (out, r.stdout, r.stderr)


def test_status_huge_revision_is_handled(good):
    r = run(*status_args("echo '{\"hash\":1,\"revision\":123456789012345678901234567890,\"totalKey\":4}'"),
            "--verify", good)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr


def test_spaces_in_directory_and_file_names(tmp_path, good):
    d = tmp_path / "my snaps dir"
    r = run(d, 2, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    assert len(scheduled(d)) == 1
    target = tmp_path / "up grade" / "etcd run 1.db"
    r = run("--save", target, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == good.read_bytes()



def test_keep_one_keeps_only_the_new_snapshot(tmp_path, good):
    for n in ("etcd-scheduled-20260101T030000Z.db", "etcd-scheduled-20260102T030000Z.db"):
        (tmp_path / n).write_text("old")
    r = run(tmp_path, 1, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    names = scheduled(tmp_path)
    assert len(names) == 1 and (tmp_path / names[0]).read_bytes() == good.read_bytes()


def test_disk_full_snapshot_refused_partial_removed(tmp_path):
    mnt = tempfile.mkdtemp(dir=str(tmp_path))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", mnt], capture_output=True,
                      check=False).returncode:
        pytest.skip("cannot mount a tmpfs")
    try:
        big = tmp_path / "big.db"
        big.write_bytes(snap(os.urandom(64 * 1024)))
        (open(os.path.join(mnt, "etcd-scheduled-20260101T030000Z.db"), "w")).write("old")
        r = run(mnt, 1, "--", "cp", big)
        assert r.returncode == 1
        assert scheduled(mnt) == ["etcd-scheduled-20260101T030000Z.db"]
        assert not leftovers(mnt)
    finally:
        subprocess.run(["umount", mnt], check=False)


def test_save_and_timer_at_the_same_moment(tmp_path, good):
    """The rolling upgrade's save and the timer in one directory at once: both verified, the
    upgrade's file never rotated, no partial file left."""
    (tmp_path / "etcd-scheduled-20200101T030000Z.db").write_text("old")
    slow = ["sh", "-c", 'sleep 0.5; cp "%s" "$0"' % good]
    results = {}

    def go(key, *args):
        results[key] = run(*args)

    t1 = threading.Thread(target=go, args=("timer", tmp_path, 1, "--", *slow))
    t2 = threading.Thread(target=go, args=("save", "--save", tmp_path / "etcd-run-1.db", "--", *slow))
    for t in (t1, t2):
        t.start()
    for t in (t1, t2):
        t.join()
    assert results["save"].returncode == 0, results["save"].stderr
    assert results["timer"].returncode == 0, results["timer"].stderr
    assert (tmp_path / "etcd-run-1.db").read_bytes() == good.read_bytes()
    names = scheduled(tmp_path)
    assert len(names) == 1 and (tmp_path / names[0]).read_bytes() == good.read_bytes()
    assert not leftovers(tmp_path)


def test_grandchild_holding_output_open_is_stopped(tmp_path):
    """A command that forks a child keeping stdout/stderr open: stopped after the timeout (killed
    10 s later at the latest), the partial file removed."""
    hang = ["sh", "-c", '(sleep 40) & echo partial > "$0.part"; echo partial > "$0"; sleep 40']
    t0 = time.monotonic()
    r = run("--timeout", 1, "--save", tmp_path / "x.db", "--", *hang, timeout=25)
    elapsed = time.monotonic() - t0
    assert r.returncode == 1 and elapsed < 14, elapsed
    assert not (tmp_path / "x.db").exists() and not leftovers(tmp_path)


# ---------------------------------------------------------------- (1b) etcd snapshot: red-team regressions (F1-F4)

def whole_snapshot(tag, blocks=2):
    """A whole stand-in snapshot (trailer rule) whose content names it."""
    return snap(tag.encode().ljust(512 * blocks, b"\0"))


@pytest.mark.parametrize("out", [
    '[{"revision":5,"totalKey":4}]',                                        # F1: not a top-level object
    '{"hash":1,"totalKey":1,"totalSize":1,"nested":{"revision":5}}',        # F1: revision only nested
    '{"hash":1,"revision":5,"totalKey":4,"revision":6}',                    # a key twice
    '{"hash":1,"revision":5,"totalKey":4,"\\u0072evision":6}',             # a key twice, escaped
    '{"hash":1,"revision":5,"totalKey":4}{"revision":6}',                   # two documents
    '{"hash":1,"revision":5,"totalKey":-1}',
    '{"hash":1,"revision":5,"totalKey":"4"}',
    '{"hash":1,"revision":5,"totalKey":true}',
    '{"hash":1,"revision":5,"totalKey":NaN}',
    '{"hash":1,"revision":5,"totalKey":4.0}',
    '{"hash":1,"revision":9223372036854775808,"totalKey":4}',               # 2**63: beyond etcd's int64
    '{"hash":1,"revision":5,"totalKey":9223372036854775808}',
    '{"hash":1,"revision":5.0,"totalKey":4}',
    'revision":5,"totalKey":4',
])
def test_status_output_read_strictly(good, out):
    r = run(*status_args("printf '%%s\\n' '%s'" % out), "--verify", good)
    assert r.returncode == 1 and "verified" not in r.stdout, (out, r.stdout, r.stderr)
    assert "gpufleet-etcd-snapshot: " in r.stderr and "Traceback" not in r.stderr


def test_status_warning_on_stderr_does_not_spoil_the_json(good):
    """Only the status command's standard output is read as JSON; a warning on its standard error
    (written here by the stand-in, no real transcript) does not refuse the snapshot."""
    r = run(*status_args("echo 'a warning' >&2; echo '%s'" % STATUS_OK), "--verify", good)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(", revision 5, 4 keys")


def test_status_largest_int64_revision_accepted(good):
    r = run(*status_args("echo '{\"hash\":1,\"revision\":9223372036854775807,\"totalKey\":0,\"version\":\"3.6.0\"}'"),
            "--verify", good)
    assert r.returncode == 0, r.stderr
    assert "revision 9223372036854775807, 0 keys" in r.stdout


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 64, max_value=2 ** 64)
    | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=30, deadline=None)
@given(revision=JSON_VALUES, keys=JSON_VALUES, top=st.booleans())
def test_any_status_json_is_accepted_only_with_int_revision_and_keys(tmp_path_factory, revision, keys, top):
    d = tmp_path_factory.mktemp("st")
    p = d / "s.db"
    p.write_bytes(snap(good_db()))
    doc = {"hash": 1, "revision": revision, "totalKey": keys}
    text = json.dumps(doc if top else [doc], allow_nan=True)
    (d / "out.json").write_text(text)
    r = run(*status_args("cat '%s'" % (d / "out.json")), "--verify", p)
    ok = (top and type(revision) is int and 1 <= revision < 2 ** 63
          and type(keys) is int and 0 <= keys < 2 ** 63)
    assert r.returncode == (0 if ok else 1), (text, r.stdout, r.stderr)
    assert ("verified" in r.stdout) == ok and "Traceback" not in r.stderr


def test_snapshot_dir_symlink_is_rotated_in_its_target(tmp_path, good):
    """F2: DIR a symbolic link to the real directory: the snapshot is saved and rotated there."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "etcd-scheduled-20260101T030000Z.db").write_bytes(whole_snapshot("old"))
    link = tmp_path / "link"
    link.symlink_to(real)
    r = run(link, 1, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    names = scheduled(real)
    assert len(names) == 1 and (real / names[0]).read_bytes() == good.read_bytes()
    assert "deleted %s/etcd-scheduled-20260101T030000Z.db (retention 1)" % real in r.stdout
    assert link.is_symlink() and not leftovers(real)


@pytest.mark.parametrize("keep", [1, 2])
def test_future_named_snapshot_never_pushes_out_the_one_just_taken(tmp_path, good, keep):
    """F3: a whole snapshot named by a clock that was ahead (or a clock stepped back): the snapshot
    just taken and verified counts as the newest and is kept."""
    future = "etcd-scheduled-20991231T030000Z.db"
    (tmp_path / future).write_bytes(whole_snapshot("future"))
    (tmp_path / "etcd-scheduled-20200101T030000Z.db").write_bytes(whole_snapshot("past"))
    r = run(tmp_path, keep, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    names = scheduled(tmp_path)
    assert [n for n in names if (tmp_path / n).read_bytes() == good.read_bytes()], (names, r.stdout)
    assert len(names) == keep
    if keep == 2:
        assert future in names  # newest by name among the older ones


def test_junk_scheduled_file_is_deleted_not_counted(tmp_path, good):
    """F3: a file named like a scheduled snapshot that is not whole (here 4 bytes) is never kept as a
    snapshot: deleted, saying why, and the whole older snapshot is kept instead."""
    (tmp_path / "etcd-scheduled-20990101T030000Z.db").write_text("junk")
    (tmp_path / "etcd-scheduled-20200101T030000Z.db").write_bytes(whole_snapshot("past"))
    r = run(tmp_path, 2, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    names = scheduled(tmp_path)
    assert "etcd-scheduled-20990101T030000Z.db" not in names
    assert "etcd-scheduled-20200101T030000Z.db" in names and len(names) == 2
    assert "deleted %s/etcd-scheduled-20990101T030000Z.db: not a whole snapshot" % tmp_path in r.stdout


def test_only_exact_scheduled_names_are_rotated(tmp_path, good):
    """Names that only look like scheduled snapshots, links and directories are never deleted."""
    keepers = ["etcd-scheduled-manual.db", "etcd-scheduled-20200101T030000Z.db.bak",
               "etcd-scheduled-2020-01-01.db", "etcd-run-1.db"]
    for n in keepers:
        (tmp_path / n).write_text("someone's")
    (tmp_path / "etcd-scheduled-20200102T030000Z.db").symlink_to(tmp_path / "etcd-run-1.db")
    (tmp_path / "etcd-scheduled-20200103T030000Z.db").mkdir()
    r = run(tmp_path, 1, "--", "cp", good)
    assert r.returncode == 0, r.stderr
    for n in keepers:
        assert (tmp_path / n).read_text() == "someone's"
    assert (tmp_path / "etcd-scheduled-20200102T030000Z.db").is_symlink()
    assert (tmp_path / "etcd-scheduled-20200103T030000Z.db").is_dir()


def test_two_timer_runs_keep_one_keep_a_whole_snapshot(tmp_path, good):
    """Two scheduled runs at once with KEEP 1 (each keeps what it took): one runs after the other,
    so the later one's snapshot is kept and nothing else."""
    slow = ["sh", "-c", 'sleep 1.2; cp "%s" "$0"' % good]
    procs = [subprocess.Popen([SCRIPT, str(tmp_path), "1", "--"] + slow, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=25) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    names = scheduled(tmp_path)
    assert len(names) == 1 and (tmp_path / names[0]).read_bytes() == good.read_bytes()
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("database", [b"", b"\0" * 480])
def test_snapshot_without_a_database_is_refused(tmp_path, database):
    """F4: 32 bytes (the SHA-256 of an empty database) is not a snapshot; sizes below 512 + 32 never
    pass the size rule either."""
    p = tmp_path / "e.db"
    p.write_bytes(snap(database))
    r = run("--verify", p)
    assert r.returncode == 1 and "verified" not in r.stdout, r.stdout
    assert "has no database" in r.stderr or "size % 512" in r.stderr


def test_smallest_snapshot_is_verified(tmp_path):
    p = tmp_path / "one-block.db"
    p.write_bytes(snap(b"\1" * 512))
    r = run("--verify", p)
    assert r.returncode == 0 and "544 bytes" in r.stdout, r.stderr


def test_symlinked_snapshot_reports_its_target(tmp_path, good):
    link = tmp_path / "link.db"
    link.symlink_to(good)
    r = run("--verify", link)
    assert r.returncode == 0, r.stderr
    assert "%s (a symbolic link to %s): 8224 bytes" % (link, good) in r.stdout
    bad = tmp_path / "bad"
    bad.write_bytes(snap(good_db())[:-1])
    (tmp_path / "bad.db").symlink_to(bad)
    r = run("--verify", tmp_path / "bad.db")
    assert r.returncode == 1 and "a symbolic link to %s) (8223 bytes)" % bad in r.stderr, r.stderr
    (tmp_path / "dangling.db").symlink_to(tmp_path / "nowhere")
    r = run("--verify", tmp_path / "dangling.db")
    assert r.returncode == 1 and "symbolic link" in r.stderr and "no such snapshot" in r.stderr


# ---------------------------------------------------------------- (2) upgrade_record filter

WRITTEN = {
    "state": "held", "run_id": "2026-11-29T0400Z", "components": ["driver", "kubernetes"],
    "target": {"driver": "580.95.05", "kubernetes": "1.36.5"}, "updated": "2026-11-29T04:01:02Z",
    "step": "validate", "reason": "gpu.xid: XID 79", "failed_checks": ["gpu.xid"],
    "versions_before": {"nvidia-driver": "570.1"}, "versions_after": {}, "etcd_snapshot": "/var/lib/x.db",
    "resumed_from": {"run_id": "r0", "state": "drained"},
}


def refused(result, source="rec"):
    return result["record"] == {} and bool(result["error"]) and source in result["error"]


def test_baseline_reads():
    assert upgrade_record(json.dumps(WRITTEN), "state", "rec") == {"record": WRITTEN, "error": ""}


@pytest.mark.parametrize("text", [
    "null", "{}", "[]", "0", "true", '""', "\ufeff" + json.dumps(WRITTEN),
    json.dumps(WRITTEN) + json.dumps(WRITTEN),
    json.dumps(WRITTEN)[:-1] + ', "st\\u0061te": "admitted"}',   # a duplicate key spelled with an escape
    json.dumps(WRITTEN)[:-1] + ', "reason": "x"}',
    json.dumps(dict(WRITTEN, state="HELD")), json.dumps(dict(WRITTEN, state="held ")),
    json.dumps(dict(WRITTEN, reason="x" * (4 * 1024 * 1024))),    # 4 MiB reason
    json.dumps(dict(WRITTEN, target={"driver": ["580"]})),
    json.dumps(dict(WRITTEN, target={"driver": {"a": {"b": "c"}}})),
    json.dumps(dict(WRITTEN, components=["driver", 1])),
    json.dumps(dict(WRITTEN, components=[["driver"]])),
    json.dumps(dict(WRITTEN, failed_checks="gpu.xid")),
    json.dumps(dict(WRITTEN, resumed_from={"run_id": "r0", "state": "drained", "x": 1})),
    json.dumps(dict(WRITTEN, versions_before={"nvidia-driver": float("nan")}), allow_nan=True),
    json.dumps(dict(WRITTEN, versions_before={"nvidia-driver": 1e400}), allow_nan=True).replace("Infinity", "1e400"),
    '{"state": "held", "target": ' + "[" * 5000 + "]" * 5000 + "}",
])
def test_hostile_state_texts_are_refused(text):
    assert refused(upgrade_record(text, "state", "rec")), text[:200]


@pytest.mark.parametrize("value", [5, 1.5, {"state": "held"}, ["x"], True])
def test_non_text_inputs_are_never_none(value):
    """An empty text is no record; anything that is not a text must never read as 'no record'."""
    try:
        result = upgrade_record(value, "state", "rec")
    except Exception:  # a raised filter error is a refusal too
        return
    assert refused(result), result


def test_bytes_input_not_taken_as_none():
    for value in (json.dumps(WRITTEN).encode(), b"\xff\xfe{", b""):
        try:
            result = upgrade_record(value, "state", "rec")
        except Exception:
            continue
        if value == b"":
            assert result["record"] == {}
        elif result["error"] == "":
            assert result["record"] == WRITTEN
        else:
            assert refused(result)


def test_unicode_values_read_back():
    doc = dict(WRITTEN, reason="GPU 0 \u2014 XID 79 \U0001F525 \u00e9")
    assert upgrade_record(json.dumps(doc), "state", "rec") == {"record": doc, "error": ""}
    assert upgrade_record(json.dumps(doc, ensure_ascii=False), "state", "rec") == {"record": doc, "error": ""}


@pytest.mark.parametrize("text", [
    '{"components": ["driver"], "target": {"driver": {"v": "1"}}}',
    '{"components": ["driver"], "target": {"driver": NaN}}',
    '{"components": ["driver"], "target": {"driver": "1"}, "components": []}',
    '{"components": "driver", "target": {"driver": "1"}}',
    "null", "[]", '{"components": ["driver"], "target": {"driver": "1"}}{}',
])
def test_hostile_applied_texts_are_refused(text):
    assert refused(upgrade_record(text, "applied", "applied.json"), "applied.json")


@pytest.mark.parametrize("kind", ["state", "applied"])
def test_whitespace_is_no_record(kind):
    for text in ("", " ", "\n\t "):
        assert upgrade_record(text, kind, "rec") == {"record": {}, "error": ""}


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(WRITTEN)), junk=st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)))
def test_any_field_replaced_by_a_wrong_type_is_refused(key, junk):
    doc = dict(WRITTEN, **{key: junk})
    result = upgrade_record(json.dumps(doc), "state", "rec")
    if result["error"] == "":
        # only a value of the field's own type may read back (e.g. {} for a versions map)
        assert type(result["record"][key]) is type(WRITTEN[key]), (key, junk)
        assert not isinstance(junk, bool) or isinstance(WRITTEN[key], bool)
    else:
        assert refused(result)



def test_two_timer_runs_at_the_same_moment(tmp_path, good):
    """Two scheduled runs in one directory in the same second (same snapshot name)."""
    slow = ["sh", "-c", 'sleep 0.3; cp "%s" "$0"' % good]
    procs = [subprocess.Popen([SCRIPT, str(tmp_path), "3", "--"] + slow, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=20) for p in procs]
    codes = [p.returncode for p in procs]
    assert 0 in codes, outs
    for n in scheduled(tmp_path):
        assert (tmp_path / n).read_bytes() == good.read_bytes(), n
    assert scheduled(tmp_path) and not leftovers(tmp_path)



def test_zeros_with_hash_no_status_command(tmp_path):
    """Observed behaviour pinned: 512 zero bytes + hash passes the documented rule (no status command)."""
    p = tmp_path / "z.db"
    p.write_bytes(snap(b"\0" * 512))
    r = run("--verify", p)
    assert r.returncode == 0, r.stderr
