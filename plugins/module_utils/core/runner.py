# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command runners: the real one wraps AnsibleModule.run_command; tests script their own.

Logic in module_utils takes a runner, never calls subprocess itself, so unit tests can
feed recorded command output (see tests/unit/runners.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


class CommandResult(object):
    __slots__ = ("rc", "stdout", "stderr", "timed_out")

    def __init__(self, rc, stdout="", stderr="", timed_out=False):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    def __repr__(self):
        return "CommandResult(rc=%r, timed_out=%r)" % (self.rc, self.timed_out)


class ModuleRunner(object):
    """Runs commands through AnsibleModule.run_command (no shell)."""

    def __init__(self, module):
        self.module = module

    def which(self, name, required=False):
        return self.module.get_bin_path(name, required=required)

    def run(self, args, timeout=None, check_rc=False):
        if timeout:
            return run_with_timeout(args, timeout)
        rc, out, err = self.module.run_command(args, check_rc=check_rc)
        return CommandResult(rc, out, err)


class SubprocessRunner(object):
    """Runner without an AnsibleModule (used by tools and benchmarks)."""

    def which(self, name, required=False):
        for directory in os.environ.get("PATH", "").split(os.pathsep):
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        if required:
            raise OSError("%s not found on PATH" % name)
        return None

    def run(self, args, timeout=None, check_rc=False):
        return run_with_timeout(args, timeout)


def run_with_timeout(args, timeout):
    """Run ``args`` in its own process group; on timeout kill that group only."""
    import subprocess  # here, not at the top: the health agent's cycles often run no command (13 ms CPU)

    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return CommandResult(127, "", str(exc))
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            proc.kill()
        out, err = proc.communicate()
        timed_out = True
    return CommandResult(proc.returncode if not timed_out else -9,
                         out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         timed_out=timed_out)
