"""The one version parser/comparator (module_utils/core/versions.py) and its users: the same answer and the
same error on bad input through compatibility, the OFED helpers and the driver prefix match."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import ofed
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import versions
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import GPU
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility


@pytest.mark.parametrize("value, parsed", [
    ("580.95.05", (580, 95, 5)), ("v3.32.0", (3, 32, 0)), ("1:1.7.24~ds1-1", (1, 7, 24)),
    ("6.1.0-27-amd64", (6, 1, 0)), (580, (580,)), (1.36, (1, 36)), ((24, 10, 1), (24, 10, 1)),
])
def test_parse(value, parsed):
    assert versions.parse_version(value) == parsed


@pytest.mark.parametrize("value", ["latest", "", None, True, "x1.2", "\u0663.10", (), (1, -2), ["5.8"],
                                   "9" * 5000])
def test_bad_input_is_one_value_error_naming_the_value(value):
    with pytest.raises(ValueError, match="^not a version: "):
        versions.parse_version(value)
    with pytest.raises(ValueError, match="^not a version: "):
        versions.compare_versions(value, "1")
    with pytest.raises(ValueError, match="^not a version: "):
        versions.version_matches(value, "1")


def test_long_values_are_shown_cut():
    with pytest.raises(ValueError) as error:
        versions.parse_version("x" * 10000)
    assert len(str(error.value)) < 120


@pytest.mark.parametrize("left, right, result", [
    ("1.36", "1.36.0", 0), ("580", "580.95.05", -1), ("5.9", "23.04", 1 - 2), ("2.1.4-1", "2.0", 1),
])
def test_compare_pads_missing_components(left, right, result):
    assert versions.compare_versions(left, right) == result


def test_every_user_compares_through_the_one_comparator():
    assert compatibility.compare_versions("1.36", "1.36.0") == 0
    assert ofed.version_compare("24.10-1.1.4", "==", "24.10-1.1.4.0")  # OFED normalised, then the same rule
    assert ofed.version_compare("MLNX_OFED_LINUX-5.8-1.0.1.1:", "<", "23.10-1.1.9")
    assert ofed.version_tuple("MLNX_OFED_LINUX-5.8-1.0.1.1:") == (5, 8, 1, 0, 1, 1)


def test_the_same_error_everywhere():
    with pytest.raises(compatibility.MatrixError, match="^not a version: 'latest'$"):
        compatibility.compare_versions("latest", "1")
    with pytest.raises(ValueError, match="^not a version: 'latest'$"):
        ofed.version_compare("latest", "<", "1")
    with pytest.raises(ValueError, match="^not a version: 'latest'$"):
        ofed.driver_at_least("latest", "5.8")
    assert ofed.loaded_matches_installed("latest", "5.8") is None  # a fact: unknown, not an error


def test_driver_prefix_match_on_the_parsed_versions():
    assert versions.version_matches("580.95.05", "580")
    assert versions.version_matches("580.95.05", "580.95.5")
    assert not versions.version_matches("580.95.05", "58")
    assert not versions.version_matches("580.95.05", "580.9")


def test_expected_driver_version_that_is_no_version_is_an_option_error():
    errors = GPU.validate(dict(GPU.defaults({"expected_driver_version": "latest"}), root="/"), "gpu.")
    assert errors == ["option gpu.expected_driver_version: not a version: 'latest'"]
    assert GPU.validate(dict(GPU.defaults({"expected_driver_version": "580"}), root="/"), "gpu.") == []
