"""module_utils/kubeadm.py: `kubeadm certs check-expiration` and `kubeadm upgrade plan` parsed from
outputs written after real captures (sources in tests/fixtures/kubeadm/README.md), the
k8s.certs_expiry check, the version-skew rules, the kubeadm_upgrade steps over a scripted runner
and over the kubeadm test double of the molecule scenarios (a bash script, run directly)."""

import calendar
import json
import os
import shutil

import pytest
from conftest import FIXTURES, REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils import kubeadm as k
from ansible_collections.gpufleet.cluster.plugins.module_utils.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import SubprocessRunner
from runners import ScriptedRunner

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
])
def test_unreadable_output_raises(text):
    with pytest.raises(k.KubeadmOutputError):
        k.parse_check_expiration(text)


@pytest.mark.parametrize("answer", [
    (1, "", "failed to load admin kubeconfig: open /etc/kubernetes/admin.conf: no such file or directory"),
    (0, "garbage", ""),
    (0, "", ""),
])
def test_certs_command_failure_is_a_failing_check(answer):
    runner = ScriptedRunner({"kubeadm": answer})
    results, parsed = k.certs_checks(runner, "kubeadm", 30, NOW)
    assert parsed is None
    assert [(c["id"], c["status"]) for c in results] == [("k8s.certs_expiry", "fail")]
    assert "could not be read" in results.as_list()[0]["message"]
    assert runner.calls == [["kubeadm", "certs", "check-expiration"]]


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
    ((1, 29, 2), (1, 28, 5), True, "does not downgrade"),
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


# --- kubeadm_upgrade steps over a scripted runner -------------------------------------------------

class FakeModule:
    def __init__(self, check_mode=False, **params):
        self.params = dict((name, spec.get("default")) for name, spec in k.UPGRADE_ARGSPEC.items())
        self.params.update(params)
        self.check_mode = check_mode


def kubectl_version(server):
    return json.dumps({"clientVersion": {"gitVersion": "v1.29.2"}, "serverVersion": {"gitVersion": server}})


def test_preflight_across_two_minors_is_refused_naming_the_variable():
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.28.5"), "")})
    with pytest.raises(ModuleFailure) as refused:
        k.upgrade_work(FakeModule(action="preflight", version="1.30.1", first_control_plane=True), runner)
    assert "rolling_upgrade_target.kubernetes v1.30.1 skips a minor" in refused.value.msg
    assert refused.value.context["server_version"] == "v1.28.5"
    assert runner.calls == [["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "version", "-o", "json"]]


def test_preflight_worker_before_the_control_plane_is_refused():
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.28.5"), "")})
    with pytest.raises(ModuleFailure, match="kubelet newer than the API server"):
        k.upgrade_work(FakeModule(action="preflight", version="1.29.2"), runner)
    runner = ScriptedRunner({"kubectl": (0, kubectl_version("v1.29.2"), "")})
    assert k.upgrade_work(FakeModule(action="preflight", version="1.29.2"), runner)["cluster_at_target"]


@pytest.mark.parametrize("answer", [(1, "", "The connection to the server was refused"), (0, "{}", "")])
def test_preflight_without_a_server_version_fails(answer):
    with pytest.raises(ModuleFailure, match="API server"):
        k.upgrade_work(FakeModule(action="preflight", version="1.29.2"), ScriptedRunner({"kubectl": answer}))


def test_apply_runs_after_a_passing_plan():
    success = '[upgrade/successful] SUCCESS! Your cluster was upgraded to "v1.29.2". Enjoy!\n'
    runner = ScriptedRunner({("kubeadm", "upgrade", "plan", "v1.29.2"): (0, fixture("upgrade_plan.txt"), ""),
                             "kubeadm": (0, success, "")})
    result = k.upgrade_work(FakeModule(action="apply", version="1.29.2", first_control_plane=True), runner)
    assert result["changed"] and runner.calls[1] == ["kubeadm", "upgrade", "apply", "--yes", "v1.29.2",
                                                     "--etcd-upgrade=true"]


def test_apply_on_a_cluster_at_the_target_does_nothing():
    runner = ScriptedRunner({"kubeadm": (0, fixture("upgrade_plan_up_to_date.txt"), "")})
    result = k.upgrade_work(FakeModule(action="apply", version="1.29.2", first_control_plane=True), runner)
    assert not result["changed"] and len(runner.calls) == 1


def test_apply_refused_by_the_plan_never_applies():
    runner = ScriptedRunner({"kubeadm": (1, fixture("upgrade_apply_skip_minor.txt"), "")})
    with pytest.raises(ModuleFailure, match="kubeadm upgrade plan refuses v1.30.0"):
        k.upgrade_work(FakeModule(action="apply", version="1.30.0", first_control_plane=True), runner)
    assert len(runner.calls) == 1


def test_apply_without_success_line_fails():
    runner = ScriptedRunner({("kubeadm", "upgrade", "plan", "v1.29.2"): (0, fixture("upgrade_plan.txt"), ""),
                             "kubeadm": (1, "", fixture("upgrade_apply_unhealthy.txt"))})
    with pytest.raises(ModuleFailure, match="APIServerHealth"):
        k.upgrade_work(FakeModule(action="apply", version="1.29.2", first_control_plane=True), runner)


def test_apply_only_on_the_first_control_plane_and_check_mode_changes_nothing():
    with pytest.raises(ModuleFailure, match="first control-plane node only"):
        k.upgrade_work(FakeModule(action="apply", version="1.29.2"), ScriptedRunner())
    runner = ScriptedRunner({"kubeadm": (0, fixture("upgrade_plan.txt"), "")})
    result = k.upgrade_work(FakeModule(check_mode=True, action="apply", version="1.29.2",
                                       first_control_plane=True), runner)
    assert result["changed"] and len(runner.calls) == 1  # the plan only
    assert k.upgrade_work(FakeModule(check_mode=True, action="node", version="1.29.2"), ScriptedRunner()) == \
        {"changed": True}


# --- the kubeadm test double (bash, run directly: milliseconds) ------------------------------------

@pytest.fixture
def double(tmp_path, monkeypatch):
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    monkeypatch.setenv("KUBEADM_DOUBLE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("KUBEADM_DOUBLE_STATE", str(tmp_path / "state"))
    return tmp_path


def test_the_two_doubles_are_one():
    with open(DOUBLES[0], encoding="utf-8") as one, open(DOUBLES[1], encoding="utf-8") as two:
        assert one.read() == two.read()


def test_double_upgrade_sequence(double):
    runner = SubprocessRunner()
    params = dict(FakeModule(action="apply", version="1.29.2", first_control_plane=True, kubeadm=DOUBLES[0]).params)
    module = FakeModule(**params)
    assert k.upgrade_work(module, runner)["changed"]
    assert (double / "state" / "cluster-version").read_text().strip() == "v1.29.2"
    again = k.upgrade_work(module, runner)  # resumed run: the cluster already runs the target
    assert not again["changed"] and again["cluster_at_target"]
    assert k.upgrade_work(FakeModule(action="node", version="1.29.2", kubeadm=DOUBLES[0]), runner)["changed"]
    with pytest.raises(ModuleFailure, match="skips a minor"):
        k.upgrade_work(FakeModule(action="plan", version="1.31.0", kubeadm=DOUBLES[0]), runner)
    calls = (double / "calls.log").read_text().splitlines()
    assert calls[:2] == ["upgrade plan v1.29.2", "upgrade apply --yes v1.29.2 --etcd-upgrade=true"]


@pytest.mark.parametrize("days,status", [("365", "pass"), ("10", "warn"), ("-2", "fail")])
def test_double_certs(double, monkeypatch, days, status):
    monkeypatch.setenv("KUBEADM_DOUBLE_CERT_DAYS", days)
    results, parsed = k.certs_checks(SubprocessRunner(), DOUBLES[1], 30, __import__("time").time())
    assert parsed and len(parsed["certificates"]) == 8
    assert {c["status"] for c in results if c["target"] != "kubeadm-pki/ca"} >= {status}
    assert set(statuses(results)[c["name"]] for c in parsed["certificates"]) == {status}
