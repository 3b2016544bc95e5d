# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters converged_plan and converged_roles: the converged-role skip of common_internal's state_read."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def converged_plan(stamps, roles, digests):
    """Which of ``roles`` (play order) a play may skip, and why each other one runs.

    ``stamps`` is module role_state's ``roles`` result ({role: {"inputs": digest, "verified":
    bool, "drift": [...]}}): a role is skipped only when its stamp records today's digest (from
    ``digests``, {role: digest}) AND its snapshot was verified on the node with no drift (fail
    closed: a stamp without ``verified: true`` is never trusted). Only a prefix is skipped: a
    role after one that runs runs too, since it may build on what the earlier one changes (the
    container runtime's CDI spec on the driver, nvidia-peermem on driver and OFED).

    Returns {"converged": [roles skipped], "run": {role: reason}, "message": one line}."""
    if not isinstance(stamps, dict):
        stamps = {}
    if not isinstance(digests, dict):
        raise AnsibleFilterError("converged_roles: the digests must be a dict {role: digest}, got %s"
                                 % type(digests).__name__)
    converged, run, first = [], {}, None
    for role in roles or []:
        stamp = stamps.get(role)
        stamp = stamp if isinstance(stamp, dict) else {}
        recorded = stamp.get("inputs")
        drift = stamp.get("drift") if isinstance(stamp.get("drift"), list) else []
        # every reason that applies: drift is named even when the inputs changed too
        reasons = []
        if first is not None:
            reasons.append("after %s" % first)
        if not stamp:
            reasons.append("no stamp (first run, or an earlier run did not finish it)")
        else:
            if not recorded or recorded != digests.get(role):
                reasons.append("inputs changed")
            if drift:
                reasons.append("drift: %s" % "; ".join(str(item) for item in drift))
            elif stamp.get("verified") is not True:
                reasons.append("not verified on the node")
        if not reasons:
            converged.append(role)
            continue
        first = first or role
        run[role] = "; ".join(reasons)
    parts = []
    if converged:
        parts.append("skipped %s (converged, verified on the node)" % ", ".join(converged))
    if run:
        parts.append("runs " + ", ".join("%s (%s)" % (role, run[role]) for role in roles if role in run))
    return {"converged": converged, "run": run,
            "message": "converged-role skip: " + ("; ".join(parts) if parts else "no role in this play")}


def converged_roles(stamps, roles, digests):
    """The roles of ``converged_plan`` a play skips (a prefix of ``roles``)."""
    return converged_plan(stamps, roles, digests)["converged"]


class FilterModule(object):
    def filters(self):
        return {"converged_roles": converged_roles, "converged_plan": converged_plan}
