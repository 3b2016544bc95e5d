# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of rolling_upgrade's records: the node's upgrade state (``upgrade-state.json``
and its copy in the Node annotation ``gpufleet.io/upgrade-state``) and what the last successful
upgrade applied (``applied.json``). Both are data from outside (an earlier run, another gpufleet
version, an admin's editor): checked strictly with module_utils/core/records.py, and a record that
cannot be read raises RecordError naming it, which the role turns into a refusal of the node
(docs/contracts.md, "Records read back"). Written by roles/rolling_upgrade/tasks/state.yml and
admit.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records

STATES = ("planned", "cordoned", "drained", "upgrading", "validating", "admitted", "held")
KEYS = ("state", "run_id", "components", "target", "updated", "step", "reason", "failed_checks",
        "versions_before", "versions_after", "resumed_from", "etcd_snapshot")
UPDATED_RE = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")


def _version_map(value, record, field, max_items=64):
    """{name: version}: string keys; a version is a string, or a finite number (YAML reads an
    unquoted ``24.10`` as one), or null; never a bool, a list or an object."""
    records.mapping(value, record, field)
    if len(value) > max_items:
        raise records.RecordError(record, "%d entries, more than %d" % (len(value), max_items), field)
    for key, item in value.items():
        records.string(key, record, field, max_length=128)
        if isinstance(item, str):
            records.string(item, record, "%s.%s" % (field, key), max_length=512)
        elif item is not None:
            records.number(item, record, "%s.%s" % (field, key))
    return value


def _updated(value, record):
    """A real UTC time YYYY-MM-DDTHH:MM:SSZ within records' plausible range (2020..2100)."""
    text = records.string(value, record, "updated", 32)
    try:
        if not UPDATED_RE.match(text):
            raise ValueError
        stamp = calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        raise records.RecordError(record, "not a UTC time YYYY-MM-DDTHH:MM:SSZ: %r" % text, "updated")
    records.timestamp(stamp, record, "updated")
    return text


def _strings(value, record, field, max_items=64, max_length=256):
    records.listing(value, record, field, max_items)
    for item in value:
        records.string(item, record, field, max_length=max_length)
    return value


def read_state(text, record, components=None):
    """The upgrade state record in ``text`` ({} when ``text`` is empty: no record); with
    ``components`` (the role's known components), every component and target name one of them."""
    if isinstance(text, str) and not text.strip():
        return {}
    doc = records.mapping(records.load_json(text, record), record, required=("state",), allowed=KEYS)
    records.string(doc["state"], record, "state", choices=STATES)
    for field in ("run_id", "step", "reason", "etcd_snapshot"):
        if field in doc:
            records.string(doc[field], record, field, max_length=4096 if field == "reason" else 1024)
    if "updated" in doc:
        _updated(doc["updated"], record)
    if "components" in doc:
        _components(doc["components"], record, "components", components)
    for field in ("target", "versions_before", "versions_after"):
        if field in doc:
            _version_map(doc[field], record, field)
    if "target" in doc and components is not None:
        _components(list(doc["target"]), record, "target", components)
    if "resumed_from" in doc:
        records.mapping(doc["resumed_from"], record, "resumed_from", allowed=("run_id", "state"))
        for key, item in doc["resumed_from"].items():
            records.string(item, record, "resumed_from.%s" % key, max_length=1024,
                           choices=STATES if key == "state" else None)
    if "failed_checks" in doc:
        records.listing(doc["failed_checks"], record, "failed_checks", 1024)
        for item in doc["failed_checks"]:
            if not isinstance(item, (str, dict)):
                raise records.RecordError(record, "an item is neither a check id nor a check: %r" % (item,),
                                          "failed_checks")
    return doc


def read_applied(text, record, components=None):
    """What the last successful upgrade applied ({} when ``text`` is empty: nothing recorded)."""
    if isinstance(text, str) and not text.strip():
        return {}
    doc = records.mapping(records.load_json(text, record), record, required=("components", "target"),
                          allowed=("components", "target"))
    _components(doc["components"], record, "components", components)
    _version_map(doc["target"], record, "target")
    if components is not None:
        _components(list(doc["target"]), record, "target", components)
    return doc


def _components(value, record, field, known):
    _strings(value, record, field, max_length=64)
    unknown = sorted(set(value) - set(known)) if known is not None else []
    if unknown:
        raise records.RecordError(record, "unknown component(s) %s (known: %s)" % (
            ", ".join(unknown), ", ".join(known)), field)
    return value
