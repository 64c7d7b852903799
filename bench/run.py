#!/usr/bin/env python3
"""All of pyjail's benchmarks in one run, side by side, as one Markdown report.

1. Start-up (startup.py): pyjail's strict jail, bare python3 and bubblewrap with pyjail's own
   seccomp filter, interleaved rounds in random order; paired median differences and ratios
   to bare python3 with bootstrap 95% CIs; `pyjail --version` against `/bin/true`.
2. Session round trip (session.py's round_trips): `pyjail.Session().run("pass")` and the
   protocol ping in a warm session, p50 and p99.
3. Throughput (throughput.py): runs per second of `python -I -S -c pass`, jailed and bare, with
   one caller and with two concurrent callers.
4. The supervisor's peak memory (memory.py): VmHWM of the pyjail process itself.

    bench/run.py --markdown bench/RESULTS.md
    bench/run.py [--pyjail build/pyjail] [--python /usr/bin/python3] [--rounds 300]
                 [--trips 2000] [--throughput-seconds 5] [--memory-runs 10] [--markdown FILE]
    bench/run.py --quick --markdown /tmp/bench.md    # a smoke test: few rounds, short blocks

The report goes to stdout, and with --markdown to FILE too.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import dataclass

import memory
import session
import startup
import throughput
from startup import REPO, shown
from publish import publish

FULL = {"rounds": 300, "trips": 2000, "throughput_seconds": 5.0, "memory_runs": 10}
QUICK = {"rounds": 20, "trips": 200, "throughput_seconds": 2.0, "memory_runs": 5}

MEMORY_CODE = "import time; time.sleep(0.3)"


@dataclass
class Target:
    what: str
    goal: str
    measured: str
    met: bool


def version(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True)
    return (r.stdout or r.stderr).strip() or f"unknown (`{shown(argv)}` printed nothing)"


# --- the four parts ---------------------------------------------------------------------

def run_session(pyjail: str, trips: int) -> tuple[list[float], list[float]]:
    os.environ["PYJAIL_BIN"] = os.path.abspath(pyjail)  # where pyjail.Session() looks
    print(f"session: {trips} cells and {trips} pings", file=sys.stderr)
    return session.round_trips(trips)


def run_throughput(pyjail: str, python: str, seconds: float) -> list[throughput.Config]:
    lean = startup.strict(pyjail, ["python"] + startup.LEAN)
    bare = [python] + startup.LEAN
    configs = [throughput.Config(startup.JAIL_LEAN, lean, 1),
               throughput.Config(startup.JAIL_LEAN, lean, 2),
               throughput.Config(startup.BARE_LEAN, bare, 1),
               throughput.Config(startup.BARE_LEAN, bare, 2)]
    print(f"throughput: {len(configs)} configurations, {seconds:g} s each", file=sys.stderr)
    throughput.measure(configs, seconds)
    return configs


def run_memory(pyjail: str, runs: int) -> tuple[list[str], list[int]]:
    argv = startup.strict(pyjail, ["python", "-I", "-S", "-c", MEMORY_CODE])
    print(f"memory: {runs} runs", file=sys.stderr)
    memory.peak_rss_kib(argv)  # warm-up
    return argv, [memory.peak_rss_kib(argv) for _ in range(runs)]


# --- the report -------------------------------------------------------------------------

def environment(args, s: startup.Setup) -> list[str]:
    bwrap = version(["bwrap", "--version"]) if s.bwrap else "not installed"
    return [
        "| | |", "|---|---|",
        f"| date | {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z} |",
        f"| run by | uid {os.geteuid()}"
        f"{' (and the unprivileged lines as uid ' + str(startup.UNPRIVILEGED_ID) + ')' if s.unprivileged else ''} |",
        f"| kernel | {platform.release()} |",
        f"| CPUs | {os.cpu_count()} |",
        f"| pyjail | {version([args.pyjail, '--version'])} (`{shown([args.pyjail])}`) |",
        *([f"| baseline pyjail | {version([args.baseline, '--version'])} "
            f"(`{shown([args.baseline])}`) |"] if args.baseline else []),
        f"| bubblewrap | {bwrap} |",
        f"| Python | {version([args.python, '-V'])} (`{args.python}`, also the rootfs's) |",
        f"| start-up | {args.rounds} interleaved rounds |",
        f"| session | {args.trips} cells, {args.trips} pings |",
        f"| throughput | {args.throughput_seconds:g} s per configuration |",
        f"| memory | {args.memory_runs} runs |",
    ]


def targets_table(samples, cells, configs, peaks) -> list[str]:
    targets = []
    lean = startup.paired(samples, startup.JAIL_LEAN, startup.BARE_LEAN)
    targets.append(Target(f"jail overhead `{startup.JAIL_LEAN}` over `{startup.BARE_LEAN}`",
                          "<= 2.0 ms", f"{lean.diff:+.2f} ms [{lean.diff_ci[0]:+.2f}, "
                          f"{lean.diff_ci[1]:+.2f}]", lean.diff <= 2.0))
    if startup.BWRAP_LEAN in samples:
        bw = startup.paired(samples, startup.BWRAP_LEAN, startup.BARE_LEAN)
        share = lean.diff / bw.diff if bw.diff > 0 else float("inf")
        targets.append(Target("jail overhead / bubblewrap's (+ seccomp), same rounds", "<= 0.5",
                              f"{share:.2f} ({lean.diff:+.2f} ms / {bw.diff:+.2f} ms)",
                              share <= 0.5))
    version_ms = statistics.median(samples[startup.VERSION])
    true_ms = statistics.median(samples[startup.TRUE])
    targets.append(Target("`pyjail --version`", "<= 1 ms",
                          f"{version_ms:.2f} ms (`/bin/true`: {true_ms:.2f} ms)", version_ms <= 1.0))
    for name, base in ((startup.JAIL_PLAIN, startup.BARE_PLAIN),
                       (startup.JAIL_IMPORTS, startup.BARE_IMPORTS)):
        p = startup.paired(samples, name, base)
        targets.append(Target(f"end to end `{name}` / `{base}`", "<= 1.0",
                              f"{p.ratio:.3f} [{p.ratio_ci[0]:.3f}, {p.ratio_ci[1]:.3f}]",
                              p.ratio <= 1.0))
    targets.append(Target("`Session().run('pass')` p50", "<= 0.1 ms",
                          f"{session.pct(cells, 50):.3f} ms", session.pct(cells, 50) <= 0.1))
    targets.append(Target("`Session().run('pass')` p99", "<= 1 ms",
                          f"{session.pct(cells, 99):.3f} ms", session.pct(cells, 99) <= 1.0))
    (jail1, jail2), (bare1, bare2) = pairs(configs)
    scale = speedup(jail1, jail2)
    targets.append(Target(f"throughput of `{jail1.name}`, 2 callers / 1", ">= 1.7x",
                          f"{scale:.2f}x (bare python3: {speedup(bare1, bare2):.2f}x)",
                          scale >= 1.7))
    peak = statistics.median(peaks) / 1024
    targets.append(Target("supervisor peak RSS (median VmHWM)", "<= 4 MiB", f"{peak:.2f} MiB",
                          peak <= 4.0))
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    lines += [f"| {t.what} | {t.goal} | {t.measured} | {'yes' if t.met else '**no**'} |"
              for t in targets]
    return lines


def pairs(configs: list[throughput.Config]) -> list[tuple[throughput.Config, throughput.Config]]:
    """(1 caller, 2 callers) per command, in run_throughput's order."""
    return list(zip(configs[::2], configs[1::2]))


def speedup(one: throughput.Config, two: throughput.Config) -> float:
    return two.rate / one.rate if one.rate else 0.0


def throughput_table(configs: list[throughput.Config]) -> list[str]:
    lines = ["| command | 1 caller | 2 callers | 2 / 1 |", "|---|---:|---:|---:|"]
    for one, two in pairs(configs):
        scale = speedup(one, two)
        failed = one.failures + two.failures
        note = f" ({failed} runs failed)" if failed else ""
        lines.append(f"| `{one.name}`{note} | {one.rate:.1f} runs/s ({one.runs} runs) | "
                     f"{two.rate:.1f} runs/s ({two.runs} runs) | {scale:.2f}x |")
    return lines


def memory_table(peaks: list[int]) -> list[str]:
    mib = [k / 1024 for k in peaks]
    return ["| median | min | max | runs |", "|---:|---:|---:|---:|",
            f"| {statistics.median(mib):.2f} MiB | {min(mib):.2f} MiB | {max(mib):.2f} MiB "
            f"| {len(mib)} |"]


def commands_section(s: startup.Setup, cases, memory_argv) -> list[str]:
    """The exact command lines; bubblewrap's long prefix is written once as $BWRAP."""
    prefix = startup.bwrap_command(s.rootfs, []) if s.bwrap else None

    floor = {path: name for name, path in s.floor.items()}
    floor_source = {name: f"bench/floor/{src}, cc -O2 {' '.join(flags)}"
                    for name, src, flags in startup.FLOOR_PROBES}

    def cmd(argv: list[str]) -> str:
        user = s.unprivileged
        if user and argv[:len(user)] == user:
            return shown(user) + " " + cmd(argv[len(user):])
        if prefix and argv[:len(prefix)] == prefix:
            return "$BWRAP " + shown(argv[len(prefix):])
        if argv[0] in floor:  # built in a temporary directory: name the source instead
            name = floor[argv[0]]
            if name == startup.MINIMAL_JAIL:  # ROOTFS FILTER -- PROGRAM...
                return f"minimal_jail {shown([argv[1]])} python.bpf {shown(argv[3:])}"
            return floor_source[name]
        return shown(argv)

    lines = ["| name | command |", "|---|---|"]
    lines += [f"| `{c.name}` | `{cmd(c.argv)}` |" for c in cases]
    lines.append(f"| supervisor memory | `{cmd(memory_argv)}` |")
    lines.append("")
    if s.minimal_jail:
        lines += [f"`minimal_jail` is `{floor_source[startup.MINIMAL_JAIL]}`; its `python.bpf` "
                  f"is the `bpf` section (raw `struct sock_filter`s) of "
                  f"`{shown([s.filter_file])}`, pyjail's compiled `python` set for `--net none` "
                  "(with no listener, a refused call gets `ENOSYS`). Before timing, the harness "
                  "checks that a program under the probe reports `Seccomp: 2`.", ""]
    lines.append("Throughput runs the two `-I -S -c pass` commands above; the session part runs "
                 "`pyjail.Session()` (profile `repl`) from `python/` of this checkout.")
    if prefix:
        lines += ["", "```", 'BWRAP="' + wrap(prefix) + '"', "```"]
        if s.filter_fd is not None:
            lines += ["", f"`--seccomp {s.filter_fd.fd}` reads a memfd holding the `bpf` section "
                      f"(raw `struct sock_filter`s) of `{shown([s.filter_file])}`: pyjail's "
                      "compiled `python` set for `--net none`. Its default action is "
                      "`SECCOMP_RET_USER_NOTIF`; with no listener the kernel answers `ENOSYS`. "
                      "Before timing, the harness checks that a program under bwrap reports "
                      "`Seccomp: 2` (a filter in force)."]
    return lines


def wrap(argv: list[str], width: int = 96) -> str:
    """A long command line broken between options, with backslash continuations."""
    units: list[list[str]] = []
    for arg in argv:  # each option with its arguments
        if arg.startswith("--") or not units:
            units.append([arg])
        else:
            units[-1].append(arg)
    lines, cur = [], ""
    for unit in units:
        text = shown(unit)
        if cur and len(cur) + 1 + len(text) > width:
            lines.append(cur)
            cur = "    " + text
        else:
            cur = f"{cur} {text}" if cur else text
    return " \\\n".join(lines + [cur])


def report(args, s, cases, samples, cells, pings, configs, memory_argv, peaks) -> str:
    cmdline = " ".join(["bench/run.py"] + sys.argv[1:])
    lines = [
        "# pyjail benchmarks",
        "",
        f"Produced in one run by `{cmdline}`.",
        "",
        *environment(args, s),
        "",
        "## Targets",
        "",
        *targets_table(samples, cells, configs, peaks),
        "",
        "## 1. Start-up and jail overhead",
        "",
        "Every round runs each command once, in a fresh random order; a command is compared with "
        "its pair in the same rounds (median of the per-round differences and ratios, bootstrap "
        "95% CI). The time is the wall time from spawning the command to reaping it; every run's "
        "exit status is checked (a failure stops the benchmark). The jails run the rootfs's "
        "copy of the interpreter and its libraries, the bare commands the host's: on this kind "
        "of VM, byte-identical copies of the rootfs have measured up to 0.3 ms apart per start "
        "in the same rounds, and a rebuild of the rootfs can move that, so differences to bare "
        "python3 smaller than that are within what the files' placement does. pyjail and "
        "bubblewrap run the same files.",
        "",
        *startup.startup_table(cases, samples),
        "",
        *startup.startup_notes(samples),
        "",
        "## 2. Session round trip",
        "",
        "One warm `pyjail.Session()` (after 50 warm-up cells): wall time of each "
        "`run('pass')` and of each protocol `ping()`.",
        "",
        *session.session_table(cells, pings),
        "",
        "## 3. Throughput",
        "",
        "Completed runs per second; each caller is a thread launching the command back to back. "
        "The four configurations take turns in 1 s blocks in random order; runs still going at "
        "the end of a block count, with the time they took. The bare line shows what the machine "
        f"itself allows with {os.cpu_count()} CPUs.",
        "",
        *throughput_table(configs),
        "",
        "## 4. The supervisor's peak memory",
        "",
        "VmHWM of the pyjail process itself (not of its jail's processes), from "
        f"`/proc/PID/status` polled every {memory.POLL_SECONDS * 1e3:g} ms until it exits; "
        "the last value read counts.",
        "",
        *memory_table(peaks),
        "",
        "## Commands",
        "",
        *commands_section(s, cases, memory_argv),
    ]
    notes = [f"- {n}" for n in s.notes]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--python", default="/usr/bin/python3", help="the bare interpreter")
    ap.add_argument("--quick", action="store_true",
                    help="defaults for a smoke test: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    ap.add_argument("--rounds", type=int, help=f"start-up rounds ({FULL['rounds']})")
    ap.add_argument("--trips", type=int, help=f"session cells and pings ({FULL['trips']})")
    ap.add_argument("--throughput-seconds", type=float,
                    help=f"per configuration ({FULL['throughput_seconds']:g})")
    ap.add_argument("--memory-runs", type=int, help=f"({FULL['memory_runs']})")
    ap.add_argument("--markdown", help="also write the report to this file")
    ap.add_argument("--baseline", help="another pyjail binary (e.g. the last release's build): "
                                       "its start-up lines are paired with --pyjail's")
    args = ap.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> int:
    args = parse_args()
    s = startup.setup(args.pyjail, args.python, args.baseline)
    for note in s.notes:
        print("bench:", note, file=sys.stderr)
    cases, samples = startup.measure(s, args.rounds)
    cells, pings = run_session(args.pyjail, args.trips)
    configs = run_throughput(args.pyjail, args.python, args.throughput_seconds)
    memory_argv, peaks = run_memory(args.pyjail, args.memory_runs)
    text = report(args, s, cases, samples, cells, pings, configs, memory_argv, peaks)
    publish(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
