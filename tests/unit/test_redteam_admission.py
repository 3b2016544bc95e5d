"""Red team, admission burn-in (issue 44 item 1): hostile admission records, state files, remediation
histories and burn-in settings against what the docs promise, driven through the filters
`admission_decision` / `admission_record` (ansible-doc) and the documented one reader
`admission.read_record`.

Every assertion quotes its sentence of docs/node-lifecycle.md ("Admission"), docs/contracts.md
("Records read back", tier rows `gpufleet_burnin`, `gpufleet_burnin_force`, check `node.admission`) or
docs/remediation.md ("Burn-in"). Attacks that fail are in /work/notes/redteam-admission-failing.py.
"""

import base64
import json
import math
import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.admission import admission_decision, admission_record
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu import burnin
from ansible_collections.gpufleet.cluster.plugins.module_utils.remediation import admission

ANNOTATION = "gpufleet.io/admission"
HISTORY = "gpufleet.io/remediation-history"
DRIVER = "580.95.05"
WHEN = 1790000000.0  # 2026-09-21
GOOD = {"when": WHEN, "level": 2, "tests": [], "result": "pass", "dcgm_version": "4.2.3", "driver": DRIVER,
        "checks": []}
SOURCE = "Node n annotation gpufleet.io/admission"
TRIGGERS = ("new", "failed", "unreadable", "repaired", "driver", "level", "force")


def rec(**over):
    fields = dict(GOOD, **over)
    for key in [k for k, v in fields.items() if v is DROP]:
        del fields[key]
    return json.dumps(fields)


DROP = object()


def decide(raw, driver=DRIVER, history=None, settings=None, **kw):
    annotations = {} if raw is None else {ANNOTATION: raw}
    if history is not None:
        annotations[HISTORY] = history
    return admission_decision(annotations, settings or {}, node="n", driver=driver, **kw)


def unreadable(raw, field=None):
    """contracts.md "Records read back": "not admitted: the node is burnt in again (trigger `unreadable`,
    the reason names the record and the field) ... never "admitted"."""
    decision = decide(raw)
    assert decision["burn_in"], decision
    assert decision["trigger"] == "unreadable", decision
    assert "gpufleet.io/admission" in decision["reason"], decision["reason"]
    if field:
        assert field in decision["reason"], decision["reason"]
    return decision


def step(step_name, at, status="done"):
    return {"step": step_name, "status": status, "reason": "r", "at": at, "by": "remediate.yml"}


# -- hostile records on the Node annotation -------------------------------------------------------------
# contracts.md "Records read back": "at most 16 KiB, depth 3, exactly the keys `when`, `level`, `result`,
# `dcgm_version`, `driver`, `checks` and optionally `tests`, `trigger`; `when` plausible epoch seconds
# (2020..2100), `level` 1..4, `result` `pass`/`fail`, `dcgm_version` and `driver` at most 64 characters,
# `checks` at most 32 strings of at most 300, `tests` at most 64 non-empty names, `trigger` one of `new`,
# `failed`, `unreadable`, `repaired`, `driver`, `level`, `force`."
HOSTILE = {
    "huge": rec(checks=["burnin.dcgm:" + "x" * 280] * 20) + " " * 20000,
    "deep": '{"when": ' + "[" * 5000 + "]" * 5000 + "}",
    "depth4": rec(checks=[[["a"]]]),
    "nan_when": '{"when": NaN, "level": 2, "tests": [], "result": "pass", "dcgm_version": "4.2.3", '
                '"driver": "580.95.05", "checks": []}',
    "inf_when": rec().replace(str(WHEN), "Infinity"),
    "neg_inf_when": rec().replace(str(WHEN), "-Infinity"),
    "when_1e999": rec().replace(str(WHEN), "1e999"),
    "when_negative": rec(when=-WHEN),
    "when_zero": rec(when=0),
    "when_1e300": rec(when=1e300),
    "when_2200": rec(when=7258118400.0),  # 2200-01-01
    "when_1999": rec(when=915148800.0),   # 1999-01-01
    "when_ms": rec(when=WHEN * 1000),     # milliseconds, a real-world mistake
    "when_string": rec(when=str(WHEN)),
    "when_iso": rec(when="2026-09-21T00:00:00Z"),
    "when_bool": rec(when=True),
    "when_null": rec(when=None),
    "when_list": rec(when=[WHEN]),
    "level_0": rec(level=0),
    "level_5": rec(level=5),
    "level_neg": rec(level=-1),
    "level_str": rec(level="2"),
    "level_true": rec(level=True),
    "level_false": rec(level=False),
    "level_null": rec(level=None),
    "level_2_5": rec(level=2.5),
    "level_nan": rec().replace('"level": 2', '"level": NaN'),
    "level_huge": rec(level=10 ** 40),
    "result_PASS": rec(result="PASS"),
    "result_Pass": rec(result="Pass"),
    "result_passed": rec(result="passed"),
    "result_ok": rec(result="ok"),
    "result_admitted": rec(result="admitted"),
    "result_true": rec(result=True),
    "result_null": rec(result=None),
    "result_space": rec(result="pass "),
    "result_list": rec(result=["pass"]),
    "dup_result": rec(result="fail")[:-1] + ', "result": "pass"}',
    "dup_level": rec(level=1)[:-1] + ', "level": 4}',
    "dup_when": rec()[:-1] + ', "when": %s}' % WHEN,
    "extra_key": rec(admitted=True),
    "extra_null": rec(note=None),
    "missing_when": rec(when=DROP),
    "missing_level": rec(level=DROP),
    "missing_result": rec(result=DROP),
    "missing_driver": rec(driver=DROP),
    "missing_dcgm": rec(dcgm_version=DROP),
    "missing_checks": rec(checks=DROP),
    "driver_65": rec(driver="5" * 65),
    "driver_int": rec(driver=580),
    "driver_null": rec(driver=None),
    "dcgm_int": rec(dcgm_version=4),
    "checks_33": rec(checks=["burnin.dcgm:gpu%d/memtest" % i for i in range(33)]),
    "check_301": rec(checks=["c" * 301]),
    "checks_obj": rec(checks={"burnin.dcgm": "gpu0"}),
    "checks_null_item": rec(checks=[None]),
    "tests_65": rec(tests=["t%d" % i for i in range(65)]),
    "tests_str": rec(tests="memtest"),
    "tests_empty_name": rec(tests=[""]),
    "tests_int": rec(tests=[1]),
    "trigger_maybe": rec(trigger="maybe"),
    "trigger_NEW": rec(trigger="NEW"),
    "trigger_null": rec(trigger=None),
    "trigger_int": rec(trigger=1),
    "a_list": json.dumps([GOOD]),
    "a_string": json.dumps(json.dumps(GOOD)),  # double-encoded: a hand-edited kubectl annotate
    "a_number": "1790000000",
    "null": "null",
    "true": "true",
    "empty": "",
    "spaces": "   ",
    "truncated": rec()[:-7],
    "trailing_garbage": rec() + "x",
    "two_docs": rec() + rec(),
    "yaml_not_json": "when: 1790000000\nlevel: 2\nresult: pass\n",
    "single_quotes": rec().replace('"', "'"),
    "bom": "\ufeff" + rec(),
    "nul": rec().replace("4.2.3", "4.2\u00003"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_record_is_never_admitted(name):
    """node-lifecycle.md: "Unreadable means not admitted: the node is burnt in again and the new record
    replaces it." (a record that reads is another row; these do not read by the contract's list)"""
    raw = HOSTILE[name]
    try:
        record = admission.read_record(raw, SOURCE)
    except RecordError as exc:
        assert SOURCE in str(exc)
        unreadable(raw)
        return
    pytest.fail("read as a record: %r from %r" % (record, raw[:200]))


def test_a_hostile_annotation_of_any_scalar_type_on_the_node_is_not_admitted():
    """Annotations are strings on the API; a caller passing another type (a templated dict) must not be
    "admitted" either (contracts.md "Records read back": never "admitted")."""
    for raw in (GOOD, [GOOD], 1790000000, True, b"{}"):
        decision = decide(raw)
        assert decision["burn_in"] and decision["trigger"] in ("unreadable", "new"), (raw, decision)


def test_the_reason_names_the_field():
    """contracts.md: "(trigger `unreadable`, the reason names the record and the field)"."""
    for field, raw in (("when", rec(when=1e300)), ("level", rec(level=5)), ("result", rec(result="ok")),
                       ("driver", rec(driver=580)), ("checks", rec(checks=["c"] * 33)),
                       ("trigger", rec(trigger="maybe"))):
        unreadable(raw, field)


def test_a_record_over_16_kib_in_utf8_bytes_is_unreadable_though_shorter_in_characters():
    """node-lifecycle.md: "at most 16 KiB" (32 checks of 300 two-byte characters: 9600 characters, over
    19000 bytes)."""
    raw = json.dumps(dict(GOOD, checks=["\u00e9" * 300] * 32), ensure_ascii=False)
    assert len(raw) < 16384 < len(raw.encode("utf-8"))
    unreadable(raw)


def test_a_record_at_the_limits_reads():
    """The limits are "at most": 32 checks of 300, 64 tests, 64-character versions, level 4, both
    optional keys absent or present."""
    raw = rec(checks=["c" * 300] * 32, tests=["t%d" % i for i in range(64)], driver="5" * 64,
              dcgm_version="4" * 64, level=4, trigger="force", result="fail")
    assert len(raw.encode()) <= 16384
    record = admission.read_record(raw, SOURCE)
    assert record["level"] == 4 and len(record["checks"]) == 32
    assert admission.read_record(rec(tests=DROP, trigger=DROP), SOURCE)["result"] == "pass"


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_every_documented_trigger_reads(trigger):
    assert admission.read_record(rec(trigger=trigger), SOURCE)["trigger"] == trigger


@hsettings(max_examples=80, deadline=None)
@given(level=st.one_of(st.integers(-10, 10), st.text(max_size=3), st.booleans(), st.none(),
                       st.floats(allow_nan=False, allow_infinity=False)),
       result=st.one_of(st.sampled_from(["pass", "fail", "PASS", "Pass", "passed", "ok", "", "fail ", "skip"]),
                        st.text(max_size=6)))
def test_level_and_result_admit_only_when_in_the_documented_set(level, result):
    """contracts.md: "`level` 1..4, `result` `pass`/`fail`"; node-lifecycle.md: not burnt in only when
    "passed, same driver and level, no repair since"."""
    decision = decide(rec(level=level, result=result))
    if not decision["burn_in"]:
        assert result == "pass"
        assert type(level) is int and 2 <= level <= 4, (level, decision)  # pylint: disable=unidiomatic-typecheck


@hsettings(max_examples=150, deadline=None)
@given(st.one_of(st.floats(), st.integers(-10 ** 20, 10 ** 20), st.text(max_size=12)))
def test_when_admits_only_a_plausible_epoch(when):
    """contracts.md: "`when` plausible epoch seconds (2020..2100)"."""
    raw = rec(when=when) if not (isinstance(when, float) and not math.isfinite(when)) else \
        rec().replace(str(WHEN), json.dumps(when))
    decision = decide(raw)
    if not decision["burn_in"]:
        assert isinstance(when, (int, float)) and not isinstance(when, bool)
        assert 1577836800 <= when <= 4102444800, when  # 2020-01-01 .. 2100-01-01


@hsettings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: k not in admission.KEYS),
                       st.one_of(st.none(), st.integers(), st.text(max_size=5)), min_size=1, max_size=3))
def test_any_extra_key_makes_the_record_unreadable(extra):
    """contracts.md: "exactly the keys ..." (a record of a newer or hand-edited shape is not admitted)."""
    unreadable(json.dumps(dict(GOOD, **extra)))


# -- the decision's rows -------------------------------------------------------------------------------
def test_a_record_of_another_driver_is_burnt_in_again():
    """node-lifecycle.md table: "another NVIDIA driver now than at admission | yes | `driver`"."""
    assert decide(rec(driver="570.86.15"))["trigger"] == "driver"
    assert decide(rec(driver="580.95.05"), driver="580.95.06")["trigger"] == "driver"


def test_an_empty_driver_now_is_not_compared():
    """ansible-doc admission_decision, driver: "The node's NVIDIA driver version now; empty is not
    compared."."""
    assert not decide(rec(driver="570.86.15"), driver="")["burn_in"]
    assert not decide(rec(driver="570.86.15"), driver=None)["burn_in"]


def test_a_record_of_a_lower_level_than_the_group_asks_is_burnt_in_and_a_higher_one_admitted():
    """node-lifecycle.md table: "a lower `dcgm_level` than its group asks for now | yes | `level`"."""
    assert decide(rec(level=2), settings={"dcgm_level": 3})["trigger"] == "level"
    assert decide(rec(level=1))["trigger"] == "level"  # default level 2
    assert not decide(rec(level=4), settings={"dcgm_level": 3})["burn_in"]


def test_a_failed_record_is_burnt_in_again_whatever_else_it_says():
    """node-lifecycle.md table: "the last burn-in failed | yes | `failed`"."""
    for over in ({}, {"level": 4}, {"checks": []}, {"trigger": "force"}, {"when": 4102000000.0}):
        decision = decide(rec(result="fail", **over))
        assert decision["burn_in"] and decision["trigger"] == "failed", (over, decision)


def test_force_burns_in_an_admitted_node_and_nothing_else_changes():
    """contracts.md `gpufleet_burnin_force`: "burn the node in even when its admission record is valid"."""
    assert decide(rec(), force=True)["trigger"] == "force"
    assert decide(None, force=True)["trigger"] == "new"  # a new node stays new


def test_a_record_far_in_the_past_that_passed_is_still_admitted():
    """node-lifecycle.md: "an admitted node is not burnt in again" (no age limit is documented)."""
    assert not decide(rec(when=1577900000.0))["burn_in"]  # 2020-01-01


def test_a_reset_or_reboot_after_the_record_burns_in_and_other_steps_do_not():
    """node-lifecycle.md table: "a `reset` or `reboot` done in its remediation history ... after the
    record | yes | `repaired`"."""
    for history in ([step("reset", "2026-10-01T00:00:00Z")], [step("reboot", "2026-09-21T00:00:01Z")]):
        assert decide(rec(when=1790000000.0 - 86400), history=json.dumps(history))["trigger"] == "repaired"
    before = [step("reset", "2026-01-01T00:00:00Z"), step("reboot", "2026-02-01T00:00:00Z")]
    assert not decide(rec(), history=json.dumps(before))["burn_in"]
    not_done = [step("reset", "2026-10-01T00:00:00Z", status="failed"),
                step("drain", "2026-10-01T00:00:00Z"), step("isolate", "2026-10-02T00:00:00Z", status="isolated")]
    assert not decide(rec(), history=json.dumps(not_done))["burn_in"]


def test_a_node_the_remediation_burnt_in_after_its_repair_is_admitted():
    """node-lifecycle.md table: "(`remediate.yml` writes the record of its own burn-in after a repair when it
    passes, so a node it released is admitted)"; docs/remediation.md: "the health gate does not burn the
    node in a second time"."""
    history = json.dumps([step("drain", "2026-10-01T00:00:00Z"), step("reset", "2026-10-01T00:05:00Z"),
                          step("release", "2026-10-01T00:20:00Z", status="released")])
    reset_at = 1790000000.0 + 10 * 86400 - 1790000000.0 % 86400 + 300  # 2026-10-01T00:05:00Z
    decision = decide(rec(when=reset_at - 3600), history=history)
    assert decision["burn_in"] and decision["trigger"] == "repaired"
    out = admission_record(PASS_RESULT, decision, now=reset_at + 600)
    assert out["record"]["trigger"] == "repaired"
    assert not decide(out["text"], history=history)["burn_in"]


@pytest.mark.parametrize("history", [
    "[{", "{}", "null", "[1]", "[null]", '"[]"', "x" * 10,
    json.dumps([{"step": "reset", "status": "done"}]),                              # no at, no by
    json.dumps([step("reset", "yesterday")]),
    json.dumps([step("reset", "2026-10-01 00:00:00")]),                             # no T, no Z
    json.dumps([step("reset", "2026-10-01T00:00:00+02:00")]),
    json.dumps([step("reset", "\u0662\u0660\u0662\u0666-10-01T00:00:00Z")]),        # Arabic-Indic digits
    json.dumps([step("reset", "1900-10-01T00:00:00Z")]),
    json.dumps([step("reset", "2026-13-01T00:00:00Z")]),
    json.dumps([dict(step("reset", "2026-10-01T00:00:00Z"), extra={"nested": 1})]),  # non-scalar extra
    json.dumps([step("reset", "2026-10-01T00:00:00Z")] * 1001),
    json.dumps([dict(step("reset", "2026-10-01T00:00:00Z"), reason="r" * 8193)]),
    json.dumps([dict(step("reset", "2026-10-01T00:00:00Z"), status="")]),
    '[{"step": "reset", "step": "reboot", "status": "done", "reason": "", "at": "2026-10-01T00:00:00Z", "by": "x"}]',
])
def test_a_remediation_history_that_cannot_be_read_counts_as_a_repair(history):
    """node-lifecycle.md table: "a history that cannot be read | yes | `repaired`"; contracts.md: "A
    history that cannot be read counts as a repair (burnt in again)" (the reader: contracts.md
    `gpufleet.io/remediation-history` row)."""
    decision = decide(rec(), history=history)
    assert decision["burn_in"] and decision["trigger"] == "repaired", decision
    assert "remediation-history" in decision["reason"]


def test_a_damaged_history_on_a_node_without_a_record_is_still_new_and_burnt_in():
    decision = decide(None, history="[{")
    assert decision["burn_in"] and decision["trigger"] in ("new", "repaired")


def test_without_the_api_the_history_is_not_read():
    """ansible-doc admission_decision kubernetes: "Read the Node annotation and the remediation history
    (false, a host without the API)"."""
    state = {"content": base64.b64encode(rec().encode()).decode(), "encoding": "base64"}
    decision = admission_decision({HISTORY: "[{", ANNOTATION: rec(result="fail")}, {}, node="n", driver=DRIVER,
                                  state_file=state, kubernetes=False)
    assert not decision["burn_in"], decision


# -- the state file ------------------------------------------------------------------------------------
def slurped(data):
    return {"content": base64.b64encode(data).decode(), "encoding": "base64", "source": "/x"}


@pytest.mark.parametrize("name, state", [
    ("empty", slurped(b"")),
    ("newline", slurped(b"\n")),
    ("truncated", slurped(rec().encode()[:40])),
    ("binary", slurped(bytes(range(256)))),
    ("latin1", slurped(json.dumps(dict(GOOD, dcgm_version="4.2.3\u00e9"), ensure_ascii=False).encode("latin-1"))),
    ("utf16", slurped(rec().encode("utf-16"))),
    ("nul_padded", slurped(rec().encode() + b"\x00" * 100)),
    ("a_directory", {"failed": True, "msg": "source is a directory and must be a file"}),
    ("denied", {"failed": True, "msg": "file is not readable: /var/lib/gpufleet/admission.json"}),
    ("not_base64", {"content": "!!!not base64!!!", "encoding": "base64"}),
    ("no_content", {"encoding": "base64"}),
    ("content_none", {"content": None, "encoding": "base64"}),
    ("a_list", [1, 2]),
    ("a_string", "eyJ3aGVuIjogMX0="),
])
def test_a_state_file_that_is_not_a_record_is_not_admitted_without_the_api(name, state):
    """node-lifecycle.md: "without an API it keeps the record in the node's state file"; "Unreadable
    means not admitted: the node is burnt in again"."""
    decision = admission_decision(None, {}, node="n", driver=DRIVER, state_file=state, kubernetes=False)
    assert decision["burn_in"], (name, decision)
    assert decision["trigger"] in ("unreadable", "new"), (name, decision)


def test_a_state_file_of_a_directory_or_damage_is_unreadable_not_new():
    """contracts.md "Records read back": unreadable → "trigger `unreadable`"; a damaged file is not "none"
    (only an absent file is a new node)."""
    for state in (slurped(b""), slurped(rec().encode()[:40]), slurped(bytes(range(256))),
                  {"failed": True, "msg": "source is a directory and must be a file"}):
        decision = admission_decision(None, {}, node="n", driver=DRIVER, state_file=state, kubernetes=False)
        assert decision["trigger"] == "unreadable", (state, decision)


def test_the_node_record_wins_even_when_the_state_file_is_garbage():
    """node-lifecycle.md: "the record of the Node wins"."""
    decision = admission_decision({ANNOTATION: rec()}, {}, node="n", driver=DRIVER,
                                  state_file=slurped(bytes(range(256))))
    assert not decision["burn_in"], decision


def test_a_damaged_node_record_is_not_rescued_by_a_good_state_file():
    """node-lifecycle.md: "the record of the Node wins" and "Unreadable means not admitted"."""
    decision = admission_decision({ANNOTATION: rec(level=9)}, {}, node="n", driver=DRIVER,
                                  state_file=slurped(rec().encode()))
    assert decision["burn_in"] and decision["trigger"] == "unreadable", decision


# -- burn-in settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, key", [
    ({"dcgm_levle": 3}, "dcgm_levle"), ({"enable": False}, "enable"), ({"Enabled": False}, "Enabled"),
    ({"dcgm_level": 0}, "gpufleet_burnin.dcgm_level"), ({"dcgm_level": 5}, "gpufleet_burnin.dcgm_level"),
    ({"dcgm_level": 2.5}, "gpufleet_burnin.dcgm_level"), ({"dcgm_level": None}, "gpufleet_burnin.dcgm_level"),
    ({"dcgm_level": "high"}, "gpufleet_burnin.dcgm_level"),
    ({"timeout": -1}, "gpufleet_burnin.timeout"), ({"timeout": float("-inf")}, "gpufleet_burnin.timeout"),
    ({"timeout": "soon"}, "gpufleet_burnin.timeout"), ({"timeout": True}, "gpufleet_burnin.timeout"),
    ({"timeout": None}, "gpufleet_burnin.timeout"),
    ({"nccl_min_busbw_gbps": float("nan")}, "gpufleet_burnin.nccl_min_busbw_gbps"),
    ({"nccl_min_busbw_gbps": float("inf")}, "gpufleet_burnin.nccl_min_busbw_gbps"),
    ({"nccl_min_busbw_gbps": True}, "gpufleet_burnin.nccl_min_busbw_gbps"),
    ({"nccl_min_busbw_gbps": "fast"}, "gpufleet_burnin.nccl_min_busbw_gbps"),
    ({"nccl_command": "all_reduce_perf -g 8"}, "gpufleet_burnin.nccl_command"),
    ({"nccl_command": [1, 2]}, "gpufleet_burnin.nccl_command"),
    ({"dcgm_tests": [""]}, "gpufleet_burnin.dcgm_tests"), ({"dcgm_tests": [1]}, "gpufleet_burnin.dcgm_tests"),
    ({"enabled": "false"}, "gpufleet_burnin.enabled"), ({"enabled": "no"}, "gpufleet_burnin.enabled"),
    ({"enabled": 0}, "gpufleet_burnin.enabled"), ({"enabled": None}, "gpufleet_burnin.enabled"),
    ([], "gpufleet_burnin"), (3, "gpufleet_burnin"),
])
def test_a_bad_setting_fails_naming_the_key(value, key):
    """contracts.md tier `gpufleet_burnin`: "a bad key or value fails naming `gpufleet_burnin.<key>`"."""
    with pytest.raises(AnsibleFilterError) as exc:
        admission_decision({}, value, node="n")
    assert key in str(exc.value)


@pytest.mark.parametrize("value", ["2", " 2", "2.0", "two", "0x2"])
def test_a_level_as_a_string_is_refused_or_taken_as_that_level_never_another(value):
    """contracts.md: "a bad key or value fails naming `gpufleet_burnin.<key>`" (an extra var `-e
    gpufleet_burnin='{"dcgm_level": "3"}'` gives a string): refused, or read as the number it says."""
    try:
        decision = admission_decision({}, {"dcgm_level": value}, node="n")
    except AnsibleFilterError as exc:
        assert "gpufleet_burnin.dcgm_level" in str(exc)
        return
    assert decision["settings"]["dcgm_level"] == 2 and value.strip() in ("2", "2.0"), decision["settings"]


def test_opting_out_is_skip_and_reads_no_record():
    """node-lifecycle.md: "`enabled: false` ... the group opts out (node.admission skip)"; even a damaged
    record is not burnt in then."""
    for raw in (None, rec(), rec(level=9), "garbage"):
        decision = decide(raw, settings={"enabled": False})
        assert not decision["burn_in"] and decision["check"]["status"] == "skip", (raw, decision)
    decision = decide(rec(), settings={"enabled": False}, force=True)
    assert not decision["burn_in"] and decision["check"]["status"] == "skip", decision


@pytest.mark.parametrize("force", ["yes", "true", 1, True, False, None])
def test_force_as_a_string_is_refused_or_read_as_ansible_reads_a_boolean(force):
    """contracts.md `gpufleet_burnin_force` default `False` (a boolean). The filter option is `type: bool`
    (ansible-doc): "false"/"no"/"0" never force, "yes"/"true"/1 force; anything else refused."""
    try:
        decision = decide(rec(), force=force)
    except (AnsibleFilterError, TypeError, ValueError):
        pytest.fail("refused a boolean: %r" % (force,))
    expected = force is True or force in ("yes", "true", 1)
    assert decision["burn_in"] is expected, (force, decision)


# -- the check node.admission before any burn-in -------------------------------------------------------
def test_the_check_before_a_burn_in_is_a_pass_only_for_an_admitted_node():
    """contracts.md `node.admission`: "admitted → pass: a valid record that passed with today's driver and
    level and no repair since ... it was due and did not run (check mode) → fail"."""
    admitted = decide(rec())
    assert admitted["check"]["id"] == "node.admission" and admitted["check"]["status"] == "pass"
    assert admitted["check"]["target"] == "node"
    for raw in (None, rec(result="fail"), rec(level=1), HOSTILE["nan_when"], rec(driver="1.0")):
        decision = decide(raw)
        assert decision["check"]["status"] == "fail", (raw, decision["check"])


# -- the record built of a burn-in ---------------------------------------------------------------------
PASS_RESULT = {"healthy": True, "dcgm": {"version": "4.2.3"},
               "checks": [{"id": "burnin.dcgm.run", "target": "node", "status": "pass",
                           "observed": {"version": "4.2.3", "driver": DRIVER}}]}


@pytest.mark.parametrize("result", [
    # healthy claimed, no checks at all: no run was seen to pass
    {"healthy": True, "checks": []},
    {"healthy": True},
    # the run check absent
    {"healthy": True, "checks": [{"id": "burnin.dcgm", "target": "memtest", "status": "pass"}]},
    # timed out: module failed
    {"failed": True, "msg": "dcgmi diag killed at the timeout (60 s)",
     "checks": [{"id": "burnin.dcgm.run", "target": "node", "status": "fail", "message": "killed at the timeout"}]},
    {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"},
])
def test_a_burn_in_not_seen_to_pass_is_never_recorded_pass(result):
    """common: "never a pass of something not seen to pass"; contracts.md burnin.dcgm.run: "Fail closed";
    node-lifecycle.md: "A node that fails stays cordoned and tainted"."""
    out = admission_record(result, decide(None), now=WHEN)
    assert out["record"]["result"] == "fail" and not out["passed"], (result, out)
    assert out["check"]["status"] == "fail"
    assert admission.read_record(out["text"], SOURCE)["result"] == "fail"


def test_a_passing_burn_in_is_recorded_with_its_fields():
    """node-lifecycle.md: the record `{"when", "level", "tests", "result", "dcgm_version", "driver", "checks",
    "trigger"}`, read back before it is written."""
    out = admission_record(PASS_RESULT, decide(rec(driver="570.1")), now=WHEN)
    record = admission.read_record(out["text"], SOURCE)
    assert record == out["record"] and record["result"] == "pass" and record["trigger"] == "driver"
    assert record["level"] == 2 and record["dcgm_version"] == "4.2.3" and record["when"] == WHEN
    assert out["check"]["status"] == "pass" and "admitted: burnt in" in out["check"]["message"]


@pytest.mark.parametrize("now", [float("nan"), float("inf"), -1.0, 1e300, 7258118400.0, 915148800.0])
def test_a_record_is_never_written_from_an_implausible_clock(now):
    """node-lifecycle.md: "A record is read back before it is written" (`when` 2020..2100)."""
    with pytest.raises(AnsibleFilterError):
        admission_record(PASS_RESULT, decide(None), now=now)


def test_many_failing_checks_still_make_a_readable_record():
    """contracts.md: "`checks` at most 32 strings of at most 300": a burn-in with 100 failing tests and long
    targets must still be recorded (as fail), never an unwritable record that leaves the old one."""
    checks = [{"id": "burnin.dcgm", "target": "gpu%d/%s" % (i % 8, "t" * 400 + str(i)), "status": "fail",
               "message": "m" * 5000} for i in range(100)]
    checks.append({"id": "burnin.dcgm.run", "target": "node", "status": "pass", "observed": {"version": "4.2.3"}})
    out = admission_record({"healthy": False, "checks": checks, "dcgm": {"version": "4.2.3"}}, decide(None), now=WHEN)
    record = admission.read_record(out["text"], SOURCE)
    assert record["result"] == "fail" and 1 <= len(record["checks"]) <= 32
    assert all(len(c) <= 300 for c in record["checks"])


def test_a_hostile_dcgm_version_or_driver_from_the_burn_in_still_makes_a_readable_record():
    """"nothing is written that cannot be read" (ansible-doc admission_record): a DCGM version of 200
    characters or a driver with a NUL must not produce a record the reader refuses, nor a crash."""
    result = dict(PASS_RESULT, dcgm={"version": "4" * 200})
    result["checks"] = [dict(PASS_RESULT["checks"][0], observed={"version": "4" * 200, "driver": "5\u0000" * 80})]
    try:
        out = admission_record(result, decide(None), now=WHEN)
    except AnsibleFilterError:
        return  # refused before anything is written: documented ("read back before it is written")
    admission.read_record(out["text"], SOURCE)


# -- moved from /work/notes/redteam-admission-failing.py once fixed -------------------------------------
@pytest.mark.parametrize("timeout", [1e300, 10 ** 30, 2 ** 63, 1e20, 9.3e9, 604800.5])
def test_f1_a_huge_timeout_is_refused_naming_the_key(timeout):
    """contracts.md tier `gpufleet_burnin`: "a bad key or value fails naming `gpufleet_burnin.<key>`;
    `timeout` at most 604800 s, 7 days" (1e20 crashed module gpu_burnin: "timestamp too large")."""
    with pytest.raises(AnsibleFilterError, match="gpufleet_burnin.timeout"):
        admission_decision({}, {"timeout": timeout}, node="n")
    assert decide(rec(), settings={"timeout": 604800})["settings"]["timeout"] == 604800


@pytest.mark.parametrize("force", ["false", "no", "0", "off", "sometimes"])
def test_f2_force_as_a_string_is_read_as_a_boolean_or_refused(force):
    """ansible-doc admission_decision: `force` "type: bool", "read as Ansible reads a boolean (a string
    other than true/false, yes/no, on/off, 1/0 fails naming it)"."""
    try:
        decision = decide(rec(), force=force)
    except AnsibleFilterError as exc:
        assert force == "sometimes" and "force" in str(exc)
        return
    assert force != "sometimes" and not decision["burn_in"], (force, decision)


@pytest.mark.parametrize("result", [
    {"healthy": True, "checks": [{"id": "burnin.dcgm", "target": "gpu0/memtest", "status": "fail"},
                                 {"id": "burnin.dcgm.run", "target": "node", "status": "pass"}]},
    {"healthy": "yes", "checks": PASS_RESULT["checks"]},
    {"healthy": 1, "checks": PASS_RESULT["checks"]},
])
def test_f3_a_failing_check_is_never_recorded_pass(result):
    """ansible-doc admission_record: "A record is C(pass) only when C(healthy) is the boolean true and no
    C(burnin.*) check fails"."""
    out = admission_record(result, decide(None), now=WHEN)
    assert out["record"]["result"] == "fail", out["record"]
    assert admission.read_record(out["text"], SOURCE)["result"] == "fail"


WARN_RESULT = {"healthy": True, "dcgm": {"version": "4.2.3"},
               "checks": PASS_RESULT["checks"] + [{"id": "burnin.dcgm", "target": "gpu0/persistence_mode",
                                                   "status": "warn"}]}


def test_f6_a_burn_in_warning_fails_the_record_only_under_fail_on_warn():
    """node-lifecycle.md table: "with `node_gate_fail_on: warn`, also a burn-in check that warned: the
    record follows what held the node back"."""
    held = admission_record(WARN_RESULT, decide(None), now=WHEN, fail_on="warn")
    assert held["record"]["result"] == "fail" and held["record"]["checks"] == ["burnin.dcgm:gpu0/persistence_mode"]
    assert decide(held["text"])["trigger"] == "failed"
    assert admission_record(WARN_RESULT, decide(None), now=WHEN)["record"]["result"] == "pass"
    with pytest.raises(AnsibleFilterError):
        admission_record(WARN_RESULT, decide(None), now=WHEN, fail_on="sometimes")


def test_f7_a_history_step_from_a_stepped_clock_does_not_burn_in_forever():
    """node-lifecycle.md "Clocks": "A repair step dated more than 300 s in the future counts as a repair
    once"; a real repair after that burn-in still burns in."""
    future = step("reset", "2099-01-01T00:00:00Z")
    history = json.dumps([future])
    first = decide(rec(), history=history)
    assert first["burn_in"] and first["trigger"] == "repaired"
    out = admission_record(PASS_RESULT, first, now=WHEN + 86400)
    assert out["record"]["repair"] == 4070908800.0
    assert not decide(out["text"], history=history)["burn_in"]
    later = json.dumps([future, step("reboot", "2026-09-23T00:00:00Z")])  # after the record's when
    assert decide(out["text"], history=later)["trigger"] == "repaired"
    further = json.dumps([future, step("reset", "2099-06-01T00:00:00Z")])  # another future one, later
    assert decide(out["text"], history=further)["trigger"] == "repaired"


def test_f4_a_record_from_a_stepped_clock_is_not_an_admission():
    """node-lifecycle.md table: "dated later than this controller's clock plus 300 s ... yes: not taken
    as an admission | `clock`" (its `when` would hide every repair)."""
    history = json.dumps([step("reset", "2026-10-01T00:00:00Z")])
    for raw in (rec(when=4096000000.0), rec(when=4096000000.0, repair=4096000000.0)):
        decision = decide(raw, history=history)
        assert decision["burn_in"] and decision["trigger"] == "clock", decision
        assert decision["check"]["status"] == "fail"
    assert decide(rec(when=WHEN), history=history)["trigger"] == "repaired"
    within = admission.decide([(SOURCE, rec(when=WHEN + 299))], burnin.settings(None, "gpufleet_burnin"),
                              driver=DRIVER, now=WHEN)  # within the skew allowance: admitted
    assert within["burn_in"] is False, within


def test_f8_a_record_without_a_driver_is_not_taken_as_todays_driver():
    """node-lifecycle.md table: "no driver recorded (`""`) and a known driver now | yes | `driver`"; a
    driver not known now is not compared and the reason says so."""
    decision = decide(rec(driver=""), driver="580.95.05")
    assert decision["burn_in"] and decision["trigger"] == "driver", decision
    assert "not recorded" in decision["reason"]
    unknown = decide(rec(driver=""), driver="")
    assert not unknown["burn_in"] and "not compared" in unknown["reason"], unknown


@pytest.mark.parametrize("field, value", [("driver", "580\x1b[2J"), ("driver", "5\n80"), ("dcgm_version", "4\x00"),
                                          ("checks", ["burnin.dcgm:gpu0\r/memtest"]), ("checks", ["a\x85b"])])
def test_control_characters_in_a_record_text_are_unreadable(field, value):
    """contracts.md "Records read back": "(no control characters in these texts)": never echoed into a
    message or the report."""
    decision = unreadable(rec(**{field: value}), field)
    assert (value if isinstance(value, str) else value[0]) not in decision["reason"]


@hsettings(max_examples=200, deadline=None)
@given(when=st.floats(1577836800.0, 4102444799.0), repair=st.one_of(st.none(), st.floats(1577836800.0, 4102444799.0)),
       ats=st.lists(st.integers(1577836800, 4102444799), max_size=4), now=st.floats(1700000000.0, 1900000000.0))
def test_a_record_or_history_from_any_clock_is_a_verdict_and_a_future_record_never_admits(when, repair, ats, now):
    """Any plausible `when`, `repair`, history dates and clock: a verdict, never a crash; a record dated past
    now + 300 s is never an admission; a repair dated between the record and now always burns in."""
    fields = {"when": when} if repair is None else {"when": when, "repair": repair}
    history = json.dumps([step("reset", time_text(at)) for at in ats])
    decision = admission.decide([(SOURCE, rec(**fields))], burnin.settings(None, "gpufleet_burnin"), node="n",
                                driver=DRIVER, annotations={HISTORY: history}, now=now)
    if when > now + admission.CLOCK_SKEW:
        assert decision["burn_in"] and decision["trigger"] == "clock"
    elif any(when <= at <= now for at in ats):
        assert decision["burn_in"] and decision["trigger"] == "repaired"


def time_text(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
