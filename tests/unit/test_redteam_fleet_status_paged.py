"""Red team: fleet status from the Kubernetes API, the Node list read in pages (issue 45 item 3).

Written from the documentation only (docs/contracts.md: the `agent.condition` row, "Fleet status
(playbooks/fleet_status.yml)", [Time](#time), "Records read back": "A page of the Node list"; the
header comment of playbooks/fleet_status.yml), driven the way tests/unit/test_fleet_status_paged.py
drives it (lookup agent_conditions, module_utils/kube/node_list.read_conditions, the API double).

The one promise every attack checks, fail closed: a host is reported healthy (agent.condition pass)
only when its Node's GpufleetHealthy condition was read as True with a fresh heartbeat from a list read
to its end; "the Node list not read to its end -> fail naming the page"; "no host is reported from a
partial list" (contracts.md, Records read back, A page of the Node list).
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import agent_conditions
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import utc_text as format_utc
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import ApiStatusError, KubeClient
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import NodeListError, read_conditions
from fake_kube_api.server import FakeKubeAPI

NOW = 1700000000.0
TYPE = "GpufleetHealthy"
UNREAD = "the Node list could not be read"


# -- helpers ------------------------------------------------------------------------------------------
def cond(status="True", age=10, reason="AllChecksPass", message="all gpufleet checks pass", **extra):
    out = {"type": TYPE, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": format_utc(NOW - 1000)}
    if age is not None:
        out["lastHeartbeatTime"] = format_utc(NOW - age)
    out.update(extra)
    return out


def node(name, *conditions):
    return {"metadata": {"name": name}, "status": {"conditions": list(conditions)}}


def page(items, cont=None, remaining=None, rv="7"):
    meta = {"resourceVersion": rv}
    if cont is not None:
        meta["continue"] = cont
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": meta, "items": items}


class Scripted:
    """A client answering the pages given, in order (an exception is raised); after the script, the
    last answer again and again (an API server that never stops)."""

    def __init__(self, *pages):
        self.pages = list(pages)
        self.paths = []

    def request(self, method, path, max_bytes=None, **_):
        self.paths.append(path)
        answer = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        if len(self.paths) > 200:  # a reader that loops: stop it so the test can say so
            raise KeyboardInterrupt("the reader kept asking: %d requests" % len(self.paths))
        if isinstance(answer, BaseException):
            raise answer
        return json.loads(json.dumps(answer))


def healthy(checks, host):
    """The host is reported healthy: its checks are exactly passes."""
    got = checks.get(host)
    return bool(got) and all(c["status"] == "pass" for c in got)


def all_fail_naming(checks, hosts, text):
    for host in hosts:
        got = checks[host]
        assert got and all(c["status"] == "fail" for c in got), (host, got)
        assert any(UNREAD in c["message"] and text in c["message"] for c in got), (host, got)


def gone(reason="Expired", cont="inconsistent-token"):
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": reason,
              "message": "The provided continue parameter is too old to display a consistent list result."}
    if cont is not None:
        status["metadata"] = {"continue": cont}
    return ApiStatusError(410, status["message"], status)


def status_error(code, reason):
    return ApiStatusError(code, reason, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                         "code": code, "reason": reason, "message": reason})


# -- continue tokens: loops and repeats ---------------------------------------------------------------
def test_the_same_continue_token_forever_is_no_endless_loop_and_fails_closed():
    """Records read back: "a continue token handed out twice is unreadable" -> "every reported host
    fails agent.condition naming the page"."""
    kube = Scripted(page([node("a", cond())], cont="same"), page([node("b", cond())], cont="same"),
                    page([node("c", cond())], cont="same"))
    checks, _ = agent_conditions(["a", "b", "c"], kube, now=NOW, page_size=1)
    assert len(kube.paths) <= 3, kube.paths
    all_fail_naming(checks, ["a", "b", "c"], "page ")


def test_a_token_cycle_a_b_a_is_a_token_handed_out_twice():
    """Records read back: "a continue token handed out twice is unreadable" (not only twice in a row)."""
    kube = Scripted(page([node("a", cond())], cont="A"), page([node("b", cond())], cont="B"),
                    page([node("c", cond())], cont="A"), page([node("d", cond())], cont="B"))
    checks, _ = agent_conditions(["a", "b", "c", "d"], kube, now=NOW, page_size=1)
    assert len(kube.paths) <= 4, kube.paths
    all_fail_naming(checks, ["a", "b", "c", "d"], "page 3")


def test_a_token_that_changes_while_the_items_repeat_is_a_node_listed_twice():
    """Records read back: "a Node listed twice ... is unreadable"; no host from a partial list."""
    kube = Scripted(page([node("a", cond())], cont="t1"), page([node("a", cond())], cont="t2"),
                    page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    all_fail_naming(checks, ["a", "b"], "page 2")


def test_a_node_listed_twice_in_one_page_with_different_conditions_fails_closed():
    """A Node listed twice (once False, once True) is unreadable: never the healthy one of the two."""
    for first, second in ((cond("False", reason="gpu.count"), cond()), (cond(), cond("False", reason="gpu.count"))):
        kube = Scripted(page([node("a", first), node("a", second), node("b", cond())]))
        checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=10)
        all_fail_naming(checks, ["a", "b"], "page 1")


def test_an_empty_continue_token_ends_the_list():
    """metadata.continue a string: the empty string is the last page (as the real server omits it)."""
    kube = Scripted(page([node("a", cond())], cont=""))
    checks, figures = agent_conditions(["a"], kube, now=NOW, page_size=1)
    assert healthy(checks, "a") and len(kube.paths) == 1 and figures["pages"] == 1


# -- the page's shape ------------------------------------------------------------------------------------
def test_a_first_page_with_more_items_than_the_limit_fails_closed_naming_page_1():
    """Records read back: "items a list of at most limit Nodes"."""
    kube = Scripted(page([node("a", cond()), node("b", cond()), node("c", cond())]))
    checks, _ = agent_conditions(["a", "b", "c"], kube, now=NOW, page_size=2)
    all_fail_naming(checks, ["a", "b", "c"], "page 1")


@pytest.mark.parametrize("remaining", [0, 1000000])
def test_remaining_item_count_that_lies_does_not_end_or_extend_the_list(remaining):
    """The list ends where metadata.continue ends (remainingItemCount is only an integer >= 0): a page
    saying 0 remaining with a continue token is followed; the Nodes after it are read."""
    kube = Scripted(page([node("a", cond())], cont="t1", remaining=remaining),
                    page([node("b", cond("False", reason="gpu.count", message="gpu.count: 7 GPUs"))]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    assert len(kube.paths) == 2
    assert healthy(checks, "a") and not healthy(checks, "b")
    assert checks["b"][0]["id"] == "gpu.count"


@pytest.mark.parametrize("remaining", [-1, True, 1.5, "3", None])
def test_remaining_item_count_not_an_integer_fails_closed(remaining):
    """Records read back: "metadata.remainingItemCount an integer >= 0" (None: the JSON null)."""
    bad = page([node("a", cond())], cont="t1")
    bad["metadata"]["remainingItemCount"] = remaining
    checks, _ = agent_conditions(["a"], Scripted(bad, page([])), now=NOW, page_size=1)
    if remaining is None:  # null is the field not set: accepted or refused, but never a wrong verdict
        assert all(c["status"] in ("pass", "fail") for c in checks["a"])
        return
    all_fail_naming(checks, ["a"], "page 1")


@pytest.mark.parametrize("metadata", [{}, {"name": None}, {"generateName": "a"}, None, "a"])
def test_an_item_without_metadata_name_on_the_first_page_fails_every_host(metadata):
    """Records read back: "per Node metadata.name a non-empty string"."""
    item = {"status": {"conditions": [cond()]}}
    if metadata is not None:
        item["metadata"] = metadata
    checks, _ = agent_conditions(["a", "b"], Scripted(page([node("a", cond()), item])), now=NOW, page_size=5)
    all_fail_naming(checks, ["a", "b"], "page 1")


@pytest.mark.parametrize("api_name,host", [("node-a ", "node-a"), ("NODE-A", "node-a"), ("node-a\x00", "node-a"),
                                           ("node-a.example.com", "node-a"), ("nöde-a", "node-a"),
                                           ("node-a/status", "node-a"), ("node-a", "node-a.")])
def test_a_node_name_that_is_not_the_host_name_never_makes_the_host_healthy(api_name, host):
    """agent.condition: "no Node ... -> fail": only the Node named exactly as the host counts."""
    checks, _ = agent_conditions([host], Scripted(page([node(api_name, cond())])), now=NOW, page_size=5)
    assert not healthy(checks, host), checks


@pytest.mark.parametrize("name", ["node-ä", "node a", "a" * 253, "node-1.rack-2.dc", "x/../y", "<script>"])
def test_odd_but_readable_node_names_are_matched_exactly(name):
    """An odd name is a non-empty string: readable; its host is reported from its condition."""
    checks, _ = agent_conditions([name, "other"], Scripted(page([node(name, cond())])), now=NOW, page_size=5)
    assert healthy(checks, name) or all(c["status"] == "fail" for c in checks[name])
    assert not healthy(checks, "other")


def test_a_node_in_the_api_but_not_in_the_inventory_is_not_reported():
    checks, _ = agent_conditions(["a"], Scripted(page([node("a", cond()), node("stranger", cond())])),
                                 now=NOW, page_size=5)
    assert sorted(checks) == ["a"] and healthy(checks, "a")


def test_a_host_in_the_inventory_without_a_node_fails_closed():
    """agent.condition: "no Node, no condition ... -> fail"."""
    checks, _ = agent_conditions(["a", "absent"], Scripted(page([node("a", cond())])), now=NOW, page_size=5)
    assert healthy(checks, "a")
    assert checks["absent"] and all(c["status"] == "fail" for c in checks["absent"])
    assert checks["absent"][0]["id"] == "agent.condition"


# -- the condition itself ---------------------------------------------------------------------------------
BAD_CONDITIONS = [
    ("status Unknown", [cond("Unknown")]),
    ("status true lower case", [cond("true")]),
    ("status empty", [cond("")]),
    ("no heartbeat", [cond(age=None)]),
    ("heartbeat stale", [cond(age=601)]),
    ("heartbeat 61 s in the future", [cond(age=-61)]),
    ("heartbeat an hour in the future (clock step)", [cond(age=-3600)]),
    ("heartbeat impossible date", [dict(cond(), lastHeartbeatTime="2023-13-45T25:61:61Z")]),
    ("heartbeat empty", [dict(cond(), lastHeartbeatTime="")]),
    ("heartbeat garbage", [dict(cond(), lastHeartbeatTime="yesterday")]),
    ("heartbeat a number", [dict(cond(), lastHeartbeatTime=NOW)]),
    ("heartbeat NaN", [dict(cond(), lastHeartbeatTime=float("nan"))]),
    ("heartbeat null", [dict(cond(), lastHeartbeatTime=None)]),
    ("heartbeat in the year 1", [dict(cond(), lastHeartbeatTime="0001-01-01T00:00:00Z")]),
    ("heartbeat 1970", [dict(cond(), lastHeartbeatTime="1970-01-01T00:00:00Z")]),
    ("type in another case", [dict(cond(), type="gpufleethealthy")]),
    ("only the Ready condition", [{"type": "Ready", "status": "True"}]),
    ("no conditions at all", []),
]


@pytest.mark.parametrize("label,conditions", BAD_CONDITIONS, ids=[b[0] for b in BAD_CONDITIONS])
def test_a_condition_not_read_as_true_and_fresh_is_never_healthy(label, conditions):
    """agent.condition: "no Node, no condition, a status other than True/False or a heartbeat older
    than gpufleet_status_max_age -> fail"; Time: "A result or heartbeat dated more than 60 s ahead of
    the reader's clock is unknown, never fresh: ... agent.condition fails"."""
    kube = Scripted(page([node("a", *conditions), node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, max_age=600, page_size=5)
    assert checks["a"] and all(c["status"] == "fail" for c in checks["a"]), (label, checks["a"])


@pytest.mark.parametrize("age", [0, 1, 599, -59])
def test_a_fresh_true_condition_passes(age):
    """agent.condition: True -> pass (a heartbeat up to 60 s ahead is not 'more than 60 s ahead')."""
    checks, _ = agent_conditions(["a"], Scripted(page([node("a", cond(age=age))])), now=NOW, max_age=600,
                                 page_size=5)
    assert healthy(checks, "a"), checks


# -- errors mid-list ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("error", [status_error(429, "TooManyRequests"), status_error(500, "InternalError"),
                                   status_error(503, "ServiceUnavailable"), status_error(400, "BadRequest"),
                                   status_error(404, "NotFound")], ids=["429", "500", "503", "400", "404"])
def test_an_error_mid_list_fails_closed_naming_the_page_or_is_retried(error):
    """contracts: "A list that cannot be read to its end ... fails every reported host with
    agent.condition naming the page"; a retry that reads it to its end is allowed."""
    kube = Scripted(page([node("a", cond())], cont="t1"), error, page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    if any(UNREAD in c["message"] for c in checks["a"]):
        all_fail_naming(checks, ["a", "b"], "page 2 (after 1 Node(s))")
    else:  # retried: then the whole list was read
        assert healthy(checks, "a") and healthy(checks, "b") and len(kube.paths) >= 3
    assert len(kube.paths) <= 10


def test_a_410_without_reason_expired_is_never_a_partial_list():
    """410 Gone restarts the list only with reason Expired; otherwise the list was not read to its end."""
    kube = Scripted(page([node("a", cond())], cont="t1"), gone(reason="Gone"),
                    page([node("a", cond())], cont="t2"), page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    if any(UNREAD in c["message"] for c in checks["a"]):
        all_fail_naming(checks, ["a", "b"], "page 2")
    else:
        assert healthy(checks, "b") and "continue" not in kube.paths[2]


def test_a_410_expired_restarts_from_the_first_page_and_never_uses_the_inconsistent_token():
    """contracts: "starts the list again from its first page ...; the inconsistent token the Status
    may carry is not used (the report is one snapshot)"."""
    kube = Scripted(page([node("a", cond())], cont="t1"), gone(cont="INCONSISTENT"),
                    page([node("a", cond())], cont="t2"), page([node("b", cond())]))
    checks, figures = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    assert healthy(checks, "a") and healthy(checks, "b")
    assert not any("INCONSISTENT" in p for p in kube.paths), kube.paths
    assert "continue" not in kube.paths[2] and figures["restarts"] == 1


def test_a_410_expired_on_the_first_page_is_no_restart_loop():
    """A 410 on a request without a continue token: nothing to restart from; bounded either way."""
    kube = Scripted(gone())
    checks, _ = agent_conditions(["a"], kube, now=NOW, page_size=1)
    all_fail_naming(checks, ["a"], "page 1")
    assert len(kube.paths) <= 4


def test_a_restart_does_not_keep_the_first_pass_verdicts():
    """After a restart the report is the second pass's snapshot: a node healthy in the first pass and
    unhealthy in the second is reported unhealthy (one snapshot, not a merge)."""
    kube = Scripted(page([node("a", cond())], cont="t1"), gone(),
                    page([node("a", cond("False", reason="gpu.count", message="gpu.count: 7"))], cont="t2"),
                    page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    assert not healthy(checks, "a") and checks["a"][0]["id"] == "gpu.count"


def test_a_node_removed_during_a_restart_is_not_reported_from_the_first_pass():
    kube = Scripted(page([node("a", cond())], cont="t1"), gone(), page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    assert not healthy(checks, "a") and healthy(checks, "b")


# -- page size ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, -1, 10 ** 9, "abc", "", 2.5, None, True])
def test_a_page_size_out_of_range_sends_nothing_and_reports_nobody_healthy(size):
    kube = Scripted(page([node("a", cond())]))
    try:
        checks, _ = agent_conditions(["a"], kube, now=NOW, page_size=size)
    except Exception as exc:  # pylint: disable=broad-except  # refused: fine, named
        assert "page size" in str(exc), exc
    else:
        assert not healthy(checks, "a")
    assert not kube.paths


# -- bytes on the wire: a raw server -------------------------------------------------------------------------
class Raw:
    """An HTTP server answering the bodies given, in order (status, bytes)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.paths = []
        raw = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                raw.paths.append(self.path)
                code, body = raw.answers.pop(0) if len(raw.answers) > 1 else raw.answers[0]
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def client(self, tmp_path):
        token = tmp_path / "token"
        token.write_text("t")
        return KubeClient("http://127.0.0.1:%d" % self.server.server_address[1], token_file=str(token),
                          allow_plain_http=True, timeout=5)


def good_first_page():
    return json.dumps(page([node("a", cond())], cont="t1")).encode()


HB = format_utc(NOW - 10)
RAW_BAD = [
    ("not JSON", b"<html><body>502 Bad Gateway</body></html>"),
    ("truncated JSON", good_first_page()[:-5]),
    ("empty body", b""),
    ("NaN heartbeat", (b'{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"b"},"status":{"conditions":'
                       b'[{"type":"GpufleetHealthy","status":"True","reason":"r","message":"m","lastHeartbeatTime":NaN}]'
                       b'}}]}')),
    ("Infinity remainingItemCount", b'{"kind":"NodeList","metadata":{"remainingItemCount":Infinity},"items":[]}'),
    ("JSON null", b"null"),
    ("UTF-8 garbage", b'{"kind":"NodeList","items":[{"metadata":{"name":"\xff\xfe"}}]}'),
]


@pytest.mark.parametrize("label,body", RAW_BAD, ids=[r[0] for r in RAW_BAD])
def test_a_second_page_that_is_not_a_node_list_page_fails_every_host(tmp_path, label, body):
    """contracts: "a page that is not a NodeList page ... fails every reported host with
    agent.condition naming the page"."""
    with Raw((200, good_first_page()), (200, body)) as raw:
        checks, _ = agent_conditions(["a", "b"], raw.client(tmp_path), now=NOW, page_size=1)
    all_fail_naming(checks, ["a", "b"], "page 2")


def test_a_huge_page_is_refused_while_it_is_read(tmp_path):
    """Records read back: "the page bounded in bytes (64 MiB) while it is read": a bound, then fail."""
    padding = "x" * 300000
    body = json.dumps(page([dict(node("a", cond()), padding=padding)])).encode()
    with Raw((200, good_first_page()), (200, body)) as raw:
        checks, _ = agent_conditions(["a", "b"], raw.client(tmp_path), now=NOW, page_size=1, max_page_bytes=100000)
    all_fail_naming(checks, ["a", "b"], "page 2")


# -- the API double: nodes added and removed during the read -----------------------------------------------
def fake_client(api, tmp_path):
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    return KubeClient(api.url, token_file=str(token), allow_plain_http=True)


def test_nodes_added_and_removed_during_the_read_never_make_a_removed_node_healthy(tmp_path):
    """Nodes change while the list is paged (the double serves the rest by name from the store);
    whatever the read gives, a host whose Node was removed before its page is not healthy."""
    with FakeKubeAPI() as api:
        for name in ("n0", "n1", "n2", "n3"):
            api.add_node(name)
            with api.lock:
                api.nodes[name]["status"]["conditions"].append(cond())

        def on_page(*_args, **_kw):
            with api.lock:
                api.nodes.pop("n3", None)
        try:
            conditions, _ = read_conditions(fake_client(api, tmp_path), TYPE, limit=2, on_page=on_page)
        except NodeListError:
            return  # fail closed
    assert "n3" not in conditions  # removed before its page: not read, so never reported healthy
    assert sorted(conditions) == ["n0", "n1", "n2"]


# -- property: whatever the pages, nobody is healthy who was not read healthy from a whole list ---------------
NAMES = ["a", "b", "c", "d"]
KINDS = {"healthy": lambda: [cond()], "false": lambda: [cond("False", reason="gpu.count")],
         "stale": lambda: [cond(age=5000)], "future": lambda: [cond(age=-3600)], "unknown": lambda: [cond("Unknown")],
         "none": lambda: []}  # a Node carrying the condition twice: /work/notes/redteam-fleet_status_paged-failing.py
ITEM = st.tuples(st.sampled_from(NAMES + ["zz"]), st.sampled_from(sorted(KINDS)))
ANSWER = st.one_of(
    st.tuples(st.just("page"), st.lists(ITEM, max_size=3), st.sampled_from([None, "", "t1", "t2", "t3"]),
              st.sampled_from([None, 0, 5])),
    st.tuples(st.just("error"), st.sampled_from([400, 410, 429, 500, 503]), st.sampled_from(["Expired", "Gone", "X"]),
              st.just(None)),
)


def build(answer):
    if answer[0] == "error":
        _, code, reason, _ = answer
        return gone(reason=reason) if code == 410 else status_error(code, reason)
    _, items, token, remaining = answer
    return page([node(name, *KINDS[kind]()) for name, kind in items], cont=token, remaining=remaining)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answers=st.lists(ANSWER, min_size=1, max_size=6), limit=st.integers(min_value=1, max_value=3))
def test_no_host_is_healthy_unless_read_healthy_and_a_failed_read_fails_everyone(answers, limit):
    pages = [build(a) for a in answers]
    kube = Scripted(*pages)
    checks, _ = agent_conditions(NAMES, kube, now=NOW, max_age=600, page_size=limit)
    assert sorted(checks) == NAMES
    assert len(kube.paths) <= 50, "the reader kept asking"
    unread = [h for h in NAMES if any(UNREAD in c["message"] for c in checks[h])]
    if unread:
        assert unread == NAMES  # one failed read fails every reported host
        assert all(all(c["status"] == "fail" for c in checks[h]) for h in NAMES)
        return
    answered = [a for a in answers[:len(kube.paths)] if a[0] == "page"]
    for host in NAMES:
        if healthy(checks, host):
            kinds = [kind for a in answered for name, kind in a[1] if name == host]
            assert kinds and kinds[-1] == "healthy", (host, kinds, answers)


# -- heartbeat stamps in other RFC 3339 spellings ------------------------------------------------------------
def stamp(epoch, suffix):
    return format_utc(epoch)[:-1] + suffix  # "...Z" -> the same wall clock digits with another offset


@pytest.mark.parametrize("suffix", ["+14:00", "+02:00", "+00:30"])
def test_a_heartbeat_with_an_offset_is_read_in_utc_never_as_if_it_were_z(suffix):
    """Time: "every decision compares UTC epoch seconds (RFC 3339 stamps parsed with calendar.timegm,
    never local time)": NOW-10 s written with a positive offset is hours older; read as Z it would be
    fresh. Stale -> fail (or unreadable -> fail), never pass."""
    hb = dict(cond(), lastHeartbeatTime=stamp(NOW - 10, suffix))
    checks, _ = agent_conditions(["a"], Scripted(page([node("a", hb)])), now=NOW, max_age=600, page_size=5)
    assert not healthy(checks, "a"), checks


@pytest.mark.parametrize("suffix", ["-14:00", "-02:00"])
def test_a_heartbeat_with_a_negative_offset_is_in_the_future_never_fresh(suffix):
    """NOW-10 s written with -02:00 is 2 h ahead: "dated more than 60 s ahead ... is unknown, never fresh"."""
    hb = dict(cond(), lastHeartbeatTime=stamp(NOW - 10, suffix))
    checks, _ = agent_conditions(["a"], Scripted(page([node("a", hb)])), now=NOW, max_age=600, page_size=5)
    assert not healthy(checks, "a"), checks


@pytest.mark.parametrize("answer", [
    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "reason": "InternalError", "items": []},
    {"kind": "PodList", "items": [node("a", cond())]},
], ids=["a Status with 200", "PodList"])
def test_a_first_page_that_is_no_node_list_page_reports_nobody(answer):
    """contracts: "a page that is not a NodeList page ... fails every reported host"."""
    checks, _ = agent_conditions(["a", "b"], Scripted(answer), now=NOW, page_size=5)
    all_fail_naming(checks, ["a", "b"], "page 1")


@pytest.mark.parametrize("reason,message", [("", "m"), ("AllChecksPass", "all gpufleet checks pass"),
                                            ("agent.condition", "m"), ("gpu.count", ""), ("x" * 5000, "m"),
                                            ("pass", "pass")])
def test_a_false_condition_fails_whatever_its_reason_and_message_say(reason, message):
    """agent.condition: "A False condition is reported as its reason (the first failing check id)
    instead": a reason that looks like a pass, is empty or is huge still fails the host."""
    checks, _ = agent_conditions(["a", "b"], Scripted(page([node("a", cond("False", reason=reason, message=message)),
                                                            node("b", cond())])), now=NOW, page_size=5)
    assert checks["a"] and all(c["status"] == "fail" for c in checks["a"]), checks["a"]
    assert healthy(checks, "b")


# -- fixes of the failing cases (red team, /work/notes/redteam-fleet_status_paged-failing.py) ----------------
def test_two_gpufleet_conditions_on_one_node_are_never_read_as_the_healthy_one():
    """Fail closed: a Node carrying GpufleetHealthy twice (False and True: not what the server merges
    by type, but what a JSON patch can leave) is not reported healthy; the failure names the duplicate."""
    for pair in ((cond("False", reason="gpu.count"), cond()), (cond(), cond("False", reason="gpu.count")),
                 (cond(age=5000), cond()), (cond(), cond(age=5000)), (cond(), cond())):
        checks, _ = agent_conditions(["a", "b"], Scripted(page([node("a", *pair), node("b", cond())])),
                                     now=NOW, page_size=5)
        assert not healthy(checks, "a"), (pair, checks)
        (check,) = checks["a"]
        assert (check["id"], check["status"]) == ("agent.condition", "fail"), check
        assert "more than one GpufleetHealthy" in check["message"] and "conditions[1]" in check["message"], check
        assert healthy(checks, "b"), checks


_CONDITION = st.fixed_dictionaries({"type": st.sampled_from([TYPE, "Ready", "gpufleethealthy"]),
                                    "status": st.sampled_from(["True", "False", "Unknown"]),
                                    "lastHeartbeatTime": st.sampled_from([format_utc(NOW - 10), format_utc(NOW - 5000),
                                                                          format_utc(NOW + 3600)])})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_CONDITION, max_size=4))
def test_the_paged_reader_and_the_unpaged_filter_give_one_verdict(conditions):
    """One verdict for both readers (plugin_utils/agent_status): the lookup (a page) and the filter
    agent_status_checks (the whole NodeList) agree on any list of conditions, duplicates included; a
    host is healthy only with exactly one GpufleetHealthy condition, True and fresh."""
    from ansible_collections.gpufleet.cluster.plugins.filter.agent_status import agent_status_checks

    paged, _ = agent_conditions(["a"], Scripted(page([node("a", *conditions)])), now=NOW, max_age=600, page_size=5)
    unpaged = agent_status_checks(page([node("a", *conditions)]), ["a"], now=NOW, max_age=600)
    assert paged == unpaged
    ours = [c for c in conditions if c["type"] == TYPE]
    assert healthy(paged, "a") == (len(ours) == 1 and ours[0]["status"] == "True"
                                   and ours[0]["lastHeartbeatTime"] == format_utc(NOW - 10)), (conditions, paged)


DUPLICATE_KEYS = [
    ("status False then True", '{"type":"GpufleetHealthy","status":"False","status":"True","reason":"gpu.count",'
                               '"message":"m","lastHeartbeatTime":"%s"}' % HB),
    ("type twice", '{"type":"Ready","type":"GpufleetHealthy","status":"True","reason":"r",'
                   '"message":"m","lastHeartbeatTime":"%s"}' % HB),
]


@pytest.mark.parametrize("label,condition_json", DUPLICATE_KEYS, ids=[d[0] for d in DUPLICATE_KEYS])
def test_a_condition_with_duplicate_keys_is_never_read_as_healthy(tmp_path, label, condition_json):
    """Fail closed: a condition that says both False and True (duplicate JSON keys; json keeps the
    last) is not a condition read as healthy: every host fails naming the page."""
    body = ('{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"a"},"status":{"conditions":[%s]}}]}'
            % condition_json).encode()
    with Raw((200, body)) as raw:
        checks, _ = agent_conditions(["a"], raw.client(tmp_path), now=NOW, page_size=5)
    all_fail_naming(checks, ["a"], "page 1")
    assert "duplicate key" in checks["a"][0]["message"], checks


def test_a_duplicate_metadata_name_key_never_lends_one_nodes_health_to_another(tmp_path):
    """{"name": "a", "name": "b"}: which Node is this? Not a reason for host b to pass."""
    body = ('{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"a","name":"b"},"status":{"conditions":'
            '[{"type":"GpufleetHealthy","status":"True","reason":"r","message":"m","lastHeartbeatTime":"%s"}]}}]}'
            % HB).encode()
    with Raw((200, body)) as raw:
        checks, _ = agent_conditions(["a", "b"], raw.client(tmp_path), now=NOW, page_size=5)
    all_fail_naming(checks, ["a", "b"], "page 1")


def test_a_duplicate_key_on_a_later_page_fails_every_host_naming_that_page(tmp_path):
    """A duplicate key anywhere in a page (here in a field not kept: the whole page is decoded strictly)."""
    second = (b'{"kind":"NodeList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"b",'
              b'"labels":{"x":"1","x":"2"}},"status":{"conditions":[]}}]}')
    with Raw((200, good_first_page()), (200, second)) as raw:
        checks, _ = agent_conditions(["a", "b"], raw.client(tmp_path), now=NOW, page_size=1)
    all_fail_naming(checks, ["a", "b"], "page 2")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=4).map(
                     lambda d: (json.dumps(d)[:-1] + (', "k": 1, "k": 2}' if d else '"k": 1, "k": 2}')).encode())))
def test_the_strict_page_decoder_decodes_or_refuses_never_crashes(raw):
    """records.loads (the page decoder): any bytes are a value or a RecordError; a duplicate key never a value."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records

    try:
        value = records.loads(raw, "node list page 1")
    except records.RecordError as exc:
        assert "node list page 1" in str(exc)
        return
    assert b'"k": 1, "k": 2' not in raw, value


@pytest.mark.parametrize("answer", [{"kind": "NodeList", "items": None}, {"kind": "NodeList"},
                                    {"kind": "NodeList", "metadata": {"continue": "t1"}}],
                         ids=["items null", "no items", "no items, a continue token"])
def test_a_page_without_an_items_list_is_not_a_node_list_page(answer):
    """contracts, Records read back, A page of the Node list: "items a list of at most limit Nodes" ->
    "every reported host fails agent.condition naming the page and the field" (was: read as empty)."""
    checks, _ = agent_conditions(["a", "b"], Scripted(answer, page([node("a", cond())])), now=NOW, page_size=5)
    all_fail_naming(checks, ["a", "b"], "page 1")
    assert all("field items" in c[0]["message"] for c in checks.values()), checks


def test_an_empty_fleet_is_items_an_empty_list():
    """What a real API server answers for no Node ("items": []): read, every host has no Node."""
    checks, _ = agent_conditions(["a"], Scripted(page([])), now=NOW, page_size=5)
    assert checks["a"][0]["status"] == "fail" and "no Node of this name" in checks["a"][0]["message"], checks


@pytest.mark.parametrize("versions", [("7", "9"), ("7", None), (None, "7"), ("7", "7", "8")],
                         ids=["7 then 9", "7 then none", "none then 7", "7, 7 then 8"])
def test_resource_version_changing_between_pages_is_not_one_snapshot(versions):
    """contracts: "(the report is one snapshot)": pages of one list carry one resourceVersion (api-concepts,
    Retrieving large results sets in chunks); a page of another revision mixes two lists."""
    names = ["a", "b", "c"][:len(versions)]
    pages = [page([node(n, cond())], cont=("t%d" % i if i < len(names) - 1 else None), rv=rv)
             for i, (n, rv) in enumerate(zip(names, versions))]
    for item in pages:
        if item["metadata"]["resourceVersion"] is None:
            del item["metadata"]["resourceVersion"]
    checks, _ = agent_conditions(names, Scripted(*pages), now=NOW, page_size=1)
    all_fail_naming(checks, names, "page %d" % len(versions))
    assert all("resourceVersion" in c[0]["message"] for c in checks.values()), checks


def test_a_restart_after_410_may_read_a_newer_snapshot():
    """The list started again after an expired continue token is a new list: its own resourceVersion."""
    kube = Scripted(page([node("a", cond())], cont="t1", rv="7"), gone(),
                    page([node("a", cond())], cont="t2", rv="12"), page([node("b", cond())], rv="12"))
    checks, figures = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    assert healthy(checks, "a") and healthy(checks, "b") and figures["restarts"] == 1, (checks, figures)


def run_lookup(**kwargs):
    """The lookup's answer, its options registered from its DOCUMENTATION and doc fragment as the plugin loader does
    (as tests/unit/test_node_validate_action.py: the checkout is imported without the collection loader)."""
    import yaml
    from ansible import constants as C
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    from ansible_collections.gpufleet.cluster.plugins.lookup import agent_conditions as module

    from ansible_collections.gpufleet.cluster.plugins.doc_fragments.agent_conditions import ModuleDocFragment

    name = "gpufleet.cluster.agent_conditions"
    if not C.config.has_configuration_definition("lookup", name):
        # its options are the doc fragment gpufleet.cluster.agent_conditions (shared with fleet_conditions)
        options = dict(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
        options.update(yaml.safe_load(module.DOCUMENTATION).get("options") or {})
        C.config.initialize_plugin_configuration_definitions("lookup", name, options)
    plugin = module.LookupModule(loader=DataLoader(), templar=Templar(loader=DataLoader(), variables={}))
    plugin._load_name = name  # pylint: disable=protected-access
    (checks,) = plugin.run([], variables={"hostvars": {}}, **kwargs)
    return checks


@pytest.mark.parametrize("value", ["lots", 0, "0", -1, 5001, "5001", True, "", 2.5, "٣", " ", [500]],
                         ids=repr)
def test_the_lookup_fails_every_host_for_a_page_size_it_cannot_use(value):
    """-e gpufleet_status_kube_page_size=lots (or 0): every reported host fails agent.condition naming the
    variable; the lookup does not raise (a raise fails localhost only and the fleet report keeps the
    hosts' verdicts of the last run)."""
    checks = run_lookup(hosts=["a", "b"], agent_var="", server="http://127.0.0.1:9", page_size=value)
    all_fail_naming(checks, ["a", "b"], "gpufleet_status_kube_page_size")


@pytest.mark.parametrize("value,expected", [(1, 1), ("500", 500), (" 7 ", 7), (5000, 5000)])
def test_a_page_size_as_text_from_e_is_read(value, expected):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import page_size_of

    assert page_size_of(value) == expected


def test_credentials_that_cannot_be_loaded_fail_every_host(tmp_path):
    checks = run_lookup(hosts=["a", "b"], agent_var="", server="https://127.0.0.1:9",
                        ca_file=str(tmp_path / "missing-ca.crt"))
    all_fail_naming(checks, ["a", "b"], "credentials cannot be loaded")


# -- 429: asked again after Retry-After, bounded (client-go rest/request.go checkWait) ---------------------
def fleet(api, tmp_path, names):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher

    token = tmp_path / "token"
    token.write_text(api.token)
    client = KubeClient(api.url, token_file=str(token), allow_plain_http=True, timeout=5)
    for name in names:
        api.add_node(name)
        KubePublisher(client, name).publish(True, [])
    return client


def test_a_throttled_page_is_asked_again_after_retry_after(tmp_path):
    """The API double answers 429 with Retry-After 2 once (as the API server's throttling filter): the
    page is asked again after 2 s (waited through ``sleep``), the list is read, every host healthy."""
    import time

    names = ["n1", "n2", "n3"]
    waits = []
    with FakeKubeAPI() as api:
        client = fleet(api, tmp_path, names)
        api.throttle_list(times=1, retry_after="2")
        now = time.time()
        conditions, figures = read_conditions(client, TYPE, limit=2, sleep=waits.append)
        statuses = [r["status"] for r in api.requests if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    assert waits == [2] and figures["retries"] == 1 and statuses == [429, 200, 200], (waits, figures, statuses)
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import host_checks

    checks = host_checks(conditions, names, now, 600)
    assert all(healthy(checks, n) for n in names), checks


@pytest.mark.parametrize("times,retry_after,waits", [
    (3, "1", [1, 1]),        # a third 429: at most 3 tries per page
    (1, "11", []),           # more than the 10 s budget: not waited for
    (2, "6", [6]),           # 6 + 6 > 10
    (1, None, []),           # no Retry-After: no retry (as client-go)
    (1, "soon", []),         # no whole seconds: no retry
], ids=["three 429", "retry-after 11", "budget", "no header", "not a number"])
def test_throttling_beyond_the_bound_fails_every_host_naming_the_page(tmp_path, times, retry_after, waits):
    waited = []
    with FakeKubeAPI() as api:
        client = fleet(api, tmp_path, ["n1", "n2"])
        api.throttle_list(times=times, retry_after=retry_after)
        with pytest.raises(NodeListError) as failed:
            read_conditions(client, TYPE, limit=1, sleep=waited.append)
    assert waited == waits and failed.value.page == 1 and "429" in str(failed.value), (waited, str(failed.value))


def test_a_throttled_later_page_fails_every_host_through_the_lookup_function(tmp_path):
    kube = Scripted(page([node("a", cond())], cont="t1"),
                    ApiStatusError(429, "Too many requests, please try again later.", None, "30"),
                    page([node("b", cond())]))
    checks, _ = agent_conditions(["a", "b"], kube, now=NOW, page_size=1)
    all_fail_naming(checks, ["a", "b"], "page 2")
