# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain trees: values made only of ``dict``, ``list`` and the scalars ``str``, ``int``, ``float``, ``bool`` and
``None`` -- exact types, keys included (a subclass, such as ansible-core's tagged ``str``, is not plain, and a
type is compared by identity: a class that compares or hashes like ``str`` is not ``str``) -- with no container
in them twice and at most ``MAX_DEPTH`` containers deep: what a JSON decoder makes of a module's result. One
walk (``plain_containers``), the test over it (``plain_tree``) and one copy (``plain_copy``) for the places that
skip ansible-core's generic walks over such a value, whose result for it is a copy with the same values: the
module's exit (``framework``) and the accelerated mode's controller (``scripts/accelerated/
gpufleet_mitogen_linear.py``). Any other value -- deeper ones too, so that ansible-core's own recursion limits
decide for them -- goes to ansible-core's walk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PLAIN_SCALARS = (str, int, float, bool, type(None))
# identities, not the types: a set lookup of a type compares with ==, which a metaclass can answer
PLAIN_SCALAR_IDS = frozenset(id(kind) for kind in PLAIN_SCALARS)
# containers deep, the outermost at 1: far above any module result (node_validate's: 5), far below where
# ansible-core's recursive walks give up (its data-tagging visitor: a few hundred levels)
MAX_DEPTH = 64


class NotPlain(Exception):
    """A node that is not a plain container or scalar, a container met twice, or one nested too deep."""


def plain_containers(value):
    """Each dict and list of the plain tree ``value``, outermost first. A dict's keys are checked before it is
    given, the values of a container after it is given back. Raises ``NotPlain`` at the first node that is not
    plain, a container met twice or one deeper than ``MAX_DEPTH``. A plain scalar gives nothing."""
    kind = type(value)
    if kind is not dict and kind is not list:
        if id(kind) in PLAIN_SCALAR_IDS:
            return
        raise NotPlain()
    seen = set()
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > MAX_DEPTH:
            raise NotPlain()
        seen.add(id(node))
        if type(node) is dict:  # pylint: disable=unidiomatic-typecheck  # exact: a subclass is not plain
            for key in node:
                if id(type(key)) not in PLAIN_SCALAR_IDS:
                    raise NotPlain()
            yield node
            items = node.values()
        else:
            yield node
            items = node
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif id(kind) not in PLAIN_SCALAR_IDS:
                raise NotPlain()


def plain_tree(value):
    """True when ``value`` is a plain tree (a plain scalar is one)."""
    try:
        for _node in plain_containers(value):
            pass
    except NotPlain:
        return False
    return True


def plain_copy(value, int_bits=None):
    """``value`` in new dicts and lists (the keys and scalars themselves kept); raises ``NotPlain`` when it is not
    a plain tree, or (``int_bits`` given) holds an int of more bits than that."""
    return _copy(value, set(), 1, int_bits)


def _scalar(item, int_bits):
    kind = type(item)
    if id(kind) not in PLAIN_SCALAR_IDS or (int_bits is not None and kind is int and item.bit_length() > int_bits):
        raise NotPlain()
    return item


def _copy(value, seen, depth, int_bits):
    kind = type(value)
    if kind is not dict and kind is not list:
        return _scalar(value, int_bits)
    if id(value) in seen or depth > MAX_DEPTH:
        raise NotPlain()
    seen.add(id(value))
    if kind is dict:
        copy = {}
        for key, item in value.items():
            if id(type(key)) not in PLAIN_SCALAR_IDS:
                raise NotPlain()
            kind = type(item)
            if kind is dict or kind is list:
                copy[key] = _copy(item, seen, depth + 1, int_bits)
            elif id(kind) in PLAIN_SCALAR_IDS and (int_bits is None or kind is not int):
                copy[key] = item
            else:
                copy[key] = _scalar(item, int_bits)
        return copy
    copy = []
    for item in value:
        kind = type(item)
        if kind is dict or kind is list:
            copy.append(_copy(item, seen, depth + 1, int_bits))
        elif id(kind) in PLAIN_SCALAR_IDS and (int_bits is None or kind is not int):
            copy.append(item)
        else:
            copy.append(_scalar(item, int_bits))
    return copy
