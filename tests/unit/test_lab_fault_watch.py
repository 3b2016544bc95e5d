"""roles/lab_sim/files/lab_fault_watch (SIMULATION): the watch playbooks/lab_agent.yml runs on a lab
node to time the node health agent from an injected fault to health.json showing it.

No test waits on a real clock: the watch gets a fake clock and sleep; file times are set with
os.utime."""

import importlib.machinery
import importlib.util
import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "roles", "lab_sim", "files", "lab_fault_watch")


def load():
    loader = importlib.machinery.SourceFileLoader("lab_fault_watch_%d" % id(object()), SCRIPT)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


WATCH = load()


def health(healthy, failing=(), cycle=7, generated_at=1000.5):
    return json.dumps({"agent": {"healthy": healthy, "failing": [dict(f) for f in failing]},
                       "cycle": cycle, "generated_at": generated_at})


LOST = {"id": "gpu.lost", "target": "gpu5", "status": "fail", "message": "GPU is lost"}
PORT = {"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail", "message": "port DOWN"}


class FakeTime:
    """A clock that moves only when the watch sleeps; ``on_sleep(now)`` runs after each sleep (it
    plays the agent: writes health.json, or the injection)."""

    def __init__(self, start, on_sleep=None):
        self.now = start
        self.on_sleep = on_sleep
        self.sleeps = 0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps += 1
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(self.now)


def args(tmp_path, *extra):
    return WATCH.parser().parse_args(["--health", str(tmp_path / "health.json"), "--path", str(tmp_path / "scenario.json"),
                                      "--link", "lost.json", "--check", "gpu.lost", "--timeout", "20"] + list(extra))


def inject_link(tmp_path, target, when):
    link = tmp_path / "scenario.json"
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)
    os.utime(link, (when, when), follow_symlinks=False)


# -- verdict: what health.json says -------------------------------------------------------------
def test_verdict_finds_the_check_and_its_target():
    raw = health(False, [PORT, LOST])
    assert WATCH.verdict(raw, ["gpu.lost"]) == (False, {"id": "gpu.lost", "target": "gpu5"})
    assert WATCH.verdict(raw, ["rdma.port.phys_state", "rdma.port.state"], "mlx5_0/1") == (
        False, {"id": "rdma.port.state", "target": "mlx5_0/1"})
    assert WATCH.verdict(raw, ["rdma.port.state"], "mlx5_1/1") == (False, None)  # another port
    assert WATCH.verdict(health(True), ["gpu.lost"]) == (True, None)


def test_seen_needs_an_unhealthy_verdict_naming_the_check():
    match = {"id": "gpu.lost", "target": "gpu5"}
    assert WATCH.seen(False, match, "failing")
    assert not WATCH.seen(True, match, "failing")  # healthy: the check is not (yet) acted on
    assert not WATCH.seen(False, None, "failing")  # unhealthy for another reason (lab-3's ECC)
    assert WATCH.seen(False, None, "clear") and WATCH.seen(True, None, "clear")
    assert not WATCH.seen(False, match, "clear")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
AGENTISH = st.fixed_dictionaries({"agent": st.fixed_dictionaries(
    {"healthy": JSON, "failing": st.lists(st.fixed_dictionaries({"id": JSON, "target": JSON}) | JSON, max_size=3) | JSON})})


@settings(max_examples=100, deadline=None)
@given(raw=st.text(max_size=80) | JSON.map(json.dumps) | AGENTISH.map(json.dumps),
       checks=st.lists(st.sampled_from(["gpu.lost", "rdma.port.state", ""]), min_size=1, max_size=2))
def test_verdict_is_a_verdict_or_a_value_error(raw, checks):
    """Any text: (bool, match or None), or ValueError (the watch counts it unreadable and polls
    again); never another exception, never a match the text does not hold."""
    try:
        healthy, match = WATCH.verdict(raw, checks)
    except ValueError:
        return
    doc = json.loads(raw)
    assert healthy is doc["agent"]["healthy"]
    if match is not None:
        assert match["id"] in checks
        assert {"id": match["id"], "target": match["target"]} in [
            {"id": f.get("id"), "target": f.get("target")} for f in doc["agent"]["failing"]]


# -- watch: the measurement --------------------------------------------------------------------
def test_times_from_the_injection_to_the_poll_that_sees_it(tmp_path):
    (tmp_path / "health.json").write_text(health(True))
    inject_link(tmp_path, "lost.json", 1000.0)

    def agent(now):
        if now >= 1002.0:
            (tmp_path / "health.json").write_text(health(False, [LOST], cycle=8, generated_at=1001.9))

    fake = FakeTime(1000.2, agent)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 0, result
    assert result["injected_epoch"] == 1000.0 and result["check"] == "gpu.lost" and result["failing_target"] == "gpu5"
    assert 2.0 <= result["seconds"] <= 2.05 + 1e-9  # the first 50 ms poll at or after 1002.0
    assert result["published_seconds"] == 1.9 and result["cycle"] == 8
    assert result["injected_at"] == "1970-01-01T00:16:40.000Z"
    assert result["via"] == "full cycle" and result["signal"] is None


def test_says_when_a_targeted_cycle_published_it(tmp_path):
    (tmp_path / "health.json").write_text(health(True))
    inject_link(tmp_path, "lost.json", 1000.0)
    doc = json.loads(health(False, [LOST]))
    doc["agent"]["signal"] = {"source": "probe", "checks": {"gpu": ["gpu5"]}}

    def agent(now):
        (tmp_path / "health.json").write_text(json.dumps(doc))

    fake = FakeTime(1000.0, agent)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 0 and result["via"] == "targeted cycle" and result["signal"] == doc["agent"]["signal"]


def test_waits_for_the_injection_then_measures_from_its_own_time(tmp_path):
    (tmp_path / "health.json").write_text(health(True))
    inject_link(tmp_path, "healthy.json", 900.0)  # the scenario before the fault

    def world(now):
        if now >= 1001.0 and os.readlink(tmp_path / "scenario.json") != "lost.json":
            inject_link(tmp_path, "lost.json", 1001.0)
        if now >= 1003.0:
            (tmp_path / "health.json").write_text(health(False, [LOST]))

    fake = FakeTime(1000.0, world)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 0 and result["injected_epoch"] == 1001.0 and 2.0 <= result["seconds"] < 2.1


def test_an_injection_older_than_the_watch_is_refused(tmp_path):
    """The fault was already in place (a link that did not change): its time says nothing."""
    (tmp_path / "health.json").write_text(health(False, [LOST]))
    inject_link(tmp_path, "lost.json", 500.0)
    fake = FakeTime(1000.0)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 2 and "before the watch began" in result["error"] and result["seconds"] is None


def test_no_injection_within_the_timeout(tmp_path):
    (tmp_path / "health.json").write_text(health(True))
    inject_link(tmp_path, "healthy.json", 900.0)
    fake = FakeTime(1000.0)
    result, code = WATCH.watch(args(tmp_path, "--inject-timeout", "45"), fake.clock, fake.sleep)
    assert code == 2 and "not seen in place" in result["error"] and "within 45.0 s" in result["error"]
    assert 1045.0 < fake.now < 1045.2


def test_the_injection_may_come_later_than_the_bound(tmp_path):
    """Injecting takes its own time (Ansible tasks on a loaded host): the bound counts from the
    injection, and waiting for the injection has its own time-out."""
    (tmp_path / "health.json").write_text(health(True))
    inject_link(tmp_path, "healthy.json", 900.0)

    def world(now):
        if now >= 1030.0 and os.readlink(tmp_path / "scenario.json") != "lost.json":
            inject_link(tmp_path, "lost.json", 1030.0)
        if now >= 1031.0:
            (tmp_path / "health.json").write_text(health(False, [LOST]))

    fake = FakeTime(1000.0, world)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)  # --timeout 20
    assert code == 0 and 1.0 <= result["seconds"] < 1.1


def test_not_seen_within_the_bound_fails_with_what_was_awaited(tmp_path):
    (tmp_path / "health.json").write_text(health(False, [PORT]))  # unhealthy, but not for this
    inject_link(tmp_path, "lost.json", 1000.0)
    fake = FakeTime(1000.0)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 1 and result["detected_at"] is None and "gpu.lost failing within 20.0 s" in result["error"]
    assert result["polls"] > 300  # every 50 ms for 20 s


def test_a_half_written_health_json_is_read_again(tmp_path):
    (tmp_path / "health.json").write_text(health(False, [LOST])[:25])
    inject_link(tmp_path, "lost.json", 1000.0)

    def agent(now):
        if now >= 1000.5:
            (tmp_path / "health.json").write_text(health(False, [LOST]))

    fake = FakeTime(1000.0, agent)
    result, code = WATCH.watch(args(tmp_path), fake.clock, fake.sleep)
    assert code == 0 and result["unreadable"] >= 9 and result["seconds"] >= 0.5


def test_a_port_file_and_the_clear_mode(tmp_path):
    state = tmp_path / "state"
    state.write_text("4: ACTIVE\n")
    os.utime(state, (1000.0, 1000.0))
    (tmp_path / "health.json").write_text(health(False, [PORT]))

    def agent(now):
        if now >= 1004.0:
            (tmp_path / "health.json").write_text(health(True))

    fake = FakeTime(1000.1, agent)
    cli = WATCH.parser().parse_args(["--health", str(tmp_path / "health.json"), "--path", str(state),
                                     "--text", "4: ACTIVE", "--check", "rdma.port.state", "--check",
                                     "rdma.port.phys_state", "--target", "mlx5_0/1", "--until", "clear"])
    result, code = WATCH.watch(cli, fake.clock, fake.sleep)
    assert code == 0 and result["check"] is None and 4.0 <= result["seconds"] < 4.1


def test_usage_errors_exit_3(capsys):
    assert WATCH.main(["--check", "gpu.lost"]) == 3  # no --path, no --link/--text
    assert WATCH.main(["--check", "x", "--path", "p", "--link", "l", "--text", "t"]) == 3
    for bad in ("nan", "inf", "0", "-1"):
        assert WATCH.main(["--check", "x", "--path", "p", "--link", "l", "--timeout", bad]) == 3
        assert WATCH.main(["--check", "x", "--path", "p", "--link", "l", "--inject-timeout", bad]) == 3
    capsys.readouterr()
