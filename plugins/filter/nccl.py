# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl_tests_parse / nccl_tests_checks: nccl-tests output into the check-result model.

Documentation: nccl_tests_parse.yml, nccl_tests_checks.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.nccl import nccl_checks, parse_nccl_tests


def nccl_tests_parse(text):
    if text is not None and not isinstance(text, str):
        raise AnsibleFilterError("nccl_tests_parse: expected the job's output as a string")
    return parse_nccl_tests(text)


def nccl_tests_checks(parsed, min_busbw_gbps=None, target="nccl", job_succeeded=True):
    if isinstance(parsed, str):
        parsed = parse_nccl_tests(parsed)
    if not isinstance(parsed, dict):
        raise AnsibleFilterError("nccl_tests_checks: expected nccl_tests_parse output or the raw text")
    if min_busbw_gbps in ("", None):
        min_busbw_gbps = None
    else:
        try:
            min_busbw_gbps = float(min_busbw_gbps)
        except (TypeError, ValueError):
            raise AnsibleFilterError("nccl_tests_checks: option min_busbw_gbps must be a number")
        if not math.isfinite(min_busbw_gbps):
            raise AnsibleFilterError("nccl_tests_checks: option min_busbw_gbps must be a finite number, got %r"
                                     % (min_busbw_gbps,))
    return nccl_checks(parsed, min_busbw_gbps, target, bool(job_succeeded))


class FilterModule(object):
    def filters(self):
        return {"nccl_tests_parse": nccl_tests_parse, "nccl_tests_checks": nccl_tests_checks}
