"""module_utils.core.module_cache: this collection's module_utils imported from a private on-disk copy
(compiled once, .pyc kept) instead of the module's zip.

Each case runs a fresh interpreter on a zip laid out as AnsiballZ lays out its payload (the
collection's real module_utils below ansible_collections/gpufleet/cluster/plugins/module_utils/ in
their wings, with the wings' own __init__ files, empty package __init__ files above, the zip first
on sys.path), with XDG_CACHE_HOME in a temporary
directory. The real path through ansible-playbook is in
tests/integration/test_node_validate_module.py.
"""

import json
import os
import subprocess
import sys
import time
import zipfile

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UTILS = os.path.join(REPO, "plugins", "module_utils")
PREFIX = "ansible_collections/gpufleet/cluster/plugins/module_utils/"
# module_cache sits in a wing below module_utils: it copies every wing, not only its own
SHIPPED = ("core/__init__.py", "core/module_cache.py", "core/checks.py", "tuning/__init__.py", "tuning/cpulist.py")

# What the module does: activate() first, then import another module_utils; prints where it came from.
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache
where = module_cache.activate()
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.tuning import cpulist
print(json.dumps({"where": where, "checks": checks.__file__, "cpulist": cpulist.__file__,
                  "statuses": list(checks.STATUSES), "cpus": sorted(cpulist.parse_cpulist("0-2,5"))}))
"""


def payload(tmp_path, name="payload.zip", extra=None):
    """A zip shaped like an AnsiballZ payload with three of the collection's module_utils (two wings)."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in ("ansible_collections/", "ansible_collections/gpufleet/", "ansible_collections/gpufleet/cluster/",
                        "ansible_collections/gpufleet/cluster/plugins/", PREFIX):
            archive.writestr(package + "__init__.py", "")
        for file_name in SHIPPED:
            with open(os.path.join(UTILS, file_name)) as handle:
                archive.writestr(PREFIX + file_name, handle.read() + (extra or ""))
    return str(path)


def probe_env(cache_home, dont_write=False):
    """The probe's environment: this machine's, without its bytecode and import-path settings."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["XDG_CACHE_HOME"] = str(cache_home)
    if dont_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def probe(zip_path, cache_home, dont_write=False):
    proc = subprocess.run([sys.executable, "-s", "-c", PROBE, zip_path], env=probe_env(cache_home, dont_write),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def key_dirs(cache_home):
    root = os.path.join(str(cache_home), "gpufleet", "module_utils")
    return sorted(os.path.join(root, name) for name in os.listdir(root)) if os.path.isdir(root) else []


def test_first_run_copies_and_compiles_once_second_run_reuses(tmp_path):
    zip_path = payload(tmp_path)
    first = probe(zip_path, tmp_path / "cache")
    [copy] = key_dirs(tmp_path / "cache")
    assert first["where"] == copy
    assert first["statuses"] == ["pass", "warn", "fail", "skip"] and first["cpus"] == [0, 1, 2, 5]
    assert os.stat(copy).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(copy)) == ["__init__.py", "core", "tuning"]
    assert sorted(name for name in os.listdir(os.path.join(copy, "core")) if name.endswith(".py")) == [
        "__init__.py", "checks.py", "module_cache.py"]
    assert first["checks"] == os.path.join(copy, "core", "checks.py")  # the wing imported before activate too
    assert first["cpulist"] == os.path.join(copy, "tuning", "cpulist.py")
    pyc = os.path.join(copy, "core", "__pycache__", "checks.%s.pyc" % sys.implementation.cache_tag)
    written = os.stat(pyc).st_mtime_ns

    time.sleep(0.05)
    second = probe(zip_path, tmp_path / "cache")
    assert second == first
    assert os.stat(pyc).st_mtime_ns == written  # loaded from the .pyc, not compiled again


def test_new_content_gets_a_new_directory_and_the_old_one_stays_until_unused(tmp_path):
    old = probe(payload(tmp_path, "old.zip"), tmp_path / "cache")["where"]
    week_ago = time.time() - 6 * 86400
    os.utime(old, (week_ago, week_ago))
    new = probe(payload(tmp_path, "new.zip", extra="\n# changed\n"), tmp_path / "cache")["where"]
    assert new != old and key_dirs(tmp_path / "cache") == sorted([old, new])

    stale = time.time() - 8 * 86400
    os.utime(old, (stale, stale))
    newest = probe(payload(tmp_path, "newest.zip", extra="\n# changed again\n"), tmp_path / "cache")["where"]
    assert key_dirs(tmp_path / "cache") == sorted([new, newest])  # unused for 8 days: removed


def test_damaged_copy_is_replaced_from_the_payload(tmp_path):
    zip_path = payload(tmp_path)
    copy = probe(zip_path, tmp_path / "cache")["where"]
    with open(os.path.join(copy, "core", "checks.py"), "w") as handle:
        handle.write("STATUSES = ('tampered',)\n")
    again = probe(zip_path, tmp_path / "cache")
    assert again["where"] == copy and again["statuses"] == ["pass", "warn", "fail", "skip"]


@pytest.mark.parametrize("case", ["group-writable root", "root is a symlink", "file instead of directory"])
def test_unsafe_cache_root_leaves_imports_in_the_zip(tmp_path, case):
    zip_path = payload(tmp_path)
    root = tmp_path / "cache" / "gpufleet" / "module_utils"
    root.parent.mkdir(parents=True)
    if case == "group-writable root":
        root.mkdir(mode=0o700)
        os.chmod(root, 0o770)
    elif case == "root is a symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "elsewhere")
    else:
        root.write_text("")
    result = probe(zip_path, tmp_path / "cache")
    assert result["where"] is None
    assert result["checks"].startswith(zip_path + os.sep) and result["statuses"] == ["pass", "warn", "fail", "skip"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the cache directory to another user")
def test_cache_root_of_another_user_is_not_used(tmp_path):
    zip_path = payload(tmp_path)
    root = tmp_path / "cache" / "gpufleet" / "module_utils"
    root.mkdir(parents=True, mode=0o700)
    os.chown(root, 65534, 65534)
    assert probe(zip_path, tmp_path / "cache")["where"] is None


def test_dont_write_bytecode_writes_nothing(tmp_path):
    result = probe(payload(tmp_path), tmp_path / "cache", dont_write=True)
    assert result["where"] is None and not (tmp_path / "cache").exists()


def test_unwritable_home_leaves_imports_in_the_zip(tmp_path):
    zip_path = payload(tmp_path)
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    result = probe(zip_path, blocker)
    assert result["where"] is None and result["cpus"] == [0, 1, 2, 5]


def test_concurrent_first_runs_agree(tmp_path):
    zip_path = payload(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-s", "-c", PROBE, zip_path], env=probe_env(tmp_path / "cache"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    [copy] = key_dirs(tmp_path / "cache")
    assert all(result["statuses"] == ["pass", "warn", "fail", "skip"] for result in results)
    assert all(result["where"] in (copy, None) for result in results)
    assert not [name for name in os.listdir(os.path.dirname(copy)) if name.startswith(".new-")]


def test_outside_a_zip_it_does_nothing():
    # pytest imports module_utils from the checkout, as ansible-test and Mitogen's importer do
    assert module_cache.activate() is None


def test_cache_root_follows_xdg_and_home():
    assert module_cache.cache_root({"XDG_CACHE_HOME": "/var/tmp/c"}) == "/var/tmp/c/gpufleet/module_utils"
    assert module_cache.cache_root({}) == os.path.join(os.path.expanduser("~"), ".cache", "gpufleet", "module_utils")
    home = os.path.join(os.path.expanduser("~"), ".cache", "gpufleet", "module_utils")
    assert module_cache.cache_root({"XDG_CACHE_HOME": "relative"}) == home  # ignored, as the XDG spec says
