# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pseudonyms of node_capture (module_utils/capture/capture.py, docs/capture.md, "Safe to share").

``Pseudonymiser`` replaces what it recognises by stable pseudonyms of the same shape, the same value
by the same pseudonym wherever it appears in one capture (file contents, path names, link targets,
the NVML scenario, kernel-log lines, the MANIFEST and capture.json):

- by shape: UUIDs (prefixes ``GPU-``, ``MIG-``, ``MIG-GPU-`` in any case), GUIDs (also ``0x`` and 16
  hex digits, inside GIDs and IPoIB hardware addresses), MAC addresses (colons, dashes, Cisco dots),
  ``enx<MAC>`` interface names, IPv4 and IPv6 addresses (any spelling, validated by ``ipaddress``;
  one value, one pseudonym); a shape is recognised between characters that cannot continue it (a
  ``:``, ``.`` or ``-`` ends it unless another group follows: ``… 10.0.0.1.``, ``mac: link up``); a
  dotted quad after a version word, or in a version file (``text(versions=True)``), is a version;
- pseudonyms of literals (``host-N``) skip the strings ``reserve`` saw in the capture, so two
  values never read the same; ``name`` with ``layout`` applies only shapes and serials (a path
  component the readers look up is never renamed by a host name or a ``redact`` value);
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

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import PLACEHOLDERS

_H = "[0-9A-Fa-f]"
# A shape ends where nothing can continue it; ``: `` / ``. `` after a value (``… link up``, the end of
# a sentence) does not continue it, a ``:``/``.`` followed by another group does.
_SHAPES = (
    r"(?P<uuid>(?<![0-9A-Za-z])(?:(?i:MIG-GPU-|GPU-|MIG-))?{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}"
    r"(?![0-9A-Za-z]))"
    r"|(?P<octets>(?<![\w:]){h}{{2}}(?::{h}{{2}}){{5}}(?:(?::{h}{{2}}){{14}}|(?::{h}{{2}}){{2}})?(?![\w]|:[\w:]))"
    r"|(?P<dashmac>(?<![\w-]){h}{{2}}(?:-{h}{{2}}){{5}}(?![\w]|-\w))"
    r"|(?P<dotmac>(?<![\w.]){h}{{4}}\.{h}{{4}}\.{h}{{4}}(?![\w]|\.\w))"
    r"|(?P<hexguid>(?<![\w])0[xX]{h}{{16}}(?![\w]))"
    r"|(?P<gid>(?<![\w:]){h}{{4}}(?::{h}{{4}}){{7}}(?![\w]|:[\w:]))"
    r"|(?P<guid>(?<![\w:]){h}{{4}}(?::{h}{{4}}){{3}}(?![\w]|:[\w:]))"
    r"|(?P<enx>(?<![\w])enx{h}{{12}}(?![\w]))"
    r"|(?P<ip6full>(?<![\w:.]){h}{{1,4}}(?::{h}{{1,4}}){{7}}(?![\w]|:[\w:]|\.\w))"
    r"|(?P<ip6>(?<![\w:.])(?:{h}{{1,4}}(?::{h}{{1,4}})*)?::(?:{h}{{1,4}}(?::{h}{{1,4}})*)?(?![\w]|:[\w:]|\.\w))"
    r"|(?P<ip4>(?<![\w.])(?<![0-9]-)(?:[0-9]{{1,3}}\.){{3}}[0-9]{{1,3}}(?![\w]|\.[0-9]))"
).format(h=_H)
# A dotted quad right after one of these words is a version (``version 1.14.9.2``, ``fw 5.4.0.1``).
VERSION_WORD = re.compile(r"(?i)(?:^|[^0-9A-Za-z])(?:version|ver|v|release|rev|revision|firmware|fw|driver)"
                          r"[ \t]*[:=]?[ \t]*[\"']?$")
# The pseudonyms of literals; a string of this form already in the capture is never given to a value.
LITERAL_PSEUDONYM = re.compile(r"(?i)(?<![0-9A-Za-z])(host|serial|redacted)-([0-9]{1,9})(?![0-9])")
_MASK64 = (1 << 64) - 1
# A serial number's value, replaced wherever it appears: ``Serial Number: 1654922003455``,
# ``serial=...``, and the two lines the NVIDIA driver writes to the kernel log (open-gpu-kernel-modules):
# ``NVRM: GPU Board Serial Number: %s`` with the first Xid of a GPU (src/nvidia/src/kernel/gpu/rc/
# kernel_rc.c, _krcLogUuidOnce) and ``NVRM: GPU 0000:5d:00.0: GPU serial number is %s.`` when a GPU
# falls off the bus (src/nvidia/arch/nvalloc/unix/src/osinit.c).
SERIAL_FIELD = re.compile(r"(?i)\bserial(?:[ _-]?(?:number|no\.?))?(?:[ \t]*[:=]|(?<=number)[ \t]+is(?=[ \t]))[ \t]*"
                          r"[\"']?([^\s,;\"']{3,})")
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
        self._layout_regex = None
        self._reserved = set()
        self._given = {}
        self.counts = {}

    def reserve(self, text):
        """Strings of a literal's pseudonym form (``host-1``) already present in ``text`` (bytes or
        str): never given to a value, so two different values never read the same."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not text:
            return
        for match in LITERAL_PSEUDONYM.finditer(text):
            self._reserved.add("%s-%d" % (match.group(1).lower(), int(match.group(2))))

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
            self._regex = self._layout_regex = None

    def collect_serials(self, text, whole=False):
        """Every serial number ``text`` names (``SERIAL_FIELD``); ``whole``: ``text`` is one (the
        contents of a file named ``*serial``)."""
        if not text:
            return
        if whole:
            self.add_literal(text, "serial")
        for match in SERIAL_FIELD.finditer(text):
            self.add_literal(match.group(1).rstrip("."), "serial")

    def _pattern(self, layout=False):
        """The regex of every shape and literal; ``layout``: of the shapes and serials only (the
        host names and redact values are not applied to a name of the layout the readers read)."""
        if layout:
            if self._layout_regex is None:
                self._layout_regex = self._build([v for v, kind in self._literals.items() if kind == "serial"])
            return self._layout_regex
        if self._regex is None:
            self._regex = self._build(list(self._literals))
        return self._regex

    @staticmethod
    def _build(literals):
        shapes = _SHAPES
        ordered = sorted(literals, key=lambda v: (-len(v), v))
        anywhere = "|".join(re.escape(v) for v in ordered if len(v) >= ANYWHERE)
        words = "|".join(re.escape(v) for v in ordered if len(v) < ANYWHERE)
        if words:
            shapes = r"(?P<lit>(?<![\w.-])(?i:%s)(?![\w-]))|%s" % (words, shapes)
        if anywhere:  # first: a long literal wins over a shape or a shorter literal inside it
            shapes = r"(?P<any>(?i:%s))|%s" % (anywhere, shapes)
        return re.compile(shapes)

    def _number(self, kind, key):
        table = self._maps.setdefault(kind, {})
        if key not in table:
            table[key] = len(table) + 1
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return table[key]

    def text(self, value, versions=False):
        """``value`` (a file's contents, a log line, a string) pseudonymised. A dotted quad that
        follows a version word (``version 1.14.9.2``, ``fw=5.4.0.1``) is a version, kept;
        ``versions``: ``value`` is a version file's contents, every dotted quad in it is kept."""
        if not value:
            return value
        return self._pattern().sub(lambda m: self._replace(m, versions), value)

    def name(self, value, layout=False):
        """One path component pseudonymised: a dotted quad is an address here even alone;
        ``layout``: a name of the tree the readers read (below sys, proc, dev, or a word of the
        capture patterns): only shapes and serials are replaced, never host names or redact values."""
        if not value:
            return value
        return self._pattern(layout).sub(self._replace, value)

    def data(self, raw, versions=False):
        return self.text(raw.decode("utf-8", "surrogateescape"), versions).encode("utf-8", "surrogateescape")

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

    def _replace(self, match, versions=False):
        kind = match.lastgroup
        text = match.group(0)
        if kind in ("lit", "any"):
            label = self._literals.get(text.lower(), "redacted")
            return self._literal(label, text.lower())
        if kind == "ip4" and (versions or _after_version_word(match)):
            return text
        return getattr(self, "_" + kind)(text)

    def _literal(self, label, key):
        """``host-N`` / ``serial-N`` / ``redacted-N``, N skipping the strings ``reserve`` saw."""
        given = self._given.setdefault(label, {})
        if key not in given:
            self.counts[label] = self.counts.get(label, 0) + 1
            prefix = {"hostname": "host"}.get(label, label)
            number = len(given) + 1
            used = set(given.values())
            while "%s-%d" % (prefix, number) in self._reserved or "%s-%d" % (prefix, number) in used:
                number += 1
            given[key] = "%s-%d" % (prefix, number)
        return given[key]

    def _uuid(self, text):
        prefix, body = text[:-36], text[-36:]
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
        # compressed (RFC 5952), whatever the spelling; the four-digit eight-group form of GIDs
        # (``_gid``) stays in that form, the form sysfs writes and the readers read
        out = ipaddress.IPv6Address(self._gid_int(int(address))).compressed
        return out.upper() if text == text.upper() and text != text.lower() else out

    _ip6full = _ip6

    def _dashmac(self, text):
        return self._octets(text.replace("-", ":")).replace(":", "-")

    def _dotmac(self, text):
        raw = text.replace(".", "")
        new = self._octets(":".join(raw[i:i + 2] for i in range(0, 12, 2))).replace(":", "")
        return ".".join(new[i:i + 4] for i in range(0, 12, 4))

    def _hexguid(self, text):
        new = "%016x" % self._guid_int(int(text[2:], 16))
        return text[:2] + (new.upper() if text[2:] == text[2:].upper() and text[2:] != text[2:].lower() else new)

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


def _after_version_word(match):
    """Whether the dotted quad ``match`` follows a version word on its line."""
    whole = match.string
    line_start = whole.rfind("\n", 0, match.start()) + 1
    return VERSION_WORD.search(whole[max(line_start, match.start() - 40):match.start()]) is not None


def _groups(value, groups, width, like):
    digits = "%0*x" % (groups * width, value)
    text = ":".join(digits[i:i + width] for i in range(0, len(digits), width))
    return text.upper() if like == like.upper() and like != like.lower() else text
