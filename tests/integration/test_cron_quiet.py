"""Quiet and honest for cron: the rlimit fallback notice once a day (a stamp in the user's
state directory, never followed through someone else's symlink), a switch for only that
notice, `--cgroup off` saying what it does, --explain giving a reason, the batch profile's
file and output limits, the report's wall-time limit and a missing script's hint.

`--cgroup off` forces the fallback on every host, so these tests run the same with and
without a delegated cgroup v2."""

import json
import os
import stat
import subprocess

NOTICE = "pyjail: no cgroup v2 for the limits ("
OFF_NOTICE = "pyjail: no cgroup v2 for the limits (--cgroup off); falling back: "
RUN = ["--cgroup", "off", "--", "python3", "-c", "print('ok')"]


def state_home(world_tmp, user):
    """An XDG_STATE_HOME the user who runs pyjail owns."""
    d = world_tmp.dir(0o700)
    if os.geteuid() == 0:
        os.chown(d, user.invoker_uid, user.invoker_uid)
    return d


def test_the_notice_is_said_once_a_day_per_reason(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    env = {"XDG_STATE_HOME": str(home)}
    r = run_jail(RUN, user=as_user, env=env)
    assert r.returncode == 0 and r.stdout == "ok\n"
    # One line, naming only the limits a cgroup would have enforced.
    assert r.stderr == (OFF_NOTICE + "memory by RLIMIT_DATA (per process), pids by RLIMIT_NPROC "
                        "(counted per user namespace: per jail), cpus NOT enforced, cpu-time by RLIMIT_CPU "
                        "(per process)\n"), r.stderr
    stamp = home / "pyjail" / "cgroup-notice"
    assert stat.S_IMODE((home / "pyjail").stat().st_mode) == 0o700
    assert stat.S_IMODE(stamp.stat().st_mode) == 0o600
    assert stamp.read_text().endswith(" --cgroup off\n")
    r = run_jail(RUN, user=as_user, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # always: every run; off: never.
    r = run_jail(["--cgroup-notice", "always", *RUN], user=as_user, env=env)
    assert r.stderr.count(NOTICE) == 1
    r = run_jail(["--cgroup-notice", "off", *RUN], user=as_user, env={"XDG_STATE_HOME": "/nonexistent"})
    assert r.returncode == 0 and r.stderr == ""
    # A stamp of another day, or of another reason, is said again.
    stamp.write_text("2000-01-01 --cgroup off\n")
    assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert run_jail(RUN, user=as_user, env=env).stderr == ""


def test_home_local_state_is_the_default(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    env = {"HOME": str(home), "XDG_STATE_HOME": ""}
    assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert (home / ".local/state/pyjail/cgroup-notice").is_file()
    assert run_jail(RUN, user=as_user, env=env).stderr == ""


def test_no_usable_state_directory_still_runs_and_says_it(run_jail, world_tmp, as_user):
    for env in ({"HOME": "/nonexistent", "XDG_STATE_HOME": ""},
                {"HOME": "relative", "XDG_STATE_HOME": "also-relative"}):
        for _ in range(2):
            r = run_jail(RUN, user=as_user, env=env)
            assert r.returncode == 0 and r.stdout == "ok\n"
            assert r.stderr.count(NOTICE) == 1, r.stderr


def test_a_planted_symlink_is_never_followed(run_jail, world_tmp, as_user):
    home = state_home(world_tmp, as_user)
    target = world_tmp.dir(0o777)
    (home / "pyjail").symlink_to(target)
    env = {"XDG_STATE_HOME": str(home)}
    for _ in range(2):
        assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert list(target.iterdir()) == []
    # The stamp itself as a link to a file pyjail's user could write.
    (home / "pyjail").unlink()
    (home / "pyjail").mkdir(0o700)
    victim = world_tmp.file("victim.txt", "keep me", mode=0o666)
    (home / "pyjail" / "cgroup-notice").symlink_to(victim)
    if os.geteuid() == 0:
        os.chown(home / "pyjail", as_user.invoker_uid, as_user.invoker_uid)
        os.lchown(home / "pyjail" / "cgroup-notice", as_user.invoker_uid, as_user.invoker_uid)
    for _ in range(2):
        assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert victim.read_text() == "keep me"


def test_a_state_directory_others_can_write_is_not_used(run_jail, world_tmp, as_user):
    home = world_tmp.dir(0o777)  # anyone could plant a link in it
    env = {"XDG_STATE_HOME": str(home)}
    for _ in range(2):
        assert run_jail(RUN, user=as_user, env=env).stderr.count(NOTICE) == 1
    assert list(home.iterdir()) == []


def test_root_never_writes_into_another_users_state_directory(run_jail, world_tmp, root_user):
    """sudo without -H keeps the user's HOME: root must not create files there."""
    home = world_tmp.dir(0o755)
    os.chown(home, 65534, 65534)
    env = {"HOME": str(home), "XDG_STATE_HOME": ""}
    for _ in range(2):
        assert run_jail(RUN, user=root_user, env=env).stderr.count(NOTICE) == 1
    assert list(home.iterdir()) == []


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
    assert limits["wall-time"] == {"value": "42", "mechanism": "supervisor",
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
