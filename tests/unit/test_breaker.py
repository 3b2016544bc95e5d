"""The remediation circuit breaker (module_utils/remediation/breaker.py) against the API double: a Lease per
group with resourceVersion conflicts as the real server answers them, attempts on the Node, and
the faults: racing controllers, the breaker open, a conflict storm, API server errors."""

import json
import math
import threading

import pytest
from fake_kube_api.server import FakeKubeAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import MAX_TIME, MIN_TIME, RecordError

NS = "kube-system"
LEASE = "gpufleet-remediation-gpu-a100"
T0 = 1_800_000_000.0  # a plausible wall-clock time (2027-01-15): records outside 2020..2100 are unreadable


@pytest.fixture(scope="module")
def server():
    double = FakeKubeAPI().start()  # one per module: stopping one takes half a second
    yield double
    double.stop()


@pytest.fixture
def api(server):
    with server.lock:
        server.nodes.clear()
        server.leases.clear()
        server.requests.clear()
        server._interleaved.clear()
        server._lease_interleaved.clear()
        server._outages.clear()
        server._lease_outage = None
    for index in range(8):
        server.add_node("gpu-%d" % index)
    return server


def client(api):
    return KubeClient(api.url, token=api.token, allow_plain_http=True, timeout=5)


def make(api, **options):
    options.setdefault("max_parallel", 2)
    return breaker.Breaker(client(api), "gpu_a100", **options)


def holders(api):
    lease = api.lease(NS, LEASE)
    return sorted(json.loads(lease["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION])) if lease else []


def state(api, node):
    annotations = api.node(node)["metadata"].get("annotations") or {}
    raw = annotations.get(breaker.STATE_ANNOTATION)
    return json.loads(raw) if raw else None


def test_admits_up_to_the_limit_then_the_breaker_is_open(api):
    first, second, third = (make(api, controller="c%d" % i).acquire("gpu-%d" % i) for i in range(3))
    assert first["admitted"] and second["admitted"] and not third["admitted"]
    assert third["reason"] == ("breaker open: 2 of 2 node(s) of group gpu_a100 in remediation (gpu-0, gpu-1); "
                               "gpu-2 waits, isolated")
    assert holders(api) == ["gpu-0", "gpu-1"]
    assert state(api, "gpu-2")["status"] == "refused" and state(api, "gpu-2")["reason"] == third["reason"]
    assert state(api, "gpu-0")["status"] == "admitted"
    assert json.loads(api.node("gpu-0")["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION])
    lease = api.lease(NS, LEASE)
    assert lease["spec"]["holderIdentity"] == "c1" and lease["spec"]["leaseDurationSeconds"] == 7200


def test_release_frees_the_slot_and_is_recorded(api):
    b = make(api)
    assert b.acquire("gpu-0")["admitted"] and b.acquire("gpu-1")["admitted"]
    assert not b.acquire("gpu-2")["admitted"]
    assert b.release("gpu-0", reason="burn-in passed")["held"] is True
    assert b.acquire("gpu-2")["admitted"]
    assert holders(api) == ["gpu-1", "gpu-2"]
    history = json.loads(api.node("gpu-0")["metadata"]["annotations"][breaker.HISTORY_ANNOTATION])
    assert [(h["step"], h["status"]) for h in history] == [("breaker", "admitted"), ("breaker", "released")]
    assert b.release("gpu-7")["held"] is False  # not held: nothing written


def test_same_node_again_keeps_its_slot_and_counts_an_attempt(api):
    """Issue 41: re-admitting a held node (the same controller's next run after a failed
    remediation, which keeps its slot) is an attempt, so max_attempts stops a node whose
    remediation keeps failing."""
    now = [T0]
    b = make(api, max_parallel=1, max_attempts=2, clock=lambda: now[0])
    assert b.acquire("gpu-0")["attempts"] == 1
    now[0] += 60
    again = b.acquire("gpu-0")
    assert again["admitted"] and again["attempts"] == 2 and holders(api) == ["gpu-0"]
    now[0] += 60
    third = b.acquire("gpu-0")
    assert not third["admitted"] and third["attempts"] == 2
    assert "2 remediation attempt(s) of gpu-0" in third["reason"]
    assert json.loads(api.node("gpu-0")["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION]) == [T0, T0 + 60]
    assert holders(api) == ["gpu-0"]  # the failing node keeps its slot (the breaker stays open)


def test_percent_limit():
    assert breaker.parallel_limit("10%", 50) == 5
    assert breaker.parallel_limit("10%", 5) == 1  # at least one when the share is not 0
    assert breaker.parallel_limit("0%", 5) == 0
    assert breaker.parallel_limit("3", None) == 3
    for bad, words in ((-1, ">= 0"), ("ten", "percentage"), ("150%", "percentage"), (True, "number of nodes"),
                       ("\u00b2", "percentage")):  # "²".isdigit() is true, int("²") raises
        with pytest.raises(breaker.BreakerError, match=words):
            breaker.parallel_limit(bad, 10)
    with pytest.raises(breaker.BreakerError, match="group_size"):
        breaker.parallel_limit("10%", None)


def test_max_attempts_per_window_keeps_the_node_isolated(api):
    now = [T0]
    b = make(api, max_attempts=2, window=3600, clock=lambda: now[0])
    for _ in range(2):
        assert b.acquire("gpu-0")["admitted"]
        b.release("gpu-0")
        now[0] += 60
    refused = b.acquire("gpu-0")
    assert not refused["admitted"] and refused["attempts"] == 2
    assert refused["reason"].startswith("breaker: 2 remediation attempt(s) of gpu-0 in the last 1 h (max_attempts 2)")
    assert holders(api) == [] and state(api, "gpu-0")["status"] == "refused"
    now[0] += 3600  # the window has passed
    assert b.acquire("gpu-0")["admitted"]


def test_an_expired_holder_does_not_block(api):
    now = [T0]
    b = make(api, max_parallel=1, ttl=600, clock=lambda: now[0])
    assert b.acquire("gpu-0")["admitted"]  # its controller then dies: never released
    assert not b.acquire("gpu-1")["admitted"]
    now[0] += 601
    assert b.acquire("gpu-1")["admitted"] and holders(api) == ["gpu-1"]


def test_two_controllers_racing_never_admit_more_than_the_limit(api):
    """Eight controllers (own client, own Breaker) ask at the same moment for eight nodes; the
    lease's resourceVersion lets exactly max_parallel in, whatever the interleaving."""
    def run(index, start, results):
        b = make(api, controller="controller-%d" % index, retries=30)
        start.wait()
        results[index] = b.acquire("gpu-%d" % index)

    for round_ in range(2):
        start = threading.Barrier(8)
        results = [None] * 8
        threads = [threading.Thread(target=run, args=(i, start, results)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        admitted = sorted(r["node"] for r in results if r["admitted"])
        assert len(admitted) == 2, (round_, results)
        assert holders(api) == admitted
        for r in results:
            if not r["admitted"]:
                assert r["reason"].startswith("breaker open: 2 of 2") or "409" in r["reason"], r
        releaser = make(api)
        for node in admitted:
            releaser.release(node)
        assert holders(api) == []
    conflicts = [r for r in api.requests if r["method"] == "PUT" and r["status"] == 409]
    assert all("leases" in r["path"] for r in conflicts)


def test_a_conflict_is_read_again_and_decided_again(api):
    b = make(api, max_parallel=1)
    assert b.acquire("gpu-0")["admitted"]
    b.release("gpu-0")

    def another_controller_takes_the_slot(server):
        """Lands between our read and our PUT, as another controller's update does."""
        with server.lock:
            lease = server.leases[(NS, LEASE)]
            lease["metadata"]["annotations"] = {breaker.HOLDERS_ANNOTATION: json.dumps(
                {"gpu-5": {"since": T0, "expires": 4e9, "by": "other"}})}
            lease["metadata"]["resourceVersion"] = server._next_rv()

    api.interleave_lease(NS, LEASE, another_controller_takes_the_slot, times=1)
    refused = b.acquire("gpu-1")
    assert not refused["admitted"] and refused["holders"] == ["gpu-5"] and refused["lease_attempts"] == 2
    assert holders(api) == ["gpu-5"]
    assert [r["status"] for r in api.recorded("PUT", LEASE)][-1] == 409


def test_conflict_storm_refuses_and_admits_nothing(api):
    b = make(api, retries=5)
    assert b.acquire("gpu-0")["admitted"]  # the lease exists

    def bump(server):
        with server.lock:
            lease = server.leases[(NS, LEASE)]
            lease["metadata"]["resourceVersion"] = server._next_rv()

    api.interleave_lease(NS, LEASE, bump, times=1000)
    refused = b.acquire("gpu-1")
    assert not refused["admitted"]
    assert refused["reason"] == ("breaker: lease kube-system/%s not acquired: lease kube-system/%s changed under "
                                 "every one of 5 attempts (409 Conflict)" % (LEASE, LEASE))
    assert holders(api) == ["gpu-0"]
    annotations = api.node("gpu-1")["metadata"]["annotations"]
    assert breaker.ATTEMPTS_ANNOTATION not in annotations and state(api, "gpu-1")["status"] == "refused"


@pytest.mark.parametrize("unreachable, code, words", [
    (False, 503, "API server answered 503"),
    (False, 500, "API server answered 500"),
    (True, 503, "unreachable"),
])
def test_api_server_errors_fail_closed(api, unreachable, code, words):
    b = make(api)
    api.lease_outage(unreachable=unreachable, code=code)
    refused = b.acquire("gpu-0")
    assert not refused["admitted"] and words in refused["reason"], refused
    assert refused["recorded"] is True and state(api, "gpu-0")["status"] == "refused"
    assert breaker.ATTEMPTS_ANNOTATION not in api.node("gpu-0")["metadata"]["annotations"]
    released = b.release("gpu-0")
    assert released["released"] is False and "expires after 7200 s" in released["reason"]
    api.end_lease_outage()
    assert b.acquire("gpu-0")["admitted"]


def test_node_unreadable_is_refused_before_the_lease(api):
    b = make(api)
    api.outage("gpu-3")
    refused = b.acquire("gpu-3")
    assert not refused["admitted"] and "attempts of node gpu-3 could not be read" in refused["reason"]
    assert refused["recorded"] is False and "record_error" in refused
    assert api.lease(NS, LEASE) is None


def test_attempt_not_recorded_releases_the_slot(api):
    b = make(api, max_parallel=1)
    api.interleave("gpu-0", lambda server: server.patch_node(
        "gpu-0", "application/merge-patch+json", {"metadata": {"labels": {"bump": str(server._resource_version)}}}),
        times=1000)
    refused = b.acquire("gpu-0")
    assert not refused["admitted"] and "could not be recorded" in refused["reason"] and "slot released" in refused["reason"]
    assert holders(api) == []


LEASE_RECORD = "Lease kube-system/%s annotation %s" % (LEASE, breaker.HOLDERS_ANNOTATION)


def entry(since=T0, expires=T0 + 7200, by="other"):
    return {"since": since, "expires": expires, "by": by}


HOSTILE_HOLDERS = [
    ("not json", "not JSON"),
    ("", "not JSON"),
    ('["gpu-0"]', "not an object but list"),
    ('{"gpu-0": {"since": %r}}' % T0, "missing expires"),
    # Python's json.loads takes NaN, Infinity and 1e999: they used to read as expired
    ('{"gpu-0": {"since": %r, "expires": NaN, "by": "other"}}' % T0, "not JSON"),
    ('{"gpu-0": {"since": %r, "expires": Infinity, "by": "other"}}' % T0, "not JSON"),
    ('{"gpu-0": {"since": %r, "expires": 1e999, "by": "other"}}' % T0, "not a finite number"),
    ('{"gpu-0": {"since": %r, "expires": "4e9", "by": "other"}}' % T0, "not a number"),
    ('{"gpu-0": {"since": %r, "expires": true, "by": "other"}}' % T0, "not a number"),
    ('{"gpu-0": {"since": %r, "expires": 1, "by": "other"}}' % T0, "below"),
    ('{"gpu-0": {"since": %r, "expires": %r, "by": "other"}}' % (T0, T0 - 1), "before its since"),
    ('{"gpu-0": {"since": %r, "expires": %r, "by": ""}}' % (T0, T0 + 1), "empty"),
    ('{"gpu-0": {"since": %r, "expires": %r, "by": "x", "extra": 1}}' % (T0, T0 + 1), "unknown key"),
    ('{"gpu-0": 1, "gpu-0": 2}', "duplicate key"),
    ("[" * 100000 + "]" * 100000, "nested deeper"),  # json.loads: RecursionError, the module crashed
]


@pytest.mark.parametrize("raw, words", HOSTILE_HOLDERS)
def test_unreadable_holder_set_refuses_and_is_left_alone(api, raw, words):
    """Issue 41: an unreadable holder set refuses every acquire (a recorded refusal naming the
    record), never counts as expired or empty, and is not overwritten."""
    now = [T0 + 60]
    b = make(api, max_parallel=1, clock=lambda: now[0])
    assert b.acquire("gpu-0")["admitted"]
    with api.lock:
        api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = raw
    for node in ("gpu-0", "gpu-1"):
        refused = b.acquire(node)
        assert not refused["admitted"] and refused["unreadable"] == LEASE_RECORD, refused
        assert refused["reason"].startswith("breaker: unreadable record %s" % LEASE_RECORD) and words in refused["reason"]
        assert refused["reason"].endswith("refused (fail closed)")
        assert refused["recorded"] is True and state(api, node)["reason"] == refused["reason"]
    assert api.lease(NS, LEASE)["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] == raw
    assert json.loads(api.node("gpu-1")["metadata"]["annotations"].get(breaker.ATTEMPTS_ANNOTATION, "[]")) == []
    released = b.release("gpu-0")
    assert released["released"] is False and LEASE_RECORD in released["reason"]


def test_nan_holder_does_not_let_a_second_node_past_max_parallel(api):
    """Issue 41, the reported case: a NaN expiry read as expired admitted a second node."""
    b = make(api, max_parallel=1, clock=lambda: T0 + 10)
    with api.lock:
        api.leases[(NS, LEASE)] = api._stored_lease(
            {"metadata": {"name": LEASE, "annotations": {breaker.HOLDERS_ANNOTATION:
                                                         '{"gpu-5": {"since": %r, "expires": NaN, "by": "c"}}' % T0}},
             "spec": {"holderIdentity": "c", "leaseDurationSeconds": 7200}}, NS, LEASE)
    refused = b.acquire("gpu-1")
    assert not refused["admitted"] and "NaN" in refused["reason"]
    assert breaker.ATTEMPTS_ANNOTATION not in api.node("gpu-1")["metadata"]["annotations"]


HOSTILE_ATTEMPTS = [
    ("three", "not JSON"),
    ("", "not JSON"),
    ("[NaN, NaN, NaN]", "not JSON"),  # json.loads: three NaNs that are never "in the window"
    ("[1e999]", "not a finite number"),
    ("[%r, true]" % T0, "not a number"),
    ("[1]", "below"),
    ('{"n": 1}', "not a list"),
    ("[%s]" % ", ".join([repr(T0)] * (getattr(breaker, "MAX_ATTEMPT_RECORDS", 1000) + 1)), "more than"),
    ("[" * 100000 + "]" * 100000, "nested deeper"),
]


@pytest.mark.parametrize("raw, words", HOSTILE_ATTEMPTS)
def test_unreadable_attempts_refuse_and_are_not_overwritten(api, raw, words):
    api.patch_node("gpu-0", "application/merge-patch+json",
                   {"metadata": {"annotations": {breaker.ATTEMPTS_ANNOTATION: raw}}})
    refused = make(api, clock=lambda: T0).acquire("gpu-0")
    record = "Node gpu-0 annotation %s" % breaker.ATTEMPTS_ANNOTATION
    assert not refused["admitted"] and refused["unreadable"] == record and words in refused["reason"], refused
    assert api.node("gpu-0")["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION] == raw
    assert state(api, "gpu-0")["status"] == "refused" and record in state(api, "gpu-0")["reason"]
    assert api.lease(NS, LEASE) is None  # refused before the lease is touched


@pytest.mark.parametrize("raw, words", [
    ("[" * 100000 + "]" * 100000, "nested deeper"),
    ("not json", "not JSON"),
    ('[{"step": "drain"}]', "missing"),
    ('[{"step": "a", "status": "b", "reason": "c", "at": "yesterday", "by": "d"}]', "not a time"),
    ('[{"step": "a", "status": "b", "reason": "c", "at": "1970-01-01T00:00:00Z", "by": "d"}]', "below"),
    ('[{"step": "a", "status": "b", "reason": "c", "at": "2027-13-45T99:99:99Z", "by": "d"}]', "not a time"),
    ('[{"step": "a", "status": "b", "reason": "c", "at": "2027-01-01T00:00:00Z", "by": "d", "x": [1]}]', "scalar"),
])
def test_unreadable_history_refuses_and_is_kept_for_the_operator(api, raw, words):
    """The history is read back too (to append to it): unreadable -> refused, the refusal is the
    last step (gpufleet.io/remediation) and the damaged history is left as it is."""
    api.patch_node("gpu-0", "application/merge-patch+json",
                   {"metadata": {"annotations": {breaker.HISTORY_ANNOTATION: raw}}})
    refused = make(api, clock=lambda: T0).acquire("gpu-0")
    record = "Node gpu-0 annotation %s" % breaker.HISTORY_ANNOTATION
    assert not refused["admitted"] and refused["unreadable"] == record and words in refused["reason"], refused
    annotations = api.node("gpu-0")["metadata"]["annotations"]
    assert annotations[breaker.HISTORY_ANNOTATION] == raw and breaker.ATTEMPTS_ANNOTATION not in annotations
    assert state(api, "gpu-0")["status"] == "refused" and refused["recorded"] is True
    assert record in refused["record_error"]


def test_a_node_held_by_another_controller_is_not_taken_over(api):
    """Issue 41: the holder's `by` is compared; only its own controller re-admits a held node."""
    first = make(api, controller="run-a", clock=lambda: T0).acquire("gpu-0")
    assert first["admitted"]
    other = make(api, controller="run-b", clock=lambda: T0 + 5).acquire("gpu-0")
    assert not other["admitted"] and other["held_by"] == "run-a"
    assert other["reason"] == ("breaker: node gpu-0 is in remediation by run-a (since 2027-01-15T08:00:00Z, until "
                               "2027-01-15T10:00:00Z); run-b does not take it over")
    lease = json.loads(api.lease(NS, LEASE)["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION])
    assert lease["gpu-0"]["by"] == "run-a"
    assert json.loads(api.node("gpu-0")["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION]) == [T0]
    # expired: another controller may take it (the first one died)
    late = make(api, controller="run-b", clock=lambda: T0 + 7201).acquire("gpu-0")
    assert late["admitted"] and late["attempts"] == 2


@pytest.mark.parametrize("clock", [0.0, 1_000_000.0, float("nan"), 5e9])
def test_an_implausible_clock_refuses_and_writes_no_time(api, clock):
    refused = make(api, clock=lambda: clock).acquire("gpu-0")
    assert not refused["admitted"] and "not a plausible time" in refused["reason"]
    assert api.lease(NS, LEASE) is None
    assert breaker.HISTORY_ANNOTATION not in (api.node("gpu-0")["metadata"].get("annotations") or {})


def test_bad_options_name_the_option(api):
    for options, words in (({"max_attempts": 0}, "max_attempts"), ({"window": 0}, "window"),
                           ({"namespace": ""}, "namespace"), ({"retries": 0}, "retries")):
        with pytest.raises(breaker.BreakerError, match=words):
            make(api, **options)
    with pytest.raises(breaker.BreakerError, match="option group"):
        breaker.Breaker(client(api), "---")
    assert breaker.lease_name("GPU_A100 rack/7") == "gpufleet-remediation-gpu-a100-rack-7"


def test_the_double_answers_leases_like_the_real_server(api):
    c = client(api)
    path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NS
    body = {"metadata": {"name": "x"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10}}
    created = c.request("POST", path, body, "application/json")
    with pytest.raises(Exception, match='409: leases.coordination.k8s.io "x" already exists'):
        c.request("POST", path, body, "application/json")
    stale = dict(body, metadata={"name": "x", "resourceVersion": "1"})
    with pytest.raises(Exception, match="409: Operation cannot be fulfilled on leases.coordination.k8s.io"):
        c.request("PUT", path + "/x", stale, "application/json")
    fresh = dict(body, metadata={"name": "x", "resourceVersion": created["metadata"]["resourceVersion"]})
    updated = c.request("PUT", path + "/x", fresh, "application/json")
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(Exception, match='404: namespaces "nowhere" not found'):
        c.request("POST", "/apis/coordination.k8s.io/v1/namespaces/nowhere/leases", body, "application/json")
    with pytest.raises(Exception, match="must be greater than 0"):
        c.request("PUT", path + "/x", dict(body, spec={"leaseDurationSeconds": 0}), "application/json")


@pytest.mark.parametrize("held_before", [False, True])
def test_the_attempt_count_is_decided_again_at_the_write(api, held_before):
    """Another run (the same controller id) records an attempt between our read of the Node and
    our PATCH: the PATCH conflicts, the Node is read again, and max_attempts is decided on what
    is there then. A slot taken now is given back; a slot held before is kept."""
    now = [T0]
    b = make(api, max_parallel=1, max_attempts=2, clock=lambda: now[0])
    if held_before:
        assert b.acquire("gpu-0")["admitted"]
    else:
        api.patch_node("gpu-0", "application/merge-patch+json",
                       {"metadata": {"annotations": {breaker.ATTEMPTS_ANNOTATION: json.dumps([T0 - 10])}}})
    now[0] += 60

    def another_run_counts_its_attempt(server):
        current = json.loads(server.nodes["gpu-0"]["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION])
        server.patch_node("gpu-0", "application/merge-patch+json", {"metadata": {"annotations": {
            breaker.ATTEMPTS_ANNOTATION: json.dumps(current + [now[0] - 1])}}})

    api.interleave("gpu-0", another_run_counts_its_attempt, times=1)
    refused = b.acquire("gpu-0")
    assert not refused["admitted"] and refused["attempts"] == 2, refused
    assert refused["reason"].endswith("slot kept (held before)" if held_before else "slot released")
    assert holders(api) == (["gpu-0"] if held_before else [])
    assert len(json.loads(api.node("gpu-0")["metadata"]["annotations"][breaker.ATTEMPTS_ANNOTATION])) == 2


JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=12)
    | st.sampled_from([T0, T0 + 60, "2027-01-15T08:00:00Z", "2027-02-30T25:61:61Z", "since", "expires", "by",
                       "step", "status", "reason", "at"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["since", "expires", "by", "step", "status", "reason", "at", "gpu-0", "x"]), inner, max_size=6),
    max_leaves=20)
RAW = st.one_of(JSONISH.map(json.dumps), st.text(max_size=60))


def _plausible(value):
    number = isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))
    return number and math.isfinite(value) and MIN_TIME <= value <= MAX_TIME


@settings(max_examples=200, deadline=None)
@given(raw=RAW)
def test_the_readers_give_a_checked_record_or_refuse_never_crash(raw):
    """Any annotation text: each reader returns a record of the documented shape (finite,
    plausible times) or raises RecordError naming its record; nothing else escapes."""
    lease = {"metadata": {"name": LEASE, "resourceVersion": "7", "annotations": {breaker.HOLDERS_ANNOTATION: raw}}}
    try:
        holders = breaker.read_holders(lease, NS, LEASE)
    except RecordError as exc:
        assert exc.record == LEASE_RECORD
    else:
        for entry in holders.values():
            assert sorted(entry) == ["by", "expires", "since"] and entry["by"] and isinstance(entry["by"], str)
            assert _plausible(entry["since"]) and _plausible(entry["expires"]) and entry["expires"] >= entry["since"]
    for annotation, reader in ((breaker.ATTEMPTS_ANNOTATION, breaker.read_attempts),
                               (breaker.HISTORY_ANNOTATION, breaker.read_history)):
        node = {"metadata": {"name": "gpu-0", "resourceVersion": "7", "annotations": {annotation: raw}}}
        try:
            value = reader(node, "gpu-0")
        except RecordError as exc:
            assert exc.record == "Node gpu-0 annotation %s" % annotation
        else:
            assert isinstance(value, list)
            if annotation == breaker.ATTEMPTS_ANNOTATION:
                assert all(_plausible(a) for a in value)
            else:
                assert all(isinstance(e, dict) and isinstance(e["at"], str) for e in value)
