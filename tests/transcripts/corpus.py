"""The transcript corpus: load, check and answer from tests/transcripts/<tool>/<version>/<case>.yml.

Format and rules: tests/transcripts/README.md. Used by the stand-ins of tests/standins (which answer
only with a transcript of their tool), by tests/unit/test_transcripts.py (every transcript valid; no
stand-in prints a line no transcript of its tool has) and importable by any test. Tests only.

A transcript is one real run of a tool, written from a named source: ``tool``, ``version``, ``argv``
(a list, the program name first), ``rc``, ``stdout``, ``stderr``, ``source``, ``notes`` - exactly
these keys. Its id is ``<tool>/<version>/<case>`` (the path without ``.yml``).

Some parts of a line are the run's own values (a node name, a config name, a time): ``MASKS`` names
them per tool. ``render`` puts a stand-in's values there, ``shape`` replaces them by ``<name>``; a line
a stand-in prints must have the shape of a line of a transcript of its tool (``unknown_lines``).
"""

import functools
import importlib.util
import ipaddress
import os
import re
import urllib.parse

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ("tool", "version", "argv", "rc", "stdout", "stderr", "source", "notes")
STRING_KEYS = ("tool", "version", "stdout", "stderr", "source", "notes")
# The tools whose stand-ins answer from the corpus (tests/standins); kubeadm's stand-in is
# tests/transcripts/kubeadm/replay.py (behind the molecule scenarios' bash stand-in); systemctl's
# (tests/standins/systemctl.sh, a shell script) prints only lines of its transcripts (checked by the tests).
STANDIN_TOOLS = ("nvidia-smi", "dcgmi", "scontrol", "nvidia-mig-parted", "systemctl", "kubeadm")


def _kubeadm_replay():
    """tests/transcripts/kubeadm/replay.py (self-contained: it is copied into molecule containers)."""
    spec = importlib.util.spec_from_file_location("_kubeadm_replay", os.path.join(HERE, "kubeadm", "replay.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KUBEADM_REPLAY = _kubeadm_replay()

# Per tool: (name, regex with one group ``v``) - the span of a line that is the run's own value.
MASKS = {
    "nvidia-mig-parted": [
        ("time", r'^time="(?P<v>[^"]*)"'),
        # the value as logrus writes it inside msg="...": Go %q escapes (\" \\ \n \xNN ...)
        ("config", r'selected mig-config not present: (?P<v>(?:[^"\\]|\\.)*)'),
        ("path", r'read error: open (?P<v>(?:[^:"\\]|\\.)*): '),
    ],
    "scontrol": [
        ("node", r"^NodeName=(?P<v>\S+)"),
        ("addr", r" NodeAddr=(?P<v>\S+)"),
        ("hostname", r" NodeHostName=(?P<v>\S+)"),
        ("alloc", r" CPUAlloc=(?P<v>[0-9]+)"),
        ("state", r" State=(?P<v>\S+)"),
        ("reason", r" Reason=(?P<v>.*)$"),
        ("command", r"^scontrol: error: Invalid node state specified(?P<v>)$"),
        # show node --json (Slurm 23.02+): the node's keys are indented 6 spaces, the meta.command items too
        ("node", r'^      "name": "(?P<v>[^"\\]+)",$'),  # meta.plugin.name is ""
        ("node", r'^      "(?P<v>[^"\\]*)"$'),
        ("addr", r'^      "address": "(?P<v>[^"\\]*)",$'),
        ("hostname", r'^      "hostname": "(?P<v>[^"\\]*)",$'),
        ("reason", r'^      "reason": "(?P<v>(?:[^"\\]|\\.)*)",$'),
    ],
    "nvidia-smi": [
        ("bus", r"^GPU (?P<v>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]) was successfully reset\.$"),
        ("app", r"^(?P<v>[0-9]+, [^,]+, GPU-[0-9a-f-]+(?:, [0-9]+ MiB)?)$"),
    ],
    "dcgmi": [],
    "systemctl": [],
    # the join command's endpoint, token, CA hash and certificate key, the --config path (the call's own)
    "kubeadm": list(KUBEADM_REPLAY.MASKS),
}


# ``source`` must name at least one public place a reader can open (tests/transcripts/README.md):
# a URL, ``owner/repo@ref:path`` (ref: a commit, tag or branch; a parenthesis may follow the ref, as in
# ``NVIDIA/mig-parted@bd7160f (v0.15.0):cmd/...``), or an issue / pull request of a repository
# (``owner/repo issue #N``, ``owner/repo PR #N``, ``owner/repo#N``). References to a private index
# (``search index``, ``file id``) are refused: nobody else can follow them.
_REPO = r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*"
SOURCE_FORMS = re.compile(
    r"https?://[^\s)]+"
    r"|(?<![\w/])" + _REPO + r"@[0-9A-Za-z][0-9A-Za-z._/-]*(?:\s*\([^)]*\))?:[A-Za-z0-9_.][A-Za-z0-9_./-]*"
    r"|(?<![\w/])" + _REPO + r"(?:\s+(?:issues?|PRs?|pull requests?)\s+#[0-9]+|#[0-9]+)")
PRIVATE_REFERENCES = re.compile(r"search index|file ids?\b", re.IGNORECASE)


# Any ``scheme://host`` in a source: its host must be one a reader elsewhere can reach - not this machine
# (``localhost``, loopback), a private, link-local or otherwise non-global address, nor a name of a local
# network (``.local``, ``.internal``, ``.lan``, ...), a reserved example name (RFC 2606) or a name of one label.
ANY_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s)]*")
LOCAL_SUFFIXES = ("localhost", "local", "internal", "lan", "home", "home.arpa", "intranet", "corp", "localdomain",
                  "private", "example", "invalid", "test", "example.com", "example.net", "example.org")
_TOP_LABEL = re.compile(r"[a-z]{2,63}|xn--[a-z0-9-]{1,59}")
_HOST_NAME = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")


def host_problem(url):
    """None when ``url``'s host is a public one (a global address, a name under a public top-level label)."""
    try:
        host = urllib.parse.urlsplit(url.rstrip(".,;:'\"")).hostname
    except ValueError:
        return "%r is not a URL a reader can open" % url
    host = urllib.parse.unquote(host or "").rstrip(".").lower()
    if not host:
        return "%r names no host a reader can reach" % url
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if address.version == 6 and address.ipv4_mapped:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            return "%r is on a private, loopback or link-local address: no reader can open it" % url
        return None
    if not _HOST_NAME.fullmatch(host):
        return "%r has no public host name" % url
    if any(host == suffix or host.endswith("." + suffix) for suffix in LOCAL_SUFFIXES):
        return "%r is on a local network name: no reader can open it" % url
    if "." not in host or not _TOP_LABEL.fullmatch(host.rsplit(".", 1)[1]):
        return "%r has no public host name (one label, or a numeric top label)" % url
    return None


def source_problem(source):
    """None when ``source`` cites a public place of a documented kind, else why not."""
    for url in ANY_URL.findall(source):
        problem = host_problem(url)
        if problem:
            return "source cites a place no reader can open: %s" % problem
    if PRIVATE_REFERENCES.search(source):
        return "source cites a private search index (%r): name the public URL, owner/repo@ref:path or issue" % (
            PRIVATE_REFERENCES.search(source).group(0),)
    if not SOURCE_FORMS.search(source):
        return ("source names no public place of a documented kind (a URL, owner/repo@ref:path, owner/repo "
                "issue #N or PR #N)")
    return None


def version_matches_directory(version, directory):
    """A transcript's version is its directory's name (``v`` before it allowed), or a release of it: the
    directory's name followed by dot-separated numbers and at most a pre-release (``v1.31.4`` under ``1.31``,
    ``v1.36.0-rc.1`` under ``1.36``). Nothing else: no trailing dot, word, space or newline."""
    if not isinstance(version, str) or not isinstance(directory, str) or not directory:
        return False
    if version in (directory, "v" + directory):
        return True
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)*", directory):  # unstated, 4.x: only the name itself
        return False
    release = r"v?" + re.escape(directory) + r"(?:\.[0-9]+)*(?:-(?:alpha|beta|rc)\.?[0-9]+)?"
    return re.fullmatch(release, version) is not None


class TranscriptError(ValueError):
    """A transcript file that does not follow the format (names the file and why)."""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # pylint: disable=too-many-ancestors
    """A safe loader that refuses a mapping giving a key twice (a plain safe loader keeps the last value: a
    second ``rc`` or ``source`` would silently replace the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the safe constructor refuses it itself
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        "found the key %r twice (a transcript gives each key once)" % (key,), key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


_LOADER = _Loader


def load(path, corpus=HERE):
    """One transcript, checked; adds ``id`` and ``case``."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise TranscriptError("%s: %s" % (path, exc))
    if not isinstance(doc, dict) or sorted(doc) != sorted(KEYS):
        raise TranscriptError("%s: a transcript has exactly the keys %s (got %s)" % (
            path, ", ".join(KEYS), ", ".join(sorted(doc)) if isinstance(doc, dict) else type(doc).__name__))
    for key in STRING_KEYS:
        if not isinstance(doc[key], str):
            raise TranscriptError("%s: %s must be a string" % (path, key))
    if not (isinstance(doc["argv"], list) and doc["argv"] and all(isinstance(a, str) for a in doc["argv"])):
        raise TranscriptError("%s: argv must be a non-empty list of strings" % path)
    if isinstance(doc["rc"], bool) or not isinstance(doc["rc"], int) or not 0 <= doc["rc"] <= 255:
        raise TranscriptError("%s: rc must be an exit status 0-255" % path)
    if not doc["source"].strip():
        raise TranscriptError("%s: source must name where the transcript comes from" % path)
    problem = source_problem(doc["source"])
    if problem:
        raise TranscriptError("%s: %s" % (path, problem))
    relative = os.path.relpath(path, corpus)
    parts = relative.split(os.sep)
    if len(parts) != 3 or not parts[2].endswith(".yml"):
        raise TranscriptError("%s: a transcript lives at <tool>/<version>/<case>.yml" % path)
    if parts[0] != doc["tool"]:
        raise TranscriptError("%s: tool %r is not its directory %r" % (path, doc["tool"], parts[0]))
    if not version_matches_directory(doc["version"], parts[1]):
        raise TranscriptError("%s: version %r is not its directory %r (nor a release of it)" % (
            path, doc["version"], parts[1]))
    if os.path.basename(doc["argv"][0]) != doc["tool"]:
        raise TranscriptError("%s: argv[0] %r is not the tool %r" % (path, doc["argv"][0], doc["tool"]))
    doc = dict(doc)
    doc["case"] = parts[2][:-len(".yml")]
    doc["id"] = "/".join(parts[:2] + [doc["case"]])
    return doc


def paths(corpus=HERE, tool=None):
    """Every transcript file of the corpus (of one tool), sorted."""
    found = []
    for name in ([tool] if tool else sorted(os.listdir(corpus))):
        tool_dir = os.path.join(corpus, name)
        if not os.path.isdir(tool_dir) or name.startswith((".", "_")):
            continue
        for version in sorted(os.listdir(tool_dir)):
            version_dir = os.path.join(tool_dir, version)
            if os.path.isdir(version_dir):
                found.extend(os.path.join(version_dir, name) for name in sorted(os.listdir(version_dir))
                             if name.endswith(".yml"))
    return found


def transcripts(tool=None, corpus=HERE):
    """{id: transcript} of every transcript (of one tool)."""
    found = {}
    for path in paths(corpus, tool):
        doc = _load_cached(path, corpus, os.stat(path).st_mtime_ns)
        if tool is None or doc["tool"] == tool:
            found[doc["id"]] = dict(doc)
    return found


@functools.lru_cache(maxsize=4096)
def _load_cached(path, corpus, _mtime):
    return load(path, corpus)


def get(case_id, tool=None, corpus=HERE):
    """The transcript ``<tool>/<version>/<case>``; TranscriptError when there is none (or of another tool)."""
    parts = str(case_id).split("/")
    if len(parts) != 3 or any(part in ("", ".", "..") for part in parts):
        raise TranscriptError("%r is not a transcript id <tool>/<version>/<case>" % (case_id,))
    if tool is not None and parts[0] != tool:
        raise TranscriptError("%r is not a transcript of %s" % (case_id, tool))
    path = os.path.join(corpus, *parts) + ".yml"
    if not os.path.isfile(path):
        raise TranscriptError("no transcript %s (%s)" % (case_id, path))
    return load(path, corpus)


def find(tool, case, corpus=HERE):
    """The transcript of ``tool`` named ``case`` (a case name of one version, the newest when several)."""
    found = [doc for doc in transcripts(tool, corpus).values() if doc["case"] == case]
    if not found:
        raise TranscriptError("no transcript of %s named %s" % (tool, case))
    return sorted(found, key=lambda doc: _version_key(doc["version"]))[-1]


def _version_key(version):
    return [int(part) if part.isdigit() else -1 for part in re.split(r"[.-]", version.lstrip("v"))]


def render(text, tool, values=None):
    """``text`` (a transcript's stdout or stderr) with the masked spans of ``values`` ({mask name: value})
    replaced, line by line."""
    if not values:
        return text
    out = []
    for line in text.split("\n"):
        rendered = line
        for name, pattern in MASKS.get(tool, []):
            if name in values:
                match = re.search(pattern, rendered)
                if match:
                    rendered = rendered[:match.start("v")] + str(values[name]) + rendered[match.end("v"):]
        out.append(rendered)
    return "\n".join(out)


def shape(tool, line):
    """``line`` with every masked span replaced by ``<name>``."""
    for name, pattern in MASKS.get(tool, []):
        match = re.search(pattern, line)
        if match:
            line = line[:match.start("v")] + "<%s>" % name + line[match.end("v"):]
    return line


def known_lines(tool, corpus=HERE):
    """The shapes of every stdout and stderr line of every transcript of ``tool``."""
    return _known_lines(tool, corpus, tuple((path, os.stat(path).st_mtime_ns) for path in paths(corpus, tool)))


@functools.lru_cache(maxsize=64)
def _known_lines(tool, corpus, _files):
    known = set()
    for doc in transcripts(tool, corpus).values():
        for stream in (doc["stdout"], doc["stderr"]):
            known.update(shape(tool, line) for line in stream.splitlines())
    return frozenset(known)


def unknown_lines(tool, text, corpus=HERE):
    """The lines of ``text`` whose shape no transcript of ``tool`` has."""
    known = known_lines(tool, corpus)
    return [line for line in (text or "").splitlines() if shape(tool, line) not in known]


def errors(corpus=HERE):
    """Every problem of the corpus (one string each): files that do not load, duplicate ids."""
    problems = []
    for path in paths(corpus):
        try:
            load(path, corpus)
        except TranscriptError as exc:
            problems.append(str(exc))
    return problems
