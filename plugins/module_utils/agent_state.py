# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent's files under its state directory (``/var/lib/gpufleet``) and the node_exporter
textfile: written by the one writer of that directory (``state_files.atomic_write``, also behind
the module ``state_file`` the roles use), read by readers that never let a damaged file stop the
agent:

- ``read_state``: a damaged or wrongly typed ``agent-state.json`` is set aside (renamed to
  ``agent-state.json.damaged-<UTC time>``, journalled) and the cycle goes on from fresh state;
- ``read_json``: ``default`` when the file does not exist, AgentError when it is unreadable.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_config import AGENT_NAME, AgentError
from ansible_collections.gpufleet.cluster.plugins.module_utils.agent_hysteresis import state_problem
from ansible_collections.gpufleet.cluster.plugins.module_utils.state_files import set_aside as _set_aside


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
    """state_files.set_aside with the agent's journal line."""
    target, reason = _set_aside(path, reason, now)
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
