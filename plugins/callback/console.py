# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
name: console
type: stdout
short_description: ansible-core's default screen output, with one line per unreachable host and each failure said once
version_added: 0.1.0
description:
  - The builtin C(default) stdout callback (every option of it applies, C(result_format=yaml) included), with
    two changes below C(-vv), where a fleet of hosts failing the same way otherwise floods the screen.
  - "An unreachable host is one line with the cause: C(fatal: [dgx-07]: UNREACHABLE! ssh: Could not resolve
    hostname dgx-07: Name or service not known) (ansible-core prints the error summary, the task's source
    lines and the result: about 13 lines, more with long ssh errors). A task delegated to another host names
    that host as the one that cannot be reached: C(fatal: [dgx-07 -> cp-01]: UNREACHABLE! cp-01 cannot be
    reached: ...)."
  - "A failed task's message is printed once, in its result (ansible-core 2.19 prints an C([ERROR]) summary
    with the task's source lines before the result, so the message appears twice); its wrapper C(Task
    failed:) is dropped. A failure without a message shows the last line of its exception as C(msg)."
  - From C(-vv) on, the output is the builtin C(default) one unchanged (error summaries, tracebacks at
    C(-vvv)).
  - Enable it with C(stdout_callback = gpufleet.cluster.console) in C(ansible.cfg) (see C(docs/reports.md)).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout callback in configuration
"""

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.fleet_report import cause

_PREFIX = "Task failed: "  # ansible-core 2.19's wrapper of every failure message


def _parts(result):
    """(host, task, result dict) of a callback task result (ansible-core 2.19 and older)."""
    host = getattr(result, "host", None) or result._host  # pylint: disable=protected-access
    task = getattr(result, "task", None) or result._task  # pylint: disable=protected-access
    data = getattr(result, "result", None)
    if not isinstance(data, dict):
        data = result._result  # pylint: disable=protected-access
    return host, task, data


def unreachable_line(host_label, host, delegate, data):
    """The one line of an unreachable result: who cannot be reached and why."""
    why = cause(data.get("msg") or "") or "cannot be reached"
    if delegate and delegate != host:
        why = "%s cannot be reached: %s" % (delegate, why)
    return "fatal: [%s]: UNREACHABLE! %s" % (host_label, why)


def compact_failure(data):
    """A failed result as printed once: no separate exception summary, no ``Task failed:`` wrapper;
    without a message, the exception's last line is the message."""
    exception = data.pop("exception", None)
    message = data.get("msg")
    if isinstance(message, str) and message.startswith(_PREFIX):
        data["msg"] = message[len(_PREFIX):]
    elif not message and isinstance(exception, str) and exception.strip() \
            and not exception.strip().startswith("(traceback unavailable"):
        data["msg"] = exception.strip().splitlines()[-1]
    return data


class CallbackModule(DefaultCallbackModule):
    """The builtin default stdout callback with compact unreachable and failure output below -vv."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpufleet.cluster.console"

    def _compact(self):
        return self._display.verbosity < 2

    def _handle_exception(self, result, use_stderr=False):  # pylint: disable=arguments-differ
        """Below -vv the exception is not printed as a second copy of the message (see compact_failure)."""
        if not self._compact():
            return super(CallbackModule, self)._handle_exception(result, use_stderr=use_stderr)
        compact_failure(result)
        return None

    def v2_runner_on_unreachable(self, result):
        if not self._compact():
            return super(CallbackModule, self).v2_runner_on_unreachable(result)
        host, task, data = _parts(result)
        if self._last_task_banner != getattr(task, "_uuid", None):
            self._print_task_banner(task)
        handle_warnings = getattr(self, "_handle_warnings", None)
        if handle_warnings is not None:
            handle_warnings(data)
        delegated = data.get("_ansible_delegated_vars") if isinstance(data.get("_ansible_delegated_vars"), dict) else {}
        delegate = delegated.get("ansible_delegated_host") or getattr(task, "delegate_to", None)
        line = unreachable_line(self.host_label(result), host.get_name(), delegate, data)
        self._display.display(line, color=C.COLOR_UNREACHABLE, stderr=self.get_option("display_failed_stderr"))
        if getattr(task, "ignore_unreachable", False):
            self._display.display("...ignoring", color=C.COLOR_SKIP)
        return None
