"""One fail_on choice list: checks.FAIL_ON_CHOICES. Python takes it from there (argument specs, the doc
fragment); YAML cannot import, so every YAML spelling of the list is kept equal to it here: the
filter documentation, and the gate's subset (no ``never``: gate.GATE_FAIL_ON) in the role argument
specs, the roles' input checks and the health_gate_patch documentation."""

import glob
import importlib
import os
import re

import pytest
import yaml
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.doc_fragments.validation import ModuleDocFragment
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import FAIL_ON_CHOICES
from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import GATE_FAIL_ON

MODULES = sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
GATE_FILTERS = ("health_gate_patch", "remediation_plan")
GATE_MODULES = ("node_write",)


def _options(node):
    """Every (name, option) of a documented options tree, suboptions included."""
    for name, option in (node or {}).items():
        if isinstance(option, dict):
            yield name, option
            yield from _options(option.get("suboptions") or option.get("options"))


def test_the_one_list():
    assert FAIL_ON_CHOICES == ("fail", "warn", "never")
    assert [choice for choice in FAIL_ON_CHOICES if choice != "never"] == list(GATE_FAIL_ON)


def test_doc_fragment_takes_the_list():
    documented = yaml.safe_load(ModuleDocFragment.FAIL_ON)["options"]["fail_on"]
    assert documented["choices"] == list(FAIL_ON_CHOICES)


@pytest.mark.parametrize("name", MODULES)
def test_module_specs_take_the_list(name):
    spec = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.modules." + name).ARGUMENT_SPEC
    if "fail_on" in spec:
        assert spec["fail_on"]["choices"] == list(GATE_FAIL_ON if name in GATE_MODULES else FAIL_ON_CHOICES), name


def test_filter_documentation_spells_the_list():
    seen = 0
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml"))):
        with open(path) as handle:
            doc = (yaml.safe_load(handle) or {}).get("DOCUMENTATION") or {}
        gate = os.path.basename(path)[:-4] in GATE_FILTERS
        for name, option in _options(doc.get("options")):
            if name == "fail_on":
                seen += 1
                assert option.get("choices") == list(GATE_FAIL_ON if gate else FAIL_ON_CHOICES), path
    assert seen >= 3


def test_role_argument_specs_spell_the_gate_list():
    seen = 0
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml"))):
        with open(path) as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
        for entry in specs.values():
            for name, option in _options(entry.get("options")):
                if name.endswith("_fail_on"):
                    seen += 1
                    assert option.get("choices") == list(GATE_FAIL_ON), (path, name)
    assert seen >= 3


def test_role_input_checks_spell_the_gate_list():
    seen = 0
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "**", "*.yml"), recursive=True)):
        with open(path) as handle:
            text = handle.read()
        for found in re.findall(r"_fail_on in (\[[^\]]*\])", text):
            seen += 1
            assert yaml.safe_load(found) == list(GATE_FAIL_ON), path
    assert seen >= 1
