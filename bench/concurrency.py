#!/usr/bin/env python3
"""How cost grows with concurrent callers: fresh jails and runs from a template.

For 1, 2, 4, 8 and 16 callers, each a thread that starts the command back to back (spawn to
exit, every exit status checked), the runs per second and each run's latency (p50, p99).
Fresh jails run `pyjail --profile strict -- python -I -c pass`; template runs the same
command through `pyjail --via` to an empty template (`pyjail serve`, started once). The
configurations take turns in short blocks, in a fresh random order per round, so that the
noise of a shared machine falls on all of them alike. The plot (PNG) shows p50 and p99
latency against the number of callers; it needs matplotlib, which the package does not: give
the benchmark a venv of its own.

    python3 -m venv /tmp/bench-venv && /tmp/bench-venv/bin/pip install matplotlib
    /tmp/bench-venv/bin/python bench/concurrency.py [--pyjail build/pyjail] [--rounds 4]
        [--block-seconds 1.5] [--callers 1,2,4,8,16] [--markdown FILE] [--png bench/concurrency.png]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from publish import publish

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAM = ["python", "-I", "-c", "pass"]  # -S: not in a run from a template
FRESH = "fresh jail"
TEMPLATE = "template run"


@dataclass
class Config:
    kind: str
    argv: list[str]
    callers: int
    latencies: list[float] = field(default_factory=list)   # ms, every run
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def one_run(argv: list[str]) -> tuple[float, int]:
    """Wall time (ms) from spawn to reaping, and the exit status."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
               (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    start = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter_ns() - start) / 1e6, os.waitstatus_to_exitcode(status)


def block(cfg: Config, seconds: float) -> None:
    """cfg's callers start runs until the deadline; the block lasts until the last ends."""
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + seconds

    def caller() -> None:
        while time.perf_counter() < deadline:
            ms, code = one_run(cfg.argv)
            with lock:
                cfg.latencies.append(ms)
                if code != 0:
                    cfg.failures.append(f"exit {code}")

    threads = [threading.Thread(target=caller) for _ in range(cfg.callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cfg.seconds += time.perf_counter() - start


class Template:
    """`pyjail serve` on a socket of its own, for the benchmark's life."""

    def __init__(self, pyjail: str):
        self.dir = tempfile.mkdtemp(prefix="pyjail-bench-")
        self.sock = os.path.join(self.dir, "t.sock")
        self.p = subprocess.Popen([pyjail, "serve", "--quiet", "--socket", self.sock],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        line = self.p.stdout.readline().decode()
        if not line.startswith("pyjail serve: ready"):
            raise SystemExit(f"pyjail serve did not start: {line!r}")

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def measure(pyjail: str, sock: str, callers: list[int], rounds: int, seconds: float) -> list[Config]:
    fresh = [pyjail, "--profile", "strict", "--quiet", "--", *PROGRAM]
    via = [pyjail, "--profile", "strict", "--quiet", "--via", sock, "--", *PROGRAM]
    configs = [Config(kind, argv, n) for kind, argv in ((FRESH, fresh), (TEMPLATE, via))
               for n in callers]
    for cfg in configs[:: len(callers)]:  # warm-up, and fail early
        ms, code = one_run(cfg.argv)
        if code != 0:
            raise SystemExit(f"`{' '.join(cfg.argv)}` failed ({code})")
    rng = random.Random()
    for r in range(rounds):
        order = list(configs)
        rng.shuffle(order)
        print(f"concurrency: round {r + 1} of {rounds}", file=sys.stderr)
        for cfg in order:
            block(cfg, seconds)
    return configs


def table(configs: list[Config]) -> list[str]:
    lines = ["| runs | callers | runs/s | p50 ms | p99 ms | runs timed |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in configs:
        note = f" ({len(c.failures)} failed)" if c.failures else ""
        lines.append(f"| {c.kind}{note} | {c.callers} | {c.rate:.1f} | {pct(c.latencies, 50):.2f} "
                     f"| {pct(c.latencies, 99):.2f} | {len(c.latencies)} |")
    return lines


def plot(configs: list[Config], png: str) -> str | None:
    """The PNG, or why there is none."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no matplotlib in this interpreter (run the benchmark from a venv that has it)"
    fig, (lat, rate) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, colour in ((FRESH, "tab:blue"), (TEMPLATE, "tab:orange")):
        mine = [c for c in configs if c.kind == kind]
        xs = [c.callers for c in mine]
        lat.plot(xs, [pct(c.latencies, 50) for c in mine], "o-", color=colour, label=f"{kind} p50")
        lat.plot(xs, [pct(c.latencies, 99) for c in mine], "s--", color=colour, label=f"{kind} p99")
        rate.plot(xs, [c.rate for c in mine], "o-", color=colour, label=kind)
    for ax in (lat, rate):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c.callers for c in configs}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent callers")
        ax.grid(True, alpha=0.3)
        ax.legend()
    lat.set_yscale("log")
    lat.get_yaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    lat.set_ylabel("latency per run, ms (spawn to exit)")
    rate.set_ylabel("completed runs per second")
    fig.suptitle(f"pyjail strict: python -I -c pass, {os.cpu_count()} CPUs")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block-seconds", type=float, default=1.5)
    ap.add_argument("--callers", default="1,2,4,8,16")
    ap.add_argument("--markdown", help="also write the report to this file")
    ap.add_argument("--png", default=str(HERE / "concurrency.png"))
    args = ap.parse_args()
    callers = [int(n) for n in args.callers.split(",")]
    template = Template(args.pyjail)
    try:
        configs = measure(args.pyjail, template.sock, callers, args.rounds, args.block_seconds)
    finally:
        template.stop()
    failed = [c for c in configs if c.failures]
    why_no_plot = plot(configs, args.png)
    cmdline = " ".join(["bench/concurrency.py"] + sys.argv[1:])
    lines = [f"Produced by `{cmdline}` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z} "
             f"(kernel {platform.release()}, {os.cpu_count()} CPUs, uid {os.geteuid()}): "
             f"{args.rounds} rounds of a {args.block_seconds:g} s block per configuration.", "",
             *table(configs), ""]
    lines.append(f"Plot: {why_no_plot}." if why_no_plot else
                 f"Plot: `{os.path.relpath(args.png, REPO)}`.")
    text = "\n".join(lines) + "\n"
    publish(text, args.markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
