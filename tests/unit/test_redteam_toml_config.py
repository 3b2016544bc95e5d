"""Red team: containerd configuration editing (`toml_merge`, `containerd_dropin`) against real configs.

Written from the promises only (docs/contracts.md "/etc/containerd/conf.d/99-gpufleet.toml",
roles/container_runtime/README.md step 4, `ansible-doc` of both modules):
- the result is valid TOML that means the original with only the named keys set (tomllib checks);
- every other table, comment and line is kept, config.toml only ever gains the conf.d glob in `imports`;
- a second run changes nothing;
- input that cannot be edited safely is refused with an error naming the file/line, nothing half-written;
- `validate`: when containerd refuses, both files are put back as they were.

The real configs below are re-typed and reduced from the named sources (not copied files); template
placeholders are filled with ordinary values.
"""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import (
    TomlMergeError, merge, merge_checked)
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.containerd_config import (
    CONF_D_GLOB, ContainerdConfigError, check_containerd, imports_of, plan)

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVIDIA_BIN = "/usr/bin/nvidia-container-runtime"
RUNTIMES = {"runc": "", "nvidia": NVIDIA_BIN}

# --------------------------------------------------------------------------------------------- real configs

# NVIDIA/nvidia-container-toolkit tests/container/shared/etc/containerd/config_v2.toml (commit d34b3046):
# a containerd 1.x `config dump` as Docker's containerd writes it -- root keys sorted, so `version = 2`
# comes after the other root keys; an empty `[plugins]` table; `[timeouts]` with quoted dotted key names;
# runc still on io.containerd.runc.v1.
NVIDIA_CTK_E2E_V2 = """\
disabled_plugins = []
oom_score = 0
plugin_dir = ""
required_plugins = []
root = "/var/lib/containerd"
state = "/run/containerd"
version = 2

[cgroup]
  path = ""

[grpc]
  address = "/var/run/docker/containerd/containerd.sock"
  max_recv_message_size = 16777216

[plugins]

  [plugins."io.containerd.gc.v1.scheduler"]
    pause_threshold = 0.02
    schedule_delay = "0s"

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    sandbox_image = "k8s.gcr.io/pause:3.1"
    stream_idle_timeout = "4h0m0s"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/opt/cni/bin"
      conf_dir = "/etc/cni/net.d"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"

      [plugins."io.containerd.grpc.v1.cri".containerd.default_runtime]
        runtime_type = ""

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          privileged_without_host_devices = false
          runtime_type = "io.containerd.runc.v1"

    [plugins."io.containerd.grpc.v1.cri".registry]

      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]

        [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
          endpoint = ["https://registry-1.docker.io"]

  [plugins."io.containerd.runtime.v2.task"]
    platforms = ["linux/amd64"]

[timeouts]
  "io.containerd.timeout.shim.cleanup" = "5s"
  "io.containerd.timeout.task.state" = "2s"

[ttrpc]
  address = ""
"""

# awslabs/amazon-eks-ami nodeadm/internal/containerd/config.template.toml (commit 11ca068b), rendered:
# the child table [...cri".containerd] comes BEFORE its parent [...cri"].
EKS_V2 = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5"

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
"""

# awslabs/amazon-eks-ami nodeadm/internal/containerd/config2.template.toml (commit 3477d8f1), rendered for
# containerd 2.x: version 3; the same plugin spelt with single AND double quotes in different headers
# ([plugins.'io.containerd.cri.v1.images'] and [plugins."io.containerd.cri.v1.images".registry]).
EKS_V3 = """\
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images']
discard_unpacked_layers = true

[plugins.'io.containerd.cri.v1.images'.pinned_images]
sandbox = "localhost/kubernetes/pause"

[plugins."io.containerd.cri.v1.images".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
enable_cdi = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
BinaryName = "/usr/sbin/runc"
SystemdCgroup = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
"""

# k3s-io/k3s pkg/agent/templates/templates_linux.go ContainerdConfigTemplate (commit 06be48b6), rendered
# with a registry mirror + rewrite and k3s's detected nvidia ExtraRuntime: a generated-by comment first,
# runtime names written QUOTED (runtimes."nvidia"), rewrite patterns with `(`, `$`, `^` as quoted keys.
K3S_V2 = """\

# File generated by k3s. DO NOT EDIT. Use config.toml.tmpl instead.
version = 2

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/rancher/k3s/agent/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "10010"
  enable_selinux = false
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  sandbox_image = "rancher/mirrored-pause:3.6"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  disable_snapshot_annotations = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/var/lib/rancher/k3s/data/current/bin"
  conf_dir = "/var/lib/rancher/k3s/agent/etc/cni/net.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry.mirrors]

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror.example.com:5000"]

  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io".rewrite]

    "^rancher/(.*)" = "mirrored-rancher/$1"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia".options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""

# NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/container/runtime/containerd/config_test.go
# (commit d34b3046), "v2: existing config with nvidia runtime using old path already present": the
# config.toml `nvidia-ctk runtime configure --drop-in-config` leaves -- `imports` as the FIRST line,
# root keys re-sorted, a site's `custom` runtime kept.
NVIDIA_CTK_CONFIGURED_V2 = """\
imports = ["/etc/containerd/conf.d/*.toml"]
root = "/var/lib/containerd"
state = "/run/containerd"
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.custom]
          runtime_type = "io.containerd.custom.v1"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.custom.options]
            TypeUrl = "custom.runtime/options"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            BinaryName = "/usr/bin/runc"
            SystemdCgroup = true

  [plugins."io.containerd.internal.v1.opt"]
    path = "/opt/containerd"
"""

# apecloud/kubeblocks internal/cli/cmd/infrastructure/builder/template/containerd.config.toml.tpl, rendered:
# [timeouts] with quoted keys, [...cri".containerd] before [...cri"], server tables first.
KUBEBLOCKS_V2 = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"
  uid = 0
  gid = 0

[debug]
  level = "info"

[timeouts]
  "io.containerd.timeout.shim.cleanup" = "5s"
  "io.containerd.timeout.shim.load" = "5s"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri"]
stream_server_address = "127.0.0.1"
max_container_log_line_size = 262144
sandbox_image = "registry.k8s.io/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
"""

# Azure/AgentBaker aks-node-controller/parser/templates/containerd_no_GPU.toml.gtpl, rendered: negative
# oom_score, a second runc-based runtime `untrusted`, registry.headers with an array, [metrics] AFTER plugins.
AKS_V2 = """\
version = 2
oom_score = -999
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "mcr.microsoft.com/oss/kubernetes/pause:3.6"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "/usr/bin/runc"
      SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.untrusted]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.untrusted.options]
      BinaryName = "/usr/bin/runc"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".registry.headers]
    X-Meta-Source-Client = ["azure/aks"]
[metrics]
  address = "0.0.0.0:10257"
"""

REAL_V2 = {"nvidia-ctk-e2e": NVIDIA_CTK_E2E_V2, "eks-v2": EKS_V2, "k3s": K3S_V2,
           "nvidia-ctk-configured": NVIDIA_CTK_CONFIGURED_V2, "kubeblocks": KUBEBLOCKS_V2, "aks": AKS_V2}
REAL = dict(REAL_V2, **{"eks-v3": EKS_V3})

# ------------------------------------------------------------------------------------------------ helpers

CRI2 = ["plugins", "io.containerd.grpc.v1.cri"]
CRI3 = ["plugins", "io.containerd.cri.v1.runtime"]


def nvidia_edits(cri):
    """toml_merge edits that put the NVIDIA runtime in (the module's own EXAMPLES and README step 4)."""
    rts = cri + ["containerd", "runtimes"]
    return [
        (rts + ["runc"], {"runtime_type": "io.containerd.runc.v2"}),
        (rts + ["runc", "options"], {"SystemdCgroup": True}),
        (rts + ["nvidia"], {"runtime_type": "io.containerd.runc.v2"}),
        (rts + ["nvidia", "options"], {"BinaryName": NVIDIA_BIN, "SystemdCgroup": True}),
        (cri + ["containerd"], {"default_runtime_name": "nvidia"}),
    ]


def deep_set(doc, path, values):
    node = doc
    for part in path:
        node = node.setdefault(part, {})
    node.update(values)
    return doc


def deep_merge(base, extra):
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def expected_after(text, edits):
    doc = tomllib.loads(text)
    for path, values in edits:
        deep_set(doc, path, values)
    return doc


def apply_checked(text, edits):
    for path, values in edits:
        text, _, note = merge_checked(text, path, values, loads=tomllib.loads)
        assert note is None
    return text


def apply_unchecked(text, edits):
    """What runs on a target without tomllib/tomli (Ubuntu 22.04, RHEL 8): the scanner alone."""
    for path, values in edits:
        text, _ = merge(text, path, values)
    return text


def ours(cri, default="nvidia", cgroup=True):
    """gpufleet's keys (README step 4) as a nested dict under the CRI plugin."""
    return deep_set({}, cri, {"containerd": {
        "default_runtime_name": default,
        "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": cgroup}},
                     "nvidia": {"runtime_type": "io.containerd.runc.v2",
                                "options": {"BinaryName": NVIDIA_BIN, "SystemdCgroup": cgroup}}}}})


def as_containerd(root_text, dropin_text, major):
    """containerd's view: 2.x merges key by key (PR #9982), 1.x replaces whole plugin tables (#5837)."""
    root, dropin = tomllib.loads(root_text), tomllib.loads(dropin_text)
    if major >= 2:
        return deep_merge(root, dropin)
    merged = dict(root)
    merged["plugins"] = dict(root.get("plugins", {}))
    merged["plugins"].update(dropin.get("plugins", {}))
    return merged


def root_after(root_text, result):
    if result["imports"] is None:
        return root_text
    return merge_checked(root_text, [], {"imports": result["imports"]}, loads=tomllib.loads)[0]


def changed_key(line):
    return line.strip().startswith(("default_runtime_name", "runtime_type", "SystemdCgroup", "BinaryName"))


def is_subsequence(needles, haystack):
    rest = iter(haystack)
    return all(any(line == other for other in rest) for line in needles)


def new_lines(before, after):
    """Lines of `after` that are not lines of `before` (config.toml may gain only the imports line)."""
    old = before.splitlines()
    return [line for line in after.splitlines() if line not in old]


# ------------------------------------------------------------------ toml_merge on real configs of other tools


@pytest.mark.parametrize("name", sorted(REAL))
def test_toml_merge_real_configs_mean_original_plus_values_and_keep_every_line(name):
    text = REAL[name]
    cri = CRI3 if name == "eks-v3" else CRI2
    edits = nvidia_edits(cri)
    once = apply_checked(text, edits)
    assert tomllib.loads(once) == expected_after(text, edits)
    # every original line is still there, in order (only changed keys' lines may be rewritten)
    assert is_subsequence([line for line in text.splitlines() if line.strip() and not changed_key(line)],
                          once.splitlines())
    assert apply_checked(once, edits) == once  # second run: nothing


@pytest.mark.parametrize("name", sorted(REAL))
def test_toml_merge_scanner_alone_is_right_on_real_configs(name):
    """Targets without a TOML parser skip the check: the scanner's own answer must be right."""
    text = REAL[name]
    edits = nvidia_edits(CRI3 if name == "eks-v3" else CRI2)
    assert tomllib.loads(apply_unchecked(text, edits)) == expected_after(text, edits)


def test_k3s_quoted_runtime_name_is_the_same_table_not_a_second_one():
    """k3s writes runtimes."nvidia": setting runtimes.nvidia must edit that table, not add another."""
    once = apply_checked(K3S_V2, nvidia_edits(CRI2))
    assert once.count('runtimes."nvidia"]') == 1 and "runtimes.nvidia]" not in once


def test_eks_v3_mixed_quote_spellings_of_one_plugin_stay_one_table():
    once = apply_checked(EKS_V3, [(["plugins", "io.containerd.cri.v1.images", "registry"], {"config_path": "/x"})])
    doc = tomllib.loads(once)
    assert doc["plugins"]["io.containerd.cri.v1.images"]["registry"] == {"config_path": "/x"}
    assert doc["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "localhost/kubernetes/pause"


# ---------------------------------------------------------------------------------- hostile toml_merge input

TARGET = CRI2 + ["containerd", "runtimes", "nvidia", "options"]


@pytest.mark.parametrize("text", [
    # comments that look like the header and the key we set
    '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
    '# [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    '# BinaryName = "/wrong"\n'
    'default_runtime_name = "runc" # [x] = y\n',
    # multi-line basic string holding header-looking lines and key = value lines (an escaped \""" inside)
    '[plugins."io.containerd.grpc.v1.cri"]\n'
    'note = """\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    'BinaryName = "/wrong"\n\\"""\n"""\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nSystemdCgroup = false\n',
    # inline table and arrays with brackets elsewhere, key already set to another value with a comment
    '[plugins."io.containerd.grpc.v1.cri".registry]\nheaders = { X = ["[a]", "b = c"] }\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime" # gpu-operator\n'
    'SystemdCgroup = false\n',
    # multi-line array spanning a would-be header
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nArgs = [\n'
    '  "[plugins.x]",\n  # ] = [\n  "y",\n]\n',
])
def test_hostile_but_valid_input_means_original_plus_values(text):
    values = {"BinaryName": NVIDIA_BIN, "SystemdCgroup": True}
    once, _, note = merge_checked(text, TARGET, values, loads=tomllib.loads)
    assert note is None
    assert tomllib.loads(once) == deep_set(tomllib.loads(text), TARGET, values)
    assert merge_checked(once, TARGET, values, loads=tomllib.loads)[:2] == (once, [])
    assert tomllib.loads(merge(text, TARGET, values)[0]) == tomllib.loads(once)  # the scanner alone


@pytest.mark.parametrize("text, line", [
    # inline table defining the target
    ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
     'nvidia = { runtime_type = "io.containerd.runc.v2", options = { BinaryName = "/x" } }\n', 2),
    # dotted keys defining the target table from its parent
    ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
     'nvidia.options.BinaryName = "/x"\n', 2),
])
def test_definitions_it_cannot_edit_are_refused_naming_the_line(text, line):
    with pytest.raises(TomlMergeError, match=r"line %d\b" % line):
        merge_checked(text, TARGET, {"BinaryName": NVIDIA_BIN}, loads=tomllib.loads)


@pytest.mark.parametrize("text", [
    # duplicate table
    '[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "a"\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "b"\n',
    # duplicate key in the target table
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nBinaryName = "a"\nBinaryName = "b"\n',
    # not TOML at all: a daemon.json and a YAML file
    '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}\n',
    "version: 2\nplugins:\n  cri: {}\n",
    # array of tables on the path
    'version = 2\n[[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]]\nname = "nvidia"\n',
    # unterminated multi-line string
    '[a]\nx = """\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n',
])
def test_invalid_input_is_refused_not_edited(text):
    with pytest.raises(TomlMergeError):
        merge_checked(text, TARGET, {"BinaryName": NVIDIA_BIN}, loads=tomllib.loads)


def test_crlf_file_is_edited_in_meaning_and_idempotent():
    text = EKS_V2.replace("\n", "\r\n")
    edits = nvidia_edits(CRI2)
    once = apply_checked(text, edits)
    assert tomllib.loads(once) == expected_after(text, edits)
    assert apply_checked(once, edits) == once
    assert "\r\r" not in once


def test_dotted_keys_in_an_unrelated_table_do_not_block_nor_break_the_edit():
    """A dotted key defines *its* table; gpufleet's tables elsewhere must still be set (or refused by line)."""
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nregistry.config_path = "/etc/containerd/certs.d"\n'
            'cni.bin_dir = "/opt/cni/bin"\n')
    edits = nvidia_edits(CRI2)
    try:
        once = apply_checked(text, edits)
    except TomlMergeError as error:
        assert "line" in str(error)
        return
    assert tomllib.loads(once) == expected_after(text, edits)


def test_dotted_parent_definition_is_not_overwritten():
    """containerd.snapshotter as a dotted key defines [...cri".containerd]: adding a header for it would be
    a second definition (invalid TOML) -- must be refused or written as valid TOML meaning the merge."""
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd.snapshotter = "overlayfs"\n'
    try:
        once = apply_checked(text, nvidia_edits(CRI2))
    except TomlMergeError as error:
        assert "line" in str(error) or "containerd" in str(error)
        return
    assert tomllib.loads(once) == expected_after(text, nvidia_edits(CRI2))


# ---- property: hostile snippets sprinkled over a real config never change what the edit means

SNIPPETS = [
    '# [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]',
    '# default_runtime_name = "evil" ]] [[',
    'zz_basic_{i} = """\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "x"\n"""',
    "zz_literal_{i} = '''\n[[plugins]]\n  runtime_type = 'x' # not a comment\n'''",
    'zz_array_{i} = [\n  "[a.b]", # c = d\n  \'\'\'x\n]\'\'\',\n]',
    'zz_inline_{i} = {{ a = "[b]", c = "d = e" }}',
    '"zz quoted [key] {i}" = "v # w = [x]"',
    "'zz.literal.key.{i}' = 1",
    "",
]


def sprinkle(text, picks):
    """Insert snippets before table headers (and at the end): each lands inside a table, keeping TOML valid."""
    lines = text.split("\n")
    slots = [n for n, line in enumerate(lines) if line.lstrip().startswith("[")] + [len(lines)]
    for count, (slot, snippet) in enumerate(picks):
        where = slots[slot % len(slots)]
        block = SNIPPETS[snippet % len(SNIPPETS)].format(i=count).split("\n")
        lines[where:where] = block
        slots = [s + len(block) if s >= where else s for s in slots]
    return "\n".join(lines)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(REAL_V2)),
       picks=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6),
       crlf=st.booleans())
def test_property_hostile_snippets_over_real_configs(name, picks, crlf):
    text = sprinkle(REAL_V2[name], picks)
    if crlf:
        text = text.replace("\n", "\r\n")
    tomllib.loads(text)  # the input is valid TOML
    edits = nvidia_edits(CRI2)
    once = apply_checked(text, edits)
    assert tomllib.loads(once) == expected_after(text, edits)
    assert apply_checked(once, edits) == once
    assert tomllib.loads(apply_unchecked(text, edits)) == tomllib.loads(once)
    # containerd 1.x: the drop-in copies the CRI tables (snippets inside them included) and means them
    result = plan(text, 1, RUNTIMES, "nvidia", True)
    merged = as_containerd(root_after(text, result), result["dropin"], 1)
    assert merged["plugins"]["io.containerd.grpc.v1.cri"] == deep_merge(
        tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"], ours(CRI2)["plugins"]["io.containerd.grpc.v1.cri"])


# ------------------------------------------------------------------ containerd_dropin plan on real configs


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("containerd", [(1, 7), (2, 1), (2, 3)])
def test_dropin_on_real_configs_means_root_plus_ours_and_root_gains_only_imports(name, containerd):
    text = REAL[name]
    version = tomllib.loads(text)["version"]
    if version == 3 and containerd[0] == 1:
        with pytest.raises(ContainerdConfigError, match="containerd-config-v3"):
            plan(text, containerd, RUNTIMES, "nvidia", True)
        return
    cri = CRI3 if version >= 3 else CRI2
    result = plan(text, containerd, RUNTIMES, "nvidia", True)
    assert tomllib.loads(result["dropin"])["version"] == version
    after = root_after(text, result)
    root_doc = tomllib.loads(text)
    old_imports = root_doc.get("imports", [])
    assert tomllib.loads(after) == dict(root_doc, imports=old_imports + [g for g in [CONF_D_GLOB]
                                                                         if g not in old_imports])
    assert len(new_lines(text, after)) <= 1 and all("imports" in line for line in new_lines(text, after))
    merged = as_containerd(after, result["dropin"], containerd[0])
    assert merged == deep_merge(root_doc, dict(ours(cri), imports=tomllib.loads(after)["imports"]))
    again = plan(after, containerd, RUNTIMES, "nvidia", True)
    assert again["imports"] is None and again["dropin"] == result["dropin"]


@pytest.mark.parametrize("imports_text, expected", [
    ('imports = ["/etc/containerd/conf.d/*.toml"]', None),
    ("imports = ['/etc/containerd/conf.d/*.toml']", None),
    ('imports = ["/etc/containerd/conf.d/99-nvidia.toml"]', ["/etc/containerd/conf.d/99-nvidia.toml", CONF_D_GLOB]),
])
def test_imports_already_present_in_many_spellings(imports_text, expected):
    text = "version = 2\n" + imports_text + "\n\n" + EKS_V2.split("\n", 1)[1]
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)
    assert result["imports"] == expected
    after = root_after(text, result)
    assert CONF_D_GLOB in tomllib.loads(after)["imports"]
    assert tomllib.loads(after)["imports"].count(CONF_D_GLOB) == 1
    assert imports_of(after) == tomllib.loads(after)["imports"]
    if expected is None:
        assert after == text


PATH_CHARS = st.text(alphabet=st.sampled_from(list("/ab*.#],[ '\"\\=\u00e9x\t")), max_size=12)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.tuples(PATH_CHARS, st.booleans()), max_size=4), include=st.booleans(),
       comment=st.sampled_from(["", " # c ] x", "  #[a]=b"]), trailing=st.booleans())
def test_property_one_line_imports_read_as_tomllib_reads_them(items, include, comment, trailing):
    """imports on one line, basic or literal strings holding ] , # ' \\ =: read like tomllib, glob added once."""
    spelled = ["'%s'" % path if literal and "'" not in path and "\t" not in path else json.dumps(path)
               for path, literal in items]
    if include:
        spelled.append("'%s'" % CONF_D_GLOB)
    array = "[" + ", ".join(spelled) + ("," if trailing and spelled else "") + "]"
    text = "version = 2\nimports = %s%s\n\n%s" % (array, comment, EKS_V2.split("\n", 1)[1])
    doc = tomllib.loads(text)
    assert imports_of(text) == doc["imports"]
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)
    if CONF_D_GLOB in doc["imports"]:
        assert result["imports"] is None
    else:
        assert result["imports"] == doc["imports"] + [CONF_D_GLOB]
        assert tomllib.loads(root_after(text, result)) == dict(doc, imports=doc["imports"] + [CONF_D_GLOB])


@pytest.mark.parametrize("text", [
    'version = 2\nimports = "/etc/containerd/conf.d/*.toml"\n[plugins."io.containerd.grpc.v1.cri"]\nx = 1\n',
    'version = 2\nimports = {a = "/etc/containerd/conf.d/*.toml"}\n[plugins."io.containerd.grpc.v1.cri"]\nx = 1\n',
])
def test_imports_of_another_type_is_refused(text):
    with pytest.raises((ContainerdConfigError, TomlMergeError)):
        plan(text, (2, 1), RUNTIMES, "nvidia", True)


# ------------------------------------------------------------------------------- the modules, as Ansible runs them


def run_module(tmp_path, name, args, check=False):
    path = tmp_path / ("args-%s.json" % name)
    args = dict(args, _ansible_check_mode=check)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"), HOME=str(tmp_path),
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py"), str(path)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail("module %s printed no JSON: %r %r" % (name, proc.stdout[-2000:], proc.stderr[-2000:]))


def fake_containerd(tmp_path, exit_code, message=""):
    path = tmp_path / ("containerd-%d" % exit_code)
    path.write_text("#!/bin/sh\necho '%s' >&2\nexit %d\n" % (message, exit_code))
    path.chmod(0o755)
    return str(path)


def node(tmp_path, text, raw=None):
    etc = tmp_path / "etc"
    (etc / "conf.d").mkdir(parents=True, exist_ok=True)
    config = etc / "config.toml"
    if raw is not None:
        config.write_bytes(raw)
    elif text is not None:
        config.write_text(text)
    return {"config": str(config), "dropin": str(etc / "conf.d" / "99-gpufleet.toml"),
            "imports_glob": str(etc / "conf.d" / "*.toml"), "runtimes": RUNTIMES,
            "default_runtime": "nvidia"}


def snapshot(tmp_path):
    out = {}
    for root, _, files in os.walk(tmp_path / "etc"):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, tmp_path)] = handle.read()
    return out


def test_module_dropin_real_k3s_config_on_containerd_17_and_rerun(tmp_path):
    args = dict(node(tmp_path, K3S_V2), containerd_version="containerd containerd.io 1.7.27 05044ec0",
                containerd_binary=fake_containerd(tmp_path, 0))
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("changed") is True and out["imports_added"] and out["copied_cri_tables"], out
    after = (tmp_path / "etc" / "config.toml").read_text()
    assert new_lines(K3S_V2, after) == ['imports = ["%s"]' % args["imports_glob"]]
    dropin = (tmp_path / "etc" / "conf.d" / "99-gpufleet.toml").read_text()
    merged = as_containerd(after, dropin, 1)
    assert merged == deep_merge(tomllib.loads(K3S_V2), dict(ours(CRI2), imports=[args["imports_glob"]]))
    before = snapshot(tmp_path)
    again = run_module(tmp_path, "containerd_dropin", args)
    assert again.get("changed") is False and not again.get("failed"), again
    assert snapshot(tmp_path) == before


def test_module_dropin_crlf_config(tmp_path):
    text = EKS_V3.replace("\n", "\r\n")
    args = dict(node(tmp_path, None, raw=text.encode()), containerd_version="2.1.4", validate=False)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("changed") is True, out
    after = (tmp_path / "etc" / "config.toml").read_bytes().decode()
    assert tomllib.loads(after) == dict(tomllib.loads(text), imports=[args["imports_glob"]])
    before = snapshot(tmp_path)
    assert run_module(tmp_path, "containerd_dropin", args).get("changed") is False
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("raw", [
    b"",                                                        # empty
    b"version: 2\nplugins:\n  cri:\n    sandbox_image: x\n",     # YAML, not TOML
    b'{"default-runtime": "nvidia"}\n',                         # Docker's daemon.json in the wrong place
    b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"\nx = 1\n",   # broken header
    b"\xff\xfeversion = 2\n",                                   # UTF-16 BOM / not UTF-8
])
def test_module_dropin_refuses_what_it_cannot_edit_naming_the_file_and_writes_nothing(tmp_path, raw):
    args = dict(node(tmp_path, None, raw=raw), containerd_version="2.1.4", validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out
    assert args["config"] in out["msg"], out["msg"]
    assert "Traceback" not in out["msg"]
    assert snapshot(tmp_path) == before


def test_module_dropin_validate_refusal_puts_both_files_back(tmp_path):
    args = dict(node(tmp_path, EKS_V2), containerd_version="1.7.27",
                containerd_binary=fake_containerd(tmp_path, 1, "failed to load TOML: invalid"))
    dropin = tmp_path / "etc" / "conf.d" / "99-gpufleet.toml"
    dropin.write_text("# an older run's drop-in\nversion = 2\n")
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out
    assert snapshot(tmp_path) == before
    dropin.unlink()  # and without an earlier drop-in: none is left behind
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out
    assert snapshot(tmp_path) == before


def test_module_dropin_check_mode_writes_nothing(tmp_path):
    args = dict(node(tmp_path, AKS_V2), containerd_version="2.3.0", validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args, check=True)
    assert out.get("changed") is True and not out.get("failed"), out
    assert snapshot(tmp_path) == before


def test_module_dropin_bom_config_is_refused_or_edited_validly(tmp_path):
    raw = b"\xef\xbb\xbf" + EKS_V2.encode()
    args = dict(node(tmp_path, None, raw=raw), containerd_version="1.7.27", validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    if out.get("failed"):
        assert args["config"] in out["msg"] and snapshot(tmp_path) == before, out
        return
    after = (tmp_path / "etc" / "config.toml").read_bytes().decode("utf-8")
    assert tomllib.loads(after.lstrip("\ufeff"))["imports"] == [args["imports_glob"]]
    assert after.count("\ufeff") <= 1 and (after.startswith("\ufeff") or "\ufeff" not in after)


def test_module_toml_merge_refuses_non_toml_naming_the_file(tmp_path):
    path = tmp_path / "etc" / "config.toml"
    path.parent.mkdir()
    path.write_text("version: 2\nplugins: {}\n")
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "toml_merge", {"path": str(path), "table": TARGET, "values": {"BinaryName": NVIDIA_BIN}})
    assert out.get("failed") is True and str(path) in out["msg"], out
    assert snapshot(tmp_path) == before


# NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/container/runtime/containerd/config_test.go
# (commit d34b3046): the 99-nvidia.toml drop-in `nvidia-ctk runtime configure --drop-in-config` writes
# (version 2, CRI tables copied, enable_cdi), reduced.
NVIDIA_CTK_DROPIN_V2 = """\
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = true

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def test_module_dropin_leaves_other_tools_dropins_and_rewrites_a_hand_edited_own_one(tmp_path):
    args = dict(node(tmp_path, NVIDIA_CTK_CONFIGURED_V2.replace("/etc/containerd/conf.d/*.toml", "@GLOB@")),
                containerd_version="containerd github.com/containerd/containerd/v2 v2.1.4 abc", validate=False)
    config = tmp_path / "etc" / "config.toml"
    config.write_text(config.read_text().replace("@GLOB@", args["imports_glob"]))
    theirs = tmp_path / "etc" / "conf.d" / "99-nvidia.toml"
    theirs.write_text(NVIDIA_CTK_DROPIN_V2)
    root_before = config.read_bytes()
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("changed") is True and out["imports_added"] is False, out
    assert config.read_bytes() == root_before  # the glob is listed: config.toml is not touched at all
    assert theirs.read_text() == NVIDIA_CTK_DROPIN_V2
    ours_path = tmp_path / "etc" / "conf.d" / "99-gpufleet.toml"
    first = ours_path.read_text()
    ours_path.write_text(first.replace('"nvidia"', '"runc"') + "\n# hand edit [x] = y\n")
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("changed") is True, out
    assert ours_path.read_text() == first and theirs.read_text() == NVIDIA_CTK_DROPIN_V2


def test_module_dropin_glob_outside_the_dropin_directory_is_refused(tmp_path):
    args = dict(node(tmp_path, EKS_V2), containerd_version="1.7.27", validate=False,
                imports_glob=str(tmp_path / "elsewhere" / "*.toml"))
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out
    assert snapshot(tmp_path) == before


def test_module_toml_merge_validate_refusal_leaves_the_file(tmp_path):
    path = tmp_path / "etc" / "config.toml"
    path.parent.mkdir()
    path.write_text(K3S_V2)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "toml_merge", {"path": str(path), "table": TARGET, "values": {"BinaryName": "/x"},
                                              "validate": fake_containerd(tmp_path, 1, "bad") + " --config %s"})
    assert out.get("failed") is True, out
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------- red-team attacks that failed first (F1-F11), fixed
# Decisions (lead): a symlinked config is refused, not followed (F3); non-string imports entries (F2) and, on
# containerd 1.x, CRI settings outside the CRI [tables] (F7) are refused naming the line of config.toml.

F_TARGET = CRI2 + ["containerd", "runtimes", "nvidia", "options"]
F_HEADER = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
F_VALUES = {"BinaryName": NVIDIA_BIN, "SystemdCgroup": True}
F_BODY = EKS_V2.split("\n", 1)[1]


# F1: imports array on several lines
@pytest.mark.parametrize("imports_text, expected", [
    ('imports = [\n  "/etc/other/*.toml",  # site [x] = y\n  "/etc/containerd/conf.d/*.toml",\n]', None),
    ('imports = [\n  "/etc/other/*.toml", # ] "/etc/containerd/conf.d/*.toml"\n]', ["/etc/other/*.toml", CONF_D_GLOB]),
    ('imports = [\n]', [CONF_D_GLOB]),
    ('imports = [\n  "/etc/containerd/conf.d/*.toml",\n]', None),
])
def test_f1_multiline_imports_is_read_as_the_list_it_is(imports_text, expected):
    text = "version = 2\n" + imports_text + "\n\n" + F_BODY
    assert isinstance(tomllib.loads(text)["imports"], list)
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)  # was: ContainerdConfigError "imports is not a list: "
    assert result["imports"] == expected
    after = root_after(text, result)
    assert tomllib.loads(after)["imports"].count(CONF_D_GLOB) == 1
    assert tomllib.loads(result["root"]) == tomllib.loads(after)  # what the module writes means the same


def test_f1_multiline_imports_keeps_its_lines_and_comments_and_gets_the_glob_on_a_line_of_its_own():
    text = 'version = 2\nimports = [\n    "/etc/other/*.toml",  # site\n    "/etc/more/*.toml" # last\n]\n\n' + F_BODY
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)
    assert new_lines(text, result["root"]) == ['    "/etc/more/*.toml", # last', '    "%s",' % CONF_D_GLOB]
    assert tomllib.loads(result["root"]) == dict(tomllib.loads(text), imports=[
        "/etc/other/*.toml", "/etc/more/*.toml", CONF_D_GLOB])
    assert plan(result["root"], (2, 1), RUNTIMES, "nvidia", True)["imports"] is None


def basic(value):
    """A TOML basic string holding ``value`` with tabs and non-ASCII raw (as people write them)."""
    return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')


IMPORT_PATH = st.text(alphabet=st.sampled_from(list("/ab*.#],[ '\"\\=\u00e9x\t")), max_size=10)


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.tuples(IMPORT_PATH, st.booleans(), st.sampled_from(["", "  # c ] 'x", "#[a]"])),
                      max_size=4),
       include=st.booleans(), trailing=st.booleans(), closing=st.sampled_from(["]", "  ]", "] # end"]),
       same_line=st.booleans(), crlf=st.booleans())
def test_property_multiline_imports_read_as_tomllib_reads_them_glob_added_once(items, include, trailing, closing,
                                                                             same_line, crlf):
    """imports on several lines (entries, comments holding ] ' #, trailing comma or not, bracket after the last
    entry or on its own line): read like tomllib; the glob is added once and the rest of the file is kept."""
    spelled = [("'%s'" % path if literal and "'" not in path else basic(path), comment)
               for path, literal, comment in items]
    if include:
        spelled.append(("'%s'" % CONF_D_GLOB, ""))
    last = len(spelled) - 1
    body = ["  %s%s%s" % (entry, "," if number < last or trailing else "",
                          "" if number == last and same_line else comment)
            for number, (entry, comment) in enumerate(spelled)]
    if same_line and body:
        body[-1] = body[-1] + " ]"
    else:
        body.append(closing)
    text = "version = 2\nimports = [\n" + "\n".join(body) + "\n\n" + F_BODY
    if crlf:
        text = text.replace("\n", "\r\n")
    doc = tomllib.loads(text)
    assert imports_of(text) == doc["imports"]
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)
    if CONF_D_GLOB in doc["imports"]:
        assert result["imports"] is None and result["root"] == text
    else:
        assert tomllib.loads(result["root"]) == dict(doc, imports=doc["imports"] + [CONF_D_GLOB])
        if not same_line:  # every line but the closing bracket's is kept (a comma may be added after the entry)
            kept = [line.replace(",", "") for line in text.splitlines() if line.strip() != closing.strip()]
            assert is_subsequence(kept, [line.replace(",", "") for line in result["root"].splitlines()])
        assert plan(result["root"], (2, 1), RUNTIMES, "nvidia", True)["imports"] is None


# F2: non-string entries in imports are refused naming the line (never dropped)
@pytest.mark.parametrize("imports_text, line", [
    ("imports = [1, 2]", 2),
    ('imports = ["/etc/site.d/*.toml", 1]', 2),
    ('imports = [\n  "/etc/site.d/*.toml",\n  ["/nested/*.toml"],\n]', 4),
    ('imports = [\n  "/etc/site.d/*.toml",\n  {path = "/x/*.toml"},\n]', 4),
    ('imports = [\n  """/etc/multi/*.toml""",\n]', 3),
])
def test_f2_imports_with_other_items_is_refused_naming_the_line(imports_text, line):
    text = "version = 2\n" + imports_text + "\n\n" + F_BODY
    tomllib.loads(text)  # valid TOML: containerd would see these entries
    with pytest.raises(ContainerdConfigError, match=r"^line %d: imports holds" % line):
        plan(text, (2, 1), RUNTIMES, "nvidia", True)  # was: [1, 2] -> [glob]; ["/etc/site.d/*.toml", 1] -> 1 dropped


# F3: a symlinked file is refused, naming the link and its target; nothing written (decision: refuse, not follow)
def test_f3_containerd_dropin_refuses_a_symlinked_config_toml(tmp_path):
    args = dict(node(tmp_path, None), containerd_version="2.1.4", validate=False)
    owner = tmp_path / "etc" / "owner.toml"
    owner.write_text(KUBEBLOCKS_V2)
    os.symlink("owner.toml", args["config"])
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out  # was: config.toml replaced by a regular file
    assert args["config"] in out["msg"] and "owner.toml" in out["msg"] and "regular file" in out["msg"], out["msg"]
    assert os.path.islink(args["config"]) and snapshot(tmp_path) == before


def test_f3_containerd_dropin_refuses_a_symlinked_dropin(tmp_path):
    args = dict(node(tmp_path, EKS_V2), containerd_version="2.1.4", validate=False)
    elsewhere = tmp_path / "etc" / "elsewhere.toml"
    elsewhere.write_text("version = 2\n")
    os.symlink(str(elsewhere), args["dropin"])
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True and args["dropin"] in out["msg"] and str(elsewhere) in out["msg"], out
    assert os.path.islink(args["dropin"]) and snapshot(tmp_path) == before


def test_f3_toml_merge_refuses_a_symlinked_file(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    owner = etc / "owner.toml"
    owner.write_text(NVIDIA_CTK_E2E_V2)
    link = etc / "config.toml"
    os.symlink("owner.toml", link)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "toml_merge", {"path": str(link), "table": F_TARGET, "values": F_VALUES})
    assert out.get("failed") is True, out  # was: the link replaced by a regular file
    assert str(link) in out["msg"] and "owner.toml" in out["msg"], out["msg"]
    assert os.path.islink(link) and snapshot(tmp_path) == before


# F4: a multi-line string whose content ends in one or two quotes
@pytest.mark.parametrize("text", [
    F_HEADER + "Note = '''\n[[plugins]]\nBinaryName = 'x' # not a comment\n''''\nBinaryName = '/old'\n",
    F_HEADER + 'Note = """\nsay "hi""""\nBinaryName = "/old"\n',
    F_HEADER + "Note = '''\nx'''''\nBinaryName = '/old'\n",
    F_HEADER + 'Note = """a""""" # two\nBinaryName = "/old"\n',
    F_HEADER + "Note = ''''''\nBinaryName = '/old'\n",
])
def test_f4_multiline_string_ending_in_quotes_is_edited(text):
    assert tomllib.loads(text)  # valid TOML (the closing delimiter may be preceded by up to two quotes)
    once, _, _ = merge_checked(text, F_TARGET, F_VALUES, loads=tomllib.loads)  # was: "line 3: unterminated string"
    assert tomllib.loads(once) == deep_set(tomllib.loads(text), F_TARGET, F_VALUES)
    assert merge(text, F_TARGET, F_VALUES)[0] == once  # the scanner alone (no tomllib on the target) agrees


@settings(max_examples=150, deadline=None)
@given(quote=st.sampled_from(["'", '"']), inner=st.text(alphabet=st.sampled_from(list("ab #[]=\n'\"")), max_size=12),
       extra=st.integers(min_value=0, max_value=2))
def test_property_multiline_strings_with_quote_runs_scan_as_tomllib_reads_them(quote, inner, extra):
    text = F_HEADER + "Note = %s%s%s\nBinaryName = '/old'\n" % (quote * 3, inner, quote * (3 + extra))
    try:
        doc = tomllib.loads(text)
    except ValueError:
        return  # not TOML: refused before any edit (covered elsewhere)
    once, _, _ = merge_checked(text, F_TARGET, F_VALUES, loads=tomllib.loads)
    assert tomllib.loads(once) == deep_set(doc, F_TARGET, F_VALUES)


# F5: array-of-tables refusal names the line
def test_f5_array_of_tables_refusal_names_the_line():
    text = 'version = 2\n[[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]]\nname = "nvidia"\n'
    with pytest.raises(TomlMergeError, match=r"^line 2: key .* is a list, not a table"):
        merge_checked(text, F_TARGET, F_VALUES, loads=tomllib.loads)  # was: no line


def test_f5_value_in_the_way_is_refused_naming_its_line():
    with pytest.raises(TomlMergeError, match=r"^line 3: key a is a int, not a table"):
        merge_checked("# c\n\na = 1\n", ["a", "b"], {"c": 1}, loads=tomllib.loads)


# F6: nan elsewhere in the file does not block the merge
@pytest.mark.parametrize("nan", ["nan", "+nan", "-nan"])
def test_f6_nan_elsewhere_does_not_block_the_merge(nan):
    text = '[plugins."io.containerd.gc.v1.scheduler"]\npause_threshold = %s\n' % nan + F_HEADER
    once, _, _ = merge_checked(text, F_TARGET, F_VALUES, loads=tomllib.loads)  # was: "does not mean ... at key
    assert tomllib.loads(once)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"][
        "options"] == F_VALUES  # plugins.io.containerd.gc.v1.scheduler.pause_threshold" (nan != nan)
    assert [line.strip() for line in new_lines(text, once)] == ['BinaryName = "%s"' % NVIDIA_BIN,
                                                               "SystemdCgroup = true"]


def test_f6_nan_only_equals_nan():
    with pytest.raises(TomlMergeError):  # a merge that turned a number into nan is still caught
        merge_checked("[t]\nx = 1.0\n", ["t"], {"x": float("nan")}, loads=lambda text: {"t": {"x": 1.0}})


# F7: containerd 1.x, CRI settings as dotted keys / inline tables outside the CRI [tables]: refused naming the line
@pytest.mark.parametrize("text, line", [
    ('version = 2\nplugins."io.containerd.grpc.v1.cri".sandbox_image = "registry.example.com/pause:3.9"\n', 2),
    ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = { sandbox_image = "registry.example.com/pause:3.9" }\n', 3),
    ('version = 2\nplugins = { "io.containerd.grpc.v1.cri" = { sandbox_image = "x" } }\n', 2),
    ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri".cni.bin_dir = "/opt/cni/bin"\n'
     '[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "overlayfs"\n', 3),
])
def test_f7_containerd_1_refuses_cri_settings_it_would_not_copy(text, line):
    with pytest.raises(ContainerdConfigError, match=r"^line %d: the CRI plugin" % line):
        plan(text, (1, 7), RUNTIMES, "nvidia", True)  # was: the drop-in's CRI table silently lost them
    result = plan(text, (2, 1), RUNTIMES, "nvidia", True)  # 2.x merges key by key: nothing is lost
    merged = as_containerd(root_after(text, result), result["dropin"], 2)
    assert merged == deep_merge(tomllib.loads(text), dict(ours(CRI2), imports=[CONF_D_GLOB]))


# F8: a 1.x refusal names the line of config.toml, not of the drop-in being built
@pytest.mark.parametrize("text, line", [
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd.snapshotter = "overlayfs"\n', 3),
    ('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\nsnapshotter = "overlayfs"\n'
     'runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n', 5),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nx = 1\n'
     '[[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]]\nname = "a"\n', 4),
])
def test_f8_refusal_names_the_config_line(text, line):
    with pytest.raises(ContainerdConfigError, match=r"^line %d: " % line):
        plan(text, (1, 7), RUNTIMES, "nvidia", True)


def test_f8_module_refusal_names_the_config_line(tmp_path):
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd.snapshotter = "overlayfs"\n'
    args = dict(node(tmp_path, text), containerd_version="1.7.27", validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True and snapshot(tmp_path) == before, out
    assert "%s: line 3: " % args["config"] in out["msg"], out["msg"]  # was: "line 8" (a drop-in line)


# F9: a UTF-8 BOM is named as such, not called version 1
@pytest.mark.parametrize("version", ["1.7.27", "2.1.4"])
def test_f9_bom_is_refused_as_a_bom(tmp_path, version):
    args = dict(node(tmp_path, None, raw=b"\xef\xbb\xbf" + EKS_V2.encode()), containerd_version=version,
                validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True and snapshot(tmp_path) == before, out
    assert args["config"] in out["msg"] and "byte-order mark" in out["msg"], out["msg"]
    assert "version 1" not in out["msg"] and "migrate" not in out["msg"], out["msg"]


def test_f9_toml_merge_names_a_bom():
    with pytest.raises(TomlMergeError, match="byte-order mark"):
        merge_checked("\ufeff" + F_HEADER, F_TARGET, F_VALUES, loads=tomllib.loads)


# F10: validate with a containerd binary that cannot be run: nothing written, the option and path named
@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_f10_validate_that_cannot_run_writes_nothing(tmp_path, kind):
    """containerd installed from a tarball (/usr/local/bin/containerd, as containerd's getting-started and
    many install scripts do) while containerd_binary keeps its default /usr/bin/containerd."""
    binary = tmp_path / "usr" / "bin" / "containerd"
    if kind == "not executable":
        binary.parent.mkdir(parents=True)
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(0o644)
    args = dict(node(tmp_path, EKS_V2), containerd_version="1.7.27", validate=True, containerd_binary=str(binary))
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("failed") is True, out
    assert snapshot(tmp_path) == before  # was: "Error executing command." and both files left written
    assert "containerd_binary" in out["msg"] and str(binary) in out["msg"] and kind in out["msg"], out["msg"]


# F11: conf.d existing as a non-directory: clear failure naming it, nothing written
@pytest.mark.parametrize("check", [False, True])
def test_f11_dropin_directory_that_is_a_file_fails_cleanly(tmp_path, check):
    args = dict(node(tmp_path, EKS_V2), containerd_version="1.7.27", validate=False)
    conf_d = tmp_path / "etc" / "conf.d"
    conf_d.rmdir()
    conf_d.write_text("not a directory\n")
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args, check=check)  # was: FileExistsError traceback
    assert out.get("failed") is True and str(conf_d) in out["msg"] and "not a directory" in out["msg"], out
    assert snapshot(tmp_path) == before


# containerd_version of a major gpufleet does not know
def test_unknown_containerd_major_is_refused_naming_the_option(tmp_path):
    args = dict(node(tmp_path, EKS_V2), containerd_version="containerd v9.9.9", validate=False)
    before = snapshot(tmp_path)
    out = run_module(tmp_path, "containerd_dropin", args)  # was: a drop-in written as for containerd 2.x
    assert out.get("failed") is True and snapshot(tmp_path) == before, out
    assert out["msg"].startswith("containerd_version: ") and "9.9" in out["msg"], out["msg"]


@pytest.mark.parametrize("version", ["containerd v9.9.9", "containerd github.com/containerd/containerd/v3 v3.0.0 x",
                                     "0.2.9", "no version here", ""])
def test_check_containerd_refuses_unknown_majors_naming_the_option(version):
    with pytest.raises(ContainerdConfigError, match="^containerd_version: "):
        check_containerd(version)


@pytest.mark.parametrize("version, expected", [("containerd containerd.io 1.7.27 05044ec0", (1, 7)),
                                               ("containerd github.com/containerd/containerd/v2 v2.1.4 abc", (2, 1)),
                                               ("2.3.0", (2, 3))])
def test_check_containerd_knows_1_and_2(version, expected):
    assert check_containerd(version) == expected


def test_module_multiline_imports_written_keeping_its_lines(tmp_path):
    text = 'version = 2\nimports = [\n  "/etc/site.d/*.toml", # site\n]\n' + F_BODY
    args = dict(node(tmp_path, text), containerd_version="2.1.4", validate=False)
    out = run_module(tmp_path, "containerd_dropin", args)
    assert out.get("changed") is True and out["imports_added"], out
    after = (tmp_path / "etc" / "config.toml").read_text()
    assert new_lines(text, after) == ['  "%s",' % args["imports_glob"]]
    assert tomllib.loads(after)["imports"] == ["/etc/site.d/*.toml", args["imports_glob"]]
    before = snapshot(tmp_path)
    assert run_module(tmp_path, "containerd_dropin", args).get("changed") is False
    assert snapshot(tmp_path) == before
