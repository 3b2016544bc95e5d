"""Filters ofed_version, ofed_version_compare, ofed_best_match, ib_rate_gbps (docs/contracts.md, mlx5_facts `ofed`)."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.ofed import (
    FilterModule,
    ib_rate_gbps,
    ofed_best_match,
    ofed_version,
    ofed_version_compare,
)


def test_filter_module_exports_the_four_filters():
    filters = FilterModule().filters()
    assert filters == {"ofed_version": ofed_version, "ofed_version_compare": ofed_version_compare,
                       "ofed_best_match": ofed_best_match, "ib_rate_gbps": ib_rate_gbps}


# -- ofed_version --------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    ("MLNX_OFED_LINUX-5.8-1.0.1.1:", "5.8-1.0.1.1"),
    ("MLNX_OFED_LINUX-5.8-1.0.1.1:\n", "5.8-1.0.1.1"),
    ("OFED-internal-24.10-1.1.4.0.200:", "24.10-1.1.4.0.200"),
    ("MLNX_OFED_LINUX-23.10-1.1.9.0 (OFED-23.10-1.1.9):\n\nclusterkit:\n", "23.10-1.1.9.0"),
    ("version:        24.10-1.1.4", "24.10-1.1.4"),
    ("24.10-1.1.4", "24.10-1.1.4"),
    ("  5.8-1.0.1  ", "5.8-1.0.1"),
    ("5.0-0", "5.0-0"),
    ("24.10.OFED.24.10.1.1.4.1-1", "24.10-1.1.4.1"),
    ("mlnx-ofed-kernel-dkms 23.10.OFED.23.10.1.1.9.1-1", "23.10-1.1.9.1"),
    ("mlnx-ofa_kernel-5.8-OFED.5.8.1.0.1.1.rhel9u2", "5.8-1.0.1.1"),
    (23.04, "23.04"),
    ("no version here", None),
    ("", None),
    (None, None),
    (True, None),
    (["5.8"], None),
])
def test_ofed_version(value, expected):
    assert ofed_version(value) == expected


# -- ofed_version_compare ------------------------------------------------------------------------
@pytest.mark.parametrize("left, op, right, expected", [
    ("5.9", "<", "23.04", True),          # integers, not strings
    ("5.9", "lt", "23.04", True),
    ("23.04", ">", "5.9", True),
    ("23.04", "gt", "5.9", True),
    ("23.10-1.1.9", "<", "23.10-1.1.10", True),
    ("24.10-1.1.4", "==", "24.10-1.1.4", True),
    ("24.10-1.1.4", "eq", "24.10-1.1.4.0", True),  # missing trailing components count as 0 (versions.py)
    ("24.10-1.1.4", "eq", "24.10-1.1.4.1", False),
    ("24.10-1.1.4", "!=", "24.10-1.1.5", True),
    ("24.10-1.1.4", "ne", "24.10-1.1.4", False),
    ("5.8-1.0.1", ">=", "5.8", True),
    ("5.8-1.0.1", "ge", "5.8-1.0.1", True),
    ("5.8-1.0.1", "<=", "5.8-1.0.1.1", True),
    ("5.8-1.0.1", "le", "5.8-1.0.0", False),
    ("MLNX_OFED_LINUX-5.8-1.0.1.1:", ">=", "OFED-internal-5.8-1.0.1.1:", True),
    ("OFED-internal-24.10-1.1.4.0.200:", ">", "MLNX_OFED_LINUX-23.10-1.1.9.0:", True),
])
def test_ofed_version_compare(left, op, right, expected):
    assert ofed_version_compare(left, op, right) is expected


def test_ofed_version_compare_bad_operator():
    with pytest.raises(AnsibleFilterError, match="unknown operator '~='"):
        ofed_version_compare("5.8", "~=", "5.9")


def test_ofed_version_compare_bad_version_names_it():
    with pytest.raises(AnsibleFilterError, match="not a version: 'latest'"):
        ofed_version_compare("5.8", "<", "latest")
    with pytest.raises(AnsibleFilterError, match="not a version: None"):
        ofed_version_compare(None, "<", "5.8")


# -- ofed_best_match -----------------------------------------------------------------------------
AVAILABLE = ["5.8-1.0.1.1", "23.10-0.5.5.0", "23.10-1.1.9.0", "24.10-1.1.4.0.200", "24.10-0.7.0.0"]


@pytest.mark.parametrize("host, available, expected", [
    ("23.10-1.1.9.0", AVAILABLE, "23.10-1.1.9.0"),                  # exact
    ("23.10-1.1.9", AVAILABLE, "23.10-1.1.9.0"),                    # without last component
    ("5.8-1.0.1", AVAILABLE, "5.8-1.0.1.1"),
    ("5.8-1.0.1.1.7", AVAILABLE, "5.8-1.0.1.1"),                    # host carries the extra component
    ("23.10-2.1.3", AVAILABLE, "23.10-1.1.9.0"),                    # same major.minor: highest
    ("24.10-1.1.4", AVAILABLE, "24.10-1.1.4.0.200"),                # same major.minor
    ("24.04-0.6.6", AVAILABLE, None),                                # nothing fits
    ("5.9-0.5.6", AVAILABLE, None),
    ("MLNX_OFED_LINUX-23.10-1.1.9.0:", AVAILABLE, "23.10-1.1.9.0"),  # host string normalised
    ("23.10-1.1.9", ["MLNX_OFED_LINUX-23.10-1.1.9.0:", "junk"], "MLNX_OFED_LINUX-23.10-1.1.9.0:"),
    ("23.10-1.1.9", [], None),
    ("23.10-1.1.9", None, None),
    (None, AVAILABLE, None),
    ("garbage", AVAILABLE, None),
])
def test_ofed_best_match(host, available, expected):
    assert ofed_best_match(host, available) == expected


def test_ofed_best_match_prefers_exact_over_prefix():
    assert ofed_best_match("23.10-1.1.9", ["23.10-1.1.9.0", "23.10-1.1.9"]) == "23.10-1.1.9"


def test_ofed_best_match_accepts_tuples_and_rejects_strings():
    assert ofed_best_match("5.8-1.0.1", ("5.8-1.0.1.1",)) == "5.8-1.0.1.1"
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        ofed_best_match("5.8-1.0.1", "5.8-1.0.1.1")
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        ofed_best_match("5.8-1.0.1", 5.8)


# -- ib_rate_gbps --------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    ("400 Gb/sec (4X NDR)", 400.0),
    ("400 Gb/sec (4X NDR)\n", 400.0),
    ("200 Gb/sec (4X HDR)", 200.0),
    ("100 Gb/sec (2X HDR)", 100.0),
    ("2.5 Gb/sec (1X SDR)", 2.5),
    ("56 Gb/sec (4X FDR)", 56.0),
    ("10 Gb/sec (4X)", 10.0),
    ("800 Gb/sec (4X XDR)", 800.0),
    (400, 400.0),
    (2.5, 2.5),
    ("fast", None),
    ("Gb/sec", None),
    ("400 Mb/sec", None),
    ("", None),
    (None, None),
    (True, None),
    ({"rate": 400}, None),
])
def test_ib_rate_gbps(value, expected):
    result = ib_rate_gbps(value)
    assert result == expected
    if expected is not None:
        assert isinstance(result, float)
