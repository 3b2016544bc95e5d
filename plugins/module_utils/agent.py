# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health agent: node_validate's checks on a timer, with hysteresis (docs/contracts.md,
"Node health agent").

One check engine: a cycle is ``validation.node_payload`` over ``families.FAMILIES``, exactly what
the module ``node_validate`` runs, with the options the role ``node_health_agent`` took from the
lookup ``gpufleet.cluster.node_validate_options``. Nothing here imports Ansible: the role copies
this file and the module_utils it needs to ``/opt/gpufleet/agent``, and systemd runs
``gpufleet-health-agent`` every ``node_health_agent_interval`` seconds: resident (``--loop``,
``Type=notify`` service: imports once, one cycle per interval, ``Loop``) or from a timer
(``Type=oneshot``, a process per cycle). A cycle is the same in both (``run_once``).

Each cycle writes atomically (temporary file in the same directory, fsync, rename):
``<state_dir>/health.json`` (the result), ``<state_dir>/agent-state.json`` (hysteresis counters)
and ``<textfile_dir>/gpufleet.prom`` (node_exporter textfile collector), and prints one line per
state change on stdout (the journal under systemd). Bad settings, a missing textfile directory
or an unreachable API server are reported in the journal; the last good result is kept and the
program returns 0 so that the timer keeps running.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.checks import FAIL, failing_statuses, json_safe


def say(line):
    """One journal line: the agent runs under systemd, whose journal takes its standard output."""
    sys.stdout.write("%s\n" % line)
    sys.stdout.flush()


AGENT_NAME = "gpufleet-health-agent"
CONDITION_TYPE = "GpufleetHealthy"
DEFAULT_CONFIG = "/etc/gpufleet/agent.json"
DEFAULT_STATE_DIR = "/var/lib/gpufleet"
DEFAULT_FAIL_AFTER = 3
DEFAULT_RECOVER_AFTER = 2
DEFAULT_INTERVAL = 60  # seconds between two cycles (role node_health_agent writes its interval)
SLURM_REASON_PREFIX = "gpufleet:"

# Checks whose failure cannot clear by itself: the node turns unhealthy on the first failing
# cycle (docs/contracts.md, "Node health agent"). A GPU fallen off the bus (gpu.count, gpu.xid
# with XID 79), a lost GPU or one needing a reset (gpu.lost, gpu.recovery_action), uncorrectable
# memory errors and their consequences (gpu.ecc.volatile_uncorrectable, gpu.row_remap,
# gpu.retired_pages) and fatal XIDs (gpu.xid).
IMMEDIATE_CHECKS = (
    "gpu.count", "gpu.lost", "gpu.recovery_action", "gpu.xid", "gpu.ecc.volatile_uncorrectable",
    "gpu.row_remap", "gpu.retired_pages",
)


class AgentError(Exception):
    """A problem the agent reports in the journal (bad settings, unwritable file, API error)."""


def known_check_ids():
    """Every check id node_validate can return (gpu family, then rdma family)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils import gpu_checks, rdma_checks, tuning_checks

    ids = list(gpu_checks.CHECK_IDS)
    for table in (rdma_checks.NODE_CHECKS_FIRST, rdma_checks.DEVICE_CHECKS, rdma_checks.PORT_CHECKS,
                  rdma_checks.NODE_CHECKS_LAST):
        ids.extend(name for name, _rule in table)
    ids.extend(tuning_checks.CHECK_IDS)
    return ids


# -- settings ----------------------------------------------------------------------------------------
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


# -- hysteresis -------------------------------------------------------------------------------------
def _key(check):
    return "%s|%s" % (check["id"], check["target"])


def step(state, checks, settings, fail_on="fail", now=None):
    """One cycle of hysteresis: (new state, events).

    ``state``: ``{"checks": {"id|target": {failing, fails, passes, flaps, raw, since, message}},
    "healthy": bool, "cycle": int}`` (empty for the first cycle). A check counts as failing in a
    cycle when its status is ``fail`` (``fail_on: warn``: also ``warn``). It turns failing after
    ``fail_after`` consecutive failing cycles (1 for the immediate checks) and back after
    ``recover_after`` consecutive other cycles. A flap is a change of the raw outcome between two
    cycles. The node is healthy when no check is failing. Events are journal lines."""
    now = time.time() if now is None else now
    bad = failing_statuses(fail_on)
    old = (state or {}).get("checks") or {}
    new, events = {}, []
    for check in checks:
        key = _key(check)
        raw = check["status"] in bad
        entry = dict(old.get(key) or {"failing": False, "fails": 0, "passes": 0, "flaps": 0, "raw": raw,
                                      "since": now})
        if key in old and entry.get("raw") != raw:
            entry["flaps"] = entry.get("flaps", 0) + 1
        entry["raw"] = raw
        entry["fails"] = entry.get("fails", 0) + 1 if raw else 0
        entry["passes"] = 0 if raw else entry.get("passes", 0) + 1
        entry["message"] = check.get("message", "")
        entry["status"] = check["status"]
        fail_after, recover_after = thresholds(settings, check["id"])
        if not entry["failing"] and raw and entry["fails"] >= fail_after:
            entry["failing"], entry["since"] = True, now
            events.append("check %s[%s] unhealthy after %d failing cycle(s): %s"
                          % (check["id"], check["target"], entry["fails"], entry["message"]))
        elif entry["failing"] and not raw and entry["passes"] >= recover_after:
            entry["failing"], entry["since"] = False, now
            events.append("check %s[%s] healthy again after %d passing cycle(s): %s"
                          % (check["id"], check["target"], entry["passes"], entry["message"]))
        new[key] = entry
    for key, entry in old.items():
        if key not in new and entry.get("failing"):
            check_id, target = key.split("|", 1)
            events.append("check %s[%s] no longer reported (was failing): dropped" % (check_id, target))
    failing = failing_checks({"checks": new}, checks)
    healthy = not failing
    was = (state or {}).get("healthy")
    if was is None or was != healthy:
        if healthy:
            events.append("node healthy" + ("" if was is None else " again"))
        else:
            first = failing[0]
            events.append("node unhealthy: %s[%s]: %s%s" % (
                first["id"], first["target"], first["message"],
                " (+%d more)" % (len(failing) - 1) if len(failing) > 1 else ""))
    return {"checks": new, "healthy": healthy, "cycle": (state or {}).get("cycle", 0) + 1,
            "updated": now}, events


def failing_checks(state, checks):
    """The checks (in report order) that are failing after hysteresis, status forced to fail."""
    entries = state.get("checks") or {}
    out = []
    for check in checks:
        entry = entries.get(_key(check))
        if entry and entry.get("failing"):
            out.append({"id": check["id"], "target": check["target"], "status": FAIL,
                        "message": entry.get("message", check.get("message", ""))})
    return out


# -- files ------------------------------------------------------------------------------------------
def atomic_write(path, text, mode=0o644):
    """Write ``text`` to ``path`` so that a reader sees the old or the new content, never a part:
    a temporary file in the same directory, fsync, rename. The directory must exist."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise AgentError("directory %s does not exist: %s not written" % (directory, path))
    # no tempfile module: its import costs more CPU than the rest of the write (one cycle <= 50 ms)
    tmp = os.path.join(directory, ".%s.%d.%s" % (os.path.basename(path), os.getpid(), os.urandom(4).hex()))
    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path, default=None):
    """The JSON document at ``path``; ``default`` when missing; AgentError when unreadable."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise AgentError("%s is unreadable: %s" % (path, exc))


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


STATUS_VALUES = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


def prometheus_text(result, state, started, duration):
    """The textfile: per check and target its status (0 pass/skip, 1 warn, 2 fail) and flaps, the
    node's health after hysteresis, the last run's timestamp and duration."""
    lines = [
        "# HELP gpufleet_check_status Status of a gpufleet check in the last cycle (0 pass or skip, 1 warn, 2 fail).",
        "# TYPE gpufleet_check_status gauge",
    ]
    entries = state.get("checks") or {}
    for check in result["checks"]:
        lines.append('gpufleet_check_status{id="%s",target="%s",status="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), _label(check["status"]), STATUS_VALUES[check["status"]]))
    lines += ["# HELP gpufleet_check_failing 1 when the check is failing after hysteresis.",
              "# TYPE gpufleet_check_failing gauge"]
    for check in result["checks"]:
        entry = entries.get(_key(check)) or {}
        lines.append('gpufleet_check_failing{id="%s",target="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), 1 if entry.get("failing") else 0))
    lines += ["# HELP gpufleet_check_flaps_total Changes of a check's outcome between two cycles.",
              "# TYPE gpufleet_check_flaps_total counter"]
    for check in result["checks"]:
        entry = entries.get(_key(check)) or {}
        lines.append('gpufleet_check_flaps_total{id="%s",target="%s"} %d' % (
            _label(check["id"]), _label(check["target"]), entry.get("flaps", 0)))
    lines += [
        "# HELP gpufleet_node_healthy 1 when no check is failing after hysteresis.",
        "# TYPE gpufleet_node_healthy gauge",
        "gpufleet_node_healthy %d" % (1 if state.get("healthy") else 0),
        "# HELP gpufleet_agent_last_run_timestamp_seconds End of the agent's last cycle (Unix time).",
        "# TYPE gpufleet_agent_last_run_timestamp_seconds gauge",
        "gpufleet_agent_last_run_timestamp_seconds %.3f" % (started + duration),
        "# HELP gpufleet_agent_run_duration_seconds Wall time of the agent's last cycle.",
        "# TYPE gpufleet_agent_run_duration_seconds gauge",
        "gpufleet_agent_run_duration_seconds %.6f" % duration,
    ]
    return "\n".join(lines) + "\n"


# -- one cycle --------------------------------------------------------------------------------------
def node_params(config):
    """node_validate's parameters from the agent configuration: ``root``, ``fail_on`` and one dict
    per family (``gpu``, ``rdma``, ``tuning``)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.families import FAMILIES

    options = config.get("node_validate") or {}
    if not isinstance(options, dict):
        raise AgentError("node_validate must be a dict of node_validate options, got %s" % type(options).__name__)
    params = {"root": options.get("root") or "/", "fail_on": options.get("fail_on") or "fail"}
    for family in (f.name for f in FAMILIES):
        value = options.get(family)
        if value is not None and not isinstance(value, dict):
            raise AgentError("node_validate.%s must be a dict of that family's options, got %s"
                             % (family, type(value).__name__))
        params[family] = dict(value or {})
    return params


def run_checks(params, runner=None, nvml=None, now=None, reader=None):
    """node_validate's payload for ``params`` (the one check engine); AgentError on option errors."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import node_payload

    if runner is None:
        from ansible_collections.gpufleet.cluster.plugins.module_utils.runner import SubprocessRunner

        runner = SubprocessRunner()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import Context

    ctx = Context(params["root"], runner=runner, reader=reader, nvml=nvml, now=now)
    try:
        payload, errors = node_payload(FAMILIES, params, time.perf_counter(), ctx=ctx)
    finally:
        ctx.close()  # NVML shut down after each cycle: the resident agent initialises it again next cycle
    if errors:
        raise AgentError("node_validate options: " + "; ".join(errors))
    return payload


class Agent(object):
    """One agent cycle (``cycle``) with its configuration; ``log`` prints a journal line."""

    def __init__(self, config, log=None, runner=None, nvml=None, kube=None, slurm=None, clock=time.time):
        self.config = config
        self.log = log or say
        self.runner = runner
        self.nvml = nvml
        self.kube = kube
        self.slurm = slurm
        self.clock = clock
        self.state_dir = config.get("state_dir") or DEFAULT_STATE_DIR
        self.textfile_dir = config.get("textfile_dir")
        self.node = config.get("node_name") or os.uname()[1]
        self.status = "no cycle yet"  # one line for systemd's STATUS= (resident mode)

    @property
    def health_path(self):
        return os.path.join(self.state_dir, "health.json")

    @property
    def state_path(self):
        return os.path.join(self.state_dir, "agent-state.json")

    def cycle(self):
        """Run one cycle; returns 0 (also after a reported problem: the last good result is kept)."""
        started = self.clock()
        cpu = time.process_time()
        try:
            settings, errors = hysteresis_settings(self.config)
            if errors:
                raise AgentError("bad hysteresis settings, last good result kept: " + "; ".join(errors))
            params = node_params(self.config)
            fail_on = "warn" if params["fail_on"] == "warn" else "fail"
            state = read_json(self.state_path, {}) or {}
            payload = run_checks(params, runner=self.runner, nvml=self.nvml, now=started)
            checks = payload["checks"]
            state, events = step(state, checks, settings, fail_on=fail_on, now=started)
        except AgentError as exc:
            self.log("%s: %s" % (AGENT_NAME, exc))
            self.status = "last cycle failed (journal), last good result kept"
            return 0
        except Exception as exc:  # never crash the timer loop; the traceback goes to the journal
            import traceback

            self.log("%s: cycle failed, last good result kept: %r\n%s" % (AGENT_NAME, exc, traceback.format_exc()))
            self.status = "last cycle failed (journal), last good result kept"
            return 0
        for event in events:
            self.log("%s: %s" % (AGENT_NAME, event))
        failing = failing_checks(state, checks)
        duration = self.clock() - started
        result = dict(json_safe(payload))
        result.update({
            "node": self.node, "generated_at": started, "cycle": state["cycle"],
            "agent": {"healthy": state["healthy"], "failing": failing,
                      "cpu_ms": round((time.process_time() - cpu) * 1000.0, 1)},
        })
        state["failing"] = failing
        try:
            atomic_write(self.state_path, json.dumps(state, sort_keys=True))
            atomic_write(self.health_path, json.dumps(result, sort_keys=True, allow_nan=False))
        except (AgentError, OSError) as exc:
            self.log("%s: state not written, last good result kept: %s" % (AGENT_NAME, exc))
            self.status = "last cycle's state not written (journal), last good result kept"
            return 0
        self.status = "cycle %d: %s, %.1f ms CPU" % (
            state["cycle"], "healthy" if state["healthy"] else "unhealthy: " + summary_message(failing, 200),
            result["agent"]["cpu_ms"])
        if self.textfile_dir:
            try:
                atomic_write(os.path.join(self.textfile_dir, "gpufleet.prom"),
                             prometheus_text(result, state, started, duration))
            except (AgentError, OSError) as exc:
                self.log("%s: metrics not written (node_exporter textfile collector): %s" % (AGENT_NAME, exc))
        for name, publisher in (("kubernetes", self.kube), ("slurm", self.slurm)):
            if publisher is None:
                continue
            try:
                for line in publisher.publish(state["healthy"], failing) or []:
                    self.log("%s: %s: %s" % (AGENT_NAME, name, line))
            except Exception as exc:  # an unreachable API server or slurmctld is reported, never fatal
                self.log("%s: %s: not updated: %s" % (AGENT_NAME, name, exc))
        return 0


def summary_message(failing, limit=1024):
    """``id[target]: message (+N more)`` for the first failing check, cut to ``limit`` characters."""
    if not failing:
        return "all gpufleet checks pass"
    first = failing[0]
    text = "%s[%s]: %s" % (first["id"], first["target"], first["message"])
    if len(failing) > 1:
        text += " (+%d more)" % (len(failing) - 1)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_config(path):
    config = read_json(path)
    if config is None:
        raise AgentError("configuration %s does not exist (installed by role node_health_agent)" % path)
    if not isinstance(config, dict):
        raise AgentError("configuration %s must be a JSON object" % path)
    return config


def add_python_path(config):
    """Put the configuration's ``python_path`` directories (the NVML binding's, found by the role)
    on sys.path: the service runs ``python3 -S``, which reads no .pth file."""
    for directory in config.get("python_path") or []:
        if isinstance(directory, str) and directory not in sys.path:
            sys.path.append(directory)


def build_agent(config):
    """The Agent with the publishers its configuration turns on."""
    add_python_path(config)
    kube = slurm = None
    if (config.get("kubernetes") or {}).get("enabled"):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_kube import KubePublisher

        kube = KubePublisher.from_config(config)
    if (config.get("slurm") or {}).get("enabled"):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_slurm import SlurmPublisher

        slurm = SlurmPublisher.from_config(config)
    return Agent(config, kube=kube, slurm=slurm)


def config_errors(config):
    """Every problem of a configuration, without running a check (``--check-config``)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.validation import node_plan

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
    python_path = config.get("python_path") or []
    if not isinstance(python_path, list) or not all(isinstance(item, str) for item in python_path):
        errors.append("python_path must be a list of directories, got %r" % (python_path,))
    interval = config.get("interval", DEFAULT_INTERVAL)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        errors.append("interval must be a number of seconds > 0, got %r" % (interval,))
    return errors


def slurm_health_check(config, log=None):
    """Slurm HealthCheckProgram mode: drain or resume the node from the last result (health.json)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_slurm import SlurmPublisher

    log = log or say
    path = os.path.join(config.get("state_dir") or DEFAULT_STATE_DIR, "health.json")
    result = read_json(path)
    if not result or not isinstance(result.get("agent"), dict):
        log("%s: slurm: no agent result in %s yet: node left as it is" % (AGENT_NAME, path))
        return 0
    publisher = SlurmPublisher.from_config(config)
    for line in publisher.publish(result["agent"].get("healthy"), result["agent"].get("failing") or [], always=True):
        log("%s: slurm: %s" % (AGENT_NAME, line))
    return 0


NPD_OK, NPD_NONOK, NPD_UNKNOWN = 0, 1, 2


def npd_status(result, now, max_age=300, max_length=80):
    """(exit code, message) for a node-problem-detector custom plugin: 0 healthy, 1 unhealthy
    (message: the first failing check), 2 unknown (no result, or older than ``max_age`` s). The
    message is cut to ``max_length`` characters (NPD's ``max_output_length``, default 80)."""
    agent = (result or {}).get("agent")
    if not isinstance(agent, dict):
        code, message = NPD_UNKNOWN, "gpufleet: no agent result yet"
    elif now - float(result.get("generated_at") or 0) > max_age:
        code, message = NPD_UNKNOWN, "gpufleet: agent result %d s old" % (now - float(result.get("generated_at") or 0))
    elif agent.get("healthy"):
        code, message = NPD_OK, "gpufleet: all checks pass"
    else:
        code, message = NPD_NONOK, "gpufleet: " + summary_message(agent.get("failing") or [])
    return code, message[:max_length]


def run_once(path):
    """One cycle, the same in both modes: the configuration read, the publishers built (a rotated
    client certificate or token is picked up), ``Agent.cycle``. Returns the cycle's status line;
    never raises (each problem is a journal line and the last good result is kept)."""
    try:
        config = load_config(path)
        agent = build_agent(config)
    except AgentError as exc:
        say("%s: %s; last good result kept" % (AGENT_NAME, exc))
        return "no cycle: %s" % exc
    except Exception as exc:  # never crash the timer loop
        say("%s: cannot start, last good result kept: %r" % (AGENT_NAME, exc))
        return "no cycle: %r" % (exc,)
    agent.cycle()
    return agent.status


# -- resident mode -----------------------------------------------------------------------------------

def sd_notify(message, environ=None):
    """Send ``message`` (``READY=1``, ``WATCHDOG=1``, ``STATUS=...``, newline-separated) to systemd
    over ``$NOTIFY_SOCKET`` (the sd_notify(3) datagram, with the stdlib socket module: no libsystemd
    binding needed). False when not run by a ``Type=notify`` service or when the send fails."""
    address = (os.environ if environ is None else environ).get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    import socket

    if address[0] == "@":  # abstract namespace
        address = "\0" + address[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.connect(address)
        sock.sendall(message.encode("utf-8"))
        return True
    except OSError:
        return False
    finally:
        sock.close()


class StopSignals(object):
    """SIGTERM and SIGINT end the resident agent between two cycles: the handler only records the
    signal (a cycle in progress finishes and writes its result), ``wait`` sleeps until a deadline or
    the signal (``signal.set_wakeup_fd`` wakes its ``select``: no race with a signal that arrives
    just before the sleep). ``close`` restores the previous handlers."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self, clock=time.monotonic):
        import select
        import signal

        self._select = select.select
        self._signal = signal
        self.clock = clock
        self.received = []
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write)
        self._old = dict((name, signal.signal(getattr(signal, name), self._handler)) for name in self.SIGNALS)

    def _handler(self, signum, frame):
        self.received.append(signum)

    def wait(self, timeout):
        """Sleep ``timeout`` seconds; True at once when a stop signal came (before or during)."""
        end = self.clock() + timeout
        while not self.received:
            left = end - self.clock()
            if left <= 0:
                return False
            if self._select([self._read], [], [], left)[0]:
                os.read(self._read, 512)
        return True

    def close(self):
        for name, handler in self._old.items():
            self._signal.signal(getattr(self._signal, name), handler)
        self._signal.set_wakeup_fd(self._old_fd)
        os.close(self._read)
        os.close(self._write)


class Loop(object):
    """The resident agent: ``run_cycle()`` (returns a status line) every ``interval`` seconds on a
    monotonic schedule: cycle k starts at start + k * interval whatever the cycles take (no drift),
    never two at once (one thread; a cycle longer than the interval makes the next start at the
    next slot of the schedule, the slots missed are journalled, none is run late in a burst).
    An exception of a cycle is journalled and the loop goes on (the last good result stays on
    disk). systemd (Type=notify) hears READY=1 after the first cycle (health.json is written
    when ``systemctl start`` returns), WATCHDOG=1 and the status after every cycle, STOPPING=1 at
    the end. ``wait(seconds)`` sleeps and returns True to stop (StopSignals.wait)."""

    def __init__(self, run_cycle, interval, wait, clock=time.monotonic, notify=sd_notify, log=None):
        self.run_cycle = run_cycle
        self.interval = float(interval)
        self.wait = wait
        self.clock = clock
        self.notify = notify
        self.log = log or say
        self.cycles = 0
        self.skipped = 0

    def run(self, max_cycles=None):
        """Cycles until ``wait`` says stop (or ``max_cycles``); returns the number of cycles run."""
        slot = self.clock()
        while max_cycles is None or self.cycles < max_cycles:
            try:
                status = self.run_cycle()
            except Exception as exc:  # run_once reports its own problems; anything else lands here
                import traceback

                self.log("%s: cycle failed, last good result kept: %r\n%s" % (AGENT_NAME, exc, traceback.format_exc()))
                status = "last cycle failed (journal), last good result kept"
            self.cycles += 1
            status = " ".join(str(status).split())  # one line: systemd reads KEY=VALUE lines
            self.notify("%sWATCHDOG=1\nSTATUS=%s" % ("READY=1\n" if self.cycles == 1 else "", status))
            if max_cycles is not None and self.cycles >= max_cycles:
                break
            slot += self.interval
            now = self.clock()
            if now >= slot:
                missed = int((now - slot) // self.interval) + 1
                slot += missed * self.interval
                self.skipped += missed
                self.log("%s: a cycle took longer than the interval (%g s): %d cycle(s) skipped"
                         % (AGENT_NAME, self.interval, missed))
            if self.wait(slot - now):
                break
        self.notify("STOPPING=1")
        return self.cycles


def loop_interval(path, override=None):
    """Seconds between two cycles: ``--interval``, else the configuration's ``interval`` (the
    role writes node_health_agent_interval), else 60. An unreadable configuration gives 60 here:
    each cycle reports it."""
    value = override
    if value is None:
        try:
            value = load_config(path).get("interval", DEFAULT_INTERVAL)
        except AgentError:
            value = DEFAULT_INTERVAL
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = 0
    if not value > 0:
        say("%s: interval must be a number of seconds > 0, got %r: %g s" % (AGENT_NAME, value, DEFAULT_INTERVAL))
        value = DEFAULT_INTERVAL
    return value


def resident(path, interval=None, max_cycles=None):
    """``--loop``: the resident agent until SIGTERM (systemd's stop) or SIGINT; returns 0."""
    signals = StopSignals()
    try:
        loop = Loop(lambda: run_once(path), loop_interval(path, interval), signals.wait)
        say("%s: resident, a cycle every %g s (%s)" % (AGENT_NAME, loop.interval, path))
        loop.run(max_cycles)
    finally:
        signals.close()
    say("%s: stopped after %d cycle(s)" % (AGENT_NAME, loop.cycles))
    return 0


def _option_value(argv, name):
    """Remove ``name VALUE`` from argv and return VALUE (None when absent)."""
    if name not in argv:
        return None
    index = argv.index(name)
    if index + 1 >= len(argv):
        raise AgentError("%s needs a value" % name)
    value = argv[index + 1]
    del argv[index:index + 2]
    return value


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--npd" in argv:
        argv.remove("--npd")
        try:
            config = load_config(argv[0] if argv else DEFAULT_CONFIG)
            result = read_json(os.path.join(config.get("state_dir") or DEFAULT_STATE_DIR, "health.json"))
            code, message = npd_status(result, time.time(), max_age=(config.get("npd") or {}).get("max_age", 300))
        except AgentError as exc:
            code, message = NPD_UNKNOWN, ("gpufleet: %s" % exc)[:80]
        say(message)
        return code
    if "--slurm-health-check" in argv:
        argv.remove("--slurm-health-check")
        try:
            return slurm_health_check(load_config(argv[0] if argv else DEFAULT_CONFIG))
        except AgentError as exc:
            say("%s: slurm: %s" % (AGENT_NAME, exc))
            return 0
    check_only = "--check-config" in argv
    if check_only:
        argv.remove("--check-config")
    loop = "--loop" in argv
    if loop:
        argv.remove("--loop")
        try:
            interval = _option_value(argv, "--interval")
            cycles = _option_value(argv, "--cycles")
            cycles = None if cycles is None else int(cycles)
        except (AgentError, ValueError) as exc:
            say("%s: --loop [--interval SECONDS] [--cycles N] [CONFIG]: %s" % (AGENT_NAME, exc))
            return 2
    path = argv[0] if argv else os.environ.get("GPUFLEET_AGENT_CONFIG", DEFAULT_CONFIG)
    if loop:
        return resident(path, interval, cycles)
    if check_only:
        try:
            errors = config_errors(load_config(path))
        except AgentError as exc:
            errors = [str(exc)]
        for error in errors:
            say("%s: %s: %s" % (AGENT_NAME, path, error))
        return 1 if errors else 0
    run_once(path)
    return 0
