# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter upgrade_record: rolling_upgrade's records read back through their one strict reader
(module_utils/upgrade_record.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils import upgrade_record as reader
from ansible_collections.gpufleet.cluster.plugins.module_utils.records import RecordError

KINDS = {"state": reader.read_state, "applied": reader.read_applied}


def upgrade_record(text, kind, source):
    """{"record": the record ({} when there is none), "error": "" or why it is unreadable}."""
    if kind not in KINDS:
        raise AnsibleFilterError("upgrade_record: kind must be one of %s, got %r" % (", ".join(sorted(KINDS)), kind))
    if text is not None and not isinstance(text, str):
        return {"record": {}, "error": "unreadable record %s: not text but %s" % (source, type(text).__name__)}
    try:
        return {"record": KINDS[kind](text, source), "error": ""}
    except RecordError as exc:
        return {"record": {}, "error": str(exc)}


class FilterModule(object):
    def filters(self):
        return {"upgrade_record": upgrade_record}
