"""Attacks through the kernel's queue of pending signals, from a fresh jail and from a run of a
template, as root and as an unprivileged user.

Queued signals (real-time signals, sigqueue, POSIX timers) are counted per host user, across
user namespaces: a jail that queued until the kernel refused took its host user's whole
budget, and that user's own sigqueue() and timer_create() failed. With the queue full, the
kernel delivers a kill() of a real-time signal without the sender's identity, as if it came
from outside the jail: pid 1 took the program's kill(1, SIGRTMIN) for the supervisor's
request to end the jail, and the run ended without the program's status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import read_line
from pyjail_testing.runs import describe

# Creates POSIX timers (each holds one queued signal) until the kernel refuses: the jail's
# share of its host user's pending signals is then used up. Prints how many it got.
FILL_QUEUE = """
    import ctypes, errno, json, os, signal, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    timer = ctypes.c_void_p()
    n = 0
    while n < 2_000_000 and libc.timer_create(1, None, ctypes.byref(timer)) == 0:
        n += 1
    print(json.dumps({"timers": n, "errno": errno.errorcode.get(ctypes.get_errno())}), flush=True)
"""

# What the host user can still do while the jail holds its signals: queue a signal to itself,
# create a timer.
HOST_CHECK = """
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN + 3})
def check(rc):
    return "ok" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
timer = ctypes.c_void_p()
print(json.dumps({"sigqueue": check(libc.sigqueue(os.getpid(), signal.SIGRTMIN + 3, None)),
                  "timer_create": check(libc.timer_create(1, None, ctypes.byref(timer)))}))
"""


def door_args(door, user, serve) -> list[str]:
    """pyjail's options for a run through `door`: a fresh jail, or a run of a template."""
    if door == "fresh":
        return ["--quiet"]
    sock, _ = serve(user)
    return ["--quiet", "--via", sock]


@pytest.mark.parametrize("door", ["fresh", "template"])
def test_a_jail_cannot_take_its_host_users_pending_signals(popen_jail, serve, as_user, door):
    code = textwrap.dedent(FILL_QUEUE) + "sys.stdin.readline()\n"
    p = popen_jail([*door_args(door, as_user, serve), "--", "python", "-c", code], user=as_user,
                   stdin=subprocess.PIPE)
    line = read_line(p.stdout, 120)
    assert line, p.stderr.read().decode() if p.poll() is not None else "the jail said nothing"
    filled = json.loads(line)
    # The host user (who runs pyjail: its jails' user namespaces are that user's) still has
    # its own budget while the jail holds what it could get.
    host = subprocess.run([*as_user.prefix, sys.executable, "-c", HOST_CHECK], capture_output=True,
                          text=True, timeout=30, cwd="/")
    _, err = p.communicate(b"\n", timeout=60)
    assert json.loads(host.stdout) == {"sigqueue": "ok", "timer_create": "ok"}, (filled, host.stderr)
    assert p.returncode == 0, err.decode()
    # Under the limit, timers work; over it, the kernel refuses the jail.
    assert filled["errno"] == "EAGAIN" and 100 <= filled["timers"] <= 1024, filled


@pytest.mark.parametrize("door", ["fresh", "template"])
def test_a_program_cannot_make_pid1_end_the_jail_without_its_status(run_jail, serve, world_tmp, as_user,
                                                                     door):
    # The old request to pid 1 (SIGRTMIN), and the signal that now says a request is waiting
    # on its socket (SIGIO, with none there), both from the program and with the queue full.
    code = textwrap.dedent(FILL_QUEUE) + textwrap.dedent("""
        os.kill(1, signal.SIGRTMIN)
        os.kill(1, signal.SIGIO)
        time.sleep(1)
        print("still here", flush=True)
        sys.exit(7)
    """)
    report = world_tmp.dir(0o777) / "report.json"
    r = run_jail([*door_args(door, as_user, serve), "--report", report, "--", "python", "-c", code],
                 user=as_user, timeout=120)
    assert r.returncode == 7 and r.stdout.endswith("still here\n"), describe(r)
    rep = json.loads(report.read_text())
    assert rep["status"] == "exit" and rep["program_exit_code"] == 7 and rep["signal"] is None, rep
    assert rep["limits"]["sigpending"] == {"value": "1024", "amount": 1024, "unit": "count", "mechanism": "rlimit",
                                           "detail": "RLIMIT_SIGPENDING"}, rep["limits"]
