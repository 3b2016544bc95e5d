# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Node list read in pages, keeping per Node only one condition (docs/contracts.md, fleet status).

``GET /api/v1/nodes?limit=<n>&continue=<token>`` as kubectl reads a list (``--chunk-size``, 500 by
default): the answer of each page is read, checked and reduced to ``{name: condition}`` before the
next page is asked for, so at any time only one page and the reduced fleet are in memory, never the
whole NodeList (a real Node carries its image list and labels: tens of KB; 10,000 of them are
hundreds of MB).

The API's rules for a list read in chunks (https://kubernetes.io/docs/reference/using-api/api-concepts/
#retrieving-large-results-sets-in-chunks): ``metadata.continue`` of a page is the opaque token of the
next one, empty on the last page; ``metadata.remainingItemCount`` an estimate, never relied on. A
continue token the server can no longer serve (etcd compacted the revision of the first page; about 5
minutes by default) is answered ``410 Gone``, a Status with reason ``Expired``; the client starts the
list again without ``continue``. The Status may carry an *inconsistent* continue token in
``metadata.continue`` (kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/storage,
handleCompactedErrorForPaging); it is not used here: the fleet report is one snapshot of the
conditions, and the rest of an inconsistent list may show a Node twice or miss one that was renamed,
so the list is read again from the start, at most ``max_restarts`` times, then it fails naming the page.

One strict reader per page (``read_page``, records.py's checkers): a mapping, ``kind`` NodeList when
set, ``items`` a list of at most ``limit`` Nodes (required: null or absent is not an empty page),
``metadata.continue`` a string, ``metadata.remainingItemCount`` a non-negative integer,
``metadata.resourceVersion`` a string, the same on every page of one pass (the API serves the chunks
of one list from one snapshot); per Node ``metadata.name`` a non-empty string and, when present,
``status.conditions`` a list of objects each with a string ``type``; the kept condition's
``status``, ``reason``, ``message`` and ``lastHeartbeatTime`` strings (or absent). The page itself
is decoded by json's C decoder (bounded in bytes while it is read, ``max_page_bytes``) through
``records.loads``: no duplicate key anywhere in the page (``{"status": "False", "status": "True"}``
is not read as its last value; a hook per object, within the noise of json's own time on a page of
500 realistic Nodes, 15 MB, and linear in the page), no NaN. The strict field checks cover what is
kept, not the rest of a Node (``records.load_json``'s nesting and string walks cost five times
json's time there). Anything else is ``NodeListError`` naming the page: the caller fails closed
(every host it reports fails), never reads a partial list as the fleet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL_ON_CHOICES
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import ApiStatusError, KubeError

try:  # Python 3
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2 is not a target
    raise

NODES_PATH = "/api/v1/nodes"
# kubectl's default --chunk-size (staging/src/k8s.io/kubectl: cmd/get, "chunk-size", 500)
PAGE_SIZE = 500
MAX_PAGE_SIZE = 5000
# one page of 500 Nodes of up to 128 KiB each (a real GPU Node is 10-50 KiB: at most 50 images,
# the kubelet's nodeStatusMaxImages, and a few hundred feature-discovery labels)
MAX_PAGE_BYTES = 64 * 1024 * 1024
MAX_RESTARTS = 3
# a bound on the pages of one pass (a server that hands out continue tokens forever): 1,000,000 Nodes
MAX_PAGES_NODES = 1000000
MAX_CONDITIONS = 256
# a throttled page (429, or a 5xx with Retry-After) is asked again after Retry-After seconds, as
# client-go does (k8s.io/client-go rest/request.go: checkWait, retryAfterSeconds: 429 or >= 500 with an
# integer Retry-After header; no header, no retry), bounded here: at most MAX_TRIES requests and
# RETRY_BUDGET seconds of waiting per page, then the page fails (every host fails, naming it)
MAX_TRIES = 3
RETRY_BUDGET = 10.0
KEPT = ("status", "reason", "message", "lastHeartbeatTime")
# set on the kept condition when the Node carries a second condition of the type: the index of that
# second one (plugin_utils/agent_status fails the Node: two conditions of one type are no verdict)
DUPLICATES = "duplicateIndex"

# The options of a paged read of the fleet's conditions (action/module fleet_conditions; documented once in
# doc fragment gpufleet.cluster.agent_conditions, which the lookup agent_conditions shares).
FLEET_CONDITIONS_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "agent_var": {"type": "str", "default": "gpufleet_health_agent"},
    "server": {"type": "str", "required": True},
    "token_file": {"type": "str"},
    "ca_file": {"type": "str"},
    "cert_file": {"type": "str"},
    "key_file": {"type": "str"},
    "max_age": {"type": "int", "default": 600},
    "page_size": {"type": "raw", "default": 500},
    "max_restarts": {"type": "int", "default": 3},
    "max_page_bytes": {"type": "int", "default": 67108864},
    "timeout": {"type": "float", "default": 60},
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
}


class NodeListError(KubeError):
    """The Node list could not be read completely: names the page (1-based, of the current pass) and
    how many Nodes were read before it."""

    def __init__(self, reason, page=None, read=0):
        where = "GET %s" % NODES_PATH if page is None else "GET %s, page %d (after %d Node(s))" % (
            NODES_PATH, page, read)
        KubeError.__init__(self, "%s: %s" % (where, reason))
        self.page = page
        self.read = read
        self.reason = reason


def page_path(limit, token=None):
    """The request path of one page."""
    path = "%s?limit=%d" % (NODES_PATH, limit)
    if token:
        path += "&continue=%s" % quote(token, safe="")
    return path


def _condition(conditions, record, field, condition_type):
    """The first condition of ``condition_type`` in ``conditions`` reduced to KEPT (with DUPLICATES,
    the index of the second, when there is one), or None."""
    if conditions is None:
        return None
    records.listing(conditions, record, field, max_items=MAX_CONDITIONS)
    found = None
    for index, condition in enumerate(conditions):
        where = "%s[%d]" % (field, index)
        records.mapping(condition, record, where, required=("type",))
        kind = records.string(condition["type"], record, where + ".type", max_length=316)
        if kind != condition_type:
            continue
        if found is not None:
            found.setdefault(DUPLICATES, index)
            continue
        found = {"type": kind}
        for key in KEPT:
            value = condition.get(key)
            if value is None:
                continue
            found[key] = records.string(value, record, "%s.%s" % (where, key), max_length=32768)
    return found


def node_summary(item, record, field, condition_type):
    """(name, the condition of ``condition_type`` reduced to KEPT or None) of one Node of a page."""
    records.mapping(item, record, field, required=("metadata",))
    metadata = records.mapping(item["metadata"], record, field + ".metadata", required=("name",))
    name = records.string(metadata["name"], record, field + ".metadata.name", max_length=253, allow_empty=False)
    status = item.get("status")
    if status is None:
        return name, None
    records.mapping(status, record, field + ".status")
    return name, _condition(status.get("conditions"), record, field + ".status.conditions", condition_type)


def read_page(answer, record, limit, condition_type):
    """The strict reader of one page: ([(name, condition or None)], continue token ("" on the last
    page), remainingItemCount or None, resourceVersion or None). RecordError naming ``record`` and
    the field otherwise."""
    records.mapping(answer, record)
    kind = answer.get("kind")
    if kind is not None:
        records.string(kind, record, "kind", choices=("NodeList",))
    metadata = answer.get("metadata")
    metadata = {} if metadata is None else records.mapping(metadata, record, "metadata")
    token = metadata.get("continue")
    token = "" if token is None else records.string(token, record, "metadata.continue", max_length=65536)
    remaining = metadata.get("remainingItemCount")
    if remaining is not None:
        remaining = records.integer(remaining, record, "metadata.remainingItemCount", minimum=0)
    version = metadata.get("resourceVersion")
    if version is not None:
        version = records.string(version, record, "metadata.resourceVersion", max_length=64)
    items = answer.get("items")
    if items is None:  # the API server answers [] for no Node: null or absent is no NodeList page
        raise records.RecordError(record, "absent or null, not a list of Nodes", "items")
    items = records.listing(items, record, "items", max_items=limit)
    return [node_summary(item, record, "items[%d]" % index, condition_type)
            for index, item in enumerate(items)], token, remaining, version


def retry_after(exc):
    """Seconds to wait before asking again for a page answered ``exc`` (ApiStatusError), or None: not
    a throttling answer (429 or >= 500) or no Retry-After of whole seconds (as client-go reads it)."""
    code = exc.code if isinstance(exc.code, int) else 0
    text = getattr(exc, "retry_after", None)
    if not (code == 429 or code >= 500) or not isinstance(text, str):
        return None
    text = text.strip()
    if not (text.isdigit() and text.isascii()) or len(text) > 6:
        return None
    return int(text)


def _get_page(client, path, record, max_page_bytes, sleep, figures):
    """One page's answer: asked again after Retry-After on throttling, within MAX_TRIES and
    RETRY_BUDGET; the last ApiStatusError otherwise (its message says how often it was asked)."""
    waited = 0.0
    for attempt in range(1, MAX_TRIES + 1):
        figures["requests"] += 1
        try:
            return client.request("GET", path, max_bytes=max_page_bytes,
                                  decode=lambda raw: records.loads(raw, record))
        except ApiStatusError as exc:
            seconds = retry_after(exc)
            if seconds is None:
                raise
            if attempt == MAX_TRIES or waited + seconds > RETRY_BUDGET:
                raise ApiStatusError(exc.code, "%s (asked %d time(s), waited %.0f s; Retry-After %d s: a page is "
                                     "asked at most %d times within %.0f s)" % (
                                         str(exc), attempt, waited, seconds, MAX_TRIES, RETRY_BUDGET), exc.status)
            figures["retries"] = figures.get("retries", 0) + 1
            sleep(seconds)
            waited += seconds
    raise AssertionError("unreachable")  # pragma: no cover


def _expired(exc):
    """Whether an ApiStatusError is the 410 Gone / reason Expired of a continue token."""
    status = exc.status or {}
    return exc.code == 410 and status.get("reason") == "Expired"


def read_conditions(client, condition_type, limit=PAGE_SIZE, max_restarts=MAX_RESTARTS,
                    max_page_bytes=MAX_PAGE_BYTES, on_page=None, sleep=time.sleep):
    """{node name: condition of ``condition_type`` (KEPT fields) or None} of every Node, read in
    pages of ``limit`` with ``client`` (a kube_node.KubeClient), and a dict of figures (pages,
    requests, restarts). ``on_page(page, count, token, remaining)`` is called after each page (tests,
    progress); ``sleep(seconds)`` waits before a throttled page is asked again (Retry-After). NodeListError
    naming the page when the list cannot be read completely.

    The cyclic GC is paused for the read (records.gc_paused): a page and its reduction make about a
    million objects and no reference cycle; collections started while a page is alive walk it, and in
    Ansible's worker the whole inherited inventory as well (docs/performance.md)."""
    with records.gc_paused():
        return _read_conditions(client, condition_type, limit, max_restarts, max_page_bytes, on_page, sleep)


def _read_conditions(client, condition_type, limit, max_restarts, max_page_bytes, on_page, sleep):
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise NodeListError("the page size must be an integer from 1 to %d, got %r" % (MAX_PAGE_SIZE, limit))
    max_pages = MAX_PAGES_NODES // limit + 1
    figures = {"pages": 0, "requests": 0, "restarts": 0, "retries": 0}
    restarts = 0
    while True:
        nodes, token, page, seen_tokens, first_version = {}, None, 0, set(), None
        try:
            while True:
                page += 1
                if page > max_pages:
                    raise NodeListError("more than %d pages: the server keeps handing out continue tokens"
                                        % max_pages, page, len(nodes))
                record = "node list page %d" % page
                try:
                    answer = _get_page(client, page_path(limit, token), record, max_page_bytes, sleep, figures)
                except records.RecordError as exc:
                    raise NodeListError(str(exc), page, len(nodes))
                except ApiStatusError as exc:
                    if token and _expired(exc):
                        raise _Expired(page, len(nodes), exc)
                    raise NodeListError(str(exc), page, len(nodes))
                except KubeError as exc:
                    raise NodeListError(str(exc), page, len(nodes))
                try:
                    summaries, token, remaining, version = read_page(answer, record, limit, condition_type)
                except records.RecordError as exc:
                    raise NodeListError(str(exc), page, len(nodes))
                if page == 1:
                    first_version = version
                elif version != first_version:
                    # the chunks of one list come from one snapshot. ListMeta.continue (k8s.io/apimachinery
                    # pkg/apis/meta/v1, API reference "ListMeta"): "The resourceVersion field returned
                    # when using this continue value will be identical to the value in the first
                    # response, unless you have received this token from an error message" (the 410's
                    # inconsistent token, never used here). Another version mixes two lists.
                    raise NodeListError(
                        "unreadable record %s (field metadata.resourceVersion): %r, but page 1 of this list "
                        "was %r: the pages of one list are one snapshot" % (record, version, first_version),
                        page, len(nodes))
                figures["pages"] += 1
                for index, (name, condition) in enumerate(summaries):
                    if name in nodes:
                        raise NodeListError("unreadable record %s (field items[%d].metadata.name): Node %s is "
                                            "listed twice" % (record, index, name), page, len(nodes))
                    nodes[name] = condition
                if on_page is not None:
                    on_page(page, len(summaries), token, remaining)
                if not token:
                    return nodes, figures
                if token in seen_tokens:
                    raise NodeListError("the server handed out the same continue token twice (a loop)",
                                        page, len(nodes))
                seen_tokens.add(token)
        except _Expired as expired:
            restarts += 1
            figures["restarts"] = restarts
            if restarts > max_restarts:
                raise NodeListError(
                    "the continue token expired (410 Gone, reason Expired: %s) and the list was started again "
                    "%d time(s) without reaching its end; is the API server compacting faster than %d pages "
                    "can be read?" % (expired.error, max_restarts, expired.page), expired.page, expired.read)


class _Expired(Exception):
    def __init__(self, page, read, error):
        Exception.__init__(self, str(error))
        self.page = page
        self.read = read
        self.error = (error.status or {}).get("message") or str(error)
