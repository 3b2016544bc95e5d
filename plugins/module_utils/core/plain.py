# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain trees: values made only of ``dict``, ``list`` and the scalars ``str``, ``int``, ``float``, ``bool`` and
``None`` -- exact types, keys included (a subclass, such as ansible-core's tagged ``str``, is not plain) -- with
no container in them twice: what a JSON decoder makes of a document. One test (``plain_tree``) and one copy
(``plain_copy``) for the places that skip ansible-core's generic walks over such a value, whose result for it
is a copy with the same values: the module's exit (``framework``) and the accelerated mode's controller
(``scripts/accelerated/gpufleet_mitogen_linear.py``). Any other value goes to ansible-core's own walk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PLAIN_SCALARS = frozenset((str, int, float, bool, type(None)))


class NotPlain(Exception):
    """A node that is not a plain container or scalar, or a container met twice."""


def plain_tree(value):
    """True when ``value`` is a plain tree (a plain scalar is one)."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return kind in PLAIN_SCALARS
    seen = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return False
        seen.add(id(node))
        if type(node) is dict:
            for key in node:
                if type(key) not in PLAIN_SCALARS:
                    return False
            items = node.values()
        else:
            items = node
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append(item)
            elif kind not in PLAIN_SCALARS:
                return False
    return True


def plain_copy(value):
    """``value`` in new dicts and lists (the keys and scalars themselves kept); raises ``NotPlain`` when it is not
    a plain tree, and ``RecursionError`` when it is nested deeper than Python's recursion limit allows."""
    return _copy(value, set())


def _copy(value, seen):
    kind = type(value)
    if kind is dict:
        if id(value) in seen:
            raise NotPlain()
        seen.add(id(value))
        copy = {}
        for key, item in value.items():
            if type(key) not in PLAIN_SCALARS:
                raise NotPlain()
            kind = type(item)
            if kind is dict or kind is list:
                copy[key] = _copy(item, seen)
            elif kind in PLAIN_SCALARS:
                copy[key] = item
            else:
                raise NotPlain()
        return copy
    if kind is list:
        if id(value) in seen:
            raise NotPlain()
        seen.add(id(value))
        copy = []
        for item in value:
            kind = type(item)
            if kind is dict or kind is list:
                copy.append(_copy(item, seen))
            elif kind in PLAIN_SCALARS:
                copy.append(item)
            else:
                raise NotPlain()
        return copy
    if kind in PLAIN_SCALARS:
        return value
    raise NotPlain()
