# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time is checked, not trusted (docs/contracts.md, "Time"): the one rule for whether a dated thing
(an agent result in health.json, a Node condition's heartbeat) is fresh.

Every decision compares UTC epoch seconds (never local time: a TZ or DST change cannot change a
verdict); intervals inside one process use ``time.monotonic()``. A stamp dated in the future by
more than ``SKEW_TOLERANCE`` seconds is not fresh: it is *unknown* (a clock that was ahead when it
was written, or one set back since), so a stale result can never pass as current.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import math
import time

SKEW_TOLERANCE = 60.0  # seconds a stamp may lie ahead of this clock (NTP steps, two hosts' clocks)

FRESH = "fresh"
STALE = "stale"
FUTURE = "future"
UNKNOWN = "unknown"


def parse_utc(text):
    """Epoch seconds of an RFC 3339 UTC time with seconds (``2026-11-25T10:00:00Z``, metav1.Time);
    None when missing or unparsable. calendar.timegm: independent of the process's TZ."""
    try:
        return calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None


def utc_text(epoch):
    """RFC 3339 UTC seconds, the form of metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def finite_float(value):
    """A finite float from a number or its text; None for missing, non-numeric, NaN, infinite
    values and bools (the one such conversion: epochs here, bandwidths in filter fabric)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


as_epoch = finite_float  # an epoch stamp is usable when it is a finite number


def freshness(stamp, now, max_age, tolerance=SKEW_TOLERANCE):
    """(verdict, age seconds or None) of an epoch ``stamp`` at ``now``: ``fresh`` when
    0 - tolerance <= age <= max_age, ``stale`` when older, ``future`` when dated more than
    ``tolerance`` ahead of ``now``, ``unknown`` when there is no usable stamp."""
    stamp = as_epoch(stamp)
    if stamp is None:
        return UNKNOWN, None
    age = float(now) - stamp
    if age < -tolerance:
        return FUTURE, age
    if age > max_age:
        return STALE, age
    return FRESH, age


def describe(verdict, age, max_age):
    """A short text for a non-fresh verdict (for journal lines and check messages)."""
    if verdict == UNKNOWN:
        return "no usable time stamp"
    if verdict == FUTURE:
        return "dated %d s in the future (clock skew: this clock is behind the writer's, or was set back)" % (-age)
    if verdict == STALE:
        return "%d s old, more than %d s" % (age, max_age)
    return "%d s old" % max(age, 0)
