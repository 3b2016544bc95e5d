"""module_utils/slurm/slurm.py: reading `scontrol show node` below both the agent and the remediation.

The JSON form (`scontrol show node <n> --json`, Slurm 23.02 and later) is read first by a strict
reader; the text form (`-o`) is the fallback for 22.05 and older (Debian 12's slurm-wlm 22.05.8
refuses --json). Answers are the transcripts of tests/transcripts/scontrol (real sources named
there); the stand-in tests/standins/bin/scontrol answers from them.
"""

import ast
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm import slurm
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import AgentError
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher, slurm_commands
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner
from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

STANDIN = os.path.join(REPO, "tests", "standins", "bin", "scontrol")
FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]


def transcript(case, version="25.11"):
    return corpus.get("scontrol/%s/%s" % (version, case))


def test_remediation_reads_slurm_below_the_agent():
    """issue 43: remediation imported agent_slurm.parse_show_node (sideways into the agent's files)."""
    path = os.path.join(REPO, "plugins", "module_utils", "remediation", "remediation.py")
    with open(path) as handle:
        tree = ast.parse(handle.read())
    modules = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    modules += ["%s.%s" % (node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names]
    assert not [name for name in modules if ".module_utils.agent." in name], modules  # the agent wing
    assert any(name.endswith("module_utils.slurm.slurm") for name in modules)
    slurm_path = os.path.join(REPO, "plugins", "module_utils", "slurm", "slurm.py")
    with open(slurm_path) as handle:
        own = [node.module for node in ast.walk(ast.parse(handle.read())) if isinstance(node, ast.ImportFrom)]
    assert [name for name in own if name and "module_utils" in name] == [
        "ansible_collections.gpufleet.cluster.plugins.module_utils.core"]  # records only


# --- which form -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,version", [
    (transcript("version")["stdout"], (25, 11, 0)),
    (transcript("version", "22.05")["stdout"], (22, 5, 8)),
    ("slurm 23.02.0-0rc1\n", (23, 2, 0)),
    ("", None), ("slurm\n", None), ("slurm 25.11\n", None), ("slurm 25.11.0\nslurm 25.11.0\n", None),
    ("scontrol: fatal: Could not establish a configuration source\n", None),
])
def test_parse_version(text, version):
    assert slurm.parse_version(text) == version


@pytest.mark.parametrize("version,form", [((22, 5, 8), "-o"), ((23, 2, 0), "--json"), ((25, 11, 0), "--json"),
                                          ((20, 11, 9), "-o"), (None, "-o")])
def test_json_from_23_02_text_before(version, form):
    assert slurm.show_node_argv("scontrol", "gpu-1", version) == ["scontrol", "show", "node", "gpu-1", form]


# --- the JSON form: the corpus ----------------------------------------------------------------------

@pytest.mark.parametrize("case,state,reason", [
    ("show-node-json-mixed", "MIXED", ""),
    ("show-node-json-draining", "MIXED+DRAIN", "gpufleet remediation: gpu.xid"),
    ("show-node-json-drained", "IDLE+DRAIN", "gpufleet remediation: gpu.xid"),
    ("show-node-json-idle", "IDLE", ""),
    ("show-node-json-down-not-responding", "DOWN+DYNAMIC_NORM", "Not responding"),
])
def test_read_show_node_json_of_the_corpus(case, state, reason):
    fields = slurm.read_show_node_json(transcript(case)["stdout"], "gpu-01")
    assert fields == {"NodeName": "gpu-01", "NodeHostName": "gpu-01", "State": state, "Reason": reason}


def test_the_same_decisions_from_either_form():
    """Agent decisions over the JSON answers equal those over the text answers of the same states."""
    for state in ("mixed", "draining", "drained", "idle"):
        text = transcript("show-node-%s" % state, "26.11")["stdout"]
        text = corpus.render(text, "scontrol", {"node": "gpu-01", "hostname": "gpu-01"})
        json_text = transcript("show-node-json-%s" % state)["stdout"]
        for healthy in (True, False):
            failing = [] if healthy else FAILING
            assert (slurm_commands("gpu-01", healthy, failing, text)[0]
                    == slurm_commands("gpu-01", healthy, failing, json_text, json_form=True)[0])


def test_a_node_down_in_slurms_hands_is_left_alone():
    shown = transcript("show-node-json-down-not-responding")["stdout"]
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-01", healthy, [] if healthy else FAILING, shown, json_form=True)
        assert commands == [] and why.startswith("left alone: State=DOWN+DYNAMIC_NORM")


def test_an_unknown_node_is_named():
    with pytest.raises(AgentError, match="no node named gpu-99"):
        slurm_commands("gpu-99", True, [], transcript("show-node-json-unknown-node")["stdout"], json_form=True)


def test_the_answer_for_another_node_is_refused():
    with pytest.raises(AgentError, match="NodeName=gpu-01, not this node"):
        slurm_commands("gpu-02", True, [], json.dumps(_doc(name="gpu-01", hostname="h1")), json_form=True)


# --- the JSON form: strict ------------------------------------------------------------------------

def _doc(**node):
    entry = {"name": "gpu-1", "hostname": "gpu-1", "state": ["IDLE", "DRAIN"], "reason": "gpufleet: gpu.xid[gpu3]"}
    entry.update(node)
    return {"nodes": [entry], "errors": [], "warnings": []}


@pytest.mark.parametrize("mangle", [
    lambda d: d["nodes"][0].update(state="idle"),  # the string form of sinfo --json up to 22.05
    lambda d: d["nodes"][0].update(state=[]),
    lambda d: d["nodes"][0].update(state=["DRAIN", "IDLE"]),  # base not first
    lambda d: d["nodes"][0].update(state=["IDLE", "MIXED"]),  # two bases
    lambda d: d["nodes"][0].update(state=["IDLE", "DRAIN", "DRAIN"]),
    lambda d: d["nodes"][0].update(state=["IDLE", "drain"]),  # Slurm prints upper case
    lambda d: d["nodes"][0].update(state=["IDLE", "QUARANTINED"]),  # no such name in data_parser
    lambda d: d["nodes"][0].update(state=["IDLE", 1]),
    lambda d: d["nodes"][0].update(reason=None),
    lambda d: d["nodes"][0].update(reason=["gpufleet: x"]),
    lambda d: d["nodes"][0].update(hostname=7),
    lambda d: d["nodes"][0].pop("state"),
    lambda d: d["nodes"].append(dict(d["nodes"][0])),
    lambda d: d.update(errors=[{"error": "Unable to contact slurm controller"}]),
    lambda d: d.update(nodes={"gpu-1": {}}),
    lambda d: d.pop("nodes"),
])
def test_what_cannot_be_read_is_left_alone(mangle):
    doc = _doc()
    mangle(doc)
    with pytest.raises(slurm.ShowNodeError):
        slurm.read_show_node_json(json.dumps(doc), "gpu-1")
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, json.dumps(doc), json_form=True)
        assert commands == [] and why.startswith("left alone: the answer of scontrol show node gpu-1 --json is unreadable")


@pytest.mark.parametrize("text", ['{"nodes": [], "nodes": []}', "NodeName=gpu-1 State=IDLE", "", "[]",
                                  '{"nodes": [' * 40 + "]" * 40 + "}", '{"nodes": NaN}'])
def test_not_one_strict_json_document_is_unreadable(text):
    with pytest.raises(slurm.ShowNodeError):
        slurm.read_show_node_json(text, "gpu-1")


def test_the_text_parser_is_unchanged_for_its_form():
    """slurm.parse_show_node is the text parser the agent had (moved, not changed): a key twice is refused."""
    with pytest.raises(slurm.ShowNodeError, match="State= appears more than once"):
        slurm.parse_show_node("NodeName=gpu-1 State=IDLE Reason=x State=IDLE+DRAIN")


STATE_NAMES = st.sampled_from(slurm.JSON_BASE_STATES + slurm.JSON_STATE_FLAGS + ("idle", "X", ""))
NODES = st.fixed_dictionaries({"name": st.sampled_from(["gpu-1", "gpu-2", "", 3]),
                               "state": st.one_of(st.lists(STATE_NAMES, max_size=5), st.text(max_size=8)),
                               "reason": st.one_of(st.sampled_from(["", "gpufleet: gpu.xid[gpu3]", "admin: dimm",
                                                                    "gpufleet:x", " gpufleet: x"]),
                                                   st.none(), st.text(max_size=20))},
                              optional={"hostname": st.sampled_from(["gpu-1", "h", None])})
DOCS = st.fixed_dictionaries({"nodes": st.lists(NODES, max_size=2)},
                             optional={"errors": st.lists(st.just({"error": "x"}), max_size=1)})


@settings(max_examples=200, deadline=None)
@given(DOCS, st.booleans())
def test_any_answer_is_a_decision_or_a_clear_failure(doc, healthy):
    """Never a crash; a command only for a node of that name, resumed only when DRAIN is set with
    our reason at the very start and nothing else holds it."""
    text = json.dumps(doc)
    try:
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, text, json_form=True)
    except AgentError as exc:
        assert "gpu-1" in str(exc)
        return
    assert isinstance(why, str)
    if commands:
        node = doc["nodes"][0]
        assert len(doc["nodes"]) == 1 and not doc.get("errors") and node["name"] == "gpu-1"
        base = node["state"][0]
        assert base in ("IDLE", "ALLOCATED", "MIXED")
        assert set(node["state"][1:]) <= {"DRAIN", "CLOUD", "COMPLETING", "DYNAMIC_FUTURE", "DYNAMIC_NORM",
                                         "EXTERNAL", "RESERVED", "NOT_RESPONDING", "PLANNED", "PERFCTRS", "BLOCKED"}
        if commands[0][-1] == "State=RESUME":
            assert healthy and "DRAIN" in node["state"] and node["reason"].startswith("gpufleet: ")
        else:
            assert not healthy and (node["reason"] == "" or node["reason"].startswith("gpufleet: "))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_fields_or_unreadable(text):
    try:
        fields = slurm.read_show_node_json(text, "gpu-1")
    except slurm.ShowNodeError:
        return
    assert fields == {} or fields["NodeName"] == "gpu-1"


# --- the publisher over the stand-in (a real subprocess answering from the corpus) ---------------

@pytest.mark.parametrize("version,form", [("25.11", "--json"), ("22.05", "-o")])
def test_publisher_uses_json_where_slurm_has_it(tmp_path, version, form):
    (tmp_path / "version").write_text(version + "\n")
    (tmp_path / "state").write_text("IDLE\n")
    os.environ["GPUFLEET_STANDIN_SLURM_DIR"] = str(tmp_path)
    try:
        publisher = SlurmPublisher("gpu-7", SubprocessRunner(), STANDIN)
        assert publisher.publish(False, FAILING) == ["drain: gpufleet: gpu.xid[gpu3]"]
        assert publisher.publish(False, FAILING, always=True) == ["already drained: gpufleet: gpu.xid[gpu3]"]
        assert publisher.publish(True, []) == ["resume (was gpufleet: gpu.xid[gpu3]%s)"
                                               % ("" if form == "--json" else " [root@2026-11-26T04:00:00]")]
    finally:
        del os.environ["GPUFLEET_STANDIN_SLURM_DIR"]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:3] == ["--version", "show node gpu-7 %s" % form, "update NodeName=gpu-7 State=DRAIN "
                         "Reason=gpufleet: gpu.xid[gpu3]"]
    assert "update NodeName=gpu-7 State=RESUME" in calls


def test_the_standin_prints_only_transcript_lines(tmp_path):
    env = dict(os.environ, GPUFLEET_STANDIN_SLURM_DIR=str(tmp_path))
    outputs = []
    for argv in (["--version"], ["show", "node", "gpu-9", "--json"],
                 ["update", "NodeName=gpu-9", "State=DRAIN", "Reason=gpufleet: a/b \"c\""],
                 ["show", "node", "gpu-9", "--json"]):
        result = subprocess.run([STANDIN] + argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
        assert corpus.unknown_lines("scontrol", result.stdout + result.stderr) == []
    assert json.loads(outputs[-1])["nodes"][0]["reason"] == 'gpufleet: a/b "c"'
    (tmp_path / "version").write_text("22.05\n")
    refused = subprocess.run([STANDIN, "show", "node", "gpu-9", "--json"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("scontrol: unrecognized option '--json'")
