"""The accelerated mode's bytecode cache on the node (scripts/accelerated/gpufleet_mitogen_target.py): Mitogen
compiles every module_utils file it serves to a host from source; the target side module keeps the compiled
code per (bytecode version, file name, source) in a private directory. What runs must be what compiling the
source gives, whatever is in the cache directory; the cache may only ever save the compile. The effect on a
sweep is measured by bench/fleet_validate.py (docs/performance.md), not here."""

import importlib.util
import marshal
import os
import subprocess
import sys
import types

import pytest
from hypothesis import given, settings, strategies as st

try:
    import ansible_mitogen.runner  # noqa: F401  pylint: disable=unused-import
except ImportError:  # pragma: no cover - make setup installs mitogen
    ansible_mitogen = None

pytestmark = pytest.mark.skipif(ansible_mitogen is None, reason="mitogen is not installed (make setup installs it)")

TARGET = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "accelerated", "gpufleet_mitogen_target.py")

SOURCE = "VALUE = [n * 2 for n in range(3)]\n\ndef double(x):\n    return 2 * x\n"


@pytest.fixture(scope="module")
def target():
    spec = importlib.util.spec_from_file_location("gpufleet_mitogen_target_under_test", TARGET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def writes_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def run(code):
    namespace = {}
    exec(code, namespace)  # pylint: disable=exec-used
    return namespace["VALUE"], namespace["double"](21)


def same_code(left, right):
    return marshal.dumps(left) == marshal.dumps(right)


def test_compiled_once_then_read_from_the_cache(target, tmp_path, monkeypatch):
    directory = str(tmp_path / "code")
    first = target.compile_cached(SOURCE, "master:/x/a.py", directory)
    assert same_code(first, compile(SOURCE, "master:/x/a.py", "exec", 0, True))
    assert os.listdir(directory) == [target.entry_key(SOURCE, "master:/x/a.py")]
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"

    def no_compile(*_args, **_kwargs):
        raise AssertionError("compiled again although the cache holds the entry")

    monkeypatch.setattr(target, "compile", no_compile, raising=False)  # the module's global lookup
    second = target.compile_cached(SOURCE, "master:/x/a.py", directory)
    assert same_code(second, first) and run(second) == ([0, 2, 4], 42)


def test_another_source_or_name_is_another_entry(target, tmp_path):
    directory = str(tmp_path)
    target.compile_cached(SOURCE, "master:/x/a.py", directory)
    changed = SOURCE.replace("* 2", "* 3")
    code = target.compile_cached(changed, "master:/x/a.py", directory)
    assert run(code)[0] == [0, 3, 6]
    renamed = target.compile_cached(SOURCE, "master:/x/b.py", directory)
    assert renamed.co_filename == "master:/x/b.py"
    assert len(os.listdir(directory)) == 3


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_whatever_the_entry_holds_what_runs_is_the_source(target, tmp_path_factory, junk):
    """A damaged, truncated or foreign entry (any bytes, a valid marshal of something else) is compiled over."""
    directory = str(tmp_path_factory.mktemp("code"))
    with open(os.path.join(directory, target.entry_key(SOURCE, "master:/x/a.py")), "wb") as handle:
        handle.write(junk)
    code = target.compile_cached(SOURCE, "master:/x/a.py", directory)
    assert same_code(code, compile(SOURCE, "master:/x/a.py", "exec", 0, True))


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.text(max_size=50), st.binary(max_size=50),
                 st.lists(st.integers(), max_size=10), st.tuples(st.text(max_size=5), st.floats())))
def test_a_whole_entry_of_something_else_than_code_is_compiled_over(target, tmp_path_factory, value):
    """An entry whose digest matches (as the module writes them) but that holds no code is not run."""
    directory = str(tmp_path_factory.mktemp("code"))
    key = target.entry_key(SOURCE, "master:/x/a.py")
    with open(os.path.join(directory, key), "wb") as handle:
        handle.write(target.entry_bytes(value, key))
    assert run(target.compile_cached(SOURCE, "master:/x/a.py", directory)) == ([0, 2, 4], 42)


def test_an_entry_with_code_of_another_file_is_not_used(target, tmp_path):
    directory = str(tmp_path)
    other = compile("VALUE = 1\ndef double(x):\n    return 0\n", "master:/x/other.py", "exec")
    key = target.entry_key(SOURCE, "master:/x/a.py")
    for entry in (marshal.dumps(other), target.entry_bytes(other, key)):  # without and with the digest
        with open(os.path.join(directory, key), "wb") as handle:
            handle.write(entry)
        assert run(target.compile_cached(SOURCE, "master:/x/a.py", directory)) == ([0, 2, 4], 42)


def test_a_damaged_entry_is_compiled_over_and_replaced(target, tmp_path):
    directory = str(tmp_path)
    target.compile_cached(SOURCE, "master:/x/a.py", directory)
    path = os.path.join(directory, target.entry_key(SOURCE, "master:/x/a.py"))
    with open(path, "rb") as handle:
        whole = handle.read()
    damaged = whole[:40] + bytes([whole[40] ^ 0x01]) + whole[41:]  # one bit of the marshal data
    with open(path, "wb") as handle:
        handle.write(damaged)
    assert run(target.compile_cached(SOURCE, "master:/x/a.py", directory)) == ([0, 2, 4], 42)
    with open(path, "rb") as handle:
        assert handle.read() == whole


def test_an_entry_that_asks_for_gigabytes_is_compiled_over_without_them(target, tmp_path):
    """Five bytes that marshal reads as a list of 2**31 - 1 items (16 GiB of pointers): the module runs
    the source under a 1 GiB address-space limit, where unmarshalling them raises MemoryError."""
    directory = tmp_path / "code"
    directory.mkdir(mode=0o700)
    (directory / target.entry_key(SOURCE, "master:/x/a.py")).write_bytes(b"[\xff\xff\xff\x7f")
    script = (
        "import importlib.util, resource, sys\n"
        "spec = importlib.util.spec_from_file_location('t', sys.argv[1])\n"
        "t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "ns = {}; exec(t.compile_cached(sys.argv[3], 'master:/x/a.py', sys.argv[2]), ns)\n"
        "print(ns['VALUE'], ns['double'](21))\n")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the cache is used
    proc = subprocess.run([sys.executable, "-c", script, TARGET, str(directory), SOURCE],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout == "[0, 2, 4] 42\n", proc.stderr[-2000:]


def test_a_directory_others_can_write_to_is_not_used(target, tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    code = target.compile_cached(SOURCE, "master:/x/a.py", str(directory))
    assert run(code) == ([0, 2, 4], 42) and os.listdir(str(directory)) == []


def test_nothing_written_when_python_is_told_not_to(target, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    code = target.compile_cached(SOURCE, "master:/x/a.py", str(tmp_path / "code"))
    assert run(code) == ([0, 2, 4], 42) and not (tmp_path / "code").exists()


def test_no_home_compiles_from_source(target, monkeypatch):
    monkeypatch.setattr(target, "cache_dir", lambda: None)
    assert run(target.compile_cached(SOURCE, "master:/x/a.py")) == ([0, 2, 4], 42)


def test_cache_dir_follows_xdg_and_the_interpreter(target):
    tag = sys.implementation.cache_tag
    assert target.cache_dir({"XDG_CACHE_HOME": "/c"}) == os.path.join("/c", "gpufleet", "mitogen-code", tag)
    relative = target.cache_dir({"XDG_CACHE_HOME": "rel"})  # relative: ignored, as the XDG spec says
    assert relative == os.path.join(os.path.expanduser("~"), ".cache", "gpufleet", "mitogen-code", tag)


class FakeImporter:
    """What mitogen.core.Importer.exec_module reads: the source the controller served."""

    def __init__(self, sources):
        self.sources = sources

    def get_source(self, name):
        return self.sources[name]


def test_the_importer_runs_the_served_source(target, tmp_path, monkeypatch):
    monkeypatch.setattr(target, "cache_dir", lambda: str(tmp_path))
    importer = FakeImporter({"ansible_collections.x.y.plugins.module_utils.m": SOURCE})
    for _ in range(2):  # compiled, then from the cache
        module = types.ModuleType("ansible_collections.x.y.plugins.module_utils.m")
        module.__spec__ = importlib.util.spec_from_loader(module.__name__, loader=None, origin="master:/x/m.py")
        target._importer_exec_module(importer, module)  # pylint: disable=protected-access
        assert module.VALUE == [0, 2, 4] and module.double(21) == 42
        assert module.double.__code__.co_filename == "master:/x/m.py"
    assert len(os.listdir(str(tmp_path))) == 1


def test_install_puts_it_into_mitogens_importers(target):
    fakes = types.SimpleNamespace(ModuleUtilsImporter=type("M", (), {}), NewStyleRunner=type("N", (), {}))
    core = types.SimpleNamespace(Importer=type("I", (), {}))
    target.install(runner=fakes, core=core)
    assert core.Importer.exec_module is target._importer_exec_module  # pylint: disable=protected-access
    assert fakes.ModuleUtilsImporter.exec_module is target._exec_module  # pylint: disable=protected-access
    assert fakes.NewStyleRunner._get_code is target._get_code  # pylint: disable=protected-access
