"""gpu.mig against an expected MIG layout (mig-parted format), profile names, tier resolution."""

import calendar

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu_checks import (
    FAMILY,
    check_gpu_health,
    validate_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.mig import (
    BUILTIN_MIG_CONFIGS,
    expected_for,
    layout_errors,
    memory_gb,
    profile_name,
    resolve_layout,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import node_validate_options
from nvml_scenarios import fake_with, node

NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
READER = SysfsReader(node("dgx-h100"))
FACTS = gather_gpu_facts(READER)
MIB = 1024 * 1024
ALL_3G = BUILTIN_MIG_CONFIGS["mig-configs"]["all-3g.40gb"]


def run(name, layout, device_overrides=None, **top):
    fake = fake_with(name, device_overrides, **top)
    options = FAMILY.defaults({"expected_mig": layout, "xid_source": "none"})
    results, gpus, _ = check_gpu_health(FACTS, NvmlAdapter(fake), options, None, now=NOW, reader=READER)
    return {c["target"]: c for c in results if c["id"] == "gpu.mig"}, gpus, results


# -- names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("memory_mb, total_mib, gb", [
    (10240, 81920, 10),   # go-nvml's H100 mock: nominal sizes
    (9984, 81559, 10),    # 9.75 GiB of an 81559 MiB board: 0.1224 -> 1/8 of 80 GiB
    (40448, 81559, 40),   # 3g: 0.496 -> 4/8
    (4864, 40960, 5),     # A100-40GB 1g.5gb: 0.119 -> 1/8 of 40
    (19968, 40960, 20),   # A100-40GB 3g.20gb: 0.4875 -> 4/8 of 40
])
def test_memory_gb_rounds_as_go_nvlib(memory_mb, total_mib, gb):
    assert memory_gb(memory_mb, total_mib * MIB) == gb


def test_profile_names():
    total = 81920 * MIB
    assert profile_name(0, 1, 10240, total) == "1g.10gb"
    assert profile_name(7, 1, 10240, total) == "1g.10gb+me"  # 1_SLICE_REV1: media extensions
    assert profile_name(9, 1, 20480, total) == "1g.20gb"     # 1_SLICE_REV2: no attribute
    assert profile_name(2, 3, 40960, total) == "3g.40gb"
    assert profile_name(17, 3, 40960, total) == "3g.40gb"    # unknown index: reported slices


# -- layouts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout, words", [
    ([], "non-empty list"),
    ([{"devices": "all", "mig-enabled": True, "device-filter": ["0x233010DE"]}], "device-filter"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 2}}], "1c.3g.40gb"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": -1}}], "count >= 0"),
    ([{"devices": [0, 1], "mig-enabled": True}, {"devices": [1], "mig-enabled": False}], "GPU 1 is already in entry 0"),
    ([{"devices": "all", "mig-enabled": True}, {"devices": [1], "mig-enabled": False}], "already in entry 0"),
    ([{"devices": "some", "mig-enabled": True}], "devices must be all"),
    ([{"devices": "all", "mig-enabled": "yes"}], "mig-enabled must be true or false"),
    ([{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 7}}], "mig-enabled false"),
])
def test_bad_layouts_are_named(layout, words):
    errors = validate_options({"expected_mig": layout}, prefix="gpu.")
    assert errors and all(e.startswith("option gpu.expected_mig") for e in errors), errors
    assert any(words in e for e in errors), errors


def test_builtin_configs_are_valid_layouts():
    for name, entries in BUILTIN_MIG_CONFIGS["mig-configs"].items():
        assert layout_errors(entries, name) == [], name


def test_expected_for_picks_the_gpus_entry():
    layout = [{"devices": [0, 1], "mig-enabled": False},
              {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 7, "2g.20gb": 0}}]
    assert expected_for(layout, 0) == (False, {})
    assert expected_for(layout, 2) == (True, {"1g.10gb": 7})  # a zero count is no instance
    assert expected_for(layout, 3) is None


# -- gpu.mig ----------------------------------------------------------------------------------
def test_matching_layout_passes_and_mismatches_fail_naming_gpu_expected_and_found():
    found, gpus, _ = run("h100-mig-layout", ALL_3G)
    assert {t: c["status"] for t, c in found.items()} == {
        "gpu0": "pass", "gpu1": "pass", "gpu2": "pass", "gpu3": "pass", "gpu4": "pass",
        "gpu5": "fail", "gpu6": "fail", "gpu7": "pass"}
    assert found["gpu0"]["message"] == "MIG enabled (2x 3g.40gb) as expected"
    assert found["gpu5"]["message"] == ("MIG layout differs: expected MIG enabled (2x 3g.40gb), "
                                        "found MIG enabled (7x 1g.10gb)")
    assert found["gpu6"]["message"].endswith("found MIG enabled (no GPU instance)")
    assert found["gpu5"]["expected"] == {"mig_enabled": True, "instances": {"3g.40gb": 2}}
    assert found["gpu5"]["observed"]["instances"] == {"1g.10gb": 7}
    assert gpus[0]["mig_layout"] == {"3g.40gb": 2} and gpus[0]["mig"] == {"current": True, "pending": True}


def test_mixed_profiles_on_one_gpu_match():
    layout = BUILTIN_MIG_CONFIGS["mig-configs"]["all-balanced-80gb"]
    mixed = {"mig": {"instances": ["3g.40gb", "1g.10gb", "2g.20gb", "1g.10gb"]}}
    found, _, results = run("h100-mig-layout", layout, device_overrides={i: mixed for i in range(8)})
    assert {c["status"] for c in found.values()} == {"pass"} and results.healthy
    assert "1x 2g.20gb" in found["gpu3"]["message"]


def test_explicit_per_gpu_layout():
    layout = [{"devices": [0, 1, 2, 3, 4, 7], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
              {"devices": [5], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
              {"devices": [6], "mig-enabled": True, "mig-devices": {}}]
    found, _, results = run("h100-mig-layout", layout)
    assert {c["status"] for c in found.values()} == {"pass"} and results.healthy


def test_media_extension_profile_is_its_own_name():
    layout = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb+me": 1, "1g.10gb": 6}}]
    me = {"mig": {"instances": ["1g.10gb+me"] + ["1g.10gb"] * 6}}
    found, _, _ = run("h100-mig-layout", layout, device_overrides={0: me})
    assert found["gpu0"]["status"] == "pass" and found["gpu1"]["status"] == "fail"


def test_mig_off_where_the_layout_expects_it_on_fails():
    found, gpus, _ = run("h100-healthy", BUILTIN_MIG_CONFIGS["mig-configs"]["all-1g.10gb"])
    assert {c["status"] for c in found.values()} == {"fail"}
    assert found["gpu2"]["message"] == ("MIG layout differs: expected MIG enabled (7x 1g.10gb), "
                                        "found MIG disabled")
    assert gpus[2]["mig_layout"] is None


def test_mig_on_where_the_layout_expects_it_off_fails():
    found, _, _ = run("h100-mig-layout", BUILTIN_MIG_CONFIGS["mig-configs"]["all-disabled"])
    assert {c["status"] for c in found.values()} == {"fail"}
    assert found["gpu0"]["message"] == ("MIG layout differs: expected MIG disabled, "
                                        "found MIG enabled (2x 3g.40gb)")


def test_mig_off_as_expected_passes():
    found, _, results = run("h100-healthy", BUILTIN_MIG_CONFIGS["mig-configs"]["all-disabled"])
    assert {c["status"] for c in found.values()} == {"pass"} and results.healthy


def test_pending_mode_change_warns():
    pending = {"mig": {"current": 0, "pending": 1}}
    found, _, _ = run("h100-healthy", ALL_3G, device_overrides={4: pending})
    assert found["gpu4"]["status"] == "warn"
    assert found["gpu4"]["message"] == ("MIG mode change pending (disabled -> enabled): GPU reset needed; "
                                        "expected MIG enabled")


def test_gpu_without_mig_fails_when_the_layout_wants_mig_and_passes_when_not():
    no_mig = {"errors": {"nvmlDeviceGetMigMode": "NOT_SUPPORTED"}}
    found, _, _ = run("h100-healthy", ALL_3G, device_overrides={1: no_mig})
    assert found["gpu1"]["status"] == "fail" and found["gpu1"]["message"].startswith("MIG not supported by this GPU")
    assert "expects MIG enabled with 2x 3g.40gb" in found["gpu1"]["message"]
    found, _, _ = run("h100-healthy", BUILTIN_MIG_CONFIGS["mig-configs"]["all-disabled"], device_overrides={1: no_mig})
    assert found["gpu1"]["status"] == "pass"
    found, _, _ = run("h100-healthy", None, device_overrides={1: no_mig})
    assert found["gpu1"]["status"] == "skip"


@pytest.mark.parametrize("function", ["nvmlDeviceGetMigMode", "nvmlDeviceGetMemoryInfo",
                                      "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstances"])
@pytest.mark.parametrize("error", ["UNKNOWN", "NO_PERMISSION", "INSUFFICIENT_SIZE", "TIMEOUT"])
def test_nvml_error_while_reading_the_layout_fails(function, error):
    found, _, results = run("h100-mig-layout", ALL_3G, errors={function: {"2": error}})
    assert found["gpu2"]["status"] == "fail" and not results.healthy
    assert found["gpu2"]["message"].startswith("could not be measured: %s" % function)
    assert "NVML_ERROR_" + error in found["gpu2"]["error"]
    assert found["gpu0"]["status"] == "pass"


@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "INVALID_ARGUMENT"])
def test_no_readable_profile_while_mig_is_on_fails(error):
    found, _, _ = run("h100-mig-layout", None, errors={"nvmlDeviceGetGpuInstanceProfileInfo": {"0": error}})
    assert found["gpu0"]["status"] == "fail" and "NVML_ERROR_" + error in found["gpu0"]["error"]
    assert found["gpu1"]["status"] == "pass"


def test_profiles_the_board_lacks_are_skipped():
    # the H100 table has no profile index 5, 6 or 8 (NotSupported) nor 0x12+ (Invalid Argument)
    found, gpus, _ = run("h100-mig-layout", None)
    assert found["gpu0"]["status"] == "pass" and gpus[5]["mig_layout"] == {"1g.10gb": 7}


# -- tier -------------------------------------------------------------------------------------
def test_tier_layout_name_resolves_to_entries():
    out = node_validate_options({"gpufleet_mig_layout": "all-3g.40gb"})
    assert out["gpu"]["expected_mig"] == ALL_3G
    assert node_validate_options({"gpufleet_mig_layout": None})["gpu"] == {}


def test_tier_layout_from_a_site_document_and_explicit_list():
    document = {"version": "v1", "mig-configs": {"inference": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    out = node_validate_options({"gpufleet_mig_layout": "inference", "gpufleet_mig_configs": document})
    assert out["gpu"]["expected_mig"] == document["mig-configs"]["inference"]
    explicit = [{"devices": [0], "mig-enabled": False}]
    assert node_validate_options({"gpufleet_mig_layout": explicit})["gpu"]["expected_mig"] == explicit


@pytest.mark.parametrize("layout, configs, words", [
    ("all-7g.80gb", None, "gpufleet_mig_layout: no config 'all-7g.80gb' in the built-in set"),
    ("x", {"version": "v1"}, "gpufleet_mig_configs must be a mig-parted configuration"),
    ("bad", {"mig-configs": {"bad": [{"devices": "all"}]}}, "gpufleet_mig_configs bad[0].mig-enabled"),
    (7, None, "gpufleet_mig_layout must be a config name or a list"),
])
def test_bad_tier_values_are_named(layout, configs, words):
    with pytest.raises(ValueError) as exc:
        resolve_layout(layout, configs)
    assert words in str(exc.value)


# -- compatibility matrix: the device plugin's MIG strategy -------------------------------------
def mig_problems(**facts):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.compatibility import evaluate

    facts.setdefault("nvidia_device_plugin", True)
    return sorted(p["id"] for p in evaluate(facts) if p["id"].startswith("mig-"))


@pytest.mark.parametrize("layout, strategy, refused", [
    ("all-3g.40gb", "single", []),
    ("all-3g.40gb", "mixed", []),
    ("all-3g.40gb", "none", ["mig-strategy-for-mig"]),
    ("all-balanced-80gb", "single", ["mig-strategy-single-uniform"]),  # several profiles on a node
    ("all-balanced-80gb", "mixed", []),
    ("all-balanced-80gb", "none", ["mig-strategy-for-mig"]),
    ("all-disabled", "none", []),
    ("all-disabled", "single", []),
    ([{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
      {"devices": [2], "mig-enabled": False}], "single", ["mig-strategy-single-uniform"]),
    ("no-such-config", "mixed", ["mig-layout-resolves"]),
])
def test_matrix_matches_the_layout_with_the_mig_strategy(layout, strategy, refused):
    assert mig_problems(mig_layout=layout, mig_strategy=strategy) == refused


def test_matrix_strategy_rules_need_the_device_plugin_and_a_layout():
    assert mig_problems(mig_layout="all-balanced-80gb", mig_strategy="none", nvidia_device_plugin=False) == []
    assert mig_problems(mig_strategy="single") == []  # no layout: nothing known to compare


def test_matrix_names_the_bad_layout_and_reads_a_site_document():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.compatibility import evaluate

    problems = evaluate({"mig_layout": "nope", "mig_strategy": "none", "nvidia_device_plugin": True})
    message = [p for p in problems if p["id"] == "mig-layout-resolves"][0]["message"]
    assert "no config 'nope'" in message and "mig_layout=nope" in message
    document = {"version": "v1", "mig-configs": {"mine": [{"devices": "all", "mig-enabled": True,
                                                            "mig-devices": {"1g.10gb": 3, "2g.20gb": 2}}]}}
    assert mig_problems(mig_layout="mine", mig_configs=document, mig_strategy="single") == [
        "mig-strategy-single-uniform"]


def test_role_default_strategy_is_none():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.compatibility import facts_from_vars

    facts = facts_from_vars({"gpufleet_mig_layout": "all-1g.10gb"})
    assert facts["mig_strategy"]["value"] == "none" and facts["mig_layout"]["value"] == "all-1g.10gb"


# -- node_validate from_tier (validate.yml's path) ----------------------------------------------
def test_from_tier_passes_the_group_layout_and_names_a_bad_one():
    from ansible.errors import AnsibleActionFail
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible_collections.gpufleet.cluster.plugins.action.node_validate import tier_args

    def build(variables):
        templar = Templar(loader=DataLoader(), variables=variables)
        return tier_args({"from_tier": True}, templar.template, variables)

    document = {"version": "v1", "mig-configs": {"inference": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    args = build({"gpufleet_mig_layout": "inference", "gpufleet_mig_configs": document})
    assert args["gpu"]["expected_mig"] == document["mig-configs"]["inference"]
    assert "expected_mig" not in build({})["gpu"]
    with pytest.raises(AnsibleActionFail, match="gpufleet_mig_layout: no config 'training'"):
        build({"gpufleet_mig_layout": "training", "gpufleet_mig_configs": document})
