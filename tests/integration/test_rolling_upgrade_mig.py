"""playbooks/rolling_upgrade.yml with component mig (role gpu_mig) against the API double.

Local-connection nodes, the kubernetes gate backend against tests/fake_kube_api, the stand-ins of
tests/standins: nvidia-mig-parted (the node's live MIG layout in a state file; messages and exit
codes after NVIDIA/mig-parted's assert/apply sources), nvidia-smi (the process listing) and
systemctl (the GPU clients). Every node's tier asks for all-1g.10gb. Validation is node_validate's
GPU family on the fake NVML (tests/fake_nvml, scenario h100-healthy: MIG off, over the dgx-h100 sysfs
fixture); the stand-in's apply points the node's scenario at the layout it applied, so gpu.mig checks
what was applied. No MIG-capable GPU here: the apply is verified only against the stand-in.

Run 1:
- mig-match: its layout is already all-1g.10gb: "current", never cordoned or drained, no state file,
  mig-parted asked once (assert, the document on stdin) and nothing else.
- mig-apply: MIG disabled, nvidia-dcgm and nvidia-persistenced active: cordoned, drained, the active
  clients stopped, mig-parted apply, the clients started again, assert, validated (gpu.mig passes on
  the applied layout), admitted; the written file is the layout, the boot drop-in selects it.
- mig-fail: mig-parted apply fails (the GPU reset): held, cordoned, tainted upgrade-failed, the step
  "upgrade mig" and mig-parted's message in the reason; the clients are started again.
- mig-busy: a process still uses a GPU after the drain: refused before any client is stopped or
  mig-parted apply runs; held with the process in the reason.
Run 2: mig-apply and mig-match are "current" without a drain (idempotent); the held nodes stay held.
"""

import json
import os
import subprocess

import pytest
import yaml

from fake_kube_api import FakeKubeAPI
from playbook_env import ANSIBLE_PLAYBOOK, HAS_K8S_CLIENT, REPO, VENV_PYTHON

PLAYBOOK = os.path.join(REPO, "playbooks", "rolling_upgrade.yml")
STANDINS = os.path.join(REPO, "tests", "standins")
HEALTHY = os.path.join(REPO, "tests", "fixtures", "nvml", "h100-healthy.json")
TAINT_KEY = "gpufleet.io/unhealthy"
NODES = ["mig-match", "mig-apply", "mig-fail", "mig-busy"]
WRITES = ("PATCH", "POST", "PUT", "DELETE")
ONE_G = {"mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
OFF = {"mig-enabled": False, "mig-devices": {}}
BUSY = "48213, /usr/bin/python3, GPU-4b6f2e1c-8c1d-5a57-9e0b-0d4c7d6a9f12\n"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first"),
    pytest.mark.skipif(not HAS_K8S_CLIENT, reason="the Python kubernetes client is not installed (make setup)"),
]


def _run(tmp, run_id):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp / "reports"),
               TMPDIR=str(tmp))
    extra = {"rolling_upgrade_serial": len(NODES), "rolling_upgrade_max_fail_percentage": 100,
             "rolling_upgrade_run_id": run_id}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp / "hosts.yml"), PLAYBOOK, "-e", json.dumps(extra)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)


def _read(path):
    return path.read_text() if path.exists() else None


def _node_state(tmp, api, node):
    mig = tmp / "mig" / node
    state = tmp / "nodes" / node / "upgrade-state.json"
    return {"file": json.loads(state.read_text()) if state.exists() else None,
            "node": api.node(node), "pods": api.pod_names(node),
            "live": json.loads(_read(mig / "live.json") or "null"),
            "mig_calls": [json.loads(line)[1:] for line in (_read(mig / "calls") or "").splitlines()],
            "systemctl": (_read(mig / "systemctl-calls") or "").splitlines(),
            "active": sorted((_read(mig / "active") or "").split()),
            "config": _read(mig / "config.yaml"), "dropin": _read(mig / "override.conf"),
            "nvml": os.path.realpath(mig / "nvml.json")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rolling_upgrade_mig")
    for node in NODES:
        mig = tmp / "mig" / node
        mig.mkdir(parents=True)
        (mig / "live.json").write_text(json.dumps([ONE_G if node == "mig-match" else OFF] * 8))
        (mig / "active").write_text("nvidia-dcgm.service\nnvidia-persistenced.service\nunrelated.service\n")
        (mig / "compute-apps").write_text(BUSY if node == "mig-busy" else "")
        (mig / "nvml.json").symlink_to(HEALTHY)
    # the apply failure of NVIDIA/mig-parted issue #199 (tests/transcripts/nvidia-mig-parted/0.11.0)
    (tmp / "mig" / "mig-fail" / "apply_fails").write_text("apply-bar0-endianness")
    # systemctl's calls in their own file (the mig-parted stand-in writes "calls" in the same directory)
    systemctl = tmp / "systemctl"
    systemctl.write_text("#!/bin/sh\nGPUFLEET_STANDIN_SYSTEMD_DIR=$GPUFLEET_STANDIN_MIG_DIR/systemd exec %s \"$@\"\n"
                         % os.path.join(STANDINS, "systemctl.sh"))
    systemctl.chmod(0o755)
    api = FakeKubeAPI().start()
    try:
        for node in NODES:
            api.add_node(node)
            api.add_pod("train-" + node, node, namespace="ml", owner_kind="Job")
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        mig_dir = str(tmp / "mig") + "/{{ inventory_hostname }}"
        node_vars = {
            "node_gate_api_host": "localhost", "node_gate_python": VENV_PYTHON,
            "node_gate_kubeconfig": kubeconfig, "node_gate_allow_plain_http": True,
            "rolling_upgrade_gate_backend": "kubernetes",
            "rolling_upgrade_drain_timeout": 5,
            "rolling_upgrade_manage_holds": False,
            "rolling_upgrade_validate_rdma": False,
            "rolling_upgrade_gpu_health": {"xid_source": "none"},
            "rolling_upgrade_validate_environment": {"PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml"),
                                                     "GPUFLEET_FAKE_NVML_SCENARIO": mig_dir + "/nvml.json"},
            "gpufleet_sysfs_root": os.path.join(REPO, "tests", "fixtures", "nodes", "dgx-h100"),
            "rolling_upgrade_components": ["mig"],
            "rolling_upgrade_fail_held_nodes": False,
            "rolling_upgrade_state_file": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade-state.json",
            "rolling_upgrade_state_dir": str(tmp / "nodes") + "/{{ inventory_hostname }}/upgrade",
            "gpufleet_mig_layout": "all-1g.10gb",
            "kubernetes_addons_nvidia_device_plugin_mig_strategy": "single",  # the matrix asks for it
            "gpu_mig_install": False,
            "gpu_mig_command": os.path.join(STANDINS, "bin", "nvidia-mig-parted"),
            "gpu_mig_nvidia_smi_command": os.path.join(STANDINS, "bin", "nvidia-smi"),
            "gpu_mig_systemctl_command": str(systemctl),
            "gpu_mig_config_file": mig_dir + "/config.yaml",
            "gpu_mig_boot_dropin": mig_dir + "/override.conf",
            "gpu_mig_environment": {"GPUFLEET_STANDIN_MIG_DIR": mig_dir,
                                    "GPUFLEET_STANDIN_COMPUTE_APPS": mig_dir + "/compute-apps",
                                    "GPUFLEET_FAKE_NVML_SCENARIO": mig_dir + "/nvml.json"},
        }
        inventory = {"all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
            "hosts": {"localhost": {}},
            "children": {"kube_node": {"vars": node_vars, "hosts": {node: {} for node in NODES}}},
        }}
        (tmp / "hosts.yml").write_text(json.dumps(inventory))
        for node in NODES:
            (tmp / "mig" / node / "systemd").mkdir()
            (tmp / "mig" / node / "systemd" / "active").write_text((tmp / "mig" / node / "active").read_text())
            (tmp / "mig" / node / "active").unlink()
            (tmp / "mig" / node / "active").symlink_to("systemd/active")
            (tmp / "mig" / node / "systemctl-calls").symlink_to("systemd/calls")
        first = _run(tmp, "m-1")
        with open(tmp / "reports" / "fleet-report.json") as handle:  # the fleet_report callback's checks
            report_first = json.load(handle)["hosts"]
        requests_first = list(api.requests)
        after_first = {node: _node_state(tmp, api, node) for node in NODES}
        second = _run(tmp, "m-2")
        after_second = {node: _node_state(tmp, api, node) for node in NODES}
        summaries = {}
        for run_id in ("m-1", "m-2"):
            with open(tmp / "reports" / "upgrades" / run_id / "summary.json") as handle:
                summaries[run_id] = {n["node"]: n for n in json.load(handle)["nodes"]}
        yield {"report_first": report_first, "first": first, "second": second,
               "after_first": after_first, "after_second": after_second,
               "requests_first": requests_first, "requests_second": api.requests[len(requests_first):],
               "summaries": summaries}
    finally:
        api.stop()


def _writes(requests, node):
    return [(r["method"], r["path"]) for r in requests if r["method"] in WRITES and node in r["path"]]


def test_the_runs_fail_no_host(runs):
    for key in ("first", "second"):
        out = runs[key].stdout + runs[key].stderr
        assert runs[key].returncode == 0, out
        recap = out[out.rindex("PLAY RECAP"):]
        for node in NODES:
            line = [ln for ln in recap.splitlines() if ln.startswith(node)][0]
            assert "failed=0" in line, line


def test_matching_layout_is_left_alone_without_a_drain(runs):
    state = runs["after_first"]["mig-match"]
    assert runs["summaries"]["m-1"]["mig-match"]["outcome"] == "current"
    assert "MIG layout all-1g.10gb applied" in runs["summaries"]["m-1"]["mig-match"]["reason"]
    assert _writes(runs["requests_first"], "mig-match") == []  # no cordon, no eviction, no annotation
    assert state["file"] is None and state["pods"] == ["ml/train-mig-match"]
    assert state["mig_calls"] == [["-d", "assert", "-f", "-", "-c", "all-1g.10gb"]]
    assert state["systemctl"] == [] and state["config"] is None


def test_mismatch_is_drained_applied_and_admitted(runs):
    state = runs["after_first"]["mig-apply"]
    assert runs["summaries"]["m-1"]["mig-apply"]["outcome"] == "upgraded"
    assert state["file"]["state"] == "admitted"
    assert "unschedulable" not in state["node"]["spec"] and "taints" not in state["node"]["spec"]
    assert state["pods"] == []  # drained
    assert state["live"] == [ONE_G] * 8
    assert state["nvml"].endswith("mig-apply/nvml-mig.json")
    # the validation (node_validate, gpu.mig through the fake NVML) saw the applied layout on every GPU
    checks = [c for c in runs["report_first"]["mig-apply"]["checks"] if c["id"] == "gpu.mig"]
    assert sorted(c["target"] for c in checks) == ["gpu%d" % i for i in range(8)]
    assert {c["status"] for c in checks} == {"pass"}
    assert checks[0]["observed"]["instances"] == {"1g.10gb": 7}
    # every assert runs with -d (the cause of an assertion failure tells "differs" from "cannot read")
    assert [c[:2] if c[0] == "-d" else c[:1] for c in state["mig_calls"]] == [
        ["-d", "assert"], ["-d", "assert"], ["apply"], ["-d", "assert"]]
    assert state["mig_calls"][2][1:3] == ["-f", state["mig_calls"][2][2]] and state["mig_calls"][2][2].endswith(
        "mig-apply/config.yaml")
    assert yaml.safe_load(state["config"]) == {"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    assert 'Environment="MIG_PARTED_SELECTED_CONFIG=all-1g.10gb"' in state["dropin"]
    assert state["dropin"].count("mig-apply/config.yaml") == 1
    calls = state["systemctl"]
    assert calls[0].startswith("is-active nvsm.service")
    assert calls[1:] == ["stop nvidia-dcgm.service nvidia-persistenced.service",
                         "start nvidia-dcgm.service nvidia-persistenced.service", "daemon-reload"]
    assert state["active"] == ["nvidia-dcgm.service", "nvidia-persistenced.service", "unrelated.service"]
    # the order on the API: cordoned before the pod went away, the node released at the end
    writes = _writes(runs["requests_first"], "mig-apply")
    assert writes[0][0] == "PATCH" and ("POST", "/api/v1/namespaces/ml/pods/train-mig-apply/eviction") in writes


def test_failed_apply_holds_the_node_with_mig_parteds_reason(runs):
    state = runs["after_first"]["mig-fail"]
    record = state["file"]
    assert record["state"] == "held" and record["step"] == "upgrade mig"
    assert ("Error applying MIG configuration with hooks: error checking MIG capable: error opening bar0 MMIO "
            "resource: unknown endianness for mmio: <nil>") in record["reason"]
    assert state["node"]["spec"]["unschedulable"] is True
    assert state["node"]["spec"]["taints"] == [{"key": TAINT_KEY, "value": "upgrade-failed", "effect": "NoSchedule"}]
    assert state["live"] == [OFF] * 8
    assert state["systemctl"][1:] == ["stop nvidia-dcgm.service nvidia-persistenced.service",
                                      "start nvidia-dcgm.service nvidia-persistenced.service"]
    assert "nvidia-dcgm.service" in state["active"]
    assert runs["summaries"]["m-1"]["mig-fail"]["outcome"] == "held"


def test_a_process_on_a_gpu_refuses_the_change(runs):
    state = runs["after_first"]["mig-busy"]
    record = state["file"]
    assert record["state"] == "held" and record["step"] == "upgrade mig"
    assert "reset refused: 1 process(es) use the GPUs: 48213 /usr/bin/python3 on GPU-4b6f2e1c" in record["reason"]
    assert [c[:2] for c in state["mig_calls"]] == [["-d", "assert"], ["-d", "assert"]]  # never applied
    assert state["systemctl"] == []  # no client stopped
    assert state["live"] == [OFF] * 8
    assert state["node"]["spec"]["unschedulable"] is True


def test_second_run_is_idempotent(runs):
    summary = runs["summaries"]["m-2"]
    assert summary["mig-apply"]["outcome"] == "current" and summary["mig-match"]["outcome"] == "current"
    assert summary["mig-fail"]["outcome"] == "held" and summary["mig-busy"]["outcome"] == "held"
    for node in ("mig-apply", "mig-match"):
        assert _writes(runs["requests_second"], node) == []
        assert runs["after_second"][node]["mig_calls"][-1] == ["-d", "assert", "-f", "-", "-c", "all-1g.10gb"]
        assert len(runs["after_second"][node]["mig_calls"]) == len(runs["after_first"][node]["mig_calls"]) + 1
    assert runs["after_second"]["mig-fail"]["mig_calls"] == runs["after_first"]["mig-fail"]["mig_calls"]
