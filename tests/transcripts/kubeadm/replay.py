#!/usr/bin/env python3
"""kubeadm answered from the transcript corpus (tests only; never installed on a node).

The kubeadm stand-ins (roles/kubernetes_{control_plane,worker}/molecule/default/files/kubeadm)
hand every ``version``, ``upgrade`` and ``certs`` call to this script, which answers ONLY with a
transcript of tests/transcripts/kubeadm/<minor>/<case>.yml: the one of the selected minor whose
``argv`` (past the program name) is the call's. When several transcripts have that argv (success
and failure of the same command), ``KUBEADM_DOUBLE_CASES`` (comma-separated case names, the file
names without .yml) picks one. No transcript, or no single one: exit 2 with the reason on stderr,
never an invented answer.

KUBEADM_DOUBLE_MINOR   the corpus directory, e.g. 1.37 (default: the newest)
KUBEADM_DOUBLE_CASES   case names that settle a choice between transcripts of the same argv
KUBEADM_DOUBLE_CORPUS  the corpus directory (default: this script's directory)

Its own loader (``load``): tests/transcripts/corpus.py, the generic loader, did not exist when
this was written; the format is the one of tests/transcripts/README.md.
"""

import os
import sys

import yaml

KEYS = ("tool", "version", "argv", "rc", "stdout", "stderr", "source", "notes")
HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    """One transcript, checked: exactly the format's keys, argv a list of strings, rc an int."""
    with open(path, encoding="utf-8") as handle:
        doc = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(doc, dict) or sorted(doc) != sorted(KEYS):
        raise ValueError("%s: a transcript has exactly the keys %s" % (path, ", ".join(KEYS)))
    if not (isinstance(doc["argv"], list) and doc["argv"] and all(isinstance(a, str) for a in doc["argv"])):
        raise ValueError("%s: argv must be a non-empty list of strings" % path)
    if isinstance(doc["rc"], bool) or not isinstance(doc["rc"], int):
        raise ValueError("%s: rc must be an integer" % path)
    for key in ("tool", "version", "stdout", "stderr", "source", "notes"):
        if not isinstance(doc[key], str):
            raise ValueError("%s: %s must be a string" % (path, key))
    if not doc["source"].strip():
        raise ValueError("%s: source must name where the transcript comes from" % path)
    doc["case"] = os.path.splitext(os.path.basename(path))[0]
    doc["minor"] = os.path.basename(os.path.dirname(path))
    return doc


def minors(corpus=HERE):
    found = [name for name in os.listdir(corpus) if os.path.isdir(os.path.join(corpus, name))
             and name.replace(".", "").isdigit()]
    return sorted(found, key=lambda name: tuple(int(part) for part in name.split(".")))


def transcripts(corpus=HERE, minor=None):
    """Every transcript (of one minor, or of all), sorted by minor and case."""
    found = []
    for name in ([minor] if minor else minors(corpus)):
        directory = os.path.join(corpus, name)
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(".yml"):
                found.append(load(os.path.join(directory, entry)))
    return found


def choose(args, minor, cases, corpus=HERE):
    """The transcript answering ``args`` (without the program name), or a ValueError saying why none."""
    found = [t for t in transcripts(corpus, minor) if t["argv"][1:] == list(args)]
    matching = [t for t in found if t["case"] in cases] if len(found) > 1 else found
    if len(matching) != 1:
        raise ValueError("kubeadm stand-in: %d transcript(s) of kubeadm %s for argv %r, %d of them named in "
                         "KUBEADM_DOUBLE_CASES=%s: need exactly one"
                         % (len(found), minor, list(args), len(matching), ",".join(cases) or "(unset)"))
    return matching[0]


def main(args):
    corpus = os.environ.get("KUBEADM_DOUBLE_CORPUS") or HERE
    minor = os.environ.get("KUBEADM_DOUBLE_MINOR") or minors(corpus)[-1]
    cases = [c for c in (os.environ.get("KUBEADM_DOUBLE_CASES") or "").split(",") if c]
    try:
        transcript = choose(args, minor, cases, corpus)
    except (ValueError, OSError) as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    sys.stdout.write(transcript["stdout"])
    sys.stderr.write(transcript["stderr"])
    return transcript["rc"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
