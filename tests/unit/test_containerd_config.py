"""containerd_config: gpufleet's runtimes in a drop-in, config.toml left to its owners.

Formats the fixtures follow (re-typed and reduced, not copied):
- containerd 2.x ``containerd config default`` (config version 3): single-quoted table keys and
  strings, CRI runtimes under 'io.containerd.cri.v1.runtime' -- containerd's docs/cri/config.md,
  "Full configuration, In containerd 2.x" (github.com/containerd/containerd, commit 00142976);
  ``imports = ['/etc/containerd/conf.d/*.toml']`` in the default since containerd PR #12323.
- config version 2 (containerd 1.x) with a site's kata runtime: Debian bookworm's containerd 1.6
  layout, as tests/unit/test_toml_merge.py and the molecule scenario container_runtime/default.
- ``containerd --version`` lines: Debian bookworm's package (seen in the molecule container),
  Docker's containerd.io and upstream 2.x release binaries (module path .../containerd/v2).
Merge semantics checked below: containerd 2.x merges imported plugin tables key by key
(containerd PR #9982), containerd 1.x replaces a whole plugin table (containerd issue #5837).
"""

import os
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.containerd_config import (
    CONF_D_GLOB, SERVER_TABLES, ContainerdConfigError, classify, containerd_major, containerd_version,
    extract_tables, imports_of, plan)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.toml_merge import merge

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")

NVIDIA = {"runc": "", "nvidia": "/usr/bin/nvidia-container-runtime"}

V3_DEFAULT_22 = """\
version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
imports = ['/etc/containerd/conf.d/*.toml']

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10'

  [plugins.'io.containerd.cri.v1.runtime']
    enable_cdi = true
    cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          sandboxer = 'podsandbox'

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = ''
            SystemdCgroup = false

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dir = '/opt/cni/bin'
      conf_dir = '/etc/cni/net.d'
"""

# containerd 2.0/2.1 default: no imports line yet.
V3_DEFAULT_20 = V3_DEFAULT_22.replace("imports = ['/etc/containerd/conf.d/*.toml']\n", "")

V2_WITH_KATA = """\
version = 2
imports = ["/etc/containerd/site.d/*.toml"]

# site runtime, managed by another tool
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.example.com/pause:3.10"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
      runtime_type = "io.containerd.kata.v2"  # keep me
      privileged_without_host_devices = true
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""

VERSIONS = [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u1", 1),
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", 1),
    ("containerd github.com/containerd/containerd/v2 v2.2.0 1c4457e00facac03ce1d75f7b6777a7a851e5c41", 2),
    ("containerd containerd.io v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376", 2),
    ("2.3.0", 2),
]


@pytest.mark.parametrize("output,major", VERSIONS)
def test_containerd_major(output, major):
    assert containerd_major(output) == major


@pytest.mark.parametrize("output", ["", "containerd: command not found", "containerd github.com/x dev"])
def test_unknown_version_is_none_and_refused(output):
    assert containerd_major(output) is None
    with pytest.raises(ContainerdConfigError, match="version is unknown"):
        plan(V2_WITH_KATA, containerd_major(output), NVIDIA, "nvidia", True)


def deep_merge(base, extra):
    """containerd 2.x: imported tables merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_as_containerd(root_text, dropin_text, major):
    root, dropin = tomllib.loads(root_text), tomllib.loads(dropin_text)
    if major >= 2:
        return deep_merge(root, dropin)
    merged = dict(root)
    merged["plugins"] = dict(root.get("plugins", {}))
    merged["plugins"].update(dropin.get("plugins", {}))  # 1.x: whole plugin tables replaced
    return merged


def runtimes(config, version):
    plugin = "io.containerd.cri.v1.runtime" if version >= 3 else "io.containerd.grpc.v1.cri"
    return config["plugins"][plugin]["containerd"]


def apply(root_text, result):
    if result["imports"] is None:
        return root_text
    return merge(root_text, [], {"imports": result["imports"]})[0]


def test_containerd_22_version_3_minimal_dropin_and_no_root_change():
    result = plan(V3_DEFAULT_22, 2, NVIDIA, "nvidia", True)
    assert result["version"] == 3 and result["imports"] is None and not result["copied"]
    dropin = tomllib.loads(result["dropin"])
    assert dropin["version"] == 3
    assert set(dropin["plugins"]) == {"io.containerd.cri.v1.runtime"}
    merged = runtimes(load_as_containerd(V3_DEFAULT_22, result["dropin"], 2), 3)
    assert merged["default_runtime_name"] == "nvidia"
    assert merged["runtimes"]["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    # the root's own runc keys survive the key-by-key merge
    assert merged["runtimes"]["runc"]["sandboxer"] == "podsandbox"
    assert merged["runtimes"]["runc"]["options"]["SystemdCgroup"] is True


def test_containerd_20_version_3_gets_the_import_added_and_nothing_else():
    result = plan(V3_DEFAULT_20, 2, NVIDIA, "runc", True)
    assert result["imports"] == [CONF_D_GLOB]
    after = apply(V3_DEFAULT_20, result)
    assert after.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "") == V3_DEFAULT_20
    assert tomllib.loads(after)["imports"] == [CONF_D_GLOB]
    again = plan(after, 2, NVIDIA, "runc", True)
    assert again["imports"] is None and again["dropin"] == result["dropin"]


def test_version_2_on_containerd_2_stays_version_2_and_minimal():
    result = plan(V2_WITH_KATA, 2, NVIDIA, "nvidia", True)
    assert result["version"] == 2 and not result["copied"]
    assert tomllib.loads(result["dropin"])["version"] == 2
    assert "kata" not in result["dropin"]
    merged = runtimes(load_as_containerd(apply(V2_WITH_KATA, result), result["dropin"], 2), 2)
    assert set(merged["runtimes"]) == {"kata", "runc", "nvidia"}


def test_version_2_on_containerd_1_copies_the_cri_tables():
    result = plan(V2_WITH_KATA, 1, NVIDIA, "nvidia", True)
    assert result["copied"]
    assert result["imports"] == ["/etc/containerd/site.d/*.toml", CONF_D_GLOB]
    after = apply(V2_WITH_KATA, result)
    # the owner's file: one line changed (imports), comments and other tables untouched
    assert [line for line in after.splitlines() if line not in V2_WITH_KATA.splitlines()] == [
        'imports = ["/etc/containerd/site.d/*.toml", "/etc/containerd/conf.d/*.toml"]']
    config = load_as_containerd(after, result["dropin"], 1)
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.example.com/pause:3.10"
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert cri["containerd"]["runtimes"]["kata"]["runtime_type"] == "io.containerd.kata.v2"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert config["plugins"]["io.containerd.internal.v1.opt"]["path"] == "/var/lib/containerd/opt"
    assert "io.containerd.internal.v1.opt" not in result["dropin"]
    # the comment the site wrote in its table is carried with it
    assert "# keep me" in result["dropin"]


def test_containerd_1_rerun_after_another_installer_changed_its_table():
    first = plan(V2_WITH_KATA, 1, NVIDIA, "nvidia", True)
    after = apply(V2_WITH_KATA, first)
    assert plan(after, 1, NVIDIA, "nvidia", True)["dropin"] == first["dropin"]
    changed = after.replace('bin_dir = "/usr/lib/cni"', 'bin_dir = "/opt/cni/bin"')
    second = plan(changed, 1, NVIDIA, "nvidia", True)
    assert tomllib.loads(second["dropin"])["plugins"]["io.containerd.grpc.v1.cri"]["cni"]["bin_dir"] == "/opt/cni/bin"


def test_toolkit_off_writes_runc_only():
    result = plan(V3_DEFAULT_22, 2, {"runc": ""}, "runc", False)
    merged = runtimes(load_as_containerd(V3_DEFAULT_22, result["dropin"], 2), 3)
    assert "nvidia" not in merged["runtimes"] and merged["default_runtime_name"] == "runc"
    assert merged["runtimes"]["runc"]["options"]["SystemdCgroup"] is False


@pytest.mark.parametrize("text,major,message", [
    (None, 2, "is missing"),
    ('disabled_plugins = ["cri"]\n', 1, "is stub"),
    ('[plugins.cri]\n  sandbox_image = "x"\n', 1, "version 1"),
    (V3_DEFAULT_22, 1, "containerd-config-v3: config version 3 needs containerd 2.0 or later; this is containerd 1.x"),
    ("version = 4\n", (2, 2), "containerd-config-v4: config version 4 needs containerd 2.3 or later; "
                               "this is containerd 2.2, which reads config version 2 or 3"),
    ("version = 4\n", 1, "which reads config version 2:"),
    ("version = 5\n", (2, 4), "version 5 is not known to gpufleet [(]2, 3 or 4 expected[)]"),
])
def test_refusals_name_the_way_out(text, major, message):
    with pytest.raises(ContainerdConfigError, match=message):
        plan(text, major, NVIDIA, "nvidia", True)


def test_default_runtime_must_be_set():
    with pytest.raises(ContainerdConfigError, match="default runtime nvidia is not among"):
        plan(V3_DEFAULT_22, 2, {"runc": ""}, "nvidia", True)


def test_classify_and_imports_and_extract():
    assert classify(None) == "missing" and classify("") == "stub"
    assert classify("version = 2 # comment\n") == 2
    assert imports_of("imports = ['/a/*.toml', \"/b\\\\c.toml\"]\n") == ["/a/*.toml", "/b\\c.toml"]
    assert imports_of("version = 2\n") == []
    with pytest.raises(ContainerdConfigError, match="not a list"):
        imports_of('imports = "/a"\n')
    tables = extract_tables(V2_WITH_KATA, ["plugins", "io.containerd.grpc.v1.cri"])
    assert tables.splitlines()[0].strip() == '[plugins."io.containerd.grpc.v1.cri"]'
    assert "internal.v1.opt" not in tables


# Real `containerd config default` outputs (tests/fixtures/containerd/README.md names each source).
CAPTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "containerd")


def capture(name):
    with open(os.path.join(CAPTURES, name)) as handle:
        return handle.read()


@pytest.mark.parametrize("name, containerd, version, imports_added, copied", [
    ("containerd-1.7.23-default.toml", (1, 7), 2, True, True),
    ("containerd-1.7.23-default.toml", (2, 0), 2, True, False),   # 1.7's file kept after an upgrade to 2.x
    ("containerd-1.7.23-default.toml", (2, 3), 2, True, False),
    ("containerd-2.0.2-debian-default.toml", (2, 0), 3, True, False),
    ("containerd-2.0.2-debian-default.toml", (2, 3), 3, True, False),  # 2.0's file kept on the 2.3 LTS
    ("containerd-2.3.0-default.toml", (2, 3), 4, False, False),
    ("containerd-2.3.0-default.toml", (2, 4), 4, False, False),
])
def test_real_default_configs(name, containerd, version, imports_added, copied):
    root = capture(name)
    result = plan(root, containerd, NVIDIA, "nvidia", True)
    assert result["version"] == version and (result["imports"] is not None) == imports_added
    assert result["copied"] == copied
    dropin = tomllib.loads(result["dropin"])
    assert dropin["version"] == version  # a drop-in's version is always the root config's
    assert not set(dropin) & set(SERVER_TABLES)  # never a server-level field
    assert all(not key.startswith("io.containerd.server.") for key in dropin["plugins"])
    after = apply(root, result)
    assert tomllib.loads(after)["version"] == version  # the root config is kept in its version
    assert CONF_D_GLOB in imports_of(after)
    if not imports_added:
        assert after == root  # 2.3 lists conf.d already: config.toml is not touched at all
    merged = runtimes(load_as_containerd(after, result["dropin"], containerd[0]), version)
    assert merged["default_runtime_name"] == "nvidia"
    assert merged["runtimes"]["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert merged["runtimes"]["runc"]["runtime_type"] == "io.containerd.runc.v2"
    # a re-run against the changed root writes the same drop-in
    assert plan(after, containerd, NVIDIA, "nvidia", True)["dropin"] == result["dropin"]


def test_version_4_dropin_equals_version_3_but_for_the_version_line():
    v4 = plan(capture("containerd-2.3.0-default.toml"), (2, 3), NVIDIA, "nvidia", True)["dropin"]
    v3 = plan(capture("containerd-2.0.2-debian-default.toml"), (2, 3), NVIDIA, "nvidia", True)["dropin"]
    assert v4.replace("version = 4\n", "version = 3\n") == v3


def test_version_4_capture_has_the_server_fields_in_plugin_tables():
    """What the 2.3.0 capture shows: no top-level server tables, their fields under plugins."""
    v4 = tomllib.loads(capture("containerd-2.3.0-default.toml"))
    v3 = tomllib.loads(capture("containerd-2.0.2-debian-default.toml"))
    assert {"grpc", "ttrpc", "metrics"} <= set(v3) and not {"grpc", "ttrpc", "metrics"} & set(v4)
    assert v4["plugins"]["io.containerd.server.v1.grpc"]["address"] == "/run/containerd/containerd.sock"
    assert set(v4["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]) >= {"default_runtime_name", "runtimes"}


def test_containerd_1_7_copy_keeps_the_capture_cri_tables():
    result = plan(capture("containerd-1.7.23-default.toml"), (1, 7), NVIDIA, "nvidia", True)
    dropin = tomllib.loads(result["dropin"])
    cri = dropin["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.8" and cri["cni"]["bin_dir"] == "/opt/cni/bin"
    assert set(dropin["plugins"]) == {"io.containerd.grpc.v1.cri"}


@pytest.mark.parametrize("name, containerd", [
    ("containerd-2.3.0-default.toml", (2, 2)),
    ("containerd-2.3.0-default.toml", (2, 0)),
    ("containerd-2.3.0-default.toml", (1, 7)),
    ("containerd-2.0.2-debian-default.toml", (1, 7)),
])
def test_real_configs_refused_on_a_containerd_that_cannot_read_them(name, containerd):
    with pytest.raises(ContainerdConfigError, match="compatibility containerd-config-v"):
        plan(capture(name), containerd, NVIDIA, "nvidia", True)


@pytest.mark.parametrize("output, version", [
    ("containerd containerd.io 2.2.1 dea7da592f5d1d2b7755e3a161be07f43fad8f75", (2, 2)),
    ("containerd github.com/containerd/containerd/v2 v2.3.0 abc", (2, 3)),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1", (1, 6)),
    ("2.3", (2, 3)),
    ("", None),
])
def test_containerd_version(output, version):
    assert containerd_version(output) == version
