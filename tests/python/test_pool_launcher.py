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

