"""The mig-parted file gpufleet writes (module_utils/mig.py parted_config), the reading of
``nvidia-mig-parted assert`` (assert_state), their filters, and the stand-in nvidia-mig-parted
(tests/standins/nvidia_mig_parted.py) against the file the filter renders (a real subprocess)."""

import json
import os
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.filter.mig import mig_parted_assert, mig_parted_config
from ansible_collections.gpufleet.cluster.plugins.module_utils.mig import (
    BUILTIN_MIG_CONFIGS,
    EXPLICIT_CONFIG_NAME,
    assert_state,
    parted_config,
)

STANDIN = os.path.join(REPO, "tests", "standins", "bin", "nvidia-mig-parted")
# stderr of mig-parted's log.Fatal (logrus text format), as main.go ends a failed assert
MISMATCH = 'time="2026-11-26T06:00:00Z" level=fatal msg="Assertion failure: selected configuration not currently applied"\n'


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


@pytest.mark.parametrize("rc, stdout, stderr, state", [
    (0, "Selected MIG configuration currently applied\n", "", "applied"),
    (1, "", MISMATCH, "not-applied"),
])
def test_assert_states(rc, stdout, stderr, state):
    assert assert_state(rc, stdout, stderr) == state
    assert mig_parted_assert({"rc": rc, "stdout": stdout, "stderr": stderr}) == {
        "state": state, "applied": state == "applied"}


@pytest.mark.parametrize("result, message", [
    ({"rc": 1, "stdout": "", "stderr": 'time="x" level=fatal msg="Error initializing NVML: Driver Not Loaded"\n'},
     "exited 1: .*Error initializing NVML: Driver Not Loaded"),
    ({"rc": 1, "stdout": "", "stderr": 'level=fatal msg="Error selecting MIG config: selected mig-config not present: x"'},
     "exited 1: .*selected mig-config not present"),
    ({"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-mig-parted'"}, "exited 2: .*No such file"),
    ({"stdout": "Selected MIG configuration currently applied"}, "exited None"),  # never ran: no rc
])
def test_anything_else_is_an_error_never_applied(result, message):
    with pytest.raises(AnsibleFilterError, match="could not be read: nvidia-mig-parted assert " + message):
        mig_parted_assert(result)


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
    before = _standin(tmp_path, "assert", "-f", "-", "-c", name, stdin=yaml.safe_dump(document))
    assert assert_state(before.returncode, before.stdout, before.stderr) == "not-applied", before
    applied = _standin(tmp_path, "apply", "-f", str(path), "-c", name)
    assert applied.returncode == 0 and applied.stdout == "MIG configuration applied successfully\n"
    after = _standin(tmp_path, "assert", "-f", str(path), "-c", name)
    assert assert_state(after.returncode, after.stdout, after.stderr) == "applied"
    live = json.loads((tmp_path / "live.json").read_text())
    assert live[7] == {"mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
    calls = [json.loads(line)[1] for line in (tmp_path / "calls").read_text().splitlines()]
    assert calls == ["assert", "apply", "assert"]


def test_standin_failed_apply_changes_nothing(tmp_path):
    _name, document = parted_config("all-1g.10gb", None)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    (tmp_path / "apply_fails").write_text("error resetting all GPUs: exit status 255")
    failed = _standin(tmp_path, "apply", "-f", str(path), "-c", "all-1g.10gb")
    assert failed.returncode == 1
    assert 'msg="Error applying MIG configuration with hooks: error resetting all GPUs' in failed.stderr
    assert not (tmp_path / "live.json").exists()
    with pytest.raises(ValueError, match="selected mig-config not present: other"):
        result = _standin(tmp_path, "assert", "-f", str(path), "-c", "other")
        assert_state(result.returncode, result.stdout, result.stderr)
