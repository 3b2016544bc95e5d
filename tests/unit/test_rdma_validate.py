"""rdma_validate logic (docs/contracts.md, RDMA family): every row of the check table against fixture trees."""

import copy
import importlib
import os
import shutil

import pytest
import yaml
from conftest import FIXTURES
from docs_helpers import MODULES, merged_options
from runners import ScriptedRunner

from ansible.module_utils.basic import FILE_COMMON_ARGUMENTS
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, GPU, RDMA
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import (
    DEFAULT_REQUIRED_MODULES,
    RDMA_OPTIONS,
    validate_rdma,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import (
    validate_options as check_rdma_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    module_argspec,
    node_module_argspec,
    record_checks_argspec,
)

RDMA_VALIDATE_ARGSPEC = RDMA_OPTIONS


def rdma_validate_module_argspec():
    return module_argspec(RDMA)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

NODES = os.path.join(FIXTURES, "nodes")
SPEC_IDS = {"rdma.modules", "rdma.driver", "rdma.devices", "rdma.port.state", "rdma.port.phys_state",
            "rdma.port.rate", "rdma.uverbs", "rdma.roce_gid", "rdma.peermem", "rdma.ofed_version",
            "rdma.counters"}
ALL_NODES = ["dgx-h100", "hdr-degraded", "port-init", "inbox-noversion", "inbox-50", "mlx5-absent", "quirks",
             "empty"]


def run(node, **options):
    reader = SysfsReader(os.path.join(NODES, node))
    facts = gather_mlx5_facts(reader, ScriptedRunner())
    return validate_rdma(facts, reader, options)


def one(results, check_id, target):
    found = [c for c in results if c["id"] == check_id and c["target"] == target]
    assert len(found) == 1, (check_id, target, results.as_list())
    return found[0]


def statuses(results, check_id):
    return {c["target"]: c["status"] for c in results if c["id"] == check_id}


# -- whole nodes ---------------------------------------------------------------------------------
def test_dgx_h100_is_healthy_with_strict_options():
    results = run("dgx-h100", expected_devices=9, min_rate_gbps=200, require_peermem=True,
                  min_ofed_version="24.10", check_counters=True)
    assert results.healthy
    assert results.summary() == {"pass": 51, "warn": 0, "fail": 0, "skip": 0}
    assert set(c["id"] for c in results) == SPEC_IDS


def test_every_check_has_the_result_model_fields():
    for node in ALL_NODES:
        for check in run(node, min_rate_gbps=100, check_counters=True, min_ofed_version="5.8"):
            assert check["id"] in SPEC_IDS
            assert check["status"] in ("pass", "warn", "fail", "skip")
            assert isinstance(check["message"], str) and check["message"]
            assert check["target"] == "node" or check["target"].startswith("mlx5_")


def test_empty_node_skips_readably():
    results = run("empty", require_peermem=True, min_ofed_version="5.8", min_rate_gbps=100)
    assert results.healthy
    assert results.summary() == {"pass": 0, "warn": 0, "fail": 0, "skip": 5}
    for check_id in ("rdma.modules", "rdma.devices", "rdma.peermem", "rdma.ofed_version"):
        assert one(results, check_id, "node")["message"] == "no RDMA devices; mlx5_core not loaded"
    assert "no Mellanox (0x15b3) PCI functions" in one(results, "rdma.driver", "node")["message"]


def test_empty_node_fails_when_devices_are_expected():
    results = run("empty", expected_devices=2)
    assert not results.healthy
    devices = one(results, "rdma.devices", "node")
    assert devices["status"] == "fail"
    assert devices["observed"] == 0 and devices["expected"] == 2
    assert one(results, "rdma.modules", "node")["status"] == "fail"


# -- rdma.modules --------------------------------------------------------------------------------
def test_modules_pass_when_all_loaded():
    check = one(run("dgx-h100"), "rdma.modules", "node")
    assert check["status"] == "pass"
    assert check["expected"] == DEFAULT_REQUIRED_MODULES


def test_modules_fail_names_the_missing_ones():
    check = one(run("inbox-noversion"), "rdma.modules", "node")
    assert check["status"] == "fail"
    assert check["observed"] == ["rdma_ucm"]
    assert "rdma_ucm" in check["message"]


def test_required_modules_option():
    assert one(run("inbox-noversion", required_modules=["ib_core", "mlx5_ib"]),
               "rdma.modules", "node")["status"] == "pass"
    check = one(run("dgx-h100", required_modules=["ib_core", "nv_peer_mem"]), "rdma.modules", "node")
    assert (check["status"], check["observed"]) == ("fail", ["nv_peer_mem"])


# -- rdma.driver ---------------------------------------------------------------------------------
def test_driver_fails_when_mellanox_functions_but_no_mlx5_core():
    results = run("mlx5-absent")
    check = one(results, "rdma.driver", "node")
    assert check["status"] == "fail"
    assert check["observed"] == {"loaded": False, "pci_functions": 2}
    assert one(results, "rdma.modules", "node")["status"] == "fail"
    assert not results.healthy


def test_driver_passes_when_loaded():
    check = one(run("dgx-h100"), "rdma.driver", "node")
    assert check["status"] == "pass"
    assert "24.10-1.1.4" in check["message"]


# -- rdma.devices --------------------------------------------------------------------------------
@pytest.mark.parametrize("options, status, observed", [
    ({}, "pass", 9),
    ({"expected_devices": 9}, "pass", 9),
    ({"expected_devices": 10}, "fail", 9),
    ({"link_layer": "InfiniBand", "expected_devices": 8}, "pass", 8),
    ({"link_layer": "InfiniBand", "expected_devices": 9}, "fail", 8),
    ({"link_layer": "Ethernet", "expected_devices": 1}, "pass", 1),
    ({"devices": ["mlx5_0", "0000:3c:00.0", "aa:00.0"], "expected_devices": 3}, "pass", 3),
])
def test_devices_count(options, status, observed):
    check = one(run("dgx-h100", **options), "rdma.devices", "node")
    assert (check["status"], check["observed"]) == (status, observed)


def test_devices_named_but_missing_fail():
    check = one(run("dgx-h100", devices=["mlx5_0", "mlx5_42"]), "rdma.devices", "node")
    assert check["status"] == "fail"
    assert "mlx5_42" in check["message"]


def test_devices_filter_limits_port_checks():
    results = run("dgx-h100", devices=["mlx5_3"])
    assert set(statuses(results, "rdma.port.state")) == {"mlx5_3/1"}
    assert set(statuses(results, "rdma.uverbs")) == {"mlx5_3"}


def test_link_layer_filter_limits_port_checks():
    results = run("dgx-h100", link_layer="Ethernet")
    assert set(statuses(results, "rdma.port.state")) == {"mlx5_bond_0/1"}
    check = one(run("hdr-degraded", link_layer="Ethernet"), "rdma.devices", "node")
    assert check["status"] == "skip"
    assert "Ethernet" in check["message"]


# -- rdma.port.state / phys_state ----------------------------------------------------------------
def test_port_state_active_init_down_unreadable():
    assert one(run("dgx-h100"), "rdma.port.state", "mlx5_0/1")["status"] == "pass"
    init = one(run("port-init"), "rdma.port.state", "mlx5_1/1")
    assert (init["status"], init["observed"]) == ("warn", "INIT")
    assert "subnet manager" in init["message"]
    down = one(run("hdr-degraded"), "rdma.port.state", "mlx5_2/1")
    assert (down["status"], down["observed"], down["expected"]) == ("fail", "DOWN", "ACTIVE")
    # fail closed: the state file of an existing port holds no readable state ("ACTIVE" + a bad byte)
    unreadable = one(run("quirks"), "rdma.port.state", "mlx5_1/1")
    assert (unreadable["status"], unreadable["observed"], unreadable["expected"]) == ("fail", None, "ACTIVE")
    assert unreadable["message"].startswith("port state unreadable: reading "
                                            "sys/class/infiniband/mlx5_1/ports/1/state is impossible")


def test_unreadable_state_of_a_down_port_fails_never_skips(tmp_path):
    """A DOWN port whose state file cannot be read: both state checks fail, the node is unhealthy."""
    root = tmp_path / "node"
    shutil.copytree(os.path.join(NODES, "hdr-degraded"), str(root), symlinks=True)
    port = root / "sys" / "class" / "infiniband" / "mlx5_2" / "ports" / "1"
    for name in ("state", "phys_state"):
        target = port / name
        if target.is_symlink() or target.exists():
            target.unlink()
        target.mkdir()  # reads fail like an unreadable attribute (EISDIR)
    reader = SysfsReader(str(root))
    results = validate_rdma(gather_mlx5_facts(reader, ScriptedRunner()), reader, {})
    assert one(results, "rdma.port.state", "mlx5_2/1")["status"] == "fail"
    phys = one(results, "rdma.port.phys_state", "mlx5_2/1")
    assert phys["status"] == "fail" and "physical state unreadable" in phys["message"]
    assert not results.healthy


def test_port_init_node_is_healthy_but_warns():
    results = run("port-init")
    assert results.healthy
    assert results.summary()["warn"] == 1


def test_phys_state_polling_fails_with_hint():
    results = run("hdr-degraded")
    check = one(results, "rdma.port.phys_state", "mlx5_2/1")
    assert check["status"] == "fail"
    assert "cable or peer lost" in check["message"]
    assert statuses(results, "rdma.port.phys_state") == {
        "mlx5_0/1": "pass", "mlx5_1/1": "pass", "mlx5_2/1": "fail", "mlx5_3/1": "pass"}


# -- rdma.port.rate ------------------------------------------------------------------------------
def test_rate_below_minimum_fails():
    results = run("hdr-degraded", min_rate_gbps=200)
    assert statuses(results, "rdma.port.rate") == {
        "mlx5_0/1": "pass", "mlx5_1/1": "pass", "mlx5_2/1": "skip", "mlx5_3/1": "fail"}
    check = one(results, "rdma.port.rate", "mlx5_3/1")
    assert (check["observed"], check["expected"]) == (100.0, 200)


def test_rate_not_checked_without_minimum():
    assert statuses(run("hdr-degraded"), "rdma.port.rate") == {}


def test_rate_unreadable_fails_closed_when_a_minimum_is_set():
    results = run("quirks", min_rate_gbps=100)
    assert statuses(results, "rdma.port.rate") == {"mlx5_0/1": "fail", "mlx5_1/1": "fail"}
    assert one(results, "rdma.port.rate", "mlx5_0/1")["message"].startswith("rate unreadable: reading ")


@pytest.mark.parametrize("rate", [float("nan"), float("inf")])
def test_rate_not_a_number_never_passes(rate):
    reader = SysfsReader(os.path.join(NODES, "dgx-h100"))
    facts = copy.deepcopy(gather_mlx5_facts(reader, ScriptedRunner()))
    facts["devices"][0]["ports"][0]["rate_gbps"] = rate
    results = validate_rdma(facts, reader, {"min_rate_gbps": 100})
    check = one(results, "rdma.port.rate", "mlx5_0/1")
    assert check["status"] == "fail" and "is not a number" in check["message"]


def test_ndr_rate_against_ndr_minimum():
    results = run("dgx-h100", min_rate_gbps=400, link_layer="InfiniBand")
    assert set(statuses(results, "rdma.port.rate").values()) == {"pass"}
    assert one(run("dgx-h100", min_rate_gbps=400), "rdma.port.rate", "mlx5_bond_0/1")["status"] == "fail"


# -- rdma.uverbs ---------------------------------------------------------------------------------
def test_uverbs_missing_device_node_fails():
    results = run("inbox-50")
    assert statuses(results, "rdma.uverbs") == {"mlx5_0": "pass", "mlx5_1": "fail"}
    assert "/dev/infiniband/uverbs1" in one(results, "rdma.uverbs", "mlx5_1")["message"]


def test_uverbs_without_verbs_device_fails():
    reader = SysfsReader(os.path.join(NODES, "dgx-h100"))
    facts = gather_mlx5_facts(reader, ScriptedRunner())
    facts["devices"][0]["uverbs"] = None
    check = one(validate_rdma(facts, reader, {}), "rdma.uverbs", "mlx5_0")
    assert check["status"] == "fail"
    assert "ib_uverbs" in check["message"]


# -- rdma.roce_gid -------------------------------------------------------------------------------
def test_roce_gid_found_at_index_5():
    check = one(run("dgx-h100"), "rdma.roce_gid", "mlx5_bond_0/1")
    assert (check["status"], check["observed"]) == ("pass", 5)


def test_roce_gid_only_for_ethernet_ports():
    assert set(statuses(run("dgx-h100"), "rdma.roce_gid")) == {"mlx5_bond_0/1"}


def test_roce_port_without_ipv4_gid_fails():
    results = run("inbox-noversion")
    assert statuses(results, "rdma.roce_gid") == {"mlx5_0/1": "pass", "mlx5_1/1": "fail"}


def test_roce_gid_not_required():
    assert statuses(run("inbox-noversion", require_roce_v2_gid=False), "rdma.roce_gid") == {}


# -- rdma.peermem --------------------------------------------------------------------------------
def test_peermem_loaded_and_registered_passes():
    check = one(run("dgx-h100", require_peermem=True), "rdma.peermem", "node")
    assert check["status"] == "pass"
    assert check["observed"] == {"loaded": ["nvidia_peermem"], "registered": ["nvidia_peermem"]}


def test_peermem_loaded_not_registered_warns_even_when_not_required():
    for required in (False, True):
        check = one(run("hdr-degraded", require_peermem=required), "rdma.peermem", "node")
        assert check["status"] == "warn"
        assert "not registered" in check["message"]


def test_peermem_required_but_not_loaded_fails():
    check = one(run("port-init", require_peermem=True), "rdma.peermem", "node")
    assert check["status"] == "fail"
    assert one(run("port-init"), "rdma.peermem", "node")["status"] == "skip"


# -- rdma.ofed_version ---------------------------------------------------------------------------
@pytest.mark.parametrize("node, minimum, status", [
    ("dgx-h100", "24.10", "pass"),
    ("dgx-h100", "24.10-1.1.4", "pass"),
    ("dgx-h100", "24.10-1.1.4.0.200", "pass"),  # cut to the loaded version's length
    ("dgx-h100", "24.10-1.1.5", "fail"),
    ("dgx-h100", "25.01", "fail"),
    ("hdr-degraded", "5.8", "pass"),
    ("hdr-degraded", "5.9", "fail"),
    ("hdr-degraded", "23.10-1.1.9", "fail"),  # 5.8 < 23.10 as integers, not as strings
    ("port-init", "5.9", "pass"),
    ("inbox-noversion", "5.8", "fail"),
    ("inbox-50", "4.0", "fail"),  # inbox while a minimum is set
    ("mlx5-absent", "5.8", "fail"),
    ("empty", "5.8", "skip"),
])
def test_ofed_version(node, minimum, status):
    check = one(run(node, min_ofed_version=minimum), "rdma.ofed_version", "node")
    assert check["status"] == status, check
    assert check["expected"] == minimum


def test_ofed_version_without_minimum_skips_with_info():
    check = one(run("dgx-h100"), "rdma.ofed_version", "node")
    assert check["status"] == "skip"
    assert "24.10-1.1.4" in check["message"]


# -- rdma.counters -------------------------------------------------------------------------------
def test_counters_warn_above_maxima():
    results = run("hdr-degraded", check_counters=True)
    check = one(results, "rdma.counters", "mlx5_1/1")
    assert check["status"] == "warn"
    assert check["observed"] == {"symbol_error": 1234, "link_downed": 3}
    assert check["expected"] == {"symbol_error": 10, "link_downed": 10}
    assert one(results, "rdma.counters", "mlx5_0/1")["status"] == "pass"
    relaxed = run("hdr-degraded", check_counters=True, max_symbol_errors=5000, max_link_downed=2)
    check = one(relaxed, "rdma.counters", "mlx5_1/1")
    assert check["status"] == "warn" and check["message"] == "link_downed 3 > 2"


def test_counters_off_by_default_and_unreadable_skip():
    assert statuses(run("hdr-degraded"), "rdma.counters") == {}
    results = run("quirks", check_counters=True)
    assert one(results, "rdma.counters", "mlx5_0/1")["status"] == "skip"  # N/A (no PMA)
    partly = one(results, "rdma.counters", "mlx5_1/1")
    assert partly["status"] == "pass"
    assert partly["observed"] == {"symbol_error": 0, "link_downed": None}


# -- options -------------------------------------------------------------------------------------
def test_options_defaults():
    opts = RDMA.defaults({})
    assert opts["link_layer"] == "any"
    assert opts["required_modules"] == ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib"]
    assert opts["require_peermem"] is False
    assert opts["require_roce_v2_gid"] is True
    assert opts["check_counters"] is False
    assert opts["expected_devices"] is None and opts["min_rate_gbps"] is None
    opts["required_modules"].append("x")
    assert RDMA.defaults({})["required_modules"] == DEFAULT_REQUIRED_MODULES


def test_argspec_covers_the_spec_options():
    assert set(RDMA_VALIDATE_ARGSPEC) == {
        "devices", "link_layer", "expected_devices", "min_rate_gbps", "required_modules", "require_peermem",
        "min_ofed_version", "require_roce_v2_gid", "check_counters", "max_symbol_errors", "max_link_downed"}
    module_spec = rdma_validate_module_argspec()
    assert set(module_spec) == set(RDMA_VALIDATE_ARGSPEC) | {"root", "fail_on"}
    assert module_spec["fail_on"]["choices"] == ["fail", "warn", "never"]
    module_spec["link_layer"]["choices"].append("x")
    assert RDMA_VALIDATE_ARGSPEC["link_layer"]["choices"] == ["any", "InfiniBand", "Ethernet"]


def test_argspec_validates_types_and_choices_naming_the_option():
    validator = ArgumentSpecValidator(copy.deepcopy(RDMA_VALIDATE_ARGSPEC))
    result = validator.validate({"min_rate_gbps": "fast", "link_layer": "bogus"})
    text = " ".join(result.error_messages)
    assert "min_rate_gbps" in text
    assert "link_layer" in text
    ok = validator.validate({"min_rate_gbps": "400", "expected_devices": "8"})
    assert ok.error_messages == []
    assert ok.validated_parameters["min_rate_gbps"] == 400.0


def test_argspec_reusable_as_nested_options():
    spec = {"rdma": {"type": "dict", "options": copy.deepcopy(RDMA_VALIDATE_ARGSPEC)}}
    result = ArgumentSpecValidator(spec).validate({"rdma": {"expected_devices": 8}})
    assert result.error_messages == []
    nested = result.validated_parameters["rdma"]
    assert nested["expected_devices"] == 8 and nested["link_layer"] == "any"
    bad = ArgumentSpecValidator(spec).validate({"rdma": {"link_layer": "Infiniband"}})
    assert "link_layer" in " ".join(bad.error_messages)


@pytest.mark.parametrize("options, fragment", [
    ({"link_layer": "bogus"}, "option link_layer:"),
    ({"min_rate_gbps": -1.0}, "option min_rate_gbps:"),
    ({"min_rate_gbps": "fast"}, "option min_rate_gbps:"),
    ({"expected_devices": -2}, "option expected_devices:"),
    ({"max_symbol_errors": -1}, "option max_symbol_errors:"),
    ({"max_link_downed": True}, "option max_link_downed:"),
    ({"min_ofed_version": "latest"}, "option min_ofed_version:"),
    ({"devices": ["mlx5_0", "bad name"]}, "option devices:"),
    ({"required_modules": "ib_core"}, "option required_modules:"),
])
def test_check_rdma_options_names_the_option(options, fragment):
    errors = check_rdma_options(options)
    assert len(errors) == 1
    assert errors[0].startswith(fragment)


def test_check_rdma_options_accepts_good_values():
    options = {"link_layer": "InfiniBand", "min_rate_gbps": 400, "expected_devices": 8,
               "min_ofed_version": "24.10-1.1.4", "devices": ["mlx5_0", "0000:1a:00.0"]}
    assert check_rdma_options(options) == []


# -- purity and fail_on --------------------------------------------------------------------------
def test_validate_does_not_mutate_facts():
    reader = SysfsReader(os.path.join(NODES, "hdr-degraded"))
    facts = gather_mlx5_facts(reader, ScriptedRunner())
    before = copy.deepcopy(facts)
    validate_rdma(facts, reader, {"min_rate_gbps": 200, "check_counters": True})
    assert facts == before


class ModuleExit(Exception):
    pass


class FakeModule:
    """Stands in for AnsibleModule: exit_json / fail_json end the module."""

    def __init__(self):
        self.outcome = None

    def exit_json(self, **kwargs):
        self.outcome = ("exit", kwargs)
        raise ModuleExit()

    def fail_json(self, **kwargs):
        self.outcome = ("fail", kwargs)
        raise ModuleExit()


@pytest.mark.parametrize("node, fail_on, outcome", [
    ("hdr-degraded", "fail", "fail"),
    ("hdr-degraded", "never", "exit"),
    ("port-init", "fail", "exit"),
    ("port-init", "warn", "fail"),
    ("empty", "warn", "exit"),
])
def test_fail_on(node, fail_on, outcome):
    module = FakeModule()
    results = run(node)
    with pytest.raises(ModuleExit):
        exit_with_checks(module, results, fail_on, ansible_facts={"mlx5": {}})
    kind, payload = module.outcome
    assert kind == outcome
    assert payload["checks"] == results.as_list()
    assert payload["summary"] == results.summary()
    assert payload["changed"] is False
    if kind == "fail":
        assert "rdma.port" in payload["msg"]


# -- documentation of every module (fragments merged) matches its argument spec ------------------
def _module(name):
    return importlib.import_module("ansible_collections.gpufleet.cluster.plugins.modules." + name)


# The argument_spec each module hands to AnsibleModule: every module's ARGUMENT_SPEC (framework.run_module).
ARGSPECS = dict((name, (lambda name=name: _module(name).ARGUMENT_SPEC)) for name in MODULES)
# add_file_common_args=True
ARGSPECS["toml_merge"] = lambda: dict(_module("toml_merge").ARGUMENT_SPEC, **FILE_COMMON_ARGUMENTS)


def test_module_specs_are_built_from_the_one_declarations():
    """gpu_health / rdma_validate / node_validate / record_checks take their specs from validation.py."""
    assert _module("gpu_health").ARGUMENT_SPEC == module_argspec(GPU)
    assert _module("rdma_validate").ARGUMENT_SPEC == rdma_validate_module_argspec()
    assert _module("node_validate").ARGUMENT_SPEC == node_module_argspec(FAMILIES)
    assert _module("record_checks").ARGUMENT_SPEC == record_checks_argspec()


def _listed(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def assert_options_match(documented, spec, where=""):
    """Documented options (suboptions included) agree with an argument spec."""
    assert set(documented) == set(spec), where or "options"
    for name, option in spec.items():
        doc, path = documented[name], where + name
        assert doc.get("type", "str") == option.get("type", "str"), path
        assert doc.get("default") == option.get("default"), path
        assert _listed(doc.get("choices")) == _listed(option.get("choices")), path
        assert doc.get("elements") == option.get("elements"), path
        assert bool(doc.get("required")) == bool(option.get("required")), path
        assert sorted(doc.get("aliases") or []) == sorted(option.get("aliases") or []), path
        assert doc["description"], path
        if "options" in option or "suboptions" in doc:
            assert_options_match(doc.get("suboptions") or {}, option.get("options") or {}, path + ".")


def test_every_module_has_an_argspec_entry():
    assert set(ARGSPECS) == set(MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_documentation_matches_argspec(module_name):
    assert_options_match(merged_options(module_name), ARGSPECS[module_name]())
    module = _module(module_name)
    for key in ("EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(module, key))


def test_validation_fragments_are_merged():
    """root and fail_on come from plugins/doc_fragments/validation.py with their type and default."""
    for name in ("gpu_health", "node_validate", "rdma_bandwidth", "rdma_validate"):
        options = merged_options(name)
        assert options["root"]["type"] == "path" and options["root"]["default"] == "/", name
        assert options["fail_on"]["choices"] == ["fail", "warn", "never"], name
    # a module's own root description wins over the fragment's
    assert "sys/class/infiniband" in str(merged_options("rdma_bandwidth")["root"]["description"])


def test_option_comparison_covers_suboptions():
    documented = {"opt": {"type": "dict", "description": "x",
                          "suboptions": {"sub": {"type": "int", "default": 1, "description": "y"}}}}
    assert_options_match(documented, {"opt": {"type": "dict", "options": {"sub": {"type": "int", "default": 1}}}})
    with pytest.raises(AssertionError, match="opt.sub"):
        assert_options_match(documented, {"opt": {"type": "dict", "options": {"sub": {"type": "int", "default": 2}}}})
