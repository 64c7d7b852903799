#!/usr/bin/env python3
"""Start-up cost of pyjail, side by side with bare python3 and bubblewrap.

These machines are noisy, so the commands are interleaved: every round runs each command once,
in a fresh random order, and the report gives each command's median and its paired median
difference from bare python3 in the same rounds, with a bootstrap 95% confidence interval.

    bench/startup.py [--pyjail build/pyjail] [--rounds 300] [--markdown bench/RESULTS.md]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def bwrap_command(rootfs: str, argv: list[str]) -> list[str]:
    """The nearest bubblewrap equivalent of pyjail's strict jail (no seccomp, no limits)."""
    cmd = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    for entry in sorted(os.listdir(rootfs)):
        path = os.path.join(rootfs, entry)
        if entry in ("proc", "dev", "tmp", "work"):
            continue
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), "/" + entry]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, "/" + entry]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/work",
            "--chdir", "/work", "--remount-ro", "/"]
    return cmd + argv


def time_once(cmd: list[str]) -> float:
    start = time.perf_counter_ns()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if r.returncode != 0:
        sys.exit(f"startup.py: {cmd[0]} failed ({r.returncode}): {r.stderr.decode().strip()}")
    return elapsed


def bootstrap_ci(diffs: list[float], n: int = 2000) -> tuple[float, float]:
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(HERE.parent / "build" / "pyjail"))
    ap.add_argument("--rootfs", default=None, help="rootfs for bwrap (default: pyjail's)")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()

    rootfs = args.rootfs
    if rootfs is None:
        out = subprocess.run([args.pyjail, "--explain"], capture_output=True, text=True, check=True)
        rootfs = next(l.split('"')[1] for l in out.stdout.splitlines() if l.startswith("rootfs ="))

    lean = ["-I", "-S", "-c", "pass"]
    plain = ["-c", "pass"]
    imports = ["-c", "import json, re, decimal"]
    strict = [args.pyjail, "--profile", "strict", "--quiet", "--"]
    cases: dict[str, list[str]] = {}
    baseline: dict[str, str] = {}

    def case(name: str, cmd: list[str], base: str | None = None) -> None:
        cases[name] = cmd
        if base:
            baseline[name] = base

    case("python3 -I -S -c pass", [args.python] + lean)
    case("python3 -c pass", [args.python] + plain)
    case("python3 -c 'import json, re, decimal'", [args.python] + imports)
    case("pyjail strict: python -I -S -c pass", strict + ["python"] + lean, "python3 -I -S -c pass")
    case("pyjail strict --seccomp off: python -I -S -c pass",
         [args.pyjail, "--profile", "strict", "--quiet", "--seccomp", "off", "--", "python"] + lean,
         "python3 -I -S -c pass")
    case("pyjail strict: python -c pass", strict + ["python"] + plain, "python3 -c pass")
    case("pyjail strict: python -c 'import json, re, decimal'", strict + ["python"] + imports,
         "python3 -c 'import json, re, decimal'")
    case("pyjail --version", [args.pyjail, "--version"])
    if shutil.which("bwrap"):
        case("bwrap (same rootfs): python3 -I -S -c pass",
             bwrap_command(rootfs, ["/usr/bin/python3"] + lean), "python3 -I -S -c pass")
        case("bwrap (same rootfs): python3 -c pass",
             bwrap_command(rootfs, ["/usr/bin/python3"] + plain), "python3 -c pass")
    else:
        print("startup.py: bwrap not found (apt-get install bubblewrap); comparing without it",
              file=sys.stderr)

    for cmd in cases.values():  # warm caches, and fail early
        time_once(cmd)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    rng = random.Random()
    for _ in range(args.rounds):
        order = list(cases)
        rng.shuffle(order)
        for name in order:
            samples[name].append(time_once(cases[name]))

    rows = []
    for name, xs in samples.items():
        base = baseline.get(name)
        if base:
            diffs = [a - b for a, b in zip(xs, samples[base])]
            lo, hi = bootstrap_ci(diffs)
            over = f"+{statistics.median(diffs):.2f} ms [{lo:.2f}, {hi:.2f}]"
        else:
            over = ""
        rows.append((name, statistics.median(xs), over))

    def overhead(name: str) -> float:
        return statistics.median(a - b for a, b in zip(samples[name], samples[baseline[name]]))

    ratio = ""
    if "bwrap (same rootfs): python3 -I -S -c pass" in samples:
        for jail, bw in (("pyjail strict: python -I -S -c pass",
                          "bwrap (same rootfs): python3 -I -S -c pass"),
                         ("pyjail strict: python -c pass", "bwrap (same rootfs): python3 -c pass")):
            dj, db = overhead(jail), overhead(bw)
            ratio += (f"\n`{jail}`: overhead {dj:+.2f} ms vs bubblewrap's {db:+.2f} ms over bare "
                      f"python3 (paired medians): {dj / db:.2f}x bubblewrap's.\n")
        seccomp = overhead("pyjail strict: python -I -S -c pass") - overhead(
            "pyjail strict --seccomp off: python -I -S -c pass")
        ratio += f"\nThe seccomp filter (compile + install + notifier) adds {seccomp:+.2f} ms.\n"

    versions = subprocess.run([args.pyjail, "--version"], capture_output=True, text=True).stdout.strip()
    bwv = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip() if shutil.which("bwrap") else "none"
    pyv = subprocess.run([args.python, "-V"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"Date: {datetime.date.today()}, kernel {platform.release()}, {os.cpu_count()} CPUs; "
        f"{versions}, {bwv}, {pyv}; {args.rounds} interleaved rounds.",
        "",
        "| command | median | overhead vs bare python3 (paired median, 95% CI) |",
        "|---|---:|---|",
    ]
    lines += [f"| `{n}` | {m:.2f} ms | {o} |" for n, m, o in rows]
    text = "\n".join(lines) + "\n" + ratio
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(
            "# Start-up benchmark\n\nProduced by `bench/startup.py` "
            f"(`{' '.join(sys.argv[1:]) or 'no options'}`); the exact bwrap command is in "
            "`bwrap_command()` there.\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
