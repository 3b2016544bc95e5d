#!/usr/bin/env python3
"""A stand-in ``nvidia-smi`` for the remediation flow (tests only; never installed on a node).

``--query-compute-apps=...`` prints the file named by GPUFLEET_STANDIN_COMPUTE_APPS (the
``pid, process_name, gpu_uuid`` lines of ``--format=csv,noheader``; unset or empty: no process)
and exits GPUFLEET_STANDIN_COMPUTE_APPS_RC (default 0). ``--gpu-reset`` points the fake NVML's
scenario (GPUFLEET_FAKE_NVML_SCENARIO, a symlink) at GPUFLEET_STANDIN_RESET_SCENARIO, as a reset
that cleared the fault would, and prints what the real tool prints. Every argument vector is
appended to GPUFLEET_REPLAY_ARGV (one JSON list a line), as the replay stand-in does.
"""

import json
import os
import sys


def main():
    record = os.environ.get("GPUFLEET_REPLAY_ARGV")
    if record:
        with open(record, "a") as handle:
            handle.write(json.dumps(["nvidia-smi"] + sys.argv[1:]) + "\n")
    args = sys.argv[1:]
    if any(a.startswith("--query-compute-apps") for a in args):
        source = os.environ.get("GPUFLEET_STANDIN_COMPUTE_APPS")
        if source:
            with open(source) as handle:
                sys.stdout.write(handle.read())
        return int(os.environ.get("GPUFLEET_STANDIN_COMPUTE_APPS_RC") or 0)
    if "--gpu-reset" in args or "-r" in args:
        link = os.environ.get("GPUFLEET_FAKE_NVML_SCENARIO")
        target = os.environ.get("GPUFLEET_STANDIN_RESET_SCENARIO")
        if not (link and target and os.path.islink(link)):
            sys.stderr.write("stand-in nvidia-smi: GPUFLEET_FAKE_NVML_SCENARIO must be a symlink and "
                             "GPUFLEET_STANDIN_RESET_SCENARIO set\n")
            return 1
        temporary = link + ".new"
        os.symlink(target, temporary)
        os.replace(temporary, link)
        sys.stdout.write("GPU 00000000:18:00.0 was successfully reset.\nAll done.\n")
        return 0
    sys.stderr.write("stand-in nvidia-smi: unsupported arguments %s\n" % " ".join(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
