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

Past either, the node is not admitted: it stays isolated and the reason says why. An API error, an
unreadable holder set or attempt record, or a conflict on every retry also refuse admission (fail
closed). Every step is recorded on the Node (``gpufleet.io/remediation``: the last step;
``gpufleet.io/remediation-history``: the last ``HISTORY`` steps) through the gate's guarded
annotate write (``gate.node_write``, ``kube_node.guarded_write``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.clock import utc_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.gate import node_write
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube_node import (
    ApiStatusError,
    ConflictError,
    KubeError,
    guarded_write,
)

HOLDERS_ANNOTATION = "gpufleet.io/remediation-holders"
ATTEMPTS_ANNOTATION = "gpufleet.io/remediation-attempts"
STATE_ANNOTATION = "gpufleet.io/remediation"
HISTORY_ANNOTATION = "gpufleet.io/remediation-history"
LEASE_PREFIX = "gpufleet-remediation-"
HISTORY = 20
DEFAULT_RETRIES = 10
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


class BreakerError(ValueError):
    """Bad input (names the option) or a record that cannot be read (fail closed)."""


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
    if text.strip().isdigit():
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


def lease_holders(lease, now):
    """{node: entry} of the unexpired holders of ``lease`` (None: no lease). BreakerError when the
    record cannot be read (then nobody can say who is in remediation: refuse)."""
    if not lease:
        return {}
    name = (lease.get("metadata") or {}).get("name")
    raw = ((lease.get("metadata") or {}).get("annotations") or {}).get(HOLDERS_ANNOTATION)
    if raw in (None, ""):
        return {}
    try:
        holders = json.loads(raw)
    except ValueError:
        raise BreakerError("lease %s: annotation %s is not JSON" % (name, HOLDERS_ANNOTATION))
    if not isinstance(holders, dict) or not all(isinstance(v, dict) for v in holders.values()):
        raise BreakerError("lease %s: annotation %s is not a map of node -> entry" % (name, HOLDERS_ANNOTATION))
    live = {}
    for node, entry in holders.items():
        expires = entry.get("expires")
        if isinstance(expires, bool) or not isinstance(expires, (int, float)):
            raise BreakerError("lease %s: holder %s has no expiry" % (name, node))
        if expires > now:
            live[node] = entry
    return live


def attempts_in_window(node, now, window):
    """Epoch seconds of the node's remediation attempts within ``window`` seconds before ``now``."""
    raw = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(ATTEMPTS_ANNOTATION)
    if raw in (None, ""):
        return []
    try:
        attempts = json.loads(raw)
    except ValueError:
        raise BreakerError("annotation %s is not JSON" % ATTEMPTS_ANNOTATION)
    if not isinstance(attempts, list) or not all(
            isinstance(a, (int, float)) and not isinstance(a, bool) for a in attempts):
        raise BreakerError("annotation %s is not a list of epoch seconds" % ATTEMPTS_ANNOTATION)
    # an attempt dated in the future (a clock set back) still counts: never forget an attempt
    return sorted(a for a in attempts if a > now - window)


def _step_annotations(node, step, status, reason, now, controller, extra=None):
    """The annotations that record one step on the Node: the last step and the history."""
    annotations = (((node or {}).get("metadata") or {}).get("annotations") or {})
    entry = {"step": step, "status": status, "reason": reason, "at": utc_text(now), "by": controller}
    entry.update(extra or {})
    try:
        history = json.loads(annotations.get(HISTORY_ANNOTATION) or "[]")
        if not isinstance(history, list):
            history = []
    except ValueError:
        history = []  # an unreadable history is replaced, the new step is never lost
    history = (history + [entry])[-HISTORY:]
    return {STATE_ANNOTATION: json.dumps(entry, sort_keys=True),
            HISTORY_ANNOTATION: json.dumps(history, sort_keys=True)}


def record_step(client, node_name, step, status, reason, now=None, controller="gpufleet", extra=None,
                annotations=None, retries=5, deadline=None):
    """Record one remediation step on the Node (guarded annotate write); ``annotations`` are set in
    the same write. Returns guarded_write's outcome; KubeError/ConflictError as raised."""
    now = time.time() if now is None else now

    def compute(node):
        wanted = _step_annotations(node, step, status, reason, now, controller, extra)
        wanted.update(annotations or {})
        return node_write(node, "annotate", annotations=wanted)

    return guarded_write(client, node_name, compute, retries=retries, deadline=deadline)


class Breaker(object):
    """The breaker of one group: ``acquire(node)`` / ``release(node)`` through ``client``
    (kube_node.KubeClient or anything with its ``request``, ``get_node``, ``patch_node``)."""

    def __init__(self, client, group, max_parallel=1, group_size=None, max_attempts=3, window=86400.0,
                 namespace="kube-system", ttl=7200.0, controller="gpufleet", retries=DEFAULT_RETRIES, clock=None):
        self.client = client
        self.group = group
        self.name = lease_name(group)
        self.limit = parallel_limit(max_parallel, group_size)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise BreakerError("option max_attempts must be an integer >= 1, got %r" % (max_attempts,))
        for option, value in (("window", window), ("ttl", ttl)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BreakerError("option %s must be a number of seconds > 0, got %r" % (option, value))
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise BreakerError("option retries must be an integer >= 1, got %r" % (retries,))
        if not namespace:
            raise BreakerError("option namespace must name the lease's namespace")
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
        return "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.namespace

    def read_lease(self):
        try:
            return self.client.request("GET", "%s/%s" % (self.path, self.name))
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    def _lease_body(self, lease, holders, now):
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "gpufleet"},
                             "annotations": {HOLDERS_ANNOTATION: json.dumps(holders, sort_keys=True)}},
                "spec": {"holderIdentity": self.controller, "leaseDurationSeconds": max(1, int(self.ttl)),
                         "renewTime": _micro_time(now)}}
        if lease:
            metadata = lease.get("metadata") or {}
            body["metadata"]["resourceVersion"] = metadata.get("resourceVersion")
            others = dict(metadata.get("annotations") or {})
            others.update(body["metadata"]["annotations"])
            body["metadata"]["annotations"] = others
            body["metadata"]["labels"] = dict(metadata.get("labels") or {}, **body["metadata"]["labels"])
            body["spec"]["acquireTime"] = (lease.get("spec") or {}).get("acquireTime") or _micro_time(now)
        else:
            body["spec"]["acquireTime"] = _micro_time(now)
        return body

    def _write(self, lease, holders, now):
        """PUT (or POST when there is no lease) the holder set; False on a conflict."""
        body = self._lease_body(lease, holders, now)
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

    def _update(self, change):
        """Read the lease, ``change(holders, now)`` -> (new holders or None for no write, outcome),
        write with the resourceVersion read; on 409 read and decide again."""
        for attempt in range(1, self.retries + 1):
            now = self.clock()
            lease = self.read_lease()
            holders = lease_holders(lease, now)
            wanted, outcome = change(dict(holders), now)
            if wanted is None:
                outcome["attempts"] = attempt
                return outcome
            if self._write(lease, wanted, now):
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
            record_step(self.client, node, "breaker", "refused", reason, now=now, controller=self.controller)
            result["recorded"] = True
        except KubeError as exc:
            result["record_error"] = str(exc)
        return result

    def acquire(self, node):
        """Admit ``node`` to remediation, or refuse with the reason. Never raises for API trouble:
        an error refuses (fail closed)."""
        now = self.clock()
        try:
            node_obj = self.client.get_node(node)
            attempts = attempts_in_window(node_obj, now, self.window)
        except (KubeError, BreakerError) as exc:
            return self._refused(node, "breaker: attempts of node %s could not be read: %s" % (node, exc), now)
        if len(attempts) >= self.max_attempts:
            return self._refused(node, "breaker: %d remediation attempt(s) of %s in the last %g h (max_attempts %d): "
                                 "the node stays isolated until the window passes or an operator releases it"
                                 % (len(attempts), node, self.window / 3600.0, self.max_attempts), now,
                                 attempts=len(attempts))

        def admit(holders, at):
            if node in holders:
                holders[node] = dict(holders[node], expires=at + self.ttl)
                return holders, {"admitted": True, "already": True}
            if len(holders) >= self.limit:
                return None, {"admitted": False, "open": True, "holders": sorted(holders),
                              "reason": "breaker open: %d of %d node(s) of group %s in remediation (%s); %s waits, isolated"
                                        % (len(holders), self.limit, self.group, ", ".join(sorted(holders)) or "limit 0",
                                           node)}
            holders[node] = {"since": at, "expires": at + self.ttl, "by": self.controller}
            return holders, {"admitted": True, "already": False}

        try:
            outcome = self._update(admit)
        except (KubeError, BreakerError) as exc:
            return self._refused(node, "breaker: lease %s/%s not acquired: %s" % (self.namespace, self.name, exc), now)
        if not outcome["admitted"]:
            return self._refused(node, outcome["reason"], now, holders=outcome["holders"], open=True,
                                 lease_attempts=outcome["attempts"])
        # the attempt is counted on the Node before anything is done to it
        try:
            if not outcome["already"]:
                record_step(self.client, node, "breaker", "admitted",
                            "admitted to remediation in group %s (%d of %d)" % (self.group, len(outcome["holders"]),
                                                                                self.limit),
                            now=now, controller=self.controller,
                            annotations={ATTEMPTS_ANNOTATION: json.dumps(attempts + [now])})
        except KubeError as exc:
            released = self.release(node, record=False)
            reason = "breaker: the attempt could not be recorded on node %s (%s); slot %s" % (
                node, exc, "released" if released.get("released") else "left to expire")
            return self._refused(node, reason, now)
        return {"admitted": True, "node": node, "group": self.group, "limit": self.limit,
                "holders": outcome["holders"], "attempts": len(attempts) + (0 if outcome["already"] else 1),
                "lease_attempts": outcome["attempts"], "reason": "admitted", "recorded": True}

    def release(self, node, record=True, reason="remediation finished"):
        """Take ``node`` out of the holder set. {released, reason}; API trouble is reported, not
        raised (the slot then expires after ttl)."""
        def drop(holders, _at):
            if node not in holders:
                return None, {"released": True, "held": False}
            del holders[node]
            return holders, {"released": True, "held": True}

        now = self.clock()
        try:
            outcome = self._update(drop)
        except (KubeError, BreakerError) as exc:
            return {"released": False, "node": node, "reason": "breaker slot of %s not released (%s): it expires "
                    "after %g s" % (node, exc, self.ttl)}
        outcome.update(node=node, reason=reason)
        if record:
            try:
                record_step(self.client, node, "breaker", "released", reason, now=now, controller=self.controller)
            except KubeError as exc:
                outcome["record_error"] = str(exc)
        return outcome
