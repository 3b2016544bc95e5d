# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health agent's configuration (docs/contracts.md, "Node health agent"): constants, the
agent's error type, the configuration file and every check of it (``--check-config``).

Lowest layer of the agent (agent_config -> agent_hysteresis, agent_state -> publishers ->
agent_cycle -> agent_daemon -> agent, the CLI); imports no other agent module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.state_files import open_regular

AGENT_NAME = "gpufleet-health-agent"
DEFAULT_CONFIG = "/etc/gpufleet/agent.json"
DEFAULT_STATE_DIR = "/var/lib/gpufleet"
DEFAULT_FAIL_AFTER = 3
DEFAULT_RECOVER_AFTER = 2
DEFAULT_INTERVAL = 60  # seconds between two cycles (role node_health_agent writes its interval)
DEFAULT_PUBLISH_TIMEOUT = 20  # seconds each publisher may take per cycle (all run at once)
SLURM_REASON_PREFIX = "gpufleet:"
DEFAULT_EVENTS = {"kmsg": "/dev/kmsg", "nvml": True, "min_gap": 1}  # the resident agent's wake-up sources
# The resident agent's fast signals (agent_signals): rtnetlink link announcements, kernel uevents,
# the fast probe's period (0: off) and the fabric manager's systemd unit (empty: not watched).
DEFAULT_SIGNALS = {"netlink": True, "uevent": True, "fast_probe_interval": 1,
                   "fabricmanager_unit": "nvidia-fabricmanager.service"}
FM_CHECK = "agent.fabricmanager"  # the agent's own check: the fabric manager unit runs (agent_signals)

# Checks whose failure cannot clear by itself: the node turns unhealthy on the first failing
# cycle (docs/contracts.md, "Node health agent"). A GPU fallen off the bus (gpu.count, gpu.xid
# with XID 79), a lost GPU or one needing a reset (gpu.lost, gpu.recovery_action), uncorrectable
# memory errors and their consequences (gpu.ecc.volatile_uncorrectable, gpu.row_remap,
# gpu.retired_pages) and fatal XIDs (gpu.xid); and a cycle whose checks crashed (host.validation).
IMMEDIATE_CHECKS = (
    "gpu.count", "gpu.lost", "gpu.recovery_action", "gpu.xid", "gpu.ecc.volatile_uncorrectable",
    "gpu.row_remap", "gpu.retired_pages", "host.validation",
)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def journal_line(line):
    """``line`` as one journal line: control characters (C0, DEL, C1) and the Unicode line and
    paragraph separators escaped (``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``), so that text
    from outside (a Slurm Reason, an API message, a traceback) never starts a line of its own."""
    out = []
    for char in "%s" % (line,):
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or 0x7f <= code < 0xa0:
            out.append("\\x%02x" % code)
        elif char in "\u2028\u2029\u0085":
            out.append("\\u%04x" % code)
        else:
            out.append(char)
    return "".join(out)


def say(line):
    """One journal line: the agent runs under systemd, whose journal takes its standard output
    (``journal_line``: control characters escaped)."""
    sys.stdout.write("%s\n" % journal_line(line))
    sys.stdout.flush()


class AgentError(Exception):
    """A problem the agent reports in the journal (bad settings, unwritable file, API error)."""


def known_check_ids():
    """Every check id node_validate can return (gpu, rdma, tuning families), host.validation
    (a cycle whose checks crashed) and agent.fabricmanager (the agent's own)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import gpu_checks
    from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import rdma_checks
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning import tuning_checks

    ids = list(gpu_checks.CHECK_IDS)
    for table in (rdma_checks.NODE_CHECKS_FIRST, rdma_checks.DEVICE_CHECKS, rdma_checks.PORT_CHECKS,
                  rdma_checks.NODE_CHECKS_LAST):
        ids.extend(name for name, _rule in table)
    ids.extend(tuning_checks.CHECK_IDS)
    ids.extend(("host.validation", FM_CHECK))
    return ids


def _positive_int(value, name, errors):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors.append("%s must be an integer >= 1, got %r" % (name, value))
        return False
    return True


def hysteresis_settings(config):
    """({fail_after, recover_after, immediate: set, per_check: {id: {fail_after, recover_after}}},
    [errors]) from the agent configuration; each error names the setting."""
    errors = []
    raw = config.get("hysteresis") or {}
    if not isinstance(raw, dict):
        return None, ["hysteresis must be a dict, got %s" % type(raw).__name__]
    known = set(known_check_ids())
    settings = {"fail_after": raw.get("fail_after", DEFAULT_FAIL_AFTER),
                "recover_after": raw.get("recover_after", DEFAULT_RECOVER_AFTER),
                "immediate": raw.get("immediate", list(IMMEDIATE_CHECKS)),
                "per_check": raw.get("per_check") or {}}
    _positive_int(settings["fail_after"], "hysteresis.fail_after", errors)
    _positive_int(settings["recover_after"], "hysteresis.recover_after", errors)
    if not isinstance(settings["immediate"], list):
        errors.append("hysteresis.immediate must be a list of check ids, got %r" % (settings["immediate"],))
        settings["immediate"] = []
    for check_id in settings["immediate"]:
        if check_id not in known:
            errors.append("hysteresis.immediate: unknown check id %r (known: %s)" % (check_id, ", ".join(sorted(known))))
    if not isinstance(settings["per_check"], dict):
        errors.append("hysteresis.per_check must be a dict {check id: {fail_after, recover_after}}")
        settings["per_check"] = {}
    for check_id, values in settings["per_check"].items():
        if check_id not in known:
            errors.append("hysteresis.per_check: unknown check id %r (known: %s)" % (check_id, ", ".join(sorted(known))))
            continue
        if not isinstance(values, dict) or set(values) - {"fail_after", "recover_after"}:
            errors.append("hysteresis.per_check.%s must be a dict with fail_after and/or recover_after, got %r"
                          % (check_id, values))
            continue
        for key in values:
            _positive_int(values[key], "hysteresis.per_check.%s.%s" % (check_id, key), errors)
    settings["immediate"] = set(settings["immediate"])
    return (None if errors else settings), errors


def thresholds(settings, check_id):
    """(fail_after, recover_after) for ``check_id``."""
    own = settings["per_check"].get(check_id) or {}
    fail_after = 1 if check_id in settings["immediate"] else settings["fail_after"]
    return own.get("fail_after", fail_after), own.get("recover_after", settings["recover_after"])


def node_params(config):
    """node_validate's parameters from the agent configuration: ``root``, ``fail_on`` and one dict
    per family (``gpu``, ``rdma``, ``tuning``). ``root`` and ``fail_on`` are passed as written:
    the framework (validation.node_plan) defaults and checks them, once."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES

    options = config.get("node_validate") or {}
    if not isinstance(options, dict):
        raise AgentError("node_validate must be a dict of node_validate options, got %s" % type(options).__name__)
    params = {"root": options.get("root", "/"), "fail_on": options.get("fail_on", "fail")}
    for family in (f.name for f in FAMILIES):
        value = options.get(family)
        if value is not None and not isinstance(value, dict):
            raise AgentError("node_validate.%s must be a dict of that family's options, got %s"
                             % (family, type(value).__name__))
        params[family] = dict(value or {})
    return params


def publish_timeout(config):
    """Seconds each publisher may take per cycle (``publish_timeout``, default 20)."""
    value = config.get("publish_timeout", DEFAULT_PUBLISH_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        return DEFAULT_PUBLISH_TIMEOUT
    return float(value)


def events_settings(config):
    """({kmsg: path or None, nvml: bool, min_gap: seconds}, [errors]) of the resident agent's
    event sources (``events``; missing keys take DEFAULT_EVENTS); each error names the setting."""
    raw = config.get("events")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return None, ["events must be a dict {kmsg, nvml, min_gap}, got %s" % type(raw).__name__]
    errors = ["events: unknown setting %r (known: kmsg, nvml, min_gap)" % key
              for key in sorted(set(raw) - set(DEFAULT_EVENTS))]
    settings = dict(DEFAULT_EVENTS, **dict((k, v) for k, v in raw.items() if k in DEFAULT_EVENTS))
    kmsg = settings["kmsg"]
    if kmsg is not None and not (isinstance(kmsg, str) and kmsg.startswith("/")):
        errors.append("events.kmsg must be an absolute path (/dev/kmsg) or null (off), got %r" % (kmsg,))
    if not isinstance(settings["nvml"], bool):
        errors.append("events.nvml must be true or false, got %r" % (settings["nvml"],))
    gap = settings["min_gap"]
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap <= 3600:
        errors.append("events.min_gap must be a number of seconds in [0, 3600], got %r" % (gap,))
    else:
        settings["min_gap"] = float(gap)
    return (None if errors else settings), errors


def signals_settings(config):
    """({netlink: bool, uevent: bool, fast_probe_interval: seconds (0: off), fabricmanager_unit:
    unit name or None}, [errors]) of the resident agent's fast signals (``signals``; missing keys
    take DEFAULT_SIGNALS); each error names the setting."""
    raw = config.get("signals")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return None, ["signals must be a dict {%s}, got %s" % (", ".join(sorted(DEFAULT_SIGNALS)), type(raw).__name__)]
    errors = ["signals: unknown setting %r (known: %s)" % (key, ", ".join(sorted(DEFAULT_SIGNALS)))
              for key in sorted(set(raw) - set(DEFAULT_SIGNALS))]
    settings = dict(DEFAULT_SIGNALS, **dict((k, v) for k, v in raw.items() if k in DEFAULT_SIGNALS))
    for name in ("netlink", "uevent"):
        if not isinstance(settings[name], bool):
            errors.append("signals.%s must be true or false, got %r" % (name, settings[name]))
    every = settings["fast_probe_interval"]
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not (every == 0 or 0.1 <= every <= 3600):
        errors.append("signals.fast_probe_interval must be 0 (off) or seconds in [0.1, 3600], got %r" % (every,))
    else:
        settings["fast_probe_interval"] = float(every)
    unit = settings["fabricmanager_unit"]
    if unit in (None, ""):
        settings["fabricmanager_unit"] = None
    elif not (isinstance(unit, str) and len(unit) <= 256 and unit.endswith(".service")
              and "/" not in unit and unit not in (".service",) and not unit.startswith(".")):
        errors.append("signals.fabricmanager_unit must be a systemd service name (nvidia-fabricmanager.service) "
                      "or empty (not watched), got %r" % (unit,))
    return (None if errors else settings), errors


def load_config(path):
    """The configuration (written by role node_health_agent), decoded strictly (records.load_json:
    bounded size and depth, no NaN/Infinity, no duplicate keys); its settings are checked where
    they are used (config_errors, ``--check-config``). AgentError naming the file otherwise: the
    cycle does not run, and the last result ages until it is no longer current (never healthy
    to NPD, a Slurm resume or agent.health). Not set aside: the role owns it."""
    try:
        # the role may link it; a FIFO or device in its place is refused, not waited on
        with open_regular(path, follow_links=True) as handle:
            raw = handle.read(records.MAX_BYTES + 1)
    except FileNotFoundError:
        raise AgentError("configuration %s does not exist (installed by role node_health_agent)" % path)
    except OSError as exc:
        raise AgentError("configuration %s is unreadable: %s" % (path, exc.strerror or exc))
    try:
        return records.mapping(records.load_json(raw, "configuration %s" % path), "configuration %s" % path)
    except records.RecordError as exc:
        raise AgentError(str(exc))


def add_python_path(config):
    """Put the configuration's ``python_path`` directories (the NVML binding's, found by the role)
    on sys.path: the service runs ``python3 -S``, which reads no .pth file."""
    for directory in config.get("python_path") or []:
        if isinstance(directory, str) and directory not in sys.path:
            sys.path.append(directory)


def _kubernetes_errors(kube):
    """Problems of the kubernetes section, credentials first: a token or client certificate is
    never sent over plain http:// (kube_node.KubeClient refuses it; ``allow_plain_http`` is for a
    local test double only), and redirects are never followed."""
    errors = []
    if not kube.get("enabled"):
        return errors
    server = kube.get("server")
    if not server or not isinstance(server, str):
        return ["kubernetes.server must be the API server's https:// URL"]
    credentials = kube.get("token_file") or kube.get("cert_file")
    if server.startswith("http://") and credentials and not kube.get("allow_plain_http"):
        errors.append("kubernetes.server %s is plain http://: the agent refuses to send its bearer token or client "
                      "certificate unencrypted; use the API server's https:// address (kubernetes.allow_plain_http "
                      "is for a local test double only)" % server)
    elif not server.startswith(("https://", "http://")):
        errors.append("kubernetes.server %r must be an https:// URL" % (server,))
    if kube.get("taint") and kube.get("cert_file") and kube.get("token_file"):
        errors.append("kubernetes.taint is on with both a client certificate and a token: the API server "
                      "authenticates the certificate first (the kubelet's identity, whose taint writes "
                      "NodeRestriction refuses); set cert_file and key_file empty so the node-bound "
                      "ServiceAccount token is used (docs/kubernetes.md)")
    return errors


def _device_taint_errors(kube):
    """Problems of the kubernetes section's per-device health settings (docs/contracts.md,
    "Device taints"): ``gpu_allocation``, ``device_failures_taint_node`` and ``device_taints``,
    whose shape gate.device_settings checks (one place, as for module node_write); the device name
    templates are tried on a sample GPU (and RDMA device, with a driver) by gate.device_taint_rules,
    so a template naming an unknown field fails here, not in the first bad cycle."""
    errors = []
    allocation = kube.get("gpu_allocation")
    if allocation is not None and allocation not in gate.ALLOCATIONS:
        errors.append("kubernetes.gpu_allocation must be %s, got %r" % (" or ".join(gate.ALLOCATIONS), allocation))
    taint_node = kube.get("device_failures_taint_node")
    if taint_node is not None and not isinstance(taint_node, bool):
        errors.append("kubernetes.device_failures_taint_node must be true or false, got %r" % (taint_node,))
    settings = kube.get("device_taints")
    if settings is not None and not isinstance(settings, dict):
        return errors + ["kubernetes.device_taints must be a dict of device taint settings (%s), got %s"
                         % (", ".join(sorted(gate.DEVICE_TAINT_DEFAULTS)), type(settings).__name__)]
    try:
        conf = gate.device_settings(settings)
        sample = {("gpu", "0"): [{"id": "gpu.xid", "target": "gpu0", "status": "fail", "message": "sample"}]}
        if conf["rdma_driver"]:
            sample[("rdma", "mlx5_0")] = [{"id": "rdma.port.state", "target": "mlx5_0/1", "status": "fail",
                                           "message": "sample"}]
        gate.device_taint_rules(kube.get("node_name") or "node", sample, settings=conf)
    except gate.GateError as exc:
        errors.append("kubernetes.device_taints: %s" % exc)
    return errors


def config_errors(config):
    """Every problem of a configuration, without running a check (``--check-config``)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import node_plan

    errors = list(hysteresis_settings(config)[1])
    try:
        params = node_params(config)
    except AgentError as exc:
        return errors + [str(exc)]
    errors.extend("node_validate options: %s" % error for error in node_plan(FAMILIES, params)[1])
    if params["fail_on"] not in ("fail", "warn"):
        errors.append("node_validate.fail_on must be fail or warn, got %r" % (params["fail_on"],))
    for name in ("kubernetes", "slurm"):
        if not isinstance(config.get(name) or {}, dict):
            errors.append("%s must be a dict" % name)
    kube = config.get("kubernetes") or {} if isinstance(config.get("kubernetes"), dict) else {}
    errors.extend(_kubernetes_errors(kube))
    errors.extend(_device_taint_errors(kube))
    python_path = config.get("python_path") or []
    if not isinstance(python_path, list) or not all(isinstance(item, str) for item in python_path):
        errors.append("python_path must be a list of directories, got %r" % (python_path,))
    errors.extend(events_settings(config)[1])
    errors.extend(signals_settings(config)[1])
    interval = config.get("interval", DEFAULT_INTERVAL)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        errors.append("interval must be a number of seconds > 0, got %r" % (interval,))
    timeout = config.get("publish_timeout", DEFAULT_PUBLISH_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        errors.append("publish_timeout must be a number of seconds in (0, 3600], got %r" % (timeout,))
    return errors
