# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Package plans: which packages a role installs at which version (``package_plan``).

The roles used to compute their install requests with nested Jinja ternaries (``map('regex_replace',
'$', '=' ~ version ~ '-*')`` when a version is set, else the names, plus the unversioned ones);
this filter is that arithmetic in one place, unit-tested (tests/unit/test_package_plan.py).
Documentation lives next to this file in ``package_plan.yml``.
"""

from __future__ import absolute_import, division, print_function

import re

from ansible.errors import AnsibleFilterError

PACKAGE_MANAGERS = ("apt", "dnf")


def _names(value, what, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise AnsibleFilterError("package_plan: %s must be a list of package names, got %r" % (what, value))
    names = []
    for name in value:
        if not isinstance(name, str) or not name or any(char.isspace() for char in name):
            raise AnsibleFilterError("package_plan: %s: %r is not a package name" % (what, name))
        names.append(name)
    return names


def _word(value, what):
    if value is None:
        return ""
    if not isinstance(value, str) or any(char.isspace() for char in value):
        raise AnsibleFilterError("package_plan: %s must be a string without whitespace, got %r" % (what, value))
    return value


def package_plan(packages, pkg_mgr, version="", glob="", only=None, exclude=None, extra=None):
    """The install request of a role.

    Each package of ``packages`` is *pinned* (installed at ``version``) unless ``only`` is given
    and does not name it, or it matches the regular expression ``exclude``; ``extra`` packages are
    never pinned. With an empty ``version`` nothing carries a version. A pinned package is written
    ``name=<version><glob>`` for apt and ``name-<version>`` for dnf (``glob`` is apt's wildcard,
    e.g. ``-*`` for any Debian revision). Returns ``packages`` (the request: pinned specs, then the
    others, each in input order), ``pinned`` and ``unpinned`` (names).
    """
    names = _names(packages, "the package list")
    if pkg_mgr not in PACKAGE_MANAGERS:
        raise AnsibleFilterError("package_plan: the package manager must be one of %s, got %r"
                                 % (", ".join(PACKAGE_MANAGERS), pkg_mgr))
    version = _word(version, "the version")
    glob = _word(glob, "glob")
    only = _names(only, "only", allow_none=True)
    extra = _names([] if extra is None else extra, "extra")
    if exclude in (None, ""):
        excluded = None
    else:
        if not isinstance(exclude, str):
            raise AnsibleFilterError("package_plan: exclude must be a regular expression string, got %r" % (exclude,))
        try:
            excluded = re.compile(exclude)
        except re.error as exc:
            raise AnsibleFilterError("package_plan: exclude %r is not a regular expression: %s" % (exclude, exc))

    pinned, unpinned = [], []
    for name in names:
        if (only is not None and name not in only) or (excluded is not None and excluded.search(name)):
            unpinned.append(name)
        else:
            pinned.append(name)
    unpinned.extend(extra)

    if not version:
        specs = list(pinned)
    elif pkg_mgr == "apt":
        specs = ["%s=%s%s" % (name, version, glob) for name in pinned]
    else:
        specs = ["%s-%s" % (name, version) for name in pinned]
    return {"packages": specs + unpinned, "pinned": pinned, "unpinned": unpinned}


class FilterModule(object):
    def filters(self):
        return {"package_plan": package_plan}
