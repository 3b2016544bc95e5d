"""preflight passes on the dgx-h100 fixture; the only finding is the unknown Secure Boot state."""

import json


def findings(host):
    return json.loads(host.file("/root/preflight-findings.json").content_string)


def test_no_problem_found(host):
    assert [f for f in findings(host) if f["severity"] == "fail"] == []


def test_secure_boot_unknown_is_a_warning(host):
    # mokutil is not installed in the container: the state is unknown, reported, not fatal.
    assert not host.exists("mokutil")
    warnings = [f["message"] for f in findings(host) if f["severity"] == "warn"]
    assert len(warnings) == 1
    assert warnings[0].startswith("secure boot: state unknown (mokutil not installed")


def test_headers_candidate_really_exists(host):
    release = host.file("/root/kernel-release").content_string.strip()
    policy = host.check_output("apt-cache policy linux-headers-%s", release)
    assert "Candidate: (none)" not in policy and "Candidate:" in policy


def test_fixture_tree_is_the_one_checked(host):
    devices = host.file("/opt/gpufleet-fixtures/dgx-h100/sys/bus/pci/devices")
    assert devices.is_directory
    vendors = host.check_output(
        "cat /opt/gpufleet-fixtures/dgx-h100/sys/bus/pci/devices/*/vendor | sort | uniq -c")
    assert "12 0x10de" in vendors  # 8 GPUs + 4 NVSwitches
    assert "10 0x15b3" in vendors


def test_preflight_changed_nothing_else(host):
    # Read-only role: no gpufleet state directory, no package installed by it.
    assert not host.file("/etc/gpufleet").exists
    assert not host.package("mokutil").is_installed
