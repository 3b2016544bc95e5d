#!/usr/bin/env python3
"""Smoke run of every benchmark in bench/ at a tiny size, so none rots unnoticed (a step of
scripts/test.sh, "bench smoke").

Each script runs with --smoke (a few hosts, runs or cycles; its targets are not judged) and must
exit 0 and print each of its figure lines. Only the presence of the lines is checked, never their
values: the figures of a tiny run on a shared machine measure nothing (docs/performance.md has
the real runs). bench/shell_checks.yml runs as play (c) of fleet_validate.py. Not run here:
fleet_validate.py --site-lab (it recreates the Docker lab; minutes).

    .venv/bin/python bench/smoke.py              # all of them
    .venv/bin/python bench/smoke.py agent_cycle  # some
"""

import os
import re
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
NUMBER = r"[0-9]+(\.[0-9]+)?"
STATS = r"min +{0} +median +{0} +max +{0}".format(NUMBER)


def row(key, label):
    """A row of fleet_validate.py's table: key, label, then wall s, ms/host, CPU s as numbers."""
    return r"^  %-3s%s +%s +%s +%s " % (re.escape(key), re.escape(label), NUMBER, NUMBER, NUMBER)


# script: the lines (regular expressions, re.MULTILINE) its --smoke output must hold.
FIGURES = {
    "node_validate_time": [
        r"^in-process, warm \(2 runs\) +%s +%s" % (STATS, STATS),
        r"^in-process, cold incl. imports \(2 procs\) +%s +%s" % (STATS, STATS),
        r"^module file as a process \(2 procs\) +%s +%s" % (STATS, STATS),
        r"^  elapsed_ms reported +%s" % STATS,
    ],
    "fork_cost": [
        r"^one DGX node_validate result: [0-9]+ bytes of JSON, [0-9]+ checks$",
        r"^ +0 +{0} +{0} +{0} +{0} +1\.00$".format(NUMBER),
        r"^ +20 +{0} +{0} +{0} +{0} +{0}$".format(NUMBER),
    ],
    "agent_cycle": [
        r"^  per cycle .*: %s" % STATS,
        r"^  start-up \+ first cycle.*: %s" % STATS,
        r"^  whole process, fake NVML double +: %s" % STATS,
        r"^  imports of a cycle \( *[0-9]+ modules\), no binding +: %s" % STATS,
        r"^in-process cycle \(Agent.cycle, warm interpreter\) +: %s" % STATS,
        r"^target <= 50 ms CPU per cycle, resident per-cycle median %s: not judged" % NUMBER,
    ],
    "detect_latency": [
        r"^  \(c\) drain command issued +all events +p50 +%s +p99 +%s +max +%s ms" % (NUMBER, NUMBER, NUMBER),
        r"^  idle CPU per hour: wake-ups alone %s s" % NUMBER,
    ],
    "module_payload": [
        r"^ping +median +%s ms CPU" % NUMBER,
        r"^node_validate cold +median +%s ms CPU" % NUMBER,
        r"^node_validate warm +median +%s ms CPU" % NUMBER,
        r"^node_validate above ping: cold -?%s ms, warm -?%s ms" % (NUMBER, NUMBER),
    ],
    "fleet_status_api": [
        r"^  fleet_status.yml kubernetes N=10 +%s +%s +%s +%s" % (NUMBER, NUMBER, NUMBER, NUMBER),
        r"^    report: 10 hosts, 2 failing \(expected 2",
        r"^  validate.yml sweep N=2 +%s +%s +%s +%s" % (NUMBER, NUMBER, NUMBER, NUMBER),
        r"^  validate.yml sweep scaled to N=10 +%s" % NUMBER,
        r"^  sweep / status \(CPU, per host\) = %sx" % NUMBER,
        r"^  unpaged read \(before\) N=10 +%s +%s +%s +%s +%s +%s" % ((NUMBER,) * 6),
        r"^    fleet reports of the paged and the unpaged read: identical, 10 checks compared",
        r"^  target: N=10000 <= 10 s controller CPU; N=10 measured %s s: not judged" % NUMBER,
    ],
    "capture": [
        r"^capture dgx-h100 fixture +\(1 run\(s\)\): +[0-9]+ entries, +[0-9]+ files read, wall min %s median %s max %s s"
        % (NUMBER, NUMBER, NUMBER),
        r"^capture dgx-h100 real size +\(1 run\(s\)\): +[0-9]+ entries, +[0-9]+ files read, wall min %s median %s "
        r"max %s s" % (NUMBER, NUMBER, NUMBER),
        r"^target < 5 s per capture: (met|NOT met) \(worst median %s s\)" % NUMBER,
    ],
    "fleet_validate": [
        r"^node_validate module time .*: elapsed_ms median %s, max %s" % (NUMBER, NUMBER),
        row("a", "floor (ping)"),
        row("d", "accel floor"),
        row("b", "validate.yml"),
        row("e", "accel validate"),
        r"^     fleet reports of b \(plain\) and e \(accelerated\): identical, [0-9]+ checks compared",
        row("c", "shell checks"),  # bench/shell_checks.yml
        row("b2", "validate.yml"),
        row("a2", "floor (ping)"),
        r"^  N=2  b/a = %s wall, %s CPU" % (NUMBER, NUMBER),
        r"^  N=2  d/a = %s wall, %s CPU;  e/a = %s wall" % (NUMBER, NUMBER, NUMBER),
        r"^  N=2  b/a median of the rounds = %s wall, %s CPU" % (NUMBER, NUMBER),
    ],
}


def smoke(name):
    """(ok, seconds, problems) of one script's smoke run; its output is printed when it fails."""
    start = time.time()
    proc = subprocess.run([sys.executable, os.path.join(BENCH, name + ".py"), "--smoke"], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
    seconds = time.time() - start
    problems = [] if proc.returncode == 0 else ["exit status %d" % proc.returncode]
    problems += ["no line matching %r" % pattern for pattern in FIGURES[name]
                 if not re.search(pattern, proc.stdout, re.MULTILINE)]
    if problems:
        print("--- output of bench/%s.py --smoke" % name)
        print(proc.stdout.rstrip())
        print("--- end of output")
    return not problems, seconds, problems


def main(argv):
    names = argv or list(FIGURES)
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise SystemExit("unknown benchmark(s): %s (known: %s)" % (", ".join(unknown), ", ".join(FIGURES)))
    missing = sorted(set(f[:-3] for f in os.listdir(BENCH) if f.endswith(".py") and f != "smoke.py") - set(FIGURES))
    if missing:  # a new benchmark needs its figure lines here
        raise SystemExit("bench/smoke.py does not know bench/%s.py: add its figure lines to FIGURES" % missing[0])
    failed = 0
    for name in names:
        ok, seconds, problems = smoke(name)
        failed += not ok
        print("bench smoke: %-20s %5.1f s  %s" % (name, seconds, "ok" if ok else "FAILED: " + "; ".join(problems)))
        sys.stdout.flush()
    print("bench smoke: %d of %d benchmark(s) ran and printed their figures" % (len(names) - failed, len(names)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
