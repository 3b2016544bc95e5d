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
