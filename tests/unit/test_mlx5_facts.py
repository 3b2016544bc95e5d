"""mlx5_facts logic (docs/contracts.md, mlx5_facts) against fixture trees modelled on real sysfs."""

import builtins
import os
import shutil

import pytest
from conftest import FIXTURES
from runners import ScriptedRunner

from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import mlx5
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import (
    check_mlx5_options,
    gather_mlx5_facts,
    is_ipv4_mapped,
    parse_rate,
    parse_state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import root_error
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import (
    loaded_matches_installed,
    parse_ofed_info,
    version_compare,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

NODES = os.path.join(FIXTURES, "nodes")
OFED_INFO = os.path.join(FIXTURES, "ofed_info")
DOCA = os.path.join(OFED_INFO, "doca-ofed-24.10", "ofed_info")
MLNX_58 = os.path.join(OFED_INFO, "mlnx-ofed-5.8", "ofed_info")

TOP_KEYS = {"loaded", "version", "srcversion", "driver_source", "ofed", "pci_functions", "devices"}
DEVICE_KEYS = {"name", "driver", "pci_address", "hca_type", "board_id", "fw_ver", "node_guid", "numa_node",
               "netdevs", "uverbs", "ports"}
PORT_KEYS = {"port", "state", "state_id", "phys_state", "phys_state_id", "rate_gbps", "width", "speed",
             "link_layer", "lid", "sm_lid", "roce_v2_gid_index"}


def facts_for(node, runner=None, ofed_info=None):
    return gather_mlx5_facts(SysfsReader(os.path.join(NODES, node)), runner or ScriptedRunner(), ofed_info)


def ofed_runner(stdout, rc=0, path="/usr/bin/ofed_info"):
    return ScriptedRunner(script={path: (rc, stdout, "")}, paths={"ofed_info": path})


def device(facts, name):
    return next(d for d in facts["devices"] if d["name"] == name)


@pytest.fixture(scope="module")
def dgx():
    return facts_for("dgx-h100", SubprocessRunner(), DOCA)


# -- shape ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("node", ["dgx-h100", "hdr-degraded", "port-init", "inbox-noversion", "inbox-50",
                                  "mlx5-absent", "quirks", "empty"])
def test_every_node_has_exactly_the_spec_keys(node):
    facts = facts_for(node)
    assert set(facts) == TOP_KEYS
    assert set(facts["ofed"]) == {"installed", "package_version", "flavor", "loaded_matches_installed"}
    for dev in facts["devices"]:
        assert set(dev) == DEVICE_KEYS
        for port in dev["ports"]:
            assert set(port) == PORT_KEYS


# -- dgx-h100 ------------------------------------------------------------------------------------
def test_dgx_driver_is_doca_ofed_matching_installed(dgx):
    assert dgx["loaded"] is True
    assert dgx["version"] == "24.10-1.1.4"
    assert dgx["srcversion"] == "A3C4D1F6E8B2A9C0D7E5F41"
    assert dgx["driver_source"] == "ofed"
    assert dgx["ofed"] == {"installed": True, "package_version": "24.10-1.1.4.0.200", "flavor": "doca_ofed",
                           "loaded_matches_installed": True}


def test_dgx_counts_mellanox_pci_functions_and_devices(dgx):
    # 8 single-port CX-7 InfiniBand + 2 PFs of the Ethernet LAG; GPUs, NVSwitches and bridges excluded
    assert dgx["pci_functions"] == 10
    assert [d["name"] for d in dgx["devices"]] == ["mlx5_%d" % i for i in range(8)] + ["mlx5_bond_0"]


def test_dgx_infiniband_device_fields(dgx):
    dev = device(dgx, "mlx5_0")
    assert dev == {
        "name": "mlx5_0", "driver": "mlx5_core", "pci_address": "0000:1a:00.0", "hca_type": "MT4129",
        "board_id": "MT_0000000838", "fw_ver": "28.39.1002", "node_guid": "b83f:d203:00a1:2b3c",
        "numa_node": 0, "netdevs": ["ibp26s0"], "uverbs": "uverbs0",
        "ports": [{"port": 1, "state": "ACTIVE", "state_id": 4, "phys_state": "LinkUp", "phys_state_id": 5,
                   "rate_gbps": 400.0, "width": "4X", "speed": "NDR", "link_layer": "InfiniBand",
                   "lid": 0x1A, "sm_lid": 1, "roce_v2_gid_index": None}],
    }
    assert device(dgx, "mlx5_7")["numa_node"] == 1
    assert device(dgx, "mlx5_7")["uverbs"] == "uverbs7"
    for dev in dgx["devices"][:8]:
        port = dev["ports"][0]
        assert (port["state"], port["phys_state"], port["rate_gbps"]) == ("ACTIVE", "LinkUp", 400.0)


def test_dgx_bond_roce_v2_gid_is_not_at_index_3(dgx):
    bond = device(dgx, "mlx5_bond_0")
    port = bond["ports"][0]
    assert port["link_layer"] == "Ethernet"
    # 0/1: link-local v1/v2, 2/3: global IPv6 v1/v2 (index 3 is RoCE v2 but not IPv4), 4: IPv4 v1
    assert port["roce_v2_gid_index"] == 5
    assert port["lid"] == 0 and port["sm_lid"] == 0
    assert bond["pci_address"] == "0000:aa:00.0"
    assert "bond0" in bond["netdevs"]
    assert bond["uverbs"] == "uverbs8"


# -- driver source ------------------------------------------------------------------------------
def test_inbox_without_version_file():
    facts = facts_for("inbox-noversion")
    assert facts["loaded"] is True
    assert facts["version"] is None
    assert facts["srcversion"] == "0C1D2E3F4A5B6C7D8E9F0A1"
    assert facts["driver_source"] == "inbox"


def test_inbox_50_version():
    facts = facts_for("inbox-50")
    assert facts["version"] == "5.0-0"
    assert facts["driver_source"] == "inbox"


def test_inbox_when_version_equals_kernel_release(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(os.path.join(NODES, "inbox-50"), str(root), symlinks=True)
    (root / "sys/module/mlx5_core/version").write_text("4.18.0-348.el8.x86_64\n")
    facts = gather_mlx5_facts(SysfsReader(str(root)), ScriptedRunner())
    assert facts["version"] == "4.18.0-348.el8.x86_64"
    assert facts["driver_source"] == "inbox"
    (root / "sys/module/mlx5_core/version").write_text("5.8-1.0.1\n")
    assert gather_mlx5_facts(SysfsReader(str(root)), ScriptedRunner())["driver_source"] == "ofed"


def test_absent_driver_with_mellanox_functions():
    facts = facts_for("mlx5-absent")
    assert facts["loaded"] is False
    assert facts["version"] is None and facts["srcversion"] is None
    assert facts["driver_source"] == "absent"
    assert facts["pci_functions"] == 2
    assert facts["devices"] == []


def test_empty_node():
    facts = facts_for("empty")
    assert facts == {"loaded": False, "version": None, "srcversion": None, "driver_source": "absent",
                     "ofed": {"installed": False, "package_version": None, "flavor": None,
                              "loaded_matches_installed": None},
                     "pci_functions": 0, "devices": []}


# -- OFED user space -----------------------------------------------------------------------------
@pytest.mark.parametrize("output, version, flavor", [
    ("MLNX_OFED_LINUX-5.8-1.0.1.1:\n", "5.8-1.0.1.1", "mlnx_ofed"),
    ("OFED-internal-24.10-1.1.4.0.200:\n", "24.10-1.1.4.0.200", "doca_ofed"),
    ("MLNX_OFED_LINUX-23.10-1.1.9.0 (OFED-23.10-1.1.9):\n\nclusterkit:\n", "23.10-1.1.9.0", "mlnx_ofed"),
    ("MLNX_OFED_LINUX-4.9-7.1.0.0", "4.9-7.1.0.0", "mlnx_ofed"),
    ("", None, None),
    ("bash: ofed_info: command not found", None, None),
    ("MLNX_OFED_LINUX-:", None, None),
])
def test_parse_ofed_info(output, version, flavor):
    assert parse_ofed_info(output) == (version, flavor)


def test_ofed_info_fixture_scripts_run_for_real():
    reader = SysfsReader(os.path.join(NODES, "hdr-degraded"))
    facts = gather_mlx5_facts(reader, SubprocessRunner(), MLNX_58)
    assert facts["ofed"] == {"installed": True, "package_version": "5.8-1.0.1.1", "flavor": "mlnx_ofed",
                             "loaded_matches_installed": True}


def test_ofed_info_is_run_with_dash_s_only():
    runner = ofed_runner("MLNX_OFED_LINUX-23.10-1.1.9.0:\n", path="/opt/ofed_info")
    facts = facts_for("port-init", runner, ofed_info="/opt/ofed_info")
    assert runner.calls == [["/opt/ofed_info", "-s"]]
    assert facts["ofed"]["package_version"] == "23.10-1.1.9.0"
    # docs/contracts.md example: 23.10-1.1.9.0 installed <-> 23.10-1.1.9 loaded
    assert facts["ofed"]["loaded_matches_installed"] is True


def test_ofed_mismatch_after_upgrade_without_reboot():
    runner = ofed_runner("MLNX_OFED_LINUX-23.10-1.1.9.0:\n")
    facts = facts_for("hdr-degraded", runner, ofed_info="/usr/bin/ofed_info")
    assert facts["version"] == "5.8-1.0.1"
    assert facts["ofed"]["loaded_matches_installed"] is False


def test_ofed_installed_but_inbox_driver_loaded_does_not_match():
    facts = facts_for("inbox-50", ofed_runner("MLNX_OFED_LINUX-5.8-1.0.1.1:"), ofed_info="/usr/bin/ofed_info")
    assert facts["ofed"]["installed"] is True
    assert facts["ofed"]["loaded_matches_installed"] is False


def test_ofed_installed_driver_not_loaded_match_unknown():
    runner = ofed_runner("MLNX_OFED_LINUX-5.8-1.0.1.1:")
    facts = facts_for("mlx5-absent", runner, ofed_info="/usr/bin/ofed_info")
    assert facts["ofed"]["installed"] is True
    assert facts["ofed"]["loaded_matches_installed"] is None


def test_ofed_info_failing_counts_as_installed_without_version():
    facts = facts_for("dgx-h100", ofed_runner("", rc=1), ofed_info="/usr/bin/ofed_info")
    assert facts["ofed"] == {"installed": True, "package_version": None, "flavor": None,
                             "loaded_matches_installed": None}


def test_ofed_info_searched_on_path_only_for_the_real_root():
    runner = ofed_runner("MLNX_OFED_LINUX-5.8-1.0.1.1:")
    fixture = facts_for("dgx-h100", runner)
    assert runner.calls == []
    assert fixture["ofed"]["installed"] is False
    real = gather_mlx5_facts(SysfsReader("/"), runner)
    assert runner.calls == [["/usr/bin/ofed_info", "-s"]]
    assert real["ofed"]["installed"] is True
    assert real["ofed"]["package_version"] == "5.8-1.0.1.1"


def test_ofed_info_absent_from_path_means_not_installed():
    facts = gather_mlx5_facts(SysfsReader("/"), ScriptedRunner(paths={}))
    assert facts["ofed"]["installed"] is False
    assert facts["ofed"]["package_version"] is None


@pytest.mark.parametrize("loaded, installed, expected", [
    ("23.10-1.1.9", "23.10-1.1.9.0", True),
    ("5.8-1.0.1", "5.8-1.0.1.1", True),
    ("24.10-1.1.4", "24.10-1.1.4.0.200", True),
    ("24.10-1.1.4.0", "24.10-1.1.4.0.200", True),
    ("5.8-1.0.1.1", "5.8-1.0.1.1", True),
    ("5.8-1.0.1", "23.10-1.1.9.0", False),
    ("23.10-1.1", "23.10-1.1.9.0", False),
    ("23.10-1.1.8", "23.10-1.1.9.0", False),
    (None, "23.10-1.1.9.0", None),
    ("garbage", "23.10-1.1.9.0", None),
])
def test_loaded_matches_installed(loaded, installed, expected):
    assert loaded_matches_installed(loaded, installed) is expected


def test_versions_compare_as_integer_tuples():
    assert version_compare("5.9", "<", "23.04")
    assert version_compare("23.10-1.1.9", "<", "23.10-1.1.10")
    assert version_compare("24.10-1.1.4", "==", "24.10-1.1.4")
    assert version_compare("24.10", ">", "5.8-3.0.7")
    with pytest.raises(ValueError, match="not a version: 'x'"):
        version_compare("x", "<", "1")


# -- quirks: one bad field never takes down the others -------------------------------------------
def test_quirks_bad_fields_are_null_one_by_one():
    facts = facts_for("quirks")
    assert facts["driver_source"] == "ofed"
    dev0, dev1 = facts["devices"]
    # rate is a directory (EINVAL-like): only rate/width/speed are null
    port0 = dev0["ports"][0]
    assert (port0["rate_gbps"], port0["width"], port0["speed"]) == (None, None, None)
    assert (port0["state"], port0["phys_state"], port0["lid"]) == ("ACTIVE", "LinkUp", 3)
    assert dev0["node_guid"] == "0c42:a103:00f1:0a00"  # no trailing newline in the file
    assert dev0["numa_node"] is None  # -1 in sysfs
    assert dev0["fw_ver"] == "20.36.1010"
    # invalid bytes in fw_ver and rate, a state without id
    port1 = dev1["ports"][0]
    assert dev1["fw_ver"] is None
    assert dev1["hca_type"] == "MT4123"
    assert port1["rate_gbps"] is None
    assert (port1["state"], port1["state_id"]) == (None, None)
    assert (port1["phys_state"], port1["phys_state_id"]) == ("LinkUp", 5)


def test_numa_node_values():
    facts = facts_for("hdr-degraded")
    assert [d["numa_node"] for d in facts["devices"]] == [0, 0, 1, 1]


def test_hdr_degraded_ports():
    facts = facts_for("hdr-degraded")
    down = device(facts, "mlx5_2")["ports"][0]
    observed = (down["state"], down["state_id"], down["phys_state"], down["phys_state_id"])
    assert observed == ("DOWN", 1, "Polling", 2)
    narrow = device(facts, "mlx5_3")["ports"][0]
    assert (narrow["rate_gbps"], narrow["width"], narrow["speed"]) == (100.0, "2X", "HDR")


def test_port_init_state():
    port = device(facts_for("port-init"), "mlx5_1")["ports"][0]
    assert (port["state"], port["state_id"], port["phys_state"]) == ("INIT", 2, "LinkUp")
    assert port["sm_lid"] == 0


def test_roce_gid_index_standard_and_missing():
    facts = facts_for("inbox-noversion")
    assert device(facts, "mlx5_0")["ports"][0]["roce_v2_gid_index"] == 3
    assert device(facts, "mlx5_1")["ports"][0]["roce_v2_gid_index"] is None
    assert device(facts, "mlx5_0")["netdevs"] == ["enp59s0f0np0"]


# -- parsers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("4: ACTIVE", (4, "ACTIVE")), ("2: INIT", (2, "INIT")), ("1: DOWN", (1, "DOWN")),
    ("5: LinkUp", (5, "LinkUp")), ("2: Polling", (2, "Polling")), ("3: Disabled", (3, "Disabled")),
    ("ACTIVE", (None, "ACTIVE")), ("ACTIVE?", (None, None)), ("", (None, None)), (None, (None, None)),
])
def test_parse_state(text, expected):
    assert parse_state(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
    ("200 Gb/sec (4X HDR)", (200.0, "4X", "HDR")),
    ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
    ("56 Gb/sec (4X FDR)", (56.0, "4X", "FDR")),
    ("40 Gb/sec (4X FDR10)", (40.0, "4X", "FDR10")),
    ("10 Gb/sec (4X)", (10.0, "4X", None)),
    ("fast", (None, None, None)),
    ("\ufffd\ufffd Gb/s", (None, None, None)),
    (None, (None, None, None)),
])
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("gid, expected", [
    ("0000:0000:0000:0000:0000:ffff:0a0a:0115", True),
    ("fe80:0000:0000:0000:966d:aeff:fe3c:5a10", False),
    ("0000:0000:0000:0000:0000:0000:0000:0000", False),
    ("fd00:0010:0010:0001:966d:aeff:fe3c:5a10", False),
    ("not a gid", False),
    (None, False),
])
def test_is_ipv4_mapped(gid, expected):
    assert is_ipv4_mapped(gid) is expected


# -- plumbing ------------------------------------------------------------------------------------
def test_every_read_goes_through_the_memoising_reader(monkeypatch):
    reader = SysfsReader(os.path.join(NODES, "dgx-h100"))
    first = gather_mlx5_facts(reader, ScriptedRunner(), None)
    opened = []
    real_open = builtins.open
    real_listdir = os.listdir

    def counting_open(*args, **kwargs):
        opened.append(args[0])
        return real_open(*args, **kwargs)

    def counting_listdir(*args, **kwargs):
        opened.append(args[0] if args else ".")
        return real_listdir(*args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(os, "listdir", counting_listdir)
    second = gather_mlx5_facts(reader, ScriptedRunner(), None)
    assert second == first
    assert opened == []


def test_argspec_and_option_checks(tmp_path):
    assert check_mlx5_options({"root": os.path.join(NODES, "empty"), "ofed_info": DOCA}) == []
    # root is checked by the framework (framework.checked_root), as in every module reading a node
    assert root_error({"root": str(tmp_path / "missing"), "ofed_info": None}) == (
        "option root: %s is not a directory" % (tmp_path / "missing"))
    plain = tmp_path / "ofed_info"
    plain.write_text("echo hi\n")
    assert check_mlx5_options({"root": "/", "ofed_info": str(plain)}) == [
        "option ofed_info: %s is not executable" % plain]
    assert check_mlx5_options({"root": "/", "ofed_info": str(tmp_path / "nope")})[0].startswith(
        "option ofed_info: ")


def test_module_constants():
    assert mlx5.MELLANOX_VENDOR == 0x15B3
    assert "5.0-0" in mlx5.INBOX_VERSIONS
