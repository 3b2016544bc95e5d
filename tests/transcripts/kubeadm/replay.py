#!/usr/bin/env python3
"""kubeadm answered from the transcript corpus (tests only; never installed on a real node).

The kubeadm stand-ins (roles/kubernetes_{control_plane,worker}/molecule/default/files/kubeadm)
hand EVERY call to this script (after creating the files the real kubeadm creates), which answers
ONLY with a transcript of tests/transcripts/kubeadm/<minor>/<case>.yml: one whose ``argv`` is the
call's (``matches``). When several transcripts match (success and failure of the same command),
``KUBEADM_DOUBLE_CASES`` (comma-separated case names, the file names without .yml) picks one. No
transcript, or no single one: exit 2 with the reason on stderr, never an invented answer.

Matching (``matches``): the subcommands and positional arguments are the transcript's; the flags
are the transcript's flags (order free). The values of ``VARIABLE_FLAGS`` (a config path, a token,
an address, a TTL...) and the API endpoint of ``kubeadm join <endpoint>`` are the call's own: any
value matches, and where the transcript prints one of them (``MASKS``: the join command's
endpoint, token, CA hash and certificate key) the call's value is printed in its place
(``render``). Nothing else of a transcript changes.

KUBEADM_DOUBLE_MINOR     the corpus directory, e.g. 1.37 (default: the newest minor with a
                         transcript of the call)
KUBEADM_DOUBLE_CASES     case names that settle a choice between transcripts of the same argv
KUBEADM_DOUBLE_CASE      the one case this call is answered with (set by the bash stand-in from the node's
                         state for init, join, token create, config validate and upload-certs)
KUBEADM_DOUBLE_CORPUS    the corpus: a directory of <minor>/<case>.yml, or a JSON file written by
                         ``replay.py --export`` (default: this script's directory, or
                         transcripts.json beside this script when there is one: a molecule
                         container has Python but no PyYAML)
KUBEADM_DOUBLE_ENDPOINT  the API endpoint the join commands name (``kubeadm init`` and ``kubeadm
                         token create`` print the controlPlaneEndpoint of the cluster; the bash
                         stand-in reads it from the configuration kubeadm init used)

Its own loader (``load``): tests/transcripts/corpus.py is the generic one (the format is the one of
tests/transcripts/README.md); this file stays self-contained so that it can be copied into a
molecule container with its JSON export. corpus.py takes ``MASKS`` from here.
"""

import json
import os
import re
import sys

KEYS = ("tool", "version", "argv", "rc", "stdout", "stderr", "source", "notes")
HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT = "transcripts.json"

# Flags whose value is the run's own (any value matches; the call's is printed where MASKS say).
VARIABLE_FLAGS = ("--config", "--ttl", "--certificate-key", "--token", "--discovery-token-ca-cert-hash",
                  "--apiserver-advertise-address", "--apiserver-bind-port", "--cri-socket", "--node-name")
# Flags that take no value (everything else starting with "-" takes the next argument, or has "=").
BOOLEAN_FLAGS = ("--yes", "--upload-certs", "--print-join-command", "--control-plane", "--dry-run")
# kubeadm join's first positional argument: the API endpoint (cmd/kubeadm/app/cmd/join.go)
VARIABLE_POSITIONALS = {("join",): 0}

# Per line: (name, regex with one group ``v``) - the span that is the run's own value. The join command
# kubeadm prints (cmd/kubeadm/app/cmd/util/join.go) and the key of ``[upload-certs] Using certificate key:``.
MASKS = [
    ("endpoint", r"^\s*kubeadm join (?P<v>\S+) --token "),
    ("token", r"--token (?P<v>\S+)"),
    ("token", r"^\[bootstrap-token\] Using token: (?P<v>\S+)$"),
    ("hash", r"--discovery-token-ca-cert-hash (?P<v>\S+)"),
    ("key", r"--certificate-key (?P<v>[^\s\\]+)"),
    ("key", r"^(?P<v>[0-9a-f]{64})$"),
    ("path", r"^open (?P<v>.+): no such file or directory$"),
]
FLAG_VALUES = {"--token": "token", "--discovery-token-ca-cert-hash": "hash", "--certificate-key": "key",
               "--config": "path"}


def _check(doc, where):
    if not isinstance(doc, dict) or sorted(k for k in doc if k not in ("case", "minor")) != sorted(KEYS):
        raise ValueError("%s: a transcript has exactly the keys %s" % (where, ", ".join(KEYS)))
    if not (isinstance(doc["argv"], list) and doc["argv"] and all(isinstance(a, str) for a in doc["argv"])):
        raise ValueError("%s: argv must be a non-empty list of strings" % where)
    if isinstance(doc["rc"], bool) or not isinstance(doc["rc"], int):
        raise ValueError("%s: rc must be an integer" % where)
    for key in ("tool", "version", "stdout", "stderr", "source", "notes"):
        if not isinstance(doc[key], str):
            raise ValueError("%s: %s must be a string" % (where, key))
    if not doc["source"].strip():
        raise ValueError("%s: source must name where the transcript comes from" % where)
    return doc


def load(path):
    """One transcript, checked: exactly the format's keys, argv a list of strings, rc an int."""
    import yaml  # only here: the JSON export needs no PyYAML

    with open(path, encoding="utf-8") as handle:
        doc = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    doc = _check(doc, path)
    doc["case"] = os.path.splitext(os.path.basename(path))[0]
    doc["minor"] = os.path.basename(os.path.dirname(path))
    return doc


def _minor_key(name):
    return tuple(int(part) for part in name.split("."))


def default_corpus():
    exported = os.path.join(HERE, EXPORT)
    return exported if os.path.isfile(exported) else HERE


def _exported(corpus):
    with open(corpus, encoding="utf-8") as handle:
        docs = json.load(handle)
    if not isinstance(docs, list):
        raise ValueError("%s: an export is a list of transcripts" % corpus)
    for doc in docs:
        _check(doc, corpus)
        if not (isinstance(doc.get("case"), str) and isinstance(doc.get("minor"), str)):
            raise ValueError("%s: an exported transcript names its case and minor" % corpus)
    return docs


def minors(corpus=HERE):
    if os.path.isfile(corpus):
        return sorted({doc["minor"] for doc in _exported(corpus)}, key=_minor_key)
    found = [name for name in os.listdir(corpus) if os.path.isdir(os.path.join(corpus, name))
             and name.replace(".", "").isdigit()]
    return sorted(found, key=_minor_key)


def transcripts(corpus=HERE, minor=None):
    """Every transcript (of one minor, or of all), sorted by minor and case."""
    if os.path.isfile(corpus):
        docs = [doc for doc in _exported(corpus) if minor is None or doc["minor"] == minor]
        return sorted(docs, key=lambda doc: (_minor_key(doc["minor"]), doc["case"]))
    found = []
    for name in ([minor] if minor else minors(corpus)):
        directory = os.path.join(corpus, name)
        if not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(".yml"):
                found.append(load(os.path.join(directory, entry)))
    return found


def split(args):
    """(positionals, {flag: value or None}, own values) of an argument vector without the program name."""
    positionals, flags, values = [], {}, {}
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("-") and len(arg) > 1:
            name, equals, value = arg.partition("=")
            if not equals and name not in BOOLEAN_FLAGS and index + 1 < len(args):
                index += 1
                value = args[index]
            elif not equals:
                value = None
            if name in flags:
                raise ValueError("kubeadm stand-in: flag %s given twice" % name)
            flags[name] = value
            if name in FLAG_VALUES and value is not None:
                values[FLAG_VALUES[name]] = value
        else:
            positionals.append(arg)
        index += 1
    for prefix, position in VARIABLE_POSITIONALS.items():
        if tuple(positionals[:len(prefix)]) == prefix and len(positionals) > len(prefix) + position:
            values["endpoint"] = positionals[len(prefix) + position]
    return positionals, flags, values


def matches(transcript_args, args):
    """True when the call ``args`` is the transcript's call (see the module docstring)."""
    try:
        want_pos, want_flags, _ = split(transcript_args)
        got_pos, got_flags, _ = split(args)
    except ValueError:
        return False
    if len(want_pos) != len(got_pos) or set(want_flags) != set(got_flags):
        return False
    variable = {len(prefix) + position for prefix, position in VARIABLE_POSITIONALS.items()
                if tuple(want_pos[:len(prefix)]) == prefix}
    if any(w != g for i, (w, g) in enumerate(zip(want_pos, got_pos)) if i not in variable):
        return False
    return all(want_flags[name] == got_flags[name] or (name in VARIABLE_FLAGS and got_flags[name] is not None)
               for name in want_flags)


def render(text, values):
    """``text`` with every masked span replaced by the call's value of that name (lines kept)."""
    if not values:
        return text
    out = []
    for line in text.split("\n"):
        rendered = line
        for name, pattern in MASKS:
            if name in values:
                match = re.search(pattern, rendered)
                if match:
                    rendered = rendered[:match.start("v")] + values[name] + rendered[match.end("v"):]
        out.append(rendered)
    return "\n".join(out)


def choose(args, minor, cases, corpus=HERE, case=None):
    """The transcript answering ``args`` (without the program name), or a ValueError saying why none.
    ``case``: the one case this call must be answered with (the bash stand-in's choice from the node's state)."""
    if minor is None:  # the newest minor with a transcript of this call
        every = minors(corpus)
        minor = next((m for m in reversed(every) if any(matches(t["argv"][1:], args) for t in transcripts(corpus, m))),
                     (every or ["(none)"])[-1])
    found = [t for t in transcripts(corpus, minor) if matches(t["argv"][1:], list(args))]
    if case:
        found, cases = [t for t in found if t["case"] == case], [case]
    matching = [t for t in found if t["case"] in cases] if len(found) > 1 else found
    if len(matching) != 1:
        raise ValueError("kubeadm stand-in: %d transcript(s) of kubeadm %s for argv %r, %d of them named in "
                         "KUBEADM_DOUBLE_CASES=%s: need exactly one"
                         % (len(found), minor, list(args), len(matching), ",".join(cases) or "(unset)"))
    return matching[0]


def export(corpus, minor=None):
    """The transcripts (of one minor) as JSON, for a place without PyYAML (a molecule container)."""
    return json.dumps(transcripts(corpus, minor), indent=1, sort_keys=True) + "\n"


def main(args):
    corpus = os.environ.get("KUBEADM_DOUBLE_CORPUS") or default_corpus()
    if args[:1] == ["--export"]:
        sys.stdout.write(export(corpus, args[1] if len(args) > 1 else None))
        return 0
    minor = os.environ.get("KUBEADM_DOUBLE_MINOR") or None
    cases = [c for c in (os.environ.get("KUBEADM_DOUBLE_CASES") or "").split(",") if c]
    try:
        transcript = choose(args, minor, cases, corpus, os.environ.get("KUBEADM_DOUBLE_CASE") or None)
        values = split(args)[2]
    except (ValueError, OSError) as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    if os.environ.get("KUBEADM_DOUBLE_ENDPOINT") and "endpoint" not in values:
        values["endpoint"] = os.environ["KUBEADM_DOUBLE_ENDPOINT"]
    sys.stdout.write(render(transcript["stdout"], values))
    sys.stderr.write(render(transcript["stderr"], values))
    return transcript["rc"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
