"""module_utils/kube/kubeadm.py: `kubeadm certs check-expiration` and `kubeadm upgrade plan` read from
their JSON (kubeadm 1.30+) and text (older) outputs, the k8s.certs_expiry check, kubeadm's version
policy (policy.go) and gpufleet's skew rules, and the kubeadm_upgrade steps judged by what the
cluster shows. Outputs: the transcript corpus tests/transcripts/kubeadm (one YAML per transcript,
sources inside) and the text fixtures of tests/fixtures/kubeadm (sources in its README). The
kubeadm stand-in of the molecule scenarios is run directly (a bash script handing version, upgrade
and certs calls to tests/transcripts/kubeadm/replay.py) and must print nothing a transcript does
not have."""

import calendar
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import kubeadm as k
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import kubeadm_policy as kp
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner
from runners import ScriptedRunner

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts", "kubeadm"))
import replay  # noqa: E402  (the corpus loader of the kubeadm stand-in)

NOW = float(calendar.timegm((2026, 11, 26, 0, 0, 0)))
DOUBLES = [os.path.join(REPO, "roles", role, "molecule", "default", "files", "kubeadm")
           for role in ("kubernetes_control_plane", "kubernetes_worker")]


def fixture(name):
    with open(os.path.join(FIXTURES, "kubeadm", name), encoding="utf-8") as handle:
        return handle.read()


def statuses(results):
    return {c["target"].split("/", 1)[1]: c["status"] for c in results}


# --- certs check-expiration -------------------------------------------------------------------

def test_all_valid_certificates_pass():
    parsed = k.parse_check_expiration(fixture("check_expiration.txt"))
    assert [c["name"] for c in parsed["certificates"]][:3] == ["admin.conf", "apiserver", "apiserver-etcd-client"]
    assert len(parsed["certificates"]) == 11 and len(parsed["authorities"]) == 3
    assert parsed["certificates"][2]["ca"] == "etcd-ca"
    results = k.certs_expiry_checks(parsed, NOW, 30)
    assert results.summary() == {"pass": 14, "warn": 0, "fail": 0, "skip": 0}
    assert all(c["id"] == "k8s.certs_expiry" for c in results)


def test_expiring_in_10_days_warns_and_expired_fails():
    results = k.certs_expiry_checks(k.parse_check_expiration(fixture("check_expiration_expiring.txt")), NOW, 30)
    got = statuses(results)
    assert got["admin.conf"] == "warn" and got["apiserver"] == "fail"
    assert [s for n, s in got.items() if n not in ("admin.conf", "apiserver")] == ["pass"] * 11
    warn = results.by_id("k8s.certs_expiry")[0]
    assert "expires in 10 days" in warn["message"] and "gpufleet_cert_warn_days=30" in warn["message"]
    assert warn["observed"]["days_left"] == 10.0
    expired = [c for c in results if c["status"] == "fail"][0]
    assert "expired on Nov 20, 2026 08:25 UTC" in expired["message"]
    # a smaller window: 10 days left is no longer a warning
    assert statuses(k.certs_expiry_checks(k.parse_check_expiration(fixture("check_expiration_expiring.txt")),
                                          NOW, 7))["admin.conf"] == "pass"


def test_blank_ca_cells_are_read_by_column():
    parsed = k.parse_check_expiration(fixture("check_expiration_blank_ca.txt"))
    rows = {c["name"]: c for c in parsed["certificates"]}
    assert rows["admin.conf"]["ca"] == "" and rows["apiserver"]["ca"] == "ca"
    assert rows["admin.conf"]["expires"] == calendar.timegm((2027, 10, 15, 8, 25, 0))
    assert not rows["admin.conf"]["externally_managed"]


def test_missing_certificate_fails():
    text = fixture("check_expiration.txt").replace("apiserver-kubelet-client   Nov 09, 2027 09:16 UTC   348d    ",
                                                   "!MISSING! apiserver-kubelet-client")
    results = k.certs_expiry_checks(k.parse_check_expiration(text), NOW, 30)
    assert statuses(results)["apiserver-kubelet-client"] == "fail"


@pytest.mark.parametrize("text", [
    "",
    "garbage\nmore garbage\n",
    "[check-expiration] Reading configuration from the cluster...\n",
    # the header without rows
    "CERTIFICATE                EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   EXTERNALLY MANAGED\n",
    # a date that is not kubeadm's format
    fixture("check_expiration.txt").replace("Nov 09, 2027 09:17 UTC", "2027-11-09T09:17:00Z  "),
    # no authority table: the CAs' expiry is unknown
    fixture("check_expiration.txt").split("CERTIFICATE AUTHORITY   EXPIRES")[0],
])
def test_unreadable_output_raises(text):
    with pytest.raises(k.KubeadmOutputError):
        k.parse_check_expiration(text)


# --- upgrade plan -----------------------------------------------------------------------------

def test_plan_offering_the_target_passes():
    plan = k.parse_upgrade_plan(fixture("upgrade_plan.txt"))
    assert plan["cluster_version"] == "v1.28.5" and plan["kubeadm_version"] == "v1.29.2"
    assert plan["apply_versions"] == ["v1.29.2"] and not plan["blocking"] and not plan["up_to_date"]
    assert {"component": "kube-apiserver", "node": "", "current": "v1.28.5", "target": "v1.29.2"} in plan["components"]
    assert k.judge_plan(plan, "1.29.2") == []
    assert k.judge_plan(plan, "v1.29.3")  # not offered, newer than kubeadm


def test_plan_up_to_date_has_nothing_to_do():
    plan = k.parse_upgrade_plan(fixture("upgrade_plan_up_to_date.txt"))
    assert plan["up_to_date"] and k.judge_plan(plan, "1.29.2") == []


def test_plan_with_an_old_kubeadm_is_refused():
    problems = k.judge_plan(k.parse_upgrade_plan(fixture("upgrade_plan_old_kubeadm.txt")), "1.29.2")
    assert any("kubeadm v1.29.2 is needed" in p for p in problems)


def test_plan_skipping_a_minor_is_refused():
    plan = k.parse_upgrade_plan(fixture("upgrade_apply_skip_minor.txt"))
    assert any("too high; kubeadm can upgrade only 1 minor version at a time" in b for b in plan["blocking"])
    problems = k.judge_plan(plan, "1.30.0")
    assert any("skips a minor" in p and "rolling_upgrade_target.kubernetes" in p for p in problems)


def test_plan_without_a_cluster_version_raises():
    for text in ("", "garbage", fixture("upgrade_apply_unhealthy.txt")):
        with pytest.raises(k.KubeadmOutputError):
            k.parse_upgrade_plan(text)


def test_old_multi_version_kubelet_rows():
    text = fixture("upgrade_plan.txt").replace("kubelet     2 x v1.28.5   v1.29.2",
                                               "kubelet     2 x v1.28.5   v1.29.2\n            1 x v1.28.4   v1.29.2")
    kubelets = [c for c in k.parse_upgrade_plan(text)["components"] if c["component"] == "kubelet"]
    assert [c["current"] for c in kubelets] == ["v1.28.5", "v1.28.4"]


# --- skew rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("server,target,first,refused", [
    ((1, 28, 5), (1, 29, 2), True, ""),
    ((1, 28, 5), (1, 28, 9), True, ""),
    ((1, 28, 5), (1, 30, 0), True, "skips a minor"),
    ((1, 29, 2), (1, 28, 5), True, "gpufleet does not downgrade"),
    ((1, 29, 2), (1, 29, 2), False, ""),
    ((1, 28, 5), (1, 29, 2), False, "newer than the API server"),
    ((1, 29, 1), (1, 29, 2), False, "newer than the API server"),
    ((1, 29, 2), (2, 0, 0), True, "major"),
])
def test_skew_rules(server, target, first, refused):
    problems = k.skew_problems(server, target, first)
    if refused:
        assert len(problems) == 1 and refused in problems[0]
        assert "rolling_upgrade_target.kubernetes" in problems[0]
    else:
        assert problems == []


@pytest.mark.parametrize("bad", ["1.29", "", None, "latest", "v1"])
def test_target_must_be_x_y_z(bad):
    with pytest.raises(ValueError, match="X.Y.Z"):
        k.kube_version(bad, "rolling_upgrade_target.kubernetes")


# --- the transcript corpus ----------------------------------------------------------------------

CORPUS = os.path.join(REPO, "tests", "transcripts", "kubeadm")
MINORS = ["1.31", "1.33", "1.34", "1.35", "1.36", "1.37"]  # every minor of the matrix, and 1.31's older wording
CASES = ["version-short", "upgrade-plan-text", "upgrade-plan-json", "upgrade-plan-json-current",
         "upgrade-apply-success", "upgrade-apply-failure", "upgrade-node-success", "upgrade-node-failure",
         "certs-check-expiration-text-valid", "certs-check-expiration-text-expired",
         "certs-check-expiration-json-valid", "certs-check-expiration-json-expired"]
# init, join, token create, config validate and init phase upload-certs: the molecule scenarios' minor only
# (tests/unit/test_transcripts_kubeadm.py covers them)
LIFECYCLE = {"1.36": ["config-validate-ok", "config-validate-missing", "init-success", "init-preflight-failure",
                      "init-phase-upload-certs", "token-create-worker", "token-create-control-plane",
                      "join-worker-success", "join-control-plane-success", "join-preflight-failure",
                      "join-control-plane-preflight-failure"]}
ALL = replay.transcripts(CORPUS)


def transcript(minor, case):
    return [t for t in ALL if t["minor"] == minor and t["case"] == case][0]


def test_the_corpus_covers_every_minor_and_case():
    assert replay.minors(CORPUS) == MINORS
    for minor in MINORS:
        cases = sorted(t["case"] for t in ALL if t["minor"] == minor)
        assert cases == sorted(CASES + LIFECYCLE.get(minor, [])), minor
    for t in ALL:
        assert t["tool"] == "kubeadm" and t["version"].startswith("v%s." % t["minor"]), t["case"]
        assert t["argv"][0] == "kubeadm" and t["source"].strip() and t["notes"].strip()


def _target(minor):
    return transcript(minor, "version-short")["version"]


def _before(minor):
    return k.parse_upgrade_plan(transcript(minor, "upgrade-plan-text")["stdout"])["cluster_version"]


@pytest.mark.parametrize("minor", MINORS)
def test_plan_json_and_text_of_every_minor_agree_and_pass(minor):
    target = _target(minor)
    text = k.parse_upgrade_plan(transcript(minor, "upgrade-plan-text")["stdout"])
    structured = k.parse_plan_json(transcript(minor, "upgrade-plan-json")["stdout"])
    assert structured["format"] == "json" and text["format"] == "text"
    assert structured["apply_versions"] == text["apply_versions"] == [target]
    assert structured["cluster_version"] == text["cluster_version"] == _before(minor)
    assert structured["kubelet_versions"] == text["kubelet_versions"] == [_before(minor)] * 2
    observed, own = k.kube_version(_before(minor)), k.kube_version(target)
    assert k.judge_plan(structured, target, cluster=observed, kubeadm=own) == []
    assert k.judge_plan(text, target) == []
    current = k.parse_plan_json(transcript(minor, "upgrade-plan-json-current")["stdout"])
    assert current["up_to_date"] and k.judge_plan(current, target, cluster=own, kubeadm=own) == []
    # nothing offered while the API server is not at the target: refused, never taken for done
    assert any("nothing to upgrade" in p for p in k.judge_plan(current, target, cluster=observed, kubeadm=own))


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("form", ["json", "text"])
def test_certs_of_every_minor(minor, form):
    read = k.parse_certs_json if form == "json" else k.parse_check_expiration
    valid = read(transcript(minor, "certs-check-expiration-%s-valid" % form)["stdout"])
    assert len(valid["certificates"]) == 11 and len(valid["authorities"]) == 3
    assert k.certs_expiry_checks(valid, NOW, 30).summary() == {"pass": 14, "warn": 0, "fail": 0, "skip": 0}
    expired = k.certs_expiry_checks(read(transcript(minor, "certs-check-expiration-%s-expired" % form)["stdout"]),
                                    NOW, 30)
    failed = sorted(c["target"] for c in expired if c["status"] == "fail")
    assert failed == ["kubeadm-pki/apiserver", "kubeadm-pki/front-proxy-ca"]


def test_json_and_text_certificates_are_the_same_dates():
    text = k.parse_check_expiration(transcript("1.37", "certs-check-expiration-text-expired")["stdout"])
    structured = k.parse_certs_json(transcript("1.37", "certs-check-expiration-json-expired")["stdout"])
    for kind in ("certificates", "authorities"):
        assert [(c["name"], c["expires"] // 60) for c in text[kind]] == \
            [(c["name"], c["expires"] // 60) for c in structured[kind]]


def test_an_authority_table_under_an_unknown_header_is_not_skipped():
    """Before: an authority table whose header was not recognised was skipped, and an expired
    front-proxy-ca was reported healthy."""
    text = transcript("1.33", "certs-check-expiration-text-expired")["stdout"].replace(
        "CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED",
        "CA                      EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED")
    with pytest.raises(k.KubeadmOutputError, match="does not know"):
        k.parse_check_expiration(text)
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.29.9\n", ""),
                             "kubeadm": (0, text, "")})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed is None and [c["status"] for c in results] == ["fail"]


@pytest.mark.parametrize("change", [
    lambda d: d.update(apiVersion="output.kubeadm.k8s.io/v1alpha2"),
    lambda d: d.update(kind="UpgradePlan"),
    lambda d: d["certificates"][0].update(expirationDate="Nov 09, 2027 09:17 UTC"),
    lambda d: d["certificates"][0].update(residualTime="348d"),
    lambda d: d["certificates"][0].update(missing="false"),
    lambda d: d["certificateAuthorities"].clear(),
    lambda d: d.pop("certificateAuthorities"),
    lambda d: d["certificates"][3].pop("externallyManaged"),
])
def test_certs_json_is_read_strictly(change):
    document = json.loads(transcript("1.36", "certs-check-expiration-json-valid")["stdout"])
    change(document)
    with pytest.raises(k.KubeadmOutputError, match="unreadable record"):
        k.parse_certs_json(json.dumps(document))


@pytest.mark.parametrize("change", [
    lambda d: d["certificates"][0].update(extra=True),
    lambda d: d.update(metadata={}, status={"note": "a field of a later v1alpha3"}),
    lambda d: d["certificateAuthorities"][0].update(signatureAlgorithm="SHA256-RSA"),
])
def test_certs_json_ignores_a_key_it_does_not_know(change):
    """output.kubeadm.k8s.io/v1alpha3 may gain optional fields within its version: an unknown key in an otherwise
    well-formed document is ignored (before: refused, so a newer kubeadm 1.3x would have failed every check)."""
    document = json.loads(transcript("1.36", "certs-check-expiration-json-valid")["stdout"])
    expected = k.parse_certs_json(json.dumps(document))
    change(document)
    assert k.parse_certs_json(json.dumps(document)) == expected


def test_plan_json_after_informational_lines_and_a_config_needing_manual_upgrade():
    text = transcript("1.35", "upgrade-plan-json")["stdout"]
    assert k.parse_plan_json("[upgrade] Running cluster health checks\n" + text)["apply_versions"] == ["v1.35.0"]
    document = json.loads(text)
    document["configVersions"][0]["manualUpgradeRequired"] = True
    plan = k.parse_plan_json(json.dumps(document))
    problems = k.judge_plan(plan, "1.35.0", cluster=(1, 34, 3), kubeadm=(1, 35, 0))
    assert problems and "kubeproxy.config.k8s.io v1alpha1 needs a manual upgrade" in problems[0]
    for broken in ("", "{}", text.replace("UpgradePlan", "Plan"), text + "{}", text.replace('"kube-apiserver"', '"x"')):
        with pytest.raises(k.KubeadmOutputError):
            k.parse_plan_json(broken)


# --- kubeadm's version policy (policy.go) and gpufleet's skew rules ------------------------------

@pytest.mark.parametrize("cluster,kubeadm,target,kubelets,mandatory,skippable", [
    ((1, 36, 5), (1, 37, 1), (1, 37, 1), [(1, 36, 5)], [], []),
    ((1, 36, 5), (1, 37, 1), (1, 37, 0), [], [], []),
    # kubeadm one minor newer than the target: kubeadm refuses without --force (gpufleet allowed it before)
    ((1, 35, 6), (1, 37, 1), (1, 36, 5), [], [], ["Kubeadm version v1.37.1 can only be used to upgrade to Kubernetes "
                                                  "version 1.37"]),
    ((1, 35, 6), (1, 37, 1), (1, 37, 1), [], ["is too high; kubeadm can upgrade only 1 minor version at a time"], []),
    ((1, 37, 1), (1, 37, 1), (1, 35, 0), [], ["equal to or lower than the minimum supported version",
                                              "is too low; kubeadm can downgrade only 1 minor version at a time"],
     ["can only be used to upgrade to Kubernetes version 1.37"]),
    ((1, 36, 5), (1, 36, 5), (1, 37, 1), [], ["at least one minor release higher than the kubeadm minor release "
                                              "(37 > 36)"], []),
    ((1, 37, 0), (1, 37, 0), (1, 37, 1), [], [], ["is higher than the kubeadm version \"v1.37.0\". Upgrade kubeadm "
                                                  "first"]),
    ((1, 36, 5), (1, 37, 1), (1, 37, 1), [(1, 33, 9), (1, 34, 0)], [],
     ["There are kubelets in this cluster that are too old that have these versions [v1.33.9]"]),
    # before kubeadm 1.29 the kubelet skew was 1 minor
    ((1, 27, 5), (1, 28, 2), (1, 28, 2), [(1, 26, 1)], [], ["too old that have these versions [v1.26.1]"]),
])
def test_version_policy_is_policy_go(cluster, kubeadm, target, kubelets, mandatory, skippable):
    errors = kp.version_policy(cluster, kubeadm, target, kubelets)
    assert len(errors["mandatory"]) == len(mandatory) and len(errors["skippable"]) == len(skippable), errors
    for expected, got in zip(mandatory + skippable, errors["mandatory"] + errors["skippable"]):
        assert expected in got


def test_plan_with_a_kubeadm_one_minor_newer_is_refused():
    """Before: gpufleet allowed kubeadm one minor newer than the target (have[1] > wanted[1] + 1)."""
    plan = k.parse_plan_json(transcript("1.36", "upgrade-plan-json")["stdout"])
    problems = k.judge_plan(plan, "1.36.5", cluster=(1, 35, 6), kubeadm=(1, 37, 1))
    assert any("can only be used to upgrade to Kubernetes version 1.37" in p and "--force" in p for p in problems)


# --- the kubeadm_upgrade steps: success observed, never read from a banner --------------------------

class FakeModule:
    def __init__(self, check_mode=False, **params):
        self.params = dict((name, spec.get("default")) for name, spec in k.UPGRADE_ARGSPEC.items())
        self.params.update(params)
        self.check_mode = check_mode


def kubectl_version(server):
    return json.dumps({"clientVersion": {"gitVersion": "v1.29.2"}, "serverVersion": {"gitVersion": server}})


def node_json(name, kubelet):
    return json.dumps({"kind": "Node", "metadata": {"name": name},
                       "status": {"nodeInfo": {"kubeletVersion": kubelet, "kubeProxyVersion": ""}}})


class Cluster:
    """The kubeadm stand-in (real subprocess, answering from the corpus) and a kubectl that answers
    what the cluster shows: the API server's version changes only when the stand-in's apply exits
    0 and ``upgrades`` says the upgrade took."""

    def __init__(self, minor, server, kubelet=None, upgrades=True, node="cp-1"):
        self.minor, self.server, self.kubelet, self.upgrades, self.node = minor, server, kubelet or server, upgrades, node
        self.calls = []
        self.sub = SubprocessRunner()

    def run(self, args, timeout=None, check_rc=False):
        self.calls.append(list(args))
        if args[0] == "kubectl":
            scripted = ScriptedRunner({
                tuple(args[:3]) + ("version", "-o", "json"): (0, kubectl_version(self.server), ""),
                tuple(args[:3]) + ("get", "node", self.node, "-o", "json"): (0, node_json(self.node, self.kubelet), "")})
            return scripted.run(args)
        result = self.sub.run(args, timeout=timeout)
        if args[1:3] == ["upgrade", "apply"] and result.rc == 0 and self.upgrades:
            self.server = args[4]
        return result

    def which(self, name, required=False):
        return name


@pytest.fixture
def double(tmp_path, monkeypatch):
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    monkeypatch.setenv("KUBEADM_DOUBLE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("KUBEADM_DOUBLE_PYTHON", sys.executable)
    monkeypatch.delenv("KUBEADM_DOUBLE_CASES", raising=False)
    return tmp_path


def no_sleep(seconds):
    return None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 10.0
        return self.now


def upgrade(module, runner):
    return k.upgrade_work(module, runner, sleep=no_sleep, clock=Clock())


@pytest.mark.parametrize("minor", MINORS)
def test_apply_of_every_minor_succeeds_when_observed(double, monkeypatch, minor):
    """Before: every apply to 1.32+ failed (the 1.32+ closing line is not '[upgrade/successful] SUCCESS!')."""
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", minor)
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-plan-json,upgrade-apply-success")
    target = _target(minor)
    cluster = Cluster(minor, _before(minor))
    result = upgrade(FakeModule(action="apply", version=target, first_control_plane=True, kubeadm=DOUBLES[0]), cluster)
    assert result["changed"] and result["observed_version"] == target and result["plan"]["format"] == "json"
    assert result["banner"] == {"wording": "1.31-" if minor == "1.31" else "1.32+", "version": target}
    kubeadm_calls = [c[1:] for c in cluster.calls if c[0] != "kubectl"]
    assert kubeadm_calls == [["version", "-o", "short"], ["upgrade", "plan", target, "-o", "json"],
                             ["upgrade", "apply", "--yes", target, "--etcd-upgrade=true"]]


@pytest.mark.parametrize("minor", ["1.31", "1.37"])
def test_apply_exiting_0_while_the_api_server_stays_old_fails(double, monkeypatch, minor):
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", minor)
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-plan-json,upgrade-apply-success")
    cluster = Cluster(minor, _before(minor), upgrades=False)
    with pytest.raises(ModuleFailure, match="the API server reports %s, not the target" % _before(minor)) as failed:
        upgrade(FakeModule(action="apply", version=_target(minor), first_control_plane=True, kubeadm=DOUBLES[0]),
                cluster)
    assert failed.value.context["banner"]["version"] == _target(minor)  # the banner said success: it decides nothing


@pytest.mark.parametrize("minor", ["1.31", "1.34"])
def test_apply_failing_fails_naming_kubeadms_reason(double, monkeypatch, minor):
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", minor)
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-plan-json,upgrade-apply-failure")
    cluster = Cluster(minor, _before(minor))
    with pytest.raises(ModuleFailure, match="exited with rc 1") as failed:
        upgrade(FakeModule(action="apply", version=_target(minor), first_control_plane=True, kubeadm=DOUBLES[1]),
                cluster)
    assert "static Pod hash for component etcd" in failed.value.msg and failed.value.context["banner"] is None
    assert cluster.server == _before(minor)


def test_apply_on_a_cluster_at_the_target_does_nothing(double, monkeypatch):
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", "1.36")
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-plan-json-current")
    cluster = Cluster("1.36", "v1.36.5")
    result = upgrade(FakeModule(action="apply", version="1.36.5", first_control_plane=True, kubeadm=DOUBLES[0]),
                     cluster)
    assert not result["changed"] and result["cluster_at_target"]
    assert not any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)


def test_apply_refused_by_the_policy_never_applies(double, monkeypatch):
    # kubeadm 1.37.1 asked for 1.36.5: the plan of the stand-in offers nothing for it, kubeadm's policy refuses
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", "1.37")
    cluster = Cluster("1.37", "v1.35.6")
    with pytest.raises(ModuleFailure, match="refuses v1.36.5"):
        upgrade(FakeModule(action="apply", version="1.36.5", first_control_plane=True, kubeadm=DOUBLES[0]), cluster)
    assert not any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)


def test_text_plan_for_a_kubeadm_older_than_1_30():
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.29.2\n", ""),
                             ("kubeadm", "upgrade", "plan", "v1.29.2"): (0, fixture("upgrade_plan.txt"), ""),
                             "kubectl": (0, kubectl_version("v1.28.5"), "")})
    result = upgrade(FakeModule(action="plan", version="1.29.2", first_control_plane=True), runner)
    assert result["plan"]["format"] == "text" and not result["cluster_at_target"]


@pytest.mark.parametrize("minor", ["1.31", "1.37"])
def test_upgrade_node_by_exit_status(double, monkeypatch, minor):
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", minor)
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-node-success")
    assert upgrade(FakeModule(action="node", version=_target(minor), kubeadm=DOUBLES[0]), SubprocessRunner())["changed"]
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-node-failure")
    with pytest.raises(ModuleFailure, match="rc 1"):
        upgrade(FakeModule(action="node", version=_target(minor), kubeadm=DOUBLES[0]), SubprocessRunner())


@pytest.mark.parametrize("first,server,kubelet,problem", [
    (True, "v1.37.1", "v1.37.1", ""),
    (False, "v1.37.1", "v1.37.1", ""),
    (False, "v1.37.2", "v1.37.1", ""),
    (True, "v1.37.1", "v1.36.5", "kubelet reports v1.36.5, not the target v1.37.1"),
    (True, "v1.36.5", "v1.37.1", "API server reports v1.36.5, not the target"),
    (False, "v1.38.0", "v1.37.1", "is below the API server's minor"),
])
def test_verify_looks_at_the_api_server_and_the_kubelet(first, server, kubelet, problem):
    cluster = Cluster("1.37", server, kubelet, node="gpu-w-1")
    module = FakeModule(action="verify", version="1.37.1", first_control_plane=first, node_name="gpu-w-1",
                        kubeconfig="/etc/kubernetes/kubelet.conf")
    if not problem:
        assert upgrade(module, cluster)["kubelet_version"] == "v1.37.1"
        return
    with pytest.raises(ModuleFailure, match=problem):
        upgrade(module, cluster)
    assert len(cluster.calls) > 2  # looked again until observe_timeout passed


def test_verify_needs_a_node_name_and_reads_the_node_it_names():
    with pytest.raises(ModuleFailure, match="node_name"):
        upgrade(FakeModule(action="verify", version="1.37.1"), ScriptedRunner())
    runner = ScriptedRunner({"kubectl": (0, node_json("other", "v1.37.1"), "")})
    with pytest.raises(ModuleFailure, match="could not be read"):
        upgrade(FakeModule(action="verify", version="1.37.1", node_name="gpu-w-1", observe_timeout=0), runner)


def test_preflight_across_two_minors_is_refused_naming_the_variable():
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.28.5"), "")})
    with pytest.raises(ModuleFailure) as refused:
        upgrade(FakeModule(action="preflight", version="1.30.1", first_control_plane=True), runner)
    assert "rolling_upgrade_target.kubernetes v1.30.1 skips a minor" in refused.value.msg
    assert refused.value.context["server_version"] == "v1.28.5"
    assert runner.calls == [["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "version", "-o", "json"]]


def test_preflight_worker_before_the_control_plane_is_refused():
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.28.5"), "")})
    with pytest.raises(ModuleFailure, match="kubelet newer than the API server"):
        upgrade(FakeModule(action="preflight", version="1.29.2"), runner)
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.29.2"), "")})
    assert upgrade(FakeModule(action="preflight", version="1.29.2"), runner)["cluster_at_target"]


@pytest.mark.parametrize("answer", [(1, "", "The connection to the server was refused"), (0, "{}", "")])
def test_preflight_without_a_server_version_fails(answer):
    with pytest.raises(ModuleFailure, match="API server"):
        upgrade(FakeModule(action="preflight", version="1.29.2"), ScriptedRunner({"kubectl": answer}))


def test_apply_only_on_the_first_control_plane_and_check_mode_changes_nothing(double, monkeypatch):
    with pytest.raises(ModuleFailure, match="first control-plane node only"):
        upgrade(FakeModule(action="apply", version="1.29.2"), ScriptedRunner())
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", "1.33")
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "upgrade-plan-json")
    cluster = Cluster("1.33", "v1.32.8")
    result = upgrade(FakeModule(check_mode=True, action="apply", version="1.33.4", first_control_plane=True,
                                kubeadm=DOUBLES[0]), cluster)
    assert result["changed"] and not any(c[1:3] == ["upgrade", "apply"] for c in cluster.calls)
    assert upgrade(FakeModule(check_mode=True, action="node", version="1.29.2"), ScriptedRunner()) == {"changed": True}


@pytest.mark.parametrize("answer", [
    (1, "", "failed to load admin kubeconfig: open /etc/kubernetes/admin.conf: no such file or directory"),
    (0, "garbage", ""),
    (0, "", ""),
])
def test_certs_command_failure_is_a_failing_check(answer):
    runner = ScriptedRunner({("kubeadm", "version", "-o", "short"): (0, "v1.35.0\n", ""), "kubeadm": answer})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed is None
    assert [(c["id"], c["status"]) for c in results] == [("k8s.certs_expiry", "fail")]
    assert "could not be read" in results.as_list()[0]["message"]
    assert runner.calls[-1] == ["kubeadm", "certs", "check-expiration", "-o", "json"]
    runner = ScriptedRunner({"kubeadm": answer})  # kubeadm's own version unreadable: fail too
    assert [c["status"] for c in k.certs_checks(runner, "kubeadm", 30, NOW)[0]] == ["fail"]


@pytest.mark.parametrize("minor", ["1.31", "1.37"])
def test_certs_through_the_stand_in(double, monkeypatch, minor):
    monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", minor)
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "certs-check-expiration-json-valid")
    results, parsed = k.certs_checks(SubprocessRunner(), DOUBLES[1], 30, NOW)
    assert parsed and len(parsed["certificates"]) == 11
    assert set(statuses(results).values()) == {"pass"}
    monkeypatch.setenv("KUBEADM_DOUBLE_CASES", "certs-check-expiration-json-expired")
    results, parsed = k.certs_checks(SubprocessRunner(), DOUBLES[1], 30, NOW)
    assert statuses(results)["apiserver"] == statuses(results)["front-proxy-ca"] == "fail"


# --- the stand-ins answer only from the corpus -------------------------------------------------------

def test_the_two_doubles_are_one():
    with open(DOUBLES[0], encoding="utf-8") as one, open(DOUBLES[1], encoding="utf-8") as two:
        assert one.read() == two.read()


def _stand_in(args, minor, cases=""):
    env = dict(os.environ, KUBEADM_DOUBLE_LOG=os.devnull, KUBEADM_DOUBLE_PYTHON=sys.executable,
               KUBEADM_DOUBLE_MINOR=minor, KUBEADM_DOUBLE_CASES=cases)
    return subprocess.run([DOUBLES[0]] + list(args), env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_stand_in_prints_no_line_that_no_transcript_has(monkeypatch, capsys):
    """Every transcript replayed (in-process, replay.main, what the bash stand-in execs) gives back
    exactly the transcript; the bash stand-in itself, once per minor and for calls no transcript
    has, prints nothing else either."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    lines = {}
    for t in ALL:
        lines.setdefault(t["minor"], set()).update((t["stdout"] + t["stderr"]).splitlines())
    for t in ALL:
        monkeypatch.setenv("KUBEADM_DOUBLE_MINOR", t["minor"])
        monkeypatch.setenv("KUBEADM_DOUBLE_CASES", t["case"])
        rc = replay.main(t["argv"][1:])
        out, err = capsys.readouterr()
        assert (rc, out, err) == (t["rc"], t["stdout"], t["stderr"]), (t["minor"], t["case"])
    for minor in MINORS:
        t = transcript(minor, "upgrade-apply-success")
        done = _stand_in(t["argv"][1:], minor, t["case"])
        assert (done.returncode, done.stdout, done.stderr) == (t["rc"], t["stdout"], t["stderr"]), minor
        assert set((done.stdout + done.stderr).splitlines()) <= lines[minor]
    # a call no transcript has: no invented answer
    for args in (["upgrade", "apply", "--yes", "v1.99.0"], ["certs", "renew", "all"], ["version"]):
        done = _stand_in(args, "1.37")
        assert done.returncode == 2 and done.stdout == "" and "transcript" in done.stderr


def test_two_transcripts_of_one_argv_need_a_case():
    done = _stand_in(["upgrade", "node"], "1.36")
    assert done.returncode == 2 and "2 transcript(s)" in done.stderr


# --- properties: any input is a verdict or a clear failure, never a crash, never an unseen pass -----

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARSERS = [k.parse_certs_json, k.parse_check_expiration, k.parse_plan_json, k.parse_upgrade_plan, k.short_version,
           k.server_version, lambda text: k.kubelet_version(text, "cp-1")]
SAMPLES = [t["stdout"] for t in ALL]


def _mutations():
    return st.one_of(
        st.text(max_size=400),
        st.builds(lambda s, i, j: s[:i] + s[j:], st.sampled_from(SAMPLES), st.integers(0, 3000), st.integers(0, 3000)),
        st.builds(lambda s, i, c: s[:i] + c + s[i:], st.sampled_from(SAMPLES), st.integers(0, 3000),
                  st.text(max_size=20)),
    )


@FAST
@given(text=_mutations(), parser=st.sampled_from(PARSERS))
def test_parsers_answer_or_fail_clearly(text, parser):
    try:
        parser(text)
    except k.KubeadmOutputError:
        pass


@FAST
@given(text=_mutations())
def test_certificates_pass_only_when_seen_valid(text):
    for read in (k.parse_certs_json, k.parse_check_expiration):
        try:
            parsed = read(text)
        except k.KubeadmOutputError:
            continue
        results = k.certs_expiry_checks(parsed, NOW, 30)
        entries = parsed["certificates"] + parsed["authorities"]
        assert len(results.as_list()) == len(entries) and entries
        for entry, check in zip(entries, results):
            if check["status"] == "pass":
                assert not entry["missing"] and entry["expires"] > NOW + 30 * 86400


VERSIONS = st.tuples(st.just(1), st.integers(0, 40), st.integers(0, 20))


@FAST
@given(cluster=VERSIONS, kubeadm=VERSIONS, target=VERSIONS, kubelets=st.lists(VERSIONS, max_size=4))
def test_version_policy_passes_only_what_kubeadm_allows(cluster, kubeadm, target, kubelets):
    errors = kp.version_policy(cluster, kubeadm, target, kubelets)
    allowed = not errors["mandatory"] and not errors["skippable"]
    if allowed:
        assert target[1] == kubeadm[1] and target <= kubeadm and abs(target[1] - cluster[1]) <= 1
        assert all(target[1] <= v[1] + kp.kubelet_skew(kubeadm) for v in kubelets)


@FAST
@given(rc=st.integers(-2, 3), observed=st.one_of(st.none(), VERSIONS), target=VERSIONS,
       banner=st.sampled_from(["", '[upgrade] SUCCESS! A control plane node of your cluster was upgraded to "v1.37.1".']))
def test_apply_passes_only_exit_0_and_the_target_observed(rc, observed, target, banner):
    problems = k.apply_verdict(rc, observed, target)
    assert (problems == []) == (rc == 0 and observed == target)


@FAST
@given(server=st.one_of(st.none(), VERSIONS), kubelet=st.one_of(st.none(), VERSIONS), target=VERSIONS,
       first=st.booleans())
def test_a_node_passes_only_when_its_kubelet_is_seen_at_the_target(server, kubelet, target, first):
    if not k.node_verdict(server, kubelet, target, first):
        assert kubelet == target and server is not None and server[:2] == target[:2] and server >= target


@FAST
@given(text=_mutations(), cluster=VERSIONS, kubeadm=VERSIONS, target=VERSIONS)
def test_judge_plan_never_crashes(text, cluster, kubeadm, target):
    for read in (k.parse_plan_json, k.parse_upgrade_plan):
        try:
            plan = read(text)
        except k.KubeadmOutputError:
            continue
        problems = k.judge_plan(plan, k.version_text(target), cluster=cluster, kubeadm=kubeadm)
        if not problems and cluster != target:
            assert any(k.kube_version(v) == target for v in plan["apply_versions"])
