"""The transcript corpus loader (tests/transcripts/corpus.py) refuses what tests/transcripts/README.md does not
allow: red team issue 40, F1-F3 (found passing before the fix; each case below failed then).

F1: a key given twice (a plain YAML safe loader keeps the last value, so a second ``rc`` or ``source`` hid the
first). F2: a ``version`` that is no release of its directory (``25.11.``, ``25.11.evil``, ``25.11.0 `` under
``25.11``). F3: a ``source`` on this machine or a private network (``http://localhost/...``,
``http://10.0.0.5:8080/...``) counted as "a public place a reader can open"."""

import json
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

GOOD = {"tool": "scontrol", "version": "25.11", "argv": ["scontrol", "--version"], "rc": 0,
        "stdout": "slurm 25.11.0\n", "stderr": "",
        "source": "SchedMD/slurm@slurm-25-11-0-1:src/scontrol/scontrol.c", "notes": "red team"}
RAW = ("tool: scontrol\nversion: '25.11'\nargv: [scontrol, --version]\nrc: 0\nstdout: \"slurm 25.11.0\\n\"\n"
       "stderr: ''\nsource: 'SchedMD/slurm@slurm-25-11-0-1:src/scontrol/scontrol.c'\nnotes: x\n")


def write(tmp_path, doc=None, version="25.11", raw=None):
    where = tmp_path / "scontrol" / version
    where.mkdir(parents=True, exist_ok=True)
    path = where / "case.yml"
    path.write_text(raw if raw is not None else json.dumps(doc))  # JSON is YAML
    return str(path)


def test_the_real_corpus_has_no_errors():
    assert corpus.errors() == []


def test_the_baseline_loads(tmp_path):
    assert corpus.load(write(tmp_path, raw=RAW), str(tmp_path))["rc"] == 0


# -- F1: a key given twice ----------------------------------------------------------------------------
@pytest.mark.parametrize("extra", ["rc: 1\n", "source: 'search index, file id 123'\n", "tool: dcgmi\n",
                                   "notes: y\n", "stdout: ''\n"])
def test_a_key_given_twice_is_refused_naming_the_file_and_the_key(tmp_path, extra):
    path = write(tmp_path, raw=RAW + extra)
    key = extra.split(":", 1)[0]
    with pytest.raises(corpus.TranscriptError) as caught:
        corpus.load(path, str(tmp_path))
    assert path in str(caught.value) and "%r twice" % key in str(caught.value)
    assert len(corpus.errors(str(tmp_path))) == 1


def test_a_key_twice_before_the_others_is_refused(tmp_path):
    raw = RAW.replace("rc: 0\n", "rc: 1\nrc: 0\n")
    with pytest.raises(corpus.TranscriptError, match="'rc' twice"):
        corpus.load(write(tmp_path, raw=raw), str(tmp_path))


def test_a_key_twice_in_a_nested_mapping_is_refused(tmp_path):
    raw = RAW.replace("argv: [scontrol, --version]", "argv: [scontrol, {a: 1, a: 2}]")
    with pytest.raises(corpus.TranscriptError, match="'a' twice"):
        corpus.load(write(tmp_path, raw=raw), str(tmp_path))


# -- F2: a version that is no release of its directory ------------------------------------------------
@pytest.mark.parametrize("version", ["25.11.", "25.11..", "25.11.evil", "25.11.0 ", "25.11.\n", " 25.11",
                                     "25.11.0\n", "vv25.11.0", "V25.11.0", "25.11.0-", "25.11.0-evil",
                                     "25.11.0+build", "25.11/0", "25.11.0.", "25.11\x00", "25.11.٣"])
def test_a_version_that_is_no_release_of_its_directory_is_refused(tmp_path, version):
    with pytest.raises(corpus.TranscriptError, match="version"):
        corpus.load(write(tmp_path, dict(GOOD, version=version)), str(tmp_path))


@pytest.mark.parametrize("version, directory", [
    ("25.11", "25.11"), ("v25.11", "25.11"), ("25.11.0", "25.11"), ("v1.31.4", "1.31"), ("4.2.3", "4.2"),
    ("v1.36.0-rc.1", "1.36"), ("1.36.0-rc1", "1.36"), ("4.x", "4.x"), ("unstated", "unstated"), ("252", "252")])
def test_a_release_of_its_directory_is_accepted(version, directory):
    assert corpus.version_matches_directory(version, directory)


@pytest.mark.parametrize("version, directory", [("4.x.1", "4.x"), ("unstated.1", "unstated"),
                                                ("v1.310.4", "1.31"), ("1.31", "1.3")])
def test_only_a_numeric_directory_has_releases(version, directory):
    assert not corpus.version_matches_directory(version, directory)


@settings(max_examples=200, deadline=None)
@given(version=st.text(max_size=20), directory=st.sampled_from(["25.11", "1.31", "4.x", "unstated", "0.15.0"]))
def test_any_version_is_accepted_only_as_the_name_or_a_numbered_release(version, directory):
    if corpus.version_matches_directory(version, directory):
        bare = version[1:] if version.startswith("v") else version
        assert bare == directory or (bare.startswith(directory + ".") or bare.startswith(directory + "-"))
        assert all(c.isascii() and (c.isalnum() or c in ".-") for c in bare), version
        assert bare[-1].isdigit() or bare == directory, version


# -- F3: a source no reader can open ------------------------------------------------------------------
@pytest.mark.parametrize("source", [
    "http://localhost/capture.txt", "https://127.0.0.1/scontrol.json", "http://10.0.0.5:8080/runbook",
    "http://LOCALHOST./x", "http://foo.localhost/x", "https://[::1]/x", "http://[::ffff:127.0.0.1]/x",
    "http://192.168.1.20/x", "http://172.16.0.1/x", "http://169.254.169.254/latest/meta-data",
    "http://100.64.0.1/x", "http://0.0.0.0/x", "http://[fe80::1]/x", "http://[fd00::1]/x",
    "http://wiki.corp.internal/runbook", "https://gpu-17.local/capture", "http://nas.lan/x", "http://intranet/x",
    "http://2130706433/x", "http://0x7f.0.0.1/x", "http://127.1/x", "http://%6c%6fcalhost/x",
    "http://user@127.0.0.1/x", "https://github.com/NVIDIA/DCGM/issues/55 and http://localhost/x",
    "NVIDIA/mig-parted issue #5, copy at http://10.1.2.3/x", "HTTP://127.0.0.1/x", "ftp://10.0.0.1/x",
    "http://[::1/x", "https://example.com/x", "http://224.0.0.1/x"])
def test_a_source_no_reader_can_open_is_refused(tmp_path, source):
    assert corpus.source_problem(source)
    with pytest.raises(corpus.TranscriptError):
        corpus.load(write(tmp_path, dict(GOOD, source=source)), str(tmp_path))


@pytest.mark.parametrize("source", [
    "https://github.com/NVIDIA/DCGM/issues/55", "https://kubernetes.io/docs/reference/setup-tools/kubeadm/",
    "https://www.freedesktop.org/software/systemd/man/252/systemctl.html.",
    "https://packages.debian.org/bookworm/slurm-wlm, see the changelog", "https://8.8.8.8/x",
    "https://xn--80ak6aa92e.xn--p1ai/x", "NVIDIA/mig-parted issue #5"])
def test_a_public_source_is_accepted(source):
    assert corpus.source_problem(source) is None


@settings(max_examples=200, deadline=None)
@given(host=st.one_of(st.ip_addresses().map(str), st.text(alphabet="abcxyz019.-%:[]", max_size=20)))
def test_any_url_host_is_a_verdict_and_a_non_global_address_never_passes(host):
    url = "http://%s/x" % (("[%s]" % host) if ":" in host and not host.startswith("[") else host)
    problem = corpus.host_problem(url)
    assert problem is None or isinstance(problem, str)
    try:
        import ipaddress  # pylint: disable=import-outside-toplevel
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    if not address.is_global:
        assert problem
