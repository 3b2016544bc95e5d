# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric test planning and result filters (playbooks/fabric-test.yml).

``fabric_plan`` pairs hosts (ring or all-pairs, per rail) and schedules the pairs in rounds in
which no host takes part in two tests of the same rail; ``fabric_matrix`` turns measurements into
the bandwidth matrix the fleet_report callback renders; ``fabric_link_checks`` turns them into
checks of the gpufleet check-result model. Documentation lives next to this file in
``<filter>.yml``.
"""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

PATTERNS = ("ring", "all-pairs")
CHECK_ID = "rdma.fabric.link"


def _names(value, what):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise AnsibleFilterError("%s must be a list of names, got %r" % (what, value))
    names = [str(item) for item in value]
    duplicates = sorted(set(name for name in names if names.count(name) > 1))
    if duplicates:
        raise AnsibleFilterError("%s lists %s more than once" % (what, ", ".join(duplicates)))
    return names


def ring_pairs(hosts):
    """[(round, client, server)]: each host sends to the next one, the last to the first."""
    count = len(hosts)
    if count < 2:
        return []
    if count == 2:
        return [(0, hosts[0], hosts[1])]
    pairs = [(hosts[i], hosts[(i + 1) % count]) for i in range(count)]
    # Even ring: alternate edges share no host (2 rounds). Odd ring: the closing edge needs a third.
    rounds = [i % 2 for i in range(count)]
    if count % 2:
        rounds[-1] = 2
    return [(rounds[i], client, server) for i, (client, server) in enumerate(pairs)]


def all_pairs(hosts):
    """[(round, client, server)] for every unordered pair, by the circle method.

    n hosts (n even) need n - 1 rounds, n odd n rounds; in a round every host is in one pair at
    most. The client is the host listed first.
    """
    count = len(hosts)
    if count < 2:
        return []
    slots = list(range(count)) + ([None] if count % 2 else [])
    size = len(slots)
    result = []
    for round_index in range(size - 1):
        for i in range(size // 2):
            left, right = slots[i], slots[size - 1 - i]
            if left is None or right is None:
                continue
            first, second = min(left, right), max(left, right)
            result.append((round_index, hosts[first], hosts[second]))
        slots = [slots[0]] + [slots[-1]] + slots[1:-1]
    return sorted(result, key=lambda item: (item[0], hosts.index(item[1]), hosts.index(item[2])))


def fabric_plan(hosts, pattern="ring", devices=None, base_port=18515, concurrent_rails=False):
    """The tests to run: [{round, client, server, device, rail, tcp_port, label}], sorted by round."""
    names = _names(hosts, "fabric_plan: hosts")
    if pattern not in PATTERNS:
        raise AnsibleFilterError("fabric_plan: pattern must be one of %s, got %r" % (", ".join(PATTERNS), pattern))
    rails = _names(devices, "fabric_plan: devices") if devices else [None]
    try:
        base_port = int(base_port)
    except (TypeError, ValueError):
        raise AnsibleFilterError("fabric_plan: base_port must be an integer, got %r" % (base_port,))
    if not 1 <= base_port <= 65535 - len(rails):
        raise AnsibleFilterError("fabric_plan: base_port %d leaves no room for %d rail(s)" % (base_port, len(rails)))
    pairs = ring_pairs(names) if pattern == "ring" else all_pairs(names)
    rounds = (max(item[0] for item in pairs) + 1) if pairs else 0
    plan = []
    for rail, device in enumerate(rails):
        for pair_round, client, server in pairs:
            plan.append({
                "round": pair_round if concurrent_rails else rail * rounds + pair_round,
                "client": client,
                "server": server,
                "device": device,
                "rail": rail if device is not None else None,
                "tcp_port": base_port + rail,
                "label": "%s->%s%s" % (client, server, "" if device is None else "/" + device),
            })
    return sorted(plan, key=lambda item: (item["round"], item["rail"] or 0, names.index(item["client"])))


def _gbps(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def fabric_matrix(measurements, hosts, device=None, title=None):
    """{title, hosts, gbps}: row = client (sender), column = server; null when not measured.

    Several measurements of one pair (several rails) keep the lowest: the worst rail decides.
    ``device`` restricts to one rail.
    """
    names = _names(hosts, "fabric_matrix: hosts")
    index = {name: position for position, name in enumerate(names)}
    grid = [[None] * len(names) for _ in names]
    for item in measurements or []:
        if not isinstance(item, dict):
            raise AnsibleFilterError("fabric_matrix: each measurement must be a dict, got %r" % (item,))
        if device is not None and item.get("device") != device:
            continue
        row, col = index.get(item.get("client")), index.get(item.get("server"))
        gbps = _gbps(item.get("gbps"))
        if row is None or col is None or gbps is None:
            continue
        current = grid[row][col]
        grid[row][col] = gbps if current is None else min(current, gbps)
    result = {"hosts": names, "gbps": grid}
    if title:
        result["title"] = str(title)
    return result


def fabric_measurement(result):
    """{client, server, device, rail, gbps, error} from one looped rdma_bandwidth client result."""
    if not isinstance(result, dict) or not isinstance(result.get("item"), dict):
        raise AnsibleFilterError("fabric_measurement: expects a looped rdma_bandwidth result (with item), got %r"
                                 % (result,))
    test = result["item"]
    gbps = None if result.get("skipped") else _gbps(result.get("bw_average_gbps"))
    error = None
    if gbps is None:
        error = result.get("msg") or ("perftest exit status %s" % result.get("perftest_rc"))
        if result.get("timed_out"):
            error = "timed out"
    return {
        "client": test.get("client"),
        "server": test.get("server"),
        "device": test.get("device"),
        "rail": test.get("rail"),
        "gbps": gbps,
        "error": error,
    }


def fabric_link_checks(measurements, min_gbps=None):
    """One rdma.fabric.link check per measurement: fail when not measured or below ``min_gbps``."""
    minimum = _gbps(min_gbps)
    if min_gbps not in (None, "") and minimum is None:
        raise AnsibleFilterError("fabric_link_checks: min_gbps must be a number, got %r" % (min_gbps,))
    checks = []
    for item in measurements or []:
        client, server, device = item.get("client"), item.get("server"), item.get("device")
        target = "%s->%s%s" % (client, server, "" if device is None else "/" + device)
        gbps = _gbps(item.get("gbps"))
        check = {"id": CHECK_ID, "target": target, "observed": gbps}
        if minimum is not None:
            check["expected"] = ">= %g Gb/s" % minimum
        if gbps is None:
            check.update(status="fail", message="no bandwidth measured: %s" % (item.get("error") or "test did not complete"))
        elif minimum is not None and gbps < minimum:
            check.update(status="fail", message="%.2f Gb/s below the minimum %g Gb/s" % (gbps, minimum))
        else:
            check.update(status="pass", message="%.2f Gb/s" % gbps)
        checks.append(check)
    return checks


class FilterModule(object):
    def filters(self):
        return {
            "fabric_plan": fabric_plan,
            "fabric_matrix": fabric_matrix,
            "fabric_link_checks": fabric_link_checks,
            "fabric_measurement": fabric_measurement,
        }
