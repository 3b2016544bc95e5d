"""The shipped inventories pass their own check, and every entry point checks its inputs first.

The example inventory (inventories/example, shipped in the collection tarball) is parsed the way
ansible-playbook parses it (InventoryManager, VariableManager, HostVars, in-process): the inventory
check finds nothing, and the tier gives each host the expectations of its groups (control planes
expect no GPU and no RDMA device, DGX nodes 8 GPUs and 9 RDMA devices), as node_validate's
from_tier reads them. The lab and local inventories pass too."""

import fnmatch
import os
import re

import pytest
import yaml
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check, run_selection
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_node_validate_options

ENTRY_POINTS = ("site.yml", "validate.yml", "rolling_upgrade.yml", "fabric_test.yml", "fleet_status.yml", "capture.yml",
                "node.yml", "kubernetes.yml", "health_agent.yml", "k8s_validate.yml", "mirror.yml", "remediate.yml")
LAB_PLAYBOOKS = ("lab.yml", "lab_agent.yml")  # the checkout's (make lab), not in the collection tarball


class Inventory(object):
    """An inventory as ansible-playbook loads it."""

    def __init__(self, name):
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.hostvars import HostVars
        from ansible.vars.manager import VariableManager
        self.loader = DataLoader()
        self.inventory = InventoryManager(loader=self.loader,
                                          sources=[os.path.join(REPO, "inventories", name, "hosts.yml")])
        self.variables = VariableManager(loader=self.loader, inventory=self.inventory)
        self.hostvars = HostVars(inventory=self.inventory, variable_manager=self.variables, loader=self.loader)
        self.groups = self.inventory.get_groups_dict()

    def expectations(self, host):
        """node_validate's gpu/rdma options of ``host`` from its tier (what from_tier passes)."""
        from ansible.template import Templar
        variables = self.variables.get_vars(host=self.inventory.get_host(host))
        return tier_node_validate_options(Templar(loader=self.loader, variables=variables).template, variables)

    def site_lists(self):
        """gpufleet_phases / node and kubernetes roles as the inventory sets them (None: all)."""
        variables = self.hostvars[self.groups["all"][0]]
        return dict((key, variables.get(name)) for key, name in (
            ("phases", "gpufleet_phases"), ("node_roles", "gpufleet_node_roles"),
            ("kubernetes_roles", "gpufleet_kubernetes_roles")))


@pytest.fixture(scope="module")
def example():
    return Inventory("example")


def test_example_inventory_has_no_problem(example):
    assert example.groups["kube_control_plane"] and example.groups["gpu_nodes"]
    # site.yml (every phase), validate.yml (every host), and --tags validate on its own
    assert inventory_check.inventory_problems(example.hostvars, example.groups) == []
    assert inventory_check.inventory_problems(example.hostvars, example.groups, phases=["validate", "report"],
                                              hosts=example.groups["all"]) == []
    chosen = run_selection.tag_selection(list(inventory_check.PHASES), run_tags=["validate"])
    assert inventory_check.inventory_problems(example.hostvars, example.groups, **chosen) == []


def test_example_expectations_follow_the_groups(example):
    for host in example.groups["kube_control_plane"]:
        options = example.expectations(host)
        assert "expected_count" not in options["gpu"] and "expected_driver_version" not in options["gpu"], host
        assert "expected_devices" not in options["rdma"] and "require_peermem" not in options["rdma"], host
    assert len(example.groups["gpu_nodes"]) == 16
    for host in example.groups["gpu_nodes"]:
        options = example.expectations(host)
        assert options["gpu"] == {"expected_count": 8, "expected_driver_version": "580"}, host
        assert options["rdma"] == {"expected_devices": 9, "link_layer": "any", "min_rate_gbps": 200,
                                   "require_peermem": True}, host


def test_example_sets_no_node_expectation_for_all():
    names = set()
    for path in os.listdir(os.path.join(REPO, "inventories", "example", "group_vars", "all")):
        with open(os.path.join(REPO, "inventories", "example", "group_vars", "all", path)) as handle:
            names |= set(yaml.safe_load(handle) or {})
    assert not names & {"gpufleet_gpu_count", "gpufleet_driver_branch", "gpufleet_expected_hcas",
                        "gpufleet_link_layer", "gpufleet_min_rate_gbps", "gpufleet_peermem"}


def test_lab_inventory_has_no_problem():
    lab = Inventory("lab")
    assert inventory_check.inventory_problems(lab.hostvars, lab.groups, **lab.site_lists()) == []
    assert inventory_check.inventory_problems(lab.hostvars, lab.groups, phases=[], hosts=lab.groups["all"]) == []


def test_local_inventory_passes_the_sweep_check():
    local = Inventory("local")
    assert inventory_check.inventory_problems(local.hostvars, local.groups, phases=["validate", "report"],
                                              hosts=local.groups["all"]) == []


# --- every entry point checks first --------------------------------------------------------------

def _playbook(name):
    with open(os.path.join(REPO, "playbooks", name)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", ENTRY_POINTS + LAB_PLAYBOOKS)
def test_entry_point_checks_the_inventory_in_its_first_play(name):
    first = _playbook(name)[0]
    assert first["gather_facts"] is False, name
    if "__gpufleet_check_pattern" in (first.get("vars") or {}):
        # on the hosts --limit leaves (issue 42), localhost first, every task once, one failure ends the run
        # (localhost:all once the inventory's group_vars / host_vars parse: lookup inventory_vars_parsed)
        assert first["hosts"] == "{{ lookup('gpufleet.cluster.inventory_vars_parsed', 'localhost:all') }}", name
        assert first["any_errors_fatal"] is True, name
        assert all(task.get("run_once") for task in first["tasks"][1:]), name
    else:
        raise AssertionError("%s: its check play has no __gpufleet_check_pattern (the hosts the run touches)" % name)
    imports = [t for t in first["tasks"] if t.get("ansible.builtin.import_tasks") == "tasks/check-inventory.yml"]
    assert len(imports) == 1, name
    assert first["tasks"][0] is imports[0], "the check is the first task of %s" % name
    variables = dict(first.get("vars") or {}, **(imports[0].get("vars") or {}))
    assert variables["__gpufleet_check_entry"] == name
    assert "__gpufleet_check_phases" in variables
    if "tags" in first:  # tagged plays: the check runs with any --tags
        assert first["tags"] == ["always"], name


def test_one_name_per_playbook():
    """A collection playbook's name cannot contain a hyphen (gpufleet.cluster.<name>): every playbook
    has its one underscore name, no hyphenated alias imports it, and nothing names one."""
    playbooks = os.path.join(REPO, "playbooks")
    names = sorted(n for n in os.listdir(playbooks) if n.endswith(".yml"))
    assert [n for n in names if "-" in n] == []
    tasks = sorted(os.listdir(os.path.join(playbooks, "tasks")))
    # a task file named after a playbook spells it as the playbook does
    assert [n for n in tasks if any(n.startswith(p[:-4].replace("_", "-") + "-") for p in names if "_" in p)] == []
    aliases = re.compile(r"\b(rolling-upgrade|k8s-validate|fabric-test)\.yml\b")
    offenders = []
    for top in ("playbooks", "roles", "docs", "tests", "molecule", "inventories", "README.md"):
        path = os.path.join(REPO, top)
        walked = [(path, [], [""])] if os.path.isfile(path) else os.walk(path)
        for folder, _dirs, files in walked:
            for name in files:
                full = os.path.join(folder, name) if name else folder
                if "__pycache__" in full or not full.endswith((".yml", ".yaml", ".py", ".md", ".j2", ".cfg")):
                    continue
                with open(full, encoding="utf-8", errors="replace") as handle:
                    if aliases.search(handle.read()) and not full.endswith("test_inventory_example.py"):
                        offenders.append(os.path.relpath(full, REPO))
    assert offenders == []


def test_site_spells_no_phase_list():
    """site.yml's plays and its inventory check take the default phases from one list (PHASES of
    inventory_check.py, through filter selected_phases for an unset gpufleet_phases), never a copy."""
    from ansible_collections.gpufleet.cluster.plugins.filter import inventory_problems as filters

    with open(os.path.join(REPO, "playbooks", "site.yml")) as handle:
        text = handle.read()
    assert not re.search(r"\[\s*'?node'?\s*,\s*'?kubernetes'?", text)
    phase_of_run = "(gpufleet_phases | default(none) | gpufleet.cluster.selected_phases).phases"
    plays = _playbook("site.yml")
    conditions = [p.get("when") for p in plays] + [t.get("when") for p in plays for t in p.get("tasks", [])]
    conditions = [c for c in conditions if c and "gpufleet_phases" in c]
    assert len(conditions) == 6 and all(c.endswith(" in " + phase_of_run) for c in conditions), conditions
    assert plays[0]["vars"]["__gpufleet_check_phases"] == "{{ %s }}" % phase_of_run
    assert filters.selected_phases(None)["phases"] == list(inventory_check.PHASES) == [
        "node", "kubernetes", "validate", "report"]
    assert filters.selected_phases(["validate", "report"])["phases"] == ["validate", "report"]


def test_validate_inside_site_does_not_check_twice():
    (task,) = _playbook("validate.yml")[0]["tasks"]
    assert task["when"] == "not __gpufleet_site_run | default(false)"
    (validation,) = [p for p in _playbook("site.yml") if p.get("ansible.builtin.import_playbook") == "validate.yml"]
    assert validation["vars"]["__gpufleet_site_run"] is True


# --- what ships ---------------------------------------------------------------------------------

def _ignored(path, patterns):
    """ansible-galaxy collection build's rule: a file is left out when it, or a directory above it,
    matches a build_ignore pattern (fnmatch on the path relative to the collection root)."""
    parts = path.split("/")
    return any(fnmatch.fnmatch("/".join(parts[:i]), pattern) for i in range(1, len(parts) + 1) for pattern in patterns)


def test_tarball_ships_the_example_inventory_and_no_lab_playbook():
    with open(os.path.join(REPO, "galaxy.yml")) as handle:
        patterns = yaml.safe_load(handle)["build_ignore"]
    example = []
    for top, _dirs, files in os.walk(os.path.join(REPO, "inventories")):
        for name in files:
            path = os.path.relpath(os.path.join(top, name), REPO)
            if path.startswith("inventories/example/"):
                example.append(path)
                assert not _ignored(path, patterns), path
            else:
                assert _ignored(path, patterns), path
    assert "inventories/example/hosts.yml" in example and "inventories/example/group_vars/gpu_nodes/gpufleet.yml" in example
    for path in ("playbooks/lab.yml", "playbooks/lab_agent.yml", "roles/lab_sim/tasks/main.yml"):
        assert _ignored(path, patterns), path
    for path in ENTRY_POINTS:
        assert not _ignored("playbooks/" + path, patterns), path


def test_readme_support_range_is_meta_runtime():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        requires = yaml.safe_load(handle)["requires_ansible"]
    minimum = re.match(r"^>=(\d+\.\d+)\.\d+$", requires)
    assert minimum, "tests read a lower bound only: %s" % requires
    with open(os.path.join(REPO, "README.md")) as handle:
        readme = handle.read()
    assert "ansible-core ≥ %s" % minimum.group(1) in readme
    assert 'requires_ansible: "%s"' % requires in readme
    # no upper bound is claimed that meta/runtime.yml does not state
    assert not re.search(r"ansible-core \d+\.\d+\s*[-–]\s*\d+\.\d+", readme)


def _behaviour_table():
    with open(os.path.join(REPO, "README.md")) as handle:
        text = handle.read()
    start = text.index("### Where each behaviour lives")
    rows = [line for line in text[start:].split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    return rows[1:]  # without the header


def test_readme_behaviour_table_leads_to_every_role_playbook_and_doc():
    """README's "where each behaviour lives": every role and playbook is named, every document of
    docs/ is reachable (linked here or from docs/contracts.md), every path and quoted section exists."""
    rows = _behaviour_table()
    table = "\n".join(rows)
    assert 20 <= len(rows) <= 40, "the table is to be read: %d rows" % len(rows)
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        assert "`%s`" % role in table, role
    for name in sorted(os.listdir(os.path.join(REPO, "playbooks"))):
        if name.endswith(".yml") and name not in ("lab_agent.yml", "validate.yml", "node.yml", "kubernetes.yml",
                                                  "health_agent.yml", "k8s_validate.yml", "site.yml"):
            assert "playbooks/%s" % name in table, name  # the others: "Roles and playbooks" above
    for path in re.findall(r"\]\(([^)#]+)\)", table):
        assert os.path.exists(os.path.join(REPO, path)), path
    for path in re.findall(r"`((?:playbooks|plugins|roles|tests)/[^`<*]+)`", table):
        assert os.path.exists(os.path.join(REPO, path)), path
    for path in re.findall(r"`(module_utils/[^`<*]+)`", table):  # relative to plugins/
        assert os.path.exists(os.path.join(REPO, "plugins", path)), path
    for doc, sections in re.findall(r"(docs/[a-z-]+\.md)\)?((?: \"[^\"]+\",?)+)", table):
        with open(os.path.join(REPO, doc)) as handle:
            headings = [line.lstrip("#").strip() for line in handle if line.startswith("#")]
        for section in re.findall(r'"([^"]+)"', sections):
            assert any(h.startswith(section) for h in headings), (doc, section)
    for question in ("remediation", "circuit breaker", "node_capture", "DRA", "etcd snapshot", "transcripts",
                     "role state", "upgrade records"):
        assert question.lower() in table.lower(), question


def test_docs_list_every_kubespray_variable():
    with open(os.path.join(REPO, "docs", "inventory.md")) as handle:
        text = handle.read()
    for name, use in inventory_check.KUBESPRAY_VARIABLES.items():
        assert "`%s`" % name in text and "`%s`" % use.split()[0].replace("the", "gpu_nodes") in text, name
