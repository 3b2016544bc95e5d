# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: role_inputs_hash
author: gpufleet contributors (@gpufleet)
version_added: 0.3.0
short_description: Hash of everything a gpufleet role's run depends on, for the converged-role skip
description:
  - Returns one SHA-256 hex digest per role name. The digest covers the role's pinned inputs on
    this host, so an equal digest means the same role, with the same inputs, on the same system
    -- the role's own files and those of C(common_internal) (tasks, defaults, vars, templates), the
    collection's plugins and C(galaxy.yml) (code and version), the values of every variable named
    C(<role>_*) but C(<role>_managed_state) (templated; role outputs set later in a run are not
    seen, because the digest is taken once, before the roles run), every C(gpufleet_*) tier variable (the inventory's value,
    else the tier default), the host's groups, and the facts C(kernel), C(distribution),
    C(distribution_version) and C(architecture) (a reboot into another kernel or an OS upgrade
    changes the digest).
  - Used by C(common_internal)'s entry points C(state_read) and C(state_write)
    (docs/performance.md, "Converged-role skip"); not meant for other uses. An equal digest alone
    never skips a role, the module C(role_state) also verifies on the node what the role manages.
options:
  _terms:
    description: Role names (directories under C(roles/) of the collection).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Digest of nvidia_driver's inputs on this host
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.cluster.role_inputs_hash', 'nvidia_driver') }}"
"""

RETURN = r"""
_raw:
  description: One hex digest (64 characters) per term.
  type: list
  elements: str
"""

import functools
import hashlib
import json
import os
import re

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER, tier_default

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
FACTS = ("kernel", "distribution", "distribution_version", "architecture")
SKIPPED_DIRS = ("__pycache__", "molecule", "tests")


def tree_digest(paths):
    """SHA-256 of the relative names and contents of every file below ``paths`` (sorted)."""
    digest = hashlib.sha256()
    for top in paths:
        if os.path.isfile(top):
            digest.update(os.path.relpath(top, COLLECTION).encode("utf-8") + b"\0")
            with open(top, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
            continue
        for directory, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for name in sorted(files):
                if name.endswith((".pyc", ".retry")):
                    continue
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, COLLECTION).encode("utf-8") + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def _value(templar, variables, name):
    """The templated value of ``name``; its raw text when it cannot be templated here."""
    try:
        return templar.template(variables[name])
    except Exception:  # pylint: disable=broad-except
        return "untemplatable:%r" % (variables[name],)


def inputs_hash(templar, variables, role, collection=COLLECTION):
    role_dir = os.path.join(collection, "roles", role)
    if not ROLE_NAME.match(role or "") or not os.path.isdir(role_dir):
        raise AnsibleLookupError("role_inputs_hash: %r is not a role of this collection (%s)"
                                 % (role, os.path.join(collection, "roles")))
    variables = variables or {}
    prefix = role + "_"
    # <role>_managed_state is the role's output (what it manages, for the stamp's snapshot), not an input
    role_vars = dict((name, _value(templar, variables, name)) for name in sorted(variables)
                     if name.startswith(prefix) and name != prefix + "managed_state")
    tier = {}
    inventory = functools.lru_cache(maxsize=None)(lambda: (  # templated once, and only if a default needs it
        _value(templar, variables, "groups") if "groups" in variables else {},
        _value(templar, variables, "inventory_hostname") if "inventory_hostname" in variables else None))
    for name in sorted(TIER):
        value = _value(templar, variables, name) if name in variables else None
        tier[name] = tier_default(name, inventory) if value is None else value
    facts = _value(templar, variables, "ansible_facts") if "ansible_facts" in variables else {}
    facts = facts if isinstance(facts, dict) else {}
    group_names = _value(templar, variables, "group_names") if "group_names" in variables else []
    document = {
        "code": tree_digest([role_dir, os.path.join(collection, "roles", "common_internal"),
                             os.path.join(collection, "plugins"), os.path.join(collection, "galaxy.yml")]),
        "role": role,
        "vars": role_vars,
        "tier": tier,
        "groups": sorted(group_names or []),
        "facts": dict((name, facts.get(name)) for name in FACTS),
    }
    text = json.dumps(document, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [inputs_hash(self._templar, variables, term) for term in terms]
