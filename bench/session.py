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

    bench/session.py [--pyjail build/pyjail] [--trips 2000] [--rounds 40] [--markdown FILE]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyjail", help="the pyjail binary (default: $PYJAIL_BIN or PATH)")
    ap.add_argument("--trips", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--markdown", help="also write the report to this file")
    args = ap.parse_args()
    if args.pyjail:
        os.environ["PYJAIL_BIN"] = os.path.abspath(args.pyjail)
    binary = pyjail.find_binary()

    cells, pings = round_trips(args.trips)
    times = compare(args.rounds)

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
