"""The agent under faults of the outside world (docs/contracts.md, "Node health agent", "Time"):
table-driven, each row one way a reading or an outlet can fail and the verdict/behaviour asserted.

- its own state file damaged or wrongly typed: set aside, the cycle goes on and publishes;
- the disk full (a real 16 KiB tmpfs, mounted for the test): health.json not written, and
  Kubernetes, Slurm and metrics are still told;
- a slow-loris API server (a byte every 0.3 s) and one that never answers: the cycle ends within
  its bound, Slurm is drained anyway, the next cycle skips only the busy outlet;
- credentials over plain http refused, a redirect to another origin never followed;
- time: results and heartbeats from the future are unknown, never fresh, in several TZ values.
"""

import json
import os
import socket
import subprocess
import threading
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import node_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent, agent_publish
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import clock
from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient, KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from fake_kube_api.server import FakeKubeAPI
from nvml_scenarios import NODES, fake_with
from runners import ScriptedRunner

DGX = os.path.join(NODES, "dgx-h100")
OPTIONS = {"gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
           "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}
NOW = 1700000000.0


def show(state="IDLE", reason=None):
    line = "NodeName=dgx-1 Arch=x86_64 State=%s Partitions=gpu" % state
    return line + (" Reason=%s [root@2025-11-20T08:00:00]" % reason if reason else "")


@pytest.fixture(autouse=True)
def no_busy_publishers():
    agent_publish._BUSY.clear()
    yield
    agent_publish._BUSY.clear()


def make_agent(tmp_path, scenario="h100-gpu-is-lost", state_dir=None, **extra):
    state = state_dir or tmp_path / "state"
    os.makedirs(str(state), exist_ok=True)
    config = {"node_name": "dgx-1", "state_dir": str(state), "node_validate": dict(OPTIONS, root=DGX)}
    config.update(extra)
    lines = []
    instance = agent.Agent(config, log=lines.append, runner=ScriptedRunner(),
                           nvml=NvmlAdapter(fake_with(scenario)), clock=lambda: NOW)
    return instance, lines


# -- the state file ------------------------------------------------------------------------------------
DAMAGED_STATES = {
    "empty": b"",
    "truncated JSON": b'{"checks": {"gpu.count|node": {"fails": 1',
    "not UTF-8": b"\xff\xfe\x00garbage",
    "null": b"null",
    "a list": b"[]",
    "checks a list": b'{"checks": []}',
    "healthy a string": b'{"healthy": "yes", "checks": {}}',
    "cycle a string": b'{"cycle": "3"}',
    "cycle negative": b'{"cycle": -1}',
    "counter a string": b'{"checks": {"gpu.count|node": {"fails": "x"}}}',
    "failing a number": b'{"checks": {"gpu.count|node": {"failing": 1}}}',
    "entry not a dict": b'{"checks": {"gpu.count|node": 3}}',
    "key without target": b'{"checks": {"gpu.count": {"fails": 1}}}',
}


@pytest.mark.parametrize("content", list(DAMAGED_STATES.values()), ids=list(DAMAGED_STATES))
def test_a_damaged_state_file_is_set_aside_and_the_cycle_goes_on(tmp_path, content):
    instance, lines = make_agent(tmp_path)
    state_file = tmp_path / "state" / "agent-state.json"
    state_file.write_bytes(content)
    assert instance.cycle() == 0
    result = json.loads((tmp_path / "state" / "health.json").read_text())
    assert result["agent"]["healthy"] is False  # the lost GPU is reported at once, not frozen
    assert result["agent"]["failing"][0]["id"] in ("gpu.count", "gpu.lost")
    set_aside = [n for n in os.listdir(str(tmp_path / "state")) if n.startswith("agent-state.json.damaged-")]
    assert len(set_aside) == 1 and (tmp_path / "state" / set_aside[0]).read_bytes() == content
    assert json.loads(state_file.read_text())["cycle"] == 1  # fresh counters, written again
    assert "is damaged" in lines[0] and "its history is lost" in lines[0]
    # and the next cycle reads its own state again
    assert instance.cycle() == 0
    assert json.loads(state_file.read_text())["cycle"] == 2


@pytest.mark.parametrize("content", [DAMAGED_STATES["truncated JSON"], b'{"checks": {}, "healthy": NaN}',
                                     b'{"checks": {}, "cycle": 1e999}', b"[" * 5000 + b"]" * 5000])
def test_a_damaged_state_file_never_makes_a_node_healthy_sooner(tmp_path, content):
    """Unreadable is read in the safe direction: the history is lost, so every check counts as
    failing until it passes its recover_after cycles (2): a healthy node is published unhealthy
    for exactly the first cycle after the damage, and named as held, never healthy at once."""
    instance, lines = make_agent(tmp_path, scenario="h100-healthy")
    instance.cycle()
    assert json.loads((tmp_path / "state" / "health.json").read_text())["agent"]["healthy"] is True
    (tmp_path / "state" / "agent-state.json").write_bytes(content)
    verdicts = []
    for _cycle in range(3):
        instance.cycle()
        verdicts.append(json.loads((tmp_path / "state" / "health.json").read_text())["agent"])
    assert [verdict["healthy"] for verdict in verdicts] == [False, True, True]
    assert verdicts[0]["failing"][0]["message"].startswith("held failing: agent-state.json was unreadable")
    assert any("agent-state.json is damaged" in line for line in lines)


def test_an_unreadable_state_file_is_set_aside(tmp_path):
    instance, lines = make_agent(tmp_path)
    (tmp_path / "state" / "agent-state.json").mkdir()  # EISDIR on open
    assert instance.cycle() == 0
    assert json.loads((tmp_path / "state" / "health.json").read_text())["cycle"] == 1
    assert "unreadable" in lines[0]


# -- a full disk ---------------------------------------------------------------------------------------
@pytest.fixture
def full_fs(tmp_path):
    """A real 16 KiB tmpfs, filled to the last byte (needs root and mount; skipped otherwise)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip("mount -t tmpfs refused here: %s" % done.stderr.decode().strip())
    try:
        fd = os.open(str(mount / "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_does_not_stop_publishing(tmp_path, full_fs):
    with FakeKubeAPI() as api:
        api.add_node("dgx-1")
        runner = ScriptedRunner({("scontrol", "show", "node", "dgx-1", "-o"): (0, show(), ""),
                                 "scontrol": (0, "", "")})
        (tmp_path / "textfile").mkdir()
        instance, lines = make_agent(tmp_path, state_dir=full_fs, textfile_dir=str(tmp_path / "textfile"))
        instance.kube = KubePublisher(KubeClient(api.url, token=api.token, allow_plain_http=True), "dgx-1",
                                      clock=lambda: NOW)
        instance.slurm = SlurmPublisher("dgx-1", runner)
        assert instance.cycle() == 0
        assert any("health.json not written" in line and "No space left on device" in line for line in lines), lines
        assert not os.path.exists(str(full_fs / "health.json"))
        condition = gate.find_condition(api.node("dgx-1"))
        assert condition["status"] == "False"  # Kubernetes was told
        assert ["scontrol", "update", "NodeName=dgx-1", "State=DRAIN",
                "Reason=gpufleet: %s" % condition["message"].split(":")[0]] in runner.calls  # Slurm was told
        assert "gpufleet_node_healthy 0" in (tmp_path / "textfile" / "gpufleet.prom").read_text()  # metrics too
        assert instance.outcomes == {"metrics": "ok", "kubernetes": "ok", "slurm": "ok"}


# -- slow and silent API servers -----------------------------------------------------------------------
class BadServer(object):
    """A TCP server that reads the request and then trickles ``answer`` a byte every ``pause``
    seconds (slow loris), or never answers (``answer=None``), or answers at once."""

    def __init__(self, answer=None, pause=0.3):
        self.answer = answer
        self.pause = pause
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.stop = threading.Event()
        self.requests = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            self.requests.append(conn.recv(65536))
            if self.answer is None:
                self.stop.wait(30)
            elif self.pause:
                for byte in self.answer:
                    if self.stop.is_set():
                        break
                    conn.sendall(bytes([byte]))
                    time.sleep(self.pause)
            else:
                conn.sendall(self.answer)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


GUARD_CHECKS = 12.0  # seconds: the checks of one cycle on a loaded machine, a hang guard
SLOW_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n" + b" " * 400


@pytest.mark.parametrize("answer", [SLOW_ANSWER, None], ids=["slow-loris", "never-answers"])
def test_a_request_is_bounded_by_its_timeout(answer):
    server = BadServer(answer)
    try:
        client = KubeClient(server.url, token="t0ken", timeout=1.0, allow_plain_http=True)
        start = time.monotonic()
        with pytest.raises(KubeError, match="no complete answer to GET /api/v1/nodes/dgx-1 within 1.0 s"):
            client.get_node("dgx-1")
        # a hang guard, not a latency: well under what an unbounded request takes (the slow loris's
        # 400 bytes at 0.3 s each, the silent server's 30 s)
        assert time.monotonic() - start < 10.0
    finally:
        server.close()


@pytest.mark.parametrize("answer", [SLOW_ANSWER, None], ids=["slow-loris", "never-answers"])
def test_a_hung_api_server_delays_neither_the_slurm_drain_nor_the_next_cycle(tmp_path, answer):
    server = BadServer(answer)
    try:
        runner = ScriptedRunner({("scontrol", "show", "node", "dgx-1", "-o"): (0, show(), ""),
                                 "scontrol": (0, "", "")})
        instance, lines = make_agent(tmp_path, publish_timeout=1.5)
        # the client's own timeout is long: the cycle's publish deadline is what bounds it
        instance.kube = KubePublisher(KubeClient(server.url, token="t0ken", timeout=60, allow_plain_http=True),
                                      "dgx-1", clock=lambda: NOW)
        instance.slurm = SlurmPublisher("dgx-1", runner)
        start = time.monotonic()
        assert instance.cycle() == 0
        took = time.monotonic() - start
        # the bound is the checks plus publish_timeout; the checks' own time is not asserted (2 s was: the
        # test's two cycles took 3.7-6.0 s on a loaded 2-core machine). A hang guard, well under what the
        # client's 60 s timeout (or the silent server's 30 s) would give had the publish no deadline.
        assert took < 1.5 + GUARD_CHECKS, took
        assert any(call[:2] == ["scontrol", "update"] and "State=DRAIN" in call for call in runner.calls)
        assert instance.outcomes["slurm"] == "ok" and instance.outcomes["kubernetes"] in ("timeout", "error")
        assert any("kubernetes: not updated" in line for line in lines)
        # the next cycle: Slurm again at once; Kubernetes skipped while the last request still hangs, or retried
        runner.calls.clear()
        start = time.monotonic()
        assert instance.cycle() == 0
        assert time.monotonic() - start < 1.5 + GUARD_CHECKS
        assert any(call[:3] == ["scontrol", "show", "node"] for call in runner.calls)
    finally:
        server.close()


# -- credentials ---------------------------------------------------------------------------------------
def test_credentials_are_never_sent_over_plain_http():
    server = BadServer(SLOW_ANSWER, pause=0)
    try:
        for kwargs in ({"token": "t0ken"}, {"token_file": "/nonexistent"}, {"cert_file": "/nonexistent"}):
            with pytest.raises(KubeError, match="plain http://: refusing to send"):
                KubeClient(server.url, **kwargs)
        assert server.requests == []
    finally:
        server.close()


def test_check_config_explains_the_plain_http_refusal(tmp_path, capsys):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"node_validate": {"root": DGX}, "kubernetes": {
        "enabled": True, "server": "http://api.example:6443", "token_file": "/var/run/token"}}))
    assert agent.main(["--check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "plain http://" in out and "refuses to send its bearer token" in out
    path.write_text(json.dumps({"node_validate": {"root": DGX}, "kubernetes": {
        "enabled": True, "server": "https://api.example:6443", "token_file": "/var/run/token"}}))
    assert agent.main(["--check-config", str(path)]) == 0


def test_a_redirect_is_never_followed_and_the_token_never_reaches_the_other_origin():
    other = BadServer(SLOW_ANSWER, pause=0)
    redirect = ("HTTP/1.1 307 Temporary Redirect\r\nLocation: %s/api/v1/nodes/dgx-1\r\nContent-Length: 0\r\n\r\n"
                % other.url).encode()
    server = BadServer(redirect, pause=0)
    try:
        client = KubeClient(server.url, token="t0ken-secret", timeout=5, allow_plain_http=True)
        with pytest.raises(KubeError, match="redirect .*not followed, credentials are never sent to another origin"):
            client.get_node("dgx-1")
        time.sleep(0.2)
        assert other.requests == []
        assert b"t0ken-secret" in server.requests[0]
    finally:
        server.close()
        other.close()


# -- time ----------------------------------------------------------------------------------------------
@pytest.fixture(params=["UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"])
def zone(request, local_tz):
    local_tz(request.param)
    return request.param


FRESHNESS = [
    # (age of the stamp in seconds, verdict); max_age 300, tolerance 60
    (0, clock.FRESH), (299, clock.FRESH), (301, clock.STALE), (-59, clock.FRESH), (-61, clock.FUTURE),
    (-86400 * 365, clock.FUTURE),
]


@pytest.mark.parametrize("age,verdict", FRESHNESS)
def test_freshness_in_every_time_zone(zone, age, verdict):
    assert clock.freshness(NOW - age, NOW, 300)[0] == verdict
    # a DST night: 2026-03-08 (US) and 2026-04-05 (southern hemisphere) change nothing in UTC
    for text in ("2026-03-08T07:30:00Z", "2026-04-05T02:30:00Z", "2026-11-01T06:30:00Z"):
        assert clock.utc_text(clock.parse_utc(text)) == text


@pytest.mark.parametrize("bad", [None, "", "yesterday", float("nan"), float("inf"), True, "1e400"])
def test_an_unusable_stamp_is_unknown(bad):
    assert clock.freshness(bad, NOW, 300)[0] == clock.UNKNOWN


def test_a_result_from_the_future_is_unknown_to_npd(zone):
    result = {"generated_at": NOW + 3600, "agent": {"healthy": True, "failing": []}}
    code, message = agent.npd_status(result, NOW)
    assert code == agent.NPD_UNKNOWN and "in the future" in message


def test_a_heartbeat_from_the_future_is_not_fresh(zone):
    future = clock.utc_text(NOW + 3600)
    node = {"status": {"conditions": [{"type": gate.CONDITION_TYPE, "status": "True", "reason": gate.PASS_REASON,
                                       "message": "all gpufleet checks pass", "lastHeartbeatTime": future,
                                       "lastTransitionTime": future}]}}
    patch, _changed = gate.condition_write(node, True, [], NOW, 300)
    assert patch is not None  # rewritten with this clock's time
    checks = node_checks(node, NOW, 300)
    assert checks[0]["status"] == "fail" and "in the future" in checks[0]["message"]
    fresh = dict(node["status"]["conditions"][0], lastHeartbeatTime=clock.utc_text(NOW - 30))
    assert gate.condition_write({"status": {"conditions": [fresh]}}, True, [], NOW, 300)[0] is None
    assert node_checks({"status": {"conditions": [fresh]}}, NOW, 300)[0]["status"] == "pass"


def test_a_stale_or_future_healthy_result_never_resumes_a_slurm_node(tmp_path, capsys, monkeypatch):
    runner = ScriptedRunner({("scontrol", "show", "node", "dgx-1", "-o"): (0, show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"), ""),
                             "scontrol": (0, "", "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("dgx-1", runner)))
    for stamp in (NOW + 3600, NOW - 3600):
        (tmp_path / "health.json").write_text(json.dumps({"generated_at": stamp, "agent": {"healthy": True, "failing": []}}))
        assert agent.slurm_health_check({"state_dir": str(tmp_path)}, now=NOW) == 0
        assert "not current, node left as it is" in capsys.readouterr().out
    assert runner.calls == []
    # an unhealthy verdict is acted on whatever its age (fail closed)
    (tmp_path / "health.json").write_text(json.dumps({"generated_at": NOW - 3600, "agent": {
        "healthy": False, "failing": [{"id": "gpu.lost", "target": "gpu1", "status": "fail", "message": "lost"}]}}))
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}, now=NOW) == 0
    assert ["scontrol", "update", "NodeName=dgx-1", "State=DRAIN", "Reason=gpufleet: gpu.lost[gpu1]"] in runner.calls


# -- hostile records: every reader gives a record or names why not, and unreadable is never healthy -----
import base64  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import agent_health_check  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_state  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import load_config  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import step  # noqa: E402

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["pass", "fail", "warn", "skip"]))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                              max_size=4), max_leaves=20)
ENTRY = st.dictionaries(st.sampled_from(agent_state.ENTRY_KEYS + ("other",)), SCALARS, max_size=9)
STATE_DOCS = st.one_of(ANY_JSON, st.fixed_dictionaries({}, optional={
    "checks": st.dictionaries(st.sampled_from(["gpu.count|node", "gpu.xid|gpu0", "gpu.count", "x|y"]), ENTRY | ANY_JSON,
                              max_size=3),
    "healthy": SCALARS, "cycle": SCALARS, "updated": SCALARS, "failing": ANY_JSON, "extra": SCALARS}))
CHECK = st.fixed_dictionaries({"id": st.sampled_from(["gpu.count", "gpu.xid", "gpu.temperature"]),
                               "target": st.sampled_from(["node", "gpu0", "gpu1"]),
                               "status": st.sampled_from(["pass", "fail", "warn", "skip"]), "message": st.text(max_size=10)})
HEALTH_DOCS = st.one_of(ANY_JSON, st.fixed_dictionaries({}, optional={
    "agent": st.one_of(ANY_JSON, st.fixed_dictionaries({}, optional={
        "healthy": SCALARS, "failing": st.one_of(ANY_JSON, st.lists(CHECK, max_size=2)), "cpu_ms": SCALARS})),
    "generated_at": st.one_of(SCALARS, st.floats(NOW - 600, NOW + 600)), "cycle": SCALARS, "node": SCALARS}))
SETTINGS = {"fail_after": 3, "recover_after": 2, "immediate": {"gpu.count", "gpu.xid"}, "per_check": {}}


def encode(doc, garble):
    return json.dumps(doc, allow_nan=True).encode() + garble


@settings(max_examples=300, deadline=None)
@given(doc=STATE_DOCS, garble=st.sampled_from([b"", b"", b"}", b"\xff", b" "]),
       checks=st.lists(CHECK, max_size=4, unique_by=lambda c: (c["id"], c["target"])))
def test_the_state_reader_gives_a_usable_state_or_names_why_not(doc, garble, checks):
    try:
        state = agent_state.parse_state(encode(doc, garble))
    except records.RecordError as exc:
        assert "agent-state.json" in str(exc)
        return
    new, _events = step(state, checks, SETTINGS, now=NOW)  # whatever it accepted, a cycle can go on from
    assert new["healthy"] is (not any(entry["failing"] for entry in new["checks"].values()))
    assert agent_state.parse_state(json.dumps(new).encode()) == new  # and what the cycle writes reads back


@settings(max_examples=300, deadline=None)
@given(doc=HEALTH_DOCS, garble=st.sampled_from([b"", b"", b"]", b"\xff"]))
def test_the_health_reader_never_passes_what_it_cannot_read(doc, garble):
    raw = encode(doc, garble)
    try:
        result = agent_state.parse_health(raw)
    except records.RecordError as exc:
        assert "health.json" in str(exc)
        result = None
    if result is not None:
        assert isinstance(result["agent"]["healthy"], bool)
        assert not (result["agent"]["healthy"] and result["agent"].get("failing"))
    check = agent_health_check({"content": base64.b64encode(raw).decode(), "encoding": "base64"}, now=NOW)
    assert check["status"] in ("pass", "fail")
    if check["status"] == "pass":
        assert result is not None and result["agent"]["healthy"] is True
        assert clock.freshness(result.get("generated_at"), NOW, 300)[0] == clock.FRESH
    code, _message = agent.npd_status(result, NOW)
    assert code != agent.NPD_OK or (result is not None and result["agent"]["healthy"] is True)


@settings(max_examples=200, deadline=None)
@given(doc=ANY_JSON, garble=st.sampled_from([b"", b"", b"{", b"\xff\xfe"]))
def test_the_configuration_reader_gives_a_dict_or_names_the_file(tmp_path_factory, doc, garble):
    path = tmp_path_factory.mktemp("config") / "agent.json"
    path.write_bytes(encode(doc, garble))
    try:
        config = load_config(str(path))
    except agent.AgentError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(config, dict) and config == json.loads(path.read_bytes())


@pytest.mark.parametrize("content,why", [
    (b'{"agent": {"healthy": true}, "generated_at": 1e999}', "not a finite number"),
    (b'{"agent": {"healthy": true, "healthy": false}, "generated_at": 1}', "duplicate key"),
    (b'{"agent": {"healthy": true, "failing": [{"id": "gpu.xid", "target": "gpu0"}]}}', "healthy with failing checks"),
    (b"[" * 100 + b"]" * 100, "nested deeper than"),
])
def test_a_hostile_health_json_is_set_aside_named_and_resumes_nothing(tmp_path, capsys, monkeypatch, content, why):
    runner = ScriptedRunner({("scontrol", "show", "node", "dgx-1", "-o"): (0, show("IDLE+DRAIN", "gpufleet: gpu.xid[gpu3]"), ""),
                             "scontrol": (0, "", "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls("dgx-1", runner)))
    (tmp_path / "health.json").write_bytes(content)
    assert agent.slurm_health_check({"state_dir": str(tmp_path)}, now=NOW) == 0
    out = capsys.readouterr().out
    assert "%s is damaged (" % (tmp_path / "health.json") in out and why in out and "node left as it is" in out
    assert runner.calls == []
    assert [name for name in os.listdir(str(tmp_path)) if name.startswith("health.json.damaged-")]
    # NPD: unknown, naming the file
    (tmp_path / "health.json").write_bytes(content)
    (tmp_path / "agent.json").write_text(json.dumps({"state_dir": str(tmp_path)}))
    assert agent.main(["--npd", str(tmp_path / "agent.json")]) == agent.NPD_UNKNOWN
    assert capsys.readouterr().out.startswith("gpufleet: %s" % str(tmp_path / "health.json")[:20])
