#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_burnin
short_description: Burn-in of a GPU node (DCGM diagnostics, single-node NCCL all_reduce) as check results
version_added: 0.1.0
description:
  - Runs C(dcgmi diag -r <level> -j) (or the named O(tests)) with a timeout and turns its JSON into
    the check-result model of docs/contracts.md; one C(burnin.dcgm) check per failed or warning test and
    GPU with DCGM's message (a C(Pass) carrying DCGM warnings is a warning with their text), one per passed
    or skipped test, and C(burnin.dcgm.run) for the run itself.
  - Fail closed. No JSON, an unknown format or status, a document of another shape than DCGM writes (read
    strictly - bounded size and nesting, no NaN, no duplicate keys - and checked field by field against
    C(dcgmi/Diag.cpp); the message names the unexpected field), a C(runtime_error), a timeout, a non-zero exit
    the document does not explain, a missing C(dcgmi), a run in which no test executed, or a named test
    that did not run is a failing C(burnin.dcgm.run) check.
  - Optionally a single-node nccl-tests run (O(nccl)) judged by the collection's one NCCL parser,
    checks C(k8s.nccl.busbw) (with O(nccl.min_busbw_gbps)) and C(k8s.nccl.wrong).
  - Used by C(playbooks/remediate.yml) before a node is admitted again (docs/remediation.md). Loads the
    GPUs for minutes, so run it on a drained node.
author:
  - gpufleet contributors (@gpufleet)
options:
  dcgmi:
    description: The C(dcgmi) executable (a name on PATH or a path).
    type: str
    default: dcgmi
  level:
    description: The DCGM diagnostic level (1 quick, 2 medium, 3 long, 4 extended). Ignored with O(tests).
    type: int
    default: 2
    choices: [1, 2, 3, 4]
  tests:
    description: DCGM test names to run instead of a level (for example C(memtest), C(pcie)); each must run.
    type: list
    elements: str
    default: []
  parameters:
    description: Test parameters passed to C(dcgmi diag -p) (for example C(memtest.test_duration=60)).
    type: str
  timeout:
    description: Seconds the diagnostic may take (more than 0, at most 604800, 7 days); past it, it is killed and the burn-in
      fails.
    type: float
    default: 1800
  nccl:
    description: A single-node nccl-tests run; unset or without O(nccl.command) skips it.
    type: dict
    suboptions:
      command:
        description: The command as a list, for example C(all_reduce_perf -b 8 -e 1G -f 2 -g 8) split into words.
        type: list
        elements: str
      min_busbw_gbps:
        description: Minimum average bus bandwidth in GB/s; unset checks only that the run completed, was correct
          and moved data (an average of 0 always fails C(k8s.nccl.busbw)).
        type: float
      timeout:
        description: Seconds the run may take (more than 0, at most 604800, 7 days).
        type: float
        default: 600
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.validation.fail_on
attributes:
  check_mode:
    support: full
    details: In check mode nothing is run; the checks say so (status skip).
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Burn in the node (DCGM level 2)
  gpufleet.cluster.gpu_burnin:
    level: 2
    timeout: 900

- name: Memory test and an all_reduce of 8 GPUs above 300 GB/s
  gpufleet.cluster.gpu_burnin:
    tests: [memtest]
    parameters: memtest.test_duration=120
    nccl:
      command: [all_reduce_perf, -b, 8, -e, 1G, -f, "2", -g, "8"]
      min_busbw_gbps: 300
"""

RETURN = r"""
checks:
  description: Check results (C(burnin.dcgm), C(burnin.dcgm.run), C(k8s.nccl.busbw), C(k8s.nccl.wrong)).
  returned: always
  type: list
  elements: dict
summary:
  description: Count of checks per status.
  returned: always
  type: dict
healthy:
  description: True when no check has status fail.
  returned: always
  type: bool
dcgm:
  description: The diagnostic run (C(command), C(rc), C(timed_out), C(version)).
  returned: unless check mode
  type: dict
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import CheckResults, exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.dcgm import RUN_CHECK, run_diag, run_nccl
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import common_argspec
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.burnin import MAX_TIMEOUT

ARGUMENT_SPEC = dict(
    dcgmi=dict(type="str", default="dcgmi"),
    level=dict(type="int", default=2, choices=[1, 2, 3, 4]),
    tests=dict(type="list", elements="str", default=[]),
    parameters=dict(type="str"),
    timeout=dict(type="float", default=1800.0),
    nccl=dict(type="dict", options=dict(
        command=dict(type="list", elements="str"),
        min_busbw_gbps=dict(type="float"),
        timeout=dict(type="float", default=600.0),
    )),
    **common_argspec("fail_on")
)


def burnin_work(module):
    params = module.params
    if not 0 < params["timeout"] <= MAX_TIMEOUT:  # NaN fails too; a larger wait crashes the clock's conversion
        raise ModuleFailure("option timeout must be more than 0 and at most %d seconds (got %s)"
                            % (MAX_TIMEOUT, params["timeout"]))
    nccl = params["nccl"] or {}
    if nccl.get("command") and not 0 < (nccl.get("timeout") or 0) <= MAX_TIMEOUT:
        raise ModuleFailure("option nccl.timeout must be more than 0 and at most %d seconds (got %s)"
                            % (MAX_TIMEOUT, nccl.get("timeout")))
    results = CheckResults()
    if module.check_mode:
        results.skip(RUN_CHECK, "node", "check mode: the DCGM diagnostic was not run")
        exit_with_checks(module, results, params["fail_on"])
    runner = ModuleRunner(module)
    dcgmi = runner.which(params["dcgmi"]) if "/" not in params["dcgmi"] else params["dcgmi"]
    info = None
    if not dcgmi:
        results.fail(RUN_CHECK, "node", "dcgmi (%s) not found: DCGM is not installed, the burn-in cannot run "
                     "(option dcgmi)" % params["dcgmi"])
    else:
        try:
            checks, info = run_diag(runner, dcgmi, level=params["level"], tests=params["tests"],
                                    parameters=params["parameters"], timeout=params["timeout"])
        except ValueError as exc:
            raise ModuleFailure(str(exc))
        results.extend(checks)
    if nccl.get("command"):
        try:
            results.extend(run_nccl(runner, nccl["command"], nccl.get("min_busbw_gbps"), nccl["timeout"]))
        except ValueError as exc:
            raise ModuleFailure(str(exc))
    exit_with_checks(module, results, params["fail_on"], dcgm=info)


def main():
    run_module(ARGUMENT_SPEC, burnin_work)


if __name__ == "__main__":
    main()
