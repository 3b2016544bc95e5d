"""Filter package_plan: the install request of nvidia_driver, rdma_stack and container_runtime.

The cases are the plans the roles computed with Jinja before the filter existed (the
nvidia_driver cuda_repo and distro molecule scenarios assert the same requests on real apt)."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.packages import FilterModule, package_plan


def test_filter_module_exports_package_plan():
    assert FilterModule().filters() == {"package_plan": package_plan}


def test_nvidia_cuda_repo_apt_exact_version():
    plan = package_plan(["cuda-drivers-535", "nvidia-fabricmanager-535"], "apt",
                        version="535.183.01", glob="-*", exclude="^(linux-modules-|@)", extra=[])
    assert plan == {
        "packages": ["cuda-drivers-535=535.183.01-*", "nvidia-fabricmanager-535=535.183.01-*"],
        "pinned": ["cuda-drivers-535", "nvidia-fabricmanager-535"],
        "unpinned": [],
    }


def test_nvidia_distro_with_unpinned_persistenced():
    plan = package_plan(["libnvidia-ml1", "nvidia-smi"], "apt", version="535.261.03", glob="-*",
                        exclude="^(linux-modules-|@)", extra=["nvidia-persistenced"])
    assert plan["packages"] == ["libnvidia-ml1=535.261.03-*", "nvidia-smi=535.261.03-*", "nvidia-persistenced"]
    assert plan["pinned"] == ["libnvidia-ml1", "nvidia-smi"]
    assert plan["unpinned"] == ["nvidia-persistenced"]


def test_nvidia_branch_only_installs_names():
    # No exact version: the apt pin (branch pattern) chooses the version, the request is the names.
    plan = package_plan(["nvidia-open-550"], "apt", version="", glob="-*", exclude="^(linux-modules-|@)")
    assert plan == {"packages": ["nvidia-open-550"], "pinned": ["nvidia-open-550"], "unpinned": []}


def test_ubuntu_precompiled_modules_carry_the_kernel_version():
    packages = ["linux-modules-nvidia-550-generic", "nvidia-headless-no-dkms-550", "nvidia-utils-550",
                "nvidia-fabricmanager-550"]
    plan = package_plan(packages, "apt", version="550.127.05", glob="-*", exclude="^(linux-modules-|@)")
    assert plan["packages"] == [
        "nvidia-headless-no-dkms-550=550.127.05-*", "nvidia-utils-550=550.127.05-*",
        "nvidia-fabricmanager-550=550.127.05-*", "linux-modules-nvidia-550-generic"]
    assert plan["unpinned"] == ["linux-modules-nvidia-550-generic"]


def test_dnf_module_stream_is_not_versioned():
    plan = package_plan(["@nvidia-driver:550-open", "nvidia-fabric-manager"], "dnf", version="550.127.05",
                        exclude="^(linux-modules-|@)")
    assert plan["packages"] == ["nvidia-fabric-manager-550.127.05", "@nvidia-driver:550-open"]
    assert plan["pinned"] == ["nvidia-fabric-manager"]


def test_rdma_inbox_apt_pins_only_rdma_core_binaries():
    binaries = ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "libibverbs1"]
    plan = package_plan(["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "perftest"],
                        "apt", version="44.0-2", glob="*", only=binaries)
    assert plan["packages"] == ["rdma-core=44.0-2*", "ibverbs-providers=44.0-2*", "ibverbs-utils=44.0-2*",
                                "infiniband-diags=44.0-2*", "perftest"]
    assert plan["pinned"] == ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags"]
    assert plan["unpinned"] == ["perftest"]


def test_rdma_inbox_without_version_installs_names():
    packages = ["rdma-core", "perftest"]
    assert package_plan(packages, "apt", version="", glob="*", only=["rdma-core"])["packages"] == packages


def test_rdma_inbox_dnf_versions_rdma_core_only():
    plan = package_plan(["rdma-core", "libibverbs-utils", "perftest"], "dnf", version="48.0", only=["rdma-core"])
    assert plan["packages"] == ["rdma-core-48.0", "libibverbs-utils", "perftest"]


@pytest.mark.parametrize("pkg_mgr, expected", [
    ("apt", ["doca-ofed=2.9.1-*"]),
    ("dnf", ["doca-ofed-2.9.1"]),
])
def test_doca_profile(pkg_mgr, expected):
    assert package_plan(["doca-ofed"], pkg_mgr, version="2.9.1", glob="-*")["packages"] == expected


@pytest.mark.parametrize("pkg_mgr, sep", [("apt", "="), ("dnf", "-")])
def test_container_toolkit_exact_version(pkg_mgr, sep):
    packages = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                "libnvidia-container1"]
    plan = package_plan(packages, pkg_mgr, version="1.17.8-1")
    assert plan["packages"] == [name + sep + "1.17.8-1" for name in packages]


def test_none_arguments_mean_defaults():
    assert package_plan(["a"], "apt", version=None, glob=None, only=None, exclude=None, extra=None) == {
        "packages": ["a"], "pinned": ["a"], "unpinned": []}


@pytest.mark.parametrize("kwargs, message", [
    ({"packages": "rdma-core"}, "the package list must be a list of package names"),
    ({"packages": ["rdma core"]}, "the package list: 'rdma core' is not a package name"),
    ({"packages": [""]}, "is not a package name"),
    ({"packages": [None]}, "is not a package name"),
    ({"pkg_mgr": "yum"}, "the package manager must be one of apt, dnf, got 'yum'"),
    ({"version": "1.0 2"}, "the version must be a string without whitespace"),
    ({"version": 535}, "the version must be a string without whitespace"),
    ({"glob": "- *"}, "glob must be a string without whitespace"),
    ({"only": "rdma-core"}, "only must be a list of package names"),
    ({"extra": ["a b"]}, "extra: 'a b' is not a package name"),
    ({"exclude": "^(linux-"}, "exclude '^(linux-' is not a regular expression"),
    ({"exclude": ["^@"]}, "exclude must be a regular expression string"),
])
def test_bad_input_names_the_argument(kwargs, message):
    args = {"packages": ["rdma-core"], "pkg_mgr": "apt"}
    args.update(kwargs)
    packages, pkg_mgr = args.pop("packages"), args.pop("pkg_mgr")
    with pytest.raises(AnsibleFilterError, match="^package_plan: ") as error:
        package_plan(packages, pkg_mgr, **args)
    assert message in str(error.value)
