# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubeadm on the node: what ``kubeadm upgrade plan``, ``upgrade apply``, ``upgrade node`` and
``certs check-expiration`` say, kubeadm's own version policy, and an upgrade judged by what the
cluster then shows.

Machine-readable first. Since kubeadm 1.30 (``JSON_OUTPUT_SINCE``) ``upgrade plan -o json`` prints
an ``UpgradePlan`` and ``certs check-expiration -o json`` a ``CertificateExpirationInfo``, both of
``apiVersion: output.kubeadm.k8s.io/v1alpha3`` (kubernetes/kubernetes
cmd/kubeadm/app/apis/output/v1alpha3/types.go; PR #123461 and #123492 for the plan, PR #123372 for
the certificates). They are read strictly (plugins/module_utils/records.py: one document, the
exact kind and apiVersion, every known key typed): anything else is unreadable and fails. A key
this reader does not know is ignored (the API version may gain optional fields within it). The text of older kubeadm is
read only for a kubeadm older than 1.30 (``parse_upgrade_plan``, ``parse_check_expiration``):

- ``certs check-expiration`` prints ``[check-expiration]`` lines, then two tables whose columns
  are aligned with spaces (``CERTIFICATE  EXPIRES  RESIDUAL TIME  CERTIFICATE AUTHORITY
  EXTERNALLY MANAGED`` and ``CERTIFICATE AUTHORITY  EXPIRES  RESIDUAL TIME  EXTERNALLY
  MANAGED``). A cell may be empty (older kubeadm left the CA of kubeconfig files blank), so the
  rows are cut at the header's column offsets, not split on spaces. EXPIRES is
  ``Jan 02, 2006 15:04 UTC`` (English month names whatever the locale); the residual time is
  ``<invalid>`` once expired, so expiry is judged from EXPIRES. Any other line after the first
  table (an authority table whose header is not the one above, say) is unreadable: fail.
- ``upgrade plan`` prints ``[upgrade/versions] Cluster version: vX.Y.Z`` and ``kubeadm version:``,
  then tables ``COMPONENT  [NODE]  CURRENT  TARGET`` (AVAILABLE in old releases) and, when an
  upgrade is possible, ``kubeadm upgrade apply vX.Y.Z``; ``Awesome, you're up-to-date!`` when
  there is nothing to do; ``[upgrade/version] FATAL:`` / ``[ERROR ...]`` / ``error execution
  phase`` lines when kubeadm refuses.

An upgrade is judged by what is observed, never by a banner: ``kubeadm upgrade apply`` succeeded
when it exited 0 AND the API server's ``/version`` (``kubectl version -o json``,
``serverVersion.gitVersion``) reports the target; a node is upgraded when its kubelet reports the
target (``kubectl get node <name> -o json``, ``status.nodeInfo.kubeletVersion``; action
``verify``, after the kubelet restart). "Reports the target" means exactly the release
``vX.Y.Z``: a pre-release (``v1.37.1-rc.1``) or a build (``v1.37.1+k3s1``) is not it
(``parse_kube_version``, ``at_target``); what was seen is reported verbatim. kubeadm's closing line changed in 1.32 (apply.go:
``[upgrade/successful] SUCCESS! Your cluster was upgraded to "vX.Y.Z". Enjoy!`` up to 1.31,
``[upgrade] SUCCESS! A control plane node of your cluster was upgraded to "vX.Y.Z".`` from 1.32):
it is returned as information (``banner``) and decides nothing.

Version rules: kubeadm's (``version_policy``, cmd/kubeadm/app/phases/upgrade/policy.go
EnforceVersionPolicies, each rule cited where it is implemented; gpufleet never passes
``--force``, so its skippable errors refuse too) and gpufleet's own (``skew_problems``: never down,
and a kubelet never newer than the API server, https://kubernetes.io/releases/version-skew-policy/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import FAIL_ON_CHOICES, CheckResults, exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.clock import utc_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.records import (
    RecordError, boolean, integer, listing, load_json, mapping, string)
from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import ModuleRunner

# kubeadm 1.30 is the first with -o json for upgrade plan (output.kubeadm.k8s.io/v1alpha3,
# kubernetes/kubernetes PR #123461) and certs check-expiration (PR #123372); an older kubeadm
# is read from its text.
JSON_OUTPUT_SINCE = (1, 30)
OUTPUT_API_VERSION = "output.kubeadm.k8s.io/v1alpha3"
CERTS_CHECK_ID = "k8s.certs_expiry"
DAY = 86400.0
# kubeadm prints Go's English month names whatever the locale (calendar.month_abbr follows the locale)
_MONTHS = {"Jan": 1, "Feb": 2, "Mar": 3, "Apr": 4, "May": 5, "Jun": 6, "Jul": 7, "Aug": 8,
           "Sep": 9, "Oct": 10, "Nov": 11, "Dec": 12}
_EXPIRES = re.compile(r"^([A-Z][a-z]{2}) ([0-9]{2}), ([0-9]{4}) ([0-9]{2}):([0-9]{2}) UTC$")
_CERT_HEADER = ("CERTIFICATE", "EXPIRES", "RESIDUAL TIME", "CERTIFICATE AUTHORITY", "EXTERNALLY MANAGED")
_CA_HEADER = ("CERTIFICATE AUTHORITY", "EXPIRES", "RESIDUAL TIME", "EXTERNALLY MANAGED")


class KubeadmOutputError(ValueError):
    """kubeadm printed something this parser cannot read (the message says what and where)."""


# A Kubernetes version as the components report it (``gitVersion`` of /version, a Node's
# ``kubeletVersion``, ``kubeadm version -o short``): Semantic Versioning 2.0, ``vMAJOR.MINOR.PATCH``
# with an optional ``-pre.release`` and ``+build`` (k8s.io/apimachinery/pkg/util/version
# ParseSemantic, which kubeadm's policy.go uses). A release has neither: ``v1.37.1``. A release
# candidate or development build (``v1.36.0-rc.1``, ``v1.9.0-alpha.1.487+550c3cab4fe267``,
# kubernetes/kubernetes issue #53259) and a distribution's build (``v1.36.5+k3s1``) are not it.
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_NUMBER = r"(0|[1-9][0-9]{0,8})"
_SEMVER = re.compile(r"^v?%s\.%s\.%s(?:-(%s(?:\.%s)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
                     % (_NUMBER, _NUMBER, _NUMBER, _IDENT, _IDENT))
# A Debian or RPM package version of a Kubernetes package (pkgs.k8s.io: ``1.29.2-1.1``; RPM
# ``1.29.2-150500.1.1``): optional epoch, upstream X.Y.Z, a revision. Only where a package's
# version is read; an upstream pre-release (``1.36.0~rc.1-1.1``) is not a release.
_SHOWN = 80


def _shown(value):
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


class KubeVersion(object):
    """A Kubernetes version as reported: ``release`` (major, minor, patch), ``pre`` (the
    pre-release, "" for none), ``build`` (the build metadata, "" for none) and ``text`` (what was
    read, verbatim). Deliberately not a tuple: a pre-release can never be compared as its release."""

    __slots__ = ("release", "pre", "build", "text")

    def __init__(self, release, pre="", build="", text=None):
        self.release = tuple(release)
        self.pre, self.build = pre, build
        self.text = text if text is not None else (version_text(self.release) + ("-" + pre if pre else "")
                                                   + ("+" + build if build else ""))

    @property
    def is_release(self):
        return not self.pre and not self.build

    def precedence(self):
        """Semantic Versioning precedence (build metadata ignored; a pre-release is lower than its
        release; numeric identifiers lower than alphanumeric ones, compared as numbers)."""
        if not self.pre:
            return (self.release, 1, ())
        return (self.release, 0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre.split(".")))

    def __eq__(self, other):
        return isinstance(other, KubeVersion) and (self.release, self.pre, self.build) == (
            other.release, other.pre, other.build)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.release, self.pre, self.build))

    def __repr__(self):
        return "KubeVersion(%r)" % self.text


def parse_kube_version(value, what="version"):
    """The ``KubeVersion`` of a version as Kubernetes reports it (``v1.37.1``, ``v1.36.0-rc.1``,
    ``v1.36.5+k3s1``; ``v`` optional); ValueError naming ``what`` for anything else (``1.37``,
    ``v1.37.1.2``; a package version ``1.29.2-1.1`` reads as a pre-release, never a release)."""
    text = value.strip() if isinstance(value, str) else None
    match = _SEMVER.match(text) if text else None
    if not match:
        raise ValueError("%s is not a Kubernetes version vX.Y.Z[-pre-release][+build], got %s" % (what, _shown(value)))
    return KubeVersion(tuple(int(part) for part in match.group(1, 2, 3)), match.group(4) or "", match.group(5) or "",
                       text)


def kube_version(value, what="version"):
    """``(major, minor, patch)`` of a target: exactly ``X.Y.Z`` (``v`` optional), a release.
    ValueError naming ``what`` otherwise: ``1.29`` (no patch), ``v1.36.0-rc.1`` (a release
    candidate), ``1.36.5+k3s1`` (a distribution's build), ``v1.37.1.2``, a package version."""
    try:
        parsed = parse_kube_version(value, what)
    except ValueError:
        raise ValueError("%s must be a Kubernetes release X.Y.Z (v optional), got %s" % (what, _shown(value)))
    if not parsed.is_release:
        raise ValueError("%s must be a Kubernetes release X.Y.Z (v optional), got %s: %s is not a release"
                         % (what, _shown(value), "a pre-release (-%s)" % parsed.pre if parsed.pre
                            else "a build (+%s)" % parsed.build))
    return parsed.release


def reported(value):
    """A ``KubeVersion`` of ``value`` (a KubeVersion, or a release tuple)."""
    if isinstance(value, KubeVersion):
        return value
    return KubeVersion(tuple(value))


def at_target(seen, target):
    """True only when ``seen`` (what a component reported) is exactly the release ``target``:
    ``v1.37.1``, never ``v1.37.1-rc.1`` nor ``v1.37.1+k3s1``."""
    seen = reported(seen)
    return seen.is_release and seen.release == tuple(target)


def _not_a_release(seen):
    """Why ``seen`` is not the release of its X.Y.Z ("" when it is one)."""
    if seen.pre:
        return " (a pre-release, -%s: not the release %s)" % (seen.pre, version_text(seen.release))
    if seen.build:
        return (" (build +%s: a distribution's build, not the release %s kubeadm installs)"
                % (seen.build, version_text(seen.release)))
    return ""


def version_text(version):
    return "v%d.%d.%d" % tuple(version)


def _expiry_epoch(text, line):
    match = _EXPIRES.match(text.strip())
    if not match or match.group(1) not in _MONTHS:
        raise KubeadmOutputError("expiry date %r is not 'Mon DD, YYYY HH:MM UTC' in line %r" % (text.strip(), line))
    month, day, year, hour, minute = (_MONTHS[match.group(1)], int(match.group(2)), int(match.group(3)),
                                      int(match.group(4)), int(match.group(5)))
    try:
        return float(calendar.timegm((year, month, day, hour, minute, 0, 0, 0, 0)))
    except (ValueError, OverflowError):
        raise KubeadmOutputError("expiry date %r is not a date in line %r" % (text.strip(), line))


def _columns(header_line, names):
    """Start offsets of ``names`` in the header line, or None when it is not that header."""
    if header_line.strip().split() != " ".join(names).split():
        return None
    starts, position = [], 0
    for name in names:
        position = header_line.index(name, position)
        starts.append(position)
        position += len(name)
    return starts


def _cells(line, starts):
    bounds = list(starts[1:]) + [None]
    return [line[start:end].strip() if end is not None else line[start:].strip()
            for start, end in zip(starts, bounds)]


_KLOG = re.compile(r"^[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ [^ ]+:[0-9]+\] ")


def parse_check_expiration(text):
    """``{certificates: [...], authorities: [...]}`` from the text of ``kubeadm certs
    check-expiration`` (kubeadm older than 1.30; ``parse_certs_json`` otherwise); each entry
    ``{name, expires (epoch), expires_text, residual, ca?, externally_managed, missing}``.
    KubeadmOutputError when either table is missing or empty, a row cannot be read, or a line
    after the first table is neither a row, a blank line nor one of the two known headers (fail
    closed: an authority table under a header this reader does not know is never skipped)."""
    lines = (text or "").splitlines()
    tables = {"certificates": None, "authorities": None}
    current, seen_table = None, False
    for line in lines:
        if not line.strip():
            current = None
            continue
        cert_cols = _columns(line, _CERT_HEADER)
        ca_cols = _columns(line, _CA_HEADER)
        if cert_cols is not None or ca_cols is not None:
            kind = "certificates" if cert_cols is not None else "authorities"
            if tables[kind] is not None:
                raise KubeadmOutputError("a second %s table in the output: %r" % (kind, line.strip()))
            current, starts, seen_table = [], cert_cols if cert_cols is not None else ca_cols, True
            tables[kind] = current
            continue
        if current is None:
            if not seen_table and (line.startswith("[check-expiration]") or _KLOG.match(line)):
                continue  # kubeadm's own progress lines and klog warnings before the tables
            if seen_table and _KLOG.match(line):
                continue
            raise KubeadmOutputError("a line this reader does not know %s: %r (a table header of another kubeadm?)"
                                     % ("after the tables" if seen_table else "before the tables", line.strip()))
        if line.strip().startswith("!MISSING!"):
            # kubeadm prints "!MISSING! <name>" and nothing else for a certificate it cannot find
            words = line.strip().split()
            if len(words) < 2:
                raise KubeadmOutputError("a !MISSING! row without a certificate name: %r" % line.strip())
            current.append({"name": words[1], "missing": True, "externally_managed": False})
            continue
        cells = _cells(line, starts)
        entry = {"name": cells[0], "missing": False, "expires_text": cells[1],
                 "expires": _expiry_epoch(cells[1], line.strip()), "residual": cells[2]}
        if kind == "certificates":
            entry["ca"] = cells[3]
        managed = cells[-1]
        if managed not in ("yes", "no"):
            raise KubeadmOutputError("EXTERNALLY MANAGED is %r, not yes or no, in line %r" % (managed, line.strip()))
        entry["externally_managed"] = managed == "yes"
        if not entry["name"] or " " in entry["name"]:
            raise KubeadmOutputError("a row without a single certificate name: %r" % line.strip())
        current.append(entry)
    if not tables["certificates"]:
        raise KubeadmOutputError("no certificate table (CERTIFICATE  EXPIRES  RESIDUAL TIME ...) with rows in the output")
    if not tables["authorities"]:
        raise KubeadmOutputError("no certificate authority table (CERTIFICATE AUTHORITY  EXPIRES  RESIDUAL TIME ...) "
                                 "with rows in the output: the authorities' expiry is unknown")
    return {"certificates": tables["certificates"], "authorities": tables["authorities"]}


_RFC3339_UTC = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z$")


def _rfc3339(value, record, field):
    """metav1.Time as kubeadm marshals it (RFC 3339, UTC, seconds: ``2027-11-09T09:17:00Z``)."""
    match = _RFC3339_UTC.match(string(value, record, field, max_length=40))
    if not match:
        raise RecordError(record, "%r is not an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ)" % (value,), field)
    parts = tuple(int(group) for group in match.groups())
    if not (1 <= parts[1] <= 12 and 1 <= parts[2] <= calendar.monthrange(parts[0], parts[1])[1]
            and parts[3] < 24 and parts[4] < 60 and parts[5] < 60):
        raise RecordError(record, "%r is not a date" % (value,), field)
    return float(calendar.timegm(parts + (0, 0, 0)))


def _json_document(text, record):
    """The JSON document of a kubeadm ``-o json`` stdout: from its first line that opens an object
    to the end (informational lines a kubeadm may print before it are left out), read strictly."""
    lines = (text or "").splitlines(True)
    for index, line in enumerate(lines):
        if line.startswith("{"):
            return load_json("".join(lines[index:]), record)
    raise RecordError(record, "no JSON object in the output")


def _typed(document, record, kind):
    mapping(document, record)
    string(document.get("kind"), record, "kind", choices=(kind,))
    string(document.get("apiVersion"), record, "apiVersion", choices=(OUTPUT_API_VERSION,))


def _type_meta(item, record, where):
    """The optional ``kind`` / ``apiVersion`` of a nested object (metav1.TypeMeta, omitempty): strings."""
    for key in ("kind", "apiVersion"):
        if key in item:
            string(item[key], record, "%s.%s" % (where, key), max_length=253)


def parse_certs_json(text):
    """``{certificates, authorities}`` (the entries of ``parse_check_expiration``) from the
    ``CertificateExpirationInfo`` of ``kubeadm certs check-expiration -o json`` (kubeadm 1.30+).
    KubeadmOutputError when it is not that document (another kind or apiVersion, a known key of
    the wrong type, a certificate list that is empty or absent). A key this reader does not know
    is ignored: output.kubeadm.k8s.io/v1alpha3 may gain optional fields within its version."""
    record = "kubeadm certs check-expiration -o json"
    try:
        document = _json_document(text, record)
        _typed(document, record, "CertificateExpirationInfo")
        mapping(document, record, required=("kind", "apiVersion", "certificates", "certificateAuthorities"))
        parsed = {}
        for key, kind in (("certificates", "certificates"), ("certificateAuthorities", "authorities")):
            entries = listing(document[key], record, key, max_items=200)
            if not entries:
                raise RecordError(record, "empty: nothing to judge", key)
            parsed[kind] = []
            for index, item in enumerate(entries):
                where = "%s[%d]" % (key, index)
                mapping(item, record, where, required=("name", "expirationDate", "residualTime", "externallyManaged",
                                                       "missing"))
                name = string(item["name"], record, where + ".name", max_length=253, allow_empty=False)
                missing = boolean(item["missing"], record, where + ".missing")
                entry = {"name": name, "missing": missing,
                         "externally_managed": boolean(item["externallyManaged"], record, where + ".externallyManaged")}
                residual = integer(item["residualTime"], record, where + ".residualTime")
                if not missing:
                    entry["expires"] = _rfc3339(item["expirationDate"], record, where + ".expirationDate")
                    entry["expires_text"] = item["expirationDate"]
                    entry["residual"] = "%ds" % residual
                if kind == "certificates":
                    entry["ca"] = string(item.get("caName", ""), record, where + ".caName", max_length=253)
                elif "caName" in item:
                    string(item["caName"], record, where + ".caName", max_length=253)
                parsed[kind].append(entry)
    except RecordError as exc:
        raise KubeadmOutputError(str(exc))
    return parsed


def certs_expiry_checks(parsed, now, warn_days, target="kubeadm-pki"):
    """CheckResults of ``k8s.certs_expiry``: one check per certificate and authority (target
    ``<target>/<name>``): fail when expired or missing, warn when it expires within
    ``warn_days`` days, pass otherwise."""
    results = CheckResults()
    for kind, entries in (("certificate", parsed["certificates"]), ("certificate authority", parsed["authorities"])):
        for entry in entries:
            where = "%s/%s" % (target, entry["name"])
            if entry["missing"]:
                results.fail(CERTS_CHECK_ID, where, "%s %s is missing (kubeadm: !MISSING!)" % (kind, entry["name"]),
                             observed="missing", expected="present")
                continue
            days = (entry["expires"] - now) / DAY
            observed = {"expires": utc_text(entry["expires"]), "days_left": round(days, 1)}
            expected = "more than %d days left" % warn_days
            if days <= 0:
                results.fail(CERTS_CHECK_ID, where, "%s %s expired on %s: renew it (kubeadm certs renew %s)"
                             % (kind, entry["name"], entry["expires_text"], entry["name"]),
                             observed=observed, expected=expected)
            elif days <= warn_days:
                results.warn(CERTS_CHECK_ID, where, "%s %s expires in %.0f days (%s), within gpufleet_cert_warn_days=%d"
                             % (kind, entry["name"], days, entry["expires_text"], warn_days),
                             observed=observed, expected=expected)
            else:
                results.passed(CERTS_CHECK_ID, where, "%s %s expires in %.0f days (%s)"
                               % (kind, entry["name"], days, entry["expires_text"]),
                               observed=observed, expected=expected)
    return results


def certs_command_failed(command, rc, stderr, target="kubeadm-pki"):
    """The failing check when the command could not run or its output could not be read."""
    results = CheckResults()
    results.fail(CERTS_CHECK_ID, target, "certificate expiry could not be read: %s" % stderr,
                 observed="unknown", error={"command": command, "rc": rc, "error": stderr})
    return results


_CLUSTER = re.compile(r"\[upgrade/versions\] Cluster version:\s*(\S+)")
_KUBEADM = re.compile(r"\[upgrade/versions\] kubeadm version:\s*(\S+)")
_APPLY = re.compile(r"^\s*kubeadm upgrade apply (v?[0-9]+\.[0-9]+\.[0-9]+\S*)\s*$")
_UPDATE_KUBEADM = re.compile(r"Before you can perform this upgrade, you have to update kubeadm to (\S+?)\.?$")
_BLOCKING = (
    re.compile(r"\bFATAL\b"),
    re.compile(r"^\s*\[ERROR [^\]]*\]"),
    re.compile(r"^\s*error execution phase"),
    re.compile(r"^\s*- Specified version to upgrade to"),
    re.compile(r"^\s*\[upgrade/health\] FATAL"),
)
_CONTINUED = re.compile(r"^[0-9]+ x v?[0-9]")
_COMPONENT_ROW = re.compile(r"^(\S+)\s+(?:(\S+)\s+)??(?:[0-9]+ x )?(v?[0-9][0-9A-Za-z.+-]*)\s+(v?[0-9][0-9A-Za-z.+-]*)\s*$")


def parse_upgrade_plan(text):
    """``{cluster_version, kubeadm_version, up_to_date, apply_versions, components, blocking,
    update_kubeadm_to}`` from ``kubeadm upgrade plan`` output (stdout and stderr together).
    KubeadmOutputError when the cluster version line is missing (the plan did not get far
    enough to say anything)."""
    text = text or ""
    cluster = _CLUSTER.search(text)
    if not cluster:
        raise KubeadmOutputError("no '[upgrade/versions] Cluster version:' line in the kubeadm upgrade plan output")
    kubeadm = _KUBEADM.search(text)
    result = {
        "cluster_version": cluster.group(1),
        "kubeadm_version": kubeadm.group(1) if kubeadm else "",
        "up_to_date": "you're up-to-date" in text,
        "apply_versions": [],
        "components": [],
        "blocking": [],
        "update_kubeadm_to": "",
        "format": "text",
    }
    in_table = False
    for line in text.splitlines():
        stripped = line.strip()
        apply = _APPLY.match(line)
        if apply:
            result["apply_versions"].append(apply.group(1))
        update = _UPDATE_KUBEADM.search(stripped)
        if update:
            result["update_kubeadm_to"] = update.group(1)
        if any(pattern.search(line) for pattern in _BLOCKING):
            result["blocking"].append(stripped)
        if stripped.startswith("COMPONENT"):
            in_table = True
            continue
        if not stripped or stripped.startswith("_"):
            in_table = False
            continue
        if in_table:
            if _CONTINUED.match(stripped) and result["components"]:
                # old releases list more kubelet versions on lines of their own ("2 x v1.13.4  v1.13.7")
                stripped = "%s %s" % (result["components"][-1]["component"], stripped)
            row = _COMPONENT_ROW.match(stripped)
            if row:
                result["components"].append({"component": row.group(1), "node": row.group(2) or "",
                                             "current": row.group(3), "target": row.group(4)})
    result["kubelet_versions"] = [c["current"] for c in result["components"] if c["component"].lower() == "kubelet"]
    return result


_COUNTED = re.compile(r"^[0-9]+ x (\S+)$")


def parse_plan_json(text):
    """The ``UpgradePlan`` of ``kubeadm upgrade plan -o json`` (kubeadm 1.30+), in the shape of
    ``parse_upgrade_plan``: ``{format: json, cluster_version, kubeadm_version, up_to_date,
    apply_versions, components, blocking, update_kubeadm_to, kubelet_versions}``.
    ``availableUpgrades`` is omitted by kubeadm when nothing is to be upgraded (types.go,
    omitempty): then ``up_to_date``, and the cluster version is the API server's to tell
    (``cluster_version`` empty). A component config that needs a manual upgrade blocks.
    KubeadmOutputError when it is not that document (another kind or apiVersion, a known key
    missing or of the wrong type); a key this reader does not know is ignored (the API version may
    gain optional fields)."""
    record = "kubeadm upgrade plan -o json"
    try:
        document = _json_document(text, record)
        _typed(document, record, "UpgradePlan")
        result = {"format": "json", "cluster_version": "", "kubeadm_version": "", "up_to_date": False,
                  "apply_versions": [], "components": [], "blocking": [], "update_kubeadm_to": "",
                  "kubelet_versions": []}
        if "components" in document:
            # the flat shape of an early v1alpha3 (types.go before PR #123461: {components, configVersions}):
            # a known other shape, never read as "nothing offered"
            raise RecordError(record, "a flat UpgradePlan (top-level components): not the availableUpgrades shape "
                                      "this reader knows", "components")
        upgrades = listing(document.get("availableUpgrades", []), record, "availableUpgrades", max_items=20)
        result["up_to_date"] = not upgrades
        for number, upgrade in enumerate(upgrades):
            where = "availableUpgrades[%d]" % number
            mapping(upgrade, record, where, required=("description", "components"))
            _type_meta(upgrade, record, where)
            string(upgrade["description"], record, where + ".description", max_length=200)
            components = listing(upgrade["components"], record, where + ".components", max_items=5000)
            if not components:
                raise RecordError(record, "no components", where + ".components")
            for index, item in enumerate(components):
                at = "%s.components[%d]" % (where, index)
                mapping(item, record, at, required=("name", "currentVersion", "newVersion"))
                _type_meta(item, record, at)
                row = {"component": string(item["name"], record, at + ".name", max_length=100, allow_empty=False),
                       "node": string(item.get("nodeName", ""), record, at + ".nodeName", max_length=253),
                       "current": string(item["currentVersion"], record, at + ".currentVersion", max_length=100),
                       "target": string(item["newVersion"], record, at + ".newVersion", max_length=100)}
                result["components"].append(row)
                if row["component"] == "kube-apiserver":
                    result["apply_versions"].append(row["target"])
                    result["cluster_version"] = result["cluster_version"] or row["current"]
                elif row["component"] == "kubeadm":
                    result["kubeadm_version"] = row["current"]
                    if row["current"] != row["target"]:
                        result["update_kubeadm_to"] = row["target"]
                elif row["component"] == "kubelet":
                    counted = _COUNTED.match(row["current"])  # "2 x v1.32.8" (no node column) or "v1.32.8"
                    result["kubelet_versions"].append(counted.group(1) if counted else row["current"])
            if not result["apply_versions"]:
                raise RecordError(record, "no kube-apiserver component: the upgrade's target is unknown", where)
        for index, item in enumerate(listing(document.get("configVersions", []), record, "configVersions", 100)):
            at = "configVersions[%d]" % index
            mapping(item, record, at, required=("group", "currentVersion", "preferredVersion", "manualUpgradeRequired"))
            group = string(item["group"], record, at + ".group", max_length=253)
            for key in ("currentVersion", "preferredVersion"):
                string(item[key], record, "%s.%s" % (at, key), max_length=100)
            if boolean(item["manualUpgradeRequired"], record, at + ".manualUpgradeRequired"):
                result["blocking"].append("component config %s %s needs a manual upgrade to %s"
                                          % (group, item["currentVersion"] or "(unknown)", item["preferredVersion"]))
    except RecordError as exc:
        raise KubeadmOutputError(str(exc))
    return result


# cmd/kubeadm/app/phases/upgrade/policy.go: MaximumAllowedMinorVersionUpgradeSkew = 1,
# MaximumAllowedMinorVersionDowngradeSkew = 1; MaximumAllowedMinorVersionKubeletSkew = 1 up to
# kubeadm 1.28 and 3 from 1.29 (kubernetes/kubernetes PR #120825, the n-3 kubelet skew).
UPGRADE_SKEW = 1
DOWNGRADE_SKEW = 1


def kubelet_skew(kubeadm):
    return 3 if tuple(kubeadm[:2]) >= (1, 29) else 1


def version_policy(cluster, kubeadm, target, kubelets=()):
    """kubeadm's EnforceVersionPolicies (cmd/kubeadm/app/phases/upgrade/policy.go) for upgrading
    a cluster at ``cluster`` to ``target`` with a kubeadm at ``kubeadm`` while the kubelets run
    ``kubelets``: ``{"mandatory": [...], "skippable": [...]}``, kubeadm's own messages. The
    versions are ``KubeVersion`` (or release tuples); ``target`` is a release (X.Y.Z tuple), so
    the rules that lower an error to skippable for a pre-release target, and
    detectUnstableVersionError ("if len(newK8sVersion.PreRelease()) == 0 { return nil }"), never
    apply to it. Mandatory errors stop kubeadm; skippable ones stop it unless ``--force`` is
    given, which gpufleet never does. kubeadm's own version is compared as policy.go does
    (``kubeadmVersion.LessThan(newK8sVersion)``, Semantic Versioning precedence): a kubeadm
    ``v1.37.1-rc.1`` is older than ``v1.37.1``."""
    cluster, kubeadm = reported(cluster), reported(kubeadm)
    kubelets = [reported(v) for v in kubelets]
    target = tuple(target)
    errors = {"mandatory": [], "skippable": []}
    new, have = version_text(target), kubeadm.text
    own = kubeadm.release
    # policy.go: "if !newK8sVersion.AtLeast(constants.MinimumControlPlaneVersion)" (mandatory);
    # constants.MinimumControlPlaneVersion is kubeadm's own minor - 1, patch 0
    minimum = (own[0], max(own[1] - 1, 0), 0)
    if target < minimum:
        errors["mandatory"].append("Specified version to upgrade to \"%s\" is equal to or lower than the minimum supported "
                                   "version \"%s\". Please specify a higher version to upgrade to"
                                   % (new, cluster.text))
    # policy.go: "if newK8sVersion.Minor() > clusterVersion.Minor()+MaximumAllowedMinorVersionUpgradeSkew" (mandatory)
    if target[1] > cluster.release[1] + UPGRADE_SKEW:
        errors["mandatory"].append("Specified version to upgrade to \"%s\" is too high; kubeadm can upgrade only %d minor "
                                   "version at a time" % (new, UPGRADE_SKEW))
    # policy.go: "if newK8sVersion.Minor() < clusterVersion.Minor()-MaximumAllowedMinorVersionDowngradeSkew" (mandatory)
    if target[1] < cluster.release[1] - DOWNGRADE_SKEW:
        errors["mandatory"].append("Specified version to downgrade to \"%s\" is too low; kubeadm can downgrade only %d "
                                   "minor version at a time" % (new, DOWNGRADE_SKEW))
    # policy.go: "if kubeadmVersion.LessThan(newK8sVersion)": a newer minor is mandatory, a newer patch skippable
    if kubeadm.precedence() < KubeVersion(target).precedence():
        if target[1] > own[1]:
            errors["mandatory"].append("Specified version to upgrade to \"%s\" is at least one minor release higher than "
                                       "the kubeadm minor release (%d > %d). Such an upgrade is not supported"
                                       % (new, target[1], own[1]))
        else:
            errors["skippable"].append("Specified version to upgrade to \"%s\" is higher than the kubeadm version \"%s\". "
                                       "Upgrade kubeadm first using the tool you used to install kubeadm" % (new, have))
    # policy.go: "if kubeadmVersion.Major() > newK8sVersion.Major() || kubeadmVersion.Minor() > newK8sVersion.Minor()"
    # (skippable): "Kubeadm version %s can only be used to upgrade to Kubernetes version %d.%d"
    if own[0] > target[0] or own[1] > target[1]:
        errors["skippable"].append("Kubeadm version %s can only be used to upgrade to Kubernetes version %d.%d"
                                   % (have, own[0], own[1]))
    # policy.go detectTooOldKubelets: "newK8sVersion.Minor() > kubeletVersion.Minor()+MaximumAllowedMinorVersionKubeletSkew"
    # (skippable)
    old = sorted(set(v.text for v in kubelets if target[1] > v.release[1] + kubelet_skew(own)))
    if old:
        errors["skippable"].append("There are kubelets in this cluster that are too old that have these versions [%s]"
                                   % " ".join(old))
    return errors


def unstable_kubeadm(kubeadm):
    """gpufleet's refusal of a kubeadm that is not a release (``kubeadm version -o short`` with a
    pre-release or a build): the problem, or "" for a release. kubeadm upgrades with its own
    manifests and images; policy.go refuses unstable versions (detectUnstableVersionError:
    "Specified version to upgrade to %q is an unstable version and such upgrades weren't allowed
    via setting the --allow-*-upgrades flags") unless --allow-experimental-upgrades /
    --allow-release-candidate-upgrades is given, which gpufleet never passes, and a kubeadm
    ``vX.Y.Z-rc.N`` is older than the release ``vX.Y.Z`` it precedes (``kubeadmVersion.LessThan``)."""
    kubeadm = reported(kubeadm)
    if kubeadm.is_release:
        return ""
    return ("kubeadm %s is not a release%s: gpufleet upgrades with a released kubeadm only (kubeadm's policy.go refuses "
            "unstable versions without --allow-experimental-upgrades / --allow-release-candidate-upgrades, which "
            "gpufleet never passes); install the kubeadm package of the target" % (kubeadm.text, _not_a_release(kubeadm)))


def judge_plan(plan, target, cluster=None, kubeadm=None):
    """Problems (list of strings, empty: go ahead) of a parsed plan (``parse_plan_json`` or
    ``parse_upgrade_plan``) for ``target`` (X.Y.Z). ``cluster`` (the API server's version, as
    observed) and ``kubeadm`` (``kubeadm version -o short``) are ``KubeVersion`` (or release
    tuples); when not given they are taken from the plan. kubeadm's version policy is applied in
    full (``version_policy``: its skippable errors refuse too, gpufleet never forces), then
    gpufleet's own (a released kubeadm, no downgrade). Nothing to apply only when the API server
    runs exactly the release ``target`` (``at_target``)."""
    wanted = kube_version(target, "rolling_upgrade_target.kubernetes")
    problems = list("kubeadm upgrade plan: %s" % line for line in plan["blocking"])
    if plan["update_kubeadm_to"]:
        problems.append("kubeadm upgrade plan: the installed kubeadm (%s) is older than the target; kubeadm %s is "
                        "needed" % (plan["kubeadm_version"] or "unknown", plan["update_kubeadm_to"]))
    try:
        if kubeadm is None and plan["kubeadm_version"]:
            kubeadm = parse_kube_version(plan["kubeadm_version"], "kubeadm version")
        if cluster is None:
            if not plan["cluster_version"]:
                raise ValueError("the cluster's version is unknown (neither observed nor in the plan)")
            cluster = parse_kube_version(plan["cluster_version"], "cluster version")
        kubelets = [parse_kube_version(v, "kubelet version") for v in plan.get("kubelet_versions", [])]
    except ValueError as exc:
        return problems + [str(exc)]
    if kubeadm is None:
        return problems + ["the kubeadm version is unknown: kubeadm's version policy cannot be applied"]
    cluster, kubeadm = reported(cluster), reported(kubeadm)
    if cluster.release[0] != wanted[0]:
        return problems + ["rolling_upgrade_target.kubernetes %s changes the major version of the cluster (%s): not "
                           "supported" % (version_text(wanted), cluster.text)]
    unstable = unstable_kubeadm(kubeadm)
    if unstable:
        problems.append(unstable)
    policy = version_policy(cluster, kubeadm, wanted, kubelets)
    problems.extend("kubeadm's version policy (policy.go, mandatory): %s" % e for e in policy["mandatory"])
    problems.extend("kubeadm's version policy (policy.go, needs --force, which gpufleet never passes): %s" % e
                    for e in policy["skippable"])
    if at_target(cluster, wanted):
        return problems  # nothing to apply (resumed run or current cluster)
    problems.extend(skew_problems(cluster, wanted, first_control_plane=True))
    offered = []
    for text in plan["apply_versions"]:
        try:
            offered.append(kube_version(text, "apply version"))
        except ValueError as exc:
            problems.append("kubeadm upgrade plan: %s" % exc)
    if plan["up_to_date"] and plan["format"] == "json":
        problems.append("kubeadm upgrade plan has nothing to upgrade, but the API server runs %s, not %s"
                        % (cluster.text, version_text(wanted)))
    elif wanted not in offered:
        problems.append("kubeadm upgrade plan does not offer %s (it offers %s)"
                        % (version_text(wanted), ", ".join(version_text(v) for v in offered) or "nothing"))
    return problems


def api_server_runs_target(server, target):
    """Problems (empty: it does) of the one rule for every node but the first control-plane node,
    before the node is touched (action ``preflight``) and after its kubelet restart (action
    ``verify``): the API server (``server``, as reported) runs a release of the target's minor
    and at least the target's patch, so this node's kubelet is never newer than the API server
    (https://kubernetes.io/releases/version-skew-policy/#kubelet) and never goes below the
    cluster's minor. A pre-release or a build of the API server is not a release: refused."""
    server, target = reported(server), tuple(target)
    if not server.is_release:
        return ["the API server reports %s%s: rolling_upgrade_target.kubernetes %s is only upgraded to on a node "
                "other than the first control-plane node once the API server runs a release of it"
                % (server.text, _not_a_release(server), version_text(target))]
    if server.release[:2] == target[:2] and server.release >= target:
        return []
    if server.release < target:
        return ["rolling_upgrade_target.kubernetes %s would make this node's kubelet newer than the API "
                "server (%s): upgrade the first control-plane node (kubeadm upgrade apply) before the "
                "other nodes" % (version_text(target), server.text)]
    return ["rolling_upgrade_target.kubernetes %s is below the API server's minor (%s): a node other than the "
            "first control-plane node is upgraded to the version the API server runs (its minor, at least its "
            "patch), never down" % (version_text(target), server.text)]


def skew_problems(server, target, first_control_plane, kubelet=None):
    """gpufleet's rules for upgrading a node to ``target`` (X.Y.Z tuple) while the API server
    runs ``server`` and, when known, this node's kubelet runs ``kubelet`` (``KubeVersion`` or
    release tuples), checked before the node is touched.

    First control-plane node (it moves the API server): no downgrade (gpufleet upgrades; kubeadm
    itself would go down one minor), at most one minor up (policy.go); an API server that reports
    a build (``+k3s1``) is not a kubeadm release: refused. Every other node: the API server must
    already run the target (``api_server_runs_target``, the rule action ``verify`` applies after
    the restart). Every node: never down from this node's kubelet."""
    server, target = reported(server), tuple(target)
    problems = []
    if server.release[0] != target[0]:
        problems.append("rolling_upgrade_target.kubernetes %s changes the major version of the cluster (%s): "
                        "not supported" % (version_text(target), server.text))
        return problems
    if first_control_plane:
        if server.build:
            problems.append("the API server reports %s%s: gpufleet upgrades kubeadm clusters on Kubernetes releases"
                            % (server.text, _not_a_release(server)))
        elif KubeVersion(target).precedence() < server.precedence():
            problems.append("rolling_upgrade_target.kubernetes %s is older than the cluster (API server %s): "
                            "gpufleet does not downgrade" % (version_text(target), server.text))
        elif target[1] > server.release[1] + UPGRADE_SKEW:
            problems.append("rolling_upgrade_target.kubernetes %s skips a minor: the cluster runs %s and kubeadm "
                            "upgrades one minor at a time; upgrade to 1.%d first"
                            % (version_text(target), server.text, server.release[1] + 1))
    else:
        problems.extend(api_server_runs_target(server, target))
    if kubelet is not None:
        kubelet = reported(kubelet)
        if KubeVersion(target).precedence() < kubelet.precedence():
            problems.append("rolling_upgrade_target.kubernetes %s is older than this node's kubelet (%s): gpufleet "
                            "does not downgrade" % (version_text(target), kubelet.text))
    return problems


def _git_version(value, record, field):
    text = string(value, record, field, max_length=100, allow_empty=False)
    try:
        return parse_kube_version(text, "%s %s" % (record, field))
    except ValueError as exc:
        raise RecordError(record, str(exc), field)


def server_version(kubectl_json):
    """The API server's ``KubeVersion`` from ``kubectl version -o json`` (``serverVersion.gitVersion``)."""
    record = "kubectl version -o json"
    try:
        data = mapping(_json_document(kubectl_json, record), record, required=("serverVersion",))
        server = mapping(data["serverVersion"], record, "serverVersion", required=("gitVersion",))
        return _git_version(server["gitVersion"], record, "serverVersion.gitVersion")
    except RecordError as exc:
        raise KubeadmOutputError("the API server's version is unknown (did it answer?): %s" % exc)


def kubelet_version(node_json, node_name):
    """The kubelet version the Node ``node_name`` reports (``status.nodeInfo.kubeletVersion`` of
    ``kubectl get node <name> -o json``)."""
    record = "kubectl get node %s -o json" % node_name
    try:
        node = mapping(_json_document(node_json, record), record, required=("metadata", "status"))
        name = mapping(node["metadata"], record, "metadata", required=("name",))["name"]
        if name != node_name:
            raise RecordError(record, "the Node is %r, not %r" % (name, node_name), "metadata.name")
        status = mapping(node["status"], record, "status", required=("nodeInfo",))
        info = mapping(status["nodeInfo"], record, "status.nodeInfo", required=("kubeletVersion",))
        return _git_version(info["kubeletVersion"], record, "status.nodeInfo.kubeletVersion")
    except RecordError as exc:
        raise KubeadmOutputError("the kubelet version of node %s is unknown: %s" % (node_name, exc))


def short_version(text):
    """kubeadm's own ``KubeVersion`` from ``kubeadm version -o short`` (``v1.33.4``)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if len(lines) != 1:
        raise KubeadmOutputError("kubeadm version -o short printed %d lines, not one version: %r"
                                 % (len(lines), (text or "")[:200]))
    try:
        return parse_kube_version(lines[0], "kubeadm version")
    except ValueError as exc:
        raise KubeadmOutputError(str(exc))


_BANNERS = (
    # apply.go up to release-1.31
    ("1.31-", re.compile(r'^\[upgrade/successful\] SUCCESS! Your cluster was upgraded to "(v[^"]+)"\. Enjoy!$')),
    # apply.go from release-1.32 (phased apply)
    ("1.32+", re.compile(r'^\[upgrade\] SUCCESS! A control plane node of your cluster was upgraded to "(v[^"]+)"\.$')),
)


def apply_banner(text):
    """Information only: ``{wording, version}`` of kubeadm's closing line, or None when there is
    none. It decides nothing: an apply is judged by its exit status and the API server's version."""
    for line in (text or "").splitlines():
        for wording, pattern in _BANNERS:
            match = pattern.match(line.strip())
            if match:
                return {"wording": wording, "version": match.group(1)}
    return None


def apply_verdict(rc, observed, target):
    """Problems (empty: succeeded) of ``kubeadm upgrade apply`` to ``target``: it exited ``rc``
    and the API server then reported ``observed`` (a ``KubeVersion`` or release tuple, or None
    when it could not be read). Both must show the upgrade, the API server exactly the release
    (``at_target``); no output line can stand in for either."""
    problems = []
    if rc != 0:
        problems.append("kubeadm upgrade apply exited with rc %s" % rc)
    if observed is None:
        problems.append("the API server's version could not be read after the apply")
    elif not at_target(observed, target):
        observed = reported(observed)
        problems.append("the API server reports %s, not the target %s%s"
                        % (observed.text, version_text(target), _not_a_release(observed)))
    return problems


def node_verdict(server, kubelet, target, first_control_plane):
    """Problems (empty: upgraded) of a node after its kubelet restart: the API server (``server``)
    runs exactly the target (first control-plane node) or passes ``api_server_runs_target``
    (other nodes: the rule preflight applied), and this node's kubelet (``kubelet``) reports
    exactly the target. ``KubeVersion`` or release tuples; None: could not be read."""
    problems = []
    if server is None:
        problems.append("the API server's version could not be read")
    elif first_control_plane and not at_target(server, target):
        server = reported(server)
        problems.append("the API server reports %s, not the target %s%s"
                        % (server.text, version_text(target), _not_a_release(server)))
    elif not first_control_plane:
        problems.extend(api_server_runs_target(server, target))
    if kubelet is None:
        problems.append("this node's kubelet version could not be read")
    elif not at_target(kubelet, target):
        kubelet = reported(kubelet)
        problems.append("this node's kubelet reports %s, not the target %s%s"
                        % (kubelet.text, version_text(target), _not_a_release(kubelet)))
    return problems


# --- module work (kubeadm_certs, kubeadm_upgrade) ------------------------------------------------

def _output(result):
    return "\n".join(part for part in (result.stdout, result.stderr) if part)


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


CERTS_ARGSPEC = {
    "kubeadm": {"type": "str", "default": "kubeadm"},
    "warn_days": {"type": "int", "default": 30},
    "target": {"type": "str", "default": "kubeadm-pki"},
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
}


def kubeadm_own_version(runner, kubeadm):
    """``kubeadm version -o short`` as a ``KubeVersion``; ModuleFailure when it cannot be read."""
    command = [kubeadm, "version", "-o", "short"]
    result = runner.run(command, timeout=60)
    if result.rc != 0:
        raise ModuleFailure("%s failed (rc %s): %s"
                            % (" ".join(command), result.rc, _tail(_output(result), 5) or "no output"))
    try:
        return short_version(result.stdout)
    except KubeadmOutputError as exc:
        raise ModuleFailure(str(exc))


def certs_checks(runner, kubeadm, warn_days, now, target="kubeadm-pki"):
    """``(CheckResults, parsed or None)`` of ``kubeadm certs check-expiration`` run through
    ``runner``: ``-o json`` for a kubeadm 1.30+ (``JSON_OUTPUT_SINCE``), the text before; a
    command that fails or prints nothing readable is a failing check (fail closed)."""
    try:
        own = kubeadm_own_version(runner, kubeadm)
    except ModuleFailure as exc:
        return certs_command_failed("%s version -o short" % kubeadm, None, exc.msg, target), None
    structured = own.release[:2] >= JSON_OUTPUT_SINCE
    command = [kubeadm, "certs", "check-expiration"] + (["-o", "json"] if structured else [])
    result = runner.run(command, timeout=120)
    text = _output(result)
    if result.rc != 0 or getattr(result, "timed_out", False):
        return certs_command_failed(" ".join(command), result.rc, _tail(text, 5) or "no output", target), None
    try:
        parsed = parse_certs_json(result.stdout) if structured else parse_check_expiration(result.stdout)
    except KubeadmOutputError as exc:
        return certs_command_failed(" ".join(command), result.rc, str(exc), target), None
    return certs_expiry_checks(parsed, now, warn_days, target), parsed


def certs_work(module):
    params = module.params
    if params["warn_days"] < 0:
        raise ModuleFailure("warn_days must be a number of days >= 0, got %d" % params["warn_days"])
    results, parsed = certs_checks(ModuleRunner(module), params["kubeadm"], params["warn_days"], time.time(),
                                   params["target"])
    extra = {"certificates": parsed or {"certificates": [], "authorities": []}}
    exit_with_checks(module, results, params["fail_on"], **extra)


UPGRADE_ARGSPEC = {
    "action": {"type": "str", "required": True, "choices": ["preflight", "plan", "apply", "node", "verify"]},
    "version": {"type": "str", "required": True},
    "first_control_plane": {"type": "bool", "default": False},
    "node_name": {"type": "str"},
    "kubeadm": {"type": "str", "default": "kubeadm"},
    "kubectl": {"type": "str", "default": "kubectl"},
    "kubeconfig": {"type": "path", "default": "/etc/kubernetes/admin.conf"},
    "etcd_upgrade": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 1800},
    "observe_timeout": {"type": "int", "default": 180},
}
OBSERVE_INTERVAL = 5.0


def _kubectl(params):
    return [params["kubectl"], "--kubeconfig", params["kubeconfig"]]


def observed_server(runner, params):
    """The API server's version (``KubeVersion``), or ``(None, why)`` when it cannot be read."""
    command = _kubectl(params) + ["version", "-o", "json"]
    result = runner.run(command, timeout=60)
    if result.rc != 0:
        return None, "%s (rc %s): %s" % (" ".join(command), result.rc, _tail(_output(result), 5) or "no output")
    try:
        return server_version(result.stdout), ""
    except KubeadmOutputError as exc:
        return None, str(exc)


def observed_kubelet(runner, params):
    command = _kubectl(params) + ["get", "node", params["node_name"], "-o", "json"]
    result = runner.run(command, timeout=60)
    if result.rc != 0:
        return None, "%s (rc %s): %s" % (" ".join(command), result.rc, _tail(_output(result), 5) or "no output")
    try:
        return kubelet_version(result.stdout, params["node_name"]), ""
    except KubeadmOutputError as exc:
        return None, str(exc)


def _observe(look, judge, params, sleep, clock):
    """Look (a function returning what was seen and why not) until ``judge`` finds no problem or
    ``observe_timeout`` seconds passed; the last problems (empty: observed)."""
    deadline = clock() + max(params["observe_timeout"], 0)
    while True:
        seen = look()
        problems = judge(seen)
        if not problems or clock() >= deadline:
            return seen, problems
        sleep(OBSERVE_INTERVAL)


def preflight(runner, params):
    """The API server's version (and, with ``node_name``, this node's kubelet) against gpufleet's
    skew rules for this node (``skew_problems``); ModuleFailure naming
    rolling_upgrade_target.kubernetes when the upgrade is refused."""
    target = kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    server, why = observed_server(runner, params)
    if server is None:
        raise ModuleFailure("could not read the API server's version: %s" % why)
    info = {"server_version": server.text, "target_version": version_text(target)}
    kubelet = None
    if params.get("node_name"):
        kubelet, why = observed_kubelet(runner, params)
        if kubelet is None:
            raise ModuleFailure("could not read the kubelet version of node %s: %s" % (params["node_name"], why), **info)
        info["kubelet_version"] = kubelet.text
    problems = skew_problems(server, target, params["first_control_plane"], kubelet)
    if problems:
        raise ModuleFailure("upgrade refused: " + "; ".join(problems), **info)
    return dict(info, changed=False, cluster_at_target=at_target(server, target))


def plan(runner, params):
    """``kubeadm upgrade plan <version>`` (``-o json`` for a kubeadm 1.30+) judged against the
    API server's version as observed and kubeadm's own version (``version_policy``)."""
    target = kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    own = kubeadm_own_version(runner, params["kubeadm"])
    server, why = observed_server(runner, params)
    if server is None:
        raise ModuleFailure("could not read the API server's version before the plan: %s" % why)
    structured = own.release[:2] >= JSON_OUTPUT_SINCE
    command = [params["kubeadm"], "upgrade", "plan", version_text(target)] + (["-o", "json"] if structured else [])
    result = runner.run(command, timeout=600)
    text = _output(result)
    info = {"cluster_version": server.text, "target_version": version_text(target),
            "kubeadm_version": own.text, "cluster_at_target": at_target(server, target)}
    if result.rc != 0:
        raise ModuleFailure("kubeadm upgrade plan refuses %s: %s exited with rc %s: %s"
                            % (version_text(target), " ".join(command), result.rc, _tail(text) or "no output"), **info)
    try:
        parsed = parse_plan_json(result.stdout) if structured else parse_upgrade_plan(text)
    except KubeadmOutputError as exc:
        raise ModuleFailure("%s (rc %s): %s; output: %s" % (" ".join(command), result.rc, exc, _tail(text) or "none"),
                            **info)
    problems = judge_plan(parsed, params["version"], cluster=server, kubeadm=own)
    info["plan"] = parsed
    if problems:
        raise ModuleFailure("kubeadm upgrade plan refuses %s: %s" % (version_text(target), "; ".join(problems)), **info)
    return dict(info, changed=False)


def apply(runner, params, check_mode, sleep=time.sleep, clock=time.time):
    """``kubeadm upgrade apply`` after a passing plan; nothing when the API server already runs
    the target (a resumed run). Succeeded when kubeadm exited 0 and the API server then reports
    the target (looked at for up to ``observe_timeout`` seconds while it restarts)."""
    result = plan(runner, params)
    if result["cluster_at_target"]:
        return dict(result, changed=False, msg="the API server already runs %s" % result["target_version"])
    if check_mode:
        return dict(result, changed=True)
    target = kube_version(params["version"], "version")
    command = [params["kubeadm"], "upgrade", "apply", "--yes", result["target_version"],
               "--etcd-upgrade=%s" % ("true" if params["etcd_upgrade"] else "false")]
    done = runner.run(command, timeout=params["timeout"])
    text = _output(done)
    banner = apply_banner(text)
    if done.rc != 0:
        # kubeadm failed: what the API server runs now is still worth saying, but nothing is waited for
        (observed, why), problems = observed_server(runner, params), apply_verdict(done.rc, None, target)
    else:
        (observed, why), problems = _observe(lambda: observed_server(runner, params),
                                             lambda seen: apply_verdict(done.rc, seen[0], target), params, sleep, clock)
    info = dict(result, banner=banner, observed_version=observed.text if observed else "")
    if problems:
        raise ModuleFailure("%s did not upgrade the control plane: %s%s; kubeadm: %s"
                            % (" ".join(command), "; ".join(problems), " (%s)" % why if why else "",
                               _tail(text) or "no output"), **info)
    return dict(info, changed=True, output=_tail(text))


def node(runner, params, check_mode):
    """``kubeadm upgrade node`` (another control-plane node, or a worker); harmless when repeated.
    Its exit status decides here; the kubelet's version is observed later (action verify)."""
    if check_mode:
        return {"changed": True}
    command = [params["kubeadm"], "upgrade", "node"]
    done = runner.run(command, timeout=params["timeout"])
    text = _output(done)
    if done.rc != 0:
        raise ModuleFailure("%s failed (rc %s): %s" % (" ".join(command), done.rc, _tail(text) or "no output"))
    return {"changed": True, "output": _tail(text)}


def verify(runner, params, sleep=time.sleep, clock=time.time):
    """After the kubelet restart: the API server and this node's kubelet report the target
    (``node_verdict``), looked at for up to ``observe_timeout`` seconds; ModuleFailure otherwise."""
    if not params.get("node_name"):
        raise ModuleFailure("action verify needs node_name (the Node whose kubelet is looked at)")
    target = kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")

    def look():
        return observed_server(runner, params), observed_kubelet(runner, params)

    def judge(seen):
        return node_verdict(seen[0][0], seen[1][0], target, params["first_control_plane"])

    seen, problems = _observe(look, judge, params, sleep, clock)
    info = {"target_version": version_text(target),
            "server_version": seen[0][0].text if seen[0][0] else "",
            "kubelet_version": seen[1][0].text if seen[1][0] else ""}
    if problems:
        reasons = [why for why in (seen[0][1], seen[1][1]) if why]
        raise ModuleFailure("node %s is not seen at %s: %s%s"
                            % (params["node_name"], version_text(target), "; ".join(problems),
                               " (%s)" % "; ".join(reasons) if reasons else ""),
                            **info)
    return dict(info, changed=False)


def upgrade_work(module, runner=None, sleep=time.sleep, clock=time.time):
    params = module.params
    runner = runner or ModuleRunner(module)
    try:
        kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    except ValueError as exc:
        raise ModuleFailure(str(exc))
    if params.get("observe_timeout", 0) < 0:
        raise ModuleFailure("observe_timeout must be a number of seconds >= 0, got %d" % params["observe_timeout"])
    action = params["action"]
    if action == "preflight":
        return preflight(runner, params)
    if action == "plan":
        return plan(runner, params)
    if action == "apply":
        if not params["first_control_plane"]:
            raise ModuleFailure("action apply runs on the first control-plane node only (first_control_plane=true); "
                                "the other nodes run action node")
        return apply(runner, params, module.check_mode, sleep, clock)
    if action == "verify":
        return verify(runner, params, sleep, clock)
    return node(runner, params, module.check_mode)
