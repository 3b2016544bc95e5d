# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OFED version and InfiniBand rate filters.

Documentation of each filter lives next to this file in ``<filter>.yml``.
"""

from __future__ import absolute_import, division, print_function


from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import parse_rate
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import (
    best_match,
    normalize_version,
    version_compare,
)


def ofed_version(value):
    """Bare version of an ofed_info / modinfo / package string, or None."""
    return normalize_version(value)


def ofed_version_compare(left, operator, right):
    """``left <operator> right`` comparing OFED versions as integer tuples."""
    try:
        return version_compare(left, operator, right)
    except ValueError as exc:
        raise AnsibleFilterError("ofed_version_compare: %s" % exc)


def ofed_best_match(host_driver_version, available_versions):
    """The user-space version from ``available_versions`` that fits the host driver, or None."""
    if available_versions is None:
        return None
    if isinstance(available_versions, (str, bytes)) or not hasattr(available_versions, "__iter__"):
        raise AnsibleFilterError("ofed_best_match: available_versions must be a list of versions, got %s"
                                 % type(available_versions).__name__)
    return best_match(host_driver_version, list(available_versions))


def ib_rate_gbps(value):
    """``400 Gb/sec (4X NDR)`` -> 400.0; numbers pass through as floats; None on garbage."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    rate, _width, _speed = parse_rate(value)
    return rate


class FilterModule(object):
    def filters(self):
        return {
            "ofed_version": ofed_version,
            "ofed_version_compare": ofed_version_compare,
            "ofed_best_match": ofed_best_match,
            "ib_rate_gbps": ib_rate_gbps,
        }
