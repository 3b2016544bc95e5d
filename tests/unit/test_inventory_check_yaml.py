"""The inventory check reads the collection's role defaults, role argument specs and compatibility
matrix through libyaml when PyYAML has it (compatibility.safe_load): the same values and types as
yaml.safe_load (issue 45 item 3: 0.14 s of CPU per run with the pure-Python parser, 0.014 s).

The two parsers are not the same for every text: libyaml takes a tab after a plain scalar ("0\t") that
PyYAML's parser refuses, and reads a bare non-specific tag on an empty node ("a: !") as "" where PyYAML
reads None (found by hypothesis while writing these tests). Only the collection's own files are read this
way, so the test is that every one of them loads the same; a file that does not fails it."""

import glob
import math
import os

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility, inventory_check

ROOT = compatibility.COLLECTION_ROOT
FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml"))
               + glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))
               + [compatibility.MATRIX_PATH])


def typed(value):
    """``value`` with the type of every node, so 1 and True and "1" differ."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def test_libyaml_is_used_when_pyyaml_has_it():
    assert compatibility._SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def test_every_file_the_check_reads_loads_as_yaml_safe_load_loads_it():
    assert len(FILES) > 20
    for path in FILES:
        with open(path) as handle:
            text = handle.read()
        assert typed(compatibility.safe_load(text)) == typed(yaml.safe_load(text)), path


def test_role_specs_are_the_same_as_read_by_yaml_safe_load():
    specs = inventory_check.role_specs(ROOT)
    assert specs
    for role, options in specs.items():
        with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
            data = yaml.safe_load(handle) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name in ((entry or {}).get("options") or {}):
                assert name in options, (role, name)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(VALUES, st.sampled_from([False, True]))
def test_any_dumped_value_loads_the_same_both_ways(value, flow):
    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True)
    assert typed(compatibility.safe_load(text)) == typed(yaml.safe_load(text))
