"""The action fleet_conditions (playbooks/fleet_status.yml, gpufleet_status_source=kubernetes): the
lookup agent_conditions' read in one controller task, its checks returned as record_checks returns
them with option hosts (issue 45 item 3: no templated lookup answer, no module run, same report)."""

import time
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.action import fleet_conditions as action_plugin
from ansible_collections.gpufleet.cluster.plugins.action.fleet_conditions import ActionModule, checks_result
from ansible_collections.gpufleet.cluster.plugins.modules import fleet_conditions as module_doc
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import record_checks_work
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import agent_status
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import agent_conditions
from ansible_collections.gpufleet.cluster.plugins.modules.record_checks import ARGUMENT_SPEC
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import is_validation_action
from fake_kube_api.server import FakeKubeAPI
from test_fleet_status_paged import client, condition, put_condition


class Ended(Exception):
    pass


class FakeModule(object):
    """What run_module needs of AnsibleModule: the parameters as given, exit/fail end the run."""

    params = None

    def __init__(self, argument_spec, **options):
        self.params = dict(FakeModule.params)

    def exit_json(self, **result):
        raise Ended(dict(result, failed=False))

    def fail_json(self, **result):
        raise Ended(dict(result, failed=True))


def record_checks(hosts, fail_on):
    """record_checks' result (its work through the one exit path) for option hosts."""
    FakeModule.params = {"hosts": hosts, "checks": None, "fail_on": fail_on}
    with pytest.raises(Ended) as ended:
        run_module(ARGUMENT_SPEC, record_checks_work, module_class=FakeModule)
    return ended.value.args[0]


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
CHECK = st.one_of(
    st.fixed_dictionaries({"id": st.sampled_from(["agent.condition", "gpu.count", ""]), "target": TEXT,
                           "status": st.sampled_from(["pass", "warn", "fail", "skip", "bad"]), "message": TEXT}),
    st.none(), TEXT)


@settings(max_examples=200, deadline=None)
@given(hosts=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.lists(CHECK, max_size=3), max_size=3),
       fail_on=st.sampled_from(["fail", "warn", "never"]))
def test_the_action_returns_what_record_checks_returns(hosts, fail_on):
    module = record_checks(hosts, fail_on)
    try:
        action = checks_result(hosts, fail_on)
    except AnsibleActionFail as exc:  # an invalid check: record_checks fails naming it, so does the action
        assert module["failed"] and module["msg"] == exc.message
        assert "host_checks" not in module
        return
    assert dict(action, failed=action.get("failed", False)) == module


def test_the_action_is_a_validation_task_of_the_fleet_report():
    assert is_validation_action("gpufleet.cluster.fleet_conditions")


def action_run(args, hostvars):
    task = Task()
    task.action = "gpufleet.cluster.fleet_conditions"
    task.args = args
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir=None))  # the action runs no command
    action = ActionModule(task, connection, PlayContext(), None, None, None)
    return action.run(task_vars={"hostvars": hostvars})


@pytest.mark.parametrize("page_size", [1, 2, 500, 0, "x"])
def test_the_action_reports_what_the_lookup_reports(tmp_path, monkeypatch, page_size):
    # One clock for the three reads: a stale heartbeat's message names its age in seconds, and three reads
    # a second apart named 95992181 and 95992182 (a CI run of 54b17c6 failed on it).
    frozen = time.time()
    monkeypatch.setattr(agent_status, "time", SimpleNamespace(time=lambda: frozen))
    with FakeKubeAPI() as api:
        names = ["node%d" % index for index in range(5)]
        for index, name in enumerate(names):
            api.add_node(name, realistic=index == 0)
            if index % 4 != 3:
                put_condition(api, name, condition())
        token = tmp_path / "token"
        token.write_text(api.token)
        hostvars = {"node1": {"gpufleet_health_agent": False}}
        options = {"hosts": names + ["gone"], "server": api.url, "token_file": str(token), "page_size": page_size}
        result = action_run(dict(options, fail_on="never"), hostvars)
        kept = [name for name in options["hosts"] if name != "node1"]
        if page_size in (0, "x"):
            looked_up = result["host_checks"]
        else:  # the lookup's read of the same hosts (its opt-out: node1)
            looked_up = agent_conditions(kept, client(api, tmp_path), page_size=page_size)[0]
        failing = action_run(dict(options, fail_on="fail"), hostvars)
    assert result["host_checks"] == looked_up
    assert sorted(looked_up) == ["gone", "node0", "node2", "node3", "node4"]  # node1 opted out
    assert not result.get("failed") and result["healthy"] is False  # node3 without condition, gone without Node
    if page_size in (0, "x"):
        assert all("page_size" in checks[0]["message"] for checks in looked_up.values())
    assert failing["failed"] and failing["host_checks"] == looked_up


def test_the_action_without_hostvars_fails_the_task_as_the_lookup_does():
    with pytest.raises(AnsibleActionFail, match="no hostvars"):
        action_run({"hosts": ["a"], "server": "http://127.0.0.1:1"}, None)


def test_the_module_documents_the_action_s_options():
    assert module_doc.ARGUMENT_SPEC == action_plugin.ARGUMENT_SPEC
