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

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import admission


def _slurped(value):
    """The text of a registered ansible.builtin.slurp result, None when the file was not read
    (absent: the module failed with 'file not found'); any other failure is unreadable text."""
    if not isinstance(value, dict) or not value:
        return None
    if value.get("failed") or "content" not in value:
        msg = str(value.get("msg") or "")
        if "not found" in msg or "No such file" in msg or not value.get("failed"):
            return None
        return "\x00unreadable: %s" % msg  # not JSON: refused by the reader, named
    try:
        return base64.b64decode(value["content"]).decode("utf-8", "surrogateescape")
    except (TypeError, ValueError) as exc:
        return "\x00unreadable: %s" % exc


def admission_decision(annotations, settings=None, node="node", driver=None, force=False, state_file=None,
                       kubernetes=True):
    """``annotations``: the Node's (node_gate_status.annotations); ``state_file``: the registered slurp
    of the node's admission.json. Returns module_utils/remediation/admission.py decide's answer with
    ``settings`` (checked) and ``check`` (node.admission as it stands before any burn-in)."""
    try:
        checked = burnin.settings(settings, "gpufleet_burnin")
    except burnin.SettingsError as exc:
        raise AnsibleFilterError("admission_decision: %s" % exc)
    if annotations is not None and not isinstance(annotations, dict):
        raise AnsibleFilterError("admission_decision: the Node's annotations must be a mapping, got %s"
                                 % type(annotations).__name__)
    sources = []
    if kubernetes:
        sources.append(("Node %s annotation %s" % (node, admission.ANNOTATION), (annotations or {}).get(
            admission.ANNOTATION)))
    sources.append(("%s on %s" % (admission.STATE_FILE, node), _slurped(state_file)))
    decision = admission.decide(sources, checked, node=node, driver=driver or None, force=bool(force),
                                annotations=(annotations or {}) if kubernetes else None)
    decision["settings"] = checked
    # the record as written: an admitted node's record read from its state file is carried onto the Node
    decision["text"] = admission.record_text(decision["record"]) if decision["record"] else None
    decision["check"] = admission.admission_check(decision)
    return decision


def admission_record(result, decision, driver=None, now=None):
    """The record of this run's burn-in (``result``: gpu_burnin's registered result) with ``text``
    (what is written) and ``check`` (node.admission)."""
    if not isinstance(decision, dict) or "settings" not in decision:
        raise AnsibleFilterError("admission_record: expected the answer of admission_decision")
    try:
        record = admission.build_record(result, decision["settings"], decision.get("trigger"),
                                        time.time() if now is None else now, driver or None)
        text = admission.record_text(record)
    except ValueError as exc:
        raise AnsibleFilterError("admission_record: %s" % exc)
    return {"record": record, "text": text, "passed": record["result"] == "pass",
            "check": admission.admission_check(decision, record)}


class FilterModule(object):
    def filters(self):
        return {"admission_decision": admission_decision, "admission_record": admission_record}
