"""The transcript corpus (tests/transcripts, tests/transcripts/corpus.py) and the stand-ins that answer
from it: every transcript is valid and names its source; each stand-in, run over its cases as a real
subprocess, prints no line that no transcript of its tool has."""

import json
import os
import subprocess

import pytest
import yaml
from conftest import REPO, TESTS
from hypothesis import given, settings
from hypothesis import strategies as st
from transcripts import corpus

BIN = os.path.join(TESTS, "standins", "bin")
SCENARIOS = os.path.join(TESTS, "fixtures", "nvml")


# -- the corpus ----------------------------------------------------------------------------------------
def test_every_transcript_is_valid_and_names_its_source():
    assert corpus.errors() == []
    every = corpus.transcripts()
    assert every, "no transcript at all"
    for case_id, doc in every.items():
        assert doc["source"].strip() and doc["notes"].strip(), case_id
        assert case_id.split("/")[0] == doc["tool"] == os.path.basename(doc["argv"][0])


@pytest.mark.parametrize("tool", corpus.STANDIN_TOOLS)
def test_every_standin_tool_has_transcripts(tool):
    assert corpus.transcripts(tool), tool


@pytest.mark.parametrize("doc, words", [
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "", "source": "x"},
     "exactly the keys"),
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "", "source": " ",
      "notes": ""}, "source must name"),
    ({"tool": "dcgmi", "version": "1", "argv": "dcgmi diag", "rc": 0, "stdout": "", "stderr": "", "source": "x",
      "notes": ""}, "argv must be"),
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": True, "stdout": "", "stderr": "", "source": "x",
      "notes": ""}, "rc must be"),
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": 0, "stdout": 3, "stderr": "", "source": "x",
      "notes": ""}, "stdout must be a string"),
    ({"tool": "dcgmi", "version": "1", "argv": ["nvidia-smi"], "rc": 0, "stdout": "", "stderr": "",
      "source": "NVIDIA/DCGM issue #55", "notes": ""}, "is not the tool"),
    ({"tool": "scontrol", "version": "1", "argv": ["scontrol"], "rc": 0, "stdout": "", "stderr": "",
      "source": "NVIDIA/DCGM issue #55", "notes": ""}, "is not its directory"),
    # red-team F5: a source that names no public place, or a private index
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "",
      "source": "the Glimmer project's tests", "notes": ""}, "names no public place"),
    ({"tool": "dcgmi", "version": "1", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "",
      "source": "NVIDIA/DCGM issue #55; a capture (search index file id 60396465041)", "notes": ""},
     "private search index"),
    # red-team F6: a version other than its directory's
    ({"tool": "dcgmi", "version": "4.2.3", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "",
      "source": "NVIDIA/DCGM issue #55", "notes": ""}, "is not its directory"),
    ({"tool": "dcgmi", "version": "11", "argv": ["dcgmi"], "rc": 0, "stdout": "", "stderr": "",
      "source": "NVIDIA/DCGM issue #55", "notes": ""}, "is not its directory"),
])
def test_a_bad_transcript_is_refused_naming_the_file(tmp_path, doc, words):
    path = tmp_path / "dcgmi" / "1" / "case.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(doc))
    problems = corpus.errors(str(tmp_path))
    assert len(problems) == 1 and str(path) in problems[0] and words in problems[0], problems


def test_the_line_check_catches_an_invented_line():
    assert corpus.unknown_lines("scontrol", "scontrol: stand-in: unsupported command\n") == [
        "scontrol: stand-in: unsupported command"]
    assert corpus.unknown_lines("nvidia-smi", "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n") == [
        "All done."]  # "All done." follows nvidia-smi -pm, not -r (NVIDIA/NVSentinel issue #1690)


_VALUE = st.from_regex(r"\A[A-Za-z0-9_.@\[\]+-]{1,20}\Z")


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(sorted(corpus.transcripts("scontrol")) + sorted(corpus.transcripts("nvidia-mig-parted"))),
       values=st.dictionaries(st.sampled_from(["node", "addr", "hostname", "state", "reason", "config", "path"]),
                              _VALUE, max_size=4))
def test_a_rendered_transcript_has_the_shape_of_its_transcript(case, values):
    doc = corpus.get(case)
    for stream in ("stdout", "stderr"):
        rendered = corpus.render(doc[stream], doc["tool"], values)
        assert corpus.unknown_lines(doc["tool"], rendered) == []


# -- every stand-in over its cases: no line that no transcript has -----------------------------------------
def _run(name, args, env, stdin=None):
    result = subprocess.run([os.path.join(BIN, name)] + list(args), input=stdin, env=dict(os.environ, **env),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 2 or "stand-in" in result.stderr, result
    return result


def _assert_known(tool, results):
    for result in results:
        assert result.returncode != 2, (result.args, result.stderr)
        unknown = corpus.unknown_lines(tool, result.stdout) + corpus.unknown_lines(tool, result.stderr)
        assert unknown == [], (result.args, unknown)


def test_nvidia_mig_parted_standin_prints_only_transcript_lines(tmp_path):
    env = {"GPUFLEET_STANDIN_MIG_DIR": str(tmp_path)}
    one = yaml.safe_dump({"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}})
    path = tmp_path / "config.yaml"
    path.write_text(one)
    results = []
    for debug in ([], ["-d"]):
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-f", "-", "-c", "all-1g.10gb"], env, one))
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-f", str(path), "-c", "other"], env))
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-f", str(tmp_path / "no.yaml"), "-c", "x"], env))
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-a", "-f", str(path), "-c", "all-1g.10gb"], env))
    results.append(_run("nvidia-mig-parted", ["apply", "-f", str(path), "-c", "all-1g.10gb"], env))
    for debug in ([], ["-d"]):
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-f", str(path), "-c", "all-1g.10gb"], env))
        results.append(_run("nvidia-mig-parted", debug + ["assert", "-m", "-f", str(path), "-c", "all-1g.10gb"], env))
    (tmp_path / "live.json").write_text(json.dumps([{"mig-enabled": True, "mig-devices": {"7g.80gb": 1}}] * 8))
    results.append(_run("nvidia-mig-parted", ["-d", "assert", "-f", str(path), "-c", "all-1g.10gb"], env))
    (tmp_path / "unreadable").write_text("")
    results.append(_run("nvidia-mig-parted", ["-d", "assert", "-f", str(path), "-c", "all-1g.10gb"], env))
    results.append(_run("nvidia-mig-parted", ["apply", "-f", str(path), "-c", "all-1g.10gb"], env))
    (tmp_path / "unreadable").unlink()
    (tmp_path / "apply_fails").write_text("")
    results.append(_run("nvidia-mig-parted", ["apply", "-f", str(path), "-c", "all-1g.10gb"], env))
    _assert_known("nvidia-mig-parted", results)
    assert [r.returncode for r in results] == [1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert "Not all GPUs match the specified config" in results[13].stderr
    assert "bar0 MMIO" in results[14].stderr and "bar0 MMIO" in results[15].stderr


def test_nvidia_mig_parted_standin_refuses_what_no_transcript_answers(tmp_path):
    env = {"GPUFLEET_STANDIN_MIG_DIR": str(tmp_path)}
    for args in (["export"], ["assert", "-c", "x"]):
        result = _run("nvidia-mig-parted", args, env)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("stand-in nvidia-mig-parted: ")


@pytest.mark.parametrize("case_id", sorted(corpus.transcripts("dcgmi")))
def test_dcgmi_standin_prints_the_transcript(case_id):
    doc = corpus.get(case_id)
    result = _run("dcgmi", doc["argv"][1:], {"GPUFLEET_REPLAY_CASE": case_id})
    assert (result.returncode, result.stdout, result.stderr) == (doc["rc"], doc["stdout"], doc["stderr"])
    _assert_known("dcgmi", [result])


def test_scontrol_standin_prints_only_transcript_lines(tmp_path):
    env = {"GPUFLEET_STANDIN_SLURM_DIR": str(tmp_path)}
    (tmp_path / "jobs_end_after").write_text("1")
    results = [_run("scontrol", ["show", "node", "gpu-9", "-o"], env),
               _run("scontrol", ["update", "NodeName=gpu-9", "State=DRAIN", "Reason=gpufleet remediation: x"], env),
               _run("scontrol", ["show", "node", "gpu-9", "-o"], env),
               _run("scontrol", ["show", "node", "gpu-9", "-o"], env),
               _run("scontrol", ["update", "NodeName=gpu-9", "State=RESUME"], env),
               _run("scontrol", ["show", "node", "gpu-9", "-o"], env)]
    _assert_known("scontrol", results)
    states = [r.stdout.split(" State=")[1].split(" ")[0] for r in results if r.stdout]
    assert states == ["MIXED", "MIXED+DRAIN", "IDLE+DRAIN", "IDLE"]
    assert "Reason=gpufleet remediation: x [root@" in results[3].stdout
    refused = _run("scontrol", ["update", "NodeName=gpu-9", "State=FAIL", "Reason=x"], env)
    assert refused.returncode == 2 and refused.stderr.startswith("stand-in scontrol: ")


def test_nvidia_smi_standin_prints_only_transcript_lines(tmp_path):
    apps = tmp_path / "apps"
    apps.write_text("48213, /usr/bin/python3, GPU-4b6f2e1c-8c1d-5a57-9e0b-0d4c7d6a9f12\n")
    link = tmp_path / "scenario.json"
    link.symlink_to(os.path.join(SCENARIOS, "h100-recovery-action.json"))
    query = ["--query-compute-apps=pid,process_name,gpu_uuid", "--format=csv,noheader"]
    env = {"GPUFLEET_FAKE_NVML_SCENARIO": str(link),
           "GPUFLEET_STANDIN_RESET_SCENARIO": os.path.join(SCENARIOS, "h100-healthy.json")}
    results = [_run("nvidia-smi", query, dict(env, GPUFLEET_STANDIN_COMPUTE_APPS=str(apps))),
               _run("nvidia-smi", query, env),
               _run("nvidia-smi", ["--gpu-reset"], env)]
    _assert_known("nvidia-smi", results)
    assert results[0].stdout == apps.read_text() and results[1].stdout == ""
    assert results[2].stdout == "GPU 00000000:18:00.0 was successfully reset.\n"
    assert os.path.realpath(str(link)).endswith("h100-healthy.json")
    apps.write_text("not a process line\n")
    refused = _run("nvidia-smi", query, dict(env, GPUFLEET_STANDIN_COMPUTE_APPS=str(apps)))
    assert refused.returncode == 2 and refused.stdout == "" and "not a line of the layout" in refused.stderr


def test_systemctl_standin_prints_only_transcript_lines(tmp_path):
    """tests/standins/systemctl.sh (role gpu_mig's GPU clients): is-active prints one unit state a line,
    exit 0 when one is active and 3 when none is (systemctl(1) of systemd 252); stop/start print nothing."""
    env = {"GPUFLEET_STANDIN_SYSTEMD_DIR": str(tmp_path)}
    script = os.path.join(TESTS, "standins", "systemctl.sh")

    def run(*args):
        result = subprocess.run(["sh", script] + list(args), env=dict(os.environ, **env), capture_output=True,
                                text=True, timeout=60, check=False)
        assert result.returncode != 2 or result.stderr.startswith("stand-in systemctl: "), result
        return result

    results = [run("is-active", "a.service", "b.service"), run("start", "b.service"),
               run("is-active", "a.service", "b.service"), run("stop", "b.service"), run("daemon-reload")]
    _assert_known("systemctl", results)
    assert [r.returncode for r in results] == [3, 0, 0, 0, 0]
    assert results[0].stdout == "inactive\ninactive\n" and results[2].stdout == "inactive\nactive\n"
    refused = run("restart", "a.service")
    assert refused.returncode == 2 and refused.stdout == ""


def test_the_standins_are_linked_where_the_tests_find_them():
    for name, target in (("nvidia-mig-parted", "nvidia_mig_parted.py"), ("nvidia-smi", "nvidia_smi.py"),
                         ("scontrol", "scontrol.py"), ("dcgmi", "replay.py")):
        assert os.readlink(os.path.join(BIN, name)) == os.path.join("..", target)
    assert os.path.isdir(os.path.join(REPO, "tests", "transcripts"))
