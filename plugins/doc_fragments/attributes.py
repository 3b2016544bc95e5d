# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # What the attributes mean (gpufleet.cluster.attributes). A module states its own support
    # and details, or adds READ_ONLY.
    DOCUMENTATION = r"""
options: {}
notes:
  - The collection's module_utils are compiled once per node, not on every run. The module copies them
    from its payload to C($XDG_CACHE_HOME/gpufleet/module_utils/<content hash>) (default C(~/.cache)) of
    the user it runs as, mode 0700, and Python keeps their bytecode there. Copies not used for 7 days are
    removed when a new one is made. Nothing is written when E(PYTHONDONTWRITEBYTECODE) is set in the
    task's environment; a problem with the directory leaves the imports in the payload (docs/performance.md).
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Returns details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
"""

    # Together with DOCUMENTATION, for a module returning facts
    # (gpufleet.cluster.attributes.facts); the module states support and which facts in details.
    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that updates existing host facts.
"""

    # Together with DOCUMENTATION, for a module that changes nothing
    # (gpufleet.cluster.attributes.read_only).
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - The module changes nothing, so check mode returns the same result as a normal run.
  diff_mode:
    support: none
    details:
      - Nothing is changed, so there is no diff.
"""
