"""Role node_health_agent on a node installed by an older release: the two tasks of
tasks/install.yml that find and remove module_utils files the list no longer names (the flat
layout's agent_kube.py, gpu.py beside the gpu/ wing, ...), run by ansible-playbook on localhost
against a deploy directory under tmp_path. Only files in the deploy directory go, symlinks are
removed themselves (their targets stay), Python's cache stays, the listed files and the wings stay;
a second run changes nothing; check mode reports without removing."""

import json
import os
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, ".venv", "bin")
ROLE = os.path.join(REPO, "roles", "node_health_agent")
CLEANUP = ("Find the agent's installed module_utils files", "Remove module_utils files the agent no longer uses")
# The flat layout's files (before the wings), a stale file in a wing, an editor's hidden file.
STALE = ("agent.py", "agent_kube.py", "gpu.py", "slurm.py", "capture.py", "remediation.py", "records.py",
         "gpu/old_helper.py", "core/.records.py.swp")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="run `make setup` first")


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def playbook(tmp_path, pkg, names=CLEANUP):
    """A play of the role's own tasks ``names`` (taken from tasks/install.yml by name; role_path is
    the role's directory) with the role's file list and the deploy directory moved to ``pkg``; a
    handler of the name they notify."""
    tasks = [task for task in load("tasks", "install.yml") if task.get("name") in names]
    assert [task["name"] for task in tasks] == list(names)
    play = [{"name": "Cleanup", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"__node_health_agent_pkg": str(pkg), "role_path": ROLE,
                      "__node_health_agent_files": load("vars", "main.yml")["__node_health_agent_files"]},
             "tasks": tasks,
             "handlers": [{"name": "Restart the gpufleet health agent",
                           "ansible.builtin.debug": {"msg": "restart"}}]}]
    path = tmp_path / "cleanup.yml"
    path.write_text(yaml.safe_dump(play))
    return path


def ansible_playbook(tmp_path, path, *extra):
    """The JSON callback's output of one ansible-playbook run of ``path`` on localhost."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", GPUFLEET_REPORT_DIR=str(tmp_path / "reports"), ANSIBLE_PYTHON_INTERPRETER=
               os.path.join(BIN, "python"))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(path)]
                          + list(extra), cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def run(tmp_path, pkg, *extra):
    out = ansible_playbook(tmp_path, playbook(tmp_path, pkg), *extra)
    tasks = {task["task"]["name"]: task["hosts"]["localhost"] for task in out["plays"][0]["tasks"]}
    removal = tasks[CLEANUP[1]]
    removed = sorted(os.path.relpath(item["item"], str(pkg / "module_utils"))
                     for item in removal.get("results", []) if item.get("changed"))
    return removed, out["stats"]["localhost"]["changed"]


def write(path, text="x = 1\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def install(tmp_path):
    """A deploy directory with the role's files, the flat layout's files, links out of it, a cache."""
    pkg = tmp_path / "agent" / "ansible_collections" / "gpufleet" / "cluster" / "plugins"
    mu = pkg / "module_utils"
    for rel in load("vars", "main.yml")["__node_health_agent_files"]:
        write(pkg / rel)
    for rel in STALE:
        write(mu / rel, "raise ImportError('stale')\n")
    write(mu / "__pycache__" / "gpu.cpython-311.pyc", "cache")
    write(mu / "agent" / "__pycache__" / "agent.cpython-311.pyc", "cache")
    outside = tmp_path / "outside"
    write(outside / "keep.py")
    write(outside / "sub" / "deep.py")
    os.symlink(str(outside), str(mu / "linked_dir"))
    os.symlink(str(outside / "keep.py"), str(mu / "kube" / "linked_file.py"))
    return pkg, outside


def tree(root):
    found = []
    for top, dirs, files in os.walk(str(root)):
        found.extend(os.path.relpath(os.path.join(top, name), str(root)) for name in dirs + files)
    return sorted(found)


def test_files_the_list_does_not_name_go_and_nothing_else(tmp_path):
    pkg, outside = install(tmp_path)
    outside_before = tree(outside)
    removed, changed = run(tmp_path, pkg)
    assert removed == sorted(list(STALE) + ["linked_dir", "kube/linked_file.py"])
    assert changed == 1  # the removal task (the find reports no change)
    listed = load("vars", "main.yml")["__node_health_agent_files"]
    wings = sorted({os.path.dirname(rel)[len("module_utils/"):] for rel in listed})
    left = [rel for rel in tree(pkg / "module_utils") if "__pycache__" not in rel]
    assert left == sorted(wings + [rel[len("module_utils/"):] for rel in listed])
    assert (pkg / "module_utils" / "__pycache__" / "gpu.cpython-311.pyc").is_file()
    assert (pkg / "module_utils" / "agent" / "__pycache__" / "agent.cpython-311.pyc").is_file()
    assert tree(outside) == outside_before  # no link followed

    assert run(tmp_path, pkg) == ([], 0)  # idempotent


def test_check_mode_reports_the_removals_and_removes_nothing(tmp_path):
    pkg, _ = install(tmp_path)
    before = tree(pkg)
    removed, changed = run(tmp_path, pkg, "--check")
    assert removed == sorted(list(STALE) + ["linked_dir", "kube/linked_file.py"]) and changed == 1
    assert tree(pkg) == before


def test_a_fresh_install_removes_nothing(tmp_path):
    pkg, _ = install(tmp_path)
    for rel in STALE + ("linked_dir", "kube/linked_file.py"):
        os.unlink(str(pkg / "module_utils" / rel))
    assert run(tmp_path, pkg) == ([], 0)


INSTALL = (CLEANUP[0], "Install the agent's code (the collection's module_utils it imports)")


@pytest.mark.skipif(os.geteuid() != 0, reason="the role installs the files as root:root")
def test_only_listed_files_not_in_place_are_copied(tmp_path):
    """The copy runs for exactly the listed files that are missing or differ from the collection's
    (content, mode, owner, a symlink instead of the file), and a second run copies nothing."""
    pkg = tmp_path / "agent" / "ansible_collections" / "gpufleet" / "cluster" / "plugins"
    listed = load("vars", "main.yml")["__node_health_agent_files"]
    for rel in listed:
        write(pkg / rel, open(os.path.join(REPO, "plugins", rel)).read())
        os.chmod(str(pkg / rel), 0o644)
    drifted = {"content": listed[1], "mode": listed[2], "owner": listed[3], "symlink": listed[4], "missing": listed[5]}
    write(pkg / drifted["content"], (pkg / drifted["content"]).read_text() + "# edited on the node\n")
    os.chmod(str(pkg / drifted["mode"]), 0o600)
    os.chown(str(pkg / drifted["owner"]), 65534, 0)
    write(tmp_path / "elsewhere.py", (pkg / drifted["symlink"]).read_text())
    os.unlink(str(pkg / drifted["symlink"]))
    os.symlink(str(tmp_path / "elsewhere.py"), str(pkg / drifted["symlink"]))
    os.unlink(str(pkg / drifted["missing"]))

    def copied():
        out = ansible_playbook(tmp_path, playbook(tmp_path, pkg, INSTALL))
        task = [t for t in out["plays"][0]["tasks"] if t["task"]["name"] == INSTALL[1]][0]["hosts"]["localhost"]
        return sorted(item["item"] for item in task.get("results", []))

    assert copied() == sorted(drifted.values())
    for rel in listed:
        path = pkg / rel
        assert not path.is_symlink() and path.read_text() == open(os.path.join(REPO, "plugins", rel)).read(), rel
        st = os.stat(str(path))
        assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o644, 0, 0), rel
    assert (tmp_path / "elsewhere.py").read_text()  # the link's target stays
    assert copied() == []  # every file in place: no copy at all
