"""playbooks/site.yml checks the whole inventory in its first play (localhost, nothing gathered)
and stops before any host is contacted, listing every problem in one message."""

import os
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")

SHA = "sha256:" + "0123456789abcdef" * 4


def _inventory(tmp_path, all_vars, host_vars=None):
    """hosts.yml + group_vars/all.yml + host_vars: cp1 (control plane), gpu1 and gpu2 (GPU+RDMA)."""
    hosts = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON},
        "children": {
            "kube_control_plane": {"hosts": {"cp1": None}},
            "kube_node": {"children": {"gpu_nodes": None, "rdma_nodes": None}},
            "gpu_nodes": {"hosts": {"gpu1": None, "gpu2": None}},
            "rdma_nodes": {"hosts": {"gpu1": None, "gpu2": None}},
        }}}
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (tmp_path / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars))
    for host, values in (host_vars or {}).items():
        (tmp_path / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))
    return str(tmp_path / "hosts.yml")


def _run(inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", GPUFLEET_REPORT_DIR=os.path.dirname(inventory))
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, os.path.join(REPO, "playbooks", "site.yml")]
                          + list(extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_broken_inventory_stops_before_any_host_listing_every_problem(tmp_path):
    inventory = _inventory(tmp_path, {
        "nvidia_driver_branch": "470",                            # refused by the matrix (open modules)
        "kubernetes_cni_calico_manifest_checksum": "",            # required, empty
        "kubernetes_addons_mpi_operator_manifest_checksum": SHA,
        "gpufleet_link_layer": "infiniband",                      # not InfiniBand/Ethernet/any
        "gpufleet_gpu_cuont": 8,                                  # typo
    }, {"gpu2": {"gpudirect_mode": "dmabuf", "nvidia_driver_kernel_modules": "proprietary"}})
    proc = _run(inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "site.yml: the inventory has 5 problem(s).\nNo host was contacted or changed. Fix them and re-run:" in out
    expected = [
        "- kubernetes_cni_calico_manifest_checksum is required (the Calico manifest is downloaded) and must "
        "be sha256:<64 hex digits>, got ''",
        "- gpufleet_link_layer must be InfiniBand, Ethernet or any, got 'infiniband' [cp1, gpu1, gpu2]",
        "- unknown variable gpufleet_gpu_cuont (did you mean gpufleet_gpu_count?) [cp1, gpu1, gpu2]",
        "- compatibility open-modules-driver-branch: kernel_modules=open (from nvidia_driver_kernel_modules, "
        "default of role nvidia_driver) requires driver >= 515, but driver=470 (from nvidia_driver_branch).",
        "- compatibility dmabuf-open-modules: gpudirect_mode=dmabuf (from gpudirect_mode) requires "
        "kernel_modules = open, but kernel_modules=proprietary (from nvidia_driver_kernel_modules).",
    ]
    for line in expected:
        assert line in out, line + "\n---\n" + out
    # the first play failed and no other play started: no host was contacted
    assert "PLAY [Check the inventory before any host changes]" in out
    assert out.count("PLAY [") == 1, out
    assert "cp1" not in out.split("PLAY RECAP")[1], out


def test_good_inventory_passes_the_check(tmp_path):
    inventory = _inventory(tmp_path, {
        "kubernetes_cni_calico_manifest_checksum": SHA,
        "kubernetes_addons_mpi_operator_manifest_checksum": SHA,
        "gpufleet_phases": ["report"],
    })
    proc = _run(inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "gpufleet site run, phases: report" in out
    assert "PLAY [Workers reachable (up to the failure threshold)]" in out


def test_gpu_expectation_for_all_hosts_is_refused_naming_the_control_plane(tmp_path):
    """The old example inventory's mistake: gpufleet_gpu_count in group_vars/all expects 8 GPUs on the
    control plane too; the check says where it belongs before validation fails cp1."""
    inventory = _inventory(tmp_path, {
        "kubernetes_cni_calico_manifest_checksum": SHA,
        "kubernetes_addons_mpi_operator_manifest_checksum": SHA,
        "gpufleet_gpu_count": 8,
    })
    proc = _run(inventory, "-e", '{"gpufleet_phases": ["validate", "report"]}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert ("- expects 8 GPU(s) (gpufleet_gpu_count) but is not in group gpu_nodes, where the driver is installed "
            "and checked: set gpufleet_gpu_count in group_vars/gpu_nodes (not group_vars/all), or add the host to "
            "gpu_nodes [cp1]") in out, out


def test_tags_narrow_the_check_to_the_phases_they_run(tmp_path):
    """The Calico checksum is needed by the kubernetes phase only: --tags report neither refuses it nor
    announces the other phases (--tags validate: tests/unit/test_inventory_check.py, no host run here)."""
    inventory = _inventory(tmp_path, {"kubernetes_cni_calico_manifest_checksum": ""})
    proc = _run(inventory)
    assert proc.returncode == 2 and "kubernetes_cni_calico_manifest_checksum is required" in proc.stdout
    proc = _run(inventory, "--tags", "report")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "gpufleet site run, phases: report\n" in out or "gpufleet site run, phases: report'" in out, out


def test_variables_set_earlier_in_the_run_are_not_inventory_variables(tmp_path):
    """A playbook that runs roles before the check (node.yml then validate.yml, as the molecule
    scenarios do) has their registered results and facts in hostvars (nvidia_driver_plan,
    gpufleet_node_validation): not inventory variables, not reported; a misspelt inventory variable
    beside them still is (with its did-you-mean)."""
    inventory = _inventory(tmp_path, {"gpufleet_gpu_count": 0}, {"gpu1": {"nvidia_driver_brach": "580"}})
    playbook = tmp_path / "run.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Earlier play", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "A registered result", "ansible.builtin.command": "true", "register": "nvidia_driver_plan",
             "changed_when": False},
            {"name": "A fact", "ansible.builtin.set_fact": {"gpufleet_node_validation": {"healthy": True},
                                                           "kubernetes_prereqs_managed_state": {}}}]},
        {"name": "Check", "hosts": "localhost", "gather_facts": False,
         "vars": {"__gpufleet_check_entry": "run.yml", "__gpufleet_check_phases": ["validate"]},
         "tasks": [{"name": "Check", "ansible.builtin.import_tasks": os.path.join(
             REPO, "playbooks", "tasks", "check-inventory.yml")}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", GPUFLEET_REPORT_DIR=str(tmp_path))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, str(playbook)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "run.yml: the inventory has 1 problem(s)." in out
    assert "unknown variable nvidia_driver_brach (did you mean nvidia_driver_branch?) [gpu1]" in out
    assert "nvidia_driver_plan" not in out.split("problem(s).")[1]
    assert "gpufleet_node_validation" not in out.split("problem(s).")[1]
