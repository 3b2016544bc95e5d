# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubeadm on the node: ``kubeadm certs check-expiration`` and ``kubeadm upgrade plan`` output
parsed, the certificate expiry check, and the version-skew rules of an upgrade.

Formats (real captures, sources named in tests/fixtures/kubeadm/README.md):

- ``certs check-expiration`` prints ``[check-expiration]`` lines, then two tables whose columns
  are aligned with spaces (``CERTIFICATE  EXPIRES  RESIDUAL TIME  CERTIFICATE AUTHORITY
  EXTERNALLY MANAGED`` and ``CERTIFICATE AUTHORITY  EXPIRES  RESIDUAL TIME  EXTERNALLY
  MANAGED``). A cell may be empty (older kubeadm left the CA of kubeconfig files blank), so the
  rows are cut at the header's column offsets, not split on spaces. EXPIRES is
  ``Jan 02, 2006 15:04 UTC`` (English month names whatever the locale); the residual time is
  ``<invalid>`` once expired, so expiry is judged from EXPIRES.
- ``upgrade plan`` prints ``[upgrade/versions] Cluster version: vX.Y.Z`` and ``kubeadm version:``,
  then tables ``COMPONENT  [NODE]  CURRENT  TARGET`` (AVAILABLE in old releases) and, when an
  upgrade is possible, ``kubeadm upgrade apply vX.Y.Z``; ``Awesome, you're up-to-date!`` when
  there is nothing to do; ``[upgrade/version] FATAL:`` / ``[ERROR ...]`` / ``error execution
  phase`` lines when kubeadm refuses, and a ``Note: Before you can perform this upgrade, you have
  to update kubeadm to vX.Y.Z.`` when the installed kubeadm is too old.

Version-skew rules (https://kubernetes.io/releases/version-skew-policy/ and the kubeadm upgrade
page): the control plane moves one minor at a time (1.y -> 1.y+1, never 1.y+2) and never down;
a kubelet is never newer than the API server, so every node but the first control-plane node
waits until the API server runs the target.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import FAIL_ON_CHOICES, CheckResults, exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.clock import utc_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import ModuleRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.versions import parse_version

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


def kube_version(value, what="version"):
    """``(major, minor, patch)`` of ``v1.29.2`` / ``1.29.2`` / ``1.29.2-1.1`` (a package version);
    ValueError naming ``what`` otherwise (``1.29`` has no patch: an upgrade needs X.Y.Z)."""
    text = "" if value is None else str(value).strip()
    try:
        parsed = parse_version(text)
    except ValueError:
        parsed = ()
    if len(parsed) < 3:
        raise ValueError("%s must be a Kubernetes version X.Y.Z (v optional), got %r" % (what, value))
    return tuple(parsed[:3])


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


def parse_check_expiration(text):
    """``{certificates: [...], authorities: [...]}`` from ``kubeadm certs check-expiration``;
    each entry ``{name, expires (epoch), expires_text, residual, ca?, externally_managed,
    missing}``. KubeadmOutputError when no certificate table is found or a row cannot be read
    (fail closed: an unreadable table never passes)."""
    lines = (text or "").splitlines()
    tables = {"certificates": None, "authorities": None}
    current = None
    for line in lines:
        if not line.strip():
            current = None
            continue
        cert_cols = _columns(line, _CERT_HEADER)
        ca_cols = _columns(line, _CA_HEADER)
        if cert_cols is not None:
            current, starts, kind = [], cert_cols, "certificates"
            tables[kind] = current
            continue
        if ca_cols is not None:
            current, starts, kind = [], ca_cols, "authorities"
            tables[kind] = current
            continue
        if current is None:
            continue  # [check-expiration] lines, klog warnings
        if line.strip().startswith("!MISSING!"):
            # kubeadm prints "!MISSING! <name>" and nothing else for a certificate it cannot find
            words = line.strip().split()
            current.append({"name": words[1] if len(words) > 1 else "", "missing": True,
                            "externally_managed": False})
            if not current[-1]["name"]:
                raise KubeadmOutputError("a !MISSING! row without a certificate name: %r" % line.strip())
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
        if not entry["name"]:
            raise KubeadmOutputError("a row without a certificate name: %r" % line.strip())
        current.append(entry)
    if not tables["certificates"]:
        raise KubeadmOutputError("no certificate table (CERTIFICATE  EXPIRES  RESIDUAL TIME ...) with rows in the output")
    return {"certificates": tables["certificates"], "authorities": tables["authorities"] or []}


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
    return result


def judge_plan(plan, target):
    """Problems (list of strings, empty: go ahead) of a parsed plan for ``target`` (X.Y.Z)."""
    wanted = kube_version(target, "rolling_upgrade_target.kubernetes")
    problems = list("kubeadm upgrade plan: %s" % line for line in plan["blocking"])
    if plan["update_kubeadm_to"]:
        problems.append("kubeadm upgrade plan: the installed kubeadm (%s) is older than the target; kubeadm %s is "
                        "needed" % (plan["kubeadm_version"] or "unknown", plan["update_kubeadm_to"]))
    if plan["kubeadm_version"]:
        try:
            have = kube_version(plan["kubeadm_version"], "kubeadm version")
        except ValueError as exc:
            problems.append(str(exc))
        else:
            if have < wanted or have[1] > wanted[1] + 1:
                problems.append("kubeadm %s cannot upgrade the cluster to %s (kubeadm at least the target, at most "
                                "one minor newer, is needed)" % (plan["kubeadm_version"], version_text(wanted)))
    cluster = kube_version(plan["cluster_version"], "cluster version")
    if cluster == wanted:
        return problems  # nothing to apply (resumed run or current cluster)
    problems.extend(skew_problems(cluster, wanted, first_control_plane=True))
    offered = [kube_version(v, "apply version") for v in plan["apply_versions"]]
    targets = [c["target"] for c in plan["components"] if c["component"] in ("kube-apiserver", "API Server")]
    if wanted not in offered and not any(kube_version(t, "target") == wanted for t in targets):
        problems.append("kubeadm upgrade plan does not offer %s (it offers %s)"
                        % (version_text(wanted), ", ".join(version_text(v) for v in offered) or "nothing"))
    return problems


def skew_problems(server, target, first_control_plane):
    """Problems of upgrading a node to ``target`` while the API server runs ``server`` (tuples).

    First control-plane node (it moves the API server): no downgrade, at most one minor up.
    Every other node (other control-plane nodes, workers): the API server must already run the
    target's minor and at least its patch, since a kubelet is never newer than the API server."""
    problems = []
    if server[0] != target[0]:
        problems.append("rolling_upgrade_target.kubernetes %s changes the major version of the cluster (%s): "
                        "not supported" % (version_text(target), version_text(server)))
        return problems
    if first_control_plane:
        if target < server:
            problems.append("rolling_upgrade_target.kubernetes %s is older than the cluster (API server %s): "
                            "kubeadm does not downgrade" % (version_text(target), version_text(server)))
        elif target[1] > server[1] + 1:
            problems.append("rolling_upgrade_target.kubernetes %s skips a minor: the cluster runs %s and kubeadm "
                            "upgrades one minor at a time; upgrade to 1.%d first"
                            % (version_text(target), version_text(server), server[1] + 1))
    elif server < target:
        problems.append("rolling_upgrade_target.kubernetes %s would make this node's kubelet newer than the API "
                        "server (%s): upgrade the first control-plane node (kubeadm upgrade apply) before the "
                        "other nodes" % (version_text(target), version_text(server)))
    return problems


def server_version(kubectl_json):
    """The API server's version tuple from ``kubectl version -o json`` (``serverVersion.gitVersion``)."""
    try:
        data = json.loads(kubectl_json)
        text = data["serverVersion"]["gitVersion"]
    except (ValueError, TypeError, KeyError):
        raise KubeadmOutputError("kubectl version -o json has no serverVersion.gitVersion (the API server did not "
                                 "answer?): %s" % (kubectl_json or "").strip()[:300])
    return kube_version(text, "the API server's version")


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


def certs_checks(runner, kubeadm, warn_days, now, target="kubeadm-pki"):
    """``(CheckResults, parsed or None)`` of ``kubeadm certs check-expiration`` run through
    ``runner``; a command that fails or prints no readable table is a failing check (fail closed)."""
    command = [kubeadm, "certs", "check-expiration"]
    result = runner.run(command, timeout=120)
    text = _output(result)
    if result.rc != 0 or getattr(result, "timed_out", False):
        return certs_command_failed(" ".join(command), result.rc, _tail(text, 5) or "no output", target), None
    try:
        parsed = parse_check_expiration(result.stdout)
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
    "action": {"type": "str", "required": True, "choices": ["preflight", "plan", "apply", "node"]},
    "version": {"type": "str", "required": True},
    "first_control_plane": {"type": "bool", "default": False},
    "kubeadm": {"type": "str", "default": "kubeadm"},
    "kubectl": {"type": "str", "default": "kubectl"},
    "kubeconfig": {"type": "path", "default": "/etc/kubernetes/admin.conf"},
    "etcd_upgrade": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 1800},
}


def preflight(runner, params):
    """The API server's version and the skew rules for this node; ModuleFailure naming
    rolling_upgrade_target.kubernetes when the upgrade is refused."""
    target = kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    command = [params["kubectl"], "--kubeconfig", params["kubeconfig"], "version", "-o", "json"]
    result = runner.run(command, timeout=60)
    if result.rc != 0:
        raise ModuleFailure("could not read the API server's version (%s, rc %s): %s"
                            % (" ".join(command), result.rc, _tail(_output(result), 5) or "no output"))
    try:
        server = server_version(result.stdout)
    except KubeadmOutputError as exc:
        raise ModuleFailure(str(exc))
    problems = skew_problems(server, target, params["first_control_plane"])
    info = {"server_version": version_text(server), "target_version": version_text(target)}
    if problems:
        raise ModuleFailure("upgrade refused: " + "; ".join(problems), **info)
    return dict(info, changed=False, cluster_at_target=server >= target)


def plan(runner, params):
    target = kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    command = [params["kubeadm"], "upgrade", "plan", version_text(target)]
    result = runner.run(command, timeout=600)
    text = _output(result)
    try:
        parsed = parse_upgrade_plan(text)
    except KubeadmOutputError as exc:
        raise ModuleFailure("%s (rc %s): %s; output: %s" % (" ".join(command), result.rc, exc, _tail(text) or "none"))
    problems = judge_plan(parsed, params["version"])
    if result.rc != 0 and not problems:
        problems.append("kubeadm upgrade plan exited with rc %s" % result.rc)
    info = {"plan": parsed, "cluster_version": parsed["cluster_version"], "target_version": version_text(target),
            "cluster_at_target": kube_version(parsed["cluster_version"], "cluster version") == target}
    if problems:
        raise ModuleFailure("kubeadm upgrade plan refuses %s: %s" % (version_text(target), "; ".join(problems)), **info)
    return dict(info, changed=False)


def apply(runner, params, check_mode):
    """``kubeadm upgrade apply`` after a passing plan; nothing when the cluster already runs the
    target (a resumed run)."""
    result = plan(runner, params)
    if result["cluster_at_target"]:
        return dict(result, changed=False, msg="the cluster already runs %s" % result["target_version"])
    if check_mode:
        return dict(result, changed=True)
    command = [params["kubeadm"], "upgrade", "apply", "--yes", result["target_version"],
               "--etcd-upgrade=%s" % ("true" if params["etcd_upgrade"] else "false")]
    done = runner.run(command, timeout=params["timeout"])
    text = _output(done)
    if done.rc != 0 or "[upgrade/successful] SUCCESS!" not in text:
        raise ModuleFailure("%s failed (rc %s): %s" % (" ".join(command), done.rc, _tail(text) or "no output"),
                            cluster_version=result["cluster_version"], target_version=result["target_version"])
    return dict(result, changed=True, output=_tail(text))


def node(runner, params, check_mode):
    """``kubeadm upgrade node`` (another control-plane node, or a worker); harmless when repeated."""
    if check_mode:
        return {"changed": True}
    command = [params["kubeadm"], "upgrade", "node"]
    done = runner.run(command, timeout=params["timeout"])
    text = _output(done)
    if done.rc != 0:
        raise ModuleFailure("%s failed (rc %s): %s" % (" ".join(command), done.rc, _tail(text) or "no output"))
    return {"changed": True, "output": _tail(text)}


def upgrade_work(module, runner=None):
    params = module.params
    runner = runner or ModuleRunner(module)
    try:
        kube_version(params["version"], "version (rolling_upgrade_target.kubernetes)")
    except ValueError as exc:
        raise ModuleFailure(str(exc))
    action = params["action"]
    if action == "preflight":
        return preflight(runner, params)
    if action == "plan":
        return plan(runner, params)
    if action == "apply":
        if not params["first_control_plane"]:
            raise ModuleFailure("action apply runs on the first control-plane node only (first_control_plane=true); "
                                "the other nodes run action node")
        return apply(runner, params, module.check_mode)
    return node(runner, params, module.check_mode)
