"""Limits and the result report on this host, whichever mechanism it has: cgroup v2 where a
delegated cgroup exists, the rlimit fallback (which must say so) where it does not. The
cgroup v2 limits themselves are tested in the VM (tests/vm)."""

import datetime
import json
import os
import re

import pytest

FALLBACK = "pyjail: no cgroup v2 for the limits ("


def run_with_report(run_jail, world_tmp, args, user, **kwargs):
    d = world_tmp.dir(0o777)
    path = d / "report.json"
    r = run_jail(["--report", str(path), *args], user=user, **kwargs)
    assert path.exists(), r.stderr
    r.report = json.loads(path.read_text())
    return r


def test_a_plain_run_reports_ok_with_times_and_limits(run_jail, world_tmp, as_user):
    # A state directory of its own: the fallback line is said once a day per user, and this
    # user may have had it today already (test_cron_quiet.py).
    state = world_tmp.dir(0o700)
    if os.geteuid() == 0:
        os.chown(state, as_user.invoker_uid, as_user.invoker_uid)
    r = run_with_report(run_jail, world_tmp, ["--", "python3", "-c", "print('hi')"], as_user,
                        env={"XDG_STATE_HOME": str(state)})
    assert r.returncode == 0 and r.stdout == "hi\n"
    rep = r.report
    assert rep["status"] == "ok"
    assert rep["exit_code"] == 0 and rep["program_exit_code"] == 0 and rep["signal"] is None
    assert 0 < rep["wall_time_s"] < 30
    assert rep["cpu_user_s"] is not None and rep["memory_peak_bytes"] > 1_000_000
    assert 0 < rep["setup_time_ms"] < 5000
    assert rep["pyjail_version"] and rep["profile"] == "strict"
    assert rep["command"] == ["python3", "-c", "print('hi')"]
    assert rep["denied_syscalls"] == [] and rep["error"] is None
    # strict's limits, each with the mechanism that enforced it.
    limits = rep["limits"]
    assert limits["memory"]["value"] == str(512 << 20)
    assert limits["pids"]["value"] == "128"
    if rep["cgroup"] is None:
        assert limits["memory"]["mechanism"] == "rlimit"
        assert limits["cpus"]["mechanism"] == "not-enforced"
        # The fallback is never silent: one line says so and why.
        assert r.stderr.count(FALLBACK) == 1, r.stderr
    else:
        assert limits["memory"]["mechanism"] == "cgroup-v2"
        assert FALLBACK not in r.stderr


def test_the_report_says_when_the_run_started_and_each_limit_as_a_number(run_jail, world_tmp, as_user):
    # Cron and batch users compare and sort runs by these: no text to parse.
    before = datetime.datetime.now(datetime.timezone.utc)
    r = run_with_report(run_jail, world_tmp, ["--wall-time", "7.5", "--", "python3", "-c", "1"], as_user)
    after = datetime.datetime.now(datetime.timezone.utc)
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rep["started_at"]), rep["started_at"]
    started = datetime.datetime.strptime(rep["started_at"], "%Y-%m-%dT%H:%M:%S.%f%z")
    # Milliseconds, cut: the test's own start cut the same way.
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= started <= after
    limits = rep["limits"]
    assert {"memory", "pids", "cpus", "wall-time", "nofile"} <= set(limits)
    units = {"bytes": int, "count": int, "priority": int, "seconds": float, "cpus": float}
    for name, limit in limits.items():
        assert type(limit["amount"]) is units[limit["unit"]], (name, limit)
        assert limit["amount"] == float(limit["value"]), (name, limit)
    assert (limits["memory"]["amount"], limits["memory"]["unit"]) == (512 << 20, "bytes")
    assert (limits["pids"]["amount"], limits["pids"]["unit"]) == (128, "count")
    assert (limits["wall-time"]["amount"], limits["wall-time"]["unit"]) == (7.5, "seconds")
    # A run that failed to start says when it started too.
    r = run_with_report(run_jail, world_tmp,
                        ["--ro-bind", "/nonexistent-pyjail-test:/mnt/x", "--", "python3", "-c", "1"],
                        as_user)
    assert r.returncode == 125 and r.report["status"] == "setup-error"
    started = datetime.datetime.strptime(r.report["started_at"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= started


def test_exit_and_signal(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp, ["--", "python3", "-c", "raise SystemExit(3)"], as_user)
    assert (r.returncode, r.report["status"], r.report["program_exit_code"]) == (3, "exit", 3)
    r = run_with_report(run_jail, world_tmp,
                        ["--", "python3", "-c", "import os; os.kill(os.getpid(), 11)"], as_user)
    assert r.returncode == 139
    assert (r.report["status"], r.report["signal"], r.report["signal_name"]) == ("signal", 11, "SIGSEGV")


def test_a_segfault_under_the_rlimit_fallback_names_memory(run_jail, world_tmp, as_user):
    # Without cgroup v2, --memory is a per-process RLIMIT_DATA, which a program often outgrows
    # by dying of SIGSEGV: pyjail's line says so (a SIGSEGV is otherwise said only under
    # --verbose). --cgroup off makes the fallback on any host.
    segv = ["python3", "-c", "import os; os.kill(os.getpid(), 11)"]
    r = run_with_report(run_jail, world_tmp, ["--cgroup", "off", "--cgroup-notice", "off", "--memory", "64M", "--",
                                              *segv], as_user)
    assert r.returncode == 139
    assert r.stderr == ("pyjail: the program was killed by signal 11 (SIGSEGV); --memory 64M is a per-process "
                        "RLIMIT_DATA here (no cgroup v2), which the program may have run out of\n"), r.stderr
    assert r.report["status"] == "signal"
    r = run_jail(["--cgroup", "off", "--cgroup-notice", "off", "--memory=", "--", *segv], user=as_user)
    assert (r.returncode, r.stderr) == (139, "")


def test_wall_timeout(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--wall-time", "0.5", "--", "python3", "-c", "while True: pass"], as_user)
    assert r.returncode == 124
    assert r.report["status"] == "wall-timeout"
    assert 0.5 <= r.report["wall_time_s"] < 5


def test_cpu_timeout(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--cpu-time", "1", "--wall-time", "20", "--", "python3", "-c",
                         "while True: pass"], as_user)
    assert r.returncode == 124, r.stderr
    assert r.report["status"] == "cpu-timeout"
    assert r.report["wall_time_s"] < 10


# Three processes that each use SECONDS of CPU, at once; "done" once all have.
WORKERS = ("import os, sys, time\n"
           "def burn(s):\n"
           "    end = time.process_time() + s\n"
           "    while time.process_time() < end: pass\n"
           "kids = []\n"
           "for _ in range(3):\n"
           "    kid = os.fork()\n"
           "    if kid == 0: burn(float(sys.argv[1])); os._exit(0)\n"
           "    kids.append(kid)\n"
           "for kid in kids: os.waitpid(kid, 0)\n"
           "print('done')\n")


def test_cpu_time_counts_every_process_of_the_jail_together(run_jail, world_tmp, as_user):
    # Under the limit: 0.9 s of CPU in all, against 2 s.
    under = run_with_report(run_jail, world_tmp, ["--cpu-time", "2", "--wall-time", "30", "--", "python3", "-c",
                                                  WORKERS, "0.3"], as_user)
    assert under.returncode == 0 and under.stdout == "done\n", under.stderr
    assert under.report["status"] == "ok"
    # Over it: 4.5 s in all, though each process stays under 2 s. Under the rlimit fallback
    # RLIMIT_CPU alone (per process) let this finish; the supervisor sums the jail's processes.
    over = run_with_report(run_jail, world_tmp, ["--cpu-time", "2", "--wall-time", "30", "--", "python3", "-c",
                                                 WORKERS, "1.5"], as_user)
    assert over.returncode == 124 and over.stdout == "", over.stderr
    assert over.report["status"] == "cpu-timeout"
    assert "CPU time limit of 2s reached" in over.stderr


def test_output_limit_stops_the_program(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--output-limit", "1000", "--", "python3", "-c",
                         "import sys\nwhile True: sys.stdout.write('x' * 4096)"], as_user)
    assert r.report["status"] == "output-limit"
    assert r.returncode == 137, r.stderr  # as documented: killed, not a jail error (125)
    assert r.stdout == "x" * 1000
    assert r.report["limits"]["output"]["mechanism"] == "supervisor"
    assert "pyjail: output limit reached (--output-limit 1000); the jail was killed\n" in r.stderr


def test_output_limit_passes_output_through_untouched(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--output-limit", "1M", "--", "python3", "-c",
                         "import sys; print('out'); print('err', file=sys.stderr)"], as_user)
    assert r.report["status"] == "ok"
    assert r.stdout == "out\n"
    assert "err\n" in r.stderr


def test_a_refused_syscall_before_the_program_exits(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--", "python3", "-c", "import socket; socket.socket(socket.AF_INET)"], as_user)
    assert r.returncode == 1
    assert "PermissionError" in r.stderr
    # It exited: the refusal is listed, and its traceback names it; the status says how it ended.
    assert r.report["status"] == "exit"
    assert r.report["denied_syscalls"] == [{"syscall": "socket(AF_INET)", "count": 1}]


def test_setup_errors_are_reported_too(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--ro-bind", "/nonexistent-pyjail-test:/mnt/x", "--", "python3", "-c", "1"],
                        as_user)
    assert r.returncode == 125
    rep = r.report
    assert rep["status"] == "setup-error" and rep["exit_code"] == 125
    assert rep["error"]["step"] == "bind"
    assert rep["error"]["errno_name"] == "ENOENT"
    assert "/nonexistent-pyjail-test" in rep["error"]["message"]


def test_report_fd(run_jail, as_user):
    r_fd, w_fd = os.pipe()
    try:
        r = run_jail(["--report-fd", str(w_fd), "--", "python3", "-c", "print(1)"], user=as_user,
                     pass_fds=(w_fd,))
        os.close(w_fd)
        w_fd = -1
        data = os.read(r_fd, 1 << 20).decode()
    finally:
        os.close(r_fd)
        if w_fd >= 0:
            os.close(w_fd)
    assert r.returncode == 0
    assert json.loads(data)["status"] == "ok"


def test_an_unwritable_report_fails_before_running(run_jail, as_user):
    r = run_jail(["--report", "/proc/nonexistent/report.json", "--", "python3", "-c", "print(1)"],
                 user=as_user)
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr.startswith("pyjail: report: cannot write /proc/nonexistent/report.json")


def test_memory_limit_allows_what_is_under_it_and_stops_more(run_jail, world_tmp, as_user):
    # Under the limit: a third of it touched (bytearray zero-fills every page), and the program
    # ends normally; an interpreter that could not start under 64M would fail here, not pass
    # the over-the-limit half below.
    under = run_with_report(run_jail, world_tmp, ["--memory", "64M", "--", "python3", "-c",
                                                  "x = bytearray(24 << 20); print('survived', len(x) >> 20)"],
                            as_user)
    assert under.returncode == 0 and under.stdout == "survived 24\n", under.stderr
    assert under.report["status"] == "ok"
    over = run_with_report(run_jail, world_tmp, ["--memory", "64M", "--", "python3", "-c",
                                                 "x = bytearray(256 << 20); print('survived')"], as_user)
    assert over.returncode != 0 and "survived" not in over.stdout
    if over.report["cgroup"] is None:
        assert "MemoryError" in over.stderr
    else:
        assert over.report["status"] == "oom"


# Forks until one fails (at most 200), printing how many worked and why the last did not.
FORK_BOMB = ("import os, time\n"
             "n, why = 0, 'none failed'\n"
             "try:\n"
             "    for _ in range(200):\n"
             "        if os.fork() == 0:\n"
             "            time.sleep(3); os._exit(0)\n"
             "        n += 1\n"
             "except OSError as e:\n"
             "    why = type(e).__name__\n"
             "print(n, why)\n")


def test_pids_limit_allows_what_is_under_it_and_stops_more(run_jail, world_tmp, as_user):
    # Under the limit: eight children at once, each exits normally.
    under = run_with_report(run_jail, world_tmp, ["--pids", "16", "--", "python3", "-c",
                                                  "import os, time\n"
                                                  "kids = []\n"
                                                  "for _ in range(8):\n"
                                                  "    kid = os.fork()\n"
                                                  "    if kid == 0: time.sleep(1); os._exit(0)\n"
                                                  "    kids.append(kid)\n"
                                                  "print(sum(os.waitpid(k, 0)[1] == 0 for k in kids))\n"],
                            as_user)
    assert under.returncode == 0 and under.stdout == "8\n", under.stderr
    # Over it: fork fails with EAGAIN near the limit, not at the first fork (a fork that always
    # failed would pass an upper bound alone): 16 tasks, less the jail's pid 1 and the program.
    r = run_with_report(run_jail, world_tmp, ["--pids", "16", "--", "python3", "-c", FORK_BOMB], as_user)
    assert r.returncode == 0, r.stderr
    forked, why = r.stdout.split()
    assert why == "BlockingIOError" and 10 <= int(forked) <= 14, r.stdout


def test_fsize_limits_files(run_jail, as_user):
    r = run_jail(["--fsize", "1M", "--", "python3", "-c",
                  "import errno\n"
                  "try:\n"
                  "    open('/tmp/big', 'wb').write(b'x' * (2 << 20))\n"
                  "except OSError as e:\n"
                  "    print(errno.errorcode[e.errno])\n"], user=as_user)
    assert r.stdout == "EFBIG\n", r.stderr


def test_cgroup_require_refuses_where_there_is_none(run_jail, world_tmp, as_user):
    probe = run_with_report(run_jail, world_tmp, ["--", "python3", "-c", "pass"], as_user)
    r = run_jail(["--cgroup", "require", "--", "python3", "-c", "print(1)"], user=as_user)
    if probe.report["cgroup"] is None:
        assert r.returncode == 125 and r.stdout == ""
        assert r.stderr.startswith("pyjail: cgroup: cgroup v2 is required (--cgroup require), but ")
    else:
        assert r.returncode == 0 and r.stdout == "1\n"


@pytest.mark.parametrize("option, value, message", [
    ("--memory", "lots", "--memory: 'lots' is not a size"),
    # Too small to start Python: refused, instead of a program that dies of SIGSEGV.
    ("--memory", "10", "--memory: 10 bytes is too small to start Python (at least 2M; did you mean 10M?)\n"),
    ("--memory", "1K", "--memory: 1K is too small to start Python (at least 2M)\n"),
    ("--memory", "1M", "--memory: 1M is too small to start Python (at least 2M)\n"),
    ("--tmpfs-size", "10", "--tmpfs-size: 10 bytes is less than one page, the least a tmpfs holds (at least 4K; "
                           "did you mean 10M?)\n"),
    ("--pids", "0", "--pids: '0' is not a whole number above 0"),
    ("--cpus", "0", "--cpus: '0' CPUs is out of range"),
    ("--cgroup", "maybe", "--cgroup: 'maybe' is not a cgroup mode (use auto, require or off)"),
    ("--report-fd", "1", "--report-fd: '1' is not a descriptor above 2 (0-2 are the program's)"),
])
def test_bad_limit_values(run_jail, as_user, option, value, message):
    r = run_jail([option, value, "--", "python3", "-c", "print(1)"], user=as_user)
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr.startswith("pyjail: " + message), r.stderr


def test_a_profile_memory_key_too_small_is_refused_by_its_line(run_jail, world_tmp, as_user):
    profile = world_tmp.file("small.toml", 'memory = "64"\n')
    r = run_jail(["--profile", profile, "--", "python3", "-c", "print(1)"], user=as_user)
    assert (r.returncode, r.stdout) == (125, "")
    assert r.stderr == (f"pyjail: {profile}:1: key 'memory': 64 bytes is too small to start Python (at least 2M; "
                        "did you mean 64M?)\n")


def test_the_smallest_memory_allowed_starts_python(run_jail, as_user):
    # The floor is below what Python needs under RLIMIT_DATA with room to spare: 4M runs.
    r = run_jail(["--cgroup", "off", "--memory", "4M", "--", "python3", "-c", "print('ran')"], user=as_user)
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr


def test_output_limit_relay_gives_the_program_epipe_when_our_reader_leaves(popen_jail, as_user):
    p = popen_jail(["--output-limit", "100M", "--", "python3", "-c",
                    "import itertools\nfor i in itertools.count(): print(i, flush=True)"],
                   user=as_user)
    first = p.stdout.readline()
    p.stdout.close()  # like `| head -1`
    # BrokenPipeError, as without the jail (1, or 120 when flushing at exit fails too),
    # instead of writing into the void until some limit stops it.
    assert p.wait(timeout=20) in (1, 120)
    assert first.strip().isdigit()


def test_quiet_leaves_stderr_to_the_program(run_jail, world_tmp, as_user):
    r = run_with_report(run_jail, world_tmp,
                        ["--quiet", "--wall-time", "0.5", "--", "python3", "-c",
                         "import sys; print('e', file=sys.stderr, flush=True)\nwhile True: pass"],
                        as_user)
    assert r.returncode == 124
    assert r.stderr == "e\n"
    assert r.report["status"] == "wall-timeout"
    r = run_jail(["--quiet", "--seccomp", "off", "--", "python3", "-c", "pass"], user=as_user)
    assert "WARNING: --seccomp off" in r.stderr  # never quiet about that


def test_the_report_is_never_written_through_a_symlink(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o777)
    victim = world_tmp.file("victim.txt", "keep me")
    link = d / "report.json"
    link.symlink_to(victim)
    r = run_jail(["--report", str(link), "--", "python3", "-c", "print(1)"], user=as_user)
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr == (f"pyjail: report: cannot write {link}: Too many levels of symbolic links "
                        "(the report file must not be a symbolic link)\n")
    assert victim.read_text() == "keep me"
