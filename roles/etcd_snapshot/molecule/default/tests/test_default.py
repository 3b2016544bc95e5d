"""etcd_snapshot against a real etcd (Debian's etcd-server 3.4, client TLS with kubeadm's certificate
paths): the snapshot the role took is a real one (etcd's status, the SHA-256 etcd appends), it
restores into a fresh data directory that a second etcd serves with the keys put before it (and not
the one put after), the damaged copy is refused by the role's script and by etcd's own restore, and
the timer's service takes, verifies and rotates a scheduled snapshot, and fails on a stopped etcd (stopped
after etcd_snapshot_timeout: etcdctl would wait for ever)."""

import base64
import hashlib
import json

PKI = "/etc/kubernetes/pki/etcd"
ETCDCTL = ("etcdctl --endpoints=https://127.0.0.1:2379 --cacert=%s/ca.crt --cert=%s/server.crt "
           "--key=%s/server.key" % (PKI, PKI, PKI))
SNAPSHOTS = "/var/lib/etcd/gpufleet-snapshots"
SNAPSHOT = SNAPSHOTS + "/etcd-molecule.db"
DAMAGED = "/root/etcd-damaged.db"
SCRIPT = "/usr/local/sbin/gpufleet-etcd-snapshot"
# put in prepare.yml, before the snapshot
KEYS = {
    "/registry/namespaces/default": '{"kind":"Namespace","metadata":{"name":"default"}}',
    "/registry/configmaps/kube-system/gpufleet": "etcd snapshot molecule",
    "/registry/secrets/kube-system/big": "gpufleet-" * 7282,
}
RESTORED = "/var/tmp/etcd-restored"
RESTORED_URLS = ("--listen-client-urls=http://127.0.0.1:12379 --advertise-client-urls=http://127.0.0.1:12379 "
                 "--listen-peer-urls=http://127.0.0.1:12380 --initial-advertise-peer-urls=http://127.0.0.1:12380 "
                 "--initial-cluster=restored=http://127.0.0.1:12380")


def keys_of(output):
    """{key: value} of `etcdctl get --prefix -w json` (keys and values base64-encoded)."""
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode()
            for kv in json.loads(output).get("kvs", [])}


def scheduled(host):
    out = host.check_output("find %s -maxdepth 1 -name 'etcd-scheduled-*' -printf '%%f\\n' | sort" % SNAPSHOTS)
    return out.split()


def test_the_snapshot_is_whole_by_etcds_own_layout(host):
    """The check the role relies on, computed here independently: size % 512 == 32 and the last 32
    bytes are the SHA-256 of the rest (what etcd's restore checks)."""
    data = host.file(SNAPSHOT).content
    assert len(data) > 16384 and len(data) % 512 == 32
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    assert host.file(SNAPSHOTS).mode == 0o700 and host.file(SNAPSHOT).user == "root"
    assert host.run("ls %s/*.part" % SNAPSHOTS).rc != 0  # no partial file left


def test_etcd_status_of_the_snapshot(host):
    status = json.loads(host.check_output("etcdctl snapshot status -w json %s" % SNAPSHOT))
    assert status["totalKey"] >= len(KEYS) and status["revision"] >= len(KEYS) + 1
    assert status["totalSize"] == len(host.file(SNAPSHOT).content) - 32


def test_the_roles_script_verifies_it_with_the_status_command(host):
    out = host.check_output("%s --status etcdctl --status snapshot --status status --status -w --status json "
                            "--verify %s" % (SCRIPT, SNAPSHOT))
    status = json.loads(host.check_output("etcdctl snapshot status -w json %s" % SNAPSHOT))
    assert out.endswith(", revision %d, %d keys" % (status["revision"], status["totalKey"])), out


def test_restore_into_a_fresh_data_directory_and_read_the_keys_back(host):
    # a key put after the snapshot: in the live etcd, not in the restored one
    host.check_output("%s put /registry/after-snapshot later" % ETCDCTL)
    live = keys_of(host.check_output("%s get --prefix /registry/ -w json" % ETCDCTL))
    assert {k: live[k] for k in KEYS} == KEYS and live["/registry/after-snapshot"] == "later"
    host.run("systemctl stop etcd-restored.service; rm -rf %s" % RESTORED)
    restore = host.run("etcdctl snapshot restore %s --name=restored --data-dir=%s "
                       "--initial-cluster=restored=http://127.0.0.1:12380 "
                       "--initial-advertise-peer-urls=http://127.0.0.1:12380" % (SNAPSHOT, RESTORED))
    assert restore.rc == 0, restore.stderr
    started = host.run("systemd-run --unit=etcd-restored --property=Type=notify /usr/bin/etcd --name=restored "
                       "--data-dir=%s %s" % (RESTORED, RESTORED_URLS))
    try:
        assert started.rc == 0, started.stderr
        restored = keys_of(host.check_output("etcdctl --endpoints=http://127.0.0.1:12379 get --prefix /registry/ "
                                             "-w json"))
        assert restored == KEYS
    finally:
        host.run("systemctl stop etcd-restored.service")


def test_the_damaged_copy_is_refused_by_the_role_and_by_etcd(host):
    data = host.file(DAMAGED).content
    assert len(data) == len(host.file(SNAPSHOT).content)
    verify = host.run("%s --verify %s" % (SCRIPT, DAMAGED))
    assert verify.rc == 1 and "is damaged: the SHA-256 of its database is" in verify.stderr
    host.run("rm -rf /var/tmp/etcd-from-damaged")
    restore = host.run("etcdctl snapshot restore %s --data-dir=/var/tmp/etcd-from-damaged" % DAMAGED)
    assert restore.rc != 0 and "expected sha256" in restore.stderr, restore.stderr


def test_timer_installed_and_waiting(host):
    timer = host.service("gpufleet-etcd-snapshot.timer")
    assert timer.is_enabled and timer.is_running
    unit = host.file("/etc/systemd/system/gpufleet-etcd-snapshot.service").content_string
    assert ("ExecStart=/usr/local/sbin/gpufleet-etcd-snapshot --timeout 6 --status etcdctl --status snapshot --status status "
            "--status -w --status json /var/lib/etcd/gpufleet-snapshots 1 -- etcdctl "
            "--endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt") in unit
    assert "OnCalendar=2099-01-01 00:00:00" in host.file("/etc/systemd/system/gpufleet-etcd-snapshot.timer").content_string


def test_the_service_takes_verifies_and_rotates(host):
    # a whole older snapshot (rotated by retention) and a junk file under a scheduled name (not a
    # snapshot: deleted, not counted)
    host.check_output("cp %s %s/etcd-scheduled-20200101T000000Z.db" % (SNAPSHOT, SNAPSHOTS))
    host.check_output("printf old > %s/etcd-scheduled-20100101T000000Z.db" % SNAPSHOTS)
    run = host.run("systemctl start gpufleet-etcd-snapshot.service")
    assert run.rc == 0, host.run("journalctl -u gpufleet-etcd-snapshot --no-pager").stdout
    names = scheduled(host)
    assert len(names) == 1 and names[0] != "etcd-scheduled-20200101T000000Z.db", names
    assert host.run("%s --verify %s/%s" % (SCRIPT, SNAPSHOTS, names[0])).rc == 0
    journal = host.check_output("journalctl -u gpufleet-etcd-snapshot --no-pager")
    assert "saved and verified %s/%s" % (SNAPSHOTS, names[0]) in journal
    assert "deleted %s/etcd-scheduled-20200101T000000Z.db (retention 1)" % SNAPSHOTS in journal
    assert "deleted %s/etcd-scheduled-20100101T000000Z.db: not a whole snapshot" % SNAPSHOTS in journal
    assert host.file(SNAPSHOT).exists  # the save entry point's snapshot is not rotated


def test_the_service_fails_on_a_stopped_etcd_and_deletes_nothing(host):
    unit = "etcd-static.service"
    before = scheduled(host)
    assert before
    host.check_output("systemctl stop %s" % unit)
    try:
        run = host.run("systemctl start gpufleet-etcd-snapshot.service")
        assert run.rc != 0
        assert host.run("systemctl is-failed gpufleet-etcd-snapshot.service").stdout.strip() == "failed"
        assert scheduled(host) == before  # nothing deleted, and no partial file (etcdctl's own .part) left
        journal = host.check_output("journalctl -u gpufleet-etcd-snapshot --no-pager")
        assert "timed out after 6 s (etcd_snapshot_timeout); no snapshot, nothing deleted" in journal
    finally:
        host.check_output("systemctl start %s" % unit)
        host.run("systemctl reset-failed gpufleet-etcd-snapshot.service")
