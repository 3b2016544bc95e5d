"""Red team of issue 43's layering rule (docs/contracts.md "Code layout: wings", each wing's
__init__.py docstring, CONTRIBUTING.md, README "Where each behaviour lives").

Each attack copies plugins/ to tmp_path, makes ONE forbidden change and runs the checks of
tests/unit/test_layering.py on the copy (its PLUGINS / MODULE_UTILS pointed at the copy): the rule
must refuse the change with a message naming the changed file. Then the promises are checked on the
real tree with a scanner of this file's own (relative and string imports resolved too).
"""

import ast
import glob
import os
import re
import shutil

import pytest
import test_layering as layering
import yaml
from conftest import REPO

PLUGINS = os.path.join(REPO, "plugins")
P = "ansible_collections.gpufleet.cluster.plugins."
AGENT_KUBE = P + "module_utils.agent.agent_kube"

CHECKS = (
    layering.test_every_python_file_has_exactly_one_place,
    layering.test_no_symlinks_and_nothing_but_python_and_documented_data,
    layering.test_imports_point_down_or_stay_in_their_wing,
    layering.test_each_wing_states_its_job_and_what_it_may_import,
    layering.test_module_utils_have_no_import_circle,
    layering.test_the_agent_pipeline_imports_only_downwards,
)


@pytest.fixture
def tree(tmp_path):
    dest = tmp_path / "plugins"
    shutil.copytree(PLUGINS, str(dest), symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


_SCAN = layering.collection_imports
_SCANNED = {}


def scan_once(path):
    """test_layering.collection_imports, remembered per file (place below plugins/, content; the copies
    share most files, and a relative import depends on the place)."""
    with open(path, "rb") as handle:
        key = (os.path.relpath(path, layering.PLUGINS), handle.read())
    if key not in _SCANNED:
        _SCANNED[key] = _SCAN(path)
    return list(_SCANNED[key])


def refusals(monkeypatch, plugins):
    """The failure messages of test_layering's checks run on the tree ``plugins``."""
    monkeypatch.setattr(layering, "PLUGINS", str(plugins))
    monkeypatch.setattr(layering, "collection_imports", scan_once)
    monkeypatch.setattr(layering, "MODULE_UTILS", str(plugins / "module_utils"))
    found = []
    for check in CHECKS:
        try:
            check()
        except (AssertionError, OSError, SyntaxError) as error:
            found.append("%s: %s" % (check.__name__, error))
    return found


def assert_refused(monkeypatch, plugins, *names):
    found = refusals(monkeypatch, plugins)
    assert found, "the layering checks accepted the change to %s" % (names,)
    for name in names:
        assert any(name in message for message in found), (name, found)


def append(plugins, rel, text):
    path = plugins / rel
    path.write_text(path.read_text() + "\n\n" + text + "\n")


def write(plugins, rel, text):
    path = plugins / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def first_py(folder):
    return sorted(n for n in os.listdir(os.path.join(PLUGINS, folder)) if n.endswith(".py") and n != "__init__.py")[0]


MODULE = "modules/" + first_py("modules")
FILTER = "filter/" + first_py("filter")


# ---- the real tree -------------------------------------------------------------------------


def test_the_real_tree_copy_passes(monkeypatch, tree):
    assert refusals(monkeypatch, tree) == []


def test_every_real_file_is_in_exactly_one_wing_and_no_symlinks():
    wings = {w for layer in layering.WINGS for w in layer}
    for folder, dirs, files in os.walk(PLUGINS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in dirs + files:
            assert not os.path.islink(os.path.join(folder, name)), os.path.join(folder, name)
    for rel in layering.python_files():
        parts = rel.split(os.sep)
        homes = [w for w in wings if (parts[0] == "module_utils" and parts[1] == w) or
                 (parts[0] != "module_utils" and parts[0] == w)]
        assert len(homes) == 1, (rel, homes)
        assert layering.wing_of(rel) == homes[0]


# ---- one forbidden change each: the checker refuses, naming the file -----------------------


def test_module_importing_an_agent_file(monkeypatch, tree):
    append(tree, MODULE, "from %s import write_device_taints" % AGENT_KUBE)
    assert_refused(monkeypatch, tree, MODULE)


def test_filter_importing_agent_kube(monkeypatch, tree):
    append(tree, FILTER, "from %smodule_utils.agent import agent_kube" % P)
    assert_refused(monkeypatch, tree, FILTER)


def test_core_importing_gpu(monkeypatch, tree):
    append(tree, "module_utils/core/clock.py", "from %smodule_utils.gpu import gpu" % P)
    assert_refused(monkeypatch, tree, "module_utils/core/clock.py")


def test_health_importing_remediation(monkeypatch, tree):
    append(tree, "module_utils/health/gate.py", "from %smodule_utils.remediation import breaker" % P)
    assert_refused(monkeypatch, tree, "module_utils/health/gate.py")


def test_same_rank_wings_importing_each_other(monkeypatch, tree):
    append(tree, "module_utils/gpu/xid.py", "from %smodule_utils.kube import kube_node" % P)
    append(tree, "module_utils/kube/kube_node.py", "from %smodule_utils.gpu import xid" % P)
    assert_refused(monkeypatch, tree, "module_utils/gpu/xid.py", "module_utils/kube/kube_node.py")


def test_capture_and_remediation_importing_each_other(monkeypatch, tree):
    append(tree, "module_utils/remediation/breaker.py", "from %smodule_utils.capture import capture" % P)
    assert_refused(monkeypatch, tree, "module_utils/remediation/breaker.py")


def test_import_inside_a_function(monkeypatch, tree):
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, "def _probe():\n    from %s import write_device_taints\n    return write_device_taints" % AGENT_KUBE)
    assert_refused(monkeypatch, tree, rel)


def test_import_inside_try_except(monkeypatch, tree):
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, "try:\n    from %s import write_device_taints\nexcept ImportError:\n    pass" % AGENT_KUBE)
    assert_refused(monkeypatch, tree, rel)


def test_import_under_type_checking(monkeypatch, tree):
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from %s import write_device_taints" % AGENT_KUBE)
    assert_refused(monkeypatch, tree, rel)


@pytest.mark.parametrize("line", [
    "import %s as _kube" % AGENT_KUBE,
    "from %smodule_utils.agent import agent_kube as _kube" % P,
    "from %s import write_device_taints as _w" % AGENT_KUBE,
    "from %smodule_utils import agent as _agent" % P,
    "from %smodule_utils.agent import agent_config, agent_kube" % P,
])
def test_aliased_and_packaged_forms(monkeypatch, tree, line):
    rel = "module_utils/health/kube_node_write.py"
    append(tree, rel, line)
    assert_refused(monkeypatch, tree, rel)


def test_new_file_in_module_utils_root(monkeypatch, tree):
    write(tree, "module_utils/helpers.py", "X = 1")
    assert_refused(monkeypatch, tree, "module_utils/helpers.py")


def test_file_in_a_directory_that_is_no_wing(monkeypatch, tree):
    write(tree, "module_utils/misc/__init__.py", '"""Misc."""')
    write(tree, "module_utils/misc/util.py", "X = 1")
    # the refusal lists the directory's files; pytest's diff shows the first (misc/__init__.py)
    assert_refused(monkeypatch, tree, "module_utils/misc/")


@pytest.mark.parametrize("rel", ["inventory/gpufleet.py", "test/gpufleet.py", "connection/gpufleet.py",
                                 "filter/sub/nested.py", "cache/gpufleet.py"])
def test_plugin_type_directory_not_in_the_table(monkeypatch, tree, rel):
    write(tree, rel, "from %smodule_utils.core import records" % P)
    assert_refused(monkeypatch, tree, rel)


def test_a_filter_importing_a_lookup_same_rank(monkeypatch, tree):
    lookup = first_py("lookup")[:-3]
    append(tree, FILTER, "from %slookup import %s" % (P, lookup))
    assert_refused(monkeypatch, tree, FILTER)


def test_module_utils_importing_a_controller_plugin(monkeypatch, tree):
    rel = "module_utils/agent/agent.py"
    append(tree, rel, "from %splugin_utils import gpufleet_tier" % P)
    assert_refused(monkeypatch, tree, rel)


def test_relative_import_of_an_agent_file(monkeypatch, tree):
    """'its imports ... point only into its own wing or to a lower rank': a relative import is an import."""
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, "from ..agent import agent_kube")
    assert_refused(monkeypatch, tree, rel)


def test_relative_import_upward_from_core(monkeypatch, tree):
    rel = "module_utils/core/records.py"
    append(tree, rel, "from ..gpu.gpu import *  # noqa")
    assert_refused(monkeypatch, tree, rel)


@pytest.mark.parametrize("line", [
    "import importlib\n_kube = importlib.import_module(%r)" % AGENT_KUBE,
    "_kube = __import__(%r, fromlist=['x'])" % AGENT_KUBE,
])
def test_string_import_of_an_agent_file(monkeypatch, tree, line):
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, line)
    assert_refused(monkeypatch, tree, rel)


def test_python_module_with_a_pyw_suffix(monkeypatch, tree):
    """'checks every Python file under plugins/': ansible-core finds a collection module as
    plugins/modules/<name>.* (loader.py: glob(<name> + '.*'), only MODULE_IGNORE_EXTS left out) and
    runs it as a new-style Python module by its 'from ansible.module_utils' import: a .pyw module
    runs (checked: ansible localhost -m <ns>.<coll>.sneaky on a scratch collection answered SUCCESS)."""
    rel = "modules/sneaky.pyw"
    write(tree, rel, "#!/usr/bin/python\nfrom ansible.module_utils.basic import AnsibleModule\n"
                     "from %s import write_device_taints" % AGENT_KUBE)
    assert_refused(monkeypatch, tree, rel)


def test_a_file_symlinked_into_a_second_wing(monkeypatch, tree):
    """'each belongs to exactly one wing': the agent's publisher linked into health is in two."""
    os.symlink("../agent/agent_kube.py", str(tree / "module_utils/health/node_publish.py"))
    append(tree, FILTER, "from %smodule_utils.health import node_publish" % P)
    assert_refused(monkeypatch, tree, "module_utils/health/node_publish.py")


def test_a_directory_symlinked_into_a_wing(monkeypatch, tree):
    os.symlink("../agent", str(tree / "module_utils/health/borrowed"))
    append(tree, FILTER, "from %smodule_utils.health.borrowed import agent_kube" % P)
    assert_refused(monkeypatch, tree, FILTER)


def test_rdma_importing_kube(monkeypatch, tree):
    """rdma/__init__.py: 'It imports the core and gpu wings.' (contracts.md: 'It imports core and gpu.')"""
    rel = "module_utils/rdma/ofed.py"
    append(tree, rel, "from %smodule_utils.kube import kube_node" % P)
    assert_refused(monkeypatch, tree, rel)


def test_doc_fragment_importing_module_utils(monkeypatch, tree):
    """contracts.md: 'doc_fragments import nothing.'"""
    rel = "doc_fragments/" + first_py("doc_fragments")
    append(tree, rel, "from %smodule_utils.core import records" % P)
    assert_refused(monkeypatch, tree, rel)


def test_filter_importing_a_module(monkeypatch, tree):
    """contracts.md: 'action, callback, filter and lookup plugins import plugin_utils and module_utils'."""
    append(tree, FILTER, "from %smodules import %s" % (P, first_py("modules")[:-3]))
    assert_refused(monkeypatch, tree, FILTER)


@pytest.mark.parametrize("line", [
    "from importlib import import_module as _load\n_kube = _load(%r)" % AGENT_KUBE,
    "import importlib\n_kube = importlib.import_module('..agent.agent_kube', package=__package__)",
    "from ansible_collections.gpufleet.cluster import plugins as _plugins",
])
def test_other_string_and_package_imports_of_an_agent_file(monkeypatch, tree, line):
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, line)
    assert_refused(monkeypatch, tree, rel)


def test_a_dynamic_import_of_no_string_constant(monkeypatch, tree):
    """A name the scan cannot read is refused unless test_layering.DYNAMIC_IMPORTS says why it is safe."""
    rel = "module_utils/remediation/remediation.py"
    append(tree, rel, "import importlib\n_NAME = 'ansible_collections' + '.x'\n_mod = importlib.import_module(_NAME)")
    assert_refused(monkeypatch, tree, rel)


def test_a_text_file_hidden_in_a_wing(monkeypatch, tree):
    write(tree, "module_utils/health/notes.txt", "not code")
    assert_refused(monkeypatch, tree, "module_utils/health/notes.txt")


# ---- the promises on the real tree, with a scanner of this file ----------------------------


def imported_names(path, rel):
    """Dotted names below plugins. that file plugins/<rel> imports: absolute, relative (resolved),
    importlib.import_module / __import__ of a string constant; a ``from X import y`` gives X.y."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    package = rel[:-3].split("/")[:-1]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names.extend(module + "." + a.name for a in node.names)
            elif node.module and node.module.startswith(P):
                names.extend(node.module[len(P):] + "." + a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.extend(a.name[len(P):] for a in node.names if a.name.startswith(P))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.startswith(P):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                names.append(node.args[0].value[len(P):])
    return names


BELOW_HEALTH = {"core", "gpu", "kube", "slurm", "tuning", "rdma", "health"}
MU = BELOW_HEALTH | {"capture", "remediation", "agent"}
# what each wing/tier may import, word for word from its docstring / contracts.md
ALLOWED = {
    "core": {"core"},
    "gpu": {"gpu", "core"}, "kube": {"kube", "core"}, "slurm": {"slurm", "core"}, "tuning": {"tuning", "core"},
    "rdma": {"rdma", "core", "gpu"},
    "health": BELOW_HEALTH,
    "capture": BELOW_HEALTH | {"capture"}, "remediation": BELOW_HEALTH | {"remediation"},
    "agent": MU,
    "modules": MU | {"modules"},
    "plugin_utils": MU | {"plugin_utils"},
    "doc_fragments": set(),
    "action": MU | {"plugin_utils", "action"}, "callback": MU | {"plugin_utils", "callback"},
    "filter": MU | {"plugin_utils", "filter"}, "lookup": MU | {"plugin_utils", "lookup"},
}
SHARED = ("agent_config", "health_record")


def target_wing(dotted):
    parts = dotted.split(".")
    if parts[0] == "module_utils":
        return parts[1] if len(parts) > 1 else None
    return parts[0]


def test_this_files_scanner_sees_relative_and_string_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from ..agent import agent_kube\nfrom . import gate\nimport importlib\n"
                     "def f():\n    importlib.import_module(%r)\n    __import__(%r)\n" % (AGENT_KUBE, AGENT_KUBE))
    assert imported_names(str(probe), "module_utils/health/probe.py") == [
        "module_utils.agent.agent_kube", "module_utils.health.gate",
        "module_utils.agent.agent_kube", "module_utils.agent.agent_kube"]


def test_real_tree_obeys_the_documented_rule_with_relative_and_string_imports():
    wrong = []
    for found in layering.python_files():
        rel = found.replace(os.sep, "/")
        own = layering.wing_of(rel)
        for dotted in imported_names(os.path.join(PLUGINS, rel), rel):
            target = target_wing(dotted)
            if target not in ALLOWED[own]:
                wrong.append("%s (%s) imports %s" % (rel, own, dotted))
            elif target == "agent" != own and dotted.split(".")[2] not in SHARED:
                wrong.append("%s imports the agent's %s" % (rel, dotted))
    assert wrong == []


def test_no_product_python_file_over_900_lines():
    long_files = []
    for rel in layering.python_files():
        with open(os.path.join(PLUGINS, rel)) as handle:
            count = sum(1 for _ in handle)
        if count > 900:
            long_files.append((rel, count))
    assert long_files == []


def module_path(parts):
    base = os.path.join(PLUGINS, *parts)
    if os.path.isfile(base + ".py"):
        return "/".join(parts) + ".py"
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return "/".join(parts) + "/__init__.py"
    return None


def closure_of_agent_wing():
    todo = ["module_utils/agent/" + n for n in os.listdir(os.path.join(PLUGINS, "module_utils", "agent"))
            if n.endswith(".py")]
    seen = set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for dotted in imported_names(os.path.join(PLUGINS, rel), rel):
            parts = dotted.split(".")
            for depth in range(2, len(parts) + 1):
                found = module_path(parts[:depth])
                if found:
                    todo.append(found)
    return seen


def test_agent_role_file_list_is_the_agent_wing_import_closure():
    with open(os.path.join(REPO, "roles", "node_health_agent", "vars", "main.yml")) as handle:
        listed = yaml.safe_load(handle)["__node_health_agent_files"]
    assert len(listed) == len(set(listed)), "duplicates in __node_health_agent_files"
    assert sorted(listed) == sorted(closure_of_agent_wing())
    # every wing whose files are shipped ships its __init__.py (docs: 'the wings' __init__.py included')
    for rel in listed:
        assert "module_utils/%s/__init__.py" % rel.split("/")[1] in listed, rel


def readme_table_rows():
    with open(os.path.join(REPO, "README.md")) as handle:
        text = handle.read()
    start = text.index("### Where each behaviour lives")
    section = text[start:text.index("\n## ", start)]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| question")]


def test_readme_table_paths_exist():
    rows = readme_table_rows()
    assert len(rows) >= 20
    missing = []
    for row in rows:
        paths = re.findall(r"\]\(([^)]+)\)", row)
        paths += [p for p in re.findall(r"`([^`\s]+)`", row)
                  if "/" in p and p.split("/")[0] in ("plugins", "roles", "playbooks", "docs", "tests")]
        for path in paths:
            pattern = re.sub(r"<[^>]+>", "*", path)
            if not glob.glob(os.path.join(REPO, pattern)):
                missing.append(path)
    assert missing == []


def test_contracts_wing_paragraphs_name_files_of_that_wing():
    with open(os.path.join(REPO, "docs", "contracts.md")) as handle:
        text = handle.read()
    start = text.index("## Code layout: wings")
    section = text[start:text.index("\n## ", start + 5)]
    missing = []
    for wing, body in re.findall(r"\*\*([a-z_]+)\*\* \(`module_utils/[a-z_]+/`\):(.*?)(?=\n\n|\Z)", section, re.S):
        for name in re.findall(r"\(`([a-z_*]+)`", body) + re.findall(r", `([a-z_*]+)`\)", body):
            if not glob.glob(os.path.join(PLUGINS, "module_utils", wing, name.rstrip("*") + "*.py")):
                missing.append((wing, name))
    assert missing == []


def test_module_utils_has_no_init_and_each_wing_has_one():
    assert not os.path.exists(os.path.join(PLUGINS, "module_utils", "__init__.py"))
    for wing in layering.MODULE_UTILS_WINGS:
        assert os.path.isfile(os.path.join(PLUGINS, "module_utils", wing, "__init__.py")), wing


def test_readme_table_modules_filters_roles_exist_and_are_documented():
    """README: 'Module, filter and role names lead to their documentation (ansible-doc ...)': a
    module file, a role directory, a filter's documentation (plugins/filter/<name>.yml)."""
    names = set()
    for row in readme_table_rows():
        for kind, listing in re.findall(r"\b(modules?|filters?|roles?) ((?:`[a-z0-9_]+`(?:, | and )?)+)", row):
            for name in re.findall(r"`([a-z0-9_]+)`", listing):
                names.add((kind.rstrip("s"), name))
        for kind, name in re.findall(r"\b(lookup|callback) `([a-z0-9_]+)`", row):
            names.add((kind, name))
    assert len(names) > 30
    where = {"module": "plugins/modules/%s.py", "filter": "plugins/filter/%s.yml", "role": "roles/%s/README.md",
             "lookup": "plugins/lookup/%s.py", "callback": "plugins/callback/%s.py"}
    missing = [(k, n) for k, n in sorted(names) if not os.path.isfile(os.path.join(REPO, where[k] % n))]
    assert missing == []

