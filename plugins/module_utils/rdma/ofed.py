# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OFED / mlx5_core version strings: parsing, normalising, comparing, matching.

Shared by the mlx5_facts and rdma_validate modules and by the ``ofed_*`` filter plugins.

Version forms met in the field::

    ofed_info -s      MLNX_OFED_LINUX-5.8-1.0.1.1:          -> 5.8-1.0.1.1        (mlnx_ofed)
                      OFED-internal-24.10-1.1.4.0.200:      -> 24.10-1.1.4.0.200  (doca_ofed)
    modinfo/sysfs     version:        24.10-1.1.4           -> 24.10-1.1.4
    deb package       24.10.OFED.24.10.1.1.4.1-1            -> 24.10-1.1.4.1
    inbox driver      5.0-0  (or no version at all)

Versions compare as tuples of integers (``5.9`` < ``23.04``) through the collection's one
comparator, ``versions.compare_versions`` (missing trailing components count as 0); a value that is
not a version is a ValueError naming it. The loaded mlx5_core reports the
package version without its last component(s): ``23.10-1.1.9.0`` installed shows as
``23.10-1.1.9`` loaded, DOCA ``24.10-1.1.4.0.200`` as ``24.10-1.1.4``.
"""

from __future__ import absolute_import, division, print_function

import re
from functools import cmp_to_key

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.versions import (
    compare_versions,
    not_a_version,
    parse_version,
    version_matches,
)

FLAVORS = {
    "MLNX_OFED_LINUX": "mlnx_ofed",
    "OFED-internal": "doca_ofed",
}

# Number of components the loaded mlx5_core version carries: major.minor-a.b.c
DRIVER_COMPONENTS = 5

_OFED_INFO_LINE = re.compile(
    r"^\s*(MLNX_OFED_LINUX|OFED-internal)-(\d[0-9A-Za-z.\-_]*?)\s*(?:\([^)]*\))?\s*:?\s*$")
_PREFIXES = re.compile(r"^(?:MLNX_OFED_LINUX-|OFED-internal-|mlnx-ofed-kernel-|mlnx-ofed-|OFED-|version:\s*)",
                       re.IGNORECASE)
_DEB_OFED = re.compile(r"(?:^|[.\-])OFED\.(\d+)\.(\d+)\.(\d[\d.]*)", re.IGNORECASE)
_VERSION = re.compile(r"\d+(?:[.\-]\d+)*")


def parse_ofed_info(output):
    """Parse ``ofed_info -s`` output into ``(package_version, flavor)``; (None, None) if unknown."""
    if not output:
        return None, None
    for line in str(output).splitlines():
        match = _OFED_INFO_LINE.match(line)
        if match:
            version = match.group(2).rstrip(".-:")
            return version, FLAVORS.get(match.group(1))
    return None, None


def normalize_version(value):
    """Normalise an ofed_info / modinfo / package string to a bare version, or None.

    ``MLNX_OFED_LINUX-5.8-1.0.1.1:`` -> ``5.8-1.0.1.1``; ``version: 24.10-1.1.4`` -> ``24.10-1.1.4``;
    ``24.10.OFED.24.10.1.1.4.1-1`` (Debian package) -> ``24.10-1.1.4.1``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    package = _DEB_OFED.search(text)
    if package:
        return "%s.%s-%s" % (package.group(1), package.group(2), package.group(3).rstrip("."))
    for line in text.splitlines():
        version, _flavor = parse_ofed_info(line)
        if version:
            return version
    text = text.splitlines()[0].strip()
    text = _PREFIXES.sub("", text).strip().rstrip(":").strip()
    match = _VERSION.search(text)
    if not match:
        return None
    return match.group(0)


def version_tuple(value):
    """Integer tuple of an OFED version string (``5.8-1.0.1.1`` -> (5, 8, 1, 0, 1, 1)): the
    OFED normalisation (``normalize_version``; ``-`` separates components too), then the one
    parser, ``versions.parse_version``. Raises ValueError naming the value when it is not one."""
    version = normalize_version(value)
    if version is None:
        raise not_a_version(value)
    try:
        return parse_version(version.replace("-", "."))
    except ValueError:
        raise not_a_version(value)


def _known(value):
    """version_tuple(value), or None where None means "unknown" (a fact, a filter's answer)."""
    try:
        return version_tuple(value)
    except ValueError:
        return None


def driver_at_least(loaded, minimum):
    """Whether the loaded driver version meets ``minimum``; ValueError naming a side that is not a
    version.

    A loaded mlx5_core cannot show components beyond its own length, so a longer minimum is
    cut to the loaded version's length (``24.10-1.1.4`` meets ``24.10-1.1.4.0.200``).
    """
    a = version_tuple(loaded)
    b = version_tuple(minimum)
    if len(b) > len(a) and len(a) >= DRIVER_COMPONENTS:
        b = b[:len(a)]
    return compare_versions(a, b) >= 0


def loaded_matches_installed(loaded, installed):
    """Whether a loaded mlx5_core version belongs to an installed OFED package version.

    Equal versions match; so does a loaded version equal to the package version without its
    last component (``23.10-1.1.9`` <-> ``23.10-1.1.9.0``) and, for DOCA build suffixes, any
    shorter prefix down to the five components mlx5_core reports (``24.10-1.1.4`` <->
    ``24.10-1.1.4.0.200``). None when either side is unknown (not a version).
    """
    a = _known(loaded)
    b = _known(installed)
    if a is None or b is None:
        return None
    if a == b:
        return True
    if len(a) < len(b) and version_matches(b, a):
        return len(a) == len(b) - 1 or len(a) >= DRIVER_COMPONENTS
    return False


_OPERATORS = {
    "<": lambda c: c < 0, "lt": lambda c: c < 0,
    "<=": lambda c: c <= 0, "le": lambda c: c <= 0,
    "==": lambda c: c == 0, "=": lambda c: c == 0, "eq": lambda c: c == 0,
    "!=": lambda c: c != 0, "<>": lambda c: c != 0, "ne": lambda c: c != 0,
    ">=": lambda c: c >= 0, "ge": lambda c: c >= 0,
    ">": lambda c: c > 0, "gt": lambda c: c > 0,
}
OPERATORS = tuple(sorted(_OPERATORS))


def version_compare(left, operator, right):
    """``left <operator> right`` on integer tuples. Raises ValueError on bad input."""
    if operator not in _OPERATORS:
        raise ValueError("unknown operator %r (use one of %s)" % (operator, ", ".join(OPERATORS)))
    return _OPERATORS[operator](compare_versions(version_tuple(left), version_tuple(right)))


def best_match(host_version, available):
    """Pick the user-space version that fits a host driver version (as NGC entrypoints do).

    Order of preference: the exact version; a version equal to the host's once the last
    component is dropped from either side (``23.10-1.1.9`` <-> ``23.10-1.1.9.0``); the highest
    version with the same major.minor. Returns the item of ``available`` as given, or None.
    """
    host = _known(host_version)
    if host is None or not available:
        return None
    candidates = []
    for item in available:
        parsed = _known(item)
        if parsed is not None:
            candidates.append((parsed, item))
    for parsed, item in candidates:
        if parsed == host:
            return item
    for parsed, item in candidates:
        if parsed[:-1] == host or host[:-1] == parsed:
            return item
    same_minor = [c for c in candidates if c[0][:2] == host[:2] and len(host) >= 2]
    if same_minor:
        return max(same_minor, key=cmp_to_key(lambda x, y: compare_versions(x[0], y[0])))[1]
    return None
