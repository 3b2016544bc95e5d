"""toml_merge: in-place table edits that keep every other line of the file."""

import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import (
    TomlMergeError,
    merge,
    merge_checked,
    same_value,
    split_lines,
)

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")

CRI = ["plugins", "io.containerd.grpc.v1.cri"]
RUNTIMES = CRI + ["containerd", "runtimes"]

# Debian bookworm's packaged /etc/containerd/config.toml plus a site's kata runtime.
DEBIAN_WITH_KATA = """\
version = 2

# site runtime, managed by another tool
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
      runtime_type = "io.containerd.kata.v2"  # keep me
      privileged_without_host_devices = true
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


def apply(text, *edits):
    changed = []
    for path, values in edits:
        text, keys = merge(text, path, values)
        changed += keys
    return text, changed


NVIDIA = [
    (RUNTIMES + ["runc"], {"runtime_type": "io.containerd.runc.v2"}),
    (RUNTIMES + ["runc", "options"], {"SystemdCgroup": True}),
    (RUNTIMES + ["nvidia"], {"runtime_type": "io.containerd.runc.v2"}),
    (RUNTIMES + ["nvidia", "options"],
     {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}),
    (CRI + ["containerd"], {"default_runtime_name": "nvidia"}),
]


def test_merge_keeps_other_tools_entries_and_comments():
    text, changed = apply(DEBIAN_WITH_KATA, *NVIDIA)
    assert changed
    doc = tomllib.loads(text)
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["kata"] == {"runtime_type": "io.containerd.kata.v2",
                                "privileged_without_host_devices": True}
    assert runtimes["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert doc["version"] == 2
    assert "# site runtime, managed by another tool" in text
    assert 'runtime_type = "io.containerd.kata.v2"  # keep me' in text
    # Every original line is still there, in order.
    original = [line for line in DEBIAN_WITH_KATA.splitlines() if line.strip()]
    kept = [line for line in text.splitlines() if line in original]
    assert kept == original


def test_second_merge_changes_nothing():
    once, _ = apply(DEBIAN_WITH_KATA, *NVIDIA)
    twice, changed = apply(once, *NVIDIA)
    assert changed == [] and twice == once


def test_existing_value_is_replaced_in_place_with_its_comment():
    text = '[a]\n  SystemdCgroup = false # was off\n  other = 1\n'
    new, changed = merge(text, ["a"], {"SystemdCgroup": True})
    assert changed == ["SystemdCgroup"]
    assert new == '[a]\n  SystemdCgroup = true # was off\n  other = 1\n'


def test_equivalent_values_are_not_rewritten():
    text = "[a]\nb = 'x'\nc = 1_000\nd = true\n"
    assert merge(text, ["a"], {"b": "x", "c": 1000, "d": True}) == (text, [])
    assert not same_value("1", True)


def test_multiline_array_and_brackets_in_strings():
    text = ('[a]\nlist = [\n  "[not.a.header]",\n  "x # y",\n]\nkey = "v"\n'
            "[b]\nz = 1\n")
    new, changed = merge(text, ["a"], {"key": "w", "list": ["q"]})
    assert changed == ["key", "list"]
    assert tomllib.loads(new) == {"a": {"list": ["q"], "key": "w"}, "b": {"z": 1}}


def test_new_table_in_empty_file_and_root_keys():
    new, _ = merge("", [], {"version": 2})
    new, _ = merge(new, ["plugins", "x.y"], {"k": "v"})
    assert tomllib.loads(new) == {"version": 2, "plugins": {"x.y": {"k": "v"}}}
    assert '[plugins."x.y"]' in new


def test_root_key_goes_before_the_first_table():
    new, _ = merge("# head\n[a]\nb = 1\n", [], {"version": 2})
    assert tomllib.loads(new) == {"version": 2, "a": {"b": 1}}


@pytest.mark.parametrize("text", [
    '[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes.nvidia.runtime_type = "x"\n',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nnvidia = { runtime_type = "x" }\n',
    '[[plugins]]\nx = 1\n',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n',
])
def test_definitions_it_cannot_edit_safely_are_refused(text):
    with pytest.raises(TomlMergeError):
        merge(text, RUNTIMES + ["nvidia"], {"runtime_type": "io.containerd.runc.v2"})


def test_bad_values_are_refused():
    with pytest.raises(TomlMergeError, match="values"):
        merge("", ["a"], {"b": {"nested": 1}})
    with pytest.raises(TomlMergeError, match="line 1"):
        merge('a = "unterminated\n', ["x"], {"k": 1})


# ---------------------------------------------------------------- the output is parsed and means the merge

def checked(text, path, values):
    return merge_checked(text, path, values, loads=tomllib.loads)


def test_checked_merge_means_the_original_plus_the_values():
    text, changed, note = checked(DEBIAN_WITH_KATA, RUNTIMES + ["nvidia"], {"runtime_type": "io.containerd.runc.v2"})
    assert changed == ["runtime_type"] and note is None
    doc = tomllib.loads(text)
    assert doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2"}


def test_a_second_identical_merge_is_a_no_op():
    values = {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True, "Weird": "a\x7f\u2028\x85b"}
    first, changed, _ = checked(DEBIAN_WITH_KATA, RUNTIMES + ["nvidia", "options"], values)
    assert sorted(changed) == ["BinaryName", "SystemdCgroup", "Weird"]
    second, changed, note = checked(first, RUNTIMES + ["nvidia", "options"], values)
    assert second == first and changed == [] and note is None


def test_already_there_in_another_spelling_is_a_no_op():
    text = "[a]\nname = 'x'\nn = 0x10\n"
    assert checked(text, ["a"], {"name": "x", "n": 16}) == (text, [], None)


def test_a_key_named_like_an_existing_sub_table_is_refused_by_name():
    text = "[a]\nx = 1\n[a.b]\ny = 2\n"
    with pytest.raises(TomlMergeError, match=r"key b of \[a\] names an existing table \[a\.b\]"):
        checked(text, ["a"], {"b": 1})


def test_a_table_path_through_a_value_is_refused_by_name():
    with pytest.raises(TomlMergeError, match=r"key a is a int, not a table"):
        checked("a = 1\n", ["a", "b"], {"c": 1})


@pytest.mark.parametrize("value", ["del\x7fhere", "bell\x07", "nul\x00", "esc\x1b[0m", "nel\x85line",
                                   "ls\u2028ps\u2029", "vt\x0bff\x0c", "fs\x1cgs\x1drs\x1e", "tab\tok",
                                   "quote\" back\\slash", "crlf\r\n"])
def test_control_characters_and_line_separators_are_escaped(value):
    text, changed, _ = checked("# top\n[t]\nkeep = 1\n", ["t"], {"s": value, "k\x7fey": value})
    assert sorted(changed) == ["k\x7fey", "s"]
    assert tomllib.loads(text)["t"] == {"keep": 1, "s": value, "k\x7fey": value}
    raw_line = [line for line in text.split("\n") if line.startswith("s = ")][0]
    for char in "\x7f\x85\u2028\u2029\x00\x07\x0b\x0c\x1b":
        assert char not in raw_line


def test_nel_and_line_separators_inside_existing_strings_and_comments_do_not_split_lines():
    text = ('title = "one\u2028two\x85three"  # comment with \u2028 and \x85 inside\n'
            "[t]\n# another \u2029 comment\nkeep = 'a\u2028b'\n")
    assert tomllib.loads(text)["title"] == "one\u2028two\x85three"
    assert split_lines(text)[0].startswith('title = "one\u2028two')
    new, changed, _ = checked(text, ["t"], {"added": True})
    assert changed == ["added"]
    doc = tomllib.loads(new)
    assert doc["title"] == "one\u2028two\x85three" and doc["t"] == {"keep": "a\u2028b", "added": True}
    assert new.startswith(text.split("\n", maxsplit=1)[0] + "\n")  # the first line kept byte for byte
    again, changed, _ = checked(new, ["t"], {"added": True})
    assert again == new and changed == []


def test_bool_is_not_one():
    text = "[t]\nflag = 1\n"
    new, changed, _ = checked(text, ["t"], {"flag": True})
    assert changed == ["flag"] and tomllib.loads(new)["t"]["flag"] is True


def test_invalid_original_is_refused_untouched():
    with pytest.raises(TomlMergeError, match="not valid TOML before the merge"):
        checked("[a]\nx = \n", ["a"], {"y": 1})


def test_a_result_that_would_not_parse_is_refused(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import toml_merge

    monkeypatch.setattr(toml_merge, "merge", lambda text, path, values: (text + "[a]\n", ["y"]))
    with pytest.raises(TomlMergeError, match=r"setting y in \[a\] would write invalid TOML"):
        toml_merge.merge_checked("[a]\nx = 1\n", ["a"], {"y": 1}, loads=tomllib.loads)


def test_a_result_of_another_meaning_is_refused_naming_the_key(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import toml_merge

    monkeypatch.setattr(toml_merge, "merge", lambda text, path, values: ("[a]\nx = 1\ny = 2\n", ["y"]))
    with pytest.raises(TomlMergeError, match=r"at key a\.y \(setting y in \[a\]\)"):
        toml_merge.merge_checked("[a]\nx = 1\n", ["a"], {"y": 1}, loads=tomllib.loads)


def test_without_a_parser_the_check_is_skipped_with_a_note(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import toml_merge

    monkeypatch.setattr(toml_merge, "toml_loads", lambda: None)
    text, changed, note = toml_merge.merge_checked("", ["a"], {"x": 1})
    assert changed == ["x"] and "not parsed back" in note and "tomli" in note
