"""ansible-doc renders every module of the collection (DOCUMENTATION, EXAMPLES and RETURN parse,
doc fragments resolve, nested sub-options render)."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", "modules"))
                 if name.endswith(".py") and not name.startswith("_"))

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-doc")),
                                reason="run `make setup` first")


@pytest.fixture(scope="module")
def rendered():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(BIN, "ansible-doc")] + ["gpufleet.cluster." + m for m in MODULES],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr[-3000:]
    sections = {}
    for chunk in proc.stdout.split("> MODULE ")[1:]:
        sections[chunk.split()[0]] = chunk
    return sections


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(rendered, module):
    text = rendered.get("gpufleet.cluster." + module)
    assert text, sorted(rendered)
    for heading in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert heading in text, (module, heading)


def test_node_validate_doc_shows_the_nested_family_options(rendered):
    text = rendered["gpufleet.cluster.node_validate"]
    assert text.count("suboptions:") >= 2
    for option in ("enabled", "expected_count", "xid_source", "min_rate_gbps", "link_layer"):
        assert option in text
