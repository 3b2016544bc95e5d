# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts in the format of NVIDIA mig-parted's configuration, and MIG profile names.

A *layout* is the list of entries of one mig-parted config (``mig-configs: <name>: [...]``)::

    - devices: all            # or a list of NVML indices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}

``resolve_layout`` turns the tier's ``gpufleet_mig_layout`` (a config name, or such a list: an
explicit per-GPU layout) into a layout, looking names up in a mig-parted document (``version: v1``,
``mig-configs``; ``gpufleet_mig_configs``, default ``BUILTIN_MIG_CONFIGS``). ``layout_errors``
checks a layout; ``expected_for`` picks the entry of one GPU; ``profile_name`` names a GPU-instance
profile the way NVIDIA's go-nvlib (used by mig-parted and the device plugin) does.

Only GPU-instance profiles are compared (``3g.40gb``): a GPU instance counts once, with the full
compute instance mig-parted creates for it; compute-instance profiles (``1c.3g.40gb``) and
mig-parted's ``device-filter`` are refused with a clear error. ``parted_config`` is the mig-parted
configuration file gpufleet writes for a node (role gpu_mig applies it with ``nvidia-mig-parted
apply``, inside the rolling upgrade's drain), ``assert_state`` reads ``nvidia-mig-parted assert``.
"""

from __future__ import absolute_import, division, print_function

import math
import re

# The configs of mig-parted's published example (github.com/NVIDIA/mig-parted, examples/config.yaml:
# A100-40GB profile names), plus the same shapes for 80 GB boards (A100-80GB, H100-80GB: a slice
# is 10 GB there). ``custom-config`` of the example is left out (it names GPUs 0-7 individually).
BUILTIN_MIG_CONFIGS = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
        "all-2g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.10gb": 3}}],
        "all-3g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}],
        "all-balanced": [{"devices": "all", "mig-enabled": True,
                          "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "all-2g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}],
        "all-3g.40gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
        "all-balanced-80gb": [{"devices": "all", "mig-enabled": True,
                               "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
    },
}

# go-nvlib's profile name: <G>g.<GB>gb[+me] (pkg/nvlib/device/mig_profile.go)
PROFILE_RE = re.compile(r"^[1-8]g\.[0-9]+gb(\+me)?$")
_ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices")

# nvmlGpuInstanceProfile index -> (slices, attribute), NVML_GPU_INSTANCE_PROFILE_* of nvml.h; go-nvlib
# names the media-extension profiles (1_SLICE_REV1, 2_SLICE_REV1) "+me" and gives REV2 no attribute.
GI_PROFILES = {
    0x0: (1, ""), 0x1: (2, ""), 0x2: (3, ""), 0x3: (4, ""), 0x4: (7, ""), 0x5: (8, ""), 0x6: (6, ""),
    0x7: (1, "+me"), 0x8: (2, "+me"), 0x9: (1, ""),
}


def memory_gb(memory_size_mb, total_bytes):
    """The GB of a profile name, as go-nvlib's getMigMemorySizeGB: the profile's share of the
    board's memory rounded UP to eighths, times the board's memory in whole GiB (rounded up),
    rounded to the nearest integer. 9984 MiB of an 81559 MiB H100: ceil(0.1224 * 8) / 8 * 80 = 10."""
    one_mb, one_gb = 1024 * 1024, 1024 * 1024 * 1024
    fraction = float(memory_size_mb) * one_mb / float(total_bytes)
    fraction = math.ceil(fraction * 8) / 8.0
    total_gb = (int(total_bytes) + one_gb - 1) // one_gb
    return int(math.floor(fraction * total_gb + 0.5))  # Go's math.Round: half away from zero


def profile_name(profile_index, slice_count, memory_size_mb, total_bytes):
    """``3g.40gb`` for a GPU-instance profile (``profile_index``: the NVML_GPU_INSTANCE_PROFILE_*
    index the profile info was asked for; unknown indices keep the reported slice count)."""
    slices, attribute = GI_PROFILES.get(int(profile_index), (int(slice_count), ""))
    return "%dg.%dgb%s" % (slices, memory_gb(memory_size_mb, total_bytes), attribute)


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def layout_errors(layout, what):
    """Errors (strings naming ``what``) of a layout: a non-empty list of mig-parted entries."""
    if not isinstance(layout, list) or not layout:
        return ["%s must be a non-empty list of mig-parted entries (devices, mig-enabled, mig-devices), "
                "got %r" % (what, layout)]
    errors = []
    claimed = {}
    for number, entry in enumerate(layout):
        where = "%s[%d]" % (what, number)
        if not isinstance(entry, dict):
            errors.append("%s must be a dict, got %r" % (where, entry))
            continue
        unknown = sorted(set(entry) - set(_ENTRY_KEYS))
        if "device-filter" in unknown:
            errors.append("%s: device-filter is not supported (list the GPUs in devices)" % where)
        elif unknown:
            errors.append("%s: unknown key(s) %s (expected %s)" % (where, ", ".join(unknown), ", ".join(_ENTRY_KEYS)))
        devices = entry.get("devices")
        if devices == "all":
            keys = ["all"]
        elif isinstance(devices, list) and devices and all(_is_index(d) for d in devices):
            keys = devices
        else:
            errors.append("%s.devices must be all or a list of GPU indices (>= 0), got %r" % (where, devices))
            keys = []
        for key in keys:
            if key in claimed or (key == "all" and claimed) or "all" in claimed:
                prior = claimed.get(key, claimed.get("all", min(claimed.values())))
                errors.append("%s.devices: GPU %s is already in entry %d" % (where, key, prior))
            claimed.setdefault(key, number)
        enabled = entry.get("mig-enabled")
        if not isinstance(enabled, bool):
            errors.append("%s.mig-enabled must be true or false, got %r" % (where, enabled))
        profiles = entry.get("mig-devices", {})
        if not isinstance(profiles, dict):
            errors.append("%s.mig-devices must be a dict of profile name -> count, got %r" % (where, profiles))
            continue
        if profiles and enabled is False:
            errors.append("%s: mig-devices given with mig-enabled false" % where)
        for name, count in profiles.items():
            if not isinstance(name, str) or not PROFILE_RE.match(name):
                errors.append("%s.mig-devices: %r is not a GPU-instance profile name like 1g.10gb or "
                              "1g.10gb+me (compute-instance profiles such as 1c.3g.40gb are not checked)"
                              % (where, name))
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                errors.append("%s.mig-devices[%s] must be a count >= 0, got %r" % (where, name, count))
    return errors


def resolve_layout(layout, configs, what="gpufleet_mig_layout", configs_what="gpufleet_mig_configs"):
    """The layout (list of entries) for ``layout``: a config name of ``configs`` (a mig-parted
    document; None: BUILTIN_MIG_CONFIGS) or an explicit list. None stays None (not checked).
    Raises ValueError naming the variable on a bad value."""
    if layout is None or layout == "":
        return None
    if isinstance(layout, list):
        entries, origin = layout, what
    elif isinstance(layout, str):
        document = BUILTIN_MIG_CONFIGS if configs is None else configs
        table = document.get("mig-configs") if isinstance(document, dict) else None
        if not isinstance(table, dict):
            raise ValueError("%s must be a mig-parted configuration (version: v1, mig-configs: {<name>: "
                             "[entries]}), got %r" % (configs_what, document))
        if layout not in table:
            raise ValueError("%s: no config %r in %s (known: %s)" % (
                what, layout, configs_what if configs is not None else "the built-in set",
                ", ".join(sorted(table))))
        entries, origin = table[layout], "%s %s" % (configs_what, layout)
    else:
        raise ValueError("%s must be a config name or a list of mig-parted entries, got %r" % (what, layout))
    errors = layout_errors(entries, origin)
    if errors:
        raise ValueError("; ".join(errors))
    return entries


def expected_for(layout, index):
    """(mig_enabled, {profile: count}) the layout expects of GPU ``index``, or None (GPU not named)."""
    for entry in layout or []:
        devices = entry.get("devices")
        if devices == "all" or (isinstance(devices, list) and index in devices):
            profiles = dict((name, count) for name, count in (entry.get("mig-devices") or {}).items() if count)
            return bool(entry.get("mig-enabled")), profiles
    return None


def describe(profiles):
    """``2x 1g.10gb, 1x 3g.40gb`` (``none`` for no instance)."""
    return ", ".join("%dx %s" % (profiles[name], name) for name in sorted(profiles)) or "no GPU instance"


# The config name of an explicit (list) gpufleet_mig_layout in the file gpufleet writes.
EXPLICIT_CONFIG_NAME = "gpufleet-explicit"
# What nvidia-mig-parted prints (logrus, level fatal, exit 1) when the selected config is valid but
# not the live one (cmd/nvidia-mig-parted/assert/assert.go: "assertion failure: selected configuration
# not currently applied", capitalised by main.go's log.Fatal); and on success (exit 0).
ASSERT_MISMATCH = "assertion failure: selected configuration not currently applied"
ASSERT_APPLIED = "Selected MIG configuration currently applied"


def parted_config(layout, configs, what="gpufleet_mig_layout", configs_what="gpufleet_mig_configs"):
    """(config name, mig-parted document) for one node: ``{version: v1, mig-configs: {name: entries}}``
    with only the layout to apply (a config name keeps its name; an explicit list is named
    EXPLICIT_CONFIG_NAME). ValueError naming the variable when the layout is unset or bad."""
    entries = resolve_layout(layout, configs, what, configs_what)
    if entries is None:
        raise ValueError("%s is not set: there is no MIG layout to apply (a config name of %s, or a list of "
                         "mig-parted entries)" % (what, configs_what))
    name = layout if isinstance(layout, str) else EXPLICIT_CONFIG_NAME
    return name, {"version": "v1", "mig-configs": {name: [dict(entry) for entry in entries]}}


def assert_state(rc, stdout="", stderr=""):
    """``applied`` (exit 0), ``not-applied`` (exit 1 with mig-parted's assertion failure) of
    ``nvidia-mig-parted assert -f <file> -c <name>``; anything else is ValueError with the tool's last
    line (an unreadable file, NVML not loaded, ...): could not be measured, never taken as applied."""
    text = "%s\n%s" % (stdout or "", stderr or "")
    if rc == 0:
        return "applied"
    if rc == 1 and ASSERT_MISMATCH in text.lower():
        return "not-applied"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raise ValueError("nvidia-mig-parted assert exited %s%s" % (rc, (": " + lines[-1]) if lines else ""))
