"""The remediation circuit breaker's invariants (issue 41), as properties over interleavings that
hypothesis' stateful testing explores: several controllers (each with its own ``by``) acquiring
and releasing nodes of one group, one controller's whole acquire landing between another's read
and write (of the Lease or of the Node), 409 Conflicts on resourceVersion, a clock stepping forward
and back, and damaged or hostile records injected between steps (and between a read and a write).

Invariants checked after every step and on every answer:

- never more than ``max_parallel`` nodes held (the Lease's holder set, and the admissions the
  model knows to be in force: admitted, not released, not expired);
- never two controllers on one node: a node held by one controller is not admitted to another
  until it is released or its slot has expired;
- every admission is counted before ``admitted`` is returned: the Node's attempt record holds the
  admission's time, and no node is admitted past ``max_attempts`` in the window (re-admission by
  its own controller counts too);
- unreadable means refused: while a record the acquire reads is damaged, the acquire is refused,
  names the record, and the damaged record is left exactly as it is (never read as expired,
  empty or "no attempts", never overwritten).

The store is the API double of the other breaker tests (tests/fake_kube_api), its own router
called in-process (``InProcessClient`` below: the same routes, status codes and interleaving hooks
as over HTTP, without sockets, so an interleaved controller can run inside another's request).
"""

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fake_kube_api.server import ApiError, FakeKubeAPI, Unreachable, _Handler

from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import MERGE_PATCH, ApiStatusError, KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

NS = "kube-system"
GROUP = "gpu_a100"
LEASE = "gpufleet-remediation-gpu-a100"
CONTROLLERS = ("run-a", "run-b", "run-c")
NODES = ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
LIMIT = 2
MAX_ATTEMPTS = 3
WINDOW = 3600.0
TTL = 600.0
T0 = 1_800_000_000.0
LEASE_RECORD = breaker.lease_record(NS, LEASE)

DEEP = "[" * 20000 + "]" * 20000
HOSTILE_HOLDERS = (
    '{"gpu-0": {"since": %r, "expires": NaN, "by": "run-z"}}' % T0,
    '{"gpu-0": {"since": %r, "expires": Infinity, "by": "run-z"}}' % T0,
    '{"gpu-0": {"since": %r, "expires": 1e999, "by": "run-z"}}' % T0,
    '{"gpu-0": {"since": %r, "expires": true, "by": "run-z"}}' % T0,
    '{"gpu-0": {"since": %r, "expires": 12, "by": "run-z"}}' % T0,
    '{"gpu-0": {"since": %r, "expires": %r, "by": null}}' % (T0, T0 + 1),
    '{"gpu-0": {"since": %r, "expires": %r}}' % (T0, T0 + 1),
    '{"gpu-0": 1, "gpu-0": 2}',
    '["gpu-0"]',
    "",
    DEEP,
)
HOSTILE_ATTEMPTS = ("[NaN, NaN, NaN]", "[Infinity]", "[1e999]", "[true]", "[12]", '["%r"]' % T0, "{}", "", DEEP,
                    "[%s]" % ",".join([repr(T0)] * (breaker.MAX_ATTEMPT_RECORDS + 1)))
HOSTILE_HISTORY = ("[NaN]", '[{"step": "drain"}]', "{}", "", DEEP,
                   '[{"step": "a", "status": "b", "reason": "c", "at": "1970-01-01T00:00:00Z", "by": "d"}]')
READERS = {
    "holders": lambda raw: breaker.read_holders(_lease_with(raw), NS, LEASE),
    "attempts": lambda raw: breaker.read_attempts(_node_with(breaker.ATTEMPTS_ANNOTATION, raw), "gpu-0"),
    "history": lambda raw: breaker.read_history(_node_with(breaker.HISTORY_ANNOTATION, raw), "gpu-0"),
}
ANNOTATION = {"attempts": breaker.ATTEMPTS_ANNOTATION, "history": breaker.HISTORY_ANNOTATION}


def _lease_with(raw):
    return {"metadata": {"name": LEASE, "resourceVersion": "1", "annotations": {breaker.HOLDERS_ANNOTATION: raw}}}


def _node_with(annotation, raw):
    return {"metadata": {"name": "gpu-0", "resourceVersion": "1", "annotations": {annotation: raw}}}


def unreadable(kind, raw):
    try:
        READERS[kind](raw)
    except RecordError:
        return True
    return False


def hostile(kind, known):
    """Known hostile records, and any text the reader itself refuses (hypothesis' text, JSON
    values of the wrong shape)."""
    junk = st.one_of(st.text(max_size=40), st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8).map(json.dumps))
    return st.one_of(st.sampled_from(known), junk.filter(lambda raw: unreadable(kind, raw)))


class InProcessClient(object):
    """kube_node.KubeClient's interface (request, get_node, patch_node) over the API double's own
    router, in-process: bodies and answers go through JSON both ways, an ApiError answers as
    ApiStatusError with its code, as over HTTP."""

    def __init__(self, api):
        self.api = api
        self.router = object.__new__(type("InProcessHandler", (_Handler,), {"api": api}))

    def request(self, method, path, body=None, content_type=None, deadline=None):
        body = None if body is None else json.loads(json.dumps(body))
        try:
            self.api._check_outage(method, path, {})
            _code, answer = self.router._route(method, path, {}, content_type or "", body, "gpufleet")
        except ApiError as exc:
            raise ApiStatusError(exc.code, exc.message)
        except Unreachable:
            raise KubeError("API server unreachable")
        return json.loads(json.dumps(answer))

    def get_node(self, name, deadline=None):
        return self.request("GET", "/api/v1/nodes/%s" % name)

    def patch_node(self, name, body, content_type=MERGE_PATCH, status=False, deadline=None):
        return self.request("PATCH", "/api/v1/nodes/%s%s" % (name, "/status" if status else ""), body, content_type)


class BreakerMachine(RuleBasedStateMachine):
    """Three controllers, four nodes, one group of max_parallel 2; a model of what must hold."""

    @initialize()
    def start(self):
        self.api = FakeKubeAPI()  # never started: the in-process client calls its router
        for node in NODES:
            self.api.add_node(node)
        self.now = [T0]
        self.breakers = dict((c, breaker.Breaker(InProcessClient(self.api), GROUP, max_parallel=LIMIT,
                                                 max_attempts=MAX_ATTEMPTS, window=WINDOW, ttl=TTL, controller=c,
                                                 retries=3, clock=lambda: self.now[0]))
                             for c in CONTROLLERS)
        self.operator = breaker.Breaker(InProcessClient(self.api), GROUP, max_parallel=LIMIT, controller="operator",
                                        retries=3, clock=lambda: self.now[0])
        self.held = {}  # node -> [controller, expires]: admissions in force
        self.attempts = dict((node, []) for node in NODES)  # the attempts the model has counted
        self.damaged = {}  # record name -> (kind, node, raw as injected, raw before)
        self.answers = []  # (controller, node, answer, damaged records at the start) of the current step

    # -- helpers ----------------------------------------------------------------------------------
    def raw_annotation(self, node, annotation):
        return (self.api.node(node)["metadata"].get("annotations") or {}).get(annotation)

    def raw_holders(self):
        lease = self.api.lease(NS, LEASE)
        return ((lease or {}).get("metadata", {}).get("annotations") or {}).get(breaker.HOLDERS_ANNOTATION)

    def relevant(self, node):
        return [record for record, (kind, target, _raw, _before) in self.damaged.items()
                if kind == "holders" or target == node]

    def acquire(self, controller, node):
        damaged = self.relevant(node)
        answer = self.breakers[controller].acquire(node)
        self.answers.append((controller, node, answer, damaged))

    def settle(self):
        """Check every answer of the step against the model, in the order they were given (an
        interleaved controller's answer comes before the one it interleaved)."""
        answers, self.answers = self.answers, []
        at = self.now[0]  # the clock does not move within a step
        for controller, node, answer, damaged in answers:
            if damaged:  # unreadable means refused, naming the record
                assert not answer["admitted"], (damaged, answer)
                if answer.get("unreadable") is None:  # refused before the damaged Lease was read
                    assert damaged == [LEASE_RECORD] and "remediation attempt(s) of" in answer["reason"], answer
                else:
                    assert answer["unreadable"] in damaged and "refused (fail closed)" in answer["reason"], answer
            if answer.get("unreadable") is not None:
                assert not answer["admitted"] and answer["unreadable"] in self.damaged, answer
            if not answer["admitted"]:
                continue
            holder = self.held.get(node)
            assert holder is None or holder[0] == controller, ("two controllers on one node", node, holder, answer)
            recent = [a for a in self.attempts[node] if a > at - WINDOW]
            assert len(recent) < MAX_ATTEMPTS, ("admitted past max_attempts", node, recent, answer)
            assert answer["attempts"] == len(recent) + 1, (answer, recent)
            self.attempts[node] = recent + [at]
            assert at in breaker.read_attempts(self.api.node(node), node), ("admission not counted", node, answer)
            self.held[node] = [controller, max(holder[1], at + TTL) if holder else at + TTL]
            assert len(self.held) <= LIMIT, ("more than max_parallel admitted", self.held)

    def released(self, node, outcome, controller=None):
        if outcome["released"] and node in self.held and (controller is None or self.held[node][0] == controller):
            del self.held[node]

    # -- rules ------------------------------------------------------------------------------------
    @rule(controller=st.sampled_from(CONTROLLERS), node=st.sampled_from(NODES))
    def acquire_one(self, controller, node):
        self.acquire(controller, node)
        self.settle()

    @rule(controller=st.sampled_from(CONTROLLERS), node=st.sampled_from(NODES),
          other=st.sampled_from(CONTROLLERS), other_node=st.sampled_from(NODES), at_node=st.booleans())
    def acquire_while_another_controller_acquires(self, controller, node, other, other_node, at_node):
        """``other``'s whole acquire lands between ``controller``'s read and write: of the Lease
        (before its PUT), or of the Node (before the PATCH that counts the attempt)."""
        def interloper(_api):
            self.acquire(other, other_node)

        if at_node:
            self.api.interleave(node, interloper, times=1)
        else:
            self.api.interleave_lease(NS, LEASE, interloper, times=1)
        try:
            self.acquire(controller, node)
        finally:
            self.api._interleaved.clear()
            self.api._lease_interleaved.clear()
        self.settle()

    @rule(controller=st.sampled_from(CONTROLLERS), node=st.sampled_from(NODES), conflicts=st.integers(1, 6),
          at_node=st.booleans())
    def acquire_under_conflicts(self, controller, node, conflicts, at_node):
        """Another writer bumps the resourceVersion before each of the next ``conflicts`` writes:
        409 Conflict, read again and decide again (3 lease retries, 5 Node retries)."""
        def bump(api):
            with api.lock:
                if at_node:
                    api.nodes[node]["metadata"]["resourceVersion"] = api._next_rv()
                elif (NS, LEASE) in api.leases:
                    api.leases[(NS, LEASE)]["metadata"]["resourceVersion"] = api._next_rv()

        if at_node:
            self.api.interleave(node, bump, times=conflicts)
        else:
            self.api.interleave_lease(NS, LEASE, bump, times=conflicts)
        try:
            self.acquire(controller, node)
        finally:
            self.api._interleaved.clear()
            self.api._lease_interleaved.clear()
        self.settle()

    @rule(data=st.data(), controller=st.sampled_from(CONTROLLERS), node=st.sampled_from(NODES),
          kind=st.sampled_from(["holders", "attempts"]))
    def record_damaged_between_read_and_write(self, data, controller, node, kind):
        """The Lease (before the PUT) or the Node's attempts (before the PATCH) is damaged after the
        acquire read it: the write conflicts, the record is read again, and it is refused."""
        if kind == "holders":
            record = LEASE_RECORD
        else:
            record = breaker.node_record(node, breaker.ATTEMPTS_ANNOTATION)
        if record in self.damaged or self.relevant(node):
            return
        raw = data.draw(hostile(kind, HOSTILE_HOLDERS if kind == "holders" else HOSTILE_ATTEMPTS))

        def damage(api):
            with api.lock:
                if kind == "holders":
                    lease = api.leases[(NS, LEASE)]
                    before = (lease["metadata"].get("annotations") or {}).get(breaker.HOLDERS_ANNOTATION)
                    lease["metadata"].setdefault("annotations", {})[breaker.HOLDERS_ANNOTATION] = raw
                    lease["metadata"]["resourceVersion"] = api._next_rv()
                else:
                    before = self.raw_annotation(node, breaker.ATTEMPTS_ANNOTATION)
                    api.patch_node(node, MERGE_PATCH, {"metadata": {"annotations": {breaker.ATTEMPTS_ANNOTATION: raw}}})
            self.damaged[record] = (kind, node, raw, before)

        if kind == "holders":
            self.api.interleave_lease(NS, LEASE, damage, times=1)
        else:
            self.api.interleave(node, damage, times=1)
        try:
            self.acquire(controller, node)
        finally:
            self.api._interleaved.clear()
            self.api._lease_interleaved.clear()
        controller_, node_, answer, _damaged = self.answers[-1]
        if record in self.damaged:  # the damage landed within the acquire: it may not admit
            assert not answer["admitted"], answer
        self.settle()

    @rule(node=st.sampled_from(NODES))
    def holder_releases(self, node):
        if node not in self.held:
            return
        controller = self.held[node][0]
        self.released(node, self.breakers[controller].release(node), controller)

    @rule(node=st.sampled_from(NODES))
    def operator_releases(self, node):
        self.released(node, self.operator.release(node))

    @rule(step=st.sampled_from([-3 * TTL, -60.0, 30.0, 300.0, TTL + 1, WINDOW + 1]))
    def clock_steps(self, step):
        self.now[0] += step
        # a slot past its expiry is gone for good (the next write drops it), even if the clock
        # later steps back
        for node, (_controller, expires) in list(self.held.items()):
            if expires <= self.now[0]:
                del self.held[node]

    @rule(data=st.data(), kind=st.sampled_from(["holders", "attempts", "history"]), node=st.sampled_from(NODES))
    def damage_a_record(self, data, kind, node):
        if kind == "holders":
            record, before = LEASE_RECORD, self.raw_holders()
            if before is None or record in self.damaged:
                return
            raw = data.draw(hostile(kind, HOSTILE_HOLDERS))
            with self.api.lock:
                self.api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = raw
                self.api.leases[(NS, LEASE)]["metadata"]["resourceVersion"] = self.api._next_rv()
        else:
            record = breaker.node_record(node, ANNOTATION[kind])
            if record in self.damaged:
                return
            before = self.raw_annotation(node, ANNOTATION[kind])
            raw = data.draw(hostile(kind, HOSTILE_ATTEMPTS if kind == "attempts" else HOSTILE_HISTORY))
            self.api.patch_node(node, MERGE_PATCH, {"metadata": {"annotations": {ANNOTATION[kind]: raw}}})
        self.damaged[record] = (kind, node, raw, before)

    @rule(data=st.data())
    def repair_a_record(self, data):
        """An operator puts back what was there before the damage."""
        if not self.damaged:
            return
        record = data.draw(st.sampled_from(sorted(self.damaged)))
        kind, node, _raw, before = self.damaged.pop(record)
        if kind == "holders":
            with self.api.lock:
                self.api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = before
                self.api.leases[(NS, LEASE)]["metadata"]["resourceVersion"] = self.api._next_rv()
        else:
            self.api.patch_node(node, MERGE_PATCH, {"metadata": {"annotations": {ANNOTATION[kind]: before}}})

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def damaged_records_are_left_as_they_are(self):
        for record, (kind, node, raw, _before) in self.damaged.items():
            now = self.raw_holders() if kind == "holders" else self.raw_annotation(node, ANNOTATION[kind])
            assert now == raw, ("a damaged record was overwritten", record)

    @invariant()
    def every_admission_is_counted_on_the_node(self):
        for node in NODES:
            if breaker.node_record(node, breaker.ATTEMPTS_ANNOTATION) not in self.damaged:
                assert breaker.read_attempts(self.api.node(node), node) == sorted(self.attempts[node]), node

    @invariant()
    def never_more_than_max_parallel(self):
        assert len(self.held) <= LIMIT
        if LEASE_RECORD in self.damaged or self.api.lease(NS, LEASE) is None:
            return
        holders = breaker.read_holders(self.api.lease(NS, LEASE), NS, LEASE)  # every entry, expired ones too
        assert len(holders) <= LIMIT, holders
        live = breaker.live_holders(holders, self.now[0])
        for node, (controller, _expires) in self.held.items():
            assert live.get(node, {}).get("by") == controller, ("an admission in force is not in the Lease", node, live)


BreakerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                                            suppress_health_check=[HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
test_breaker_invariants = BreakerMachine.TestCase


def test_a_slot_given_back_is_never_one_an_interleaved_admission_of_the_same_controller_holds():
    """Found by test_breaker_invariants ("an admission in force is not in the Lease"): run-a's acquire
    takes a fresh slot, and another acquire of run-a lands between its Lease write and its Node write;
    that one finds the slot run-a's, is admitted and counts the third attempt; the first one's Node
    write conflicts, decides again, is exhausted, and gave the slot back: the admission in force was
    no longer in the Lease. The slot is now kept (the Node counts an admission of run-a at this time)."""
    machine = BreakerMachine()
    machine.start()
    machine.acquire_one("run-a", "gpu-0")
    machine.acquire_one("run-a", "gpu-0")  # again, its own slot: 2 attempts
    machine.holder_releases("gpu-0")
    assert "gpu-0" not in machine.held
    machine.acquire_while_another_controller_acquires(controller="run-a", node="gpu-0", other="run-a",
                                                      other_node="gpu-0", at_node=True)
    assert machine.held["gpu-0"][0] == "run-a"
    machine.never_more_than_max_parallel()
    machine.every_admission_is_counted_on_the_node()
    live = breaker.live_holders(breaker.read_holders(machine.api.lease(NS, LEASE), NS, LEASE), machine.now[0])
    assert live["gpu-0"]["by"] == "run-a"
    assert breaker.read_attempts(machine.api.node("gpu-0"), "gpu-0") == [T0, T0, T0]


def test_the_in_process_client_answers_as_the_double_does_over_http():
    """The client of the machine: the same routes and answers (a 409 on a stale resourceVersion,
    404 for a missing lease) as the double gives over HTTP (tests/unit/test_breaker.py)."""
    api = FakeKubeAPI()
    api.add_node("gpu-0")
    client = InProcessClient(api)
    path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NS
    body = {"metadata": {"name": "x"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10}}
    created = client.request("POST", path, body, "application/json")
    stale = dict(body, metadata={"name": "x", "resourceVersion": "1"})
    for method, where, sent, code in (("PUT", path + "/x", stale, 409), ("GET", path + "/y", None, 404),
                                      ("POST", path, body, 409)):
        try:
            client.request(method, where, sent, "application/json")
        except ApiStatusError as exc:
            assert exc.code == code
        else:
            raise AssertionError("%s %s answered" % (method, where))
    fresh = dict(body, metadata={"name": "x", "resourceVersion": created["metadata"]["resourceVersion"]})
    assert client.request("PUT", path + "/x", fresh, "application/json")["metadata"]["name"] == "x"
    assert client.get_node("gpu-0")["metadata"]["name"] == "gpu-0"
