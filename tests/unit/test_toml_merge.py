"""toml_merge: in-place table edits that keep every other line of the file."""

import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.toml_merge import (
    TomlMergeError,
    merge,
    same_value,
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
