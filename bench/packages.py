#!/usr/bin/env python3
"""Imports of third-party packages: a jail on the `data` rootfs against the host's interpreter
in a virtualenv with the same package versions.

Each round runs every command once, in a fresh random order (the machine is noisy), and each
jailed command is compared with the same import by the venv's interpreter in the same rounds:
paired median difference and ratio with bootstrap 95% CIs, as bench/startup.py does, of the
wall time and of the CPU time (which a loaded machine moves less).

- `pyjail --profile strict --rootfs data -- python -c 'import numpy, pandas'` against
  `VENV/bin/python -c 'import numpy, pandas'`, and the same for `import matplotlib.pyplot`.
- The venv is made with the rootfs's interpreter (/usr/bin/python3) and the versions of
  rootfs/data-requirements.txt, from the wheels the `rootfs-data` target downloaded into the
  build directory (offline); pip byte-compiles it at install, and a warm-up run leaves the
  venv's matplotlib font cache in place, so neither side compiles or builds anything while it
  is timed.
- Every command starts in a session of its own (the jail makes one anyway; see time_once).
- Before timing, one jailed run checks that the imports print nothing and write nothing (no
  file appears under /tmp or /work, the jail's only writable places).

    bench/packages.py [--pyjail build/pyjail] [--rounds 60] [--wheels build/data-wheels]
                      [--venv DIR] [--markdown FILE]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

import startup
from startup import REPO, Case, shown
from publish import publish

IMPORTS = {
    "import numpy, pandas": "import numpy, pandas",
    "import matplotlib.pyplot": "import matplotlib.pyplot",
}
PACKAGES = ("numpy", "pandas", "matplotlib")
REQUIREMENTS = REPO / "rootfs" / "data-requirements.txt"

# Run once in the jail before timing: the imports must leave no file and print nothing.
CHECK = """
import os, sys
def files():
    return sorted(os.path.join(d, f) for top in ("/tmp", "/work")
                  for d, _, fs in os.walk(top) for f in fs)
before = files()
import numpy, pandas, matplotlib.pyplot
print(before == files() == [], numpy.__version__, pandas.__version__)
"""


def make_venv(python: str, wheels: str, where: str) -> str:
    venv = os.path.join(where, "venv")
    subprocess.run([python, "-m", "venv", venv], check=True)
    r = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "--no-index", "--find-links", wheels,
                        "--constraint", str(REQUIREMENTS), *PACKAGES],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: cannot make the venv from {wheels} (cmake --build build --target "
                 f"rootfs-data downloads the wheels): {r.stdout.strip()[-400:]}")
    return venv


def versions(argv: list[str]) -> str:
    code = "import numpy, pandas, matplotlib; print(numpy.__version__, pandas.__version__, " \
           "matplotlib.__version__)"
    r = subprocess.run([*argv, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: `{shown(argv)}` cannot import the packages: {r.stderr.strip()}")
    return r.stdout.strip()


def check_jail(jail: list[str]) -> None:
    r = subprocess.run([*jail, "-c", CHECK], capture_output=True, text=True)
    if r.returncode != 0 or r.stderr or not r.stdout.startswith("True "):
        sys.exit("bench: the jailed imports must succeed, print nothing and write nothing: "
                 f"exit {r.returncode}, stdout {r.stdout.strip()!r}, stderr {r.stderr.strip()!r}")


def time_once(case: Case) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the command's and its waited-for descendants':
    for pyjail, the jail's too) of one run, in ms; a failed run ends the benchmark. CPU time
    is what a loaded machine moves least."""
    with tempfile.TemporaryFile() as err:
        actions = startup.spawn_actions(err.fileno())
        start = time.perf_counter_ns()
        # A session of its own, for both sides: the jail calls setsid(), and with the kernel's
        # autogroup scheduling a new session is a new group with its own fair share of the
        # CPUs; on a loaded machine that alone made the jailed import's wall time a third of
        # the bare one's in the same rounds.
        pid = os.posix_spawnp(case.argv[0], case.argv, os.environ, file_actions=actions,
                              setsid=True)
        _, status, usage = os.wait4(pid, 0)
        wall = (time.perf_counter_ns() - start) / 1e6
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            sys.exit(f"bench: `{case.name}` failed ({code}): {err.read().decode().strip()}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3


def interleave(cases: list[Case], rounds: int) -> tuple[dict, dict]:
    """Each round runs every case once, in a fresh random order: (wall, cpu) samples."""
    for case in cases:  # warm caches, and fail early
        time_once(case)
    wall: dict[str, list[float]] = {c.name: [] for c in cases}
    cpu: dict[str, list[float]] = {c.name: [] for c in cases}
    rng = random.Random()
    for _ in range(rounds):
        order = list(cases)
        rng.shuffle(order)
        for case in order:
            w, c = time_once(case)
            wall[case.name].append(w)
            cpu[case.name].append(c)
    return wall, cpu


def cases(jail: list[str], venv_python: str) -> list[Case]:
    out = []
    for name, code in IMPORTS.items():
        bare = f"venv python3: {name}"
        out.append(Case(bare, [venv_python, "-c", code]))
        out.append(Case(f"pyjail strict --rootfs data: {name}", [*jail, "-c", code], bare))
    return out


def report(args, venv_python, found, all_cases, wall, cpu) -> list[str]:
    lines = [
        f"Produced by `{' '.join(['bench/packages.py'] + sys.argv[1:])}` on "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z} (kernel {platform.release()}, "
        f"{os.cpu_count()} CPUs, uid {os.geteuid()}), {args.rounds} interleaved rounds. "
        f"numpy, pandas, matplotlib: {found} on both sides.",
        "",
        "| target | goal | measured | met |", "|---|---|---|---|",
    ]
    for what, samples in (("wall time", wall), ("CPU time", cpu)):
        for c in all_cases:
            if c.baseline is None:
                continue
            p = startup.paired(samples, c.name, c.baseline)
            lines.append(f"| {what}: `{c.name}` / `{c.baseline}` | <= 1.0 | {p.ratio:.3f} "
                         f"[{p.ratio_ci[0]:.3f}, {p.ratio_ci[1]:.3f}] | "
                         f"{'yes' if p.ratio <= 1.0 else '**no**'} |")
    lines += ["", "Wall time:", "", *startup.startup_table(all_cases, wall), "",
              "CPU time (user + system, pyjail's and the jail's processes included):", "",
              *startup.startup_table(all_cases, cpu), "",
              "| name | command |", "|---|---|"]
    lines += [f"| `{c.name}` | `{shown(c.argv)}` |" for c in all_cases]
    lines += ["", f"`VENV` is `{shown([args.python])} -m venv` with `pip install --no-index "
              f"--find-links {shown([args.wheels])} --constraint rootfs/data-requirements.txt "
              f"{' '.join(PACKAGES)}`. Before timing, one jailed run imported numpy, pandas and "
              "matplotlib.pyplot and found no file under `/tmp` or `/work` and nothing on "
              "stderr."]
    return [line.replace(venv_python, "VENV/bin/python") for line in lines]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--rootfs", default="data")
    ap.add_argument("--python", default="/usr/bin/python3", help="the venv's interpreter")
    ap.add_argument("--wheels", default=str(REPO / "build" / "data-wheels"))
    ap.add_argument("--venv", help="an existing venv with the same versions (default: make one)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--markdown", help="also write the report to this file")
    args = ap.parse_args()

    jail = [args.pyjail, "--profile", "strict", "--quiet", "--rootfs", args.rootfs, "--",
            "python"]
    tmp = tempfile.mkdtemp(prefix="pyjail-bench-")
    try:
        venv = args.venv or make_venv(args.python, args.wheels, tmp)
        venv_python = os.path.join(venv, "bin", "python")
        found, in_jail = versions([venv_python]), versions(jail)
        if found != in_jail:
            sys.exit(f"bench: the venv has {found}, the jail {in_jail}: not the same versions")
        check_jail(jail)
        all_cases = cases(jail, venv_python)
        print(f"packages: {len(all_cases)} commands, {args.rounds} interleaved rounds",
              file=sys.stderr)
        wall, cpu = interleave(all_cases, args.rounds)
        text = "\n".join(report(args, venv_python, found, all_cases, wall, cpu)) + "\n"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    publish(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
