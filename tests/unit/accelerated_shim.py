"""Loading the accelerated mode's strategy shim (scripts/accelerated/gpufleet_mitogen_linear.py) in a test
process, and putting back everything its import replaced: the one list of what the shim patches in
ansible-core and Mitogen, for every test module that loads it."""

import contextlib
import importlib.util
import os
import sys

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "accelerated",
                    "gpufleet_mitogen_linear.py")


def patch_points():
    """(object, attribute name) of every reference the shim's import may replace."""
    import ansible.executor.task_result  # pylint: disable=import-outside-toplevel
    import ansible.plugins.strategy  # pylint: disable=import-outside-toplevel
    import ansible.utils.unsafe_proxy  # pylint: disable=import-outside-toplevel
    import ansible.utils.vars  # pylint: disable=import-outside-toplevel
    import ansible_mitogen.mixins  # pylint: disable=import-outside-toplevel
    import ansible_mitogen.process  # pylint: disable=import-outside-toplevel
    import ansible_mitogen.target  # pylint: disable=import-outside-toplevel
    from ansible_mitogen import affinity  # pylint: disable=import-outside-toplevel

    return [(affinity, "policy"), (ansible.utils.unsafe_proxy, "wrap_var"),
            (ansible_mitogen.process, "_setup_responder"), (ansible_mitogen.target, "run_module"),
            (ansible_mitogen.mixins.ActionModuleMixin, "_postprocess_response"),
            (ansible.executor.task_result, "strip_internal_keys"), (ansible.plugins.strategy, "strip_internal_keys"),
            (ansible.utils.vars, "transform_to_native_types")]


@contextlib.contextmanager
def loaded_shim(name):
    """The shim imported under ``name``; ``module.before`` maps each patch point's attribute name (qualified by
    its object) to what it was before the import. Everything is put back on leaving."""
    points = patch_points()
    saved = [getattr(owner, attribute) for owner, attribute in points]
    saved_target = sys.modules.get("gpufleet_mitogen_target")
    spec = importlib.util.spec_from_file_location(name, SHIM)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        module.before = dict(((getattr(owner, "__name__", repr(owner)), attribute), value)
                             for (owner, attribute), value in zip(points, saved))
        yield module
    finally:
        for (owner, attribute), value in zip(points, saved):
            setattr(owner, attribute, value)
        if saved_target is None:
            sys.modules.pop("gpufleet_mitogen_target", None)


def shape(value):
    """value with the type and trust of every node, to compare two results node by node."""
    from ansible._internal._datatag._tags import TrustedAsTemplate  # pylint: disable=import-outside-toplevel

    if isinstance(value, dict):
        return ("dict", type(value), sorted((repr(shape(k)), shape(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("seq", type(value), [shape(item) for item in value])
    if isinstance(value, set):
        return ("set", type(value), sorted(repr(shape(item)) for item in value))
    return ("scalar", type(value), value, TrustedAsTemplate.is_tagged_on(value))


def containers_of(value):
    """The ids of every dict and list in ``value``: two values that share none are copies apart."""
    found, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            found.append(id(node))
            stack.extend(node.values() if isinstance(node, dict) else node)
    return found
