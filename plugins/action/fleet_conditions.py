# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpufleet.cluster.fleet_conditions: fleet status from the Kubernetes API in one
controller task, no module run and nothing through Jinja (docs/performance.md, "Fleet status from the
Kubernetes API").

The Node list is read in pages in this process (plugin_utils/agent_status.fleet_checks, the same
function as the lookup agent_conditions), the checks of every host are validated as record_checks
validates them (module_utils/core/validation.build_results) and returned as ``host_checks`` with
``summary``, ``healthy`` and ``fail_on``'s verdict as record_checks' one exit path returns them
(module_utils/core/checks), so the fleet_report callback files them under the hosts as before.

Why not ``record_checks`` with the lookup in its arguments: at 10,000 hosts ansible-core 2.19
finalised the lookup's answer as a template result (every host's checks copied and tagged), then
serialised it into the module's arguments, ran the module in its own Python, which decoded,
validated and encoded it again, and the worker decoded its answer: about 3 s of the controller's CPU
for data that never leaves the controller.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import (
    failure_message,
    is_healthy,
    json_safe,
    should_fail,
    summarize,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import build_results
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kube_node import KubeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.node_list import FLEET_CONDITIONS_SPEC
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.agent_status import fleet_checks

# the options of the lookup agent_conditions and of this action (doc fragment gpufleet.cluster.agent_conditions)
ARGUMENT_SPEC = FLEET_CONDITIONS_SPEC


def checks_result(host_checks, fail_on):
    """record_checks' result for ``hosts`` (host_checks, summary, healthy, changed; failed and msg
    when ``fail_on`` says so), each host's checks validated; AnsibleActionFail naming an invalid one."""
    validated, every = {}, []
    for host, checks in host_checks.items():
        results, error = build_results(checks if isinstance(checks, list) else [None], "hosts[%s]" % host)
        if error:
            raise AnsibleActionFail(error)
        validated[host] = results.as_list()
        every.extend(validated[host])
    payload = {"host_checks": validated, "summary": summarize(every), "healthy": is_healthy(every),
               "changed": False}
    if should_fail(every, fail_on):
        payload["failed"] = True
        payload["msg"] = failure_message(every, fail_on)
    return json_safe(payload)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        task_vars = task_vars or {}
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        try:
            checks = fleet_checks(args["hosts"], task_vars.get("hostvars"), args.get)
        except KubeError as exc:
            raise AnsibleActionFail(str(exc))
        result.update(checks_result(checks, args["fail_on"]))
        return result
