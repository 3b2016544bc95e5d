# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # The root option of the read-only modules (gpufleet.cluster.validation): the documentation of
    # module_utils/core/validation.py COMMON_OPTIONS["root"], the one declaration every validation
    # module's argument spec merges. Type and default are the same everywhere. A module whose reads need naming (which trees
    # below root, what is not redirected) keeps its own root description; when an option is
    # documented both here and in the module, the module's keys win and the others come from here.
    DOCUMENTATION = r"""
options:
  root:
    description:
      - Directory used as the filesystem root for every file the module reads (C(<root>/sys/...)).
      - Point it at a fixture tree or a mounted node image for offline inspection.
    type: path
    default: /
"""

    # fail_on of the modules returning checks (gpufleet.cluster.validation.fail_on): the
    # documentation of COMMON_OPTIONS["fail_on"], its choices taken from the one list,
    # checks.FAIL_ON_CHOICES; applied by the one exit path, checks.exit_with_checks.
    FAIL_ON = r"""
options:
  fail_on:
    description:
      - V(fail) fails the module when any check fails, V(warn) also on warnings, V(never) always
        returns ok. The full result is returned either way.
    type: str
    default: fail
    choices: [fail, warn, never]
"""
