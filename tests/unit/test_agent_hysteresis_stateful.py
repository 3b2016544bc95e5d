"""The hysteresis promises of docs/contracts.md ("Hysteresis", "Records read back") as invariants
of a hypothesis state machine driving the agent's real reader, step and writer of
agent-state.json through any sequence of cycles, clock steps, damaged state files and crashes
mid-write:

- a check turns failing only after ``fail_after`` consecutive failing cycles, and never later
  (an immediate check, ``fail_after`` 1, makes the node unhealthy in the cycle it first fails);
- a failing check is healthy again only after ``recover_after`` consecutive passing cycles, and
  then it is (never held forever);
- the node is healthy exactly when no check is failing;
- the wall clock changes nothing: a twin fed the same outcomes under another clock (steps back
  and forward, any finite time) reaches the same verdicts;
- a damaged agent-state.json is set aside and never makes a node healthy sooner (every check
  counts as failing until it passes its ``recover_after`` cycles after the damage); a temporary
  file left by a crash mid-write is never read;
- what a cycle writes, the reader reads back unchanged.
"""

import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_state
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import thresholds
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_hysteresis import (
    check_key, failing_after_hysteresis, lost_history, step)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import atomic_write

CHECKS = (("gpu.xid", "gpu0"), ("gpu.count", "node"), ("gpu.temperature", "gpu1"), ("rdma.port.state", "mlx5_0/1"))
STATUSES = ("pass", "warn", "fail", "skip")
NOW = 1700000000.0
# any finite time a clock may show (a clock never set, stepped back or far ahead)
TIMES = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


class Hysteresis(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        # a tmpfs when there is one: the writer's fsync is real, and cheap there
        self.dir = tempfile.mkdtemp(prefix="gpufleet-hysteresis-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.path = os.path.join(self.dir, agent_state.STATE_FILE)
        self.now = self.twin_now = NOW
        self.twin = {}
        self.journal = []
        self.cycles = 0
        self.damages_read = 0
        self.failing = dict((key, False) for key in self.keys())  # after the last cycle
        self.fail_run = dict((key, 0) for key in self.keys())  # consecutive failing cycles
        self.pass_run = dict((key, 0) for key in self.keys())  # consecutive passing cycles since a failure or damage
        self.damaged = False  # the state file is damaged: the next cycle's history is lost

    def keys(self):
        return ["%s|%s" % check for check in CHECKS]

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(fail_after=st.integers(1, 4), recover_after=st.integers(1, 4),
                immediate=st.sets(st.sampled_from([check_id for check_id, _target in CHECKS])),
                fail_on=st.sampled_from(["fail", "warn"]))
    def configure(self, fail_after, recover_after, immediate, fail_on):
        self.settings = {"fail_after": fail_after, "recover_after": recover_after, "immediate": immediate,
                         "per_check": {}}
        self.fail_on = fail_on
        self.bad = ("fail",) if fail_on == "fail" else ("fail", "warn")

    @rule(statuses=st.lists(st.sampled_from(STATUSES), min_size=len(CHECKS), max_size=len(CHECKS)))
    def cycle(self, statuses):
        checks = [{"id": check_id, "target": target, "status": status, "message": "%s is %s" % (check_id, status)}
                  for (check_id, target), status in zip(CHECKS, statuses)]
        # the agent: read back, one step, written back (agent_cycle.Agent.cycle's order)
        state = agent_state.read_state(self.path, self.journal.append, self.now)
        lost = bool(state.get("history_lost"))
        assert lost == self.damaged, (lost, self.damaged, self.journal[-1:])
        self.damages_read += lost
        state, _events = step(state, checks, self.settings, fail_on=self.fail_on, now=self.now)
        state["failing"] = failing_after_hysteresis(state, checks)
        atomic_write(self.path, json.dumps(state, sort_keys=True))
        # the twin: the same outcomes under another clock, the same damage, never on disk
        self.twin, _events = step(lost_history("damaged") if lost else self.twin, checks, self.settings,
                                  fail_on=self.fail_on, now=self.twin_now)
        self.cycles += 1
        self.check_promises(checks, state, lost)
        self.damaged = False

    def check_promises(self, checks, state, lost):
        for check in checks:
            key = check_key(check)
            fail_after, recover_after = thresholds(self.settings, check["id"])
            raw = check["status"] in self.bad
            self.fail_run[key] = self.fail_run[key] + 1 if raw else 0
            self.pass_run[key] = 0 if raw or lost else self.pass_run[key] + 1
            if lost and not raw:
                self.pass_run[key] = 1
            was = self.failing[key] or lost  # a lost history counts as failing
            now = state["checks"][key]["failing"]
            if not was and now:  # turned failing: only after fail_after consecutive failing cycles
                assert raw and self.fail_run[key] >= fail_after, (key, self.fail_run[key], fail_after)
            if raw and self.fail_run[key] >= fail_after:  # and never later
                assert now, (key, "not failing after %d failing cycles" % self.fail_run[key])
            if was and not now:  # healthy again: only after recover_after passing cycles
                assert not raw and self.pass_run[key] >= recover_after, (key, self.pass_run[key], recover_after)
            if was and not raw and self.pass_run[key] >= recover_after:  # and then it is
                assert not now, (key, "still failing after %d passing cycles" % self.pass_run[key])
            if fail_after == 1 and raw:  # an immediate check: unhealthy in this very cycle
                assert not state["healthy"]
            self.failing[key] = now
        assert state["healthy"] is (not any(self.failing.values()))
        failing_keys = [check_key(item) for item in state["failing"]]
        assert sorted(failing_keys) == sorted(key for key, value in self.failing.items() if value)

    @rule(delta=TIMES, twin_delta=TIMES)
    def clock_step(self, delta, twin_delta):
        """NTP steps, a clock never set, a TZ change: each clock jumps on its own."""
        self.now = min(max(self.now + delta, -1e15), 1e15)
        self.twin_now = min(max(self.twin_now + twin_delta, -1e15), 1e15)

    @rule(cut=st.floats(min_value=0.0, max_value=0.999), garbage=st.binary(max_size=64), truncate=st.booleans())
    def damage(self, cut, garbage, truncate):
        """The disk lost the end of a write, or the file holds something else."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            data = b""
        content = data[:int(len(data) * cut)] if truncate else garbage
        try:
            agent_state.parse_state(content)
            valid = True
        except records.RecordError:
            valid = False
        assume(not valid)  # a well-formed record that lies is not damage
        with open(self.path, "wb") as out:
            out.write(content)
        self.damaged = True

    @rule(data=st.binary(max_size=256), pid=st.integers(1, 4194304))
    def crash_mid_write(self, data, pid):
        """The agent died between the temporary file and the rename: the temporary stays."""
        with open(os.path.join(self.dir, ".agent-state.json.%d.0badc0de" % pid), "wb") as out:
            out.write(data)

    @invariant()
    def the_clock_changes_nothing(self):
        if self.cycles:
            with open(self.path, "rb") as handle:
                ondisk = json.loads(handle.read()) if not self.damaged else None
            if ondisk is not None:
                assert ondisk["healthy"] == self.twin["healthy"]
                for key, entry in self.twin["checks"].items():
                    mine = ondisk["checks"][key]
                    assert [mine.get(name) for name in ("failing", "fails", "passes", "flaps", "raw", "message", "held")] \
                        == [entry.get(name) for name in ("failing", "fails", "passes", "flaps", "raw", "message", "held")]

    @invariant()
    def what_is_written_reads_back(self):
        if self.cycles and not self.damaged:
            with open(self.path, "rb") as handle:
                raw = handle.read()
            assert agent_state.parse_state(raw) == json.loads(raw)

    @invariant()
    def damaged_files_are_set_aside_never_removed(self):
        aside = [name for name in os.listdir(self.dir) if name.startswith("agent-state.json.damaged-")]
        assert len(aside) == self.damages_read


Hysteresis.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
test_hysteresis_promises = Hysteresis.TestCase
