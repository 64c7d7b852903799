"""--audit-log: one JSON line per run appended, also for failed runs; safe under concurrent
runs; never through a symbolic link; never reachable from the jail."""

import concurrent.futures
import hashlib
import json
import os
import stat

import pytest


def owned_dir(world_tmp, user):
    """A directory only the user who runs pyjail can write."""
    d = world_tmp.dir(0o755)
    if os.geteuid() == 0:
        os.chown(d, user.invoker_uid, user.invoker_uid)
    return d


def log_lines(path):
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_each_run_appends_one_line(run_jail, world_tmp, as_user):
    log = owned_dir(world_tmp, as_user) / "audit.jsonl"
    code = "print('hello')"
    r = run_jail(["--audit-log", log, "--", "python3", "-c", code], user=as_user)
    assert r.returncode == 0 and r.stdout == "hello\n", r.stderr
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert log.stat().st_uid == as_user.invoker_uid
    script = world_tmp.script("import sys\nsys.exit(3)\n")
    r = run_jail(["--audit-log", log, "--wall-time", "20", "--", "python3", script], user=as_user)
    assert r.returncode == 3
    first, second = log_lines(log)
    assert first["uid"] == as_user.invoker_uid
    assert first["profile"] == "strict"
    assert first["command"] == ["python3", "-c", code] and first["command_truncated"] is False
    assert first["program_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert (first["status"], first["exit_code"], first["error"]) == ("ok", 0, None)
    assert first["wall_time_s"] > 0 and first["memory_peak_bytes"] > 0
    assert first["cpu_user_s"] is not None and first["denied_syscalls"] == []
    assert first["time"].endswith("Z") and first["pyjail_version"]
    # The script, hashed as the jail read it.
    assert second["program_sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    assert (second["status"], second["exit_code"]) == ("exit", 3)


def test_denied_syscalls_and_timeouts_are_logged(run_jail, world_tmp, as_user):
    log = owned_dir(world_tmp, as_user) / "audit.jsonl"
    run_jail(["--audit-log", log, "--", "python3", "-c",
              "import socket\ntry: socket.socket()\nexcept OSError: raise SystemExit(1)"],
             user=as_user)
    run_jail(["--audit-log", log, "--wall-time", "0.5", "--", "python3", "-c", "while True: pass"],
             user=as_user)
    denied, timeout = log_lines(log)
    assert denied["status"] == "exit" and denied["denied_syscalls_total"] >= 1
    assert any(d["syscall"].startswith("socket") for d in denied["denied_syscalls"])
    assert (timeout["status"], timeout["exit_code"]) == ("wall-timeout", 124)


def test_failed_runs_are_logged_too(run_jail, world_tmp, as_user):
    d = owned_dir(world_tmp, as_user)
    log = d / "audit.jsonl"
    missing = world_tmp.dir() / "missing.py"
    r = run_jail(["--audit-log", log, "--", "python3", missing], user=as_user)
    assert r.returncode == 125
    r = run_jail(["--audit-log", log, "--profile", "nosuch", "--", "python3", "-c", "1"],
                 user=as_user)
    assert r.returncode == 125
    script_error, profile_error = log_lines(log)
    assert (script_error["status"], script_error["exit_code"]) == ("setup-error", 125)
    assert script_error["error"].startswith(f"script: cannot open {missing}")
    assert script_error["program_sha256"] is None
    assert profile_error["status"] == "setup-error" and profile_error["profile"] == "nosuch"
    assert "nosuch" in profile_error["error"]
    assert profile_error["program_sha256"] == hashlib.sha256(b"1").hexdigest()


def test_the_profile_key_names_the_log(run_jail, world_tmp, as_user):
    d = owned_dir(world_tmp, as_user)
    profile = world_tmp.file("p.toml", f'audit-log = "{d}/from-profile.jsonl"\n')
    r = run_jail(["--profile", profile, "--", "python3", "-c", "pass"], user=as_user)
    assert r.returncode == 0, r.stderr
    (line,) = log_lines(d / "from-profile.jsonl")
    assert line["profile"] == str(profile) and line["status"] == "ok"
    # --explain runs nothing and logs nothing.
    r = run_jail(["--profile", profile, "--explain"], user=as_user)
    assert r.returncode == 0
    assert len(log_lines(d / "from-profile.jsonl")) == 1


def test_concurrent_runs_never_interleave(pyjail_command, world_tmp, as_user):
    import subprocess
    log = owned_dir(world_tmp, as_user) / "audit.jsonl"
    # Long lines (each run's -c text is 12 KB): a line split by another's would not parse.
    def one(i):
        code = f"x = {i}  # " + "y" * 12000
        return subprocess.run([*pyjail_command(as_user), "--audit-log", str(log), "--",
                               "python3", "-c", code], capture_output=True, text=True,
                              timeout=120, cwd="/")
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(6)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    lines = log_lines(log)
    assert len(lines) == 6
    assert sorted(int(l["command"][2].split()[2]) for l in lines) == list(range(6))
    assert all(len(json.dumps(l)) < 16384 for l in lines)


def test_a_huge_command_line_gives_a_bounded_line(run_jail, world_tmp, as_user):
    log = owned_dir(world_tmp, as_user) / "audit.jsonl"
    code = "pass  # " + "z" * 100000
    r = run_jail(["--audit-log", log, "--", "python3", "-c", code], user=as_user)
    assert r.returncode == 0, r.stderr
    raw = log.read_bytes()
    assert len(raw) <= 16384
    (line,) = log_lines(log)
    assert line["command_truncated"] is True
    assert line["program_sha256"] == hashlib.sha256(code.encode()).hexdigest()


def test_a_symlink_is_refused_before_anything_runs(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o777)
    victim = world_tmp.file("victim.txt", "keep me")
    link = d / "audit.jsonl"
    link.symlink_to(victim)
    r = run_jail(["--audit-log", link, "--", "python3", "-c", "print('ran')"], user=as_user)
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr == (f"pyjail: audit log: cannot write {link}: Too many levels of symbolic "
                        "links (the audit log must not be a symbolic link)\n")
    assert victim.read_text() == "keep me"


def test_another_users_file_in_a_sticky_directory_is_refused(run_jail, world_tmp, root_user):
    """Root must not append to a file another user left in /tmp for it."""
    d = world_tmp.dir(0o1777)
    planted = d / "audit.jsonl"
    planted.write_text("")
    os.chown(planted, 65534, 65534)
    r = run_jail(["--audit-log", planted, "--", "python3", "-c", "print('ran')"], user=root_user)
    assert r.returncode == 125 and r.stdout == ""
    assert "refusing to write" in r.stderr and "sticky directory" in r.stderr
    assert planted.read_text() == ""


def test_the_jail_never_holds_the_log(run_py, world_tmp, as_user):
    d = owned_dir(world_tmp, as_user)
    log = d / "audit.jsonl"
    r = run_py("""
        fds = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds[fd] = os.readlink("/proc/self/fd/" + fd)
            except OSError as e:
                fds[fd] = str(e)
        emit(fds)
        """, user=as_user, opts=["--audit-log", log])
    assert not any("audit" in target for target in r.result.values()), r.result
    assert len(log_lines(log)) == 1
