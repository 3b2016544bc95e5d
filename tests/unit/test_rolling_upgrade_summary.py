"""rolling_upgrade's run summary says when a run did not finish (roles/rolling_upgrade/tasks/summary.yml).

The summary is written when the run starts (run.yml) and after every node's record (report.yml).
A run killed, stopped by max_fail_percentage or failing before a node's record never writes again,
so the summary it leaves must say so itself: ``aborted`` is true until every node of the run has a
record (or the canary stopped the run on purpose), ``last_step`` says how far it got. Runs the
role's own task files with ansible-playbook on localhost (no node is contacted): one play per run
of a case, every play of the module in one ansible-playbook run (the plays share no state: each
run's variables are its play's, each case has its own summary directory)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    rolling_upgrade_summary_dir: "{summary_dir}"
    rolling_upgrade_run_id: "{run_id}"
  tasks:
    - name: Open the run
      ansible.builtin.include_role:
        name: gpufleet.cluster.rolling_upgrade
        tasks_from: run
      vars:
        rolling_upgrade_run_hosts: [node1, node2, node3]
    - name: Records of some nodes, as report.yml writes them
      ansible.builtin.copy:
        dest: "{summary_dir}/{run_id}/nodes/{{{{ item }}}}.json"
        content: '{{{{ {{"node": item, "outcome": "upgraded", "run_id": "{run_id}", "state": "admitted", "step": "",
                      "reason": "", "failed_checks": [], "resumed_from": "", "versions_before": {{}},
                      "versions_after": {{}}}} | to_json }}}}'
        mode: "0644"
      loop: {recorded}
      when: {count} > 0
    - name: The summary after those records
      ansible.builtin.include_role:
        name: gpufleet.cluster.rolling_upgrade
        tasks_from: summary
      vars:
        __rolling_upgrade_summary_hosts: [node1, node2, node3]
        __rolling_upgrade_summary_step: "record of {last}"
      when: {count} > 0
"""


# (case, run id, recorded nodes), in the order they run; runs of one case share its summary directory
RUNS = [
    ("started", "20261125T101112Z-beef", []),
    ("one-record", "20261125T101112Z-beef", ["node1"]),
    ("all-records", "20261125T101112Z-beef", ["node1", "node2", "node3"]),
    ("next-run", "20261125T090000Z-0001", ["node1", "node2", "node3"]),
    ("next-run", "20261125T100000Z-0002", []),  # the next run dies after its start
]


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """Every run of RUNS as one play of one ansible-playbook run -> (case, run id) -> (summary.json,
    summary.md, where the case's latest points after its last run; None for an earlier run)."""
    tmp = tmp_path_factory.mktemp("rolling_upgrade_summary")
    plays = [PLAYBOOK.format(summary_dir=tmp / case / "upgrades", run_id=run_id, recorded=json.dumps(recorded),
                             count=len(recorded), last=", ".join(recorded[-1:]))
             for case, run_id, recorded in RUNS]
    book = tmp / "summaries.yml"
    book.write_text("\n".join(plays))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([ansible, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(book)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = {}
    for index, (case, run_id, _) in enumerate(RUNS):
        summary_dir = tmp / case / "upgrades"
        with open(str(summary_dir / run_id / "summary.json")) as handle:
            summary = json.load(handle)
        with open(str(summary_dir / run_id / "summary.md")) as handle:
            text = handle.read()
        last = all(later[0] != case for later in RUNS[index + 1:])
        result[(case, run_id)] = (summary, text, os.readlink(str(summary_dir / "latest")) if last else None)
    return result


@pytest.mark.parametrize("case, recorded, aborted, step", [
    ("started", [], True, "run started: 0 of 3 node record(s)"),
    ("one-record", ["node1"], True, "record of node1: 1 of 3 node record(s)"),
    ("all-records", ["node1", "node2", "node3"], False, "record of node3: 3 of 3 node record(s)"),
])
def test_summary_says_whether_the_run_finished(summaries, case, recorded, aborted, step):
    summary, text, latest = summaries[(case, "20261125T101112Z-beef")]
    assert latest == "20261125T101112Z-beef"
    assert summary["run_id"] == "20261125T101112Z-beef"
    assert summary["aborted"] is aborted and summary["last_step"] == step
    assert summary["counts"]["not_reached"] == 3 - len(recorded)
    assert ("Not finished" in text) is aborted
    if aborted:
        assert step in text


def test_an_aborted_new_run_does_not_show_the_previous_runs_summary(summaries):
    finished, _, _ = summaries[("next-run", "20261125T090000Z-0001")]
    assert finished["aborted"] is False
    # the next run dies after its start: latest is the new run, and its summary says it did not finish
    summary, _, latest = summaries[("next-run", "20261125T100000Z-0002")]
    assert latest == "20261125T100000Z-0002"
    assert summary["run_id"] == "20261125T100000Z-0002" and summary["aborted"] is True
    assert summary["nodes"] == [] and summary["not_reached"] == ["node1", "node2", "node3"]
