"""What the tests that run the collection as users get it share: the checkout's venv, the simulated
GPU node (fixture sysfs tree, fake NVML scenario), an environment without the checkout's Ansible
settings, and the collection built with `ansible-galaxy collection build` and installed from the
tarball into a path of the test's own (`build_and_install`). Used by test_collection_install,
test_day_two_entry_points and test_redteam_day_two."""

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
NODES = os.path.join(REPO, "tests", "fixtures", "nodes")
NVML = os.path.join(REPO, "tests", "fixtures", "nvml")

# a host the controller runs itself, with the venv's interpreter
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON}


def simulated_gpu(scenario="h100-healthy.json"):
    """The variables of a simulated DGX H100 validated through the local connection: its fixture tree
    and the fake NVML answering `scenario` (a file of tests/fixtures/nvml)."""
    return {"gpufleet_validate_root": os.path.join(NODES, "dgx-h100"), "gpufleet_validate_gpu": {"xid_source": "none"},
            "gpufleet_validate_environment": {"PYTHONPATH": os.path.join(REPO, "tests", "fake_nvml"),
                                              "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(NVML, scenario)}}


def clean_env(collections):
    """This process's environment without ANSIBLE_*, GPUFLEET_* and PYTHONPATH (nothing of the checkout's
    settings), Ansible looking for collections in `collections` only, the venv's tools first on PATH."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ANSIBLE_", "GPUFLEET_")) and key != "PYTHONPATH"}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + env.get("PATH", ""))
    return env


def build_and_install(base):
    """`ansible-galaxy collection build` of the checkout into `base` and `collection install --no-deps`
    of the tarball into `base`/collections; returns (tarball path, collections path). Fails (assert)
    with ansible-galaxy's output when the install does."""
    subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(base), REPO],
                   check=True, capture_output=True, text=True, timeout=300, cwd=REPO)
    tarballs = sorted(name for name in os.listdir(str(base)) if name.endswith(".tar.gz"))
    assert len(tarballs) == 1, tarballs
    tarball = os.path.join(str(base), tarballs[0])
    collections = os.path.join(str(base), "collections")
    proc = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "-p",
                           collections, tarball], check=False, capture_output=True, text=True, timeout=300,
                          cwd=str(base), env=clean_env(collections))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tarball, collections
