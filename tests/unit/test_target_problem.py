"""The hosts a run would touch (issue 42): inventory_check.target_problem, used by the first play of
every entry point (playbooks/tasks/check-inventory.yml) with the hosts its pattern matches and those
--limit leaves. A run that would touch no host is a problem naming the variable, with the group it
meant; gpufleet_phases and role values with choices get a did-you-mean."""

import os
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check  # noqa: E402

GROUPS = {"all": ["cp1", "gpu1", "gpu2"], "ungrouped": [], "kube_control_plane": ["cp1"],
          "kube_node": ["gpu1", "gpu2"], "gpu_nodes": ["gpu1", "gpu2"], "rdma_nodes": ["gpu1", "gpu2"]}


def test_a_run_with_hosts_has_no_problem():
    assert inventory_check.target_problem("gpu_nodes", ["gpu1", "gpu2"], ["gpu1"], "gpufleet_validate_hosts",
                                          "gpu1", GROUPS) is None


def test_a_typo_in_the_pattern_names_the_variable_and_the_group_meant():
    problem = inventory_check.target_problem("gpu_node", [], [], "gpufleet_validate_hosts", None, GROUPS)
    assert problem.startswith("gpufleet_validate_hosts=gpu_node matches no host of the inventory: gpu_node is not a "
                              "group or host of the inventory (did you mean gpu_nodes?)"), problem


def test_a_limit_outside_the_pattern_says_so():
    problem = inventory_check.target_problem("gpu_nodes", ["gpu1", "gpu2"], [], "gpufleet_status_hosts", "cp1", GROUPS)
    assert problem.startswith("--limit cp1 leaves none of gpufleet_status_hosts=gpu_nodes (2 host(s): gpu1, gpu2)")
    assert "-e gpufleet_status_hosts=<pattern>" in problem


def test_a_fixed_pattern_is_named_as_the_playbook_s_hosts():
    problem = inventory_check.target_problem("kube_control_plane:kube_node", ["cp1"], [], None, "nothere", GROUPS)
    assert "the hosts of this playbook (kube_control_plane:kube_node)" in problem and "None" not in problem


def test_a_missing_group_of_the_playbook_is_not_a_typo():
    # health_agent.yml on a Kubespray inventory: gpu_nodes is missing, not a misspelt kube_node (issue 42)
    groups = {"all": ["cp1", "node1"], "ungrouped": [], "kube_control_plane": ["cp1"], "kube_node": ["node1"],
              "etcd": ["cp1"], "k8s_cluster": ["cp1", "node1"]}
    problem = inventory_check.target_problem("gpu_nodes", [], [], None, None, groups)
    assert problem == ("the hosts of this playbook (gpu_nodes) match no host of the inventory: gpu_nodes is not in "
                       "the inventory (groups: etcd, k8s_cluster, kube_control_plane, kube_node); add the hosts this "
                       "playbook is for to gpu_nodes (docs/inventory.md); this run would touch no host"), problem
    assert "did you mean" not in problem


def test_all_of_an_empty_inventory_is_not_a_typo():
    problem = inventory_check.target_problem("all", [], [], "capture_hosts", None, {"all": [], "ungrouped": []})
    assert problem == "capture_hosts=all matches no host of the inventory: its groups are empty; this run would " \
                      "touch no host"


def test_misspelt_phase_gets_a_did_you_mean():
    problems = inventory_check.inventory_problems({}, {}, phases=["valdate", "report"], hosts=[])
    assert "gpufleet_phases must be a list of node, kubernetes, validate, report, got ['valdate', 'report'] " \
           "(did you mean validate?)" in problems, problems


def test_a_role_value_outside_its_choices_gets_a_did_you_mean():
    spec = {"type": "list", "elements": "str", "choices": ["driver", "ofed", "kubernetes", "mig"]}
    problem = inventory_check.role_value_problem("rolling_upgrade", "rolling_upgrade_components", spec, ["drivr"])
    assert "Got no match for: drivr (did you mean driver?) (argument spec of role rolling_upgrade)" in problem, problem


NAMES = st.text(alphabet="abcdefgh_-!&:,*0123456789", max_size=20)


@settings(max_examples=200, deadline=None)
@given(pattern=NAMES, matched=st.lists(NAMES, max_size=4), targets=st.lists(NAMES, max_size=4),
       variable=st.one_of(st.none(), NAMES), limit=st.one_of(st.none(), NAMES),
       groups=st.dictionaries(NAMES, st.lists(NAMES, max_size=3), max_size=5))
def test_any_selection_is_a_verdict_never_a_crash(pattern, matched, targets, variable, limit, groups):
    """No host left is always a problem (a string naming the pattern), hosts left never are."""
    problem = inventory_check.target_problem(pattern, matched, targets, variable, limit, groups)
    if targets:
        assert problem is None
    else:
        assert isinstance(problem, str) and "this run would touch no host" in problem
        assert (pattern in problem) or not pattern


# The host selection of check-inventory.yml templated as Ansible templates it (the task variables trusted
# as the playbook's are), counting the runs of the inventory_hostnames lookup (a temporary inventory of every
# host: about 0.15 s at 10,000 hosts, before the lazy lists it answers are walked).
SELECTION = r'''
import json, sys, yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, lookup_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader([sys.argv[3]])
block = yaml.safe_load(open(sys.argv[1]))[0]["block"]
select = [t for t in block if "__gpufleet_check_targets" in t.get("ansible.builtin.set_fact", {})][0]
check = [t for t in block if "__gpufleet_inventory_problems" in t.get("ansible.builtin.set_fact", {})][0]
lookup = type(lookup_loader.get("ansible.builtin.inventory_hostnames"))
calls, run = [], lookup.run
lookup.run = lambda self, terms, variables=None, **kw: calls.append(terms) or run(self, terms, variables=variables, **kw)
groups = {"all": ["cp1", "Gpu3", "gpu1", "gpu2", "localhost"], "ungrouped": ["localhost"], "kube_node": ["gpu1", "gpu2", "Gpu3"],
          "gpu_nodes": ["gpu2", "gpu1", "Gpu3"], "kube_control_plane": ["cp1"]}
out = []
for pattern, play_hosts in json.loads(sys.argv[2]):
    variables = {"groups": groups, "ansible_play_hosts_all": play_hosts, "__gpufleet_check_pattern": pattern,
                 "__gpufleet_check_pattern_var": "gpufleet_status_hosts", "ansible_limit": "cp1"}
    variables.update((k, trust_as_template(v)) for k, v in (select.get("vars") or {}).items())
    templar, before = Templar(loader=DataLoader(), variables=variables), len(calls)
    targets = templar.template(trust_as_template(select["ansible.builtin.set_fact"]["__gpufleet_check_targets"]))
    selected = len(calls) - before
    variables["__gpufleet_check_targets"] = list(targets)
    variables.update((k, trust_as_template(v)) for k, v in check["vars"].items())
    templar = Templar(loader=DataLoader(), variables=variables)
    problem = templar.template(trust_as_template(check["vars"]["__target_problem"]))
    out.append([list(targets), selected, str(problem), len(calls) - before - selected])
print(json.dumps(out))
'''


def _selection(cases):
    import json
    import subprocess

    argv = [sys.executable, "-c", SELECTION, os.path.join(REPO, "playbooks", "tasks", "check-inventory.yml"),
            json.dumps(cases), os.path.join(REPO, ".collections")]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_check_selects_a_groups_hosts_without_the_lookup_and_works_out_the_problem_only_without_hosts():
    """check-inventory.yml: a plain group name is its members in `groups` (no inventory_hostnames lookup, which ran
    twice before: once per fact that used the task variable), sorted as intersect | sort sorted them; any other
    pattern goes through the lookup once; the problem of a run that would touch no host is worked out (and the
    pattern's hosts read again) only when --limit left none."""
    everything = ["localhost", "cp1", "gpu1", "gpu2", "Gpu3"]
    cases = [["gpu_nodes", everything], ["gpu_nodes:&kube_node", everything], ["gpu_nodes", ["localhost", "cp1"]],
             ["gpu_node", everything], ["cp1", everything], ["gpu*", everything]]
    result = _selection(cases)
    assert result[0] == [["gpu1", "gpu2", "Gpu3"], 0, "", 0]
    assert result[1] == [["gpu1", "gpu2", "Gpu3"], 1, "", 0]
    targets, selected, problem, again = result[2]
    assert (targets, selected, again) == ([], 0, 0)
    assert problem.startswith("--limit cp1 leaves none of gpufleet_status_hosts=gpu_nodes (3 host(s): gpu2, gpu1, Gpu3)")
    targets, selected, problem, again = result[3]
    assert (targets, selected, again) == ([], 1, 1) and "did you mean gpu_nodes?" in problem
    assert result[4] == [["cp1"], 1, "", 0]  # a host's name: the lookup
    assert result[5] == [["gpu1", "gpu2", "Gpu3"], 1, "", 0]  # a wildcard: the lookup


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="abAB12_-", min_size=1, max_size=4), max_size=12),
       st.lists(st.text(alphabet="abAB12_-", min_size=1, max_size=4), max_size=12))
def test_target_hosts_is_the_intersection_sorted_as_jinja_sorts_it(matched, play_hosts):
    """target_hosts (the check's targets in one Python pass) = Jinja's intersect | sort (case-insensitive),
    every name once; names that differ only in case (which sort ties) in a fixed order."""
    from ansible_collections.gpufleet.cluster.plugins.filter.inventory_problems import target_hosts

    got = target_hosts(matched, play_hosts)
    assert sorted(got) == sorted(set(matched) & set(play_hosts))
    assert [name.lower() for name in got] == sorted(name.lower() for name in got)
    assert got == target_hosts(list(reversed(matched)), list(reversed(play_hosts)))
