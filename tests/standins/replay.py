#!/usr/bin/env python3
"""A stand-in executable that replays a tool's output (tests only; never installed on a node).

Linked as ``bin/dcgmi`` and ``bin/all_reduce_perf``: the runners of module_utils/gpu/dcgm.py run it as
a real subprocess, so argument vectors, exit statuses, stdout/stderr and timeouts are exercised the
way they are with the real tools.

As ``dcgmi`` it answers ONLY with a transcript of tests/transcripts/dcgmi (tests/transcripts/
README.md): its stdout, stderr and exit status, whatever the arguments (the test picks the run).

GPUFLEET_REPLAY_CASE    dcgmi: the transcript, ``dcgmi/<version>/<case>`` or a case name (the newest
                        version that has it); unset or unknown: exit 2, "stand-in dcgmi: ..."
GPUFLEET_REPLAY_HANG    seconds to block before answering (a tool that hangs; the caller's timeout
                        must kill it)
GPUFLEET_REPLAY_ARGV    file to which the argument vector is appended (one JSON list a line)

As ``all_reduce_perf`` (not a tool of the transcript corpus: its outputs are the fixtures of
tests/fixtures/nccl, sources in their README):
GPUFLEET_REPLAY_STDOUT  file whose content is printed on stdout (unset: nothing)
GPUFLEET_REPLAY_STDERR  text printed on stderr
GPUFLEET_REPLAY_RC      exit status (default 0)
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

CORPUS_TOOLS = ("dcgmi",)


def from_corpus(tool):
    case = os.environ.get("GPUFLEET_REPLAY_CASE") or ""
    for name in ("GPUFLEET_REPLAY_STDOUT", "GPUFLEET_REPLAY_STDERR", "GPUFLEET_REPLAY_RC"):
        if os.environ.get(name):
            sys.stderr.write("stand-in %s: %s is not used: %s answers only from the transcript corpus "
                             "(GPUFLEET_REPLAY_CASE)\n" % (tool, name, tool))
            return 2
    try:
        doc = corpus.get(case, tool) if case.count("/") == 2 else corpus.find(tool, case)
    except corpus.TranscriptError as exc:
        sys.stderr.write("stand-in %s: GPUFLEET_REPLAY_CASE=%r: %s\n" % (tool, case, exc))
        return 2
    sys.stdout.write(doc["stdout"])
    sys.stderr.write(doc["stderr"])
    return doc["rc"]


def main():
    tool = os.path.basename(sys.argv[0])
    record = os.environ.get("GPUFLEET_REPLAY_ARGV")
    if record:
        with open(record, "a") as handle:
            handle.write(json.dumps([tool] + sys.argv[1:]) + "\n")
    hang = float(os.environ.get("GPUFLEET_REPLAY_HANG") or 0)
    if hang:
        time.sleep(hang)
    if tool in CORPUS_TOOLS:
        return from_corpus(tool)
    source = os.environ.get("GPUFLEET_REPLAY_STDOUT")
    if source:
        with open(source) as handle:
            sys.stdout.write(handle.read())
    sys.stderr.write(os.environ.get("GPUFLEET_REPLAY_STDERR", ""))
    return int(os.environ.get("GPUFLEET_REPLAY_RC") or 0)


if __name__ == "__main__":
    sys.exit(main())
