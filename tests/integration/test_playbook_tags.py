"""Tags of site.yml, node.yml and kubernetes.yml (docs/tags.md): one per phase, one per role,
the inventory check and worker reachability tagged always. Read from `ansible-playbook --list-tags`
and `--list-tasks --tags ...`, the way an admin sees them."""

import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")

NODE_ROLES = ["preflight", "node_pinning", "nvidia_driver", "rdma_stack", "gpudirect", "container_runtime",
              "node_tuning"]
KUBERNETES_ROLES = ["kubernetes_prereqs", "kubernetes_control_plane", "kubernetes_worker", "kubernetes_cni",
                    "kubernetes_addons", "node_gate"]


def _ansible(playbook, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", os.path.join(REPO, "inventories", "example", "hosts.yml"),
                           os.path.join(REPO, "playbooks", playbook)] + list(args),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _all_tags(playbook):
    """The union of the task tags of every play."""
    return sorted({tag for tags in _play_tags(playbook).values() for tag in tags})


def _play_tags(playbook):
    """{play name: sorted task tags} from --list-tags."""
    plays = {}
    current = None
    for line in _ansible(playbook, "--list-tags").splitlines():
        play = re.match(r"\s+play #\d+ \([^)]*\): (.*?)\tTAGS: ", line)
        if play:
            current = play.group(1)
            continue
        task = re.match(r"\s+TASK TAGS: \[(.*)\]", line)
        if task and current:
            plays[current] = sorted(t.strip() for t in task.group(1).split(",") if t.strip())
    return plays


def test_site_lists_a_tag_per_phase_and_role():
    tags = _all_tags("site.yml")
    # certs: validate.yml's kubeadm certificate play (32141a3); etcd_snapshot: the scheduled etcd
    # snapshots in kubernetes.yml's control-plane play
    assert tags == sorted(["always", "node", "kubernetes", "validate", "report", "node_health_agent", "certs",
                           "etcd_snapshot"] + NODE_ROLES + KUBERNETES_ROLES)


def test_site_inventory_check_and_reachability_always_run():
    plays = _play_tags("site.yml")
    assert plays["Check the inventory before any host changes"] == ["always"]
    assert plays["Workers reachable (up to the failure threshold)"] == ["always"]
    # always: the admission evidence read (and its pending marker) runs with any --tags, before a role stamps the
    # node (docs/node-lifecycle.md "Admission")
    assert plays["Node stack (GPU driver, RDMA, GPUDirect, container runtime)"] == sorted(["always", "node"] + NODE_ROLES)
    assert plays["Validate GPU and RDMA readiness"] == ["validate"]
    # after validation, phase validate (the play of node.yml's import has the same name: this is site.yml's)
    assert plays["Node health agent on the GPU nodes"] == ["node_health_agent", "validate"]


def test_node_and_kubernetes_playbooks_tag_each_role():
    assert _play_tags("node.yml") == {
        # the inventory check runs with any --tags (health_agent.yml's skips itself after node.yml's)
        "Check the inventory before changing a node": ["always"],
        "Check the inventory before installing the agents": ["always", "node_health_agent"],
        "Node stack (GPU driver, RDMA, GPUDirect, container runtime)": sorted(["always", "node"] + NODE_ROLES),
        # the admission burn-in of the GPU nodes belongs to the node phase (docs/node-lifecycle.md)
        "Admission burn-in of the GPU nodes": ["node"],
        "Node health agent on the GPU nodes": ["node_health_agent"]}
    plays = _play_tags("kubernetes.yml")
    assert plays["Check the inventory before changing the cluster"] == ["always"]
    assert plays["Node prerequisites for kubeadm"] == ["kubernetes", "kubernetes_prereqs"]
    assert plays["Control plane"] == ["etcd_snapshot", "kubernetes", "kubernetes_control_plane"]
    assert plays["Workers"] == ["kubernetes", "kubernetes_worker"]
    assert plays["Pod network"] == ["kubernetes", "kubernetes_cni"]
    assert plays["Device plugins, Multus, RDMA networks, MPI operator"] == ["kubernetes", "kubernetes_addons"]
    assert plays["Label nodes and gate unhealthy ones"] == ["kubernetes", "node_gate"]


def test_selecting_a_role_tag_selects_only_that_role_and_the_always_plays():
    out = _ansible("site.yml", "--list-tasks", "--tags", "nvidia_driver")
    tasks = re.findall(r"^\s{6}(\S.*?)\tTAGS: ", out, re.M)
    assert "Install the NVIDIA driver" in tasks
    assert "Gather the facts the node roles use" in tasks
    assert "Check the inventory (groups, checksums, gpufleet_* variables, compatibility matrix)" in tasks
    for other in ("Install the RDMA stack", "Join the worker", "Install the add-ons",
                  "Validate the node (GPU health and RDMA readiness in one module run)"):
        assert other not in tasks, out


def test_the_node_health_agent_tag_selects_the_agent_play_only():
    out = _ansible("site.yml", "--list-tasks", "--tags", "node_health_agent")
    tasks = re.findall(r"^\s{6}(\S.*?)\tTAGS: ", out, re.M)
    assert "Install and start the node health agent" in tasks
    assert "Check the inventory (groups, checksums, gpufleet_* variables, compatibility matrix)" in tasks
    for other in ("Install the NVIDIA driver", "Join the worker",
                  "Validate the node (GPU health and RDMA readiness in one module run)"):
        assert other not in tasks, out
