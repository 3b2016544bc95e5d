#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function


DOCUMENTATION = r"""
module: rdma_bandwidth
short_description: Measure RDMA bandwidth with perftest (ib_write_bw) and check it against a minimum
version_added: 0.1.0
description:
  - Runs one side of a perftest bandwidth test (C(ib_write_bw) by default; C(ib_read_bw) and
    C(ib_send_bw) print the same table) and parses its report into Gb/s.
  - Run the C(server) side first (with C(async) and C(poll=0), it waits for one client), then the
    C(client) side pointing at it. Both sides return the parsed table when perftest prints it.
  - The command always runs with C(--report_gbits), in its own process group, and is killed with
    that whole group (never anything else) when O(timeout) expires.
  - "Units: C(Gb/sec) is taken as printed; C(MiB/sec) and the older C(MB/sec) are converted with
    x 8 x 1048576 / 1e9. perftest computes its C(MB/sec) column with a 2^20 divisor (the label
    was renamed C(MiB/sec) later), so C(MB/sec) is MiB/s, not 10^6 bytes/s."
  - The average bandwidth is the 4th column of the table. Lines inside the table that are not
    result rows (C(Conflicting CPU frequency values detected), C(Warning ...)) are skipped and
    returned in RV(perftest_warnings). A row with fewer figures than its header has columns (an
    empty or cut column) is not a result and fails the run (C(incomplete result row)); so does a
    report whose last result row is not followed by the dashed line perftest prints after every
    table (the run was killed or its output cut). With O(all_sizes) every row is returned in RV(rows) and the
    headline figures come from the largest message size.
  - Returns a check C(rdma.bandwidth) in the gpufleet check-result model (C(checks), C(summary),
    C(healthy)). Without O(min_gbps) a completed run passes; a failed or timed-out run fails, and
    so does an average of 0 (no data moved), with or without O(min_gbps).
  - Verified against recorded outputs of perftest 3.x, 4.5, 23.x and 24.x and a fake executable;
    a real measurement needs two hosts with RDMA devices.
author:
  - gpufleet contributors (@gpufleet)
options:
  mode:
    description: Which side of the test to run. C(server) listens and waits for one client.
    type: str
    required: true
    choices: [server, client]
  server:
    description: Address of the host running the server side. Required when O(mode=client).
    type: str
  device:
    description: RDMA device (C(-d)), for example C(mlx5_0). Default is perftest's first device.
    type: str
  ib_port:
    description: Port of O(device) (C(-i)). perftest defaults to 1.
    type: int
  gid_index:
    description:
      - GID index (C(-x)).
      - Default for an Ethernet (RoCE) port of O(device) is the first GID index whose type is
        C(RoCE v2) and whose GID is IPv4-mapped, read from
        C(<root>/sys/class/infiniband/<device>/ports/<port>/gid_attrs/types/<i>) and C(gids/<i>).
        InfiniBand ports need no GID index and none is passed.
    type: int
  tcp_port:
    description: TCP port used to exchange connection data (C(-p)); perftest defaults to 18515.
    type: int
  size:
    description: Message size in bytes (C(-s)); perftest defaults to 65536.
    type: int
  all_sizes:
    description:
      - Sweep message sizes from 2 to 2^23 bytes (C(-a)).
      - Cannot be combined with O(size) or O(duration).
    type: bool
    default: false
  duration:
    description:
      - Run for this many seconds (C(-D)) instead of a fixed number of iterations.
      - Peak bandwidth is not measured then.
    type: int
  qps:
    description: Number of queue pairs (C(-q)).
    type: int
  use_cuda:
    description:
      - Index of the GPU whose memory holds the buffers (C(--use_cuda=<index>), GPUDirect RDMA).
      - Needs a perftest built with CUDA support.
    type: int
  extra_args:
    description: Further perftest arguments appended as given, for example C([-F, -R]).
    type: list
    elements: str
    default: []
  min_gbps:
    description:
      - Minimum average bandwidth in Gb/s; below it C(rdma.bandwidth) fails.
      - Unset, a completed run with an average above 0 passes (an average of 0 always fails).
    type: float
  link:
    description:
      - Name of the fabric link this run measures, for example C(gpu01->gpu02/mlx5_0).
      - Set, the check is C(rdma.fabric.link) with this target instead of C(rdma.bandwidth) on
        C(<device>/<port>), so that every pair a host measured keeps its own check.
        C(playbooks/fabric_test.yml) sets it and later replaces the check with the link's verdict
        on both ends (see C(gpufleet.cluster.fabric_verdicts)).
    type: str
  executable:
    description: perftest program, a name searched on PATH or a path.
    type: str
    default: ib_write_bw
  timeout:
    description:
      - Seconds after which the test and its process group are killed and the check fails.
      - Must exceed O(duration).
    type: int
    default: 120
  root:
    description: Filesystem root under which C(sys/class/infiniband) is read for the default O(gid_index).
extends_documentation_fragment:
  - gpufleet.cluster.validation
  - gpufleet.cluster.validation.fail_on
notes:
  - Supports check mode; the test is not run and RV(cmd) holds the planned command.
  - The test does not change the host; the module always returns changed=false.
  - The collection's module_utils are compiled once per node and kept below C(~/.cache/gpufleet/module_utils),
    as the notes of M(gpufleet.cluster.node_validate) describe.
seealso:
  - name: perftest
    description: RDMA performance tests (linux-rdma/perftest).
    link: https://github.com/linux-rdma/perftest
"""

EXAMPLES = r"""
- name: Start the ib_write_bw server on the reference node
  gpufleet.cluster.rdma_bandwidth:
    mode: server
    device: mlx5_0
    tcp_port: 18515
    duration: 10
    timeout: 60
  async: 90
  poll: 0
  delegate_to: "{{ reference_node }}"

- name: Measure from this node to the reference node
  gpufleet.cluster.rdma_bandwidth:
    mode: client
    server: "{{ hostvars[reference_node]['ansible_host'] }}"
    device: mlx5_0
    tcp_port: 18515
    duration: 10
    min_gbps: 360
  register: bw

- name: GPUDirect RDMA from GPU 0 with 4 queue pairs, message-size sweep
  gpufleet.cluster.rdma_bandwidth:
    mode: client
    server: 10.0.0.1
    device: mlx5_1
    use_cuda: 0
    qps: 4
    all_sizes: true
    extra_args: [-F]
"""

RETURN = r"""
bw_average_gbps:
  description: Average bandwidth in Gb/s of the headline row (the largest message size).
  returned: when perftest printed a bandwidth table
  type: float
  sample: 392.21
bw_peak_gbps:
  description:
    - Peak bandwidth in Gb/s of the headline row.
    - Null when perftest did not measure it (duration mode prints 0.00).
  returned: when perftest printed a bandwidth table
  type: float
  sample: 392.35
msg_size:
  description: Message size in bytes of the headline row.
  returned: when perftest printed a bandwidth table
  type: int
  sample: 65536
msg_rate_mpps:
  description:
    - Message rate in millions of messages per second of the headline row.
    - Null for old reports without that column.
  returned: when perftest printed a bandwidth table
  type: float
  sample: 0.748081
iterations:
  description: Iterations of the headline row.
  returned: when perftest printed a bandwidth table
  type: int
  sample: 5000
unit:
  description: Bandwidth unit as printed in the table header (C(Gb/sec), C(MiB/sec), C(MB/sec)).
  returned: when perftest printed a bandwidth table
  type: str
  sample: Gb/sec
rows:
  description:
    - Every result row, converted to Gb/s (one per message size with O(all_sizes)).
    - Per-port reports (C(-O --report-per-port)) add C(bw_port1_gbps), C(msg_rate_port1_mpps),
      C(bw_port2_gbps), C(msg_rate_port2_mpps).
  returned: always
  type: list
  elements: dict
  sample:
    - {msg_size: 65536, iterations: 5000, bw_peak_gbps: 392.35, bw_average_gbps: 392.21,
       msg_rate_mpps: 0.748081}
cmd:
  description: The command run (or planned in check mode).
  returned: unless an option is invalid
  type: list
  elements: str
  sample: [/usr/bin/ib_write_bw, -d, mlx5_0, -x, "3", --report_gbits, 10.0.0.1]
gid_index:
  description: GID index passed with C(-x) (given or found in sysfs), or null.
  returned: always
  type: int
  sample: 3
link_layer:
  description: Link layer of O(device) port read from sysfs when the GID index was looked up.
  returned: always
  type: str
  sample: Ethernet
perftest_rc:
  description:
    - Exit status of perftest (-9 when killed on timeout); null in check mode.
    - Not named C(rc) so that O(fail_on=never) is honoured (Ansible fails any result with a non-zero C(rc)).
  returned: always
  type: int
timed_out:
  description: Whether perftest was killed because O(timeout) expired.
  returned: always
  type: bool
stdout:
  description: Standard output of perftest.
  returned: always
  type: str
stderr:
  description: Standard error of perftest.
  returned: always
  type: str
perftest_warnings:
  description: Warning lines perftest printed (CPU frequency not at maximum, peak not measured, ...).
  returned: always
  type: list
  elements: str
bidirectional:
  description:
    - True when perftest ran a bidirectional test (C(-b)); the figures are then both directions
      summed. With C(--report-both) the rows of the C(Local results) / C(Remote results) tables
      carry C(section) (C(local) / C(remote)) and are never the headline.
  returned: always
  type: bool
  sample: ["Conflicting CPU frequency values detected: 1200.000000 != 3591.635000. CPU Frequency is not max."]
notes:
  description: Remarks of the module, for example that no RoCE v2 IPv4 GID was found.
  returned: always
  type: list
  elements: str
checks:
  description:
    - The C(rdma.bandwidth) check, target C(<device>/<port>) or C(node) when O(device) is unset.
    - With O(link), the C(rdma.fabric.link) check with target O(link).
  returned: unless an option is invalid
  type: list
  elements: dict
  sample:
    - id: rdma.bandwidth
      target: mlx5_0/1
      status: pass
      message: "392.21 Gb/s average at 65536 B messages >= min_gbps 360.0"
      observed: 392.21
      expected: 360.0
summary:
  description: Count of checks per status.
  returned: unless an option is invalid
  type: dict
  sample: {pass: 1, warn: 0, fail: 0, skip: 0}
healthy:
  description: True when no check failed.
  returned: unless an option is invalid
  type: bool
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import exit_with_checks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import ModuleFailure, checked_root, run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.perftest import run_bandwidth
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.validation import common_argspec

ARGUMENT_SPEC = dict(
    mode=dict(type="str", required=True, choices=["server", "client"]),
    server=dict(type="str"),
    device=dict(type="str"),
    ib_port=dict(type="int"),
    gid_index=dict(type="int"),
    tcp_port=dict(type="int"),
    size=dict(type="int"),
    all_sizes=dict(type="bool", default=False),
    duration=dict(type="int"),
    qps=dict(type="int"),
    use_cuda=dict(type="int"),
    extra_args=dict(type="list", elements="str", default=[]),
    min_gbps=dict(type="float"),
    link=dict(type="str"),
    executable=dict(type="str", default="ib_write_bw"),
    timeout=dict(type="int", default=120),
    **common_argspec()
)


def measure(module):
    params = module.params
    reader = SysfsReader(checked_root(params))
    error, checks, extra = run_bandwidth(params, ModuleRunner(module), reader, check_mode=module.check_mode)
    if error:
        raise ModuleFailure(error, **extra)
    exit_with_checks(module, checks, params["fail_on"], **extra)


def main():
    run_module(ARGUMENT_SPEC, measure, required_if=[("mode", "client", ["server"])])


if __name__ == "__main__":
    main()
