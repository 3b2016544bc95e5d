# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel cpu lists (``0-27,56-83``): the one parser for sysfs ``local_cpulist``, ``smp_affinity_list``,
the kernel command line (isolcpus, nohz_full) and the kubelet's ``reservedSystemCPUs`` (its cpuset.Parse
accepts the same syntax)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_RANGE = re.compile(r"^([0-9]{1,5})(?:-([0-9]{1,5}))?$")


def parse_cpulist(text):
    """Set of CPUs of a kernel cpu list (``0-27,56-83``), or None when it does not parse."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    cpus = set()
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            return None
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            return None
        cpus.update(range(low, high + 1))
    return cpus


def format_cpulist(cpus):
    """The kernel's compact form of a CPU set (``{0, 1, 2, 5}`` -> ``0-2,5``)."""
    parts, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [cpu]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(parts)
