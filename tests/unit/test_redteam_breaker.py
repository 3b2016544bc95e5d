"""Red-team attacks on the remediation circuit breaker (module_utils/remediation/breaker.py, module
remediation_breaker), written from its documentation only: docs/remediation.md ("Circuit breaker",
"Records the breaker reads back"), docs/contracts.md ("Records read back", the Node and Lease rows of
"Role facts, markers and task file names", "Fail-closed checks") and `ansible-doc remediation_breaker`.

Promises attacked:
- never more than max_parallel nodes admitted; never two controllers on one node;
- every admission counted on the Node (the attempt written) before `admitted` is returned;
- max_attempts per window stops a node;
- unreadable records (the Lease's holder set, its resourceVersion and annotations, the Node's
  annotations, attempts and history) always refuse, name the record, and are left as they are;
- clock steps handled; check mode writes nothing;
- what the breaker writes reads back through its own strict readers (otherwise its own write would
  turn into "unreadable: refused" for the whole group or node).
"""

import json
import os
import subprocess
import sys
import threading

import pytest
from conftest import REPO
from fake_kube_api.server import FakeKubeAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

NS = "kube-system"
GROUP = "gpu_a100"
LEASE = "gpufleet-remediation-gpu-a100"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
LEASE_RECORD = "Lease %s/%s annotation %s" % (NS, LEASE, breaker.HOLDERS_ANNOTATION)
MAX_TIME = 4102444800.0  # 2100-01-01
MIN_TIME = 1577836800.0  # 2020-01-01
WRITES = ("POST", "PUT", "PATCH", "DELETE")


# -- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    double = FakeKubeAPI().start()
    double.kubeconfig_path = double.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
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


def make(api, clock=None, kube=None, **options):
    options.setdefault("max_parallel", 1)
    options.setdefault("controller", "run-a")
    options.setdefault("retries", 10)
    return breaker.Breaker(kube or client(api), GROUP, clock=clock or (lambda: T0), **options)


def annotations(api, node):
    return api.node(node)["metadata"].get("annotations") or {}


def raw_holders(api):
    lease = api.lease(NS, LEASE)
    return ((lease or {}).get("metadata", {}).get("annotations") or {}).get(breaker.HOLDERS_ANNOTATION)


def holders(api):
    lease = api.lease(NS, LEASE)
    return breaker.read_holders(lease, NS, LEASE) if lease else {}


def live(api, now):
    return sorted(breaker.live_holders(holders(api), now))


def attempts(api, node):
    return breaker.read_attempts(api.node(node), node)


def state(api, node):
    raw = annotations(api, node).get(breaker.STATE_ANNOTATION)
    return json.loads(raw) if raw else None


def put_lease(api, raw=None, extra_annotations=None, resource_version=None):
    """Store a Lease as another controller (or an editor) left it."""
    metadata = {"name": LEASE, "annotations": {}}
    if raw is not None:
        metadata["annotations"][breaker.HOLDERS_ANNOTATION] = raw
    metadata["annotations"].update(extra_annotations or {})
    with api.lock:
        stored = api._stored_lease({"metadata": metadata,
                                    "spec": {"holderIdentity": "x", "leaseDurationSeconds": 7200}}, NS, LEASE)
        if resource_version is not None:
            if resource_version is KeyError:
                del stored["metadata"]["resourceVersion"]
            else:
                stored["metadata"]["resourceVersion"] = resource_version
        api.leases[(NS, LEASE)] = stored


def set_annotation(api, node, annotation, raw):
    with api.lock:  # directly in the store: an editor's hand or another version's write
        api.nodes[node]["metadata"].setdefault("annotations", {})[annotation] = raw
        api.nodes[node]["metadata"]["resourceVersion"] = api._next_rv()


def writes(api, path_contains=None):
    return [r for r in api.recorded(path_contains=path_contains) if r["method"] in WRITES]


def entry(since=T0, expires=T0 + 7200, by="run-z"):
    return {"since": since, "expires": expires, "by": by}


# -- 1. hostile holder sets: refused, named, left as they are -----------------------------------------------
BIG = "1" + "0" * 400  # a JSON integer Python reads as an int too large for a float
HUGE_DIGITS = "1" * 5000  # Python 3.11 refuses int('1' * 5000) with ValueError (int max str digits)
HOSTILE_HOLDERS = [
    ("since-huge-int", '{"gpu-5": {"since": %s, "expires": %r, "by": "z"}}' % (BIG, T0)),
    ("expires-huge-int", '{"gpu-5": {"since": %r, "expires": %s, "by": "z"}}' % (T0, BIG)),
    ("expires-5000-digits", '{"gpu-5": {"since": %r, "expires": %s, "by": "z"}}' % (T0, HUGE_DIGITS)),
    ("since-minus-zero", '{"gpu-5": {"since": -0, "expires": %r, "by": "z"}}' % T0),
    ("since-minus-zero-float", '{"gpu-5": {"since": -0.0, "expires": %r, "by": "z"}}' % T0),
    ("since-string", '{"gpu-5": {"since": "1800000000", "expires": %r, "by": "z"}}' % (T0 + 1)),
    ("since-false", '{"gpu-5": {"since": false, "expires": %r, "by": "z"}}' % T0),
    ("expires-past-2100", '{"gpu-5": {"since": %r, "expires": %r, "by": "z"}}' % (T0, MAX_TIME + 1)),
    ("since-before-2020", '{"gpu-5": {"since": %r, "expires": %r, "by": "z"}}' % (MIN_TIME - 1, T0)),
    ("expires-null", '{"gpu-5": {"since": %r, "expires": null, "by": "z"}}' % T0),
    ("by-number", '{"gpu-5": {"since": %r, "expires": %r, "by": 7}}' % (T0, T0 + 1)),
    ("by-1025", '{"gpu-5": {"since": %r, "expires": %r, "by": "%s"}}' % (T0, T0 + 1, "b" * 1025)),
    ("by-list", '{"gpu-5": {"since": %r, "expires": %r, "by": ["z"]}}' % (T0, T0 + 1)),
    ("node-empty", '{"": {"since": %r, "expires": %r, "by": "z"}}' % (T0, T0 + 1)),
    ("node-254", '{"%s": {"since": %r, "expires": %r, "by": "z"}}' % ("n" * 254, T0, T0 + 1)),
    ("entry-null", '{"gpu-5": null}'),
    ("entry-list", '{"gpu-5": [%r, %r, "z"]}' % (T0, T0 + 1)),
    ("entry-string", '{"gpu-5": "held"}'),
    ("inner-duplicate", '{"gpu-5": {"since": %r, "since": %r, "expires": %r, "by": "z"}}' % (T0, T0, T0 + 1)),
    ("look-alike-key", '{"gpu-5": {"\u0455ince": %r, "expires": %r, "by": "z"}}' % (T0, T0 + 1)),  # Cyrillic s
    ("key-case", '{"gpu-5": {"Since": %r, "expires": %r, "by": "z"}}' % (T0, T0 + 1)),
    ("top-null", "null"),
    ("top-number", "1"),
    ("top-string", '"gpu-5"'),
    ("bom", "\ufeff{}"),
    ("trailing-garbage", "{} {}"),
    ("oversized-whitespace", "{" + " " * (300 * 1024) + "}"),
    ("oversized-multibyte", '{"gpu-5": {"since": %r, "expires": %r, "by": "z", "x": "%s"}}'
     % (T0, T0 + 1, "\u00e9" * 140000)),  # 140000 characters, 280000 bytes in UTF-8
    ("too-many-holders", json.dumps({"n%d" % i: {"since": 1.8e9, "expires": 1.8e9, "by": "a"}
                                     for i in range(10001)}, separators=(",", ":"))),
    ("deep-objects", '{"a":' * 40 + "1" + "}" * 40),
]


@pytest.mark.parametrize("raw", [r for _, r in HOSTILE_HOLDERS], ids=[n for n, _ in HOSTILE_HOLDERS])
def test_hostile_holder_set_refuses_every_acquire_and_is_left_as_it_is(api, raw):
    put_lease(api, raw)
    before = api.lease(NS, LEASE)
    b = make(api, max_parallel=5)
    for node in ("gpu-0", "gpu-1"):
        refused = b.acquire(node)
        assert refused["admitted"] is False, refused
        # the record named: exactly LEASE_RECORD, the size bound included (F7)
        named = refused.get("unreadable") or ""
        assert named == LEASE_RECORD, refused
        assert breaker.HOLDERS_ANNOTATION in refused["reason"], refused
        assert refused["reason"].startswith("breaker: unreadable record %s" % named), refused
        assert refused["reason"].endswith("refused (fail closed)"), refused
        assert state(api, node)["status"] == "refused"
        assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, node), node  # nothing counted
    assert api.lease(NS, LEASE) == before  # not rewritten, not even the same bytes put back
    assert not writes(api, "leases")
    with pytest.raises(RecordError):  # the reader itself refuses
        breaker.read_holders(before, NS, LEASE)
    released = b.release("gpu-5")
    assert released["released"] is False and breaker.HOLDERS_ANNOTATION in released["reason"], released
    assert api.lease(NS, LEASE) == before


@pytest.mark.parametrize("name, damage", [
    ("resourceVersion-empty", dict(resource_version="")),
    ("resourceVersion-missing", dict(resource_version=KeyError)),
    ("resourceVersion-number", dict(resource_version=1234)),
    ("resourceVersion-null", dict(resource_version=None)),
    ("other-annotation-number", dict(extra_annotations={"example.com/x": 5})),
    ("other-annotation-null", dict(extra_annotations={"example.com/x": None})),
    ("other-annotation-object", dict(extra_annotations={"example.com/x": {"a": "b"}})),
])
def test_lease_with_unreadable_metadata_refuses(api, name, damage):
    """docs/contracts.md 'Records read back': the Lease's metadata.resourceVersion (a non-empty
    string) and its annotations (strings) are read strictly too."""
    put_lease(api, json.dumps({"gpu-5": entry()}), **{k: v for k, v in damage.items() if v is not None or
                                                      k != "resource_version"})
    if name == "resourceVersion-null":
        with api.lock:
            api.leases[(NS, LEASE)]["metadata"]["resourceVersion"] = None
    before = api.lease(NS, LEASE)
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False, refused
    assert (refused.get("unreadable") or "").startswith("Lease %s/%s" % (NS, LEASE)), refused
    assert refused["reason"].endswith("refused (fail closed)"), refused
    assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, "gpu-0")
    assert api.lease(NS, LEASE) == before


# -- 2. hostile attempts and history on the Node -------------------------------------------------------------
HOSTILE_ATTEMPTS = [
    ("huge-int", "[%s]" % BIG),
    ("5000-digits", "[%s]" % HUGE_DIGITS),
    ("string-number", '["1800000000"]'),
    ("minus-zero", "[-0]"),
    ("minus-zero-float", "[-0.0]"),
    ("null-item", "[null]"),
    ("null-among-good", "[%r, null]" % T0),
    ("nested-list", "[[%r]]" % T0),
    ("object-item", '[{"t": %r}]' % T0),
    ("bare-number", "%r" % T0),
    ("null", "null"),
    ("past-2100", "[%r]" % (MAX_TIME + 1)),
    ("false", "[false]"),
    ("duplicate-keys-object", '{"a": 1, "a": 2}'),
    ("bom", "\ufeff[%r]" % T0),
    ("oversized", "[" + ", ".join([repr(T0)] * 1000) + " " * (300 * 1024) + "]"),
    ("deep-17", "[" * 17 + "]" * 17),
]


@pytest.mark.parametrize("raw", [r for _, r in HOSTILE_ATTEMPTS], ids=[n for n, _ in HOSTILE_ATTEMPTS])
def test_hostile_attempts_refuse_and_are_left_as_they_are(api, raw):
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, raw)
    record = breaker.node_record("gpu-0", breaker.ATTEMPTS_ANNOTATION)
    refused = make(api, max_parallel=5).acquire("gpu-0")
    named = refused.get("unreadable") or ""
    assert refused["admitted"] is False, refused
    assert named == record, refused  # the size bound included (F7)
    assert breaker.ATTEMPTS_ANNOTATION in refused["reason"], refused
    assert annotations(api, "gpu-0")[breaker.ATTEMPTS_ANNOTATION] == raw
    if len(raw.encode()) > 256 * 1024:
        # a Node whose annotations are over the API server's 256 KiB (only the double can hold one):
        # every write of it is refused (422 Invalid), so the refusal is reported, not recorded (F10)
        assert refused["recorded"] is False and "Too long" in refused["record_error"], refused
    else:
        assert state(api, "gpu-0")["status"] == "refused"
    assert api.lease(NS, LEASE) is None


GOOD_STEP = {"step": "drain", "status": "done", "reason": "ok", "at": "2027-01-15T08:00:00Z", "by": "run-a"}


def history_with(**changes):
    step = dict(GOOD_STEP, **changes)
    return json.dumps([{k: v for k, v in step.items() if v is not KeyError}], ensure_ascii=False)


HOSTILE_HISTORY = [
    ("at-trailing-newline", history_with(at="2027-01-15T08:00:00Z\n")),
    ("at-offset", history_with(at="2027-01-15T08:00:00+00:00")),
    ("at-fraction", history_with(at="2027-01-15T08:00:00.5Z")),
    ("at-space", history_with(at="2027-01-15 08:00:00Z")),
    ("at-lowercase", history_with(at="2027-01-15t08:00:00z")),
    ("at-leading-space", history_with(at=" 2027-01-15T08:00:00Z")),
    ("at-2101", history_with(at="2101-01-01T00:00:00Z")),
    ("at-2019", history_with(at="2019-12-31T23:59:59Z")),
    ("at-feb-30", history_with(at="2027-02-30T08:00:00Z")),
    ("at-number", history_with(at=T0)),
    ("at-empty", history_with(at="")),
    ("status-empty", history_with(status="")),
    ("by-empty", history_with(by="")),
    ("step-number", history_with(step=5)),
    ("reason-null", history_with(reason=None)),
    ("reason-8193", history_with(reason="r" * 8193)),
    ("step-8193", history_with(step="s" * 8193)),
    ("missing-by", history_with(by=KeyError)),
    ("extra-object", history_with(extra={"a": 1})),
    ("extra-nan", history_with(extra=1).replace('"extra": 1', '"extra": NaN')),
    ("item-null", "[null]"),
    ("item-string", '["drain"]'),
    ("duplicate-key", history_with().replace('"step": "drain"', '"step": "drain", "step": "reset"')),
    ("1001-entries", json.dumps([GOOD_STEP] * 1001)),
    ("object", json.dumps(GOOD_STEP)),
]


@pytest.mark.parametrize("raw", [r for _, r in HOSTILE_HISTORY], ids=[n for n, _ in HOSTILE_HISTORY])
def test_hostile_history_refuses_and_is_left_as_it_is(api, raw):
    set_annotation(api, "gpu-0", breaker.HISTORY_ANNOTATION, raw)
    record = breaker.node_record("gpu-0", breaker.HISTORY_ANNOTATION)
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False and refused.get("unreadable") == record, refused
    assert annotations(api, "gpu-0")[breaker.HISTORY_ANNOTATION] == raw
    assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, "gpu-0")
    assert state(api, "gpu-0")["status"] == "refused"  # the refusal is the last step only


def test_readable_history_at_the_bounds_admits(api):
    """The other side of the bound: 1000 entries of exactly 8192 characters each field, other keys
    with scalar values, are readable (and the node admitted)."""
    step = dict(GOOD_STEP, reason="r" * 8192, note=None, n=1.5, flag=True)
    set_annotation(api, "gpu-0", breaker.HISTORY_ANNOTATION, json.dumps([step] * 20))
    assert make(api).acquire("gpu-0")["admitted"] is True
    assert len(breaker.read_history(api.node("gpu-0"), "gpu-0")) <= 20


@pytest.mark.parametrize("name, value", [
    ("value-number", {"example.com/x": 5}),
    ("value-null", {"example.com/x": None}),
    ("value-object", {"example.com/x": {"a": "b"}}),
    ("value-bool", {"example.com/x": True}),
])
def test_node_with_unreadable_annotations_is_refused(api, name, value):
    """'Node annotations (metadata.annotations) ... read_annotations: an object of strings'; unreadable:
    the node refused (op acquire), op record fails."""
    with api.lock:
        api.nodes["gpu-0"]["metadata"]["annotations"] = value
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False, refused
    assert "gpu-0" in (refused.get("unreadable") or ""), refused
    assert api.node("gpu-0")["metadata"]["annotations"] == value
    assert api.lease(NS, LEASE) is None or "gpu-0" not in holders(api)
    with pytest.raises((breaker.BreakerError, breaker.KubeError, RecordError)):  # op record fails
        breaker.record_step(client(api), "gpu-0", "drain", "done", "x", now=T0, controller="run-a")
    assert api.node("gpu-0")["metadata"]["annotations"] == value


@settings(max_examples=200, deadline=None)
@given(at=st.text(alphabet=st.sampled_from("0123456789-TZ:\n +.\uff10\uff11\uff12\u0660\u0662\u0967"),
                  min_size=18, max_size=22))
def test_history_at_is_exactly_yyyy_mm_dd_thh_mm_ssz(at):
    """`at` (`YYYY-MM-DDTHH:MM:SSZ`, a plausible date): any other text (Unicode digits, a trailing
    newline that `$` lets through, ...) is unreadable."""
    import datetime
    import re

    node = {"metadata": {"name": "gpu-0", "resourceVersion": "1",
                         "annotations": {breaker.HISTORY_ANNOTATION: history_with(at=at)}}}
    strict = re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", at, flags=re.ASCII)
    if strict:
        try:
            when = datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
            plausible = MIN_TIME <= when.timestamp() <= MAX_TIME
        except ValueError:
            plausible = False
    try:
        breaker.read_history(node, "gpu-0")
    except RecordError:
        return
    assert strict and plausible, at


# -- 3. what the breaker writes reads back (options at their bounds) ---------------------------------------
def assert_records_read_back(api, nodes=("gpu-0", "gpu-1")):
    lease = api.lease(NS, LEASE)
    if lease is not None:
        breaker.read_holders(lease, NS, LEASE)
    for node in nodes:
        if node in api.nodes:
            breaker.read_annotations(api.node(node), node)
            breaker.read_attempts(api.node(node), node)
            breaker.read_history(api.node(node), node)


@pytest.mark.parametrize("controller", ["b" * 1025, "b" * 9000, "", " ", "run-a\n"])
def test_a_controller_id_out_of_bounds_never_writes_an_unreadable_record(api, controller):
    """The holder's `by` is 1..1024 characters and a history entry's `by` not empty and at most
    8192 characters: a controller id outside that must not be written (or the whole group is
    refused as 'unreadable' from then on)."""
    try:
        first = make(api, max_parallel=2, controller=controller).acquire("gpu-0")
    except breaker.BreakerError as exc:
        assert "controller" in str(exc)
        first = {"admitted": False}
    assert_records_read_back(api)
    second = make(api, max_parallel=2, controller="run-b").acquire("gpu-1")
    assert second["admitted"] is True, (first, second)


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e12, 4e9, 0.5])
def test_ttl_at_and_past_its_bounds(api, ttl):
    """ttl: a holder stops counting after it. NaN or infinite option values are rejected as bad
    options (docs/contracts.md 'Fail-closed checks'); whatever is accepted never writes a holder
    its own reader refuses, and never admits two nodes into one slot at the same moment."""
    try:
        b = make(api, ttl=ttl)
    except breaker.BreakerError as exc:
        assert "ttl" in str(exc)
        return
    first = b.acquire("gpu-0")
    assert_records_read_back(api)
    second = make(api, ttl=ttl, controller="run-b").acquire("gpu-1")
    assert_records_read_back(api)
    assert not (first["admitted"] and second["admitted"]), (ttl, first, second)


@pytest.mark.parametrize("window", [float("nan"), float("inf"), -1.0, -3600.0, 1e-9, 1e300])
def test_window_at_and_past_its_bounds_never_lets_attempts_through(api, window):
    try:
        b = make(api, max_attempts=1, window=window)
    except breaker.BreakerError as exc:
        assert "window" in str(exc)
        return
    first = b.acquire("gpu-0")
    b.release("gpu-0")
    again = make(api, max_attempts=1, window=window, clock=lambda: T0 + 1).acquire("gpu-0")
    assert_records_read_back(api)
    if window > 1:  # a window longer than a second: the second attempt is within it
        assert not (first["admitted"] and again["admitted"]), (window, first, again)


@pytest.mark.parametrize("max_attempts", [0, -1, True, float("nan"), 1.5])
def test_max_attempts_out_of_range_names_the_option_or_admits_nothing_twice(api, max_attempts):
    try:
        b = make(api, max_attempts=max_attempts)
    except breaker.BreakerError as exc:
        assert "max_attempts" in str(exc)
        return
    first = b.acquire("gpu-0")
    second = make(api, max_attempts=max_attempts, clock=lambda: T0 + 5).acquire("gpu-0")
    assert not (first["admitted"] and second["admitted"]), (max_attempts, first, second)


def test_max_attempts_1_admits_once_then_stops_even_the_holder(api):
    b = make(api, max_attempts=1, max_parallel=3)
    assert b.acquire("gpu-0")["admitted"] is True
    again = make(api, max_attempts=1, max_parallel=3, clock=lambda: T0 + 60).acquire("gpu-0")
    assert again["admitted"] is False and "max_attempts 1" in again["reason"], again
    assert attempts(api, "gpu-0") == [T0]


def test_more_attempts_than_the_record_holds_never_writes_an_unreadable_list(api):
    """max_attempts above the record's bound (1000) with a long window: the 1001st admission must
    not write a list that read_attempts refuses."""
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, json.dumps([T0 - 1000 + i for i in range(1000)]))
    try:
        b = make(api, max_attempts=5000, window=1e7)
    except breaker.BreakerError as exc:
        assert "max_attempts" in str(exc)
        return
    answer = b.acquire("gpu-0")
    assert_records_read_back(api, ("gpu-0",))
    if answer["admitted"]:
        assert T0 in attempts(api, "gpu-0")


def test_record_step_with_long_texts_writes_a_readable_history(api):
    """A failed task's message can be long (a drain blocked by many pods); op record must not write a
    history entry that read_history refuses (each field at most 8192 characters), and a later acquire
    must not be refused as 'unreadable history' because of it."""
    kube = client(api)
    for step, status, reason in (("drain", "failed", "pod x blocked\n" * 2000), ("s" * 9000, "done", "ok"),
                                 ("drain", "f" * 9000, "ok")):
        try:
            breaker.record_step(kube, "gpu-0", step, status, reason, now=T0, controller="run-a")
        except breaker.BreakerError:
            pass
        assert_records_read_back(api, ("gpu-0",))
    assert make(api).acquire("gpu-0")["admitted"] is True


def test_a_long_release_reason_writes_a_readable_history(api):
    b = make(api)
    assert b.acquire("gpu-0")["admitted"]
    b.release("gpu-0", reason="x" * 20000)
    assert_records_read_back(api, ("gpu-0",))
    assert make(api, clock=lambda: T0 + 60).acquire("gpu-0")["admitted"] is True


# -- 4. max_parallel parsing ------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(value=st.one_of(
    st.text(alphabet=st.sampled_from("0123456789%.-+_ eEnaifx\uff11\u0661"), max_size=8),
    st.sampled_from(["1e999%", "nan%", "inf%", "-0%", "-0", "1_0", "\uff12", " 2", "2 ", "0x2", "2.5", "", "%",
                     "100.0%", "1e2%", "99.99999%", "%10", "10%%", "-5%", "1e999", "nan"]),
    st.integers(min_value=-3, max_value=10 ** 30), st.floats(allow_nan=True), st.booleans(), st.none()),
    size=st.one_of(st.none(), st.integers(min_value=-5, max_value=10 ** 6), st.booleans()))
def test_parallel_limit_is_a_count_or_a_named_refusal(value, size):
    """max_parallel is a number of nodes or `N%` of the group (rounded down, at least 1): the answer is a
    count of nodes (an int >= 0, a percentage of the group never more than the group), or a BreakerError;
    never another exception."""
    try:
        limit = breaker.parallel_limit(value, size)
    except breaker.BreakerError:
        return
    assert isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0, (value, size, limit)
    if isinstance(value, str) and value.strip().endswith("%") and isinstance(size, int) and size >= 1:
        assert limit <= size, (value, size, limit)


@pytest.mark.parametrize("max_parallel", [0, "0", "0%"])
def test_max_parallel_zero_admits_nobody(api, max_parallel):
    try:
        b = make(api, max_parallel=max_parallel, group_size=8)
    except breaker.BreakerError:
        return
    for node in ("gpu-0", "gpu-1"):
        assert b.acquire(node)["admitted"] is False
    assert live(api, T0) == []
    assert all(breaker.ATTEMPTS_ANNOTATION not in annotations(api, n) for n in ("gpu-0", "gpu-1"))


# -- 5. node names: one node, one controller --------------------------------------------------------------
@pytest.mark.parametrize("alias", ["gpu%2D0", "./gpu-0", "gpu-0?watch=1", "gpu-0#x",
                                   "gpu-0%2F", "GPU-0", "gpu-0 ", "gpu\u20110"])
def test_another_spelling_of_a_held_node_does_not_let_a_second_controller_in(api, alias):
    """'One controller per node': run-a holds gpu-0; run-b asking for the same Node under another
    spelling must not be admitted to it (an attempt written on gpu-0, or a second holder of it)."""
    assert make(api, max_parallel=4).acquire("gpu-0")["admitted"]
    try:
        other = make(api, max_parallel=4, controller="run-b", clock=lambda: T0 + 5).acquire(alias)
    except (breaker.BreakerError, ValueError) as exc:
        other = {"admitted": False, "reason": str(exc)}
    assert attempts(api, "gpu-0") == [T0], (alias, other)
    assert not other["admitted"], (alias, other)


@pytest.mark.parametrize("node", ["n" * 254, "gpu-0\x00", "gpu-0\n"])
def test_a_node_name_out_of_bounds_is_never_written_as_a_holder(api, node):
    try:
        answer = make(api, max_parallel=4).acquire(node)
    except (breaker.BreakerError, ValueError):
        answer = {"admitted": False}
    assert answer["admitted"] is False
    assert_records_read_back(api)


# -- 6. controller id look-alikes -------------------------------------------------------------------------
@pytest.mark.parametrize("lookalike", ["run\u2010a", "\uff52\uff55\uff4e-a", "run-a\u200b", "RUN-A", "run-a ",
                                       "r\u0075n-a\u0301"])
def test_a_look_alike_controller_is_another_controller(api, lookalike):
    assert make(api, max_parallel=4).acquire("gpu-0")["admitted"]
    other = make(api, max_parallel=4, controller=lookalike, clock=lambda: T0 + 5).acquire("gpu-0")
    assert other["admitted"] is False and other.get("held_by") == "run-a", other
    assert attempts(api, "gpu-0") == [T0]


# -- 7. clock steps ---------------------------------------------------------------------------------------
def test_attempts_recorded_ahead_of_a_clock_that_stepped_back_still_count(api):
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, json.dumps([T0 + 100, T0 + 200]))
    refused = make(api, max_attempts=2, clock=lambda: T0 - 5000).acquire("gpu-0")
    assert refused["admitted"] is False and "max_attempts 2" in refused["reason"], refused
    assert attempts(api, "gpu-0") == [T0 + 100, T0 + 200]


def test_a_re_admission_after_the_clock_stepped_back_keeps_the_future_attempts(api):
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, json.dumps([T0 + 100]))
    b = make(api, max_attempts=3, clock=lambda: T0 - 5000)
    assert b.acquire("gpu-0")["admitted"]
    assert sorted(attempts(api, "gpu-0")) == [T0 - 5000, T0 + 100]


def test_a_holder_dated_ahead_of_the_reader_still_counts(api):
    """A holder written by a controller whose clock ran ahead (or before this clock stepped back):
    its since is in the reader's future, it still holds its slot until its expires."""
    put_lease(api, json.dumps({"gpu-5": entry(since=T0 + 3600, expires=T0 + 7200, by="run-z")}))
    refused = make(api).acquire("gpu-0")
    assert refused["admitted"] is False and refused["reason"].startswith("breaker open"), refused
    held = make(api, controller="run-b", max_parallel=3).acquire("gpu-5")
    assert held["admitted"] is False and held.get("held_by") == "run-z", held


def test_clock_stepping_back_across_the_ttl(api):
    now = [T0]
    a = make(api, ttl=600, clock=lambda: now[0])
    c = make(api, ttl=600, controller="run-c", clock=lambda: now[0])
    assert a.acquire("gpu-0")["admitted"]
    now[0] = T0 + 601  # gpu-0's slot expired: nobody wrote since
    now[0] = T0 + 300  # the clock steps back: gpu-0 is held again as far as this clock reads
    refused = c.acquire("gpu-0")
    assert refused["admitted"] is False and refused.get("held_by") == "run-a", refused
    assert c.acquire("gpu-1")["admitted"] is False
    now[0] = T0 + 601
    assert c.acquire("gpu-1")["admitted"] is True  # the expired slot dropped by this write
    now[0] = T0 + 300  # back again: gpu-1 holds the one slot, run-a's old slot is gone for good
    assert a.acquire("gpu-0")["admitted"] is False
    assert live(api, T0 + 300) == ["gpu-1"]


@pytest.mark.parametrize("reading", [float("inf"), float("-inf"), -0.0, True, MAX_TIME + 1, MAX_TIME - 60])
def test_an_implausible_controller_clock_writes_no_time(api, reading):
    """'refuses to write a time from a controller clock that does not read a plausible time: nothing
    is written with it'. MAX_TIME - 60: the clock is plausible, but now + ttl is not."""
    answer = make(api, clock=lambda: reading).acquire("gpu-0")
    assert_records_read_back(api, ("gpu-0",))
    if reading != MAX_TIME - 60:
        assert answer["admitted"] is False and "not a plausible time" in answer["reason"], answer
        assert api.lease(NS, LEASE) is None


# -- 8. the Lease or the Node going away mid-run ---------------------------------------------------------
def test_lease_deleted_mid_run(api):
    a = make(api, max_parallel=1)
    assert a.acquire("gpu-0")["admitted"]
    api.delete_lease(NS, LEASE)  # an operator deletes it: the holders are forgotten (documented)
    released = a.release("gpu-0")
    assert released["released"] is False or released.get("held") is False
    b = make(api, max_parallel=1, controller="run-b")
    assert b.acquire("gpu-1")["admitted"] is True
    assert live(api, T0) == ["gpu-1"]


def test_lease_deleted_between_read_and_write(api):
    a = make(api, max_parallel=1)
    assert a.acquire("gpu-0")["admitted"]
    a.release("gpu-0")

    def delete(server):
        with server.lock:
            server.leases.pop((NS, LEASE), None)

    api.interleave_lease(NS, LEASE, delete, times=1)
    answer = make(api, controller="run-b").acquire("gpu-1")
    if answer["admitted"]:
        assert live(api, T0) == ["gpu-1"] and T0 in attempts(api, "gpu-1")
    else:
        assert "gpu-1" not in holders(api)


def test_lease_recreated_full_between_read_and_write(api):
    """Another controller deletes and re-creates the Lease holding the one slot between our read and
    our PUT: never two nodes in the one slot."""
    a = make(api, max_parallel=1)
    assert a.acquire("gpu-0")["admitted"]
    a.release("gpu-0")

    def recreate(server):
        with server.lock:
            server.leases.pop((NS, LEASE), None)
        put_lease(server, json.dumps({"gpu-5": entry(by="run-z")}))

    api.interleave_lease(NS, LEASE, recreate, times=1)
    answer = make(api, controller="run-b").acquire("gpu-1")
    assert answer["admitted"] is False, answer
    assert sorted(holders(api)) == ["gpu-5"]


class PostHook(KubeClient):
    """A client whose POST of the Lease is preceded by another controller's write (the race on a
    Lease that does not exist yet: both read 404, both POST)."""

    hook = None

    def request(self, method, path, body=None, content_type=None, deadline=None):
        if method == "POST" and "/leases" in path and self.hook:
            hook, self.hook = self.hook, None
            hook()
        return super().request(method, path, body, content_type, deadline)


def test_two_controllers_creating_the_lease_at_once(api):
    kube = PostHook(api.url, token=api.token, allow_plain_http=True, timeout=5)
    other = make(api, controller="run-z")
    kube.hook = lambda: other.acquire("gpu-5")
    answer = make(api, kube=kube, controller="run-b").acquire("gpu-1")
    assert answer["admitted"] is False, answer
    assert live(api, T0) == ["gpu-5"]
    assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, "gpu-1")


def test_node_deleted_before_the_acquire(api):
    with api.lock:
        del api.nodes["gpu-0"]
    answer = make(api).acquire("gpu-0")
    assert answer["admitted"] is False
    assert api.lease(NS, LEASE) is None or "gpu-0" not in holders(api)


def test_node_deleted_between_the_lease_and_the_attempt(api):
    """'If the attempt cannot be recorded after the Lease was taken, a slot taken now is given back'."""
    def delete(server):
        with server.lock:
            server.nodes.pop("gpu-0", None)

    api.interleave("gpu-0", delete, times=1)
    answer = make(api).acquire("gpu-0")
    assert answer["admitted"] is False, answer
    assert "gpu-0" not in holders(api)
    assert make(api, controller="run-b").acquire("gpu-1")["admitted"] is True


def test_node_deleted_while_held_release_still_frees_the_slot(api):
    """'op: release takes any holder out, whoever holds it' — also of a Node deleted (replaced) while in
    remediation, or its slot stays blocked until the ttl."""
    a = make(api)
    assert a.acquire("gpu-0")["admitted"]
    with api.lock:
        del api.nodes["gpu-0"]
    try:
        a.release("gpu-0")
    except Exception:  # noqa: BLE001 - the record on the Node may fail; the slot must still be given back
        pass
    assert "gpu-0" not in holders(api)


# -- 9. races between controllers --------------------------------------------------------------------------
def run_threads(count, target):
    start = threading.Barrier(count)
    errors = []

    def wrapper(index):
        try:
            start.wait()
            target(index)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrapper, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


@pytest.mark.parametrize("round_", range(3))
def test_four_controllers_one_node_at_most_one_controller_admitted(api, round_):
    results = [None] * 4

    def go(index):
        results[index] = make(api, max_parallel=4, controller="run-%d" % index, retries=30).acquire("gpu-0")

    run_threads(4, go)
    admitted = [r for r in results if r["admitted"]]
    assert len(admitted) <= 1, results
    assert len(attempts(api, "gpu-0")) == len(admitted)
    if admitted:
        assert holders(api)["gpu-0"]["by"] == "run-%d" % results.index(admitted[0])


def test_four_runs_of_one_controller_one_node_stop_at_max_attempts(api):
    results = [None] * 4
    counter = iter(range(100))
    lock = threading.Lock()

    def clock():
        with lock:
            return T0 + next(counter)

    def go(index):
        results[index] = make(api, max_parallel=4, max_attempts=2, retries=30, clock=clock).acquire("gpu-0")

    run_threads(4, go)
    admitted = [r for r in results if r["admitted"]]
    assert 1 <= len(admitted) <= 2, results
    assert len(attempts(api, "gpu-0")) == len(admitted), (results, attempts(api, "gpu-0"))


def test_acquires_and_releases_racing_never_exceed_max_parallel(api):
    """Four controllers loop acquire -> work -> release on their own nodes with max_parallel 2; an
    admitted-and-not-yet-released count (decremented before the release is sent) never exceeds 2, and
    an operator's releases of random nodes race them."""
    in_remediation = [0]
    peak = [0]
    lock = threading.Lock()
    violations = []

    def go(index):
        if index == 4:  # the operator
            op = make(api, controller="operator", max_parallel=2, retries=30)
            for turn in range(12):
                op.release("gpu-%d" % (turn % 4))
            return
        b = make(api, controller="run-%d" % index, max_parallel=2, retries=30, max_attempts=999, window=1.0)
        for _ in range(6):
            answer = b.acquire("gpu-%d" % index)
            if answer["admitted"]:
                with lock:
                    in_remediation[0] += 1
                    peak[0] = max(peak[0], in_remediation[0])
                    if in_remediation[0] > 2:
                        violations.append((index, answer))
                    in_remediation[0] -= 1
                b.release("gpu-%d" % index)
            lease = api.lease(NS, LEASE)
            if lease is not None:
                count = len(breaker.live_holders(breaker.read_holders(lease, NS, LEASE), T0))
                if count > 2:
                    violations.append(("lease", count))

    run_threads(5, go)
    assert not violations, violations
    assert len(holders(api)) <= 2


def test_a_409_storm_on_the_node_with_racing_controllers_admits_nothing_uncounted(api):
    def bump(server):
        with server.lock:
            server.nodes["gpu-0"]["metadata"]["resourceVersion"] = server._next_rv()

    api.interleave("gpu-0", bump, times=10000)
    results = [None] * 3

    def go(index):
        results[index] = make(api, max_parallel=3, controller="run-%d" % index).acquire("gpu-0")

    run_threads(3, go)
    assert not any(r["admitted"] for r in results), results
    assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, "gpu-0")
    assert "gpu-0" not in holders(api)


# -- 10. damaged and repaired between calls; a large honest holder set ------------------------------------
def test_damaged_then_repaired_attempts(api):
    b = make(api, max_attempts=2)
    assert b.acquire("gpu-0")["admitted"]
    good = annotations(api, "gpu-0")[breaker.ATTEMPTS_ANNOTATION]
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, "[NaN]")
    assert make(api, max_attempts=2, clock=lambda: T0 + 1).acquire("gpu-0")["admitted"] is False
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, good)
    again = make(api, max_attempts=2, clock=lambda: T0 + 2).acquire("gpu-0")
    assert again["admitted"] is True and again["attempts"] == 2
    assert make(api, max_attempts=2, clock=lambda: T0 + 3).acquire("gpu-0")["admitted"] is False


def test_thousands_of_expired_holders_are_dropped_by_the_next_write(api):
    raw = json.dumps({"n%d" % i: {"since": T0 - 9000, "expires": T0 - 1800, "by": "a"} for i in range(3500)},
                     separators=(",", ":"))
    assert len(raw.encode()) < 256 * 1024
    put_lease(api, raw)
    assert make(api).acquire("gpu-0")["admitted"] is True
    assert sorted(holders(api)) == ["gpu-0"]


# -- 11. the module: check mode writes nothing, hostile options never crash it -----------------------------
def module(tmp_path, args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "remediation_breaker.py"),
                           str(path)], capture_output=True, text=True, env=env, timeout=60, check=False)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON: rc %s\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))


def test_check_mode_writes_nothing(api, tmp_path):
    base = {"kubeconfig": api.kubeconfig_path, "group": GROUP, "allow_plain_http": True, "controller": "run-a",
            "_ansible_check_mode": True}
    set_annotation(api, "gpu-3", breaker.ATTEMPTS_ANNOTATION, "[NaN]")
    put_lease(api, json.dumps({"gpu-5": entry(since=T0 - 9000, expires=T0 - 1800)}))  # long expired: a write drops it
    lease_before = api.lease(NS, LEASE)
    with api.lock:
        api.requests.clear()
    for args in (dict(op="acquire", node="gpu-0"), dict(op="acquire", node="gpu-3"),
                 dict(op="record", node="gpu-0", step="drain", status="done", reason="x"),
                 dict(op="release", node="gpu-0", reason="x")):
        answer = module(tmp_path, dict(base, **args))
        assert answer.get("changed") is False, answer
    assert writes(api) == [], writes(api)
    assert annotations(api, "gpu-3")[breaker.ATTEMPTS_ANNOTATION] == "[NaN]"
    assert api.lease(NS, LEASE) == lease_before
    assert breaker.STATE_ANNOTATION not in annotations(api, "gpu-3")  # the refusal is not recorded either


@pytest.mark.parametrize("options", [
    {"max_parallel": "nan"}, {"max_parallel": "1e999%", "group_size": 10}, {"window_hours": "nan"},
    {"ttl": "nan"}, {"ttl": -1}, {"max_attempts": -1}, {"group_size": -4, "max_parallel": "50%"},
    {"controller": ""}, {"timeout": 0},
])
def test_module_with_hostile_options_fails_cleanly_or_refuses(api, tmp_path, options):
    args = dict({"kubeconfig": api.kubeconfig_path, "group": GROUP, "allow_plain_http": True, "op": "acquire",
                 "node": "gpu-0"}, **options)
    answer = module(tmp_path, args)
    if answer.get("failed"):
        assert answer.get("msg") and "Traceback" not in answer["msg"], answer
        assert "exception" not in answer, answer
    assert_records_read_back(api, ("gpu-0",))
    if options.get("window_hours") == "nan" and answer.get("admitted"):
        for _offset in range(3):  # default max_attempts 3: the fourth run is refused
            module(tmp_path, args)
        assert len(attempts(api, "gpu-0")) <= 3


# -- 12. more records at the edges -----------------------------------------------------------------------
def test_duplicate_node_keys_with_valid_entries_are_refused(api):
    one, two = json.dumps(entry(by="run-y")), json.dumps(entry(by="run-z"))
    raw = '{"gpu-5": %s, "gpu-5": %s}' % (one, two)
    put_lease(api, raw)
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False and refused.get("unreadable") == LEASE_RECORD, refused
    assert raw_holders(api) == raw


def test_the_history_keeps_the_last_20_and_reads_back(api):
    kube = client(api)
    for index in range(25):
        breaker.record_step(kube, "gpu-0", "step-%d" % index, "done", "r", now=T0 + index, controller="run-a")
    history = breaker.read_history(api.node("gpu-0"), "gpu-0")
    assert len(history) == 20 and history[-1]["step"] == "step-24" and history[0]["step"] == "step-5"
    assert state(api, "gpu-0")["step"] == "step-24"


def test_attempts_are_written_sorted_and_old_ones_dropped(api):
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, json.dumps([T0 - 10, T0 - 100000, T0 - 20]))
    answer = make(api, max_attempts=3, window=3600).acquire("gpu-0")
    assert answer["admitted"] is True and answer["attempts"] == 3, answer
    assert attempts(api, "gpu-0") == [T0 - 20, T0 - 10, T0]


def test_op_record_goes_on_while_the_attempts_are_damaged(api):
    """Only the history and the annotations make op record fail; a damaged attempts record is left as
    it is and the step is recorded."""
    set_annotation(api, "gpu-0", breaker.ATTEMPTS_ANNOTATION, "[Infinity]")
    breaker.record_step(client(api), "gpu-0", "drain", "done", "3 pods evicted", now=T0, controller="run-a")
    assert state(api, "gpu-0")["step"] == "drain"
    assert annotations(api, "gpu-0")[breaker.ATTEMPTS_ANNOTATION] == "[Infinity]"


def test_a_damaged_holder_set_repaired_between_calls(api):
    b = make(api, max_parallel=1)
    assert b.acquire("gpu-0")["admitted"]
    good = raw_holders(api)
    with api.lock:
        api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = good.replace("run-a", "")
    assert make(api, max_parallel=1, controller="run-b").acquire("gpu-1")["admitted"] is False
    assert b.release("gpu-0")["released"] is False
    with api.lock:
        api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = good
    assert make(api, max_parallel=1, controller="run-b").acquire("gpu-1")["admitted"] is False  # gpu-0 holds it
    assert b.release("gpu-0")["released"] is True
    assert make(api, max_parallel=1, controller="run-b").acquire("gpu-1")["admitted"] is True
    assert live(api, T0) == ["gpu-1"]


# -- the red team's failing attacks, fixed (F1..F12) and kept as regression tests --------------------------
# F1 -- an empty node name: the Lease got a holder "" that its own reader refuses -> the whole group was
# refused ("unreadable") and every release failed, for ever.
def test_an_empty_node_name_never_locks_the_group(api):
    try:
        first = make(api, max_parallel=4).acquire("")
    except (breaker.BreakerError, ValueError):
        first = {"admitted": False}
    assert first["admitted"] is False
    assert_records_read_back(api)
    assert make(api, max_parallel=4, controller="run-b").acquire("gpu-1")["admitted"] is True


def test_module_node_empty_never_locks_the_group(api, tmp_path):
    base = {"kubeconfig": api.kubeconfig_path, "group": GROUP, "allow_plain_http": True, "op": "acquire"}
    first = module(tmp_path, dict(base, node=""))
    assert first.get("admitted") is not True and first.get("failed") is True, first
    assert "node name" in first["msg"], first
    second = module(tmp_path, dict(base, node="gpu-1", controller="run-b"))
    assert second.get("admitted") is True, second


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.sampled_from(["", "gpu-0/", "gpu-0/status", "GPU-0", "gpu_0", "-gpu",
                                                         "gpu-", "a" * 254, "a.", ".a", "a..b", "gpu-0\n", "..",
                                                         "gpu-0%2F", "\uff47pu"])))
def test_a_name_is_a_node_name_or_refused_before_any_request(name):
    """Any text: a DNS-1123 subdomain (1..253 characters) is a node name; anything else raises
    BreakerError naming option node, from acquire, release and record_step alike, before any request."""
    import re

    valid = bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name, re.ASCII)) \
        and len(name) <= 253
    assert (breaker.name_problem(name) is None) is valid, name

    class NoRequests(object):
        def request(self, *args, **kwargs):
            raise AssertionError("a request for %r" % (name,))

        get_node = patch_node = request

    if valid:
        return
    b = breaker.Breaker(NoRequests(), GROUP, controller="run-a", clock=lambda: T0)
    for call in (lambda: b.acquire(name), lambda: b.release(name),
                 lambda: breaker.record_step(NoRequests(), name, "drain", "done", "x", now=T0)):
        with pytest.raises(breaker.BreakerError, match="option node"):
            call()


# F2 -- another spelling of a held Node: two controllers on one node.
@pytest.mark.parametrize("alias", ["gpu-0/", "gpu-0/status"])
def test_a_path_spelling_of_a_held_node_does_not_let_a_second_controller_in(api, alias):
    assert make(api, max_parallel=4).acquire("gpu-0")["admitted"]
    try:
        other = make(api, max_parallel=4, controller="run-b", clock=lambda: T0 + 5).acquire(alias)
    except (breaker.BreakerError, ValueError) as exc:
        other = {"admitted": False, "reason": str(exc)}
    assert attempts(api, "gpu-0") == [T0], (alias, other)
    assert not other["admitted"], (alias, other)


# F3 -- admitted although the Node PATCH's answer showed no attempt.
class StrippingClient(KubeClient):
    """A Node PATCH answered 200 whose attempt did not land (a mutating webhook or policy engine that
    strips unknown annotations, a proxy): the answer shows no attempt."""

    def request(self, method, path, body=None, content_type=None, deadline=None):
        if method == "PATCH" and "/nodes/" in path and isinstance(body, dict):
            body = json.loads(json.dumps(body))
            (body.get("metadata", {}).get("annotations") or {}).pop(breaker.ATTEMPTS_ANNOTATION, None)
        return super().request(method, path, body, content_type, deadline)


def test_an_attempt_the_answer_does_not_show_is_not_an_admission(api):
    kube = StrippingClient(api.url, token=api.token, allow_plain_http=True, timeout=5)
    answer = make(api, kube=kube).acquire("gpu-0")
    assert breaker.ATTEMPTS_ANNOTATION not in annotations(api, "gpu-0")
    assert answer["admitted"] is False, answer
    assert "not counted" in answer["reason"] and "slot released" in answer["reason"], answer
    assert live(api, T0) == []  # the slot was given back
    assert state(api, "gpu-0")["status"] == "refused"


class AnswerWithoutAttemptClient(KubeClient):
    """The PATCH lands, but its answer is an older copy of the Node (a caching proxy): read again, the
    attempt is there, so the admission stands."""

    def request(self, method, path, body=None, content_type=None, deadline=None):
        if method == "PATCH" and "/nodes/" in path:
            before = super().request("GET", path)
            super().request(method, path, body, content_type, deadline)
            return before
        return super().request(method, path, body, content_type, deadline)


def test_an_attempt_seen_when_read_again_is_an_admission(api):
    kube = AnswerWithoutAttemptClient(api.url, token=api.token, allow_plain_http=True, timeout=5)
    answer = make(api, kube=kube).acquire("gpu-0")
    assert answer["admitted"] is True and attempts(api, "gpu-0") == [T0], answer


# F4 -- metadata.annotations not an object: acquire raised ValueError while recording the refusal.
@pytest.mark.parametrize("value", [["a"], "a=b", 5])
def test_node_annotations_not_an_object_is_a_refusal_not_a_crash(api, value):
    with api.lock:
        api.nodes["gpu-0"]["metadata"]["annotations"] = value
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False and "gpu-0" in (refused.get("unreadable") or ""), refused
    assert refused["recorded"] is False and "metadata.annotations" in refused["record_error"], refused
    assert api.node("gpu-0")["metadata"]["annotations"] == value  # the damaged record left as it is
    with pytest.raises(RecordError):
        breaker.record_step(client(api), "gpu-0", "drain", "done", "x", now=T0, controller="run-a")


# F5 -- record_step wrote a history entry its own reader refuses (empty step or status).
@pytest.mark.parametrize("step, status", [("", "done"), ("drain", ""), ("", "")])
def test_record_step_with_empty_words_writes_nothing_unreadable(api, step, status):
    with pytest.raises(breaker.BreakerError):
        breaker.record_step(client(api), "gpu-0", step, status, "x", now=T0, controller="run-a")
    assert writes(api) == []
    assert_records_read_back(api, ("gpu-0",))
    assert make(api).acquire("gpu-0")["admitted"] is True


def test_the_playbook_names_a_failed_unnamed_task_remediation():
    """ansible_failed_task.name of an unnamed task is "": default('remediation') keeps "", which op
    record refuses; default('remediation', true) does not."""
    text = open(os.path.join(REPO, "playbooks", "tasks", "remediate-node.yml")).read()
    assert "default('remediation')" not in text
    assert text.count("ansible_failed_task.name | default('remediation', true)") >= 2


# F6 -- a history `at` in Unicode digits was read as a time.
@pytest.mark.parametrize("at", ["\uff12\uff10\uff12\uff17-01-15T08:00:00Z", "\u0662\u0660\u0662\u0667-01-15T08:00:00Z",
                                "2027-01-15T08:00:00Z\n"])
def test_history_at_in_unicode_digits_is_unreadable(api, at):
    step = {"step": "drain", "status": "done", "reason": "ok", "at": at, "by": "run-a"}
    node = {"metadata": {"name": "gpu-0", "resourceVersion": "1",
                         "annotations": {breaker.HISTORY_ANNOTATION: json.dumps([step], ensure_ascii=False)}}}
    with pytest.raises(RecordError):
        breaker.read_history(node, "gpu-0")


# F7 -- records over the size bound were named "Lease <ns>/<name>" / "Node <n>".
def test_oversized_records_are_named_as_documented(api):
    put_lease(api, "{" + " " * (300 * 1024) + "}")
    refused = make(api, max_parallel=5).acquire("gpu-0")
    assert refused["admitted"] is False
    assert refused.get("unreadable") == LEASE_RECORD, refused
    with api.lock:
        api.leases.clear()
    set_annotation(api, "gpu-1", breaker.ATTEMPTS_ANNOTATION, "[" + " " * (300 * 1024) + "]")
    refused = make(api, max_parallel=5).acquire("gpu-1")
    assert refused.get("unreadable") == breaker.node_record("gpu-1", breaker.ATTEMPTS_ANNOTATION), refused


def test_a_release_never_promises_an_expiry_while_the_holder_set_is_unreadable(api):
    put_lease(api, "{NaN}")
    released = make(api).release("gpu-0")
    assert released["released"] is False and released["unreadable"] == LEASE_RECORD, released
    assert "expires" not in released["reason"] and "operator" in released["reason"], released


# F8 -- "Bounded size (256 KiB)" was 262144 characters, not bytes.
def test_a_holder_set_counted_in_bytes_not_characters():
    raw = json.dumps({("\u00e9" * 246) + "%04d" % i: entry() for i in range(700)}, ensure_ascii=False)
    assert len(raw) < 256 * 1024 < len(raw.encode("utf-8"))
    lease = {"metadata": {"name": LEASE, "resourceVersion": "1", "annotations": {breaker.HOLDERS_ANNOTATION: raw}}}
    with pytest.raises(RecordError, match="bytes, more than 262144"):
        breaker.read_holders(lease, NS, LEASE)
    with pytest.raises(RecordError, match="bytes, more than 262144"):
        breaker.records.load_json(raw, LEASE_RECORD)


# F9 -- a ttl below the resolution of epoch seconds let two nodes share one slot.
@pytest.mark.parametrize("ttl", [1e-9, 0.999])
def test_a_tiny_ttl_never_lets_two_nodes_into_one_slot(api, ttl):
    with pytest.raises(breaker.BreakerError, match="option ttl must be a number of seconds from 1"):
        make(api, ttl=ttl)
    first = make(api, ttl=1).acquire("gpu-0")
    second = make(api, ttl=1, controller="run-b").acquire("gpu-1")
    assert first["admitted"] and not second["admitted"], (first, second)


# F10 -- the breaker's own write grew the holder set past its reader's bound (and the API server's).
def test_a_holder_set_near_its_size_bound_is_never_written_past_it(api):
    by = "c" * 1024
    count = (256 * 1024 - 2000) // len(json.dumps({"gpu-9999": entry(by=by)}))
    raw = json.dumps({"gpu-%d" % (100 + i): entry(by=by) for i in range(count)})
    assert len(raw.encode()) < 256 * 1024
    put_lease(api, raw)
    breaker.read_holders(api.lease(NS, LEASE), NS, LEASE)  # readable as stored
    answers = []
    for index in range(5):
        answers.append(make(api, max_parallel=10000, controller=by, clock=lambda: T0 + 10).acquire("gpu-%d" % index))
        assert_records_read_back(api)
        assert breaker.annotation_bytes(api.lease(NS, LEASE)["metadata"]["annotations"]) <= 256 * 1024
    # what fits in the 2000 bytes left is admitted; then every admission is refused, nothing written
    admitted = [a["admitted"] for a in answers]
    fitted = admitted.index(False)
    assert fitted >= 1 and not any(admitted[fitted:]), answers
    assert all("not written" in a["reason"] for a in answers[fitted:]), answers
    assert live(api, T0 + 10) == sorted(["gpu-%d" % i for i in range(fitted)]
                                        + ["gpu-%d" % (100 + i) for i in range(count)])


def test_the_holder_count_bound_is_never_reached_before_the_byte_bound():
    """MAX_HOLDERS (the reader's count bound) and the 256 KiB byte bound agree: the smallest possible
    entry takes MIN_HOLDER_BYTES, so a holder set within the byte bound has fewer than MAX_HOLDERS."""
    smallest = '"a": %s, ' % json.dumps({"by": "x", "expires": 1577836800, "since": 1577836800}, sort_keys=True)
    assert len(smallest) == breaker.MIN_HOLDER_BYTES
    assert breaker.MAX_HOLDERS * breaker.MIN_HOLDER_BYTES > breaker.MAX_BYTES == 256 * 1024


def test_the_double_refuses_annotations_over_256_kib_like_the_api_server(api):
    """apimachinery ValidateAnnotations: keys and values together at most 262144 bytes, else 422."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import ApiStatusError

    kube = client(api)
    key = "example.com/x"
    room = 256 * 1024 - len(key)
    kube.patch_node("gpu-0", {"metadata": {"annotations": {key: "a" * room}}})  # exactly at the limit
    with pytest.raises(ApiStatusError) as caught:
        kube.patch_node("gpu-1", {"metadata": {"annotations": {key: "\u00e9" * (room // 2 + 1)}}})  # bytes count
    assert caught.value.code == 422 and "Too long: must have at most 262144 bytes" in str(caught.value)
    assert "annotations" not in api.node("gpu-1")["metadata"]


# F11 -- the playbook's controller id was "ansible@<hostname>": two runs from one host were one controller,
# both admitted to the same node. It is now one id per run (ansible@<host>/<run id>).
def test_two_runs_from_one_host_are_not_both_admitted_to_one_node(api):
    results = [None, None]
    start = threading.Barrier(2)

    def run(index):
        start.wait()
        results[index] = make(api, max_parallel=4, controller="ansible@bastion-1/2027011508000%dZ-0000beef" % index,
                              retries=30, clock=lambda: T0 + index).acquire("gpu-0")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [r["admitted"] for r in results].count(True) == 1, results
    assert len(attempts(api, "gpu-0")) == 1


def test_the_playbook_sends_one_controller_id_per_run():
    """remediate.yml names the run's controller once (first play, run_once and delegated to localhost with
    its fact) with a random part, and every breaker call of the run sends it."""
    import yaml

    plays = yaml.safe_load(open(os.path.join(REPO, "playbooks", "remediate.yml")))
    named = [task for task in plays[0]["tasks"] if "__remediate_run_controller" in (task.get("ansible.builtin.set_fact")
                                                                                     or {})]
    # the first play runs on localhost:all (so that --limit narrows the inventory check, through the
    # inventory_vars_parsed lookup); the id is still named once, on localhost, where the next play reads it
    assert plays[0]["hosts"] == "{{ lookup('gpufleet.cluster.inventory_vars_parsed', 'localhost:all') }}"
    assert len(named) == 1 and named[0].get("run_once") is True and named[0].get("delegate_to") == "localhost"
    assert named[0].get("delegate_facts") is True and "loop" not in named[0] and "when" not in named[0]
    template = named[0]["ansible.builtin.set_fact"]["__remediate_run_controller"]
    assert template.startswith("ansible@{{ lookup('ansible.builtin.pipe', 'hostname') }}/") and "random" in template
    assert plays[1]["vars"]["__remediate_controller"] == "{{ hostvars['localhost']['__remediate_run_controller'] }}"
    for name, calls in (("remediate-node.yml", 2), ("remediate-record.yml", 1)):  # acquire, release; record
        text = open(os.path.join(REPO, "playbooks", "tasks", name)).read()
        assert "ansible@" not in text and text.count("gpufleet.cluster.remediation_breaker:") == calls, name
        assert text.count('controller: "{{ __remediate_controller }}"') == calls, name


# F12 -- the policy accepted breaker options the breaker refuses at run time.
@pytest.mark.parametrize("key, value", [
    ("window_hours", float("nan")), ("window_hours", float("inf")), ("window_hours", 1e-9), ("window_hours", 8785),
    ("lease_ttl_seconds", float("nan")), ("lease_ttl_seconds", 10 ** 12), ("lease_ttl_seconds", 0.5),
    ("max_parallel", "1e999%"), ("max_parallel", "101%"), ("max_parallel", -1), ("max_parallel", 1.5),
    ("max_attempts", 5000), ("max_attempts", 1000), ("group", "___"), ("lease_namespace", "Kube_System"),
    ("lease_namespace", ""),
])
def test_the_policy_refuses_what_the_breaker_refuses(key, value):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation

    with pytest.raises(remediation.PolicyError, match="gpufleet_remediation.%s" % key):
        remediation.policy({key: value})


@pytest.mark.parametrize("key, value", [
    ("window_hours", 8784), ("window_hours", 0.5), ("lease_ttl_seconds", 1), ("lease_ttl_seconds", 31622400),
    ("max_parallel", "100%"), ("max_parallel", 0), ("max_parallel", "7"), ("max_attempts", 999),
    ("lease_namespace", "gpufleet"),
])
def test_the_policy_accepts_what_the_breaker_accepts(api, key, value):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation

    effective = remediation.policy({key: value})
    make(api, max_parallel=effective["max_parallel"], group_size=4, max_attempts=effective["max_attempts"],
         window=effective["window_hours"] * 3600.0, ttl=effective["lease_ttl_seconds"],
         namespace=effective["lease_namespace"])


@pytest.mark.parametrize("char", ["x", "\u00e9", "\u4e2d", "\U0001f600", "\n"])
def test_the_steps_written_stay_within_their_byte_bounds(api, char):
    """Long texts in any script: every step as written is at most MAX_REASON bytes a text, the history
    at most HISTORY_BYTES (the oldest steps go first), so a Node's records never grow toward the API
    server's 256 KiB of annotations (a 422 there would make every later record of the node fail)."""
    kube = client(api)
    for index in range(breaker.HISTORY + 5):
        breaker.record_step(kube, "gpu-0", char * 5000, "done", char * 20000, now=T0 + index, controller=char * 900)
        assert_records_read_back(api, ("gpu-0",))
    raw = annotations(api, "gpu-0")[breaker.HISTORY_ANNOTATION]
    steps = json.loads(raw)
    assert len(raw.encode()) <= breaker.HISTORY_BYTES and 1 <= len(steps) <= breaker.HISTORY
    assert steps[-1]["at"] == "2027-01-15T08:00:24Z"  # the newest kept
    for text in (steps[-1]["step"], steps[-1]["reason"]):
        assert text.endswith("...") and len(json.dumps(text)) - 2 <= breaker.MAX_REASON
    assert breaker.annotation_bytes(annotations(api, "gpu-0")) < 128 * 1024
