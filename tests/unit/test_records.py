"""module_utils/core/records.py: the strict primitives every record reader is built on."""

import gc
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.records import RecordError


@pytest.mark.parametrize("raw", ['{"a": NaN}', '{"a": Infinity}', '[-Infinity]', '{"a": 1, "a": 2}',
                                 b"\xff\xfe", "[" * 5000 + "]" * 5000, "", "{", None, 7])
def test_hostile_documents_are_unreadable(raw):
    with pytest.raises(RecordError) as err:
        records.load_json(raw, "probe")
    assert "probe" in str(err.value)


def test_size_is_bounded():
    with pytest.raises(RecordError, match="more than"):
        records.load_json('"%s"' % ("x" * (records.MAX_BYTES + 1)), "probe")


def test_brackets_inside_strings_do_not_count_as_depth():
    assert records.load_json(json.dumps({"a": "[" * 100}), "probe") == {"a": "[" * 100}


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), "1", None, [1]])
def test_number_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(RecordError):
        records.number(value, "probe", "f")


def test_ranges_and_times():
    assert records.integer(3, "r", "f", 0, 3) == 3
    with pytest.raises(RecordError, match="above"):
        records.integer(4, "r", "f", 0, 3)
    with pytest.raises(RecordError):
        records.timestamp(0, "r", "f")
    with pytest.raises(RecordError, match="future"):
        records.timestamp(1.8e9 + 100, "r", "f", now=1.8e9, future_slack=10)
    with pytest.raises(RecordError, match="unknown"):
        records.mapping({"a": 1, "b": 2}, "r", allowed=("a",))
    with pytest.raises(RecordError, match="missing"):
        records.mapping({}, "r", required=("a",))


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_any_input_parses_or_is_a_record_error(raw):
    try:
        records.load_json(raw, "probe")
    except RecordError:
        pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_finite_json_round_trips(value):
    assert records.load_json(json.dumps(value), "probe") == value


@pytest.mark.parametrize("text, ok", [("0", True), ("123", True), ("\u00b2", False), ("\u0663", False),
                                      ("\uff18", False), ("1_0", False), ("", False), (" 1", False), (1, False)])
def test_is_decimal_is_ascii_digits_only(text, ok):
    assert records.is_decimal(text) is ok


@pytest.mark.parametrize("raw", ['{"reason": "\\ud800"}', '["\\udfff"]', '{"\\ud800": 1}', '"\ud800"'])
def test_a_lone_surrogate_is_not_utf8_text(raw):
    with pytest.raises(RecordError, match="lone surrogate"):
        records.load_json(raw, "probe")


def test_an_escaped_surrogate_pair_is_a_character():
    assert records.load_json('"\\ud83d\\ude00"', "probe") == "\U0001F600"



# 50,000 objects: with the GC on, dozens of collections would start while it is decoded (threshold 700)
_PAGE = json.dumps({"kind": "NodeList", "items": [{"metadata": {"name": "node%05d" % i, "labels": {"a": "b"}},
                                                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
                                                  for i in range(10000)]}).encode("utf-8")


def _gc_states_while_decoding(monkeypatch, raw):
    """(gc.isenabled() at each object the decoder made, records.loads' value or RecordError)."""
    states, hook = [], records._no_duplicates

    def watching(pairs):
        states.append(gc.isenabled())
        return hook(pairs)

    monkeypatch.setattr(records, "_no_duplicates", watching)
    try:
        return states, records.loads(raw, "node list page 1")
    except RecordError as exc:
        return states, exc


def test_loads_decodes_with_the_cyclic_gc_paused_and_sets_it_back(monkeypatch):
    """The cyclic GC is off while records.loads decodes a page (in Ansible's worker each collection walks
    the inherited inventory: 4 of the 7 s the read of 10,000 Nodes took) and on again after."""
    assert gc.isenabled()
    states, value = _gc_states_while_decoding(monkeypatch, _PAGE)
    assert len(states) == 50001 and not any(states)
    assert len(value["items"]) == 10000 and value["items"][-1]["metadata"]["name"] == "node09999"
    assert gc.isenabled()


def test_loads_sets_the_gc_back_after_a_page_it_refuses_and_leaves_it_off_when_it_was_off(monkeypatch):
    states, error = _gc_states_while_decoding(monkeypatch, _PAGE[:-1] + b', "items": []}')
    assert isinstance(error, RecordError) and "duplicate key 'items'" in str(error) and not any(states)
    assert gc.isenabled()
    states, error = _gc_states_while_decoding(monkeypatch, b"\xff" + _PAGE)
    assert isinstance(error, RecordError) and "not UTF-8" in str(error) and gc.isenabled()
    gc.disable()
    try:
        assert records.loads(b'{"a": 1}', "probe") == {"a": 1}
        assert not gc.isenabled()
    finally:
        gc.enable()
