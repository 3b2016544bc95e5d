# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter converged_roles: the converged-role skip of common_internal's state_read."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def converged_roles(stamps, roles, digests):
    """The longest prefix of ``roles`` (in play order) whose stamp in ``stamps`` ({role: {"inputs":
    digest}}) records the digest in ``digests`` ({role: digest}). A prefix, not a subset: a role
    after one that runs again (its inputs changed) runs too, since it may build on what the
    earlier one changes (the container runtime's CDI spec on the driver, nvidia-peermem on
    driver and OFED)."""
    if not isinstance(stamps, dict):
        stamps = {}
    if not isinstance(digests, dict):
        raise AnsibleFilterError("converged_roles: the digests must be a dict {role: digest}, got %s"
                                 % type(digests).__name__)
    converged = []
    for role in roles or []:
        stamp = stamps.get(role)
        recorded = stamp.get("inputs") if isinstance(stamp, dict) else None
        if not recorded or recorded != digests.get(role):
            break
        converged.append(role)
    return converged


class FilterModule(object):
    def filters(self):
        return {"converged_roles": converged_roles}
