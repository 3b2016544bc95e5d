"""Every role's meta/argument_specs.yml declares exactly the inputs of its defaults/main.yml."""

import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES_DIR = os.path.join(REPO, "roles")
ROLES = sorted(
    name for name in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, name))
) if os.path.isdir(ROLES_DIR) else []


def _load(role, *parts):
    path = os.path.join(ROLES_DIR, role, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def test_there_are_roles():
    assert ROLES, "no roles found under roles/"


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs(role):
    specs = _load(role, "meta", "argument_specs.yml")
    assert specs is not None, "%s: meta/argument_specs.yml is missing" % role
    assert "main" in specs.get("argument_specs", {}), "%s: no entry point main" % role


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_equal_defaults(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    specs = _load(role, "meta", "argument_specs.yml") or {}
    options = specs.get("argument_specs", {}).get("main", {}).get("options", {}) or {}
    assert set(options) == set(defaults), (
        "%s: only in defaults: %s; only in argument_specs: %s"
        % (role, sorted(set(defaults) - set(options)), sorted(set(options) - set(defaults)))
    )


@pytest.mark.parametrize("role", ROLES)
def test_inputs_are_prefixed_with_role_name(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    bad = [name for name in defaults if not name.startswith(role + "_")]
    assert not bad, "%s: inputs must be named %s_*: %s" % (role, role, bad)


@pytest.mark.parametrize("role", ROLES)
def test_no_meta_dependencies(role):
    meta = _load(role, "meta", "main.yml") or {}
    assert not meta.get("dependencies"), "%s: meta dependencies are not allowed" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_documented_defaults(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    specs = _load(role, "meta", "argument_specs.yml") or {}
    options = specs.get("argument_specs", {}).get("main", {}).get("options", {}) or {}
    for name, spec in options.items():
        if "default" in spec and name in defaults and not isinstance(defaults[name], str):
            assert spec["default"] == defaults[name], "%s: %s default differs" % (role, name)
        elif "default" in spec and isinstance(defaults.get(name), str) and "{{" not in defaults[name]:
            assert spec["default"] == defaults[name], "%s: %s default differs" % (role, name)
