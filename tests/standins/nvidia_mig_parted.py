#!/usr/bin/env python3
"""A stand-in ``nvidia-mig-parted`` (tests only; never installed on a node).

Shaped after NVIDIA/mig-parted (read at commit bd7160f, v0.15.0, 2026-08-21): cmd/nvidia-mig-parted/
main.go (urfave/cli; an error ends in logrus ``log.Fatal`` with the message capitalised: exit 1 and
``time=... level=fatal msg="..."`` on stderr), assert/assert.go (exit 0 and "Selected MIG configuration
currently applied"; a valid config that is not live: "Assertion failure: selected configuration not
currently applied"; "--mode-only" compares the MIG mode only; "Error parsing config file: read error:
..." and "Error selecting MIG config: selected mig-config not present: <name>"), apply/apply.go
("MIG configuration applied successfully"; a failure: "Error applying MIG configuration with hooks:
<cause>", e.g. apply/mode.go's "error resetting all GPUs: ..."). Only ``devices: all`` or index lists
and GPU-instance profiles, like module_utils/mig.py.

The node's live layout is kept in GPUFLEET_STANDIN_MIG_DIR:
  live.json     [{"mig-enabled": bool, "mig-devices": {profile: count}}, ...] one per GPU (written by
                the test; absent: 8 GPUs with MIG disabled); apply rewrites it
  apply_fails   present: apply fails with this cause and changes nothing
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


def fatal(message):
    sys.stderr.write('time="2026-11-26T06:00:00Z" level=fatal msg="%s"\n' % (message[:1].upper() + message[1:]))
    return 1


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
        sys.stderr.write("stand-in nvidia-mig-parted: GPUFLEET_STANDIN_MIG_DIR is not set\n")
        return 2
    args = [a for a in sys.argv[1:] if a not in ("-d", "--debug")]
    with open(os.path.join(state, "calls"), "a") as handle:
        handle.write(json.dumps(["nvidia-mig-parted"] + sys.argv[1:]) + "\n")
    if not args or args[0] not in ("assert", "apply"):
        return fatal("stand-in: unsupported command %s" % " ".join(args))
    command, opts = args[0], flags(args[1:])
    if not opts.get("file"):
        return fatal("missing required flags 'config-file'")
    try:
        if opts["file"] == "-":  # assert.go ParseConfigFile: "-" reads the document from stdin
            spec = yaml.safe_load(sys.stdin.read())
        else:
            with open(opts["file"]) as handle:
                spec = yaml.safe_load(handle)
    except OSError as exc:
        return fatal("error parsing config file: read error: open %s: %s" % (opts["file"], exc.strerror.lower()))
    except yaml.YAMLError as exc:
        return fatal("error parsing config file: unmarshal error: %s" % exc)
    configs = (spec or {}).get("mig-configs") or {}
    name = opts.get("config") or (next(iter(configs)) if len(configs) == 1 else "")
    if name not in configs:
        return fatal("error selecting MIG config: selected mig-config not present: %s" % name)
    if command == "assert" and opts["valid_config"]:
        print("Selected MIG configuration is valid")
        return 0
    live_path = os.path.join(state, "live.json")
    live = [{"mig-enabled": False, "mig-devices": {}} for _ in range(8)]
    if os.path.exists(live_path):
        with open(live_path) as handle:
            live = json.load(handle)
    per_gpu = wanted(configs[name], len(live))
    if command == "assert":
        if matches(per_gpu, live, opts["mode_only"]):
            print("Selected MIG mode settings from configuration currently applied" if opts["mode_only"]
                  else "Selected MIG configuration currently applied")
            return 0
        return fatal("assertion failure: selected configuration not currently applied")
    failure = os.path.join(state, "apply_fails")
    if os.path.exists(failure):
        with open(failure) as handle:
            return fatal("error applying MIG configuration with hooks: %s" % handle.read().strip())
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
    print("MIG configuration applied successfully")
    return 0


if __name__ == "__main__":
    sys.exit(main())
