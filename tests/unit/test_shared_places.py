"""What several callers need has one place below them (issue 43, item 3): no controller plugin or
module borrows the node health agent's own files (its schemas aside: agent_config and health_record
are shared on purpose, tests/unit/test_layering.py AGENT_SHARED), health.json has one reader and one
freshness rule for the agent and the filter, and a function name means one contract."""

import ast
import os

from ansible_collections.gpufleet.cluster.plugins.filter import agent_status
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_cycle, agent_state, health_record
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from test_layering import AGENT_SHARED, collection_imports

PLUGINS = os.path.join(REPO, "plugins")
SHARED_AGENT_FILES = AGENT_SHARED  # the agent's schemas (configuration, health.json), shared on purpose


def python_files(kind):
    folder = os.path.join(PLUGINS, kind)
    return sorted(os.path.join(here, name) for here, _dirs, names in os.walk(folder)
                  for name in names if name.endswith(".py"))


def test_no_controller_plugin_or_module_imports_the_agents_files():
    offenders = []
    for kind in ("modules", "filter", "lookup", "action", "callback", "plugin_utils"):
        if not os.path.isdir(os.path.join(PLUGINS, kind)):
            continue
        for path in python_files(kind):
            for dotted in collection_imports(path):
                parts = dotted.split(".") + ["", ""]
                if parts[:2] == ["module_utils", "agent"] and parts[2] not in SHARED_AGENT_FILES:
                    offenders.append("%s/%s imports %s" % (kind, os.path.basename(path), dotted))
    assert offenders == []


def test_health_json_has_one_reader_and_one_freshness_rule():
    assert agent_state.parse_health is health_record.parse_health is agent_status.parse_health
    assert agent_cycle.result_max_age is health_record.result_max_age is agent_status.result_max_age


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(-10, 10 ** 6), st.floats(allow_nan=True), st.text(max_size=3)))
def test_a_verdict_is_current_for_three_intervals_at_least_300_s(interval):
    age = health_record.result_max_age({"interval": interval})
    sane = not isinstance(interval, bool) and isinstance(interval, (int, float)) and interval > 0
    assert age == (max(300, 3 * interval) if sane else 300)  # the default interval, 60 s: 300


def defined_functions(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]


def test_one_failing_checks_in_the_node_side_code():
    """gate.failing_checks (which checks hold a node back, from results) is the only function of that
    name; the agent's failing checks after hysteresis have their own name."""
    owners = [os.path.basename(path) for path in python_files("module_utils")
              if "failing_checks" in defined_functions(path)]
    assert owners == ["gate.py"]
    assert "failing_after_hysteresis" in defined_functions(os.path.join(PLUGINS, "module_utils", "agent", "agent_hysteresis.py"))


def test_the_breakers_defaults_are_owned_once():
    """breaker.POLICY_DEFAULTS is the one table: gpufleet_remediation's defaults, the module's option
    defaults (and its documentation), Breaker's keyword defaults."""
    import inspect

    import yaml
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import breaker, remediation
    from ansible_collections.gpufleet.cluster.plugins.modules import remediation_breaker

    owned = breaker.POLICY_DEFAULTS
    assert dict((k, remediation.DEFAULT_POLICY[k]) for k in owned) == owned
    options = {"group": "group", "max_parallel": "max_parallel", "max_attempts": "max_attempts",
               "window_hours": "window_hours", "lease_namespace": "namespace", "lease_ttl_seconds": "ttl"}
    documented = yaml.safe_load(remediation_breaker.DOCUMENTATION)["options"]
    for key, option in options.items():
        spec = remediation_breaker.ARGUMENT_SPEC[option]
        assert str(spec["default"]) == str(owned[key]) or float(spec["default"]) == float(owned[key]), option
        assert str(documented[option]["default"]) == str(spec["default"]) or \
            float(documented[option]["default"]) == float(spec["default"]), option
    signature = inspect.signature(breaker.Breaker.__init__).parameters
    assert signature["max_parallel"].default == owned["max_parallel"]
    assert signature["max_attempts"].default == owned["max_attempts"]
    assert signature["window"].default == owned["window_hours"] * 3600.0
    assert signature["namespace"].default == owned["lease_namespace"]
    assert signature["ttl"].default == owned["lease_ttl_seconds"]
    source = inspect.getsource(remediation_breaker)
    assert 'default="kube-system"' not in source and "default=7200" not in source and "default=3)" not in source
