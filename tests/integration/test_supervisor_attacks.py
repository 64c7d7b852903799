"""Attacks on the supervisor: what a jail does must not cost the host unbounded memory or CPU,
stop a deadline, keep pyjail alive after it was told to stop, or hide what the jail used.

Each test runs pyjail as root and as an unprivileged user (`as_user`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

# The report's denied-syscall table: at most this many named entries, plus one that counts
# the rest (README.md, "The result report").
MAX_DENIED_ENTRIES = 32
OTHER = "(other syscalls)"

# Denied syscalls whose natural key would carry a raw value the jail chose: personality()
# with a new persona, socket() of unknown families, ioctl() requests with junk in the high
# half, and syscall numbers no kernel has. Each call uses a new value.
FLOOD = """\
import ctypes, itertools, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long] + [ctypes.c_ulong] * 3
count = int(sys.argv[1])   # 0: until killed
def flood(start):
    for i in (itertools.count(start) if count == 0 else range(start, start + count)):
        libc.syscall(135, 0x10000000 + i, 0, 0)                 # personality
        libc.syscall(41, 100 + (i % 100000), 1, 0)             # socket, no such family
        libc.syscall(16, 0, (1 << 32) | (i & 0xffffffff), 0)  # ioctl, junk in the high half
        libc.syscall(1000 + (i % 100000), 0, 0, 0)             # no such syscall
print("flooding", flush=True)
threads = [threading.Thread(target=flood, args=(k * 10**7,)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
"""

# A raw value in a key: hex, or a bare number where a name belongs.
RAW_VALUE = re.compile(r"0x[0-9a-f]+|\(family \d+|syscall_\d+|\(\d+")


def run_measured(cmd: list[str], timeout: float) -> tuple[int, float, int, float, bytes]:
    """Runs pyjail; returns its exit status, the seconds it took, its own peak RSS (kB) and its
    own CPU seconds (not its children's: the jail's are counted apart), and its stdout."""
    started = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, cwd="/")
    os.set_blocking(p.stdout.fileno(), False)
    out, hwm, fields = b"", 0, None
    tick = os.sysconf("SC_CLK_TCK")
    try:
        while time.monotonic() - started < timeout:
            try:
                out += p.stdout.read() or b""
                with open(f"/proc/{p.pid}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2:].split()
                if fields[0] == "Z":  # exited, not yet waited for: its totals are final
                    break
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm = max(hwm, int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
    finally:
        if p.poll() is None and (fields is None or fields[0] != "Z"):
            p.kill()
        rc = p.wait()
    out += p.stdout.read() or b""
    cpu = (int(fields[11]) + int(fields[12])) / tick if fields else 0.0
    return rc, time.monotonic() - started, hwm, cpu, out


def check_denied_table(report: dict) -> int:
    """The table's bounds and keys; returns the total count."""
    denied = report["denied_syscalls"]
    assert len(denied) <= MAX_DENIED_ENTRIES + 1, f"{len(denied)} entries"
    for d in denied:
        assert not RAW_VALUE.search(d["syscall"]), f"a raw value in a key: {d['syscall']}"
        assert 0 < d["count"] < 2**64
    assert [d["syscall"] for d in denied].count(OTHER) <= 1
    return sum(d["count"] for d in denied)


def test_a_flood_of_denied_calls_is_cut_by_the_wall_time(pyjail_command, world_tmp, as_user,
                                                          helpers):
    report = world_tmp.dir(0o777) / "report.json"
    cmd = [*pyjail_command(as_user), "--quiet", "--wall-time", "2", "--report", str(report),
           "--", "python3", "-c", FLOOD, "0"]
    rc, elapsed, hwm_kb, supervisor_cpu, out = run_measured(cmd, timeout=60)
    assert out.startswith(b"flooding\n"), out
    assert rc == 124, rc
    assert elapsed < 15, f"the wall time of 2 s ended the run after {elapsed:.1f} s"
    rep = json.loads(report.read_text())
    assert rep["status"] == "wall-timeout"
    assert check_denied_table(rep) > 0
    assert rep["denied_syscalls_throttled"] > 0, "nothing was throttled"
    # Bounds, not speeds: a fixed table, and the supervisor answering at a bounded rate.
    assert hwm_kb < 32 * 1024, f"supervisor peak RSS {hwm_kb} kB"
    assert supervisor_cpu < 1.5, f"the supervisor spent {supervisor_cpu:.2f} s of CPU"


def test_a_flood_that_ends_is_counted_in_full(run_jail, world_tmp, as_user, helpers):
    report = world_tmp.dir(0o777) / "report.json"
    calls = 1500  # per thread and syscall: 4 x 4 x 1500 = 24000 denied calls
    r = run_jail(["--quiet", "--report", report, "--", "python3", "-c", FLOOD, str(calls)],
                 user=as_user, timeout=120)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "flooding\ndone\n"
    rep = json.loads(report.read_text())
    assert rep["status"] == "ok"
    # Every refused call is counted, in one of a bounded number of entries.
    assert check_denied_table(rep) >= 4 * 4 * calls
    keys = {d["syscall"] for d in rep["denied_syscalls"]}
    assert {"personality(other)", "socket(other family)", "ioctl(other request)",
            "unknown syscall"} <= keys, keys


IGNORES_SIGTERM = """\
import signal, subprocess, sys, time
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
    signal.signal(s, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(120)", sys.argv[1]])
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_jail_that_ignores_sigterm_is_killed_after_the_grace(popen_jail, world_tmp, as_user,
                                                               token, helpers, no_leftovers):
    report = world_tmp.dir(0o777) / "report.json"
    p = popen_jail(["--wall-time", "120", "--kill-grace", "1", "--report", report, "--",
                    "python3", "-c", IGNORES_SIGTERM, token], user=as_user)
    assert helpers.read_line(p.stdout, 15) == b"ready\n"
    sent = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    assert 0.9 < elapsed < 11, f"ended {elapsed:.1f} s after SIGTERM, with --kill-grace 1"
    assert p.returncode == 128 + signal.SIGKILL, (p.returncode, err)
    rep = json.loads(report.read_text())
    assert rep["status"] == "grace-timeout", rep["status"]
    assert rep["relayed_signal"] == "SIGTERM"
    assert b"SIGTERM" in err and b"--kill-grace" in err, err
    assert helpers.wait_until_gone(token) == {}, "a process of the jail outlived the kill"


def test_the_default_grace_is_finite(popen_jail, world_tmp, as_user, token, helpers):
    report = world_tmp.dir(0o777) / "report.json"
    p = popen_jail(["--report", report, "--", "python3", "-c", IGNORES_SIGTERM, token],
                   user=as_user)
    assert helpers.read_line(p.stdout, 15) == b"ready\n"
    sent = time.monotonic()
    p.send_signal(signal.SIGHUP)
    p.communicate(timeout=40)
    assert time.monotonic() - sent < 5 + 15
    rep = json.loads(report.read_text())
    assert (rep["status"], rep["relayed_signal"]) == ("grace-timeout", "SIGHUP")


def test_a_jail_that_obeys_sigterm_is_not_called_a_grace_timeout(popen_jail, world_tmp,
                                                                  as_user, helpers):
    report = world_tmp.dir(0o777) / "report.json"
    p = popen_jail(["--kill-grace", "30", "--report", report, "--", "python3", "-c",
                    "import time\nprint('ready', flush=True)\ntime.sleep(60)"], user=as_user)
    assert helpers.read_line(p.stdout, 15) == b"ready\n"
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=15)
    assert p.returncode == 128 + signal.SIGTERM
    rep = json.loads(report.read_text())
    assert (rep["status"], rep["signal_name"], rep["relayed_signal"]) == \
        ("signal", "SIGTERM", "SIGTERM")


# The program and a child of it burn CPU and say, ten times a second, how much each has used.
BUSY_AND_TELL = """\
import os, subprocess, sys, time
def burn(tag):
    last = 0.0
    while True:
        t = time.process_time()
        if t - last >= 0.1:
            last = t
            os.write(1, f"{tag} {t:.3f}\\n".encode())
if len(sys.argv) > 1:
    burn("child")
subprocess.Popen([sys.executable, __file__, "child"])
burn("main")
"""


def test_a_busy_jail_killed_by_the_wall_time_reports_its_cpu(run_jail, world_tmp, as_user,
                                                             helpers, no_leftovers):
    report = world_tmp.dir(0o777) / "report.json"
    script = world_tmp.script(BUSY_AND_TELL, "busy.py")
    r = run_jail(["--wall-time", "2", "--report", report, "--", "python3", script],
                 user=as_user, timeout=30)
    assert r.returncode == 124, helpers.describe(r)
    # What each process had used by its last line: a floor for the jail's CPU time.
    last = {}
    for line in r.stdout.splitlines():
        tag, used = line.split()
        last[tag] = float(used)
    assert set(last) == {"main", "child"}, r.stdout
    rep = json.loads(report.read_text())
    cpu = rep["cpu_user_s"] + rep["cpu_system_s"]
    assert rep["usage_partial"] is False, rep
    assert cpu >= sum(last.values()), f"report: {cpu:.3f} s, the processes said {last}"
