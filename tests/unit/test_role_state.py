"""Converged-role skip (docs/performance.md): the digest of a role's inputs (lookup
role_inputs_hash), the roles a play skips (filters converged_roles / converged_plan) and the
verification of what a role manages on the node (module role_state, module_utils/core/role_stamps.py):
fail closed, a role is skipped only when its snapshot was verified."""

import json
import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from ansible.errors import AnsibleFilterError, AnsibleLookupError
from ansible_collections.gpufleet.cluster.plugins.filter.role_state import converged_plan, converged_roles
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import role_stamps
from ansible_collections.gpufleet.cluster.plugins.lookup import role_inputs_hash
from ansible_collections.gpufleet.cluster.plugins.lookup.role_inputs_hash import inputs_hash
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_default

ROLES = ["preflight", "node_pinning", "nvidia_driver", "container_runtime"]
TIER_KUBERNETES_VERSION = tier_default("gpufleet_kubernetes_version")  # the default, not written twice


class Templar(object):
    """Stands in for Ansible's templar: values are already plain here."""

    @staticmethod
    def template(value):
        return value


def host_vars(**changes):
    variables = {
        "inventory_hostname": "node1",
        "groups": {"all": ["node1"], "gpu_nodes": ["node1"]},
        "group_names": ["gpu_nodes"],
        "ansible_facts": {"kernel": "6.8.0-51-generic", "distribution": "Ubuntu",
                          "distribution_version": "24.04", "architecture": "x86_64", "uptime_seconds": 5},
        "nvidia_driver_branch": "580",
        "nvidia_driver_packages": ["nvidia-driver-580-server"],
        "gpufleet_gpu_count": 8,
        "container_runtime_engine": "containerd",
        "unrelated_variable": 1,
    }
    variables.update(changes)
    return variables


def digest(role="nvidia_driver", **changes):
    return inputs_hash(Templar(), host_vars(**changes), role)


def test_the_digest_is_stable_and_per_role():
    assert digest() == digest()
    assert len(digest()) == 64
    assert digest("nvidia_driver") != digest("container_runtime")


@pytest.mark.parametrize("changes", [
    {"nvidia_driver_branch": "570"},                               # the role's own input
    {"nvidia_driver_new_option": True},                            # a new input of the role
    {"gpufleet_gpu_count": 4},                                     # a tier value
    {"gpufleet_kubernetes_version": "1.35.2"},                     # a tier value set to other than its default
    {"group_names": []},                                           # the host left gpu_nodes
    {"ansible_facts": dict(host_vars()["ansible_facts"], kernel="6.8.0-52-generic")},   # rebooted into a new kernel
    {"ansible_facts": dict(host_vars()["ansible_facts"], distribution_version="24.10")},  # OS upgrade
])
def test_the_digest_changes_with_an_input(changes):
    assert digest(**changes) != digest()


@pytest.mark.parametrize("changes", [
    {"unrelated_variable": 2},
    {"container_runtime_engine": "docker"},                        # another role's input
    {"ansible_facts": dict(host_vars()["ansible_facts"], uptime_seconds=999)},   # a fact the digest ignores
    {"gpufleet_kubernetes_version": TIER_KUBERNETES_VERSION},     # the tier default, stated
])
def test_the_digest_ignores_what_is_not_an_input(changes):
    assert digest(**changes) == digest()


def test_the_digest_changes_with_the_role_files(tmp_path):
    collection = tmp_path / "collection"
    for part in ("roles/nvidia_driver/defaults", "roles/common_internal/tasks", "plugins"):
        (collection / part).mkdir(parents=True)
    (collection / "galaxy.yml").write_text("version: 0.3.0\n")
    defaults = collection / "roles/nvidia_driver/defaults/main.yml"
    defaults.write_text("nvidia_driver_branch: '580'\n")
    before = inputs_hash(Templar(), host_vars(), "nvidia_driver", collection=str(collection))
    defaults.write_text("nvidia_driver_branch: '570'\n")
    assert inputs_hash(Templar(), host_vars(), "nvidia_driver", collection=str(collection)) != before
    shutil.rmtree(str(collection / "plugins"))
    (collection / "plugins").mkdir()
    (collection / "plugins" / "new.py").write_text("")
    assert inputs_hash(Templar(), host_vars(), "nvidia_driver", collection=str(collection)) != before


@pytest.mark.parametrize("role", ["no_such_role", "../roles", ""])
def test_an_unknown_role_is_refused_by_name(role):
    with pytest.raises(AnsibleLookupError, match="is not a role of this collection"):
        inputs_hash(Templar(), host_vars(), role)


def test_the_collection_roles_are_found():
    assert os.path.isdir(os.path.join(role_inputs_hash.COLLECTION, "roles", "common_internal"))


def stamps(**digests):
    """Stamps as module role_state (action verify) returns them: verified, no drift."""
    return dict((role, {"inputs": value, "verified": True, "drift": []}) for role, value in digests.items())


def test_every_role_converged():
    now = dict((role, role.upper()) for role in ROLES)
    assert converged_roles(stamps(**now), ROLES, now) == ROLES


def test_a_changed_role_runs_and_so_does_everything_after_it():
    now = dict((role, role.upper()) for role in ROLES)
    recorded = dict(now, node_pinning="OLD")
    assert converged_roles(stamps(**recorded), ROLES, now) == ["preflight"]


def test_a_role_never_stamped_runs_with_everything_after_it():
    now = dict((role, role.upper()) for role in ROLES)
    recorded = dict(now)
    del recorded["nvidia_driver"]
    assert converged_roles(stamps(**recorded), ROLES, now) == ["preflight", "node_pinning"]


@pytest.mark.parametrize("recorded", [None, "garbage", [], {"preflight": "PREFLIGHT"}, {"preflight": {}},
                                      {"preflight": {"inputs": ""}},
                                      # a stamp of gpufleet 0.3 (inputs only) or not verified: never trusted
                                      {"preflight": {"inputs": "PREFLIGHT"}},
                                      {"preflight": {"inputs": "PREFLIGHT", "verified": "yes", "drift": []}}])
def test_no_or_malformed_stamps_converge_nothing(recorded):
    now = dict((role, role.upper()) for role in ROLES)
    assert converged_roles(recorded, ROLES, now) == []


def test_digests_must_be_a_dict():
    with pytest.raises(AnsibleFilterError, match="digests must be a dict"):
        converged_roles({}, ROLES, ["x"])


def test_a_drifted_role_runs_with_everything_after_it_and_the_plan_says_why():
    now = dict((role, role.upper()) for role in ROLES)
    recorded = stamps(**now)
    recorded["nvidia_driver"].update(verified=False, drift=["/etc/modprobe.d/blacklist-nouveau.conf missing"])
    plan = converged_plan(recorded, ROLES, now)
    assert plan["converged"] == ["preflight", "node_pinning"]
    assert plan["run"] == {"nvidia_driver": "drift: /etc/modprobe.d/blacklist-nouveau.conf missing",
                           "container_runtime": "after nvidia_driver"}
    assert plan["message"] == (
        "converged-role skip: skipped preflight, node_pinning (converged, verified on the node); "
        "runs nvidia_driver (drift: /etc/modprobe.d/blacklist-nouveau.conf missing), container_runtime (after nvidia_driver)")


def test_the_plan_names_a_missing_stamp_and_changed_inputs():
    now = {"preflight": "A", "node_pinning": "B"}
    assert converged_plan({}, ["preflight"], now)["run"] == {
        "preflight": "no stamp (first run, or an earlier run did not finish it)"}
    assert converged_plan(stamps(preflight="OLD", node_pinning="B"), ["preflight", "node_pinning"], now)["run"] == {
        "preflight": "inputs changed", "node_pinning": "after preflight"}


def test_drift_is_named_even_when_the_inputs_changed_too():
    recorded = {"kubernetes_prereqs": {"inputs": "OLD", "verified": False,
                                       "drift": ["/etc/sysctl.d/99-kubernetes.conf missing"]}}
    assert converged_plan(recorded, ["kubernetes_prereqs"], {"kubernetes_prereqs": "NEW"})["run"] == {
        "kubernetes_prereqs": "inputs changed; drift: /etc/sysctl.d/99-kubernetes.conf missing"}


# --- verification on the node (module_utils/core/role_stamps.py) ---------------------------------

# Real dpkg-query output (Debian 12, dpkg 1.21, this project's test machine: `dpkg-query -W -f
# '${binary:Package}\t${db:Status-Abbrev}\t${Version}\n' bash libc6 nonexistentpkg`, rc 1 and
# "dpkg-query: no packages found matching nonexistentpkg" on stderr); the "hi " line is the
# status of a package held with `apt-mark hold` (desired h, installed i), "rc " one removed with
# its configuration files left.
DPKG_OUT = ("bash\tii \t5.2.15-2+b8\n"
            "libc6:amd64\tii \t2.36-9+deb12u14\n"
            "kubelet\thi \t1.36.4-1.1\n"
            "nvidia-smi\trc \t535.261.03-1\n")
DPKG_ERR = "dpkg-query: no packages found matching nonexistentpkg\n"


def dpkg(rc=1, out=DPKG_OUT, err=DPKG_ERR):
    calls = []

    def run_command(argv):
        calls.append(argv)
        return rc, out, err
    run_command.calls = calls
    return run_command


def which_dpkg(name):
    return "/usr/bin/dpkg-query" if name == "dpkg-query" else None


def test_dpkg_query_output_is_read_with_holds_and_removed_packages():
    assert role_stamps.parse_dpkg(DPKG_OUT) == {"bash": "5.2.15-2+b8", "libc6:amd64": "2.36-9+deb12u14",
                                                "kubelet": "1.36.4-1.1 (held)", "nvidia-smi": None}


def test_rpm_output_is_read():
    # rpm -q --qf '%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n' bash nvidia-driver (rpm 4.16: a
    # missing package prints "package <name> is not installed" on stdout, rc = their count)
    out = "bash\t0:5.1.8-9.el9\npackage nvidia-driver is not installed\n"
    assert role_stamps.parse_rpm(out) == {"bash": "0:5.1.8-9.el9", "nvidia-driver": None}


def test_packages_are_read_in_one_call_and_an_unknown_one_is_absent():
    run = dpkg()
    assert role_stamps.package_versions(["bash", "nonexistentpkg", "bash"], run, which_dpkg) == {
        "bash": "5.2.15-2+b8", "nonexistentpkg": None}
    assert len(run.calls) == 1 and run.calls[0][-2:] == ["bash", "nonexistentpkg"]


@pytest.mark.parametrize("run, which, message", [
    (dpkg(rc=2, out="", err="dpkg-query: error: failed to open package info file"), which_dpkg,
     r"dpkg-query failed \(rc 2\): dpkg-query: error"),
    (dpkg(), lambda name: None, "no dpkg-query or rpm on this host"),
])
def test_a_package_database_that_does_not_answer_is_an_error(run, which, message):
    with pytest.raises(role_stamps.SnapshotError, match=message):
        role_stamps.package_versions(["bash"], run, which)


def recorded_state(tmp_path, packages=("bash",)):
    """A role converged: its files exist, the snapshot is taken."""
    managed = tmp_path / "blacklist-nouveau.conf"
    managed.write_text("blacklist nouveau\noptions nouveau modeset=0\n")
    os.chmod(str(managed), 0o644)
    absent = str(tmp_path / "never-there.conf")
    taken, missing = role_stamps.snapshots(
        {"nvidia_driver": {"files": [str(managed), absent], "packages": list(packages)}}, dpkg(), which_dpkg)
    assert missing == {}
    return managed, {"nvidia_driver": {"inputs": "D", "managed": taken["nvidia_driver"]}}


def test_a_role_as_it_converged_is_verified(tmp_path):
    _, stamp = recorded_state(tmp_path)
    assert stamp["nvidia_driver"]["managed"]["packages"] == {"bash": "5.2.15-2+b8"}
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": []}


def test_a_missing_file_is_drift(tmp_path):
    managed, stamp = recorded_state(tmp_path)
    managed.unlink()
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": ["%s missing" % managed]}


def test_changed_content_and_mode_are_drift(tmp_path):
    managed, stamp = recorded_state(tmp_path)
    managed.write_text("# edited by hand\n")
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {
        "nvidia_driver": ["%s changed (content differs from the converged run)" % managed]}
    _, stamp = recorded_state(tmp_path)
    os.chmod(str(managed), 0o600)
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {
        "nvidia_driver": ["%s mode 0600 (0644 when the role converged)" % managed]}


def test_a_file_that_appeared_is_drift(tmp_path):
    _, stamp = recorded_state(tmp_path)
    (tmp_path / "never-there.conf").write_text("x")
    assert role_stamps.drift(stamp, dpkg(), which_dpkg)["nvidia_driver"] == [
        "%s present (absent when the role converged)" % (tmp_path / "never-there.conf")]


def test_an_unreadable_file_is_drift_never_verified(tmp_path, monkeypatch):
    managed, stamp = recorded_state(tmp_path)

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(role_stamps, "_open", denied)
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {
        "nvidia_driver": ["%s cannot be read: Permission denied" % managed]}


def test_a_directory_in_place_of_a_file_is_drift(tmp_path):
    managed, stamp = recorded_state(tmp_path)
    managed.unlink()
    managed.mkdir()
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": ["%s is not a regular file" % managed]}


@pytest.mark.parametrize("out, message", [
    (DPKG_OUT.replace("bash\tii \t5.2.15-2+b8\n", ""), "package bash removed (5.2.15-2+b8 when the role converged)"),
    (DPKG_OUT.replace("5.2.15-2+b8", "5.2.15-2+b9"), "package bash now 5.2.15-2+b9 (5.2.15-2+b8 when the role converged)"),
])
def test_a_package_removed_or_changed_is_drift(tmp_path, out, message):
    _, stamp = recorded_state(tmp_path)
    assert role_stamps.drift(stamp, dpkg(out=out), which_dpkg) == {"nvidia_driver": [message]}


def test_a_package_database_that_does_not_answer_is_drift(tmp_path):
    _, stamp = recorded_state(tmp_path)
    assert role_stamps.drift(stamp, dpkg(), lambda name: None) == {
        "nvidia_driver": ["no dpkg-query or rpm on this host: packages cannot be checked"]}


@pytest.mark.parametrize("managed", [None, {"files": {}, "packages": {}}])
def test_a_stamp_without_a_snapshot_or_with_an_empty_one_is_drift(managed):
    drifted = role_stamps.drift({"r": {"inputs": "D", "managed": managed}}, dpkg(), which_dpkg)["r"]
    assert drifted == ["nothing recorded to verify on the node (the role declares no managed state)"]


@pytest.mark.parametrize("managed, field", [
    ("garbage", "roles.r.managed"),
    ({"files": ["x"], "packages": {}}, "roles.r.managed.files"),
    ({"files": {"/a": "sha"}, "packages": {}}, "roles.r.managed.files[/a]"),
    ({"files": {"relative": {"absent": True}}, "packages": {}}, "roles.r.managed.files"),
    ({"files": {"/a": {"absent": False}}, "packages": {}}, "roles.r.managed.files[/a]"),
    ({"files": {"/a": {"type": "file", "sha256": "0" * 64, "mode": "0644", "uid": 0}}, "packages": {}},
     "roles.r.managed.files[/a]"),
    ({"files": {"/a": {"type": "file", "sha256": "0" * 64, "mode": "0644", "uid": -1, "gid": 0}}, "packages": {}},
     "roles.r.managed.files[/a].uid"),
    ({"files": {"/a": {"type": "file", "sha256": "0" * 64, "mode": "644", "uid": 0, "gid": 0}}, "packages": {}},
     "roles.r.managed.files[/a].mode"),
    ({"files": {"/a": {"type": "file", "sha256": "xyz", "mode": "0644", "uid": 0, "gid": True}}, "packages": {}},
     "roles.r.managed.files[/a].gid"),
    ({"files": {"/a": {"type": "fifo", "sha256": "0" * 64, "mode": "0644", "uid": 0, "gid": 0}}, "packages": {}},
     "roles.r.managed.files[/a].type"),
    ({"files": {"/a": {"type": "symlink", "target": "/b", "uid": 0, "gid": 0,
                       "points_to": {"type": "symlink", "target": "/c", "uid": 0, "gid": 0, "points_to": {"absent": True}}}},
      "packages": {}}, "roles.r.managed.files[/a].points_to.type"),
    ({"files": {}, "packages": {"bash": 5}}, "roles.r.managed.packages[bash]"),
    ({"files": {}}, "roles.r.managed"),
])
def test_a_damaged_stamp_is_unreadable_naming_the_file_and_field(tmp_path, managed, field):
    """The one strict reader (parse_stamps over module_utils/core/records.py): a damaged stamp makes the
    whole file unreadable, so nothing is verified and the problem names the file and the field."""
    state = tmp_path / "role-state.json"
    state.write_text(json.dumps({"roles": {"ok": {"inputs": "D", "managed": None},
                                           "r": {"inputs": "D", "managed": managed}}}))
    result = role_stamps.role_state_work(FakeModule(action="verify", path=str(state)))
    assert result["roles"] == {}
    assert result["problem"].startswith("unreadable record %s (field %s)" % (state, field)), result["problem"]
    assert result["problem"].endswith("every role runs")


def test_a_file_record_of_an_older_gpufleet_is_read_but_never_verified(tmp_path):
    managed = tmp_path / "a.conf"
    managed.write_text("x")
    state = tmp_path / "role-state.json"
    state.write_text(json.dumps({"roles": {"r": {"inputs": "D", "managed": {
        "files": {str(managed): {"sha256": role_stamps.file_state(str(managed))["sha256"], "mode": "0644"}},
        "packages": {}}}, "old": {"inputs": "D"}}}))
    verified = role_stamps.role_state_work(FakeModule(action="verify", path=str(state)))["roles"]
    assert verified["r"]["drift"] == ["%s recorded by an older gpufleet (no file type, owner or group): not verified"
                                      % managed]
    assert verified["old"]["verified"] is False


def test_an_empty_declaration_gets_no_snapshot_and_never_verifies(tmp_path):
    state = str(tmp_path / "role-state.json")
    result = role_stamps.role_state_work(FakeModule(action="record", path=state, stamps={"r": "D"},
                                                    managed={"r": {"files": [], "packages": []}}))
    assert result["recorded"] == [] and "declares nothing" in result["unrecorded"]["r"]
    assert role_stamps.role_state_work(FakeModule(action="verify", path=state))["roles"]["r"]["verified"] is False


def test_a_file_replaced_by_a_symlink_to_an_identical_copy_is_drift(tmp_path):
    managed, stamp = recorded_state(tmp_path)
    copy = tmp_path / "copy.conf"
    shutil.copy2(str(managed), str(copy))
    managed.unlink()
    os.symlink(str(copy), str(managed))
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": [
        "%s is a symlink to %s (a regular file when the role converged)" % (managed, copy)]}


def test_a_managed_symlink_is_verified_with_what_it_points_to(tmp_path):
    target = tmp_path / "real.conf"
    target.write_text("a\n")
    link = tmp_path / "link.conf"
    os.symlink(str(target), str(link))
    taken, missing = role_stamps.snapshots({"r": {"files": [str(link)]}}, dpkg(), which_dpkg)
    assert missing == {} and taken["r"]["files"][str(link)]["type"] == "symlink"
    stamp = {"r": {"inputs": "D", "managed": taken["r"]}}
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"r": []}
    target.write_text("b\n")
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"r": [
        "%s -> %s changed (content differs from the converged run)" % (link, target)]}
    target.unlink()
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"r": ["%s -> %s missing" % (link, target)]}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_file_given_to_another_owner_or_group_is_drift(tmp_path):
    managed, stamp = recorded_state(tmp_path)
    os.chown(str(managed), 4711, -1)
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": [
        "%s owner 4711 (0 when the role converged)" % managed]}
    os.chown(str(managed), 0, 4712)
    assert role_stamps.drift(stamp, dpkg(), which_dpkg) == {"nvidia_driver": [
        "%s group 4712 (0 when the role converged)" % managed]}


@pytest.mark.parametrize("declared, reason", [
    (None, "the role declares nothing to verify on the node"),
    ({"files": ["relative/path"]}, "files must be absolute paths"),
    ({"files": "/etc/x"}, "files must be a list"),
    ({"services": ["x"]}, "unknown keys services"),
    ({"files": [], "packages": []}, "declares nothing to verify"),
    ({}, "declares nothing to verify"),
])
def test_a_role_without_a_usable_declaration_gets_no_snapshot(declared, reason):
    taken, missing = role_stamps.snapshots({"r": declared}, dpkg(), which_dpkg)
    assert taken == {} and reason in missing["r"]


def test_a_role_whose_file_cannot_be_read_at_record_time_gets_no_snapshot(tmp_path):
    (tmp_path / "d").mkdir()
    taken, missing = role_stamps.snapshots({"r": {"files": [str(tmp_path / "d")]}}, dpkg(), which_dpkg)
    assert taken == {} and missing == {"r": "%s is not a regular file" % (tmp_path / "d")}


class FakeModule(object):
    """Stands in for AnsibleModule: params, check mode, diff, run_command, get_bin_path."""

    def __init__(self, check_mode=False, **params):
        self.params = dict({"path": None, "roles": None, "stamps": None, "managed": {}, "forget": []}, **params)
        self.check_mode = check_mode
        self._diff = False

    @staticmethod
    def run_command(argv, environ_update=None):
        return dpkg()(argv)

    @staticmethod
    def get_bin_path(name):
        return which_dpkg(name)


def test_record_then_verify_on_the_node(tmp_path):
    state = str(tmp_path / "gpufleet" / "role-state.json")
    managed = tmp_path / "99-kubernetes.conf"
    managed.write_text("net.ipv4.ip_forward = 1\n")
    result = role_stamps.role_state_work(FakeModule(
        action="record", path=state, stamps={"kubernetes_prereqs": "D1", "node_tuning": "D2"},
        managed={"kubernetes_prereqs": {"files": [str(managed)], "packages": ["bash"]}, "node_tuning": ""}))
    assert result["changed"] and result["recorded"] == ["kubernetes_prereqs"]
    assert result["unrecorded"] == {"node_tuning": "the role declares nothing to verify on the node"}
    verified = role_stamps.role_state_work(FakeModule(action="verify", path=state))["roles"]
    assert verified["kubernetes_prereqs"] == {"inputs": "D1", "verified": True, "drift": []}
    assert verified["node_tuning"]["verified"] is False
    managed.unlink()
    verified = role_stamps.role_state_work(FakeModule(action="verify", path=state, roles=["kubernetes_prereqs"]))["roles"]
    assert verified == {"kubernetes_prereqs": {"inputs": "D1", "verified": False, "drift": ["%s missing" % managed]}}
    # the same record again changes nothing; forget removes one stamp and keeps the other
    managed.write_text("net.ipv4.ip_forward = 1\n")
    again = FakeModule(action="record", path=state, stamps={"kubernetes_prereqs": "D1", "node_tuning": "D2"},
                       managed={"kubernetes_prereqs": {"files": [str(managed)], "packages": ["bash"]}})
    assert role_stamps.role_state_work(again)["changed"] is False
    forget = FakeModule(action="record", path=state, forget=["node_tuning"], check_mode=True)
    assert role_stamps.role_state_work(forget)["changed"] is True
    assert "node_tuning" in json.loads(open(state).read())["roles"]  # check mode writes nothing
    forget.check_mode = False
    role_stamps.role_state_work(forget)
    assert list(json.loads(open(state).read())["roles"]) == ["kubernetes_prereqs"]


@pytest.mark.parametrize("content, problem", [
    (b"{not json", "not JSON"),
    (b"[]", "not an object but list"),
    (b'{"roles": {}, "roles": {}}', "duplicate key"),
    (b'{"roles": {"r": {"inputs": NaN}}}', "NaN is not a JSON number"),
])
def test_a_damaged_state_file_verifies_nothing_and_says_so(tmp_path, content, problem):
    state = tmp_path / "role-state.json"
    state.write_bytes(content)
    result = role_stamps.role_state_work(FakeModule(action="verify", path=str(state)))
    assert result["roles"] == {} and problem in result["problem"]


def test_no_state_file_is_no_stamp_and_nothing_is_created(tmp_path):
    state = str(tmp_path / "role-state.json")
    assert role_stamps.role_state_work(FakeModule(action="verify", path=state))["roles"] == {}
    assert role_stamps.role_state_work(FakeModule(action="record", path=state, forget=["x"]))["changed"] is False
    assert not os.path.exists(state)


def test_record_needs_a_digest_per_role(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure
    with pytest.raises(ModuleFailure, match="option stamps: r need an inputs digest"):
        role_stamps.role_state_work(FakeModule(action="record", path=str(tmp_path / "s.json"), stamps={"r": ""}))


# --- the verifier as a state machine: verified iff nothing changed since the stamp -----------------

class ManagedFiles(RuleBasedStateMachine):
    """Writes and changes of two managed files (content, mode, owner, group, replaced by a symlink to
    an identical copy, removed) with stamps taken in between: the stamp, written to the state file
    and read back by the strict reader, verifies iff what is at each path is as it was when the stamp
    was taken (type, link target, mode, owner, group, content), as a model of the files says."""

    def __init__(self):
        super(ManagedFiles, self).__init__()
        self.root = tempfile.mkdtemp(prefix="role-state-")
        self.paths = [os.path.join(self.root, "managed-%d.conf" % index) for index in range(2)]
        self.model = dict((path, ("absent",)) for path in self.paths)
        self.copies = 0
        self.stamped = None  # the model when the stamp was taken
        self.state = os.path.join(self.root, "role-state.json")

    def teardown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def _clear(self, path):
        if os.path.lexists(path):
            os.unlink(path)

    @rule(index=st.integers(0, 1), content=st.sampled_from([b"", b"a\n", b"b\n"]),
          mode=st.sampled_from([0o644, 0o600, 0o755]))
    def write(self, index, content, mode):
        path = self.paths[index]
        self._clear(path)
        with open(path, "wb") as handle:
            handle.write(content)
        os.chmod(path, mode)
        self.model[path] = ("file", content, mode, os.geteuid(), os.getegid())

    @rule(index=st.integers(0, 1), content=st.sampled_from([b"", b"a\n", b"b\n"]))
    def rewrite_in_place(self, index, content):
        path = self.paths[index]
        if self.model[path][0] != "file":
            return
        with open(path, "wb") as handle:  # keeps mode, owner and group
            handle.write(content)
        self.model[path] = ("file", content) + self.model[path][2:]

    @rule(index=st.integers(0, 1), mode=st.sampled_from([0o644, 0o600, 0o755, 0o4755]))
    def chmod(self, index, mode):
        path = self.paths[index]
        if self.model[path][0] == "file":
            os.chmod(path, mode)
            self.model[path] = self.model[path][:2] + (mode,) + self.model[path][3:]

    @precondition(lambda self: os.geteuid() == 0)
    @rule(index=st.integers(0, 1), uid=st.sampled_from([0, 4711]), gid=st.sampled_from([0, 4712]))
    def chown(self, index, uid, gid):
        path = self.paths[index]
        if self.model[path][0] == "file":
            os.chown(path, uid, gid)
            # chown(2) of a regular file clears its set-user-ID bit (and set-group-ID with group execute), also
            # for root, even when the owner does not change
            mode = self.model[path][2] & ~0o4000
            if mode & 0o010:
                mode &= ~0o2000
            self.model[path] = self.model[path][:2] + (mode, uid, gid)

    @rule(index=st.integers(0, 1))
    def replace_by_a_symlink_to_an_identical_copy(self, index):
        path = self.paths[index]
        if self.model[path][0] != "file":
            return
        self.copies += 1
        copy = os.path.join(self.root, "copy-%d.conf" % self.copies)
        shutil.copy2(path, copy)
        if os.geteuid() == 0:
            os.chown(copy, self.model[path][3], self.model[path][4])
        os.unlink(path)
        os.symlink(copy, path)
        self.model[path] = ("symlink", copy, self.model[path])

    @rule(index=st.integers(0, 1))
    def remove(self, index):
        self._clear(self.paths[index])
        self.model[self.paths[index]] = ("absent",)

    @rule()
    def stamp(self):
        result = role_stamps.role_state_work(FakeModule(action="record", path=self.state, stamps={"r": "D"},
                                                        managed={"r": {"files": list(self.paths)}}))
        assert result["recorded"] == ["r"], result
        self.stamped = dict(self.model)

    @invariant()
    def verified_iff_nothing_changed(self):
        if self.stamped is None:
            return
        verified = role_stamps.role_state_work(FakeModule(action="verify", path=self.state))
        assert verified["problem"] is None
        role = verified["roles"]["r"]
        assert role["verified"] is (self.model == self.stamped), (role, self.model, self.stamped)
        assert role["verified"] is (not role["drift"])


ManagedFiles.TestCase.settings = settings(max_examples=60, stateful_step_count=12, deadline=None)
TestManagedFiles = ManagedFiles.TestCase
