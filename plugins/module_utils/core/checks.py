# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The check-result model shared by every validation module (docs/contracts.md, "Result model").

checks:  list of {id, target, status, message, observed?, expected?}
summary: {pass, warn, fail, skip}
healthy: true when no check has status fail

``exit_with_checks`` is the one exit path of every validation module: it adds summary and
healthy, applies ``fail_on`` and makes the whole payload JSON-safe (``json_safe``) so that a
result is deliverable through Ansible whatever bytes or numbers a host produced.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

PASS = "pass"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"
STATUSES = (PASS, WARN, FAIL, SKIP)
FAIL_ON_CHOICES = ("fail", "warn", "never")
_SEVERITY = {SKIP: 0, PASS: 1, WARN: 2, FAIL: 3}

_UNSET = object()

# Severity of a check id: what a failing (or warning) check means for the node, the fleet report's
# ranking (a host is ranked by its worst status, then by the worst severity among those checks;
# eight gpu.fabric lines do not outrank a GPU that fell off the bus). The one table of it;
# docs/contracts.md ("Severity") lists the same (tests/unit/test_fleet_report_history.py keeps them
# equal). An id not listed takes the severity of its longest listed prefix, else medium.
CRITICAL = "critical"
HIGH = "high"
MEDIUM = "medium"
LOW = "low"
SEVERITIES = (CRITICAL, HIGH, MEDIUM, LOW)  # worst first
CHECK_SEVERITY = {
    # the node cannot be trusted at all: nothing known, a GPU gone, or a fault that needs a reset
    "host.unreachable": CRITICAL, "host.validation": CRITICAL, "agent.condition": CRITICAL,
    "gpu.nvml": CRITICAL, "gpu.count": CRITICAL,
    "gpu.lost": CRITICAL, "gpu.recovery_action": CRITICAL, "gpu.xid": CRITICAL,
    "gpu.ecc.volatile_uncorrectable": CRITICAL, "gpu.row_remap": CRITICAL, "gpu.retired_pages": CRITICAL,
    # the node runs, but jobs on it fail or crawl
    "gpu.nvlink": HIGH, "gpu.fabric": HIGH, "agent.fabricmanager": HIGH, "gpu.temperature": HIGH, "gpu.driver_version": HIGH,
    "rdma.modules": HIGH, "rdma.driver": HIGH, "rdma.devices": HIGH, "rdma.port.state": HIGH,
    "rdma.port.phys_state": HIGH, "rdma.uverbs": HIGH, "rdma.fabric.host": HIGH,
    "k8s.nccl.busbw": HIGH, "k8s.nccl.wrong": HIGH,
    # degraded or misconfigured
    "rdma.port.rate": MEDIUM, "rdma.roce_gid": MEDIUM, "rdma.peermem": MEDIUM, "rdma.ofed_version": MEDIUM,
    "rdma.bandwidth": MEDIUM, "rdma.fabric.rail": MEDIUM, "rdma.fabric.link": MEDIUM,
    "gpu.persistence": MEDIUM, "tuning.hugepages": MEDIUM, "tuning.tuned_profile": MEDIUM,
    "tuning.kubelet_policy": MEDIUM, "tuning.irq_affinity": MEDIUM,
    # worth a look
    "gpu.ecc.mode": LOW, "gpu.clocks_event": LOW, "gpu.pcie": LOW, "gpu.mig": LOW, "rdma.counters": LOW,
}
DEFAULT_SEVERITY = MEDIUM


def severity(check_id):
    """Severity of a check id (``CHECK_SEVERITY``; longest listed prefix; else ``DEFAULT_SEVERITY``)."""
    parts = str(check_id).split(".")
    while parts:
        found = CHECK_SEVERITY.get(".".join(parts))
        if found is not None:
            return found
        parts.pop()
    return DEFAULT_SEVERITY


def worst(statuses):
    """Worst status of an iterable (fail > warn > pass > skip); skip when empty."""
    result = SKIP
    for status in statuses:
        if _SEVERITY[status] > _SEVERITY[result]:
            result = status
    return result


class CheckResults(object):
    """Ordered collection of check results."""

    def __init__(self):
        self._checks = []

    def add(self, check_id, target, status, message, observed=_UNSET, expected=_UNSET, error=_UNSET):
        if status not in STATUSES:
            raise ValueError("unknown check status %r for %s" % (status, check_id))
        check = {"id": check_id, "target": target, "status": status, "message": message}
        if observed is not _UNSET:
            check["observed"] = observed
        if expected is not _UNSET:
            check["expected"] = expected
        if error is not _UNSET:
            check["error"] = error  # a reading that could not be taken: the call or file and the error
        self._checks.append(check)
        return check

    def passed(self, check_id, target, message, **kwargs):
        return self.add(check_id, target, PASS, message, **kwargs)

    def warn(self, check_id, target, message, **kwargs):
        return self.add(check_id, target, WARN, message, **kwargs)

    def fail(self, check_id, target, message, **kwargs):
        return self.add(check_id, target, FAIL, message, **kwargs)

    def skip(self, check_id, target, message, **kwargs):
        return self.add(check_id, target, SKIP, message, **kwargs)

    def extend(self, other):
        checks = other.as_list() if isinstance(other, CheckResults) else other
        for check in checks:
            self._checks.append(dict(check))

    def as_list(self):
        return list(self._checks)

    def __len__(self):
        return len(self._checks)

    def __iter__(self):
        return iter(self._checks)

    def by_id(self, check_id):
        return [c for c in self._checks if c["id"] == check_id]

    def summary(self):
        return summarize(self._checks)

    @property
    def healthy(self):
        return is_healthy(self._checks)

    def result(self):
        """The three return keys of the result model (docs/contracts.md)."""
        return {"checks": self.as_list(), "summary": self.summary(), "healthy": self.healthy}


def summarize(checks):
    counts = dict((status, 0) for status in STATUSES)
    for check in checks:
        counts[check["status"]] += 1
    return counts


def is_healthy(checks):
    return not any(check["status"] == FAIL for check in checks)


# Which statuses hold a node back under each ``fail_on``: the one table (the gate, the agent's
# hysteresis, Slurm, metrics, reports and the modules' exit all ask ``failing_statuses``).
FAILING_STATUSES = {"fail": (FAIL,), "warn": (FAIL, WARN), "never": ()}


def failing_statuses(fail_on):
    """The statuses that fail under ``fail_on``: (fail,), (fail, warn) or () for never.
    ValueError naming fail_on for any other value."""
    try:
        return FAILING_STATUSES[fail_on]
    except (KeyError, TypeError):
        raise ValueError("fail_on must be one of %s, got %r" % (", ".join(FAIL_ON_CHOICES), fail_on))


def should_fail(checks, fail_on):
    """Whether the module must fail for ``fail_on`` (fail | warn | never)."""
    if fail_on == "never":
        return False
    bad = failing_statuses(fail_on)
    return any(check["status"] in bad for check in checks)


def offending(checks, fail_on):
    """The checks at or above ``fail_on`` (fail, or fail and warn), in their order."""
    bad = failing_statuses(fail_on)
    return [c for c in checks if c["status"] in bad]


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_targets(targets):
    """Targets as one short text: ``gpu0`` .. ``gpu7`` -> ``gpu0\u20137``; ``gpu0, gpu1, gpu5`` ->
    ``gpu0\u20131,5``; names without a trailing number as they are, comma-separated (first-seen
    order of the prefixes)."""
    prefixes, order = {}, []
    for target in targets:
        match = _NUMBERED.match(target)
        prefix, number = (match.group(1), int(match.group(2))) if match else (target, None)
        if prefix not in prefixes:
            order.append(prefix)
            prefixes[prefix] = []
        if number is not None and number not in prefixes[prefix]:
            prefixes[prefix].append(number)
    parts = []
    for prefix in order:
        numbers = sorted(prefixes[prefix])
        if not numbers:
            parts.append(prefix)
            continue
        runs, start, end = [], numbers[0], numbers[0]
        for number in numbers[1:] + [None]:
            if number is not None and number == end + 1:
                end = number
                continue
            runs.append("%d" % start if start == end else "%d\u2013%d" % (start, end))
            if number is not None:
                start = end = number
        parts.append(prefix + ",".join(runs))
    return ", ".join(parts)


def group_checks(checks):
    """Identical lines as one: checks with the same id, status and message (the target written as
    ``{target}`` when the message names it), in first-seen order. Each group: ``id``, ``status``,
    ``message`` (the first check's), ``targets``, ``target`` (``compress_targets``) and ``checks``.
    Eight ``gpu.fabric`` failures with one message are one line ``gpu.fabric[gpu0\u20137]``."""
    groups, index = [], {}
    for check in checks:
        target = str(check.get("target", ""))
        message = str(check.get("message", ""))
        key = (check["id"], check["status"], message.replace(target, "{target}") if target else message)
        if key not in index:
            index[key] = {"id": check["id"], "status": check["status"], "message": message, "targets": [],
                          "checks": []}
            groups.append(index[key])
        index[key]["targets"].append(target)
        index[key]["checks"].append(check)
    for group in groups:
        group["target"] = compress_targets(group["targets"])
    return groups


def failure_lines(checks, fail_on, limit=10, width=200):
    """A few lines for a console: a header counting the checks at or above ``fail_on``, then one
    line per group of identical checks (``group_checks``), at most ``limit``, each at most
    ``width`` characters."""
    bad = offending(checks, fail_on)
    groups = group_checks(bad)
    lines = ["%d check(s) at or above fail_on=%s:" % (len(bad), fail_on)]
    for group in groups[:limit]:
        line = "%s[%s]: %s" % (group["id"], group["target"], " ".join(group["message"].split()))
        lines.append(line if len(line) <= width else line[:width - 3] + "...")
    if len(groups) > limit:
        lines.append("... and %d more" % sum(len(g["checks"]) for g in groups[limit:]))
    return lines


def failure_message(checks, fail_on):
    """Short human message listing the checks that made the module fail."""
    bad = offending(checks, fail_on)
    parts = ["%s[%s]: %s" % (c["id"], c["target"], c["message"]) for c in bad[:10]]
    more = len(bad) - len(parts)
    text = "%d check(s) at or above fail_on=%s: %s" % (len(bad), fail_on, "; ".join(parts))
    if more > 0:
        text += "; and %d more" % more
    return text


# Integers JSON consumers hold exactly (int64); larger ones are returned as decimal strings.
INT_LIMIT = 2 ** 63


def safe_text(value):
    """str that encodes to UTF-8, the one spelling of undecodable text in every result: bytes,
    and the surrogate-escaped bytes of file names (``os.listdir``, ``os.readlink``,
    ``os.fsdecode``), become ``\\xNN`` escapes of the original bytes; other lone surrogates
    ``\\udNNN``; any other str is returned unchanged."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _big_int_text(value):
    """Decimal text of a big int; hexadecimal beyond Python's int-to-str digit limit (4300)."""
    try:
        return str(value)
    except ValueError:
        return hex(value)


def json_safe(value):
    """A copy of ``value`` that strict JSON can carry: str keys and texts that encode to UTF-8,
    ints within +-2**63 (larger ones as decimal strings, hexadecimal past 4300 digits), no NaN or infinity (returned as the
    strings ``nan``, ``inf``, ``-inf``), tuples and sets as lists, anything else as its str.

    The exact types a result is made of (str, dict, list, int, float) are taken first, by ``type``;
    every other value (None, bool, bytes, subclasses, tuples, sets, objects) by the rule below, as
    before: the same copy, made in about half the time (every module's exit walks its whole result)."""
    kind = type(value)
    if kind is str:
        if value.isascii():  # always encodes to UTF-8; no copy made to find out
            return value
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return safe_text(value)
    if kind is dict:
        return {_safe_key(k): json_safe(v) for k, v in value.items()}
    if value is None or kind is bool:
        return value
    if kind is list:
        return [json_safe(item) for item in value]
    if kind is int:
        return value if -INT_LIMIT <= value < INT_LIMIT else _big_int_text(value)
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    return _json_safe_other(value)


def _safe_key(key):
    """A dict key as json_safe writes it."""
    # the exact type on purpose: a str subclass (an Enum's value, a tagged string) takes the general rule
    if type(key) is str:  # pylint: disable=unidiomatic-typecheck
        if key.isascii():
            return key
        try:
            key.encode("utf-8")
            return key
        except UnicodeEncodeError:
            return safe_text(key)
    return safe_text(key) if isinstance(key, (str, bytes)) else safe_text(str(json_safe(key)))


def _json_safe_other(value):
    """json_safe of any value (the rule in full)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -INT_LIMIT <= value < INT_LIMIT else _big_int_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (str, bytes)):
        return safe_text(value)
    if isinstance(value, dict):
        return dict((safe_text(k) if isinstance(k, (str, bytes)) else safe_text(str(json_safe(k))),
                     json_safe(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return [json_safe(item) for item in sorted(value, key=repr)]
    return safe_text(str(value))


def exit_with_checks(module, results, fail_on, checks_key="checks", **extra):
    """exit_json / fail_json for a validation module; the full result is returned either way.

    ``extra`` holds the module's other return keys; its ``msg`` (if any) is kept on success and
    replaced by the list of offending checks when ``fail_on`` makes the module fail. The checks are
    returned under ``checks_key``; None returns them only through ``extra`` (record_checks with
    ``hosts``: ``host_checks``), summary, healthy and fail_on still judging all of them."""
    checks = results.as_list() if isinstance(results, CheckResults) else list(results)
    payload = dict(extra)
    payload.update({"summary": summarize(checks), "healthy": is_healthy(checks)})
    if checks_key:
        payload[checks_key] = checks
    payload.setdefault("changed", False)
    if should_fail(checks, fail_on):
        payload["msg"] = failure_message(checks, fail_on)
        module.fail_json(**json_safe(payload))
    module.exit_json(**json_safe(payload))
