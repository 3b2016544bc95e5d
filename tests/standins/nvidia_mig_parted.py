#!/usr/bin/env python3
"""A stand-in ``nvidia-mig-parted`` (tests only; never installed on a node).

It answers ONLY with transcripts of tests/transcripts/nvidia-mig-parted (tests/transcripts/README.md;
facts of NVIDIA/mig-parted v0.15.0 and its issues #5 and #199): it decides which real run the call is
(applied, a layout that differs in MIG mode or in GPU instances, a GPU that cannot be read, a config
not in the file, a file that cannot be read, apply succeeded or failed) and prints that transcript's
stdout and stderr (the config name and path of the call in the masked places, tests/transcripts/
corpus.py MASKS) and exits with its status. Debug lines (logrus level debug) are printed only with
the global flag -d / --debug, as mig-parted's log level does. A call it cannot answer from a
transcript (a command other than assert/apply, no -f, a YAML error, a document mig-parted's parser
refuses, a config name or path it cannot print as logrus would) exits 2 with a line starting
"stand-in nvidia-mig-parted:" - never an invented answer. The debug walk names the GPU of the
transcript (one A100), not the GPUs of the live state. Only ``devices: all`` or index lists and
GPU-instance profiles, like module_utils/gpu/mig.py.

The decision follows NVIDIA/mig-parted v0.15.0 (bd7160f):
- api/spec/v1/spec.go MigConfigSpec.UnmarshalJSON (lines 102-183): "missing required field
  'mig-devices' when 'mig-enabled' is true" (line 174), "MIG devices included when 'mig-enabled' is
  false" (line 178); pkg/types/mig_config.go AssertValidFormat (lines 40-59): "all counts for all
  MigProfiles are 0". Such a file is refused (no transcript of the parse error).
- assert/mode.go AssertMigMode: only the GPUs an entry names are walked (assert.go
  WalkSelectedMigConfigForEachGPU, lines 215-245: MatchesDevices); a named GPU whose mode differs ->
  "Current mode different than mode being asserted".
- assert/config.go AssertMigConfig (lines 28-97): matched[] starts false for every GPU of the node,
  only named GPUs are set (mig-enabled false with MIG off, or current.Equals(mig-devices)), and
  CountTrue(matched) != len(deviceIDs) -> "Not all GPUs match the specified config": a GPU named by
  no entry never matches. pkg/types/mig_config.go MigConfig.Equals (lines 84-99) compares the
  number of profiles listed first: a profile listed with count 0 is a key the live config (made
  from the GPU instances, NewMigConfig) never has, so such a layout is never applied.
- The environment variable MIG_PARTED_MODE_CHANGE_ONLY is --mode-only (assert.go line 92; urfave/
  cli v3 flag_impl.go PostParse: an empty value is false, otherwise strconv.ParseBool).
- logrus's TextFormatter writes a message needing quotes with fmt %q (strconv.Quote): the config
  name and path are escaped that way inside msg="..."; a name with non-ASCII characters (whose
  escaping depends on Go's unicode tables) is refused.

The node's live layout is kept in GPUFLEET_STANDIN_MIG_DIR:
  live.json     [{"mig-enabled": bool, "mig-devices": {profile: count}}, ...] one per GPU (written by
                the test; absent: 8 GPUs with MIG disabled); apply rewrites it
  unreadable    present: the GPUs cannot be read (bar0 MMIO, issue #5): assert and apply fail
  apply_fails   present: apply fails and changes nothing; holds the case name of the failing apply
                transcript (empty: apply-bar0-endianness)
  calls         every argument vector, one JSON list a line (written here)
With GPUFLEET_FAKE_NVML_SCENARIO (a symlink to a scenario of tests/fake_nvml) set, a successful apply
also writes nvml-mig.json there: the scenario the link pointed at first (kept in nvml-base), with each
GPU's MIG mode and GPU instances as applied (a 80 GB board: the fake's H100 profiles), and points the
link at it, so the validation after the apply (gpu.mig through NVML) sees the new layout.
"""

import json
import os
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

TOOL = "nvidia-mig-parted"


def refuse(message):
    sys.stderr.write("stand-in nvidia-mig-parted: %s\n" % message)
    return 2


def answer(case, debug, values=None):
    """Print the transcript ``case`` (debug lines only with -d) and return its exit status."""
    try:
        doc = corpus.find(TOOL, case)
    except corpus.TranscriptError as exc:
        return refuse(str(exc))
    stderr = corpus.render(doc["stderr"], TOOL, values)
    if not debug:
        stderr = "".join(line for line in stderr.splitlines(True)
                         if "level=debug" not in line and not line.startswith("DEBU["))
    sys.stdout.write(corpus.render(doc["stdout"], TOOL, values))
    sys.stderr.write(stderr)
    return doc["rc"]


_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
             "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quoted_body(text):
    """``text`` as Go's strconv.Quote writes it, without the outer quotes (ASCII only: ValueError else)."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif " " <= char <= "~":
            out.append(char)
        elif ord(char) < 0x80:
            out.append("\\x%02x" % ord(char))
        else:
            raise ValueError("%r holds non-ASCII characters: no faithful logrus rendering here" % text)
    return "".join(out)


def env_bool(name):
    """An urfave/cli v3 BoolFlag's environment source: unset or empty -> False; else strconv.ParseBool."""
    value = os.environ.get(name)
    if value is None or value == "":
        return False
    if value not in _GO_BOOLS:
        raise ValueError("%s=%r is not a Go boolean" % (name, value))
    return _GO_BOOLS[value]


def spec_error(configs):
    """Why mig-parted's parser refuses the mig-configs (spec.go, mig_config.go), or None."""
    for name, entries in configs.items():
        for entry in entries or []:
            enabled = entry.get("mig-enabled")
            profiles = entry.get("mig-devices")
            if enabled is True and profiles is None:
                return "%s: missing required field 'mig-devices' when 'mig-enabled' is true" % name
            if enabled is not True and profiles:
                return "%s: MIG devices included when 'mig-enabled' is false" % name
            if profiles and not any(count > 0 for count in profiles.values()):
                return "%s: all counts for all MigProfiles are 0" % name
    return None


def flags(args):
    out = {"mode_only": False, "valid_config": False}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-f", "--config-file", "-c", "--selected-config") and i + 1 < len(args):
            out["file" if arg in ("-f", "--config-file") else "config"] = args[i + 1]
            i += 1
        elif arg.startswith("--config-file="):
            out["file"] = arg.split("=", 1)[1]
        elif arg.startswith("--selected-config="):
            out["config"] = arg.split("=", 1)[1]
        elif arg in ("-m", "--mode-only"):
            out["mode_only"] = True
        elif arg in ("-a", "--valid-config"):
            out["valid_config"] = True
        i += 1
    return out


def wanted(entries, count):
    """Per GPU of the node: the entry naming it ({mig-enabled, mig-devices} as written, 0 counts kept:
    mig-parted keeps them), None for a GPU no entry names. A later entry wins, as the walk does."""
    per_gpu = [None] * count
    for entry in entries:
        devices = entry.get("devices")
        indices = range(count) if devices == "all" else [d for d in devices if d < count]
        for index in indices:
            per_gpu[index] = {"mig-enabled": bool(entry.get("mig-enabled")),
                              "mig-devices": dict(entry.get("mig-devices") or {})}
    return per_gpu


def matches(per_gpu, live, mode_only):
    """AssertMigMode (named GPUs only) and, unless mode_only, AssertMigConfig (every GPU matched)."""
    for want, have in zip(per_gpu, live):
        if want is not None and want["mig-enabled"] != have.get("mig-enabled", False):
            return False
    if mode_only:
        return True
    for want, have in zip(per_gpu, live):
        if want is None:
            return False  # matched[i] stays false: "not all GPUs match the specified config"
        if want["mig-enabled"] and want["mig-devices"] != (have.get("mig-devices") or {}):
            return False  # MigConfig.Equals: same profiles listed, same counts (a 0 count never matches)
    return True


def fake_nvml_layout(state, link, live):
    base_path = os.path.join(state, "nvml-base")
    if not os.path.exists(base_path):
        with open(base_path, "w") as handle:
            handle.write(os.path.realpath(link))
    with open(base_path) as handle:
        base = handle.read().strip()
    overrides = {}
    for index, gpu in enumerate(live):
        on = 1 if gpu.get("mig-enabled") else 0
        instances = [name for name, count in sorted((gpu.get("mig-devices") or {}).items()) for _ in range(count)]
        overrides[str(index)] = {"mig": {"current": on, "pending": on, "instances": instances if on else []}}
    scenario = {"description": "stand-in nvidia-mig-parted: the layout applied over %s" % os.path.basename(base),
                "extends": base, "device_template": {"memory_total_mib": 81920}, "device_overrides": overrides}
    target = os.path.join(state, "nvml-mig.json")
    with open(target, "w") as handle:
        json.dump(scenario, handle)
    os.symlink(target, link + ".new")
    os.replace(link + ".new", link)


def main():
    state = os.environ.get("GPUFLEET_STANDIN_MIG_DIR")
    if not state:
        return refuse("GPUFLEET_STANDIN_MIG_DIR is not set")
    debug = any(a in ("-d", "--debug") for a in sys.argv[1:])
    args = [a for a in sys.argv[1:] if a not in ("-d", "--debug")]
    with open(os.path.join(state, "calls"), "a") as handle:
        handle.write(json.dumps(["nvidia-mig-parted"] + sys.argv[1:]) + "\n")
    if not args or args[0] not in ("assert", "apply"):
        return refuse("unsupported command %s" % " ".join(args))
    command, opts = args[0], flags(args[1:])
    try:
        opts["mode_only"] = opts["mode_only"] or env_bool("MIG_PARTED_MODE_CHANGE_ONLY")
        opts["valid_config"] = opts["valid_config"] or (command == "assert" and env_bool("MIG_PARTED_VALID_CONFIG"))
    except ValueError as exc:
        return refuse("%s: no transcript of urfave/cli's error" % exc)
    if not opts.get("file"):
        return refuse("no -f: no transcript of a call without a config file")
    try:
        if opts["file"] == "-":  # assert.go ParseConfigFile: "-" reads the document from stdin
            spec = yaml.safe_load(sys.stdin.read())
        else:
            with open(opts["file"]) as handle:
                spec = yaml.safe_load(handle)
    except OSError:
        try:
            return answer("assert-read-error", debug, {"path": go_quoted_body(opts["file"])})
        except ValueError as exc:
            return refuse(str(exc))
    except yaml.YAMLError as exc:
        return refuse("the config file does not parse (%s): no transcript of that" % exc)
    configs = (spec or {}).get("mig-configs") or {}
    problem = spec_error(configs)
    if problem:
        return refuse("mig-parted refuses the config file (%s): no transcript of that" % problem)
    name = opts.get("config") or (next(iter(configs)) if len(configs) == 1 else "")
    if name not in configs:
        try:
            return answer("assert-config-not-present", debug, {"config": go_quoted_body(name)})
        except ValueError as exc:
            return refuse(str(exc))
    if command == "assert" and opts["valid_config"]:
        return answer("assert-valid-config", debug)
    if os.path.exists(os.path.join(state, "unreadable")):
        return answer("assert-debug-cannot-read-bar0" if command == "assert" else "apply-bar0-endianness", debug)
    live_path = os.path.join(state, "live.json")
    live = [{"mig-enabled": False, "mig-devices": {}} for _ in range(8)]
    if os.path.exists(live_path):
        with open(live_path) as handle:
            live = json.load(handle)
    per_gpu = wanted(configs[name], len(live))
    if command == "assert":
        if matches(per_gpu, live, opts["mode_only"]):
            if opts["mode_only"]:
                return answer("assert-mode-only-applied", debug)
            return answer("assert-debug-applied", debug)
        mode_differs = not matches(per_gpu, live, True)
        return answer("assert-debug-mode-differs" if mode_differs else "assert-debug-config-differs", debug)
    failure = os.path.join(state, "apply_fails")
    if os.path.exists(failure):
        with open(failure) as handle:
            case = handle.read().strip() or "apply-bar0-endianness"
        return answer(case, debug)
    for index, want in enumerate(per_gpu):
        if want is not None:
            positive = dict((k, v) for k, v in want["mig-devices"].items() if v > 0)  # 0: no instance made
            live[index] = {"mig-enabled": want["mig-enabled"],
                           "mig-devices": {} if opts["mode_only"] and want["mig-enabled"] != live[index]["mig-enabled"]
                           else (live[index]["mig-devices"] if opts["mode_only"] else positive)}
    with open(live_path + ".new", "w") as handle:
        json.dump(live, handle)
    os.replace(live_path + ".new", live_path)
    link = os.environ.get("GPUFLEET_FAKE_NVML_SCENARIO")
    if link and os.path.islink(link):
        fake_nvml_layout(state, link, live)
    return answer("apply-success", debug)


if __name__ == "__main__":
    sys.exit(main())
