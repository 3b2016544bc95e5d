"""A YAML error in an inventory's group_vars / host_vars is named with its file and line (issue 42, F1).

ansible-core 2.19's vars plugin host_group_vars re-raises a parse error as
``AnsibleParserError(to_native(e))`` (ansible/plugins/vars/host_group_vars.py, ``get_vars``), which drops
the file: a broken group_vars/all file ended every run with only "YAML parsing failed: ...", before the
inventory check could run. plugins/plugin_utils/inventory_files.py parses the files first, as
host_group_vars finds and parses them (Ansible's own DataLoader), and the lookup inventory_vars_parsed
fails naming each one. The end-to-end run is in tests/integration/test_redteam_day_two.py."""

import os
import shutil

import pytest
from ansible.errors import AnsibleLookupError, AnsibleParserError
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultLib, VaultSecret
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.lookup.inventory_vars_parsed import LookupModule
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_files

GROUPS = {"all": ["cp1", "gpu1"], "ungrouped": [], "kube_control_plane": ["cp1"], "gpu_nodes": ["gpu1"]}
UNCLOSED = "gpufleet_site_note: [unclosed\n"


def _site(tmp_path, files):
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    cp1:\n    gpu1:\n")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return str(tmp_path / "hosts.yml")


def _problems(tmp_path, files, groups=None, loader=None):
    return inventory_files.unparsable_vars_files(loader or DataLoader(), [_site(tmp_path, files)],
                                                 GROUPS if groups is None else groups)


def test_the_example_inventory_parses():
    source = os.path.join(REPO, "inventories", "example", "hosts.yml")
    groups = {"all": ["dgx-01.example.com"], "gpu_nodes": ["dgx-01.example.com"], "rdma_nodes": []}
    assert inventory_files.unparsable_vars_files(DataLoader(), [source], groups) == []


def test_a_broken_file_of_the_example_group_vars_all_is_named_with_its_line(tmp_path):
    # the red team's attack: a line appended to group_vars/all/site.yml of the shipped example
    site = tmp_path / "site"
    shutil.copytree(os.path.join(REPO, "inventories", "example"), str(site))
    broken = site / "group_vars" / "all" / "site.yml"
    lines = broken.read_text().count("\n")
    with open(str(broken), "a") as handle:
        handle.write(UNCLOSED)
    problems = inventory_files.unparsable_vars_files(DataLoader(), [str(site / "hosts.yml")], {"all": []})
    assert problems == [
        "%s (line %d, column 1): YAML parsing failed: While parsing a flow sequence did not find expected ',' or ']'"
        " (the flow sequence starts at line %d, column 21)." % (broken, lines + 2, lines + 1)]


@pytest.mark.parametrize("name", ["group_vars/all.yml", "group_vars/all", "group_vars/all/zz.yaml",
                                  "group_vars/gpu_nodes.json", "group_vars/kube_control_plane/deep/x.yml",
                                  "host_vars/gpu1.yml", "host_vars/localhost.yml"])
def test_every_file_ansible_reads_is_parsed(tmp_path, name):
    problems = _problems(tmp_path, {name: "a: 1\nb: \"unclosed\n"})
    assert len(problems) == 1 and problems[0].startswith(str(tmp_path / name) + " (line 3, column 1): "), problems
    assert "YAML parsing failed" in problems[0]


@pytest.mark.parametrize("name", ["group_vars/all.yml~", "group_vars/.all.yml.swp", "group_vars/all/.hidden.yml",
                                  "group_vars/all/notes.txt", "group_vars/spare_nodes.yml", "host_vars/gpu9.yml",
                                  "group_vars/gpu1.yml", "host_vars/gpu_nodes.yml"])
def test_files_ansible_does_not_read_are_left_alone(tmp_path, name):
    # backups, hidden files, other extensions, names of no group (group_vars) or host (host_vars)
    assert _problems(tmp_path, {name: UNCLOSED}) == []


def test_every_broken_file_at_once_in_the_order_ansible_reads_them(tmp_path):
    problems = _problems(tmp_path, {"group_vars/all/a.yml": UNCLOSED, "group_vars/all/b.yml": "ok: 1\n",
                                    "group_vars/gpu_nodes.yml": UNCLOSED, "host_vars/cp1.yml": "x: 'a\n"})
    assert [p.split(" (line")[0] for p in problems] == [
        str(tmp_path / "group_vars/all/a.yml"), str(tmp_path / "group_vars/gpu_nodes.yml"),
        str(tmp_path / "host_vars/cp1.yml")]


def test_sources_directories_and_host_lists(tmp_path):
    _site(tmp_path, {"group_vars/all.yml": UNCLOSED})
    loader = DataLoader()
    # a directory source is its own base; a host list has none; the playbook's directory counts too
    assert len(inventory_files.unparsable_vars_files(loader, [str(tmp_path)], GROUPS)) == 1
    assert inventory_files.unparsable_vars_files(loader, ["cp1,gpu1,", None, ""], GROUPS) == []
    assert len(inventory_files.unparsable_vars_files(loader, [], GROUPS, playbook_dir=str(tmp_path))) == 1
    # the same directory twice is read once
    assert len(inventory_files.unparsable_vars_files(loader, [str(tmp_path), str(tmp_path / "hosts.yml")],
                                                     GROUPS)) == 1


def test_vault_and_ansible_tags_are_not_parse_errors(tmp_path):
    vault = VaultLib([("default", VaultSecret(b"secret"))])
    files = {"group_vars/all/vault.yml": vault.encrypt(b"a: 1\n"),
             "group_vars/all/tags.yml": "b: !unsafe '{{ x }}'\nc: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3132\n",
             "group_vars/all/tabs.json": '{\n\t"d": 1\n}\n'}
    # without the password the vaulted file is left to Ansible; with it, it is read
    assert _problems(tmp_path, files) == []
    loader = DataLoader()
    loader.set_vault_secrets([("default", VaultSecret(b"secret"))])
    assert inventory_files.unparsable_vars_files(loader, [str(tmp_path / "hosts.yml")], GROUPS) == []


def test_the_lookup_returns_its_terms_or_fails_naming_every_file(tmp_path):
    lookup = LookupModule(loader=DataLoader())
    source = _site(tmp_path, {"group_vars/all.yml": "ok: 1\n"})
    variables = {"ansible_inventory_sources": [source], "groups": GROUPS, "playbook_dir": str(tmp_path / "pb")}
    assert lookup.run(["localhost:all"], variables=variables) == ["localhost:all"]
    _site(tmp_path, {"group_vars/all.yml": UNCLOSED, "host_vars/gpu1.yml": UNCLOSED})
    with pytest.raises(AnsibleLookupError) as info:
        lookup.run(["localhost:all"], variables=variables)
    message = str(info.value)
    assert message.startswith(str(tmp_path / "group_vars/all.yml") + " (line 2, column 1): "), message
    assert "\n%s (line 2, column 1): " % (tmp_path / "host_vars/gpu1.yml") in message, message
    assert message.endswith("2 inventory file(s) cannot be read. No host was contacted or changed."), message


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}'\"#!&*|>,?% \t\n")), max_size=60))
def test_any_file_parses_or_is_named_with_a_line(tmp_path_factory, text):
    """Any content: the file parses as Ansible parses it (no problem), or it is one problem that names
    the file first and Ansible refuses it too; never a crash."""
    base = tmp_path_factory.mktemp("any")
    path = str(base / "group_vars" / "all.yml")
    problems = _problems(base, {"group_vars/all.yml": text})
    try:
        DataLoader().load_from_file(path, cache="none")
        refused = False
    except AnsibleParserError:
        refused = True
    assert refused == bool(problems), (text, problems)
    if problems:
        assert len(problems) == 1 and problems[0].startswith(path + " (line "), problems
