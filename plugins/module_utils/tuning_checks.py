# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tuning family of node_validate: drift of OS tuning from what was configured (docs/contracts.md,
"Tuning family").

Read-only, every check opt-in: an option left unset adds no check (so a node_validate run that
configures none returns the gpu and rdma checks only; readiness shows ``tuning: skip (no checks)``). A reading that is impossible
(file missing, unreadable, not a number) fails the check: drift cannot be ruled out.

- ``tuning.hugepages`` (targets ``2048kB``, ``1048576kB``): ``/sys/kernel/mm/hugepages/hugepages-<size>/nr_hugepages``
  against ``hugepages_2m`` / ``hugepages_1g``; fewer pages than configured fail, more warn.
- ``tuning.tuned_profile`` (target ``node``): the profile tuned records as active in
  ``/etc/tuned/active_profile`` against ``tuned_profile``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import CheckResults
from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import Family, FamilyResult

TUNING_OPTIONS = {
    "hugepages_2m": {"type": "int"},
    "hugepages_1g": {"type": "int"},
    "tuned_profile": {"type": "str"},
}
HUGEPAGE_SIZES = (("hugepages_2m", "2048kB"), ("hugepages_1g", "1048576kB"))
TUNED_ACTIVE_PROFILE = "etc/tuned/active_profile"
# tuned profile names: letters, digits, '-', '_', '.'; several profiles merge with spaces.
_PROFILE = re.compile(r"^[A-Za-z0-9_.-]{1,64}( [A-Za-z0-9_.-]{1,64}){0,7}$")


def validate_options(options, prefix=""):
    errors = []
    for name, _size in HUGEPAGE_SIZES:
        value = options.get(name)
        if value is not None and value < 0:
            errors.append("option %s%s: must be >= 0, got %d" % (prefix, name, value))
    profile = options.get("tuned_profile")
    if profile is not None and not _PROFILE.match(profile):
        errors.append("option %s%s: %r is not a tuned profile name (letters, digits, '-', '_', '.'; "
                      "several separated by one space)" % (prefix, "tuned_profile", profile))
    return errors


def _check_hugepages(checks, reader, options):
    for name, size in HUGEPAGE_SIZES:
        expected = options.get(name)
        if expected is None:
            continue
        path = "sys/kernel/mm/hugepages/hugepages-%s/nr_hugepages" % size
        observed = reader.read_int(path)
        if observed is None:
            checks.fail("tuning.hugepages", size, "cannot read /%s (kernel without %s pages or unreadable); "
                        "%d configured" % (path, size, expected), observed=None, expected=expected)
        elif observed < expected:
            checks.fail("tuning.hugepages", size, "%d of %d configured %s huge pages allocated"
                        % (observed, expected, size), observed=observed, expected=expected)
        elif observed > expected:
            checks.warn("tuning.hugepages", size, "%d %s huge pages allocated, %d configured"
                        % (observed, size, expected), observed=observed, expected=expected)
        else:
            checks.passed("tuning.hugepages", size, "%d %s huge pages allocated as configured" % (observed, size),
                          observed=observed, expected=expected)


def _check_tuned_profile(checks, reader, options):
    expected = options.get("tuned_profile")
    if expected is None:
        return
    observed = reader.read(TUNED_ACTIVE_PROFILE)
    if observed is None:
        checks.fail("tuning.tuned_profile", "node", "cannot read /%s (tuned not installed or no profile "
                    "applied); %s configured" % (TUNED_ACTIVE_PROFILE, expected), observed=None, expected=expected)
    elif observed.split() != expected.split():
        checks.fail("tuning.tuned_profile", "node", "tuned profile %r active, %r configured" % (observed, expected),
                    observed=observed, expected=expected)
    else:
        checks.passed("tuning.tuned_profile", "node", "tuned profile %s active" % observed,
                      observed=observed, expected=expected)


def validate_tuning(reader, options):
    """CheckResults of the tuning family."""
    checks = CheckResults()
    _check_hugepages(checks, reader, options)
    _check_tuned_profile(checks, reader, options)
    return checks


def run(ctx, options):
    return FamilyResult(validate_tuning(ctx.reader, options))


# Every check id of the family (the node health agent validates its hysteresis settings against them).
CHECK_IDS = ("tuning.hugepages", "tuning.tuned_profile")

FAMILY = Family("tuning", TUNING_OPTIONS, validate_options, run)
