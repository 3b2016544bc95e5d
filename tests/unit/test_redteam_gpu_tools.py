"""Red-team attacks on the GPU tools (docs/contracts.md "MIG layout", "Burn-in and remediation checks",
"XID policy"; roles/gpu_mig/README.md; tests/transcripts/README.md), written from the documentation only.

(1) MIG profile names are go-nvlib's (pkg/nvlib/device/mig_profile.go v0.12.0 parseMigProfile);
    `nvidia-mig-parted -d assert`: "cannot read" fails the node, never "not applied", never "applied".
(2) `dcgmi diag -j`: a document that is not a well-formed DCGM result is a failing burnin.dcgm.run.
(3) XID 63/64 never pass by default, whatever the driver's line format.
(4) the transcript corpus: stand-ins print only lines of transcripts with a source.
"""

import calendar
import json
import os
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import TESTS
from hypothesis import given, settings
from hypothesis import strategies as st
from transcripts import corpus

from ansible_collections.gpufleet.cluster.plugins.filter.mig import (
    mig_layout_uncovered,
    mig_parted_assert,
    mig_parted_config,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import dcgm
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import (
    ProfileError,
    layout_errors,
    parse_profile,
    profile_error,
    uncovered_gpus,
)

TOOL = "nvidia-mig-parted"
BIN = os.path.join(TESTS, "standins", "bin")
ASSERT_FATAL = 'time="2026-11-26T06:00:00Z" level=fatal msg="Assertion failure: selected configuration not currently applied"\n'
SUCCESS = "Selected MIG configuration currently applied\n"
ROLE = os.path.join(os.path.dirname(TESTS), "roles", "gpu_mig")


def _debug(message):
    return 'time="2026-11-26T06:00:00Z" level=debug msg="%s"\n' % message


def _layout(profile, count=1):
    return [{"devices": "all", "mig-enabled": True, "mig-devices": {profile: count}}]


def _refused(profile):
    errors = layout_errors(_layout(profile), "gpufleet_mig_layout")
    return errors


# =====================================================================================================
# (1a) profile names: go-nvlib's grammar
# =====================================================================================================
@pytest.mark.parametrize("profile", [
    "1g.10gb", "1g.10gb+me", "7g.80gb", "1g.12gb+me.all", "1g.24gb+gfx", "1g.24gb-me", "1g.24gb-me.all",
    "1g.24gb-gfx", "2g.20gb", "3g.40gb", "4g.40gb", "6g.90gb", "8g.180gb", "1g.0gb",
    "1g.9223372036854775807gb",  # the largest int strconv.Atoi reads on a 64-bit node
])
def test_go_nvlib_gpu_instance_names_are_accepted(profile):
    assert profile_error(profile) is None
    assert _refused(profile) == []


@pytest.mark.parametrize("profile", [
    "1c.2g.20gb", "1c.1g.5gb", "2c.7g.80gb",        # compute-instance names
    "0g.10gb", "5g.50gb", "9g.90gb",                # slice counts other than 1, 2, 3, 4, 6, 7, 8
    "1g.10mb", "1g.10.5gb", "1g.10gb.", ".1g.10gb", "1g10gb", "1g.10",
    "4g.40gb ", " 4g.40gb", "4g.40gb\t", "4g.40gb\n", "4g.\u00a040gb", "4g.40gb\u00a0",
    "1G.10GB", "1g.10GB", "1G.10gb", "1g.10Gb",
    "\u0661g.10gb", "1g.\u0661\u0660gb", "\uff11g.10gb", "1g.1\u00b2gb", "\u2460g.10gb",  # non-ASCII digits
    "1g.1_0gb", "1_0g.10gb", "+1g.10gb", "1g.+10gb", "1g.-10gb",  # what Python's int() reads but Atoi does not
    "1g.99999999999999999999gb", "1g.9223372036854775808gb",     # out of range for strconv.Atoi
    "01g.10gb", "1g.010gb",                                       # not as go-nvlib prints it
    "2g.20gb+gfx-me", "1g.5gb+me+gfx", "1g.5gb+me,gfx", "1g.5gb+me,me", "1g.10gb+ME", "1g.10gb+Me",
    "1g.10gb+", "1g.10gb-", "1g.10gb+me.", "1g.10gb+.me", "1g.10gb+mé", "1g.10gb+me.all.x", "1g.10gb++me",
    "1g.10gb+me ", "1g.10gb+ me", "1g.10gb-me,gfx", "1g.10gb+gfx,me.all",
    "", "gb", "g.gb", "1g.gb", "g.10gb", "1g.10gb\x00", "1g.10gb\u200b",
])
def test_names_go_nvlib_or_the_docs_refuse_are_refused_naming_the_profile(profile):
    problem = profile_error(profile)
    assert isinstance(problem, str) and problem, profile
    errors = _refused(profile)
    assert len(errors) == 1 and errors[0].startswith("gpufleet_mig_layout[0].mig-devices: "), errors


@pytest.mark.parametrize("profile", [
    "1g.1_0gb", "1_0g.10gb", "1g.\u0661\u0660gb", "\u0661g.10gb", "1g.99999999999999999999gb", "4g.40gb ",
    "1g.10gb\n", " 1g.10gb",
])
def test_python_int_leniency_is_not_go_nvlibs(profile):
    """parse_profile is go-nvlib's format check: strconv.Atoi refuses underscores, non-ASCII digits,
    surrounding space and out-of-range values (Python's int() takes them)."""
    with pytest.raises(ProfileError):
        parse_profile(profile)


@pytest.mark.parametrize("profile, words", [
    ("1g.1_0gb", "malformed number"),
    ("1g.99999999999999999999gb", "malformed number"),
    ("1g.\u0661\u0660gb", "malformed number"),
    ("2g.20gb+gfx-me", "contains both"),
    ("1g.10gb+me,me", "non unique attribute"),
    ("1g.10gb+", "empty attribute"),
    ("1g.10gb+me.", "begins/ends with a dot"),
    ("1g.10gb+2me", "begins with a number"),
    ("1g.10gb+m\u00e9", "non alpha-numeric"),
])
def test_a_name_go_nvlib_refuses_carries_go_nvlibs_message(profile, words):
    """docs: 'Also refused, naming the profile: a name go-nvlib refuses (with its message)'."""
    errors = _refused(profile)
    assert len(errors) == 1 and words in errors[0], errors
    assert repr(profile) in errors[0] or profile in errors[0], errors


@pytest.mark.parametrize("count", [True, False, "7", 7.5, None, -1, [7], {"n": 7}])
def test_a_count_that_is_not_a_count_is_refused(count):
    errors = layout_errors(_layout("1g.10gb", count), "gpufleet_mig_layout")
    assert errors and all(e.startswith("gpufleet_mig_layout") for e in errors), (count, errors)


@pytest.mark.parametrize("devices", [[True], [False, 1], ["0"], [-1], [0.0], "ALL", "All", None, {"0": 1}, 0])
def test_devices_that_are_not_all_or_gpu_indices_are_refused(devices):
    errors = layout_errors([{"devices": devices, "mig-enabled": False}], "gpufleet_mig_layout")
    assert errors, devices


@pytest.mark.parametrize("entry", [
    {"devices": "all", "mig-enabled": 1},
    {"devices": "all", "mig-enabled": "true"},
    {"devices": "all", "mig_enabled": True, "mig-devices": {"1g.10gb": 7}},   # typo: mig-parted "unexpected field"
    {"devices": "all", "mig-enabled": True, "mig_devices": {"1g.10gb": 7}},
    {"mig-enabled": True, "mig-devices": {"1g.10gb": 7}},                     # no devices
    {"devices": "all", "mig-devices": {"1g.10gb": 7}},                        # no mig-enabled
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}, "extra": 1},
    {"devices": "all", "mig-enabled": True, "mig-devices": ["1g.10gb"]},
    {"devices": "all", "mig-enabled": True, "mig-devices": {7: 7}},
])
def test_entries_mig_parted_would_refuse_are_refused(entry):
    errors = layout_errors([entry], "gpufleet_mig_layout")
    assert errors and all(e.startswith("gpufleet_mig_layout") for e in errors), (entry, errors)
    with pytest.raises(AnsibleFilterError, match="gpufleet_mig_layout"):
        mig_parted_config([entry], None)


@settings(max_examples=200, deadline=None)
@given(value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8))
def test_any_layout_value_is_a_verdict_never_a_crash(value):
    errors = layout_errors(value if isinstance(value, list) else [value], "gpufleet_mig_layout")
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    try:
        out = mig_parted_config(value, None)
    except AnsibleFilterError as exc:
        assert "mig_parted_config" in str(exc)
        return
    assert isinstance(out, dict) and "name" in out and "document" in out


@settings(max_examples=200, deadline=None)
@given(g=st.sampled_from([1, 2, 3, 4, 6, 7, 8]), gb=st.integers(0, 2 ** 70),
       sign=st.sampled_from(["", "+", "-"]), attribute=st.sampled_from(["me", "me.all", "gfx"]))
def test_numbers_beyond_atoi_are_refused_within_it_accepted(g, gb, sign, attribute):
    name = "%dg.%dgb%s" % (g, gb, (sign + attribute) if sign else "")
    problem = profile_error(name)
    if gb <= 2 ** 63 - 1:
        assert problem is None, (name, problem)
    else:
        assert problem is not None and repr(name) in problem, name


# =====================================================================================================
# (1b) nvidia-mig-parted -d assert: cannot read is never "not applied", never "applied"
# =====================================================================================================
CANNOT_READ_CAUSES = [
    # AssertMigMode / AssertMigConfig of cmd/nvidia-mig-parted/assert (v0.15.0), capitalised as logged
    "Error checking MIG capable: error opening bar0 MMIO resource: failed to open file for mmio: "
    "failed to mmap file: invalid argument",
    "Error checking if nvidia module loaded: open /proc/modules: permission denied",
    "Error initializing NVML: Driver Not Loaded",
    "Error initializing NVML: Unknown Error",
    "Error creating MIG mode Manager: error getting device count: Unknown Error",
    "Unable to assert MIG mode enabled on non MIG-capable GPU",
    "Error getting MIG mode: Unknown Error",
    "Error enumerating GPU device IDs: open /sys/bus/pci/devices: no such file or directory",
    "Error enumerating GPUs: open /sys/bus/pci/devices: no such file or directory",
    "Error getting MIGConfig: error getting device handle: GPU is lost",
    "Error getting MIGConfig: error asserting MIG enabled: MIG mode disabled",
    "Error creating MIG Config Manager: Unknown Error",
]
DIFFERS = ["Current mode different than mode being asserted", "Not all GPUs match the specified config"]


def _read(rc, stdout, stderr):
    try:
        return mig_parted_assert({"rc": rc, "stdout": stdout, "stderr": stderr})["state"]
    except AnsibleFilterError as exc:
        return "error: %s" % exc


@pytest.mark.parametrize("cause", CANNOT_READ_CAUSES)
def test_every_cannot_read_cause_is_an_error(cause):
    stderr = _debug("Asserting MIG mode configuration...") + _debug("  GPU 0: 0x20F110DE") + _debug(cause) + ASSERT_FATAL
    state = _read(1, "", stderr)
    assert state.startswith("error"), state
    assert cause.split(":")[0] in state, state


def _ansi_tty(level, message):
    colour = {"DEBU": 37, "FATA": 31, "INFO": 36}[level]
    return "\x1b[%dm%s\x1b[0m[0000] %-44s \n" % (colour, level, message)


@pytest.mark.parametrize("variant", ["ansi", "crlf", "crlf-ansi", "tty-plain"])
@pytest.mark.parametrize("cause", CANNOT_READ_CAUSES[:3] + CANNOT_READ_CAUSES[5:6])
def test_cannot_read_in_other_layouts_is_never_applied_nor_not_applied(variant, cause):
    if variant in ("ansi", "crlf-ansi"):
        stderr = _ansi_tty("DEBU", "Asserting MIG mode configuration...") + _ansi_tty("DEBU", cause) + \
            _ansi_tty("FATA", "Assertion failure: selected configuration not currently applied")
    elif variant == "tty-plain":
        stderr = "DEBU[0000] %-44s \nDEBU[0000] %s\nFATA[0000] Assertion failure: selected configuration not " \
                 "currently applied\n" % ("Asserting MIG mode configuration...", cause)
    else:
        stderr = _debug("Asserting MIG mode configuration...") + _debug(cause) + ASSERT_FATAL
    if variant.startswith("crlf"):
        stderr = stderr.replace("\n", "\r\n")
    state = _read(1, "", stderr)
    assert state.startswith("error"), (variant, state)


@pytest.mark.parametrize("variant", ["ansi", "crlf"])
@pytest.mark.parametrize("cause", DIFFERS)
def test_a_differing_layout_in_other_layouts_is_not_applied_or_an_error_never_applied(variant, cause):
    if variant == "ansi":
        stderr = _ansi_tty("DEBU", cause) + _ansi_tty("FATA", "Assertion failure: selected configuration not "
                                                              "currently applied")
    else:
        stderr = (_debug(cause) + ASSERT_FATAL).replace("\n", "\r\n")
    state = _read(1, "", stderr)
    assert state == "not-applied" or state.startswith("error"), state


@pytest.mark.parametrize("rc, stdout, stderr", [
    (0, "", ""),                                                     # exit 0, no output
    (0, "\n", ""),
    (0, "Selected MIG configuration is valid\n", ""),                # -a: only the file was checked
    (0, "selected mig configuration currently applied\n", ""),       # not mig-parted's spelling
    (0, "Selected MIG configuration currently applied (not)\n", ""),
    (0, "MIG configuration applied successfully\n", ""),             # apply's line, not assert's
    (1, SUCCESS, ASSERT_FATAL),                                      # success line but a failing exit
    (1, SUCCESS, ""),
    (2, SUCCESS, ""),
    (None, SUCCESS, ""),
    (-9, SUCCESS, ""),
    (0, "", SUCCESS),                                                # the line on the wrong stream
])
def test_applied_needs_exit_0_and_the_success_line(rc, stdout, stderr):
    state = _read(rc, stdout, stderr)
    assert state != "applied", (rc, stdout, stderr)
    assert state.startswith("error"), state


@pytest.mark.parametrize("cause", CANNOT_READ_CAUSES[:2])
def test_a_success_line_with_a_cannot_read_cause_and_exit_1_is_an_error(cause):
    state = _read(1, SUCCESS, _debug(cause) + ASSERT_FATAL)
    assert state.startswith("error"), state


@pytest.mark.parametrize("rc", [0, 2, 127, 255, None])
@pytest.mark.parametrize("cause", DIFFERS)
def test_not_applied_needs_exit_1(rc, cause):
    state = _read(rc, "", _debug(cause) + ASSERT_FATAL)
    assert state != "not-applied", (rc, state)


@pytest.mark.parametrize("cause", DIFFERS)
def test_a_differing_cause_without_the_assertion_failure_is_not_not_applied(cause):
    assert _read(1, "", _debug(cause)).startswith("error")
    # a fatal line of another message after the cause
    other_fatal = 'time="2026-11-26T06:00:00Z" level=fatal msg="Error selecting MIG config: x"\n'
    assert _read(1, "", _debug(cause) + other_fatal).startswith("error")


@pytest.mark.parametrize("cause", DIFFERS)
def test_a_cannot_read_cause_after_a_differing_one_is_an_error(cause):
    """The cause is the last debug line before the assertion failure: a cannot-read line there wins."""
    stderr = _debug(cause) + _debug(CANNOT_READ_CAUSES[0]) + ASSERT_FATAL
    assert _read(1, "", stderr).startswith("error")


@pytest.mark.parametrize("text", ["Current mode different than mode being asserted (GPU 3 unreadable)",
                                  "current mode different than mode being asserted",
                                  "Not all GPUs match the specified config: error getting MIGConfig: Unknown Error",
                                  "Error getting MIG mode: Current mode different than mode being asserted"])
def test_a_cause_that_only_resembles_a_differing_layout_is_an_error(text):
    state = _read(1, "", _debug(text) + ASSERT_FATAL)
    assert state.startswith("error"), (text, state)


@pytest.mark.parametrize("result", ["applied", None, 0, [], {"rc": "0", "stdout": SUCCESS, "stderr": ""},
                                    {"rc": 0, "stdout": None, "stderr": None},
                                    {"rc": 0, "stdout": b"Selected MIG configuration currently applied\n"},
                                    {"skipped": True}])
def test_results_that_are_not_a_registered_run_are_never_a_verdict(result):
    """A registered result whose rc is not an exit status (a string, a bool, a float) or that did not run."""
    try:
        out = mig_parted_assert(result)
    except AnsibleFilterError:
        return
    pytest.fail("read as %r: %r" % (out, result))


_STDERR_LINES = st.lists(st.sampled_from(
    [_debug(c) for c in CANNOT_READ_CAUSES + DIFFERS] + [ASSERT_FATAL, _debug("Parsing config file..."),
                                                         "\x1b[31mFATA\x1b[0m[0000] x\n", "\r\n", "panic: x\n"]),
    max_size=6)


@settings(max_examples=200, deadline=None)
@given(rc=st.sampled_from([0, 1, 2, None]), stdout=st.sampled_from(["", SUCCESS, "junk\n", SUCCESS + "junk\n"]),
       lines=_STDERR_LINES)
def test_not_applied_only_when_the_cause_right_before_the_failure_is_a_differing_layout(rc, stdout, lines):
    stderr = "".join(lines)
    state = _read(rc, stdout, stderr)
    if state == "not-applied":
        assert rc == 1
        cleaned = [ln for ln in stderr.splitlines() if ln.strip()]
        fatal_at = max(i for i, ln in enumerate(cleaned) if ln == ASSERT_FATAL.strip())
        before = cleaned[fatal_at - 1]
        assert any(_debug(c).strip() == before for c in DIFFERS), stderr
    elif state == "applied":
        assert rc == 0 and SUCCESS.strip() in stdout.splitlines()


# =====================================================================================================
# (1c) the stand-in nvidia-mig-parted follows mig-parted v0.15.0 where gpufleet relies on it
# =====================================================================================================
def _standin(state, *args, stdin=None):
    env = dict(os.environ, GPUFLEET_STANDIN_MIG_DIR=str(state))
    return subprocess.run([os.path.join(BIN, TOOL)] + list(args), input=stdin, env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def test_standin_an_applied_layout_asserts_applied_and_a_bar0_failure_after_it_is_an_error(tmp_path):
    out = mig_parted_config("all-1g.10gb", None)
    document = yaml.safe_dump(out["document"])
    path = tmp_path / "config.yaml"
    path.write_text(document)
    applied = _standin(tmp_path, "apply", "-f", str(path), "-c", out["name"])
    assert applied.returncode == 0
    after = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", out["name"], stdin=document)
    assert _read(after.returncode, after.stdout, after.stderr) == "applied"
    (tmp_path / "unreadable").write_text("")
    broken = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", out["name"], stdin=document)
    assert _read(broken.returncode, broken.stdout, broken.stderr).startswith("error")
    quiet = _standin(tmp_path, "assert", "-f", "-", "-c", out["name"], stdin=document)
    assert _read(quiet.returncode, quiet.stdout, quiet.stderr).startswith("error")


# =====================================================================================================
# (2) dcgmi diag -j
# =====================================================================================================
def _result(entity_id=0, status="Pass", **extra):
    out = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": entity_id, "status": status}
    out.update(extra)
    return out


def _test(name="memtest", results=None, summary="Pass"):
    out = {"name": name, "results": [_result(0), _result(1)] if results is None else results}
    if summary is not None:
        out["test_summary"] = {"status": summary} if isinstance(summary, str) else summary
    return out


def _document(tests=None, category="Stress", **top):
    body = {"test_categories": [{"category": category, "tests": [_test()] if tests is None else tests}]}
    out = {"DCGM Diagnostic": body, "metadata": {"version": "4.2.3", "Driver Version Detected": "580.82.09"}}
    out.update(top)
    return out


def _verdict(output, rc=0, **kwargs):
    try:
        parsed, error = dcgm.parse_diag(output), None
    except dcgm.DiagError as exc:
        parsed, error = None, str(exc)
    return dcgm.diag_checks(parsed, rc=rc, error=error, **kwargs).as_list()


def _run_status(checks):
    found = [c for c in checks if c["id"] == dcgm.RUN_CHECK]
    assert found, checks
    return "fail" if any(c["status"] == "fail" for c in found) else found[0]["status"]


def _assert_failing_run(checks, field=None):
    assert _run_status(checks) == "fail", checks
    assert not all(c["status"] == "pass" for c in checks)
    if field:
        messages = " ".join(c["message"] for c in checks if c["id"] == dcgm.RUN_CHECK and c["status"] == "fail")
        assert field in messages, messages
    json.dumps(checks, allow_nan=False)  # strict JSON


def test_the_baseline_document_passes():
    checks = _verdict(json.dumps(_document()))
    assert _run_status(checks) == "pass" and {c["status"] for c in checks} == {"pass"}


@pytest.mark.parametrize("summary, field", [
    ([{"status": "Pass"}], "test_summary"), ("Pass", None), (7, "test_summary"), ({"status": None}, "status"),
    ({"status": 1}, "status"), ({"status": ["Pass"]}, "status"),
])
def test_test_summary_of_the_wrong_type_fails_naming_the_field(summary, field):
    test = _test()
    test["test_summary"] = summary if summary != "Pass" else "Pass"
    _assert_failing_run(_verdict(json.dumps(_document(tests=[test]))), field or "test_summary")


def test_test_summary_null_is_not_a_pass_naming_the_field():
    test = _test()
    test["test_summary"] = None
    _assert_failing_run(_verdict(json.dumps(_document(tests=[test]))), "test_summary")


@pytest.mark.parametrize("status", ["PASSED", "Passed", "OK", "ok", "Pass\u200b", "\uff30ass", "Failed", "Error",
                                    "", "\u0000", "P\u0430ss"])
def test_an_unknown_status_fails_the_run(status):
    """docs: 'a JSON that ... holds an unknown status' fails burnin.dcgm.run; README: statuses seen are
    Pass, Fail, Warn, Skip, Not Run (4.x), PASS, FAIL, WARN, SKIPPED (3.x), anything else is refused."""
    document = _document(tests=[_test(results=[_result(0, status), _result(1, "Pass")])])
    _assert_failing_run(_verdict(json.dumps(document)))


@pytest.mark.parametrize("status", ["OK", "Passed"])
def test_an_unknown_summary_status_fails_the_run(status):
    _assert_failing_run(_verdict(json.dumps(_document(tests=[_test(summary=status)]))))


@pytest.mark.parametrize("text", [
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [{"name": "memtest", "results": '
    '[{"entity_group": "GPU", "entity_id": 0, "status": "Fail", "status": "Pass"}], "test_summary": '
    '{"status": "Pass"}}]}]}}',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [{"name": "memtest", "results": '
    '[{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}], "test_summary": {"status": "Fail", '
    '"status": "Pass"}}]}]}}',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [{"name": "memtest", "results": '
    '[{"entity_group": "GPU", "entity_id": 0, "status": "Fail"}], "results": [{"entity_group": "GPU", '
    '"entity_id": 0, "status": "Pass"}], "test_summary": {"status": "Pass"}}]}]}}',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [], "tests": [{"name": "memtest", '
    '"results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}], "test_summary": {"status": "Pass"}}]}'
    ']}}',
])
def test_a_duplicate_key_anywhere_fails_naming_it(text):
    _assert_failing_run(_verdict(text), "duplicate key")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
@pytest.mark.parametrize("where", ["entity_id", "error_id", "metadata"])
def test_non_finite_numbers_fail_the_run(token, where):
    if where == "entity_id":
        text = json.dumps(_document()).replace('"entity_id": 1', '"entity_id": %s' % token)
    elif where == "error_id":
        document = _document(tests=[_test(results=[_result(0, "Fail", warnings=[
            {"warning": "x", "error_id": 1234567, "error_category": 1, "error_severity": 1}]), _result(1)])])
        text = json.dumps(document).replace("1234567", token)
    else:
        text = json.dumps(_document()).replace('"version": "4.2.3"', '"version": %s' % token)
    checks = _verdict(text)
    assert _run_status(checks) == "fail", (token, where, checks)
    json.dumps(checks, allow_nan=False)


@pytest.mark.parametrize("entity_id", ["0", "gpu0", 1.0, 1.5, -1, None, [0], {"id": 0}])
def test_an_entity_id_that_is_not_a_gpu_index_fails_naming_it(entity_id):
    document = _document(tests=[_test(results=[_result(entity_id), _result(1)])])
    _assert_failing_run(_verdict(json.dumps(document)), "entity_id")


@pytest.mark.parametrize("gpu_ids", ["\u0663", "1_0", "0,,1", "0,1,", "-1", "0x1", "", "1.0", True, [0],
                                     1.5])
def test_3x_gpu_ids_that_are_not_gpu_ids_fail_the_run(gpu_ids):
    document = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": gpu_ids, "status": "PASS"}]}]}], "version": "3.3.1"}}
    checks = _verdict(json.dumps(document))
    assert _run_status(checks) == "fail", (gpu_ids, checks)


def test_a_document_larger_than_8_mib_fails_naming_the_size():
    document = _document(tests=[_test(results=[_result(0, "Pass", info=["x" * (9 * 1024 * 1024)]), _result(1)])])
    checks = _verdict(json.dumps(document))
    _assert_failing_run(checks)
    assert any("8388608" in c["message"] or "8 MiB" in c["message"] for c in checks), checks


@pytest.mark.parametrize("depth", [13, 20, 200])
def test_nesting_deeper_than_12_fails(depth):
    inner = {}
    for _ in range(depth):
        inner = {"a": inner}
    checks = _verdict(json.dumps(_document(metadata=inner)))
    _assert_failing_run(checks, "nested")


@pytest.mark.parametrize("depth", [13, 50])
def test_nesting_inside_a_warning_fails(depth):
    inner = "x"
    for _ in range(depth):
        inner = [inner]
    document = _document(tests=[_test(results=[_result(0, "Fail", warnings=[{"warning": "w", "error_id": 1,
                                                                               "details": inner}]), _result(1)])])
    _assert_failing_run(_verdict(json.dumps(document)))


@pytest.mark.parametrize("document", [
    _document(tests=[]),                                                  # an empty tests list
    {"DCGM Diagnostic": {"test_categories": []}, "metadata": {"version": "4.2.3"}},
    {"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": []},
                                             {"category": "Hardware", "tests": []}]}},
    _document(tests=[_test(results=[_result(0, "Skip"), _result(1, "Skip")], summary="Skip")]),
    _document(tests=[_test(results=[_result(0, "Not Run"), _result(1, "Not Run")], summary="Pass")]),
    _document(tests=[_test(results=[_result(0, "Skip"), _result(1, "Not Run")], summary="Pass")]),
    _document(tests=[_test(results=[], summary="Pass")]),                 # a test with no GPU result
    {"DCGM Diagnostic": {}, "metadata": {"version": "4.2.3"}},
    {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": 0, "status": "SKIPPED"}]}]}], "version": "3.3.1"}},
    {"DCGM GPU Diagnostic": {"version": "4.2.3"}},
])
def test_a_run_in_which_no_test_executed_is_not_a_pass(document):
    _assert_failing_run(_verdict(json.dumps(document)))


@pytest.mark.parametrize("case", ["two-documents", "failing-second", "trailing-error"])
def test_two_results_in_one_output_never_pass_over_a_failure(case):
    passing = _document()
    failing = _document(tests=[_test(results=[_result(0, "Fail", warnings=[
        {"warning": "Temperature 1000 of GPU 0 exceeded", "error_id": 42, "error_category": 9,
         "error_severity": 1}]), _result(1)], summary="Fail")])
    if case == "both-formats":
        combined = dict(passing)
        combined["DCGM GPU Diagnostic"] = {"test_categories": [{"category": "Stress", "tests": [
            {"name": "SM Stress", "results": [{"gpu_ids": 0, "status": "FAIL", "warnings": [
                {"warning": "Thermal violations", "error_id": 40}]}]}]}], "version": "3.3.1"}
        output = json.dumps(combined)
    elif case == "two-documents":
        output = json.dumps(passing) + "\n" + json.dumps(failing) + "\n"
    elif case == "failing-second":
        output = json.dumps(passing) + json.dumps(failing)
    else:
        output = json.dumps(passing) + "\nError: the diagnostic did not complete (GPU 0 lost)\n"
    checks = _verdict(output)
    assert not all(c["status"] == "pass" for c in checks), (case, checks)


@pytest.mark.parametrize("output", [
    "\x00" * 10,
    "{" * 100000,
    "[" * 100000,
    '{"DCGM Diagnostic": ' + '{"a": ' * 3000 + "1" + "}" * 3001,
    json.dumps(_document(tests=[_test(name="x" * 100000)])),
    json.dumps({"DCGM Diagnostic": None}),
    json.dumps({"DCGM Diagnostic": []}),
    json.dumps({"DCGM Diagnostic": "Pass"}),
    json.dumps({"DCGM Diagnostic": {"test_categories": None}}),
    json.dumps({"DCGM Diagnostic": {"test_categories": [None]}}),
    json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": None}]}}),
    json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [None]}]}}),
    json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": 7, "tests": [_test()]}]}}),
    json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [{"name": 7, "results": []}]}]}}),
])
def test_odd_outputs_are_a_verdict_never_a_crash_never_a_pass(output):
    checks = _verdict(output)
    assert checks and {c["status"] for c in checks} <= {"pass", "fail", "warn", "skip"}
    assert _run_status(checks) == "fail", checks
    json.dumps(checks, allow_nan=False)


@pytest.mark.parametrize("output", ["\ufeff" + json.dumps(_document()),
                                    json.dumps(_document()).replace("memtest", "mem\udcfftest")])
def test_a_bom_or_a_lone_surrogate_is_a_verdict_never_a_crash(output):
    checks = _verdict(output)
    assert checks and {c["status"] for c in checks} <= {"pass", "fail", "warn", "skip"}
    json.dumps(checks, allow_nan=False)


def test_runtime_error_next_to_passing_tests_fails():
    _assert_failing_run(_verdict(json.dumps(_document(**{}) | {"DCGM Diagnostic": dict(
        _document()["DCGM Diagnostic"], runtime_error="Error while running the plugin: GPU 0 is lost")})))


def test_a_fail_on_a_non_gpu_entity_is_not_lost():
    document = _document(tests=[_test(results=[
        {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail",
         "warnings": [{"warning": "CPU fault", "error_id": 1}]}, _result(0), _result(1)])])
    checks = _verdict(json.dumps(document))
    assert any(c["status"] == "fail" for c in checks), checks


def test_a_fail_without_warnings_still_fails():
    document = _document(tests=[_test(results=[_result(0, "Fail"), _result(1)], summary="Fail")])
    checks = _verdict(json.dumps(document), rc=226)
    assert any(c["status"] == "fail" and c["id"] == dcgm.TEST_CHECK for c in checks), checks


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(value=_JSON, where=st.sampled_from(["status", "entity_id", "warnings", "info", "results", "test_summary",
                                           "tests", "name", "category", "test_categories", "DCGM Diagnostic"]))
def test_any_value_in_any_field_is_a_verdict_never_a_crash(value, where):
    document = _document()
    body = document["DCGM Diagnostic"]
    category = body["test_categories"][0]
    test = category["tests"][0]
    result = test["results"][0]
    for holder in (result, test, category, body, document):
        if where in holder:
            holder[where] = value
            break
    else:
        result[where] = value
    checks = _verdict(json.dumps(document))
    assert {c["status"] for c in checks} <= {"pass", "fail", "warn", "skip"}
    json.dumps(checks, allow_nan=False)
    if value != document and _run_status(checks) == "pass":
        # a pass must still mean: a known status on a GPU index for every result
        parsed = dcgm.parse_diag(json.dumps(document))
        assert parsed["tests"], checks


# =====================================================================================================
# (3) XID policy through gpu.xid (fake NVML, DGX H100 fixture)
# =====================================================================================================
NOW = calendar.timegm((2025, 11, 20, 12, 0, 0))
XID_DEFAULT = {48: "fail", 63: "warn", 64: "fail", 74: "fail", 79: "fail", 94: "warn", 95: "fail", 119: "fail",
               154: "warn"}
XID_TEXT = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
    63: "Row Remapper: New row (0x00000000000b8b21) marked for remapping, reset gpu to activate.",
    64: "Row Remapper Error: Failed to mark row (0x00000000000b8b21) for remapping.",
    74: "NVLink: fatal error detected on link 6(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}
LINE_FORMATS = {
    "dmesg-iso": "2025-11-20T11:05:42,123456+00:00 NVRM: Xid (PCI:0000:18:00): {xid}, pid=1234, name=python3, {text}",
    "journal-short-iso": "2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): {xid}, pid=1234, name=python3, {text}",
    "journal-offset": "2025-11-20T13:05:42.123456+02:00 dgx kernel: NVRM: Xid (PCI:0000:18:00): {xid}, "
                      "pid='<unknown>', name=<unknown>, {text}",
    "raw-dmesg": "[183921.441270] NVRM: Xid (PCI:0000:18:00): {xid}, pid=1234, name=python3, {text}",
    "old-driver-no-pci": "[ 1843.308145] NVRM: Xid (0000:18:00): {xid}, {text}",
    "rfc5424": "<3>1 2025-11-20T11:05:42.123Z dgx kernel - - - NVRM: Xid (PCI:0000:18:00): {xid}, pid=1, name=x, {text}",
    "no-pid": "2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): {xid}, {text}",
    "long-domain": "2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:00000000:18:00): {xid}, pid=1, name=x, {text}",
    "decode": "kern  :err   : 2025-11-20T11:05:42,123456+00:00 NVRM: Xid (PCI:0000:18:00): {xid}, pid=1, name=x, {text}",
    "nonfatal-word": "2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): {xid}, pid=1, name=x, Nonfatal {text}",
}


def _gpu_xid(lines, options=None):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import FAMILY, check_gpu_health
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
    from nvml_scenarios import fake_with, node

    reader = SysfsReader(node("dgx-h100"))
    results, _gpus, _info = check_gpu_health(gather_gpu_facts(reader), NvmlAdapter(fake_with("h100-healthy")),
                                             FAMILY.defaults(options or {}), lines, now=NOW, reader=reader)
    return [c for c in results if c["id"] == "gpu.xid"], results


def _worst(checks):
    order = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
    return max((c["status"] for c in checks), key=order.get)


@pytest.mark.parametrize("fmt", sorted(LINE_FORMATS))
@pytest.mark.parametrize("xid", sorted(XID_DEFAULT))
def test_every_line_format_gives_the_catalog_status(utc, fmt, xid):
    line = LINE_FORMATS[fmt].format(xid=xid, text=XID_TEXT[xid])
    checks, results = _gpu_xid([line])
    assert _worst(checks) == XID_DEFAULT[xid], (fmt, xid, checks)
    gpu0 = [c for c in checks if c["target"] == "gpu0"]
    assert gpu0 and gpu0[0]["status"] == XID_DEFAULT[xid], (fmt, xid, checks)


@pytest.mark.parametrize("xid", [63, 64])
@pytest.mark.parametrize("others", [[45], [43, 45], [92], [14, 45, 92], [63, 45]])
def test_a_row_remap_xid_is_never_a_pass_next_to_ignored_xids(utc, xid, others):
    lines = ["2025-11-20T11:05:%02d+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): %d, pid=1, name=x, %s"
             % (i, code, XID_TEXT.get(code, "x")) for i, code in enumerate([xid] + others)]
    checks, results = _gpu_xid(lines)
    gpu0 = [c for c in checks if c["target"] == "gpu0"]
    assert gpu0 and gpu0[0]["status"] == XID_DEFAULT[xid], checks
    assert not results.healthy or xid == 63


@pytest.mark.parametrize("options", [{"xid_fatal": [79]}, {"xid_fatal": []}, {"xid_ignore": [45, 92]},
                                     {"xid_window_hours": 48}])
def test_63_is_not_a_pass_unless_listed_in_xid_ignore(utc, options):
    line = "2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): 63, pid=1, name=x, " + XID_TEXT[63]
    checks, _ = _gpu_xid([line], options)
    assert [c["status"] for c in checks if c["target"] == "gpu0"] in (["warn"], ["fail"]), checks


def test_volta_style_63_retired_page_is_warn(utc):
    line = ("2025-11-20T11:05:42+0000 dgx kernel: NVRM: Xid (PCI:0000:18:00): 63, Dynamic Page Retirement: "
            "New page retired, reboot to activate (0x0000000000123456).")
    checks, _ = _gpu_xid([line])
    assert [c["status"] for c in checks if c["target"] == "gpu0"] == ["warn"], checks


def test_gb200_style_xid_on_a_gpu_nvml_does_not_list_still_counts(utc):
    line = "2025-11-20T11:05:42+0000 gb200 kernel: NVRM: Xid (PCI:0008:01:00): 64, pid=1, name=x, " + XID_TEXT[64]
    checks, results = _gpu_xid([line])
    assert _worst(checks) == "fail" and not results.healthy, checks


# =====================================================================================================
# (4) the transcript corpus
# =====================================================================================================
def _write(tmp_path, doc, where=("dcgmi", "1", "case.yml")):
    path = tmp_path.joinpath(*where)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return corpus.errors(str(tmp_path))


BASE = {"tool": "dcgmi", "version": "1", "argv": ["dcgmi", "diag"], "rc": 0, "stdout": "", "stderr": "",
        "source": "NVIDIA/DCGM issue #55", "notes": "n"}


@pytest.mark.parametrize("change", [{"rc": 256}, {"rc": -1}, {"rc": True}, {"rc": "0"}, {"version": 4.2},
                                    {"source": "   \n"}, {"argv": []}, {"argv": ["dcgmi", 3]},
                                    {"argv": ["/usr/bin/nvidia-smi"]}, {"stdout": None}, {"notes": None}])
def test_a_bad_transcript_is_refused(tmp_path, change):
    doc = dict(BASE)
    doc.update(change)
    problems = _write(tmp_path, doc)
    assert len(problems) == 1, (change, problems)


@pytest.mark.parametrize("case", ["../nvidia-smi/unstated/gpu-reset-success", "nvidia-smi/unstated/gpu-reset-success",
                                  "gpu-reset-success", "dcgmi/4.2.3/../../nvidia-smi/unstated/gpu-reset-success",
                                  "/etc/passwd"])
def test_the_dcgmi_standin_answers_only_with_a_dcgmi_transcript(case):
    result = subprocess.run([os.path.join(BIN, "dcgmi"), "diag", "-r", "2", "-j"], capture_output=True, text=True,
                            env=dict(os.environ, GPUFLEET_REPLAY_CASE=case), timeout=30, check=False)
    if result.returncode == 2 and result.stdout == "":
        assert result.stderr.startswith("stand-in dcgmi: ")
        return
    assert corpus.unknown_lines("dcgmi", result.stdout) == [] and corpus.unknown_lines("dcgmi", result.stderr) == []


@pytest.mark.parametrize("config", ["a\\b", "a b", "\u00e9t\u00e9"])
def test_the_mig_parted_standin_prints_only_lines_a_transcript_has(tmp_path, config):
    document = yaml.safe_dump({"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}})
    result = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", config, stdin=document)
    if result.returncode == 2:
        assert result.stderr.startswith("stand-in nvidia-mig-parted: ")
        return
    assert corpus.unknown_lines(TOOL, result.stdout) == [], result.stdout
    assert corpus.unknown_lines(TOOL, result.stderr) == [], result.stderr
    assert _read(result.returncode, result.stdout, result.stderr).startswith("error")


# =====================================================================================================
# Red-team findings F1-F10 (gpu_tools), fixed: each case failed before its fix.
# =====================================================================================================
# -- F1: only the statuses DCGM writes (dcgmi/Diag.cpp HelperDisplayDiagResult; 3.x nvvs Output.cpp) -----
@pytest.mark.parametrize("status", ["pass", "Pass ", " Pass", "SKIP", "Skipped", "NOT RUN", "not run", "NotRun",
                                    "warn", "Warning", "fail", "SKIPPED", "PASS", "WARN"])
def test_f1_a_status_dcgm_4x_never_writes_fails_the_run(status):
    document = _document(tests=[_test(results=[_result(0, status), _result(1, "Pass")])])
    _assert_failing_run(_verdict(json.dumps(document)), "unknown status")


@pytest.mark.parametrize("status", ["pass", "Skipped", "PASS"])
def test_f1_a_summary_status_dcgm_4x_never_writes_fails_the_run(status):
    _assert_failing_run(_verdict(json.dumps(_document(tests=[_test(summary=status)]))))


@pytest.mark.parametrize("status", ["SKIPPED", "Not Run", "Warn", "pass", "Skipped", "PASS "])
def test_f1_a_status_dcgm_3x_never_writes_fails_the_run(status):
    document = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": 0, "status": status}, {"gpu_ids": 1, "status": "PASS"}]}]}],
        "version": "3.3.1"}}
    _assert_failing_run(_verdict(json.dumps(document)), "unknown status")


@pytest.mark.parametrize("status, expected", [("Pass", "pass"), ("Fail", "fail"), ("Warn", "warn"),
                                              ("Skip", "skip"), ("Not Run", "skip")])
def test_f1_the_4x_statuses_are_read(status, expected):
    results = dcgm.parse_diag(json.dumps(_document(tests=[_test(results=[_result(0, status)])])))
    assert results["tests"][0]["results"][0]["status"] == expected


@pytest.mark.parametrize("status, expected", [("Pass", "pass"), ("Fail", "fail"), ("Skip", "skip"),
                                              ("PASS", "pass"), ("FAIL", "fail"), ("WARN", "warn"),
                                              ("SKIP", "skip")])
def test_f1_the_3x_statuses_are_read(status, expected):
    document = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": 0, "status": status}]}]}], "version": "3.3.1"}}
    assert dcgm.parse_diag(json.dumps(document))["tests"][0]["results"][0]["status"] == expected


@settings(max_examples=200, deadline=None)
@given(status=st.text(max_size=12))
def test_f1_any_status_is_a_verdict_and_only_dcgm_s_spellings_pass(status):
    checks = _verdict(json.dumps(_document(tests=[_test(results=[_result(0, status), _result(1)])])))
    if status not in dcgm.STATUSES_4X:
        _assert_failing_run(checks)


# -- F2: a 3.x result whose gpu_ids is null -----------------------------------------------------------
def test_f2_3x_gpu_ids_null_fails_the_run_naming_the_field():
    document = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": None, "status": "PASS"}]}]}], "version": "3.3.1"}}
    _assert_failing_run(_verdict(json.dumps(document)), "gpu_ids is null")


def test_f2_3x_software_result_without_gpu_ids_still_covers_the_node():
    """dcgmi 3.x writes the software (level 1) results without gpu_ids (dcgmi/Diag.cpp of 3.3.1)."""
    document = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "Denylist", "results": [{"status": "Pass"}]}]}], "version": "3.3.1"}}
    parsed = dcgm.parse_diag(json.dumps(document))
    assert parsed["tests"][0]["results"][0]["targets"] == ["node"]


# -- F3: a Pass carrying DCGM warnings is reported as a warn with the text -------------------------------
def test_f3_a_pass_with_a_warning_is_a_warn_with_the_text():
    warning = {"warning": "Persistence Mode: Persistence mode for GPU 0 is disabled.", "error_id": 29,
               "error_category": 8, "error_severity": 5}
    document = _document(tests=[_test(results=[_result(0, "Pass", warnings=[warning]), _result(1)])])
    checks = _verdict(json.dumps(document))
    warned = [c for c in checks if c["id"] == dcgm.TEST_CHECK and c["status"] == "warn"]
    assert len(warned) == 1 and warned[0]["target"] == "gpu0/memtest", checks
    assert "Persistence mode for GPU 0 is disabled" in warned[0]["message"], warned
    assert warned[0]["observed"]["error_ids"] == [29]
    assert _run_status(checks) == "pass", checks  # not a failure of the run: fails only with fail_on warn
    passed = [c for c in checks if c["id"] == dcgm.TEST_CHECK and c["status"] == "pass"]
    assert passed and "gpu0" not in passed[0]["message"].replace("gpu0/", ""), passed


# -- F4: both result objects in one document ---------------------------------------------------------
def test_f4_a_document_with_both_result_objects_fails_the_run():
    combined = _document()
    combined["DCGM GPU Diagnostic"] = {"test_categories": [{"category": "Stress", "tests": [
        {"name": "SM Stress", "results": [{"gpu_ids": 0, "status": "FAIL", "warnings": [
            {"warning": "Thermal violations", "error_id": 40}]}]}]}], "version": "3.3.1"}
    _assert_failing_run(_verdict(json.dumps(combined)), "both")


# -- F5/F6: the corpus refuses sources nobody can follow and versions filed elsewhere ------------------
def test_f5_every_transcript_names_a_public_source():
    weak = {case: doc["source"][:90] for case, doc in corpus.transcripts().items()
            if corpus.source_problem(doc["source"])}
    assert weak == {}, weak


@pytest.mark.parametrize("source", ["the Glimmer project's tests", "captures in public write-ups",
                                    "NVIDIA/DCGM testing/python3 diag tests",
                                    "owner/repo@abc1234:x.go and a capture (search index file id 1)"])
def test_f5_a_source_of_no_documented_kind_is_refused(source):
    assert corpus.source_problem(source)


@pytest.mark.parametrize("source", ["https://github.com/NVIDIA/DCGM/issues/55", "NVIDIA/mig-parted issue #5",
                                    "NVIDIA/mig-parted@bd7160f (v0.15.0):cmd/nvidia-mig-parted/assert/assert.go",
                                    "kubernetes/kubernetes PR #123372", "NVIDIA/DCGM#55"])
def test_f5_the_documented_kinds_are_accepted(source):
    assert corpus.source_problem(source) is None


def test_f6_a_transcript_outside_its_version_directory_is_refused(tmp_path):
    doc = {"tool": "dcgmi", "version": "4.2.3", "argv": ["dcgmi", "diag"], "rc": 0, "stdout": "", "stderr": "",
           "source": "NVIDIA/DCGM issue #55", "notes": "n"}
    path = tmp_path / "dcgmi" / "3.1.0" / "case.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(doc))
    problems = corpus.errors(str(tmp_path))
    assert len(problems) == 1 and "is not its directory" in problems[0], problems


@pytest.mark.parametrize("version, directory, ok", [
    ("v1.31.4", "1.31", True), ("26.11", "26.11", True), ("4.x", "4.x", True), ("0.15.0", "0.15.0", True),
    ("v1.310.4", "1.31", False), ("4.2.3", "3.1.0", False), ("4.2.3", "4.2", True), ("v1.36.1", "1.31", False)])
def test_f6_version_and_directory(version, directory, ok):
    assert corpus.version_matches_directory(version, directory) is ok


def test_f6_the_kubeadm_version_short_transcripts_print_their_own_release():
    for case_id, doc in corpus.transcripts("kubeadm").items():
        if doc["case"] == "version-short":
            assert doc["stdout"].strip() == doc["version"], case_id
            assert "v1.36.1" not in doc["source"] or doc["version"] == "v1.36.1", (case_id, doc["source"])


# -- F7: the stand-in escapes a config name as logrus does, or refuses it ------------------------------
@pytest.mark.parametrize("config, escaped", [('a"b', 'a\\"b'), ("x\nSelected MIG configuration currently applied",
                                                                 "x\\nSelected MIG configuration currently applied"),
                                             ("tab\there", "tab\\there"), ("back\\slash", "back\\\\slash"),
                                             ("bell\x07", "bell\\a"), ("esc\x1b", "esc\\x1b")])
def test_f7_the_standin_quotes_a_config_name_as_logrus_does(tmp_path, config, escaped):
    document = yaml.safe_dump({"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}})
    result = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", config, stdin=document)
    assert result.returncode == 1, result.stderr
    assert corpus.unknown_lines(TOOL, result.stdout) == [] and corpus.unknown_lines(TOOL, result.stderr) == []
    assert result.stderr.count("\n") == 1, result.stderr
    assert ('selected mig-config not present: %s"' % escaped) in result.stderr, result.stderr


@pytest.mark.parametrize("config", ["caf\u00e9", "\u200b", "x\u2028y"])
def test_f7_a_name_it_cannot_print_faithfully_is_refused(tmp_path, config):
    document = yaml.safe_dump({"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}})
    result = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", config, stdin=document)
    assert result.returncode == 2 and result.stderr.startswith("stand-in nvidia-mig-parted: "), result


# -- F8: layouts mig-parted applies but never asserts ---------------------------------------------------
@pytest.mark.parametrize("layout", [
    [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    [{"devices": [0, 1, 2, 3], "mig-enabled": False}],
    [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7, "2g.20gb": 0}}],
])
def test_f8_standin_after_apply_follows_mig_parted(tmp_path, layout):
    try:
        out = mig_parted_config(layout, None)
    except AnsibleFilterError:
        return  # refused before any drain (the zero count)
    document = yaml.safe_dump(out["document"])
    path = tmp_path / "config.yaml"
    path.write_text(document)
    assert _standin(tmp_path, "apply", "-f", str(path), "-c", out["name"]).returncode == 0
    after = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", out["name"], stdin=document)
    assert _read(after.returncode, after.stdout, after.stderr) == "not-applied", after.stderr
    assert "Not all GPUs match the specified config" in after.stderr


def test_f8_a_zero_count_is_refused_naming_the_variable_and_the_profile():
    with pytest.raises(AnsibleFilterError, match=r"gpufleet_mig_layout\[0\]\.mig-devices\[2g\.20gb\] must be a count"):
        mig_parted_config([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7, "2g.20gb": 0}}])


def test_f8_the_standin_never_asserts_a_zero_count_written_by_hand(tmp_path):
    """mig_config.go MigConfig.Equals: a 0-count profile is a key the live config never has."""
    document = yaml.safe_dump({"version": "v1", "mig-configs": {"z": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7, "2g.20gb": 0}}]}})
    path = tmp_path / "config.yaml"
    path.write_text(document)
    assert _standin(tmp_path, "apply", "-f", str(path), "-c", "z").returncode == 0
    live = json.loads((tmp_path / "live.json").read_text())
    assert live[0] == {"mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
    after = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", "z", stdin=document)
    assert _read(after.returncode, after.stdout, after.stderr) == "not-applied"


@pytest.mark.parametrize("layout, count, uncovered", [
    ([{"devices": "all", "mig-enabled": False}], 8, []),
    ([{"devices": [0, 1], "mig-enabled": False}], 4, [2, 3]),
    ([{"devices": [0, 1], "mig-enabled": False}, {"devices": [3, 2], "mig-enabled": False}], 4, []),
    ([{"devices": [0, 9], "mig-enabled": False}], 2, [1]),
    ([{"devices": [0, 1], "mig-enabled": False}], 0, []),
])
def test_f8_the_gpus_a_layout_leaves_out(layout, count, uncovered):
    assert uncovered_gpus(layout, count) == uncovered
    out = mig_parted_config(layout, None)
    assert mig_layout_uncovered(out, count) == uncovered


@pytest.mark.parametrize("count", [-1, True, "8", None, 1.0])
def test_f8_a_gpu_count_that_is_not_a_count_fails(count):
    with pytest.raises(AnsibleFilterError, match="mig_layout_uncovered"):
        mig_layout_uncovered(mig_parted_config("all-1g.10gb", None), count)


@settings(max_examples=200, deadline=None)
@given(devices=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True), min_size=1, max_size=3),
       count=st.integers(0, 10))
def test_f8_uncovered_is_exactly_the_indexes_no_entry_names(devices, count):
    seen, layout = set(), []
    for listed in devices:
        entry = [d for d in listed if d not in seen]
        if entry:
            seen.update(entry)
            layout.append({"devices": entry, "mig-enabled": False})
    if not layout:
        return
    expected = [i for i in range(count) if i not in seen]
    assert uncovered_gpus(layout, count) == expected


def test_f8_the_role_refuses_an_uncovered_layout_before_asking_mig_parted():
    tasks = yaml.safe_load(open(os.path.join(ROLE, "tasks", "status.yml")))
    names = [t["name"] for t in tasks]
    refuse = names.index("Refuse a layout that does not name every GPU of the node")
    assert names.index("Count the GPUs of the node (sysfs, as mig-parted does without the driver)") < refuse
    assert refuse < names.index("Ask nvidia-mig-parted whether the layout is applied")
    message = tasks[refuse]["ansible.builtin.assert"]["fail_msg"]
    assert "gpufleet_mig_layout" in message and "__gpu_mig_uncovered | join" in message


# -- F9: documents mig-parted refuses to parse -----------------------------------------------------------
@pytest.mark.parametrize("layout, words", [
    ([{"devices": "all", "mig-enabled": True}], "mig-enabled true without mig-devices"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}], r"mig-devices\[1g\.10gb\]"),
])
def test_f9_a_layout_mig_parted_refuses_to_parse_is_refused_naming_the_variable(layout, words):
    with pytest.raises(AnsibleFilterError, match="gpufleet_mig_layout.*" + words):
        mig_parted_config(layout, None)


def test_f9_mig_on_without_instances_is_still_written_as_mig_parted_reads_it():
    out = mig_parted_config([{"devices": "all", "mig-enabled": True, "mig-devices": {}}], None)
    assert out["document"]["mig-configs"]["gpufleet-explicit"][0]["mig-devices"] == {}


@pytest.mark.parametrize("entry", [{"devices": "all", "mig-enabled": True},
                                   {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}},
                                   {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}])
def test_f9_the_standin_refuses_a_file_mig_parted_refuses(tmp_path, entry):
    document = yaml.safe_dump({"version": "v1", "mig-configs": {"c": [entry]}})
    result = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", "c", stdin=document)
    assert result.returncode == 2 and "mig-parted refuses the config file" in result.stderr, result


# -- F10: the mode-only line is not "applied"; the role clears MIG_PARTED_MODE_CHANGE_ONLY ---------------
def test_f10_mode_only_success_is_not_the_configuration_applied():
    doc = corpus.find(TOOL, "assert-mode-only-applied")
    state = _read(doc["rc"], doc["stdout"], doc["stderr"])
    assert state.startswith("error") and "mode only" in state, state


@pytest.mark.parametrize("value, mode_only", [("true", True), ("1", True), ("", False), ("false", False)])
def test_f10_the_standin_reads_mig_parted_mode_change_only_as_mig_parted_does(tmp_path, value, mode_only):
    out = mig_parted_config("all-1g.10gb", None)
    document = yaml.safe_dump(out["document"])
    (tmp_path / "live.json").write_text(json.dumps([{"mig-enabled": True, "mig-devices": {}}] * 2))
    env = dict(os.environ, GPUFLEET_STANDIN_MIG_DIR=str(tmp_path), MIG_PARTED_MODE_CHANGE_ONLY=value)
    result = subprocess.run([os.path.join(BIN, TOOL), "-d", "assert", "-f", "-", "-c", out["name"]], input=document,
                            env=env, capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode == 0) is mode_only, result
    assert _read(result.returncode, result.stdout, result.stderr) != "applied"


def test_f10_the_role_runs_mig_parted_with_mode_change_only_empty():
    variables = yaml.safe_load(open(os.path.join(ROLE, "vars", "main.yml")))
    assert "'MIG_PARTED_MODE_CHANGE_ONLY': ''" in variables["__gpu_mig_parted_environment"]
    for name in ("status.yml", "apply.yml"):
        text = open(os.path.join(ROLE, "tasks", name)).read()
        blocks = text.split("\n- name: ")
        for block in blocks:
            if "gpu_mig_command" in block and "environment:" in block:
                assert "__gpu_mig_parted_environment" in block, block
