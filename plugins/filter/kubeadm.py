# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubeadm_redact: kubeadm output with every bootstrap token and certificate key removed.

kubeadm prints its secrets in several places: ``[bootstrap-token] Using token: <token>`` during
``init``, ``[upload-certs] Using certificate key:`` followed by the key on the next line, the join
command (``--token <token> ... --certificate-key <key>``) and ``kubeadm token list`` rows. A
bootstrap token has the form ``[a-z0-9]{6}.[a-z0-9]{16}`` (kubeadm's bootstrap token format);
a certificate key is 32 bytes in hex. Written as one filter so init, join and token commands of
every role redact the same way (Jinja regex_replace chains missed the ``Using token:`` line).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

_PATTERNS = (
    # the bootstrap token wherever it stands (Using token:, --token, token list rows, JSON)
    (re.compile(r"(?<![A-Za-z0-9])[a-z0-9]{6}\.[a-z0-9]{16}(?![A-Za-z0-9])"), "<redacted-token>"),
    # whatever follows --token / --certificate-key / Using certificate key: (also on the next line)
    (re.compile(r"(--token[ =]+)\S+"), r"\1<redacted>"),
    (re.compile(r"(--certificate-key[ =]+)\S+"), r"\1<redacted>"),
    (re.compile(r"(Using certificate key:\s*)\S+"), r"\1<redacted>"),
    # certificate keys and any other 32-byte hex secret
    (re.compile(r"(?<![0-9A-Fa-f])[0-9a-fA-F]{64}(?![0-9A-Fa-f])"), "<redacted>"),
)


def kubeadm_redact(text, limit=2000):
    """``text`` (a string, or a list of lines) with kubeadm's secrets replaced, cut to ``limit``
    characters (0: no limit)."""
    if text is None:
        return ""
    if isinstance(text, (list, tuple)):
        text = "\n".join("%s" % line for line in text)
    if not isinstance(text, str):
        raise AnsibleFilterError("kubeadm_redact: input must be a string or a list of lines, got %s"
                                 % type(text).__name__)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise AnsibleFilterError("kubeadm_redact: limit must be an integer >= 0, got %r" % (limit,))
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if limit and len(text) > limit:
        text = text[:limit] + " ..."
    return text


class FilterModule(object):
    def filters(self):
        return {"kubeadm_redact": kubeadm_redact}
