#!/usr/bin/env python3
"""The Python package's costs: a session's round trip, and pyjail.run side by side with
LangChain's own PythonREPL.run(..., timeout=...) on the same cells.

1. Round trip of a trivial cell (`pass`) in a warm pyjail.Session: p50 and p99 over
   --trips cells, and the same for a bare protocol ping.
2. Each cell, run by every contender once per round in a fresh random order (the machine is
   noisy; interleaving keeps the comparison fair):
   - pyjail.run: a fresh jail per cell (start-up included);
   - pyjail.Session.run: one warm jailed interpreter;
   - LangChain PythonREPL.run(cell, timeout=10): a forked copy of the host interpreter, no
     isolation at all (and with a timeout, no state kept between calls).

3. A session's start: `Session()` (a fresh jail) and `Pool.session()` (a fork of a template
   with nothing preloaded) to the server's hello, and then its first cell (`x = 1`); with
   --baseline-package DIR --baseline-pyjail BIN (another checkout's python/ and its build), that
   build's in the same rounds, each once a round in a fresh random order, and the paired
   difference.

    bench/session.py [--pyjail build/pyjail] [--trips 2000] [--rounds 40] [--starts 60]
                     [--baseline-package DIR --baseline-pyjail BIN] [--markdown FILE]

Needs the package (python/ of this checkout is used) and, for the LangChain column,
langchain-experimental.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import pyjail  # noqa: E402
from publish import publish

CELLS = {
    "print": "print('hello')",
    "arith": "print(sum(i * i for i in range(100_000)))",
    "import json": "import json\nprint(len(json.dumps(list(range(10_000)))))",
    "error": "1 / 0",
}


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def round_trips(n: int) -> tuple[list[float], list[float]]:
    cells, pings = [], []
    with pyjail.Session() as s:
        for _ in range(50):
            s.run("pass")
        for _ in range(n):
            t = time.perf_counter_ns()
            r = s.run("pass")
            cells.append((time.perf_counter_ns() - t) / 1e6)
            assert r.ok
        for _ in range(n):
            pings.append(s.ping() * 1e3)
    return cells, pings


def session_table(cells: list[float], pings: list[float]) -> list[str]:
    """The Markdown table of round_trips' times: p50, p99 and mean of each."""
    lines = ["| what | p50 | p99 | mean |", "|---|---:|---:|---:|"]
    for what, xs in (("`pyjail.Session().run('pass')`", cells),
                     ("`Session.ping()` (protocol only)", pings)):
        lines.append(f"| {what} | {pct(xs, 50):.3f} ms | {pct(xs, 99):.3f} ms | "
                     f"{statistics.mean(xs):.3f} ms |")
    return lines


def contenders():
    out = {}
    out["pyjail.run"] = lambda code: pyjail.run(code, timeout=10)
    session = pyjail.Session()
    out["pyjail.Session.run"] = lambda code: session.run(code, timeout=10)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langchain_experimental.utilities.python import PythonREPL
        repl = PythonREPL()
        out["LangChain PythonREPL.run"] = lambda code: repl.run(code, timeout=10)
    except ImportError:
        print("session.py: langchain-experimental is not installed: no LangChain column",
              file=sys.stderr)
    return out, session


def compare(rounds: int) -> dict[str, dict[str, list[float]]]:
    runners, session = contenders()
    times: dict[str, dict[str, list[float]]] = {c: {r: [] for r in runners} for c in CELLS}
    rng = random.Random(1)
    try:
        for cell, code in CELLS.items():
            for name, fn in runners.items():
                fn(code)                          # warm-up
            for _ in range(rounds):
                order = list(runners.items())
                rng.shuffle(order)
                for name, fn in order:
                    t = time.perf_counter_ns()
                    fn(code)
                    times[cell][name].append((time.perf_counter_ns() - t) / 1e6)
    finally:
        session.close()
    return times


def starts(builds: dict, rounds: int) -> dict[str, dict[str, list[float]]]:
    """ms to a session's hello and then to its first cell's result, per build (name: (package,
    binary)) and kind (a fresh Session(), a Pool.session()), each once a round in a fresh random
    order."""
    pools = {name: pkg.Pool(binary=binary) for name, (pkg, binary) in builds.items()}
    kinds = {"`Session()`": lambda name: builds[name][0].Session(binary=builds[name][1]),
             "`Pool().session()`": lambda name: pools[name].session()}
    out: dict[str, dict[str, list[float]]] = {
        f"{kind} {what}, {name}": [] for kind in kinds for what in ("start", "first cell")
        for name in builds}
    try:
        for name in builds:     # a first start of each: its server's files are then cached
            for kind, start in kinds.items():
                start(name).close()
        for _ in range(rounds):
            order = [(kind, name) for kind in kinds for name in builds]
            random.shuffle(order)
            for kind, name in order:
                t0 = time.perf_counter()
                s = kinds[kind](name)
                t1 = time.perf_counter()
                assert s.run("x = 1").ok
                t2 = time.perf_counter()
                s.close()
                out[f"{kind} start, {name}"].append((t1 - t0) * 1e3)
                out[f"{kind} first cell, {name}"].append((t2 - t1) * 1e3)
    finally:
        for pool in pools.values():
            pool.close()
    return out


def starts_table(times: dict[str, list[float]], names: list[str]) -> list[str]:
    lines = ["| | " + " | ".join(f"{n}: p50 (p90) ms" for n in names)
             + (" | this minus the baseline (paired median) |" if len(names) > 1 else " |"),
             "|---|" + "---:|" * len(names) + ("---:|" if len(names) > 1 else "")]
    for row in dict.fromkeys(k.rsplit(", ", 1)[0] for k in times):
        per = [times[f"{row}, {n}"] for n in names]
        cells = ["%.2f (%.2f)" % (statistics.median(x), pct(x, 90)) for x in per]
        if len(names) > 1:
            cells.append("%+.2f ms" % statistics.median(a - b for a, b in zip(per[0], per[1])))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyjail", help="the pyjail binary (default: $PYJAIL_BIN or PATH)")
    ap.add_argument("--trips", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--starts", type=int, default=60, help="rounds of session starts")
    ap.add_argument("--baseline-package", help="another checkout's python/ directory, whose "
                    "sessions start in the same rounds (with --baseline-pyjail)")
    ap.add_argument("--baseline-pyjail", help="the binary of that checkout's build")
    ap.add_argument("--markdown", help="also write the report to this file")
    args = ap.parse_args()
    if bool(args.baseline_package) != bool(args.baseline_pyjail):
        ap.error("--baseline-package and --baseline-pyjail go together")
    if args.pyjail:
        os.environ["PYJAIL_BIN"] = os.path.abspath(args.pyjail)
    binary = pyjail.find_binary()

    cells, pings = round_trips(args.trips)
    times = compare(args.rounds)
    builds = {"this build": (pyjail, binary)}
    if args.baseline_package:
        from template import load_package
        builds["baseline"] = (load_package(os.path.abspath(args.baseline_package), "pyjail_baseline"),
                              os.path.abspath(args.baseline_pyjail))
    start_times = starts(builds, args.starts)

    lines = [
        "# pyjail Python package: session round trip and run() against LangChain's PythonREPL",
        "",
        "%s, %s, %d CPUs, Python %s, %s; pyjail %s" % (
            datetime.date.today().isoformat(), platform.platform(), os.cpu_count() or 0,
            platform.python_version(), binary, pyjail.__version__),
        "",
        "## Session round trip (warm session, %d cells)" % args.trips,
        "",
        *session_table(cells, pings),
        "",
        "## The same cells, %d interleaved rounds (median ms, p99 ms)" % args.rounds,
        "",
    ]
    names = list(next(iter(times.values())))
    lines.append("| cell | " + " | ".join(names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for cell, per in times.items():
        lines.append("| `%s` | " % cell + " | ".join(
            "%.1f (%.1f)" % (statistics.median(per[n]), pct(per[n], 99)) for n in names) + " |")
    lines += ["", "## A session's start, %d interleaved rounds" % args.starts, ""]
    lines += starts_table(start_times, list(builds))
    lines += [
        "",
        "pyjail.run pays for a fresh jail and interpreter per cell; a Session pays that once.",
        "LangChain's PythonREPL.run with a timeout forks the host interpreter (fast, but the",
        "code runs with all of the host's rights, and its variables are lost after each call).",
    ]
    report = "\n".join(lines) + "\n"
    publish(report, args.markdown)


if __name__ == "__main__":
    main()
