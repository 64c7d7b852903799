#!/usr/bin/env python3
"""Density: how many idle pyjail.Session()s one machine holds, and what each costs.

Starts N sessions (one after another, or --parallel at a time from as many threads; timed),
has each run a cell that keeps some state, then
with all of them idle measures every session's host memory as PSS (/proc/PID/smaps_rollup),
summed over the session's processes (the supervisor, the jail's pid 1, the interpreter and
anything it started): pages shared between sessions are split between them, so the sum over
all sessions is what they take together. Then the cell latency of one session with the
others idle beside it. Memory is watched: the run stops adding sessions before the host's
MemAvailable falls under --keep-free.

    bench/density.py [--pyjail build/pyjail] [--sessions 100] [--rootfs NAME] [--cell CODE]
        [--preload numpy,pandas] [--cold-sessions N] [--parallel 1] [--keep-free 8G]
        [--markdown FILE]

With --preload numpy,pandas the same is measured, in the same run, for sessions forked from a
Pool's template that imported those modules (Pool.session()), before the cold ones
(pyjail.Session(), a fresh jail each). A template's own memory is counted in its sessions'
figure: the PSS is that of every process the benchmark started, over the number of sessions.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import pyjail  # noqa: E402
from publish import publish

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


def create(make, n_max: int, cell: str, keep_free: int, parallel: int, sessions: list,
           starts: list) -> None:
    """Starts up to n_max sessions with make(), `parallel` at a time (each from a thread of
    its own), each running `cell`, into `sessions` (also when one fails: the caller closes
    them), and the time each took to start and run its cell into `starts`."""
    lock = threading.Lock()
    failed: list = []

    def one(i: int) -> None:
        t = time.perf_counter()
        s = make()
        with lock:
            sessions.append(s)
        r = s.run(cell)
        if not r.ok:
            failed.append(f"the cell failed in session {i}: {r.error}")
        with lock:
            starts.append(time.perf_counter() - t)

    with ThreadPoolExecutor(parallel) as pool:
        running: set = set()
        for i in range(n_max):
            if failed:
                break
            if mem_available_kib() < keep_free:
                print(f"density: stopped at {i} sessions (MemAvailable under the floor)",
                      file=sys.stderr)
                break
            running.add(pool.submit(one, i))
            if len(running) >= parallel:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
        for f in running:
            f.result()
    if failed:
        raise SystemExit(failed[0])


def measure(make, n_max: int, cell: str, keep_free: int, trips: int, parallel: int) -> dict:
    """Starts up to n_max sessions with make(), each running `cell`; then, all idle, the PSS of
    every process this benchmark started (sessions, their supervisors, and for sessions from a
    template the template itself, so its share is in the figure), and one session's cell latency
    with the others beside it."""
    sessions: list = []
    starts: list = []
    base = sum(pss_kib(p) for p in descendants(os.getpid())[1:])  # e.g. a Pool's template
    before = mem_available_kib()
    t0 = time.perf_counter()
    try:
        create(make, n_max, cell, keep_free, parallel, sessions, starts)
        created = time.perf_counter() - t0
        time.sleep(1.0)   # let every session settle idle
        pids = descendants(os.getpid())[1:]
        total = sum(pss_kib(p) for p in pids)
        after = mem_available_kib()
        cells = []
        probe = sessions[0]
        for _ in range(50):
            probe.run("pass")
        for _ in range(trips):
            t = time.perf_counter_ns()
            probe.run("pass")
            cells.append((time.perf_counter_ns() - t) / 1e6)
    finally:
        for s in sessions:
            s.close()
    n = len(sessions)
    return {"n": n, "processes": len(pids), "total_mib": total / 1024, "base_mib": base / 1024,
            "before": before / 1024, "after": after / 1024, "created": created,
            "starts": starts, "cells": cells, "parallel": parallel}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--rootfs", help="the sessions' rootfs (default: pyjail's)")
    ap.add_argument("--cell", default=CELL, help="what each session runs once it is up")
    ap.add_argument("--preload", default="",
                    help="comma-separated modules: also measure sessions forked from a Pool's "
                         "template that imported them (e.g. numpy,pandas), beside cold ones")
    ap.add_argument("--cold-sessions", type=int,
                    help="how many cold sessions (default: as many as --sessions)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="sessions started at once, each from a thread of its own (1: one after "
                         "another)")
    ap.add_argument("--keep-free", default="8G", help="stop adding sessions below this MemAvailable")
    ap.add_argument("--trips", type=int, default=500, help="cells timed with the others idle")
    ap.add_argument("--markdown")
    ap.add_argument("--pyjail", default=str(HERE.parent / "build" / "pyjail"))
    args = ap.parse_args()
    os.environ["PYJAIL_BIN"] = os.path.abspath(args.pyjail)  # where pyjail.Session() looks
    keep_free = size(args.keep_free) // 1024
    kwargs = {"rootfs": args.rootfs} if args.rootfs else {}
    preload = [m for m in args.preload.split(",") if m]
    results = {}
    if preload:
        with pyjail.Pool(preload, size=1, profile="repl", **kwargs) as pool:
            results["forked from a template"] = measure(pool.session, args.sessions, args.cell,
                                                         keep_free, args.trips, args.parallel)
    cold = args.cold_sessions if args.cold_sessions is not None else args.sessions
    if cold:
        results["cold (a fresh jail each)"] = measure(lambda: pyjail.Session(**kwargs), cold,
                                                      args.cell, keep_free, args.trips,
                                                      args.parallel)
    cmdline = " ".join(["bench/density.py"] + sys.argv[1:])
    lines = [
        f"Produced by `{cmdline}` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z} "
        f"(kernel {platform.release()}, {os.cpu_count()} CPUs, uid {os.geteuid()}). Each session "
        f"ran `{args.cell}` once, then sat idle.", "",
        "| what | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]

    def row(name, fmt):
        lines.append(f"| {name} | " + " | ".join(fmt(r) for r in results.values()) + " |")

    row("idle sessions held", lambda r: f"{r['n']} ({r['processes']} processes)")
    row("PSS per idle session: every process started, template included, over N",
        lambda r: f"{r['total_mib'] / max(r['n'], 1):.2f} MiB (all: {r['total_mib']:.0f} MiB, "
                  f"of which {r['base_mib']:.0f} MiB before the first session)")
    row("host MemAvailable, before / with them idle",
        lambda r: f"{r['before']:.0f} / {r['after']:.0f} MiB "
                  f"({(r['before'] - r['after']) / max(r['n'], 1):.2f} MiB each)")
    row("time to create them, " + ("one after another" if args.parallel == 1 else
                                   f"{args.parallel} at a time") + " (start + first cell)",
        lambda r: f"{r['created']:.1f} s ({r['n'] / r['created']:.1f} sessions/s; "
                  f"p50 {pct(r['starts'], 50) * 1e3:.0f} ms each)")
    row("`run('pass')` with the others idle beside",
        lambda r: f"p50 {pct(r['cells'], 50):.3f} ms, p99 {pct(r['cells'], 99):.3f} ms")
    text = "\n".join(lines) + "\n"
    publish(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
