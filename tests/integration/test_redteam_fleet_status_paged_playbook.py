"""Red team (issue 45 item 3): playbooks/fleet_status.yml, source kubernetes, driven the way its header
comment documents it (`-e key=value` extra vars, so gpufleet_status_kube_page_size arrives as a string)
against the API double: the pages are read with that size, a host opted out of the agent
(gpufleet_health_agent false) is never reported, a host without a Node fails closed, a Node outside the
inventory is not reported."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
sys.path[:0] = [os.path.join(REPO, ".collections"), os.path.join(REPO, "tests")]

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="run `make setup` first")


def test_key_value_page_size_opted_out_host_and_missing_node(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
    from fake_kube_api.server import FakeKubeAPI

    with FakeKubeAPI() as api:
        token = tmp_path / "token"
        token.write_text(api.token)
        client = KubeClient(api.url, token_file=str(token), allow_plain_http=True)
        for name in ("node-a", "node-b", "node-c", "stranger"):
            api.add_node(name)
            KubePublisher(client, name).publish(True, [])
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(json.dumps({"all": {"hosts": {"cp-1": {}}, "children": {"gpu_nodes": {"hosts": {
            "node-a": {}, "node-b": {}, "node-c": {}, "no-node": {},
            "opted-out": {"gpufleet_health_agent": False}}}}}}))
        reports = tmp_path / "reports"
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(reports))
        with api.lock:
            before = len(api.requests)
        # the header comment's usage: -e name=value (strings)
        proc = subprocess.run(
            [ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml"),
             "-e", "gpufleet_status_source=kubernetes", "-e", "gpufleet_status_kube_server=%s" % api.url,
             "-e", "gpufleet_status_kube_token_file=%s" % token, "-e", "gpufleet_status_kube_page_size=2"],
            check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        with api.lock:
            lists = [r for r in api.requests[before:] if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    hosts = json.loads((reports / "fleet-report.json").read_text())["hosts"]
    assert [r["query"].get("limit") for r in lists] == ["2", "2"], (lists, proc.stdout[-3000:])
    # opted out: "fleet_status.yml leaves the host out"; a Node outside the inventory is no host of the report
    assert sorted(hosts) == ["no-node", "node-a", "node-b", "node-c"], proc.stdout[-3000:]
    assert all(hosts[n]["healthy"] for n in ("node-a", "node-b", "node-c")), hosts
    (check,) = hosts["no-node"]["checks"]
    assert (check["id"], check["status"]) == ("agent.condition", "fail")  # "no Node ... -> fail"
    assert proc.returncode != 0


def run_kv(api, tmp_path, name, *extra):
    token = tmp_path / "token"
    token.write_text(api.token)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"cp-1": {}}, "children": {"gpu_nodes": {"hosts": {
        "node-a": {}, "node-b": {}, "node-c": {}}}}}}))
    reports = tmp_path / ("reports-" + name)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(reports))
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "fleet_status.yml"),
            "-e", "gpufleet_status_source=kubernetes", "-e", "gpufleet_status_kube_server=%s" % api.url,
            "-e", "gpufleet_status_kube_token_file=%s" % token]
    for item in extra:
        argv += ["-e", item]
    proc = subprocess.run(argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    report = reports / "fleet-report.json"
    return proc, (json.loads(report.read_text())["hosts"] if report.exists() else None)


def test_key_value_max_age(tmp_path):
    """Header comment: gpufleet_status_max_age "seconds after which a result is stale", given as -e
    name=value (a string), still decides staleness; page size 1 given the same way pages by one."""
    import time

    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
    from fake_kube_api.server import FakeKubeAPI

    with FakeKubeAPI() as api:
        (tmp_path / "publisher-token").write_text(api.token)
        client = KubeClient(api.url, token_file=str(tmp_path / "publisher-token"), allow_plain_http=True)
        for name in ("node-a", "node-b", "node-c"):
            api.add_node(name)
        # node-a is fresh while the run takes less than the max age to reach the read (60 s left node-a one
        # minute for ansible-playbook's start and the check play on a loaded CI machine; 300 s: five);
        # node-b/c are stale at 300 s and would be fresh at the default 600 s: the -e value decides
        KubePublisher(client, "node-a").publish(True, [])
        KubePublisher(client, "node-b", clock=lambda: time.time() - 450).publish(True, [])  # 7.5 min old
        KubePublisher(client, "node-c", clock=lambda: time.time() - 450).publish(True, [])
        proc, hosts = run_kv(api, tmp_path, "max-age", "gpufleet_status_max_age=300", "gpufleet_status_kube_page_size=1")
    assert hosts is not None, proc.stdout[-3000:]
    assert hosts["node-a"]["healthy"] and not hosts["node-b"]["healthy"] and not hosts["node-c"]["healthy"], hosts
    assert "stale" in hosts["node-b"]["checks"][0]["message"]
    assert proc.returncode != 0


@pytest.mark.parametrize("bad", ["lots", "0"])
def test_a_page_size_that_is_no_number_after_a_healthy_run(tmp_path, bad):
    """contracts, Fleet status: a list that cannot be read fails every reported host with agent.condition,
    and the report is written. Was: with -e gpufleet_status_kube_page_size=lots (or 0) the lookup raised,
    the run failed on localhost only, and fleet-report.json kept node-a/b/c healthy from the last run."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher
    from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeClient
    from fake_kube_api.server import FakeKubeAPI

    with FakeKubeAPI() as api:
        (tmp_path / "publisher-token").write_text(api.token)
        client = KubeClient(api.url, token_file=str(tmp_path / "publisher-token"), allow_plain_http=True)
        for name in ("node-a", "node-b", "node-c"):
            api.add_node(name)
            KubePublisher(client, name).publish(True, [])
        proc, hosts = run_kv(api, tmp_path, "same", "gpufleet_status_kube_page_size=2")
        assert proc.returncode == 0 and all(h["healthy"] for h in hosts.values())
        proc, hosts = run_kv(api, tmp_path, "same", "gpufleet_status_kube_page_size=%s" % bad)
    assert proc.returncode != 0 and hosts is not None
    for name in ("node-a", "node-b", "node-c"):
        assert not hosts[name]["healthy"], (name, hosts[name])
        (check,) = hosts[name]["checks"]
        assert (check["id"], check["status"]) == ("agent.condition", "fail"), hosts[name]
        assert "gpufleet_status_kube_page_size" in check["message"], check
