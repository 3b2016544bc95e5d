# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubeadm on the node: modules ``kubeadm_certs`` and ``kubeadm_upgrade`` (their ``work``): the
commands run, their output read (kubeadm_output.py: the formats of each kubeadm release) and
judged (kubeadm_policy.py: kubeadm's version policy, gpufleet's skew rules, an upgrade judged by
what the cluster then shows, never by a banner). docs/upgrades.md is the user's account.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL_ON_CHOICES, exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kubeadm_output import (
    JSON_OUTPUT_SINCE, KubeadmOutputError, apply_banner, at_target, kube_version, kubelet_version, parse_certs_json,
    parse_check_expiration, parse_plan_json, parse_upgrade_plan, server_version, short_version, version_text)
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kubeadm_policy import (
    apply_verdict, certs_command_failed, certs_expiry_checks, judge_plan, node_verdict, skew_problems)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner

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
