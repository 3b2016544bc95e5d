"""Module documentation as ansible-doc sees it: DOCUMENTATION with its doc fragments merged.

Ansible's own code does the merging (``init_plugin_loader`` + ``plugin_docs.get_docstring``, as
ansible-doc does). It runs in a child interpreter, once per test session: installing Ansible's
collection finder would change how ``ansible_collections`` is imported in this process, where the
tests import the checkout as a plain package (see conftest.py).
"""

import functools
import json
import os
import subprocess
import sys

from conftest import COLLECTIONS, REPO

MODULES_DIR = os.path.join(REPO, "plugins", "modules")
MODULES = sorted(name[:-3] for name in os.listdir(MODULES_DIR) if name.endswith(".py") and not name.startswith("_"))

_MERGE = r"""
import json
import sys

from ansible.plugins.loader import fragment_loader, init_plugin_loader
from ansible.utils.plugin_docs import get_docstring

init_plugin_loader([sys.argv[1]])
docs = {}
for path in sys.argv[2:]:
    doc = get_docstring(path, fragment_loader, collection_name="gpufleet.cluster", plugin_type="module")[0]
    docs[doc["module"]] = doc
json.dump(docs, sys.stdout, default=str)
"""


@functools.lru_cache(maxsize=None)
def merged_docs():
    """{module name: DOCUMENTATION with fragments merged} for every module in plugins/modules."""
    paths = [os.path.join(MODULES_DIR, name + ".py") for name in MODULES]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-c", _MERGE, COLLECTIONS] + paths, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def merged_options(module_name):
    """The options of a module after its doc fragments are merged."""
    return merged_docs()[module_name]["options"]
