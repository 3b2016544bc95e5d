"""The remediation reads Slurm like the agent (issue 40 item 1, "Machine-readable first"):
`scontrol --version` picks the form of `scontrol show node` (module_utils/slurm/slurm.py show_node_argv,
the agent's decision: --json from Slurm 23.02, -o on 22.05 and older), the JSON answer is read by the
strict reader (slurm.read_show_node_json), an unreadable answer fails the step naming the form.
Answers are the transcripts of tests/transcripts/scontrol (their sources are named there)."""

import json
import os
import sys

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter import remediation as filters
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation
from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

from test_slurm import STATE_NAMES  # noqa: E402  pylint: disable=wrong-import-position

STATES = ("mixed", "draining", "drained", "idle")
NODES = st.fixed_dictionaries({"name": st.sampled_from(["gpu-1", "gpu-2", "", 3]),
                               "state": st.one_of(st.lists(STATE_NAMES, max_size=5), st.text(max_size=8)),
                               "reason": st.one_of(st.sampled_from(["", "gpufleet remediation: gpu.xid", "admin: dimm",
                                                                    "gpufleet: gpu.xid[gpu3]", " gpufleet remediation: x",
                                                                    "gpufleet remediation:x"]),
                                                   st.none(), st.text(max_size=20))},
                              optional={"hostname": st.sampled_from(["gpu-1", "h", None])})
DOCS = st.fixed_dictionaries({"nodes": st.lists(NODES, max_size=2)},
                             optional={"errors": st.lists(st.just({"error": "x"}), max_size=1)})


def stdout(case, version="25.11"):
    return corpus.get("scontrol/%s/%s" % (version, case))["stdout"]


def shown(text, node, form):
    """A registered command result as ansible.builtin.command gives it (cmd: the argv run)."""
    return {"rc": 0, "stdout": text, "stderr": "", "cmd": ["scontrol", "show", "node", node, form]}


@pytest.mark.parametrize("version,form", [("25.11", "--json"), ("22.05", "-o")])
def test_the_version_picks_the_form_as_for_the_agent(version, form):
    result = {"rc": 0, "stdout": stdout("version", version), "stderr": ""}
    assert filters.remediation_slurm_show_argv(result, "gpu-01") == ["scontrol", "show", "node", "gpu-01", form]


@pytest.mark.parametrize("text", ["", "slurm 25.11\n", "scontrol: fatal: Could not establish a configuration source\n"])
def test_a_version_not_understood_reads_the_text_form(text):
    assert filters.remediation_slurm_show_argv({"rc": 0, "stdout": text}, "gpu-01")[-1] == "-o"


def test_a_failing_version_probe_fails_the_step():
    with pytest.raises(AnsibleFilterError, match="scontrol --version failed: slurm_load_ctl_conf error"):
        filters.remediation_slurm_show_argv({"rc": 1, "stdout": "", "stderr": "slurm_load_ctl_conf error"}, "gpu-01")
    with pytest.raises(AnsibleFilterError, match="not a registered command result"):
        filters.remediation_slurm_show_argv("slurm 25.11.0", "gpu-01")


@pytest.mark.parametrize("state", STATES)
def test_the_same_view_from_either_form(state):
    """The JSON answer of a state gives the view the text answer of that state gives (the JSON
    reason is the reason alone: the text's ` [root@<time>]` is not part of it)."""
    text = corpus.render(stdout("show-node-%s" % state, "26.11"), "scontrol", {"node": "gpu-01", "hostname": "gpu-01"})
    by_text = filters.remediation_slurm_state(shown(text, "gpu-01", "-o"), "gpu-01")
    by_json = filters.remediation_slurm_state(shown(stdout("show-node-json-%s" % state), "gpu-01", "--json"), "gpu-01")
    assert (by_text["form"], by_json["form"]) == ("-o", "--json")
    assert by_json["reason"] == by_text["reason"].rsplit(" [root@", 1)[0]
    for key in ("form", "reason"):
        by_text.pop(key), by_json.pop(key)
    assert by_json == by_text


def test_our_json_drain_is_ours_and_drained():
    view = remediation.slurm_state(stdout("show-node-json-drained"), "gpu-01", json_form=True)
    assert view["ours"] and view["drained"] and not view["admin"] and view["state"] == "IDLE+DRAIN"


def test_a_node_down_in_slurms_hands_is_someone_elses():
    view = remediation.slurm_state(stdout("show-node-json-down-not-responding"), "gpu-01", json_form=True)
    assert view["admin"] and not view["ours"] and view["state"].startswith("DOWN+")


def test_an_unknown_node_fails_naming_the_form():
    with pytest.raises(remediation.PolicyError, match="scontrol show node gpu-99 --json: no NodeName=gpu-99"):
        remediation.slurm_state(stdout("show-node-json-unknown-node"), "gpu-99", json_form=True)


@pytest.mark.parametrize("text,asked,error", [
    # the text answer where JSON was asked (and the other way round) is not read as the other form
    ("NodeName=gpu-01 State=IDLE+DRAIN Reason=gpufleet remediation: x", "--json", "--json: the answer is unreadable"),
    (None, "-o", "-o: no NodeName=gpu-01"),
    # the JSON answer of sinfo up to 22.05 (state a string), a node twice, Slurm's errors
    (json.dumps({"nodes": [{"name": "gpu-01", "state": "idle"}]}), "--json", "--json: the answer is unreadable"),
    (json.dumps({"nodes": [{"name": "gpu-01", "state": ["IDLE"]}] * 2}), "--json", "2 nodes"),
    (json.dumps({"nodes": [], "errors": [{"error": "Unable to contact slurm controller"}]}), "--json",
     "Slurm reported errors"),
])
def test_what_cannot_be_read_fails_the_step_naming_the_form(text, asked, error):
    text = stdout("show-node-json-drained") if text is None else text
    with pytest.raises(AnsibleFilterError, match=error):
        filters.remediation_slurm_state(shown(text, "gpu-01", asked), "gpu-01")


def test_the_refusal_of_22_05_fails_as_a_failed_command():
    refused = corpus.get("scontrol/22.05/show-node-json-refused")
    with pytest.raises(AnsibleFilterError, match="scontrol show node gpu-01 failed: .*unrecognized option"):
        filters.remediation_slurm_state({"rc": refused["rc"], "stdout": refused["stdout"], "stderr": refused["stderr"],
                                         "cmd": ["scontrol", "show", "node", "gpu-01", "--json"]}, "gpu-01")


@settings(max_examples=200, deadline=None)
@given(DOCS)
def test_any_json_answer_is_a_view_or_a_clear_failure(doc):
    """Never a crash; ours (may be resumed) only when one node of that name has DRAIN and our reason
    at the very start, and nothing else holds it."""
    try:
        view = filters.remediation_slurm_state(shown(json.dumps(doc), "gpu-1", "--json"), "gpu-1")
    except AnsibleFilterError as exc:
        assert "scontrol show node gpu-1 --json" in str(exc)
        return
    node = doc["nodes"][0]
    assert len(doc["nodes"]) == 1 and not doc.get("errors") and node["name"] == "gpu-1" and view["form"] == "--json"
    if view["ours"]:
        assert "DRAIN" in node["state"] and node["reason"].startswith(remediation.SLURM_REASON + " ")
        assert node["state"][0] in ("IDLE", "ALLOCATED", "MIXED") and not view["admin"]
