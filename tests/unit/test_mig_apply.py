"""The mig-parted file gpufleet writes (module_utils/gpu/mig.py parted_config), the reading of
``nvidia-mig-parted assert`` (assert_state), their filters, and the stand-in nvidia-mig-parted
(tests/standins/nvidia_mig_parted.py) against the file the filter renders (a real subprocess)."""

import json
import os
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from transcripts import corpus

from ansible_collections.gpufleet.cluster.plugins.filter.mig import mig_parted_assert, mig_parted_config
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import (
    ASSERT_DIFFERS,
    ASSERT_MISMATCH,
    BUILTIN_MIG_CONFIGS,
    EXPLICIT_CONFIG_NAME,
    assert_state,
    logrus_lines,
    parted_config,
)

STANDIN = os.path.join(REPO, "tests", "standins", "bin", "nvidia-mig-parted")
TOOL = "nvidia-mig-parted"


def transcript(case):
    """(rc, stdout, stderr) of a transcript of tests/transcripts/nvidia-mig-parted."""
    doc = corpus.find(TOOL, case)
    return doc["rc"], doc["stdout"], doc["stderr"]


def test_a_config_name_keeps_its_name_and_only_its_entries():
    name, document = parted_config("all-1g.10gb", None)
    assert name == "all-1g.10gb"
    assert document == {"version": "v1", "mig-configs": {
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}


def test_an_explicit_layout_gets_the_explicit_name():
    layout = [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
              {"devices": [2], "mig-enabled": False}]
    name, document = parted_config(layout, None)
    assert name == EXPLICIT_CONFIG_NAME
    assert document["mig-configs"][name] == layout


def test_a_site_document_is_used_for_names():
    site = {"version": "v1", "mig-configs": {"half": [{"devices": [0, 1, 2, 3], "mig-enabled": True,
                                                         "mig-devices": {"1g.10gb": 7}},
                                                        {"devices": [4, 5, 6, 7], "mig-enabled": False}]}}
    name, document = parted_config("half", site)
    assert document["mig-configs"] == {"half": site["mig-configs"]["half"]}
    assert name == "half"


@pytest.mark.parametrize("layout, configs, message", [
    (None, None, "gpufleet_mig_layout is not set"),
    ("", None, "gpufleet_mig_layout is not set"),
    ("all-9g.99gb", None, "no config 'all-9g.99gb' in the built-in set"),
    ("x", {"mig-configs": "no"}, "gpufleet_mig_configs must be a mig-parted configuration"),
    ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 1}}], None, "not a GPU-instance profile"),
])
def test_bad_layouts_are_named(layout, configs, message):
    with pytest.raises(ValueError, match=message):
        parted_config(layout, configs)
    with pytest.raises(AnsibleFilterError, match="mig_parted_config: .*" + message):
        mig_parted_config(layout, configs)


@pytest.mark.parametrize("case, state", [
    ("assert-applied", "applied"),
    ("assert-debug-applied", "applied"),
    ("assert-debug-mode-differs", "not-applied"),
    ("assert-debug-config-differs", "not-applied"),
])
def test_assert_states(case, state):
    rc, stdout, stderr = transcript(case)
    assert assert_state(rc, stdout, stderr) == state
    assert mig_parted_assert({"rc": rc, "stdout": stdout, "stderr": stderr}) == {
        "state": state, "applied": state == "applied"}


@pytest.mark.parametrize("case, message", [
    # mig-parted issue #5: the GPU could not be read, the same "Assertion failure" as a layout that differs
    ("assert-debug-cannot-read-bar0", "could not read the GPUs: Error checking MIG capable: error opening bar0 MMIO"),
    ("assert-debug-bar0-mmap-tty", "could not read the GPUs: Error checking MIG capable: error opening bar0 MMIO"),
    ("assert-debug-nvml-not-loaded", "could not read the GPUs: Error initializing NVML: Driver Not Loaded"),
    # without -d the cause is not printed: it cannot be told, so it is not "not applied"
    ("assert-not-applied", "without a cause: run it with -d"),
    ("assert-config-not-present", "exited 1: Error selecting MIG config: selected mig-config not present: other"),
    ("assert-read-error", "exited 1: Error parsing config file: read error: open"),
    ("assert-valid-config", "exited 0 without 'Selected MIG configuration currently applied'"),
    # red-team F10: --mode-only (or MIG_PARTED_MODE_CHANGE_ONLY) compares the MIG mode only
    ("assert-mode-only-applied", "checked the MIG mode only"),
])
def test_cannot_read_is_an_error_never_not_applied(case, message):
    rc, stdout, stderr = transcript(case)
    with pytest.raises(ValueError, match=message):
        assert_state(rc, stdout, stderr)
    with pytest.raises(AnsibleFilterError, match="could not be read: .*" + message):
        mig_parted_assert({"rc": rc, "stdout": stdout, "stderr": stderr})


@pytest.mark.parametrize("result, message", [
    ({"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-mig-parted'"}, "exited 2: .*No such file"),
    ({"stdout": "Selected MIG configuration currently applied"}, "exited None"),  # never ran: no rc
    ({"rc": 0, "stdout": ""}, "exited 0 without"),  # success without the success line: not seen to pass
])
def test_anything_else_is_an_error_never_applied(result, message):
    with pytest.raises(AnsibleFilterError, match="could not be read: nvidia-mig-parted assert " + message):
        mig_parted_assert(result)


_LINES = st.lists(st.sampled_from(sorted(set(
    line + "\n" for doc in corpus.transcripts(TOOL).values() for line in doc["stderr"].splitlines())))
    | st.text(max_size=40).map(lambda t: t + "\n"), max_size=8)


@settings(max_examples=200, deadline=None)
@given(rc=st.sampled_from([0, 1, 2, 255, None]), stdout=st.sampled_from(
    ["", "Selected MIG configuration currently applied\n", "junk\n"]), lines=_LINES)
def test_assert_reading_is_a_verdict_or_a_clear_error(rc, stdout, lines):
    """Any mix of mig-parted's lines: applied only with exit 0 and the success line; not-applied only
    with exit 1, the assertion failure, and a differing layout as the last debug cause; else an error."""
    stderr = "".join(lines)
    try:
        state = assert_state(rc, stdout, stderr)
    except ValueError as exc:
        assert str(exc).startswith("nvidia-mig-parted assert")
        return
    if state == "applied":
        assert rc == 0 and "Selected MIG configuration currently applied" in stdout
    else:
        assert state == "not-applied" and rc == 1
        debug = [m for level, m in logrus_lines(stderr) if level == "debug"]
        assert debug[-1] in ASSERT_DIFFERS
        assert [m for level, m in logrus_lines(stderr) if level == "fatal"][-1].lower() == ASSERT_MISMATCH


def test_the_filter_needs_a_registered_result():
    with pytest.raises(AnsibleFilterError, match="expected the registered result"):
        mig_parted_assert("applied")


def _standin(state, *args, stdin=None):
    env = dict(os.environ, GPUFLEET_STANDIN_MIG_DIR=str(state))
    return subprocess.run([STANDIN] + list(args), input=stdin, env=env, capture_output=True, text=True,
                          timeout=30, check=False)


def test_standin_assert_apply_assert_on_the_rendered_file(tmp_path):
    name, document = parted_config("all-balanced-80gb", BUILTIN_MIG_CONFIGS)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    before = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", name, stdin=yaml.safe_dump(document))
    assert assert_state(before.returncode, before.stdout, before.stderr) == "not-applied", before
    assert "Current mode different than mode being asserted" in before.stderr
    applied = _standin(tmp_path, "apply", "-f", str(path), "-c", name)
    assert applied.returncode == 0 and applied.stdout == "MIG configuration applied successfully\n"
    after = _standin(tmp_path, "-d", "assert", "-f", str(path), "-c", name)
    assert assert_state(after.returncode, after.stdout, after.stderr) == "applied"
    live = json.loads((tmp_path / "live.json").read_text())
    assert live[7] == {"mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
    calls = [json.loads(line)[1:3] for line in (tmp_path / "calls").read_text().splitlines()]
    assert calls == [["-d", "assert"], ["apply", "-f"], ["-d", "assert"]]
    # another set of GPU instances with MIG on: the config differs, not the mode
    other_name, other = parted_config("all-1g.10gb", BUILTIN_MIG_CONFIGS)
    differs = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", other_name, stdin=yaml.safe_dump(other))
    assert "Not all GPUs match the specified config" in differs.stderr
    assert assert_state(differs.returncode, differs.stdout, differs.stderr) == "not-applied"


def test_standin_without_d_prints_no_cause_and_is_not_read_as_not_applied(tmp_path):
    name, document = parted_config("all-1g.10gb", None)
    result = _standin(tmp_path, "assert", "-f", "-", "-c", name, stdin=yaml.safe_dump(document))
    assert result.returncode == 1 and "level=debug" not in result.stderr
    with pytest.raises(ValueError, match="without a cause"):
        assert_state(result.returncode, result.stdout, result.stderr)


def test_standin_gpus_that_cannot_be_read_fail_the_node(tmp_path):
    name, document = parted_config("all-1g.10gb", None)
    (tmp_path / "unreadable").write_text("")
    result = _standin(tmp_path, "-d", "assert", "-f", "-", "-c", name, stdin=yaml.safe_dump(document))
    assert result.returncode == 1 and "Assertion failure" in result.stderr
    with pytest.raises(ValueError, match="could not read the GPUs: Error checking MIG capable: error opening bar0"):
        assert_state(result.returncode, result.stdout, result.stderr)


def test_standin_failed_apply_changes_nothing(tmp_path):
    _name, document = parted_config("all-1g.10gb", None)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    (tmp_path / "apply_fails").write_text("apply-bar0-endianness")
    failed = _standin(tmp_path, "apply", "-f", str(path), "-c", "all-1g.10gb")
    assert failed.returncode == 1
    assert 'msg="Error applying MIG configuration with hooks: error checking MIG capable: error opening bar0' \
        in failed.stderr
    assert not (tmp_path / "live.json").exists()
    with pytest.raises(ValueError, match="selected mig-config not present: other"):
        result = _standin(tmp_path, "assert", "-f", str(path), "-c", "other")
        assert_state(result.returncode, result.stdout, result.stderr)
    missing = _standin(tmp_path, "assert", "-f", str(tmp_path / "missing.yaml"), "-c", "x")
    assert "read error: open %s: no such file or directory" % (tmp_path / "missing.yaml") in missing.stderr
