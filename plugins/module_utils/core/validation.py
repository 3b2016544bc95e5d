# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validation framework every validation module runs on (docs/contracts.md, "Result model").

One place for each concept:

- ``COMMON_OPTIONS``: ``root`` and ``fail_on``, declared once, merged into every validation
  module's argument spec (``module_argspec``, ``node_argspec``) and mirrored by the doc fragment
  ``plugins/doc_fragments/validation.py``.
- ``Family``: what a family of checks (gpu, rdma) exposes: its ``options`` (argument spec without
  ``root`` / ``fail_on``), ``validate(options, prefix)`` returning a list of error strings that
  name the option (``option <prefix><name> ...``), and ``run(ctx, options)`` returning a
  ``FamilyResult``.
- ``Context``: built once per run and handed to every family: the root, a ``SysfsReader`` (each
  file read at most once), the command runner, the NVML adapter (created on first use, so a
  family that never needs NVML never imports the binding) and the clock (``now``).
- ``run_single`` / ``run_node`` + ``exit_with_checks``: the one exit path (summary, healthy,
  ``fail_on`` -> fail_json / exit_json, payload made JSON-safe) of every validation module, each
  the ``work`` of ``framework.run_module`` (``single_family_work``, ``node_work``).

One owner per value: ``root`` is normalised once (``framework.given_root``: unset or null is
``/``, ``""`` is refused naming root) when a run is planned (``single_plan``, ``node_plan``), and
the ``Context`` and every family's options carry that value; option defaults are filled once
(``Family.defaults``, the only implementation) by the same planners, so a family's ``run`` gets
complete options. ``run_family`` is for callers holding partial options (tests, benchmarks).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    FAIL,
    FAIL_ON_CHOICES,
    PASS,
    SKIP,
    STATUSES,
    WARN,
    CheckResults,
    exit_with_checks,
    summarize,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import (
    ROOT_OPTION,
    ModuleFailure,
    given_root,
    root_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

# The options of every validation module, declared once (doc fragment: gpufleet.cluster.validation
# for root, gpufleet.cluster.validation.fail_on for fail_on; fail_on's choices: checks.FAIL_ON_CHOICES).
COMMON_OPTIONS = {
    "root": ROOT_OPTION,
    "fail_on": {"type": "str", "default": "fail", "choices": list(FAIL_ON_CHOICES)},
}

# The sub-option of node_validate's nested family options that turns a family off.
ENABLED_OPTION = {"enabled": {"type": "bool", "default": True}}


def common_argspec(*names):
    """A fresh copy of the common options (all of them, or only ``names``)."""
    names = names or tuple(COMMON_OPTIONS)
    return dict((name, copy.deepcopy(COMMON_OPTIONS[name])) for name in names)


def is_finite_number(value):
    """True for an int or float that is neither NaN nor infinite (bool is not a number).

    Every threshold comparison goes through this first: NaN compares False with everything, so
    ``nan < minimum`` would let a broken reading pass; a value that is not a finite number never
    passes a threshold (docs/contracts.md, "Fail-closed checks")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float is still a finite number
        return True


class Family(object):
    """A family of checks: ``name``, ``options`` (argument spec), ``validate``, ``run``.

    ``validate(options, prefix)`` -> list of error strings, each naming ``<prefix><option>``.
    ``run(ctx, options)`` -> FamilyResult. ``off_returns``: the return keys of the family when
    node_validate does not run it (for example ``gpus: []``)."""

    def __init__(self, name, options, validate, run, off_returns=None):
        self.name = name
        self.options = options
        self.validate = validate
        self.run = run
        self.off_returns = off_returns or {}

    def defaults(self, options=None):
        """``options`` completed with the spec's defaults (None counts as unset): the one place
        option defaults are filled, once per run by the planners (``single_plan``, ``node_plan``).
        Keys that are not the family's options (``root``) are left out."""
        result = {}
        options = options or {}
        for name, spec in self.options.items():
            value = options.get(name)
            result[name] = copy.deepcopy(spec.get("default")) if value is None else value
        return result

    def __repr__(self):
        return "Family(%s)" % self.name


class FamilyResult(object):
    """What a family run returns: ``checks`` (CheckResults), ``facts`` (``ansible_facts``
    entries such as ``{"mlx5": {...}}``) and ``returns`` (other return keys, e.g. ``gpus``)."""

    def __init__(self, checks, facts=None, returns=None):
        self.checks = checks
        self.facts = facts or {}
        self.returns = returns or {}


class Scope(object):
    """What one check function sees: the family's ``options``, the ``checks`` it adds to, its
    ``target`` (``node``, ``gpu3``, ``mlx5_0/1``) and whatever the family hands it by keyword
    (``reader``, ``facts``, ``handle``, ``port``, ...), as attributes. Both families' check
    functions take one Scope: ``check(scope)``."""

    def __init__(self, checks, options, target="node", **data):
        self.checks = checks
        self.options = options
        self.target = target
        self.__dict__.update(data)

    def but(self, **changes):
        """A copy with some attributes changed (the same checks: results accumulate)."""
        data = dict(self.__dict__)
        data.update(changes)
        return Scope(**data)


class Context(object):
    """Everything a run reads through, built once and shared by the families of the run."""

    def __init__(self, root="/", runner=None, reader=None, nvml=None, now=None):
        self.root = given_root({"root": root})
        self.runner = runner
        self.reader = reader if reader is not None else SysfsReader(self.root)
        self._nvml = nvml
        self._own_nvml = False
        self.now = time.time() if now is None else now

    @property
    def nvml(self):
        """The NVML adapter; the binding is imported only when a family first uses it."""
        return self.nvml_adapter()

    def nvml_adapter(self, binding_path=None):
        """The NVML adapter, built on first use with the binding's directory ``binding_path``
        (the GPU family's nvml_binding_path; None: the interpreter's own search path)."""
        if self._nvml is None:
            from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter

            self._nvml = NvmlAdapter(binding_path=binding_path)
            self._own_nvml = True
        return self._nvml

    def close(self):
        """Shut NVML down if this context started it. A module's process ends after one run; the
        resident node health agent runs a context per cycle in one process, and shuts NVML down
        after each so that the next cycle initialises it again, as a process per cycle would."""
        if self._own_nvml:
            self._nvml.shutdown()


# -- argument specs ------------------------------------------------------------------------------
def module_argspec(family):
    """Argument spec of a single-family module (gpu_health, rdma_validate): common + family."""
    spec = common_argspec()
    spec.update(copy.deepcopy(family.options))
    return spec


def nested_options(family):
    """node_validate's sub-options for ``family``: ``enabled`` + the family's own options."""
    options = copy.deepcopy(ENABLED_OPTION)
    options.update(copy.deepcopy(family.options))
    return options


def node_argspec(families):
    """Argument spec of node_validate: common options + one nested dict per family, so that
    Ansible itself checks and names ``gpu.expected_count`` (apply_defaults: an omitted or null
    family runs with its defaults)."""
    spec = common_argspec()
    for family in families:
        spec[family.name] = {"type": "dict", "apply_defaults": True, "options": nested_options(family)}
    return spec


def node_module_argspec(families):
    """The node_validate module's argument spec: node_argspec plus ``from_tier`` and ``from_validate_vars``,
    which the action plugin applies on the controller (plugins/action/node_validate.py) and never passes on;
    the module declares them so that its documentation and its spec agree."""
    spec = node_argspec(families)
    spec["from_tier"] = {"type": "bool", "default": False}
    spec["from_validate_vars"] = {"type": "bool", "default": False}
    spec["agent_health_file"] = {"type": "path"}
    return spec


AGENT_HEALTH_MAX_BYTES = 1 << 20  # health.json is a few KB; more is not the agent's file


def read_agent_health(path):
    """The node health agent's health.json, read in the same module run as the checks (validate.yml:
    no task of its own per node), in the shape ``ansible.builtin.slurp`` registers, which the
    controller's filter agent_health_checks reads: {content (base64), encoding, source}, or
    {failed, msg} (absent: msg says "file not found"; anything else is the error, so the check fails
    closed: an unreadable file is never read as healthy)."""
    import base64
    import errno

    try:
        with open(path, "rb") as handle:
            data = handle.read(AGENT_HEALTH_MAX_BYTES + 1)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return {"failed": True, "msg": "file not found: %s" % path, "source": path}
        return {"failed": True, "msg": "%s: %s" % (path, exc.strerror or exc), "source": path}
    if len(data) > AGENT_HEALTH_MAX_BYTES:
        return {"failed": True, "msg": "%s: larger than %d bytes" % (path, AGENT_HEALTH_MAX_BYTES), "source": path}
    return {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64", "source": path}


def _raw_module_params():
    """The module's parameters as sent, before any validation ({} when they cannot be read here:
    AnsibleModule then reads them again and reports the problem itself)."""
    from ansible.module_utils import basic

    try:
        params = basic._load_params()  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
        return {}
    return params if isinstance(params, dict) else {}


def node_module_class(families, module_class=None, raw_params=None):
    """The ``module_class`` node_validate hands to ``framework.run_module``. ansible-core (2.19)
    answers a scalar given for a nested dict option (``gpu: false``) with "argument of type 'bool'
    is not iterable" or "dictionary requested, could not parse JSON or key=value", naming no
    option. So the raw parameters (ansible's own reader, cached by ansible) are looked at first,
    and a non-dict family option fails with its name and the accepted forms; otherwise the module
    is built with its real argument spec."""
    if module_class is None:
        from ansible.module_utils.basic import AnsibleModule as module_class

    def build(argument_spec, **options):
        params = _raw_module_params() if raw_params is None else raw_params
        names = [family.name for family in families]
        bad = [name for name in names if params.get(name) is not None and not isinstance(params[name], dict)]
        if bad:
            raw = module_class(argument_spec=dict((name, {"type": "raw"}) for name in argument_spec), **options)
            raw.fail_json(
                msg="option %s must be a dict of that family's options (use {enabled: false} to turn "
                    "the family off), got %s" % (
                        ", ".join(bad), ", ".join(type(params[name]).__name__ for name in bad)))
        return module_class(argument_spec=argument_spec, **options)
    return build


def check_params(spec, params):
    """(validated parameters, [errors]) through Ansible's own argument-spec validator, as
    AnsibleModule does; for callers without an AnsibleModule (tests, benchmarks)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    errors = []
    for name, option in spec.items():
        value = params.get(name)
        if option.get("options") and value is not None and not isinstance(value, (dict, str, list)):
            # ansible-core raises a bare TypeError on these before naming the option
            errors.append("option %s: expected a dict of options, got %s %r%s"
                          % (name, type(value).__name__, value,
                             " (turn the family off with %s: {enabled: false})" % name
                             if isinstance(value, bool) else ""))
    if errors:
        return None, errors
    try:
        result = ArgumentSpecValidator(copy.deepcopy(spec)).validate(
            dict((name, copy.deepcopy(value)) for name, value in params.items()))
    except TypeError as exc:  # ansible-core chokes on a non-dict where nested options are declared
        return None, ["%s" % exc]
    return result.validated_parameters, list(result.error_messages)


# -- option checks beyond types --------------------------------------------------------------------
def option_errors(family, options, prefix=""):
    """The family's own option errors (list of strings naming ``<prefix><option>``)."""
    return list(family.validate(family.defaults(options), prefix))


def single_plan(family, params):
    """(complete family options with ``root``, [errors]) for a single-family module's validated
    params: root first (an error there stops the plan), then the family's own errors."""
    error = root_error(params)
    if error:
        return None, [error]
    options = dict(family.defaults(params), root=given_root(params))
    return options, list(family.validate(options, ""))


def single_errors(family, params):
    """Errors of a single-family module's validated parameters: root, then the family's."""
    return single_plan(family, params)[1]


def node_plan(families, params):
    """({family name: complete options or None when off}, [errors]) for node_validate's validated params."""
    root = given_root(params)
    errors = []
    error = root_error(params)
    if error:
        errors.append(error)
    plan = {}
    for family in families:
        nested = dict(params.get(family.name) or {})
        if not nested.pop("enabled", True):
            plan[family.name] = None
            continue
        options = dict(family.defaults(nested), root=root)
        if not error:
            errors.extend(family.validate(options, family.name + "."))
        plan[family.name] = options
    return plan, errors


# -- runs ---------------------------------------------------------------------------------------
def run_family(family, ctx, options):
    """One family's FamilyResult for partial ``options`` (tests, benchmarks): the defaults filled
    and ``root`` taken from the context. The modules run planned options (``run_families``)."""
    return family.run(ctx, dict(family.defaults(options), root=ctx.root))


def run_families(families, plan, ctx):
    """Run the families that are on with their planned options; return (checks, facts, returns,
    names of the families run)."""
    checks = CheckResults()
    facts, returns, ran = {}, {}, []
    for family in families:
        options = plan.get(family.name)
        if options is None:
            returns.update(copy.deepcopy(family.off_returns))
            continue
        result = family.run(ctx, options)
        checks.extend(result.checks)
        facts.update(result.facts)
        returns.update(result.returns)
        ran.append(family.name)
    return checks, facts, returns, ran


def validate_node(families, params, ctx=None, runner=None, nvml=None, now=None, reader=None):
    """node_validate's logic for raw parameters (checked with Ansible's validator here; in the
    module, AnsibleModule has already done it). Returns (payload, errors); payload is None on errors."""
    started = time.perf_counter()
    validated, errors = check_params(node_argspec(families), params)
    if errors:
        return None, errors
    return node_payload(families, validated, started, ctx=ctx, runner=runner, nvml=nvml, now=now,
                        reader=reader)


def node_payload(families, params, started, ctx=None, runner=None, nvml=None, now=None, reader=None):
    plan, errors = node_plan(families, params)
    if errors:
        return None, errors
    ctx = ctx or Context(given_root(params), runner=runner, reader=reader, nvml=nvml, now=now)
    checks, facts, returns, ran = run_families(families, plan, ctx)
    checks = checks.as_list()
    readiness = family_readiness(checks, ran, [family.name for family in families])
    payload = {"checks": checks, "summary": summarize(checks),
               "healthy": not any(c["status"] == FAIL for c in checks),
               "ansible_facts": facts, "readiness": readiness, "msg": readiness_text(readiness)}
    payload.update(returns)
    payload["elapsed_ms"] = round((time.perf_counter() - started) * 1000.0, 1)
    return payload, []


def run_single(module, family, runner):
    """The whole of a single-family module (gpu_health, rdma_validate) after AnsibleModule."""
    params = module.params
    options, errors = single_plan(family, params)
    if errors:
        module.fail_json(msg="; ".join(errors))
    result = family.run(Context(options["root"], runner=runner), options)
    extra = dict(result.returns)
    if result.facts:
        extra["ansible_facts"] = result.facts
    exit_with_checks(module, result.checks, params["fail_on"], **extra)


def run_node(module, families, runner):
    """The whole of node_validate after AnsibleModule (which checked the nested options)."""
    started = time.perf_counter()
    payload, errors = node_payload(families, module.params, started, runner=runner)
    if errors:
        module.fail_json(msg="; ".join(errors))
    checks = payload.pop("checks")
    payload.pop("summary")
    payload.pop("healthy")
    if module.params.get("agent_health_file"):
        payload["agent_health_file"] = read_agent_health(module.params["agent_health_file"])
    exit_with_checks(module, checks, module.params["fail_on"], **payload)


def single_family_work(family):
    """``framework.run_module``'s work of a single-family module (gpu_health, rdma_validate)."""
    def work(module):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner

        run_single(module, family, ModuleRunner(module))
    return work


def node_work(families):
    """``framework.run_module``'s work of node_validate."""
    def work(module):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner

        run_node(module, families, ModuleRunner(module))
    return work


# -- readiness (one line per family) ----------------------------------------------------------------
def _most_common_message(checks):
    counts, order = {}, []
    for check in checks:
        message = check["message"]
        if message not in counts:
            order.append(message)
        counts[message] = counts.get(message, 0) + 1
    return max(order, key=lambda m: (counts[m], -order.index(m))) if order else ""


def family_readiness(checks, ran, names=("gpu", "rdma")):
    """Per family: {status, summary, message}. Status: fail > warn > pass; skip only when every
    check skipped; off when not run. Message: the first failing (then warning) check, or the most
    common skip reason when nothing was checked, or a pass count."""
    readiness = {}
    for family in names:
        if family not in ran:
            readiness[family] = {"status": "off", "summary": summarize([]),
                                 "message": "not run (%s.enabled: false)" % family}
            continue
        mine = [c for c in checks if c["id"].split(".", 1)[0] == family]
        summary = summarize(mine)
        for status in (FAIL, WARN):
            bad = [c for c in mine if c["status"] == status]
            if bad:
                first = bad[0]
                message = "%s[%s]: %s" % (first["id"], first["target"], first["message"])
                if len(bad) > 1:
                    message += " (+%d more %s)" % (len(bad) - 1, status)
                readiness[family] = {"status": status, "summary": summary, "message": message}
                break
        else:
            if summary[PASS]:
                message = "%d check(s) passed, %d skipped" % (summary[PASS], summary[SKIP])
                readiness[family] = {"status": PASS, "summary": summary, "message": message}
            else:
                readiness[family] = {"status": SKIP, "summary": summary,
                                     "message": _most_common_message(mine) or "no checks"}
    return readiness


def readiness_text(readiness):
    """One line: ``gpu: skip (no NVIDIA GPU on the PCI bus); rdma: pass (52 check(s) passed, ...)``."""
    return "; ".join("%s: %s (%s)" % (family, readiness[family]["status"], readiness[family]["message"])
                     for family in readiness)


# -- checks computed elsewhere (record_checks) -----------------------------------------------------
RECORD_CHECKS_OPTIONS = {"checks": {"type": "list", "elements": "dict"}, "hosts": {"type": "dict"}}
REQUIRED_KEYS = ("id", "target", "status", "message")


def record_checks_argspec():
    """record_checks: its ``checks`` + the common ``fail_on`` (it reads no files: no ``root``)."""
    spec = copy.deepcopy(RECORD_CHECKS_OPTIONS)
    spec.update(common_argspec("fail_on"))
    return spec


def build_results(checks, option="checks"):
    """CheckResults from plain dicts; (None, error) naming the bad entry (``option[index]``)."""
    results = CheckResults()
    for index, check in enumerate(checks):
        if not isinstance(check, dict):
            return None, "option %s[%d]: a check must be a dict, got %r" % (option, index, check)
        missing = [key for key in REQUIRED_KEYS if check.get(key) in (None, "")]
        if missing:
            return None, "option %s[%d]: missing %s" % (option, index, ", ".join(missing))
        if check["status"] not in STATUSES:
            return None, "option %s[%d]: status %r is not one of %s" % (
                option, index, check["status"], ", ".join(STATUSES))
        extra = dict((key, check[key]) for key in ("observed", "expected", "error") if key in check)
        results.add(str(check["id"]), str(check["target"]), check["status"], str(check["message"]), **extra)
    return results, None


def record_checks_work(module):
    """``framework.run_module``'s work of record_checks: ``checks`` (one host) or ``hosts`` (checks
    per host, returned as ``host_checks``) through the one exit path, ``exit_with_checks``."""
    params = module.params
    if params["hosts"] is None:
        results, error = build_results(params["checks"])
        if error:
            raise ModuleFailure(error)
        return exit_with_checks(module, results, params["fail_on"])
    host_checks, every = {}, []
    for host, checks in params["hosts"].items():
        results, error = build_results(checks if isinstance(checks, list) else [None], "hosts[%s]" % host)
        if error:
            raise ModuleFailure(error)
        host_checks[host] = results.as_list()
        every.extend(host_checks[host])
    return exit_with_checks(module, every, params["fail_on"], checks_key=None, host_checks=host_checks)
