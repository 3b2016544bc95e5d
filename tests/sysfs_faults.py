"""A test double of the ``os`` module for sysfs reads with one file broken, shared by the fault
matrix (tests/unit/test_fault_matrix.py) and the fuzzer's fault cases (tests/fuzz/run_fuzz.py)."""

import errno
import os


class FaultyOs(object):
    """``os`` for sysfs.open_regular with one file broken: ``fault`` on ``target`` (EIO, EACCES,
    ENXIO, empty, vanished, changing); every other call goes to ``real``."""

    def __init__(self, target, fault, real=os):
        self._real, self.target, self.fault = real, target, fault
        self.opens = 0
        self._fds = set()

    def __getattr__(self, name):
        return getattr(self._real, name)

    def open(self, path, flags, *args):
        if path == self.target:
            self.opens += 1
            codes = {"EACCES": errno.EACCES, "ENXIO": errno.ENXIO, "vanished": errno.ENOENT}
            if self.fault in codes:
                code = codes[self.fault]
                raise OSError(code, os.strerror(code), path)
        fd = self._real.open(path, flags, *args)
        if path == self.target:
            self._fds.add(fd)
        return fd

    def read(self, fd, size):
        if fd in self._fds:
            if self.fault == "EIO":
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            if self.fault == "empty":
                return b""
            if self.fault == "changing" and self.opens > 1:
                return b"changed on the second read\n"
        return self._real.read(fd, size)

    def close(self, fd):
        self._fds.discard(fd)
        return self._real.close(fd)
