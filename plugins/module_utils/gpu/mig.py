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

# MIG profile names, parsed exactly as NVIDIA go-nvlib parses them: parseMigProfile and its helpers
# in pkg/nvlib/device/mig_profile.go (github.com/NVIDIA/go-nvlib v0.12.0, read at commit 3c16156;
# vendored unchanged by mig-parted at bd7160f (the pinned release), whose config parser (pkg/types/mig_config.go
# AssertValidFormat) accepts a mig-devices key when this grammar does):
#   profile    = fields [ ("+" | "-") attributes ]      (not both "+" and "-")
#   fields     = <C>"c." <G>"g." <GB>"gb" | <G>"g." <GB>"gb"   (numbers: strconv.Atoi, ASCII digits)
#   attributes = attribute *( "," attribute )          (unique, non-empty, no surrounding space,
#                not starting with a digit, not starting/ending with ".", only [A-Za-z0-9.])
# On top of the grammar gpufleet refuses what can never name a GPU instance profile of a device
# (go-nvlib's NewMigProfile names every device profile): compute-instance names (<C>c.), slice
# counts other than the GPU_INSTANCE_PROFILE_* slices (1, 2, 3, 4, 6, 7, 8) and attributes other
# than those go-nvlib defines (AttributeMediaExtensions "me", AttributeMediaExtensionsAll "me.all",
# AttributeGraphics "gfx"), each allowed with "+" or "-" as the grammar allows.
PROFILE_ATTRIBUTES = ("me", "me.all", "gfx")
GI_SLICES = (1, 2, 3, 4, 6, 7, 8)
_GO_INT_MAX = 2 ** 63 - 1
_DIGITS = re.compile(r"[0-9]+\Z")  # used with match(): the whole text (not "$": it allows a final newline)
_ATTRIBUTE_CHARS = re.compile(r"[A-Za-z0-9.]+\Z")
# Go's strings.TrimSpace: unicode.IsSpace (ASCII space, \t\n\v\f\r, U+0085, U+00A0, category Zs/Zl/Zp).
_GO_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000"


class ProfileError(ValueError):
    """A MIG profile name go-nvlib's parser refuses (the message is go-nvlib's)."""


def _field(text, suffix):
    # parseMigProfileField
    if text.strip(_GO_SPACE) != text:
        raise ProfileError("leading or trailing spaces on '%%d%s'" % suffix)
    if not text.endswith(suffix):
        raise ProfileError("missing '%s' from '%%d%s'" % (suffix, suffix))
    number = text[:-len(suffix)]
    if not _DIGITS.match(number) or int(number) > _GO_INT_MAX:
        raise ProfileError("malformed number in '%%d%s'" % suffix)
    return int(number)


def _fields(text):
    # parseMigProfileFields: strings.SplitN(s, ".", 3)
    parts = text.split(".", 2)
    if len(parts) == 3:
        return _field(parts[0], "c"), _field(parts[1], "g"), _field(parts[2], "gb")
    if len(parts) == 2:
        g = _field(parts[0], "g")
        return g, g, _field(parts[1], "gb")
    raise ProfileError("parsed wrong number of fields, expected 2 or 3")


def _attributes(text):
    # parseMigProfileAttributes: strings.Split(s, ",")
    seen = []
    for attribute in text.split(","):
        if attribute in seen:
            raise ProfileError("non unique attribute in list")
        if attribute == "":
            raise ProfileError("empty attribute in list")
        if attribute.strip(_GO_SPACE) != attribute:
            raise ProfileError("leading or trailing spaces in attribute")
        if "0" <= attribute[0] <= "9":
            raise ProfileError("attribute begins with a number")
        if attribute[0] == "." or attribute[-1] == ".":
            raise ProfileError("attribute begins/ends with a dot")
        if not _ATTRIBUTE_CHARS.match(attribute):
            raise ProfileError("non alpha-numeric character or digit in attribute")
        seen.append(attribute)
    return seen


def parse_profile(profile):
    """go-nvlib's parseMigProfile: {c, g, gb, attributes, negative_attributes, compute_instance (the
    <C>c.<G>g.<GB>gb form)} of a profile name, or ProfileError with go-nvlib's message."""
    if not isinstance(profile, str):
        raise ProfileError("profile %r is not a string" % (profile,))
    if profile == "":
        raise ProfileError("profile is the empty string")
    split = profile.split("+", 1)
    negsplit = profile.split("-", 1)
    if len(split) == 2 and len(negsplit) == 2:
        raise ProfileError("profile '%s' contains both '+/-' attributes" % profile)
    if len(split) == 1:
        split = negsplit
    try:
        c, g, gb = _fields(split[0])
    except ProfileError as exc:
        raise ProfileError("cannot parse fields of '%s': %s" % (profile, exc))
    info = {"c": c, "g": g, "gb": gb, "attributes": [], "negative_attributes": [],
            "compute_instance": split[0].count(".") == 2}
    if len(split) == 1:
        return info
    try:
        attributes = _attributes(split[1])
    except ProfileError as exc:
        raise ProfileError("cannot parse attributes of '%s': %s" % (profile, exc))
    info["negative_attributes" if len(negsplit) == 2 else "attributes"] = attributes
    return info


def canonical_profile(info):
    """The name go-nvlib's MigProfileInfo.String() gives a parsed GPU-instance profile."""
    suffix = ""
    if info["attributes"]:
        suffix = "+" + ",".join(info["attributes"])
    if info["negative_attributes"]:
        suffix = "-" + ",".join(info["negative_attributes"])
    return "%dg.%dgb%s" % (info["g"], info["gb"], suffix)


def profile_error(profile):
    """None when ``profile`` names a GPU-instance profile gpufleet can compare, else why not."""
    try:
        info = parse_profile(profile)
    except ProfileError as exc:
        return "%r is not a MIG profile name (go-nvlib: %s)" % (profile, exc)
    if info["compute_instance"]:
        return ("%r is not a GPU-instance profile name but a compute-instance one (only GPU-instance profiles "
                "such as 1g.10gb are compared; compute-instance profiles such as 1c.3g.40gb are not checked)"
                % profile)
    if info["g"] not in GI_SLICES:
        return "%r is not a GPU-instance profile name: %d slices (a GPU instance has %s)" % (
            profile, info["g"], ", ".join(str(n) for n in GI_SLICES))
    attributes = info["attributes"] + info["negative_attributes"]
    unknown = [a for a in attributes if a not in PROFILE_ATTRIBUTES]
    if unknown:
        return "%r has the attribute(s) %s: go-nvlib defines only %s" % (
            profile, ", ".join(unknown), ", ".join(PROFILE_ATTRIBUTES))
    if len(attributes) > 1:
        return "%r has %d attributes: a GPU-instance profile has at most one (go-nvlib NewMigProfile)" % (
            profile, len(attributes))
    canonical = canonical_profile(info)
    if canonical != profile:
        return "%r is written %r by go-nvlib (and nvidia-smi, gpu.mig): write it that way" % (profile, canonical)
    return None


_ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices")

# nvmlGpuInstanceProfile index -> (slices, attribute), NVML_GPU_INSTANCE_PROFILE_* of nvml.h; named as
# go-nvlib's NewMigProfile names them: the media-extension profiles (1_SLICE_REV1, 2_SLICE_REV1) "+me",
# REV2 no attribute, the *_GFX profiles "+gfx", *_NO_ME "-me", *_ALL_ME "+me.all". 3_SLICE_GFX (0x11) is
# not known to go-nvlib v0.12.0 (NewMigProfile refuses it): like any unknown index it keeps the
# reported slice count and no attribute.
GI_PROFILES = {
    0x0: (1, ""), 0x1: (2, ""), 0x2: (3, ""), 0x3: (4, ""), 0x4: (7, ""), 0x5: (8, ""), 0x6: (6, ""),
    0x7: (1, "+me"), 0x8: (2, "+me"), 0x9: (1, ""),
    0xA: (1, "+gfx"), 0xB: (2, "+gfx"), 0xC: (4, "+gfx"), 0xD: (1, "-me"), 0xE: (2, "-me"),
    0xF: (1, "+me.all"), 0x10: (2, "+me.all"),
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
        if enabled is True and "mig-devices" not in entry:
            # api/spec/v1/spec.go MigConfigSpec.UnmarshalJSON: mig-parted refuses the whole file
            errors.append("%s: mig-enabled true without mig-devices (mig-parted refuses the file: \"missing "
                          "required field 'mig-devices' when 'mig-enabled' is true\"; write mig-devices: {} for "
                          "MIG on without GPU instances)" % where)
        profiles = entry.get("mig-devices", {})
        if not isinstance(profiles, dict):
            errors.append("%s.mig-devices must be a dict of profile name -> count, got %r" % (where, profiles))
            continue
        if profiles and enabled is False:
            errors.append("%s: mig-devices given with mig-enabled false" % where)
        for name, count in profiles.items():
            problem = profile_error(name)
            if problem:
                errors.append("%s.mig-devices: %s" % (where, problem))
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                # A count of 0: mig-parted refuses a mig-devices whose counts are all 0 (pkg/types/
                # mig_config.go AssertValidFormat, "all counts for all MigProfiles are 0"), and with other
                # counts it can never assert the layout applied: MigConfig.Equals compares the number of
                # profiles listed and the live config (NewMigConfig of the GPU instances) never lists one
                # with 0 instances.
                errors.append("%s.mig-devices[%s] must be a count >= 1, got %r (leave out a profile with no GPU "
                              "instance: mig-parted never asserts a layout listing a 0 count as applied)"
                              % (where, name, count))
    return errors


def uncovered_gpus(layout, gpu_count):
    """The GPU indexes 0 .. gpu_count-1 that no entry of ``layout`` names. mig-parted's assert
    (cmd/nvidia-mig-parted/assert/config.go AssertMigConfig at bd7160f) marks only the GPUs an entry
    names as matched and fails with "not all GPUs match the specified config" unless every GPU of the
    node is: a layout leaving a GPU out can be applied but never asserted."""
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError("the GPU count must be an integer >= 0, got %r" % (gpu_count,))
    covered = set()
    for entry in layout or []:
        devices = entry.get("devices")
        if devices == "all":
            return []
        if isinstance(devices, list):
            covered.update(d for d in devices if _is_index(d))
    return [index for index in range(gpu_count) if index not in covered]


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
# What nvidia-mig-parted prints (NVIDIA/mig-parted@bd7160f, cmd/nvidia-mig-parted/assert/assert.go and
# main.go): exit 0 and ASSERT_APPLIED on stdout (ASSERT_MODE_APPLIED with --mode-only or the environment
# variable MIG_PARTED_MODE_CHANGE_ONLY: the GPU instances were not compared, never read as applied; role
# gpu_mig runs mig-parted with that variable empty, which urfave/cli reads as false); any failure of
# AssertMigMode / AssertMigConfig ends in the same fatal line "Assertion failure: selected configuration
# not currently applied" (logrus, exit 1), whether the layout differs or the GPU could not be read
# (mig-parted issue #5: "Error checking MIG capable: error opening bar0 MMIO resource: ..."). Only
# with the global flag -d does assertWrapper log the cause first, as a debug line
# (log.Debug(util.Capitalize(err.Error()))). gpufleet runs assert with -d and reads that cause.
ASSERT_MISMATCH = "assertion failure: selected configuration not currently applied"
ASSERT_APPLIED = "Selected MIG configuration currently applied"
ASSERT_MODE_APPLIED = "Selected MIG mode settings from configuration currently applied"
# The causes that mean "the live layout differs" (assert/mode.go, assert/config.go); every other
# cause (Error initializing NVML, Error checking MIG capable, Error getting MIG mode, Error getting
# MIGConfig, Error enumerating GPUs, Unable to assert MIG mode enabled on non MIG-capable GPU, ...)
# means the layout could not be read or can never be applied: never "not applied".
ASSERT_DIFFERS = ("Current mode different than mode being asserted", "Not all GPUs match the specified config")
# logrus's TextFormatter: ``time="..." level=debug msg="..."`` (no terminal) or ``DEBU[0000] ...``.
_LOGRUS_KV = re.compile(r'(?:^|\s)level=(?P<level>[a-z]+) msg=(?P<msg>"(?:[^"\\]|\\.)*"|\S*)')
_LOGRUS_TTY = re.compile(r"^(?P<level>DEBU|INFO|WARN|ERRO|FATA|PANI|TRAC)\[[0-9]+\] ?(?P<msg>.*)$")
_TTY_LEVELS = {"DEBU": "debug", "INFO": "info", "WARN": "warning", "ERRO": "error", "FATA": "fatal",
               "PANI": "panic", "TRAC": "trace"}
_GO_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _go_unquote(text):
    """A Go %q string (logrus quotes a message that needs it) without its quotes and escapes."""
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_GO_ESCAPES.get(body[i + 1], body[i:i + 2]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def logrus_lines(text):
    """[(level, message)] of the logrus lines of ``text`` (both TextFormatter layouts)."""
    entries = []
    for line in (text or "").splitlines():
        match = _LOGRUS_KV.search(line)
        if match:
            entries.append((match.group("level"), _go_unquote(match.group("msg")).strip()))
            continue
        match = _LOGRUS_TTY.match(line.strip())
        if match:
            entries.append((_TTY_LEVELS[match.group("level")], match.group("msg").strip()))
    return entries


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
    """``applied`` or ``not-applied`` of ``nvidia-mig-parted -d assert -f <file> -c <name>``; anything else
    is ValueError with the tool's cause: could not be measured, never taken as applied or as "not applied".

    applied: exit 0 and mig-parted's success line on stdout. not-applied: exit 1, the assertion
    failure, and as its cause (the last debug line before it) one of ASSERT_DIFFERS. The assertion
    failure with any other cause (the GPU could not be read: NVML, bar0 MMIO, ...) or with no cause
    (assert run without -d) is an error."""
    stdout, stderr = stdout or "", stderr or ""
    if rc == 0:
        lines = [line.strip() for line in stdout.splitlines()]
        if ASSERT_APPLIED in lines:
            return "applied"
        if ASSERT_MODE_APPLIED in lines:
            raise ValueError("nvidia-mig-parted assert checked the MIG mode only (%r: run with --mode-only or "
                             "MIG_PARTED_MODE_CHANGE_ONLY set): the GPU instances were not compared, not taken "
                             "as applied" % ASSERT_MODE_APPLIED)
        raise ValueError("nvidia-mig-parted assert exited 0 without %r on stdout: not taken as applied"
                         % ASSERT_APPLIED)
    entries = logrus_lines(stderr) + logrus_lines(stdout)
    fatal = [message for level, message in entries if level == "fatal"]
    if rc == 1 and fatal and fatal[-1].lower() == ASSERT_MISMATCH:
        # log.Fatal ends the run: the assertion failure is the last line of stderr, and its cause (-d) is
        # the line right before it. Anything else around it is not mig-parted's order: no cause.
        lines = [line for line in stderr.splitlines() if line.strip()]
        last = logrus_lines(lines[-1]) if lines else []
        if not (last and last[0][0] == "fatal" and last[0][1].lower() == ASSERT_MISMATCH):
            raise ValueError("nvidia-mig-parted assert exited 1 with output after its assertion failure: not "
                             "mig-parted's own output, not read")
        previous = logrus_lines(lines[-2]) if len(lines) > 1 else []
        cause = previous[0][1] if previous and previous[0][0] == "debug" else ""
        if cause in ASSERT_DIFFERS:
            return "not-applied"
        if not cause:
            raise ValueError("nvidia-mig-parted assert exited 1 (%s) without a cause: run it with -d, an assertion "
                             "failure alone does not tell a layout that differs from a GPU that could not be read"
                             % fatal[-1])
        raise ValueError("nvidia-mig-parted assert could not read the GPUs: %s" % cause)
    text = "%s\n%s" % (stdout, stderr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = fatal[-1] if fatal else (lines[-1] if lines else "")
    raise ValueError("nvidia-mig-parted assert exited %s%s" % (rc, (": " + last) if last else ""))
