"""Time and signals: the wall-time limit ends the whole jail, and signals to pyjail reach the
program."""

import signal
import subprocess
import time

import pytest

BUSY = """\
import signal, subprocess, sys
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)  # no polite way to stop this one
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
print("started", flush=True)
while True:
    pass
"""


def test_wall_time_kills_a_busy_loop_and_its_children(run_jail, as_user, token, helpers,
                                                     no_leftovers):
    started = time.monotonic()
    r = run_jail(["--wall-time", "1", "--", "python", "-c", BUSY, token], user=as_user,
                 timeout=20)
    elapsed = time.monotonic() - started
    assert r.returncode == 124, helpers.describe(r)
    assert r.stdout == "started\n"
    assert 0.9 <= elapsed < 5, elapsed
    err = helpers.without_notices(r.stderr)
    assert err.startswith("pyjail: ") and err.count("\n") == 1, r.stderr
    assert "wall time" in err
    assert helpers.processes_with(token) == {}, "the program's child outlived the wall time"


def test_wall_time_leaves_a_quick_program_alone(run_jail, as_user, helpers):
    r = run_jail(["--wall-time", "5", "--", "python", "-c", "print('done')"], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "done\n" and helpers.without_notices(r.stderr) == ""


# The handler may run while print("ready") is still returning: it must not print itself.
# The programs wait in short sleeps: CPython runs a Python-level handler between bytecodes,
# so a signal that lands just before time.sleep() enters the kernel (easy to hit when the
# signal is relayed) waits for that sleep to end -- with or without a jail.
HANDLER = """\
import os, signal, sys, time
def handler(signum, frame):
    os.write(1, f"got {signal.Signals(signum).name}\\n".encode())
    os._exit(7)
signal.signal(getattr(signal, sys.argv[1]), handler)
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.05)
print("not interrupted", flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT"])
def test_signals_to_pyjail_reach_the_program(popen_jail, as_user, sig, helpers):
    p = popen_jail(["--", "python", "-c", HANDLER, sig], user=as_user)
    assert helpers.read_line(p.stdout, 10) == b"ready\n"
    p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=10)
    assert p.returncode == 7, (out, err)
    assert out == f"got {sig}\n".encode()


def test_sigint_is_a_keyboard_interrupt(popen_jail, as_user, helpers):
    code = ("import os, time\n"
            "try:\n"
            "    print('ready', flush=True)\n"
            "    for _ in range(600):\n"
            "        time.sleep(0.05)\n"
            "except KeyboardInterrupt:\n"
            "    os.write(1, b'KeyboardInterrupt\\n')\n"
            "    os._exit(9)\n")
    p = popen_jail(["--", "python", "-c", code], user=as_user)
    assert helpers.read_line(p.stdout, 10) == b"ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert (p.returncode, out) == (9, b"KeyboardInterrupt\n"), err


def test_uncaught_sigint_ends_the_program_with_130(popen_jail, as_user, helpers):
    p = popen_jail(["--", "python", "-c", "import time\nprint('ready', flush=True)\n"
                    "for _ in range(600):\n    time.sleep(0.05)\n"], user=as_user)
    assert helpers.read_line(p.stdout, 10) == b"ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 130, (out, err)
    assert b"KeyboardInterrupt" in err


def test_sigint_does_not_start_the_kill_grace(popen_jail, as_user, helpers):
    # A Session interrupts a timed-out cell with SIGINT and keeps its interpreter: an
    # interrupted program that carries on must not be killed --kill-grace later.
    code = ("import sys, time\n"
            "print('ready', flush=True)\n"
            "for line in sys.stdin:\n"
            "    try:\n"
            "        time.sleep(float(line))\n"
            "    except KeyboardInterrupt:\n"
            "        pass\n"
            "    print('alive', flush=True)\n")
    p = popen_jail(["--kill-grace", "1", "--", "python", "-c", code], user=as_user,
                   stdin=subprocess.PIPE)
    assert helpers.read_line(p.stdout, 10) == b"ready\n"
    p.stdin.write(b"60\n")
    p.stdin.flush()
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    assert helpers.read_line(p.stdout, 10) == b"alive\n"
    time.sleep(2.5)  # past the 1 s grace
    p.stdin.write(b"0\n")
    p.stdin.flush()
    assert helpers.read_line(p.stdout, 10) == b"alive\n", "killed after the grace"
    out, err = p.communicate(b"", timeout=10)
    assert p.returncode == 0, (out, err)
