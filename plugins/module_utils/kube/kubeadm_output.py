# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What kubeadm and kubectl print, read (kubeadm.py runs them, kubeadm_policy.py judges): the
Kubernetes version type (``KubeVersion``, ``parse_kube_version``), ``upgrade plan``, ``certs
check-expiration``, ``kubeadm version -o short``, the API server's and a Node's kubelet version,
``upgrade apply``'s closing line. Imports only the records layer.

Machine-readable first. Since kubeadm 1.30 (``JSON_OUTPUT_SINCE``) ``upgrade plan -o json`` prints
an ``UpgradePlan`` and ``certs check-expiration -o json`` a ``CertificateExpirationInfo``, both of
``apiVersion: output.kubeadm.k8s.io/v1alpha3`` (kubernetes/kubernetes
cmd/kubeadm/app/apis/output/v1alpha3/types.go; PR #123461 and #123492 for the plan, PR #123372 for
the certificates). They are read strictly (plugins/module_utils/core/records.py: one document, the
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
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import (
    RecordError, boolean, integer, listing, load_json, mapping, string)

# kubeadm 1.30 is the first with -o json for upgrade plan (output.kubeadm.k8s.io/v1alpha3,
# kubernetes/kubernetes PR #123461) and certs check-expiration (PR #123372); an older kubeadm
# is read from its text.
JSON_OUTPUT_SINCE = (1, 30)
OUTPUT_API_VERSION = "output.kubeadm.k8s.io/v1alpha3"
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
# kubernetes/kubernetes issue #53259) and a distribution's build (``v1.36.3+k3s1``) are not it.
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
    ``v1.36.3+k3s1``; ``v`` optional); ValueError naming ``what`` for anything else (``1.37``,
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
    candidate), ``1.36.3+k3s1`` (a distribution's build), ``v1.37.1.2``, a package version."""
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
