"""The collection's Python in wings and tiers (docs/contracts.md, "Code layout: wings"): imports point down.

- every .py file under plugins/ belongs to exactly one wing (a sub-package of plugins/module_utils) or
  tier (modules, plugin_utils, doc_fragments, action, callback, filter, lookup): nothing flat in
  module_utils, no directory outside the table;
- a file imports only files of its own wing or tier or of a lower rank, lazy imports inside functions
  included; so node-side code (module_utils) never imports a controller plugin, a module never imports
  plugin_utils, and wings of one rank never import each other;
- nothing imports the agent wing but the agent itself (role node_health_agent copies its import
  closure to nodes; code borrowed from it sideways would tie the daemon to its borrowers);
- the module_utils import graph has no circle, and the agent's pipeline imports only downward;
- each wing's __init__.py is one paragraph stating its job and what it may import, and no code;
- nothing but module_utils is copied to nodes with the agent.
"""

import ast
import os

import yaml
from conftest import REPO

PLUGINS = os.path.join(REPO, "plugins")
MODULE_UTILS = os.path.join(PLUGINS, "module_utils")
PREFIX = "ansible_collections.gpufleet.cluster.plugins."

# lowest first: a file may import files of its own wing/tier or of a lower rank only.
# The first six ranks are the wings of module_utils (plugins/module_utils/<wing>/), the last two
# the controller's tiers (plugins/<type>/).
WINGS = [
    ("core",),
    ("gpu", "kube", "slurm", "tuning"),
    ("rdma",),
    ("health",),
    ("capture", "remediation"),
    ("agent",),
    ("modules", "plugin_utils", "doc_fragments"),
    ("action", "callback", "filter", "lookup"),
]
MODULE_UTILS_WINGS = [wing for layer in WINGS[:6] for wing in layer]
AGENT = "agent"
# files of the agent wing others may import: its schemas, the configuration and health.json (the
# filter agent_health_check reads a node's health.json with the agent's own reader)
AGENT_SHARED = ("agent_config", "health_record")

# inside the agent wing, lowest first (docs/contracts.md, "Health pipeline")
AGENT_PIPELINE = [
    ("agent_config",),
    ("health_record",),
    ("agent_hysteresis",),
    ("agent_state",),
    ("agent_events",),
    ("agent_publish", "agent_kube", "agent_slurm"),
    ("agent_cycle",),
    ("agent_daemon",),
    ("agent",),
]

RANK = {wing: index for index, layer in enumerate(WINGS) for wing in layer}


def python_files():
    """Every .py file under plugins/, relative to it ("module_utils/core/records.py")."""
    found = []
    for folder, dirs, files in os.walk(PLUGINS):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(os.path.relpath(os.path.join(folder, name), PLUGINS) for name in sorted(files)
                     if name.endswith(".py"))
    return found


def wing_of(rel):
    """The wing or tier of a file (relative to plugins/), or None when it has no place."""
    parts = rel.replace(os.sep, "/").split("/")
    if parts[0] == "module_utils":
        return parts[1] if len(parts) >= 3 and parts[1] in MODULE_UTILS_WINGS else None
    return parts[0] if len(parts) == 2 and parts[0] in RANK else None


def name_wing(dotted):
    """The wing or tier of a collection module name ("module_utils.health.gate"), or None."""
    parts = dotted.split(".")
    if parts[0] == "module_utils":
        return parts[1] if len(parts) >= 2 and parts[1] in MODULE_UTILS_WINGS else None
    return parts[0] if parts[0] in RANK else None


def collection_imports(path):
    """Names (below plugins., e.g. "module_utils.health.gate") of every collection module ``path``
    imports, lazy ones included; ``from X import y`` gives X.y (a module or a name in X)."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        found.extend(name[len(PREFIX):] for name in names if name.startswith(PREFIX))
    return found


def module_file(dotted):
    """The file of a collection module name (below plugins/), or None for a name inside a module."""
    parts = dotted.split(".")
    while parts:
        base = os.path.join(PLUGINS, *parts)
        if os.path.isfile(base + ".py"):
            return "/".join(parts) + ".py"
        if os.path.isfile(os.path.join(base, "__init__.py")):
            return "/".join(parts) + "/__init__.py"
        parts = parts[:-1]
    return None


def violations(rel, imported):
    """What is wrong with file ``rel`` (relative to plugins/) importing the collection names ``imported``."""
    own = wing_of(rel)
    wrong = []
    for dotted in imported:
        target = name_wing(dotted)
        if target is None:
            wrong.append("%s imports %s, which is in no wing" % (rel, dotted))
        elif target != own and RANK[target] >= RANK[own]:
            wrong.append("%s (%s) imports %s (%s): not a lower rank" % (rel, own, dotted, target))
        elif target == AGENT != own and (dotted.split(".") + [""])[2] not in AGENT_SHARED:
            wrong.append("%s imports the agent's %s: only the agent may" % (rel, dotted))
    return wrong


def test_every_python_file_has_exactly_one_place():
    files = python_files()
    assert files
    homeless = [rel for rel in files if wing_of(rel) is None]
    assert homeless == [], "files in no wing or tier (docs/contracts.md, 'Code layout: wings')"
    on_disk = sorted(d for d in os.listdir(MODULE_UTILS)
                     if os.path.isdir(os.path.join(MODULE_UTILS, d)) and d != "__pycache__")
    assert on_disk == sorted(MODULE_UTILS_WINGS)


def test_imports_point_down_or_stay_in_their_wing():
    wrong = []
    for rel in python_files():
        if wing_of(rel) is not None:
            wrong.extend(violations(rel, collection_imports(os.path.join(PLUGINS, rel))))
    assert wrong == []


def test_each_wing_states_its_job_and_what_it_may_import():
    for wing in MODULE_UTILS_WINGS:
        with open(os.path.join(MODULE_UTILS, wing, "__init__.py")) as handle:
            tree = ast.parse(handle.read())
        text = ast.get_docstring(tree)
        assert text and "\n\n" not in text.strip(), wing  # one paragraph
        assert "import" in text, wing  # says what it may import
        assert len(tree.body) == 1, wing  # a docstring, no code: shipped with every module that imports the wing


def module_utils_graph():
    graph = {}
    for rel in python_files():
        if rel.startswith("module_utils" + os.sep) and not rel.endswith("__init__.py"):
            targets = {module_file(name) for name in collection_imports(os.path.join(PLUGINS, rel))}
            graph[rel] = sorted(t for t in targets if t and t != rel and not t.endswith("__init__.py"))
    return graph


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


def test_the_agent_pipeline_imports_only_downwards():
    rank = {"module_utils/agent/%s.py" % mod: index for index, layer in enumerate(AGENT_PIPELINE) for mod in layer}
    graph = module_utils_graph()
    upward = ["%s imports %s" % (mod, dep) for mod in rank for dep in graph.get(mod, [])
              if dep in rank and rank[dep] > rank[mod]]
    assert upward == []
    # every file of the agent wing has its place in the layers
    assert sorted(m for m in graph if m.startswith("module_utils/agent/")) == sorted(rank)
    assert all("module_utils/agent/%s.py" % name in rank for name in AGENT_SHARED)


def test_nothing_but_module_utils_is_copied_to_nodes():
    with open(os.path.join(REPO, "roles", "node_health_agent", "vars", "main.yml")) as handle:
        files = yaml.safe_load(handle)["__node_health_agent_files"]
    assert files and all(f.startswith("module_utils/") for f in files), files


def test_a_lazy_controller_import_would_be_caught(tmp_path):
    """The scanner sees a lazy import inside a function (the form the agent once used)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ansible_collections.gpufleet.cluster.plugins.filter.health_gate import x\n")
    assert collection_imports(str(probe)) == ["filter.health_gate.x"]
    assert violations("module_utils/health/probe.py", collection_imports(str(probe)))


def test_the_sideways_imports_of_issue_43_would_be_caught():
    """The three borrowings from the agent issue 43 names, an upward and a flat import: each refused."""
    cases = {
        "module_utils/remediation/remediation.py": "module_utils.agent.agent_slurm.parse_show_node",
        "filter/agent_status.py": "module_utils.agent.agent_cycle.result_max_age",
        "modules/node_write.py": "module_utils.agent.agent_kube.write_device_taints",
        "module_utils/gpu/dcgm.py": "module_utils.rdma.perftest.run",  # same-rank wing / upward
        "module_utils/core/checks.py": "module_utils.health.gate.decide",  # upward
        "module_utils/core/clock.py": "module_utils.records.RecordError",  # a flat module: no wing
        "modules/gpu_facts.py": "plugin_utils.gpufleet_tier.tier_default",  # a module on the node
    }
    for rel, dotted in cases.items():
        assert violations(rel, [dotted]), (rel, dotted)
    # and what is allowed stays allowed
    assert violations("module_utils/agent/agent_cycle.py", ["module_utils.agent.agent_slurm.publish"]) == []
    assert violations("filter/health_gate.py", ["module_utils.health.gate.decide"]) == []
    assert violations("filter/agent_status.py", ["module_utils.agent.health_record.parse_health"]) == []
    assert violations("module_utils/rdma/topology.py", ["module_utils.gpu.gpu.nvidia_pci_functions"]) == []
