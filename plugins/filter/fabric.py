# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric test planning and result filters (playbooks/fabric_test.yml).

``fabric_plan`` pairs hosts (ring or all-pairs, per rail) and schedules the pairs in rounds in
which no host takes part in two tests of the same rail; ``fabric_matrix`` turns measurements into
the bandwidth matrix the fleet_report callback renders; ``fabric_link_checks`` turns them into
checks of the gpufleet check-result model. Documentation lives next to this file in
``<filter>.yml``.
"""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.clock import finite_float

PATTERNS = ("ring", "all-pairs")
DIRECTIONS = ("one", "both")
CHECK_ID = "rdma.fabric.link"
HOST_CHECK_ID = "rdma.fabric.host"
RAIL_CHECK_ID = "rdma.fabric.rail"


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


def fabric_plan(hosts, pattern="ring", devices=None, base_port=18515, concurrent_rails=False, directions="one"):
    """The tests to run: [{round, client, server, device, rail, tcp_port, label}], sorted by round.

    ``directions="both"`` also measures every pair the other way round (server -> client), in
    rounds after those of the first direction, so that the matrix is full.
    """
    names = _names(hosts, "fabric_plan: hosts")
    if pattern not in PATTERNS:
        raise AnsibleFilterError("fabric_plan: pattern must be one of %s, got %r" % (", ".join(PATTERNS), pattern))
    if directions not in DIRECTIONS:
        raise AnsibleFilterError("fabric_plan: directions must be one of %s, got %r"
                                 % (", ".join(DIRECTIONS), directions))
    rails = _names(devices, "fabric_plan: devices") if devices else [None]
    try:
        base_port = int(base_port)
    except (TypeError, ValueError):
        raise AnsibleFilterError("fabric_plan: base_port must be an integer, got %r" % (base_port,))
    if not 1 <= base_port <= 65535 - len(rails):
        raise AnsibleFilterError("fabric_plan: base_port %d leaves no room for %d rail(s)" % (base_port, len(rails)))
    pairs = ring_pairs(names) if pattern == "ring" else all_pairs(names)
    rounds = (max(item[0] for item in pairs) + 1) if pairs else 0
    if directions == "both":
        pairs = pairs + [(pair_round + rounds, server, client) for pair_round, client, server in pairs]
        rounds *= 2
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


_gbps = finite_float  # None for missing, non-numeric and non-finite (NaN, inf) bandwidths


def _minimum(min_gbps, what):
    """The configured minimum as a float, None when unset; an error naming the option otherwise."""
    if min_gbps in (None, ""):
        return None
    minimum = _gbps(min_gbps)
    if minimum is None:
        raise AnsibleFilterError("%s: min_gbps must be a finite number, got %r" % (what, min_gbps))
    return minimum


def _grid(names, index, measurements, device=None, all_rails=True):
    grid = [[None] * len(names) for _name in names]
    for item in measurements:
        if not all_rails and item.get("device") != device:
            continue
        row, col = index.get(item.get("client")), index.get(item.get("server"))
        gbps = _gbps(item.get("gbps"))
        if row is None or col is None or gbps is None:
            continue
        current = grid[row][col]
        grid[row][col] = gbps if current is None else min(current, gbps)
    return grid


def fabric_matrix(measurements, hosts, device=None, title=None, min_gbps=None, per_rail=False):
    """{title, hosts, gbps[, rails, per_rail][, min_gbps]}: row = client (sender), column = server
    (receiver); null when not measured (or the figure is not finite).

    ``gbps``: several measurements of one pair (several rails) keep the lowest, the worst rail
    decides; ``device`` restricts to one rail. ``per_rail=True`` adds ``rails`` (the devices in
    the order first measured) and ``per_rail`` ({device: grid}, every rail's own matrix);
    ``min_gbps`` adds the configured minimum, so that a renderer colours against it.
    """
    names = _names(hosts, "fabric_matrix: hosts")
    minimum = _minimum(min_gbps, "fabric_matrix")
    index = {name: position for position, name in enumerate(names)}
    items = []
    for item in measurements or []:
        if not isinstance(item, dict):
            raise AnsibleFilterError("fabric_matrix: each measurement must be a dict, got %r" % (item,))
        items.append(item)
    result = {"hosts": names, "gbps": _grid(names, index, items, device, all_rails=device is None)}
    if per_rail:
        rails = []
        for item in items:
            rail = item.get("device")
            if rail is not None and (device is None or rail == device) and str(rail) not in rails:
                rails.append(str(rail))
        result["rails"] = rails
        result["per_rail"] = dict((rail, _grid(names, index, [i for i in items if i.get("device") is not None
                                                              and str(i.get("device")) == rail], all_rails=True))
                                  for rail in rails)
    if min_gbps not in (None, ""):
        result["min_gbps"] = minimum
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
    if min_gbps not in (None, "") and _gbps(min_gbps) is None and not isinstance(min_gbps, (int, float)):
        raise AnsibleFilterError("fabric_link_checks: min_gbps must be a number, got %r" % (min_gbps,))
    minimum = _minimum(min_gbps, "fabric_link_checks")
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


def _label(item):
    device = item.get("device")
    return "%s->%s%s" % (item.get("client"), item.get("server"), "" if device is None else "/" + str(device))


def _rail_name(rail):
    return "default device" if rail is None else str(rail)


def attribute_links(measurements, min_gbps=None):
    """Attribute low links to hosts' rails by elimination.

    A measurement is *low* when it produced no (finite) figure or one below ``min_gbps``. A
    measurement ``c -> s`` on rail ``r`` belongs to two units: ``(c, r, send)`` and
    ``(s, r, receive)``. Repeatedly, the unit with the highest share of low measurements is
    marked bad when most (more than half, at least 2 measurements) of its measurements are low,
    counting only measurements whose other end is not already marked bad: a slow host explains
    its peers' low links to it, so it is found first and they are not blamed. What is left low is
    a link problem (cable, transceiver, switch port), named with both ends and the rail.

    Returns ``(low, bad_units)``: the set of indexes of low measurements and the set of bad
    ``(host, rail, direction)`` units.
    """
    units = {}
    low = set()
    for position, item in enumerate(measurements):
        gbps = _gbps(item.get("gbps"))
        if gbps is None or (min_gbps is not None and gbps < min_gbps):
            low.add(position)
        rail = item.get("device")
        units.setdefault((item.get("client"), rail, "send"), []).append(position)
        units.setdefault((item.get("server"), rail, "receive"), []).append(position)

    def other_end(unit, position):
        item = measurements[position]
        if unit[2] == "send":
            return (item.get("server"), unit[1], "receive")
        return (item.get("client"), unit[1], "send")

    bad = set()
    while True:
        best = None
        for unit in sorted(units, key=lambda u: (str(u[0]), str(u[1]), u[2])):
            if unit in bad:
                continue
            counted = [p for p in units[unit] if other_end(unit, p) not in bad]
            failing = [p for p in counted if p in low]
            if len(counted) < 2 or 2 * len(failing) <= len(counted):
                continue
            key = (len(failing) / float(len(counted)), len(failing))
            if best is None or key > best[0]:
                best = (key, unit)
        if best is None:
            return low, bad
        bad.add(best[1])


def fabric_verdicts(measurements, hosts, min_gbps=None):
    """Checks per host derived from every measured link: {host: [check, ...]}.

    Per host: ``rdma.fabric.host`` (target ``node``), one ``rdma.fabric.rail`` per named rail
    (target the device) and one ``rdma.fabric.link`` per measurement the host took part in, as
    sender or receiver (target ``client->server/device``). A low link counts against both its
    ends; the verdicts follow attribute_links:

    * host ``fail`` when most of its rails are bad (every rail when it has one), rail ``fail``
      when the rail is bad in either direction (the message names the direction);
    * a low link explained by a bad end is ``fail`` on that end and ``skip`` on the other end
      (charged to the bad end, named in the message): a slow host does not make its peers look bad;
    * a low link explained by neither end is a link problem: ``warn`` on both ends, and the
      hosts' ``rdma.fabric.host`` and ``rdma.fabric.rail`` are ``warn`` naming those links;
    * a host with no measurement at all fails (nothing shows that its links work).
    """
    names = _names(hosts, "fabric_verdicts: hosts")
    minimum = _minimum(min_gbps, "fabric_verdicts")
    items = []
    for item in measurements or []:
        if not isinstance(item, dict):
            raise AnsibleFilterError("fabric_verdicts: each measurement must be a dict, got %r" % (item,))
        items.append(item)
    low, bad = attribute_links(items, minimum)
    expected = None if minimum is None else ">= %g Gb/s" % minimum
    bad_rails = {}
    for host, rail, direction in bad:
        bad_rails.setdefault((host, rail), []).append(direction)

    def with_expected(check):
        if expected is not None:
            check["expected"] = expected
        return check

    def describe(item):
        gbps = _gbps(item.get("gbps"))
        if gbps is None:
            return "no bandwidth measured (%s)" % (item.get("error") or "test did not complete")
        if minimum is not None and gbps < minimum:
            return "%.2f Gb/s below the minimum %g Gb/s" % (gbps, minimum)
        return "%.2f Gb/s" % gbps

    result = {}
    for host in names:
        mine = [(p, item) for p, item in enumerate(items) if host in (item.get("client"), item.get("server"))]
        checks = []
        if not mine:
            result[host] = [with_expected({"id": HOST_CHECK_ID, "target": "node", "status": "fail",
                                           "message": "no link of this host was measured", "observed": None})]
            continue
        rails = []
        for _p, item in mine:
            if item.get("device") not in rails:
                rails.append(item.get("device"))
        host_bad_rails = [rail for rail in rails if (host, rail) in bad_rails]
        host_bad = 2 * len(host_bad_rails) > len(rails)
        link_problems = {}
        explained = 0
        for position, item in mine:
            rail = item.get("device")
            check = with_expected({"id": CHECK_ID, "target": _label(item), "observed": _gbps(item.get("gbps"))})
            if position not in low:
                check.update(status="pass", message=describe(item))
            else:
                culprits = []
                mine_bad = False
                for end, direction in ((item.get("client"), "send"), (item.get("server"), "receive")):
                    if (end, rail, direction) in bad:
                        culprits.append("%s %s (%s)" % (end, _rail_name(rail), direction))
                        mine_bad = mine_bad or end == host
                if mine_bad:
                    check.update(status="fail", message="%s: charged to this host's bad %s" % (
                        describe(item), " and ".join(culprits)))
                elif culprits:
                    explained += 1
                    check.update(status="skip", message="%s: charged to the bad %s, not to this host" % (
                        describe(item), " and ".join(culprits)))
                else:
                    link_problems.setdefault(rail, []).append(_label(item))
                    check.update(status="warn", message="%s: link problem between %s and %s on %s (neither end "
                                 "is bad on most of its links: cable, transceiver or switch port)"
                                 % (describe(item), item.get("client"), item.get("server"), _rail_name(rail)))
            checks.append(check)
        rail_checks = []
        for rail in rails:
            if rail is None:
                continue
            on_rail = [(p, i) for p, i in mine if i.get("device") == rail]
            failing = len([p for p, _i in on_rail if p in low])
            check = with_expected({"id": RAIL_CHECK_ID, "target": str(rail),
                                   "observed": {"links": len(on_rail), "low": failing}})
            if (host, rail) in bad_rails:
                check.update(status="fail", message="rail %s is bad (%s): %d of %d links low"
                             % (rail, " and ".join(sorted(bad_rails[(host, rail)])), failing, len(on_rail)))
            elif link_problems.get(rail):
                check.update(status="warn", message="link problem(s) on %s: %s"
                             % (rail, ", ".join(link_problems[rail])))
            else:
                check.update(status="pass", message="%d link(s), %s" % (
                    len(on_rail), "none low" if not failing else "%d low, all explained by bad peers" % failing))
            rail_checks.append(check)
        failing = len([p for p, _i in mine if p in low])
        host_check = with_expected({"id": HOST_CHECK_ID, "target": "node",
                                    "observed": {"links": len(mine), "low": failing}})
        problems = [label for rail in rails for label in link_problems.get(rail, [])]
        if host_bad:
            host_check.update(status="fail", message="most of this host's links are low: %d of %d, bad on %s"
                              % (failing, len(mine), ", ".join(
                                  "%s (%s)" % (_rail_name(r), " and ".join(sorted(bad_rails[(host, r)])))
                                  for r in host_bad_rails)))
        elif host_bad_rails:
            host_check.update(status="fail", message="bad rail %s: most of its links there are low (%d of %d "
                              "links of the host low)" % (", ".join(
                                  "%s (%s)" % (_rail_name(r), " and ".join(sorted(bad_rails[(host, r)])))
                                  for r in host_bad_rails), failing, len(mine)))
        elif problems:
            host_check.update(status="warn", message="%d of %d links low, a minority: link problem(s) %s"
                              % (len(problems), len(mine), ", ".join(problems)))
        else:
            host_check.update(status="pass", message="%d link(s) measured, %s" % (
                len(mine), "none low" if not explained else "%d low, all explained by bad peers" % explained))
        result[host] = [host_check] + rail_checks + checks
    return result


class FilterModule(object):
    def filters(self):
        return {
            "fabric_plan": fabric_plan,
            "fabric_matrix": fabric_matrix,
            "fabric_link_checks": fabric_link_checks,
            "fabric_measurement": fabric_measurement,
            "fabric_verdicts": fabric_verdicts,
        }
