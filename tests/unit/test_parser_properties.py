"""Properties of the parsers of tools' outputs that had no hypothesis test, and of the decisions over them
(issue 40 item 6): any input parses to a verdict or to the module's own named error, never a crash
(TypeError, KeyError, IndexError, OverflowError, a ValueError of int()...), and nothing passes that was not
seen to pass. Inputs: random text and mutations of the real outputs of tests/fixtures (sources in their
READMEs).

Parsers with properties elsewhere: kubeadm (test_kubeadm.py, test_redteam_kubeadm.py), dcgmi
(test_dcgm.py, test_redteam_gpu_tools.py), mig / mig-parted (test_mig.py, test_mig_apply.py), XID
(test_xid.py), scontrol (test_slurm.py, test_agent_slurm.py; remediation.slurm_state there too), sysfs
facts with ofed_info output (test_sysfs_fuzz.py), record readers (their own tests).

Here: nccl-tests (nccl.parse_nccl_tests, parse_row, nccl_checks), perftest (perftest.parse_output,
headline, the bandwidth check), ofed_info / OFED versions (ofed.*), dpkg-query and rpm output
(role_stamps.parse_dpkg, parse_rpm), nvidia-smi's process listing and the reset decision
(remediation.parse_compute_apps, reset_decision), mlx5 sysfs state and rate (mlx5.parse_state,
parse_rate), kernel cpu lists (cpulist), versions (versions.*), containerd --version and config.toml
(containerd_config.containerd_major, containerd_version, classify).
"""

import glob
import json
import math
import os

from conftest import FIXTURES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube import containerd_config
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning import cpulist
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import mlx5, ofed, perftest
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import nccl
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import role_stamps, versions
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _read(pattern):
    found = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, pattern))):
        with open(path, encoding="utf-8", errors="replace") as handle:
            found.append(handle.read())
    assert found, pattern
    return found


NCCL = _read("nccl/*.txt")
PERFTEST = _read("perftest/*.txt")
OFED_INFO = _read("ofed_info/*/ofed_info")
# numbers a hostile or broken tool may print where a figure stands
ODD_NUMBERS = st.sampled_from(["nan", "-nan", "inf", "-inf", "-5", "+0", "1e999", "9" * 400, "9" * 5000, "0x10",
                               "\u0663", "1,5", "", "N/A", "-0.0", "1e-320", "٣٣"])


def _mutations(samples):
    """Random text, and a real output with a slice cut out, text put in, or a number swapped for an odd one."""
    def cut(text, start, length):
        return text[:start] + text[start + length:]

    def put(text, at, extra):
        return text[:at] + extra + text[at:]

    def swap(text, nth, odd):
        numbers = [i for i in range(1, len(text)) if text[i].isdigit() and not text[i - 1].isdigit()]
        if not numbers:
            return text + odd
        start = numbers[nth % len(numbers)]
        end = start
        while end < len(text) and (text[end].isdigit() or text[end] == "."):
            end += 1
        return text[:start] + odd + text[end:]

    sample = st.sampled_from(samples)
    return st.one_of(
        st.text(max_size=300),
        st.builds(cut, sample, st.integers(0, 6000), st.integers(0, 400)),
        st.builds(put, sample, st.integers(0, 6000), st.text(max_size=30)),
        st.builds(swap, sample, st.integers(0, 400), ODD_NUMBERS),
        st.builds(lambda text, n, odd: swap(swap(text, n, odd), n + 7, odd), sample, st.integers(0, 400), ODD_NUMBERS),
    )


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- nccl-tests -----------------------------------------------------------------------------------------
@FAST
@given(text=_mutations(NCCL), minimum=st.one_of(st.none(), st.floats(0, 1000)), succeeded=st.booleans())
@example(text=NCCL[0] + "\n# Avg bus bandwidth    : -334.315 \n", minimum=None, succeeded=True)  # below zero
@example(text="#  Rank  0 Group  0 Pid 1 on %s device  0 [0x1b] NVIDIA H100\n# Out of bounds values : %s OK\n"
         "# Avg bus bandwidth    : 10 \n" % ("9" * 5000, "9" * 5000), minimum=None, succeeded=True)
def test_nccl_output_is_a_verdict_and_passes_only_what_was_seen(text, minimum, succeeded):
    parsed = nccl.parse_nccl_tests(text)
    json.dumps(parsed, allow_nan=False)  # the result stays strict JSON (no nan, no inf)
    busbw, wrong = nccl.nccl_checks(parsed, minimum, job_succeeded=succeeded)
    avg = parsed["avg_busbw_gbps"]
    if busbw["status"] == "pass":
        assert succeeded and _finite(avg) and avg >= 0 and parsed["summaries"] == 1, (parsed, busbw)
        assert parsed["avg_status"] != "FAILED" and (minimum is None or avg >= minimum)
    if wrong["status"] == "pass":
        assert parsed["rows"] and parsed["wrong"] == 0 and not parsed["wrong_problems"]
        assert (parsed["out_of_bounds"] or 0) == 0 and parsed["out_of_bounds_status"] != "FAILED"
        assert parsed["wrong_checked_rows"] >= 1


@FAST
@given(line=st.one_of(st.text(max_size=200), st.sampled_from([line for text in NCCL for line in text.splitlines()])),
       columns=st.one_of(st.none(), st.lists(st.sampled_from(["redop", "root", "x"]), max_size=3)))
def test_nccl_row_is_a_row_or_none(line, columns):
    row = nccl.parse_row(line, columns)
    if row is not None:
        json.dumps(row, allow_nan=False)
        assert isinstance(row["size"], int) and isinstance(row["count"], int)


# -- perftest ---------------------------------------------------------------------------------------------
class _Result:
    def __init__(self, rc, stdout, stderr="", timed_out=False):
        self.rc, self.stdout, self.stderr, self.timed_out = rc, stdout, stderr, timed_out


@FAST
@given(text=_mutations(PERFTEST), rc=st.sampled_from([0, 0, 0, 1, -9]), timed_out=st.booleans(),
       mode=st.sampled_from(["client", "server"]), minimum=st.one_of(st.none(), st.floats(0, 800)))
@example(text=" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
         " 65536      5000           %s            %s                  0.75\n" % ("9" * 400, "9" * 400),
         rc=0, timed_out=False, mode="client", minimum=None)  # an infinite "bandwidth"
@example(text=" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
         " %s      5000           1.0            1.0                  0.75\n" % ("9" * 5000),
         rc=0, timed_out=False, mode="client", minimum=None)  # int() refuses 4300+ digits
def test_perftest_report_is_a_verdict_and_passes_only_a_measured_figure(text, rc, timed_out, mode, minimum):
    parsed = perftest.parse_output(text)
    json.dumps(parsed, allow_nan=False)
    best = perftest.headline(parsed["rows"])
    assert best is None or best in parsed["rows"]
    checks = CheckResults()
    params = {"mode": mode, "min_gbps": minimum, "timeout": 30, "device": "mlx5_0", "ib_port": 1}
    perftest._bandwidth_check(checks, params, parsed, _Result(rc, text, timed_out=timed_out), "ib_write_bw")
    (check,) = checks.as_list()
    if check["status"] == "pass":
        observed = check["observed"]
        assert rc == 0 and not timed_out and best is not None and observed == best["bw_average_gbps"]
        assert _finite(observed) and observed >= 0 and (minimum is None or observed >= minimum)


# -- ofed_info and OFED versions -----------------------------------------------------------------------------
_VERSIONISH = st.one_of(st.none(), st.booleans(), st.integers(-5, 10 ** 30), st.floats(allow_nan=True),
                        st.text(max_size=40), st.from_regex(r"\A[0-9]{1,3}(\.[0-9]{1,25}){0,6}(-[0-9.]{1,12})?\Z"),
                        _mutations(OFED_INFO), st.sampled_from(["24.10-1.1.4", "23.10-1.1.9.0", "5.8-1.0.1.1",
                                                                "24.10.OFED.24.10.1.1.4.1-1", "MLNX_OFED_LINUX-5.8-1.0.1.1:"]))


@FAST
@given(output=_mutations(OFED_INFO))
def test_ofed_info_parses_to_a_version_or_none(output):
    version, flavor = ofed.parse_ofed_info(output)
    assert version is None or (isinstance(version, str) and version[:1].isdigit())
    assert flavor is None or isinstance(flavor, str)


@FAST
@given(left=_VERSIONISH, right=_VERSIONISH, operator=st.sampled_from(list(ofed.OPERATORS) + ["~", ""]),
       available=st.lists(_VERSIONISH, max_size=4))
def test_ofed_versions_compare_or_refuse_by_name(left, right, operator, available):
    normal = ofed.normalize_version(left)
    assert normal is None or isinstance(normal, str)
    for call in (lambda: ofed.version_tuple(left), lambda: ofed.driver_at_least(left, right),
                 lambda: ofed.version_compare(left, operator, right)):
        try:
            call()
        except ValueError as exc:
            assert str(exc).startswith(("not a version", "unknown operator")), exc
    matched = ofed.loaded_matches_installed(left, right)
    if matched:
        assert ofed.version_tuple(left) and ofed.version_tuple(right)
    chosen = ofed.best_match(left, available)
    if chosen is not None:
        assert any(chosen is item for item in available)
        host, picked = ofed.version_tuple(left), ofed.version_tuple(chosen)
        assert picked == host or picked[:-1] == host or host[:-1] == picked or picked[:2] == host[:2]


# -- dpkg-query / rpm output (role_stamps) -------------------------------------------------------------------
_DPKG_LINE = st.builds(lambda name, status, version: "%s\t%s\t%s" % (name, status, version),
                       st.sampled_from(["libc6:amd64", "libc6:i386", "kubelet", "nvidia-driver", ""]),
                       st.sampled_from(["ii ", "hi ", "rc ", "un ", "i", "", "iU ", "ih"]),
                       st.text(max_size=12))


@FAST
@given(lines=st.lists(st.one_of(_DPKG_LINE, st.text(max_size=40)), max_size=8))
def test_dpkg_output_reports_installed_only_what_dpkg_says_is_installed(lines):
    text = "\n".join(lines)
    found = role_stamps.parse_dpkg(text)
    installed = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and len(parts[1]) >= 2 and parts[1][1] == "i":
            installed.setdefault(parts[0], []).append(parts[2])
    for name, version in found.items():
        if version is not None:
            assert name in installed and version.replace(" (held)", "") in installed[name], (name, version)
    found_rpm = role_stamps.parse_rpm(text)
    assert all(value is None or isinstance(value, str) for value in found_rpm.values())


# -- nvidia-smi --query-compute-apps and the reset decision ---------------------------------------------------
_APPS = st.lists(st.one_of(
    st.builds(lambda pid, name, uuid: "%s, %s, %s" % (pid, name, uuid), st.integers(0, 10 ** 7),
              st.sampled_from(["/usr/bin/python3", "a, b", ""]), st.sampled_from(["GPU-4b6f2e1c", ""])),
    st.sampled_from(["", "No running processes found", "No devices were found",
                     "Failed to initialize NVML: Driver/library version mismatch", "[N/A], [N/A], [N/A]",
                     "\u0663\u0663, x, GPU-1"]),
    st.text(max_size=30)), max_size=5)


@FAST
@given(lines=_APPS, rc=st.sampled_from([0, 0, 6, 9, 255]), stderr=st.text(max_size=30))
def test_a_gpu_reset_is_allowed_only_on_a_listing_seen_empty(lines, rc, stderr):
    stdout = "\n".join(lines)
    try:
        processes = remediation.parse_compute_apps(stdout)
    except ValueError as exc:
        assert str(exc).startswith("not a pid, process_name, gpu_uuid line")
        processes = None
    decision = remediation.reset_decision(stdout, rc, stderr)
    if decision["allowed"]:
        assert rc == 0 and processes == []
        assert all(not line.strip() or line.strip().lower().startswith("no running processes")
                   for line in stdout.splitlines())


# -- mlx5 sysfs state / rate, kernel cpu lists ----------------------------------------------------------------
@FAST
@given(text=st.one_of(st.none(), st.text(max_size=80),
                      st.sampled_from(["4: ACTIVE", "1: DOWN", "400 Gb/sec (4X NDR)", "100 Gb/sec (2X HDR)",
                                       "9" * 5000 + ": ACTIVE", "1e999 Gb/sec", "\u0663: ACTIVE", "nan Gb/sec"])))
def test_mlx5_state_and_rate_parse_or_say_none(text):
    state, name = mlx5.parse_state(text)
    assert state is None or (isinstance(state, int) and 0 <= state < 10 ** 6)
    rate, width, speed = mlx5.parse_rate(text)
    assert rate is None or (_finite(rate) and rate >= 0)


_CPU_LISTS = st.from_regex(r"\A[0-9]{1,6}(-[0-9]{1,6})?(,[0-9]{1,6}(-[0-9]{1,6})?){0,4}\Z")


@FAST
@given(text=st.one_of(st.none(), st.text(max_size=40), _CPU_LISTS))
def test_a_cpu_list_is_a_set_or_none_and_round_trips(text):
    cpus = cpulist.parse_cpulist(text)
    if cpus is not None:
        assert cpus and all(isinstance(cpu, int) and 0 <= cpu <= 99999 for cpu in cpus)
        assert cpulist.parse_cpulist(cpulist.format_cpulist(cpus)) == cpus


# -- versions, containerd --version and config.toml ------------------------------------------------------------
@FAST
@given(left=_VERSIONISH, right=_VERSIONISH)
def test_versions_parse_or_refuse_by_name(left, right):
    for value in (left, right):
        try:
            parsed = versions.parse_version(value)
        except ValueError as exc:
            assert str(exc).startswith("not a version"), exc
        else:
            assert parsed and all(isinstance(part, int) and part >= 0 for part in parsed)
    try:
        order = versions.compare_versions(left, right)
    except ValueError as exc:
        assert str(exc).startswith("not a version"), exc
    else:
        assert order == -versions.compare_versions(right, left)
        if versions.version_matches(left, right):
            assert versions.parse_version(left)[:len(versions.parse_version(right))] == versions.parse_version(right)


@FAST
@given(text=st.one_of(st.none(), st.text(max_size=120),
                      st.sampled_from(["containerd containerd.io 2.2.1 05044ec0a9a75232cad458027ca83437aae3f4da",
                                       "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1",
                                       "containerd x " + "9" * 5000 + ".1.2", "version = " + "9" * 5000,
                                       "version = 3\n[plugins]\n", "disabled_plugins = [\"cri\"]\n",
                                       "containerd x \u0663.\u0663.\u0663"])))
def test_containerd_version_and_config_version_read_or_say_none(text):
    major = containerd_config.containerd_major(text)
    version = containerd_config.containerd_version(text)
    assert major is None or (isinstance(major, int) and major < 10 ** 9)
    assert version is None or (len(version) == 2 and all(isinstance(v, int) and v < 10 ** 9 for v in version))
    try:
        kind = containerd_config.classify(text)
    except containerd_config.ContainerdConfigError as exc:
        assert "is not a version" in str(exc)
    else:
        assert kind in ("missing", "stub") or (isinstance(kind, int) and 0 <= kind < 10 ** 9)


# -- gpg --show-keys --with-colons (filter gpg_key_check) -----------------------------------------------------
GPG = _read("gpg/*.colons")
_PINNED = "47D79C9851510C39AE85E7DA31CD70CA0CA54751"  # the throwaway test key of tests/fixtures/gpg
_GPG_LINES = st.sampled_from(
    [line for text in GPG for line in text.splitlines()]
    + ["pub:-:255:22:AAAAAAAAAAAAAAAA:1795304786:::-:::scSC:::::ed25519:::0:",
       "fpr:::::::::%s:" % ("B" * 40), "fpr:::::::::%s:" % _PINNED, "sub:-:255:18:CCCCCCCCCCCCCCCC:1795304786::::::e:",
       "uid:-::::1795304786::X::someone <x@example.invalid>::::::::::0:", "sec:-:255:22:DDDDDDDDDDDDDDDD:1:::-:", "fpr:"])


@FAST
@example(lines=GPG[-1].splitlines()[:1] + GPG[-1].splitlines(), pinned=_PINNED)  # a second key without its fpr
@given(lines=st.lists(st.one_of(_GPG_LINES, st.text(max_size=30)), max_size=10),
       pinned=st.one_of(st.none(), st.sampled_from([_PINNED, "47d7 9c98 5151 0c39 ae85 e7da 31cd 70ca 0ca5 4751",
                                                    "not a fingerprint"]),
                        st.lists(st.sampled_from([_PINNED, "B" * 40, "0x" + "b" * 40, "x"]), max_size=3)))
def test_a_key_file_passes_only_when_every_primary_key_is_seen_pinned(lines, pinned):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter import gpg

    colons = "\n".join(lines)
    try:
        verdict = gpg.gpg_key_check(colons, pinned)
    except AnsibleFilterError as exc:
        assert "gpg_key_check" in str(exc)
        return
    if verdict["ok"]:
        pins = {gpg.normalize_fingerprint(pin) for pin in ([pinned] if isinstance(pinned, str) else pinned)}
        # every primary key record (pub, sec) is followed by its fpr record, and that fingerprint is pinned
        records = [fields for fields in (line.split(":") for line in colons.splitlines())
                   if fields[0] in ("fpr", "pub", "sec", "sub", "ssb", "uid", "uat")]
        for index, fields in enumerate(records):
            if fields[0] in ("pub", "sec"):
                following = records[index + 1] if index + 1 < len(records) else [""]
                assert following[0] == "fpr" and len(following) > 9 and following[9].upper() in pins, colons
