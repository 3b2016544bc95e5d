"""The action plugin of node_validate (from_tier): the module arguments it builds from a node's
gpufleet_* variables, with ansible-core's own Templar, against the lookup node_validate_options
(the one mapping, plugin_utils/gpufleet_tier.py). Through Ansible: tests/integration/test_node_validate_module.py."""

import pytest
import yaml
from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpufleet.cluster.plugins.action.node_validate import tier_args
from ansible_collections.gpufleet.cluster.plugins.lookup import node_validate_options

LOOKUP = "gpufleet.cluster.node_validate_options"

TIER_VARS = {
    "gpufleet_gpu_count": 8,
    "gpufleet_driver_branch": 580,  # an int in YAML: the option is a string
    "gpufleet_expected_hcas": trust_as_template("{{ hcas }}"),  # templated like any inventory value
    "hcas": 9,
    "gpufleet_min_rate_gbps": 200,
    "gpufleet_hugepages_2m": 1024,
    "gpufleet_kubelet_policy": {"cpu_manager_policy": "static", "reserved_memory": [{"numaNode": 0}]},
    "gpufleet_sysfs_root": "/srv/node-image",
}


def build(args, variables):
    templar = Templar(loader=DataLoader(), variables=variables)
    return tier_args(args, templar.template, variables)


def lookup(variables, **kwargs):
    """The lookup's answer. Its options come from its DOCUMENTATION, as the plugin loader registers
    them (the unit tests import the collection from the checkout, without Ansible's collection loader)."""
    if not C.config.has_configuration_definition("lookup", LOOKUP):
        C.config.initialize_plugin_configuration_definitions(
            "lookup", LOOKUP, yaml.safe_load(node_validate_options.DOCUMENTATION)["options"])
    templar = Templar(loader=DataLoader(), variables=variables)
    plugin = node_validate_options.LookupModule(loader=DataLoader(), templar=templar)
    plugin._load_name = LOOKUP  # pylint: disable=protected-access
    return plugin.run([], variables=variables, **kwargs)[0]


def test_without_from_tier_the_arguments_reach_the_module_unchanged():
    args = {"root": "/x", "gpu": {"expected_count": 2}, "fail_on": "never"}
    assert build(args, TIER_VARS) == args
    assert build(dict(args, from_tier=False), TIER_VARS) == args
    assert build(dict(args, from_tier=None), TIER_VARS) == args


def test_from_tier_fills_root_and_the_families_from_the_tier():
    built = build({"from_tier": True, "fail_on": "never"}, TIER_VARS)
    assert built == {
        "fail_on": "never", "root": "/srv/node-image",
        "gpu": {"expected_count": 8, "expected_driver_version": "580"},
        "rdma": {"expected_devices": 9, "min_rate_gbps": 200},
        "tuning": {"hugepages_2m": 1024, "kubelet_policy": {"cpu_manager_policy": "static"}},
    }


def test_from_tier_is_the_lookup_mapping():
    explicit = {"gpu": {"expected_count": 4, "xid_source": "none"}, "rdma": False, "tuning": {}}
    built = build(dict(explicit, from_tier="yes"), TIER_VARS)
    assert {family: built[family] for family in ("gpu", "rdma", "tuning")} == lookup(TIER_VARS, **explicit)
    # explicit options win key by key; false turns a family off
    assert built["gpu"] == {"expected_count": 4, "expected_driver_version": "580", "xid_source": "none"}
    assert built["rdma"] == {"expected_devices": 9, "min_rate_gbps": 200, "enabled": False}


def test_an_explicit_root_wins_and_an_unset_tier_gives_the_defaults():
    assert build({"from_tier": True, "root": "/mnt/image"}, TIER_VARS)["root"] == "/mnt/image"
    assert build({"from_tier": True, "root": None}, {}) == {"root": "/", "gpu": {}, "rdma": {}, "tuning": {}}


@pytest.mark.parametrize("args, named", [
    ({"from_tier": "perhaps"}, "option from_tier must be a boolean"),
    ({"from_tier": True, "gpu": "eight"}, "option gpu must be a dict"),
    ({"from_tier": True, "tuning": [1]}, "option tuning must be a dict"),
])
def test_bad_input_names_the_option(args, named):
    with pytest.raises(AnsibleActionFail, match=named):
        build(args, TIER_VARS)
    if "gpu" in args:
        with pytest.raises(AnsibleLookupError, match=named):
            lookup(TIER_VARS, gpu=args["gpu"])


def test_an_unknown_tier_name_is_named():
    from ansible_collections.gpufleet.cluster.plugins.lookup import gpufleet_tier as lookup_tier
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_value

    templar = Templar(loader=DataLoader(), variables=TIER_VARS)
    with pytest.raises(KeyError, match="'gpufleet_gpus' is not a gpufleet_\\* tier variable"):
        tier_value(templar.template, TIER_VARS, "gpufleet_gpus")
    with pytest.raises(AnsibleLookupError, match="gpufleet_tier: 'gpufleet_gpus' is not a gpufleet_\\* tier variable"):
        lookup_tier.tier_value(templar, TIER_VARS, "gpufleet_gpus")
    assert lookup_tier.tier_value(templar, TIER_VARS, "gpufleet_expected_hcas") == 9


# -- the module runs as ansible-core runs it ----------------------------------------------------------------------


def test_the_module_command_is_ansible_cores_own():
    """No loader of its own: the pipelined payload goes to the interpreter as ansible-core builds the command (a
    former ``python -c exec(compile(stdin.read()))`` loader only won against PYTHONUNBUFFERED=1 in the bench's
    local connection, with which CPython reads a script from stdin one byte per read(2); docs/performance.md)."""
    from ansible.plugins.action import ActionBase  # pylint: disable=import-outside-toplevel

    from ansible_collections.gpufleet.cluster.plugins.action import node_validate  # pylint: disable=import-outside-toplevel

    for name in ("_configure_module", "_low_level_execute_command", "_execute_module"):
        assert getattr(node_validate.ActionModule, name) is getattr(ActionBase, name), name
    assert not hasattr(node_validate, "STDIN_LOADER") and not hasattr(node_validate, "stdin_command")


# -- from_validate_vars: validate.yml's gpufleet_validate_* variables, read by the plugin (no per-host template) ----

from hypothesis import given, settings, strategies as st  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpufleet.cluster.plugins.action.node_validate import (  # noqa: E402  pylint: disable=wrong-import-position
    validate_vars_args,
    validate_vars_environment,
)

# What validate.yml's task templated per host before from_validate_vars (the tree of de6bb60).
OLD_TEMPLATES = {
    "root": "{{ gpufleet_validate_root | default(none) }}",
    "gpu": "{{ gpufleet_validate_gpu | default({}) }}",
    "rdma": "{{ gpufleet_validate_rdma | default({}) }}",
    "tuning": "{{ gpufleet_validate_tuning | default({}) }}",
}


def old_task_args(variables):
    """The arguments the old task gave the action plugin (its agent_health_file expression in Python: the
    lookup gpufleet_tier's value through ``string | lower``)."""
    from ansible_collections.gpufleet.cluster.plugins.lookup import gpufleet_tier as lookup_tier

    templar = Templar(loader=DataLoader(), variables=variables)
    args = {name: templar.template(trust_as_template(text)) for name, text in OLD_TEMPLATES.items()}
    agent = str(lookup_tier.tier_value(templar, variables, "gpufleet_health_agent")).lower() == "true"
    in_gpu_nodes = variables["inventory_hostname"] in variables["groups"].get("gpu_nodes", [])
    args["agent_health_file"] = "/var/lib/gpufleet/health.json" if in_gpu_nodes and agent else None
    return args


FAMILY_VALUE = st.one_of(st.none(), st.just(False), st.just({}), st.just({"expected_count": 2}),
                         st.just(trust_as_template("{{ {'min_rate_gbps': rate} }}")))


@settings(max_examples=100, deadline=None)
@given(root=st.one_of(st.just("unset"), st.none(), st.just(""), st.just("/srv/image"),
                      st.just(trust_as_template("{{ image }}"))),
       gpu=st.one_of(st.just("unset"), FAMILY_VALUE), rdma=st.one_of(st.just("unset"), FAMILY_VALUE),
       tuning=st.one_of(st.just("unset"), FAMILY_VALUE),
       agent=st.sampled_from(["unset", True, False, "true", "True", "no", None, trust_as_template("{{ on }}")]),
       in_gpu_nodes=st.booleans(), has_group=st.booleans())
def test_from_validate_vars_gives_what_the_task_templated(root, gpu, rdma, tuning, agent, in_gpu_nodes, has_group):
    variables = {"image": "/from/template", "rate": 100, "on": True, "inventory_hostname": "n1",
                 "groups": {"all": ["n1", "n2"], "ungrouped": []}}
    if has_group:
        variables["groups"]["gpu_nodes"] = ["n1"] if in_gpu_nodes else ["n2"]
    for name, value in (("gpufleet_validate_root", root), ("gpufleet_validate_gpu", gpu),
                        ("gpufleet_validate_rdma", rdma), ("gpufleet_validate_tuning", tuning),
                        ("gpufleet_health_agent", agent)):
        if value != "unset":
            variables[name] = value
    templar = Templar(loader=DataLoader(), variables=variables)
    built = validate_vars_args({"from_tier": True, "from_validate_vars": True, "fail_on": "never"},
                               templar.template, variables)
    assert built == dict(old_task_args(variables), from_tier=True, fail_on="never")
    # and then the tier, as before
    old = dict(old_task_args(variables), from_tier=True, fail_on="never")
    try:
        expected = tier_args(old, templar.template, variables)
    except AnsibleActionFail as exc:
        with pytest.raises(AnsibleActionFail, match=str(exc)[:40].replace("(", "\\(").replace(")", "\\)")):
            tier_args(built, templar.template, variables)
    else:
        assert tier_args(built, templar.template, variables) == expected


def test_from_validate_vars_leaves_options_given_in_the_task_and_reads_nothing_without_it():
    variables = {"gpufleet_validate_root": "/x", "gpufleet_validate_gpu": {"expected_count": 1},
                 "gpufleet_validate_environment": {"A": "1"}, "inventory_hostname": "n1", "groups": {}}
    template = Templar(loader=DataLoader(), variables=variables).template
    given_args = {"from_validate_vars": True, "root": "/y", "gpu": False, "agent_health_file": "/h.json"}
    assert validate_vars_args(given_args, template, variables) == {
        "root": "/y", "gpu": False, "rdma": {}, "tuning": {}, "agent_health_file": "/h.json"}
    for off in ({}, {"from_validate_vars": False}, {"from_validate_vars": "no"}):
        assert validate_vars_args(dict(off, root="/z"), template, variables) == {"root": "/z"}
        assert validate_vars_environment(off, variables) is None
    assert validate_vars_environment({"from_validate_vars": True}, variables) == {"A": "1"}
    assert validate_vars_environment({"from_validate_vars": True}, {}) is None
    with pytest.raises(AnsibleActionFail, match="option from_validate_vars must be a boolean, got 'perhaps'"):
        validate_vars_args({"from_validate_vars": "perhaps"}, template, variables)


def test_from_validate_vars_does_not_template_the_inventory_groups():
    """The worker of every host templated the whole ``groups`` mapping to learn whether the host is in
    gpu_nodes: a cost per host in proportion to the fleet (9.5 ms a host at 1,000 hosts, issue 45). The
    membership is read as the inventory built it; the answer is the same (see the hypothesis test above)."""
    hosts = ["n%04d" % index for index in range(1000)]
    variables = {"inventory_hostname": "n0007", "gpufleet_health_agent": True,
                 "groups": {"all": hosts, "ungrouped": [], "gpu_nodes": hosts[:500]}}
    templar = Templar(loader=DataLoader(), variables=variables)
    templated = []

    def template(value, **kwargs):
        templated.append(value)
        return templar.template(value, **kwargs)

    built = validate_vars_args({"from_validate_vars": True}, template, variables)
    assert built["agent_health_file"] == "/var/lib/gpufleet/health.json"
    assert not [value for value in templated if isinstance(value, (dict, list)) and len(value) >= 3], templated
    variables["inventory_hostname"] = "n0700"  # not in gpu_nodes
    assert validate_vars_args({"from_validate_vars": True}, template, variables)["agent_health_file"] is None
