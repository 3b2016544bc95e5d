"""Red-team attacks (from the docs only) on: the converged-role state (module role_state /
module_utils role_stamps), the Slurm ownership rule (agent_slurm via the agent, filter
remediation_slurm_state), the inventory check (filter inventory_problems, HA VIP refusals) and the
DRA fallback to the node taint (docs/contracts.md "Device taints")."""

import contextlib
import json
import os
import signal
import socket
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import role_stamps

# ------------------------------------------------------------------------------------------------
# (1) converged-role state
# ------------------------------------------------------------------------------------------------
DPKG_OUT = ("bash\tii \t5.2.15-2+b8\n"
            "kubelet\thi \t1.36.4-1.1\n")


class FakeModule(object):
    """Stands in for AnsibleModule (as tests/unit/test_role_state.py)."""
    out = DPKG_OUT

    def __init__(self, check_mode=False, **params):
        self.params = dict({"path": None, "roles": None, "stamps": None, "managed": {}, "forget": []}, **params)
        self.check_mode = check_mode
        self._diff = False

    def run_command(self, argv, environ_update=None):
        return 0, self.out, ""

    @staticmethod
    def get_bin_path(name):
        return "/usr/bin/dpkg-query" if name == "dpkg-query" else None


@contextlib.contextmanager
def no_hang(seconds=5):
    """A read that blocks (FIFO, /dev/zero) is a failure of the test, not a hung test run."""
    def alarm(signum, frame):
        raise AssertionError("hung for %d s" % seconds)
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def record(state, files, packages=(), out=DPKG_OUT):
    module = FakeModule(action="record", path=str(state), stamps={"r": "D"},
                        managed={"r": {"files": [str(f) for f in files], "packages": list(packages)}})
    module.out = out
    with no_hang():
        return role_stamps.role_state_work(module)


def verify(state, out=DPKG_OUT):
    module = FakeModule(action="verify", path=str(state))
    module.out = out
    with no_hang():
        return role_stamps.role_state_work(module)


def managed_file(tmp_path, name="managed.conf", content="blacklist nouveau\n", mode=0o644):
    path = tmp_path / name
    path.write_text(content)
    os.chmod(str(path), mode)
    return path


def stamped(tmp_path, files=None, packages=()):
    state = tmp_path / "role-state.json"
    files = files or [managed_file(tmp_path)]
    result = record(state, files, packages)
    assert result["recorded"] == ["r"], result
    assert verify(state)["roles"]["r"]["verified"] is True
    return state, files


def verified(state, out=DPKG_OUT):
    return verify(state, out)["roles"]["r"]["verified"]


@pytest.mark.parametrize("mode", [0o4644, 0o2644, 0o1644, 0o6755 & ~0o111 | 0o644])
def test_high_mode_bits_alone_are_drift(tmp_path, mode):
    state, (path,) = stamped(tmp_path)
    os.chmod(str(path), mode)
    result = verify(state)["roles"]["r"]
    assert result["verified"] is False and result["drift"], result


def test_setuid_stamped_then_cleared_is_drift(tmp_path):
    path = managed_file(tmp_path, mode=0o4755)
    state, _ = stamped(tmp_path, [path])
    os.chmod(str(path), 0o755)
    assert verified(state) is False


def test_same_content_new_mtime_is_still_verified(tmp_path):
    state, (path,) = stamped(tmp_path)
    os.utime(str(path), (1, 1))
    assert verified(state) is True
    path.write_text(path.read_text())  # rewritten with the same bytes
    assert verified(state) is True


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_owner_changed_and_changed_back_is_verified_changed_and_left_is_drift(tmp_path):
    state, (path,) = stamped(tmp_path)
    os.chown(str(path), 4711, 4712)
    assert verified(state) is False
    os.chown(str(path), 0, 0)
    assert verified(state) is True


def test_file_replaced_by_a_fifo_is_drift_and_never_blocks(tmp_path):
    state, (path,) = stamped(tmp_path)
    path.unlink()
    os.mkfifo(str(path))
    result = verify(state)["roles"]["r"]
    assert result["verified"] is False and result["drift"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("device", [(1, 3), (1, 5)])  # /dev/null, /dev/zero
def test_file_replaced_by_a_char_device_is_drift_and_never_reads_forever(tmp_path, device):
    state, (path,) = stamped(tmp_path)
    path.unlink()
    os.mknod(str(path), stat.S_IFCHR | 0o644, os.makedev(*device))
    result = verify(state)["roles"]["r"]
    assert result["verified"] is False and result["drift"]


def test_a_fifo_at_record_time_gets_no_snapshot_and_never_blocks(tmp_path):
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(str(fifo))
    result = record(tmp_path / "role-state.json", [fifo])
    assert result["recorded"] == []
    assert verify(tmp_path / "role-state.json")["roles"].get("r", {"verified": False})["verified"] is False


def test_symlink_to_a_fifo_never_blocks(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    target.unlink()
    os.mkfifo(str(target))
    assert verified(state) is False


def test_hard_link_edited_through_the_other_name_is_drift(tmp_path):
    state, (path,) = stamped(tmp_path)
    other = tmp_path / "other-name.conf"
    os.link(str(path), str(other))
    assert verified(state) is True  # a second name changes nothing at the managed path
    with open(str(other), "a") as handle:
        handle.write("options nouveau modeset=1\n")
    assert verified(state) is False


def test_symlink_swapped_for_another_to_the_same_target_is_verified(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    tmp = tmp_path / "link.tmp"
    os.symlink(str(target), str(tmp))
    os.rename(str(tmp), str(link))
    assert verified(state) is True


def test_symlink_swapped_for_another_text_resolving_to_the_same_file_is_drift(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    link.unlink()
    os.symlink("real.conf", str(link))  # relative: same file, another link target
    assert verified(state) is False


def test_symlink_loop_is_drift_not_a_crash(tmp_path):
    state, (path,) = stamped(tmp_path)
    path.unlink()
    os.symlink(str(path), str(path))
    assert verified(state) is False


def test_symlink_loop_at_record_time_is_no_crash(tmp_path):
    link = tmp_path / "loop.conf"
    os.symlink(str(link), str(link))
    result = record(tmp_path / "role-state.json", [link])
    roles = verify(tmp_path / "role-state.json")["roles"]
    # nothing changed since: verified when it was recorded, never a crash
    assert roles.get("r", {"verified": False})["verified"] is (result["recorded"] == ["r"])


def test_a_file_replaced_by_a_directory_through_a_symlink_is_drift(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    target.unlink()
    target.mkdir()
    assert verified(state) is False


@pytest.mark.parametrize("before, after", [
    ("kubelet\thi \t1.36.4-1.1\n", "kubelet\tii \t1.36.4-1.1\n"),   # unheld
    ("kubelet\tii \t1.36.4-1.1\n", "kubelet\thi \t1.36.4-1.1\n"),   # held
    ("kubelet\thi \t1.36.4-1.1\n", "kubelet\trc \t1.36.4-1.1\n"),   # removed, config left
    ("kubelet\thi \t1:1.36.4-1.1\n", "kubelet\thi \t1.36.4-1.1\n"),  # epoch dropped
])
def test_package_hold_or_version_change_is_drift(tmp_path, before, after):
    state = tmp_path / "role-state.json"
    result = record(state, [], ["kubelet"], out=before)
    assert result["recorded"] == ["r"], result
    assert verified(state, out=before) is True
    assert verified(state, out=after) is False


def test_a_role_that_declares_nothing_never_verifies(tmp_path):
    state = tmp_path / "role-state.json"
    for declared in (None, {}, {"files": [], "packages": []}, {"files": []}, {"packages": []}, ""):
        module = FakeModule(action="record", path=str(state), stamps={"r": "D"}, managed={"r": declared})
        role_stamps.role_state_work(module)
        assert verify(state)["roles"].get("r", {"verified": False})["verified"] is False, declared


def good_state(tmp_path):
    state, _ = stamped(tmp_path)
    return state, json.loads(state.read_text())


DAMAGED = [
    ("nested duplicate role", lambda text, doc: text.replace('"roles": {', '"roles": {"r": {"inputs": "X"}, ', 1)),
    ("Infinity", lambda text, doc: text.replace('"roles"', '"x": Infinity, "roles"', 1)),
    ("-Infinity", lambda text, doc: text.replace('"roles"', '"x": -Infinity, "roles"', 1)),
    ("huge number", lambda text, doc: text.replace('"roles"', '"x": 1e400, "roles"', 1)),
    ("BOM", lambda text, doc: "\ufeff" + text),
    ("trailing garbage", lambda text, doc: text + "}"),
    ("two documents", lambda text, doc: text + text),
    ("deep", lambda text, doc: "[" * 100000 + "]" * 100000),
    ("deep object", lambda text, doc: '{"roles": ' + '{"r": ' * 50000 + "1" + "}" * 50001),
    ("empty", lambda text, doc: ""),
    ("null", lambda text, doc: "null"),
    ("lone surrogate", lambda text, doc: text.replace('"roles"', '"\\ud800": 1, "roles"', 1)),
    ("inputs a number", lambda text, doc: json.dumps({"roles": {"r": dict(doc["roles"]["r"], inputs=5)}})),
    ("inputs null", lambda text, doc: json.dumps({"roles": {"r": dict(doc["roles"]["r"], inputs=None)}})),
    ("verified smuggled", lambda text, doc: json.dumps({"roles": {"r": dict(doc["roles"]["r"], verified=True,
                                                                            managed=None)}})),
]


@pytest.mark.parametrize("name, damage", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_state_file_verifies_nothing_and_names_the_file(tmp_path, name, damage):
    state, doc = good_state(tmp_path)
    state.write_text(damage(state.read_text(), doc))
    result = verify(state)
    assert not any(role.get("verified") for role in result["roles"].values()), result
    if result["roles"] == {}:
        assert result["problem"] and str(state) in result["problem"], result


def test_a_huge_state_file_is_no_crash_and_verifies_nothing_unless_whole(tmp_path):
    state, doc = good_state(tmp_path)
    doc["padding"] = "x" * (64 * 1024 * 1024)
    state.write_text(json.dumps(doc))
    result = verify(state)
    assert "roles" in result


def test_invalid_utf8_state_file_names_the_file(tmp_path):
    state, _ = good_state(tmp_path)
    state.write_bytes(b'{"roles": {"\xff": 1}}')
    result = verify(state)
    assert result["roles"] == {} and str(state) in result["problem"]


@pytest.mark.parametrize("kind", ["directory", "dangling", "fifo", "dev_zero"])
def test_a_state_file_that_is_not_a_file_verifies_nothing_names_it_and_never_blocks(tmp_path, kind):
    """fifo: open() blocked forever; dev_zero: read without a bound until memory ran out (fixed:
    state_files.read_bytes opens regular files only, O_NONBLOCK|O_NOFOLLOW, at most MAX_BYTES)."""
    state = tmp_path / "role-state.json"
    if kind == "directory":
        state.mkdir()
    elif kind == "fifo":
        os.mkfifo(str(state))
    elif kind == "dev_zero":
        os.symlink("/dev/zero", str(state))
    else:
        os.symlink(str(tmp_path / "nowhere"), str(state))
    result = verify(state)
    assert result["roles"] == {}
    if kind != "dangling":  # a dangling link reads as no file, no stamp
        assert result["problem"] and str(state) in result["problem"], result


def test_a_state_file_that_is_a_link_to_a_good_state_file_is_refused_and_named(tmp_path):
    """A record is never a link (atomic_write replaces one): the link is not followed."""
    state, _ = good_state(tmp_path)
    link = tmp_path / "link.json"
    os.symlink(str(state), str(link))
    result = verify(link)
    assert result["roles"] == {} and str(link) in result["problem"] and "symbolic link" in result["problem"]


def test_a_state_file_larger_than_the_bound_is_read_no_further_and_named(tmp_path, monkeypatch):
    state, _ = good_state(tmp_path)
    reads = []
    real = os.fdopen

    def counting_fdopen(*args, **kwargs):
        handle = real(*args, **kwargs)
        original = handle.read

        def read(size=-1):
            reads.append(size)
            return original(size)
        handle.read = read
        return handle
    monkeypatch.setattr(role_stamps, "MAX_BYTES", 64)
    monkeypatch.setattr(os, "fdopen", counting_fdopen)
    result = verify(state)
    assert result["roles"] == {} and str(state) in result["problem"] and "64 bytes" in result["problem"]
    assert reads == [65]


# ------------------------------------------------------------------------------------------------
# (2) Slurm: someone else's state is neither re-reasoned nor resumed
# ------------------------------------------------------------------------------------------------
from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import remediation  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_config import AgentError  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_slurm import (  # noqa: E402
    ShowNodeError, parse_show_node, slurm_commands)
from ansible_collections.gpufleet.cluster.plugins.filter import remediation as remediation_filters  # noqa: E402

FAILING = [{"id": "gpu.xid", "target": "gpu3", "status": "fail", "message": "Xid 79"}]
OURS = "gpufleet: gpu.xid[gpu3]"
MINE = "gpufleet remediation: reset: xid_fatal -> reset (gpu.xid:gpu3)"


def show(state, reason=None, tail=""):
    line = ("NodeName=gpu-1 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Gres=gpu:h100:8 "
            "NodeAddr=gpu-1 NodeHostName=gpu-1 Version=23.11.4 OS=Linux 6.8.0-48-generic "
            "RealMemory=2000000 State=%s ThreadsPerCore=2 Partitions=gpu" % state)
    if reason is not None:
        line += " Reason=%s [root@2025-11-20T12:00:00]" % reason
    return line + tail + "\n"


def agent_acts(state, reason, healthy):
    commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, show(state, reason))
    return commands, why


def remediation_view(state, reason, tail=""):
    return remediation_filters.remediation_slurm_state({"rc": 0, "stdout": show(state, reason, tail), "stderr": ""},
                                                       "gpu-1")


# states that are someone else's even though the node was drained by gpufleet (our reason)
THEIRS_WITH_OUR_DRAIN = [
    # odd case / whitespace around an owner flag: unknown (fail closed) or the flag, never ours
    "IDLE+DRAIN+maintenance", "IDLE+DRAIN+Fail", "idle+drain+fail", "IDLE+DRAIN+ FAIL", "IDLE+DRAIN+FAIL ",
    "IDLE+DRAIN+reboot_requested", "IDLE+DRAIN+power_down",
    # short-form suffix symbols on the base state
    "IDLE$+DRAIN", "IDLE@+DRAIN", "IDLE^+DRAIN", "IDLE~+DRAIN", "IDLE!+DRAIN", "IDLE%+DRAIN", "IDLE#+DRAIN",
    "MIXED$+DRAIN", "ALLOCATED@+DRAIN", "IDLE*$+DRAIN", "IDLE$*+DRAIN",
    # + combos and unknown future flags
    "IDLE+DRAIN+QUARANTINE", "IDLE+DRAIN+FAIL+FAIL", "IDLE+DRAIN+MAINTENANCE+", "IDLE+DRAIN++FAIL",
    "IDLE+DRAIN+FAILING", "IDLE+DRAIN+MAINT", "IDLE+DRAIN+POWER", "IDLE+DRAIN+POWERING_UP",
    "IDLE+DRAIN+INVALID_REG", "IDLE+DRAIN+RESUME", "IDLE+DRAIN+REBOOT_ISSUED",
    # base states that are not IDLE/ALLOCATED/MIXED
    "DOWN+DRAIN", "ERROR+DRAIN", "FUTURE+DRAIN", "UNKNOWN+DRAIN", "DOWN*+DRAIN", "QUARANTINED+DRAIN",
    "+DRAIN", "DRAIN", "",
]


@pytest.mark.parametrize("state", THEIRS_WITH_OUR_DRAIN)
def test_agent_never_resumes_nor_rereasons_someone_elses_state(state):
    for healthy in (True, False):
        commands, why = agent_acts(state, OURS, healthy)
        assert commands == [], (state, healthy, commands, why)


@pytest.mark.parametrize("state", THEIRS_WITH_OUR_DRAIN)
def test_remediation_never_calls_someone_elses_state_ours(state):
    view = remediation_view(state, MINE)
    assert not view["ours"], (state, view)


@pytest.mark.parametrize("state", ["IDLE$", "IDLE@", "IDLE^", "IDLE~", "IDLE!", "IDLE%", "IDLE#", "MIXED$",
                                   "IDLE+MAINTENANCE", "IDLE+maintenance", "IDLE+QUARANTINE", "idle+fail",
                                   "IDLE+POWER_UP", "IDLE+RESUME", "IDLE+INVALID_REG", "IDLE+FAILING"])
def test_agent_never_drains_a_node_someone_else_holds_without_drain(state):
    commands, why = agent_acts(state, None, False)
    assert commands == [] and why.startswith("left alone"), (state, commands, why)


SPOOFED = [
    "GPUFLEET: gpu.xid[gpu3]", "Gpufleet: gpu.xid[gpu3]", "admin gpufleet: gpu.xid[gpu3]", "not-gpufleet: x", "xgpufleet: x",
    "gpufleet : x", "gpufleet x", "gpufleet", "gpufleet remediation: x", "ｇpufleet: x", "gpufleet\uff1a x",
    "\u200bgpufleet: x", "bad dimm (gpufleet: gpu.xid[gpu3])",
]


@pytest.mark.parametrize("reason", SPOOFED)
def test_agent_treats_a_spoofed_prefix_as_someone_elses(reason):
    for state in ("IDLE+DRAIN", "MIXED+DRAIN"):
        for healthy in (True, False):
            commands, why = agent_acts(state, reason, healthy)
            assert commands == [], (state, reason, healthy, commands)
    commands, why = agent_acts("IDLE", reason, False)
    assert commands == [], (reason, commands)  # a reason that is not ours keeps the node out of our hands


REMEDIATION_SPOOFED = [
    "GPUFLEET REMEDIATION: x", "Gpufleet Remediation: x",
    "gpufleet remediation : x", "gpufleet: x", "admin gpufleet remediation: x",
    "gpufleet remediation", "gpufleet remediations: x",
]


@pytest.mark.parametrize("reason", REMEDIATION_SPOOFED)
def test_remediation_treats_a_spoofed_prefix_as_someone_elses(reason):
    view = remediation_view("IDLE+DRAIN", reason)
    assert not view["ours"] and view["admin"], (reason, view)


@pytest.mark.parametrize("line_reason", ["Reason= ", "Reason=", "Reason=(null)", "Reason=none"])
def test_a_drain_with_an_empty_reason_is_someone_elses(line_reason):
    line = "NodeName=gpu-1 State=IDLE+DRAIN ThreadsPerCore=2 %s\n" % line_reason
    line_end = "NodeName=gpu-1 State=IDLE+DRAIN %s ThreadsPerCore=2\n" % line_reason
    for text in (line, line_end, "NodeName=gpu-1 State=IDLE+DRAIN\n"):
        for healthy in (True, False):
            commands, _why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, text)
            assert commands == [], (text, healthy, commands)
        view = remediation_filters.remediation_slurm_state({"rc": 0, "stdout": text, "stderr": ""}, "gpu-1")
        assert not view["ours"], (text, view)


@pytest.mark.parametrize("tail", [
    " Comment=Reason=gpufleet: gpu.xid[gpu3]",
])
def test_a_reason_smuggled_in_a_later_field_does_not_make_an_admins_drain_ours(tail):
    text = show("IDLE+DRAIN", "bad dimm", tail)
    for healthy in (True, False):
        commands, _ = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, text)
        assert commands == [], (tail, healthy, commands)


@pytest.mark.parametrize("tail", [
    " Comment=Reason=gpufleet remediation: x",
])
def test_a_remediation_reason_smuggled_in_a_later_field_is_not_ours(tail):
    view = remediation_view("IDLE+DRAIN", "bad dimm", tail)
    assert not view["ours"], (tail, view)


def test_a_state_smuggled_in_the_reason_does_not_hide_an_owner_flag():
    text = show("IDLE+DRAIN+MAINTENANCE", OURS + " State=IDLE+DRAIN")
    assert slurm_commands("gpu-1", True, [], text)[0] == []


@pytest.mark.parametrize("reason", [" gpufleet: gpu.xid[gpu3]", "  gpufleet: gpu.xid[gpu3]",
                                    "\tgpufleet: gpu.xid[gpu3]"])
def test_agent_a_reason_with_leading_whitespace_is_not_gpufleets(reason):
    """`Reason= gpufleet: ...` does not start with `gpufleet:` (the reason was stripped)."""
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, show("IDLE+DRAIN", reason))
        assert commands == [] and why.startswith("left alone"), why


@pytest.mark.parametrize("reason", [" gpufleet remediation: x", "\tgpufleet remediation: x",
                                    "gpufleet  remediation: x", "gpufleet remediation:x"])
def test_remediation_a_reason_with_other_whitespace_is_not_ours_and_is_reported_verbatim(reason):
    """The reason's whitespace was normalised before the prefix test (and in the view)."""
    view = remediation_filters.remediation_slurm_state(
        {"rc": 0, "stdout": show("IDLE+DRAIN", reason), "stderr": ""}, "gpu-1")
    assert not view["ours"] and view["admin"], view
    assert view["reason"] == reason + " [root@2025-11-20T12:00:00]", view


REPEATED_KEYS = [
    # an admin's drain whose Reason text contains ' Reason=gpufleet: ...'
    "NodeName=gpu-1 State=IDLE+DRAIN ThreadsPerCore=2 Reason=PSU swap, see Reason=gpufleet: gpu.xid[gpu3] "
    "[root@2025-11-20T12:00:00]\n",
    # a later free-text field (Comment=, Extra=) carrying ' Reason=' or ' State='
    "NodeName=gpu-1 State=IDLE+DRAIN Reason=bad dimm [root@t] Comment=x Reason=gpufleet: gpu.xid[gpu3]\n",
    "NodeName=gpu-1 State=IDLE+DRAIN Reason=bad dimm [root@t] Extra=State=IDLE+DRAIN Reason=gpufleet: gpu.xid[gpu3]\n",
    # MAINTENANCE hidden by a later ' State=' in a comment
    "NodeName=gpu-1 State=IDLE+DRAIN+MAINTENANCE ThreadsPerCore=2 Reason=gpufleet: gpu.xid[gpu3] [root@t] "
    "Comment=was State=IDLE+DRAIN\n",
    "NodeName=gpu-1 State=IDLE+DRAIN+FAIL State=IDLE+DRAIN Reason=gpufleet: x\n",
    # Reason= only inside a comment (Slurm prints Comment= after Reason=)
    "NodeName=gpu-1 State=IDLE+DRAIN Comment=see Reason=gpufleet: gpu.xid[gpu3]\n",
]


@pytest.mark.parametrize("text", REPEATED_KEYS)
def test_agent_a_key_repeated_inside_free_text_leaves_the_node_alone_naming_why(text):
    """The last `Key=` won; now a key Slurm prints once seen twice (or Reason= after Comment=) makes
    the answer unreadable: the node is left alone."""
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, text)
        assert commands == [] and why.startswith("left alone") and "unreadable" in why, (healthy, commands, why)


@pytest.mark.parametrize("text", REPEATED_KEYS + [
    "NodeName=gpu-1 State=IDLE+DRAIN Reason=bad dimm [root@t] Extra=x Reason=gpufleet remediation: x\n",
    "NodeName=gpu-1 State=IDLE+DRAIN Reason=PSU swap Reason=gpufleet remediation: x [root@t]\n",
    "NodeName=gpu-1 State=IDLE+DRAIN+MAINTENANCE Reason=gpufleet remediation: x [root@t] Comment=x State=IDLE+DRAIN\n",
])
def test_remediation_a_key_repeated_inside_free_text_fails_the_step_naming_it(text):
    with pytest.raises(AnsibleFilterError, match="unreadable"):
        remediation_filters.remediation_slurm_state({"rc": 0, "stdout": text, "stderr": ""}, "gpu-1")


def test_a_reason_holding_key_like_text_is_read_whole_up_to_the_next_field_slurm_prints_after_it():
    fields = parse_show_node("NodeName=gpu-1 State=IDLE+DRAIN Reason=gpufleet: gpu.xid[gpu3] see x=1  "
                             "[root@t] Comment=a b Extra=c\n")
    assert fields["Reason"] == "gpufleet: gpu.xid[gpu3] see x=1  [root@t]"
    assert fields["Comment"] == "a b" and fields["Extra"] == "c" and "x" not in fields


def test_an_answer_for_another_node_is_refused_even_with_nodename_in_a_comment():
    """docs/remediation.md: 'an answer for another node fails the step'; the agent resumed gpu-1
    from gpu-2's record."""
    text = "NodeName=gpu-2 State=IDLE+DRAIN Reason=gpufleet: gpu.xid[gpu3] [root@t] Comment=NodeName=gpu-1\n"
    with pytest.raises(AgentError, match="NodeName=gpu-2"):
        slurm_commands("gpu-1", True, [], text)


def test_an_answer_found_by_the_node_host_name_is_not_acted_on():
    """Slurm answers `show node <NodeHostName>` with the node of that host (NodeName=n17); the agent
    updates by NodeName, so only an answer named the node asked about is acted on (docs/contracts.md:
    the node named is the node acted on; the agent's node_name must be the Slurm NodeName)."""
    text = "NodeName=n17 NodeHostName=gpu-1 State=IDLE+DRAIN Reason=gpufleet: gpu.xid[gpu3] [root@t]\n"
    with pytest.raises(AgentError, match="NodeName=n17, not this node .*node_name must be the Slurm NodeName"):
        slurm_commands("gpu-1", True, [], text)


@pytest.mark.parametrize("state", ["IDLE+drain", "idle+DRAIN", "Idle+Drain"])
def test_agent_a_lower_case_drain_is_not_a_drain_to_resume(state):
    """Slurm prints states in upper case (node_state_string_complete); the flags were read
    case-insensitively."""
    commands, why = slurm_commands("gpu-1", True, [], show(state, OURS))
    assert commands == [] and why.startswith("left alone"), why
    assert not remediation_view(state, MINE)["ours"]


@pytest.mark.parametrize("state", ["idle", "Idle", "mixed"])
def test_agent_a_state_slurm_never_prints_is_left_alone(state):
    commands, why = slurm_commands("gpu-1", False, FAILING, show(state, OURS))
    assert commands == [], why
    commands, why = slurm_commands("gpu-1", False, FAILING, show(state))
    assert commands == [] and "(not understood)" in why, why


KEYISH = st.lists(st.sampled_from(list("ab =\t\nRSCNx:") + ["Reason=", "State=", "Comment=", "NodeName=", "Extra=",
                                                              "gpufleet: ", "gpufleet remediation: ", "IDLE+DRAIN"]),
                  max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(KEYISH, KEYISH)
def test_any_free_text_in_the_reason_or_comment_never_makes_an_admins_drain_ours(reason, comment):
    """Whatever an admin writes in Reason= or Comment=, the answer is unreadable (left alone), or
    read with the admin's reason: never a resume, drain or re-reason by the agent."""
    text = "NodeName=gpu-1 State=IDLE+DRAIN ThreadsPerCore=2 Reason=bad dimm %s [root@t] Comment=%s\n" % (
        reason, comment)
    for healthy in (True, False):
        commands, why = slurm_commands("gpu-1", healthy, [] if healthy else FAILING, text)
        assert commands == [], (text, healthy, commands, why)
    try:
        view = remediation.slurm_state(text, "gpu-1")
    except remediation.PolicyError:
        return
    assert not view["ours"] and view["reason"].startswith("bad dimm"), view


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_answer_parses_to_fields_or_is_refused_never_a_crash(text):
    try:
        fields = parse_show_node(text)
    except ShowNodeError:
        return
    assert isinstance(fields, dict)


SUFFIXES = ["", "*", "~", "#", "%", "$", "@", "^", "-", "!"]
FLAGS = ["DRAIN", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWER_DOWN", "POWERED_DOWN",
         "POWERING_DOWN", "POWER_UP", "POWERING_UP", "INVALID_REG", "RESUME", "NOT_RESPONDING", "COMPLETING",
         "RESERVED", "CLOUD", "QUARANTINE", "fail", "drain", "Drain"]  # Slurm prints upper case only
OWNER = {"FAIL", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN",
         "POWER_UP", "POWERING_UP", "INVALID_REG", "RESUME"}
NEUTRAL = {"NOT_RESPONDING", "COMPLETING", "RESERVED", "CLOUD", "DRAIN"}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE"]), st.sampled_from(SUFFIXES),
       st.lists(st.sampled_from(FLAGS), max_size=4), st.sampled_from(["", " ", "\t"]),
       st.sampled_from([OURS, "GPUFLEET: x", "admin", "gpufleet remediation: x", None, ""]), st.booleans())
def test_the_agent_only_ever_changes_what_is_provably_its_own(base, suffix, flags, pad, reason, healthy):
    state = pad + base + suffix + "".join("+" + flag for flag in flags) + pad
    commands, why = agent_acts(state, reason, healthy)
    clean = (base in ("IDLE", "ALLOCATED", "MIXED") and suffix in ("", "*", "-")  # "-": PLANNED (neutral)
             and all(flag in NEUTRAL for flag in flags))
    for argv in commands:
        # whatever it did, it did only to a node that is provably its own or free
        assert clean, (state, reason, healthy, commands)
        if argv[3] == "State=RESUME":
            assert healthy and "DRAIN" in flags and reason == OURS, (state, reason, commands)
        else:
            assert not healthy and (reason in (None, "", OURS)), (state, reason, commands)


# ------------------------------------------------------------------------------------------------
# (3) the inventory check
# ------------------------------------------------------------------------------------------------
from ansible_collections.gpufleet.cluster.plugins.filter import inventory_problems as inventory_filters  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.inventory_check import (  # noqa: E402
    control_plane_ha_problems, tier_problems)

SHA = "sha256:" + "ab" * 32
GOOD_VARS = {
    "kubernetes_cni_calico_manifest_checksum": SHA,
    "kubernetes_addons_mpi_operator_manifest_checksum": SHA,
    "gpufleet_gpu_count": 8,
    "gpufleet_driver_branch": "580",
    "gpufleet_expected_hcas": 9,
    "gpufleet_link_layer": "any",
    "gpufleet_min_rate_gbps": 200,
    "gpufleet_peermem": True,
    "gpufleet_kubernetes_version": "1.35.4",
}
NODE_EXPECTATIONS = ("gpufleet_gpu_count", "gpufleet_driver_branch", "gpufleet_expected_hcas", "gpufleet_link_layer",
                     "gpufleet_min_rate_gbps")


def inventory(values=None, hosts=("cp1", "gpu1", "gpu2")):
    hostvars = {h: dict(((k, v) for k, v in GOOD_VARS.items() if h != hosts[0] or k not in NODE_EXPECTATIONS),
                        inventory_hostname=h, **(values or {})) for h in hosts}
    groups = {"all": list(hosts), "kube_control_plane": [hosts[0]], "kube_node": list(hosts[1:]),
              "gpu_nodes": list(hosts[1:]), "rdma_nodes": list(hosts[1:])}
    return hostvars, groups


def problems_of(values):
    return inventory_filters.inventory_problems(*inventory(values))


def test_the_base_inventory_is_good():
    assert problems_of({}) == []


HA = {"gpufleet_control_plane_ha": "haproxy_keepalived"}


@pytest.mark.parametrize("vip", [
    "0.0.0.0", "0.1.2.3", "127.0.0.1", "127.1.2.3", "224.0.0.18", "239.255.255.250", "169.254.0.1",
    "169.254.169.254", "255.255.255.255", "240.0.0.1", "::1", "fe80::1%eth0", "fe80::1", "::ffff:10.0.0.10",
    "::ffff:0a00:000a", "::10.0.0.10", "10.0.0.10/32", " 10.0.0.10", "10.0.0.10 ", "10.0.0.10\n", "１０.0.0.10",
    "10.0.0.１０", "010.000.000.010", "10.0.0", "10.0.0.10.", "0x0a.0.0.10", "167772170",
    167772170, 0, True, None, "", ["10.0.0.10"], {"address": "10.0.0.10"}, 10.0, b"\n\x00\x00\n",
])
def test_a_vip_no_node_can_reach_as_unicast_ipv4_is_refused_by_name(vip):
    problems = control_plane_ha_problems(dict(HA, gpufleet_control_plane_vip=vip))
    assert any("gpufleet_control_plane_vip" in p for p in problems), (vip, problems)
    everything = problems_of(dict(HA, gpufleet_control_plane_vip=vip, gpufleet_link_layer="ib"))
    assert any("gpufleet_control_plane_vip" in p for p in everything), (vip, everything)
    assert any(p.startswith("gpufleet_link_layer must be") for p in everything), everything


@pytest.mark.parametrize("vip", ["10.0.0.10", "100.64.0.1", "192.168.1.10", "172.16.0.1", "203.0.113.10",
                                 "8.8.8.8", "10.255.255.255"])
def test_a_unicast_vip_is_accepted(vip):
    assert control_plane_ha_problems(dict(HA, gpufleet_control_plane_vip=vip)) == []


@pytest.mark.parametrize("port", ["８４４３", "+8443", "0x20FB", "8_443", 8443.0, 8443.5,
                                  True, False, 0, -1, 65536, 2 ** 70, "", [8443], {"port": 8443}, float("nan"),
                                  "\u0668\u0664\u0664\u0663"])
def test_a_bad_vip_port_is_refused_by_name_never_a_crash(port):
    problems = problems_of(dict(HA, gpufleet_control_plane_vip="10.0.0.10", gpufleet_control_plane_vip_port=port,
                                gpufleet_link_layer="ib"))
    assert any("gpufleet_control_plane_vip_port" in p for p in problems), (port, problems)
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


@pytest.mark.parametrize("name", ["gpufleet_gpu_count", "gpufleet_expected_hcas", "gpufleet_hugepages_2m",
                                  "gpufleet_hugepages_1g", "gpufleet_cert_warn_days"])
@pytest.mark.parametrize("value", [True, False, 8.0, 8.5, "+8", "-1", -1, "８", "0x8", "8e0",
                                   float("nan"), float("inf"), [8], {"n": 8}, "", "\u00a08"])
def test_a_whole_number_of_the_wrong_form_is_refused_by_name(name, value):
    problems = problems_of({name: value, "gpufleet_link_layer": "ib"})
    assert any(p.startswith(name) for p in problems), (name, value, problems)
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


@pytest.mark.parametrize("value", [10 ** 100, 2 ** 64, "9" * 400])
def test_a_huge_whole_number_is_a_decision_never_an_exception(value):
    problems = problems_of({"gpufleet_gpu_count": value, "gpufleet_cert_warn_days": value})
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)


@pytest.mark.parametrize("value", ["1.35.4 ", " 1.35.4", 1.35, "1.35.4\n", "1.35.４", "1.35.4.1",
                                   ["1.35.4"], "", "1.35.-4", "01.35.4x"])
def test_a_kubernetes_version_of_the_wrong_form_is_refused_by_name(value):
    problems = problems_of({"gpufleet_kubernetes_version": value, "gpufleet_link_layer": "ib"})
    assert any("gpufleet_kubernetes_version" in p for p in problems), (value, problems)
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


@pytest.mark.parametrize("value", ["sha256:" + "ａｂ" * 32, "sha256:" + "ab" * 31, "sha256:" + "ab" * 32 + " ",
                                   " sha256:" + "ab" * 32, "sha256:" + "zz" * 32, "md5:" + "ab" * 16, 5,
                                   ["sha256:" + "ab" * 32], "sha256:" + "٠" * 64])
def test_a_bad_checksum_is_refused_by_name(value):
    problems = problems_of({"kubernetes_cni_calico_manifest_checksum": value, "gpufleet_link_layer": "ib"})
    assert any("kubernetes_cni_calico_manifest_checksum" in p for p in problems), (value, problems)
    assert any(p.startswith("gpufleet_link_layer must be") for p in problems), problems


@pytest.mark.parametrize("name", ["gpufleet_gpu_count", "gpufleet_expected_hcas", "gpufleet_hugepages_2m",
                                  "gpufleet_hugepages_1g", "gpufleet_cert_warn_days"])
@pytest.mark.parametrize("value", ["8 ", " 8", "8\n", "\t8"])
def test_a_whole_number_with_whitespace_is_refused_by_name(name, value):
    """'a whole number is an int or a string of 0-9': '8 ', ' 8', '8\\n' passed (stripped first)."""
    problems = problems_of({name: value})
    assert any(p.startswith(name) for p in problems), problems


@pytest.mark.parametrize("port", ["8443 ", " 8443", "8443\n"])
def test_a_vip_port_with_whitespace_is_refused_by_name(port):
    problems = problems_of(dict(HA, gpufleet_control_plane_vip="10.0.0.10", gpufleet_control_plane_vip_port=port))
    assert any(p.startswith("gpufleet_control_plane_vip_port must be") for p in problems), problems


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789 \t\n\r+-."), max_size=6))
def test_a_whole_number_string_is_accepted_exactly_when_it_is_digits_only(value):
    problems = tier_problems({"gpufleet_gpu_count": value})
    refused = any(p.startswith("gpufleet_gpu_count") for p in problems)
    assert refused != (value.isdigit() and value.isascii()), (value, problems)


@pytest.mark.parametrize("name, value", [
    ("kubernetes_cni_calico_manifest_checksum", "sha256:" + "ab" * 32 + "\n"),
    ("kubernetes_cni_calico_manifest_checksum", "sha256:" + "ab" * 32 + "\n\n"),
])
def test_a_checksum_with_a_final_newline_is_malformed(name, value):
    """A regex $ allowed the final newline of a YAML block scalar (now \\Z)."""
    problems = problems_of({name: value})
    assert any(name in p for p in problems), problems


def test_a_null_checksum_is_reported_naming_the_variable():
    """`kubernetes_cni_calico_manifest_checksum:` (null) overrides the role's pinned default with
    None in Ansible; the check read it as unset and reported nothing."""
    problems = problems_of({"kubernetes_cni_calico_manifest_checksum": None})
    assert [p for p in problems if p.startswith("kubernetes_cni_calico_manifest_checksum is required")
            and "null" in p], problems


def test_a_null_mlnx_ofed_checksum_is_reported_naming_the_variable():
    problems = problems_of({"rdma_stack_source": "mlnx_ofed", "rdma_stack_mlnx_ofed_sha256": None})
    assert any(p.startswith("rdma_stack_mlnx_ofed_sha256 is required") for p in problems), problems


@pytest.mark.parametrize("value, meant", [("v1.35.4", "1.35.4"), ("v1.35", "1.35"), ("V1.36.4", "1.36.4"),
                                          ("1.35.4\n", None), ("v1", None)])
def test_a_kubernetes_version_not_x_y_z_is_refused_with_the_version_meant(value, meant):
    problems = problems_of({"gpufleet_kubernetes_version": value})
    found = [p for p in problems if p.startswith("gpufleet_kubernetes_version must be")]
    assert found, problems
    assert ("(did you mean %r?)" % meant in found[0]) if meant else "did you mean" not in found[0], found


@pytest.mark.parametrize("hosts", [["ghost"], ["gpu1", "ghost"], [None], [5], [["gpu1"]], [{"a": 1}]])
def test_hosts_not_in_hostvars_are_a_problem_naming_them_never_an_exception(hosts):
    """A name hostvars lacks raised a raw KeyError (and [None, 'a'] a TypeError in sorted)."""
    hostvars, groups = inventory()
    problems = inventory_filters.inventory_problems(hostvars, groups, hosts=hosts)
    for host in hosts:
        if host != "gpu1":
            assert any(p.startswith("host %r (hosts) is not a host of the inventory" % (host,)) for p in problems), \
                problems


def test_a_group_listing_a_host_hostvars_lacks_is_a_problem_naming_it():
    hostvars, groups = inventory()
    groups["kube_node"].append("ghost")
    groups["rdma_nodes"].append("ghost")
    groups["kube_control_plane"].insert(0, "phantom")
    problems = inventory_filters.inventory_problems(hostvars, groups)
    assert any(p.startswith("host 'ghost' (group kube_node) is not a host of the inventory") for p in problems)
    assert any(p.startswith("host 'phantom' (group kube_control_plane)") for p in problems), problems


def test_every_problem_is_named_and_all_are_reported_at_once():
    values = {"gpufleet_gpu_count": "８", "gpufleet_expected_hcas": True, "gpufleet_min_rate_gbps": "nan",
              "gpufleet_kubernetes_version": "v1.35", "gpufleet_control_plane_ha": "haproxy_keepalived",
              "gpufleet_control_plane_vip": "224.0.0.18", "gpufleet_link_layer": "ib", "gpufleet_gpu_cont": 8,
              "kube_version": "v1.28.3", "kubernetes_version": "1.35.4", "nvidia_driver_brach": "580"}
    problems = problems_of(values)
    text = "\n".join(problems)
    for name in values:
        assert name in text, (name, problems)


NASTY = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 200, 2 ** 200), st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.sampled_from("0123456789.:%- \t\n\u00a0\u3000１８٣²ａf:"), max_size=16),
    st.sampled_from(["0.0.0.0", "127.0.0.1", "224.0.0.18", "::1", "fe80::1%eth0", "169.254.1.1",
                     "255.255.255.255", "100.64.0.1", "::ffff:10.0.0.10", "10.0.0.10"]),
    st.lists(st.text(max_size=4), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.binary(max_size=4), st.tuples(st.integers()), st.sets(st.integers(), max_size=2),
)
HA_NAMES = ["gpufleet_control_plane_ha", "gpufleet_control_plane_vip", "gpufleet_control_plane_vip_port",
            "kubernetes_control_plane_bind_port", "kubernetes_control_plane_endpoint", "gpufleet_gpu_count",
            "gpufleet_kubernetes_version", "gpufleet_driver_branch", "gpufleet_min_rate_gbps",
            "gpufleet_gpu_allocation", "gpufleet_remediation", "gpufleet_link_layer"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(HA_NAMES), NASTY, min_size=1, max_size=4))
def test_any_value_is_problems_never_an_exception(values):
    problems = problems_of(dict(values, gpufleet_expected_hcas="eight"))
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    assert any(p.startswith("gpufleet_expected_hcas must be") for p in problems), problems


# ------------------------------------------------------------------------------------------------
# (4) DRA: any failure on the DeviceTaintRule path falls back to the node taint
# ------------------------------------------------------------------------------------------------
from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent.agent_kube import KubePublisher  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import (  # noqa: E402
    ApiStatusError, KubeClient, KubeError)
from ansible_collections.gpufleet.cluster.plugins.modules import node_write  # noqa: E402
from fake_kube_api.server import FakeKubeAPI  # noqa: E402

KEY = gate.DEFAULT_TAINT_KEY
ECC = {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail",
       "message": "12 uncorrectable ECC errors since boot"}


@pytest.fixture
def api(tmp_path):
    with FakeKubeAPI(server_version="1.37.1") as server:
        server.add_node("gpu-1")
        server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def node_taints(api):
    return api.node("gpu-1")["spec"].get("taints") or []


def raiser(exc):
    def act():
        raise exc
    return act


def answer(value):
    return lambda: value


GOOD_RULE = {"metadata": {"name": "gpufleet-gpu-1-gpu-5", "resourceVersion": "7",
                          "annotations": {"gpufleet.io/node": "gpu-1"}},
             "spec": {"taint": {"key": KEY, "value": "gpu.temperature", "effect": "NoSchedule"}}}

LIST_FAILURES = [
    ("404 older API server", raiser(ApiStatusError(404, "the server could not find the requested resource"))),
    ("403", raiser(ApiStatusError(403, "forbidden"))),
    ("500", raiser(ApiStatusError(500, "internal error"))),
    ("503", raiser(ApiStatusError(503, "unavailable"))),
    ("timeout", raiser(socket.timeout("timed out"))),
    ("TimeoutError", raiser(TimeoutError("timed out"))),
    ("reset", raiser(ConnectionResetError(104, "Connection reset by peer"))),
    ("refused", raiser(ConnectionRefusedError(111, "Connection refused"))),
    ("KubeError", raiser(KubeError("unreachable"))),
    ("bad JSON", raiser(ValueError("Expecting value: line 1 column 1 (char 0)"))),
    ("OSError", raiser(OSError(113, "No route to host"))),
    ("null items item", answer({"items": [None, GOOD_RULE]})),
    ("int item", answer({"items": [5]})),
    ("list item", answer({"items": [[GOOD_RULE]]})),
    ("string item", answer({"items": ["gpufleet-gpu-1-gpu-3"]})),
    ("missing metadata", answer({"items": [{"spec": GOOD_RULE["spec"]}]})),
    ("empty item", answer({"items": [{}]})),
    ("metadata list", answer({"items": [{"metadata": [], "spec": GOOD_RULE["spec"]}]})),
    ("name null", answer({"items": [dict(GOOD_RULE, metadata={"name": None})]})),
    ("name list", answer({"items": [dict(GOOD_RULE, metadata={"name": ["x"]})]})),
    ("annotation value int", answer({"items": [dict(GOOD_RULE, metadata=dict(GOOD_RULE["metadata"],
                                                                             annotations={"gpufleet.io/node": 1}))]})),
    ("annotations str", answer({"items": [dict(GOOD_RULE, metadata=dict(GOOD_RULE["metadata"], annotations="x"))]})),
    ("spec str", answer({"items": [dict(GOOD_RULE, spec="x")]})),
    ("spec null", answer({"items": [dict(GOOD_RULE, spec=None)]})),
    ("taint list", answer({"items": [dict(GOOD_RULE, spec={"taint": []})]})),
    ("taint null", answer({"items": [dict(GOOD_RULE, spec={"taint": None})]})),
    ("items dict", answer({"items": {"a": GOOD_RULE}})),
    ("items int", answer({"items": 0})),
    ("no items", answer({"kind": "DeviceTaintRuleList", "metadata": {}})),
    ("Status object", answer({"kind": "Status", "code": 500, "status": "Failure"})),
    ("true", answer(True)),
    ("number", answer(0)),
    ("bytes", answer(b'{"items": []}')),
    ("html", answer("<html>504 Gateway Time-out</html>")),
]


class FaultyClient(KubeClient):
    """The double's client, except for the DeviceTaintRule requests of ``method``."""
    act = None
    method = "GET"

    def request(self, method, path, body=None, content_type=None, deadline=None):
        if method == self.method and "devicetaintrules" in path:
            return self.act()
        return super(FaultyClient, self).request(method, path, body, content_type, deadline)


def agent_with(api, act, method="GET"):
    client = FaultyClient(api.url, token=api.token, allow_plain_http=True)
    client.act, client.method = act, method
    return KubePublisher(client, "gpu-1", taint=True, clock=lambda: 1700000000.0, gpu_allocation="dra")


@pytest.mark.parametrize("name, act", LIST_FAILURES, ids=[f[0] for f in LIST_FAILURES])
def test_agent_any_list_failure_taints_the_node_instead(api, name, act):
    lines = agent_with(api, act).publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"], (name, lines)
    assert any(line.startswith("device taints not written (") and line.endswith("the node is tainted instead")
               for line in lines), lines


WRITE_FAILURES = [
    ("POST", raiser(ApiStatusError(500, "internal error"))),
    ("POST", raiser(ApiStatusError(403, "admission policy refused"))),
    ("POST", raiser(ApiStatusError(404, "not found"))),
    ("POST", raiser(socket.timeout("timed out"))),
    ("POST", raiser(ValueError("bad JSON"))),
]


@pytest.mark.parametrize("method, act", WRITE_FAILURES)
def test_agent_a_failed_rule_write_taints_the_node_instead(api, method, act):
    lines = agent_with(api, act, method).publish(False, [ECC])
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"], lines
    assert any("the node is tainted instead" in line for line in lines), lines


def test_agent_a_failed_update_taints_the_node_instead(api):
    agent_with(api, answer(None), "NONE").publish(False, [ECC])  # rule created
    assert sorted(api.device_taint_rules()) == ["gpufleet-gpu-1-gpu-3"]
    lines = agent_with(api, raiser(ApiStatusError(500, "boom")), "PUT").publish(
        False, [dict(ECC, id="gpu.xid", message="Xid 79")])
    assert [t["value"] for t in node_taints(api)] == ["gpu.xid"], lines


def test_agent_a_failed_delete_keeps_the_device_rule_listed_and_says_so(api):
    agent_with(api, answer(None), "NONE").publish(False, [ECC, {"id": "gpu.temperature", "target": "gpu5",
                                                                "status": "fail", "message": "hot"}])
    lines = agent_with(api, raiser(ApiStatusError(500, "boom")), "DELETE").publish(False, [ECC])
    # gpu5 recovered but its rule could not be deleted: still a failure of the rule path
    assert any("device taints not written (" in line for line in lines), lines
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"], lines


def node_write_with(api, monkeypatch, act, method="GET"):
    class Answering(object):
        def __init__(self, real):
            self.real = real

        def request(self, verb, path, body=None, content_type=None, deadline=None):
            if verb == method and "devicetaintrules" in path:
                return act()
            return self.real.request(verb, path, body, content_type, deadline)

        def __getattr__(self, name):
            return getattr(self.real, name)

    class Client(node_write.KubeconfigClient):
        def __enter__(self):
            return Answering(super(Client, self).__enter__())
    monkeypatch.setattr(node_write, "KubeconfigClient", Client)
    values = {name: spec.get("default") for name, spec in node_write.ARGUMENT_SPEC.items()}
    values.update(kubeconfig=api.kubeconfig_path, node="gpu-1", mode="health", allow_plain_http=True,
                  results={"checks": [ECC]}, gpu_allocation="dra")
    return node_write.run(values, check_mode=False)


@pytest.mark.parametrize("name, act", LIST_FAILURES, ids=[f[0] for f in LIST_FAILURES])
def test_node_write_any_list_failure_taints_the_node_instead(api, monkeypatch, name, act):
    result = node_write_with(api, monkeypatch, act)
    assert result["device_taints"]["error"], result
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"], result
    reason = api.node("gpu-1")["metadata"]["annotations"][KEY + "-reason"]
    assert reason.endswith("): the node is tainted instead"), reason


@pytest.mark.parametrize("method, act", WRITE_FAILURES)
def test_node_write_a_failed_rule_write_taints_the_node_instead(api, monkeypatch, method, act):
    result = node_write_with(api, monkeypatch, act, method)
    assert result["device_taints"]["error"], result
    assert [t["value"] for t in node_taints(api)] == ["gpu.ecc.volatile_uncorrectable"], result


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_agent_a_persistent_conflict_on_the_rule_taints_the_node_instead(api, method):
    if method == "PUT":
        agent_with(api, answer(None), "NONE").publish(False, [ECC])
    lines = agent_with(api, raiser(ApiStatusError(409, "conflict")), method).publish(
        False, [dict(ECC, id="gpu.xid", message="Xid 79")])
    assert [t["value"] for t in node_taints(api)] == ["gpu.xid"], lines
    assert any("the node is tainted instead" in line for line in lines), lines


# -- more role-state attacks that held ------------------------------------------------------------------
MULTIARCH = "libc6:amd64\tii \t2.36-9\nlibc6:i386\tii \t2.36-9\n"


def test_multiarch_lines_in_another_order_still_verify(tmp_path):
    state = tmp_path / "role-state.json"
    assert record(state, [], ["libc6"], out=MULTIARCH)["recorded"] == ["r"]
    assert verified(state, out="libc6:i386\tii \t2.36-9\nlibc6:amd64\tii \t2.36-9\n") is True
    assert verified(state, out="libc6:amd64\tii \t2.36-9\nlibc6:i386\tii \t2.36-10\n") is False


@pytest.mark.parametrize("after", [
    "libc6:amd64\tii \t2.36-10\nlibc6:i386\tii \t2.36-9\n",   # the amd64 copy upgraded
    "libc6:amd64\tii \t2.36-9\n",                             # the i386 copy removed
    "libc6:amd64\tii \t2.36-9\nlibc6:i386\tpn \t\n",          # the i386 copy purged
    MULTIARCH + "libc6:arm64\tii \t2.36-9\n",                 # a third architecture added
])
def test_a_multiarch_package_changed_in_one_architecture_is_drift(tmp_path, after):
    """dpkg-query prints one line per installed architecture; the arch qualifier was dropped and
    the last line won (fixed: packages are keyed as dpkg prints them, name:arch)."""
    state = tmp_path / "role-state.json"
    assert record(state, [], ["libc6"], out=MULTIARCH)["recorded"] == ["r"]
    assert json.loads(state.read_text())["roles"]["r"]["managed"]["packages"] == {
        "libc6:amd64": "2.36-9", "libc6:i386": "2.36-9"}
    assert verified(state, out=MULTIARCH) is True
    result = verify(state, out=after)["roles"]["r"]
    assert result["verified"] is False and all("libc6:" in line for line in result["drift"]), result


def test_rpm_multiarch_packages_are_each_an_entry():
    """rpm -q prints a line per installed architecture; the query asks for the arch (%{ARCH})."""
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "glibc:x86_64\t0:2.34-100.el9\nglibc:i686\t0:2.34-100.el9\n", ""
    found = role_stamps.package_versions(["glibc"], run, lambda name: "/usr/bin/rpm" if name == "rpm" else None)
    assert found == {"glibc:x86_64": "0:2.34-100.el9", "glibc:i686": "0:2.34-100.el9"}
    assert "%{NAME}:%{ARCH}" in calls[0][3]


def test_a_half_installed_package_is_never_verified(tmp_path):
    state = tmp_path / "role-state.json"
    assert record(state, [], ["kubelet"], out="kubelet\tii \t1.36.4-1.1\n")["recorded"] == ["r"]
    for status in ("iU ", "iF ", "iH ", "pn "):
        assert verified(state, out="kubelet\t%s\t1.36.4-1.1\n" % status) is False, status


def test_a_path_with_a_newline_is_stamped_and_verified(tmp_path):
    path = tmp_path / "we\nird.conf"
    path.write_text("x")
    state = tmp_path / "role-state.json"
    assert record(state, [path])["recorded"] == ["r"]
    assert verified(state) is True
    path.write_text("y")
    assert verified(state) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="lchown/chown to another user needs root")
def test_owner_of_the_link_or_of_what_it_points_to_is_drift(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    os.lchown(str(link), 4711, -1)
    assert verified(state) is False
    os.lchown(str(link), 0, -1)
    assert verified(state) is True
    os.chown(str(target), 4711, -1)
    assert verified(state) is False
    os.chown(str(target), 0, -1)
    os.chmod(str(target), 0o4644)
    assert verified(state) is False


def test_a_socket_in_place_of_the_file_is_drift(tmp_path):
    state, (path,) = stamped(tmp_path)
    path.unlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        assert verified(state) is False
    finally:
        sock.close()


def test_a_link_repointed_at_dev_zero_is_drift_and_never_read(tmp_path):
    target = managed_file(tmp_path, "real.conf")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    state, _ = stamped(tmp_path, [link])
    link.unlink()
    os.symlink("/dev/zero", str(link))
    assert verified(state) is False
    other = tmp_path / "other.conf"
    os.symlink("/dev/zero", str(other))
    assert record(tmp_path / "other.json", [other])["recorded"] == []


def test_a_parent_directory_swapped_is_judged_by_what_is_at_the_path(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    managed = sub / "f.conf"
    managed.write_text("q")
    state, _ = stamped(tmp_path, [managed])
    copy = tmp_path / "sub2"
    copy.mkdir()
    (copy / "f.conf").write_text("q")
    os.chmod(str(copy / "f.conf"), os.stat(str(managed)).st_mode & 0o7777)
    os.rename(str(sub), str(tmp_path / "sub-old"))
    os.symlink(str(copy), str(sub))
    assert verified(state) is True  # the same file is at the path
    (copy / "f.conf").write_text("evil")
    assert verified(state) is False


def test_paths_with_dot_segments_are_each_verified(tmp_path):
    managed = managed_file(tmp_path, "g.conf")
    state = tmp_path / "role-state.json"
    assert record(state, [str(tmp_path) + "/./g.conf", str(tmp_path) + "//g.conf"])["recorded"] == ["r"]
    assert verified(state) is True
    managed.write_text("changed\n")
    assert len(verify(state)["roles"]["r"]["drift"]) == 2
