"""Red team, issue 40: Slurm's machine-readable form (scontrol --version picks `--json` / `-o`, the strict
JSON reader below the agent and remediate.yml) and the transcript corpus / stand-ins answering only from it.

Every assertion is a promise of docs/contracts.md ("Whose Slurm state it is", "Machine-readable first"),
docs/remediation.md (the Slurm drain step) or tests/transcripts/README.md: an answer that cannot be read is
never acted on (agent: `left alone: the answer of scontrol show node <n> --json is unreadable`; remediation:
the step fails naming the form); a transcript without a public source, in the wrong version directory or
with keys other than the documented ones is refused; a call no transcript covers exits 2."""

import copy
import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.filter import remediation as filters
from ansible_collections.gpufleet.cluster.plugins.module_utils.slurm import slurm
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import AgentError
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import slurm_commands
from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

STANDIN = os.path.join(REPO, "tests", "standins", "bin", "scontrol")
FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]
NODE = "gpu-01"
UNREADABLE = "left alone: the answer of scontrol show node %s --json is unreadable" % NODE


def real(case="show-node-json-drained"):
    """A real-layout 25.11 answer (data_parser v0.0.44) of the corpus, as a dict."""
    return json.loads(corpus.get("scontrol/25.11/%s" % case)["stdout"])


def ours(doc, reason="gpufleet: gpu.xid[gpu3]"):
    """The drained answer, with the agent's own reason (so a healthy node would be resumed)."""
    doc["nodes"][0]["reason"] = reason
    return doc


def agent(text, healthy):
    return slurm_commands(NODE, healthy, [] if healthy else FAILING, text, json_form=True)


def assert_agent_leaves_alone(text):
    """Neither drained nor resumed, both when healthy and when unhealthy; the reason names the form."""
    for healthy in (True, False):
        commands, why = agent(text, healthy)
        assert commands == [], (healthy, commands, why)
        assert why.startswith(UNREADABLE), why


def assert_remediation_fails(text):
    result = {"rc": 0, "stdout": text, "stderr": "", "cmd": ["scontrol", "show", "node", NODE, "--json"]}
    with pytest.raises(AnsibleFilterError, match="scontrol show node %s --json" % NODE):
        filters.remediation_slurm_state(result, NODE)


def assert_unreadable(text):
    with pytest.raises(slurm.ShowNodeError):
        slurm.read_show_node_json(text, NODE)
    assert_agent_leaves_alone(text)
    assert_remediation_fails(text)


def test_the_baseline_is_readable():
    """Sanity: the real answer with the agent's reason is resumed when healthy (the attacks below mangle it)."""
    commands, _ = agent(json.dumps(ours(real())), True)
    assert commands and commands[0][-1] == "State=RESUME"


# --- (a) the JSON answer: not one strict JSON document ------------------------------------------------

def _dup_key(key, first, second):
    text = json.dumps(ours(real()))
    needle = '"%s": %s' % (key, json.dumps(first))
    assert needle in text
    return text.replace(needle, '"%s": %s, "%s": %s' % (key, json.dumps(second), key, json.dumps(first)), 1)


@pytest.mark.parametrize("text", [
    # duplicate keys inside the node: Python's json keeps the last one silently
    pytest.param(_dup_key("state", ["IDLE", "DRAIN"], ["DOWN", "DRAIN"]), id="dup-state"),
    pytest.param(_dup_key("reason", "gpufleet: gpu.xid[gpu3]", "admin: dimm"), id="dup-reason"),
    pytest.param(_dup_key("name", NODE, "gpu-02"), id="dup-name"),
    # duplicate top-level errors: the first non-empty
    pytest.param(json.dumps(ours(real())).replace(
        '"errors": []', '"errors": [{"error": "Unable to contact slurm controller"}], "errors": []', 1),
        id="dup-errors"),
    # NaN / Infinity anywhere (not JSON; Python accepts them)
    pytest.param(json.dumps(ours(real())).replace('"boards": 1', '"boards": NaN', 1), id="nan-field"),
    pytest.param(json.dumps(ours(real())).replace('"boards": 1', '"boards": Infinity', 1), id="inf-field"),
    pytest.param(json.dumps(ours(real())).replace('"boards": 1', '"boards": -Infinity', 1),
                 id="-inf-field"),
    # two documents, trailing garbage, a leading line of scontrol's on stdout
    pytest.param(json.dumps(ours(real())) * 2, id="two-documents"),
    pytest.param(json.dumps(ours(real())) + "\nx", id="trailing-garbage"),
    pytest.param("scontrol: error: Invalid node name specified\n" + json.dumps(ours(real())), id="leading-line"),
    # not an object
    pytest.param("null", id="null"), pytest.param("true", id="true"), pytest.param("1", id="number"),
    pytest.param('"nodes"', id="string"), pytest.param("\x00", id="nul"),
])
def test_not_one_strict_document_is_unreadable(text):
    assert_unreadable(text)


def test_deep_nesting_outside_the_node_is_unreadable_not_a_crash():
    """Nested far beyond Python's recursion limit (json raises RecursionError, not ValueError)."""
    doc = ours(real())
    text = json.dumps(doc)
    deep = "[" * 100000 + "]" * 100000
    assert_unreadable(text[:-1] + ', "extra": ' + deep + "}")


def test_deep_nesting_inside_the_node_is_unreadable_not_a_crash():
    text = json.dumps(ours(real()))
    assert_unreadable(text.replace('"reason": ', '"deep": ' + "{\"a\":" * 50000 + "1" + "}" * 50000
                                   + ', "reason": ', 1))


def test_a_huge_answer_is_a_decision_or_unreadable_never_a_crash():
    """8 MiB of padding in an unrelated key: no promise of a bound for scontrol's answer, but never a crash and
    never a resume of what was not seen."""
    doc = ours(real())
    doc["nodes"][0]["comment"] = "x" * (8 << 20)
    text = json.dumps(doc)
    for healthy in (True, False):
        commands, why = agent(text, healthy)
        assert isinstance(why, str)
        if commands:
            assert commands[0][-1] == ("State=RESUME" if healthy else commands[0][-1])


# --- (a) wrong types and odd shapes ------------------------------------------------------------------

def _m(fn):
    def mangle(doc):
        fn(doc)
        return doc
    return mangle


N0 = lambda d: d["nodes"][0]  # noqa: E731


@pytest.mark.parametrize("mangle", [
    pytest.param(_m(lambda d: d.update(nodes=None)), id="nodes-null"),
    pytest.param(_m(lambda d: d.update(nodes="gpu-01")), id="nodes-string"),
    pytest.param(_m(lambda d: d.update(nodes=[[NODE]])), id="node-a-list"),
    pytest.param(_m(lambda d: d.update(nodes=[NODE])), id="node-a-string"),
    pytest.param(_m(lambda d: d.update(nodes=[None])), id="node-null"),
    pytest.param(_m(lambda d: N0(d).update(name=None)), id="name-null"),
    pytest.param(_m(lambda d: N0(d).update(name=[NODE])), id="name-list"),
    pytest.param(_m(lambda d: N0(d).pop("name")), id="name-missing"),
    pytest.param(_m(lambda d: N0(d).update(state=[["IDLE"], "DRAIN"])), id="state-nested"),
    pytest.param(_m(lambda d: N0(d).update(state={"IDLE": True, "DRAIN": True})), id="state-object"),
    pytest.param(_m(lambda d: N0(d).update(state="IDLE+DRAIN")), id="state-text-form"),
    pytest.param(_m(lambda d: N0(d).update(state=None)), id="state-null"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", None])), id="state-null-flag"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN", ""])), id="state-empty-flag"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", " DRAIN"])), id="state-space"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN\n"])), id="state-newline"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "Drain"])), id="state-mixed-case"),
    pytest.param(_m(lambda d: N0(d).update(state=["idle", "DRAIN"])), id="state-lower-base"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE+DRAIN"])), id="state-joined"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN", "IDLE"])), id="state-base-twice"),
    pytest.param(_m(lambda d: N0(d).update(state=["DRAIN"])), id="state-no-base"),
    pytest.param(_m(lambda d: N0(d).update(state=["DRAIN", "IDLE"])), id="state-base-second"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DOWN", "DRAIN"])), id="state-two-bases"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN", "GPU_BROKEN"])), id="state-unknown-flag"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN", "DRAIN"])), id="state-flag-twice"),
    pytest.param(_m(lambda d: N0(d).update(state=["IDLE", "DRAIN", True])), id="state-bool"),
    pytest.param(_m(lambda d: N0(d).update(reason=0)), id="reason-number"),
    pytest.param(_m(lambda d: N0(d).update(reason=False)), id="reason-false"),
    pytest.param(_m(lambda d: N0(d).update(reason={"text": "gpufleet: x"})), id="reason-object"),
    pytest.param(_m(lambda d: d.update(errors=["Unable to contact slurm controller"])), id="errors-strings"),
    pytest.param(_m(lambda d: d.update(errors="Unable to contact slurm controller")), id="errors-a-string"),
    pytest.param(_m(lambda d: d.update(errors={"error": "x"})), id="errors-an-object"),
    pytest.param(_m(lambda d: d.update(errors=[{}])), id="errors-empty-entry"),
    pytest.param(_m(lambda d: d.update(errors=[None])), id="errors-null-entry"),
    pytest.param(_m(lambda d: d["nodes"].append(copy.deepcopy(N0(d)))), id="same-node-twice"),
    pytest.param(_m(lambda d: d["nodes"].insert(0, dict(copy.deepcopy(N0(d)), name="gpu-02", hostname="gpu-02"))),
                 id="other-node-first"),
])
def test_what_cannot_be_read_is_never_acted_on(mangle):
    assert_unreadable(json.dumps(mangle(ours(real()))))


@pytest.mark.parametrize("errors", [None, False, 0, "", {}], ids=repr)
def test_errors_of_the_wrong_type_are_unreadable_even_when_empty_looking(errors):
    """docs: "`errors` empty" of data_parser, whose errors is an array; "Anything else is unreadable"."""
    doc = ours(real())
    doc["errors"] = errors
    assert_unreadable(json.dumps(doc))


def test_a_missing_reason_is_never_resumed():
    """`reason` a string (contracts.md): a DRAIN without any reason field is not gpufleet's to resume."""
    doc = ours(real())
    del doc["nodes"][0]["reason"]
    commands, _ = agent(json.dumps(doc), True)
    assert commands == []


@pytest.mark.parametrize("name", ["GPU-01", "gpu-01 ", " gpu-01", "gpu-01\n", "gpu\u201101", "gpu-1", "gpu-01.example",
                                  "gpu-0", "gpu-010", ""])
def test_an_answer_for_another_name_is_never_acted_on(name):
    """"at most one node and it the one asked about": names compared exactly (no case folding, no trim)."""
    doc = ours(real())
    doc["nodes"][0]["name"] = name
    doc["nodes"][0]["hostname"] = name
    text = json.dumps(doc)
    for healthy in (True, False):
        try:
            commands, _ = agent(text, healthy)
        except AgentError as exc:
            assert NODE in str(exc)
            continue
        assert commands == []
    with pytest.raises(AnsibleFilterError, match="scontrol show node %s --json" % NODE):
        filters.remediation_slurm_state({"rc": 0, "stdout": text, "stderr": "",
                                         "cmd": ["scontrol", "show", "node", NODE, "--json"]}, NODE)


@pytest.mark.parametrize("reason", ["\x00gpufleet: gpu.xid[gpu3]", "\ufeffgpufleet: gpu.xid[gpu3]",
                                    "\x1b[0mgpufleet: gpu.xid[gpu3]", "\ngpufleet: gpu.xid[gpu3]",
                                    "\u200bgpufleet: x", "GPUFLEET: x", "gpufleet\uff1a x", "gpufleet :x",
                                    "\tgpufleet: x"])
def test_a_reason_that_only_looks_like_ours_is_never_resumed(reason):
    """"the raw reason is compared ... whitespace and case never normalised"."""
    text = json.dumps(ours(real(), reason))
    commands, why = agent(text, True)
    assert commands == [], why
    view = filters.remediation_slurm_state({"rc": 0, "stdout": json.dumps(ours(real(), "\x00" + reason.lstrip("\x00")
                                                                                      .replace("gpufleet:",
                                                                                               "gpufleet remediation:"))),
                                            "stderr": "", "cmd": ["scontrol", "show", "node", NODE, "--json"]}, NODE)
    assert not view["ours"]


@pytest.mark.parametrize("reason", ["gpufleet: gpu.xid[gpu3]\nState=IDLE", "gpufleet: \x07\x1b[2J", "gpufleet: " + "é" * 300])
def test_our_reason_with_control_characters_is_still_a_decision(reason):
    """Ours at the very first character: a decision (resume when healthy) and never a crash."""
    commands, why = agent(json.dumps(ours(real(), reason)), True)
    assert isinstance(why, str)
    assert commands == [] or commands[0][-1] == "State=RESUME"


@pytest.mark.parametrize("meta", [
    {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld", "data_parser": "data_parser/v0.0.39"}},
    {"plugin": {"data_parser": "data_parser/v0.0.46"}},
    {"plugin": {"data_parser": "data_parser/v0.0.99"}},
    {}, None, "x",
], ids=["v0.0.39", "v0.0.46", "v0.0.99", "empty", "null", "string"])
def test_meta_of_another_data_parser_never_changes_whose_node_it_is(meta):
    """contracts.md lists no requirement on meta: the decision is that of the nodes; never a crash."""
    doc = ours(real())
    doc["meta"] = meta
    base = ours(real())
    for healthy in (True, False):
        try:
            got = agent(json.dumps(doc), healthy)[0]
        except AgentError:
            got = "error"
        if got:
            assert got == agent(json.dumps(base), healthy)[0]


def test_warnings_never_turn_into_a_resume_of_an_admins_drain():
    """`warnings` is not named by the docs: whatever the reader does with it, an admin's drain is never resumed
    and never re-reasoned."""
    doc = ours(real(), "admin: dimm replaced")
    doc["warnings"] = [{"description": "Node state flag unknown", "source": "x"}]
    for healthy in (True, False):
        assert agent(json.dumps(doc), healthy)[0] == []


def test_warnings_alone_do_not_make_the_answer_unreadable():
    """Where a warning is printed the answer is still one strict document (only `errors` must be empty)."""
    doc = ours(real())
    doc["warnings"] = [{"description": "The node has been removed from the configuration", "source": "x"}]
    commands, _ = agent(json.dumps(doc), True)
    assert commands and commands[0][-1] == "State=RESUME"


@pytest.mark.parametrize("state", [["DOWN", "DRAIN"], ["ERROR", "DRAIN"], ["FUTURE", "DRAIN"], ["UNKNOWN", "DRAIN"],
                                   ["IDLE", "DRAIN", "FAIL"], ["IDLE", "DRAIN", "MAINTENANCE"],
                                   ["IDLE", "DRAIN", "REBOOT_REQUESTED"], ["IDLE", "DRAIN", "POWERED_DOWN"],
                                   ["IDLE", "DRAIN", "INVALID_REG"], ["IDLE", "DRAIN", "RESUME"]])
def test_someone_elses_state_with_our_reason_is_never_resumed_nor_reasoned(state):
    doc = ours(real())
    doc["nodes"][0]["state"] = state
    for healthy in (True, False):
        commands, why = agent(json.dumps(doc), healthy)
        assert commands == [], why


# --- (a) which form: odd --version answers ------------------------------------------------------------

@pytest.mark.parametrize("text,form", [
    ("slurm 23.02.0-0rc1\n", "--json"),
    ("slurm-wlm 22.05.8\n", "-o"),
    ("slurm 24.11.0-1\n", "--json"),
    ("slurm 23.02.0\n", "--json"),
    ("slurm 22.05.11\n", "-o"),
    ("slurm 23.02.7\n", "--json"),
    ("", "-o"), ("\n", "-o"), ("garbage\n", "-o"), ("slurm\n", "-o"), ("slurm 25\n", "-o"),
    ("slurm 25.11.\n", "-o"), ("slurm .11.0\n", "-o"), ("slurm 25.x.0\n", "-o"),
    ("25.11.0\n", "-o"),
    ("slurm 25.11.0\nslurm 22.05.8\n", "-o"),
    ("\x00\xff\n", "-o"),
    ("slurm \u0662\u0665.11.0\n", "-o"),  # Arabic-Indic digits: not <x.y.z> as Slurm prints it
    ("slurm \uff12\uff15.11.0\n", "-o"),  # fullwidth digits
])
def test_the_form_follows_the_version_answer(text, form):
    assert slurm.show_node_argv("scontrol", NODE, slurm.parse_version(text))[-1] == form
    assert filters.remediation_slurm_show_argv({"rc": 0, "stdout": text, "stderr": ""}, NODE)[-1] == form


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_version_answer_picks_a_form_never_a_crash(text):
    version = slurm.parse_version(text)
    assert version is None or (isinstance(version, tuple) and len(version) == 3)
    assert slurm.show_node_argv("scontrol", NODE, version)[-1] in ("--json", "-o")
    assert filters.remediation_slurm_show_argv({"rc": 0, "stdout": text, "stderr": ""}, NODE)[-1] in ("--json", "-o")


# --- (a) property: any mangled real answer is a decision or unreadable, never a guess ------------------

FLAGS = st.sampled_from(list(slurm.JSON_BASE_STATES + slurm.JSON_STATE_FLAGS) + ["idle", "Drain", "", "X", 1, None])
JUNK = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(FLAGS, max_size=5), st.one_of(st.just("gpufleet: x"), st.just("admin"), JUNK),
       st.sampled_from(["name", "hostname", "state", "reason", "errors", "warnings", "meta", None]), JUNK,
       st.booleans())
def test_a_mangled_real_answer_is_a_decision_or_unreadable(state, reason, key, junk, healthy):
    doc = ours(real())
    node = doc["nodes"][0]
    node["state"], node["reason"] = state, reason
    if key in ("errors", "warnings", "meta"):
        doc[key] = junk
    elif key:
        node[key] = junk
    try:
        commands, why = agent(json.dumps(doc), healthy)
    except AgentError as exc:
        assert NODE in str(exc)
        return
    assert isinstance(why, str)
    if commands:
        node = doc["nodes"][0]
        assert node["name"] == NODE and isinstance(node["state"], list) and isinstance(node["reason"], str)
        assert doc.get("errors") == [] and node["state"][0] in ("IDLE", "ALLOCATED", "MIXED")
        if healthy:
            assert commands[0][-1] == "State=RESUME" and "DRAIN" in node["state"]
            assert node["reason"].startswith("gpufleet:")
        else:
            assert node["reason"] == "" or node["reason"].startswith("gpufleet:")


# --- (b) the corpus loader ------------------------------------------------------------------------------

GOOD = {"tool": "scontrol", "version": "25.11", "argv": ["scontrol", "--version"], "rc": 0,
        "stdout": "slurm 25.11.0\n", "stderr": "",
        "source": "SchedMD/slurm@slurm-25-11-0-1:src/scontrol/scontrol.c", "notes": "red team"}


def write(tmp_path, doc, tool="scontrol", version="25.11", case="case", raw=None):
    where = tmp_path / tool / version
    where.mkdir(parents=True, exist_ok=True)
    path = where / ("%s.yml" % case)
    path.write_text(raw if raw is not None else json.dumps(doc))  # JSON is YAML
    return str(path)


def test_a_good_transcript_loads(tmp_path):
    doc = corpus.load(write(tmp_path, GOOD), str(tmp_path))
    assert doc["id"] == "scontrol/25.11/case" and corpus.errors(str(tmp_path)) == []


@pytest.mark.parametrize("source", [
    "", "   ", "my own capture", "search index", "file id 1234", "File IDs 12 and 13", "search index: https://x.y/z",
    "https://", "file:///tmp/scontrol.txt", "/home/me/capture.txt", "slurm", "SchedMD/slurm",
    "SchedMD/slurm@master", "issue #5", "see the docs", "captured on gpu-17 2026-11-28",
])
def test_a_transcript_without_a_public_source_is_refused(tmp_path, source):
    path = write(tmp_path, dict(GOOD, source=source))
    with pytest.raises(corpus.TranscriptError):
        corpus.load(path, str(tmp_path))
    assert corpus.errors(str(tmp_path))
    with pytest.raises(corpus.TranscriptError):
        corpus.transcripts("scontrol", str(tmp_path))


@pytest.mark.parametrize("directory,version", [
    ("25.11", "25.1"), ("25.11", "25.110"), ("25.11", "22.05"), ("25.11", "v25.12.0"), ("25.11", "25"),
    ("2.11", "25.11"), ("25.11", "unstated"), ("25.11", ""), ("1.31", "1.3"), ("1.3", "1.31.0"),
    ("25.11", "25-11"), ("25.11", "25.11x"),
])
def test_a_version_not_of_its_directory_is_refused(tmp_path, directory, version):
    path = write(tmp_path, dict(GOOD, version=version), version=directory)
    with pytest.raises(corpus.TranscriptError, match="version"):
        corpus.load(path, str(tmp_path))


@pytest.mark.parametrize("directory,version", [("25.11", "25.11"), ("25.11", "25.11.0"), ("25.11", "v25.11.4")])
def test_a_release_of_its_directory_loads(tmp_path, directory, version):
    assert corpus.load(write(tmp_path, dict(GOOD, version=version), version=directory), str(tmp_path))


@pytest.mark.parametrize("change", [
    pytest.param(lambda d: d.update(extra="x"), id="extra-key"),
    pytest.param(lambda d: d.update(id="scontrol/25.11/other"), id="id-key"),
    pytest.param(lambda d: d.update(case="other"), id="case-key"),
    pytest.param(lambda d: d.pop("notes"), id="missing-notes"),
    pytest.param(lambda d: d.pop("stderr"), id="missing-stderr"),
    pytest.param(lambda d: d.update(rc=True), id="rc-bool"),
    pytest.param(lambda d: d.update(rc=256), id="rc-256"),
    pytest.param(lambda d: d.update(rc=-1), id="rc-negative"),
    pytest.param(lambda d: d.update(rc="0"), id="rc-string"),
    pytest.param(lambda d: d.update(argv=[]), id="argv-empty"),
    pytest.param(lambda d: d.update(argv="scontrol --version"), id="argv-string"),
    pytest.param(lambda d: d.update(argv=["scontrol", 1]), id="argv-number"),
    pytest.param(lambda d: d.update(argv=["sinfo", "--version"]), id="argv0-other-tool"),
    pytest.param(lambda d: d.update(tool="sinfo"), id="tool-other"),
    pytest.param(lambda d: d.update(stdout=None), id="stdout-null"),
    pytest.param(lambda d: d.update(version=25.11), id="version-float"),
])
def test_a_transcript_off_the_format_is_refused(tmp_path, change):
    doc = dict(GOOD)
    change(doc)
    with pytest.raises(corpus.TranscriptError):
        corpus.load(write(tmp_path, doc), str(tmp_path))


@pytest.mark.parametrize("raw", [
    "--- \n" + json.dumps(GOOD) + "\n---\n" + json.dumps(GOOD) + "\n",
    "!!python/object:os.system {}\n",
    "[]\n", "", "tool: [\n",
])
def test_not_one_yaml_mapping_is_refused(tmp_path, raw):
    with pytest.raises(corpus.TranscriptError):
        corpus.load(write(tmp_path, None, raw=raw), str(tmp_path))


@pytest.mark.parametrize("case_id", ["scontrol/25.11", "scontrol/25.11/../22.05/version", "../scontrol/25.11/version",
                                     "scontrol/../../x", "scontrol/25.11/nope", "scontrol//version", "", None,
                                     "scontrol/25.11/version/extra"])
def test_get_refuses_what_is_no_transcript_id(case_id):
    with pytest.raises(corpus.TranscriptError):
        corpus.get(case_id)


def test_get_refuses_a_transcript_of_another_tool():
    with pytest.raises(corpus.TranscriptError):
        corpus.get("scontrol/25.11/version", tool="kubeadm")


def test_a_bad_file_anywhere_is_listed_by_errors(tmp_path):
    write(tmp_path, GOOD)
    write(tmp_path, dict(GOOD, source="search index"), case="bad")
    problems = corpus.errors(str(tmp_path))
    assert problems and any("bad" in str(problem) for problem in problems)


def test_the_real_corpus_has_no_errors_and_every_source_is_public():
    assert corpus.errors() == []
    for doc in corpus.transcripts().values():
        assert corpus.source_problem(doc["source"]) is None, doc["id"]
        assert corpus.version_matches_directory(doc["version"], doc["id"].split("/")[1]), doc["id"]


@pytest.mark.parametrize("line", ["slurm 99.99.99", "NodeName=gpu-01 State=IDLE GPUFLEET_INVENTED=1",
                                  "Invented line of a stand-in"])
def test_a_line_no_transcript_has_is_unknown(line):
    assert corpus.unknown_lines("scontrol", line + "\n") == [line]


# --- (b) the stand-ins refuse what no transcript covers -------------------------------------------------

@pytest.mark.parametrize("argv,version", [
    (["ping"], "25.11"), (["show", "partition"], "25.11"), (["show", "node"], "25.11"),
    (["show", "node", "gpu-9", "--yaml"], "25.11"), (["show", "node", "gpu-9", "--json", "--details"], "25.11"),
    (["update", "NodeName=gpu-9", "State=DOWN", "Reason=x"], "25.11"), (["--version"], "23.02"),
    (["--version"], "garbage"), (["show", "node", "gpu-9", "--json"], "24.11"), ([], "25.11"),
    (["reboot", "gpu-9"], "25.11"), (["-V"], "25.11"),
])
def test_the_scontrol_stand_in_refuses_calls_no_transcript_covers(tmp_path, argv, version):
    (tmp_path / "version").write_text(version + "\n")
    env = dict(os.environ, GPUFLEET_STANDIN_SLURM_DIR=str(tmp_path))
    result = subprocess.run([STANDIN] + argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, (argv, result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and result.stderr.startswith("stand-in scontrol:")


@pytest.mark.parametrize("argv", [["upgrade", "apply", "v1.99.0", "--yes"], ["reset", "--force"], ["alpha", "x"],
                                  ["version", "-o", "yaml"], ["certs", "renew", "all"], []])
def test_the_kubeadm_replay_refuses_calls_no_transcript_covers(tmp_path, argv):
    standin = os.path.join(REPO, "roles", "kubernetes_control_plane", "molecule", "default", "files", "kubeadm")
    (tmp_path / "etc" / "kubernetes").mkdir(parents=True)
    env = dict(os.environ, KUBEADM_DOUBLE_ROOT=str(tmp_path), KUBEADM_DOUBLE_LOG=str(tmp_path / "calls.log"),
               KUBEADM_DOUBLE_PYTHON=sys.executable, KUBEADM_DOUBLE_MINOR="1.36", KUBEADM_DOUBLE_CASES="")
    result = subprocess.run([standin] + argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, (argv, result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and "stand-in" in result.stderr


# --- (a) the remediation's registered results of odd shapes --------------------------------------------

@pytest.mark.parametrize("cmd", [None, "scontrol show node gpu-02 --json", ["scontrol", "show", "node", "gpu-02", "--json"],
                                 [], ["scontrol", "show", "node", NODE]])
def test_a_show_result_of_another_call_is_never_read_as_this_node(cmd):
    """The answer is read in the form (and for the node) it was asked: a result that is not this node's
    `show node ... --json`/`-o` fails the step, or at most reads this node's own drained answer."""
    result = {"rc": 0, "stdout": corpus.get("scontrol/25.11/show-node-json-drained")["stdout"], "stderr": ""}
    if cmd is not None:
        result["cmd"] = cmd
    try:
        view = filters.remediation_slurm_state(result, NODE)
    except AnsibleFilterError:
        return
    assert view["state"] == "IDLE+DRAIN"


@pytest.mark.parametrize("result", [{"stdout": "slurm 25.11.0\n"}, {"rc": "0", "stdout": "slurm 25.11.0\n"},
                                    {"rc": None, "stdout": "slurm 25.11.0\n"}, {"rc": 0},
                                    {"rc": 0, "stdout": None},
                                    {"rc": 1, "stdout": "slurm 25.11.0\n", "stderr": ""}], ids=repr)
def test_an_odd_version_result_is_a_form_or_a_clear_failure(result):
    try:
        argv = filters.remediation_slurm_show_argv(result, NODE)
    except AnsibleFilterError:
        return
    assert argv[:4] == ["scontrol", "show", "node", NODE] and argv[-1] in ("--json", "-o")
    assert result.get("rc") == 0


@pytest.mark.parametrize("result", [{"rc": 0, "stdout": None, "stderr": ""}, {"rc": 0, "stdout": ["{}"], "stderr": ""},
                                    {"stdout": "{}", "stderr": ""},
                                    {"rc": "0", "stdout": "{}", "stderr": ""}, {"rc": 0, "stderr": ""}], ids=repr)
def test_an_odd_show_result_fails_the_step_clearly(result):
    result = dict(result, cmd=["scontrol", "show", "node", NODE, "--json"])
    with pytest.raises(AnsibleFilterError):
        filters.remediation_slurm_state(result, NODE)


# --- (a) the agent's publisher end to end (scripted scontrol): never an update on a guess ----------------

def _publisher(version_answer, show_answer, form="--json"):
    from runners import ScriptedRunner  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import (  # pylint: disable=import-outside-toplevel
        SlurmPublisher)
    runner = ScriptedRunner({("scontrol", "--version"): version_answer,
                             ("scontrol", "show", "node", NODE, form): show_answer,
                             "scontrol": (0, "", "")})
    return SlurmPublisher(NODE, runner), runner


def _updates(runner):
    return [call for call in runner.calls if len(call) > 1 and call[1] == "update"]


@pytest.mark.parametrize("version", ["slurm 23.02.0-0rc1\n", "slurm 24.11.0-1\n", "slurm 25.11.0\n"])
@pytest.mark.parametrize("answer", [
    pytest.param(lambda: (0, _dup_key("reason", "gpufleet: gpu.xid[gpu3]", "admin: dimm"), ""), id="dup-reason"),
    pytest.param(lambda: (0, json.dumps(ours(real())).replace('"boards": 1', '"boards": NaN'), ""), id="nan"),
    pytest.param(lambda: (0, json.dumps(dict(ours(real()), errors=[{"error": "x"}])), ""), id="errors"),
    pytest.param(lambda: (0, json.dumps(ours(real()))[:-40], ""), id="truncated"),
    pytest.param(lambda: (0, "", ""), id="empty"),
    pytest.param(lambda: (1, "", "scontrol: unrecognized option '--json'\n"), id="refused-json"),
    pytest.param(lambda: (1, "", "slurm_load_node error: Unable to contact slurm controller\n"), id="no-controller"),
])
def test_the_agent_never_updates_on_an_unreadable_json_answer(version, answer):
    for healthy in (True, False):
        publisher, runner = _publisher((0, version, ""), answer())
        try:
            publisher.publish(healthy, [] if healthy else FAILING)
        except AgentError as exc:
            assert NODE in str(exc) or "scontrol" in str(exc)
        assert _updates(runner) == [], runner.calls
        assert ["scontrol", "show", "node", NODE, "--json"] in runner.calls


@pytest.mark.parametrize("version", ["slurm-wlm 22.05.8\n", "", "garbage\n", "slurm 25.11\n"])
def test_the_agent_reads_the_text_form_where_the_version_is_old_or_not_understood(version):
    text = ("NodeName=%s Arch=x86_64 NodeHostName=%s State=IDLE+DRAIN ThreadsPerCore=2 "
            "Reason=gpufleet: gpu.xid[gpu3] [root@2026-11-26T04:00:00] Comment=(null)\n" % (NODE, NODE))
    publisher, runner = _publisher((0, version, ""), (0, text, ""), form="-o")
    publisher.publish(True, [])
    assert ["scontrol", "show", "node", NODE, "-o"] in runner.calls
    assert ["scontrol", "show", "node", NODE, "--json"] not in runner.calls
    assert _updates(runner) == [["scontrol", "update", "NodeName=%s" % NODE, "State=RESUME"]]


def _damaged_answer_is_a_decision_or_unreadable(damaged, healthy):
    try:
        commands, why = agent(damaged, healthy)
    except AgentError as exc:
        assert NODE in str(exc)
        return
    if commands:
        doc = json.loads(damaged)
        node = doc["nodes"][0]
        # the node asked about by NodeName (the node named is the node acted on, contracts.md);
        # "errors" is read when present (read_show_node_json: absent is no error), "reason" absent is ""
        assert len(doc["nodes"]) == 1 and node["name"] == NODE
        assert doc.get("errors", []) == []
        assert node.get("reason", "").startswith("gpufleet:")
    else:
        assert isinstance(why, str)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_real_answer_damaged_anywhere_is_a_decision_or_unreadable(data):
    """One character of the real answer replaced, dropped or doubled: never a crash, and a command only where the
    damaged text still parses to this node's readable state (checked against Python's own strict parse)."""
    text = json.dumps(ours(real()))
    where = data.draw(st.integers(0, len(text) - 1))
    how = data.draw(st.sampled_from(["drop", "double", "replace"]))
    char = data.draw(st.sampled_from(list('{}[]",:0 \\nN\x00')))
    damaged = {"drop": text[:where] + text[where + 1:], "double": text[:where] + text[where] + text[where:],
               "replace": text[:where] + char + text[where + 1:]}[how]
    _damaged_answer_is_a_decision_or_unreadable(damaged, data.draw(st.booleans()))


@pytest.mark.parametrize("key", ['"rrors"', '"eerrors"', '"{rrors"'])
def test_a_real_answer_whose_errors_key_is_damaged_is_read_as_without_errors(key):
    """Found by the test above (a KeyError in the test itself, not the agent): the top-level "errors"
    key damaged into another name is an answer without "errors", which the reader takes as no errors
    (docs: "errors (when present) empty"); the agent resumes its own gpufleet drain."""
    text = json.dumps(ours(real()))
    assert text.count('"errors": []') == 1
    damaged = text.replace('"errors": []', key + ': []')
    for healthy in (True, False):
        _damaged_answer_is_a_decision_or_unreadable(damaged, healthy)
    assert agent(damaged, True)[0] == [["scontrol", "update", "NodeName=%s" % NODE, "State=RESUME"]]


@pytest.mark.parametrize("reason", ['gpufleet: a\nb', 'gpufleet: "q" \\ \u00e9', "gpufleet: " + "x" * 500])
def test_the_stand_ins_json_after_an_update_is_strict_and_read_back(tmp_path, reason):
    env = dict(os.environ, GPUFLEET_STANDIN_SLURM_DIR=str(tmp_path))
    run = lambda *argv: subprocess.run([STANDIN] + list(argv), env=env, capture_output=True, text=True,  # noqa: E731
                                       timeout=60, check=False)
    assert run("update", "NodeName=gpu-9", "State=DRAIN", "Reason=" + reason).returncode == 0
    shown = run("show", "node", "gpu-9", "--json")
    assert shown.returncode == 0 and corpus.unknown_lines("scontrol", shown.stdout + shown.stderr) == []
    assert slurm.read_show_node_json(shown.stdout, "gpu-9")["Reason"] == reason


KUBEADM = os.path.join(REPO, "roles", "kubernetes_control_plane", "molecule", "default", "files", "kubeadm")


def _kubeadm(tmp_path, cases, argv):
    (tmp_path / "etc" / "kubernetes").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KUBEADM_DOUBLE_ROOT=str(tmp_path), KUBEADM_DOUBLE_LOG=str(tmp_path / "calls.log"),
               KUBEADM_DOUBLE_PYTHON=sys.executable, KUBEADM_DOUBLE_MINOR="1.36", KUBEADM_DOUBLE_CASES=cases)
    return subprocess.run([KUBEADM] + argv, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("cases,argv", [
    ("upgrade-apply-success", ["upgrade", "apply", "--yes", "v1.36.1", "--etcd-upgrade=true"]),  # another target
    ("upgrade-apply-success", ["upgrade", "apply", "--yes", "v1.37.5", "--etcd-upgrade=true"]),
    ("upgrade-apply-success", ["upgrade", "apply", "--yes", "v1.36.5", "--etcd-upgrade=false"]),
    ("upgrade-apply-success", ["upgrade", "apply", "--yes", "v1.36.5", "--etcd-upgrade=true", "--force"]),
    ("upgrade-apply-success", ["upgrade", "apply", "v1.36.5", "--etcd-upgrade=true"]),  # no --yes
    ("upgrade-apply-success,upgrade-apply-failure", ["upgrade", "apply", "--yes", "v1.36.5", "--etcd-upgrade=true"]),
    ("upgrade-plan-json", ["upgrade", "plan", "v1.35.0", "-o", "json"]),
    ("upgrade-plan-json", ["upgrade", "plan", "v1.36.5", "-o", "json", "--force"]),
    ("upgrade-plan-json", ["upgrade", "plan", "v1.36.5", "-o", "yaml"]),
    ("upgrade-apply-success", ["upgrade", "plan", "v1.36.5", "-o", "json"]),  # a case of another call
    ("nope", ["version", "-o", "short"]),
])
def test_the_kubeadm_stand_in_answers_only_the_transcripts_call(tmp_path, cases, argv):
    """README: flags and positionals as the transcript's; a call no transcript answers (or two do) exits 2."""
    result = _kubeadm(tmp_path, cases, argv)
    if cases == "nope" and result.returncode == 0:  # version has one transcript: the case list need not name it
        assert corpus.unknown_lines("kubeadm", result.stdout + result.stderr) == []
        return
    assert result.returncode == 2 and result.stdout == "" and "stand-in" in result.stderr, (argv, result)


def test_the_kubeadm_stand_in_answers_its_transcripts_call_with_its_lines(tmp_path):
    result = _kubeadm(tmp_path, "upgrade-apply-success", ["upgrade", "apply", "--yes", "v1.36.5", "--etcd-upgrade=true"])
    assert result.returncode == 0
    assert corpus.unknown_lines("kubeadm", result.stdout) == [] and corpus.unknown_lines("kubeadm", result.stderr) == []


@settings(max_examples=150, deadline=None)
@given(st.lists(FLAGS, max_size=5), st.one_of(st.sampled_from(["gpufleet remediation: gpu.xid", "gpufleet: x", "",
                                                               "gpufleet remediation:x", "admin"]), JUNK),
       st.sampled_from(["name", "hostname", "state", "reason", "errors", "meta", None]), JUNK)
def test_the_remediation_over_a_mangled_real_answer_is_a_view_or_fails_naming_the_form(state, reason, key, junk):
    doc = real()
    node = doc["nodes"][0]
    node["state"], node["reason"] = state, reason
    if key in ("errors", "meta"):
        doc[key] = junk
    elif key:
        node[key] = junk
    try:
        view = filters.remediation_slurm_state({"rc": 0, "stdout": json.dumps(doc), "stderr": "",
                                                "cmd": ["scontrol", "show", "node", NODE, "--json"]}, NODE)
    except AnsibleFilterError as exc:
        assert "scontrol show node %s --json" % NODE in str(exc)
        return
    node = doc["nodes"][0]
    assert doc["errors"] == [] and isinstance(node["state"], list) and isinstance(node["reason"], str)
    if view["ours"]:
        assert "DRAIN" in node["state"] and node["reason"].startswith("gpufleet remediation: ")
        assert node["state"][0] in ("IDLE", "ALLOCATED", "MIXED") and not view["admin"]


@pytest.mark.parametrize("version_answer", [(1, "", "scontrol: error: slurm_load_ctl_conf error\n"),
                                            (127, "", "scontrol: command not found\n"), (0, "slurm 25.11.0\n", "x")])
def test_a_failing_version_probe_never_leads_to_json_read_on_a_guess(version_answer):
    """A failing `scontrol --version`: an error of the cycle or the text form; never an update from an answer
    that was not read in the form asked (the -o answer here is someone else's drain: never resumed)."""
    text = ("NodeName=%s Arch=x86_64 NodeHostName=%s State=IDLE+DRAIN ThreadsPerCore=2 "
            "Reason=admin: dimm [root@2026-11-26T04:00:00] Comment=(null)\n" % (NODE, NODE))
    for form in ("-o", "--json"):
        publisher, runner = _publisher(version_answer, (0, text if form == "-o" else "{}", ""), form=form)
        try:
            publisher.publish(True, [])
        except AgentError:
            pass
        assert _updates(runner) == [], runner.calls


# --- moved in from the red team's failing file (F4-F6), passing now --------------------------------------------
# F4: the remediation filters crashed (AttributeError, TypeError) on a stdout that is not text.
@pytest.mark.parametrize("stdout", [["slurm 25.11.0"], {"a": 1}, 25.11, b"slurm 25.11.0\n"])
def test_a_version_result_whose_stdout_is_not_text_is_a_clear_failure(stdout):
    with pytest.raises(AnsibleFilterError, match="scontrol --version is not text"):
        filters.remediation_slurm_show_argv({"rc": 0, "stdout": stdout, "stderr": ""}, NODE)
    assert slurm.parse_version(stdout) is None


@pytest.mark.parametrize("argv, form", [(["scontrol", "show", "node", NODE, "--json"], "--json"),
                                        (["scontrol", "show", "node", NODE, "-o"], "-o")])
@pytest.mark.parametrize("stdout", [{"nodes": []}, ["NodeName=gpu-01"], 7, b"{}"])
def test_a_show_result_whose_stdout_is_not_text_is_a_clear_failure(argv, form, stdout):
    with pytest.raises(AnsibleFilterError, match="scontrol show node %s %s is not text" % (NODE, form)):
        filters.remediation_slurm_state({"rc": 0, "stdout": stdout, "stderr": "", "cmd": argv}, NODE)


def test_the_remediations_view_of_an_answer_that_is_not_text_is_a_policy_error():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation  # pylint: disable=import-outside-toplevel

    with pytest.raises(remediation.PolicyError, match="not text but dict"):
        remediation.slurm_state({"nodes": []}, NODE, json_form=True)


# F5: an answer whose NodeName is another node was acted on when only NodeHostName was the node asked about.
# The node named is the node acted on (`scontrol update NodeName=<node>`): NodeName must be the node asked
# about; NodeHostName is not compared (docs/contracts.md, "Slurm").
TEXT_ANSWER = ("NodeName=%s Arch=x86_64 NodeHostName=%s State=IDLE+DRAIN ThreadsPerCore=2 "
               "Reason=gpufleet: gpu.xid[gpu3] [root@2026-11-26T04:00:00] Comment=(null)\n")


@pytest.mark.parametrize("name, hostname", [("gpu-02", NODE), ("pu-01", NODE), ("gpu-02", "gpu-02")])
def test_an_answer_whose_name_is_another_is_never_acted_on_even_with_this_hostname(name, hostname):
    doc = ours(real())
    doc["nodes"][0]["name"], doc["nodes"][0]["hostname"] = name, hostname
    for text, json_form in ((json.dumps(doc), True), (TEXT_ANSWER % (name, hostname), False)):
        for healthy in (True, False):
            with pytest.raises(AgentError, match="NodeName=%s, not this node" % name):
                slurm_commands(NODE, healthy, [] if healthy else FAILING, text, json_form=json_form)
        with pytest.raises(AnsibleFilterError, match="no NodeName=%s" % NODE):
            filters.remediation_slurm_state({"rc": 0, "stdout": text, "stderr": "", "cmd": [
                "scontrol", "show", "node", NODE, "--json" if json_form else "-o"]}, NODE)


@pytest.mark.parametrize("hostname", ["other-host", "gpu-01.cluster.example", ""])
def test_an_answer_named_this_node_is_acted_on_whatever_its_hostname(hostname):
    doc = ours(real())
    doc["nodes"][0]["hostname"] = hostname
    resume = [["scontrol", "update", "NodeName=%s" % NODE, "State=RESUME"]]
    assert slurm_commands(NODE, True, [], json.dumps(doc), json_form=True)[0] == resume
    assert slurm_commands(NODE, True, [], TEXT_ANSWER % (NODE, hostname or "gpu-01"), json_form=False)[0] == resume


# F6: a Reason holding a newline (anyone with `scontrol update Reason=` sets it) was written raw to the journal
# by --slurm-health-check: the decision was right (left alone), but the journal showed a forged second line.
def test_a_reason_with_a_newline_is_one_journal_line(tmp_path, monkeypatch, capsys):
    import time  # pylint: disable=import-outside-toplevel
    from runners import ScriptedRunner  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent import agent_cycle  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import SlurmPublisher  # pylint: disable=import-outside-toplevel

    (tmp_path / "health.json").write_text(json.dumps({"generated_at": time.time(),
                                                      "agent": {"healthy": True, "failing": []}}))
    doc = real()
    doc["nodes"][0]["reason"] = "admin\ngpufleet-health-agent: slurm: resume (was gpufleet: x)\r\x1b[2K\u2028end"
    runner = ScriptedRunner({("scontrol", "--version"): (0, "slurm 25.11.0\n", ""),
                             ("scontrol", "show", "node", NODE, "--json"): (0, json.dumps(doc), "")})
    monkeypatch.setattr(SlurmPublisher, "from_config", classmethod(lambda cls, config: cls(NODE, runner)))
    assert agent_cycle.slurm_health_check({"state_dir": str(tmp_path)}) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.endswith("\n"), out
    assert "\r" not in out and "\x1b" not in out and "\u2028" not in out
    assert "left alone" in out and "admin\\ngpufleet-health-agent: slurm: resume" in out
    assert "\\r\\x1b[2K\\u2028end" in out
    assert _updates(runner) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_one_journal_line(text):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import journal_line  # pylint: disable=import-outside-toplevel

    line = journal_line(text)
    assert len(("%s\n" % line).splitlines()) == 1 and not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in line)
    if not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or c in "\u2028\u2029" for c in text):
        assert line == text
