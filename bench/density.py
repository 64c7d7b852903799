#!/usr/bin/env python3
"""Density: how many idle pyjail.Session()s one machine holds, and what each costs.

Starts N sessions (one after another, timed), has each run a cell that keeps some state, then
with all of them idle measures every session's host memory as PSS (/proc/PID/smaps_rollup),
summed over the session's processes (the supervisor, the jail's pid 1, the interpreter and
anything it started): pages shared between sessions are split between them, so the sum over
all sessions is what they take together. Then the cell latency of one session with the
others idle beside it. Memory is watched: the run stops adding sessions before the host's
MemAvailable falls under --keep-free.

    bench/density.py [--pyjail build/pyjail] [--sessions 100] [--rootfs NAME] [--cell CODE] [--keep-free 8G] [--markdown FILE]

Sessions forked from a preloaded template are not measured here: Session() starts a fresh
jail (cold); a Session from a template does not exist yet.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import pyjail  # noqa: E402

CELL = "state = {i: str(i) * 10 for i in range(10_000)}"


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--rootfs", help="the sessions' rootfs (default: pyjail's)")
    ap.add_argument("--cell", default=CELL, help="what each session runs once it is up")
    ap.add_argument("--keep-free", default="8G", help="stop adding sessions below this MemAvailable")
    ap.add_argument("--trips", type=int, default=500, help="cells timed with the others idle")
    ap.add_argument("--markdown")
    ap.add_argument("--pyjail", default=str(HERE.parent / "build" / "pyjail"))
    args = ap.parse_args()
    os.environ["PYJAIL_BIN"] = os.path.abspath(args.pyjail)  # where pyjail.Session() looks
    keep_free = size(args.keep_free) // 1024
    kwargs = {"rootfs": args.rootfs} if args.rootfs else {}
    sessions, starts = [], []
    before = mem_available_kib()
    t0 = time.perf_counter()
    try:
        for i in range(args.sessions):
            if mem_available_kib() < keep_free:
                print(f"density: stopped at {i} sessions (MemAvailable under {args.keep_free})",
                      file=sys.stderr)
                break
            t = time.perf_counter()
            s = pyjail.Session(**kwargs)
            r = s.run(args.cell)
            starts.append(time.perf_counter() - t)
            if not r.ok:
                raise SystemExit(f"the cell failed in session {i}: {r.error}")
            sessions.append(s)
        created = time.perf_counter() - t0
        time.sleep(1.0)   # let every session settle idle
        per_session = []
        processes = 0
        for s in sessions:
            pids = descendants(s.pid)
            processes += len(pids)
            per_session.append(sum(pss_kib(p) for p in pids))
        after = mem_available_kib()
        cells = []
        probe = sessions[0]
        for _ in range(50):
            probe.run("pass")
        for _ in range(args.trips):
            t = time.perf_counter_ns()
            probe.run("pass")
            cells.append((time.perf_counter_ns() - t) / 1e6)
    finally:
        for s in sessions:
            s.close()
    n = len(sessions)
    mib = [k / 1024 for k in per_session]
    cmdline = " ".join(["bench/density.py"] + sys.argv[1:])
    lines = [
        f"Produced by `{cmdline}` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z} "
        f"(kernel {platform.release()}, {os.cpu_count()} CPUs, uid {os.geteuid()}).", "",
        "| what | figure |", "|---|---|",
        f"| idle sessions held | {n} ({processes} processes) |",
        f"| PSS per idle session, summed over its processes | median {statistics.median(mib):.2f} MiB, "
        f"max {max(mib):.2f} MiB; all {n}: {sum(mib):.0f} MiB |",
        f"| host MemAvailable, before / with them idle | {before / 1024:.0f} / {after / 1024:.0f} MiB "
        f"({(before - after) / 1024 / max(n, 1):.2f} MiB each) |",
        f"| time to create them, one after another (start + first cell) | {created:.1f} s "
        f"({n / created:.1f} sessions/s; p50 {pct(starts, 50) * 1e3:.0f} ms each) |",
        f"| `run('pass')` with {n - 1} idle beside | p50 {pct(cells, 50):.3f} ms, "
        f"p99 {pct(cells, 99):.3f} ms |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
