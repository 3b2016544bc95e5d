"""Role node_health_agent: the files it copies are the import closure of the agent wing
(plugins/module_utils/agent/; nothing missing on the node, nothing extra, the wings' package
__init__ files included), and its defaults are the agent's."""

import ast
import os

import test_layering as layering
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent
from conftest import REPO

ROLE = os.path.join(REPO, "roles", "node_health_agent")


def module_file(parts):
    """The file (relative to plugins/) of module or package ``parts``, or None (a name in a module,
    or module_utils itself, which has no __init__.py: Ansible and the node treat it as a namespace)."""
    base = os.path.join(REPO, "plugins", *parts)
    if os.path.isfile(base + ".py"):
        return "/".join(parts) + ".py"
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return "/".join(parts) + "/__init__.py"
    return None


def imports(rel):
    """Collection files (relative to plugins/) that plugins/<rel> imports, at any depth: the module
    of ``from X import y`` (X, or X.y when y is a module) and the __init__.py of every package on the way.
    The names are test_layering's scan: relative imports resolved, importlib.import_module / __import__
    of a string included (a dynamic import of anything else test_layering refuses)."""
    found = set()
    for dotted in layering.collection_imports(os.path.join(REPO, "plugins", rel)):
        parts = dotted.split(".")
        found.update(f for f in (module_file(parts[:depth]) for depth in range(2, len(parts) + 1)) if f)
    return found


def closure(start):
    seen, todo = set(), list(start)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        todo.extend(imports(rel))
    return seen


def role_vars():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        return yaml.safe_load(handle)


def test_the_role_copies_exactly_the_agents_import_closure():
    copied = set(role_vars()["__node_health_agent_files"])
    wing = os.path.join(REPO, "plugins", "module_utils", "agent")
    agent_files = ["module_utils/agent/" + name for name in os.listdir(wing) if name.endswith(".py")]
    assert closure(agent_files) == copied


def test_the_closure_sees_wing_packages_and_from_package_imports():
    """``from ...module_utils.core import records`` needs core/__init__.py and core/records.py on the node."""
    found = imports("module_utils/agent/agent_state.py")
    assert {"module_utils/core/__init__.py", "module_utils/core/records.py"} <= found
    assert not any(f.count("/") < 2 for f in found)  # never module_utils/<name>.py: nothing is flat


def test_the_closure_follows_relative_and_string_imports(tmp_path, monkeypatch):
    """A relative import or an importlib.import_module of a string in an agent file is in the closure."""
    plugins = tmp_path / "plugins"
    agent_wing = plugins / "module_utils" / "agent"
    agent_wing.mkdir(parents=True)
    for wing in ("core", "slurm"):
        (plugins / "module_utils" / wing).mkdir()
        (plugins / "module_utils" / wing / "__init__.py").write_text('"""Wing."""\n')
    (plugins / "module_utils" / "core" / "records.py").write_text("X = 1\n")
    (plugins / "module_utils" / "slurm" / "slurm_node.py").write_text("X = 1\n")
    (agent_wing / "__init__.py").write_text('"""Wing."""\n')
    (agent_wing / "agent.py").write_text(
        "import importlib\nfrom ..core import records\n"
        "SLURM = importlib.import_module('ansible_collections.gpufleet.cluster.plugins.module_utils.slurm.slurm_node')\n")
    monkeypatch.setattr(layering, "PLUGINS", str(plugins))
    monkeypatch.setattr("test_agent_role.REPO", str(tmp_path))
    assert closure(["module_utils/agent/agent.py"]) == {
        "module_utils/agent/agent.py", "module_utils/core/__init__.py", "module_utils/core/records.py",
        "module_utils/slurm/__init__.py", "module_utils/slurm/slurm_node.py"}


def test_the_agent_imports_no_ansible_outside_lazy_paths():
    for rel in role_vars()["__node_health_agent_files"]:
        with open(os.path.join(REPO, "plugins", rel)) as handle:
            tree = ast.parse(handle.read())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in top:
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            assert not (module or "").startswith("ansible.") and module != "ansible", (rel, module)


def test_role_defaults_are_the_agents():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert tuple(defaults["node_health_agent_immediate"]) == agent.IMMEDIATE_CHECKS
    assert defaults["node_health_agent_fail_after"] == agent.DEFAULT_FAIL_AFTER
    assert defaults["node_health_agent_recover_after"] == agent.DEFAULT_RECOVER_AFTER


def test_npd_monitor_config_follows_the_custom_plugin_format():
    """Fields of node-problem-detector's config/custom-plugin-monitor.json and CustomRule
    (pkg/custompluginmonitor/types/types.go: path, args, timeout); message length 80 as npd_status cuts."""
    import json

    with open(os.path.join(ROLE, "files", "npd", "gpufleet-health-monitor.json")) as handle:
        config = json.load(handle)
    assert config["plugin"] == "custom" and config["pluginConfig"]["max_output_length"] == 80
    rule = config["rules"][0]
    assert rule["type"] == "permanent" and rule["condition"] == config["conditions"][0]["type"]
    assert rule["path"] == "/usr/bin/python3"
    assert rule["args"][:4] == ["-s", "-S", "/opt/gpufleet/agent/gpufleet-health-agent", "--npd"]
    assert set(rule) <= {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}


def render_unit(mode, interval=60):
    """The service unit as the role writes it (role vars and defaults the template reads)."""
    import jinja2

    with open(os.path.join(ROLE, "templates", "gpufleet-health-agent.service.j2")) as handle:
        template = jinja2.Environment(trim_blocks=True, lstrip_blocks=False, undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=True).from_string(handle.read())
    return template.render(dict(role_vars(), ansible_managed="managed", node_health_agent_mode=mode,
                                node_health_agent_interval=interval, node_health_agent_python="/usr/bin/python3",
                                node_health_agent_environment={"PYTHONPATH": "/opt/fake-nvml"}))


def unit_lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_daemon_mode_is_the_default_and_runs_the_loop_resident():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["node_health_agent_mode"] == "daemon"
    with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as handle:
        spec = yaml.safe_load(handle)["argument_specs"]["main"]["options"]["node_health_agent_mode"]
    assert spec["choices"] == ["daemon", "timer"] and spec["default"] == "daemon"
    lines = unit_lines(render_unit("daemon"))
    assert "Type=notify" in lines and "Restart=always" in lines and "StartLimitIntervalSec=0" in lines
    assert ("ExecStart=/usr/bin/python3 -s -S /opt/gpufleet/agent/gpufleet-health-agent --loop "
            "/etc/gpufleet/agent.json") in lines
    assert "WatchdogSec=180" in lines and "NotifyAccess=main" in lines and "MemoryMax=256M" in lines
    assert lines[-2:] == ["[Install]", "WantedBy=multi-user.target"]
    assert 'Environment="PYTHONPATH=/opt/fake-nvml"' in lines and "Nice=10" in lines


def test_timer_mode_keeps_the_oneshot_without_install_section():
    lines = unit_lines(render_unit("timer", 600))
    assert "Type=oneshot" in lines and "TimeoutStartSec=595" in lines and "StartLimitIntervalSec=0" in lines
    assert "ExecStart=/usr/bin/python3 -s -S /opt/gpufleet/agent/gpufleet-health-agent /etc/gpufleet/agent.json" in lines
    assert "[Install]" not in lines and not any(line.startswith(("Restart=", "WatchdogSec=")) for line in lines)
