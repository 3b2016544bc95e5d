"""Target side of the accelerated mode's strategy (gpufleet_mitogen_linear.py): a bytecode cache on the node
for the code Mitogen serves to a host's interpreter (this collection's module_utils, the module itself).

Not part of the collection (build_ignore: scripts). Mitogen serves this file to each host's interpreter
(the strategy adds its name to Mitogen's import allow-list) and every module run calls :func:`run_module`
in place of ``ansible_mitogen.target.run_module``.

Why: under Mitogen 0.3.54 a module's imports that the node's interpreter does not have -- this collection's
module_utils -- come from the controller as source, and Mitogen's importer (``mitogen.core.Importer``)
compiles them there; node_validate's ≈ 220 kB of module_utils cost ≈ 30-40 ms of CPU, once per interpreter,
i.e. once per node and sweep (Mitogen keeps one interpreter per node for the run; the modules stay
imported in it). The plain mode's module_cache (plugins/module_utils/core/module_cache.py) cannot help: it
works on AnsiballZ's zip, which Mitogen does not use. So the compiled code of each file is kept on the
node, as Python keeps ``__pycache__``: one marshal file per (Python bytecode version, file name, source)
under ``$XDG_CACHE_HOME/gpufleet/mitogen-code/<cache tag>`` (default ``~/.cache``), directory mode 0700,
used only when it belongs to the user the module runs as and nobody else can write to it. The key is a
SHA-256 of the source and its name, so a changed file gets a new entry. An entry is the SHA-256 of its key
and its marshal data, then that data: only an entry whose digest matches is unmarshalled (an entry copied or
linked under another key does not match; a damaged entry could otherwise ask marshal for a list of 2**31
items, i.e. gigabytes, or raise MemoryError). Entries are regular files of at most ENTRY_LIMIT bytes, opened
without following links relative to the directory the privacy check looked at (a FIFO, a device, a link or
a directory swapped after the check is never read). Nothing is written with
``PYTHONDONTWRITEBYTECODE``; any problem (no home, a read-only or foreign directory, an unreadable entry)
compiles from source as Mitogen does: the cache can make a run faster, never fail it or change what runs.
Only what is imported after the first module run starts goes through it (Mitogen's own modules and
``ansible.module_utils.basic`` are imported before).
"""

import hashlib
import importlib.util
import marshal
import os
import stat
import sys

import ansible_mitogen.runner
import ansible_mitogen.target
import mitogen.core

ENTRY_LIMIT = 64 << 20  # bytes: far above any module's code (node_validate's module_utils: about 1 MB compiled)


# cache_dir and private repeat module_cache.cache_root / private (same XDG rule, same privacy test) on
# purpose: this file runs on the node before the collection's module_utils can be imported there (they come
# from the controller through the very importer this file patches, see install()), and it is not part of
# the collection (scripts/), so it must not depend on the collection package being importable.
def cache_dir(environ=None):
    """The directory of this interpreter's entries, or None without a home directory."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset or relative: ignored, as the XDG base directory spec says
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    return os.path.join(base, "gpufleet", "mitogen-code", sys.implementation.cache_tag or "none")


def _private_stat(info):
    """True when ``info`` (an lstat or fstat) is a directory of this user that nobody else can write to."""
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def private(path):
    """True when ``path`` is a directory (not a link) of this user that nobody else can write to."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return _private_stat(info)


def entry_key(source, filename):
    """The entry's name: bytecode version, file name and source, hashed."""
    if isinstance(source, str):
        source = source.encode("utf-8")
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    digest.update(filename.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(source)
    return digest.hexdigest()[:40]


def _private_dir_fd(directory):
    """A descriptor of ``directory`` (made 0700 when missing) if it is private, else None. The check is made
    on the directory the descriptor holds (opened without following a link, then fstat), and entries are
    opened, written and renamed relative to it: a directory swapped for a link after the check is never
    used."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not private(directory):
        return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if _private_stat(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def entry_bytes(code, key):
    """What the entry ``key`` holds: the SHA-256 of the key and the marshal data of ``code``, then that data
    (the digest names the key: an entry copied or linked under another key does not match there)."""
    data = marshal.dumps(code)
    return _digest(key, data) + data


def _digest(key, data):
    digest = hashlib.sha256(key.encode("ascii") + b"\0")
    digest.update(data)
    return digest.digest()


def read_entry(entry, key):
    """The object of the entry ``key`` written by :func:`entry_bytes`; ValueError when its digest does not
    match (damaged, truncated, another key's, or not an entry): such bytes never reach marshal."""
    digest, data = entry[:32], entry[32:]
    if len(digest) != 32 or _digest(key, data) != digest:
        raise ValueError("damaged cache entry")
    return marshal.loads(data)


def _read_regular(name, dir_fd):
    """The bytes of the regular file ``name`` in ``dir_fd``, at most ENTRY_LIMIT; ValueError for anything
    else (a link is not followed, a FIFO or device is not read: no hang, no endless read)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > ENTRY_LIMIT:
            raise ValueError("not a cache entry")
        chunks, left = [], info.st_size + 1  # one byte more: a file that grew is refused below
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > info.st_size:
            raise ValueError("cache entry changed while read")
        return data
    finally:
        os.close(fd)


def _store(name, entry, dir_fd):
    """Write ``entry`` as ``name`` in ``dir_fd``: a new file (never through a link), renamed into place
    (atomic: a reader sees a whole entry or none)."""
    staging = ".new-%s" % os.urandom(8).hex()
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(entry)
        os.rename(staging, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        try:
            os.unlink(staging, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def compile_cached(source, filename, directory=None):
    """``compile(source, filename, 'exec', 0, True)``, read from the node's cache when an entry for this
    source and name is there, else compiled and stored."""
    if sys.dont_write_bytecode:
        return compile(source, filename, "exec", 0, True)
    directory = cache_dir() if directory is None else directory
    dir_fd = _private_dir_fd(directory) if directory else None
    if dir_fd is None:
        return compile(source, filename, "exec", 0, True)
    try:
        key = entry_key(source, filename)
        try:
            code = read_entry(_read_regular(key, dir_fd), key)
            if type(code).__name__ == "code" and code.co_filename == filename:
                return code
        except (OSError, ValueError, EOFError, TypeError, MemoryError):
            pass
        code = compile(source, filename, "exec", 0, True)
        try:
            _store(key, entry_bytes(code, key), dir_fd)
        except OSError:
            pass
        return code
    finally:
        os.close(dir_fd)


def _exec_module(self, module):
    """``ModuleUtilsImporter.exec_module`` of Mitogen 0.3.54 with :func:`compile_cached`."""
    spec = module.__spec__
    path, _ = self._by_fullname[spec.name]  # pylint: disable=protected-access
    source = ansible_mitogen.target.get_small_file(self._context, path)  # pylint: disable=protected-access
    exec(compile_cached(source, path), module.__dict__)  # pylint: disable=exec-used
    self._loaded.add(spec.name)  # pylint: disable=protected-access


def _get_code(self):
    """``NewStyleRunner._get_code`` of Mitogen 0.3.54 (the module file itself) with :func:`compile_cached`."""
    try:
        return self._code_by_path[self.path]  # pylint: disable=protected-access
    except KeyError:
        return self._code_by_path.setdefault(  # pylint: disable=protected-access
            self.path, compile_cached(self.source, "master:" + self.path))


def _importer_exec_module(self, module, _original=mitogen.core.Importer.exec_module):
    """``mitogen.core.Importer.exec_module`` of Mitogen 0.3.54 (a module served by the controller, e.g. this
    collection's module_utils) with :func:`compile_cached`."""
    spec = module.__spec__
    if spec.name == "__main__":
        return _original(self, module)
    try:
        code = compile_cached(self.get_source(spec.name), spec.origin)
    except SyntaxError:
        mitogen.core.LOG.exception("while importing %r", spec.name)
        raise
    exec(code, module.__dict__)  # pylint: disable=exec-used
    return None


def install(runner=ansible_mitogen.runner, core=mitogen.core):
    """Put the cached compile into Mitogen's importers and module runner (idempotent)."""
    core.Importer.exec_module = _importer_exec_module
    runner.ModuleUtilsImporter.exec_module = _exec_module
    runner.NewStyleRunner._get_code = _get_code  # pylint: disable=protected-access


@mitogen.core.takes_econtext
def run_module(kwargs, econtext):
    """``ansible_mitogen.target.run_module`` with the cached compile installed first."""
    install()
    return ORIGINAL_RUN_MODULE(kwargs, econtext)


ORIGINAL_RUN_MODULE = ansible_mitogen.target.run_module
