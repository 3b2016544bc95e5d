# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: inventory_vars_parsed
author: gpufleet contributors (@gpufleet)
version_added: 0.3.0
short_description: Its terms, once every group_vars / host_vars file of the inventory parses
description:
  - Parses every C(group_vars) / C(host_vars) file that Ansible would read for the inventory's groups
    and hosts (beside each inventory source and the playbook, found and parsed as the vars plugin
    C(host_group_vars) does), and fails naming each file that does not parse with its line and column.
  - Returns its terms unchanged when all parse. Every entry point's first play templates its
    C(hosts) (C(localhost:all)) with it, because a play's hosts are templated before any host's
    variables are loaded; ansible-core 2.19 reports a YAML error in a file it loads for a host
    without the file (only "YAML parsing failed"), and for C(group_vars/all) that ends the run
    before the inventory check can run (C(plugins/plugin_utils/inventory_files.py)).
  - Reads the variables C(ansible_inventory_sources), C(groups) and C(playbook_dir). A vaulted file is
    decrypted with the run's vault secrets; only parse errors are reported.
options:
  _terms:
    description: What to return when every file parses (the play's host pattern).
    required: true
"""

EXAMPLES = r"""
- name: Check the inventory
  hosts: "{{ lookup('gpufleet.cluster.inventory_vars_parsed', 'localhost:all') }}"
  gather_facts: false
  tasks: []
"""

RETURN = r"""
_raw:
  description: The terms, unchanged.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_files


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        problems = inventory_files.unparsable_vars_files(
            self._loader, variables.get("ansible_inventory_sources"), variables.get("groups"),
            variables.get("playbook_dir"))
        if problems:
            # the message starts with the first file (Ansible puts "Error processing keyword 'hosts': The
            # lookup plugin ... failed:" before it); one file per line
            raise AnsibleLookupError("%s\n%s inventory file(s) cannot be read. No host was contacted or changed."
                                     % ("\n".join(problems), len(problems)))
        return list(terms)
