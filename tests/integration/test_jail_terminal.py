"""Terminal: a program run from an interactive terminal cannot type into it (TIOCSTI), because
it has no controlling terminal, cannot take one, and only sees its own pseudo-terminals."""

import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time

import pytest

LAYERS = {"filtered": [], "unfiltered": ["--seccomp", "off"]}

INJECT = r"""
import errno, fcntl, json, os, termios
def attempt(fn, *args):
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"isatty": os.isatty(0), "sid": os.getsid(0), "pid": os.getpid(),
       "tty_nr": int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4])}
out["/dev/tty"] = attempt(open, "/dev/tty")
out["inject"] = attempt(fcntl.ioctl, 0, termios.TIOCSTI, b"Z")
# A session of its own, then try to take the terminal as its controlling one (even by force).
out["setsid"] = attempt(os.setsid)
out["take"] = attempt(fcntl.ioctl, 0, termios.TIOCSCTTY, 1)
out["inject again"] = attempt(fcntl.ioctl, 0, termios.TIOCSTI, b"Z")
print(json.dumps(out), flush=True)
"""


def run_on_a_terminal(cmd):
    """Runs cmd with a fresh pty as stdin and controlling terminal (as from an interactive
    shell); returns (exit status, stdout, what the terminal echoed)."""
    master, slave = pty.openpty()

    def take_the_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        p = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd="/", preexec_fn=take_the_terminal)
    finally:
        os.close(slave)
    out, err = p.communicate(timeout=30)
    echoed = b""
    try:
        # An echo of injected input lands on the master side shortly after the ioctl.
        while select.select([master], [], [], 0.3)[0]:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            echoed += chunk
    except OSError:  # EIO: every slave descriptor is closed and the buffer is empty
        pass
    finally:
        os.close(master)
    return p.returncode, out.decode(), err.decode(), echoed


def test_injection_works_outside_the_jail(as_user, helpers):
    """The control: the same program, not jailed, does type into its terminal -- so the test
    below can see an injection if one happens."""
    status, out, err, echoed = run_on_a_terminal([*as_user.prefix, sys.executable, "-c",
                                                  INJECT])
    assert status == 0, err
    got = json.loads(out)
    if got["inject"] != "ok":
        helpers.skip_or_fail(f"this kernel refuses TIOCSTI to everyone ({got['inject']}; "
                             "sysctl dev.tty.legacy_tiocsti=0): nothing to compare against")
    assert b"Z" in echoed


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_controlling_terminal_and_no_injection(pyjail_command, as_user, layer):
    status, out, err, echoed = run_on_a_terminal(
        [*pyjail_command(as_user), *LAYERS[layer], "--", "python", "-c", INJECT])
    assert status == 0, err
    got = json.loads(out)
    assert got["isatty"] is True  # the terminal is there, as stdin...
    assert got["tty_nr"] == 0  # ...but not the controlling terminal
    assert got["pid"] == 2 and got["sid"] == 1  # the session is the jail's (led by its pid 1)
    assert got["/dev/tty"] in ("ENOENT", "ENXIO")
    assert got["inject"] in ("EPERM", "EIO", "ENOTTY")
    assert got["take"] in ("EPERM", "EINVAL")
    assert got["inject again"] in ("EPERM", "EIO", "ENOTTY")
    assert b"Z" not in echoed, f"the jailed program typed into the terminal: {echoed!r}"


def test_only_the_jails_own_pseudo_terminals_are_visible(run_py, as_user):
    master, slave = pty.openpty()  # a host terminal that exists while the jail runs
    try:
        host_name = os.ttyname(slave)
        r = run_py("""\
            import pty
            before = sorted(os.listdir("/dev/pts"))
            host = attempt(open, sys.argv[1], "rb")
            m, s = pty.openpty()  # the jail may have terminals of its own
            emit({"before": before, "host": host, "mine": os.ttyname(s)})
            """, user=as_user, argv=[host_name])
    finally:
        os.close(master)
        os.close(slave)
    got = r.result
    assert got["before"] == ["ptmx"], got["before"]
    assert got["mine"] == "/dev/pts/0"
    assert got["host"] == "ENOENT", (host_name, got["host"])


# A program that ignores the interrupt and the request to end: untrusted code does both in a
# line each.
IGNORES = ("import signal, time\n"
           "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "print('ready', flush=True)\n"
           "time.sleep(60)\n")


def _on_a_terminal(pyjail_command, user):
    """pyjail --kill-grace 1 running IGNORES on a fresh pty (its stdin and controlling
    terminal, as from an interactive shell): (process, the pty's master)."""
    master, slave = pty.openpty()

    def take_the_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    try:
        p = subprocess.Popen([*pyjail_command(user), "--kill-grace", "1", "--", "python", "-c",
                              IGNORES], stdin=slave, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd="/", preexec_fn=take_the_terminal)
    finally:
        os.close(slave)
    return p, master


def _ctrl_c(master, times, gap=0.2):
    for _ in range(times):
        os.write(master, b"\x03")   # the terminal's interrupt character: SIGINT to pyjail
        time.sleep(gap)


def test_ctrl_c_three_times_ends_a_program_that_ignores_it(pyjail_command, as_user, helpers):
    p, master = _on_a_terminal(pyjail_command, as_user)
    try:
        assert helpers.read_line(p.stdout, 15) == b"ready\n"
        _ctrl_c(master, 2)
        assert p.poll() is None, "two interrupts ended the jail"
        _ctrl_c(master, 1)
        p.wait(15)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    assert "pyjail: Ctrl-C once more within 2 s ends the jail" in err, err
    assert "pyjail: three interrupts: the jail is sent SIGTERM" in err, err
    # It ignores SIGTERM too: killed --kill-grace later.
    assert p.returncode == 137 and "still running 1s after SIGTERM" in err, (p.returncode, err)


def test_slower_ctrl_c_and_signals_off_a_terminal_only_interrupt(pyjail_command, popen_jail,
                                                                 as_user, helpers):
    # An interactive interpreter lives on through interrupts; a Session interrupts its cells
    # with SIGINT, from a pipe, as often as it needs to.
    p, master = _on_a_terminal(pyjail_command, as_user)
    try:
        assert helpers.read_line(p.stdout, 15) == b"ready\n"
        _ctrl_c(master, 2)
        time.sleep(2.2)
        _ctrl_c(master, 1)
        time.sleep(1.5)
        assert p.poll() is None, "three interrupts over more than 2 s ended the jail"
    finally:
        p.kill()
        p.wait()
        os.close(master)
    q = popen_jail(["--kill-grace", "1", "--", "python", "-c", IGNORES], user=as_user)
    assert helpers.read_line(q.stdout, 15) == b"ready\n"
    for _ in range(5):
        q.send_signal(signal.SIGINT)
        time.sleep(0.1)
    time.sleep(1.5)
    assert q.poll() is None, "SIGINTs to a pyjail off a terminal ended the jail"
