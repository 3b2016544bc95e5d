"""rdma_bandwidth through `ansible localhost -m`, with a fake ib_write_bw printing recorded reports."""

import json
import os
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(REPO, ".venv", "bin", "ansible")
FAKE = os.path.join(REPO, "tests", "integration", "bin", "fake_ib_write_bw")
PERFTEST = os.path.join(REPO, "tests", "fixtures", "perftest")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="run `make setup` first")


def adhoc(tmp_path, args, extra_env=None, check=False):
    """Run the module on localhost; return (exit status, result dict of localhost)."""
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "GPUFLEET_REPORT_DIR": str(tmp_path / "reports"),
    })
    env.update(extra_env or {})
    argv = [ANSIBLE, "localhost", "-m", "gpufleet.cluster.rdma_bandwidth", "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(proc.stdout)
    return proc.returncode, report["plays"][0]["tasks"][0]["hosts"]["localhost"], proc


def alive(pid):
    """True while ``pid`` runs (a zombie left for a non-reaping init counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def roce_sysfs(root):
    base = os.path.join(str(root), "sys/class/infiniband/mlx5_2/ports/1")
    os.makedirs(os.path.join(base, "gid_attrs/types"))
    os.makedirs(os.path.join(base, "gids"))
    with open(os.path.join(base, "link_layer"), "w") as handle:
        handle.write("Ethernet\n")
    for index, (gid_type, gid) in enumerate([("IB/RoCE v1", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d2"),
                                             ("RoCE v2", "fe80:0000:0000:0000:0ac0:ebff:fe3a:51d2"),
                                             ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a14:010b"),
                                             ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a14:010b")]):
        with open(os.path.join(base, "gid_attrs/types", str(index)), "w") as handle:
            handle.write(gid_type + "\n")
        with open(os.path.join(base, "gids", str(index)), "w") as handle:
            handle.write(gid + "\n")


def test_client_run_passes_and_uses_sysfs_gid(tmp_path):
    roce_sysfs(tmp_path / "node")
    args_file = tmp_path / "argv"
    rc, result, proc = adhoc(tmp_path, {
        "mode": "client", "server": "10.20.1.12", "device": "mlx5_2", "qps": 2, "min_gbps": 180,
        "root": str(tmp_path / "node"), "executable": FAKE,
    }, {"FAKE_PERFTEST_ARGS": str(args_file),
        "FAKE_PERFTEST_OUTPUT": os.path.join(PERFTEST, "ib_write_bw_23.10_roce_mib_client.txt")})
    assert rc == 0, proc.stderr
    assert args_file.read_text().split("\n")[:-1] == ["-d", "mlx5_2", "-x", "3", "-q", "2", "--report_gbits",
                                                      "10.20.1.12"]
    assert result["cmd"][0] == FAKE
    assert result["bw_average_gbps"] == pytest.approx(195.19, abs=0.01)
    assert result["unit"] == "MiB/sec"
    assert result["checks"][0]["status"] == "pass"
    assert result["checks"][0]["target"] == "mlx5_2/1"
    assert result["healthy"] is True and result["changed"] is False
    # fleet_report (enabled in ansible.cfg) also runs for ad-hoc commands and records the check
    report = json.loads((tmp_path / "reports" / "fleet-report.json").read_text())
    assert report["hosts"]["localhost"]["checks"][0]["observed"] == result["bw_average_gbps"]


def test_below_min_gbps_fails_the_module(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "server": "10.0.0.1", "min_gbps": 395,
                                         "executable": FAKE})
    assert rc != 0
    assert result["failed"] is True
    assert "rdma.bandwidth[node]: 392.21 Gb/s average at 65536 B messages < min_gbps 395.0" in result["msg"]
    assert result["bw_average_gbps"] == 392.21
    assert result["summary"] == {"pass": 0, "warn": 0, "fail": 1, "skip": 0}


def test_fail_on_never_returns_ok_with_failed_check(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "server": "10.0.0.1", "min_gbps": 395,
                                         "executable": FAKE, "fail_on": "never"})
    assert rc == 0
    assert result["healthy"] is False


def test_perftest_error_is_reported(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "server": "10.20.1.12", "executable": FAKE}, {
        "FAKE_PERFTEST_OUTPUT": "/dev/null", "FAKE_PERFTEST_RC": "1",
        "FAKE_PERFTEST_STDERR": os.path.join(PERFTEST, "ib_write_bw_connect_failed.stderr.txt")})
    assert rc != 0
    assert "exited with rc=1: Couldn't connect to 10.20.1.12:18515" in result["msg"]
    assert result["perftest_rc"] == 1


def test_timeout_kills_the_process_group(tmp_path):
    pid_file = tmp_path / "pids"
    started = time.time()
    rc, result, _proc = adhoc(tmp_path, {"mode": "server", "executable": FAKE, "timeout": 3},
                              {"FAKE_PERFTEST_HANG": str(pid_file)})
    assert time.time() - started < 60
    assert rc != 0
    assert result["timed_out"] is True and result["perftest_rc"] == -9
    assert "did not finish within timeout=3s; its process group was killed" in result["msg"]
    script_pid, sleep_pid = (int(pid) for pid in pid_file.read_text().split())
    deadline = time.time() + 5
    while (alive(script_pid) or alive(sleep_pid)) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(script_pid), "the fake perftest survived the timeout"
    assert not alive(sleep_pid), "the child of the fake perftest survived the timeout"


def test_check_mode_returns_planned_command_without_running(tmp_path):
    args_file = tmp_path / "argv"
    args = {"mode": "client", "server": "10.0.0.1", "size": 1048576, "executable": FAKE}
    rc, result, _proc = adhoc(tmp_path, args, {"FAKE_PERFTEST_ARGS": str(args_file)}, check=True)
    assert rc == 0
    assert not args_file.exists()
    assert result["cmd"] == [FAKE, "-s", "1048576", "--report_gbits", "10.0.0.1"]
    assert result["checks"][0]["status"] == "skip"


def test_missing_executable_names_the_option(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "server": "10.0.0.1",
                                         "executable": str(tmp_path / "ib_write_bw")})
    assert rc != 0
    assert result["msg"] == "option executable: %s not found" % (tmp_path / "ib_write_bw")


def test_client_without_server_is_rejected(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "executable": FAKE})
    assert rc != 0
    assert "server" in result["msg"]


def test_fail_on_never_survives_a_perftest_error(tmp_path):
    rc, result, _proc = adhoc(tmp_path, {"mode": "client", "server": "10.20.1.12", "executable": FAKE,
                                         "fail_on": "never"}, {"FAKE_PERFTEST_OUTPUT": "/dev/null",
                                                               "FAKE_PERFTEST_RC": "1"})
    assert rc == 0
    assert result["perftest_rc"] == 1
    assert result["checks"][0]["status"] == "fail"
