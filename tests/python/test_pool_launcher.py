"""A Pool's runs are forked by one long-lived `pyjail launcher`: each run's pyjail is a
process of its own that holds nothing of another run's, and a launcher that ends fails the
runs in flight with a reason, then is started again."""

import os
import signal
import threading
import time

import pytest

import pyjail


@pytest.fixture(scope="module")
def pool(pyjail_bin):
    os.environ.setdefault("PYJAIL_BIN", pyjail_bin)
    with pyjail.Pool(size=1) as p:
        yield p


def _children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(p) for p in f.read().split()]


def _objects(pid):
    """What a process's descriptors are: {(dev, inode)} of its pipes, sockets and memory
    files, and the pids its pidfds name."""
    objects, pids = set(), set()
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            target = os.readlink(os.path.join(d, fd))
            if target == "anon_inode:[pidfd]" or target.startswith("pidfd:"):
                with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                    pids.update(int(l.split()[1]) for l in f if l.startswith("Pid:"))
            elif target.startswith(("pipe:", "socket:", "/memfd:")):
                st = os.stat(os.path.join(d, fd))
                objects.add((st.st_dev, st.st_ino))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return objects, pids


def _run_in_thread(pool, code, up, args=()):
    out = {}

    def target():
        def seen(text):
            if "up" in text:
                up.set()
        out["result"] = pool.run(code, args=list(args),
                                 callbacks=pyjail.Callbacks(on_stdout=seen))
    t = threading.Thread(target=target)
    t.start()
    return t, out


def test_a_run_s_pyjail_holds_nothing_of_another_run_nor_the_launcher_s(pool):
    # Attack: one run reaching another run's supervision (its output, its report, its
    # pyjail through a pidfd) or the launcher's socket (to start or kill runs). Each run's
    # pyjail keeps its own four descriptors only; its program is in a jail of its own.
    code = "import sys, time; print('up', flush=True); time.sleep(float(sys.argv[1]))"
    up_a, up_b = threading.Event(), threading.Event()
    ta, out_a = _run_in_thread(pool, code, up_a, ["4"])
    assert up_a.wait(60)
    launcher = pool._launcher._proc.pid
    (a,) = _children(launcher)
    probe = ("import os, sys, time; print('up', flush=True); seen = []\n"
             "for pid in map(int, sys.argv[1:]):\n"
             "    try: os.kill(pid, 0); seen.append(pid)\n"
             "    except ProcessLookupError: pass\n"
             "    seen += [pid] if os.path.exists('/proc/%d/fd' % pid) else []\n"
             "time.sleep(1); print(seen)")
    tb, out_b = _run_in_thread(pool, probe, up_b, [str(a), str(launcher), str(os.getpid())])
    assert up_b.wait(60)
    (b,) = [p for p in _children(launcher) if p != a]
    objects_a, pids_a = _objects(a)
    objects_b, pids_b = _objects(b)
    launcher_objects, _ = _objects(launcher)
    try:
        assert not objects_a & objects_b, "two runs' pyjails share a pipe, socket or report"
        assert not (objects_a | objects_b) & launcher_objects, "a run's pyjail holds the launcher's socket"
        assert a not in pids_b and b not in pids_a, "a run's pyjail holds another's pidfd"
    finally:
        ta.join(60)
        tb.join(60)
    assert out_a["result"].ok and out_b["result"].ok, (out_a, out_b)
    # From inside its jail, the run sees neither the other run's pyjail, nor the launcher,
    # nor the driver.
    assert out_b["result"].stdout == "up\n[]\n"


def test_a_launcher_that_ends_fails_the_runs_in_flight_and_is_started_again(pool):
    up, out = threading.Event(), {}

    def target():
        try:
            pool.run("import time; print('up', flush=True); time.sleep(30)",
                     callbacks=pyjail.Callbacks(on_stdout=lambda text: up.set()))
        except pyjail.JailError as e:
            out["error"] = e
    t = threading.Thread(target=target)
    t.start()
    assert up.wait(60)
    os.kill(pool._launcher._proc.pid, signal.SIGKILL)
    t.join(60)
    assert "the Pool's launcher (pyjail launcher) ended while the run was in flight" in str(out.get("error"))
    r = pool.run("print('again')")
    assert (r.stdout, r.ok) == ("again\n", True)


def test_a_pool_session_is_forked_by_the_launcher_and_takes_interrupts_through_it(pool):
    with pool.session() as s:
        launcher = pool._launcher._proc.pid
        # Its pyjail is the launcher's child, named by the pidfd the Pool holds.
        assert s.pid in _children(launcher)
        # Attack: the session reaching a run's supervision, or a run the session's. Each
        # pyjail holds its own descriptors only, and no pidfd of the other.
        up = threading.Event()
        t, out = _run_in_thread(pool, "import time; print('up', flush=True); time.sleep(2)", up)
        try:
            assert up.wait(60)
            (other,) = [p for p in _children(launcher) if p != s.pid]
            mine, my_pids = _objects(s.pid)
            theirs, their_pids = _objects(other)
            launcher_objects, _ = _objects(launcher)
            assert not mine & theirs, "a session's pyjail shares a pipe, socket or report with a run's"
            assert not (mine | theirs) & launcher_objects, "a pyjail holds the launcher's socket"
            assert other not in my_pids and s.pid not in their_pids
        finally:
            t.join(60)
        assert out["result"].ok, out
        s.run("import time\nstate = 'kept'")
        # A cell over its timeout is interrupted (SIGINT through the pidfd, relayed by
        # pyjail to the program), and the session keeps its state.
        r = s.run("print('before')\nwhile True:\n    time.sleep(0.01)", timeout=1)
        assert r.timed_out and not r.restarted, r.error
        assert r.error.type == "KeyboardInterrupt" and r.stdout == "before\n"
        assert s.run("state").value == "'kept'"
        # Restarted, it is forked by the launcher again.
        first = s.pid
        s.restart()
        assert s.pid != first and s.pid in _children(launcher)
        assert s.run("1 + 1").value == "2"
    # Closed, its pyjail has ended and the launcher holds nothing of it.
    assert first not in _children(launcher)


def test_a_launcher_that_ends_takes_its_sessions_and_the_next_call_starts_both_again(pool):
    s = pool.session()
    try:
        s.run("x = 1")
        os.kill(pool._launcher._proc.pid, signal.SIGKILL)
        # The Pool kills the pyjails the launcher had (they outlive it).
        deadline = time.monotonic() + 30
        while s._proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        r = s.run("2 + 2")
        # The interpreter went with the launcher: the session says why and starts a new one.
        assert r.restarted and r.error.type == "InterpreterDied", r
        assert "the Pool's launcher (pyjail launcher) ended" in r.error.message, r.error
        assert s.run("2 + 2").value == "4"
        assert s.pid in _children(pool._launcher._proc.pid)
    finally:
        s.close()


def test_a_nul_in_a_value_is_refused_not_split_into_options_of_pyjail_s_own(pool, monkeypatch):
    # Attack: a value the host passes on (an environment variable's, from a user or a
    # model) with NULs in it. The launcher's words end at a NUL: split there, the value
    # would give the run pyjail's own options (--env-pass of the host's secrets, --report
    # over a host file). It is refused, as pyjail.run's Popen refuses it.
    monkeypatch.setenv("PYJAIL_TEST_HOST_SECRET", "s3cret")
    env = {"A": "x\0--env-pass\0PYJAIL_TEST_HOST_SECRET"}
    code = "import os; print(os.environ.get('PYJAIL_TEST_HOST_SECRET'))"
    with pytest.raises(ValueError, match="null byte"):
        pyjail.run(code, env=env)
    with pytest.raises(ValueError, match="null byte"):
        pool.run(code, env=env)
    with pytest.raises(ValueError, match="null byte"):
        pool.session(env=env)
    assert pool._launcher._runs == {}
    assert pool.run(code).stdout == "None\n"


def test_a_pool_session_left_open_after_the_pool_closed_is_collected_quietly(pyjail_bin):
    import gc
    import sys
    with pyjail.Pool(size=1) as p:
        s = p.session()
        assert s.run("1 + 1").value == "2"
    # The launcher took the session's pyjail with it; the session, never closed, is
    # collected: its finalizer closes what it held without raising the loss again.
    raised = []
    hook, sys.unraisablehook = sys.unraisablehook, raised.append
    try:
        del s
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not raised, [(r.exc_type, r.exc_value) for r in raised]


def test_a_launcher_at_its_descriptor_limit_says_so(pyjail_bin):
    import resource
    # Many live sessions and runs, each a pidfd in the launcher: at its descriptor limit
    # (a low one it inherited from the driver) a new one fails with pyjail's reason, and
    # once some end the next one starts.
    with pyjail.Pool(size=1) as p:
        assert p.run("print(1)").ok
        resource.prlimit(p._launcher._proc.pid, resource.RLIMIT_NOFILE, (20, 20))
        sessions = []
        try:
            with pytest.raises(pyjail.JailError) as failed:
                for _ in range(40):
                    sessions.append(p.session())
            assert sessions, "no session started under the limit"
            assert "pyjail: launcher: cannot take the run's descriptors" in str(failed.value)
        finally:
            for s in sessions:
                s.close()
        assert p.run("print(2)").stdout == "2\n"


def test_a_fork_of_the_driver_runs_through_a_launcher_of_its_own_and_leaves_the_parent_s(pyjail_bin):
    # A fork of the driver (a multiprocessing worker) that uses the Pool it inherited: the
    # launcher's answers go to the thread that reads them, which is the parent's alone, under
    # ids the child took from the same count. Its run must neither hang nor take the
    # parent's run's answers, and its close() must end nothing of the parent's.
    with pyjail.Pool(size=1) as p:
        assert p.run("print(1)").ok
        up, out = threading.Event(), {}

        def target():
            out["result"] = p.run("import time; print('up', flush=True); time.sleep(3); print('parent')",
                                  callbacks=pyjail.Callbacks(on_stdout=lambda text: up.set()))
        t = threading.Thread(target=target)
        t.start()
        assert up.wait(60)
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(r)
                signal.alarm(60)
                got = p.run("print('child')")
                p.close()
                os.write(w, repr((got.stdout, got.ok)).encode())
            except BaseException as e:
                os.write(w, repr(e).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
        os.waitpid(child, 0)
        t.join(60)
        assert said == repr(("child\n", True)), said
        assert (out["result"].stdout, out["result"].ok) == ("up\nparent\n", True), out
        assert p.run("print(2)").stdout == "2\n"


_FORK_THAT_EXITS = r"""
import os, sys, time
import pyjail
p = pyjail.Pool(size=1)
sessions = [p.session() for _ in range(3)]
for s in sessions:
    s.run("x = 41")
start = time.monotonic()
child = os.fork()
if child == 0:
    sys.exit(0)   # a normal exit: the finalizers of what it inherited run, and Pool.__del__
os.waitpid(child, 0)
print("child lived %.1f s" % (time.monotonic() - start))
for s in sessions:
    r = s.run("x + 1")
    print(r.value, r.restarted, r.error)
    s.close()
p.close()
"""


def test_a_fork_that_exits_leaves_the_parent_s_sessions_and_templates(pyjail_bin):
    # What a forked child inherited (the Pool, its sessions' launched pyjails) is the
    # parent's: at its exit it neither kills them through their pidfds, nor waits for them,
    # nor removes the templates' sockets.
    import subprocess
    import sys
    from pyjail_testing import REPO
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-c", _FORK_THAT_EXITS], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[1:] == ["42 False None"] * 3, r.stdout
    # Not 5 s (a wait for the parent's pyjail) for each session.
    assert float(lines[0].split()[2]) < 10, lines[0]


_TREE = r"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(g.pid, flush=True)
time.sleep(120)
'''], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def test_a_pid_freed_by_the_launcher_is_not_walked_for_a_cell_s_processes(pool):
    # A Pool session's pyjail ended, and the launcher reaped it at once: its pid may now be
    # another process's. Killing from the host what the cells started walks that pid's
    # children's descendants; another process's (here a stand-in tree: its pid given to the
    # session as the reused one) must not be killed.
    import subprocess
    import sys
    s = pool.session()
    tree = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(tree.stdout.readline())
        launched = s._proc
        launched.kill()
        launched._done.wait(30)
        assert launched.poll() is not None
        launched._pid = tree.pid     # the freed pid, taken by another process
        assert s._kill_interpreter_descendants() == 0
        os.kill(grandchild, 0)       # still there
    finally:
        tree.kill()
        tree.wait()
        s.close()



def test_an_interrupt_that_could_not_be_sent_is_not_counted(pool, monkeypatch):
    # A session's interrupt goes through its pyjail's pidfd, which the launcher hands over
    # when it says it started it. Not sent (that word not heard in time, or it ended), it
    # must not be counted: the next cell would wait for a SIGINT that never comes.
    from pyjail import _pool
    monkeypatch.setattr(_pool, "_STARTED_WITHIN_S", 0.05)
    s = pool.session()
    real = s._proc
    try:
        s._proc = _pool._LaunchedProcess(pool._launcher, -1)    # its start never heard of
        before = s._interrupts_sent
        s._interrupt()
        assert s._interrupts_sent == before
        with pytest.raises(ProcessLookupError):
            s._proc.send_signal(signal.SIGINT)
    finally:
        s._proc = real
    try:
        assert s.run("1 + 1").value == "2"
    finally:
        s.close()
