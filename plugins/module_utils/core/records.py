# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records read back are data from outside: the strict primitives every record reader is built on.

gpufleet reads back what it (or another controller, or an earlier boot) wrote: Lease and Node
annotations, state files, stamps, the kmsg sequence, health.json, upgrade records. Any of them may
be damaged, hand-edited, written by an older or newer gpufleet, or hostile. Each record kind has
exactly one reader (named in docs/contracts.md, "Records read back"), built on this module:

- ``load_json(raw, record)`` decodes JSON strictly: bounded size, bounded nesting depth, no
  ``NaN``/``Infinity`` (Python's ``json`` accepts them; JSON does not), no duplicate keys, UTF-8;
- the field checkers (``mapping``, ``integer``, ``number``, ``timestamp``, ``string``,
  ``listing``) check type and range, with ``bool`` never taken for a number;
- anything else raises ``RecordError`` naming the record and the field. A caller treats
  ``RecordError`` as "unreadable", and unreadable always means refuse or fail (never "empty",
  "expired" or "no attempts").

Lowest layer: no collection imports, no Ansible; copied to nodes with the agent.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import gc
import json
import math

# A record larger than this is not one of ours (the largest, a Node's annotations with a
# remediation history, stays under 64 KiB; the API server caps all annotations at 256 KiB).
MAX_BYTES = 256 * 1024
MAX_DEPTH = 16
# Plausible wall-clock times: 2020-01-01 .. 2100-01-01 (a stamp outside is damaged or from a
# clock that was never set; 0 is what an unset field reads as).
MIN_TIME = 1577836800.0
MAX_TIME = 4102444800.0


class RecordError(ValueError):
    """A record read back is unreadable: names the record (and the field) and why."""

    def __init__(self, record, reason, field=None):
        self.record = record
        self.field = field
        self.reason = reason
        where = "%s (field %s)" % (record, field) if field else record
        super(RecordError, self).__init__("unreadable record %s: %s" % (where, reason))


def _refuse_constant(name):
    raise ValueError("%s is not a JSON number" % name)


def _no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate key %r" % key)
        result[key] = value
    return result


def _depth_ok(text, limit):
    """True when no bracket nesting in ``text`` exceeds ``limit`` (strings skipped); iterative,
    so a hostile document cannot exhaust the stack before it is refused."""
    depth = 0
    in_string = False
    escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        elif char in "]}":
            depth -= 1
    return True


def load_json(raw, record, max_bytes=MAX_BYTES, max_depth=MAX_DEPTH):
    """Decode ``raw`` (bytes or str) as one strict JSON document of at most ``max_bytes`` bytes
    (UTF-8; a str is counted encoded); RecordError naming ``record`` otherwise."""
    if raw is None:
        raise RecordError(record, "absent")
    if isinstance(raw, bytes):
        if len(raw) > max_bytes:
            raise RecordError(record, "%d bytes, more than %d" % (len(raw), max_bytes))
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(record, "not UTF-8 (%s)" % exc)
    if not isinstance(raw, str):
        raise RecordError(record, "not text but %s" % type(raw).__name__)
    if len(raw) > max_bytes:  # more characters than bytes allowed: too large whatever they encode to
        raise RecordError(record, "%d characters, more than %d bytes" % (len(raw), max_bytes))
    size = len(raw.encode("utf-8", "surrogatepass"))  # the bound is in bytes, as the API server counts annotations
    if size > max_bytes:
        raise RecordError(record, "%d bytes, more than %d" % (size, max_bytes))
    if not _depth_ok(raw, max_depth):
        raise RecordError(record, "nested deeper than %d" % max_depth)
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise RecordError(record, "not JSON (%s)" % exc)
    _utf8_strings(value, record)
    return value


def loads(raw, record):
    """Decode ``raw`` (bytes, UTF-8) as one JSON document with ``load_json``'s strictness where it
    costs nothing beyond json's C decoder: no duplicate keys (the hook is called once per object), no
    ``NaN``/``Infinity``; RecordError naming ``record`` otherwise. For large answers already bounded
    in bytes while they were read (a page of the Node list, some MB): ``load_json``'s nesting walk and
    string walk are Python loops over every character, several times json's own time; the caller
    checks the fields it keeps with the checkers below.

    Python's cyclic garbage collector is paused while the document is decoded (and set back as it
    was, also on an error): a page of 500 Nodes makes about a million objects, none of them in a
    reference cycle (refcounting frees them), and every collection they trigger also walks the rest
    of the process. In Ansible's worker, which holds the inventory (10,000 hosts: millions of objects,
    inherited from the main process so each walk also copies their pages), the collections cost 4 of
    the 7 s of CPU the read of 20 pages took (docs/performance.md, "Fleet status from the Kubernetes API")."""
    with gc_paused():
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_no_duplicates)
        except UnicodeDecodeError as exc:
            raise RecordError(record, "not UTF-8 (%s)" % exc)
        except (ValueError, TypeError, RecursionError) as exc:
            raise RecordError(record, "not JSON (%s)" % exc)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off inside the block, then as it was (also on an error; left
    off when it was off). For work that makes many objects and no reference cycle (decoding JSON,
    reducing it): refcounting frees them, and no collection walks the rest of the process."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _utf8_strings(value, record):
    """Every string of ``value`` (keys too) is text UTF-8 can carry: a lone surrogate (``"\ud800"``,
    which JSON's escapes allow) would be read back but could never be written again."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordError(record, "not UTF-8 text (a lone surrogate in %r)" % item[:40])


def mapping(value, record, field=None, required=(), allowed=None):
    """``value`` must be a dict with string keys, holding every key of ``required`` and, when
    ``allowed`` is given, no key outside it."""
    if not isinstance(value, dict):
        raise RecordError(record, "not an object but %s" % type(value).__name__, field)
    for key in value:
        if not isinstance(key, str):
            raise RecordError(record, "key %r is not a string" % (key,), field)
    missing = [key for key in required if key not in value]
    if missing:
        raise RecordError(record, "missing %s" % ", ".join(missing), field)
    if allowed is not None:
        extra = sorted(key for key in value if key not in allowed)
        if extra:
            raise RecordError(record, "unknown key(s) %s" % ", ".join(extra), field)
    return value


def listing(value, record, field=None, max_items=10000):
    if not isinstance(value, list):
        raise RecordError(record, "not a list but %s" % type(value).__name__, field)
    if len(value) > max_items:
        raise RecordError(record, "%d items, more than %d" % (len(value), max_items), field)
    return value


def integer(value, record, field=None, minimum=None, maximum=None):
    """An int (never a bool, never a float) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(record, "not an integer: %r" % (value,), field)
    if minimum is not None and value < minimum:
        raise RecordError(record, "%d is below %d" % (value, minimum), field)
    if maximum is not None and value > maximum:
        raise RecordError(record, "%d is above %d" % (value, maximum), field)
    return value


def number(value, record, field=None, minimum=None, maximum=None):
    """A finite int or float (never a bool, NaN or infinity) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(record, "not a number: %r" % (value,), field)
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordError(record, "not a finite number: %r" % (value,), field)
    if minimum is not None and value < minimum:
        raise RecordError(record, "%r is below %r" % (value, minimum), field)
    if maximum is not None and value > maximum:
        raise RecordError(record, "%r is above %r" % (value, maximum), field)
    return value


def timestamp(value, record, field=None, now=None, future_slack=None):
    """A plausible epoch time in seconds; with ``now`` and ``future_slack``, not further than
    ``future_slack`` seconds in the future of ``now``."""
    value = number(value, record, field, MIN_TIME, MAX_TIME)
    if now is not None and future_slack is not None and value > now + future_slack:
        raise RecordError(record, "%r is %.0f s in the future" % (value, value - now), field)
    return value


def string(value, record, field=None, max_length=4096, choices=None, allow_empty=True):
    if not isinstance(value, str):
        raise RecordError(record, "not a string: %r" % (value,), field)
    if len(value) > max_length:
        raise RecordError(record, "%d characters, more than %d" % (len(value), max_length), field)
    if not allow_empty and not value:
        raise RecordError(record, "empty", field)
    if choices is not None and value not in choices:
        raise RecordError(record, "%r is not one of %s" % (value, ", ".join(sorted(choices))), field)
    return value


def boolean(value, record, field=None):
    if not isinstance(value, bool):
        raise RecordError(record, "not a boolean: %r" % (value,), field)
    return value


def is_decimal(text):
    """Whether ``text`` is a string of ASCII decimal digits only: ``int(text)`` then never raises
    (``"²".isdigit()`` and ``"٣".isdigit()`` are true; ``int("²")`` raises, ``int("٣")`` is 3)."""
    return isinstance(text, str) and text.isascii() and text.isdigit()
