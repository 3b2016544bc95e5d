"""The remediation circuit breaker (module_utils/breaker.py) against the API double: a Lease per
group with resourceVersion conflicts as the real server answers them, attempts on the Node, and
the faults: racing controllers, the breaker open, a conflict storm, API server errors."""

import json
import threading

import pytest
from fake_kube_api.server import FakeKubeAPI

from ansible_collections.gpufleet.cluster.plugins.module_utils import breaker
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube_node import KubeClient

NS = "kube-system"
LEASE = "gpufleet-remediation-gpu-a100"


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


def test_same_node_again_keeps_its_slot_without_a_new_attempt(api):
    b = make(api, max_parallel=1)
    assert b.acquire("gpu-0")["attempts"] == 1
    again = b.acquire("gpu-0")
    assert again["admitted"] and again["attempts"] == 1 and holders(api) == ["gpu-0"]


def test_percent_limit():
    assert breaker.parallel_limit("10%", 50) == 5
    assert breaker.parallel_limit("10%", 5) == 1  # at least one when the share is not 0
    assert breaker.parallel_limit("0%", 5) == 0
    assert breaker.parallel_limit("3", None) == 3
    for bad, words in ((-1, ">= 0"), ("ten", "percentage"), ("150%", "percentage"), (True, "number of nodes")):
        with pytest.raises(breaker.BreakerError, match=words):
            breaker.parallel_limit(bad, 10)
    with pytest.raises(breaker.BreakerError, match="group_size"):
        breaker.parallel_limit("10%", None)


def test_max_attempts_per_window_keeps_the_node_isolated(api):
    now = [1_000_000.0]
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
    now = [1_000_000.0]
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
                {"gpu-5": {"since": 1.0, "expires": 4e9, "by": "other"}})}
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


@pytest.mark.parametrize("raw, words", [("not json", "is not JSON"), ('["gpu-0"]', "not a map"),
                                        ('{"gpu-0": {"since": 1}}', "has no expiry")])
def test_unreadable_holder_set_refuses(api, raw, words):
    b = make(api)
    assert b.acquire("gpu-0")["admitted"]
    with api.lock:
        api.leases[(NS, LEASE)]["metadata"]["annotations"][breaker.HOLDERS_ANNOTATION] = raw
    refused = b.acquire("gpu-1")
    assert not refused["admitted"] and words in refused["reason"]


def test_unreadable_attempts_refuses(api):
    api.patch_node("gpu-0", "application/merge-patch+json",
                   {"metadata": {"annotations": {breaker.ATTEMPTS_ANNOTATION: "three"}}})
    refused = make(api).acquire("gpu-0")
    assert not refused["admitted"] and "is not JSON" in refused["reason"]


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
