#!/usr/bin/env python3
"""CPU time of a jail's start, next to its wall time: pyjail, the floor probe and bubblewrap.

On a loaded machine the wall time of a start moves by milliseconds with what the other
processes do, while the CPU time the start itself takes (user + system of the whole process
tree, from the kernel's accounting of reaped children) moves far less. This script runs the
same `-I -S -c pass` starts as startup.py (pyjail's strict jail, the minimal jail probe
bench/floor/minimal_jail.c with pyjail's compiled filter, bubblewrap with the same rootfs and
filter, and optionally another pyjail as the baseline), interleaved in random order, and
reports for each its median wall and CPU time and the paired median differences to the probe
(pyjail's and bubblewrap's own work above the floor) and to the baseline:

    bench/startup_cpu.py [--pyjail build/pyjail] [--baseline OTHER_PYJAIL] [--rounds 300]
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time

import startup
from startup import Case

ERR = tempfile.TemporaryFile()  # every run's stderr (read only when one fails)


def time_and_cpu(case: Case) -> tuple[float, float]:
    """Wall and CPU time (user + system of the reaped tree) of one run, in ms."""
    if case.prepare:
        case.prepare()
    actions = startup.spawn_actions(ERR.fileno())
    for fd in case.pass_fds:
        os.set_inheritable(fd, True)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter_ns()
        pid = os.posix_spawnp(case.argv[0], case.argv, os.environ, file_actions=actions)
        _, status = os.waitpid(pid, 0)
        wall = (time.perf_counter_ns() - start) / 1e6
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        for fd in case.pass_fds:
            os.set_inheritable(fd, False)
    if status != 0:
        ERR.seek(0)
        sys.exit(f"bench: `{case.name}` failed ({os.waitstatus_to_exitcode(status)}): "
                 f"{ERR.read().decode(errors='replace')[-500:]}")
    ERR.seek(0)
    ERR.truncate()
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
    return wall, cpu


def cases(s: startup.Setup) -> list[Case]:
    want = {startup.JAIL_LEAN, startup.MINIMAL_LEAN, startup.BWRAP_LEAN, startup.BASELINE_LEAN}
    return [c for c in startup.startup_cases(s) if c.name in want]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(startup.REPO / "build" / "pyjail"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--baseline", help="another pyjail binary to pair with --pyjail's line")
    args = ap.parse_args()
    s = startup.setup(args.pyjail, args.python, args.baseline)
    for note in s.notes:
        print("startup_cpu.py:", note, file=sys.stderr)
    if not s.minimal_jail:
        sys.exit("startup_cpu.py: the minimal jail probe does not run here: nothing to compare with")
    startup.check_bwrap_filter(s)
    todo = cases(s)
    for c in todo:  # warm caches, and fail early
        time_and_cpu(c)
    wall: dict[str, list[float]] = {c.name: [] for c in todo}
    cpu: dict[str, list[float]] = {c.name: [] for c in todo}
    print(f"startup_cpu: {len(todo)} commands, {args.rounds} interleaved rounds", file=sys.stderr)
    for _ in range(args.rounds):
        random.shuffle(todo)
        for c in todo:
            w, t = time_and_cpu(c)
            wall[c.name].append(w)
            cpu[c.name].append(t)

    def over(d: dict[str, list[float]], a: str, b: str) -> float:
        return statistics.median(x - y for x, y in zip(d[a], d[b]))

    floor = startup.MINIMAL_LEAN
    print("| command | wall (median) | CPU (median) | wall over the probe | CPU over the probe |")
    print("|---|---:|---:|---:|---:|")
    for name in (floor, startup.JAIL_LEAN, startup.BASELINE_LEAN, startup.BWRAP_LEAN):
        if name not in wall:
            continue
        # bubblewrap exits without reaping its sandbox's pid 1, so the kernel never adds that
        # tree's CPU time to ours: only its wall time is measured.
        uncounted = name == startup.BWRAP_LEAN
        med_cpu = "n/a" if uncounted else f"{statistics.median(cpu[name]):.2f} ms"
        extra = ("| | |" if name == floor else
                 f"| {over(wall, name, floor):+.2f} ms | "
                 f"{'n/a' if uncounted else f'{over(cpu, name, floor):+.2f} ms'} |")
        print(f"| `{name}` | {statistics.median(wall[name]):.2f} ms | {med_cpu} {extra}")
    print()
    pj = over(wall, startup.JAIL_LEAN, floor)
    line = f"- Wall: pyjail's own work over the probe {pj:+.2f} ms"
    if startup.BWRAP_LEAN in wall:
        bw = over(wall, startup.BWRAP_LEAN, floor)
        line += f", bubblewrap's {bw:+.2f} ms"
    print(line + " (paired medians).")
    print(f"- CPU: pyjail's own work over the probe {over(cpu, startup.JAIL_LEAN, floor):+.2f} ms "
          "(paired median).")
    if startup.BASELINE_LEAN in wall:
        print(f"- The baseline against this build, paired: wall "
              f"{over(wall, startup.BASELINE_LEAN, startup.JAIL_LEAN):+.2f} ms, CPU "
              f"{over(cpu, startup.BASELINE_LEAN, startup.JAIL_LEAN):+.2f} ms (positive: the baseline "
              "is slower).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
