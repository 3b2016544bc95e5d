# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation circuit breaker (docs/remediation.md, "Circuit breaker"), coordinated through
the API server, never through local state alone:

- at most ``max_parallel`` nodes (a number, or ``N%`` of the group) of a group in remediation at
  once, fleet-wide: a ``coordination.k8s.io/v1`` Lease per group (``gpufleet-remediation-<group>``)
  holds the set of nodes in remediation in its annotation ``gpufleet.io/remediation-holders``
  (node -> since, expires, by). It is updated with the ``resourceVersion`` it was read at (PUT); a
  409 Conflict (another controller updated it in between) means read again and decide again. An
  entry expires after ``ttl`` seconds, so a controller that died does not hold its slot forever;
- at most ``max_attempts`` remediation attempts per node in ``window`` seconds, recorded on the
  Node (annotation ``gpufleet.io/remediation-attempts``, epoch seconds).

A node held by another controller (the holder's ``by``) is not admitted; its own controller
re-admits it (a failed remediation keeps its slot), and that counts as an attempt.

Past either, the node is not admitted: it stays isolated and the reason says why. An API error, an
unreadable record, a clock that does not read a plausible time, or a conflict on every retry also
refuse admission (fail closed). Every step is recorded on the Node (``gpufleet.io/remediation``:
the last step; ``gpufleet.io/remediation-history``: the last ``HISTORY`` steps) through the gate's
guarded annotate write (``gate.node_write``, ``kube_node.guarded_write``).

Records read back (docs/contracts.md, "Records read back"), one strict reader each, built on
``records.py``; nothing else here parses them, and ``RecordError`` (unreadable) always refuses,
naming the record, never reads as "expired", "no holders" or "no attempts":

- ``read_lease`` / ``read_holders``: the Lease and its ``gpufleet.io/remediation-holders``;
- ``read_annotations``: a Node's annotations (a map of strings);
- ``read_attempts``: the Node's ``gpufleet.io/remediation-attempts``;
- ``read_history``: the Node's ``gpufleet.io/remediation-history`` (read to append to it).

What it writes reads back through these readers: node names are checked (``name_problem``,
Kubernetes DNS-1123 subdomains) before any request, empty steps and statuses are refused, and the
Lease's annotations are kept within the API server's 256 KiB (``records.MAX_BYTES``, counted in
UTF-8 bytes like the server's ``ValidateAnnotations``): an admission that would grow the holder set
past it is refused, never written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import math
import re
import time

try:
    from urllib.parse import quote
except ImportError:  # Python 2 (ansible-core's module_utils rules)
    from urllib import quote

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import utc_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import node_write
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import (
    ApiStatusError,
    ConflictError,
    KubeError,
    guarded_write,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import (
    MAX_BYTES,
    MAX_TIME,
    MIN_TIME,
    RecordError,
    listing,
    load_json,
    mapping,
    number,
    string,
    timestamp,
)

HOLDERS_ANNOTATION = "gpufleet.io/remediation-holders"
ATTEMPTS_ANNOTATION = "gpufleet.io/remediation-attempts"
STATE_ANNOTATION = "gpufleet.io/remediation"
HISTORY_ANNOTATION = "gpufleet.io/remediation-history"
LEASE_PREFIX = "gpufleet-remediation-"
HISTORY = 20
# the history as written: at most this many bytes (fewer than HISTORY steps when they are long), so
# the Node's annotations stay far below the API server's 256 KiB (each step is at most ~21 KiB: five
# texts of MAX_REASON bytes)
HISTORY_BYTES = 64 * 1024
DEFAULT_RETRIES = 10
# The breaker's settings when nobody sets them, owned here once: gpufleet_remediation's defaults
# (remediation.DEFAULT_POLICY, same keys), the module remediation_breaker's option defaults and
# Breaker's keyword defaults all come from this table.
POLICY_DEFAULTS = {
    "group": "all",            # the breaker's group (an inventory group name, or any name)
    "max_parallel": 1,         # nodes of the group in remediation at once: a number or "N%"
    "max_attempts": 3,         # attempts per node ...
    "window_hours": 24,        # ... in this many hours
    "lease_namespace": "kube-system",
    "lease_ttl_seconds": 7200,  # a holder that is never released frees its slot after this
}
# bounds of what is read back: more is not a record of ours
# nodes of one group in remediation: a Kubernetes cluster has at most 5000 nodes, and the holder set
# must fit in the Lease's annotations (records.MAX_BYTES, 256 KiB): every entry takes at least
# MIN_HOLDER_BYTES, so the byte bound is reached first (at most 262144 // 62 = 4228 holders fit)
MAX_HOLDERS = 5000
MIN_HOLDER_BYTES = 62  # len('"a": {"by": "x", "expires": 1577836800, "since": 1577836800}, ')
MAX_ATTEMPT_RECORDS = 1000
MAX_HISTORY_RECORDS = 1000
MAX_NAME = 253  # a Node's name (DNS subdomain)
MAX_ID = 1024  # a controller's id (``by``)
MAX_TEXT = 8192  # a step's texts as read back; written truncated to MAX_REASON
MAX_REASON = 4096
MAX_TTL = 366 * 86400.0  # a holder's ttl: an expiry further out than this is a slot held forever
# the shortest ttl and window: a holder's expiry must be a later epoch second than its since (a ttl
# below the resolution of the float epoch seconds, 1e-9, expires as it is written: two nodes in one slot)
MIN_TTL = 1.0
HOLDER_KEYS = ("since", "expires", "by")
HISTORY_KEYS = ("step", "status", "reason", "at", "by")
_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")  # ASCII digits only
# a Node's name: a DNS-1123 subdomain (k8s.io/apimachinery pkg/util/validation IsDNS1123Subdomain)
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(r"%s(?:\.%s)*\Z" % (_LABEL, _LABEL))
_DNS_LABEL = re.compile(_LABEL + r"\Z")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


class BreakerError(ValueError):
    """Bad input (names the option) or a clock that cannot be trusted."""


def name_problem(name, what="node"):
    """None when ``name`` is a Kubernetes object name (a DNS-1123 subdomain: 1..253 characters of
    ``a-z``, ``0-9``, ``-`` and ``.``, each dot-separated part starting and ending with a letter or
    digit), else why not. Checked before any request: ``""`` would read ``/api/v1/nodes`` (the
    list) as the Node, ``gpu-0/`` or ``gpu-0/status`` would be another spelling of ``gpu-0``, and a
    holder name the reader refuses would lock the whole group."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not _SUBDOMAIN.match(name):
        return ("option %s must be a Kubernetes node name (a DNS-1123 subdomain: 1 to %d characters of a-z, 0-9, "
                "'-' and '.', starting and ending with a letter or digit), got %r" % (what, MAX_NAME, name))
    return None


def check_name(name, what="node"):
    problem = name_problem(name, what)
    if problem:
        raise BreakerError(problem)
    return name


def check_namespace(namespace, what="namespace"):
    """``namespace`` when it is a namespace name (a DNS-1123 label, 1..63 characters)."""
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise BreakerError("option %s must name the Lease's namespace (a DNS-1123 label: 1 to 63 characters of "
                           "a-z, 0-9 and '-', starting and ending with a letter or digit), got %r" % (what, namespace))
    return namespace


def check_seconds(option, value):
    """``value`` as float seconds when it is a finite number in [MIN_TTL, MAX_TTL] (the ttl and the
    window: one place of these limits, remediation.policy checks against them too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_TTL <= value <= MAX_TTL:
        raise BreakerError("option %s must be a number of seconds from %g to %d (366 days), got %r"
                           % (option, MIN_TTL, MAX_TTL, value))
    return float(value)


def check_attempts(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BreakerError("option max_attempts must be an integer >= 1, got %r" % (value,))
    if value >= MAX_ATTEMPT_RECORDS:
        raise BreakerError("option max_attempts must be below %d, got %r" % (MAX_ATTEMPT_RECORDS, value))
    return value


def parallel_limit(max_parallel, group_size=None):
    """The number of nodes of the group allowed in remediation at once. ``max_parallel`` is an
    integer >= 0, or ``"N%"`` of ``group_size`` (rounded down, at least 1 when N > 0)."""
    if isinstance(max_parallel, bool):
        raise BreakerError("option max_parallel must be a number of nodes or a percentage, got %r" % (max_parallel,))
    if isinstance(max_parallel, int):
        if max_parallel < 0:
            raise BreakerError("option max_parallel must be >= 0, got %d" % max_parallel)
        return max_parallel
    text = str(max_parallel)
    if records.is_decimal(text.strip()):
        return int(text)
    match = _PERCENT.match(text)
    if not match or float(match.group(1)) > 100:
        raise BreakerError("option max_parallel must be a number of nodes or a percentage like '10%%', got %r"
                           % (max_parallel,))
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise BreakerError("option max_parallel=%s needs the group's size (option group_size, >= 1), got %r"
                           % (text.strip(), group_size))
    share = float(match.group(1))
    return 0 if share == 0 else max(1, int(group_size * share / 100.0))


def lease_name(group):
    """``gpufleet-remediation-<group>`` as a DNS label (lowercase, 63 characters at most)."""
    slug = _NAME_BAD.sub("-", str(group or "").lower()).strip("-")
    if not slug:
        raise BreakerError("option group must name the group (got %r)" % (group,))
    return (LEASE_PREFIX + slug)[:63].rstrip("-")


def _micro_time(now):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % int((now % 1) * 1e6)


def clock_problem(now, ttl=0.0):
    """None when ``now`` (this controller's clock) is a plausible time to write into records
    (2020..2100, with ``now + ttl`` too), else why not: a record written with it would be
    unreadable to every reader, or say that a slot never expires."""
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now) \
            or not MIN_TIME <= now <= MAX_TIME - ttl:
        return ("breaker: this controller's clock reads %r, not a plausible time (%s .. %s): nothing is "
                "written with it, refused" % (now, utc_text(MIN_TIME), utc_text(MAX_TIME)))
    return None


# -- the readers of what the breaker reads back ---------------------------------------------------
def lease_record(namespace, name):
    return "Lease %s/%s annotation %s" % (namespace, name, HOLDERS_ANNOTATION)


def node_record(node_name, annotation):
    return "Node %s annotation %s" % (node_name, annotation)


def text_bytes(text):
    """The size of ``text`` in UTF-8 bytes, as the API server counts annotations (Go ``len``)."""
    return len(text.encode("utf-8", "surrogatepass"))


def annotation_bytes(annotations):
    """The size the API server checks of ``metadata.annotations``: the keys and values in bytes
    (k8s.io/apimachinery pkg/api/validation/objectmeta.go ValidateAnnotations, at most
    TotalAnnotationSizeLimitB = 256 KiB = records.MAX_BYTES)."""
    return sum(text_bytes(str(key)) + text_bytes(str(value)) for key, value in annotations.items())


def _annotation_values(annotations, record, named):
    """``annotations`` must be a map of strings of at most records.MAX_BYTES bytes; a bad value of
    one of ``named`` (annotation -> record) names that record (e.g. ``Node <n> annotation ...``)."""
    mapping(annotations, record, "metadata.annotations")
    for key, value in annotations.items():
        if key in named:
            where, field = named[key], None
        else:
            where, field = record, "metadata.annotations[%s]" % key
        string(value, where, field, max_length=MAX_BYTES)
        size = text_bytes(value)
        if size > MAX_BYTES:
            raise RecordError(where, "%d bytes, more than %d" % (size, MAX_BYTES), field)


def read_lease(lease, namespace, name):
    """The Lease as read (None: there is none) -> (resourceVersion, annotations). RecordError when
    it is not a Lease object with a resourceVersion and string annotations (without the
    resourceVersion the PUT would not be guarded)."""
    record = "Lease %s/%s" % (namespace, name)
    if lease is None:
        return None, {}
    mapping(lease, record)
    metadata = mapping(lease.get("metadata"), record, "metadata")
    version = string(metadata.get("resourceVersion"), record, "metadata.resourceVersion", max_length=64,
                     allow_empty=False)
    annotations = metadata.get("annotations")
    if annotations is None:
        return version, {}
    _annotation_values(annotations, record, {HOLDERS_ANNOTATION: lease_record(namespace, name)})
    return version, annotations


def read_holders(lease, namespace, name):
    """{node: {since, expires, by}} of every holder in the Lease's annotation (expired ones too);
    {} when there is no Lease or it has no such annotation. RecordError naming
    ``lease_record(namespace, name)`` for anything else: nobody can then say who is in
    remediation, so every acquire is refused."""
    _version, annotations = read_lease(lease, namespace, name)
    raw = annotations.get(HOLDERS_ANNOTATION)
    if raw is None:
        return {}
    record = lease_record(namespace, name)
    holders = mapping(load_json(raw, record), record)
    if len(holders) > MAX_HOLDERS:
        raise RecordError(record, "%d holders, more than %d" % (len(holders), MAX_HOLDERS))
    for node, entry in holders.items():
        string(node, record, "key", max_length=MAX_NAME, allow_empty=False)
        mapping(entry, record, node, required=HOLDER_KEYS, allowed=HOLDER_KEYS)
        since = timestamp(entry["since"], record, node + ".since")
        expires = timestamp(entry["expires"], record, node + ".expires")
        if expires < since:
            raise RecordError(record, "expires %r is before its since %r" % (expires, since), node)
        string(entry["by"], record, node + ".by", max_length=MAX_ID, allow_empty=False)
    return holders


def live_holders(holders, now):
    """The holders whose slot has not expired at ``now``."""
    return dict((node, entry) for node, entry in holders.items() if entry["expires"] > now)


def read_annotations(node, node_name):
    """The annotations of a Node as read: a map of strings ({} when it has none)."""
    record = "Node %s" % node_name
    mapping(node, record)
    metadata = mapping(node.get("metadata"), record, "metadata")
    annotations = metadata.get("annotations")
    if annotations is None:
        return {}
    ours = (ATTEMPTS_ANNOTATION, HISTORY_ANNOTATION, STATE_ANNOTATION)
    _annotation_values(annotations, record, dict((key, node_record(node_name, key)) for key in ours))
    return annotations


def _annotation_map(node, node_name):
    """The Node's annotations are a map of strings (their sizes not checked: a step is still
    recorded next to an oversized record); RecordError naming ``Node <n>`` otherwise (then the
    Node is not written: gate.node_write cannot merge into it)."""
    record = "Node %s" % node_name
    metadata = mapping(mapping(node, record).get("metadata"), record, "metadata")
    annotations = metadata.get("annotations")
    if annotations is not None:
        mapping(annotations, record, "metadata.annotations")
        for key, value in annotations.items():
            string(value, record, "metadata.annotations[%s]" % key, max_length=float("inf"))


def read_attempts(node, node_name):
    """The epoch seconds of every attempt recorded on the Node (sorted; [] when none is).
    RecordError naming ``node_record(node_name, ATTEMPTS_ANNOTATION)`` for anything but a list
    of plausible times: the attempts are then unknown and the node is refused."""
    raw = read_annotations(node, node_name).get(ATTEMPTS_ANNOTATION)
    if raw is None:
        return []
    record = node_record(node_name, ATTEMPTS_ANNOTATION)
    values = listing(load_json(raw, record), record, max_items=MAX_ATTEMPT_RECORDS)
    return sorted(timestamp(value, record, "[%d]" % index) for index, value in enumerate(values))


def _scalar(value, record, field):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return number(value, record, field)
    if isinstance(value, str):
        return string(value, record, field, max_length=MAX_TEXT)
    raise RecordError(record, "not a scalar: %s" % type(value).__name__, field)


def read_history(node, node_name):
    """The steps recorded on the Node (a list of {step, status, reason, at, by, ...}); [] when
    none is. RecordError naming ``node_record(node_name, HISTORY_ANNOTATION)`` otherwise: a
    history that cannot be read is not replaced (refused, left for the operator)."""
    raw = read_annotations(node, node_name).get(HISTORY_ANNOTATION)
    if raw is None:
        return []
    record = node_record(node_name, HISTORY_ANNOTATION)
    steps = listing(load_json(raw, record), record, max_items=MAX_HISTORY_RECORDS)
    for index, entry in enumerate(steps):
        field = "[%d]" % index
        mapping(entry, record, field, required=HISTORY_KEYS)
        for key, value in entry.items():
            if key in HISTORY_KEYS:
                string(value, record, "%s.%s" % (field, key), max_length=MAX_TEXT, allow_empty=key == "reason")
            else:
                _scalar(value, record, "%s.%s" % (field, key))
        try:
            if not _AT.match(entry["at"]):
                raise ValueError("not YYYY-MM-DDTHH:MM:SSZ")
            at = float(calendar.timegm(time.strptime(entry["at"], "%Y-%m-%dT%H:%M:%SZ")))
        except (ValueError, OverflowError) as exc:
            raise RecordError(record, "not a time: %r (%s)" % (entry["at"], exc), field + ".at")
        timestamp(at, record, field + ".at")
    return steps


# -- recording steps on the Node ------------------------------------------------------------------
def _text(value):
    """``value`` as text of at most MAX_REASON characters and MAX_REASON bytes as written (JSON,
    non-ASCII escaped): a step's size on the Node is bounded whatever it is written in."""
    text = "" if value is None else str(value)
    if len(text) <= MAX_REASON // 12 or len(json.dumps(text)) - 2 <= MAX_REASON:
        return text
    kept, size = [], 0
    for char in text:
        size += len(json.dumps(char)) - 2
        if size > MAX_REASON - 3:
            break
        kept.append(char)
    return "".join(kept) + "..."


def _step_annotations(node, node_name, step, status, reason, now, controller, extra=None, problems=None):
    """The annotations that record one step on the Node: the last step and the history. When the
    history cannot be read and ``problems`` is a list, the RecordError is appended to it and the
    history is left as it is (the step itself is still the last step); else it is raised."""
    entry = {"step": _text(step), "status": _text(status), "reason": _text(reason), "at": utc_text(now),
             "by": _text(controller)}
    entry.update(extra or {})
    wanted = {STATE_ANNOTATION: json.dumps(entry, sort_keys=True)}
    try:
        history = read_history(node, node_name)
    except RecordError as exc:
        if problems is None:
            raise
        problems.append(exc)
        return wanted
    steps = (history + [entry])[-HISTORY:]
    text = json.dumps(steps, sort_keys=True)
    while len(steps) > 1 and len(text) > HISTORY_BYTES:  # the oldest go first: the Node's annotations stay small
        steps = steps[1:]
        text = json.dumps(steps, sort_keys=True)
    wanted[HISTORY_ANNOTATION] = text
    return wanted


def record_step(client, node_name, step, status, reason, now=None, controller="gpufleet", extra=None,
                annotations=None, retries=5, deadline=None):
    """Record one remediation step on the Node (guarded annotate write); ``annotations`` are set in
    the same write. Returns guarded_write's outcome, with ``history_error`` (the RecordError) when
    the history could not be read: the step was then written as the last step only, the damaged
    history left as it is. KubeError/ConflictError as raised; BreakerError for a node name that is
    not one (``name_problem``), an empty step, status or controller, or a clock that does not read
    a plausible time (nothing written, no request sent); RecordError when the Node's annotations
    are not a map of strings (nothing written)."""
    check_name(node_name)
    for option, value in (("step", step), ("status", status), ("controller", controller)):
        if not isinstance(value, str) or not value:
            raise BreakerError("option %s must not be empty (the history's reader refuses an empty one), got %r"
                               % (option, value))
    now = time.time() if now is None else now
    problem = clock_problem(now)
    if problem:
        raise BreakerError(problem)
    problems = []

    def compute(node):
        del problems[:]
        _annotation_map(node, node_name)  # not a map of strings: RecordError, nothing written over it
        wanted = _step_annotations(node, node_name, step, status, reason, now, controller, extra, problems)
        wanted.update(annotations or {})
        return node_write(node, "annotate", annotations=wanted)

    outcome = guarded_write(client, node_name, compute, retries=retries, deadline=deadline)
    if problems:
        outcome["history_error"] = problems[-1]
    return outcome


class _NotRecorded(Exception):
    """The attempt was not recorded: ``reason`` says why (the guarded write is given up)."""

    def __init__(self, reason, **extra):
        Exception.__init__(self, reason)
        self.reason = reason
        self.extra = extra


class _NotShown(Exception):
    """The attempt was written, but the Node as answered and read again does not show it."""


class Breaker(object):
    """The breaker of one group: ``acquire(node)`` / ``release(node)`` through ``client``
    (kube_node.KubeClient or anything with its ``request``, ``get_node``, ``patch_node``)."""

    def __init__(self, client, group, max_parallel=POLICY_DEFAULTS["max_parallel"], group_size=None,
                 max_attempts=POLICY_DEFAULTS["max_attempts"], window=POLICY_DEFAULTS["window_hours"] * 3600.0,
                 namespace=POLICY_DEFAULTS["lease_namespace"], ttl=float(POLICY_DEFAULTS["lease_ttl_seconds"]),
                 controller="gpufleet", retries=DEFAULT_RETRIES, clock=None):
        self.client = client
        self.group = group
        self.name = lease_name(group)
        self.limit = parallel_limit(max_parallel, group_size)
        check_attempts(max_attempts)
        window = check_seconds("window", window)
        ttl = check_seconds("ttl", ttl)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise BreakerError("option retries must be an integer >= 1, got %r" % (retries,))
        check_namespace(namespace)
        if not isinstance(controller, str) or not controller or len(controller) > MAX_ID:
            raise BreakerError("option controller must name who acts (1 to %d characters), got %r"
                               % (MAX_ID, controller))
        self.max_attempts = max_attempts
        self.window = float(window)
        self.namespace = namespace
        self.ttl = float(ttl)
        self.controller = controller
        self.retries = retries
        self.clock = clock or time.time

    # -- the lease ------------------------------------------------------------------------------------
    @property
    def path(self):
        return "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % quote(self.namespace, safe="")

    @property
    def record(self):
        """The name of the holder set as a record read back (in refusals)."""
        return lease_record(self.namespace, self.name)

    def read_lease(self):
        try:
            return self.client.request("GET", "%s/%s" % (self.path, self.name))
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    def holders(self, now):
        """The unexpired holders as read now (RecordError: unreadable; KubeError as raised)."""
        return live_holders(read_holders(self.read_lease(), self.namespace, self.name), now)

    def _lease_body(self, lease, version, holders, now):
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "gpufleet"},
                             "annotations": {HOLDERS_ANNOTATION: json.dumps(holders, sort_keys=True)}},
                "spec": {"holderIdentity": self.controller, "leaseDurationSeconds": max(1, int(self.ttl)),
                         "renewTime": _micro_time(now)}}
        if lease:
            metadata = lease.get("metadata") or {}
            body["metadata"]["resourceVersion"] = version
            others = dict(metadata.get("annotations") or {})
            others.update(body["metadata"]["annotations"])
            body["metadata"]["annotations"] = others
            labels = metadata.get("labels")
            body["metadata"]["labels"] = dict(labels if isinstance(labels, dict) else {}, **body["metadata"]["labels"])
            spec = lease.get("spec")
            acquired = spec.get("acquireTime") if isinstance(spec, dict) else None
            body["spec"]["acquireTime"] = acquired if isinstance(acquired, str) else _micro_time(now)
        else:
            body["spec"]["acquireTime"] = _micro_time(now)
        return body

    def _write(self, lease, version, holders, now, body=None):
        """PUT (or POST when there is no lease) the holder set; False on a conflict."""
        body = body or self._lease_body(lease, version, holders, now)
        try:
            if lease is None:
                self.client.request("POST", self.path, body, "application/json")
            else:
                self.client.request("PUT", "%s/%s" % (self.path, self.name), body, "application/json")
        except ApiStatusError as exc:
            if exc.code == 409:  # AlreadyExists (a racing create) or Conflict (a stale resourceVersion)
                return False
            raise
        return True

    def _update(self, change, now):
        """Read the lease, ``change(live holders, now)`` -> (new holders or None for no write,
        outcome), write with the resourceVersion read; on 409 read and decide again. Expired
        holders are dropped by the write. RecordError (unreadable) and KubeError as raised."""
        for attempt in range(1, self.retries + 1):
            lease = self.read_lease()
            version, _annotations = read_lease(lease, self.namespace, self.name)
            holders = live_holders(read_holders(lease, self.namespace, self.name), now)
            wanted, outcome = change(dict(holders), now)
            if wanted is None:
                outcome["attempts"] = attempt
                outcome.setdefault("holders", sorted(holders))
                return outcome
            body = self._lease_body(lease, version, wanted, now)
            size = annotation_bytes(body["metadata"]["annotations"])
            if len(wanted) > len(holders) and (size > MAX_BYTES or len(wanted) > MAX_HOLDERS):
                # never written: the API server refuses (422) annotations over 256 KiB, and a holder
                # set past its reader's bounds would refuse every acquire of the group
                return {"admitted": False, "open": True, "attempts": attempt, "holders": sorted(holders),
                        "reason": "breaker open: the holder set of %s would hold %d node(s), %d bytes of "
                                  "annotations (at most %d holders and %d bytes): not written, waits, isolated"
                                  % (self.record, len(wanted), size, MAX_HOLDERS, MAX_BYTES)}
            if self._write(lease, version, wanted, now, body):
                outcome["attempts"] = attempt
                outcome["holders"] = sorted(wanted)
                return outcome
        raise ConflictError("lease %s/%s changed under every one of %d attempts (409 Conflict)"
                            % (self.namespace, self.name, self.retries))

    # -- acquire / release ----------------------------------------------------------------------------
    def _refused(self, node, reason, now, **extra):
        """A refusal: recorded on the Node when possible (the node stays isolated, the reason says why)."""
        result = {"admitted": False, "node": node, "group": self.group, "reason": reason, "recorded": False}
        result.update(extra)
        try:
            outcome = record_step(self.client, node, "breaker", "refused", reason, now=now, controller=self.controller)
            result["recorded"] = True
            if outcome.get("history_error") is not None:
                result["record_error"] = "%s (the refusal is the last step, gpufleet.io/remediation; the history is " \
                                         "left as it is)" % outcome["history_error"]
        except (KubeError, BreakerError, RecordError) as exc:
            result["record_error"] = str(exc)
        return result

    def _unreadable(self, node, exc, now):
        return self._refused(node, "breaker: %s: refused (fail closed)" % exc, now, unreadable=exc.record)

    def acquire(self, node):
        """Admit ``node`` to remediation, or refuse with the reason. Never raises for API trouble or
        an unreadable record: either refuses (fail closed). The attempt is recorded on the Node
        before ``admitted`` is returned, and seen in the Node as answered (or read again). A
        ``node`` that is not a node name raises BreakerError before any request."""
        check_name(node)
        now = self.clock()
        problem = clock_problem(now, self.ttl)
        if problem:
            return self._refused(node, problem, now)
        try:
            node_obj = self.client.get_node(node)
            attempts = read_attempts(node_obj, node)
            read_history(node_obj, node)
        except KubeError as exc:
            return self._refused(node, "breaker: attempts of node %s could not be read: %s" % (node, exc), now)
        except RecordError as exc:
            return self._unreadable(node, exc, now)
        recent = [a for a in attempts if a > now - self.window]
        if len(recent) >= self.max_attempts:
            return self._exhausted(node, len(recent), now)

        def admit(holders, at):
            entry = holders.get(node)
            if entry is not None and entry["by"] != self.controller:
                return None, {"admitted": False, "held_by": entry["by"],
                              "reason": "breaker: node %s is in remediation by %s (since %s, until %s); %s does not "
                                        "take it over" % (node, entry["by"], utc_text(entry["since"]),
                                                          utc_text(entry["expires"]), self.controller)}
            if entry is not None:  # ours: a failed remediation kept its slot; again is one more attempt
                holders[node] = dict(entry, expires=max(entry["expires"], at + self.ttl))
                return holders, {"admitted": True, "already": True}
            if len(holders) >= self.limit:
                return None, {"admitted": False, "open": True,
                              "reason": "breaker open: %d of %d node(s) of group %s in remediation (%s); %s waits, isolated"
                                        % (len(holders), self.limit, self.group, ", ".join(sorted(holders)) or "limit 0",
                                           node)}
            holders[node] = {"since": at, "expires": at + self.ttl, "by": self.controller}
            return holders, {"admitted": True, "already": False}

        try:
            outcome = self._update(admit, now)
        except RecordError as exc:
            return self._unreadable(node, exc, now)
        except KubeError as exc:
            return self._refused(node, "breaker: lease %s/%s not acquired: %s" % (self.namespace, self.name, exc), now)
        if not outcome["admitted"]:
            extra = dict((key, outcome[key]) for key in ("holders", "open", "held_by") if key in outcome)
            return self._refused(node, outcome["reason"], now, lease_attempts=outcome["attempts"], **extra)
        # the attempt is counted on the Node before anything is done to it
        try:
            counted = self._count_attempt(node, now, len(outcome["holders"]))
        except (KubeError, RecordError, _NotRecorded, _NotShown) as exc:
            return self._not_counted(node, exc, outcome["already"], now)
        return {"admitted": True, "node": node, "group": self.group, "limit": self.limit,
                "holders": outcome["holders"], "attempts": counted, "already": outcome["already"],
                "lease_attempts": outcome["attempts"], "reason": "admitted", "recorded": True}

    def _exhausted(self, node, count, now):
        return self._refused(node, "breaker: %d remediation attempt(s) of %s in the last %g h (max_attempts %d): "
                             "the node stays isolated until the window passes or an operator releases it"
                             % (count, node, self.window / 3600.0, self.max_attempts), now, attempts=count)

    def _count_attempt(self, node, now, held):
        """Record the attempt (and the step ``admitted``) on the Node, from the Node as read at the
        write (guarded by its resourceVersion): the count is decided again there. Returns the
        attempts in the window, this one included."""
        counted = []

        def compute(node_obj):
            recent = [a for a in read_attempts(node_obj, node) if a > now - self.window]
            if len(recent) >= self.max_attempts:
                raise _NotRecorded("exhausted", attempts=len(recent))
            counted[:] = [len(recent) + 1]
            wanted = _step_annotations(node_obj, node, "breaker", "admitted",
                                       "admitted to remediation in group %s (%d of %d)" % (self.group, held, self.limit),
                                       now, self.controller)
            wanted[ATTEMPTS_ANNOTATION] = json.dumps(sorted(recent + [now]))
            return node_write(node_obj, "annotate", annotations=wanted)

        written = guarded_write(self.client, node, compute)
        if not self._shows_attempt(written.get("node"), node, now):
            # the answer does not show it (a webhook or policy engine that strips annotations, a
            # proxy): read again; not there either -> not counted, not admitted
            if not self._shows_attempt(self.client.get_node(node), node, now):
                raise _NotShown("the attempt at %s is not in the Node's %s as answered and read again"
                                % (utc_text(now), ATTEMPTS_ANNOTATION))
        return counted[0]

    @staticmethod
    def _shows_attempt(node_obj, node, now):
        """Whether ``node_obj`` (a Node as answered or read) records the attempt at ``now``
        (RecordError: its attempts are unreadable)."""
        if not isinstance(node_obj, dict):
            return False
        return now in read_attempts(node_obj, node)

    def _counted_at(self, node, now):
        """Whether the Node as read now records an attempt at ``now`` (not when it cannot be read)."""
        try:
            return self._shows_attempt(self.client.get_node(node), node, now)
        except (KubeError, RecordError):
            return False

    def _not_counted(self, node, exc, already, now):
        """The attempt could not be recorded: refuse. A slot taken now is given back (only if still
        ours, and no admission of this controller was counted on the Node at this time meanwhile); a
        slot held before (a failed remediation) is kept."""
        if already:
            slot = "slot kept (held before)"
        elif self._counted_at(node, now):
            # an acquire of this same controller landed between our Lease write and our Node write: it
            # found the slot ours and was admitted and counted at this time; the slot is its admission's
            # (giving it back would leave an admission in force out of the holder set)
            slot = "slot kept (an admission of %s at %s is counted on the node)" % (self.controller, utc_text(now))
        else:
            released = self.release(node, record=False, only_mine=True)
            slot = "slot released" if released.get("released") else "slot left to expire"
        if isinstance(exc, _NotRecorded):
            refused = self._exhausted(node, exc.extra["attempts"], now)
            refused["reason"] += "; %s" % slot
            return refused
        if isinstance(exc, RecordError):
            return self._refused(node, "breaker: %s: refused (fail closed); %s" % (exc, slot), now, unreadable=exc.record)
        if isinstance(exc, _NotShown):
            return self._refused(node, "breaker: %s on node %s: not counted, refused (fail closed); %s"
                                 % (exc, node, slot), now, not_shown=True)
        return self._refused(node, "breaker: the attempt could not be recorded on node %s (%s); %s" % (node, exc, slot),
                             now)

    def release(self, node, record=True, reason="remediation finished", only_mine=False):
        """Take ``node`` out of the holder set (whoever holds it: the playbook's release and an
        operator's; ``only_mine``: only when this controller holds it). {released, reason}; API
        trouble or an unreadable holder set is reported, not raised (the slot then expires after
        ttl; a node name that is not one raises BreakerError before any request)."""
        def drop(holders, _at):
            entry = holders.get(node)
            if entry is None:
                return None, {"released": True, "held": False}
            if only_mine and entry["by"] != self.controller:
                return None, {"released": True, "held": False, "held_by": entry["by"]}
            del holders[node]
            return holders, {"released": True, "held": True}

        check_name(node)
        now = self.clock()
        problem = clock_problem(now)
        if problem:
            return {"released": False, "node": node, "reason": "breaker slot of %s not released (%s)" % (node, problem)}
        try:
            outcome = self._update(drop, now)
        except RecordError as exc:
            # nothing expires while nobody can read the holder set: every acquire of the group is refused
            return {"released": False, "node": node, "unreadable": exc.record,
                    "reason": "breaker slot of %s not released (%s): the record is left as it is; every acquire of "
                              "group %s is refused until an operator repairs or removes it (docs/remediation.md)"
                              % (node, exc, self.group)}
        except KubeError as exc:
            return {"released": False, "node": node, "reason": "breaker slot of %s not released (%s): if held, it "
                    "expires after %g s" % (node, exc, self.ttl)}
        outcome.update(node=node, reason=reason)
        if record:
            try:
                written = record_step(self.client, node, "breaker", "released", reason, now=now,
                                      controller=self.controller)
                if written.get("history_error") is not None:
                    outcome["record_error"] = str(written["history_error"])
            except (KubeError, BreakerError, RecordError) as exc:
                outcome["record_error"] = str(exc)
        return outcome
