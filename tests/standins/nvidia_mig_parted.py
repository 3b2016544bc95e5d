#!/usr/bin/env python3
"""A stand-in ``nvidia-mig-parted`` (tests only; never installed on a node).

It answers ONLY with transcripts of tests/transcripts/nvidia-mig-parted (tests/transcripts/README.md;
facts of NVIDIA/mig-parted v0.15.0 and its issues #5 and #199): it decides which real run the call is
(applied, a layout that differs in MIG mode or in GPU instances, a GPU that cannot be read, a config
not in the file, a file that cannot be read, apply succeeded or failed) and prints that transcript's
stdout and stderr (the config name and path of the call in the masked places, tests/transcripts/
corpus.py MASKS) and exits with its status. Debug lines (logrus level debug) are printed only with
the global flag -d / --debug, as mig-parted's log level does. A call it cannot answer from a
transcript (a command other than assert/apply, no -f, a YAML error) exits 2 with a line starting
"stand-in nvidia-mig-parted:" - never an invented answer. The debug walk names the GPU of the
transcript (one A100), not the GPUs of the live state. Only ``devices: all`` or index lists and
GPU-instance profiles, like module_utils/mig.py.

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
    per_gpu = [None] * count
    for entry in entries:
        devices = entry.get("devices")
        indices = range(count) if devices == "all" else [d for d in devices if d < count]
        for index in indices:
            if per_gpu[index] is None:
                profiles = dict((k, v) for k, v in (entry.get("mig-devices") or {}).items() if v)
                per_gpu[index] = {"mig-enabled": bool(entry.get("mig-enabled")), "mig-devices": profiles}
    return per_gpu


def matches(per_gpu, live, mode_only):
    for want, have in zip(per_gpu, live):
        if want is None:
            continue
        if want["mig-enabled"] != have.get("mig-enabled", False):
            return False
        if not mode_only and want["mig-enabled"] and want["mig-devices"] != (have.get("mig-devices") or {}):
            return False
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
    if not opts.get("file"):
        return refuse("no -f: no transcript of a call without a config file")
    try:
        if opts["file"] == "-":  # assert.go ParseConfigFile: "-" reads the document from stdin
            spec = yaml.safe_load(sys.stdin.read())
        else:
            with open(opts["file"]) as handle:
                spec = yaml.safe_load(handle)
    except OSError:
        return answer("assert-read-error", debug, {"path": opts["file"]})
    except yaml.YAMLError as exc:
        return refuse("the config file does not parse (%s): no transcript of that" % exc)
    configs = (spec or {}).get("mig-configs") or {}
    name = opts.get("config") or (next(iter(configs)) if len(configs) == 1 else "")
    if name not in configs:
        return answer("assert-config-not-present", debug, {"config": name})
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
            live[index] = {"mig-enabled": want["mig-enabled"],
                           "mig-devices": {} if opts["mode_only"] and want["mig-enabled"] != live[index]["mig-enabled"]
                           else (live[index]["mig-devices"] if opts["mode_only"] else want["mig-devices"])}
    with open(live_path + ".new", "w") as handle:
        json.dump(live, handle)
    os.replace(live_path + ".new", live_path)
    link = os.environ.get("GPUFLEET_FAKE_NVML_SCENARIO")
    if link and os.path.islink(link):
        fake_nvml_layout(state, link, live)
    return answer("apply-success", debug)


if __name__ == "__main__":
    sys.exit(main())
