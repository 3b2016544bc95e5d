# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The burn-in settings (module gpu_burnin's options as a policy): one place of their defaults and
their checks, shared by the admission burn-in (tier variable ``gpufleet_burnin``, docs/node-lifecycle.md)
and the remediation's ``gpufleet_remediation.burn_in`` (docs/remediation.md).

Keys: ``enabled`` (bool), ``dcgm_level`` (``dcgmi diag -r`` 1..4), ``dcgm_tests`` (test names instead
of a level), ``dcgm_parameters`` (``dcgmi diag -p``), ``timeout`` (seconds, > 0 and at most
MAX_TIMEOUT: seven days; a larger wait cannot be taken by the module's clock), ``nccl_command``
(a single-node nccl-tests argv; empty: no NCCL run), ``nccl_min_busbw_gbps`` (> 0 or None).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math

DEFAULTS = {"enabled": True, "dcgm_level": 2, "dcgm_tests": [], "dcgm_parameters": "", "timeout": 1800,
            "nccl_command": [], "nccl_min_busbw_gbps": None}
MAX_TIMEOUT = 7 * 24 * 3600  # seconds: no burn-in takes a week; 1e20 or 2**63 crash the module's wait


class SettingsError(ValueError):
    """Bad burn-in settings; the message names ``<variable>.<key>``."""


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SettingsError("%s must be a number > 0, got %r" % (name, value))


def settings(value, variable):
    """The effective burn-in settings: ``value`` (a mapping, None: unset) over DEFAULTS, checked.
    SettingsError naming ``<variable>.<key>`` (``variable`` e.g. ``gpufleet_burnin`` or
    ``gpufleet_remediation.burn_in``)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SettingsError("%s must be a mapping, got %s" % (variable, type(value).__name__))
    unknown = sorted(set(map(str, value)) - set(DEFAULTS))
    if unknown:
        raise SettingsError("%s: unknown key(s) %s (known: %s)" % (
            variable, ", ".join(unknown), ", ".join(sorted(DEFAULTS))))
    merged = copy.deepcopy(DEFAULTS)
    merged.update(copy.deepcopy(value))
    if not isinstance(merged["enabled"], bool):
        raise SettingsError("%s.enabled must be true or false, got %r" % (variable, merged["enabled"]))
    if isinstance(merged["dcgm_level"], bool) or merged["dcgm_level"] not in (1, 2, 3, 4):
        raise SettingsError("%s.dcgm_level must be 1, 2, 3 or 4, got %r" % (variable, merged["dcgm_level"]))
    _positive(merged["timeout"], "%s.timeout" % variable)
    if merged["timeout"] > MAX_TIMEOUT:
        raise SettingsError("%s.timeout must be at most %d seconds (7 days), got %r"
                            % (variable, MAX_TIMEOUT, merged["timeout"]))
    for key in ("dcgm_tests", "nccl_command"):
        if not isinstance(merged[key], list) or not all(isinstance(item, str) and item for item in merged[key]):
            raise SettingsError("%s.%s must be a list of strings" % (variable, key))
    if merged["dcgm_parameters"] is None:
        merged["dcgm_parameters"] = ""
    if not isinstance(merged["dcgm_parameters"], str):
        raise SettingsError("%s.dcgm_parameters must be a string, got %r" % (variable, merged["dcgm_parameters"]))
    if merged["nccl_min_busbw_gbps"] is not None:
        _positive(merged["nccl_min_busbw_gbps"], "%s.nccl_min_busbw_gbps" % variable)
    return merged
