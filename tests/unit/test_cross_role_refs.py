"""Cross-role references resolve: every role, tasks file, fact and variable that one role,
playbook or the example inventory names in another role exists there.

Checked: rolling_upgrade's component -> role map, its reboot/restart facts (set_fact names of the
roles that own them), every include_role / import_role / roles: name (and its tasks_from file),
every `<role>_*` variable read outside <role> (defined in that role's defaults, vars, set_fact or
register), every gpufleet_tier lookup name, and the gpufleet_* tier table of docs/contracts.md.
"""

import glob
import os
import re

import pytest
import yaml
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER

ROLES_DIR = os.path.join(REPO, "roles")
ROLES = sorted(d for d in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, d)))
# Readers: every role, the playbooks, the example inventory, the molecule scenarios.
READER_GLOBS = ["roles/**/*.yml", "roles/**/*.j2", "playbooks/**/*.yml", "playbooks/**/*.j2",
                "inventories/example/**/*.yml", "molecule/**/*.yml"]
TOKEN = re.compile(r"\b[a-z][a-z0-9_]*\b")


def _yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def _files(patterns):
    out = set()
    for pattern in patterns:
        out.update(glob.glob(os.path.join(REPO, pattern), recursive=True))
    return sorted(out)


def _walk(node):
    """Every dict in a YAML document (tasks, blocks, plays, nested)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _role_name(name):
    return name.split(".")[-1] if isinstance(name, str) else name


def _defined_in_role(role):
    """Variables and facts role ``role`` defines: defaults, vars, set_fact keys, register names."""
    names = set()
    for sub in ("defaults", "vars"):
        for path in glob.glob(os.path.join(ROLES_DIR, role, sub, "*.yml")):
            names.update((_yaml(path) or {}).keys())
    specs = os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml")
    if os.path.exists(specs):  # inputs of every entry point (tasks_from: fault, ...)
        for entry in (_yaml(specs).get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    for path in glob.glob(os.path.join(ROLES_DIR, role, "tasks", "**", "*.yml"), recursive=True):
        for item in _walk(_yaml(path)):
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(item.get(key), dict):
                    names.update(item[key])
            if isinstance(item.get("register"), str):
                names.add(item["register"])
    return names


DEFINED = {role: _defined_in_role(role) for role in ROLES}


def _set_facts_anywhere():
    facts = set()
    for role in ROLES:
        facts |= DEFINED[role]
    return facts


def _owner(token):
    """The role whose prefix ``token`` carries (the longest role name matching), or None."""
    owners = [role for role in ROLES if token.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def _keys_in(paths):
    """Every mapping key in these YAML files (variables a molecule scenario sets for itself)."""
    keys = set()
    for path in paths:
        for item in _walk(_yaml(path)):
            keys.update(k for k in item if isinstance(k, str))
    return keys


def _local_names(path, text):
    """Names a non-role reader defines for itself: a molecule scenario's own variables, and a
    playbook's inputs read as `name | default(...)` (play keywords passed with -e)."""
    rel = os.path.relpath(path, REPO).split(os.sep)
    names = set(re.findall(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(", text))
    if rel[0] == "molecule" and len(rel) > 2:
        names |= _keys_in(glob.glob(os.path.join(REPO, rel[0], rel[1], "**", "*.yml"), recursive=True))
    return names


def _reader_role(path):
    rel = os.path.relpath(path, REPO).split(os.sep)
    return rel[1] if rel[0] == "roles" and len(rel) > 1 else None


def test_rolling_upgrade_component_roles_exist():
    defaults = _yaml(os.path.join(ROLES_DIR, "rolling_upgrade", "defaults", "main.yml"))
    spec = _yaml(os.path.join(ROLES_DIR, "rolling_upgrade", "meta", "argument_specs.yml"))
    spec_default = spec["argument_specs"]["main"]["options"]["rolling_upgrade_component_roles"]["default"]
    assert spec_default == defaults["rolling_upgrade_component_roles"]
    for component, role in defaults["rolling_upgrade_component_roles"].items():
        assert _role_name(role) in ROLES, "rolling_upgrade: component %s maps to role %s, which does not exist" % (
            component, role)


def test_rolling_upgrade_reboot_facts_are_set_by_a_role():
    defaults = _yaml(os.path.join(ROLES_DIR, "rolling_upgrade", "defaults", "main.yml"))
    spec = _yaml(os.path.join(ROLES_DIR, "rolling_upgrade", "meta", "argument_specs.yml"))
    facts = defaults["rolling_upgrade_reboot_facts"]
    assert spec["argument_specs"]["main"]["options"]["rolling_upgrade_reboot_facts"]["default"] == facts
    for fact in facts:
        owner = _owner(fact)
        assert owner, "rolling_upgrade_reboot_facts: %s names no role" % fact
        assert fact in DEFINED[owner], "rolling_upgrade_reboot_facts: role %s never sets %s" % (owner, fact)
    # an openibd restart the rdma_stack role left pending is honoured
    assert "rdma_stack_restart_required" in facts


def _role_references():
    """(file, role name, tasks_from) for every include_role / import_role / roles: entry."""
    refs = []
    for path in _files(["roles/**/*.yml", "playbooks/**/*.yml", "molecule/**/*.yml", "tests/integration/playbooks/*.yml"]):
        doc = _yaml(path)
        for item in _walk(doc):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if isinstance(item.get(key), dict):
                    refs.append((path, item[key].get("name"), item[key].get("tasks_from")))
            if isinstance(item.get("roles"), list) and "hosts" in item:
                for entry in item["roles"]:
                    name = entry.get("role") or entry.get("name") if isinstance(entry, dict) else entry
                    refs.append((path, name, None))
    return refs


def test_role_references_exist():
    refs = _role_references()
    assert len(refs) > 10  # the scan finds the includes (node_gate, node_pinning, kubernetes_*)
    bad = []
    for path, name, tasks_from in refs:
        role = _role_name(name)
        if "{{" in str(role):  # the component map, checked above
            continue
        where = os.path.relpath(path, REPO)
        if role not in ROLES:
            bad.append("%s: role %s does not exist" % (where, name))
        elif tasks_from and not os.path.exists(os.path.join(ROLES_DIR, role, "tasks", tasks_from if
                                                            tasks_from.endswith(".yml") else tasks_from + ".yml")):
            bad.append("%s: role %s has no tasks file %s" % (where, name, tasks_from))
    assert not bad, "\n".join(bad)


def test_variables_of_other_roles_exist():
    """A `<role>_*` name read outside <role> is defined by <role> (defaults, vars, set_fact, register)."""
    bad = set()
    for path in _files(READER_GLOBS):
        reader = _reader_role(path)
        with open(path) as handle:
            text = handle.read()
        local = _local_names(path, text) if reader is None else set()
        for token in set(TOKEN.findall(text)):
            owner = _owner(token)
            if owner is None or owner == reader or token in DEFINED[owner] or token in local:
                continue
            bad.add("%s reads %s, which role %s does not define" % (os.path.relpath(path, REPO), token, owner))
    assert not bad, "\n".join(sorted(bad))


def test_gpufleet_tier_lookups_name_tier_variables():
    used = set()
    for path in _files(READER_GLOBS + ["plugins/**/*.py"]):
        with open(path) as handle:
            used.update(re.findall(r"gpufleet_tier'\s*,\s*'([a-z0-9_]+)'", handle.read()))
    assert used, "no role reads the gpufleet_* tier"
    assert used - set(TIER) == set(), "unknown tier variables: %s" % sorted(used - set(TIER))


def test_contracts_document_the_tier():
    with open(os.path.join(REPO, "docs", "contracts.md")) as handle:
        text = handle.read()
    section = text.split("## `gpufleet_*` tier", 1)[1]
    rows = dict(re.findall(r"^\| `(gpufleet_[a-z0-9_]+)` \| ([^|]+) \|", section, re.M))
    assert set(rows) >= set(TIER), "docs/contracts.md misses %s" % sorted(set(TIER) - set(rows))
    for name, (default, _meaning) in TIER.items():
        shown = rows[name].strip()
        if default is None:
            assert shown.startswith("unset") or shown.startswith("first"), (name, shown)
        else:
            assert shown == "`%s`" % default, "docs/contracts.md: %s default %s, code %r" % (name, shown, default)


@pytest.mark.parametrize("literal", ["gpufleet.io/unhealthy"])
def test_gate_taint_key_is_stated_once(literal):
    """The taint key is stated once in code, by the gate (module_utils/health/gate.py, DEFAULT_TAINT_KEY,
    which the tier's gpufleet_gate_taint_key takes), and nowhere else: roles, playbooks, templates,
    plugins and inventories (documentation may name it: .md files and modules' DOCUMENTATION,
    EXAMPLES and RETURN)."""
    import re

    docs = re.compile(r'^(DOCUMENTATION|EXAMPLES|RETURN) = r?""".*?^"""', re.S | re.M)
    found = []
    for path in _files(["roles/**/*", "playbooks/**/*", "plugins/**/*.py", "inventories/**/*"]):
        if os.path.isfile(path) and not path.endswith(".md") and "__pycache__" not in path:
            with open(path, errors="replace") as handle:
                if literal in docs.sub("", handle.read()):
                    found.append(os.path.relpath(path, REPO))
    assert found == ["plugins/module_utils/health/gate.py"], found


def _node_validate_task(path):
    """The node_validate task of a playbook, as written there."""
    for item in _walk(_yaml(path)):
        if "gpufleet.cluster.node_validate" in item:
            return item
    raise AssertionError("%s: no node_validate task" % path)


def _module_args_set(args):
    """node_validate's module arguments (its `invocation`) without the values that are the module's
    defaults, i.e. what the task and the tier set (a default the tier states, e.g. link_layer any, is
    kept when the tier states it: see the callers)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import node_argspec

    spec = node_argspec(FAMILIES)
    out = {"root": args["root"]}
    for family in ("gpu", "rdma", "tuning"):
        options = spec[family]["options"]
        out[family] = dict((key, value) for key, value in args[family].items()
                           if value != options[key].get("default"))
    return out


def _renderer(tmp_path, inventory, host, msg):
    """A function running a one-task play on ``host`` of ``inventory`` that renders ``msg`` (a dict
    of expressions) with the real role defaults of preflight and rolling_upgrade in scope; extra
    ansible-playbook arguments go to the call."""
    import json
    import subprocess

    ru_defaults = _yaml(os.path.join(ROLES_DIR, "rolling_upgrade", "defaults", "main.yml"))
    pf_defaults = _yaml(os.path.join(ROLES_DIR, "preflight", "defaults", "main.yml"))
    rs_defaults = _yaml(os.path.join(ROLES_DIR, "rdma_stack", "defaults", "main.yml"))
    # The role defaults live in a throw-away role's defaults, so that they have a role default's
    # precedence (an inventory value wins over them, as on a real run).
    role = tmp_path / "roles" / "render"
    (role / "defaults").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "defaults" / "main.yml").write_text(yaml.safe_dump({
        "rolling_upgrade_gpu_health": ru_defaults["rolling_upgrade_gpu_health"],
        "rolling_upgrade_rdma_validate": ru_defaults["rolling_upgrade_rdma_validate"],
        "rolling_upgrade_validate_root": ru_defaults["rolling_upgrade_validate_root"],
        "rolling_upgrade_validate_gpu": ru_defaults["rolling_upgrade_validate_gpu"],
        "rolling_upgrade_validate_rdma": ru_defaults["rolling_upgrade_validate_rdma"],
        "rolling_upgrade_validate_environment": ru_defaults["rolling_upgrade_validate_environment"],
        "preflight_expected_gpus": pf_defaults["preflight_expected_gpus"],
        "preflight_sysfs_root": pf_defaults["preflight_sysfs_root"],
        "rdma_stack_sysfs_root": rs_defaults["rdma_stack_sysfs_root"]}))
    # The node_validate tasks of validate.yml and of the consumers as they are written there (their options
    # are built by the module's action plugin from the tier, from_tier): each runs on this machine and its
    # invocation shows the options it got; the inventory's root need not exist here (failed_when false).
    tasks = [dict(_node_validate_task(path), register="__" + name, failed_when=False)
             for name, path in NODE_VALIDATE_TASKS]
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump(
        [{"name": "render", "ansible.builtin.debug": {"msg": msg}}] + tasks))
    play = [{"hosts": host, "connection": "local", "gather_facts": False, "roles": ["render"]}]
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json", ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"))

    # on this machine whatever the inventory's connection (the lab's hosts are containers)
    local = {"ansible_connection": "local", "ansible_python_interpreter": os.path.join(REPO, ".venv", "bin", "python")}

    def render(*extra):
        proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i",
                               os.path.join(REPO, "inventories", inventory, "hosts.yml"), str(playbook),
                               "-e", json.dumps(local), *extra],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        tasks = out["plays"][0]["tasks"]
        rendered = dict(tasks[0]["hosts"][host]["msg"])
        for (name, _path), task in zip(NODE_VALIDATE_TASKS, tasks[1:]):
            result = task["hosts"].get(host, {})
            if result.get("skipped"):  # the health gate on a host outside gpu_nodes / rdma_nodes
                continue
            assert "invocation" in result, json.dumps(result)[:1500]
            rendered[name] = result["invocation"]["module_args"]
        return rendered

    return render


# The node_validate tasks built from the tier (from_tier), run by _renderer: validate.yml, the health gate
# of kubernetes.yml and rolling_upgrade.
NODE_VALIDATE_TASKS = (
    ("validate", os.path.join(REPO, "playbooks", "validate.yml")),
    ("health_gate", os.path.join(REPO, "playbooks", "kubernetes.yml")),
    ("rolling_upgrade", os.path.join(ROLES_DIR, "rolling_upgrade", "tasks", "check.yml")),
)


def test_consumers_render_one_inventory_value(tmp_path):
    """preflight, validate.yml, the health gate (kubernetes.yml) and rolling_upgrade all take the
    node expectations from the example inventory's gpufleet_* values, each stated once there."""
    consumers = [name for name, _path in NODE_VALIDATE_TASKS]
    render = _renderer(tmp_path, "example", "dgx-01.example.com", dict(preflight="{{ preflight_expected_gpus }}"))
    msg = render()
    assert msg["preflight"] == 8
    for name in consumers:
        # what each module got (link_layer any is also the module's default)
        options = _module_args_set(msg[name])
        assert options["gpu"] == {"expected_count": 8, "expected_driver_version": "580"}, name
        assert options["rdma"] == {"expected_devices": 9, "min_rate_gbps": 200, "require_peermem": True}, name
        assert msg[name]["rdma"]["link_layer"] == "any" and msg[name]["gpu"]["enabled"] is True, name
    # one value moves every consumer
    msg = render("-e", '{"gpufleet_gpu_count": 4}')
    assert msg["preflight"] == 4
    assert {msg[name]["gpu"]["expected_count"] for name in consumers} == {4}


def test_lab_inventory_states_the_node_once(tmp_path):
    """The lab inventory states the simulated node through the tier: preflight, validate.yml and
    rolling upgrades read 8 GPUs, driver 580, 9 RDMA devices and the simulated root from it."""
    consumers = ["validate", "rolling_upgrade"]  # the lab runs no API server, so no health gate
    render = _renderer(tmp_path, "lab", "gpufleet-lab-1", dict(
        preflight="{{ preflight_expected_gpus }}", preflight_root="{{ preflight_sysfs_root }}",
        rdma_stack_root="{{ rdma_stack_sysfs_root }}",
        upgrade_root="{{ rolling_upgrade_validate_root }}"))
    msg = render()
    assert msg["preflight"] == 8
    options = dict((name, _module_args_set(msg[name])) for name in consumers)
    roots = {msg[key] for key in ("preflight_root", "rdma_stack_root", "upgrade_root")}
    assert roots | {options[name]["root"] for name in consumers} == {"/opt/gpufleet-sim/root"}
    for name in consumers:
        assert options[name]["gpu"] == {"expected_count": 8, "expected_driver_version": "580",
                                        "xid_source": "none"}, name
        assert options[name]["rdma"] == {"expected_devices": 9}, name


def test_every_tier_family_reaches_every_node_validate_built_from_the_tier():
    """validate.yml, the health gate of kubernetes.yml and rolling_upgrade build node_validate's
    options from the tier by one path, node_validate's from_tier (its action plugin fills root and all
    three families, gpu, rdma and tuning; explicit options only add to them), so an expectation of the
    tier (e.g. gpufleet_hugepages_2m) is checked, and gates, in every one of them. No node_validate task
    takes the lookup node_validate_options (kept for the agent's configuration, which is no such task)."""
    tasks = []
    for path in _files(["roles/*/tasks/**/*.yml", "playbooks/**/*.yml"]):
        for node in _walk(_yaml(path)):
            if "gpufleet.cluster.node_validate" not in node:
                continue
            assert "node_validate_options" not in str(node), path
            if node["gpufleet.cluster.node_validate"].get("from_tier"):
                tasks.append((os.path.relpath(path, REPO), node))
    assert sorted(path for path, _ in tasks) == [
        "playbooks/kubernetes.yml", "playbooks/tasks/remediate-validate.yml", "playbooks/validate.yml",
        "roles/rolling_upgrade/tasks/check.yml"]
    for path, node in tasks:
        assert node["gpufleet.cluster.node_validate"]["from_tier"] is True and "args" not in node, path


def test_tier_defaults_read_the_inventory_only_when_computed_from_it():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_default
    calls = []

    def inventory():
        calls.append(1)
        return {"kube_control_plane": ["cp1", "cp2"], "kube_node": ["w1"]}, "w1"

    assert tier_default("gpufleet_gate_taint_key", inventory) == "gpufleet.io/unhealthy"
    assert tier_default("gpufleet_sysfs_root", inventory) == "/"
    assert calls == []  # not computed from the inventory: the groups are never templated
    assert tier_default("gpufleet_kube_api_host", inventory) == "cp1"
    assert tier_default("gpufleet_kubelet", inventory) is True
    assert tier_default("gpufleet_kubelet", lambda: ({"kube_node": ["w1"]}, "other")) is False
    assert tier_default("gpufleet_kube_api_host") == "localhost" and tier_default("gpufleet_kubelet") is False
    assert len(calls) == 2
