"""Burn-in: dcgmi diag -j outputs (tests/fixtures/dcgm, sources in its README) -> check results;
the runner against the stand-in executable tests/standins/bin/dcgmi (a real subprocess)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO, TESTS
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import dcgm
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import SubprocessRunner

DCGM = os.path.join(FIXTURES, "dcgm")
STANDINS = os.path.join(TESTS, "standins", "bin")


def text(name):
    with open(os.path.join(DCGM, name)) as handle:
        return handle.read()


def judged(name, rc=0, **kwargs):
    return dcgm.diag_checks(dcgm.parse_diag(text(name)), rc=rc, **kwargs).as_list()


def by_status(checks, status, check_id=dcgm.TEST_CHECK):
    return [c for c in checks if c["status"] == status and c["id"] == check_id]


def run_check(checks):
    found = [c for c in checks if c["id"] == dcgm.RUN_CHECK]
    assert found, checks
    return found


# -- parsing real shapes -----------------------------------------------------------------------------
def test_level2_pass_4x():
    parsed = dcgm.parse_diag(text("dcgm4_level2_pass.json"))
    assert parsed["format"] == "4.x" and parsed["version"] == "4.2.3" and parsed["driver"] == "580.82.09"
    assert [t["name"] for t in parsed["tests"]] == ["software", "pcie", "memory"]
    checks = judged("dcgm4_level2_pass.json")
    assert [(c["target"], c["message"]) for c in by_status(checks, "pass")] == [
        ("software", "Deployment/software: pass on gpu0\u20131"), ("pcie", "Integration/pcie: pass on gpu0\u20131"),
        ("memory", "Hardware/memory: pass on gpu0\u20131")]
    assert not by_status(checks, "fail") and run_check(checks)[0]["status"] == "pass"
    assert run_check(checks)[0]["observed"]["tests_run"] == 3


def test_every_failing_gpu_is_named_with_dcgms_message_4x():
    checks = judged("dcgm4_level1_persistence_fail.json", rc=226)
    failed = by_status(checks, "fail")
    assert [c["target"] for c in failed] == ["gpu%d/software" % i for i in range(8)]
    assert failed[3]["message"] == "Deployment/software: Persistence Mode: Persistence mode for GPU 3 is disabled."
    assert failed[3]["observed"]["error_ids"] == [29]
    # the exit status 226 is explained by the failures: the run itself is not an extra failure
    assert run_check(checks)[0]["status"] == "pass"


def test_one_gpu_fails_the_other_passes_4x():
    checks = judged("dcgm4_memtest_temp_fail.json", rc=226)
    failed = by_status(checks, "fail")
    assert [(c["target"], c["observed"]["test"]) for c in failed] == [("gpu0/memtest", "memtest")]
    assert "Temperature 1000 of GPU 0 exceeded" in failed[0]["message"]
    assert ("memtest", "Stress/memtest: pass on gpu1") in [(c["target"], c["message"]) for c in by_status(checks, "pass")]


def test_3x_text_before_json_csv_gpu_ids_and_nulls():
    parsed = dcgm.parse_diag(text("dcgm3_deployment_pass.txt"))
    assert parsed["format"] == "3.x" and parsed["version"] == "3.1.0"
    assert parsed["preamble"] == "WARNING: THIS SHOULD NOT HAPPEN"
    assert parsed["tests"][0]["results"][0]["targets"] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    checks = judged("dcgm3_deployment_pass.txt")
    assert len(by_status(checks, "pass")) == 7 and run_check(checks)[0]["status"] == "pass"


def test_3x_sm_stress_failure():
    checks = judged("dcgm3_sm_stress_fail.json", rc=226)
    failed = by_status(checks, "fail")
    assert [(c["target"], c["observed"]["error_ids"]) for c in failed] == [("gpu0/SM Stress", [40])]
    assert failed[0]["message"].startswith("Stress/SM Stress: Thermal violations totaling 13.4 seconds")


def test_partial_skip_is_reported_and_not_a_pass_of_the_skipped_tests():
    checks = judged("dcgm4_level2_partial_skip.json")
    skipped = by_status(checks, "skip")
    assert [c["message"] for c in skipped] == ["Integration/pcie: not run (not supported on this device)",
                                               "Hardware/memory: not run (not supported on this device)"]
    assert run_check(checks)[0]["status"] == "pass"  # software did run


# -- fail closed ---------------------------------------------------------------------------------------
def test_nothing_ran_fails():
    checks = judged("dcgm4_all_skipped.json")
    assert run_check(checks)[0]["status"] == "fail" and "ran no test" in run_check(checks)[0]["message"]


def test_unsupported_gpu_without_tests_fails_quoting_dcgm():
    checks = judged("dcgm_unsupported_gpu.txt", rc=1)
    assert run_check(checks)[0]["status"] == "fail"
    assert "Unable to run diagnostic on unsupported GPU 0." in run_check(checks)[0]["message"]


def test_runtime_error_fails():
    checks = judged("dcgm4_runtime_error.json", rc=1)
    assert [c["status"] for c in checks] == ["fail"] and "DCGM runtime error" in checks[0]["message"]


def test_table_output_is_not_a_result():
    with pytest.raises(dcgm.DiagError, match="no JSON object"):
        dcgm.parse_diag(text("dcgm3_table_not_json.txt"))


@pytest.mark.parametrize("output, words", [
    ("", "no JSON object"),
    ("{\"DCGM Diagnostic\": ", "not JSON"),
    ("[1, 2]", "no JSON object"),
    ("{\"something\": {}}", "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"),
    ("{\"DCGM Diagnostic\": {\"test_categories\": {}}}", r"test_categories\): not a list"),
    ("{\"DCGM Diagnostic\": {\"test_categories\": [{\"category\": \"X\", \"tests\": [{\"name\": \"t\", "
     "\"results\": [{\"entity_id\": 0, \"status\": \"Maybe\"}]}]}]}}", "unknown status 'Maybe'"),
    ("{\"DCGM Diagnostic\": {\"test_categories\": [{\"category\": \"X\", \"tests\": [{\"name\": \"t\", "
     "\"results\": [{\"gpu_ids\": \"0,x\", \"status\": \"Pass\"}]}]}]}}", "not a list of GPU ids"),
])
def test_malformed_output_is_refused(output, words):
    with pytest.raises(dcgm.DiagError, match=words):
        dcgm.parse_diag(output)


# -- hostile documents: the shape of NVIDIA/DCGM dcgmi/Diag.cpp is checked, nothing unexpected passes -----
def _doc(result=None, summary=None, test=None):
    result = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"} \
        if result is None else result
    test = {"name": "memtest", "results": [result], "test_summary": {"status": "Pass"}} if test is None else test
    if summary is not None:
        test["test_summary"] = summary
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [test]}]},
                       "metadata": {"version": "4.2.3"}})


def _run_verdict(output, rc=0):
    """The checks of run_diag over ``output`` (what the module reports)."""
    try:
        parsed, error = dcgm.parse_diag(output), None
    except dcgm.DiagError as exc:
        parsed, error = None, str(exc)
    return dcgm.diag_checks(parsed, rc=rc, error=error).as_list()


@pytest.mark.parametrize("output, words", [
    ("{\"DCGM Diagnostic\": " + "[" * 5000 + "]" * 5000 + "}", "nested deeper than"),
    (_doc(result={"entity_id": 0, "status": "Fail", "warnings": 5}), r"warnings\): not a list but int"),
    (_doc(result={"entity_id": 0, "status": "Fail", "warnings": [7]}), r"warnings\[0\]\): not an object"),
    (_doc(result={"entity_id": 0, "status": "Fail", "warnings": [{"error_id": 3}]}), "has no warning text"),
    (_doc(result={"entity_id": 0, "status": "Skip", "info": {"a": 1}}), r"info\): not a list but dict"),
    (_doc(result={"entity_id": 0, "status": "Skip", "info": [1]}), r"info\[0\]\): not a string"),
    (_doc(summary=[{"status": "Pass"}]), r"test_summary\): not an object but list"),
    (_doc(summary={"result": "Pass"}), "test_summary has no status"),
    (_doc(result={"entity_id": True, "status": "Pass"}), "entity_id\\): not an integer"),
    (_doc(result={"entity_id": 0, "status": ["Pass"]}), r"status\): not a string"),
    (_doc(result={"entity_id": 0}), "has no status"),
    (_doc(test={"name": "", "results": []}), "empty"),
    (_doc(test={"name": "memtest"}), "missing results"),
    ('{"DCGM Diagnostic": {"test_categories": []}, "metadata": {"version": NaN}}', "not JSON"),
    ('{"DCGM Diagnostic": {}, "DCGM Diagnostic": {}}', "duplicate key"),
    ('{"DCGM Diagnostic": {"runtime_error": ["x"]}}', r"runtime_error\): not a string"),
])
def test_hostile_documents_are_refused_and_fail_the_run(output, words):
    with pytest.raises(dcgm.DiagError, match=words):
        dcgm.parse_diag(output)
    checks = _run_verdict(output)
    assert [(c["id"], c["status"]) for c in checks] == [(dcgm.RUN_CHECK, "fail")], checks


def test_a_summary_fail_names_dcgm_s_summary_message():
    output = _doc(result={"entity_id": 0, "status": "Pass"},
                  summary={"status": "Fail", "warnings": [{"warning": "global warning", "error_id": 1,
                                                           "error_category": 1, "error_severity": 1}]})
    failed = [c for c in _run_verdict(output) if c["status"] == "fail"]
    assert failed and "global warning" in failed[0]["message"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=8)
_KEYS = ["status", "warnings", "info", "entity_id", "entity_group", "gpu_ids", "test_summary", "results", "name",
         "tests", "category", "test_categories", "runtime_error", "metadata", "warning", "error_id"]


@settings(max_examples=200, deadline=None)
@given(path=st.lists(st.integers(0, 40), min_size=1, max_size=6), key=st.sampled_from(_KEYS), value=_JSON)
def test_any_mutation_of_a_document_is_a_verdict_never_a_crash(path, key, value):
    """Replace or add one known key anywhere in a passing document: the parser returns a verdict or
    a DiagError; a document it refuses never passes the run."""
    document = json.loads(text("dcgm4_level2_pass.json"))
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            nodes.append(node)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)
    walk(document)
    target = nodes[path[0] % len(nodes)]
    target[key] = value
    output = json.dumps(document)
    try:
        dcgm.parse_diag(output)
    except dcgm.DiagError:
        checks = _run_verdict(output)
        assert [c["status"] for c in checks if c["id"] == dcgm.RUN_CHECK] == ["fail"]
        assert not any(c["status"] == "pass" for c in checks)
        return
    checks = _run_verdict(output)
    assert {c["status"] for c in checks} <= {"pass", "fail", "warn", "skip"}


def test_nonzero_exit_with_all_tests_passing_is_not_trusted():
    checks = judged("dcgm4_level2_pass.json", rc=3, stderr="something odd\n")
    assert run_check(checks)[0]["status"] == "fail"
    assert "exited 3 although no test failed" in run_check(checks)[0]["message"]
    assert "stderr: something odd" in run_check(checks)[0]["message"]


def test_requested_test_absent_or_skipped_fails():
    checks = judged("dcgm4_level2_partial_skip.json", requested_tests=["software", "memory", "memtest"])
    missing = [c["message"] for c in run_check(checks) if c["status"] == "fail"]
    assert missing == ["requested test memory did not run (absent or skipped in the output)",
                       "requested test memtest did not run (absent or skipped in the output)"]


def test_timeout_and_no_output():
    out = dcgm.diag_checks(None, rc=-9, timed_out=True, timeout=5, run="dcgmi diag -r 3 -j").as_list()
    assert out[0]["status"] == "fail" and "did not finish within 5 s" in out[0]["message"]
    out = dcgm.diag_checks(None, rc=255, error="no JSON object in the output", stderr="Error: unable to connect\n",
                           run="dcgmi diag -r 1 -j").as_list()
    assert out[0]["message"] == ("dcgmi diag -r 1 -j exited 255 without a JSON result (no JSON object in the "
                                 "output); stderr: Error: unable to connect")


def test_command_line():
    assert dcgm.diag_command("dcgmi", level=2) == ["dcgmi", "diag", "-r", "2", "-j"]
    assert dcgm.diag_command("dcgmi", tests=["memtest", "pcie"], parameters="memtest.test_duration=60") == [
        "dcgmi", "diag", "-r", "memtest,pcie", "-j", "-p", "memtest.test_duration=60"]
    with pytest.raises(ValueError, match="option level"):
        dcgm.diag_command("dcgmi", level=5)
    with pytest.raises(ValueError, match="option tests"):
        dcgm.diag_command("dcgmi", tests=["a,b"])


# -- the runner against the stand-in (a real subprocess) -------------------------------------------------
@pytest.fixture
def replay(monkeypatch, tmp_path):
    """dcgmi answers with a transcript of tests/transcripts/dcgmi (its stdout, stderr, exit status);
    all_reduce_perf replays a file of tests/fixtures/nccl."""
    argv = tmp_path / "argv.jsonl"
    monkeypatch.setenv("GPUFLEET_REPLAY_ARGV", str(argv))

    def use(case=None, rc=0, stderr="", hang=0, nccl=None):
        for name in ("GPUFLEET_REPLAY_CASE", "GPUFLEET_REPLAY_STDOUT", "GPUFLEET_REPLAY_RC", "GPUFLEET_REPLAY_STDERR"):
            monkeypatch.delenv(name, raising=False)
        if case:
            monkeypatch.setenv("GPUFLEET_REPLAY_CASE", case)
        if nccl:
            monkeypatch.setenv("GPUFLEET_REPLAY_STDOUT", os.path.join(FIXTURES, "nccl", nccl))
            monkeypatch.setenv("GPUFLEET_REPLAY_RC", str(rc))
            monkeypatch.setenv("GPUFLEET_REPLAY_STDERR", stderr)
        monkeypatch.setenv("GPUFLEET_REPLAY_HANG", str(hang))
        return lambda: [json.loads(line) for line in argv.read_text().splitlines()]
    return use


def test_runner_replays_a_failure_with_its_exit_status(replay):
    calls = replay("dcgmi/4.2.3/diag-memtest-temp-fail")
    checks, info = dcgm.run_diag(SubprocessRunner(), os.path.join(STANDINS, "dcgmi"), level=3, timeout=30)
    assert calls() == [["dcgmi", "diag", "-r", "3", "-j"]]
    assert info["rc"] == 226 and info["timed_out"] is False and info["version"] == "4.2.3"
    assert [c["target"] for c in checks.as_list() if c["status"] == "fail"] == ["gpu0/memtest"]
    assert not checks.healthy


def test_runner_nonzero_without_json_fails(replay):
    # dcgmi prints its errors on stdout (dcgmi/Command.cpp std::cout): the message carries that line
    replay("dcgmi/4.x/diag-no-host-engine")
    checks, _info = dcgm.run_diag(SubprocessRunner(), os.path.join(STANDINS, "dcgmi"), level=1, timeout=30)
    (only,) = checks.as_list()
    assert only["id"] == "burnin.dcgm.run" and only["status"] == "fail"
    assert "exited 235 without a JSON result" in only["message"] and "unable to establish" in only["message"]


def test_the_dcgmi_standin_answers_only_from_the_corpus(replay, monkeypatch):
    replay("dcgmi/9.9/none")
    result = subprocess.run([os.path.join(STANDINS, "dcgmi"), "diag", "-r", "1", "-j"], capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 2 and result.stdout == "" and "no transcript dcgmi/9.9/none" in result.stderr
    replay("diag-r2-pass")
    monkeypatch.setenv("GPUFLEET_REPLAY_STDOUT", os.path.join(DCGM, "dcgm4_level2_pass.json"))
    result = subprocess.run([os.path.join(STANDINS, "dcgmi")], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "answers only from the transcript corpus" in result.stderr


def test_runner_timeout_kills_the_diagnostic(replay):
    replay("dcgmi/4.2.3/diag-r2-pass", hang=30)
    checks, info = dcgm.run_diag(SubprocessRunner(), os.path.join(STANDINS, "dcgmi"), level=2, timeout=0.3)
    assert info["timed_out"] is True
    assert [c["status"] for c in checks.as_list()] == ["fail"] and "did not finish within 0.3 s" in \
        checks.as_list()[0]["message"]


def test_runner_nccl_single_node(replay):
    replay(nccl="all_reduce_perf_min_bw_ok.txt")
    command = [os.path.join(STANDINS, "all_reduce_perf"), "-b", "8", "-e", "1G", "-f", "2", "-g", "8"]
    ok = dcgm.run_nccl(SubprocessRunner(), command, min_busbw_gbps=1, timeout=30).as_list()
    assert [c["id"] for c in ok] == ["k8s.nccl.busbw", "k8s.nccl.wrong"] and ok[0]["status"] == "pass"
    high = dcgm.run_nccl(SubprocessRunner(), command, min_busbw_gbps=1e6, timeout=30).as_list()
    assert high[0]["status"] == "fail" and "below" in high[0]["message"]
    replay(nccl="all_reduce_perf_min_bw_ok.txt", rc=1)
    failed = dcgm.run_nccl(SubprocessRunner(), command, timeout=30).as_list()
    assert failed[0]["status"] == "fail"


def test_module_entry_point(replay, tmp_path):
    replay("dcgmi/4.x/diag-r1-persistence-fail")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"dcgmi": os.path.join(STANDINS, "dcgmi"), "level": 1,
                                                        "timeout": 60}}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "gpu_burnin.py"), str(args)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    out = json.loads(proc.stdout)
    assert out["failed"] is True and out["healthy"] is False and out["summary"]["fail"] == 8, out
    assert out["dcgm"]["rc"] == 226
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"dcgmi": "/nonexistent/dcgmi", "fail_on": "never"}}))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "gpu_burnin.py"), str(args)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    out = json.loads(proc.stdout)
    assert out["checks"][0]["status"] == "fail" and "exited 127" in out["checks"][0]["message"], out


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(DCGM) if n.startswith("dcgm") and "table" not in n))
def test_every_check_of_a_run_has_its_own_id_and_target(name):
    """The fleet report keeps one check per (id, target): a second failing test of the same GPU must not
    hide the first."""
    checks = judged(name, rc=226)
    keys = [(c["id"], c["target"]) for c in checks]
    assert len(keys) == len(set(keys)), keys
