"""What several callers need has one place below them (issue 43, item 3): no controller plugin or
module borrows the node health agent's own files (its configuration schema, agent_config, aside:
it is shared on purpose), health.json has one reader and one freshness rule for the agent and the
filter, and a function name means one contract."""

import ast
import os

from ansible_collections.gpufleet.cluster.plugins.filter import agent_status
from ansible_collections.gpufleet.cluster.plugins.module_utils import agent_cycle, agent_state, health_record
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from test_layering import collection_imports

PLUGINS = os.path.join(REPO, "plugins")
SHARED_AGENT_FILES = ("agent_config",)  # the agent's configuration schema, shared on purpose


def python_files(kind):
    folder = os.path.join(PLUGINS, kind)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py"))


def test_no_controller_plugin_or_module_imports_the_agents_files():
    offenders = []
    for kind in ("modules", "filter", "lookup", "action", "callback", "plugin_utils"):
        if not os.path.isdir(os.path.join(PLUGINS, kind)):
            continue
        for path in python_files(kind):
            for dep_kind, dep in collection_imports(path):
                if dep_kind == "module_utils" and dep.startswith("agent") and dep not in SHARED_AGENT_FILES:
                    offenders.append("%s/%s imports %s" % (kind, os.path.basename(path), dep))
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
    assert "failing_after_hysteresis" in defined_functions(os.path.join(PLUGINS, "module_utils", "agent_hysteresis.py"))
