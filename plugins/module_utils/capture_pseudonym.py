# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pseudonyms of node_capture (module_utils/capture.py, docs/capture.md, "Safe to share").

``Pseudonymiser`` replaces what it recognises by stable pseudonyms of the same shape, the same value
by the same pseudonym wherever it appears in one capture (file contents, path names, link targets,
the NVML scenario, kernel-log lines, the MANIFEST and capture.json):

- by shape: UUIDs, GUIDs (also inside GIDs and IPoIB hardware addresses), MAC addresses, ``enx<MAC>``
  interface names, IPv4 and IPv6 addresses; a shape is recognised between characters that cannot
  continue it (not a word character, nor ``:``, ``.`` or ``-`` where the shape could go on);
- by value (``add_literal``): the node's host names, serial numbers (``collect_serials``: files
  named ``*serial``, ``Serial Number: …`` / ``serial=…`` fields, the NVIDIA driver's kernel-log
  lines ``NVRM: GPU Board Serial Number: …`` and ``… GPU serial number is ….``, NVML's serials)
  and the values of option ``redact``. A value of at least ``ANYWHERE`` characters is replaced
  wherever it occurs, inside a longer word too; a shorter one only as a whole word.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import PLACEHOLDERS

_H = "[0-9A-Fa-f]"
_SHAPES = (
    r"(?P<uuid>(?<![\w-])(?:(?:GPU|MIG)-)?{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}(?![\w-]))"
    r"|(?P<octets>(?<![\w:]){h}{{2}}(?::{h}{{2}}){{5}}(?:(?::{h}{{2}}){{14}}|(?::{h}{{2}}){{2}})?(?![\w:]))"
    r"|(?P<gid>(?<![\w:]){h}{{4}}(?::{h}{{4}}){{7}}(?![\w:]))"
    r"|(?P<guid>(?<![\w:]){h}{{4}}(?::{h}{{4}}){{3}}(?![\w:]))"
    r"|(?P<enx>(?<![\w])enx{h}{{12}}(?![\w]))"
    r"|(?P<ip6>(?<![\w:.])(?:{h}{{1,4}}(?::{h}{{1,4}})*)?::(?:{h}{{1,4}}(?::{h}{{1,4}})*)?(?![\w:.]))"
    r"|(?P<ip4>(?<![\w.-])(?:[0-9]{{1,3}}\.){{3}}[0-9]{{1,3}}(?![\w.-]))"
).format(h=_H)
_MASK64 = (1 << 64) - 1
# A serial number's value, replaced wherever it appears: ``Serial Number: 1654922003455``,
# ``serial=...``, and the two lines the NVIDIA driver writes to the kernel log (open-gpu-kernel-modules):
# ``NVRM: GPU Board Serial Number: %s`` with the first Xid of a GPU (src/nvidia/src/kernel/gpu/rc/
# kernel_rc.c, _krcLogUuidOnce) and ``NVRM: GPU 0000:5d:00.0: GPU serial number is %s.`` when a GPU
# falls off the bus (src/nvidia/arch/nvalloc/unix/src/osinit.c).
SERIAL_FIELD = re.compile(r"(?i)\bserial(?:[ _-]?(?:number|no\.?))?(?:[ \t]*[:=]|(?<=number)[ \t]+is(?=[ \t]))[ \t]*"
                          r"([^\s,;\"']{3,})")
# What a serial field holds when there is none (the driver prints ``[N/A]``, some tools ``Not Specified``).
NO_SERIAL = frozenset(["n/a", "[n/a]", "none", "null", "unknown", "not specified", "not available", "0"])
# A literal at least this long is replaced inside longer words too (``gpu_1654922003455.log``).
ANYWHERE = 10


class Pseudonymiser(object):
    """Stable pseudonyms of the same shape: ``GPU-00000000-0000-4000-8000-00000000000N`` (UUIDs),
    ``0200:00ff:fe00:000N`` (GUIDs, also inside GIDs and IPoIB hardware addresses), ``02:00:00:…``
    (MACs), ``198.18.x.y`` (IPv4; inside RoCE GIDs too, so an IPv4-mapped GID stays one),
    ``fd00::N`` (IPv6), ``host-N`` / ``serial-N`` / ``redacted-N`` (literals: host names, serials,
    values given in ``redact``). Unspecified, loopback and broadcast addresses and all-zero
    identifiers are kept: they identify nothing and the checks read them."""

    def __init__(self):
        self._maps = {}
        self._literals = {}
        self._regex = None
        self.counts = {}

    def add_literal(self, value, kind="redacted"):
        """A value replaced wherever it appears as a whole word (host names, serials)."""
        if not isinstance(value, str):
            return
        value = value.strip()
        too_short = len(value) < (1 if kind == "hostname" else 3)
        if too_short or value in PLACEHOLDERS or value.lower() in ("localhost", "none", "null"):
            return
        if kind == "serial" and (value.lower() in NO_SERIAL or not any(ch.isalnum() for ch in value)
                                 or len(set(value)) == 1):
            return  # no serial (``[N/A]``), or one that would match in every all-zero value
        if value.lower() not in self._literals:
            self._literals[value.lower()] = kind
            self._regex = None

    def collect_serials(self, text, whole=False):
        """Every serial number ``text`` names (``SERIAL_FIELD``); ``whole``: ``text`` is one (the
        contents of a file named ``*serial``)."""
        if not text:
            return
        if whole:
            self.add_literal(text, "serial")
        for match in SERIAL_FIELD.finditer(text):
            self.add_literal(match.group(1).rstrip("."), "serial")

    def _pattern(self):
        if self._regex is None:
            shapes = _SHAPES
            ordered = sorted(self._literals, key=lambda v: (-len(v), v))
            anywhere = "|".join(re.escape(v) for v in ordered if len(v) >= ANYWHERE)
            words = "|".join(re.escape(v) for v in ordered if len(v) < ANYWHERE)
            if words:
                shapes = r"(?P<lit>(?<![\w.-])(?i:%s)(?![\w-]))|%s" % (words, shapes)
            if anywhere:  # first: a long literal wins over a shape or a shorter literal inside it
                shapes = r"(?P<any>(?i:%s))|%s" % (anywhere, shapes)
            self._regex = re.compile(shapes)
        return self._regex

    def _number(self, kind, key):
        table = self._maps.setdefault(kind, {})
        if key not in table:
            table[key] = len(table) + 1
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return table[key]

    def text(self, value):
        if not value:
            return value
        return self._pattern().sub(self._replace, value)

    def data(self, raw):
        return self.text(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def value(self, obj, collect=False):
        """Every string of a JSON-like structure (keys included) pseudonymised; ``collect``: the
        serial numbers its strings name collected instead (nothing is returned)."""
        if isinstance(obj, str):
            return self.collect_serials(obj) if collect else self.text(obj)
        if isinstance(obj, list):
            return [self.value(item, collect) for item in obj]
        if isinstance(obj, dict):
            return dict((self.value(k, collect), self.value(v, collect)) for k, v in obj.items())
        return obj

    def _replace(self, match):
        kind = match.lastgroup
        text = match.group(0)
        if kind in ("lit", "any"):
            label = self._literals.get(text.lower(), "redacted")
            return "%s-%d" % ({"hostname": "host"}.get(label, label), self._number(label, text.lower()))
        return getattr(self, "_" + kind)(text)

    def _uuid(self, text):
        prefix, body = "", text
        if text[:4].upper() in ("GPU-", "MIG-"):
            prefix, body = text[:4], text[4:]
        if set(body.replace("-", "")) <= set("0"):
            return text
        return "%s00000000-0000-4000-8000-%012x" % (prefix, self._number("uuid", body.lower()))

    def _guid_int(self, value):
        if value == 0:
            return 0
        return 0x020000FFFE000000 + self._number("guid", value)

    def _guid(self, text):
        new = self._guid_int(int(text.replace(":", ""), 16))
        return _groups(new, 4, 4, text)

    def _ipv4_int(self, value):
        if value in (0, 0xFFFFFFFF) or (value >> 24) == 127:
            return value
        return int(ipaddress.IPv4Address("198.18.0.0")) + self._number("ipv4", value)

    def _ip4(self, text):
        try:
            value = int(ipaddress.IPv4Address(text))
        except ValueError:
            return text
        return str(ipaddress.IPv4Address(self._ipv4_int(value)))

    def _gid_int(self, value):
        if (value >> 32) == 0xFFFF:  # IPv4-mapped (RoCE v2 over IPv4): the address is mapped
            return (value >> 32 << 32) | self._ipv4_int(value & 0xFFFFFFFF)
        prefix, low = value >> 64, value & _MASK64
        if prefix not in (0, 0xFE80000000000000):
            prefix = 0xFD00000000000000 + self._number("prefix", prefix)
        return (prefix << 64) | self._guid_int(low)

    def _gid(self, text):
        return _groups(self._gid_int(int(text.replace(":", ""), 16)), 8, 4, text)

    def _ip6(self, text):
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            return text
        if address.is_unspecified or address.is_loopback:
            return text
        return str(ipaddress.IPv6Address(self._gid_int(int(address))))

    def _enx(self, text):
        """A network interface named after its MAC (``enx0c42a1b2c3d4``, systemd's predictable names)."""
        mac = ":".join(text[3 + i:5 + i] for i in range(0, 12, 2))
        return "enx" + self._octets(mac).replace(":", "")

    def _octets(self, text):
        raw = text.replace(":", "")
        value = int(raw, 16)
        count = len(raw) // 2
        if count == 6:
            if value in (0, (1 << 48) - 1):
                return text
            new = 0x020000000000 + self._number("mac", value)
        elif count == 8:
            new = self._guid_int(value)
        else:  # 20 bytes: IPoIB (QPN + GID)
            new = (value >> 128 << 128) | self._gid_int(value & ((1 << 128) - 1))
        return _groups(new, count, 2, text)


def _groups(value, groups, width, like):
    digits = "%0*x" % (groups * width, value)
    text = ":".join(digits[i:i + width] for i in range(0, len(digits), width))
    return text.upper() if like == like.upper() and like != like.lower() else text
