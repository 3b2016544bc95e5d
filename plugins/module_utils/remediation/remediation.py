# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation policy (docs/remediation.md): which action a failing check class gets, and
whether a GPU reset may run. Pure logic, used by playbooks/remediate.yml through the filters
``remediation_policy``, ``remediation_plan`` and ``gpu_reset_decision``.

The policy is the tier variable ``gpufleet_remediation`` (opt-in, default off), overridable per
inventory group through group_vars; what it does not set comes from ``DEFAULT_POLICY`` (the one
place of these defaults). Actions, weakest first: ``isolate`` (today's behaviour: taint, reason,
no more), ``drain`` (isolate and evict the pods, PodDisruptionBudgets respected), ``reset`` (drain,
then a GPU reset, only when no process uses a GPU), ``reboot`` (drain, then reboot). Several
failing classes on one node take the strongest of their actions; a failing check of no class
takes ``isolate``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm import (
    ShowNodeError, node_hold, parse_state, read_show_node)
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import failing_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin

ACTIONS = ("isolate", "drain", "reset", "reboot")  # weakest first
VARIABLE = "gpufleet_remediation"
# check class -> the check ids (and id prefixes) it covers (docs/contracts.md, "Check ids")
CLASSES = (
    ("xid_fatal", ("gpu.xid", "gpu.recovery_action")),
    ("gpu_lost", ("gpu.lost", "gpu.count", "gpu.nvml")),
    ("row_remap", ("gpu.row_remap", "gpu.retired_pages")),
    ("ecc", ("gpu.ecc.volatile_uncorrectable",)),
    ("nvlink", ("gpu.nvlink", "gpu.fabric")),
    ("rdma_port", ("rdma.port", "rdma.devices", "rdma.modules", "rdma.driver", "rdma.uverbs")),
    ("tuning_drift", ("tuning",)),
    ("burn_in", ("burnin", "k8s.nccl")),
)
CLASS_NAMES = tuple(name for name, _ids in CLASSES)
# group, max_parallel, max_attempts, window_hours, lease_namespace, lease_ttl_seconds: the
# breaker's, owned by breaker.POLICY_DEFAULTS (the module remediation_breaker's defaults too)
DEFAULT_POLICY = dict(breaker.POLICY_DEFAULTS, **{
    "enabled": False,
    "actions": {"xid_fatal": "reset", "gpu_lost": "reboot", "row_remap": "reset", "ecc": "drain",
                "nvlink": "isolate", "rdma_port": "isolate", "tuning_drift": "isolate", "burn_in": "isolate"},
    "reboot_timeout": 1800,    # a node that does not come back within it stays isolated
    "slurm_drain_timeout": 3600,  # on a node of the group slurm_nodes: the running jobs get this long to end
    "slurm_poll_interval": 30,    # seconds between two `scontrol show node` while waiting
    "burn_in": burnin.DEFAULTS,  # the burn-in settings' one place (module_utils/gpu/burnin.py)
})


class PolicyError(ValueError):
    """A bad policy; the message names gpufleet_remediation.<key>."""


def _merge(base, override):
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _positive(value, key, integer=True):
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "an integer" if integer else "a number"
        raise PolicyError("%s.%s must be %s > 0, got %r" % (VARIABLE, key, kind, value))


def _breaker_options(merged):
    """What the breaker (module_utils/remediation/breaker.py, the one place of these limits) refuses at run time
    is refused here, naming gpufleet_remediation.<key>: the window and the lease ttl finite and
    within [breaker.MIN_TTL, breaker.MAX_TTL] seconds, max_attempts below breaker.MAX_ATTEMPT_RECORDS,
    max_parallel a number of nodes or a percentage of at most 100, a group that names a Lease, a
    lease_namespace that is a namespace name."""
    checks = (
        ("window_hours", lambda value: breaker.check_seconds("window", value * 3600.0)),
        ("lease_ttl_seconds", lambda value: breaker.check_seconds("ttl", value)),
        ("max_attempts", breaker.check_attempts),
        ("max_parallel", lambda value: breaker.parallel_limit(value, 1)),
        ("group", breaker.lease_name),
        ("lease_namespace", breaker.check_namespace),
    )
    for key, check in checks:
        value = merged[key]
        if isinstance(value, bool):
            raise PolicyError("%s.%s must not be a boolean, got %r" % (VARIABLE, key, value))
        try:
            check(value)
        except (breaker.BreakerError, TypeError, ValueError, OverflowError) as exc:
            raise PolicyError("%s.%s: %s" % (VARIABLE, key, exc))


def policy(value=None):
    """The effective policy: ``value`` (the tier variable; None: unset) over DEFAULT_POLICY,
    checked. PolicyError naming the key."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise PolicyError("%s must be a mapping, got %s" % (VARIABLE, type(value).__name__))
    unknown = sorted(set(value) - set(DEFAULT_POLICY))
    if unknown:
        raise PolicyError("%s: unknown key(s) %s (known: %s)" % (VARIABLE, ", ".join(unknown),
                                                                 ", ".join(sorted(DEFAULT_POLICY))))
    merged = _merge(DEFAULT_POLICY, value)
    if not isinstance(merged["enabled"], bool):
        raise PolicyError("%s.enabled must be true or false, got %r" % (VARIABLE, merged["enabled"]))
    actions = merged["actions"]
    if not isinstance(actions, dict):
        raise PolicyError("%s.actions must map a check class to an action" % VARIABLE)
    for name, action in actions.items():
        if name not in CLASS_NAMES:
            raise PolicyError("%s.actions: unknown check class %r (known: %s)" % (VARIABLE, name, ", ".join(CLASS_NAMES)))
        if action not in ACTIONS:
            raise PolicyError("%s.actions.%s must be one of %s, got %r" % (VARIABLE, name, ", ".join(ACTIONS), action))
    for key in ("max_attempts", "window_hours", "lease_ttl_seconds", "reboot_timeout", "slurm_drain_timeout",
                "slurm_poll_interval"):
        _positive(merged[key], key, integer=key in ("max_attempts", "slurm_drain_timeout", "slurm_poll_interval"))
    _breaker_options(merged)
    if merged["slurm_poll_interval"] > merged["slurm_drain_timeout"]:
        raise PolicyError("%s.slurm_poll_interval (%r) must not exceed %s.slurm_drain_timeout (%r)"
                          % (VARIABLE, merged["slurm_poll_interval"], VARIABLE, merged["slurm_drain_timeout"]))
    if not isinstance(merged["group"], str) or not merged["group"].strip():
        raise PolicyError("%s.group must name the breaker's group" % VARIABLE)
    try:
        merged["burn_in"] = burnin.settings(merged["burn_in"], VARIABLE + ".burn_in")
    except burnin.SettingsError as exc:
        raise PolicyError(str(exc))
    return merged


def check_class(check_id):
    """The class of a check id (the longest listed prefix), or None."""
    best, length = None, -1
    text = str(check_id)
    for name, ids in CLASSES:
        for prefix in ids:
            if (text == prefix or text.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    return best


def plan(results, value=None, fail_on="fail"):
    """What to do with a node from its check ``results`` (the gate's failing checks, fail closed:
    no result at all is a failure): {action, classes, reason, failed_checks}; ``action`` is
    ``none`` (nothing fails), ``isolate``, ``drain``, ``reset`` or ``reboot``."""
    effective = policy(value)
    failing = failing_checks(results, fail_on)
    if not failing:
        return {"action": "none", "classes": {}, "failed_checks": [], "reason": "every check passes"}
    classes, ids = {}, []
    for check in failing:
        ident = "%s:%s" % (check.get("id"), check.get("target"))
        if ident not in ids:
            ids.append(ident)
        name = check_class(check.get("id")) or "unclassified"
        classes.setdefault(name, [])
        if ident not in classes[name]:
            classes[name].append(ident)
    if not effective["enabled"]:
        return {"action": "isolate", "classes": classes, "failed_checks": ids,
                "reason": "remediation is off (%s.enabled false): isolated for %s" % (VARIABLE, ", ".join(ids))}
    chosen = {name: ("isolate" if name == "unclassified" else effective["actions"].get(name, "isolate"))
              for name in classes}
    action = max(chosen.values(), key=ACTIONS.index)
    why = "; ".join("%s -> %s (%s)" % (name, chosen[name], ", ".join(classes[name])) for name in sorted(classes))
    return {"action": action, "classes": classes, "failed_checks": ids, "per_class": chosen,
            "reason": "%s: %s" % (action, why)}


def parse_compute_apps(text):
    """Processes from ``nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader``
    (one ``pid, name, uuid`` line each; nothing at all when no process runs). ValueError for a line
    that is not of that form."""
    processes = []
    for line in (raw.strip() for raw in (text or "").splitlines()):
        if not line or line.lower().startswith("no running processes"):
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 3 or not records.is_decimal(parts[0]):
            raise ValueError("not a pid, process_name, gpu_uuid line: %r" % line)
        processes.append({"pid": int(parts[0]), "name": ", ".join(parts[1:-1]), "gpu_uuid": parts[-1]})
    return processes


def reset_decision(stdout, rc=0, stderr=""):
    """Whether a GPU reset may run: only when the process listing worked and shows no process
    (the driver refuses to reset a GPU in use). {allowed, reason, processes}."""
    if rc != 0:
        detail = (stderr or stdout or "").strip().splitlines()
        return {"allowed": False, "processes": None,
                "reason": "reset refused: the GPU processes could not be listed (nvidia-smi exited %s%s)"
                          % (rc, (": " + detail[-1]) if detail else "")}
    try:
        processes = parse_compute_apps(stdout)
    except ValueError as exc:
        return {"allowed": False, "processes": None,
                "reason": "reset refused: the GPU process listing is unreadable (%s)" % exc}
    if processes:
        shown = ", ".join("%d %s on %s" % (p["pid"], p["name"], p["gpu_uuid"]) for p in processes[:5])
        more = " (+%d more)" % (len(processes) - 5) if len(processes) > 5 else ""
        return {"allowed": False, "processes": processes,
                "reason": "reset refused: %d process(es) use the GPUs: %s%s" % (len(processes), shown, more)}
    return {"allowed": True, "processes": [], "reason": "no process uses the GPUs"}


STEPS = ("breaker", "taint", "drain", "repair", "validate", "burn_in", "release")  # in order; repair: reset/reboot


def step_checks(action, done, stopped=None, burn_in=True):
    """The remediation's steps as checks ``remediation.step`` (target ``<n>:<step>``, n from 1) for the fleet
    report and its history: pass for a step done, fail for the step that stopped the remediation (the first
    step not done, with the reason ``stopped``), skip for the steps not taken. ``action``: the planned action
    (the repair step is named after it: reset, reboot; drain has no repair step); ``done``: the names of
    the steps done, in any order."""
    if action not in ACTIONS:
        raise PolicyError("step_checks: unknown action %r (one of %s)" % (action, ", ".join(ACTIONS)))
    done = set(done or ())
    unknown = done - set(STEPS) - set(ACTIONS)
    if unknown:
        raise PolicyError("step_checks: unknown step(s) %s (steps: %s)" % (", ".join(sorted(unknown)),
                                                                           ", ".join(STEPS)))
    checks = []
    failed = False
    for index, step in enumerate(STEPS, 1):
        name = action if step == "repair" and action in ("reset", "reboot") else step
        check = {"id": "remediation.step", "target": "%d:%s" % (index, name), "observed": action}
        if name == "repair":
            check.update(status="skip", message="no repair step: the action is %s" % action)
        elif name in done:
            check.update(status="pass", message="%s done" % name)
        elif step == "burn_in" and not burn_in:
            check.update(status="skip", message="burn-in disabled (gpufleet_remediation.burn_in.enabled)")
        elif stopped and not failed:
            failed = True
            check.update(status="fail", message="stopped at %s: %s" % (name, stopped))
        else:
            why = "stopped earlier" if failed else "action %s" % action
            check.update(status="skip", message="not taken (%s)" % why)
        checks.append(check)
    return checks


SLURM_REASON = "gpufleet remediation:"  # the drain reason of playbooks/remediate.yml (the agent's is "gpufleet:")
_SLURM_BUSY = ("ALLOCATED", "MIXED", "COMPLETING")
# no new job starts on the node (Slurm's DRAIN, FAIL: "unavailable for use", DOWN)
_SLURM_CLOSED = ("DRAIN", "FAIL")


def _excerpt(show_output, limit=200):
    """The start of an answer for a message (an answer that is not text: its type's name)."""
    if isinstance(show_output, str) or show_output is None:
        return (show_output or "")[:limit]
    return "<not text but %s>" % type(show_output).__name__


def slurm_state(show_output, node, json_form=False):
    """The remediation's view of ``scontrol show node <node> --json`` (``json_form``: Slurm 23.02 and
    later, slurm.show_node_argv decides as for the agent) or ``... -o``: {form (``--json`` or ``-o``,
    named in every message), state, reason, draining (DRAIN
    set), ours (drained with SLURM_REASON and held by nobody else: we may resume it), admin (in
    someone else's hands, slurm.node_hold: DOWN, FAIL, MAINTENANCE, REBOOT_*, POWER*, a
    reason that is not ours, a state not understood; never drained with our reason nor resumed by
    us), held (what makes it someone else's), closed (DRAIN, FAIL or DOWN: Slurm starts no new
    job), drained (closed, and no job left:
    ALLOCATED, MIXED, COMPLETING), busy}. ``reason`` is the raw Reason= text (ours only with
    ``gpufleet remediation: `` at its very start; the JSON ``reason`` is the reason alone). PolicyError
    when the answer is not this node's or cannot be read without guessing (slurm.read_show_node: the
    strict JSON reader, or the text's key twice, Reason= inside free text) (fail closed: no state is
    never drained)."""
    form = "--json" if json_form else "-o"
    try:
        fields = read_show_node(show_output, node, json_form)
    except ShowNodeError as exc:
        raise PolicyError("scontrol show node %s %s: the answer is unreadable (%s): %r"
                          % (node, form, exc, _excerpt(show_output)))
    if fields.get("NodeName") != node or "State" not in fields:
        raise PolicyError("scontrol show node %s %s: no NodeName=%s and State in the answer %r"
                          % (node, form, node, _excerpt(show_output)))
    state = fields["State"]  # as Slurm prints it (upper case): another case is not understood
    base, flags, _unknown = parse_state(state)
    reason = fields.get("Reason", "")  # raw: SLURM_REASON and its space at position 0, never normalised
    hold, held = node_hold(state, reason, SLURM_REASON + " ")
    draining = "DRAIN" in flags
    busy = sorted((flags | {base}) & set(_SLURM_BUSY))
    closed = bool(flags & set(_SLURM_CLOSED)) or base == "DOWN"  # DOWN runs no job (Slurm requeues or kills them)
    return {"form": form, "state": state, "reason": reason, "draining": draining, "ours": hold == "ours",
            "admin": hold == "other", "held": held, "busy": busy, "closed": closed, "drained": closed and not busy}
