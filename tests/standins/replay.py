#!/usr/bin/env python3
"""A stand-in executable that replays a captured output (tests only; never installed on a node).

Linked as ``bin/dcgmi`` and ``bin/all_reduce_perf``: the runners of module_utils/dcgm.py run it
as a real subprocess, so argument vectors, exit statuses, stderr and timeouts are exercised the
way they are with the real tools. Driven by the environment:

GPUFLEET_REPLAY_STDOUT  file whose content is printed on stdout (unset: nothing)
GPUFLEET_REPLAY_STDERR  text printed on stderr
GPUFLEET_REPLAY_RC      exit status (default 0)
GPUFLEET_REPLAY_HANG    seconds to block before answering (a tool that hangs; the caller's
                        timeout must kill it)
GPUFLEET_REPLAY_ARGV    file to which the argument vector is appended (one JSON list a line)
"""

import json
import os
import sys
import time


def main():
    record = os.environ.get("GPUFLEET_REPLAY_ARGV")
    if record:
        with open(record, "a") as handle:
            handle.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
    hang = float(os.environ.get("GPUFLEET_REPLAY_HANG") or 0)
    if hang:
        time.sleep(hang)
    source = os.environ.get("GPUFLEET_REPLAY_STDOUT")
    if source:
        with open(source) as handle:
            sys.stdout.write(handle.read())
    sys.stderr.write(os.environ.get("GPUFLEET_REPLAY_STDERR", ""))
    return int(os.environ.get("GPUFLEET_REPLAY_RC") or 0)


if __name__ == "__main__":
    sys.exit(main())
