"""A node provisioned by the node roles reaches NVML through the binding they installed: with
Debian's libnvidia-ml1 and no kernel module (a container) NVML answers Driver Not Loaded, and
gpu.nvml says so, not "binding not importable"."""

import json

RESULT = "/var/lib/gpufleet-test/node-validation.json"
BINDING_DIR = "/usr/local/lib/gpufleet/nvml/nvidia_ml_py-13.615.71-py3-none-any"


def _result(host):
    return json.loads(host.file(RESULT).content_string)


def _check(host, check_id):
    checks = [c for c in _result(host)["checks"] if c["id"] == check_id]
    assert len(checks) == 1, checks
    return checks[0]


def test_the_distribution_python_imports_the_pinned_binding(host):
    # /usr/bin/python3 is the interpreter ansible discovers on Debian (interpreter_python auto).
    out = host.check_output("/usr/bin/python3 -c 'import pynvml; print(pynvml.__file__)'")
    assert out == BINDING_DIR + "/pynvml.py"
    pth = host.check_output("grep -rlx %s /usr/local/lib/python3*/dist-packages/" % BINDING_DIR)
    assert pth.endswith("/gpufleet-nvml.pth")


def test_the_real_nvml_library_is_installed(host):
    assert host.package("libnvidia-ml1").is_installed
    assert host.package("libnvidia-ml1").version.startswith("535.261.03")
    out = host.check_output("/usr/bin/python3 -c 'import ctypes; ctypes.CDLL(\"libnvidia-ml.so.1\"); print(\"ok\")'")
    assert out == "ok"


def test_gpu_nvml_reports_driver_not_loaded(host):
    check = _check(host, "gpu.nvml")
    assert check["status"] == "fail"
    assert check["observed"] == "driver_not_loaded"
    assert "NVIDIA kernel driver not loaded (NVML answers Driver Not Loaded)" in check["message"]
    assert "NVMLError_DriverNotLoaded" in check["message"]


def test_driver_not_loaded_is_not_reported_as_a_missing_binding(host):
    check = _check(host, "gpu.nvml")
    assert "not importable" not in check["message"]
    assert "nvidia-ml-py" not in check["message"]
    nvml = _result(host)["nvml"]
    assert nvml["available"] is False
    assert "Driver Not Loaded" in nvml["error"] and "not importable" not in nvml["error"]


def test_the_node_is_not_admitted(host):
    result = _result(host)
    assert result["healthy"] is False
    assert "gpu.nvml" in [c["id"] for c in result["checks"] if c["status"] == "fail"]


# side_effect.yml: the files deleted by hand are back, the run said why it ran the role, and the
# new stamp holds a snapshot of what the role manages (docs/performance.md, converged-role skip).
BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
SYSCTL = "/etc/sysctl.d/99-kubernetes.conf"


def test_the_repair_run_restored_the_deleted_files(host):
    blacklist = host.file(BLACKLIST)
    assert blacklist.exists and blacklist.mode == 0o644
    assert "blacklist nouveau" in blacklist.content_string
    pth = host.check_output("/usr/bin/python3 -c \"import site; print(site.getsitepackages()[0])\"") + "/gpufleet-nvml.pth"
    assert host.file(pth).content_string.strip() == BINDING_DIR


def test_the_repair_run_restored_the_sysctl_file(host):
    sysctl = host.file(SYSCTL)
    assert sysctl.exists and "net.ipv4.ip_forward = 1" in sysctl.content_string


def test_the_repair_runs_named_the_drift(host):
    plan = json.loads(host.file("/var/lib/gpufleet-test/repair-plan-node.json").content_string)
    assert plan["converged"] == []
    assert "drift: %s missing; " % BLACKLIST in plan["run"]["nvidia_driver"]
    plan = json.loads(host.file("/var/lib/gpufleet-test/repair-plan-kubernetes.json").content_string)
    assert plan["run"] == {"kubernetes_prereqs": "drift: %s missing" % SYSCTL}


def test_the_new_stamps_record_what_the_roles_manage(host):
    stamps = json.loads(host.file("/var/lib/gpufleet/role-state.json").content_string)["roles"]
    files = stamps["nvidia_driver"]["managed"]["files"]
    assert len(files[BLACKLIST]["sha256"]) == 64 and files[BLACKLIST]["mode"] == "0644"
    assert any(path.endswith("/gpufleet-nvml.pth") for path in files)
    # keyed as dpkg prints the package, with its architecture qualifier (one entry per architecture)
    packages = stamps["nvidia_driver"]["managed"]["packages"]
    ml = [version for name, version in packages.items() if name.split(":")[0] == "libnvidia-ml1"]
    assert ml and all(version.startswith("535.261.03") for version in ml), packages
    assert len(stamps["kubernetes_prereqs"]["managed"]["files"][SYSCTL]["sha256"]) == 64
    assert stamps["kubernetes_prereqs"]["managed"]["packages"] == {}  # kubernetes_prereqs_install_packages: false
