#!/usr/bin/env python3
"""Runs from a template (`pyjail serve` + `pyjail --via`) against fresh jails, interleaved.

A "request" is what a caller does: start `pyjail --via SOCKET -- python -c CODE` (or a fresh
`pyjail -- python -c CODE`); the time measured is from that start to the first line the
program prints, its first statement (`print("ready", flush=True)` after the imports it needs, which a
template has already done). Every round runs each command once, in a fresh random order.

    bench/template.py [--pyjail build/pyjail] [--rounds 100] [--seconds 5] [--block-seconds 0.5]
                      [--markdown FILE] [--baseline-package DIR] [--baseline-pyjail BIN]

Rows: a template with numpy and pandas preloaded against a cold `--rootfs data` jail that
imports them (and the same program as a file, `python FILE`, as Pool.run runs it), and an
empty template against a cold `python -c` jail, with bare python3 for reference; the Python
package's Pool.run end to end; throughput (whole runs per second, and the whole machine's busy
CPU per run) through the numpy/pandas template with 1, 2, 4 and 8 concurrent callers of
`pyjail --via`, and 1, 2 and 4 callers of `Pool.run` with one template and with two
(`Pool(size=2)`), each configuration in short blocks that take turns. With --baseline-package (another
checkout's python/ directory, e.g. `git archive main python | tar -x -C /tmp/base`), that package's
Pool.run too, through the same --pyjail binary, in the same rounds in a fresh random order each.
With --baseline-pyjail (another build's binary), that build's own numpy+pandas template too: its
runs in the same rounds, the paired difference per round, and its throughput beside this one's.
"""
from __future__ import annotations

import argparse
import os
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
from typing import Callable

from publish import publish

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

DATA_CODE = "import numpy, pandas; print('ready', flush=True)"
PLAIN_CODE = "print('ready', flush=True)"


def first_line_ms(argv: list[str]) -> tuple[float, float]:
    """ms from the start to the first line, and to the command's exit."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline()
    t1 = time.perf_counter()
    _, err = p.communicate()
    t2 = time.perf_counter()
    if line != b"ready\n" or p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {line!r} {err.decode()[-500:]}")
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


class Server:
    def __init__(self, pyjail: str, sock: str, args: list[str]):
        self.sock = sock
        self.p = subprocess.Popen([pyjail, "serve", "--quiet", "--socket", sock, *args],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        line = self.p.stdout.readline().decode()
        if not line.startswith("pyjail serve: ready"):
            self.p.kill()
            self.p.wait()
            raise SystemExit(f"pyjail serve {' '.join(args)} did not start: {line!r}")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)


def busy_ticks() -> int:
    """The whole machine's busy CPU time so far, in clock ticks (/proc/stat: user, nice,
    system, irq and softirq; not idle, iowait or a hypervisor's steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


@dataclass
class Load:
    """One throughput configuration: `callers` threads, each calling `run_once` back to back."""
    name: str
    callers: int
    run_once: Callable[[], None]
    runs: int = 0
    seconds: float = 0.0
    ticks: int = 0
    rates: list[float] = field(default_factory=list)   # runs/s of each block

    @property
    def rate(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    def cpu_ms(self) -> float:
        return self.ticks / os.sysconf("SC_CLK_TCK") / self.runs * 1e3 if self.runs else 0.0

    def block(self, seconds: float) -> None:
        """Run for `seconds` (the runs in flight then end first): one block of a round."""
        done = [0] * self.callers
        errors: list[BaseException] = []
        end = time.monotonic() + seconds

        def loop(i):
            try:
                while time.monotonic() < end:
                    self.run_once()
                    done[i] += 1
            except BaseException as e:   # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(self.callers)]
        b, t0 = busy_ticks(), time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        if errors:
            raise SystemExit(f"{self.name}, {self.callers} callers: {errors[0]}")
        self.runs += sum(done)
        self.seconds += wall
        self.ticks += busy_ticks() - b
        self.rates.append(sum(done) / wall)


def via_once(argv: list[str]) -> Callable[[], None]:
    def once():
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode()[-500:])
    return once


def pool_once(pool) -> Callable[[], None]:
    def once():
        res = pool.run("import pandas; print('ready')")
        if res.stdout != "ready\n":
            raise RuntimeError(res.stderr[-500:])
    return once


def throughput(loads: list[Load], seconds: float, block: float) -> None:
    """Every load for `seconds` in all, in blocks of `block` seconds that take turns in a fresh
    random order each round: a machine that slows down or speeds up for a while (this one
    does) slows every load alike, and a ratio of two loads compares the same minutes."""
    rounds = max(1, round(seconds / block))
    for r in range(rounds):
        order = list(loads)
        random.shuffle(order)
        for load in order:
            load.block(block)
        if (r + 1) % 5 == 0:
            print(f"throughput round {r + 1}/{rounds}", file=sys.stderr)


def throughput_lines(loads: list[Load]) -> list[str]:
    """The table, and each load's rate over its own name's one-caller load's."""
    ones = {l.name: l for l in loads if l.callers == 1}
    lines = ["", "| runs through | callers | runs/s | over 1 caller (all blocks; median of the rounds' ratios) "
             "| busy CPU per run (the whole machine) |", "|---|---:|---:|---|---:|"]
    for l in loads:
        one = ones.get(l.name)
        if one is None or one is l:
            ratio = ""
        else:
            per_round = statistics.median(a / b for a, b in zip(l.rates, one.rates))
            ratio = f"{l.rate / one.rate:.2f}x; {per_round:.2f}x"
        lines.append(f"| {l.name} | {l.callers} | {l.rate:.1f} | {ratio} | {l.cpu_ms():.2f} ms |")
    return lines


def load_package(python_dir: str, name: str):
    """The pyjail package of another checkout, imported as `name` beside this one's."""
    import importlib.util
    pkg = os.path.join(python_dir, "pyjail")
    spec = importlib.util.spec_from_file_location(name, os.path.join(pkg, "__init__.py"),
                                                  submodule_search_locations=[pkg])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pool_rounds(packages: dict, rounds: int) -> dict:
    """Pool.run end to end, each package's Pool once a round, in a fresh random order."""
    pools = {k: p.Pool(preload=["numpy", "pandas"], rootfs="data") for k, p in packages.items()}
    times: dict = {k: [] for k in pools}
    try:
        for pool in pools.values():
            pool.run("pass")
        for _ in range(rounds):
            order = list(pools)
            random.shuffle(order)
            for k in order:
                t0 = time.perf_counter()
                res = pools[k].run("import pandas; print('ready')")
                times[k].append((time.perf_counter() - t0) * 1e3)
                assert res.stdout == "ready\n", res.stderr
    finally:
        for pool in pools.values():
            pool.close()
    return times


# `pyjail serve`'s options for the numpy+pandas template, this build's and the baseline's.
DATA_TEMPLATE = ["--rootfs", "data", "--preload", "numpy", "--preload", "pandas"]
BASE_ROW = "baseline's template numpy+pandas: import numpy, pandas"
THIS_ROW = "template numpy+pandas: import numpy, pandas"
VIA_LOAD = "`pyjail --via` the numpy+pandas template"
BASE_VIA_LOAD = "`--via` the baseline's template"
SCRIPT_ROW = "template numpy+pandas: the same as a script (python FILE)"
BASE_SCRIPT_ROW = "baseline's template numpy+pandas: the same as a script"


def paired_lines(times: dict, whole: dict, baseline: str) -> list[str]:
    """This build's numpy+pandas template against the baseline's, round by round."""
    def paired(this, base):
        first = [a - b for a, b in zip(times[this], times[base])]
        to_exit = [a - b for a, b in zip(whole[this], whole[base])]
        return f"first line {statistics.median(first):+.2f} ms, to exit {statistics.median(to_exit):+.2f} ms"
    return [f"- against --baseline-pyjail {baseline} (its own template), this build minus the baseline, "
            f"paired median per round: -c {paired(THIS_ROW, BASE_ROW)}; a script "
            f"{paired(SCRIPT_ROW, BASE_SCRIPT_ROW)}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=5.0, help="throughput: seconds of runs for each "
                    "configuration, in all")
    ap.add_argument("--block-seconds", type=float, default=0.5, help="throughput: the length of one block")
    ap.add_argument("--markdown")
    ap.add_argument("--baseline-package", help="another checkout's python/ directory: its Pool.run "
                    "in the same rounds, through --pyjail's binary")
    ap.add_argument("--baseline-pyjail", help="another build's pyjail: its own numpy+pandas template's runs "
                    "in the same rounds, and its throughput")
    ap.add_argument("--pool-rounds", type=int, default=0, help="Pool.run rounds (default: --rounds, at most 50)")
    a = ap.parse_args()
    pj = os.path.abspath(a.pyjail)
    tmp = tempfile.mkdtemp(prefix="pyjail-bench-")
    data_sock, plain_sock = os.path.join(tmp, "data.sock"), os.path.join(tmp, "plain.sock")
    base_data = os.path.join(tmp, "base-data.sock")
    cmds = {
        "cold data jail: import numpy, pandas": [pj, "--quiet", "--rootfs", "data", "--", "python", "-c", DATA_CODE],
        "template numpy+pandas: import numpy, pandas": [pj, "--quiet", "--rootfs", "data", "--via", data_sock,
                                                        "--", "python", "-c", DATA_CODE],
        "cold jail: python -c print": [pj, "--quiet", "--", "python", "-c", PLAIN_CODE],
        "empty template: python -c print": [pj, "--quiet", "--via", plain_sock, "--", "python", "-c", PLAIN_CODE],
        "bare python3 -c print": [a.python, "-c", PLAIN_CODE],
    }
    # The same as a file, as Pool.run and most callers run a program (python FILE).
    script_dir = os.path.join(tmp, "scripts")
    os.mkdir(script_dir)
    os.chmod(tmp, 0o755)   # the jail's host user, when root runs this, opens the script
    os.chmod(script_dir, 0o755)
    script = os.path.join(script_dir, "main.py")
    Path(script).write_text(DATA_CODE + "\n")
    os.chmod(script, 0o644)
    cmds[SCRIPT_ROW] = [pj, "--quiet", "--rootfs", "data", "--via", data_sock, "--", "python", script]
    if a.baseline_pyjail:
        base_pj = os.path.abspath(a.baseline_pyjail)
        cmds[BASE_ROW] = [base_pj, "--quiet", "--rootfs", "data", "--via", base_data, "--", "python", "-c", DATA_CODE]
        cmds[BASE_SCRIPT_ROW] = [base_pj, "--quiet", "--rootfs", "data", "--via", base_data, "--", "python", script]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    whole: dict[str, list[float]] = {k: [] for k in cmds}
    servers: list[Server] = []
    pools: list = []
    try:
        # Started inside the try: one that cannot start stops those started before it.
        print("starting the templates", file=sys.stderr)
        servers.append(Server(pj, data_sock, DATA_TEMPLATE))
        servers.append(Server(pj, plain_sock, []))
        if a.baseline_pyjail:
            servers.append(Server(os.path.abspath(a.baseline_pyjail), base_data, DATA_TEMPLATE))
        for k, argv in cmds.items():  # warm-up
            first_line_ms(argv)
        for r in range(a.rounds):
            order = list(cmds)
            random.shuffle(order)
            for k in order:
                first, to_exit = first_line_ms(cmds[k])
                times[k].append(first)
                whole[k].append(to_exit)
            if (r + 1) % 20 == 0:
                print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
        sys.path.insert(0, str(REPO / "python"))
        os.environ["PYJAIL_BIN"] = pj
        import pyjail
        packages = {"this build": pyjail}
        if a.baseline_package:
            packages["baseline"] = load_package(os.path.abspath(a.baseline_package), "pyjail_baseline")
        print("Pool.run", file=sys.stderr)
        pool_times = pool_rounds(packages, a.pool_rounds or min(a.rounds, 50))
        pool_ms = pool_times["this build"]
        print("throughput", file=sys.stderr)
        for size in (1, 2):
            pools.append(pyjail.Pool(preload=["numpy", "pandas"], rootfs="data", size=size))
        loads = [Load(VIA_LOAD, n, via_once(cmds[THIS_ROW])) for n in (1, 2, 4, 8)]
        if a.baseline_pyjail:
            loads += [Load(BASE_VIA_LOAD, n, via_once(cmds[BASE_ROW])) for n in (1, 2)]
        for size, pool in zip((1, 2), pools):
            pool.run("pass")
            loads += [Load(f"`Pool(size={size}).run`", n, pool_once(pool)) for n in (1, 2, 4)]
        throughput(loads, a.seconds, a.block_seconds)
    finally:
        for pool in pools:
            pool.close()
        for s in servers:
            s.stop()
    lines = [f"Template runs ({a.rounds} interleaved rounds; ms from the request to the program's first line)",
             "", "| command | p50 ms | p99 ms | to exit: p50 ms | p99 ms |", "|---|---|---|---|---|"]
    for k, xs in times.items():
        lines.append(f"| {k} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} | "
                     f"{statistics.median(whole[k]):.1f} | {pct(whole[k], 0.99):.1f} |")
    cold_d = statistics.median(times["cold data jail: import numpy, pandas"])
    tmpl_d = statistics.median(times["template numpy+pandas: import numpy, pandas"])
    cold_p = statistics.median(times["cold jail: python -c print"])
    tmpl_p = statistics.median(times["empty template: python -c print"])
    bare = statistics.median(times["bare python3 -c print"])
    lines += ["",
              f"- numpy+pandas: cold / template = {cold_d / tmpl_d:.1f}x (p50)",
              f"- nothing preloaded: cold / template = {cold_p / tmpl_p:.2f}x; template / bare python3 = "
              f"{tmpl_p / bare:.2f}x (p50)",
              f"- pyjail.Pool(preload=[numpy, pandas]).run(...) end to end: p50 {statistics.median(pool_ms):.1f} ms, "
              f"p99 {pct(pool_ms, 0.99):.1f} ms"]
    if a.baseline_pyjail:
        lines += paired_lines(times, whole, a.baseline_pyjail)
    if "baseline" in pool_times:
        base = pool_times["baseline"]
        lines += [f"- the same with --baseline-package {a.baseline_package}: p50 {statistics.median(base):.1f} ms, "
                  f"p99 {pct(base, 0.99):.1f} ms; this build / baseline = "
                  f"{statistics.median(pool_ms) / statistics.median(base):.2f}x (p50)"]
    lines += ["", f"Throughput ({a.seconds:g} s of runs each, in blocks of {a.block_seconds:g} s that take turns "
              "in a fresh random order per round; each caller a thread that starts the next run when one "
              f"ends: `--via` runs `python -c \"{DATA_CODE}\"` to its exit, `Pool.run` the cell "
              "`import pandas; print('ready')` to its Result):"]
    lines += throughput_lines(loads)
    publish("\n".join(lines) + "\n", a.markdown)


if __name__ == "__main__":
    main()
