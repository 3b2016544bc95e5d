"""The health pipeline's structure (docs/contracts.md, "Health pipeline"): imports point down only.

- node-side code (plugins/module_utils) never imports a controller plugin (filter, plugin_utils,
  lookup, action, callback), not even lazily inside a function;
- the module_utils import graph has no circle (the agent's modules included);
- the pipeline's layers import only layers below them;
- nothing but module_utils is copied to nodes with the agent.
"""

import ast
import os

import yaml
from conftest import REPO

MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")
PREFIX = "ansible_collections.gpufleet.cluster.plugins."
CONTROLLER = ("filter", "plugin_utils", "lookup", "action", "callback", "modules")

# lowest first: a module may import only modules of its own or a lower rank
PIPELINE = [
    ("checks", "clock", "records"),
    ("slurm",),  # reading scontrol's answers: below the agent's publisher and the remediation
    ("gate",),
    ("kube_node",),
    ("kube_node_write",),  # the one Node health write: module node_write and the agent
    ("state_files",),
    ("agent_config",),
    ("health_record",),  # health.json: read by the agent and the filter agent_health_check
    ("agent_hysteresis",),
    ("agent_state",),
    ("agent_events",),
    ("agent_publish", "agent_kube", "agent_slurm"),
    ("agent_cycle",),
    ("agent_daemon",),
    ("agent",),
]


def collection_imports(path):
    """(plugin type, module name) of every collection import in ``path``, lazy ones included."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        for name in names:
            if name.startswith(PREFIX):
                parts = name[len(PREFIX):].split(".")
                if len(parts) >= 2:
                    found.append((parts[0], parts[1]))
    return found


def module_utils_graph():
    graph = {}
    for name in sorted(os.listdir(MODULE_UTILS)):
        if name.endswith(".py") and name != "__init__.py":
            own = name[:-3]
            graph[own] = sorted({mod for kind, mod in collection_imports(os.path.join(MODULE_UTILS, name))
                                 if kind == "module_utils" and mod != own})
    return graph


def test_module_utils_never_import_a_controller_plugin():
    offenders = []
    for name in sorted(os.listdir(MODULE_UTILS)):
        if name.endswith(".py"):
            for kind, mod in collection_imports(os.path.join(MODULE_UTILS, name)):
                if kind in CONTROLLER:
                    offenders.append("%s imports %s/%s" % (name, kind, mod))
    assert offenders == []


def test_module_utils_have_no_import_circle():
    graph = module_utils_graph()
    state, circles = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]) if nxt in path else nxt)
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert circles == []


def test_the_pipeline_imports_only_downwards():
    rank = dict((mod, index) for index, layer in enumerate(PIPELINE) for mod in layer)
    graph = module_utils_graph()
    upward = ["%s imports %s" % (mod, dep) for mod in rank for dep in graph[mod]
              if dep in rank and rank[dep] > rank[mod]]
    assert upward == []
    # every agent module has its place in the layers
    assert sorted(m for m in graph if m.startswith("agent")) == sorted(m for m in rank if m.startswith("agent"))


def test_nothing_but_module_utils_is_copied_to_nodes():
    with open(os.path.join(REPO, "roles", "node_health_agent", "vars", "main.yml")) as handle:
        files = yaml.safe_load(handle)["__node_health_agent_files"]
    assert files and all(f.startswith("module_utils/") for f in files), files


def test_a_controller_import_would_be_caught(tmp_path):
    """The scanner sees a lazy import inside a function (the form the agent once used)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ansible_collections.gpufleet.cluster.plugins.filter.health_gate import x\n")
    assert collection_imports(str(probe)) == [("filter", "health_gate"), ("filter", "health_gate")]
