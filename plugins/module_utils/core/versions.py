# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one version parser and comparator of the collection.

A version is parsed into a tuple of ints (``parse_version``): an optional epoch (``1:``) and ``v``
are dropped, then the dotted ASCII numbers are taken and whatever follows them is not part of the
version (``6.1.0-27-amd64`` -> (6, 1, 0), ``1:1.7.24~ds1-1`` -> (1, 7, 24)). Every comparison goes
through ``compare_versions``: missing trailing components count as 0 (``1.36`` == ``1.36.0``).
Bad input is one error everywhere: ``ValueError("not a version: <value>")``.

Forms that need their own normalisation first (OFED's ``MLNX_OFED_LINUX-5.8-1.0.1.1``, whose
``-`` separates components) are normalised by their module (``ofed.version_tuple``) and handed
here as parsed tuples. ``version_matches`` (a driver branch ``580`` matches ``580.95.05``) is a
prefix match on the same parsed tuples.

Used on the node (gpu_checks, rdma_checks, ofed) and on the controller (plugin_utils/compatibility,
the ofed filters): this file imports nothing from plugin_utils or the filters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_VERSION = re.compile(r"^\s*(?:[0-9]+:)?[vV]?([0-9]+(?:\.[0-9]+)*)")
_SHOWN = 80  # characters of a bad value shown in the error
_DIGITS = 18  # digits of one component at most (fits a 64-bit integer)


def not_a_version(value, detail=""):
    """The one error for a value that is not a version: ValueError("not a version: <value>")."""
    text = repr(value)
    return ValueError("not a version: %s%s" % (text if len(text) <= _SHOWN else text[:_SHOWN] + "...", detail))


def parse_version(value):
    """``value`` (text, int, float, or a tuple of ints already parsed) as a tuple of ints:
    "580" -> (580,), "v3.32.0" -> (3, 32, 0), "2.1.4-1" -> (2, 1, 4), 1.36 -> (1, 36).
    Raises ValueError naming the value when it is not a version."""
    if isinstance(value, tuple):
        if value and all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in value):
            return value
        raise not_a_version(value)
    if isinstance(value, bool) or value is None:
        raise not_a_version(value)
    if isinstance(value, (int, float)):
        value = repr(value)
    if not isinstance(value, str):
        raise not_a_version(value)
    match = _VERSION.match(value)
    if not match:
        raise not_a_version(value)
    parts = match.group(1).split(".")
    if any(len(part) > _DIGITS for part in parts):  # no version has such numbers (and int() may refuse them)
        raise not_a_version(value, " (a component is too long)")
    return tuple(int(part) for part in parts)


def compare_versions(left, right):
    """-1, 0 or 1 comparing two versions (text or parsed tuples); missing trailing components
    count as 0 ("1.36" == "1.36.0"). Raises ValueError naming a value that is not a version."""
    a, b = parse_version(left), parse_version(right)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def version_matches(version, expected):
    """Component-wise prefix match on the parsed versions: "580" and "580.95" match "580.95.05",
    "58" and "580.9" do not. Raises ValueError naming a value that is not a version."""
    have, want = parse_version(version), parse_version(expected)
    return len(want) <= len(have) and have[:len(want)] == want
