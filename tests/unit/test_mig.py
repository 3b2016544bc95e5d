"""gpu.mig against an expected MIG layout (mig-parted format), profile names, tier resolution."""

import calendar
import re

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import (
    FAMILY,
    check_gpu_health,
    validate_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import (
    BUILTIN_MIG_CONFIGS,
    GI_SLICES,
    PROFILE_ATTRIBUTES,
    ProfileError,
    canonical_profile,
    expected_for,
    layout_errors,
    memory_gb,
    parse_profile,
    profile_error,
    profile_name,
    resolve_layout,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import node_validate_options
from hypothesis import given, settings
from hypothesis import strategies as st
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


@pytest.mark.parametrize("index, slices, name", [
    # NVML_GPU_INSTANCE_PROFILE_*_GFX / _NO_ME / _ALL_ME, named as go-nvlib's NewMigProfile names them
    (0xA, 1, "1g.24gb+gfx"), (0xB, 2, "2g.48gb+gfx"), (0xC, 4, "4g.96gb+gfx"), (0xD, 1, "1g.24gb-me"),
    (0xE, 2, "2g.48gb-me"), (0xF, 1, "1g.24gb+me.all"), (0x10, 2, "2g.48gb+me.all"),
])
def test_blackwell_profile_names_match_mig_parted_s_configs(index, slices, name):
    total = 97887 * MIB  # an RTX PRO 6000 Blackwell: 96 GB; a slice is 1/4 of it
    assert profile_name(index, slices, 97887 * slices // 4, total) == name
    assert profile_error(name) is None


# -- layouts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout, words", [
    ([], "non-empty list"),
    ([{"devices": "all", "mig-enabled": True, "device-filter": ["0x233010DE"]}], "device-filter"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 2}}], "1c.3g.40gb"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": -1}}], "count >= 1"),
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


# -- profile names: go-nvlib's grammar (pkg/nvlib/device/mig_profile.go parseMigProfile) ---------------
# The format cases of go-nvlib's own TestParseMigProfile (pkg/nvlib/device/mig_profile_test.go, column
# validFormat): parse_profile accepts exactly these.
@pytest.mark.parametrize("profile, valid", [
    ("", False), ("1g.5gb", True), ("1c.1g.5gb", True), ("1g.5gb+me", True), ("1c.1g.5gb+me", True),
    ("1c.1g.5gb-me", True), ("1g.5gb+me.all", True), ("1c.1g.5gb+me.all", True), ("1g.5gb+gfx", True),
    ("1c.1g.5gb+gfx", True), ("0g.0gb", True), ("0c.0g.0gb", True), ("10000g.500000gb", True),
    ("10000c.10000g.500000gb", True), (" 1c.1g.5gb", False), ("1 c.1g.5gb", False), ("1c .1g.5gb", False),
    ("1c. 1g.5gb", False), ("1c.1 g.5gb", False), ("1c.1g .5gb", False), ("1c.1g. 5gb", False),
    ("1c.1g.5 gb", False), ("1c.1g.5g b", False), ("1c.1g.5gb ", False), ("1c . 1g . 5gb", False),
    ("1c.f1g.5gb", False), ("1r.1g.5gb", False), ("1g.5gbk", False), ("1g.5", False), ("g.5gb", False),
    ("1g.gb", False), ("1g.5gb+me,me", False), ("1g.5gb+me,you,them", True), ("1c.1g.5gb+me,you,them", True),
    ("1g.5gb+", False), ("1g.5gb +", False), ("1g.5gb+ ", False), ("1g.5gb+ ,", False), ("1g.5gb+,,", False),
    ("1g.5gb+me,", False), ("1g.5gb+me,,", False), ("1g.5gb+me, ", False), ("1g.5gb+2me", False),
    ("1g.5gb*me", False), ("1c.1g.5gb*me", False), ("1g.5gb*me,you,them", False), ("1c.1g.5gb*me,you,them", False),
    ("bogus", False), ("1c.1g.5gb+.all", False), ("1c.1g.5gb+all.", False), ("1c.1g.5gb+me-me", False),
    ("1c.1g.5gb-me+me", False),
])
def test_parse_profile_is_go_nvlibs_format_check(profile, valid):
    if valid:
        parse_profile(profile)
    else:
        with pytest.raises(ProfileError):
            parse_profile(profile)


@pytest.mark.parametrize("profile", [
    # mig-parted v0.15.0 deployments/systemd/config-default.yaml, RTX PRO 6000 Blackwell
    "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb+gfx", "2g.48gb+me.all", "2g.48gb-me", "4g.96gb+gfx",
    "1g.10gb", "1g.10gb+me", "7g.80gb", "1g.24gb-gfx", "1g.24gb-me.all",
])
def test_valid_profiles_are_accepted_in_a_layout(profile):
    layout = [{"devices": "all", "mig-enabled": True, "mig-devices": {profile: 1}}]
    assert layout_errors(layout, "gpufleet_mig_layout") == []


@pytest.mark.parametrize("profile, words", [
    ("1c.3g.40gb", "not a GPU-instance profile name but a compute-instance one"),
    ("1g.10gb+me,me", "go-nvlib: cannot parse attributes of '1g.10gb\\+me,me': non unique attribute in list"),
    ("1g.10gb+me-x", "contains both"),
    ("5g.50gb", "5 slices"),
    ("1g.10gb+mee", "has the attribute\\(s\\) mee: go-nvlib defines only me, me.all, gfx"),
    ("1g.10gb+me,gfx", "at most one"),
    ("01g.10gb", "is written '1g.10gb' by go-nvlib"),
    ("1g.10gb ", "leading or trailing spaces"),
    ("1g.10GB", "missing 'gb'"),
    ("1g.5\ngb", "malformed number"),  # strconv.Atoi refuses a newline (a regex "$" would not)
])
def test_invalid_profiles_are_refused_naming_why(profile, words):
    errors = layout_errors([{"devices": "all", "mig-enabled": True, "mig-devices": {profile: 1}}], "gpufleet_mig_layout")
    assert len(errors) == 1 and errors[0].startswith("gpufleet_mig_layout[0].mig-devices: ")
    assert re.search(words, errors[0]), errors[0]


_NUMBER = st.integers(0, 10 ** 6).map(str)
_ATTRIBUTE = st.from_regex(r"\A[A-Za-z][A-Za-z0-9.]{0,6}[A-Za-z0-9]\Z|\A[A-Za-z]\Z")


@st.composite
def grammar_profiles(draw):
    """A profile name of go-nvlib's grammar: [<C>c.]<G>g.<GB>gb[(+|-)attr,...]."""
    fields = "%sg.%sgb" % (draw(_NUMBER), draw(_NUMBER))
    if draw(st.booleans()):
        fields = "%sc.%s" % (draw(_NUMBER), fields)
    attributes = draw(st.lists(_ATTRIBUTE, unique=True, max_size=3))
    if attributes:
        fields += draw(st.sampled_from("+-")) + ",".join(attributes)
    return fields


@settings(max_examples=200, deadline=None)
@given(profile=grammar_profiles())
def test_every_profile_of_the_grammar_parses(profile):
    info = parse_profile(profile)
    assert info["attributes"] or info["negative_attributes"] or ("+" not in profile and "-" not in profile)


@st.composite
def gi_profiles(draw):
    """A GPU-instance profile name as go-nvlib prints one (MigProfileInfo.String)."""
    name = "%dg.%dgb" % (draw(st.sampled_from(GI_SLICES)), draw(st.integers(0, 4096)))
    attribute = draw(st.sampled_from([""] + ["%s%s" % (sign, a) for sign in "+-" for a in PROFILE_ATTRIBUTES]))
    return name + attribute


@settings(max_examples=200, deadline=None)
@given(profile=gi_profiles())
def test_every_gpu_instance_profile_is_accepted(profile):
    assert profile_error(profile) is None
    assert canonical_profile(parse_profile(profile)) == profile


@settings(max_examples=200, deadline=None)
@given(profile=gi_profiles(), position=st.integers(0, 40),
       junk=st.sampled_from([" ", "+", "-", ",", ".", "*", "x", "0", "\t", "\n", "é", "++", "gb", "٣"]),
       how=st.sampled_from(["insert", "replace", "delete"]))
def test_a_mutated_profile_is_refused_or_still_a_valid_one(profile, position, junk, how):
    """A one-character mutation: refused with a message naming the profile, or a name that is itself
    valid (``1g.10gb`` -> ``1g.100gb``); never a crash."""
    at = position % (len(profile) + 1)
    if how == "insert":
        mutated = profile[:at] + junk + profile[at:]
    elif how == "replace":
        mutated = profile[:at] + junk + profile[at + 1:]
    else:
        mutated = profile[:at] + profile[at + 1:]
    problem = profile_error(mutated)
    if problem is None:
        info = parse_profile(mutated)
        assert info["g"] in GI_SLICES and canonical_profile(info) == mutated
    else:
        assert repr(mutated) in problem


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.none(), st.integers(), st.binary(max_size=5), st.text(max_size=12)))
def test_any_value_is_a_verdict_never_a_crash(value):
    problem = profile_error(value)
    assert problem is None or isinstance(problem, str)
