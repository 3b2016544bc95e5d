# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Admission: a GPU node enters service only after a burn-in (docs/node-lifecycle.md, "Admission").

The admission record (Node annotation ``gpufleet.io/admission``; on a host without the API the node's
``/var/lib/gpufleet/admission.json``) says when the node was burnt in, at which level, with which
result, DCGM version and driver. ``read_record`` is its one reader (strict, on core/records.py):
unreadable means not admitted, so the node is burnt in again (never "admitted"). ``decide`` says
whether this run burns the node in: a new node (no record), a failed or unreadable record, a node
repaired (a ``reset``/``reboot`` step done in its remediation history, read by the breaker's one
reader) since, another driver, a lower level than its group's now, or ``force``. A node without a
record that an earlier gpufleet run brought into service (``kube_in_service``, ``local_in_service``:
the evidence, fail closed) is not burnt in by the upgrade of gpufleet: it gets a record of result
``in_service`` (``in_service_record``). A new node gets a record of result ``pending``
(``pending_record``, written by playbooks/tasks/admission-evidence.yml before this run's roles stamp
it, replaced by its burn-in's record): pending is not admitted, the node is burnt in (trigger
``new``) and the evidence of an earlier run is not looked at, so a first run that stopped after its
roles stamped the node and before its burn-in does not count as in service. ``build_record`` makes
the record from module gpu_burnin's result, ``admission_check`` the report's ``node.admission``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import role_stamps
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker

ANNOTATION = "gpufleet.io/admission"
STATE_FILE = "/var/lib/gpufleet/admission.json"
CHECK_ID = "node.admission"
MAX_BYTES = 16 * 1024  # a record of ours is well under 4 KiB
MAX_CHECKS = 32        # failing checks kept in a record
MAX_CHECK_TEXT = 300
KEYS = ("when", "level", "tests", "result", "dcgm_version", "driver", "checks", "trigger", "repair")
REQUIRED = ("when", "level", "result", "dcgm_version", "driver", "checks")
IN_SERVICE = "in_service"
# a new node's marker, written before its first roles stamp it (playbooks/tasks/admission-evidence.yml):
# not admitted, burnt in (trigger new) whatever evidence an interrupted or partial run left since
PENDING = "pending"
RESULTS = ("pass", "fail", IN_SERVICE, PENDING)
ADMITTED = ("pass", IN_SERVICE)  # results that admit the node
TRIGGERS = ("new", "failed", "unreadable", "repaired", "driver", "level", "force", "clock", IN_SERVICE)
# a record or a remediation step dated later than this controller's clock plus this allowance (seconds)
# was stamped by a stepped clock: the record is not an admission (trigger clock); a step is a repair once
CLOCK_SKEW = 300
IN_SERVICE_NOTE = "gpufleet_burnin_force burns it in"
# what an earlier gpufleet run leaves on a Node it brought into service (module_utils/health/gate.py):
# the gate's label gpufleet.io/healthy "true", the node health agent's condition GpufleetHealthy True
GATE_HEALTH_LABEL = "gpufleet.io/healthy"
AGENT_CONDITION = "GpufleetHealthy"
REPAIR_STEPS = ("reset", "reboot")
BURNIN_PREFIX = "burnin."  # the ids of module gpu_burnin's checks


def _plain(value, record, field, max_length):
    """A text field without control characters (they would be echoed into messages and reports)."""
    records.string(value, record, field, max_length=max_length)
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in value):
        raise RecordError(record, "a control character in %r" % (value[:80],), field)
    return value


def read_record(raw, record):
    """The admission record of ``raw`` (the annotation's or the file's text). RecordError naming
    ``record`` for anything else: larger than MAX_BYTES, not strict JSON, an unknown or missing key,
    ``when`` not a plausible epoch (2020..2100), ``level`` not 1..4, ``result`` not
    pass/fail/in_service/pending (pending: a new node's marker, not admitted), a
    text field over its bound or with a control character, ``checks`` not a list of at most MAX_CHECKS
    strings, ``repair`` (optional: the newest repair in the remediation history the burn-in covered)
    not a plausible epoch."""
    value = records.load_json(raw, record, max_bytes=MAX_BYTES, max_depth=3)
    records.mapping(value, record, required=REQUIRED, allowed=KEYS)
    records.timestamp(value["when"], record, "when")
    records.integer(value["level"], record, "level", 1, 4)
    records.string(value["result"], record, "result", choices=RESULTS)
    _plain(value["dcgm_version"], record, "dcgm_version", 64)
    _plain(value["driver"], record, "driver", 64)
    for index, item in enumerate(records.listing(value["checks"], record, "checks", max_items=MAX_CHECKS)):
        _plain(item, record, "checks[%d]" % index, MAX_CHECK_TEXT)
    for index, item in enumerate(records.listing(value.get("tests", []), record, "tests", max_items=64)):
        records.string(item, record, "tests[%d]" % index, max_length=128, allow_empty=False)
    if "trigger" in value:
        records.string(value["trigger"], record, "trigger", choices=TRIGGERS)
    if "repair" in value:
        records.timestamp(value["repair"], record, "repair")
    return value


def repair_times(annotations, node):
    """Epochs of the repairs (``reset`` or ``reboot`` steps done) in the Node's remediation history.
    RecordError (the breaker's reader) when it cannot be read."""
    steps = breaker.read_history({"metadata": {"annotations": annotations}}, node)
    return [float(calendar.timegm(time.strptime(step["at"], "%Y-%m-%dT%H:%M:%SZ"))) for step in steps
            if step["step"] in REPAIR_STEPS and step["status"] == "done"]


def repaired_at(annotations, node):
    """Epoch of the last repair in the Node's remediation history, None when there is none.
    RecordError (the breaker's reader) when it cannot be read."""
    times = repair_times(annotations, node)
    return max(times) if times else None


def new_repairs(times, record, now):
    """The repairs (epochs) the ``record`` does not cover: done at or after its ``when``, except a
    step dated later than ``now`` + CLOCK_SKEW (a stepped clock) that is not later than the record's
    ``repair`` (the newest repair seen when it was burnt in): such a step counts as a repair once."""
    covered = record.get("repair")
    return [at for at in times if at >= record["when"]
            and not (covered is not None and now + CLOCK_SKEW < at <= covered)]


def _conditions(status):
    """{type: status} of the Node's conditions as node_gate_status gives them; {} when malformed."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return {}
    return dict((c.get("type"), c.get("status")) for c in conditions if isinstance(c, dict))


def kube_in_service(status, taint_key):
    """The evidence (text) that an earlier gpufleet run brought the Node of ``status``
    (node_gate_status: taint, taints, labels, conditions) into service, None when there is none:
    the Node is Ready, not held back by the gate (no taint ``taint_key``) and carries the gate's
    label gpufleet.io/healthy "true" or the node health agent's condition GpufleetHealthy True. A
    cordon without the gate's taint is not the gate's (an administrator's): it is no evidence
    either way. Anything malformed or missing is no evidence (the node is burnt in)."""
    if not isinstance(status, dict):
        return None
    taints = status.get("taints")
    if status.get("taint") is not None or not isinstance(taints, list) or any(
            not isinstance(t, dict) or t.get("key") == taint_key for t in taints):
        return None
    conditions = _conditions(status)
    if conditions.get("Ready") != "True":
        return None
    labels = status.get("labels")
    if isinstance(labels, dict) and labels.get(GATE_HEALTH_LABEL) == "true":
        return "Ready, label %s=true of the health gate, no taint %s" % (GATE_HEALTH_LABEL, taint_key)
    if conditions.get(AGENT_CONDITION) == "True":
        return "Ready, condition %s True of the node health agent, no taint %s" % (AGENT_CONDITION, taint_key)
    return None


def local_in_service(role_state, role_state_name, health=None):
    """The evidence (text) that an earlier gpufleet run converged the node, None when there is
    none: ``role_state`` the text of its role-state.json read before this run's roles stamp it
    (at least one role stamp, read by role_stamps' strict reader), or ``health`` the evidence of
    the node health agent's health.json (the caller's reading, text or None). Unreadable is none."""
    if role_state is not None:
        try:
            stamps = role_stamps.parse_stamps(role_state, role_state_name)
        except RecordError:
            stamps = {}
        if stamps:
            return "%s has the stamps of an earlier converge (%s)" % (role_state_name, ", ".join(sorted(stamps)[:7]))
    return health or None


def in_service_record(settings, now, driver=None):
    """The record of a node in service before admission burn-in: result and trigger in_service,
    the group's level (not run: no DCGM version, no tests), the driver now."""
    records.timestamp(now, "this controller's clock", "now")
    return {"when": float(int(now)), "level": int(settings["dcgm_level"]), "tests": [], "result": IN_SERVICE,
            "dcgm_version": "", "driver": _plain_text(driver, 64), "checks": [], "trigger": IN_SERVICE}


def pending_record(settings, now):
    """The marker of a new node (no record, no evidence of an earlier run) written before this run's
    roles stamp it: result ``pending``, trigger ``new``, the group's level, nothing run. Not admitted:
    decide burns it in (trigger new) and ignores the evidence while it stands; the burn-in's record
    replaces it."""
    records.timestamp(now, "this controller's clock", "now")
    return {"when": float(int(now)), "level": int(settings["dcgm_level"]), "tests": [], "result": PENDING,
            "dcgm_version": "", "driver": "", "checks": [], "trigger": "new"}


def decide(sources, settings, node="node", driver=None, force=False, annotations=None, in_service=None, now=None):
    """Whether this run burns the node in: ``{burn_in, trigger, reason, record, source}``.

    ``sources``: (name, raw text or None, or a RecordError when the file could not be read) in
    order of authority (the Node annotation, then the node's state file); the first present one is
    the record. ``settings``: the checked burn-in
    settings (gpu/burnin.py). ``driver``: the node's driver version now (None: unknown, not
    compared). ``annotations``: the Node's, for its remediation history (None: no Node).
    ``in_service``: the evidence that an earlier gpufleet run brought the node into service
    (kube_in_service, local_in_service), None when there is none: a node without a record and with
    this evidence is not burnt in (unless ``force``); its new record (``new_record``) is
    in_service_record's, made at ``now`` (None: this clock)."""
    now = time.time() if now is None else now
    records.timestamp(now, "this controller's clock", "now")
    if not settings["enabled"]:
        return {"burn_in": False, "off": True, "trigger": None, "record": None, "source": None,
                "reason": "burn-in off for this node (gpufleet_burnin.enabled: false)"}
    source, raw = next(((name, text) for name, text in sources if text is not None), (None, None))

    repair = None  # the newest repair in the history, kept in the new record (new_repairs)
    if annotations is not None:
        try:
            times = repair_times(annotations, node)
        except RecordError:
            times = None
        repair = max(times) if times else None

    def burn(trigger, reason, record=None):
        return {"burn_in": True, "trigger": trigger, "reason": reason, "record": record, "source": source,
                "repair": repair}

    if source is None:
        if in_service and force:
            return burn("force", "gpufleet_burnin_force (in service before admission burn-in: %s)" % in_service)
        if in_service:
            record = in_service_record(settings, now, driver)
            return {"burn_in": False, "trigger": IN_SERVICE, "record": record, "source": None, "new_record": True,
                    "reason": "in service before admission burn-in (%s; %s)" % (in_service, IN_SERVICE_NOTE)}
        return burn("new", "new node: no admission record")
    try:
        if isinstance(raw, RecordError):  # the file could not be read at all (a FIFO, a link, too large)
            raise raw
        record = read_record(raw, source)
    except RecordError as exc:
        return burn("unreadable", "%s: not admitted, burnt in again" % exc)
    if record["result"] == PENDING:  # a new node whose first run stopped before its burn-in: no evidence taken
        return burn("new", "new node: admission pending since %s (%s; a run stopped before its burn-in), "
                    "not admitted" % (_utc(record["when"]), source), record)
    if force:
        return burn("force", "gpufleet_burnin_force", record)
    if record["result"] not in ADMITTED:
        return burn("failed", "the last burn-in failed (%s)" % (", ".join(record["checks"][:3]) or "no check named"),
                    record)
    if record["when"] > now + CLOCK_SKEW:
        return burn("clock", "recorded %s, later than this controller's clock %s (+%d s): not an admission"
                    % (_utc(record["when"]), _utc(now), CLOCK_SKEW), record)
    if annotations is not None:
        try:
            repaired = new_repairs(repair_times(annotations, node), record, now)
        except RecordError as exc:
            return burn("repaired", "%s: a repair cannot be ruled out" % exc, record)
        if repaired:
            return burn("repaired", "repaired (remediation %s) after its admission" % _utc(max(repaired)), record)
    if driver and str(driver) != record["driver"]:
        return burn("driver", "driver %s now, %s at admission" % (driver, record["driver"] or "not recorded"),
                    record)
    if record["level"] < settings["dcgm_level"] and not settings["dcgm_tests"]:
        return burn("level", "admitted at level %d, the group asks for %d" % (record["level"], settings["dcgm_level"]),
                    record)
    if record["result"] == IN_SERVICE:
        return {"burn_in": False, "trigger": None, "record": record, "source": source,
                "reason": "in service before admission burn-in, recorded %s (driver %s; %s)" % (
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["when"])), record["driver"] or "unknown",
                    IN_SERVICE_NOTE)}
    return {"burn_in": False, "trigger": None, "record": record, "source": source,
            "reason": "admitted %s (level %d, DCGM %s, driver %s%s)" % (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["when"])), record["level"],
                record["dcgm_version"] or "unknown", record["driver"] or "unknown",
                "" if driver else "; the driver now is not known: not compared")}


def _utc(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _text(value, limit):
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text[:limit]


def _plain_text(value, limit):
    """_text with control characters replaced by "?" (read_record refuses them)."""
    return "".join("?" if ord(ch) < 32 or 127 <= ord(ch) < 160 else ch for ch in _text(value, limit))


def build_record(result, settings, trigger, now, driver=None, fail_on="fail", repair=None):
    """The admission record (a dict read_record accepts) of module gpu_burnin's registered
    ``result``: result ``pass`` only when the module ran (not failed, not skipped, not check mode),
    reported ``healthy`` (the boolean true) and no ``burnin.*`` check fails (with ``fail_on`` ``warn``,
    the gate's node_gate_fail_on, none warns either: the record follows what holds the node back);
    ``checks`` the failing ``<id>:<target>`` (or the module's error). ``repair``: the newest repair
    of the remediation history when the burn-in was decided (decide's ``repair``), kept so that a
    repair dated by a stepped clock is a repair once (new_repairs)."""
    records.timestamp(now, "this controller's clock", "now")
    if fail_on not in ("fail", "warn", "never"):
        raise ValueError("fail_on must be fail, warn or never, got %r" % (fail_on,))
    if not isinstance(result, dict):
        result = {}
    checks = [c for c in (result.get("checks") or []) if isinstance(c, dict)]
    bad = ("fail", "warn") if fail_on == "warn" else ("fail",)
    failing = ["%s:%s" % (_text(c.get("id"), 100), _text(c.get("target"), 150)) for c in checks
               if c.get("status") in bad]
    ran = any(c.get("id") == "burnin.dcgm.run" and c.get("status") == "pass" for c in checks)
    burnin_bad = any(str(c.get("id")).startswith(BURNIN_PREFIX) and c.get("status") in bad for c in checks)
    passed = (result.get("healthy") is True and not result.get("failed") and not result.get("skipped") and ran
              and not burnin_bad)
    if not passed and not failing:
        failing = ["burnin.dcgm.run:node"]
    dcgm = result.get("dcgm") if isinstance(result.get("dcgm"), dict) else {}
    run = next((c for c in checks if c.get("id") == "burnin.dcgm.run"), {})
    observed = run.get("observed") if isinstance(run.get("observed"), dict) else {}
    record = {"when": float(int(now)), "level": int(settings["dcgm_level"]), "tests": list(settings["dcgm_tests"]),
              "result": "pass" if passed else "fail",
              "dcgm_version": _text(dcgm.get("version") or observed.get("version"), 64),
              "driver": _plain_text(driver or observed.get("driver"), 64),  # the driver the next decision compares
              "checks": [_plain_text(item, MAX_CHECK_TEXT) for item in failing[:MAX_CHECKS]]}
    record["dcgm_version"] = _plain_text(record["dcgm_version"], 64)
    if repair is not None:
        records.timestamp(repair, "the remediation history", "repair")
        record["repair"] = float(repair)
    if trigger in TRIGGERS:
        record["trigger"] = trigger
    return record


def record_text(record):
    """The record as written (annotation or file): compact JSON that read_record reads back."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    read_record(text, "admission record to write")  # never write what cannot be read back
    return text


def admission_check(decision, record=None):
    """The report's ``node.admission`` check (target ``node``, observed the record's fields): pass
    admitted (a valid record that passed and needs no new burn-in, or this run's burn-in passed, or
    a node in service before admission burn-in: record result in_service, the message says so);
    fail (not admitted: the burn-in failed, naming the failing tests, or it is due and did not run);
    skip (burn-in off for the node)."""
    if decision.get("off"):
        return {"id": CHECK_ID, "target": "node", "status": "skip", "message": decision.get("reason", "")}
    if record is None and decision.get("burn_in"):
        return {"id": CHECK_ID, "target": "node", "status": "fail", "observed": None,
                "message": "not admitted: burn-in due (%s), not run" % decision.get("reason", "")}
    record = record if record is not None else decision.get("record")
    observed = dict((key, record[key]) for key in KEYS if key in record)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["when"]))
    if record["result"] == PENDING:
        return {"id": CHECK_ID, "target": "node", "status": "fail", "observed": observed,
                "message": "not admitted: admission pending since %s, burn-in not run" % when}
    if record["result"] not in ADMITTED:
        return {"id": CHECK_ID, "target": "node", "status": "fail", "observed": observed,
                "message": ("not admitted: burn-in (level %d) failed %s: %s" % (
                    record["level"], when, ", ".join(record["checks"])))[:1000]}
    if not decision.get("burn_in"):
        return {"id": CHECK_ID, "target": "node", "status": "pass", "observed": observed,
                "message": decision.get("reason", "")}
    return {"id": CHECK_ID, "target": "node", "status": "pass", "observed": observed,
            "message": "admitted: burnt in %s (%s), level %d, DCGM %s, driver %s" % (
                when, decision.get("reason"), record["level"], record["dcgm_version"] or "unknown",
                record["driver"] or "unknown")}
