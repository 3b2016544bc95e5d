"""root: "" is an error naming root, never the controller's own "/" (issue "Fail closed")."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.families import FAMILIES, GPU, RDMA
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import (
    given_root,
    node_plan,
    single_errors,
    validate_node,
)


def test_given_root_keeps_an_empty_string():
    assert given_root({}) == "/"
    assert given_root({"root": None}) == "/"
    assert given_root({"root": ""}) == ""
    assert given_root({"root": "/srv/image"}) == "/srv/image"


@pytest.mark.parametrize("family", [GPU, RDMA], ids=lambda f: f.name)
def test_single_family_module_rejects_empty_root(family):
    params = dict((name, None) for name in family.options)
    params["root"] = ""
    assert single_errors(family, params) == ["option root must not be empty"]


def test_node_validate_rejects_empty_root():
    _plan, errors = node_plan(FAMILIES, {"root": ""})
    assert errors == ["option root must not be empty"]
    payload, errors = validate_node(FAMILIES, {"root": ""})
    assert payload is None and errors == ["option root must not be empty"]
