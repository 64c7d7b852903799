#!/usr/bin/env python3
"""Start-up cost of pyjail, side by side with bare python3 and bubblewrap.

These machines are noisy, so the commands are interleaved: every round runs each command once,
in a fresh random order, and the report gives each command's median and its paired median
difference (and ratio) to its baseline in the same rounds, with a bootstrap 95% confidence
interval. The baseline of a jailed command is the same command in bare python3; the baseline
of `pyjail --version` is `/bin/true`, the floor of spawning any process.

bubblewrap runs the nearest equivalent of pyjail's strict jail: the same namespaces, the same
rootfs bound read-only, a new session, --die-with-parent and pyjail's own compiled seccomp
filter (the BPF of the `python` set for `--net none`, handed over on a file descriptor).

This script measures start-up only; bench/run.py measures everything and writes RESULTS.md:

    bench/startup.py [--pyjail build/pyjail] [--rounds 300]
"""
from __future__ import annotations

import argparse
import atexit
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

LEAN = ["-I", "-S", "-c", "pass"]
PLAIN = ["-c", "pass"]
IMPORTS = ["-c", "import json, re, decimal"]

BARE_LEAN = "python3 -I -S -c pass"
BARE_PLAIN = "python3 -c pass"
BARE_IMPORTS = "python3 -c 'import json, re, decimal'"
TRUE = "/bin/true"
JAIL_LEAN = "pyjail strict: python -I -S -c pass"
JAIL_LEAN_NO_SECCOMP = "pyjail strict --seccomp off: python -I -S -c pass"
JAIL_PLAIN = "pyjail strict: python -c pass"
JAIL_IMPORTS = "pyjail strict: python -c 'import json, re, decimal'"
VERSION = "pyjail --version"
BASELINE_LEAN = "baseline pyjail strict: python -I -S -c pass"
BASELINE_VERSION = "baseline pyjail --version"
EXEC_ONLY = "exec only (no C library)"
EMPTY_STATIC = "empty static glibc program"
BWRAP_LEAN = "bwrap + seccomp: python3 -I -S -c pass"
BWRAP_PLAIN = "bwrap + seccomp: python3 -c pass"
BWRAP_LEAN_NO_SECCOMP = "bwrap, no seccomp: python3 -I -S -c pass"
MINIMAL_LEAN = "minimal jail (C probe): python3 -I -S -c pass"
MINIMAL_PLAIN = "minimal jail (C probe): python3 -c pass"
MINIMAL_IMPORTS = "minimal jail (C probe): python3 -c 'import json, re, decimal'"
MINIMAL_JAIL = "minimal_jail"  # the probe binary, in Setup.floor
# The floor probes in bench/floor: (name, source, compiler flags besides -O2).
FLOOR_PROBES = ((EXEC_ONLY, "exec_only.c", ("-nostdlib", "-static")),
                (EMPTY_STATIC, "empty_main.c", ("-static",)),
                (MINIMAL_JAIL, "minimal_jail.c", ("-static",)))
JAIL_PYTHON = "/usr/bin/python3"  # the rootfs's interpreter, as the probe and bubblewrap run it
# When root runs the benchmark, the same -I -S cases again as an unprivileged user: the path
# most users take (the jail writes its own id maps), measured in the same rounds.
UNPRIVILEGED_ID = 65534
AS_USER = f"as uid {UNPRIVILEGED_ID}: "


def relative(arg: str) -> str:
    """A path inside this checkout relative to it (reports must not depend on where it is)."""
    prefix = str(REPO) + os.sep
    return arg[len(prefix):] if arg.startswith(prefix) else arg


def shown(argv: list[str]) -> str:
    """A command line as a shell would take it."""
    return shlex.join(relative(a) for a in argv)


# --- what pyjail uses: its rootfs, profiles and compiled seccomp filter --------------------

def jail_dirs(pyjail: str) -> tuple[str, str]:
    """The rootfs and profile directory the binary uses, from its own --explain."""
    out = subprocess.run([pyjail, "--profile", "strict", "--explain"], capture_output=True,
                         text=True, check=True).stdout
    rootfs = profiles = None
    for line in out.splitlines():
        if line.startswith("rootfs ="):
            rootfs = line.split('"')[1]
        elif "# profile (" in line and profiles is None:
            # e.g. `net = "none"   # profile (/x/profiles/strict.toml:4)`
            profiles = os.path.dirname(line.split("# profile (", 1)[1].rsplit(":", 1)[0])
    if rootfs is None or profiles is None:
        sys.exit(f"startup.py: cannot find the rootfs and profiles in `{pyjail} --explain`")
    return rootfs, profiles


def parse_compiled_filter(data: bytes) -> dict:
    """The fields of a compiled filter file (format: jail/plan/compiled_filter.cpp)."""
    pos = 0

    def line() -> str:
        nonlocal pos
        end = data.index(b"\n", pos)
        text, pos = data[pos:end].decode(), end + 1
        return text

    def count(tag: str) -> int:
        name, n = line().split(" ")
        if name != tag:
            raise ValueError(f"expected {tag!r}, found {name!r}")
        return int(n)

    def blob(tag: str) -> bytes:
        nonlocal pos
        n = count(tag)
        out, pos = data[pos:pos + n], pos + n + 1  # the blob, then its "\n"
        return out

    fields: dict = {}
    if line() != "pyjail-seccomp-filter 1":
        raise ValueError("not a pyjail compiled filter")
    for _ in range(4):  # pyjail, libseccomp, arch, net
        key, value = line().split(" ", 1)
        fields[key] = value
    fields["set"], fields["groups"] = blob("set"), blob("groups")
    fields["allow"] = [line() for _ in range(count("allow"))]
    fields["deny"] = [line() for _ in range(count("deny"))]
    fields["bpf"] = blob("bpf")
    if pos != len(data) or not fields["bpf"] or len(fields["bpf"]) % 8:
        raise ValueError("malformed bpf section")
    return fields


def find_python_filter(pyjail: str, profiles: str) -> tuple[str, bytes] | None:
    """pyjail's compiled BPF for the `python` set with --net none: (file, BPF bytes)."""
    seccomp = Path(profiles, "seccomp")
    want_set = (seccomp / "python.toml").read_bytes()
    want_groups = (seccomp / "groups.toml").read_bytes()
    # Where a build and an install keep them (jail/host/paths.cpp).
    for d in (Path(pyjail).resolve().parent / "seccomp-filters", seccomp / "compiled"):
        for f in sorted(d.glob("*.bpf")):
            try:
                fields = parse_compiled_filter(f.read_bytes())
            except ValueError:
                continue
            if (fields["net"] == "none" and fields["set"] == want_set
                    and fields["groups"] == want_groups):
                return str(f), fields["bpf"]
    return None


class FilterFd:
    """The BPF program in a memfd that bwrap reads with `--seccomp FD`. bwrap reads from the
    shared file offset, so rewind() must run before every launch."""

    def __init__(self, bpf: bytes):
        self.fd = os.memfd_create("pyjail-bench-bpf")
        os.write(self.fd, bpf)

    def rewind(self) -> None:
        os.lseek(self.fd, 0, os.SEEK_SET)


def bwrap_command(rootfs: str, argv: list[str], seccomp_fd: int | None = None) -> list[str]:
    """The nearest bubblewrap equivalent of pyjail's strict jail (no resource limits): like
    pyjail with its default rootfs, the rootfs itself bound read-only as the root, the jail's
    own /proc, /dev, /tmp and /work on it."""
    cmd = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
           "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--tmpfs", "/work", "--chdir", "/work"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd + argv


# --- the cases and the interleaved measurement -------------------------------------------

@dataclass
class Case:
    name: str
    argv: list[str]
    baseline: str | None = None          # the case it is paired with
    pass_fds: tuple[int, ...] = ()
    prepare: Callable[[], None] | None = None  # runs before each launch, outside the timing


@dataclass
class Setup:
    """Everything the start-up cases need, found once."""
    pyjail: str
    python: str
    rootfs: str
    bwrap: bool
    filter_file: str | None = None
    filter_fd: FilterFd | None = None
    floor: dict[str, str] = field(default_factory=dict)  # case name -> probe binary
    minimal_jail: list[str] | None = None  # the checked probe's argv up to the program
    unprivileged: list[str] | None = None  # setpriv's argv, when root runs the benchmark
    baseline: str | None = None  # another pyjail (e.g. the last release) paired with this one
    notes: list[str] = field(default_factory=list)


def build_floor_probes(notes: list[str]) -> dict[str, str]:
    """The start-up floors, compiled from bench/floor into a temporary directory (removed at
    exit): a program without any C library, an empty static glibc program, and the least a jail
    with the strict profile's isolation can do (minimal_jail.c). Each one that builds is used."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        notes.append("no C compiler (apt-get install gcc): no floor lines.")
        return {}
    out = tempfile.mkdtemp(prefix="pyjail-bench-floor-")
    atexit.register(shutil.rmtree, out, True)
    os.chmod(out, 0o755)  # the unprivileged cases run the probes too
    probes = {}
    for name, src, flags in FLOOR_PROBES:
        binary = os.path.join(out, src[:-2])
        r = subprocess.run([cc, "-O2", *flags, "-o", binary, str(HERE / "floor" / src)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            notes.append(f"cannot build bench/floor/{src} ({r.stdout.strip().splitlines()[-1:]}): "
                         "no lines for it.")
            continue
        probes[name] = binary
    if EMPTY_STATIC in probes and EXEC_ONLY not in probes:  # it is paired with exec_only
        del probes[EMPTY_STATIC]
    return probes


def checked_minimal_jail(s: Setup, bpf: bytes) -> list[str] | None:
    """The minimal jail probe's argv up to the program, once a run of it has shown it works
    here and runs its program under the filter; None, with a note, otherwise."""
    bpf_file = os.path.join(os.path.dirname(s.floor[MINIMAL_JAIL]), "python.bpf")
    Path(bpf_file).write_bytes(bpf)
    prefix = [s.floor[MINIMAL_JAIL], s.rootfs, bpf_file, "--"]
    problem = filter_problem(Case("check", prefix + seccomp_line_argv()))
    if problem:
        s.notes.append(f"the minimal jail probe does not run here under the filter ({problem}): "
                       "no minimal jail lines.")
        return None
    return prefix


def setup(pyjail: str, python: str, baseline: str | None = None) -> Setup:
    rootfs, profiles = jail_dirs(pyjail)
    s = Setup(pyjail, python, rootfs, bwrap=shutil.which("bwrap") is not None, baseline=baseline)
    s.floor = build_floor_probes(s.notes)
    found = find_python_filter(pyjail, profiles)
    if found is None:
        s.notes.append("no compiled `python` filter for --net none found next to the binary "
                       "(build it first): no bubblewrap + seccomp and no minimal jail lines.")
    else:
        s.filter_file, bpf = found
        if MINIMAL_JAIL in s.floor:  # the probe reads the same BPF from a file
            s.minimal_jail = checked_minimal_jail(s, bpf)
        if s.bwrap:
            s.filter_fd = FilterFd(bpf)
    if not s.bwrap:
        s.notes.append("bwrap not found (apt-get install bubblewrap): no bubblewrap lines.")
    if os.geteuid() == 0:
        s.unprivileged = checked_unprivileged(s)
    return s


def checked_unprivileged(s: Setup) -> list[str] | None:
    """setpriv's argv to run a command as the unprivileged user, once pyjail has shown it runs
    that way here (the checkout must be readable by that user); None, with a note, otherwise."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        s.notes.append("no setpriv (util-linux): no unprivileged lines.")
        return None
    prefix = [setpriv, f"--reuid={UNPRIVILEGED_ID}", f"--regid={UNPRIVILEGED_ID}", "--clear-groups"]
    r = run_case(Case("check", prefix + strict(s.pyjail, ["python", "-c", "pass"])))
    if r.returncode != 0:
        s.notes.append(f"pyjail does not run as uid {UNPRIVILEGED_ID} from here ({r.returncode}: "
                       f"{r.stderr.decode().strip()}; the checkout must be readable by that "
                       "user): no unprivileged lines.")
        return None
    return prefix


def strict(pyjail: str, argv: list[str], options: tuple[str, ...] = ()) -> list[str]:
    """`pyjail --profile strict -- ARGV` (--quiet: nothing of pyjail's own on stderr)."""
    return [pyjail, "--profile", "strict", "--quiet", *options, "--", *argv]


def startup_cases(s: Setup) -> list[Case]:
    cases = [
        Case(BARE_LEAN, [s.python] + LEAN),
        Case(BARE_PLAIN, [s.python] + PLAIN),
        Case(BARE_IMPORTS, [s.python] + IMPORTS),
        Case(TRUE, ["/bin/true"]),
        Case(JAIL_LEAN, strict(s.pyjail, ["python"] + LEAN), BARE_LEAN),
        Case(JAIL_LEAN_NO_SECCOMP, strict(s.pyjail, ["python"] + LEAN, ("--seccomp", "off")),
             BARE_LEAN),
        Case(JAIL_PLAIN, strict(s.pyjail, ["python"] + PLAIN), BARE_PLAIN),
        Case(JAIL_IMPORTS, strict(s.pyjail, ["python"] + IMPORTS), BARE_IMPORTS),
        Case(VERSION, [s.pyjail, "--version"], TRUE),
    ]
    if s.baseline:  # paired with this build's lines: the difference is what a change cost
        cases += [Case(BASELINE_LEAN, strict(s.baseline, ["python"] + LEAN), JAIL_LEAN),
                  Case(BASELINE_VERSION, [s.baseline, "--version"], VERSION)]
    if EXEC_ONLY in s.floor:
        cases.append(Case(EXEC_ONLY, [s.floor[EXEC_ONLY]]))
    if EMPTY_STATIC in s.floor:
        cases.append(Case(EMPTY_STATIC, [s.floor[EMPTY_STATIC]], EXEC_ONLY))
    if s.minimal_jail:
        cases += [Case(name, s.minimal_jail + [JAIL_PYTHON] + args, base)
                  for name, args, base in ((MINIMAL_LEAN, LEAN, BARE_LEAN),
                                           (MINIMAL_PLAIN, PLAIN, BARE_PLAIN),
                                           (MINIMAL_IMPORTS, IMPORTS, BARE_IMPORTS))]
    if s.bwrap:
        py = JAIL_PYTHON  # the rootfs's own: the rootfs is built from the bare one
        if s.filter_fd is not None:
            fd = s.filter_fd
            for name, args, base in ((BWRAP_LEAN, LEAN, BARE_LEAN),
                                     (BWRAP_PLAIN, PLAIN, BARE_PLAIN)):
                cases.append(Case(name, bwrap_command(s.rootfs, [py] + args, fd.fd), base,
                                  (fd.fd,), fd.rewind))
        cases.append(Case(BWRAP_LEAN_NO_SECCOMP, bwrap_command(s.rootfs, [py] + LEAN),
                          BARE_LEAN))
    return cases


def unprivileged_cases(s: Setup, cases: list[Case]) -> list[Case]:
    """The -I -S cases of `cases` again, as the unprivileged user. setpriv's own exec is in
    every one of them, the bare line included."""
    if not s.unprivileged:
        return []
    wanted = (BARE_LEAN, JAIL_LEAN, MINIMAL_LEAN, BWRAP_LEAN)
    return [Case(AS_USER + c.name, s.unprivileged + c.argv,
                 AS_USER + c.baseline if c.baseline else None, c.pass_fds, c.prepare)
            for c in cases if c.name in wanted]


def spawn_actions(err_fd: int) -> list:
    """posix_spawn's file actions for a timed start: no stdin, stdout discarded, stderr into
    `err_fd` (a file, kept to show why a start failed)."""
    return [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, err_fd, 2)]


def run_case(case: Case, stdout=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return subprocess.run(case.argv, stdin=subprocess.DEVNULL, stdout=stdout,
                          stderr=subprocess.PIPE, pass_fds=case.pass_fds)


def time_once(case: Case) -> float:
    """Wall time of one run in ms; a failed run ends the benchmark.

    posix_spawn and waitpid, with stderr in a file that is read only on failure: as little of
    the harness's own work as possible falls between the two clock readings.
    """
    if case.prepare:
        case.prepare()
    with tempfile.TemporaryFile() as err:
        actions = spawn_actions(err.fileno())
        for fd in case.pass_fds:
            os.set_inheritable(fd, True)
        try:
            start = time.perf_counter_ns()
            pid = os.posix_spawnp(case.argv[0], case.argv, os.environ, file_actions=actions)
            _, status = os.waitpid(pid, 0)
            elapsed = (time.perf_counter_ns() - start) / 1e6
        finally:
            for fd in case.pass_fds:
                os.set_inheritable(fd, False)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            sys.exit(f"bench: `{case.name}` failed ({code}): {err.read().decode().strip()}")
    return elapsed


def seccomp_line_argv() -> list[str]:
    """A program that prints its Seccomp line."""
    code = "print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0])"
    return [JAIL_PYTHON, "-I", "-S", "-c", code]


def filter_problem(case: Case) -> str | None:
    """None when `case` (running seccomp_line_argv) ran its program under a filter (its
    Seccomp line says 2); otherwise what happened."""
    if case.prepare:
        case.prepare()
    r = run_case(case, stdout=subprocess.PIPE)
    line = " ".join(r.stdout.decode().split())
    if r.returncode == 0 and line == "Seccomp: 2":
        return None
    return f"{r.returncode}, {line!r}: {r.stderr.decode().strip()}"


def check_bwrap_filter(s: Setup) -> None:
    """Exits unless bwrap really runs a program under the filter."""
    if s.filter_fd is None:
        return
    fd = s.filter_fd
    problem = filter_problem(Case("check", bwrap_command(s.rootfs, seccomp_line_argv(), fd.fd),
                                  pass_fds=(fd.fd,), prepare=fd.rewind))
    if problem:
        sys.exit(f"bench: bwrap did not run under the filter ({problem})")


def interleave(cases: list[Case], rounds: int) -> dict[str, list[float]]:
    """Each round runs every case once, in a fresh random order."""
    for case in cases:  # warm caches, and fail early
        time_once(case)
    samples: dict[str, list[float]] = {c.name: [] for c in cases}
    rng = random.Random()
    for _ in range(rounds):
        order = list(cases)
        rng.shuffle(order)
        for case in order:
            samples[case.name].append(time_once(case))
    return samples


def measure(s: Setup, rounds: int) -> tuple[list[Case], dict[str, list[float]]]:
    """The start-up cases and their samples over `rounds` interleaved rounds, once bwrap's
    filter is checked."""
    check_bwrap_filter(s)
    cases = startup_cases(s)
    print(f"start-up: {len(cases)} commands, {rounds} interleaved rounds", file=sys.stderr)
    samples = interleave(cases, rounds)
    # The unprivileged group takes rounds of its own: every jail started adds background work
    # (the kernel tears its network namespace down after it exits), so more jails in a round
    # would move the figures above.
    more = unprivileged_cases(s, cases)
    if more:
        print(f"start-up as uid {UNPRIVILEGED_ID}: {len(more)} commands, {rounds} interleaved "
              "rounds of their own", file=sys.stderr)
        samples |= interleave(more, rounds)
    return cases + more, samples


# --- statistics and the table -----------------------------------------------------------

def bootstrap_ci(values: list[float], n: int = 2000) -> tuple[float, float]:
    """95% CI of the median, by resampling (a fixed seed: the same data, the same interval)."""
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


@dataclass
class Paired:
    diff: float                  # median of per-round differences, ms
    diff_ci: tuple[float, float]
    ratio: float                 # median of per-round ratios
    ratio_ci: tuple[float, float]


def paired(samples: dict[str, list[float]], name: str, base: str) -> Paired:
    pairs = list(zip(samples[name], samples[base]))
    diffs = [a - b for a, b in pairs]
    ratios = [a / b for a, b in pairs]
    return Paired(statistics.median(diffs), bootstrap_ci(diffs),
                  statistics.median(ratios), bootstrap_ci(ratios))


def startup_table(cases: list[Case], samples: dict[str, list[float]]) -> list[str]:
    lines = ["| command | median | paired with | difference (median, 95% CI) "
             "| ratio (median, 95% CI) |",
             "|---|---:|---|---|---|"]
    for c in cases:
        med = f"{statistics.median(samples[c.name]):.2f} ms"
        if c.baseline is None:
            lines.append(f"| `{c.name}` | {med} | | | |")
            continue
        p = paired(samples, c.name, c.baseline)
        lines.append(f"| `{c.name}` | {med} | `{c.baseline}` | {p.diff:+.2f} ms "
                     f"[{p.diff_ci[0]:+.2f}, {p.diff_ci[1]:+.2f}] | {p.ratio:.3f} "
                     f"[{p.ratio_ci[0]:.3f}, {p.ratio_ci[1]:.3f}] |")
    return lines


def startup_notes(samples: dict[str, list[float]]) -> list[str]:
    """pyjail's overhead next to bubblewrap's, and what the seccomp filter costs each."""
    def over(name: str, base: str) -> float:  # paired(...).diff, without its intervals
        return statistics.median(a - b for a, b in zip(samples[name], samples[base]))

    out = []
    for jail, bw, base in ((JAIL_LEAN, BWRAP_LEAN, BARE_LEAN), (JAIL_PLAIN, BWRAP_PLAIN, BARE_PLAIN)):
        if bw in samples:
            dj, db = over(jail, base), over(bw, base)
            out.append(f"- `{jail}`: overhead {dj:+.2f} ms over bare python3, against "
                       f"bubblewrap + seccomp's {db:+.2f} ms (paired medians): "
                       f"{dj / db:.2f}x bubblewrap's." if db > 0 else
                       f"- `{jail}`: overhead {dj:+.2f} ms; bubblewrap + seccomp's {db:+.2f} ms.")
    out.append(f"- pyjail's seccomp filter (load + install + notifier): "
               f"{over(JAIL_LEAN, JAIL_LEAN_NO_SECCOMP):+.2f} ms (paired median).")
    if BWRAP_LEAN in samples and BWRAP_LEAN_NO_SECCOMP in samples:
        out.append(f"- bubblewrap's `--seccomp` with the same filter: "
                   f"{over(BWRAP_LEAN, BWRAP_LEAN_NO_SECCOMP):+.2f} ms (paired median).")
    out.append(f"- `{VERSION}` minus `/bin/true`: {over(VERSION, TRUE):+.2f} ms (paired median): "
               "pyjail's own start next to the floor of spawning any process.")
    if MINIMAL_LEAN in samples:
        floor = over(MINIMAL_LEAN, BARE_LEAN)
        line = (f"- The least a jail with strict's isolation costs here (the C probe "
                f"bench/floor/minimal_jail.c: the same namespaces, id maps, mount tree, filter "
                f"and reaping pid 1, and nothing else): {floor:+.2f} ms over bare python3 "
                f"`-I -S`. pyjail's own work "
                f"on top of it: {over(JAIL_LEAN, MINIMAL_LEAN):+.2f} ms (paired median)")
        if BWRAP_LEAN in samples:
            line += (f"; bubblewrap's: {over(BWRAP_LEAN, MINIMAL_LEAN):+.2f} ms. The probe's "
                     f"overhead is {floor / over(BWRAP_LEAN, BARE_LEAN):.2f}x bubblewrap's")
        out.append(line + ".")
    if AS_USER + JAIL_LEAN in samples:
        base = AS_USER + BARE_LEAN
        line = (f"- As uid {UNPRIVILEGED_ID}, in rounds of their own (the jail writes its own id "
                f"maps; each of these commands, bare python3 included, starts through setpriv): "
                f"pyjail "
                f"{over(AS_USER + JAIL_LEAN, base):+.2f} ms over bare python3 `-I -S`")
        if AS_USER + MINIMAL_LEAN in samples:
            line += f", the minimal jail probe {over(AS_USER + MINIMAL_LEAN, base):+.2f} ms"
        line += " (paired medians)"
        if AS_USER + BWRAP_LEAN in samples:
            bw = over(AS_USER + BWRAP_LEAN, base)
            line += f"; bubblewrap + seccomp {bw:+.2f} ms"
            if bw > 0:
                line += f": pyjail {over(AS_USER + JAIL_LEAN, base) / bw:.2f}x bubblewrap's"
                if AS_USER + MINIMAL_LEAN in samples:
                    line += f", the probe {over(AS_USER + MINIMAL_LEAN, base) / bw:.2f}x"
        out.append(line + ".")
    if EMPTY_STATIC in samples:
        out.append(f"- The floor of any process start here: exec alone "
                   f"{statistics.median(samples[EXEC_ONLY]):.2f} ms; an empty static glibc program "
                   f"{statistics.median(samples[EMPTY_STATIC]):.2f} ms, so glibc's own start costs "
                   f"{over(EMPTY_STATIC, EXEC_ONLY):+.2f} ms (paired median). pyjail, bubblewrap "
                   "and python3 each pay it once per run: a jail adds one such start.")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyjail", default=str(REPO / "build" / "pyjail"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--baseline", help="another pyjail binary to pair with --pyjail's lines")
    args = ap.parse_args()

    s = setup(args.pyjail, args.python, args.baseline)
    for note in s.notes:
        print("startup.py:", note, file=sys.stderr)
    cases, samples = measure(s, args.rounds)
    print("\n".join(startup_table(cases, samples) + [""] + startup_notes(samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
