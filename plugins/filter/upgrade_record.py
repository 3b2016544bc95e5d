# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter upgrade_record: rolling_upgrade's records read back through their one strict reader
(module_utils/kube/upgrade_record.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import upgrade_record as reader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError

KINDS = {"state": reader.read_state, "applied": reader.read_applied}


def upgrade_record(text, kind, source, components=None):
    """{"record": the record ({} when there is none), "error": "" or why it is unreadable}.
    ``components``: the known component names (the role's), checked when given."""
    if kind not in KINDS:
        raise AnsibleFilterError("upgrade_record: kind must be one of %s, got %r" % (", ".join(sorted(KINDS)), kind))
    if components is not None and not (isinstance(components, list) and all(isinstance(c, str) for c in components)):
        raise AnsibleFilterError("upgrade_record: components must be a list of names, got %r" % (components,))
    if not isinstance(text, str):  # None too: a missing value is not an empty text
        return {"record": {}, "error": "unreadable record %s: not text but %s" % (source, type(text).__name__)}
    try:
        return {"record": KINDS[kind](text, source, components), "error": ""}
    except RecordError as exc:
        return {"record": {}, "error": str(exc)}


class FilterModule(object):
    def filters(self):
        return {"upgrade_record": upgrade_record}
