# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading Slurm's answers about a node: below both the agent's Slurm publisher (agent_slurm) and
the remediation (remediation.slurm_state); imports only records.py.

- ``scontrol show node <n> --json`` (Slurm 23.02 and later: ``--json`` came with the data_parser
  plugin v0.0.39, SchedMD/slurm@slurm-23-02-1-1:RELEASE_NOTES "Partial support for '--json' and
  '--yaml' formated outputs ... sinfo, squeue, and scontrol"; data_parser v0.0.39 .. v0.0.46 to
  26.05 and master) is the form read first: ``read_show_node_json``, a strict reader (types, the
  state names data_parser prints, one node of that name);
- ``scontrol show node <n> -o`` (the text form; the fallback for Slurm up to 22.05, which refuses
  ``--json``: Debian 12's slurm-wlm 22.05.8 answers "scontrol: unrecognized option '--json'",
  exit 1): ``parse_show_node``;
- ``show_node_argv(scontrol, node, version)`` picks the form from ``scontrol --version``
  (``parse_version``); ``parse_state`` and ``node_hold`` read a state of either form.

Both readers give the same fields (NodeName, NodeHostName, State as ``BASE+FLAG+...``, Reason), so
every decision over them is one. An answer that cannot be read without guessing raises
``ShowNodeError`` (the caller leaves the node alone or refuses, never acts on a guess).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records

_KEY = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_]*)=")
# The fields Slurm prints after Reason= (src/api/node_info.c, slurm_sprint_node_table, the same order
# from slurm-20-11-1-1 to 25.11: NodeName= first, State= on an earlier line, then the power line, then
# Reason=<text> [<user>@<time>] (a multi-line reason's further lines follow it), then these optional
# lines). Comment= and Extra= are free text like the reason itself.
AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName", "TLSCertTokenSet",
                "TLSCertLastRenewal", "Topology", "Parameters")


class ShowNodeError(ValueError):
    """The answer of ``scontrol show node`` cannot be read field by field without guessing."""


def parse_show_node(text):
    """{field: value} of ``scontrol show node <name>`` (``-o``: one line; without: one field group per
    line); values may hold spaces (``OS=Linux 5.15.0-153-generic #163-Ubuntu SMP ...``,
    ``Reason=bad dimm [root@2025-09-23T09:46:15]``) and further fields may follow Reason.

    A key is a word followed by ``=`` at the start or after whitespace. Reason= is read as Slurm
    prints it: its raw text (whitespace kept, nothing normalised; only the separator before the next
    field is dropped) up to the next field Slurm prints after it (AFTER_REASON) or the end; what looks
    like a key inside it is part of the reason. Free text (a reason, a comment) can hold text that looks
    like a field, so the answer is refused (ShowNodeError naming the key) when a key appears twice or
    Reason= appears after a field Slurm prints after it: which one is Slurm's cannot be told."""
    text = text or ""
    keys = list(_KEY.finditer(text))
    seen = {}
    for match in keys:
        name = match.group(1)
        if name in seen:
            raise ShowNodeError("%s= appears more than once (free text holding a field?): which is Slurm's cannot "
                                "be told" % name)
        seen[name] = match.start()
    if "Reason" in seen:
        early = [name for name in AFTER_REASON if seen.get(name, len(text)) < seen["Reason"]]
        if early:
            raise ShowNodeError("Reason= follows %s= (Slurm prints it before them): the reason cannot be told from "
                                "free text" % "=, ".join(early))
    fields, index = {}, 0
    while index < len(keys):
        match, after = keys[index], index + 1
        if match.group(1) == "Reason":
            while after < len(keys) and keys[after].group(1) not in AFTER_REASON:
                after += 1
        end = keys[after].start() if after < len(keys) else len(text)
        value = text[match.end():end]
        fields[match.group(1)] = value.rstrip() if match.group(1) == "Reason" else value.strip()
        index = after
    return fields


# `scontrol show node`'s State= (Slurm src/common/slurm_protocol_defs.c, node_states[] and
# node_state_flags[]; src/api/node_info.c prints node_state_string_complete(): BASE+FLAG+FLAG...
# since Slurm 21.08, e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING, MIXED+MAINTENANCE; up to 20.11 it printed
# node_state_string() with a suffix symbol and +CLOUD, +COMPLETING, +DRAIN, +FAIL, +POWER,
# +POWERING_DOWN, e.g. DOWN*+DRAIN, IDLE~, MAINT, REBOOT^).
BASE_STATES = ("DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN")
STATE_FLAGS = ("BLOCKED", "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "EXTERNAL",
               "INVALID_REG", "FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN",
               "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED",
               "POWERING_UP", "POWERING_DOWN", "PERFCTRS")
# node_state_string()'s suffixes (Slurm <= 20.11 show node, sinfo's short form)
_SUFFIXES = {"*": "NOT_RESPONDING", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
             "#": "POWERING_UP", "%": "POWERING_DOWN", "~": "POWERED_DOWN", "!": "POWER_DOWN", "-": "PLANNED"}
# node_state_string()'s words that are not a base state: (base, flags)
_WORDS = {"DRAINED": ("IDLE", ("DRAIN",)), "DRAINING": ("ALLOCATED", ("DRAIN",)), "FAILING": ("ALLOCATED", ("FAIL",)),
          "MAINT": ("IDLE", ("MAINTENANCE",)), "REBOOT": ("IDLE", ("REBOOT_REQUESTED",)), "INVAL": (None, ("INVALID_REG",)),
          "POWER": (None, ("POWERED_DOWN",)), "CANCEL_REBOOT": (None, ("REBOOT_REQUESTED",)), "UNDRAIN": (None, ("DRAIN",))}
# Bases and flags that say the node is in someone else's hands (an admin's or Slurm's own): gpufleet
# neither drains it with its reason, nor changes the reason, nor resumes it. DRAIN counts as ours
# only with our reason. The other flags (BLOCKED, CLOUD, COMPLETING, DYNAMIC_*, EXTERNAL, RESERVED,
# PLANNED, NOT_RESPONDING, PERFCTRS) say how Slurm schedules or reaches the node, not who holds it.
USABLE_BASES = ("IDLE", "ALLOCATED", "MIXED")
FOREIGN_FLAGS = ("FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN",
                 "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "RESUME")


def parse_state(state):
    """(base or None, set of flags, [tokens not understood]) of a State= value in either form. Slurm
    prints states in upper case: a token in another case is not understood (fail closed)."""
    tokens = (state or "").strip().split("+")
    base, flags, unknown = None, set(), []
    for index, token in enumerate(tokens):
        word = token.rstrip("".join(_SUFFIXES))
        flags.update(_SUFFIXES[char] for char in token[len(word):])
        if index == 0 and word in BASE_STATES:
            base = word
        elif index == 0 and word in _WORDS:
            base = _WORDS[word][0]
            flags.update(_WORDS[word][1])
        elif word in STATE_FLAGS:
            flags.add(word)
        elif word == "POWER":  # Slurm <= 20.11: +POWER is the power-saving (powered down) flag
            flags.add("POWERED_DOWN")
        else:
            unknown.append(token)
    return base, flags, unknown


def node_hold(state, reason, prefix):
    """Who holds the node, from its State= and Reason= (``prefix``: our reason's start):
    ``("ours", [])`` DRAIN set with our reason (``prefix`` at position 0 of the raw reason: whitespace
    or case is never normalised) and nothing else held; ``("free", [])`` neither
    drained nor held; ``("other", [what])`` anything else: a base other than IDLE, ALLOCATED,
    MIXED (DOWN, ERROR, FUTURE, UNKNOWN), a flag of FOREIGN_FLAGS, DRAIN or any reason that is not
    ours, or a state not understood (fail closed: left alone)."""
    base, flags, unknown = parse_state(state)
    reason = reason or ""
    ours = reason.startswith(prefix)  # the raw reason: no whitespace or case normalised
    held = []
    if base not in USABLE_BASES:
        held.append(base or "no base state")
    held.extend(flag for flag in FOREIGN_FLAGS if flag in flags)
    held.extend("%s (not understood)" % token for token in unknown)
    if reason and not ours:
        held.append("Reason=%s" % reason)
    elif "DRAIN" in flags and not ours:
        held.append("DRAIN without a reason of gpufleet")
    if held:
        return "other", held
    return ("ours", []) if "DRAIN" in flags else ("free", [])


# --- which form: `scontrol --version` -------------------------------------------------------------
# `scontrol --version` prints "<package> <major>.<minor>.<micro>" (src/scontrol/scontrol.c
# _print_version: PACKAGE_NAME and SLURM_VERSION_STRING): "slurm 25.11.0" from SchedMD's builds,
# "slurm-wlm 22.05.8" from Debian 12's slurm-wlm 22.05.8-4+deb12u3 (seen on that package).
JSON_SINCE = (23, 2)  # scontrol show node --json: Slurm 23.02 (data_parser/v0.0.39); 22.05 and older: -o
_VERSION = re.compile(r"\A(\S+) ([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,4})(\S*)\n?\Z")


def parse_version(text):
    """(major, minor, micro) of ``scontrol --version``'s answer; None when the answer is not one
    line of that form (the caller then reads the text form, which every Slurm version prints)."""
    if not isinstance(text, str):
        return None
    match = _VERSION.match(text.strip() + "\n")
    if not match:
        return None
    return tuple(int(match.group(index)) for index in (2, 3, 4))


def show_node_argv(scontrol, node, version):
    """The argv of ``scontrol show node <node>`` in the form ``version`` (parse_version's answer)
    prints best: ``--json`` from 23.02, ``-o`` (one line of text) for 22.05 and older or an unknown
    version."""
    if version is not None and tuple(version[:2]) >= JSON_SINCE:
        return [scontrol, "show", "node", node, "--json"]
    return [scontrol, "show", "node", node, "-o"]


def is_json_argv(argv):
    return argv[-1] == "--json"


def show_node_form(argv):
    """The form an argv of show_node_argv asks for, as named in journals and reports: ``--json`` or ``-o``."""
    return "--json" if is_json_argv(argv) else "-o"


def read_show_node(text, node, json_form):
    """The fields of ``scontrol show node <node>``'s answer in the form asked (``json_form``: the
    ``--json`` answer, read_show_node_json; else the ``-o`` text, parse_show_node): the one reader
    of both the agent and the remediation. ShowNodeError when it cannot be read without guessing."""
    return read_show_node_json(text, node) if json_form else parse_show_node(text)


# --- the machine-readable form: `scontrol show node <n> --json` -----------------------------------
# The node state names of data_parser's NODE_STATES flag array (src/plugins/data_parser/v0.0.*/
# parsers.c, PARSER_FLAG_ARRAY(NODE_STATES)): v0.0.39 (23.02) has these but EXTERNAL and BLOCKED,
# which replace PERFCTRS from v0.0.40 / v0.0.41 (BLOCKED by 25.11's v0.0.44); the same list to
# v0.0.46 (master). The node's "state" is an array: the base first (a flag_equal entry of
# NODE_STATE_BASE: exactly one), then the flags set (masked bits of NODE_STATE_FLAGS).
JSON_BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")
JSON_STATE_FLAGS = ("PERFCTRS", "EXTERNAL", "RESERVED", "UNDRAIN", "CLOUD", "RESUME", "DRAIN", "COMPLETING",
                    "NOT_RESPONDING", "POWERED_DOWN", "FAIL", "POWERING_UP", "MAINTENANCE", "REBOOT_REQUESTED",
                    "REBOOT_CANCELED", "POWERING_DOWN", "DYNAMIC_FUTURE", "REBOOT_ISSUED", "PLANNED",
                    "INVALID_REG", "POWER_DOWN", "POWER_UP", "POWER_DRAIN", "DYNAMIC_NORM", "BLOCKED")
# A show node answer is one node (a few KiB; 25.11's is under 4 KiB); more than this is not one.
JSON_MAX_BYTES = 256 * 1024


def read_show_node_json(text, node):
    """{NodeName, NodeHostName, State, Reason} of ``scontrol show node <node> --json`` (Slurm 23.02
    and later), the fields ``parse_show_node`` gives for the text form: State is the state array
    joined as ``BASE+FLAG+...`` (the text form's spelling since 21.08), Reason the raw reason (the
    text form's `` [<user>@<time>]`` is not part of it: the JSON form has reason_set_by_user and
    reason_changed_at for those).

    Strict (records.py): one JSON document, an object with ``nodes`` a list, ``errors`` (when
    present) empty, every node an object; the node named ``node`` (scontrol matches names only,
    src/scontrol/info_node.c) at most once, its ``name`` and ``hostname`` strings, ``state`` a
    non-empty array of data_parser's state names with exactly one base state and it first,
    ``reason`` a string. Anything else raises ShowNodeError naming the field. No node of that name
    gives {} (Slurm knows no such node: the caller names it)."""
    record = "scontrol show node %s --json" % node
    try:
        doc = records.mapping(records.load_json(text, record, max_bytes=JSON_MAX_BYTES), record,
                              required=("nodes",))
        errors = records.listing(doc.get("errors", []), record, "errors")
        if errors:
            raise records.RecordError(record, "Slurm reported errors: %s" % json_summary(errors), "errors")
        nodes = records.listing(doc["nodes"], record, "nodes")
        found = []
        for index, item in enumerate(nodes):
            field = "nodes[%d]" % index
            entry = records.mapping(item, record, field, required=("name", "state"))
            records.string(entry["name"], record, field + ".name", allow_empty=False)
            found.append((field, entry))
        if not found:
            return {}
        if len(found) > 1:
            raise records.RecordError(record, "%d nodes in the answer of one node's show" % len(found), "nodes")
        field, entry = found[0]
        state = _json_state(entry["state"], record, field + ".state")
        hostname = records.string(entry.get("hostname", ""), record, field + ".hostname")
        reason = records.string(entry.get("reason", ""), record, field + ".reason", max_length=65536)
    except records.RecordError as exc:
        raise ShowNodeError(str(exc))
    return {"NodeName": entry["name"], "NodeHostName": hostname, "State": state, "Reason": reason}


def _json_state(value, record, field):
    names = records.listing(value, record, field, max_items=64)
    if not names:
        raise records.RecordError(record, "empty", field)
    for name in names:
        records.string(name, record, field, max_length=64,
                       choices=JSON_BASE_STATES + JSON_STATE_FLAGS)
    bases = [name for name in names if name in JSON_BASE_STATES]
    if len(bases) != 1 or names[0] != bases[0]:
        raise records.RecordError(record, "%r: not one base state first" % (names,), field)
    if len(set(names)) != len(names):
        raise records.RecordError(record, "%r: a state twice" % (names,), field)
    return "+".join(names)


def json_summary(value, limit=200):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
