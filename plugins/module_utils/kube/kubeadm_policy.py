# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judging a kubeadm upgrade and its certificates from what was read (kubeadm_output.py): kubeadm's
version policy, gpufleet's skew rules, the plan, the apply's and a node's verdicts, certificate
expiry checks. Pure functions (no command runs here: kubeadm.py runs them).

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

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import utc_text
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kubeadm_output import (
    KubeVersion, _not_a_release, at_target, kube_version, parse_kube_version, reported, version_text)

CERTS_CHECK_ID = "k8s.certs_expiry"
DAY = 86400.0


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
