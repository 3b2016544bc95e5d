"""preflight refuses an unsupported setup with one message listing every problem."""

import re

HEADER = re.compile(r"^preflight found 8 problem\(s\) on \S+; fix them and re-run:$")


def lines(host):
    return host.file("/root/preflight-refusal.txt").content_string.splitlines()


def test_one_message_lists_all_problems(host):
    found = lines(host)
    assert HEADER.match(found[0]), found[0]
    assert len([line for line in found if line.startswith("- ")]) == 8


def test_gpu_count_names_the_input(host):
    assert (
        "- GPUs: 0 NVIDIA GPU(s) on the PCI bus, preflight_expected_gpus is 8; reseat or replace "
        "the missing GPU(s) (or check the BIOS PCIe settings), or correct preflight_expected_gpus "
        "for this host" in lines(host))


def test_hca_count_names_the_input(host):
    assert (
        "- HCAs: 0 Mellanox PCI function(s) on the bus, preflight_expected_hcas is 8; reseat or "
        "replace the missing adapter(s), or correct preflight_expected_hcas for this host"
        in lines(host))


def test_memory(host):
    assert any(re.match(
        r"^- memory: \d+(\.\d)? GiB total, preflight_min_memory_gb requires 100000(\.0)? GiB$", line)
        for line in lines(host)), lines(host)


def test_unmeasurable_disk_path(host):
    assert any(line.startswith(
        "- disk: cannot measure free space on /nonexistent (preflight_min_free_disk_gb): df: ")
        for line in lines(host)), lines(host)


def test_kernel_headers_for_running_kernel(host):
    release = host.check_output("uname -r")
    assert (
        "- kernel headers: no installable linux-headers-%s for kernel %s in the configured "
        "repositories (DKMS builds of the NVIDIA driver and OFED need it); enable the repository "
        "that carries it, set preflight_kernel_release to the kernel the node will boot, or "
        "preflight_require_kernel_headers=false when no module is built" % (release, release)
        in lines(host))


def test_secure_boot_with_dkms(host):
    assert (
        "- secure boot: Secure Boot is enabled and preflight_driver_source=dkms builds unsigned "
        "kernel modules (nvidia, OFED) the kernel will refuse to load; use "
        "preflight_driver_source=precompiled (signed modules), enroll a MOK key for DKMS signing "
        "and set preflight_mok_signing=true, or disable Secure Boot in the firmware" in lines(host))


def test_compatibility_matrix_refusal(host):
    assert (
        "- compatibility open-modules-driver-branch: kernel_modules=open requires driver >= 515, "
        "but driver=470 (from nvidia_driver_branch). "
        "NVIDIA ships the open flavour of its kernel modules starting with the 515 driver release series; "
        "an older branch has only the proprietary modules. (source: "
        "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html)"
        in lines(host))


def test_containerd_dropin_in_another_version_is_refused(host):
    # prepare.yml: config.toml in version 2, conf.d/99-nvidia.toml in version 4
    expected = (
        "- compatibility containerd-dropin-root-version: containerd_config_version=2 (from "
        "/etc/containerd/config.toml) requires containerd_dropin_versions (each) = containerd_config_version, "
        "but containerd_dropin_versions=4 (from /etc/containerd/conf.d/99-nvidia.toml=4); "
        "containerd_config_version=2 (from /etc/containerd/config.toml). ")
    found = [line for line in lines(host) if line.startswith(expected)]
    assert len(found) == 1, lines(host)
    assert "Fix: rewrite the named drop-in" in found[0]
