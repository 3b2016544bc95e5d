"""gpu_facts / gpu_health through `ansible localhost -m`, with the fake NVML binding first on
the module interpreter's PYTHONPATH, and with the real nvidia-ml-py on a host without a driver."""

import json
import os
import shutil
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
ANSIBLE = os.path.join(REPO, ".venv", "bin", "ansible")
FAKE_NVML = os.path.join(REPO, "tests", "fake_nvml")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "nvml")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
DGX = os.path.join(NODES, "dgx-h100")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="run `make setup` first")


def adhoc(tmp_path, module, args, scenario=None, check=False):
    """Run ``module`` on localhost; return (exit status, result of localhost, process)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("GPUFLEET_FAKE_NVML_SCENARIO", None)
    env.update(
        {
            "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
            "ANSIBLE_PYTHON_INTERPRETER": VENV_PYTHON,
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "GPUFLEET_REPORT_DIR": str(tmp_path / "reports"),
        }
    )
    if scenario:
        # The local connection hands this environment to the module's interpreter, so the
        # fake binding shadows the installed nvidia-ml-py there.
        env["PYTHONPATH"] = FAKE_NVML
        env["GPUFLEET_FAKE_NVML_SCENARIO"] = os.path.join(SCENARIOS, scenario + ".json")
    argv = [ANSIBLE, "localhost", "-m", module, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    # Only the JSON document; a callback may print a summary after it.
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{") :])
    return proc.returncode, report["plays"][0]["tasks"][0]["hosts"]["localhost"], proc


def by_key(result):
    return {(c["id"], c["target"]): c for c in result["checks"]}


def test_gpu_facts_on_dgx_h100(tmp_path):
    rc, result, proc = adhoc(tmp_path, "gpufleet.cluster.gpu_facts", {"root": DGX}, check=True)
    assert rc == 0, proc.stderr
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["gpu_count"] == 8 and nvidia["nvswitch_count"] == 4
    assert nvidia["driver"] == {"loaded": True, "version": "580.95.05"}
    assert nvidia["peermem"]["registered"] is True and nvidia["fabricmanager_required"] is True
    assert result["changed"] is False


def test_gpu_health_healthy_dgx_with_fake_nvml(tmp_path):
    rc, result, proc = adhoc(
        tmp_path,
        "gpufleet.cluster.gpu_health",
        {"root": DGX, "expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
        scenario="h100-healthy",
        check=True,
    )
    assert rc == 0, proc.stdout[-2000:]
    # Values only the fake gives prove the environment reached the module's interpreter.
    assert result["nvml"] == {
        "available": True,
        "error": None,
        "driver_version": "580.95.05",
        "cuda_driver_version": "13.0",
    }
    assert result["healthy"] is True and result["changed"] is False
    assert result["summary"]["fail"] == 0 and result["summary"]["warn"] == 0
    assert result["summary"]["pass"] == 8 * 12 + 3  # 12 passing rules per GPU; nvml, count, driver
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert result["gpus"][4]["pci_bus_id"] == "0000:9a:00.0"
    checks = by_key(result)
    assert checks[("gpu.nvlink", "gpu7")]["observed"] == {"supported": 18, "active": 18, "inactive": []}


def test_gpu_health_fails_on_fatal_xid_and_degraded_pcie(tmp_path):
    node = tmp_path / "node"
    shutil.copytree(DGX, str(node), symlinks=True)
    recent = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() - 3600))
    log = node / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "%s dgx kernel: NVRM: Xid (PCI:0000:9a:00): 119, pid=48213, name=python3, Timeout after 6s of "
        "waiting for RPC response from GPU4 GSP!\n"
        "%s dgx kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=50102, name=train.py, Graphics Exception\n"
        % (recent, recent)
    )
    rc, result, _ = adhoc(
        tmp_path, "gpufleet.cluster.gpu_health", {"root": str(node)}, scenario="h100-pcie-x8"
    )
    assert rc != 0 and result["failed"] is True
    assert "gpu.xid[gpu4]" in result["msg"]
    checks = by_key(result)  # the full result is returned with the failure
    assert checks[("gpu.xid", "gpu4")]["status"] == "fail"
    assert checks[("gpu.xid", "gpu0")]["status"] == "warn"  # XID 13: restart the application (catalog)
    assert checks[("gpu.pcie", "gpu4")]["status"] == "warn"
    assert result["healthy"] is False


def test_gpu_health_fail_on_warn_and_short_module_name(tmp_path):
    rc, result, _ = adhoc(
        tmp_path,
        "gpu_health",
        {"root": DGX, "xid_source": "none", "fail_on": "warn"},
        scenario="h100-row-remap-pending",
    )
    assert rc != 0 and "gpu.row_remap[gpu2]" in result["msg"] and result["healthy"] is True


def test_gpu_health_real_binding_host_without_gpu(tmp_path):
    """The real nvidia-ml-py: no GPU on the bus, so NVML is not even initialised; ok."""
    rc, result, proc = adhoc(tmp_path, "gpufleet.cluster.gpu_health", {"root": os.path.join(NODES, "empty")})
    assert rc == 0, proc.stdout[-2000:]
    checks = by_key(result)
    assert checks[("gpu.nvml", "node")]["status"] == "skip"
    assert "no NVIDIA GPU on the PCI bus" in checks[("gpu.nvml", "node")]["message"]
    assert {c["status"] for c in result["checks"]} == {"skip"} and result["healthy"] is True
    assert result["nvml"]["available"] is False and result["gpus"] == []


def test_gpu_health_real_binding_gpu_without_driver(tmp_path):
    """The real nvidia-ml-py on a GPU host whose driver is missing (this machine has no libnvidia-ml)."""
    rc, result, _ = adhoc(
        tmp_path,
        "gpufleet.cluster.gpu_health",
        {"root": os.path.join(NODES, "gpu-nouveau"), "fail_on": "never", "xid_source": "none"},
    )
    if result["nvml"]["available"]:
        pytest.skip("this machine has a working NVIDIA driver")
    assert rc == 0
    nvml_check = by_key(result)[("gpu.nvml", "node")]
    assert nvml_check["status"] == "fail" and result["healthy"] is False
    assert (
        "libnvidia-ml.so.1 not found" in nvml_check["message"]
        and "nouveau is loaded" in nvml_check["message"]
    )


@pytest.mark.parametrize(
    "args,words",
    [
        ({"root": "/nonexistent/node"}, "option root: /nonexistent/node is not a directory"),
        ({"root": DGX, "xid_window_hours": 0}, "option xid_window_hours"),
    ],
)
def test_gpu_health_bad_input_names_the_option(tmp_path, args, words):
    rc, result, _ = adhoc(tmp_path, "gpufleet.cluster.gpu_health", args)
    assert rc != 0 and words in result["msg"]
