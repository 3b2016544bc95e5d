"""rdma_stack, source mlnx_ofed, with FAKE MLNX_OFED bundles (tests only).

The bundles' mlnxofedinstall records its arguments and installs a stand-in ofed_info; no
driver is installed. Real are: the sha256 enforcement, the unpack, the .supported_kernels
decision, the single run across converge + idempotence, and mlx5_facts reading ofed_info.
"""
import json

WORK = "/var/cache/gpufleet/mlnx_ofed"
GOOD = "MLNX_OFED_LINUX-23.10-1.1.9.0-debian12.1-x86_64"
BAD = "MLNX_OFED_LINUX-24.01-0.3.3.1-debian12.1-x86_64"


def test_installer_ran_once_with_add_kernel_support(host):
    # The running kernel is not in the bundle's .supported_kernels.
    args = host.file("/var/lib/gpufleet-test/mlnxofedinstall.args").content_string
    assert args.splitlines() == ["23.10-1.1.9.0 --without-fw-update --force --add-kernel-support"]


def test_bundle_verified_and_unpacked(host):
    tarball = host.file("%s/%s.tgz" % (WORK, GOOD))
    expected = host.file("/srv/mlnx/%s.tgz.sha256" % GOOD).content_string.split()[0]
    assert tarball.sha256sum == expected
    assert tarball.mode == 0o644
    assert host.file("%s/%s/mlnxofedinstall" % (WORK, GOOD)).exists


def test_wrong_checksum_refused_nothing_left(host):
    text = host.file("/var/lib/gpufleet-test/bad-sha256.txt").content_string
    assert "checksum" in text.lower()
    assert not host.file("%s/%s.tgz" % (WORK, BAD)).exists
    assert not host.file("%s/%s" % (WORK, BAD)).exists
    assert host.check_output("ofed_info -s") == "MLNX_OFED_LINUX-23.10-1.1.9.0:"


def test_missing_checksum_names_the_variable(host):
    text = host.file("/var/lib/gpufleet-test/missing-sha256.txt").content_string
    assert "rdma_stack_mlnx_ofed_sha256 is required" in text


def record(host, run):
    return json.loads(host.file("/var/lib/gpufleet-test/rdma_stack-%s.json" % run).content_string)


def test_install_run_plan(host):
    plan = record(host, "install")["plan"]
    assert plan["command"] == ["%s/%s/mlnxofedinstall" % (WORK, GOOD), "--without-fw-update", "--force",
                               "--add-kernel-support"]
    assert plan["kernel_supported"] is False
    assert plan["version"] == "23.10-1.1.9.0"


def test_facts_and_restart_recorded(host):
    facts = record(host, "rerun")  # the idempotence run: nothing installed, restart still pending
    assert facts["ofed"]["installed"] is True
    assert facts["ofed"]["package_version"] == "23.10-1.1.9.0"
    assert facts["ofed"]["flavor"] == "mlnx_ofed"
    assert facts["plan"]["installed"] == "23.10-1.1.9.0"
    assert facts["restart_required"] is True
    marker = host.file("/var/lib/gpufleet/openibd-restart-required").content_string
    assert marker == "rdma_stack: restart openibd (or reboot): OFED mlnx_ofed installed in this run\n"
