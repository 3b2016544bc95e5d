# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only fault injection for molecule/rolling_upgrade: the controller dies.

When the task named GPUFLEET_TEST_KILL_AFTER (exact name, without the role prefix) has finished
on the host GPUFLEET_TEST_KILL_HOST, the ansible-playbook process sends itself SIGKILL: no
rescue, no handler, no always block and no summary write run any more, as when the machine
running the upgrade loses power. Enabled only by the fault-injection tests
(ANSIBLE_CALLBACK_PLUGINS pointing here, ANSIBLE_CALLBACKS_ENABLED=kill_controller).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: kill_controller
type: aggregate
short_description: Test-only - kill ansible-playbook after a given task on a given host
description:
  - Fault injection for molecule/rolling_upgrade (never used outside the tests).
requirements:
  - enable in configuration
options: {}
"""

import os
import signal
import sys

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kill_controller"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.task = os.environ.get("GPUFLEET_TEST_KILL_AFTER", "")
        self.host = os.environ.get("GPUFLEET_TEST_KILL_HOST", "")

    def _maybe_kill(self, result):
        name = result._task.get_name().split(" : ", 1)[-1].strip()
        if self.task and name == self.task and result._host.get_name() == self.host:
            sys.stdout.write("\nkill_controller: SIGKILL after '%s' on %s\n" % (name, self.host))
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def v2_runner_on_ok(self, result):
        self._maybe_kill(result)
