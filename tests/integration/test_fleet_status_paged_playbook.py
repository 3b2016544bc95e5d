"""playbooks/fleet_status.yml, source kubernetes, reading the Node list in pages from the API double:
gpufleet_status_kube_page_size pages the list, an expired continue token restarts it and the report is
the same; a token that keeps expiring fails every host closed (agent.condition naming the page) and the
report is still written."""

import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests")]

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")

NAMES = ["node-a", "node-b", "node-c", "node-d", "node-e"]


def run(api, tmp_path, name, page_size):
    token = tmp_path / "token"
    token.write_text(api.token)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"cp-1": {}},
                                             "children": {"gpu_nodes": {"hosts": dict((n, {}) for n in NAMES)}}}}))
    reports = tmp_path / ("reports-" + name)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(reports))
    extra = json.dumps({"gpufleet_status_source": "kubernetes", "gpufleet_status_kube_server": api.url,
                        "gpufleet_status_kube_token_file": str(token), "gpufleet_status_kube_page_size": page_size})
    with api.lock:
        before = len(api.requests)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml"),
                           "-e", extra], check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    with api.lock:
        lists = [r for r in api.requests[before:] if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    hosts = json.loads((reports / "fleet-report.json").read_text())["hosts"]
    return proc, lists, hosts


def test_pages_a_restart_and_a_token_that_keeps_expiring(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
    from fake_kube_api.server import FakeKubeAPI

    failing = [{"id": "gpu.count", "target": "node", "status": "fail", "message": "7 GPUs in NVML, 8 on the PCI bus"}]
    with FakeKubeAPI() as api:
        (tmp_path / "publisher-token").write_text(api.token)
        client = KubeClient(api.url, token_file=str(tmp_path / "publisher-token"), allow_plain_http=True)
        for name in NAMES:
            api.add_node(name, realistic=True)
        for name in ("node-a", "node-c", "node-e"):
            KubePublisher(client, name).publish(True, [])
        KubePublisher(client, "node-b").publish(False, failing)
        KubePublisher(client, "node-d", clock=lambda: time.time() - 3600).publish(True, [])

        api.expire_continue(1)  # the first continue token is expired: the list starts again
        proc, lists, hosts = run(api, tmp_path, "restart", 2)
        assert proc.returncode != 0, proc.stdout  # node-b, node-d fail
        assert [r["query"].get("limit") for r in lists] == ["2"] * 5
        assert [r["status"] for r in lists] == [200, 410, 200, 200, 200]
        assert sorted(h for h in hosts if hosts[h]["healthy"]) == ["node-a", "node-c", "node-e"]
        assert [(c["id"], c["status"]) for c in hosts["node-b"]["checks"]] == [("gpu.count", "fail")]
        assert "stale" in hosts["node-d"]["checks"][0]["message"]

        api.expire_continue(None)  # every continue token expires: bounded restarts, then fail closed
        proc, lists, hosts = run(api, tmp_path, "expiring", 2)
        api.expire_continue(0)
    assert proc.returncode != 0
    assert len(lists) == 8  # 4 passes (3 restarts) of 2 requests
    assert sorted(hosts) == NAMES
    for name in NAMES:
        (check,) = hosts[name]["checks"]
        assert (check["id"], check["status"]) == ("agent.condition", "fail"), hosts[name]
        assert "the Node list could not be read" in check["message"] and "page 2 (after 2 Node(s))" in check["message"]
        assert "410 Gone, reason Expired" in check["message"]


def test_a_limit_without_the_controller_is_a_problem_of_the_check_play_not_a_task_of_its_own(tmp_path):
    """The Kubernetes source reads the API from localhost: a --limit that leaves it out is refused before anything
    is read, listed with the inventory's problems by the check play's own tasks (a task of its own in that play
    was one more pass of ansible-core's strategy over every host of localhost:all: about 0.3 s of the
    controller's CPU at 10,000 hosts)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": dict((n, {}) for n in NAMES)}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp_path / "r"))
    extra = json.dumps({"gpufleet_status_source": "kubernetes", "gpufleet_status_kube_server": "http://127.0.0.1:9"})
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml"),
                           "-e", extra, "--limit", "node-a"], check=False, env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    out = " ".join(proc.stdout.replace("\\'", "'").split())  # the yaml result format escapes ' in msg
    assert proc.returncode != 0, proc.stdout
    assert "fleet_status.yml: the inventory has 1 problem(s)." in out, proc.stdout
    assert ("gpufleet_status_source=kubernetes reads the Node conditions from the controller (localhost), which --limit "
            "node-a leaves out: add it, e.g. --limit 'node-a,localhost'. Nothing was read.") in out, proc.stdout
    check = proc.stdout.split("PLAY [Check the inventory before reading the agents' results]", 1)[1].split("PLAY [", 1)[0]
    assert [line.split("]", 1)[0] for line in check.split("TASK [")[1:]] == [
        "Select the hosts this run touches (the playbook's host pattern, narrowed by --limit)",
        "Check the inventory (groups, checksums, gpufleet_* variables, compatibility matrix)",
        "Stop with every problem of the inventory"]
    assert "PLAY [Fleet status from the Kubernetes API" not in proc.stdout
