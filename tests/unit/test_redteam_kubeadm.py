"""Red-team attacks on the kubeadm path (modules kubeadm_upgrade and kubeadm_certs, module_utils/kube/kubeadm.py as
the rolling_upgrade role drives it), written from the documentation only: docs/upgrades.md ("Kubernetes: a kubeadm
upgrade"), docs/contracts.md ("Kubernetes control-plane checks", k8s.certs_expiry), roles/rolling_upgrade/README.md,
tests/transcripts/kubeadm/README.md and `ansible-doc` of both modules.

Promises attacked:
- success is observed: `kubeadm upgrade apply` exit 0 AND the API server's /version then reports the target (looked at
  for up to observe_timeout while the API server restarts); a node is done when its kubelet reports the target;
  never read from a banner;
- the version rules: kubeadm's policy.go (EnforceVersionPolicies, nothing --force-skippable passes) and gpufleet's
  preflight (one minor at a time, never down, no node ahead of the API server); an API server whose version cannot
  be read refuses (fail closed);
- `upgrade plan -o json` and `certs check-expiration -o json` read strictly; the text tables only for old kubeadm;
  an unrecognised table is a failure; expired or !MISSING! fails; within warn_days warns.

Real outputs used (each test names the one it uses):
- kubernetes/kubernetes PR #123461  https://github.com/kubernetes/kubernetes/pull/123461
  (`kubeadm upgrade plan -ojson` with "[upgrade] Running cluster health checks" and a klog I-line before the JSON)
- kubernetes/kubeadm issue #2866  https://github.com/kubernetes/kubeadm/issues/2866
  (check-expiration text, external etcd, two CAs, "6y", trailing blanks)
- lework/kubeadm-certs issue #3  https://github.com/lework/kubeadm-certs/issues/3
  (kubeadm v1.30.14 check-expiration text with a klog W-line between the header lines and the table)
- kubernetes/kubeadm issue #2527  https://github.com/kubernetes/kubeadm/issues/2527
  ("Error reading configuration from the Cluster. Falling back to default configuration", W-lines, blank CA cells)
- kubernetes/kubeadm issue #1992  https://github.com/kubernetes/kubeadm/issues/1992  and
  sealerio/sealer issue #753  https://github.com/sealerio/sealer/issues/753  (99y / 98y residual times, blank CA cells)
- kubernetes/kubeadm issue #1563  https://github.com/kubernetes/kubeadm/issues/1563  (a table header kubeadm never
  released: "RESIDUAL VALIDITY   SET FOR AUTOMATIC RENEWAL")
- kubernetes/website PR #6485  https://github.com/kubernetes/website/pull/6485  ("[upgrade/version] You have chosen to
  upgrade to version", "[upgrade/confirm] Are you sure you want to proceed with the upgrade? [y/N]")
- kubernetes/kubernetes issue #53259  https://github.com/kubernetes/kubernetes/issues/53259  (kubectl version -o json
  of a development build: gitVersion "v1.9.0-alpha.1.487+550c3cab4fe267")
- kudobuilder/kudo issue #549  https://github.com/kudobuilder/kudo/issues/549  (kubectl version -o json, all fields)
- oalders/is issue #34  https://github.com/oalders/is/issues/34  (kubectl version --output json with no serverVersion and
  "The connection to the server localhost:8080 was refused" after it)
Where an issue's excerpt was cut, the rest of the table is completed in kubeadm's own layout (said at the table).
The residual-time strings follow k8s.io/apimachinery duration.ShortHumanDuration ("<invalid>" once expired, s/m/h up to
48h, d up to 2 years, then y): kubeadm never prints "(-2d)".
"""

import calendar
import json
import os
import sys
import time

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import kubeadm as k
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import kubeadm_output as ko
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import kubeadm_policy as kp
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import CommandResult
from runners import ScriptedRunner

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts", "kubeadm"))
import replay  # noqa: E402

CORPUS = os.path.join(REPO, "tests", "transcripts", "kubeadm")
ALL = replay.transcripts(CORPUS)
NOW = float(calendar.timegm((2026, 11, 26, 0, 0, 0)))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def transcript(minor, case):
    return [t for t in ALL if t["minor"] == minor and t["case"] == case][0]


def ts(text):
    return float(calendar.timegm(time.strptime(text, "%b %d, %Y %H:%M UTC")))


def statuses(results):
    return {c["target"].split("/", 1)[1]: c["status"] for c in results}


class FakeModule:
    def __init__(self, check_mode=False, **params):
        self.params = dict((name, spec.get("default")) for name, spec in k.UPGRADE_ARGSPEC.items())
        self.params.update(params)
        self.check_mode = check_mode


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 10.0
        return self.now


def no_sleep(seconds):
    return None


def upgrade(module, runner):
    return k.upgrade_work(module, runner, sleep=no_sleep, clock=Clock())


def kubectl_json(server, client="v1.37.1"):
    """kubectl version -o json as kubectl prints it (every field: kudobuilder/kudo#549)."""
    def info(git):
        parts = git.lstrip("v").split(".")
        return {"major": parts[0], "minor": parts[1] if len(parts) > 1 else "", "gitVersion": git,
                "gitCommit": "5e53fd6bc17c0dec8434817e69b04a25d8ae0ff0", "gitTreeState": "clean",
                "buildDate": "2026-06-06T01:36:19Z", "goVersion": "go1.25.5", "compiler": "gc",
                "platform": "linux/amd64"}
    document = {"clientVersion": info(client), "kustomizeVersion": "v5.7.1"}
    if server is not None:
        document["serverVersion"] = info(server)
    return json.dumps(document, indent=2)


SERVICE_UNAVAILABLE = (1, "", "Error from server (ServiceUnavailable): the server is currently unable to handle the "
                              "request\n")
REFUSED = (1, "", "The connection to the server 10.0.0.10:6443 was refused - did you specify the right host or port?\n")


def node_json(name, kubelet):
    return json.dumps({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name},
                       "status": {"nodeInfo": {"kubeletVersion": kubelet, "kubeProxyVersion": "",
                                               "containerRuntimeVersion": "containerd://2.1.4"}}})


class Cluster:
    """kubeadm answering from the 1.37 transcripts, kubectl answering from scripted sequences: ``before`` is the API
    server's version until `kubeadm upgrade apply` ran, then ``after`` is answered one entry per call (the last one
    repeated). Each entry is a version string, None (no serverVersion) or an (rc, out, err) tuple."""

    def __init__(self, before, after=(), kubelets=(), node="cp-1", apply_rc=0, apply_out=None, kubeadm="v1.37.1",
                 plan=None):
        self.before, self.after, self.kubelets, self.node = before, list(after), list(kubelets), node
        self.apply_rc, self.kubeadm, self.plan = apply_rc, kubeadm, plan
        self.apply_out = transcript("1.37", "upgrade-apply-success")["stdout"] if apply_out is None else apply_out
        self.applied = False
        self.calls = []

    @staticmethod
    def _answer(entry, make):
        if isinstance(entry, tuple):
            return CommandResult(*entry)
        return CommandResult(0, make(entry), "")

    def _next(self, seq):
        return seq.pop(0) if len(seq) > 1 else seq[0]

    def run(self, args, timeout=None, check_rc=False):
        self.calls.append(list(args))
        if args[0] == "kubectl":
            if "version" in args:
                entry = self._next(self.after) if self.applied and self.after else self.before
                return self._answer(entry, kubectl_json)
            if "node" in args:
                entry = self._next(self.kubelets)
                return self._answer(entry, lambda v: node_json(self.node, v))
            return CommandResult(1, "", "unexpected kubectl call")
        sub = args[1:]
        if sub == ["version", "-o", "short"]:
            return CommandResult(0, self.kubeadm + "\n", "")
        if sub[:2] == ["upgrade", "plan"]:
            out = self.plan if self.plan is not None else transcript("1.37", "upgrade-plan-json")["stdout"]
            return CommandResult(0, out, "")
        if sub[:2] == ["upgrade", "apply"]:
            self.applied = True
            return CommandResult(self.apply_rc, self.apply_out, "")
        return CommandResult(2, "", "no transcript for %r" % (sub,))

    def which(self, name, required=False):
        return name


def apply_module(version="1.37.1"):
    return FakeModule(action="apply", version=version, first_control_plane=True)


# --- targets: X.Y.Z only (`v` optional) ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["1.36", "v1.36", "latest", "stable-1.37", "1.37.x", "", "v", "1..37"])
def test_a_target_that_is_not_x_y_z_is_refused(target):
    """docs: rolling_upgrade_target.kubernetes is X.Y.Z; the module's `version` is X.Y.Z (`v` optional). A release
    candidate, a k3s build or a minor without patch is no such target (kubeadm itself refuses an rc without
    --allow-release-candidate-upgrades, which gpufleet never passes)."""
    with pytest.raises(ValueError):
        k.kube_version(target, "rolling_upgrade_target.kubernetes")


@pytest.mark.parametrize("target", ["1.37.1", "v1.37.1"])
def test_leading_v_is_optional(target):
    assert k.kube_version(target, "rolling_upgrade_target.kubernetes") == (1, 37, 1)


@pytest.mark.parametrize("target", ["1.36", "latest"])
def test_preflight_with_a_target_that_is_not_x_y_z_fails_before_the_node_is_touched(target):
    runner = ScriptedRunner({"kubectl": (0, kubectl_json("v1.35.6"), "")})
    with pytest.raises((ModuleFailure, ValueError)):
        upgrade(FakeModule(action="preflight", version=target, first_control_plane=True), runner)


# --- preflight: one minor at a time, never down, no node ahead of the API server, fail closed ------------------------

@pytest.mark.parametrize("server,target,first,refused", [
    ("v1.37.2", "1.37.1", True, True),     # downgrade by a patch on the first control plane: never down
    ("v1.37.0", "1.36.9", True, True),     # one minor down (kubeadm itself would allow it)
    ("v1.35.6", "1.37.1", True, True),     # skips a minor
    ("v1.34.0", "1.37.1", True, True),     # skips three
    ("v1.36.5", "1.37.0", True, False),    # next minor
    ("v1.37.0", "1.37.1", True, False),    # same minor, a later patch
    ("v1.37.1", "1.37.1", True, False),    # at the target (a resumed run)
    ("v1.37.0", "1.37.1", False, True),    # a worker ahead of the API server by a patch
    ("v1.36.5", "1.37.1", False, True),    # a worker ahead by a minor
    ("v1.37.1", "1.37.1", False, False),
    ("v1.37.2", "1.37.1", False, False),   # kubelet older than the API server by a patch: allowed
])
def test_preflight_rules_with_kubectls_real_json(server, target, first, refused):
    runner = ScriptedRunner({"kubectl": (0, kubectl_json(server), "")})
    module = FakeModule(action="preflight", version=target, first_control_plane=first)
    if refused:
        with pytest.raises(ModuleFailure) as failed:
            upgrade(module, runner)
        assert "rolling_upgrade_target.kubernetes" in failed.value.msg
    else:
        upgrade(module, runner)


@pytest.mark.parametrize("answer", [
    SERVICE_UNAVAILABLE,
    REFUSED,
    # oalders/is#34: client version only, then the connection error (kubectl exits 1)
    (1, kubectl_json(None) + "\nThe connection to the server localhost:8080 was refused - did you specify the right "
                             "host or port?\n", ""),
    # the same JSON with rc 0 (a kubectl that printed the client part only)
    (0, kubectl_json(None), ""),
    (0, "", ""),
])
def test_preflight_without_a_readable_server_version_refuses(answer):
    """docs: An API server whose version cannot be read refuses too (fail closed)."""
    runner = ScriptedRunner({"kubectl": answer})
    for first in (True, False):
        with pytest.raises(ModuleFailure):
            upgrade(FakeModule(action="preflight", version="1.37.1", first_control_plane=first), runner)


def test_preflight_reads_the_server_version_behind_kubectls_skew_warning():
    """kubectl prints a skew warning on stderr when client and server are more than a minor apart; the JSON on
    stdout is whole."""
    runner = ScriptedRunner({"kubectl": (0, kubectl_json("v1.36.5", client="v1.38.0"),
                                         "WARNING: version difference between client (1.38) and server (1.36) exceeds "
                                         "the supported minor version skew of +/-1\n")})
    result = upgrade(FakeModule(action="preflight", version="1.37.1", first_control_plane=True), runner)
    assert not result["cluster_at_target"]


# --- apply: exit 0 AND the API server seen at the target -----------------------------------------------------------

def test_apply_succeeds_when_the_api_server_comes_back_at_the_target_after_a_while():
    """The API server restarts: old version for a few looks, then the target (within observe_timeout)."""
    cluster = Cluster("v1.36.5", after=["v1.36.5"] * 5 + ["v1.37.1"])
    result = upgrade(apply_module(), cluster)
    assert result["changed"] and result["observed_version"] == "v1.37.1"


def test_apply_succeeds_when_version_answers_503_then_200():
    cluster = Cluster("v1.36.5", after=[SERVICE_UNAVAILABLE, REFUSED, SERVICE_UNAVAILABLE, "v1.37.1"])
    result = upgrade(apply_module(), cluster)
    assert result["changed"] and result["observed_version"] == "v1.37.1"


@pytest.mark.parametrize("after", [
    [SERVICE_UNAVAILABLE],                        # never back
    ["v1.36.5"],                                  # stays old
    [REFUSED, "v1.36.5"],                         # back, old
    ["v1.37.10"],                                 # a string with the target as prefix is not the target
    ["v1.37.2"],                                  # not the target either (apply wants exactly the target)
    [None],                                       # no serverVersion at all
    [(0, "", "")],                                # kubectl printing nothing
])
def test_apply_exiting_0_fails_unless_the_target_is_seen(after):
    cluster = Cluster("v1.36.5", after=after)
    with pytest.raises(ModuleFailure):
        upgrade(apply_module(), cluster)
    assert any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)


def test_apply_exiting_1_fails_even_with_a_success_banner_and_the_target_seen():
    out = transcript("1.37", "upgrade-apply-success")["stdout"]
    cluster = Cluster("v1.36.5", after=["v1.37.1"], apply_rc=1, apply_out=out)
    with pytest.raises(ModuleFailure):
        upgrade(apply_module(), cluster)


def test_apply_stopped_at_the_confirmation_prompt_fails():
    """kubernetes/website PR #6485: apply's version lines and the [y/N] prompt; without an answer kubeadm exits 1
    (gpufleet passes --yes, but a kubeadm that ignored it must not be taken for done)."""
    out = ("[upgrade/config] Making sure the configuration is correct:\n"
           "[upgrade/config] Reading configuration from the cluster...\n"
           "[upgrade/version] You have chosen to upgrade to version \"v1.37.1\"\n"
           "[upgrade/versions] Cluster version: v1.36.5\n"
           "[upgrade/versions] kubeadm version: v1.37.1\n"
           "[upgrade/confirm] Are you sure you want to proceed with the upgrade? [y/N]: ")
    cluster = Cluster("v1.36.5", after=["v1.36.5"], apply_rc=1, apply_out=out)
    with pytest.raises(ModuleFailure):
        upgrade(apply_module(), cluster)


def test_apply_with_the_old_banner_naming_another_version_succeeds_on_what_is_seen():
    """The banner decides nothing, not even when it names another version than the one observed."""
    out = ('[upgrade/successful] SUCCESS! Your cluster was upgraded to "v1.31.4". Enjoy!\n\n'
           "[upgrade/kubelet] Now that your control plane is upgraded, please proceed with upgrading your kubelets if "
           "you haven't already done so.\n")
    result = upgrade(apply_module(), Cluster("v1.36.5", after=["v1.37.1"], apply_out=out))
    assert result["observed_version"] == "v1.37.1"
    with pytest.raises(ModuleFailure):
        upgrade(apply_module(), Cluster("v1.36.5", after=["v1.36.5"], apply_out=out))


def test_apply_with_no_output_at_all_is_judged_by_what_is_seen():
    result = upgrade(apply_module(), Cluster("v1.36.5", after=["v1.37.1"], apply_out=""))
    assert result["observed_version"] == "v1.37.1"


@FAST
@given(seq=st.lists(st.sampled_from(["v1.36.5", "v1.37.1", "v1.37.2", "v1.37.10", None, "503", "refused"]),
                    min_size=1, max_size=25))
def test_apply_passes_only_when_the_target_was_seen_in_time(seq):
    entries = [SERVICE_UNAVAILABLE if e == "503" else REFUSED if e == "refused" else e for e in seq]
    cluster = Cluster("v1.36.5", after=list(entries))
    try:
        result = upgrade(apply_module(), cluster)
    except ModuleFailure:
        return  # not seen, or seen after observe_timeout
    assert "v1.37.1" in seq and result["observed_version"] == "v1.37.1"


# --- verify: the API server and this node's kubelet at the target ----------------------------------------------------

def verify_module(first, node="gpu-w-1"):
    return FakeModule(action="verify", version="1.37.1", first_control_plane=first, node_name=node,
                      kubeconfig="/etc/kubernetes/kubelet.conf")


@pytest.mark.parametrize("first", [True, False])
def test_verify_waits_for_a_kubelet_that_reports_the_old_version_after_its_restart(first):
    cluster = Cluster("v1.37.1", kubelets=["v1.36.5"] * 4 + [SERVICE_UNAVAILABLE, "v1.37.1"], node="gpu-w-1")
    assert upgrade(verify_module(first), cluster)["kubelet_version"] == "v1.37.1"


@pytest.mark.parametrize("kubelets", [
    ["v1.36.5"],                              # still old after the restart
    ["v1.37.10"],
    ["v1.37.0"],
    ["v1.38.0"],                              # newer than the API server
    [SERVICE_UNAVAILABLE],
    [(0, node_json("gpu-w-2", "v1.37.1"), "")],   # another node's answer
    [(0, json.dumps({"kind": "Node", "metadata": {"name": "gpu-w-1"}, "status": {}}), "")],
])
@pytest.mark.parametrize("first", [True, False])
def test_verify_fails_unless_this_kubelet_reports_the_target(kubelets, first):
    cluster = Cluster("v1.37.1", kubelets=kubelets, node="gpu-w-1")
    with pytest.raises(ModuleFailure):
        upgrade(verify_module(first), cluster)


@pytest.mark.parametrize("server,first", [
    ("v1.37.0", False),           # the API server behind the target's patch
    ("v1.37.0", True),
    ("v1.37.2", True),            # the first control plane wants exactly the target
    ("v1.38.0", False),
    (SERVICE_UNAVAILABLE, False),
    (REFUSED, True),
    (None, True),
])
def test_verify_fails_unless_the_api_server_runs_the_target(server, first):
    cluster = Cluster(server, kubelets=["v1.37.1"], node="gpu-w-1")
    with pytest.raises(ModuleFailure):
        upgrade(verify_module(first), cluster)


# --- plan: JSON read strictly, policy.go, kubelet skew --------------------------------------------------------------

PLAN_137 = transcript("1.37", "upgrade-plan-json")["stdout"]


def test_plan_json_after_the_real_prelude_of_pr_123461():
    """kubernetes/kubernetes PR #123461: `kubeadm upgrade plan -ojson` printed "[upgrade] Running cluster health
    checks" and a klog line on stdout before the JSON; docs: informational lines before it are left out."""
    prelude = ("[upgrade] Running cluster health checks\n"
               "I0223 06:41:31.158831    1526 version.go:256] remote version is much newer: v1.38.0; falling back to: "
               "stable-1.37\n")
    plan = k.parse_plan_json(prelude + PLAN_137)
    assert plan["apply_versions"] == ["v1.37.1"] and plan["cluster_version"] == "v1.36.5"
    assert k.judge_plan(plan, "1.37.1", cluster=(1, 36, 5), kubeadm=(1, 37, 1)) == []


@pytest.mark.parametrize("change", [
    lambda d: d.update(apiVersion="output.kubeadm.k8s.io/v1alpha2"),   # PR #123461's (pre-1.30) apiVersion
    lambda d: d.update(kind="CertificateExpirationInfo"),
    lambda d: d["availableUpgrades"][0]["components"][2].update(newVersion=137),
    lambda d: d["availableUpgrades"][0]["components"][2].update(kind=1),
    lambda d: d["availableUpgrades"][0].update(description=None),
    lambda d: d["configVersions"][0].update(manualUpgradeRequired="no"),
    lambda d: d["availableUpgrades"][0].update(components={}),
])
def test_plan_json_is_read_strictly(change):
    document = json.loads(PLAN_137)
    change(document)
    with pytest.raises(k.KubeadmOutputError):
        k.parse_plan_json(json.dumps(document, indent=4))


@pytest.mark.parametrize("change", [
    lambda d: d.update(extra={"x": 1}),
    lambda d: d["availableUpgrades"][0]["components"][2].update(extra="x"),
    lambda d: d["availableUpgrades"][0].update(notes=["a field of a later v1alpha3"]),
    lambda d: d["configVersions"][0].update(docs="https://kubernetes.io"),
])
def test_plan_json_ignores_a_key_it_does_not_know(change):
    """output.kubeadm.k8s.io/v1alpha3 may gain optional fields within its version: an unknown key in an otherwise
    well-formed object is ignored, every known key still typed, kind and apiVersion still exact."""
    document = json.loads(PLAN_137)
    change(document)
    assert k.parse_plan_json(json.dumps(document, indent=4)) == k.parse_plan_json(PLAN_137)


def test_plan_json_followed_by_a_second_document_or_trailing_text_is_refused():
    for broken in (PLAN_137 + PLAN_137, PLAN_137 + "[upgrade] done\n"):
        with pytest.raises(k.KubeadmOutputError):
            k.parse_plan_json(broken)


def _plan_with_kubelet(version):
    document = json.loads(PLAN_137)
    for component in document["availableUpgrades"][0]["components"]:
        if component["name"] == "kubelet" and component["nodeName"] == "gpu-w-1":
            component["currentVersion"] = version
    return k.parse_plan_json(json.dumps(document, indent=4))


@pytest.mark.parametrize("kubelet,refused", [("v1.34.0", False), ("v1.34.9", False), ("v1.33.9", True),
                                             ("v1.33.0", True), ("v1.30.2", True)])
def test_plan_json_kubelet_skew_of_three_minors(kubelet, refused):
    """policy.go: kubelets more than MaximumAllowedMinorVersionKubeletSkew (3 from kubeadm 1.29) behind the target:
    skippable, so refused (gpufleet never passes --force)."""
    problems = k.judge_plan(_plan_with_kubelet(kubelet), "1.37.1", cluster=(1, 36, 5), kubeadm=(1, 37, 1))
    assert bool(problems) == refused, problems


@pytest.mark.parametrize("cluster,kubeadm,target", [
    ((1, 36, 5), (1, 37, 0), "1.37.1"),   # target's patch above kubeadm's
    ((1, 36, 5), (1, 38, 0), "1.37.1"),   # kubeadm a minor newer
    ((1, 35, 6), (1, 37, 1), "1.37.1"),   # skips a minor
    ((1, 36, 5), (1, 36, 9), "1.37.1"),   # kubeadm older than the target's minor
])
def test_plan_json_offering_the_target_is_still_refused_by_policy(cluster, kubeadm, target):
    assert k.judge_plan(k.parse_plan_json(PLAN_137), target, cluster=cluster, kubeadm=kubeadm)


def test_plan_json_not_offering_the_target_is_refused():
    assert k.judge_plan(k.parse_plan_json(PLAN_137), "1.37.0", cluster=(1, 36, 5), kubeadm=(1, 37, 1))


@pytest.mark.parametrize("kubeadm_version", ["v1.37", "1.37.1", "garbage", "", "v1.36.9", "v1.38.0"])
def test_apply_with_an_odd_kubeadm_version_never_applies_a_plan_it_could_not_judge(kubeadm_version):
    """kubeadm version -o short of a release candidate, without a patch or without the v: apply either judges it or
    refuses, and never runs `kubeadm upgrade apply` when it refused."""
    cluster = Cluster("v1.36.5", after=["v1.37.1"], kubeadm=kubeadm_version)
    try:
        result = upgrade(apply_module(), cluster)
    except ModuleFailure:
        assert not any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)
        return
    assert result["observed_version"] == "v1.37.1"
    assert kubeadm_version.lstrip("v") == "1.37.1"


def _policy_allows(cluster, kubeadm, target, kubelets):
    """policy.go EnforceVersionPolicies, mandatory and skippable alike (gpufleet never passes --force)."""
    skew = 3 if kubeadm[:2] >= (1, 29) else 1
    if target < (kubeadm[0], kubeadm[1] - 1, 0):
        return False
    if target[1] > cluster[1] + 1 or target[1] < cluster[1] - 1:
        return False
    if not (target[0] == kubeadm[0] and target[1] <= kubeadm[1]):
        return False
    if kubeadm[0] > target[0] or kubeadm[1] > target[1]:
        return False
    if kubeadm < target:
        return False
    return all(not target[1] > v[1] + skew for v in kubelets)


VERSIONS = st.tuples(st.just(1), st.integers(24, 40), st.integers(0, 12))


@FAST
@given(cluster=VERSIONS, kubeadm=VERSIONS, target=VERSIONS, kubelets=st.lists(VERSIONS, max_size=4))
def test_version_policy_allows_exactly_what_policy_go_allows(cluster, kubeadm, target, kubelets):
    errors = kp.version_policy(cluster, kubeadm, target, kubelets)
    allowed = not errors["mandatory"] and not errors["skippable"]
    assert allowed == _policy_allows(cluster, kubeadm, target, kubelets), errors


@FAST
@given(server=VERSIONS, target=VERSIONS)
def test_skew_rules_first_control_plane_one_minor_up_never_down(server, target):
    problems = k.skew_problems(server, target, True)
    ok = target >= server and target[1] <= server[1] + 1 and target[0] == server[0]
    assert bool(problems) != ok, problems


@FAST
@given(server=VERSIONS, target=VERSIONS)
def test_skew_rules_no_other_node_ahead_of_the_api_server(server, target):
    if target > server:
        assert k.skew_problems(server, target, False)


# --- certificates: real tables, expired CAs, !MISSING!, unknown tables ------------------------------------------------

ISSUE_2866 = """[check-expiration] Reading configuration from the cluster...
[check-expiration] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -o yaml'

CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   EXTERNALLY MANAGED
admin.conf                 Apr 09, 2024 09:17 UTC   348d            ca                      no      
apiserver                  Apr 09, 2024 09:16 UTC   348d            ca                      no      
apiserver-kubelet-client   Apr 09, 2024 09:16 UTC   348d            ca                      no      
controller-manager.conf    Apr 09, 2024 09:16 UTC   348d            ca                      no      
front-proxy-client         Apr 09, 2024 09:16 UTC   348d            front-proxy-ca          no      
scheduler.conf             Apr 09, 2024 09:17 UTC   348d            ca                      no      

CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED
ca                      Nov 03, 2029 14:13 UTC   6y              no      
front-proxy-ca          Nov 03, 2029 14:13 UTC   6y              no  
"""  # noqa: W291  kubernetes/kubeadm#2866, verbatim (trailing blanks included)

# lework/kubeadm-certs#3 (kubeadm v1.30.14): the lines up to apiserver-etcd-client are the issue's; its excerpt is
# cut there, the other rows and the authority table are completed in kubeadm's layout with the same dates.
LEWORK_3 = """[check-expiration] Reading configuration from the cluster...
[check-expiration] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -o yaml'
W0104 20:49:40.321572   20224 cluster.go:96] error unmarshaling configuration schema.GroupVersionKind{Group:"kubeadm.k8s.io", Version:"v1beta3", Kind:"ClusterConfiguration"}: strict decoding error: unknown field "caCertificateValidityPeriod", unknown field "certificateValidityPeriod"

CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   EXTERNALLY MANAGED
admin.conf                 Jan 04, 2027 12:42 UTC   364d            ca                      no      
apiserver                  Jan 04, 2027 12:42 UTC   364d            ca                      no      
apiserver-etcd-client      Jan 04, 2027 12:42 UTC   364d            etcd-ca                 no      
apiserver-kubelet-client   Jan 04, 2027 12:42 UTC   364d            ca                      no      
controller-manager.conf    Jan 04, 2027 12:42 UTC   364d            ca                      no      
etcd-healthcheck-client    Jan 04, 2027 12:42 UTC   364d            etcd-ca                 no      
etcd-peer                  Jan 04, 2027 12:42 UTC   364d            etcd-ca                 no      
etcd-server                Jan 04, 2027 12:42 UTC   364d            etcd-ca                 no      
front-proxy-client         Jan 04, 2027 12:42 UTC   364d            front-proxy-ca          no      
scheduler.conf             Jan 04, 2027 12:42 UTC   364d            ca                      no      
super-admin.conf           Jan 04, 2027 12:42 UTC   364d            ca                      no      

CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED
ca                      Jan 02, 2036 12:42 UTC   9y              no      
etcd-ca                 Jan 02, 2036 12:42 UTC   9y              no      
front-proxy-ca          Jan 02, 2036 12:42 UTC   9y              no      
"""  # noqa: W291,E501

# kubernetes/kubeadm#2527: the prelude and the first rows are the issue's; the excerpt is cut at etcd-peer, the rest
# is completed in kubeadm's layout with the same dates.
ISSUE_2527 = """[check-expiration] Reading configuration from the cluster...
[check-expiration] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -oyaml'
[check-expiration] Error reading configuration from the Cluster. Falling back to default configuration

W0714 13:22:26.479881   18231 validation.go:28] Cannot validate kube-proxy config - no validator is available
W0714 13:22:26.479977   18231 validation.go:28] Cannot validate kubelet config - no validator is available
CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   EXTERNALLY MANAGED
admin.conf                 Apr 26, 2022 08:39 UTC   285d                                    no
apiserver                  Apr 26, 2022 08:39 UTC   285d            ca                      no
apiserver-etcd-client      Apr 26, 2022 08:39 UTC   285d            etcd-ca                 no
apiserver-kubelet-client   Apr 26, 2022 08:39 UTC   285d            ca                      no
controller-manager.conf    Apr 26, 2022 08:39 UTC   285d                                    no
etcd-healthcheck-client    Apr 26, 2022 08:39 UTC   285d            etcd-ca                 no
etcd-peer                  Apr 26, 2022 08:39 UTC   285d            etcd-ca                 no
etcd-server                Apr 26, 2022 08:39 UTC   285d            etcd-ca                 no
front-proxy-client         Apr 26, 2022 08:39 UTC   285d            front-proxy-ca          no
scheduler.conf             Apr 26, 2022 08:39 UTC   285d                                    no

CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED
ca                      Apr 24, 2031 08:39 UTC   9y              no
etcd-ca                 Apr 24, 2031 08:39 UTC   9y              no
front-proxy-ca          Apr 24, 2031 08:39 UTC   9y              no
"""

# sealerio/sealer#753 (and kubernetes/kubeadm#1992): 98y/99y, blank CA cells; the authority table (cut in the
# excerpt) completed in kubeadm's layout.
SEALER_753 = """[check-expiration] Reading configuration from the cluster...
[check-expiration] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config -oyaml'

CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   EXTERNALLY MANAGED
admin.conf                 Apr 02, 2119 08:22 UTC   98y                                     no      
apiserver                  Apr 01, 2120 08:22 UTC   99y             ca                      no      
apiserver-etcd-client      Apr 01, 2120 08:22 UTC   99y             etcd-ca                 no      
apiserver-kubelet-client   Apr 01, 2120 08:22 UTC   99y             ca                      no      
controller-manager.conf    Apr 02, 2119 08:22 UTC   98y                                     no      
etcd-healthcheck-client    Apr 01, 2120 08:22 UTC   99y             etcd-ca                 no      
etcd-peer                  Apr 01, 2120 08:22 UTC   99y             etcd-ca                 no      
etcd-server                Apr 01, 2120 08:22 UTC   99y             etcd-ca                 no      
front-proxy-client         Apr 01, 2120 08:22 UTC   99y             front-proxy-ca          no      
scheduler.conf             Apr 02, 2119 08:22 UTC   98y                                     no      

CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED
ca                      Apr 01, 2120 08:22 UTC   99y             no      
etcd-ca                 Apr 01, 2120 08:22 UTC   99y             no      
front-proxy-ca          Apr 01, 2120 08:22 UTC   99y             no      
"""  # noqa: W291


@pytest.mark.parametrize("text,now,certs,cas", [
    (ISSUE_2866, ts("Apr 26, 2023 00:00 UTC"), 6, 2),
    (LEWORK_3, ts("Jan 05, 2026 00:00 UTC"), 11, 3),
    (ISSUE_2527, ts("Jul 14, 2021 13:22 UTC"), 10, 3),
    (SEALER_753, ts("Oct 11, 2021 00:00 UTC"), 10, 3),
])
def test_real_tables_are_read_whole_and_pass(text, now, certs, cas):
    parsed = k.parse_check_expiration(text)
    assert len(parsed["certificates"]) == certs and len(parsed["authorities"]) == cas
    results = k.certs_expiry_checks(parsed, now, 30)
    assert set(statuses(results).values()) == {"pass"}
    assert len(results.as_list()) == certs + cas


@pytest.mark.parametrize("text,now", [
    (ISSUE_2866, ts("Apr 26, 2023 00:00 UTC")),
    (LEWORK_3, ts("Jan 05, 2026 00:00 UTC")),
])
def test_the_same_real_tables_years_later_fail(text, now):
    later = now + 20 * 365 * 86400.0
    results = k.certs_expiry_checks(k.parse_check_expiration(text), later, 30)
    assert set(statuses(results).values()) == {"fail"}


def _replace_ca_row(text, name, row):
    lines = text.splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("CERTIFICATE AUTHORITY ")][0]
    for i in range(start + 1, len(lines)):
        if lines[i].split()[:1] == [name]:
            lines[i] = row
    return "\n".join(lines) + "\n"


VALID_137 = transcript("1.37", "certs-check-expiration-text-valid")["stdout"]


@pytest.mark.parametrize("row", [
    # expired 5 hours before NOW: "<invalid>" (ShortHumanDuration of a negative duration)
    "front-proxy-ca          Nov 25, 2026 19:00 UTC   <invalid>       no",
    # expired, externally managed (ca.key not on the node)
    "front-proxy-ca          Nov 20, 2026 08:24 UTC   <invalid>       yes",
    # expired but the residual column hand-edited to look healthy
    "front-proxy-ca          Nov 20, 2026 08:24 UTC   9y              no",
    # missing
    "!MISSING! front-proxy-ca",
])
def test_an_expired_or_missing_authority_is_never_healthy(row):
    text = _replace_ca_row(VALID_137, "front-proxy-ca", row)
    try:
        parsed = k.parse_check_expiration(text)
    except k.KubeadmOutputError:
        return  # an unreadable table is a failure too
    got = statuses(k.certs_expiry_checks(parsed, NOW, 30))
    assert got.get("front-proxy-ca") == "fail", got


@pytest.mark.parametrize("row,status", [
    ("ca                      Nov 26, 2026 04:00 UTC   4h              no", "warn"),
    ("ca                      Dec 10, 2026 00:00 UTC   14d             no", "warn"),
    ("ca                      Dec 25, 2026 00:00 UTC   29d             no", "warn"),
    ("ca                      Dec 28, 2026 00:00 UTC   32d             no", "pass"),
    ("ca                      Nov 25, 2036 00:00 UTC   9y              yes", "pass"),
])
def test_an_authority_expiring_soon_warns(row, status):
    got = statuses(k.certs_expiry_checks(k.parse_check_expiration(_replace_ca_row(VALID_137, "ca", row)), NOW, 30))
    assert got["ca"] == status


@pytest.mark.parametrize("change", [
    # kubernetes/kubeadm#1563's proposed header, never released
    lambda t: t.replace("CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   "
                        "EXTERNALLY MANAGED",
                        "CERTIFICATE                EXPIRES                  RESIDUAL VALIDITY   SET FOR AUTOMATIC RENEWAL"),
    # an authority table with an extra column
    lambda t: t.replace("CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED",
                        "CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED   KEY TYPE"),
    # the authority header lower-cased
    lambda t: t.replace("CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED",
                        "certificate authority   expires                  residual time   externally managed"),
    # a note between the tables
    lambda t: t.replace("\n\nCERTIFICATE AUTHORITY", "\nNOTE: the etcd CA is external\n\nCERTIFICATE AUTHORITY"),
    # a third table after the authorities
    lambda t: t + "\nKUBELET                 EXPIRES                  RESIDUAL TIME\nkubelet.conf            Nov 20, 2026 "
                  "08:24 UTC   <invalid>\n",
    # a row of the authority table whose date is not kubeadm's format
    lambda t: t.replace("Nov 07, 2035 09:16 UTC", "2035-11-07 09:16:00 UTC"),
])
def test_an_unrecognised_table_is_a_failure(change):
    text = change(VALID_137)
    assert text != VALID_137
    with pytest.raises(k.KubeadmOutputError):
        k.parse_check_expiration(text)
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.29.9\n", ""), "kubeadm": (0, text, "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed is None and [c["status"] for c in results] == ["fail"]


JSON_137 = transcript("1.37", "certs-check-expiration-json-valid")["stdout"]


def _json_with(change):
    document = json.loads(JSON_137)
    change(document)
    return json.dumps(document, indent=4)


def _ca(document, name):
    return [c for c in document["certificateAuthorities"] if c["name"] == name][0]


@pytest.mark.parametrize("change", [
    lambda d: _ca(d, "etcd-ca").update(expirationDate="2026-11-25T19:00:00Z", residualTime=-18000),
    lambda d: _ca(d, "etcd-ca").update(expirationDate="2026-11-25T19:00:00Z", residualTime=-18000,
                                       externallyManaged=True),
    # kubeadm's residualTime is computed when it ran; the date decides at the check's clock
    lambda d: _ca(d, "etcd-ca").update(expirationDate="2026-11-25T19:00:00Z", residualTime=315360000),
    lambda d: _ca(d, "etcd-ca").update(missing=True),
    lambda d: _ca(d, "etcd-ca").update(missing=True, expirationDate=None, residualTime=0),
    lambda d: _ca(d, "etcd-ca").update(missing=True, expirationDate="0001-01-01T00:00:00Z", residualTime=0),
])
def test_json_expired_or_missing_authority_is_never_healthy(change):
    text = _json_with(change)
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.37.1\n", ""), "kubeadm": (0, text, "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    got = statuses(results) if parsed else {}
    assert parsed is None or got.get("etcd-ca") == "fail", got
    assert "fail" in [c["status"] for c in results]


@pytest.mark.parametrize("change", [
    lambda d: d["certificates"].clear(),
    lambda d: _ca(d, "ca").update(expirationDate="Nov 07, 2036 09:16 UTC"),
    lambda d: _ca(d, "ca").update(externallyManaged="no"),
    lambda d: d.update(certificateAuthorities=None),
])
def test_json_with_odd_fields_is_one_failing_check(change):
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.37.1\n", ""),
                             "kubeadm": (0, _json_with(change), "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed is None and [c["status"] for c in results] == ["fail"]


@pytest.mark.parametrize("change", [
    lambda d: d.update(metadata={}),
    lambda d: _ca(d, "ca").update(signatureAlgorithm="SHA256-RSA"),
])
def test_json_with_a_key_it_does_not_know_is_judged_by_its_dates(change):
    """An unknown key in an otherwise well-formed CertificateExpirationInfo is ignored (the API version may gain
    optional fields); the dates still decide (before: one failing check for every such document)."""
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.37.1\n", ""),
                             "kubeadm": (0, _json_with(change), "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed and set(statuses(results).values()) == {"pass"}


@pytest.mark.parametrize("version,json_asked", [("v1.29.15", False), ("v1.30.0", True), ("v1.30.14", True),
                                                ("v1.37.1", True)])
def test_json_from_1_30_text_before(version, json_asked):
    text = JSON_137 if json_asked else VALID_137
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, version + "\n", ""), "kubeadm": (0, text, "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed and set(statuses(results).values()) == {"pass"}
    assert (runner.calls[-1][-2:] == ["-o", "json"]) == json_asked


# --- a property: any table kubeadm could print is judged by its dates -------------------------------------------------

def _short_human(seconds):
    """k8s.io/apimachinery/pkg/util/duration.ShortHumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60:
        return "%ds" % seconds
    minutes = seconds // 60
    if minutes < 60:
        return "%dm" % minutes
    hours = minutes // 60
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    return "%dy" % (hours // 24 // 365)


def _table(rows, header, widths):
    out = []
    for row in [header] + rows:
        out.append("".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "      ")
    return out


def _render(certs, cas, now):
    def cells(name, minutes, extra):
        expires = now + minutes * 60
        return [name, time.strftime("%b %d, %Y %H:%M UTC", time.gmtime(expires)),
                _short_human(int(expires - now))] + extra
    rows = [cells(n, m, [ca, "no"]) for n, m, ca in certs]
    carows = [cells(n, m, [ext]) for n, m, ext in cas]
    lines = ["[check-expiration] Reading configuration from the cluster...",
             "[check-expiration] FYI: You can look at this config file with 'kubectl -n kube-system get cm "
             "kubeadm-config -o yaml'", ""]
    lines += _table(rows, ["CERTIFICATE", "EXPIRES", "RESIDUAL TIME", "CERTIFICATE AUTHORITY", "EXTERNALLY MANAGED"],
                    [27, 25, 16, 24, 18])
    lines += [""]
    lines += _table(carows, ["CERTIFICATE AUTHORITY", "EXPIRES", "RESIDUAL TIME", "EXTERNALLY MANAGED"],
                    [24, 25, 16, 18])
    return "\n".join(lines) + "\n"


CERT_NAMES = ["admin.conf", "apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "controller-manager.conf",
              "etcd-healthcheck-client", "etcd-peer", "etcd-server", "front-proxy-client", "scheduler.conf",
              "super-admin.conf"]
# minutes from NOW, kept away from the minute rounding and the 30-day boundary
MINUTES = st.one_of(st.integers(-10 * 365 * 1440, -2), st.integers(2, 30 * 1440 - 120),
                    st.integers(30 * 1440 + 120, 12 * 365 * 1440))


@FAST
@given(cert_minutes=st.lists(MINUTES, min_size=1, max_size=len(CERT_NAMES)),
       ca_minutes=st.lists(MINUTES, min_size=3, max_size=3),
       external=st.lists(st.sampled_from(["no", "yes"]), min_size=3, max_size=3))
def test_a_kubeadm_table_is_judged_by_its_dates(cert_minutes, ca_minutes, external):
    certs = [(CERT_NAMES[i], m, "ca") for i, m in enumerate(cert_minutes)]
    cas = [(n, m, e) for n, m, e in zip(["ca", "etcd-ca", "front-proxy-ca"], ca_minutes, external)]
    now = NOW + 30  # mid-minute: dates are printed to the minute
    text = _render(certs, cas, NOW)
    got = statuses(k.certs_expiry_checks(k.parse_check_expiration(text), now, 30))
    for name, minutes, _ in certs + cas:
        expected = "fail" if minutes < 0 else "warn" if minutes < 30 * 1440 else "pass"
        assert got[name] == expected, (name, minutes, got[name])


# --- more strictness: kubeadm's own types (output/v1alpha3 types.go as stored in the search index, file id 237283917:
# caName is `omitempty` and "empty for self-signed, root CA certificates"; expirationDate is a metav1.Time, RFC 3339
# in UTC; residualTime an int64) -----------------------------------------------------------------------------------------

def test_json_authorities_without_ca_name_are_read():
    """caName is omitempty: a real CertificateExpirationInfo has no caName on the root CAs."""
    def drop(d):
        for entry in d["certificateAuthorities"]:
            entry.pop("caName", None)
    parsed = k.parse_certs_json(_json_with(drop))
    assert len(parsed["authorities"]) == 3
    assert set(statuses(k.certs_expiry_checks(parsed, NOW, 30)).values()) == {"pass"}


@pytest.mark.parametrize("change", [
    lambda d: d["certificates"][0].update(residualTime=1.5),
    lambda d: d["certificates"][0].update(residualTime=True),
    lambda d: d["certificates"][0].update(expirationDate="2027-11-09T09:17:00.000Z"),
    lambda d: d["certificates"][0].update(expirationDate="2027-11-09T11:17:00+02:00"),
    lambda d: d["certificates"][0].update(expirationDate="2027-02-30T09:17:00Z"),
    lambda d: d["certificates"][0].update(missing=0),
    lambda d: d["certificates"][0].update(name=""),
])
def test_json_fields_of_another_type_or_format_are_refused(change):
    with pytest.raises(k.KubeadmOutputError):
        k.parse_certs_json(_json_with(change))


def test_the_external_ca_mode_table_is_read():
    """kubernetes/kubeadm#2618 (PKI moved to an external CA): EXTERNALLY MANAGED "yes"; still judged by dates."""
    text = VALID_137.replace("   no\n", "   yes\n")
    parsed = k.parse_check_expiration(text)
    assert all(entry["externally_managed"] for entry in parsed["authorities"])
    assert set(statuses(k.certs_expiry_checks(parsed, NOW, 30)).values()) == {"pass"}


def test_the_flat_upgrade_plan_of_an_early_v1alpha3_is_refused():
    """The stored types.go (file id 237283917) still has the flat v1alpha2-like UpgradePlan {components,
    configVersions}: another shape than the one read, so refused (never read as "nothing offered")."""
    flat = {"kind": "UpgradePlan", "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
            "components": [{"name": "kube-apiserver", "currentVersion": "v1.36.5", "newVersion": "v1.37.1"}],
            "configVersions": []}
    with pytest.raises(k.KubeadmOutputError):
        k.parse_plan_json(json.dumps(flat, indent=4))


def _plan_changed(change):
    document = json.loads(PLAN_137)
    change(document)
    return json.dumps(document, indent=4)


def _set_kubelet(d, value):
    d["availableUpgrades"][0]["components"][0]["currentVersion"] = value


@pytest.mark.parametrize("change", [
    lambda d: _set_kubelet(d, "1 x v1.33.0"),   # PR #123461's v1alpha2 "N x" count, a kubelet too old behind it
    lambda d: _set_kubelet(d, ""),
    lambda d: d["availableUpgrades"][0].update(
        components=[c for c in d["availableUpgrades"][0]["components"] if c["name"] != "kube-apiserver"]),
])
def test_plan_json_that_cannot_be_judged_whole_refuses(change):
    try:
        plan = k.parse_plan_json(_plan_changed(change))
    except k.KubeadmOutputError:
        return
    assert k.judge_plan(plan, "1.37.1", cluster=(1, 36, 5), kubeadm=(1, 37, 1))


def test_plan_json_with_two_offers_is_judged_on_the_target():
    def second(d):
        offer = json.loads(json.dumps(d["availableUpgrades"][0]))
        offer["description"] = "version in the v1.37 series"
        for c in offer["components"]:
            if c["newVersion"] == "v1.37.1":
                c["newVersion"] = "v1.37.2"
        d["availableUpgrades"].append(offer)
    plan = k.parse_plan_json(_plan_changed(second))
    assert k.judge_plan(plan, "1.37.1", cluster=(1, 36, 5), kubeadm=(1, 37, 1)) == []
    assert k.judge_plan(plan, "1.37.2", cluster=(1, 36, 5), kubeadm=(1, 37, 1))  # kubeadm 1.37.1 < target


# --- regressions of the red team's findings F1-F4 (they failed before the fix) --------------------------------------
# kubernetes/kubernetes issue #53259 https://github.com/kubernetes/kubernetes/issues/53259: kubectl version -o json of
# a development build, gitVersion "v1.9.0-alpha.1.487+550c3cab4fe267"; release candidates as kubeadm names them
# ("v1.36.0-rc.1"); policy.go (cmd/kubeadm/app/phases/upgrade/policy.go) detectUnstableVersionError refuses an
# unstable version without --allow-experimental-upgrades / --allow-release-candidate-upgrades.

NOT_RELEASES = ["v1.36.0-rc.1", "1.36.5+k3s1", "1.37.1-alpha.1.487+550c3cab4fe267", "v1.37.1.2", "1.29.2-1.1",
                "v01.37.1", "1.37.1-", "1.37.1+", "v1.37.1-rc..1", " v1.37.1 x"]


@pytest.mark.parametrize("target", NOT_RELEASES)
def test_f1_a_target_that_is_not_exactly_x_y_z_is_refused_naming_the_variable(target):
    """F1: kube_version kept the first three numbers, so an rc, a k3s build, a dev build and v1.37.1.2 read as a
    release."""
    with pytest.raises(ValueError, match="rolling_upgrade_target.kubernetes must be a Kubernetes release X.Y.Z"):
        k.kube_version(target, "rolling_upgrade_target.kubernetes")


@pytest.mark.parametrize("target", ["v1.36.0-rc.1", "1.36.5+k3s1"])
def test_f1_preflight_with_a_target_that_is_not_x_y_z_fails_before_anything_runs(target):
    runner = ScriptedRunner({"kubectl": (0, kubectl_json("v1.35.6"), "")})
    with pytest.raises(ModuleFailure, match="rolling_upgrade_target.kubernetes"):
        upgrade(FakeModule(action="preflight", version=target, first_control_plane=True), runner)
    assert runner.calls == []


@pytest.mark.parametrize("text,release,pre,build", [
    ("v1.37.1", (1, 37, 1), "", ""),
    ("1.37.1", (1, 37, 1), "", ""),
    ("v1.36.0-rc.1", (1, 36, 0), "rc.1", ""),
    ("v1.36.5+k3s1", (1, 36, 5), "", "k3s1"),
    ("v1.9.0-alpha.1.487+550c3cab4fe267", (1, 9, 0), "alpha.1.487", "550c3cab4fe267"),  # kubernetes#53259
])
def test_f1_reported_versions_keep_their_pre_release_and_build(text, release, pre, build):
    seen = ko.parse_kube_version(text)
    assert (seen.release, seen.pre, seen.build, seen.text) == (release, pre, build, text)
    assert seen.is_release == (not pre and not build)


VERSIONISH = st.from_regex(r"\Av?[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}([-+.~][0-9A-Za-z.+-]{0,12})?\Z")


@FAST
@given(text=st.one_of(st.text(max_size=40), VERSIONISH))
def test_f1_version_readers_answer_or_fail_clearly(text):
    """Any text: a version or a ValueError, never a crash; a target is only ever an exact X.Y.Z release."""
    try:
        seen = ko.parse_kube_version(text)
    except ValueError:
        seen = None
    try:
        target = k.kube_version(text)
    except ValueError:
        target = None
    if target is not None:
        assert seen is not None and seen.is_release and seen.release == target
        assert text.strip().lstrip("v") == "%d.%d.%d" % target
    if seen is not None and not seen.is_release:
        assert target is None and not k.at_target(seen, seen.release)


@pytest.mark.parametrize("after", [["v1.37.1-rc.1"], ["v1.37.1-alpha.1.487+550c3cab4fe267"], ["v1.37.1-beta.0"],
                                   ["v1.37.1+k3s1"]])
def test_f2_apply_exiting_0_fails_unless_the_release_is_seen_and_says_what_it_saw(after):
    """F2: v1.37.1-rc.1 is not v1.37.1 (a pre-release is lower than its release); a +k3s1 build is not kubeadm's."""
    cluster = Cluster("v1.36.5", after=after)
    with pytest.raises(ModuleFailure) as failed:
        upgrade(apply_module(), cluster)
    assert failed.value.context["observed_version"] == after[0]
    assert "reports %s, not the target v1.37.1" % after[0] in failed.value.msg
    assert "not the release v1.37.1" in failed.value.msg


def test_f2_apply_on_a_release_candidate_cluster_is_not_skipped_as_done():
    cluster = Cluster("v1.37.1-rc.1", after=["v1.37.1"])
    try:
        result = upgrade(apply_module(), cluster)
    except ModuleFailure as failed:
        assert not failed.context["cluster_at_target"]
        return
    assert any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls), result
    assert not result["cluster_at_target"] and result["observed_version"] == "v1.37.1"


@pytest.mark.parametrize("server", ["v1.37.1-rc.1", "v1.37.1+k3s1"])
def test_f2_preflight_does_not_take_a_release_candidate_or_a_build_for_the_target(server):
    runner = ScriptedRunner({"kubectl": (0, kubectl_json(server), "")})
    try:
        result = upgrade(FakeModule(action="preflight", version="1.37.1", first_control_plane=True), runner)
    except ModuleFailure as failed:
        assert server.endswith("+k3s1") and "a distribution's build" in failed.msg
        assert failed.context["server_version"] == server
        return
    assert not result["cluster_at_target"] and result["server_version"] == server


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("server,kubelet", [("v1.37.1", "v1.37.1-rc.1"), ("v1.37.1-rc.1", "v1.37.1"),
                                            ("v1.37.1+k3s1", "v1.37.1"), ("v1.37.1", "v1.37.1+k3s1")])
def test_f2_verify_fails_for_a_release_candidate_or_a_build(first, server, kubelet):
    cluster = Cluster(server, kubelets=[kubelet], node="gpu-w-1")
    with pytest.raises(ModuleFailure) as failed:
        upgrade(verify_module(first), cluster)
    assert (failed.value.context["server_version"], failed.value.context["kubelet_version"]) == (server, kubelet)


@pytest.mark.parametrize("kubeadm", ["v1.37.1-rc.1", "v1.37.2-rc.0", "v1.37.1+k3s1"])
def test_f2_a_kubeadm_that_is_not_a_release_never_applies(kubeadm):
    """policy.go: a kubeadm v1.37.1-rc.1 is older than v1.37.1 (kubeadmVersion.LessThan, skippable: "Upgrade kubeadm
    first"); gpufleet refuses any kubeadm that is not a release (policy.go refuses unstable versions without
    --allow-experimental-upgrades / --allow-release-candidate-upgrades, which gpufleet never passes)."""
    cluster = Cluster("v1.36.5", after=["v1.37.1"], kubeadm=kubeadm)
    with pytest.raises(ModuleFailure, match="kubeadm %s is not a release" % kubeadm.replace("+", r"\+")):
        upgrade(apply_module(), cluster)
    assert not any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)


def test_f2_version_policy_compares_a_release_candidate_kubeadm_as_policy_go_does():
    errors = kp.version_policy(ko.parse_kube_version("v1.36.5"), ko.parse_kube_version("v1.37.1-rc.1"), (1, 37, 1))
    assert errors["mandatory"] == [] and len(errors["skippable"]) == 1
    assert 'is higher than the kubeadm version "v1.37.1-rc.1"' in errors["skippable"][0]


@FAST
@given(seq=st.lists(st.sampled_from(["v1.36.5", "v1.37.1", "v1.37.1-rc.1", "v1.37.1+k3s1", "v1.37.10", None, "503",
                                     "refused"]), min_size=1, max_size=25))
def test_f2_apply_passes_only_when_the_release_was_seen_in_time(seq):
    entries = [SERVICE_UNAVAILABLE if e == "503" else REFUSED if e == "refused" else e for e in seq]
    try:
        result = upgrade(apply_module(), Cluster("v1.36.5", after=list(entries)))
    except ModuleFailure:
        return
    assert "v1.37.1" in seq and result["observed_version"] == "v1.37.1"


@pytest.mark.parametrize("server,target", [("v1.37.1", "1.36.5"), ("v1.37.1", "1.35.0"), ("v1.25.0", "1.24.0"),
                                           ("v1.37.1-rc.1", "1.37.1"), ("v1.37.2-rc.0", "1.37.1"),
                                           ("v1.37.1+k3s1", "1.37.1")])
def test_f3_preflight_on_another_node_refuses_a_target_the_api_server_does_not_run(server, target):
    """F3, docs/upgrades.md step 1: on every other node the API server must already run the target (a release of
    its minor, at least its patch); before, a target below the API server's minor passed preflight, and verify
    could then never pass: the node was cordoned, drained and upgraded, then held."""
    runner = ScriptedRunner({"kubectl": (0, kubectl_json(server), "")})
    with pytest.raises(ModuleFailure, match="rolling_upgrade_target.kubernetes"):
        upgrade(FakeModule(action="preflight", version=target, first_control_plane=False), runner)


@pytest.mark.parametrize("first", [True, False])
def test_f3_preflight_never_takes_a_node_below_its_kubelet(first):
    runner = ScriptedRunner({("kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "version", "-o", "json"):
                             (0, kubectl_json("v1.37.3"), ""),
                             "kubectl": (0, node_json("gpu-w-1", "v1.37.2"), "")})
    module = FakeModule(action="preflight", version="1.37.1", first_control_plane=first, node_name="gpu-w-1")
    with pytest.raises(ModuleFailure, match="v1.37.1 is older than this node's kubelet \\(v1.37.2\\)") as failed:
        upgrade(module, runner)
    assert failed.value.context["kubelet_version"] == "v1.37.2"


def test_f3_preflight_with_a_node_reads_its_kubelet_and_passes_at_or_above_it():
    runner = ScriptedRunner({("kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "version", "-o", "json"):
                             (0, kubectl_json("v1.37.1"), ""),
                             "kubectl": (0, node_json("gpu-w-1", "v1.36.5"), "")})
    result = upgrade(FakeModule(action="preflight", version="1.37.1", node_name="gpu-w-1"), runner)
    assert result["kubelet_version"] == "v1.36.5" and result["cluster_at_target"]


def test_f3_preflight_refuses_when_the_nodes_kubelet_cannot_be_read():
    runner = ScriptedRunner({("kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "version", "-o", "json"):
                             (0, kubectl_json("v1.37.1"), ""), "kubectl": REFUSED})
    with pytest.raises(ModuleFailure, match="kubelet version of node gpu-w-1"):
        upgrade(FakeModule(action="preflight", version="1.37.1", node_name="gpu-w-1"), runner)


REPORTED = st.one_of(VERSIONS.map(k.version_text), st.builds(lambda v, p: k.version_text(v) + p, VERSIONS,
                                                             st.sampled_from(["-rc.1", "-alpha.0", "+k3s1",
                                                                              "-beta.2+abc"])))


@FAST
@given(server=REPORTED, target=VERSIONS)
def test_f3_preflight_and_verify_agree_on_other_nodes(server, target):
    """One rule (api_server_runs_target): what preflight lets through on another node, verify (with the kubelet at
    the target) passes, and what preflight refuses verify refuses."""
    seen = ko.parse_kube_version(server)
    before = k.skew_problems(seen, target, False)
    after = k.node_verdict(seen, ko.KubeVersion(target), target, False)
    assert bool(before) == bool(after)
    if not before:
        assert seen.is_release and seen.release[:2] == target[:2] and seen.release >= target


@FAST
@given(server=st.one_of(st.none(), REPORTED), kubelet=st.one_of(st.none(), REPORTED), target=VERSIONS,
       first=st.booleans())
def test_f2_a_node_passes_only_when_its_kubelet_is_seen_at_the_release(server, kubelet, target, first):
    seen = [None if v is None else ko.parse_kube_version(v) for v in (server, kubelet)]
    if not k.node_verdict(seen[0], seen[1], target, first):
        assert kubelet == k.version_text(target) and seen[0].is_release
