"""Runs from a template (`pyjail serve`, `pyjail --via`): each run is a fork of the template
that becomes a jail of its own. These tests try to make one run reach the next, another run
in flight, or the template, and check that a run that breaks its limits ends alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
import time

import pytest

from pyjail_testing.runs import describe


def via(run_jail, user, sock, code, *opts, **kwargs):
    return run_jail(["--quiet", *opts, "--via", sock, "--", "python", "-c", textwrap.dedent(code)],
                    user=user, **kwargs)


def result(r):
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_run_is_a_jail_of_its_own(run_jail, as_user, serve):
    sock, _ = serve(as_user, "--preload", "json")
    r = via(run_jail, as_user, sock, """
        import json, os, sys
        status = open("/proc/self/status").read()
        field = lambda k: status.split(k + ":")[1].split()[0]
        print(json.dumps({"pid": os.getpid(), "uid": os.getuid(), "preloaded": "json" in sys.modules,
                          "caps": [field(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
                          "nnp": field("NoNewPrivs"), "seccomp": field("Seccomp"),
                          "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()),
                          "cwd": os.getcwd(), "host": os.uname().nodename,
                          "env": sorted(os.environ)}))
    """)
    got = result(r)
    assert got["pid"] == 2 and got["procs"] == ["1", "2"], got
    assert got["uid"] == 1000 and got["preloaded"] is True
    assert got["caps"] == ["0000000000000000"] * 5, got
    assert got["nnp"] == "1" and got["seccomp"] == "2"
    assert got["cwd"] == "/work" and got["host"] == "pyjail"
    assert "PATH" in got["env"] and "PYTHONPATH" not in got["env"]


def test_the_exit_status_and_report_are_a_fresh_runs(run_jail, as_user, serve, world_tmp):
    sock, _ = serve(as_user)
    report = world_tmp.dir(0o777) / "r.json"
    r = run_jail(["--quiet", "--report", str(report), "--via", sock, "--", "python", "-c",
                  "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"], user=as_user)
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n"), describe(r)
    rep = json.loads(report.read_text())
    assert rep["status"] == "exit" and rep["program_exit_code"] == 7
    assert rep["cpu_user_s"] is not None and rep["memory_peak_bytes"] > 0
    r = via(run_jail, as_user, sock, "raise ValueError('boom')")
    assert r.returncode == 1 and "ValueError: boom" in r.stderr and "pyjail_template" not in r.stderr, describe(r)


def test_nothing_of_one_run_reaches_the_next(run_jail, as_user, serve):
    sock, _ = serve(as_user, "--preload", "json")
    first = result(via(run_jail, as_user, sock, """
        import json, os, random, subprocess, sys, tempfile
        open("/tmp/left", "w").write("x"); open("/work/left", "w").write("x")
        open("/dev/shm/left", "w").write("x")
        json.left_behind = "state"            # a preloaded module, changed
        os.environ["LEFT"] = "1"
        # A process that would outlive the run, if anything could.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        print(json.dumps({"random": random.random(), "urandom": os.urandom(8).hex(),
                          "tempname": next(tempfile._get_candidate_names())}))
    """))
    second = result(via(run_jail, as_user, sock, """
        import json, os, random, tempfile
        print(json.dumps({"files": [p for p in ("/tmp/left", "/work/left", "/dev/shm/left") if os.path.exists(p)],
                          "state": hasattr(json, "left_behind"), "env": "LEFT" in os.environ,
                          "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()),
                          "random": random.random(), "urandom": os.urandom(8).hex(),
                          "tempname": next(tempfile._get_candidate_names())}))
    """))
    assert second["files"] == [] and not second["state"] and not second["env"], second
    assert second["procs"] == ["1", "2"], second
    for key in ("random", "urandom", "tempname"):
        assert first[key] != second[key], (key, first, second)


def test_concurrent_runs_cannot_see_each_other(run_jail, as_user, serve):
    sock, _ = serve(as_user)
    code = """
        import json, os, sys, time
        me = sys.argv[1]
        secret = ("secret-" + me) * 1000            # in this run's memory
        open("/tmp/" + me, "w").write(me)
        time.sleep(1.5)                               # the other run is running now
        print(json.dumps({"tmp": sorted(os.listdir("/tmp")), "work": sorted(os.listdir("/work")),
                          "procs": sorted(p for p in os.listdir("/proc") if p.isdigit())}))
    """
    results = {}

    def one(name):
        results[name] = run_jail(["--quiet", "--via", sock, "--", "python", "-c", textwrap.dedent(code), name],
                                 user=as_user)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("a", "b"):
        got = result(results[name])
        assert got["tmp"] == [name] and got["work"] == [] and got["procs"] == ["1", "2"], got


def test_a_run_cannot_reach_the_template_or_other_runs(run_jail, as_user, serve):
    sock, _ = serve(as_user)
    r = via(run_jail, as_user, sock, """
        import ctypes, json, os, signal
        out = {}
        out["kill_all"] = "ok"
        try:
            os.kill(-1, signal.SIGKILL)              # every process this run can signal
        except OSError as e:
            out["kill_all"] = e.errno
        def attempt(fn):
            try:
                fn(); return "ok"
            except OSError as e:
                return e.errno
        out["ptrace"] = ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0)  # PTRACE_ATTACH pid 1
        out["pid1_mem"] = attempt(lambda: open("/proc/1/mem", "rb").read(1))
        out["unshare"] = attempt(lambda: os.unshare(os.CLONE_NEWNS)) if hasattr(os, "unshare") else "n/a"
        print(json.dumps(out))
    """)
    got = result(r)
    assert got["ptrace"] == -1 and got["pid1_mem"] != "ok" and got["unshare"] != "ok", got
    # The template and the server survived the kill(-1): the next run starts.
    again = via(run_jail, as_user, sock, "print('still here')")
    assert again.returncode == 0 and again.stdout == "still here\n", describe(again)
    assert "started again" not in again.stderr


@pytest.mark.parametrize("bomb,opts,status", [
    ("x = bytearray(1 << 30)", ("--memory", "128M"), "any"),
    ("import os\nwhile True:\n    os.fork()", ("--pids", "16"), "any"),
    ("while True: pass", ("--wall-time", "1"), "wall-timeout"),
    ("import sys\nwhile True: sys.stdout.write('x' * 65536)", ("--output-limit", "1M"), "output-limit"),
])
def test_a_run_that_breaks_its_limits_ends_alone(run_jail, as_user, serve, world_tmp, bomb, opts, status):
    sock, _ = serve(as_user)
    report = world_tmp.dir(0o777) / "r.json"
    # Another run is in flight the whole time, and must finish untouched.
    neighbour = {}
    t = threading.Thread(target=lambda: neighbour.update(r=via(
        run_jail, as_user, sock, "import time; time.sleep(2); print('neighbour ok')")))
    t.start()
    r = run_jail(["--quiet", "--report", str(report), *opts, "--via", sock, "--", "python", "-c", bomb],
                 user=as_user, timeout=60)
    t.join()
    rep = json.loads(report.read_text())
    assert r.returncode != 0, describe(r)
    if status != "any":
        assert rep["status"] == status, rep
    assert neighbour["r"].returncode == 0 and neighbour["r"].stdout == "neighbour ok\n", describe(neighbour["r"])
    after = via(run_jail, as_user, sock, "print('after')")
    assert after.returncode == 0 and after.stdout == "after\n", describe(after)


# A run's small objects live in the interpreter's arenas, which a template's allocator hands
# out (jail/template/arenas.hpp); how much of its memory is in use, from the kernel's count.
ANON_MIB = "def anon_mib():\n    return int(next(l for l in open('/proc/self/status') if l.startswith('RssAnon:')).split()[1]) // 1024\n"


def test_a_runs_small_objects_get_memory_under_its_limit_give_it_back_and_stop_over_it(
        run_jail, as_user, serve, world_tmp):
    sock, _ = serve(as_user)
    # Under the limit: about 65 MiB of small objects (new arenas), then none: the arenas'
    # memory goes back (freed slots hold none).
    under = via(run_jail, as_user, sock, ANON_MIB + textwrap.dedent("""
        import gc, json
        before = anon_mib()
        x = [(i, str(i)) for i in range(400_000)]
        peak = anon_mib()
        del x
        gc.collect()
        print(json.dumps([before, peak, anon_mib()]))
    """), "--memory", "256M", timeout=60)
    before, peak, after = result(under)
    assert peak - before >= 40, (before, peak, after)
    assert after - before <= 12, (before, peak, after)
    # Over it: the arena that cannot be had is a MemoryError the program can catch (where the
    # limit is the per-process RLIMIT_DATA), or the cgroup's OOM kill; never a crash.
    report = world_tmp.dir(0o777) / "r.json"
    over = run_jail(["--quiet", "--report", str(report), "--memory", "64M", "--via", sock, "--", "python", "-c",
                     textwrap.dedent("""
        x = []
        try:
            while True:
                x.append((len(x), str(len(x))))
        except MemoryError:
            n = len(x)
            del x
            print('stopped at', n)
    """)], user=as_user, timeout=60)
    rep = json.loads(report.read_text())
    if rep["cgroup"] is None:
        assert over.returncode == 0 and over.stdout.startswith("stopped at "), describe(over)
        assert int(over.stdout.split()[-1]) < 400_000, describe(over)
    else:
        assert rep["status"] == "oom", rep
    after_it = via(run_jail, as_user, sock, "print('after')")
    assert after_it.returncode == 0 and after_it.stdout == "after\n", describe(after_it)


def test_a_killed_template_is_started_again(run_jail, as_user, serve, helpers):
    sock, _ = serve(as_user, "--preload", "json")
    first = via(run_jail, as_user, sock, "print('one')")
    assert first.returncode == 0
    # The template's supervisor is the server's child; killing it ends the template's jail.
    servers = [pid for pid, cmd in helpers.processes_with(sock).items() if " serve " in f" {cmd} "]
    children = set()
    for pid in servers:
        for task in os.listdir(f"/proc/{pid}/task"):
            children |= set(open(f"/proc/{pid}/task/{task}/children").read().split())
    assert children, "found no template supervisor"
    killed = 0
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass    # a short-lived child of the server (a run's end) gone meanwhile
    assert killed, "the template supervisor was gone before it was killed"
    time.sleep(0.5)
    again = run_jail(["--via", sock, "--", "python", "-c", "import sys; print('json' in sys.modules)"],
                     user=as_user, timeout=60)
    assert again.returncode == 0 and again.stdout == "True\n", describe(again)
    assert "had ended; it was started again for this run" in again.stderr, describe(again)


def test_what_a_template_run_cannot_have_is_refused(run_jail, as_user, serve, world_tmp):
    sock, _ = serve(as_user)
    src = world_tmp.dir()
    r = run_jail(["--ro-bind", f"{src}:/data", "--via", sock, "--", "python", "-c", "pass"], user=as_user)
    assert r.returncode == 125 and "binds host paths only below /work and /tmp" in r.stderr, describe(r)
    r = run_jail(["--via", str(world_tmp.dir() / "none.sock"), "--", "python", "-c", "pass"], user=as_user)
    assert r.returncode == 125 and "cannot connect to the template" in r.stderr, describe(r)
    r = run_jail(["--via", sock, "--", "sh", "-c", "true"], user=as_user)
    assert r.returncode == 125 and "Python programs only" in r.stderr, describe(r)


def test_pythons_options_reach_a_run_parsed_by_pyjail(run_jail, as_user, serve, world_tmp):
    sock, _ = serve(as_user)
    script = world_tmp.dir() / "s.py"
    script.write_text(textwrap.dedent("""
        import faulthandler, json, sys, warnings
        warnings.warn("shown", DeprecationWarning)
        print(json.dumps({"dev": sys._xoptions.get("dev"), "faulthandler": faulthandler.is_enabled(),
                          "argv": sys.argv[1:], "path0": sys.path[0], "nobytecode": sys.dont_write_bytecode,
                          "warnoptions": sys.warnoptions}))
    """))
    os.chmod(script, 0o644)
    # -X dev: the development mode's warnings and fault handler, as a fresh run's.
    r = run_jail(["--quiet", "--via", sock, "--", "python", "-X", "dev", "-B", str(script), "-c", "x"], user=as_user)
    got = result(r)
    assert got["dev"] is True and got["faulthandler"] is True and got["nobytecode"] is True, got
    assert got["argv"] == ["-c", "x"] and "DeprecationWarning: shown" in r.stderr, describe(r)
    # -W wins over -X dev's filter; -I puts neither the script's directory nor "" on the path.
    r = run_jail(["--quiet", "--via", sock, "--", "python", "-Xdev", "-W", "error::DeprecationWarning", str(script)],
                 user=as_user)
    assert r.returncode == 1 and "DeprecationWarning: shown" in r.stderr, describe(r)
    r = run_jail(["--quiet", "--via", sock, "--", "python", "-I", "-c",
                  "import sys; print(sys.path[0] not in ('', '/work'))"], user=as_user)
    assert (r.returncode, r.stdout) == (0, "True\n"), describe(r)
    # An option that acts only when the interpreter starts: refused before anything is sent,
    # naming the option and the fix, whether or not a server listens.
    for where in (sock, str(world_tmp.dir() / "none.sock")):
        r = run_jail(["--via", where, "--", "python", "-X", "importtime", str(script)], user=as_user)
        assert r.returncode == 125, describe(r)
        assert r.stderr == ("pyjail: --via: python's -X importtime acts when the interpreter starts, and a run "
                            "from a template is a fork of an interpreter started before it (run it without --via)\n"), (
            describe(r))
    r = run_jail(["--via", sock, "--", "python", "-OO", "-c", "pass"], user=as_user)
    assert r.returncode == 125 and "python's -O acts when" in r.stderr, describe(r)
    # What python itself refuses, refused as python does (exit status 2).
    r = run_jail(["--via", sock, "--", "python", "-c"], user=as_user)
    assert r.returncode == 2 and "Argument expected for the -c option" in r.stderr, describe(r)


def test_a_template_that_cannot_start_says_why(serve, as_user):
    _, p = serve(as_user, "--preload", "no_such_module_here", ready=False)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 125, (out, err)
    # The module that is missing, in one line: no traceback of the import machinery.
    assert b"pyjail template: --preload no_such_module_here: no module named 'no_such_module_here' in the rootfs" in err, err
    assert b"Traceback" not in err, err
    # pyjail's own line: one, in a fresh run's form (step: what: why (fix)).
    assert err.decode().splitlines()[-1] == (
        "pyjail: template: the template did not start: its interpreter ended (exit status 1; its error is "
        "above) (check that the rootfs has every --preload module)"), err


def test_a_server_whose_owner_is_gone_stops_with_a_failure_status(serve, as_user):
    # The reader of its stdout (the program that started it) gone, nobody asked it to stop and
    # its runs were cut short: systemd's Restart=on-failure, a pipeline's pipefail and a cron
    # wrapper must see a failure, not 0. 141: 128 + SIGPIPE, as for a program whose reader left.
    sock, p = serve(as_user)
    p.stdout.close()
    assert p.wait(30) == 141, p.stderr.read()
    assert p.stderr.read().decode().splitlines()[-1] == (
        "pyjail serve: stopping (exit status 141): the reader of its standard output is gone (the program "
        "that started it ended); stop it with SIGTERM, or give it an output that stays open")
    assert not os.path.exists(sock)
    # Asked to stop, it has done its job.
    sock, p = serve(as_user)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0, p.stderr.read()
    assert not os.path.exists(sock)


def test_preloads_are_module_names_several_to_a_value_if_given_so(serve, run_jail, as_user):
    # Several modules to one --preload (as the Python package's Pool takes a list), each once.
    sock, p = serve(as_user, "--preload", "json,decimal", "--preload", "json", ready=False)
    assert p.stdout.readline().decode() == f"pyjail serve: ready at {sock} (preloaded: json, decimal)\n"
    r = run_jail(["--via", sock, "--", "python", "-c", "import sys; print('decimal' in sys.modules)"],
                 user=as_user)
    assert r.returncode == 0 and r.stdout == "True\n", describe(r)
    # What no import could find, refused before any jail: one line, naming the value.
    for bad in ("json decimal", "json,", "1json", "json..decimal", "json/decimal"):
        _, q = serve(as_user, "--preload", bad, ready=False)
        out, err = q.communicate(timeout=60)
        lines = err.decode().strip().splitlines()
        assert q.returncode == 125 and len(lines) == 1, (bad, out, err)
        assert lines[0].startswith("pyjail: --preload: '") and "is not a module name" in lines[0], lines


def test_a_via_runs_start_up_failure_is_a_fresh_runs_error_in_the_report(run_jail, as_user, serve, world_tmp):
    report = world_tmp.dir(0o777) / "r.json"
    gone = str(world_tmp.dir() / "none.sock")
    r = run_jail(["--report", str(report), "--via", gone, "--", "python", "-c", "pass"], user=as_user)
    assert r.returncode == 125 and len(r.stderr.splitlines()) == 1, describe(r)
    error = json.loads(report.read_text())["error"]
    assert error["step"] == "via" and error["errno"] == 2 and "is `pyjail serve --socket" in error["hint"], error
    assert r.stderr.startswith("pyjail: via: cannot connect to the template at "), describe(r)
    # Refused by the server (more than its runs may have): the same form, the same report.
    sock, _ = serve(as_user, "--memory", "64M")
    r = run_jail(["--report", str(report), "--memory", "128M", "--via", sock, "--", "python", "-c", "pass"],
                 user=as_user)
    assert r.returncode == 125 and len(r.stderr.splitlines()) == 1, describe(r)
    rep = json.loads(report.read_text())
    assert rep["status"] == "setup-error" and rep["error"]["step"] == "via", rep
    assert "cannot start the run" in rep["error"]["message"], rep
    # An option the run cannot honour: refused before anything is sent, and reported.
    r = run_jail(["--report", str(report), "--via", sock, "--", "python", "-O", "-c", "pass"], user=as_user)
    assert r.returncode == 125, describe(r)
    assert json.loads(report.read_text())["error"]["hint"] == "run it without --via"


def test_the_socket_is_only_its_users(run_jail, root_user, serve, pyjail_command, _preflight):
    sock, _ = serve(root_user)
    assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
    other = _preflight("unprivileged")
    r = run_jail(["--via", sock, "--", "python", "-c", "pass"], user=other)
    assert r.returncode == 125 and "cannot connect" in r.stderr, describe(r)
