"""Quiet and honest for cron: the rlimit fallback notice once a day (a stamp in the user's
state directory, or in a directory of the user's own in $TMPDIR or /tmp when there is none,
never followed through someone else's symlink), a switch for only that notice, `--cgroup off` saying what it does, --explain giving a reason, the batch profile's
file and output limits, the report's wall-time limit and a missing script's hint.

`--cgroup off` forces the fallback on every host, so these tests run the same with and
without a delegated cgroup v2."""

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from pyjail_testing import skip_or_fail

NOTICE = "pyjail: no cgroup v2 for the limits ("
OFF_NOTICE = "pyjail: no cgroup v2 for the limits (--cgroup off); falling back: "
RUN = ["--cgroup", "off", "--", "python3", "-c", "print('ok')"]


def state_home(world_tmp, user):
    """An XDG_STATE_HOME the user who runs pyjail owns."""
    d = world_tmp.dir(0o700)
    if os.geteuid() == 0:
        os.chown(d, user.invoker_uid, user.invoker_uid)
    return d


# A user who is neither root nor the tests' unprivileged one: another user of a shared /tmp.
OTHER_UID = 4242

# No state directory pyjail can use (a service account's cron job), and no login session.
NO_STATE = {"HOME": "/nonexistent", "XDG_STATE_HOME": "", "XDG_RUNTIME_DIR": ""}


def shared_tmp(world_tmp):
    """A TMPDIR like /tmp (sticky, anyone may add entries), for one test: where pyjail keeps its
    stamps when it has no state directory, away from the stamps of other runs as the same
    user (the other half of the suite, a test run in parallel, a real cron job)."""
    return world_tmp.dir(0o1777)


def fallback_dir(tmp, user):
    return tmp / f"pyjail-state-{user.invoker_uid}"


def said_on_every_run(run_jail, user, env, runs=2):
    for _ in range(runs):
        r = run_jail(RUN, user=user, env=env)
        assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
        assert r.stderr.count(NOTICE) == 1, r.stderr


def said_once(run_jail, user, env):
    """The notice on the first of two runs only: its stamp was kept somewhere."""
    r = run_jail(RUN, user=user, env=env)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert r.stderr.count(NOTICE) == 1, r.stderr
    r = run_jail(RUN, user=user, env=env)
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr


def assert_users_own_directory(d, user):
    st = d.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == user.invoker_uid
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_the_notice_is_said_once_a_day_per_reason(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    env = {"XDG_STATE_HOME": str(home)}
    r = run_jail(RUN, user=as_user, env=env)
    assert r.returncode == 0 and r.stdout == "ok\n"
    # One line, naming only the limits a cgroup would have enforced.
    assert r.stderr == (OFF_NOTICE + "memory by RLIMIT_DATA (per process), pids by RLIMIT_NPROC "
                        "(counted per user namespace: per jail), cpus NOT enforced, cpu-time by RLIMIT_CPU "
                        "(per process) and the supervisor's sum from /proc (per jail) (said once a day; "
                        "--cgroup-notice off silences it)\n"), r.stderr
    stamp = home / "pyjail" / "cgroup-notice"
    assert stat.S_IMODE((home / "pyjail").stat().st_mode) == 0o700
    assert stat.S_IMODE(stamp.stat().st_mode) == 0o600
    assert stamp.read_text().endswith(" --cgroup off\n")
    r = run_jail(RUN, user=as_user, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # always: every run; off: never.
    r = run_jail(["--cgroup-notice", "always", *RUN], user=as_user, env=env)
    assert r.stderr.count(NOTICE) == 1
    assert r.stderr.endswith("cpu-time by RLIMIT_CPU (per process) and the supervisor's sum from /proc (per jail)\n"), r.stderr  # as asked: no tail
    r = run_jail(["--cgroup-notice", "off", *RUN], user=as_user, env={"XDG_STATE_HOME": "/nonexistent"})
    assert r.returncode == 0 and r.stderr == ""
    # A stamp of another day, or of another reason, is said again.
    stamp.write_text("2000-01-01 --cgroup off\n")
    assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert run_jail(RUN, user=as_user, env=env).stderr == ""


def test_runs_taking_turns_with_two_reasons_hear_each_once_a_day(run_jail, world_tmp, as_user):
    """`--cgroup off` runs and runs of another reason, alternating: the stamp keeps each reason's
    day, so each is said on its first run only (it kept the last reason alone: every run said
    it)."""
    home = state_home(world_tmp, as_user)
    env = {"XDG_STATE_HOME": str(home)}
    # A parent outside the hierarchy: the fallback, with a reason of its own on every host.
    other = ["--cgroup-parent", "/pyjail-test-no-such-cgroup", "--", "python3", "-c", "print('ok')"]
    for turn in range(3):
        for args in (RUN, other):
            r = run_jail(args, user=as_user, env=env)
            assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
            assert r.stderr.count(NOTICE) == (1 if turn == 0 else 0), (turn, args, r.stderr)
    lines = (home / "pyjail" / "cgroup-notice").read_text().splitlines()
    assert len(lines) == 2 and lines[0].endswith(" --cgroup off"), lines


def test_a_hostile_stamp_is_read_bounded_and_replaced(run_jail, world_tmp, as_user):
    """A stamp of 1 MiB of junk with today's line beyond the first 4 KiB: not taken as said (only
    4 KiB are read), the run goes on, and the stamp is rewritten small."""
    home = state_home(world_tmp, as_user)
    d = home / "pyjail"
    d.mkdir(mode=0o700)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    stamp = d / "cgroup-notice"
    stamp.write_bytes(b"\0junk\n" * (1 << 17) + f"{today} --cgroup off\n".encode())
    os.chmod(stamp, 0o600)
    if os.geteuid() == 0:
        os.chown(d, as_user.invoker_uid, as_user.invoker_uid)
        os.chown(stamp, as_user.invoker_uid, as_user.invoker_uid)
    said_once(run_jail, as_user, {"XDG_STATE_HOME": str(home)})
    assert stamp.read_text() == f"{today} --cgroup off\n"


def test_home_local_state_is_the_default(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    env = {"HOME": str(home), "XDG_STATE_HOME": ""}
    assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert (home / ".local/state/pyjail/cgroup-notice").is_file()
    assert run_jail(RUN, user=as_user, env=env).stderr == ""


def test_no_usable_state_directory_falls_back_to_tmp(run_jail, world_tmp, as_user):
    """A service account's cron job (HOME=/nonexistent, or nothing absolute): said on the first
    run of the day, quiet on the next, from a stamp in $TMPDIR/pyjail-state-UID."""
    for env in ({"HOME": "/nonexistent", "XDG_STATE_HOME": ""},
                {"HOME": "relative", "XDG_STATE_HOME": "also-relative"}):
        tmp = shared_tmp(world_tmp)
        env = {**env, "XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp)}
        said_once(run_jail, as_user, env)
        assert_users_own_directory(fallback_dir(tmp, as_user), as_user)
        stamp = fallback_dir(tmp, as_user) / "cgroup-notice"
        assert stat.S_IMODE(stamp.stat().st_mode) == 0o600
        assert stamp.read_text().endswith(" --cgroup off\n")
        assert os.listdir(tmp) == [fallback_dir(tmp, as_user).name]


def test_the_fallback_is_in_tmp_without_tmpdir(run_jail, as_user):
    """Without TMPDIR: /tmp/pyjail-state-UID. Other runs as this user may share it (so only
    where the stamp is is checked here); removed again when this test made it."""
    d = Path("/tmp") / f"pyjail-state-{as_user.invoker_uid}"
    made = not os.path.lexists(d)
    if not made and (not d.is_dir() or d.is_symlink() or d.lstat().st_uid != as_user.invoker_uid):
        skip_or_fail(f"{d} is not uid {as_user.invoker_uid}'s directory: someone else took the name")
    try:
        r = run_jail(RUN, user=as_user, env={**NO_STATE, "TMPDIR": ""})
        assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
        assert_users_own_directory(d, as_user)
        assert (d / "cgroup-notice").is_file()
    finally:
        if made:
            shutil.rmtree(d, ignore_errors=True)


def test_the_runtime_directory_comes_before_tmp(run_jail, world_tmp, as_user):
    runtime = state_home(world_tmp, as_user)  # as logind makes it: the user's, mode 0700
    tmp = shared_tmp(world_tmp)
    env = {**NO_STATE, "XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(tmp)}
    said_once(run_jail, as_user, env)
    assert (runtime / "pyjail" / "cgroup-notice").is_file()
    assert os.listdir(tmp) == []


def test_root_passes_over_another_users_runtime_directory(run_jail, world_tmp, root_user):
    """sudo -E keeps the user's XDG_RUNTIME_DIR: root makes nothing there."""
    runtime = world_tmp.dir(0o700)
    os.chown(runtime, 65534, 65534)
    tmp = shared_tmp(world_tmp)
    said_once(run_jail, root_user, {**NO_STATE, "XDG_RUNTIME_DIR": str(runtime), "TMPDIR": str(tmp)})
    assert os.listdir(runtime) == []
    assert (fallback_dir(tmp, root_user) / "cgroup-notice").is_file()


def test_root_does_not_follow_another_users_link_to_a_directory_of_roots(run_jail, world_tmp,
                                                                         root_user):
    """sudo -E keeps the user's XDG_RUNTIME_DIR (and XDG_STATE_HOME): a link the user made, in
    a directory of theirs, to a directory of root's (/etc, /sys/fs/cgroup, /sys/kernel/tracing/
    instances) must not make root create pyjail's directory and stamp there. Each component of
    the base counts, not only where it ends: root makes nothing in a place another user chose."""
    theirs = world_tmp.dir(0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    roots = world_tmp.dir(0o755)          # root's, written by nobody else: e.g. /etc
    link = theirs / "runtime"
    link.symlink_to(roots)
    os.lchown(link, OTHER_UID, OTHER_UID)
    tmp = shared_tmp(world_tmp)
    said_once(run_jail, root_user, {**NO_STATE, "XDG_RUNTIME_DIR": str(link), "TMPDIR": str(tmp)})
    assert os.listdir(roots) == []
    assert (fallback_dir(tmp, root_user) / "cgroup-notice").is_file()


def test_a_fallback_name_another_user_took_first_is_not_used(run_jail, world_tmp, as_user):
    """In a shared /tmp anyone can make pyjail-state-UID first: theirs is never written (root
    would have the rights to), and the notice is said on every run."""
    if os.geteuid() != 0:
        skip_or_fail("only root can make a directory another user owns: the tests must run as root")
    for mode in (0o755, 0o777):
        tmp = shared_tmp(world_tmp)
        theirs = fallback_dir(tmp, as_user)
        theirs.mkdir()
        os.chmod(theirs, mode)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        said_on_every_run(run_jail, as_user, {**NO_STATE, "TMPDIR": str(tmp)})
        assert list(theirs.iterdir()) == []
        assert theirs.lstat().st_uid == OTHER_UID and stat.S_IMODE(theirs.lstat().st_mode) == mode


def test_a_link_planted_at_the_fallback_name_is_not_followed(run_jail, world_tmp, as_user):
    target = world_tmp.dir(0o777)
    tmp = shared_tmp(world_tmp)
    link = fallback_dir(tmp, as_user)
    link.symlink_to(target)
    if os.geteuid() == 0:
        os.lchown(link, OTHER_UID, OTHER_UID)
    said_on_every_run(run_jail, as_user, {**NO_STATE, "TMPDIR": str(tmp)})
    assert list(target.iterdir()) == []
    assert link.is_symlink()


def test_a_fallback_directory_others_can_write_is_not_used(run_jail, world_tmp, as_user):
    """The user's own pyjail-state-UID, but open to everyone: anyone could have planted a link
    in it; it is not used (nor repaired)."""
    tmp = shared_tmp(world_tmp)
    d = fallback_dir(tmp, as_user)
    d.mkdir()
    os.chmod(d, 0o777)
    if os.geteuid() == 0:
        os.chown(d, as_user.invoker_uid, as_user.invoker_uid)
    said_on_every_run(run_jail, as_user, {**NO_STATE, "TMPDIR": str(tmp)})
    assert list(d.iterdir()) == []
    assert stat.S_IMODE(d.lstat().st_mode) == 0o777


def test_a_tmpdir_others_can_write_that_is_not_sticky_is_not_used(run_jail, world_tmp, as_user):
    """Without the sticky bit anyone may rename or remove what pyjail made there."""
    tmp = world_tmp.dir(0o777)
    said_on_every_run(run_jail, as_user, {**NO_STATE, "TMPDIR": str(tmp)})
    assert os.listdir(tmp) == []


def test_a_planted_symlink_is_never_followed(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    target = world_tmp.dir(0o777)
    (home / "pyjail").symlink_to(target)
    # Passed over for the fallback, which keeps the stamp instead.
    env = {"XDG_STATE_HOME": str(home), "XDG_RUNTIME_DIR": "", "TMPDIR": str(shared_tmp(world_tmp))}
    said_once(run_jail, as_user, env)
    assert list(target.iterdir()) == []
    # The stamp itself as a link to a file pyjail's user could write.
    (home / "pyjail").unlink()
    (home / "pyjail").mkdir(0o700)
    victim = world_tmp.file("victim.txt", "keep me", mode=0o666)
    (home / "pyjail" / "cgroup-notice").symlink_to(victim)
    if os.geteuid() == 0:
        os.chown(home / "pyjail", as_user.invoker_uid, as_user.invoker_uid)
        os.lchown(home / "pyjail" / "cgroup-notice", as_user.invoker_uid, as_user.invoker_uid)
    said_once(run_jail, as_user, {**env, "TMPDIR": str(shared_tmp(world_tmp))})
    assert victim.read_text() == "keep me"


def test_a_state_directory_others_can_write_is_not_used(run_jail, world_tmp, as_user):
    home = world_tmp.dir(0o777)  # anyone could plant a link in it
    tmp = shared_tmp(world_tmp)
    said_once(run_jail, as_user, {"XDG_STATE_HOME": str(home), "XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp)})
    assert list(home.iterdir()) == []
    assert (fallback_dir(tmp, as_user) / "cgroup-notice").is_file()


def test_root_never_writes_into_another_users_state_directory(run_jail, world_tmp, root_user):
    """sudo without -H keeps the user's HOME: root must not create files there."""
    home = world_tmp.dir(0o755)
    os.chown(home, 65534, 65534)
    tmp = shared_tmp(world_tmp)
    said_once(run_jail, root_user, {"HOME": str(home), "XDG_STATE_HOME": "", "XDG_RUNTIME_DIR": "",
                                    "TMPDIR": str(tmp)})
    assert list(home.iterdir()) == []
    assert (fallback_dir(tmp, root_user) / "cgroup-notice").is_file()


def test_cgroup_notice_off_keeps_errors_and_time_limit_lines(run_jail, world_tmp, as_user):
    r = run_jail(["--cgroup-notice", "off", "--cgroup", "off", "--wall-time", "0.5", "--",
                  "python3", "-c", "while True: pass"], user=as_user,
                 env={"XDG_STATE_HOME": str(state_home(world_tmp, as_user))})
    assert r.returncode == 124
    assert NOTICE not in r.stderr
    assert "wall time limit of 0.5s reached" in r.stderr, r.stderr
    r = run_jail(["--cgroup-notice", "weekly", "--", "python3", "-c", "1"], user=as_user)
    assert r.returncode == 125
    assert r.stderr == ("pyjail: --cgroup-notice: 'weekly' is not a notice mode "
                        "(use daily, always or off)\n")


def test_explain_gives_a_reason_for_no_cgroup(run_jail, world_tmp, as_user):
    # A profile starts from strict: these four must be unset to need no cgroup.
    bare = world_tmp.file("bare.toml", 'net = "none"\nmemory = ""\npids = ""\ncpus = ""\ncpu-time = 0\n')
    r = run_jail(["--profile", bare, "--cgroup", "off", "--explain"], user=as_user)
    assert r.returncode == 0
    assert "# cgroup:    none: no limit needs one (memory, pids, cpus, cpu-time unset)\n" in r.stdout
    r = run_jail(["--cgroup", "off", "--explain"], user=as_user)
    assert "# cgroup:    none: --cgroup off\n" in r.stdout


def test_the_report_lists_the_wall_time_limit(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o777)
    report = d / "r.json"
    r = run_jail(["--report", report, "--wall-time", "42", "--", "python3", "-c", "pass"],
                 user=as_user)
    assert r.returncode == 0, r.stderr
    limits = json.loads(report.read_text())["limits"]
    assert limits["wall-time"] == {"value": "42", "amount": 42.0, "unit": "seconds", "mechanism": "supervisor",
                                   "detail": "the whole jail killed at the deadline"}
    r = run_jail(["--explain", "--wall-time", "42"], user=as_user)
    assert "wall-time" in r.stdout.split("# Limits:")[1]


def test_a_missing_script_has_a_hint(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o777)
    os.mkdir(d / "sub")
    os.chmod(d / "sub", 0o777)
    report = d / "r.json"
    r = run_jail(["--report", report, "--", "python3", "missing.py"], user=as_user, cwd=d / "sub")
    assert r.returncode == 125
    error = json.loads(report.read_text())["error"]
    assert error["message"] == f"missing.py does not exist in the current directory: there is no {d}/sub/missing.py"
    assert error["hint"] == ("check its name; a job started elsewhere, as cron starts in $HOME, needs the script's "
                             "full path")
    assert r.stderr == f"pyjail: script: {error['message']} ({error['hint']})\n"


def test_batch_limits_file_size_and_output(run_jail, world_tmp, as_user):
    work = world_tmp.dir(0o777)
    r = run_jail(["--profile", "batch", "--explain"], user=as_user, cwd=work)
    assert 'fsize = "1G"' in r.stdout and 'output-limit = "16M"' in r.stdout
    r = run_jail(["--profile", "batch", "--", "python3", "-c",
                  "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                 user=as_user, cwd=work, timeout=120)
    assert r.returncode == 137
    assert len(r.stdout) <= 16 << 20
    assert "output" in r.stderr


def test_doctor_does_not_offer_systemd_run_for_cgroup_v1(pyjail_bin, world_tmp, as_user):
    r = subprocess.run([*as_user.prefix, str(pyjail_bin), "doctor", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=str(world_tmp.dir()))
    checks = [c for c in json.loads(r.stdout)["checks"] if c["check"] == "cgroup v2"]
    assert checks
    for c in checks:
        if "binds them to cgroup v1" in c["detail"]:
            assert "systemd-run" not in c["fix"]
            assert "systemd.unified_cgroup_hierarchy=1" in c["fix"]
        elif c["status"] != "ok":
            assert "Delegate=yes" in c["fix"]
    # This host's / is a real file system: no initramfs verdict.
    assert not [c for c in json.loads(r.stdout)["checks"] if c["check"] == "root file system"]
