"""The collection's Python in wings and tiers (docs/contracts.md, "Code layout: wings"): imports point down.

- every .py file under plugins/ belongs to exactly one wing (a sub-package of plugins/module_utils) or
  tier (modules, plugin_utils, doc_fragments, action, callback, filter, lookup): nothing flat in
  module_utils, no directory outside the table;
- a file imports only what its wing or tier may import (``MAY_IMPORT``, the one table; each wing's
  __init__.py and docs/contracts.md name the same wings), all of it of a lower rank (``WINGS``): lazy
  imports inside functions, relative imports and importlib.import_module / __import__ of a string
  included; a dynamic import of a name that is no string constant is refused but where ``DYNAMIC_IMPORTS``
  says why it never imports the collection; so node-side code (module_utils) never imports a controller
  plugin, a module never imports plugin_utils, doc_fragments import nothing, and wings of one rank never
  import each other;
- nothing under plugins/ is a symlink, and every file is a .py file or documented data (``DATA_FILES``):
  ansible-core loads a module from any suffix (sneaky.pyw), so a file the scan skips could hide one;
- nothing imports the agent wing but the agent itself (role node_health_agent copies its import
  closure to nodes; code borrowed from it sideways would tie the daemon to its borrowers);
- the module_utils import graph has no circle, and the agent's pipeline imports only downward;
- each wing's __init__.py is one paragraph stating its job and what it may import, and no code;
- nothing but module_utils is copied to nodes with the agent.
"""

import ast
import os
import re

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
_BELOW_HEALTH = ("core", "gpu", "kube", "slurm", "tuning", "rdma")
_NOT_AGENT = _BELOW_HEALTH + ("health", "capture", "remediation")
# what each wing or tier may import besides itself, the agent's shared schemas aside (AGENT_SHARED, which
# the controller tiers but doc_fragments may import):
# word for word the "It imports ..." sentence of each wing's __init__.py and its paragraph in
# docs/contracts.md, "Code layout: wings" (test_the_docs_name_the_wings_of_the_table), and all of it of a
# lower rank (test_what_a_wing_may_import_is_of_a_lower_rank)
MAY_IMPORT = {
    "core": (),
    "gpu": ("core",), "kube": ("core",), "slurm": ("core",), "tuning": ("core",),
    "rdma": ("core", "gpu"),
    "health": _BELOW_HEALTH,
    "capture": _BELOW_HEALTH + ("health",),
    "remediation": _BELOW_HEALTH + ("health",),
    "agent": _NOT_AGENT,
    "modules": _NOT_AGENT,
    "plugin_utils": _NOT_AGENT,
    "doc_fragments": (),
    "action": _NOT_AGENT + ("plugin_utils",),
    "callback": _NOT_AGENT + ("plugin_utils",),
    "filter": _NOT_AGENT + ("plugin_utils",),
    "lookup": _NOT_AGENT + ("plugin_utils",),
}
# tiers that may not import their own tier either (docs/contracts.md: "doc_fragments import nothing")
NOT_EVEN_ITSELF = ("doc_fragments",)
# files whose importlib.import_module / __import__ takes a name that is no string constant, and why that
# never reaches the collection; every other such call under plugins/ is refused
DYNAMIC_IMPORTS = {
    "module_utils/core/nvml.py": "imports the NVML binding by its configured module name (pynvml by "
                                 "default), a third-party binding, never a collection module",
}
# files under plugins/ that are not Python: the documented data, by directory (relative to plugins/)
# and suffix; anything else (a module sneaky.pyw, notes.txt) is refused
DATA_FILES = {
    "filter": (".yml",),  # the filters' documentation (ansible-doc -t filter), one per filter
    "plugin_utils": (".yml",),  # compatibility.yml, the compatibility matrix compatibility.py reads
    "plugin_utils/templates": (".html.j2",),  # the fleet report's HTML template
}
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
    ("agent_events", "agent_netlink", "agent_heldfiles"),
    ("agent_signals",),
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


def _package_of(path):
    """The dotted package (below plugins.) of file ``path``, e.g. ["module_utils", "core"], or None."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(PLUGINS)).replace(os.sep, "/")
    if rel.startswith("../"):
        return None
    return rel.split("/")[:-1]


def _resolve(path, level, module):
    """The absolute dotted name of a relative import (``level`` dots, then ``module``) in file ``path``,
    below plugins. (or PREFIX-less marker when it climbs above plugins/)."""
    package = _package_of(path)
    if package is None or level > len(package) + 1:
        return "<relative import beyond plugins/: %s%s>" % ("." * level, module or "")
    base = package[:len(package) - level + 1]
    return ".".join(base + ([module] if module else []))


IMPORT_FUNCTIONS = ("import_module", "__import__")


def collection_imports(path):
    """Names (below plugins., e.g. "module_utils.health.gate") of every collection module ``path``
    imports, lazy ones included; ``from X import y`` gives X.y (a module or a name in X). Relative
    imports are resolved against the file's package; importlib.import_module / __import__ of a string
    constant count as imports; of anything else they give a "<dynamic import ...>" marker."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = []
    functions = set(IMPORT_FUNCTIONS)
    for node in ast.walk(tree):  # from importlib import import_module as load
        if isinstance(node, ast.ImportFrom) and node.module == "importlib":
            functions.update(a.asname for a in node.names if a.name == "import_module" and a.asname)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level:
            module = _resolve(path, node.level, node.module)
            if module.startswith("<"):
                found.append(module)
                continue
            found.extend("%s.%s" % (module, alias.name) if module else alias.name for alias in node.names)
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in functions:
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if arg.value.startswith("."):
                        package = next((k.value for k in node.keywords if k.arg == "package"), None)
                        level = len(arg.value) - len(arg.value.lstrip("."))
                        found.append(_resolve(path, level, arg.value.lstrip(".") or None)
                                     if package is not None else "<relative %s without package>" % called)
                    else:
                        names.append(arg.value)
                else:
                    found.append("<dynamic import: %s of no string constant at line %d>" % (called, node.lineno))
        found.extend(name[len(PREFIX):] for name in names if name.startswith(PREFIX))
        found.extend("<import of the collection package %s>" % name for name in names
                     if name.startswith("ansible_collections.gpufleet") and PREFIX.startswith(name + "."))
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


def may_import(own, target):
    """Whether wing or tier ``own`` may import wing or tier ``target`` (MAY_IMPORT, itself included)."""
    return target in MAY_IMPORT[own] or (target == own and own not in NOT_EVEN_ITSELF)


def _through_symlink(dotted):
    """Whether the file of collection name ``dotted`` is reached through a symlink (a borrowed wing)."""
    found = module_file(dotted)
    if found is None:
        return False
    return os.path.realpath(os.path.join(PLUGINS, found)) != os.path.join(os.path.realpath(PLUGINS), found)


def violations(rel, imported):
    """What is wrong with file ``rel`` (relative to plugins/) importing the collection names ``imported``."""
    rel = rel.replace(os.sep, "/")
    own = wing_of(rel)
    wrong = []
    for dotted in imported:
        if dotted.startswith("<"):
            if not (dotted.startswith("<dynamic import") and rel in DYNAMIC_IMPORTS):
                wrong.append("%s: %s (docs/contracts.md, 'Code layout: wings')" % (rel, dotted))
            continue
        target = name_wing(dotted)
        if target is None:
            wrong.append("%s imports %s, which is in no wing" % (rel, dotted))
        elif target == AGENT != own and (own is None or RANK[own] <= RANK[AGENT] or own in NOT_EVEN_ITSELF
                                         or (dotted.split(".") + [""])[2] not in AGENT_SHARED):
            wrong.append("%s imports the agent's %s: only the agent may (the controller tiers its two "
                         "schemas %s)" % (rel, dotted, " and ".join(AGENT_SHARED)))
        elif own is None or (target != AGENT and not may_import(own, target)):
            wrong.append("%s (%s) imports %s (%s): %s may import only %s" % (
                rel, own, dotted, target, own, ", ".join(MAY_IMPORT.get(own, ())) or "nothing"))
        elif _through_symlink(dotted):
            wrong.append("%s imports %s through a symlink under plugins/" % (rel, dotted))
    return wrong


def test_every_python_file_has_exactly_one_place():
    files = python_files()
    assert files
    homeless = [rel for rel in files if wing_of(rel) is None]
    assert homeless == [], "files in no wing or tier (docs/contracts.md, 'Code layout: wings')"
    on_disk = sorted(d for d in os.listdir(MODULE_UTILS)
                     if os.path.isdir(os.path.join(MODULE_UTILS, d)) and d != "__pycache__")
    assert on_disk == sorted(MODULE_UTILS_WINGS)


def test_no_symlinks_and_nothing_but_python_and_documented_data():
    """A symlink puts a file in two wings (or a wing inside another); a file of another suffix is
    skipped by the scan yet ansible-core runs plugins/modules/<name>.pyw as a module."""
    links, odd = [], []
    for folder, dirs, files in os.walk(PLUGINS):
        here = os.path.relpath(folder, PLUGINS).replace(os.sep, "/")
        for name in dirs + files:
            if os.path.islink(os.path.join(folder, name)):
                links.append(os.path.join(here, name) if here != "." else name)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d)))
        for name in sorted(files):
            rel = os.path.join(here, name).replace(os.sep, "/") if here != "." else name
            if not name.endswith(".py") and not name.endswith(DATA_FILES.get(here, ())) and rel not in links:
                odd.append(rel)
    assert links == [], "symlinks under plugins/: %s" % links
    assert odd == [], "files under plugins/ neither .py nor documented data (DATA_FILES): %s" % odd


def test_what_a_wing_may_import_is_of_a_lower_rank():
    assert sorted(MAY_IMPORT) == sorted(RANK)
    upward = [(own, target) for own, targets in MAY_IMPORT.items() for target in targets
              if RANK[target] >= RANK[own]]
    assert upward == []


def test_imports_point_down_or_stay_in_their_wing():
    wrong = []
    for rel in python_files():
        if wing_of(rel) is not None:
            wrong.extend(violations(rel, collection_imports(os.path.join(PLUGINS, rel))))
    assert wrong == []


def _named_wings(sentence, own):
    """The wings an "It imports ..." sentence names (before any "never"), "every other wing" and
    "every wing below it" spelled out, "nothing" none."""
    sentence = sentence.split("never")[0].split(";")[0]
    if "every other wing" in sentence:
        return {w for w in MODULE_UTILS_WINGS if w != own}
    if "every wing below it" in sentence:
        return {w for w in MODULE_UTILS_WINGS if RANK[w] < RANK[own]}
    return set(re.findall(r"\b(%s)\b" % "|".join(MODULE_UTILS_WINGS), sentence)) - {own}


def _imports_sentence(text):
    found = re.findall(r"It (?:may )?imports? [^.]*\.", " ".join(text.split()))
    assert len(found) == 1, text
    return found[0]


def test_the_docs_name_the_wings_of_the_table():
    """Each wing's __init__.py and its paragraph of docs/contracts.md name exactly what MAY_IMPORT lets
    it import; the tiers' paragraph says what MAY_IMPORT says of the tiers."""
    with open(os.path.join(REPO, "docs", "contracts.md")) as handle:
        text = handle.read()
    start = text.index("## Code layout: wings")
    section = text[start:text.index("\n## ", start + 5)]
    paragraphs = {wing: body for wing, body in
                  re.findall(r"\*\*([a-z_]+)\*\* \(`module_utils/[a-z_]+/`\):(.*?)(?=\n\n|\Z)", section, re.S)}
    assert sorted(paragraphs) == sorted(MODULE_UTILS_WINGS)
    wrong = []
    for wing in MODULE_UTILS_WINGS:
        with open(os.path.join(MODULE_UTILS, wing, "__init__.py")) as handle:
            docstring = ast.get_docstring(ast.parse(handle.read()))
        for where, body in (("__init__.py", docstring), ("contracts.md", paragraphs[wing])):
            if _named_wings(_imports_sentence(body), wing) != set(MAY_IMPORT[wing]):
                wrong.append((wing, where, _imports_sentence(body), MAY_IMPORT[wing]))
    assert wrong == []
    tiers = " ".join(section[section.index("**Controller tiers**"):].split())
    for clause in ("modules are thin adapters over module_utils (never plugin_utils, never the agent",
                   "plugin_utils is the controller's shared code (module_utils and itself)",
                   "action, callback, filter and lookup plugins import plugin_utils and module_utils (never the agent",
                   "doc_fragments import nothing", "agent_config", "health_record"):
        assert clause in tiers, clause
    assert set(MAY_IMPORT["modules"]) == set(MAY_IMPORT["plugin_utils"]) == set(_NOT_AGENT)
    for tier in ("action", "callback", "filter", "lookup"):
        assert set(MAY_IMPORT[tier]) == set(_NOT_AGENT) | {"plugin_utils"}, tier
    assert MAY_IMPORT["doc_fragments"] == () and "doc_fragments" in NOT_EVEN_ITSELF


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
