"""Each jail its own host uid: a jail at its limits leaves the host user's per-uid kernel budgets
(processes, pipe pages, pending signals, epoll watches) untouched, root's concurrent jails get
different ids, a writable bind's files stay the invoker's (root: --host-user's), and runs from
one template count their processes apart.

As root, jails take ids of the default range; the unprivileged user (65534) gets a subordinate
range in /etc/subuid and /etc/subgid for these tests (added here, restored afterwards). The
host user whose budgets were shared before is 65534 either way: root's jails ran as nobody."""
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap

import pytest

from pyjail_testing import skip_or_fail

HOST = 65534  # whose budgets a jail shared: nobody for root's jails, the user itself otherwise
RANGE = (1879048192, 65536)
SUB_FIRST, SUB_COUNT = 1610612736, 4096  # the test user's subordinate range


def as_host_user() -> list[str]:
    if os.geteuid() == HOST:
        return []
    return [shutil.which("setpriv") or "setpriv", f"--reuid={HOST}", f"--regid={HOST}",
            "--clear-groups", "--"]


@contextlib.contextmanager
def subordinate_range():
    """The unprivileged user (HOST) has SUB_FIRST:SUB_COUNT in /etc/subuid and /etc/subgid
    while it lasts."""
    if os.geteuid() != 0:
        skip_or_fail("a subordinate id range needs root to write /etc/subuid and /etc/subgid")
    if not (shutil.which("newuidmap") and shutil.which("newgidmap")):
        skip_or_fail("newuidmap/newgidmap are missing (the uidmap package)")
    saved = {}
    for name in ("/etc/subuid", "/etc/subgid"):
        saved[name] = open(name).read() if os.path.exists(name) else None
        with open(name, "a") as f:
            f.write(f"{HOST}:{SUB_FIRST}:{SUB_COUNT}\n")
    try:
        yield
    finally:
        for name, text in saved.items():
            if text is None:
                os.unlink(name)
            else:
                with open(name, "w") as f:
                    f.write(text)


@pytest.fixture
def own_ids(as_user, world_tmp):
    """Options and environment that give as_user's jails ids of their own; the expected range."""
    if as_user.is_root:
        yield {}, RANGE
        return
    with subordinate_range():
        runtime = world_tmp.dir(0o700)
        os.chown(runtime, HOST, HOST)
        yield {"XDG_RUNTIME_DIR": str(runtime)}, (SUB_FIRST, SUB_COUNT)


def start(popen_jail, user, env, code, *opts):
    """A jail that runs `code`, prints one JSON line, and holds on until its stdin closes."""
    full = "import os, sys\n" + textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(out), flush=True)\nsys.stdin.read()\n"
    p = popen_jail([*opts, "--", "python", "-c", full], user=user, stdin=subprocess.PIPE,
                   env={**os.environ, **env})
    return p


def held(p, helpers):
    line = helpers.read_line(p.stdout, 60)
    if not line:
        p.kill()
        pytest.fail("the jail ended early: " + p.communicate()[1].decode())
    return json.loads(line)


def on_host(code: str) -> str:
    r = subprocess.run([*as_host_user(), sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, cwd="/", timeout=60)
    return r.stdout.strip() + r.stderr.strip()


def test_concurrent_jails_get_host_ids_of_their_own(popen_jail, as_user, own_ids, helpers):
    env, (first, count) = own_ids
    code = 'out = {"uid": open("/proc/self/uid_map").read().split(), "gid": open("/proc/self/gid_map").read().split()}'
    a = start(popen_jail, as_user, env, code)
    b = start(popen_jail, as_user, env, code)
    ra, rb = held(a, helpers), held(b, helpers)
    for r in (ra, rb):
        assert r["uid"][0] == "1000" and first <= int(r["uid"][1]) < first + count, r
        assert int(r["uid"][1]) not in (0, HOST, as_user.invoker_uid)
        assert first <= int(r["gid"][1]) < first + count or int(r["gid"][1]) >= first, r
    assert ra["uid"][1] != rb["uid"][1], "two running jails share a host uid"
    for p in (a, b):
        p.communicate(timeout=30)


THROUGH_TEMPLATE = os.environ.get("PYJAIL_THROUGH_TEMPLATE") == "1"


def test_a_lock_directory_another_user_made_first_is_refused_saying_whose_and_the_ways_out(
        pyjail_command, _preflight, world_tmp):
    # Without XDG_RUNTIME_DIR a user's jails lock their ids in /tmp/pyjail-ids-UID, which any
    # other user can make first. The run cannot go on (that user could hold or forge the locks),
    # but the one line says whose it is, who can remove it, and how to run meanwhile.
    user = _preflight("unprivileged")
    squatter = 1  # daemon, or whoever uid 1 is here
    owner = f"uid {squatter} ({pwd.getpwuid(squatter).pw_name})"
    lock_dir = f"/tmp/pyjail-ids-{user.invoker_uid}"
    aside = None
    if os.path.lexists(lock_dir):  # the user's own, from a run before: kept, and put back
        aside = f"{lock_dir}.aside-{os.getpid()}"
        os.rename(lock_dir, aside)
    os.mkdir(lock_dir, 0o700)
    os.chown(lock_dir, squatter, squatter)
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    try:
        with subordinate_range():
            def run(*opts):
                return subprocess.run([*pyjail_command(user), *opts, "--", "python", "-c", "print('ran')"],
                                      env=env, cwd="/", capture_output=True, text=True, timeout=60)
            r = run()
            assert r.returncode == 125 and r.stdout == "" and r.stderr.count("\n") == 1, r
            assert r.stderr.startswith(f"pyjail: host ids: {lock_dir}, where your jails lock their host ids, "
                                       f"belongs to {owner}, not to you, "), r.stderr
            for fix in (f"root or its owner can remove it (rm -r {lock_dir})", "--host-ids shared",
                        "set XDG_RUNTIME_DIR to a directory of your own"):
                assert fix in r.stderr, r.stderr
            # The ways out it names work.
            r = run("--host-ids", "shared")
            assert r.returncode == 0 and r.stdout == "ran\n", r
            runtime = world_tmp.dir(0o700)
            os.chown(runtime, HOST, HOST)
            env["XDG_RUNTIME_DIR"] = str(runtime)
            r = run()
            assert r.returncode == 0 and r.stdout == "ran\n", r
    finally:
        os.rmdir(lock_dir)
        if aside:
            os.rename(aside, lock_dir)


def test_a_cron_run_and_a_session_run_of_one_user_get_ids_of_their_own(popen_jail, _preflight,
                                                                       world_tmp, helpers):
    # A run without XDG_RUNTIME_DIR (cron, su) locks its id in /tmp/pyjail-ids-UID, one with it
    # in $XDG_RUNTIME_DIR/pyjail-ids: the second locks in /tmp too, or both took the first id.
    user = _preflight("unprivileged")
    lock_dir = f"/tmp/pyjail-ids-{user.invoker_uid}"
    aside = None
    if os.path.lexists(lock_dir):  # the user's own, from a run before: kept, and put back
        aside = f"{lock_dir}.aside-{os.getpid()}"
        os.rename(lock_dir, aside)
    code = 'out = {"uid": open("/proc/self/uid_map").read().split()}'
    cron = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    runtime = world_tmp.dir(0o700)
    os.chown(runtime, HOST, HOST)
    try:
        with subordinate_range():
            a = popen_jail(["--", "python", "-c", "import json, sys\n" + code +
                            "\nprint(json.dumps(out), flush=True)\nsys.stdin.read()\n"],
                           user=user, stdin=subprocess.PIPE, env=cron)
            b = start(popen_jail, user, {"XDG_RUNTIME_DIR": str(runtime)}, code)
            ra, rb = held(a, helpers), held(b, helpers)
            assert SUB_FIRST <= int(ra["uid"][1]) < SUB_FIRST + SUB_COUNT, ra
            assert SUB_FIRST <= int(rb["uid"][1]) < SUB_FIRST + SUB_COUNT, rb
            assert ra["uid"][1] != rb["uid"][1], "a cron run and a session run share a host uid"
            for p in (a, b):
                p.communicate(timeout=30)
    finally:
        shutil.rmtree(lock_dir, ignore_errors=True)
        if aside:
            os.rename(aside, lock_dir)


def test_report_says_the_host_ids_and_whether_budgets_are_shared(run_jail, as_user, own_ids, world_tmp):
    env, (first, count) = own_ids
    report = world_tmp.dir(0o777) / "r.json"
    r = run_jail(["--report", report, "--", "python", "-c", "pass"], user=as_user, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    if THROUGH_TEMPLATE:  # the template's ids, not the run's own
        assert got["host_ids"] == "template" and got["budgets_shared_with"] == "the template and its other runs"
        return
    assert first <= got["host_uid"] < first + count
    assert got["host_ids"] == ("range" if as_user.is_root else "subordinate")
    assert got["budgets_shared_with"] is None and got["budgets_shared_why"] is None
    assert got["counts_charged_to_uid"] == as_user.invoker_uid


def test_a_user_without_a_range_is_told_the_budgets_are_shared(run_jail, as_user, world_tmp):
    if as_user.is_root:
        opts, shared = ["--host-user", "nobody"], "host user uid 65534"
    else:
        opts, shared = ["--host-ids", "shared"], f"the invoking user (uid {as_user.invoker_uid})"
    report = world_tmp.dir(0o777) / "r.json"
    r = run_jail(["--report", report, *opts, "--", "python", "-c", "pass"], user=as_user)
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    if THROUGH_TEMPLATE and not as_user.is_root:
        assert got["host_ids"] == "template", got
        return
    assert got["host_uid"] == HOST and got["budgets_shared_with"] == shared, got


# Process and pending-signal counts are kept per user namespace and charged, level by level, to
# each namespace's creator: a user's jails add to the user's own counts whatever ids they map
# (the kernel's design, so no user escapes its limits), root's to root's. So these two hold
# for root's jails, and only the budgets kept per host uid (below) part a user from its jails.
def test_roots_jails_processes_are_not_the_host_users(popen_jail, root_user, helpers, token):
    as_user, env = root_user, {}
    p = start(popen_jail, as_user, env, f"""\
        import subprocess
        kids = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "{token}"],
                                 stdin=subprocess.PIPE) for _ in range(40)]
        out = {{"kids": len(kids)}}
        """, "--pids", "100")
    assert held(p, helpers) == {"kids": 40}
    # The host user, with a process budget just above what it runs itself, can still fork: the
    # jail's 40 processes are not counted as its own. The room (20) is half the jail's, so the
    # test still fails if they are, and leaves some for the other test lanes' processes of the
    # same user that start meanwhile.
    got = on_host(f"""\
        import os, resource
        def real_uid(pid):
            try:
                return int(open(f"/proc/{{pid}}/status").read().split("Uid:")[1].split()[0])
            except (OSError, IndexError):
                return None
        def tasks(pid):
            try:
                return len(os.listdir(f"/proc/{{pid}}/task"))
            except OSError:
                return 0
        mine = sum(tasks(p) for p in os.listdir("/proc") if p.isdigit() and real_uid(p) == {HOST})
        resource.setrlimit(resource.RLIMIT_NPROC, (mine + 20, mine + 20))
        pids = []
        try:
            for _ in range(3):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                pids.append(pid)
            print("forked")
        except OSError as e:
            print("fork failed", e)
        for pid in pids:
            os.waitpid(pid, 0)
        """)
    jailed = helpers.processes_with(token)
    p.communicate(timeout=30)
    assert got == "forked"
    uids = {int(open(f"/proc/{pid}/status").read().split("Uid:")[1].split()[0])
            for pid in jailed if os.path.exists(f"/proc/{pid}")}
    assert HOST not in uids


def test_the_jails_pipes_leave_the_host_users_pipe_pages(popen_jail, as_user, own_ids, helpers):
    env, _ = own_ids
    # 1100 pipes of 16 pages each: past pipe-user-pages-soft (16384 pages), after which every
    # new pipe of the same host user gets one page.
    p = start(popen_jail, as_user, env, """\
        import fcntl
        pipes = [os.pipe() for _ in range(1100)]
        out = {"last": fcntl.fcntl(os.pipe()[1], 1032)}
        """, "--nofile", "4096")
    assert held(p, helpers)["last"] <= 8192  # the jail is past its own budget
    got = on_host("""\
        import fcntl, os
        print(fcntl.fcntl(os.pipe()[1], 1032))
        """)
    p.communicate(timeout=30)
    assert got == "65536", "the host user's new pipes shrank: " + got


def test_roots_jails_pending_signals_leave_the_host_users(popen_jail, root_user, helpers):
    as_user, env = root_user, {}
    p = start(popen_jail, as_user, env, """\
        import ctypes, resource
        libc = ctypes.CDLL(None, use_errno=True)
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (200, 200))
        # Each POSIX timer holds one queued signal of the budget (the filter refuses
        # sigqueue, and kill's signals are let past the limit).
        n, timer = 0, ctypes.c_void_p()
        while n < 1000 and libc.timer_create(1, None, ctypes.byref(timer)) == 0:
            n += 1
        out = {"queued": n}
        """)
    queued = held(p, helpers)["queued"]
    assert queued == 200  # the jail's own limit
    got = on_host(f"""\
        import ctypes, os, resource
        libc = ctypes.CDLL(None, use_errno=True)
        resource.setrlimit(resource.RLIMIT_SIGPENDING, ({queued}, {queued}))
        timer = ctypes.c_void_p()
        ok = libc.timer_create(1, None, ctypes.byref(timer)) == 0
        print("queued" if ok else os.strerror(ctypes.get_errno()))
        """)
    p.communicate(timeout=30)
    assert got == "queued"


@pytest.fixture
def few_epoll_watches():
    """fs.epoll.max_user_watches lowered (for every user, briefly) so a jail can reach it."""
    path = "/proc/sys/fs/epoll/max_user_watches"
    if os.geteuid() != 0:
        skip_or_fail("lowering fs.epoll.max_user_watches needs root")
    old = open(path).read()
    with open(path, "w") as f:
        f.write("20000\n")
    try:
        yield 20000
    finally:
        with open(path, "w") as f:
            f.write(old)


def test_the_jails_epoll_watches_leave_the_host_users(popen_jail, as_user, own_ids, helpers,
                                                       few_epoll_watches):
    env, _ = own_ids
    p = start(popen_jail, as_user, env, """\
        import select
        fds = [os.eventfd(0) for _ in range(1000)]
        polls, n, err = [], 0, None
        try:
            while n < 30000:
                ep = select.epoll()
                polls.append(ep)
                for fd in fds:
                    ep.register(fd, select.EPOLLIN)
                    n += 1
        except OSError as e:
            err = e.errno
        out = {"watches": n, "err": err}
        """, "--nofile", "2048")
    got = held(p, helpers)
    assert got["watches"] == few_epoll_watches and got["err"] == 28  # ENOSPC: the jail is full
    host = on_host("""\
        import os, select
        ep = select.epoll()
        ep.register(os.eventfd(0), select.EPOLLIN)
        print("watching")
        """)
    p.communicate(timeout=30)
    assert host == "watching"


def test_a_writable_binds_files_are_the_invokers(run_py, as_user, own_ids, world_tmp):
    env, _ = own_ids
    work = world_tmp.dir(0o755)
    os.chown(work, HOST, HOST)  # the invoker's (as root: --host-user's) own directory
    r = run_py("""\
        with open("made.txt", "w") as f:
            f.write("x")
        os.mkdir("made-dir")
        emit({"uid_map": open("/proc/self/uid_map").read().split()})
        """, user=as_user, opts=["--workdir", work], env=env)
    for name in ("made.txt", "made-dir"):
        st = (work / name).stat()
        assert (st.st_uid, st.st_gid) == (HOST, HOST), name
    # The process has an id of its own, its files are --host-user's; through a template
    # (pyjail serve --allow-binds) the template and its runs are --host-user.
    if as_user.is_root and not THROUGH_TEMPLATE:
        assert int(r.result["uid_map"][1]) >= RANGE[0]


def test_template_runs_count_their_processes_apart(serve, run_jail, as_user, own_ids, popen_jail,
                                                   helpers, token):
    env, _ = own_ids
    sock, _server = serve(as_user)
    fill = f"""\
        import subprocess
        kids = []
        try:
            while len(kids) < 100:
                kids.append(subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                                              "{token}"], stdin=subprocess.PIPE))
        except OSError:
            pass
        out = {{"kids": len(kids)}}
        """
    a = start(popen_jail, as_user, env, fill, "--via", sock, "--pids", "20")
    first = held(a, helpers)["kids"]
    assert 10 <= first < 20  # the run reached its own limit
    b = start(popen_jail, as_user, env, fill, "--via", sock, "--pids", "20")
    second = held(b, helpers)["kids"]
    for p in (a, b):
        p.communicate(timeout=30)
    assert second == first, "the second run's process budget was taken by the first"


def test_doctor_says_whether_jails_get_ids_of_their_own(run_jail, as_user, own_ids):
    env, (first, count) = own_ids
    r = run_jail(["doctor"], user=as_user, env=env)
    line = next(l for l in r.stdout.splitlines() if "host ids" in l)
    assert line.split()[0] == "ok" and f"{count} " in line and str(first) in line, line


def test_doctor_tells_a_user_without_a_range_how_to_get_one(run_jail, as_user):
    if as_user.is_root:
        return  # root's jails always have a range
    r = run_jail(["doctor"], user=as_user)
    lines = r.stdout.splitlines()
    at = next(i for i, l in enumerate(lines) if "host ids" in l)
    assert lines[at].split()[0] == "warn" and "share your per-user kernel budgets" in lines[at]
    assert "usermod --add-subuids" in lines[at + 1]


def test_a_template_runs_report_says_it_shares_the_templates_ids(serve, run_jail, as_user, world_tmp):
    sock, _server = serve(as_user)
    report = world_tmp.dir(0o777) / "r.json"
    r = run_jail(["--report", report, "--via", sock, "--", "python", "-c", "pass"], user=as_user)
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    assert got["host_ids"] == "template" and got["budgets_shared_with"] == "the template and its other runs"
    assert got["host_uid"] is None
