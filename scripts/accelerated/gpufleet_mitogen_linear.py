"""Strategy of the accelerated mode (scripts/accelerated.sh): Mitogen's mitogen_linear, plus fixes (each explained below).

Not part of the collection (build_ignore: scripts): it needs mitogen, which only the accelerated mode
installs (requirements.txt pins it).

The fix, measured by bench/fleet_validate.py (docs/performance.md): for every task of a module that
lives in a collection, Mitogen 0.3.54 (ansible_mitogen/planner.py, ``_load_collections``) lists every
installed collection again (``ansible.collections.list.list_collection_dirs``, which reads each
collection's metadata; the ``ansible`` package ships about a hundred). Its per-module cache lives in
the worker, a fork that exits after the task, so the listing is repeated for every host and task and
was the largest single cost of an accelerated sweep. The listing cannot change during a run: it is made
once here, in the controller before the workers are forked, and each worker inherits it.

The second fix: Mitogen pins its processes to CPUs (ansible_mitogen/affinity.py). On a controller with
2 or 3 CPUs its scheme reserves CPU 0 for the first connection multiplexer and puts the top-level
process, every worker and every process the multiplexers start on the remaining CPU(s): on 2 CPUs an
accelerated sweep ran on one core while the other idled (N = 200, same run: 22.2 s wall with the
pinning, 13.6 s without, the same CPU time). Below 4 CPUs the pinning is switched off here and the
kernel places the processes; from 4 CPUs up Mitogen's scheme (one CPU each for the multiplexer and the
top-level process, the workers on the rest) is kept as it is.

The third fix: Mitogen returns every module result through ``ansible.utils.unsafe_proxy.wrap_var``
(ansible_mitogen/mixins.py, ``_execute_module``), which under ansible-core 2.19 copies the result and
removes the ``TrustedAsTemplate`` tag from each string, with ABC ``isinstance`` checks at every node
(3.6 ms of CPU for node_validate's ≈ 35 kB result of a DGX node), where ansible-core's own path does not
wrap at all. A result decoded from JSON is made of plain ``dict``, ``list``, ``str``, numbers, booleans
and None, and a plain ``str`` carries no tag (a tagged string is another type), so :func:`plain_wrap_var`
copies those nodes directly, as ``wrap_var`` would, and hands every other node (a tagged string, a
tuple, a set, bytes, a Mapping that is not a dict, an AnsibleUnsafe value) to ansible-core's
``wrap_var``: the same value for every input, about 30 times faster on a module result (measured on an
accelerated sweep of 50 hosts: ≈ 2 ms per host, docs/performance.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import ansible.collections.list
import ansible.executor.task_result
import ansible.module_utils.common.json
import ansible.plugins.strategy
import ansible.utils.unsafe_proxy
import ansible.utils.vars
import ansible.vars.clean
import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.mixins
import ansible_mitogen.planner
import ansible_mitogen.process
import ansible_mitogen.strategy
import ansible_mitogen.target

_COLLECTION_DIRS = []


def collection_dirs():
    """The installed collections' directories, listed once per controller process."""
    if not _COLLECTION_DIRS:
        _COLLECTION_DIRS.append(tuple(path.decode("utf-8") if isinstance(path, bytes) else path
                                      for path in ansible.collections.list.list_collection_dirs()))
    return _COLLECTION_DIRS[0]


def _load_collections(invocation):
    # Same effect as Mitogen's function (the collections' paths for its module server), from the list.
    invocation._extra_sys_paths.update(collection_dirs())


ansible_mitogen.planner._load_collections = _load_collections

# Mitogen's policy object is looked up at each use (ansible_mitogen.affinity.policy.assign_*), so the
# no-op base class in its place switches the pinning off for the whole run, workers included.
PINNING_MIN_CPUS = 4


def unpin_small_controller(affinity=ansible_mitogen.affinity, min_cpus=PINNING_MIN_CPUS):
    """Replace Mitogen's pinning policy by its no-op base class when the policy was built for fewer
    than ``min_cpus`` CPUs (its own count; a policy without one, Mitogen's no-op, is left alone).
    Returns whether it did."""
    if getattr(affinity.policy, "cpu_count", min_cpus) >= min_cpus:
        return False
    affinity.policy = affinity.Policy()
    return True


unpin_small_controller()

# Plain trees (only dict, list and untagged str, int, float, bool, None, no container twice): the collection's one
# test and copy (plugins/module_utils/core/plain.py, which imports nothing), loaded by its path beside this
# checkout's scripts/: this file runs before ansible-core's collection loader is needed and in interpreters
# without it. Types wrap_var returns as they are: None (it returns None) and a plain str (untag() of an untagged
# str is the str itself), as the other plain scalars.
_PLAIN_MODULE = "gpufleet_plain_trees"


def _load_plain(name=_PLAIN_MODULE):
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plugins", "module_utils", "core",
                            "plain.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


_plain = _load_plain()
_PLAIN_IDS = _plain.PLAIN_SCALAR_IDS
plain_tree = _plain.plain_tree


def plain_wrap_var(value, _wrap_var=ansible.utils.unsafe_proxy.wrap_var):
    """ansible-core's ``wrap_var(value)``, with plain dicts, lists and untagged scalars copied here; the
    module result this worker has just decoded (see :func:`postprocess_response`) is returned as it is when it
    is a plain tree."""
    if _DECODED and value is _DECODED[0]:
        del _DECODED[:]
        if plain_tree(value):
            return value
    kind = type(value)
    if kind is dict:
        return {plain_wrap_var(key): plain_wrap_var(item) for key, item in value.items()}
    if kind is list:
        return [plain_wrap_var(item) for item in value]
    if id(kind) in _PLAIN_IDS:
        return value
    return _wrap_var(value)


ansible.utils.unsafe_proxy.wrap_var = plain_wrap_var

# The sixth fix: the copy wrap_var makes of a module result is not needed for the one Mitogen's
# _execute_module wraps (ansible_mitogen/mixins.py: ``wrap_var(task_result)``, the dict its
# _postprocess_response has just decoded from the module's JSON, ansible-core's module decoder, and added a
# few keys to). Nothing else holds that dict, so when it is a plain tree (plain_tree: what the decoder makes of
# a module's JSON unless the module sent an ansible-core tagged value) wrap_var's copy would be equal to it
# node by node and the original is dropped right after: it is returned as it is, as ansible-core's own
# _execute_module returns the decoded result without any wrap_var. Measured: the copy was ≈ 0.35-0.7 ms of
# CPU a host for node_validate's ≈ 35 kB result (docs/performance.md, "Sweep cost, round 6"). Any other
# value, a result that is not a plain tree, or another call of wrap_var, is copied as before.
_DECODED = []  # the result the last _postprocess_response returned, until wrap_var is called with it
_POSTPROCESS_RESPONSE = ansible_mitogen.mixins.ActionModuleMixin._postprocess_response


def postprocess_response(self, result):
    """Mitogen's ``_postprocess_response`` (the module's JSON decoded), its result noted for plain_wrap_var."""
    data = _POSTPROCESS_RESPONSE(self, result)
    _DECODED[:] = [data]
    return data


ansible_mitogen.mixins.ActionModuleMixin._postprocess_response = postprocess_response

# The fourth fix: Mitogen serves a collection's module_utils to each node's interpreter as source and compiles
# them there, once per node and sweep (≈ 30-40 ms of CPU for node_validate's). gpufleet_mitogen_target.py
# (next to this file) keeps their compiled code on the node, as Python's __pycache__ does; Mitogen serves it
# to the hosts (its name added to Mitogen's import allow-list) and each module run calls its run_module,
# which installs the cache and then runs Mitogen's own.
TARGET_MODULE = "gpufleet_mitogen_target"


def _load_target_module(name=TARGET_MODULE):
    """The target side module, importable by name in the controller (Mitogen's module server finds it in
    sys.modules and serves its file)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_target = _load_target_module()
_setup_responder = ansible_mitogen.process._setup_responder


def setup_responder(responder):
    """Mitogen's responder setup, and the target side module allowed to its hosts."""
    _setup_responder(responder)
    responder.whitelist_prefix(TARGET_MODULE)


ansible_mitogen.process._setup_responder = setup_responder
# Mitogen names a function it calls in a host by its module and name: every module run (in a fork or in the
# host's interpreter) calls the target side module's run_module, which runs Mitogen's own.
ansible_mitogen.target.run_module = _target.run_module

# The fifth fix: a worker's first module result decode (Mitogen's _postprocess_response, ansible-core's
# _parse_returned_data with the module-to-controller 'legacy' profile) imports the profile's module (it looks
# it up with importlib.util.find_spec first) and reads the MODULE_STRICT_UTF8_RESPONSE setting into an
# lru_cache: ≈ 1.3 ms of CPU, paid again in every worker (a fork per task and host that exits after it), ping
# as much as node_validate, since the controller process itself never decodes a module result. Done once
# here, in the controller before the workers are forked, each worker inherits the imported module and the
# cached setting: the same decoder class and the same setting value (a process-wide setting, env or ini,
# read once per process by ansible-core itself), so every decode is the same.
MODULE_RESULT_PROFILE = "legacy"  # ansible_mitogen/mixins.py _postprocess_response, ansible-core >= 2.19


def warm_module_decoder(common_json=ansible.module_utils.common.json, profile=MODULE_RESULT_PROFILE):
    """Load the module result decoder, and what its first decode reads, in this process; returns it."""
    decoder = common_json.get_module_decoder(profile, common_json.Direction.MODULE_TO_CONTROLLER)
    json.loads("{}", cls=decoder)  # its object_hook reads (and caches) the strict UTF-8 setting
    return decoder


# The seventh fix: before forking each worker, Mitogen's _queue_task loads the task's action plugin and the
# play's connection plugin (``play_context.connection``) in the controller, so that the workers inherit them
# loaded. A host whose ``ansible_connection`` is set in the inventory (``local`` in the lab and the bench, a
# group of hosts on another transport) uses another plugin, which every worker then loaded again (Mitogen's
# mitogen_local: ≈ 0.5 ms of CPU a host). It is loaded here once, the same way (Mitogen's wrapped loader, class
# only); a value that is a template is left to the worker, which templates it, and any error to the worker,
# which reports it for its host as before.
_PRELOADED_CONNECTIONS = set()


def preload_connection(name, loader=None):
    """Load the connection plugin ``name`` (an inventory's ``ansible_connection``) in this process, once per
    name; returns whether it was tried now."""
    if not isinstance(name, str) or not name or "{" in name:
        return False
    name = str(name)  # the inventory's tags (origin) dropped: the plugin's name
    if name in _PRELOADED_CONNECTIONS:
        return False
    _PRELOADED_CONNECTIONS.add(name)
    try:
        (loader or ansible_mitogen.loaders.connection_loader).get(name=name, class_only=True)
    except Exception:  # pylint: disable=broad-exception-caught  # the worker loads it again and reports it
        pass
    return True


# The eighth and ninth fixes: the controller's main process copies every result it receives (ansible-core 2.19,
# not Mitogen): for each callback that takes it (``_RawTaskResult.as_callback_task_result``: a copy, then
# ``strip_internal_keys``), for ``register:`` (the same two), and for a callback that reads ``result.result``
# (``CallbackTaskResult.result``: ``transform_to_native_types``, a visitor that copies the whole tree again; the
# default stdout callback reads it for every ``ok``, to see ``changed``). ``strip_internal_keys`` asks ABC
# ``isinstance`` at every node (≈ 1.9 ms of CPU on node_validate's ≈ 36 kB DGX result, three times a result) and
# the visitor calls a tag helper at every container (≈ 4.5 ms): together ≈ 10 ms a DGX host in the one process
# every worker is forked from (docs/performance.md, "Sweep cost, round 7"). On a plain tree (``plain_tree``: only
# dicts, lists and untagged scalars, no container twice: what a module's JSON decodes to) both are done here with
# exact type checks; anything else goes to ansible-core's own function, unchanged.


# ``exceptions`` as ansible-core passes it (a tuple, or None) and other plain collections: ``in`` on them neither
# fails for a str key nor changes them, so when it is asked does not matter
_EXCEPTION_TYPES = (tuple, list, set, frozenset, str, type(None))


def plain_strip_internal_keys(dirty, exceptions=None, _strip=ansible.vars.clean.strip_internal_keys):
    """ansible-core's ``strip_internal_keys(dirty, exceptions)``: every ``_ansible_*`` key not in ``exceptions``
    deleted from each mapping of ``dirty``, in place; returns ``dirty``. A plain tree is walked here, and
    changed only once the whole walk has found it plain; anything else is ansible-core's walk."""
    if (type(dirty) is not dict and type(dirty) is not list) or \
            not any(type(exceptions) is kind for kind in _EXCEPTION_TYPES):
        return _strip(dirty, exceptions=exceptions)
    excepted = () if exceptions is None else exceptions
    internal = []
    try:
        for node in _plain.plain_containers(dirty):
            if type(node) is dict:
                for key in node:
                    if type(key) is str and key.startswith("_ansible_") and key not in excepted:
                        internal.append((node, key))
    except _plain.NotPlain:
        return _strip(dirty, exceptions=exceptions)
    for node, key in internal:
        del node[key]
    return dirty


def _defined_in(function, path):
    """True when ``function``'s code is from the file ``path`` itself (not a wrapper made elsewhere)."""
    code = getattr(function, "__code__", None)
    return code is not None and isinstance(path, str) and os.path.realpath(code.co_filename) == os.path.realpath(path)


# ansible-core's transform_to_native_types, also when this file is loaded again in the process (its reference in
# ansible.utils.vars is then the first load's function, which names ansible-core's as ``core``); anything else
# found there (another wrapper) is left in place below
_CURRENT_TRANSFORM = ansible.utils.vars.transform_to_native_types
_CORE_TRANSFORM = (_CURRENT_TRANSFORM.core if _defined_in(_CURRENT_TRANSFORM, __file__)
                   else _CURRENT_TRANSFORM)


def plain_transform_to_native_types(value, redact=True, _transform=_CORE_TRANSFORM):
    """ansible-core's ``transform_to_native_types(value, redact)``; a plain tree (nothing to convert, redact or
    untag: a plain ``str``, ``int`` or ``float`` is its own native value) is copied here, anything else is
    ansible-core's."""
    try:
        return _plain.plain_copy(value)
    except (_plain.NotPlain, RecursionError):
        return _transform(value, redact=redact)


# Only the references the per-result path uses are replaced, each only while it is still ansible-core's own.
for _module in (ansible.executor.task_result, ansible.plugins.strategy):
    if getattr(_module, "strip_internal_keys", None) is ansible.vars.clean.strip_internal_keys:
        _module.strip_internal_keys = plain_strip_internal_keys
plain_transform_to_native_types.core = _CORE_TRANSFORM
if _defined_in(_CORE_TRANSFORM, ansible.utils.vars.__file__):
    ansible.utils.vars.transform_to_native_types = plain_transform_to_native_types


Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        collection_dirs()  # before any worker is forked
        warm_module_decoder()

    def _queue_task(self, host, task, task_vars, play_context):
        preload_connection((task_vars or {}).get("ansible_connection"))
        return super()._queue_task(host, task, task_vars, play_context)
