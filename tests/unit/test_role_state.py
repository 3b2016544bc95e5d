"""Converged-role skip (docs/performance.md): the digest of a role's inputs (lookup
role_inputs_hash) and the roles a play skips (filter converged_roles)."""

import os
import shutil

import pytest
from ansible.errors import AnsibleFilterError, AnsibleLookupError
from ansible_collections.gpufleet.cluster.plugins.filter.role_state import converged_roles
from ansible_collections.gpufleet.cluster.plugins.lookup import role_inputs_hash
from ansible_collections.gpufleet.cluster.plugins.lookup.role_inputs_hash import inputs_hash

ROLES = ["preflight", "node_pinning", "nvidia_driver", "container_runtime"]


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
    {"gpufleet_kubernetes_version": "1.36.4"},                     # the tier default, stated
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
    return dict((role, {"inputs": value}) for role, value in digests.items())


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
                                      {"preflight": {"inputs": ""}}])
def test_no_or_malformed_stamps_converge_nothing(recorded):
    now = dict((role, role.upper()) for role in ROLES)
    assert converged_roles(recorded, ROLES, now) == []


def test_digests_must_be_a_dict():
    with pytest.raises(AnsibleFilterError, match="digests must be a dict"):
        converged_roles({}, ROLES, ["x"])
