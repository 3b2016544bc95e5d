# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's files under its state directory (``/var/lib/gpufleet``) and the node_exporter
textfile: one writer (``atomic_write``: temporary file in the same directory, fsync, mode set,
owner set when asked, rename) and the readers, which never let a damaged file stop the agent:

- ``read_state``: a damaged or wrongly typed ``agent-state.json`` is set aside (renamed to
  ``agent-state.json.damaged-<UTC time>``, journalled) and the cycle goes on from fresh state;
- ``read_json``: ``default`` when the file does not exist, AgentError when it is unreadable.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_config import AGENT_NAME, AgentError
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_hysteresis import state_problem


def atomic_write(path, text, mode=0o644, owner=None, group=None):
    """Write ``text`` to ``path`` so that a reader sees the old or the new content, never a part:
    a temporary file in the same directory, fsync, mode (and owner/group ids when given), rename.
    The directory must exist. On any error (a full disk: ENOSPC) the temporary file is removed and
    the old content stays."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise AgentError("directory %s does not exist: %s not written" % (directory, path))
    # no tempfile module: its import costs more CPU than the rest of the write (one cycle <= 50 ms)
    tmp = os.path.join(directory, ".%s.%d.%s" % (os.path.basename(path), os.getpid(), os.urandom(4).hex()))
    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if owner is not None or group is not None:
            os.chown(tmp, -1 if owner is None else owner, -1 if group is None else group)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path, default=None):
    """The JSON document at ``path``; ``default`` when missing; AgentError when unreadable."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise AgentError("%s is unreadable: %s" % (path, exc))


def set_aside(path, reason, now=None, log=None):
    """Rename a damaged file to ``<path>.damaged-<UTC time>`` (kept for a post-mortem) and
    journal it; when even the rename fails, remove it. Returns the new path or None."""
    now = time.time() if now is None else now
    target = "%s.damaged-%s" % (path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))
    try:
        os.replace(path, target)
    except OSError as exc:
        target = None
        try:
            os.unlink(path)
        except OSError:
            pass
        reason = "%s; could not be renamed (%s), removed" % (reason, exc.strerror or exc)
    if log is not None:
        log("%s: %s is damaged (%s): set aside%s, the cycle goes on from fresh state"
            % (AGENT_NAME, path, reason, " as " + target if target else ""))
    return target


def read_state(path, log=None, now=None):
    """The hysteresis state in ``path``: {} when missing; a damaged or wrongly typed file is set
    aside and {} returned (the agent never freezes on its own state)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        set_aside(path, "unreadable: %s" % (exc.strerror or exc), now, log)
        return {}
    try:
        state = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        set_aside(path, "not JSON: %s" % exc if raw.strip() else "empty", now, log)
        return {}
    problem = state_problem(state)
    if problem:
        set_aside(path, problem, now, log)
        return {}
    return state
