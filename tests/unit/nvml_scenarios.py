"""Helpers: a private copy of the fake pynvml (tests/fake_nvml) driven by a scenario."""

import copy
import importlib.util
import json
import os

from conftest import FIXTURES, TESTS

FAKE_PATH = os.path.join(TESTS, "fake_nvml", "pynvml.py")
SCENARIOS = os.path.join(FIXTURES, "nvml")
NODES = os.path.join(FIXTURES, "nodes")


def load_fake():
    """A fresh module object of the fake binding (own state, not registered as pynvml)."""
    spec = importlib.util.spec_from_file_location("fake_pynvml_%d" % id(object()), FAKE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario(name, device_overrides=None, **top):
    """Scenario dict from tests/fixtures/nvml/<name>.json with extra overrides applied."""
    fake = load_fake()
    data = copy.deepcopy(fake._load(os.path.join(SCENARIOS, name + ".json")))
    merged = data.get("device_overrides", {})
    for index, extra in (device_overrides or {}).items():
        merged[str(index)] = fake._merge(merged.get(str(index), {}), extra)
    if merged:
        data["device_overrides"] = merged
    data.update(top)
    return data


def fake_with(name, device_overrides=None, **top):
    fake = load_fake()
    fake.set_scenario(scenario(name, device_overrides, **top))
    return fake


def node(name):
    return os.path.join(NODES, name)


def scenario_files():
    return sorted(f[:-5] for f in os.listdir(SCENARIOS) if f.endswith(".json"))


def read_json(name):
    with open(os.path.join(SCENARIOS, name + ".json")) as handle:
        return json.load(handle)
