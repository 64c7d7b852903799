"""The host's standard streams: a jail gets pipes, sockets, terminals and /dev/null as they are,
and anything else (a regular file, a directory, a device) only through the supervisor's relay,
so it cannot rewrite a file it was given. The relay never
holds up a deadline, whatever pyjail's own reader does, and a terminal's settings come back
when the jail ends."""

import fcntl
import json
import os
import pty
import struct
import subprocess
import termios
import time

import pytest

RESULT_MARK = "@@RESULT@@"

ATTACK_HELPERS = '''\
import errno, json, os, sys
def attempt(fn, *args):
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def rewrite(path):
    with open(path, "w") as f:
        f.write("PWNED\\n")
def emit(obj):
    print("@@RESULT@@" + json.dumps(obj), flush=True)
'''


def start(pyjail_command, user, args, **kwargs):
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([*pyjail_command(user), *map(str, args)], cwd="/", **kwargs)


def result_of(text: str):
    for line in text.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return None


def finish(p, timeout=30):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"pyjail did not end within {timeout} s")
    return p.returncode, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")


def test_stdin_from_a_file_cannot_be_rewritten(pyjail_command, as_user, world_tmp, helpers):
    """`pyjail ... < data.csv`: the jail reads the data but cannot reopen the file for writing
    through /proc/self/fd/0, truncate it, or write through fd 0 -- even when the file belongs
    to the jail's own host user."""
    data = "".join(f"{i},{i * i}\n" for i in range(5000))  # more than a pipe holds
    path = world_tmp.file("data.csv", data)
    os.chown(path, as_user.host_uid, as_user.host_gid)  # writable by the jail's host user
    program = ATTACK_HELPERS + '''
got = {"reopen": attempt(rewrite, "/proc/self/fd/0"),
       "truncate": attempt(os.ftruncate, 0, 0),
       "write": attempt(os.write, 0, b"PWNED")}
got["read"] = sys.stdin.read()
emit(got)
'''
    with open(path, "rb") as stdin:
        p = start(pyjail_command, as_user, ["--", "python3", "-c", program], stdin=stdin)
        status, out, err = finish(p)
    assert status == 0, err
    got = result_of(out)
    assert path.read_text() == data, f"the host file was changed: {got}"
    assert got["truncate"] != "ok" and got["write"] != "ok"
    # Reopening fd 0 for writing may reach the program's own stdin pipe: what it writes there
    # comes back to itself only (one atomic write, among the file's bytes).
    assert got["read"].replace("PWNED\n", "", 1) == data


def test_a_program_that_never_reads_its_stdin_file_ends_as_usual(pyjail_command, as_user,
                                                                   world_tmp):
    """The relay fills the stdin pipe and then waits: a program that never reads it neither
    stalls nor is stalled, and pyjail ends with it."""
    path = world_tmp.file("big.bin", b"\0" * (4 << 20))
    with open(path, "rb") as stdin:
        p = start(pyjail_command, as_user, ["--wall-time", "10", "--", "python3", "-c",
                                            "print('done')"], stdin=stdin)
        status, out, err = finish(p, timeout=15)
    assert (status, out) == (0, "done\n"), err


@pytest.mark.parametrize("fd", [1, 2])
def test_a_log_appended_to_cannot_be_truncated(pyjail_command, as_user, world_tmp, fd):
    """`pyjail ... >> job.log` (or 2>>) with a log another user owns: the jail cannot truncate
    or rewrite it; its output is appended after what was there."""
    log = world_tmp.file("job.log", "earlier line\n", mode=0o644)  # root's (the tests run as root)
    program = ATTACK_HELPERS + f'''
fd = {fd}
got = {{"truncate": attempt(os.ftruncate, fd, 0),
       "reopen": attempt(rewrite, f"/proc/self/fd/{{fd}}"),
       "seek": attempt(os.lseek, fd, 0, os.SEEK_SET)}}
os.write(fd, b"program output\\n")
emit(got)
'''
    with open(log, "ab") as target:
        streams = {"stdout": target} if fd == 1 else {"stderr": target}
        p = start(pyjail_command, as_user, ["--quiet", "--", "python3", "-c", program], **streams)
        status, out, err = finish(p)
    text = log.read_text()
    assert status == 0, (out, err, text)
    assert text.startswith("earlier line\n"), f"the log was rewritten: {text!r}"
    assert "program output\n" in text


def test_stdout_and_stderr_to_one_file_keep_their_order(pyjail_command, as_user, world_tmp):
    """`> log 2>&1` is relayed through one pipe: the program's writes to fds 1 and 2 land in
    the order it made them, as they did when it held the file itself."""
    log = world_tmp.file("both.log", "")
    program = "import os\nfor i in range(2000): os.write(1 + i % 2, b'%d\\n' % i)"
    with open(log, "ab") as target:
        p = start(pyjail_command, as_user, ["--quiet", "--", "python3", "-c", program],
                  stdout=target, stderr=target)
        status, _, _ = finish(p)
    assert status == 0
    assert log.read_text() == "".join(f"{i}\n" for i in range(2000))


def test_fsize_still_caps_a_file_given_as_stdout(pyjail_command, as_user, world_tmp):
    """The relay writes a `> out.txt` for the program: --fsize caps that file as it capped the
    program's own writes to it, so the jail cannot fill the disk through its stdout."""
    out = world_tmp.file("out.txt", "")
    program = "import sys\nfor _ in range(80): sys.stdout.write('x' * 65536)"
    with open(out, "wb") as target:
        p = start(pyjail_command, as_user, ["--fsize", "1M", "--", "python3", "-c", program],
                  stdout=target)
        status, _, err = finish(p)
    assert status != 0, err  # the program's writes failed
    assert out.stat().st_size <= 1 << 20


CUT_LINE = ("pyjail: stdout reached --fsize 1M; the rest was not written (--fsize SIZE raises it, "
            "--fsize= lifts it)\n")


def test_a_file_cut_at_fsize_is_said_and_reported(pyjail_command, as_user, world_tmp):
    """A `> out.txt` cut at --fsize is not cut silently: pyjail says so in one line and the
    report lists the stream (the program itself only sees EPIPE). Through a pipe, which no
    file-size limit applies to (RLIMIT_FSIZE caps files, as it would without the jail), all of
    it arrives, and nothing is said."""
    d = world_tmp.dir(0o777)
    out = world_tmp.file("out.txt", "", dir=d, mode=0o666)
    program = "import sys; sys.stdout.write('x' * (2 << 20))"
    with open(out, "wb") as target:
        p = start(pyjail_command, as_user, ["--fsize", "1M", "--report", d / "r.json", "--", "python3", "-c", program],
                  stdout=target)
        status, _, err = finish(p)
    assert status == 1, err  # BrokenPipeError
    assert out.stat().st_size == 1 << 20
    assert err.endswith(CUT_LINE), err
    report = json.loads((d / "r.json").read_text())
    assert report["status"] == "exit"
    assert report["streams_cut"] == [{"stream": "stdout", "limit": "fsize", "limit_bytes": 1 << 20}]

    p = start(pyjail_command, as_user, ["--fsize", "1M", "--report", d / "r.json", "--", "python3", "-c", program])
    status, text, err = finish(p)
    assert (status, len(text)) == (0, 2 << 20), err
    assert "--fsize" not in err
    assert json.loads((d / "r.json").read_text())["streams_cut"] == []


def test_a_stalled_reader_does_not_hold_the_wall_time(pyjail_command, as_user, token, helpers):
    """pyjail's stdout is a pipe nobody reads, with --output-limit: the relay stops reading the
    jail's pipe (the program blocks in its own write) and --wall-time still ends the run."""
    program = f"import sys  # {token}\nwhile True: sys.stdout.write('x' * 65536)"
    began = time.monotonic()
    p = start(pyjail_command, as_user,
              ["--output-limit", "1G", "--wall-time", "2", "--", "python3", "-c", program])
    try:
        # stdout is never read; stderr holds only pyjail's own few lines.
        status = p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("pyjail was still running 15 s into a 2 s wall time: its output relay "
                    "waited for a reader that never reads")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        took = time.monotonic() - began
        err = p.stderr.read().decode(errors="replace")
        p.stdout.close()
        p.stderr.close()
    assert status == 124, err
    assert "wall time" in err, err
    assert took < 15
    assert not helpers.wait_until_gone(token), "the jail outlived pyjail"


@pytest.mark.parametrize("relayed", [True, False], ids=["output-limit", "no-relay"])
def test_a_stalled_stderr_does_not_keep_pyjail_running(pyjail_command, as_user, token, helpers,
                                                       relayed):
    """`pyjail ... 2>&1 | stalled`: the program fills the pipe pyjail's own messages go to;
    when the wall time ends the jail, pyjail's last words must not wait for that reader."""
    program = f"import sys  # {token}\nwhile True: sys.stderr.write('x' * 65536)"
    limit = ["--output-limit", "1G"] if relayed else []
    p = start(pyjail_command, as_user, [*limit, "--wall-time", "2", "--", "python3", "-c", program],
              stderr=subprocess.STDOUT)
    try:
        status = p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("pyjail was still running 15 s into a 2 s wall time, writing to a stderr "
                    "nobody reads")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
    assert status == 124
    assert not helpers.wait_until_gone(token), "the jail outlived pyjail"


def test_a_stopped_terminal_does_not_hold_the_wall_time(pyjail_command, as_user, token,
                                                        helpers):
    """pyjail's stdout is a terminal stopped with ^S, with --output-limit: writes to it would
    wait forever; the relay writes only what the terminal takes without waiting (root: a
    private non-blocking description; another user's terminal: writes cut short by a timer)."""
    master, slave = pty.openpty()
    termios.tcflow(slave, termios.TCOOFF)  # as ^S does
    program = f"import sys  # {token}\nwhile True: sys.stdout.write('x' * 4096)"
    try:
        p = start(pyjail_command, as_user,
                  ["--output-limit", "1G", "--wall-time", "2", "--", "python3", "-c", program],
                  stdout=slave)
        status, _, err = finish(p, timeout=15)
        flags = fcntl.fcntl(slave, fcntl.F_GETFL)
    finally:
        termios.tcflow(slave, termios.TCOON)
        os.close(slave)
        os.close(master)
    assert status == 124, err
    assert "wall time" in err, err
    assert not flags & os.O_NONBLOCK, "pyjail changed the caller's terminal description"
    assert not helpers.wait_until_gone(token), "the jail outlived pyjail"


CHANGE_TERMINAL = r"""
import fcntl, os, struct, sys, termios, time
modes = termios.tcgetattr(0)
modes[3] &= ~(termios.ECHO | termios.ICANON)
termios.tcsetattr(0, termios.TCSANOW, modes)
fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 7, 13, 0, 0))
print("changed", flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


@pytest.mark.parametrize("end", ["exit", "wall-time"])
def test_terminal_settings_are_restored(pyjail_command, as_user, end):
    """The jail turns echo and canonical mode off and resizes the terminal, then exits or is
    killed at its wall time: afterwards the terminal is as it was."""
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        before = termios.tcgetattr(slave)
        assert before[3] & termios.ECHO
        p = start(pyjail_command, as_user,
                  ["--wall-time", "2", "--", "python3", "-c", CHANGE_TERMINAL,
                   "hang" if end == "wall-time" else "exit"], stdin=slave)
        status, out, err = finish(p)
        after = termios.tcgetattr(slave)
        size = struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))
    finally:
        os.close(slave)
        os.close(master)
    assert out == "changed\n", err
    assert status == (0 if end == "exit" else 124), err
    assert after[3] & termios.ECHO, "echo is still off after the jail ended"
    assert after == before
    assert size[:2] == (24, 80)


def test_pipes_and_terminals_reach_the_program_as_they_are(pyjail_command, as_user):
    """The common path gains no relay (no copies): the program's stdout is pyjail's own pipe,
    and its stdin pyjail's own terminal."""
    program = ("import json, os, stat\n"
               "print(json.dumps({'out': os.fstat(1).st_ino, 'in_tty': os.isatty(0),"
               " 'in_rdev': os.fstat(0).st_rdev}))")
    master, slave = pty.openpty()
    try:
        p = start(pyjail_command, as_user, ["--verbose", "--", "python3", "-c", program],
                  stdin=slave)
        pipe_inode = os.fstat(p.stdout.fileno()).st_ino
        status, out, err = finish(p)
        slave_rdev = os.fstat(slave).st_rdev
    finally:
        os.close(slave)
        os.close(master)
    assert status == 0, err
    got = json.loads(out)
    assert got["out"] == pipe_inode
    assert got["in_tty"] and got["in_rdev"] == slave_rdev
    assert "relayed" not in err
