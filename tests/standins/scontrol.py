#!/usr/bin/env python3
"""A stand-in for Slurm's scontrol in the remediation flow (tests only; never installed on a node).

It answers ONLY with transcripts of tests/transcripts/scontrol (the one-line layout of SchedMD/slurm
src/api/node_info.c, tests/transcripts/README.md): `show node <name> -o` prints the transcript of the
node's state (MIXED, MIXED+DRAIN, IDLE+DRAIN, IDLE) with the node's name, state, allocated CPUs and
Reason in the masked places (tests/transcripts/corpus.py MASKS); `update NodeName=<n> State=DRAIN
Reason=<r>` and `update ... State=RESUME` print what scontrol prints on success (nothing);
`--version` prints the version's transcript; `show node <name> --json` prints the JSON transcript
of the node's state (Slurm 23.02 and later; 22.05 refuses --json as Debian 12's scontrol does).
Any other call exits 2 with a line starting "stand-in scontrol:" - never an invented answer.

The node's state lives in GPUFLEET_STANDIN_SLURM_DIR:
  state           the State field before any drain (default MIXED: jobs are running; IDLE: none)
  drained         present: DRAIN is set; holds the Reason as scontrol shows it (an admin's drain:
                  written by the test; a drain here appends [root@<time>] as Slurm does)
  jobs_end_after  the jobs end after this many `show` polls once DRAIN is set (-1: never; default 0)
  version         the Slurm version whose transcripts answer --version and --json (default 25.11;
                  22.05: Debian 12's slurm-wlm, no --json)
  calls           every argument vector, one a line, space-separated (written here)
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "transcripts"))
import corpus  # noqa: E402  pylint: disable=wrong-import-position

TOOL = "scontrol"
CASES = {"MIXED": "show-node-mixed", "MIXED+DRAIN": "show-node-draining", "IDLE+DRAIN": "show-node-drained",
         "IDLE": "show-node-idle"}
VERSIONS = ("22.05", "25.11")  # the versions of the corpus with a --version transcript


def refuse(message):
    sys.stderr.write("stand-in scontrol: %s\n" % message)
    return 2


def read(directory, name, default=None):
    try:
        with open(os.path.join(directory, name)) as handle:
            return handle.read().strip()
    except OSError:
        return default


def answer(case, values=None):
    try:
        doc = corpus.find(TOOL, case)
    except corpus.TranscriptError as exc:
        return refuse(str(exc))
    sys.stdout.write(corpus.render(doc["stdout"], TOOL, values))
    sys.stderr.write(corpus.render(doc["stderr"], TOOL, values))
    return doc["rc"]


def answer_of(version, case, values=None):
    try:
        doc = corpus.get("%s/%s/%s" % (TOOL, version, case), TOOL)
    except corpus.TranscriptError as exc:
        return refuse(str(exc))
    sys.stdout.write(corpus.render(doc["stdout"], TOOL, values))
    sys.stderr.write(corpus.render(doc["stderr"], TOOL, values))
    return doc["rc"]


def json_text(value):
    """``value`` as Slurm's JSON serializer writes it inside a string (``/`` escaped as ``\\/``)."""
    return json.dumps(value)[1:-1].replace("/", "\\/")


def show(directory, node, form="-o"):
    state = read(directory, "state", "MIXED")
    reason = read(directory, "drained")
    if reason is not None:
        polls = int(read(directory, "polls", "0")) + 1
        with open(os.path.join(directory, "polls"), "w") as handle:
            handle.write("%d\n" % polls)
        after = int(read(directory, "jobs_end_after", "0"))
        if after >= 0 and polls > after:
            state = "IDLE"
        state += "+DRAIN"
    if state not in CASES:
        return refuse("no transcript of a node in state %s" % state)
    if form == "--json":
        version = read(directory, "version", "25.11")
        if version not in VERSIONS:
            return refuse("no transcripts of Slurm %s" % version)
        if version == "22.05":
            return answer_of(version, "show-node-json-refused")
        values = {"node": json_text(node), "addr": json_text(node), "hostname": json_text(node)}
        if reason is not None:
            # the JSON reason is the reason alone (reason_set_by_user, reason_changed_at hold the rest)
            values["reason"] = json_text(reason.rsplit(" [root@", 1)[0])
        return answer_of(version, CASES[state].replace("show-node-", "show-node-json-"), values)
    values = {"node": node, "addr": node, "hostname": node, "state": state,
              "alloc": 112 if state.startswith("MIXED") else 0}
    if reason is not None:
        values["reason"] = reason
    return answer(CASES[state], values)


def main(args):
    directory = os.environ.get("GPUFLEET_STANDIN_SLURM_DIR")
    if not directory:
        return refuse("GPUFLEET_STANDIN_SLURM_DIR is not set")
    with open(os.path.join(directory, "calls"), "a") as handle:
        handle.write(" ".join(args) + "\n")
    if args == ["--version"]:
        version = read(directory, "version", "25.11")
        return answer_of(version, "version") if version in VERSIONS else refuse("no transcripts of Slurm %s" % version)
    if len(args) == 4 and args[:2] == ["show", "node"] and args[3] in ("-o", "--json"):
        return show(directory, args[2], args[3])
    if len(args) >= 3 and args[0] == "update" and args[1].startswith("NodeName="):
        if args[2] == "State=DRAIN" and len(args) == 4 and args[3].startswith("Reason="):
            with open(os.path.join(directory, "drained"), "w") as handle:
                handle.write("%s [root@2026-11-26T04:00:00]\n" % args[3][len("Reason="):])
            return answer("update-drain")
        if args[2] == "State=RESUME" and len(args) == 3:
            for name in ("drained", "polls"):
                if os.path.exists(os.path.join(directory, name)):
                    os.remove(os.path.join(directory, name))
            with open(os.path.join(directory, "state"), "w") as handle:
                handle.write("IDLE\n")
            return answer("update-resume")
    return refuse("no transcript of scontrol %s" % " ".join(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
