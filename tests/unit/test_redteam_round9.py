# -*- coding: utf-8 -*-
"""Red-team round 9 (attacks written from the documentation and commit messages only) on issue 45 item 4,
round 6 (sweep cost; commits after 46fbccf):

1. The fleet report files (fleet-report.json, junit.xml, junit-fleet.xml, fleet-report.html, of the run
   and of the fleet picture) are byte-identical to what 46fbccf's code wrote, for any input: the same
   callback events (odd check values, host names, same-named tasks, loops, two runs merged) played into
   46fbccf's plugins (git archive) and into the checkout's, each in its own process, files compared.
2. node_validate / SysfsReader below a root other than '/': nothing outside root is read; answers and
   node_validate payloads equal 46fbccf's on every fixture node.
3. The accelerated mode's wrap_var shim: a result is handed on uncopied only when it is a plain tree.

Failing attacks live in /work/notes/redteam-round9-failing.py (not committed)."""

import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".collections")

TYPES = r'''"""Value types for red-team round 9's old-vs-new report comparison (pickled into both processes)."""


class Str(str):
    pass


class LoudStr(str):
    def __str__(self):
        return "loud"

    def __repr__(self):
        return "LoudStr!"


class HtmlStr(str):
    def __html__(self):
        return "<b>raw html</b>"


class EvilStr(str):
    """A str subclass whose methods lie (replace, __contains__, __format__, __str__, lower, split)."""

    def replace(self, *_args):
        return "EVIL-REPLACE"

    def __contains__(self, _item):
        return True

    def __format__(self, _spec):
        return "EVIL-FORMAT"

    def __str__(self):
        return "EVIL-STR"

    def lower(self):
        return "evil-lower"

    def split(self, *_args, **_kwargs):
        return ["evil", "split"]

    def startswith(self, *_args):
        return True


class Int(int):
    pass


class Float(float):
    pass


class Dict(dict):
    pass


class List(list):
    pass
'''
_TYPES_DIR = tempfile.mkdtemp(prefix="rt9types")
with open(os.path.join(_TYPES_DIR, "rt9_types.py"), "w") as _handle:
    _handle.write(TYPES)
sys.path.insert(0, _TYPES_DIR)
import rt9_types  # noqa: E402  pylint: disable=wrong-import-position,import-error

DRIVER = r'''"""Persistent driver: argv[1] = a directory holding ansible_collections/gpufleet/cluster (old or new code).
Reads length-prefixed pickled scenarios on stdin, writes length-prefixed pickled answers on stdout:
{"files": {relative path: bytes}, "snapshots": [...], "errors": [...], "warnings": [...]}."""
import io
import os
import pickle
import shutil
import struct
import sys
import tempfile

ROOT = sys.argv[1]
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import rt9_types  # noqa: E402,F401
import yaml  # noqa: E402
from ansible import constants as C  # noqa: E402
from ansible.executor.task_result import CallbackTaskResult  # noqa: E402
from ansible.inventory.host import Host  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.callback import fleet_report as cb  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet_report_html, report_json  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import junit_xml  # noqa: E402

assert cb.__file__.startswith(os.path.realpath(ROOT)) or cb.__file__.startswith(ROOT), cb.__file__
PLUGIN = "gpufleet.cluster.fleet_report"
C.config.initialize_plugin_configuration_definitions("callback", PLUGIN, yaml.safe_load(cb.DOCUMENTATION)["options"])


class Display:
    verbosity = 0

    def __init__(self):
        self.lines, self.warnings, self.errors = [], [], []

    def display(self, msg, color=None, **_kw):
        self.lines.append(msg)

    def banner(self, msg, **_kw):
        self.lines.append(msg)

    def warning(self, msg, **_kw):
        self.warnings.append(msg)

    def error(self, msg, **_kw):
        self.errors.append(msg)

    def vvv(self, msg, **_kw):
        pass


class Task:
    delegate_to = None
    no_log = False
    ignore_errors = False

    def __init__(self, name, action, uuid):
        self.name, self.action, self._uuid = name, action, uuid

    def get_name(self):
        return self.name


class Playbook:
    def __init__(self, name):
        self._file_name = name


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        self.now += 0.25
        return self.now


def snapshot(directory):
    files = {}
    for base, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, directory)
            if os.path.islink(path):
                files[rel] = b"-> " + os.readlink(path).encode()
            else:
                with open(path, "rb") as handle:
                    files[rel] = handle.read()
    return files


def run(scenario):
    directory = tempfile.mkdtemp(prefix="rt9rep")
    out = {"snapshots": [], "errors": [], "warnings": [], "exceptions": []}
    try:
        if scenario.get("previous") is not None:  # a hand-edited/odd previous picture
            with open(os.path.join(directory, "fleet-report.json"), "wb") as handle:
                handle.write(scenario["previous"])
        for number, events in enumerate(scenario["runs"]):
            stamps = iter(["2026-11-29T10:%02d:%02dZ" % (number, k) for k in range(60)])
            cb._utc_now = lambda: next(stamps)
            cb.time = Clock()
            display = Display()
            callback = cb.CallbackModule(display=display)
            callback._load_name = PLUGIN
            options = dict(scenario.get("options", {}))
            options["dir"] = directory
            callback.set_options(direct=options)
            callback.v2_playbook_on_start(Playbook(scenario.get("playbook", "validate.yml")))
            try:
                for event in events:
                    kind = event[0]
                    if kind == "task_start":
                        _, name, action, uuid = event
                        callback.v2_playbook_on_task_start(Task(name, action, uuid), False)
                    elif kind == "runner_start":
                        _, host, name, action, uuid = event
                        callback.v2_runner_on_start(Host(host), Task(name, action, uuid))
                    else:
                        _, host, name, action, uuid, data = event
                        res = CallbackTaskResult(Host(host), Task(name, action, uuid), data, {"name": name})
                        getattr(callback, "v2_runner_on_" + kind)(res)
                callback.v2_playbook_on_stats(None)
            except Exception as exc:  # noqa: BLE001
                out["exceptions"].append("%s: %s" % (type(exc).__name__, exc))
            out["errors"].append([m.replace(directory, "<dir>") for m in display.errors])
            out["warnings"].append([m.replace(directory, "<dir>") for m in display.warnings])
            out["snapshots"].append(snapshot(directory))
        # the renderers on the raw documents as well (a document is what the callback hands them)
        for doc in scenario.get("documents", ()):
            row = []
            for render in (report_json.to_json, junit_xml, fleet_report_html.render):
                try:
                    row.append(("ok", render(doc)))
                except Exception as exc:  # noqa: BLE001
                    row.append(("error", type(exc).__name__, str(exc)[:200]))
            out.setdefault("documents", []).append(row)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return out


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return
        scenario = pickle.loads(stdin.read(struct.unpack(">Q", head)[0]))
        try:
            answer = run(scenario)
        except Exception as exc:  # noqa: BLE001
            answer = {"crash": "%s: %s" % (type(exc).__name__, exc)}
        blob = pickle.dumps(answer)
        stdout.write(struct.pack(">Q", len(blob)) + blob)
        stdout.flush()


if __name__ == "__main__":
    main()
'''

# ---------------------------------------------------------------------------------------------------------
# 1. Report files: the new writers against 46fbccf's, byte for byte, driven through the fleet_report callback
# ---------------------------------------------------------------------------------------------------------

OLD_COMMIT = "46fbccf"


class Side(object):
    """One persistent driver process over one collection tree."""

    def __init__(self, root, workdir):
        self.proc = subprocess.Popen([sys.executable, os.path.join(workdir, "rt9_report_driver.py"), root],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=workdir)

    def ask(self, scenario):
        self.send(scenario)
        return self.receive()

    def send(self, scenario):
        blob = pickle.dumps(scenario)
        self.proc.stdin.write(struct.pack(">Q", len(blob)) + blob)
        self.proc.stdin.flush()

    def receive(self):
        head = self.proc.stdout.read(8)
        assert len(head) == 8, "driver died"
        return pickle.loads(self.proc.stdout.read(struct.unpack(">Q", head)[0]))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def old_root(tmp_path_factory):
    """46fbccf's plugins/ (and galaxy.yml) as a collection tree: git archive, as docs/performance.md's A/B."""
    old = str(tmp_path_factory.mktemp("rt9old"))
    tree = os.path.join(old, "ansible_collections", "gpufleet", "cluster")
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", OLD_COMMIT, "plugins", "galaxy.yml"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return old


@pytest.fixture(scope="module")
def sides(tmp_path_factory, old_root):
    work = str(tmp_path_factory.mktemp("rt9"))
    with open(os.path.join(work, "rt9_report_driver.py"), "w") as handle:
        handle.write(DRIVER)
    with open(os.path.join(work, "rt9_types.py"), "w") as handle:
        handle.write(TYPES)
    pair = (Side(old_root, work), Side(os.environ.get("RT9_NEW", COLLECTIONS), work))
    yield pair
    for side in pair:
        side.close()


def same_files(sides, scenario):
    for side in sides:  # both render at once
        side.send(scenario)
    old, new = (side.receive() for side in sides)
    assert "crash" not in old and "crash" not in new, (old.get("crash"), new.get("crash"))
    assert old["exceptions"] == new["exceptions"]
    assert old["errors"] == new["errors"]
    assert old["warnings"] == new["warnings"]
    for number, (before, after) in enumerate(zip(old["snapshots"], new["snapshots"])):
        assert sorted(before) == sorted(after), (number, sorted(before), sorted(after))
        for name in before:
            if before[name] != after[name]:
                a, b = before[name], after[name]
                at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                raise AssertionError("run %d %s differs at byte %d: old %r new %r" % (
                    number, name, at, a[max(0, at - 80):at + 80], b[max(0, at - 80):at + 80]))
    assert old.get("documents") == new.get("documents")
    return old


SPECIAL_CHARS = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f", "\x85", "\x9f", "\ud800", "\udfff",
                 "\udc80", "\ufffe", "\uffff", "\ufeff", "\u2028", "\u2029", "\U0001f600", "\U0010ffff", "\r", "\n",
                 "\t", "&", "<", ">", '"', "'", "]", "[", "}", "{", ",", ":", "\\", "/", " ", "\u00e9", "\u200b"]
SPECIAL_STRINGS = ["]]>", "}, {", "},\n  {", "}, {\n", '"key": 1', '{"a": [1, 2]}', '"', '""', "nan", "NaN",
                   "Infinity", "-inf", "<![CDATA[x]]>", "&amp;", "&#0;", "<script>alert(1)</script>", "x" * 3000,
                   "\\u0000", "\\ud800", "gpu0\u2013gpu7", "", " ", "0x10", "1e400", "true", "null",
                   '{"id": "gpu.count"}', "</td><td>", "{{ lookup('pipe','id') }}", "{% raw %}", "%s %d"]
STATUSES = ["pass", "fail", "warn", "skip"]

odd_text = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL_CHARS)), max_size=10).map("".join),
    st.sampled_from(SPECIAL_STRINGS))
odd_int = st.one_of(st.integers(), st.sampled_from([
    0, -1, 2 ** 63 - 1, 2 ** 63, -2 ** 63, -2 ** 63 - 1, 2 ** 64, 10 ** 30, -10 ** 30]),
    st.sampled_from([4400, -4400]).map(lambda e: 10 ** abs(e) * (1 if e > 0 else -1)))
# elapsed_ms: an int too large for a float raised OverflowError in the callback of 46fbccf and is now "not
# measured" (a deliberate change, its own test: test_fleet_report_elapsed.py), so the byte comparison with the
# old code leaves those out of elapsed_ms (they stay in every other value)
elapsed_int = odd_int.filter(lambda value: abs(value) < 10 ** 300)
odd_float = st.one_of(st.floats(), st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e308,
                                                    5e-324, 1e16, 0.1, 1.0, 2.5]))
scalar = st.one_of(
    odd_text, odd_int, odd_float, st.booleans(), st.none(),
    odd_text.map(rt9_types.Str), odd_text.map(rt9_types.LoudStr), odd_int.map(rt9_types.Int),
    odd_float.map(rt9_types.Float))
odd_key = st.one_of(odd_text, odd_text, odd_int, odd_float, st.booleans(), st.none(), odd_text.map(rt9_types.Str))
flat_container = st.one_of(
    st.lists(scalar, max_size=4), st.dictionaries(odd_key, scalar, max_size=4),
    st.just([]), st.just({}), st.lists(scalar, max_size=3).map(tuple),
    st.lists(scalar, max_size=3).map(rt9_types.List), st.dictionaries(odd_text, scalar, max_size=3).map(rt9_types.Dict))
value = st.recursive(st.one_of(scalar, flat_container),
                     lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(odd_key, inner, max_size=3)),
                     max_leaves=10)
check_id = st.one_of(st.sampled_from(["gpu.count", "gpu.ecc.volatile_uncorrectable", "rdma.port.state",
                                      "rdma.modules", "tuning.hugepages", "host.validation", "nccl.busbw",
                                      "gpu.fabric", "x", ""]), odd_text)
target = st.one_of(st.sampled_from(["node", "gpu0", "gpu1", "gpu7", "mlx5_0/1", "all_reduce"]), odd_text)


@st.composite
def a_check(draw):
    check = {"id": draw(check_id), "target": draw(target),
             "status": draw(st.one_of(st.sampled_from(STATUSES), st.sampled_from(STATUSES), odd_text)),
             "message": draw(odd_text)}
    for key in ("observed", "expected", "severity", "error"):
        if draw(st.booleans()):
            check[key] = draw(value)
    if draw(st.integers(0, 5)) == 0:
        check.update(draw(st.dictionaries(odd_text, value, max_size=2)))
    return check


host_name = st.one_of(st.sampled_from(["node-01", "node-02", "gpu-a.example.com", "10.0.0.5"]), odd_text)
TASKS = [("validate node", "gpufleet.cluster.node_validate"), ("validate node", "gpufleet.cluster.node_validate"),
         ("gpu health", "gpufleet.cluster.gpu_health"), ("record", "gpufleet.cluster.record_checks"),
         ("shell", "ansible.builtin.shell")]


@st.composite
def a_result_data(draw):
    data = {}
    shape = draw(st.integers(0, 9))
    if shape == 0:  # a loop
        data["results"] = [{"checks": draw(st.lists(a_check(), max_size=3)), "item": draw(value),
                            "ansible_loop_var": "item", "_ansible_item_label": draw(odd_text)}
                           for _ in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()):
            data["results"].append({"skipped": True, "item": draw(value)})
        if draw(st.booleans()):
            data["results"].append({"failed": True, "msg": draw(odd_text), "item": draw(value)})
        if draw(st.booleans()):
            data["results"].append({"checks": draw(st.lists(a_check(), max_size=2)), "elapsed_ms": draw(elapsed_int)})
    elif shape == 1:
        data.update({"msg": draw(odd_text), "exception": draw(odd_text)})
    else:
        data["checks"] = draw(st.lists(a_check(), max_size=5))
    if draw(st.booleans()):
        data["elapsed_ms"] = draw(st.one_of(elapsed_int, odd_float, odd_text))
    if draw(st.integers(0, 3)) == 0:
        data["ansible_facts"] = draw(st.dictionaries(st.sampled_from(["nvidia", "mlx5", "x"]), value, max_size=2))
    if draw(st.integers(0, 4)) == 0:
        data["summary"] = draw(value)
    return data


@st.composite
def a_run(draw, hosts):
    events = []
    for _ in range(draw(st.integers(1, 6))):
        host = draw(st.sampled_from(hosts))
        task_index = draw(st.integers(0, len(TASKS) - 1))
        name, action = TASKS[task_index]
        uuid = "uuid-%d" % task_index  # two tasks of one name: the same name, another task
        if draw(st.booleans()):
            events.append(("task_start", name, action, uuid))
        if draw(st.booleans()):
            events.append(("runner_start", host, name, action, uuid))
        kind = draw(st.sampled_from(["ok", "ok", "ok", "failed", "unreachable", "skipped"]))
        data = draw(a_result_data())
        if kind == "unreachable":
            data = {"unreachable": True, "msg": draw(odd_text)}
        events.append((kind, host, name, action, uuid, data))
    return events


@st.composite
def a_scenario(draw):
    hosts = draw(st.lists(host_name, min_size=1, max_size=3, unique=True))
    runs = [draw(a_run(hosts)) for _ in range(draw(st.integers(1, 2)))]
    return {"runs": runs, "options": {"summary": False}}


@settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(scenario=a_scenario())
def test_report_files_are_the_old_bytes_for_any_results(sides, scenario):
    """docs/performance.md, 'Sweep cost, round 6: the report files': 'every file byte for byte as before'
    (fleet-report.json, junit.xml, junit-fleet.xml, fleet-report.html of the run and of the picture)."""
    same_files(sides, scenario)


# texts a module's JSON result can carry (no lone surrogate: Ansible's decoder refuses them), chosen to hit the
# JSON writer's C-encoder runs: keys with quotes and backslashes, texts holding a key's spelling, '}, {'
TRICKY = ['"observed": ', '"observed": [', '"expected": {', '\\"observed\\": ', 'observed', 'expected', '": ', '": [',
          '"}, {"', "}, {", "},\n  {", "},\n    {", "}\n, {", "\\", "\\\\", '\\"', '"', "a\\", '"a\\\\": ', "\n", "\r\n",
          "\t", "\x00", "\x1f", "\x7f", "\u2028", "\u00e9", "\U0001f600", "]]>", "<", "&", "'", "id", "target",
          "status", "message", '{"id": "x"}', "[1, 2]", "", " ", "nan", "Infinity"]
clean_text = st.one_of(st.sampled_from(TRICKY), st.lists(st.sampled_from(TRICKY), max_size=4).map("".join),
                       st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8))
clean_scalar = st.one_of(clean_text, st.integers(min_value=-2 ** 63, max_value=2 ** 63),
                         st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
                         st.sampled_from([2 ** 63 - 1, -2 ** 63, 2 ** 63, -2 ** 63 - 1, 0.0, -0.0, 1e16, 1e-7]))
clean_key = st.one_of(st.sampled_from(["observed", "expected", "id", "target", "status", "message", "error",
                                       "severity", "detail"] + TRICKY), clean_text)
one_level = st.one_of(clean_scalar, st.lists(clean_scalar, max_size=4), st.dictionaries(clean_key, clean_scalar,
                                                                                        max_size=4),
                      st.just({}), st.just([]))


@st.composite
def a_flat_check(draw):
    check = {"id": draw(st.one_of(st.sampled_from(["gpu.count", "rdma.port.state", "nccl.busbw"]), clean_text)),
             "target": draw(st.one_of(st.sampled_from(["node", "gpu0", "mlx5_0/1"]), clean_text)),
             "status": draw(st.sampled_from(STATUSES)), "message": draw(clean_text)}
    extra = draw(st.dictionaries(clean_key, one_level, max_size=4))
    for key, item in extra.items():
        check[key] = item
    if draw(st.booleans()):  # the keys in another order than the module writes them
        items = list(check.items())
        draw(st.randoms(use_true_random=False)).shuffle(items)
        check = dict(items)
    return check


@st.composite
def a_flat_scenario(draw):
    hosts = draw(st.lists(st.one_of(st.sampled_from(["node-01", "node-02"]), clean_text), min_size=1, max_size=3,
                          unique=True))
    runs = []
    for _ in range(draw(st.integers(1, 2))):
        events = []
        for host in hosts:
            index = draw(st.integers(0, 2))
            name, action = TASKS[index]
            data = {"checks": draw(st.lists(a_flat_check(), min_size=1, max_size=6))}
            if draw(st.booleans()):
                data["elapsed_ms"] = draw(st.one_of(st.integers(0, 10 ** 6), st.floats(0, 1e6)))
            events.append(("ok", host, name, action, "uuid-%d" % index, data))
        runs.append(events)
    return {"runs": runs, "options": {"summary": False}}


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(scenario=a_flat_scenario())
def test_report_files_of_flat_checks_with_tricky_texts_are_the_old_bytes(sides, scenario):
    """The C-encoder path of report_json (checks of exact str keys and scalar / one-level values): texts that
    spell a key, '}, {' and '},\\n  {' inside texts, keys with quotes and backslashes, nested keys equal to the
    check's own keys: the four files of the run and of the picture as 46fbccf wrote them."""
    old = same_files(sides, scenario)
    ids = [c["id"] for events in scenario["runs"] for e in events for c in e[-1]["checks"]]
    if "gpu.count" in ids:  # a check the report takes: the files were written (and compared)
        assert old["snapshots"][-1], "nothing written"


NESTED_KEY_CASES = [
    # a nested dict (expected) holding the key of the container that follows it (observed)
    {"id": "a", "target": "node", "status": "fail", "message": "m", "expected": {"observed": 1, "x": [2]},
     "observed": [1, 2]},
    {"id": "a", "target": "node", "status": "fail", "message": '"observed": [', "observed": {"observed": [1]}},
    {"id": "a", "target": "node", "status": "fail", "message": "m", "expected": {"expected": {}}},
    {"id": "a", "target": "node", "status": "fail", "message": "m", "observed": {"": []}, "": {"": 1}},
    {"id": "a", "target": "node", "status": "fail", "message": "m", "observed": [], "expected": {},
     "x": {"observed": [], "expected": {}}},
    {"id": "a", "target": "node", "status": "fail", "message": "}, {", "observed": {"}, {": "}, {"},
     "expected": ["}, {", {}]},
    {"id": "a", "target": "node", "status": "fail", "message": "m", "observed": {"a\\": "\\", 'b"': '"'},
     'observed"': [1], "observed\\": [2]},
    {"id": "a", "target": "node", "status": "warn", "message": "m", "observed": {1: "int key", "1": "str key"}},
    {"id": "a", "target": "node", "status": "warn", "message": "m", "observed": {True: 1, None: 2, 1.5: 3}},
    {"id": "a", "target": "node", "status": "warn", "message": "m", "observed": {"k": float("nan")},
     "expected": [float("inf"), 2 ** 64]},
    {"id": "a", "target": "node", "status": "warn", "message": "m", "observed": [[1], {"a": {"b": [{}]}}]},
]


@pytest.mark.parametrize("check", NESTED_KEY_CASES)
def test_report_files_of_checks_whose_nested_keys_repeat_their_own_keys(sides, check):
    scenario = {"runs": [[("ok", "node-01", "validate node", "gpufleet.cluster.node_validate", "u",
                           {"checks": [dict(check), dict(check, target="gpu1"), {"id": "b", "target": "node",
                                                                                 "status": "pass", "message": ""}]}),
                          ("ok", "node-02", "validate node", "gpufleet.cluster.node_validate", "u",
                           {"checks": [dict(check)]})]],
                "options": {"summary": False}}
    old = same_files(sides, scenario)
    assert "fleet-report.json" in old["snapshots"][-1]


json_value = st.recursive(st.one_of(clean_scalar, st.floats()),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(clean_key, inner, max_size=3)), max_leaves=8)


@st.composite
def a_previous_picture(draw):
    """A fleet picture as an earlier run (or an editor) left it: checks with any JSON values, odd hosts."""
    hosts = {}
    for host in draw(st.lists(st.one_of(st.sampled_from(["node-01", "node-03"]), clean_text), max_size=3,
                              unique=True)):
        checks = []
        for _ in range(draw(st.integers(0, 3))):
            check = {"id": draw(st.sampled_from(["gpu.count", "rdma.port.state", "x"])),
                     "target": draw(st.sampled_from(["node", "gpu0"])),
                     "status": draw(st.sampled_from(STATUSES)), "message": draw(clean_text),
                     "task": "validate node", "play": draw(st.sampled_from([None, "Validate the fleet"]))}
            if draw(st.booleans()):
                check["observed"] = draw(json_value)
            if draw(st.booleans()):
                check["failing_since"] = draw(st.one_of(st.just("20261128T100000Z-validate.yml"), clean_text))
            checks.append(check)
        entry = {"healthy": draw(st.booleans()), "status": draw(st.sampled_from(STATUSES)), "checks": checks,
                 "last_run": draw(st.sampled_from(["20261128T100000Z-validate.yml", "gone"])),
                 "history": [{"run": "20261128T100000Z-validate.yml", "status": draw(st.sampled_from(STATUSES))}]}
        if draw(st.booleans()):
            entry["durations"] = draw(st.dictionaries(st.one_of(clean_text, st.just("validate node")),
                                                      st.one_of(st.floats(0, 100), json_value), max_size=2))
        for key in ("last_seen", "severity", "summary", "unreachable", "validation_failed", "failing_since"):
            if draw(st.integers(0, 3)) == 0:
                entry[key] = draw(json_value)
        if draw(st.integers(0, 3)) == 0:
            entry["history"] = draw(json_value)
        if draw(st.booleans()):
            entry["facts"] = draw(st.dictionaries(clean_key, json_value, max_size=3))
        hosts[host] = entry
    picture = {"schema_version": draw(st.sampled_from([1, 0])), "scope": "fleet", "hosts": hosts,
               "runs": [{"id": "20261128T100000Z-validate.yml", "hosts": len(hosts), "unhealthy": 0}]}
    if draw(st.booleans()):
        picture["bandwidth_matrices"] = [{"title": draw(clean_text), "hosts": ["a", "b"],
                                          "gbps": [[None, draw(st.floats())], [draw(st.floats()), None]]}]
    return json.dumps(picture).encode()


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(previous=a_previous_picture(), scenario=a_flat_scenario())
def test_report_files_merged_into_an_odd_previous_picture_are_the_old_bytes(sides, previous, scenario):
    """The previous fleet picture is data read back (an earlier run, another version, an editor): whatever it
    holds, the merged picture's files are 46fbccf's bytes."""
    scenario = dict(scenario, previous=previous)
    same_files(sides, scenario)


@pytest.mark.parametrize("options", [{"junit": False}, {"html": False}, {"contracts_url": "https://x/c.md"},
                                     {"contracts_url": "javascript:alert('x')\"<b>&amp;"},
                                     {"contracts_url": "https://x/c.md#\u00e9 ]]>"}, {"summary_limit": 1},
                                     {"merge": False}, {"keep_runs": 1}])
def test_report_files_with_other_options_are_the_old_bytes(sides, options):
    checks = [dict(c, target=t) for c in NESTED_KEY_CASES for t in ("node", "gpu0")]
    scenario = {"runs": [[("ok", "node-01", "validate node", "gpufleet.cluster.node_validate", "u", {"checks": checks,
                                                                                                 "elapsed_ms": 12}),
                          ("failed", "node-02", "validate node", "gpufleet.cluster.node_validate", "u",
                           {"msg": "boom <b>]]>", "exception": "Traceback"}),
                          ("unreachable", "node-03", "validate node", "gpufleet.cluster.node_validate", "u",
                           {"unreachable": True, "msg": "ssh: \x1b[31m"})]] * 2,
                "options": dict(options, summary=False)}
    same_files(sides, scenario)


# ---------------------------------------------------------------------------------------------------------
# 2. SysfsReader below a root other than '/': containment (links, races, odd files) and 46fbccf's answers
# ---------------------------------------------------------------------------------------------------------

SYSFS_DRIVER = r'''"""argv[1] = a directory holding ansible_collections/gpufleet/cluster; argv[2] = tests/unit (helpers).
stdin: JSON {"kind": "payload", "roots": [...]} or {"kind": "ops", "root": ..., "ops": [...]}; stdout: JSON."""
import json
import os
import shutil
import sys

sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
sys.path.insert(2, sys.argv[3])
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import sysfs  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader  # noqa: E402

assert sysfs.__file__.startswith(sys.argv[1]), sysfs.__file__


def answers(reader, rel):
    out = {}
    for name in ("read", "problem", "exists", "isdir", "listdir", "real_name", "real_parts", "link_name"):
        method = getattr(reader, name, None)
        if method is None:
            continue
        try:
            value = method(rel)
            out[name] = value if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)) \
                else repr(value)
        except Exception as exc:  # noqa: BLE001
            out[name] = "raised %s" % type(exc).__name__
    return out


def apply(action):
    kind = action[0]
    if kind == "symlink":  # replace path by a link to target
        _, path, target = action
        remove(path)
        os.symlink(target, path)
    elif kind == "dir":
        remove(action[1])
        os.makedirs(action[1])
    elif kind == "fifo":
        remove(action[1])
        os.mkfifo(action[1])
    elif kind == "file":
        remove(action[1])
        with open(action[1], "w") as handle:
            handle.write(action[2])
    elif kind == "remove":
        remove(action[1])


def remove(path):
    if os.path.islink(path) or os.path.isfile(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


class RacingOs(object):
    """os for sysfs: before the first os.open / os.stat / os.lstat / os.path of a path ending in `trigger`
    (call `when`), the tree is changed (a swap between lookup and open)."""

    def __init__(self, trigger, when, actions):
        self.trigger, self.when, self.actions, self.fired = trigger, when, actions, False
        self.opened = []

    def __getattr__(self, name):
        return getattr(os, name)

    def _maybe(self, name, path):
        if not self.fired and name == self.when and isinstance(path, str) and path.endswith(self.trigger):
            self.fired = True
            for action in self.actions:
                apply(action)

    def open(self, path, flags, *args, **kwargs):
        self._maybe("open", path)
        fd = os.open(path, flags, *args, **kwargs)
        try:
            self.opened.append(os.readlink("/proc/self/fd/%d" % fd))
        except OSError:
            pass
        return fd

    def stat(self, path, *args, **kwargs):
        self._maybe("stat", path)
        return os.stat(path, *args, **kwargs)

    def readlink(self, path, *args, **kwargs):
        if self.when == "readlink-fd" and isinstance(path, str) and path.startswith("/proc/self/fd/"):
            self._maybe("readlink-fd", self.trigger)
        else:
            self._maybe("readlink", path)
        return os.readlink(path, *args, **kwargs)

    def lstat(self, path, *args, **kwargs):
        self._maybe("lstat", path)
        return os.lstat(path, *args, **kwargs)


def main():
    request = json.loads(sys.stdin.read())
    if request["kind"] == "payload":
        from nvml_scenarios import fake_with
        from runners import ScriptedRunner
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.nvml import NvmlAdapter
        from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import validate_node
        from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES
        out = []
        for root, params, scenario in request["roots"]:
            params = dict(params, root=root)
            result, errors = validate_node(FAMILIES, params, runner=ScriptedRunner(), reader=SysfsReader(root),
                                           nvml=NvmlAdapter(fake_with(scenario)), now=1763640000)
            result.pop("elapsed_ms", None)
            out.append([json.dumps(result, sort_keys=True, default=repr), errors])
        print(json.dumps(out))
        return
    if request["kind"] == "many":
        print(json.dumps([[answers(SysfsReader(root), rel) for rel in rels] for root, rels in request["trees"]]))
        return
    racing = None
    real_os = sysfs.os
    if request.get("race"):
        trigger, when, actions = request["race"]
        racing = sysfs.os = RacingOs(trigger, when, actions)
    reader = SysfsReader(request["root"])
    out = []
    try:
        for op in request["ops"]:
            if op[0] == "ask":
                out.append(answers(reader, op[1]))
            else:
                apply(op)
                out.append(None)
    finally:
        sysfs.os = real_os
    print(json.dumps({"answers": out, "opened": racing.opened if racing else None,
                      "fired": racing.fired if racing else None}))


main()
'''
SECRET = "OUTSIDE-SECRET"
FIXTURE_NODES = os.path.join(REPO, "tests", "fixtures", "nodes")


def sysfs_ask(code_root, request, tmp_path):
    driver = os.path.join(str(tmp_path), "rt9_sysfs_driver.py")
    if not os.path.exists(driver):
        with open(driver, "w") as handle:
            handle.write(SYSFS_DRIVER)
    proc = subprocess.run([sys.executable, driver, code_root, os.path.join(REPO, "tests", "unit"),
                           os.path.join(REPO, "tests")],
                          input=json.dumps(request), capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def make_tree(base, root_is_link=False):
    """root/sys/devices/pci0/eth0/{address,mtu}, root/sys/class/net/eth0 -> ../../devices/pci0/eth0 and an
    outside/ beside the root whose every file says OUTSIDE-SECRET."""
    tree = os.path.join(base, "tree")
    device = os.path.join(tree, "sys", "devices", "pci0", "eth0")
    os.makedirs(device)
    for name, text in (("address", "aa:bb\n"), ("mtu", "1500\n"), ("speed", "100000\n")):
        with open(os.path.join(device, name), "w") as handle:
            handle.write(text)
    os.makedirs(os.path.join(tree, "sys", "class", "net"))
    os.symlink("../../devices/pci0/eth0", os.path.join(tree, "sys", "class", "net", "eth0"))
    outside = os.path.join(base, "outside")
    os.makedirs(os.path.join(outside, "eth0"))
    for name in ("address", "mtu", "speed", "f"):
        with open(os.path.join(outside, "eth0", name), "w") as handle:
            handle.write(SECRET + "\n")
    with open(os.path.join(outside, "f"), "w") as handle:
        handle.write(SECRET + "\n")
    root = tree
    if root_is_link:
        root = os.path.join(base, "root")
        os.symlink(tree, root)
    return root, tree, outside


def no_secret(answer, opened, tree):
    text = json.dumps(answer)
    assert SECRET not in text, text
    for path in opened or ():
        assert path == tree or path.startswith(tree + os.sep), path


ADDR, MTU, SPEED = "sys/class/net/eth0/address", "sys/class/net/eth0/mtu", "sys/class/net/eth0/speed"


def swaps(tree, outside):
    """Changes of the tree during a run that take a path out of the root."""
    link = os.path.join(tree, "sys", "class", "net", "eth0")
    device = os.path.join(tree, "sys", "devices", "pci0", "eth0")
    return {
        "class link to outside (absolute)": [["symlink", link, os.path.join(outside, "eth0")]],
        "class link to outside (relative)": [["symlink", link, os.path.relpath(os.path.join(outside, "eth0"),
                                                                               os.path.dirname(link))]],
        "device dir replaced by a link out": [["symlink", device, os.path.join(outside, "eth0")]],
        "pci0 dir replaced by a link out": [["symlink", os.path.dirname(device), outside]],
        "file replaced by a link out": [["symlink", os.path.join(device, "mtu"), os.path.join(outside, "f")],
                                        ["symlink", os.path.join(device, "speed"), os.path.join(outside, "f")]],
    }


SWAP_NAMES = list(swaps("/t", "/o"))


RACE_POINTS = [("open", "eth0/mtu"), ("lstat", "eth0/mtu"), ("stat", "eth0/mtu"), ("lstat", "pci0/eth0"),
               ("lstat", "net/eth0")]


@pytest.mark.parametrize("point", RACE_POINTS, ids=["%s-%s" % p for p in RACE_POINTS])
def test_a_file_swapped_for_a_link_out_between_lookup_and_open_is_not_read(tmp_path, point):
    """The race on the last name: the attribute replaced by a link out of root right before the reader's
    os.open / os.lstat / os.stat of it (081bfa8: opened with O_NOFOLLOW, the lookup's lstat reused)."""
    root, tree, outside = make_tree(str(tmp_path / "t"), False)
    when, trigger = point
    request = {"kind": "ops", "root": root, "ops": [["ask", MTU], ["ask", SPEED]],
               "race": [trigger, when, swaps(tree, outside)["file replaced by a link out"]]}
    got = sysfs_ask(COLLECTIONS, request, tmp_path)
    no_secret(got["answers"], got["opened"], tree)


@pytest.mark.parametrize("kind", ["fifo", "dir", "remove"])
def test_a_file_replaced_between_lookup_and_open_by_a_fifo_or_dir_or_nothing(tmp_path, kind):
    """'only regular files (a FIFO, socket or device where an attribute should be is null, never opened for
    reading)': a FIFO swapped in at the open must not hang the run (the subprocess would time out)."""
    root, tree, _outside = make_tree(str(tmp_path / "t"), False)
    mtu = os.path.join(tree, "sys", "devices", "pci0", "eth0", "mtu")
    action = [kind, mtu]
    request = {"kind": "ops", "root": root, "ops": [["ask", MTU]], "race": ["eth0/mtu", "open", [action]]}
    got = sysfs_ask(COLLECTIONS, request, tmp_path)
    answer = got["answers"][0]
    assert answer["read"] is None, answer
    if got["fired"] and kind != "remove":
        assert answer["problem"] is not None, answer  # it existed at the lookup: not a plain absent file


def odd_tree(base):
    root, tree, outside = make_tree(base, False)
    deep = os.path.join(tree, *(["d"] * 300))
    os.makedirs(deep)
    with open(os.path.join(deep, "f"), "w") as handle:
        handle.write("deep\n")
    links = os.path.join(tree, "links")
    os.makedirs(links)
    with open(os.path.join(links, "target"), "w") as handle:
        handle.write("t\n")
    previous = "target"
    for number in range(50):  # a chain of 50 relative links (the kernel gives up at 40)
        os.symlink(previous, os.path.join(links, "c%d" % number))
        previous = "c%d" % number
    os.symlink("loop-b", os.path.join(links, "loop-a"))
    os.symlink("loop-a", os.path.join(links, "loop-b"))
    os.symlink("nowhere", os.path.join(links, "dangling"))
    os.symlink(os.path.join(outside, "f"), os.path.join(links, "abs-out"))
    os.symlink(os.path.join(tree, "links", "c5"), os.path.join(links, "abs-in"))
    os.symlink("../../outside/f", os.path.join(links, "rel-out"))
    os.symlink("..", os.path.join(links, "up"))
    os.symlink("../..", os.path.join(links, "up2"))
    os.symlink("/", os.path.join(links, "slash"))
    os.symlink(tree, os.path.join(links, "self"))
    os.mkfifo(os.path.join(links, "fifo"))
    os.symlink("fifo", os.path.join(links, "to-fifo"))
    os.symlink("/dev/null", os.path.join(links, "devnull"))
    os.symlink("/dev/zero", os.path.join(links, "devzero"))
    unreadable = os.path.join(links, "unreadable")
    with open(unreadable, "w") as handle:
        handle.write("x\n")
    os.chmod(unreadable, 0)
    return root, tree


ODD_RELS = (["/".join(["d"] * 300) + "/f", "/".join(["d"] * 300) + "/" + "/".join([".."] * 300) + "/" + MTU,
             "links/c5", "links/c39", "links/c40", "links/c41", "links/c49", "links/loop-a", "links/loop-b/x",
             "links/dangling", "links/abs-out", "links/abs-in", "links/rel-out", "links/up/links/c1",
             "links/up2/outside/f", "links/up2/tree/links/target", "links/slash/etc/hostname", "links/self/" + MTU,
             "links/fifo", "links/to-fifo", "links/devnull", "links/devzero", "links/unreadable", "../outside/f",
             "sys/../../outside/f", "sys/class/../../../outside/f", "/" + MTU, "//" + MTU, "./" + MTU, MTU + "/",
             MTU + "/.", "sys/class/net/eth0/../../../" + MTU, "sys/class/net/eth0/..", "links/c3/x", "", ".", "..",
             "links/" + "x" * 300, "links/\udcff", "links/\x00nul", "sys/class/net/eth0/../../outside/f"])


@pytest.mark.parametrize("root_is_link", [False, True], ids=["root-dir", "root-link"])
def test_odd_paths_read_nothing_outside_and_answer_as_46fbccf(tmp_path, old_root, root_is_link):
    root, tree = odd_tree(str(tmp_path / "t"))
    if root_is_link:
        os.symlink(tree, str(tmp_path / "r"))
        root = str(tmp_path / "r")
    request = {"kind": "ops", "root": root, "ops": [["ask", rel] for rel in ODD_RELS], "race": ["\0", "open", []]}
    new = sysfs_ask(COLLECTIONS, request, tmp_path)
    no_secret(new["answers"], new["opened"], tree)
    for rel, answer in zip(ODD_RELS, new["answers"]):
        assert "raised" not in json.dumps(answer), (rel, answer)
    old = sysfs_ask(old_root, request, tmp_path)
    differ = [(rel, a, b) for rel, a, b in zip(ODD_RELS, old["answers"], new["answers"]) if a != b]
    assert not differ, differ[:3]


NODE_PARAMS = [
    ({"fail_on": "never", "gpu": {"expected_count": 8, "expected_driver_version": "580", "xid_source": "none"},
      "rdma": {"expected_devices": 9, "min_rate_gbps": 200}}, "h100-healthy"),
    ({"fail_on": "never", "gpu": {"xid_source": "auto"}, "rdma": {"check_counters": True},
      "tuning": {"hugepages_2m": 16, "tuned_profile": "throughput-performance"}}, "h100-healthy"),
    ({"fail_on": "warn"}, "h100-healthy"),
]


@pytest.mark.parametrize("through_link", [False, True], ids=["root-dir", "root-link"])
def test_node_validate_results_on_every_fixture_node_are_46fbccfs(tmp_path, old_root, through_link):
    """The brief's promise 2: results (checks, facts) for every fixture tree under tests/fixtures/nodes are
    the old code's with the same options (each side in its own process)."""
    roots = []
    for node in sorted(os.listdir(FIXTURE_NODES)):
        root = os.path.join(FIXTURE_NODES, node)
        if not os.path.isdir(root):
            continue
        if through_link:
            os.symlink(root, str(tmp_path / node))
            root = str(tmp_path / node)
        for params, scenario in NODE_PARAMS:
            roots.append([root, params, scenario])
    request = {"kind": "payload", "roots": roots}
    old = sysfs_ask(old_root, request, tmp_path)
    new = sysfs_ask(COLLECTIONS, request, tmp_path)
    assert len(old) == len(roots)
    for (root, params, _scenario), before, after in zip(roots, old, new):
        assert before == after, (root, params)


# ---------------------------------------------------------------------------------------------------------
# 3. Accelerated mode: the module result Mitogen wraps is handed on uncopied only when it is a plain tree
#    (driven as tests/unit/test_accelerated_worker.py drives the shim)
# ---------------------------------------------------------------------------------------------------------

try:
    import ansible_mitogen  # noqa: F401  pylint: disable=unused-import
except ImportError:  # pragma: no cover
    ansible_mitogen = None

needs_mitogen = pytest.mark.skipif(ansible_mitogen is None, reason="mitogen is not installed")


@pytest.fixture(scope="module")
def shim():
    from test_accelerated_worker import shim as fixture  # pylint: disable=import-outside-toplevel
    generator = fixture.__wrapped__()
    module = next(generator)
    yield module
    next(generator, None)


def _acc():
    import test_accelerated_worker as acc  # pylint: disable=import-outside-toplevel
    return acc


class SubStr(str):
    pass


class SubInt(int):
    pass


class SubDict(dict):
    pass


class SubList(list):
    pass


def _deep(depth):
    value = {"leaf": 1}
    for _ in range(depth):
        value = {"d": [value]}
    return value


def _aliased_cases():
    shared_dict = {"x": 1}
    shared_empty = []
    inner = {"k": ["v"]}
    return [
        {"a": shared_dict, "b": shared_dict},  # a dict in two places
        {"a": [shared_empty, shared_empty]},  # an empty list twice
        {"a": inner, "b": [inner["k"]]},  # a list both inside a dict and alone
        {"checks": [inner, inner, inner]},
    ]


@needs_mitogen
@pytest.mark.parametrize("number", range(4))
def test_a_container_shared_anywhere_in_the_result_is_copied_apart(shim, number):
    acc = _acc()
    result = _aliased_cases()[number]
    expected = acc.shape(acc.core_wrap_var(shim, result))
    wrapped = shim.plain_wrap_var(acc.decoded(shim, result))
    assert acc.shape(wrapped) == expected
    seen = set()

    def walk(value):
        if isinstance(value, (dict, list)):
            assert id(value) not in seen, "a container still shared: %r" % (value,)
            seen.add(id(value))
            for item in (value.values() if isinstance(value, dict) else value):
                walk(item)
    walk(wrapped)


@needs_mitogen
@pytest.mark.parametrize("odd", [SubStr("s"), SubInt(3), SubDict(a=1), SubList([1]), b"x", (1, 2), {1},
                                 float("nan"), 2 ** 80, "{{ lookup('pipe','id') }}", "{% raw %}x",
                                 {"__ansible_unsafe": "x"}, {"__ansible_vault": "x"}])
def test_a_decoded_result_holding_any_other_type_is_what_wrap_var_makes_of_it(shim, odd):
    """'any other value ... is copied/wrapped as ansible-core's wrap_var would': subclasses of str, int, dict,
    list; bytes, tuples, sets; template text (untrusted either way); values that look like ansible-core's
    own JSON markers."""
    acc = _acc()
    result = {"checks": [{"id": "x", "observed": odd}], "odd": [odd]}
    expected = acc.shape(acc.core_wrap_var(shim, result))
    wrapped = shim.plain_wrap_var(acc.decoded(shim, result))
    assert acc.shape(wrapped) == expected
    if not isinstance(odd, (str, int, float, dict, list)) or type(odd) not in (str, int, float, dict, list):
        assert wrapped is not result


@needs_mitogen
def test_a_part_of_the_decoded_result_wrapped_alone_is_a_copy(shim):
    acc = _acc()
    result = {"checks": [{"id": "x"}], "ansible_facts": {"nvidia": {"gpus": []}}}
    acc.decoded(shim, result)
    part = shim.plain_wrap_var(result["ansible_facts"])
    assert part == result["ansible_facts"] and part is not result["ansible_facts"]
    whole = shim.plain_wrap_var(result)  # the decoded one was not the one wrapped first: a copy too
    assert whole == result


@needs_mitogen
@pytest.mark.parametrize("depth", [10, 200, 440])
def test_a_deep_result_is_wrapped_as_wrap_var_wraps_it(shim, depth):
    acc = _acc()
    result = json.loads(json.dumps(_deep(depth)))

    def outcome(call):
        try:
            return ("ok", acc.shape(call()))
        except RecursionError:
            return ("error", "RecursionError")
    expected = outcome(lambda: acc.core_wrap_var(shim, result))
    got = outcome(lambda: shim.plain_wrap_var(acc.decoded(shim, result)))
    if expected[0] == "ok":
        assert got == expected


ECHO_MODULE = r'''#!/usr/bin/python
# returns its 'result' option (a dict) merged into the module result, as it is
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"result": {"type": "raw", "required": True}}, supports_check_mode=True)
    module.exit_json(changed=False, **module.params["result"])


main()
'''
ACC_PLAY = r'''- hosts: all
  gather_facts: false
  vars:
    ansible_connection: local
    tmpl: "{{ '{{' }} lookup('pipe', 'echo TEMPLATED') {{ '}}' }}"
  tasks:
    - name: a module result holding template text, shared values, _ansible keys, facts
      rt9_echo:
        result:
          out: "{{ tmpl }}"
          nested: {a: ["{{ tmpl }}", 1, 2.5, null, true], b: {}}
          ansible_facts: {rt9_fact: "{{ tmpl }}", rt9_list: [1, 2]}
          list: [[], {}, [[]]]
          _ansible_verbose_always: true
      register: r
    - name: used later
      ansible.builtin.debug:
        msg: "{{ r.out }} | {{ r.nested.a[0] }} | {{ rt9_fact | default(ansible_facts.rt9_fact) }}"
      register: d
    - name: mutate the registered result
      ansible.builtin.set_fact:
        r: "{{ r | combine({'out': 'mutated', 'nested': {'a': [9]}}, recursive=true) }}"
        copy_of_r: "{{ r }}"
    - name: the result after the mutation
      ansible.builtin.debug:
        msg: "{{ r.out }} {{ r.nested.a }} {{ copy_of_r.out }}"
      register: d2
    - name: a loop
      rt9_echo:
        result: {item: "{{ item }}", out: "{{ tmpl }}"}
      loop: [1, "{{ '{{' }} 7 * 6 {{ '}}' }}", {k: v}]
      register: loop_r
    - name: loop results used
      ansible.builtin.debug:
        msg: "{{ loop_r.results | map(attribute='item') | list }} {{ loop_r.results | map(attribute='out') | list }}"
      register: d3
    - name: no_log
      rt9_echo:
        result: {secret: "hunter2", out: "{{ tmpl }}"}
      no_log: true
      register: nl
    - name: after no_log
      ansible.builtin.debug:
        msg: "{{ nl.secret }} {{ nl.out }}"
      register: d4
    - name: markers and internal keys
      rt9_echo:
        result:
          marked: {__ansible_unsafe: "{{ tmpl }}"}
          _ansible_no_log: false
          _ansible_item_label: "{{ tmpl }}"
          ansible_facts: {ansible_connection: ssh, rt9_x: "{{ tmpl }}", discovered_interpreter_python: /usr/bin/python3}
          warnings: ["{{ tmpl }}"]
          deprecations: []
      register: m
      ignore_errors: true
    - name: used
      ansible.builtin.debug:
        msg: >-
          {{ m.marked | default('none') }} / {{ m.ansible_facts | default('') }} /
          {{ ansible_facts.rt9_x | default('nofact') }}
      register: u
    - name: a module that says no_log
      rt9_echo:
        result: {_ansible_no_log: true, secret: hunter2}
      register: n
      ignore_errors: true
    - name: a failed module with template text
      rt9_echo:
        result: {failed: true, msg: "{{ tmpl }}", rc: 3}
      register: f
      ignore_errors: true
    - name: everything registered, as a fact
      ansible.builtin.set_fact:
        everything: "{{ {'r': r, 'd': d, 'd2': d2, 'loop_r': loop_r, 'd3': d3, 'nl': nl, 'd4': d4,
                        'm': m, 'u': u, 'n': n, 'f': f} }}"
    - name: write it
      ansible.builtin.copy:
        content: "{{ everything | to_nice_json }}"
        dest: "{{ out_dir }}/out-{{ mode }}-{{ inventory_hostname }}.json"
        mode: "0600"
'''


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory):
    """One plain and one accelerated run of the two plays (ACC_PLAY, CONN_PLAY) over one inventory."""
    tmp_path = tmp_path_factory.mktemp("rt9acc")
    library = tmp_path / "library"
    library.mkdir()
    (library / "rt9_echo.py").write_text(ECHO_MODULE)
    hosts = ("all:\n  vars:\n    ansible_python_interpreter: %s\n  children:\n    g_local:\n      vars:\n"
             "        ansible_connection: local\n      hosts:\n        h_group: {}\n    g_host:\n      hosts:\n"
             "        h_host:\n          ansible_connection: local\n        h_play: {}\n" % sys.executable)
    hosts += CONN_HOSTS.split("  children:\n", 1)[1]
    play = ACC_PLAY.replace("- hosts: all", "- hosts: g_local:g_host", 1) + "\n" + \
        CONN_PLAY.replace("- hosts: all", "- hosts: g_ssh:g_plain", 1)
    run_both_modes(tmp_path, hosts, play, library=str(library))
    return tmp_path


@needs_mitogen
def test_registered_results_of_an_accelerated_run_are_the_plain_runs(both_modes):
    """A module result holding template text ("{{ lookup('pipe', ...) }}": never templated when used later),
    nested and empty containers, ansible_facts (also ansible_connection), _ansible_ keys (_ansible_no_log,
    _ansible_item_label), a __ansible_unsafe marker, warnings, a failed result; set_fact over the registered variable, a
    loop whose items hold template text, a no_log task; ansible_connection set per group, per host and per
    play. Every registered value (written with to_nice_json) is the same in both modes."""
    for host in ("h_group", "h_host", "h_play"):
        plain = (both_modes / ("out-plain-%s.json" % host)).read_text()
        accelerated = (both_modes / ("out-acc-%s.json" % host)).read_text()
        assert plain == accelerated, host
        assert "TEMPLATED" in plain and "\"TEMPLATED" not in plain and " TEMPLATED\"" not in plain
        assert "lookup('pipe', 'echo TEMPLATED')" in plain


SUBCLASS_TEXTS = [rt9_types.Str("gpu.count"), rt9_types.LoudStr("gpu.ecc"), rt9_types.HtmlStr("rdma.port.state"),
                  rt9_types.EvilStr("a&b<c>]]>"), rt9_types.EvilStr("gpu.nvlink"), rt9_types.HtmlStr("<i>x</i>")]


@pytest.mark.parametrize("where", ["id", "target", "status", "message", "observed", "key", "task", "host"])
@pytest.mark.parametrize("number", range(len(SUBCLASS_TEXTS)))
def test_report_files_of_str_subclasses_that_lie_are_the_old_bytes(sides, where, number):
    """str subclasses (what a Python caller, an action plugin or a filter may hand over) whose __str__,
    __html__, replace, __contains__, __format__ ... differ from the text: the writers' new paths (JUnit
    escaping memoised per text, the HTML grid joined by hand, the JSON C-encoder runs) must write what
    46fbccf's wrote."""
    text = SUBCLASS_TEXTS[number]
    check = {"id": "gpu.count", "target": "node", "status": "fail", "message": "m"}
    plain_twin = {"id": str(text) if False else str.__str__(text), "target": "node", "status": "fail", "message": "m"}
    host, task = "node-01", "validate node"
    if where in ("id", "target", "status", "message"):
        check[where] = text
        plain_twin[where] = str.__str__(text)
    elif where == "observed":
        check["observed"] = {"k": text, "l": [text]}
    elif where == "key":
        check[text] = 1
    elif where == "task":
        task = text
    else:
        host = text
    scenario = {"runs": [[("ok", host, task, "gpufleet.cluster.node_validate", "u",
                           {"checks": [check, dict(check, target="gpu1"), plain_twin], "elapsed_ms": 3}),
                          ("ok", "node-02", "validate node", "gpufleet.cluster.node_validate", "u2",
                           {"checks": [plain_twin, check]})]],
                "options": {"summary": False}}
    same_files(sides, scenario)


NON_TEXT = [5, -0.0, float("nan"), float("inf"), None, True, [1, "a"], {"a": 1}, b"by\xfftes", 10 ** 400, (1,),
            rt9_types.Int(7), rt9_types.Float(2.5), rt9_types.Dict(a=1), rt9_types.List([1])]


@pytest.mark.parametrize("where,number", [
    (where, number) for where in ["id", "target", "status", "message", "severity", "elapsed_ms", "task"]
    for number in range(len(NON_TEXT))
    # elapsed_ms 10**400 stopped 46fbccf's callback (OverflowError); now not measured: test_fleet_report_elapsed
    if not (where == "elapsed_ms" and NON_TEXT[number] is NON_TEXT[9])])
def test_report_files_of_checks_whose_texts_are_not_text_are_the_old_bytes(sides, where, number):
    """'a value that is not text goes to ElementTree's function as before, so it fails or is written as it
    was' (docs/performance.md, JUnit): ids, targets, statuses, messages, severities, elapsed_ms and task names
    that are numbers, None, containers, bytes."""
    odd = NON_TEXT[number]
    check = {"id": "gpu.count", "target": "node", "status": "warn", "message": "m"}
    data = {"checks": [check, {"id": "rdma.port.state", "target": "mlx5_0/1", "status": "pass", "message": ""}]}
    task = "validate node"
    if where == "elapsed_ms":
        data["elapsed_ms"] = odd
    elif where == "task":
        task = odd
    else:
        check[where] = odd
    scenario = {"runs": [[("task_start", task, "gpufleet.cluster.node_validate", "u"),
                          ("runner_start", "node-01", task, "gpufleet.cluster.node_validate", "u"),
                          ("ok", "node-01", task, "gpufleet.cluster.node_validate", "u", data)]],
                "options": {"summary": False}}
    same_files(sides, scenario)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(checks=st.lists(st.one_of(a_flat_check(), a_flat_check(), a_check()), min_size=1, max_size=12),
       hosts=st.integers(1, 12))
def test_runs_of_flat_checks_broken_by_odd_ones_are_the_old_bytes(sides, checks, hosts):
    """A host's checks where the C-encoder runs are interrupted by checks that take the writer's own path
    (subclass keys, NaN, huge ints, lone surrogates, deeper values), many hosts."""
    events = [("ok", "node-%02d" % n, "validate node", "gpufleet.cluster.node_validate", "u",
               {"checks": [dict(c, target="t%d" % k) for k, c in enumerate(checks)], "elapsed_ms": n})
              for n in range(hosts)]
    same_files(sides, {"runs": [events], "options": {"summary": False}})


def random_tree(rng, base):
    """A random tree below base/tree (directories, files, FIFOs, relative/absolute/outward links, loops) and
    base/outside; the root is the tree or a link to it. Returns (root, tree, relative paths to ask)."""
    tree, outside = os.path.join(base, "tree"), os.path.join(base, "outside")
    os.makedirs(os.path.join(outside, "d"))
    with open(os.path.join(outside, "f"), "w") as handle:
        handle.write(SECRET + "\n")
    os.makedirs(tree)
    names = ["a", "b", "c", "f", "g", "..."]
    targets = [".", "..", "../..", "a", "../a", "a/b", "f", "missing/x", "b/../f", "../outside/f", "../../outside",
               "./c/../a", "a/../../outside/f", "f/", "a//b", "/", "c/c/c", "g"]
    made = []
    for _ in range(rng.randint(0, 16)):
        parent = "/".join(rng.choice(names) for _ in range(rng.randint(0, 3)))
        name = rng.choice(names)
        folder = os.path.join(tree, parent)
        path = os.path.join(folder, name)
        if not os.path.isdir(folder) or os.path.islink(folder) or os.path.lexists(path):
            continue
        kind = rng.choice(["dir", "dir", "file", "file", "rel", "abs", "out", "fifo", "dev"])
        if kind == "dir":
            os.mkdir(path)
        elif kind == "file":
            with open(path, "wb") as handle:
                handle.write(rng.choice([b"1\n", b"", b"0x15b3\n", b"4: ACTIVE\n", b"\xff\xfe\n", b"x" * 70000]))
        elif kind == "rel":
            os.symlink(rng.choice(targets), path)
        elif kind == "abs":
            os.symlink(os.path.normpath(os.path.join(tree, rng.choice(targets))), path)
        elif kind == "out":
            os.symlink(rng.choice([os.path.join(outside, "f"), outside, os.path.join(outside, "d"), "/dev/null"]),
                       path)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            os.symlink(rng.choice(["/dev/null", "/dev/zero", "/proc/self/status"]), path)
        made.append(os.path.join(parent, name) if parent else name)
    rels = set(["f", "a", "missing", ".", "..", "../outside/f", "a/../f", "a/b/../../f", ""])
    for rel in made:
        rels.add(rel)
        for tail in ("f", "a/f", "..", "../f", "../../outside/f", "missing", ".", "b/c"):
            rels.add(rel + "/" + tail)
    root = tree
    if rng.random() < 0.5:
        root = os.path.join(base, "root")
        os.symlink(tree, root)
    return root, tree, sorted(rels)


def test_random_trees_answer_as_46fbccf_and_read_nothing_outside(tmp_path, old_root):
    """Random trees (60, seeded): every answer (read, problem, exists, isdir, listdir, real_name, real_parts,
    link_name) of the new reader equals 46fbccf's reader's, each in its own process; nothing outside root."""
    rng = __import__("random").Random(9)
    trees = []
    for number in range(60):
        root, _tree, rels = random_tree(rng, str(tmp_path / ("t%d" % number)))
        trees.append([root, rels])
    request = {"kind": "many", "trees": trees}
    old = sysfs_ask(old_root, request, tmp_path)
    new = sysfs_ask(COLLECTIONS, request, tmp_path)
    for (root, rels), before, after in zip(trees, old, new):
        assert SECRET not in json.dumps(after), root
        differ = [(rel, a, b) for rel, a, b in zip(rels, before, after) if a != b]
        assert not differ, (root, differ[:3])


CONN_HOSTS = r'''all:
  vars:
    ansible_python_interpreter: %(python)s
  children:
    g_ssh:
      vars:
        ansible_connection: ssh
        ansible_host: 127.0.0.1
        ansible_port: 1
      hosts:
        h_group_ssh: {}
        h_host_local_over_group:
          ansible_connection: local
    g_plain:
      hosts:
        h_templated:
          ansible_connection: "{{ 'lo' ~ 'cal' }}"
        h_nosuch:
          ansible_connection: nosuchconnection
        h_play2: {}
        h_paramiko:
          ansible_connection: paramiko_ssh
          ansible_host: 127.0.0.1
          ansible_port: 1
'''
CONN_PLAY = r'''- hosts: all
  gather_facts: false
  connection: local
  tasks:
    - name: ping
      ansible.builtin.ping:
      register: p
      ignore_unreachable: true
      ignore_errors: true
    - name: ping with the connection set in task vars
      ansible.builtin.ping:
      vars:
        ansible_connection: local
      register: p2
      ignore_errors: true
    - name: record
      ansible.builtin.copy:
        content: >-
          {{ {'p': p | dict2items | rejectattr('key', 'in', ['exception', 'module_stderr', 'module_stdout'])
                     | items2dict,
              'p2': p2 | dict2items | rejectattr('key', 'in', ['exception', 'module_stderr', 'module_stdout'])
                     | items2dict} | to_nice_json }}
        dest: "{{ out_dir }}/out-{{ mode }}-{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      vars:
        ansible_connection: local
'''


def run_both_modes(tmp_path, hosts, play, library=None):
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "hosts.yml").write_text(hosts)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), GPUFLEET_REPORT_DIR=str(tmp_path / "r"))
    if library:
        env["ANSIBLE_LIBRARY"] = library
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    for mode, prefix in (("plain", []), ("acc", ["bash", os.path.join(REPO, "scripts", "accelerated.sh")])):
        proc = subprocess.run(prefix + [playbook, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                                        "-e", "mode=%s out_dir=%s" % (mode, tmp_path)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def unreachable_text_dropped(text):
    data = json.loads(text)
    for key in ("p", "p2"):
        if data[key].get("unreachable"):
            data[key].pop("msg", None)  # Mitogen words a refused connection its own way (finding, not here)
    return data


@needs_mitogen
def test_connection_set_per_host_group_play_and_task_is_the_plain_runs(both_modes):
    """9373245 loads the connection plugin a host's inventory names before the workers fork: which connection a
    host uses must not change (host var over group var over the play's `connection:`, task vars over all; a
    templated name; a plugin that does not exist; an unreachable ssh and paramiko host)."""
    tmp_path = both_modes
    hosts = ["h_group_ssh", "h_host_local_over_group", "h_templated", "h_nosuch", "h_play2", "h_paramiko"]
    for host in hosts:
        plain = (tmp_path / ("out-plain-%s.json" % host)).read_text()
        accelerated = (tmp_path / ("out-acc-%s.json" % host)).read_text()
        assert unreachable_text_dropped(plain) == unreachable_text_dropped(accelerated), host
    assert json.loads((tmp_path / "out-plain-h_host_local_over_group.json").read_text())["p"]["ping"] == "pong"
    assert json.loads((tmp_path / "out-plain-h_group_ssh.json").read_text())["p"]["unreachable"] is True


CLEAN_TEXT_DRIVER = r'''
import pickle, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma import mlx5
assert mlx5.__file__.startswith(sys.argv[1])
class S(str):
    pass
values = [chr(c) for c in range(0x10000)] + [chr(c) for c in range(0x10000, 0x110000, 97)]
values += ["a" + chr(c) + "b" for c in range(0x3000)] + ["ok\n", "ok\t", "\n", "", "x\r\n", "ok\x00", "\ufffd",
           "a\ufffdb", "l1\nl2\n", "\udcff", "x" * 70000 + "\x01", "x" * 70000, "\n\n\t", "\x00" * 3]
values += [S("a\x01"), S("ok"), None]
out = []
for value in values:
    try:
        got = mlx5.clean_text(value)
        out.append(("ok", str.__str__(got) if isinstance(got, str) else repr(got), type(got).__name__))
    except Exception as exc:  # noqa: BLE001
        out.append(("error", type(exc).__name__))
sys.stdout.buffer.write(pickle.dumps(out))
'''


def test_mlx5_clean_text_gives_46fbccfs_verdict_for_every_code_point(old_root):
    """8d8295c (mlx5.clean_text as one regular expression search): 'Same verdicts' as before, every BMP code point (every 97th
    above) alone and between two letters (the first 0x3000), long texts, str subclasses, None."""
    answers = []
    for root in (old_root, COLLECTIONS):
        proc = subprocess.run([sys.executable, "-c", CLEAN_TEXT_DRIVER, root], capture_output=True, timeout=120,
                              check=True)
        answers.append(pickle.loads(proc.stdout))
    differ = [(n, a, b) for n, (a, b) in enumerate(zip(*answers)) if a != b]
    assert len(answers[0]) == len(answers[1]) and not differ, differ[:5]


@pytest.mark.parametrize("swap", ["class link to outside (absolute)", "device dir replaced by a link out"])
@pytest.mark.parametrize("race", [False, True], ids=["between-reads", "at-open"])
def test_a_switch_to_an_outside_fifo_does_not_hang_the_run(tmp_path, swap, race):
    """A directory of the path switched to a link out of root whose entry of the attribute's name is a FIFO
    (anyone can make one): the read must not wait for a writer (the driver's 60 s timeout would fail this) and
    must not answer anything read outside."""
    root, tree, outside = make_tree(str(tmp_path / "t"), False)
    for name in ("mtu", "speed"):
        os.unlink(os.path.join(outside, "eth0", name))
        os.mkfifo(os.path.join(outside, "eth0", name))
    actions = swaps(tree, outside)[swap]
    if race:
        request = {"kind": "ops", "root": root, "ops": [["ask", MTU], ["ask", SPEED]], "race": ["eth0/mtu", "open",
                                                                                              actions]}
    else:
        request = {"kind": "ops", "root": root, "ops": [["ask", ADDR]] + actions + [["ask", MTU], ["ask", SPEED]]}
    got = sysfs_ask(os.environ.get("RT9_CODE", COLLECTIONS), request, tmp_path)
    assert SECRET not in json.dumps(got["answers"])
    for answer in got["answers"][-2:]:  # MTU and SPEED, asked after the switch
        assert answer["read"] is None, answer


@pytest.mark.parametrize("action", ["remove", "replace", "fifo", "dir"])
def test_a_file_changed_after_its_open_is_read_as_opened(tmp_path, action):
    """7b01c9d asks the kernel for the opened file's path (/proc/self/fd): the file unlinked ('... (deleted)'),
    replaced, or swapped for a FIFO or a directory right before that readlink is still the file opened: its
    value, never an outside or absent answer."""
    root, tree, _outside = make_tree(str(tmp_path / "t"), False)
    mtu = os.path.join(tree, "sys", "devices", "pci0", "eth0", "mtu")
    actions = {"remove": [["remove", mtu]], "replace": [["remove", mtu], ["file", mtu, "777\n"]],
               "fifo": [["fifo", mtu]], "dir": [["dir", mtu]]}[action]
    request = {"kind": "ops", "root": root, "ops": [["ask", MTU]], "race": ["x", "readlink-fd", actions]}
    got = sysfs_ask(COLLECTIONS, request, tmp_path)
    assert got["answers"][0]["read"] == "1500", got


def test_odd_root_names_and_a_root_deeper_than_path_max_answer_as_46fbccf(tmp_path, old_root):
    """Roots named 'r (deleted)' (what /proc/self/fd shows for an unlinked file), with a newline, a backslash,
    spaces, an undecodable byte, 200 characters; a root whose path is longer than PATH_MAX (4096)."""
    rels = [ADDR, MTU, "sys/class/net", "sys/class/net/eth0", "sys/devices/pci0/eth0/speed", "../outside/f"]
    trees = []
    for number, name in enumerate(["r (deleted)", "r\nx", "r\\x", " r ", os.fsdecode(b"r\xff"), "r" * 200]):
        base = str(tmp_path / ("b%d" % number))
        os.makedirs(base)
        _root, tree, _outside = make_tree(base, False)
        os.rename(tree, os.path.join(base, name))
        trees.append([os.path.join(base, name), rels])
    deep = str(tmp_path / "deep")
    os.makedirs(deep)
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(900):
        os.mkdir("dddd", dir_fd=fd)
        child = os.open("dddd", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.mkdir("sys", dir_fd=fd)
    sysdir = os.open("sys", os.O_RDONLY, dir_fd=fd)
    handle = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=sysdir)
    os.write(handle, b"5\n")
    for number in (handle, sysdir, fd):
        os.close(number)
    trees.append([deep + "/dddd" * 900, ["sys/f", "sys", "missing"]])
    request = {"kind": "many", "trees": trees}
    old = sysfs_ask(old_root, request, tmp_path)
    new = sysfs_ask(COLLECTIONS, request, tmp_path)
    assert SECRET not in json.dumps(new)
    assert old == new


# F1/F2 of this round (failing on 081bfa8 and on 46fbccf, fixed by 7b01c9d): kept as passing attacks
@pytest.mark.parametrize("root_is_link", [False, True], ids=["root-dir", "root-link"])
@pytest.mark.parametrize("swap", [n for n in SWAP_NAMES if n != "file replaced by a link out"])
def test_a_link_changed_during_the_run_is_not_followed_out_of_root(tmp_path, swap, root_is_link):
    """contracts.md 'Reading sysfs': 'never through a symlink that leaves root'. One reader per run: the tree
    changes between two reads of the run; the next file read below the changed path must not come from
    outside root."""
    root, tree, outside = make_tree(str(tmp_path / "t"), root_is_link)
    ops = [["ask", ADDR]] + swaps(tree, outside)[swap] + [["ask", MTU], ["ask", SPEED], ["ask", "sys/class/net"]]
    got = sysfs_ask(COLLECTIONS, {"kind": "ops", "root": root, "ops": ops}, tmp_path)
    no_secret(got["answers"], None, tree)
    assert [a["read"] for a in got["answers"][2:4]] == [None, None]


@pytest.mark.parametrize("point", RACE_POINTS, ids=["%s-%s" % p for p in RACE_POINTS])
@pytest.mark.parametrize("swap", [n for n in SWAP_NAMES if n != "file replaced by a link out"])
def test_a_directory_swapped_between_lookup_and_open_answers_nothing_from_outside(tmp_path, swap, point):
    root, tree, outside = make_tree(str(tmp_path / "t"), False)
    when, trigger = point
    request = {"kind": "ops", "root": root, "ops": [["ask", MTU], ["ask", SPEED]],
               "race": [trigger, when, swaps(tree, outside)[swap]]}
    got = sysfs_ask(COLLECTIONS, request, tmp_path)
    no_secret(got["answers"], None, tree)
