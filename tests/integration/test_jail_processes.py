"""Processes: the jail sees and signals only its own processes, none outlives the run, and none
has privileges -- on the host or inside."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest


@pytest.fixture
def host_victim(as_user, token, helpers):
    """A host process of the same host uid as the jailed program: the jail could signal it, were
    it visible."""
    cmd = [sys.executable, "-c", "import time; time.sleep(60)", token]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            helpers.skip_or_fail("setpriv (util-linux) is missing")
        cmd = [setpriv, f"--reuid={as_user.host_uid}", f"--regid={as_user.host_gid}",
               "--clear-groups", "--", *cmd]
    p = subprocess.Popen(cmd, cwd="/")
    yield p
    p.kill()
    p.wait()


def test_host_processes_are_invisible_and_unreachable(run_py, as_user, host_victim):
    r = run_py("""\
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        out = {"pids": pids, "child": child.pid, "me": os.getpid(), "ppid": os.getppid()}
        victim, test = int(sys.argv[1]), int(sys.argv[2])
        for name, pid in [("victim", victim), ("test", test)]:
            if pid in pids:
                out[name] = "visible"
                continue
            try:
                os.kill(pid, 0)
                out[name] = "ok"
            except OSError as e:
                out[name] = type(e).__name__
        child.kill()
        child.wait()
        emit(out)
        """, user=as_user, argv=[str(host_victim.pid), str(os.getpid())])
    got = r.result
    assert got["me"] == 2 and got["ppid"] == 1
    assert got["pids"] == sorted([1, 2, got["child"]])
    assert got["victim"] == "ProcessLookupError"
    assert got["test"] == "ProcessLookupError"
    assert host_victim.poll() is None


def test_kill_minus_one_hits_only_the_jail(run_jail, as_user, host_victim, helpers):
    # kill(-1) signals every process the caller may signal: with the victim sharing the
    # jailed program's host uid, only the pid namespace keeps it out of reach.
    code = ("import os, signal, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "os.kill(-1, signal.SIGTERM)\n"
            "print('child', child.wait(), flush=True)\n")
    r = run_jail(["--", "python", "-c", code], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == f"child {-signal.SIGTERM}\n"  # it did hit the jail's own child
    time.sleep(0.05)
    assert host_victim.poll() is None, "kill(-1) in the jail reached a host process"


WRITER = """\
import os, sys, time
while True:
    with open("/mnt/out/marker", "a") as f:
        f.write("x")
    time.sleep(0.05)
"""

STARTERS = {
    # subprocess.Popen, not waited for
    "popen": """\
        import subprocess
        subprocess.Popen([sys.executable, "-c", WRITER, token], start_new_session=True)
        """,
    # fork + setsid: a new session, still in the jail's pid namespace
    "fork-setsid": """\
        if os.fork() == 0:
            os.setsid()
            exec(WRITER)
        """,
    # the classic daemon: fork, setsid, fork again, the middle process exits
    "double-fork": """\
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.closerange(0, 3)
                exec(WRITER)
            os._exit(0)
        os.waitpid(pid, 0)
        """,
}


@pytest.mark.parametrize("how", sorted(STARTERS))
def test_background_processes_end_with_the_run(run_py, as_user, world_tmp, token, helpers, how):
    out = world_tmp.dir(0o777)
    marker = out / "marker"
    code = f"WRITER = {WRITER!r}\ntoken = sys.argv[1]\n" + textwrap.dedent(
        STARTERS[how]) + """
import time
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    if os.path.exists("/mnt/out/marker") and os.path.getsize("/mnt/out/marker") >= 3:
        break
    time.sleep(0.01)
emit({"size": os.path.getsize("/mnt/out/marker")})
"""
    r = run_py(code, user=as_user, opts=["--bind", f"{out}:/mnt/out"], argv=[token])
    assert r.result["size"] >= 3  # the background writer did run
    assert helpers.processes_with(token) == {}, "jailed processes outlived the run"
    size = marker.stat().st_size
    time.sleep(0.25)  # five of the writer's periods
    assert marker.stat().st_size == size, "something in the jail still writes after the run"
    st = marker.stat()
    assert (st.st_uid, st.st_gid) == (as_user.host_uid, as_user.host_gid)


def test_killing_pyjail_kills_the_jail(popen_jail, as_user, token, helpers):
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]],"
            " start_new_session=True)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    p = popen_jail(["--", "python", "-c", code, token], user=as_user)
    assert helpers.read_line(p.stdout, 10) == b"ready\n"
    assert len(helpers.processes_with(token)) >= 2  # pyjail and the jailed processes
    p.kill()  # SIGKILL: pyjail cannot clean up; the kernel must
    p.wait(timeout=10)
    left = helpers.wait_until_gone(token, timeout=5)
    assert left == {}, f"jailed processes survived their supervisor: {left}"


def test_files_made_in_the_jail_belong_to_its_host_user(run_py, as_user, world_tmp):
    out = world_tmp.dir(0o777)
    r = run_py("""\
        with open("/mnt/out/made-in-jail", "w") as f:
            f.write("x")
        os.mkdir("/mnt/out/dir-in-jail")
        st = os.stat("/mnt/out/made-in-jail")
        emit({"uid": st.st_uid, "gid": st.st_gid,
              "chown root": attempt(os.chown, "/mnt/out/made-in-jail", 0, 0),
              "chown other": attempt(os.chown, "/mnt/out/made-in-jail", 1001, 1001)})
        """, user=as_user, opts=["--bind", f"{out}:/mnt/out"])
    assert r.result["uid"] == 1000 and r.result["gid"] == 1000  # inside: the jail user
    for name in ("made-in-jail", "dir-in-jail"):
        st = (out / name).stat()
        assert st.st_uid != 0 and st.st_gid != 0
        assert (st.st_uid, st.st_gid) == (as_user.host_uid, as_user.host_gid), name
    assert r.result["chown root"] == "EINVAL"  # uid 0 has no name in the jail
    assert r.result["chown other"] == "EINVAL"


def test_workdir_files_belong_to_the_jails_host_user(run_py, as_user, world_tmp):
    work = world_tmp.dir(0o777)
    world_tmp.file("input.txt", "given\n", dir=work)
    r = run_py("""\
        with open("output.txt", "w") as f:
            f.write(open("input.txt").read().upper())
        emit({"cwd": os.getcwd(), "listing": sorted(os.listdir("."))})
        """, user=as_user, opts=["--workdir", work])
    assert r.result == {"cwd": "/work", "listing": ["input.txt", "output.txt"]}
    st = (work / "output.txt").stat()
    assert (work / "output.txt").read_text() == "GIVEN\n"
    assert (st.st_uid, st.st_gid) == (as_user.host_uid, as_user.host_gid)


def test_host_user_option_chooses_roots_jail_user(run_py, root_user, world_tmp):
    out = world_tmp.dir(0o777)
    r = run_py("""\
        with open("/mnt/out/f", "w") as f:
            f.write("x")
        emit({"map": open("/proc/self/uid_map").read().split(),
              "gmap": open("/proc/self/gid_map").read().split()})
        """, user=root_user, opts=["--host-user", "12345:23456", "--bind", f"{out}:/mnt/out"])
    st = (out / "f").stat()
    assert (st.st_uid, st.st_gid) == (12345, 23456)
    assert r.result == {"map": ["1000", "12345", "1"], "gmap": ["1000", "23456", "1"]}


def test_no_capabilities_and_no_new_privileges(run_py, as_user):
    r = run_py("""\
        import resource, subprocess
        def status(text):
            pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
            return {k: v.strip() for k, v in pairs
                    if k.startswith("Cap") or k == "NoNewPrivs"}
        out = {"self": status(open("/proc/self/status").read())}
        # and in a child: nothing comes back on exec
        out["child"] = status(subprocess.run(["/usr/bin/python3", "-c",
            "print(open('/proc/self/status').read())"], capture_output=True, text=True).stdout)
        out["setuid0"] = attempt(os.setuid, 0)
        out["seteuid0"] = attempt(os.seteuid, 0)
        out["setgid0"] = attempt(os.setgid, 0)
        out["setgroups"] = attempt(os.setgroups, [0])
        out["setresuid"] = attempt(os.setresuid, 0, 0, 0)
        out["core"] = resource.getrlimit(resource.RLIMIT_CORE)
        out["uid_map"] = open("/proc/self/uid_map").read().split("\\n")
        out["gid_map"] = open("/proc/self/gid_map").read().split("\\n")
        out["setgroups_file"] = open("/proc/self/setgroups").read().strip()
        out["write uid_map"] = attempt(
            lambda: open("/proc/self/uid_map", "wb", buffering=0).write(b"0 0 1\\n"))
        emit(out)
        """, user=as_user)
    got = r.result
    for who in ("self", "child"):
        caps = got[who]
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(caps[cap], 16) == 0, (who, cap, caps[cap])
        assert caps["NoNewPrivs"] == "1", who
    for call in ("setuid0", "seteuid0", "setgid0", "setgroups", "setresuid"):
        assert got[call] in ("EPERM", "EINVAL"), (call, got[call])
    assert got["core"] == [0, 0]
    assert got["uid_map"][1:] == [""], "uid_map must be a single line"
    if (os.environ.get("PYJAIL_THROUGH_TEMPLATE") == "1" and
            got["uid_map"][0].split() == ["1000", "1000", "1"]):
        # A run from a template: a user namespace of its own over the template's, mapping the
        # jail user to itself (the template's maps are those checked below for a fresh jail).
        assert got["gid_map"][0].split() == ["1000", "1000", "1"]
    elif as_user.is_root:  # an id of its own, from the default range
        for m in ("uid_map", "gid_map"):
            inside, outside, count = got[m][0].split()
            assert (inside, count) == ("1000", "1") and 1879048192 <= int(outside) < 1879048192 + 65536, m
    else:
        assert got["uid_map"][0].split() == ["1000", str(as_user.host_uid), "1"]
        assert got["gid_map"][0].split() == ["1000", str(as_user.host_gid), "1"]
    assert got["setgroups_file"] == "deny"
    assert got["write uid_map"] in ("EPERM", "EACCES")
