#!/usr/bin/env python3
"""A stand-in ``nvidia-smi`` for the remediation flow (tests only; never installed on a node).

It answers ONLY with transcripts of tests/transcripts/nvidia-smi (tests/transcripts/README.md):

``--query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader`` lists the processes of
the file GPUFLEET_STANDIN_COMPUTE_APPS (one ``pid, process_name, gpu_uuid`` line each, the layout of
transcript query-compute-apps-busy; unset or empty: no process, transcript query-compute-apps-none);
a line of another layout exits 2. ``--gpu-reset`` / ``-r`` points the fake NVML's scenario
(GPUFLEET_FAKE_NVML_SCENARIO, a symlink) at GPUFLEET_STANDIN_RESET_SCENARIO, as a reset that cleared
the fault would, and prints transcript gpu-reset-success. Every argument vector is appended to
GPUFLEET_REPLAY_ARGV (one JSON list a line), as the replay stand-in does. Any other call exits 2
with a line starting "stand-in nvidia-smi:" - never an invented answer.
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

TOOL = "nvidia-smi"


def refuse(message):
    sys.stderr.write("stand-in nvidia-smi: %s\n" % message)
    return 2


def transcript(case):
    try:
        return corpus.find(TOOL, case)
    except corpus.TranscriptError as exc:
        sys.stderr.write("stand-in nvidia-smi: %s\n" % exc)
        return None


def compute_apps():
    source = os.environ.get("GPUFLEET_STANDIN_COMPUTE_APPS")
    lines = []
    if source:
        with open(source) as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    if not lines:
        doc = transcript("query-compute-apps-none")
        if doc is None:
            return 2
        sys.stdout.write(doc["stdout"])
        sys.stderr.write(doc["stderr"])
        return doc["rc"]
    doc = transcript("query-compute-apps-busy")
    if doc is None:
        return 2
    pattern = dict(corpus.MASKS[TOOL])["app"]
    template = doc["stdout"].splitlines()[0]
    out = []
    for line in lines:
        match = re.search(pattern, line)
        if not match or match.group("v") != line:
            return refuse("%r is not a line of the layout of transcript %s" % (line, doc["id"]))
        out.append(corpus.render(template, TOOL, {"app": line}))
    sys.stdout.write("".join(line + "\n" for line in out))
    return doc["rc"]


def reset():
    link = os.environ.get("GPUFLEET_FAKE_NVML_SCENARIO")
    target = os.environ.get("GPUFLEET_STANDIN_RESET_SCENARIO")
    if not (link and target and os.path.islink(link)):
        return refuse("GPUFLEET_FAKE_NVML_SCENARIO must be a symlink and GPUFLEET_STANDIN_RESET_SCENARIO set")
    doc = transcript("gpu-reset-success")
    if doc is None:
        return 2
    temporary = link + ".new"
    os.symlink(target, temporary)
    os.replace(temporary, link)
    sys.stdout.write(corpus.render(doc["stdout"], TOOL, {"bus": "00000000:18:00.0"}))
    return doc["rc"]


def main():
    record = os.environ.get("GPUFLEET_REPLAY_ARGV")
    if record:
        with open(record, "a") as handle:
            handle.write(json.dumps(["nvidia-smi"] + sys.argv[1:]) + "\n")
    args = sys.argv[1:]
    if any(a.startswith("--query-compute-apps") for a in args):
        return compute_apps()
    if "--gpu-reset" in args or "-r" in args:
        return reset()
    return refuse("no transcript of nvidia-smi %s" % " ".join(args))


if __name__ == "__main__":
    sys.exit(main())
