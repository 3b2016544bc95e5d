# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""XML text of the controller's JUnit reports, byte for byte what ElementTree's serialiser
(``ET.tostring(element, encoding="unicode")``) writes for the same elements, with ElementTree's own
escaping functions: fleet_report.junit_xml writes its elements as text (building the tree and
serialising it were half of that function's time)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# ElementTree's own escaping (private names, in every Python 3): the same text as its serialiser
from xml.etree.ElementTree import _escape_attrib, _escape_cdata


def once_per_text(function):
    """``function`` memoised for exact ``str`` arguments (a report repeats its check ids, targets and
    statuses on every host); any other argument, a str subclass included (its own equality), is passed
    to ``function`` each time. Shared by the report writers (fleet_report_html's check groups)."""
    seen = {}

    def call(value):
        if type(value) is not str:  # pylint: disable=unidiomatic-typecheck  # a subclass: not cached
            return function(value)
        found = seen.get(value)
        if found is None:
            found = seen[value] = function(value)
        return found
    return call


def attribute_escaper():
    """``escape(value)``: an attribute value as ElementTree writes it (its ``_escape_attrib``: the
    same text, the same TypeError for a value that is not text), each distinct str escaped once."""
    return once_per_text(_escape_attrib)


def closed(tag, content):
    """The end of an element that holds only text, after its attributes: ElementTree's
    ``>text</tag>`` (``_escape_cdata``), or `` />`` when the text is empty."""
    return ">%s</%s>" % (_escape_cdata(content), tag) if content else " />"
