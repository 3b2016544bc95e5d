"""The one module shape (module_utils/core/framework.py): run_module, ModuleFailure, and root owned once."""

import glob
import os
import re

import pytest
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import (
    ModuleFailure,
    checked_root,
    given_root,
    run_module,
)


class Exited(Exception):
    pass


class FakeModule(object):
    """What run_module needs of AnsibleModule; exit_json / fail_json end the run as Ansible's do."""

    def __init__(self, argument_spec, **options):
        self.argument_spec = argument_spec
        self.options = options
        self.params = {}
        self.check_mode = False

    def exit_json(self, **result):
        raise Exited(("exit", result))

    def fail_json(self, **result):
        raise Exited(("fail", result))


def run(work, **options):
    with pytest.raises(Exited) as ended:
        run_module({"root": {"type": "path"}}, work, module_class=FakeModule, **options)
    return ended.value.args[0]


def test_a_returned_dict_is_the_result():
    assert run(lambda module: {"changed": False, "x": 1}) == ("exit", {"changed": False, "x": 1})


def test_module_failure_is_fail_json_with_its_context():
    def work(module):
        raise ModuleFailure("option devices: mlx5_9 not found", devices=["mlx5_0"], moved=0)
    assert run(work) == ("fail", {"msg": "option devices: mlx5_9 not found", "devices": ["mlx5_0"], "moved": 0})


def test_check_mode_and_options_reach_the_module():
    seen = {}

    def work(module):
        seen.update(module.options)
        return {}
    run(work, required_if=[("mode", "client", ["server"])])
    assert seen == {"supports_check_mode": True, "required_if": [("mode", "client", ["server"])]}


def test_root_is_normalised_once_and_empty_is_refused(tmp_path):
    assert given_root({}) == "/" and given_root({"root": None}) == "/"
    assert given_root({"root": ""}) == ""
    assert checked_root({"root": str(tmp_path)}) == str(tmp_path)
    with pytest.raises(ModuleFailure, match="^option root must not be empty$"):
        checked_root({"root": ""})
    with pytest.raises(ModuleFailure, match="^option root: .* is not a directory$"):
        checked_root({"root": str(tmp_path / "missing")})


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))),
                         ids=os.path.basename)
def test_every_module_has_the_one_shape(path):
    """ARGUMENT_SPEC, and a main that is one run_module call; no module builds AnsibleModule itself."""
    with open(path) as handle:
        text = handle.read()
    assert re.search(r"^ARGUMENT_SPEC = ", text, re.M), path
    main = text[text.index("\ndef main():"):text.index('\nif __name__ == "__main__":')]
    body = [line.strip() for line in main.splitlines()[2:] if line.strip()]
    assert body and body[0].startswith("run_module(ARGUMENT_SPEC, "), (path, body)
    assert "AnsibleModule(" not in text and 'or "/"' not in text, path
