# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpg_key_check: which keys a downloaded signing-key file holds, against the pinned fingerprints.

Input is the output of ``gpg --show-keys --with-colons <file>`` (GnuPG's machine-readable
listing, doc/DETAILS of GnuPG): a ``pub`` record starts a primary key and the first ``fpr``
record after it is that key's fingerprint; ``sub`` records (subkeys) and their ``fpr`` lines
follow. Only primary keys count: a vendor publishes the fingerprint of its primary key, and apt
trusts every key of a keyring file, so a file is accepted only when EVERY primary key in it is
pinned (an extra key smuggled into the file is refused).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

_HEX40 = re.compile(r"^[0-9A-F]{40}$")
# records that start a key or a user id: a primary key's fpr record comes before any of them
_KEY_RECORDS = ("pub", "sec", "sub", "ssb", "uid", "uat")
# stands in ``found`` for a primary key listed without its fingerprint (it is never pinned)
NO_FINGERPRINT = "(primary key without an fpr record)"


def normalize_fingerprint(value):
    """``value`` ("9DC8 5822 ...", lower case, 0x prefix) as 40 upper-case hex digits, or None."""
    if not isinstance(value, str):
        return None
    text = re.sub(r"\s+", "", value).upper()
    if text.startswith("0X"):
        text = text[2:]
    return text if _HEX40.match(text) else None


def primary_fingerprints(colons):
    """Fingerprints of the primary keys in ``gpg --with-colons`` output, in file order."""
    if isinstance(colons, (list, tuple)):
        colons = "\n".join("%s" % line for line in colons)
    if not isinstance(colons, str):
        raise AnsibleFilterError("gpg_key_check: input must be gpg --with-colons output, got %s"
                                 % type(colons).__name__)
    found = []
    expect_primary_fpr = False
    for line in colons.splitlines():
        fields = line.split(":")
        record = fields[0]
        if record in _KEY_RECORDS and expect_primary_fpr:
            found.append(NO_FINGERPRINT)  # a primary key whose fingerprint was never printed: never pinned
        if record == "pub":
            expect_primary_fpr = True
        elif record == "fpr" and expect_primary_fpr:
            found.append(fields[9].upper() if len(fields) > 9 and fields[9] else NO_FINGERPRINT)
            expect_primary_fpr = False
        elif record in ("sub", "sec", "ssb", "uid", "uat"):
            expect_primary_fpr = record == "sec"
    if expect_primary_fpr:
        found.append(NO_FINGERPRINT)
    return found


def gpg_key_check(colons, pinned):
    """Compare the primary keys in ``colons`` with the ``pinned`` fingerprints.

    Returns ``{ok, found, unpinned, bad_pins}``: ``found`` the primary fingerprints in the file,
    ``unpinned`` those not in ``pinned``, ``bad_pins`` pinned entries that are not 40 hex digits.
    ``ok`` is true only when the file holds at least one key, every key is pinned and every pin
    is well formed.
    """
    if pinned is None:
        pinned = []
    if isinstance(pinned, str):
        pinned = [pinned]
    if not isinstance(pinned, (list, tuple)):
        raise AnsibleFilterError("gpg_key_check: pinned must be a list of fingerprints, got %s"
                                 % type(pinned).__name__)
    normalized = [normalize_fingerprint(pin) for pin in pinned]
    bad_pins = ["%s" % pin for pin, norm in zip(pinned, normalized) if norm is None]
    found = primary_fingerprints(colons)
    unpinned = [fpr for fpr in found if fpr not in normalized]
    return {
        "ok": bool(found) and not unpinned and not bad_pins and bool(pinned),
        "found": found,
        "unpinned": unpinned,
        "bad_pins": bad_pins,
    }


class FilterModule(object):
    def filters(self):
        return {"gpg_key_check": gpg_key_check}
