# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""admission_decision, admission_record: the admission burn-in of playbooks/tasks/admission-burnin.yml
(documentation: the <name>.yml beside this file). The logic is module_utils/remediation/admission.py's
(record, reader, decision) and module_utils/gpu/burnin.py's (settings), the one place of each."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import time

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import health_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import admission


def _unreadable(text, record):
    """A RecordError naming ``record`` for the marker text of a file that could not be read."""
    if isinstance(text, str) and text.startswith("\x00unreadable: "):
        return RecordError(record, text[len("\x00unreadable: "):])
    return text


def _read(value):
    """The text of a registered ``gpufleet.cluster.state_file`` ``state: read`` result: None when
    the file is absent; a file that is not a regular file (FIFO, symbolic link, directory,
    device), larger than the bound, not UTF-8, or a read that failed is unreadable text naming the
    problem (refused by the reader, so the node is burnt in again)."""
    if not isinstance(value, dict) or not value:
        return None
    if value.get("skipped"):
        return None
    if value.get("failed") or "exists" not in value:
        return "\x00unreadable: %s" % (value.get("msg") or "the state file could not be read")
    if value.get("problem"):
        return "\x00unreadable: %s" % value["problem"]
    if not value.get("exists"):
        return None
    content = value.get("content")
    return content if isinstance(content, str) else "\x00unreadable: no content read"


def _text_or_none(value):
    """The text of an evidence file's read (state_file state: read), None when absent or unreadable."""
    text = _read(value)
    return None if text is None or text.startswith("\x00") else text


def _health_evidence(value, name):
    """The evidence of the node health agent's health.json (read by the agent's own reader), None."""
    text = _text_or_none(value)
    if text is None:
        return None
    try:
        health_record.parse_health(text, name)
    except RecordError:
        return None
    return "%s written by the node health agent" % name


def in_service_evidence(status=None, taint_key=None, files=None):
    """The evidence that an earlier gpufleet run brought the node into service, None: from the
    Node (``status``, node_gate_status) when ``taint_key`` is given, else from ``files`` (the
    registered state_file reads of role-state.json and health.json, each with ``path``)."""
    if taint_key:
        return admission.kube_in_service(status, taint_key)
    results = [r for r in (files or []) if isinstance(r, dict)]
    stamps = next((r for r in results if str(r.get("path") or r.get("item") or "").endswith("role-state.json")), None)
    health = next((r for r in results if str(r.get("path") or r.get("item") or "").endswith("health.json")), None)
    return admission.local_in_service(
        _text_or_none(stamps), (stamps or {}).get("path") or "role-state.json",
        _health_evidence(health, (health or {}).get("path") or "health.json"))


def _slurped(value):
    """The text of a registered ansible.builtin.slurp result, None when the file was not read
    (absent: the module failed with 'file not found'); any other failure is unreadable text."""
    if not isinstance(value, dict) or not value:
        return None
    if "exists" in value or value.get("skipped"):  # gpufleet.cluster.state_file state: read
        return _read(value)
    if value.get("failed") or "content" not in value:
        msg = str(value.get("msg") or "")
        if "not found" in msg or "No such file" in msg or not value.get("failed"):
            return None
        return "\x00unreadable: %s" % msg  # not JSON: refused by the reader, named
    try:
        return base64.b64decode(value["content"]).decode("utf-8", "surrogateescape")
    except (TypeError, ValueError) as exc:
        return "\x00unreadable: %s" % exc


def _force(value):
    """``force`` read as Ansible reads a boolean (true/false, yes/no, on/off, 1/0); anything else fails."""
    if value is None:
        return False
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise AnsibleFilterError("admission_decision: force (gpufleet_burnin_force) must be a boolean, got %r"
                                 % (value,))


def admission_decision(annotations, settings=None, node="node", driver=None, force=False, state_file=None,
                       kubernetes=True, node_status=None, taint_key=None, evidence=None):
    """``annotations``: the Node's (node_gate_status.annotations); ``state_file``: the registered read
    (module state_file, state read) of the node's admission.json. The evidence of an earlier gpufleet
    run (in_service_evidence): with ``kubernetes``, the Node (``node_status``: node_gate_status, and
    the gate's ``taint_key``); without, ``evidence`` (the reads of role-state.json and health.json
    made before this run's roles ran). Returns module_utils/remediation/admission.py decide's answer
    with ``settings`` (checked), ``text`` (the record to write when ``new_record`` or carried from
    the state file), ``check`` (node.admission as it stands before any burn-in) and ``pending`` (a new
    node, no record and no evidence: the text of its pending marker, admission.pending_record; else None)."""
    try:
        checked = burnin.settings(settings, "gpufleet_burnin")
    except burnin.SettingsError as exc:
        raise AnsibleFilterError("admission_decision: %s" % exc)
    if annotations is not None and not isinstance(annotations, dict):
        raise AnsibleFilterError("admission_decision: the Node's annotations must be a mapping, got %s"
                                 % type(annotations).__name__)
    force = _force(force)
    sources = []
    if kubernetes:
        sources.append(("Node %s annotation %s" % (node, admission.ANNOTATION), (annotations or {}).get(
            admission.ANNOTATION)))
    name = "%s on %s" % ((state_file or {}).get("path") or admission.STATE_FILE if isinstance(state_file, dict)
                         else admission.STATE_FILE, node)
    sources.append((name, _unreadable(_slurped(state_file), name)))
    if kubernetes:
        seen = in_service_evidence(node_status, taint_key) if taint_key else None
    else:
        seen = in_service_evidence(files=evidence if isinstance(evidence, list) else [])
    try:
        decision = admission.decide(sources, checked, node=node, driver=driver or None, force=force,
                                    annotations=(annotations or {}) if kubernetes else None, in_service=seen)
    except ValueError as exc:
        raise AnsibleFilterError("admission_decision: %s" % exc)
    decision["settings"] = checked
    # the record as written: an admitted node's record read from its state file is carried onto the Node
    decision["text"] = admission.record_text(decision["record"]) if decision["record"] else None
    decision["check"] = admission.admission_check(decision)
    # a new node (no record anywhere, no evidence): the marker tasks/admission-evidence.yml writes before
    # this run's roles stamp the node, so that a run stopped before the burn-in leaves it not admitted
    decision["pending"] = (admission.record_text(admission.pending_record(checked, time.time()))
                           if decision["burn_in"] and decision["source"] is None and decision["trigger"] == "new"
                           else None)
    return decision


def admission_record(result, decision, driver=None, now=None, fail_on="fail"):
    """The record of this run's burn-in (``result``: gpu_burnin's registered result) with ``text``
    (what is written) and ``check`` (node.admission). ``fail_on``: the gate's (node_gate_fail_on):
    with ``warn`` a burn-in check that warns makes the record fail, as it holds the node back."""
    if not isinstance(decision, dict) or "settings" not in decision:
        raise AnsibleFilterError("admission_record: expected the answer of admission_decision")
    try:
        record = admission.build_record(result, decision["settings"], decision.get("trigger"),
                                        time.time() if now is None else now, driver or None,
                                        fail_on=fail_on or "fail", repair=decision.get("repair"))
        text = admission.record_text(record)
    except ValueError as exc:
        raise AnsibleFilterError("admission_record: %s" % exc)
    return {"record": record, "text": text, "passed": record["result"] == "pass",
            "check": admission.admission_check(decision, record)}


class FilterModule(object):
    def filters(self):
        return {"admission_decision": admission_decision, "admission_record": admission_record}
