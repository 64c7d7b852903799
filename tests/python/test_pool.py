"""pyjail.Pool: fresh jails forked from templates that have imported their preloads."""

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import pyjail
from pyjail_testing.web import hello_server


@pytest.fixture(scope="module")
def pool(pyjail_bin):
    os.environ.setdefault("PYJAIL_BIN", pyjail_bin)
    with pyjail.Pool(preload=["json", "decimal"], size=2) as p:
        yield p


def test_a_run_has_the_preloads_and_gives_run_s_result(pool):
    r = pool.run("import sys; print('decimal' in sys.modules, sys.argv[1:]); sys.exit(3)", args=["x"])
    assert isinstance(r, pyjail.Result)
    assert (r.exit_code, r.stdout) == (3, "True ['x']\n")
    assert r.report.status == "exit" and r.report.exit_code == 3


def test_runs_are_fresh_and_reseeded(pool):
    code = ("import decimal, os, random; "
            "print(hasattr(decimal, 'mark'), os.path.exists('/tmp/mark'), random.random()); "
            "decimal.mark = 1; open('/tmp/mark', 'w').close()")
    outs = [pool.run(code).stdout.split() for _ in range(3)]
    assert all(o[:2] == ["False", "False"] for o in outs), outs
    assert len({o[2] for o in outs}) == 3, outs


def test_files_outputs_stdin_and_timeout(pool):
    r = pool.run("import sys; data = open('in.txt').read() + sys.stdin.read(); open('out.txt', 'w').write(data.upper());"
                 "print('decimal' in sys.modules, sys.argv[1:]); print('to stderr', file=sys.stderr)",
                 files={"in.txt": "hello "}, stdin="world", outputs=["*.txt"], args=["a"])
    assert r.exit_code == 0, r.stderr
    assert r.files == {"out.txt": b"HELLO WORLD"}
    # With files too, the program is a fork of the template: the preloads are there.
    assert r.stdout == "True ['a']\n" and r.stderr == "to stderr\n"
    r = pool.run("raise SystemExit(5)", files={"x": ""})
    assert r.exit_code == 5
    r = pool.run("while True: pass", timeout=1)
    assert r.timed_out and r.exit_code == 124


def test_concurrent_runs_from_threads_and_asyncio(pool):
    results = []

    def one(i):
        results.append(pool.run("import time; time.sleep(0.3); print(%d)" % i).stdout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["%d\n" % i for i in range(4)]

    async def main():
        return await asyncio.gather(*(pool.arun("print(%d)" % i) for i in range(3)))

    assert [r.stdout for r in asyncio.run(main())] == ["0\n", "1\n", "2\n"]


def test_a_module_the_rootfs_lacks_is_a_jail_error(pyjail_bin):
    with pytest.raises(pyjail.JailError, match="no module named 'no_such_module_xyz' in the rootfs"):
        pyjail.Pool(preload=["no_such_module_xyz"])
    # A name that no module could have: refused before a template starts, in pyjail's words.
    with pytest.raises(pyjail.JailError, match="'numpy pandas' is not a module name"):
        pyjail.Pool(preload=["numpy pandas"])
    # A str where a list belongs: each letter would be a module.
    with pytest.raises(TypeError, match="preload is a list of module names"):
        pyjail.Pool(preload="json")


def test_close_stops_the_templates_and_removes_the_sockets(pyjail_bin):
    p = pyjail.Pool()
    sockets = p.sockets
    assert all(os.path.exists(s) for s in sockets)
    p.close()
    assert not any(os.path.exists(s) for s in sockets)
    with pytest.raises(pyjail.JailError, match="closed"):
        p.run("pass")


# What the killed owner below runs: a Pool, a run through it, then it waits to be killed.
_OWNER = """
import sys, pyjail
p = pyjail.Pool(size=2)
assert p.run("print(6 * 7)").stdout == "42\\n"
print(" ".join(p.sockets), p._launcher.script_dir, flush=True)
sys.stdin.read()
"""


def _tree(pid):
    """pid's descendants (pid, start time), depth first."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, task)) as f:
            for child in map(int, f.read().split()):
                out.append((child, _started(child)))
                out += _tree(child)
    return out


def _started(pid):
    """pid's start time, or None once it has ended (a zombie counts as ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def test_a_pool_whose_owner_is_killed_leaves_no_server_template_or_launcher(pyjail_bin,
                                                                            monkeypatch):
    # Attack on the host's resources: SIGKILL cannot be caught, so the owner cannot stop its
    # Pool. Each `pyjail serve` stops when its stdout's reader (the owner) is gone, and
    # with it its template; the launcher, when its socket's other end is.
    env = dict(os.environ, PYJAIL_BIN=pyjail_bin,
               PYTHONPATH=os.path.dirname(os.path.dirname(pyjail.__file__)))
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, cwd="/")
    try:
        *sockets, scripts = owner.stdout.readline().decode().split()
        assert len(sockets) == 2 and all(os.path.exists(s) for s in sockets), sockets
        tree = _tree(owner.pid)
    finally:
        owner.kill()
        owner.wait()
        owner.stdin.close()
        owner.stdout.close()
    # two servers, each with its template's supervisor and jail; the launcher
    assert len(tree) >= 5, tree
    deadline = time.monotonic() + 20
    left = tree
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [(pid, t) for pid, t in left if _started(pid) == t]
    still = [open("/proc/%d/cmdline" % pid, "rb").read().replace(b"\0", b" ") for pid, _ in left]
    for pid, _ in left:  # not to leave them to the tests after this one
        os.kill(pid, signal.SIGKILL)
    assert not left, "still running after their owner's SIGKILL: %s" % still
    assert not any(os.path.exists(s) for s in sockets), "a server left its socket"
    # The owner's directories (its sockets', its launcher's scripts') stay, unlocked: the
    # next Pool of the same user removes them (once they are a minute old).
    dirs = [os.path.dirname(sockets[0]), scripts]
    assert all(os.path.isdir(d) for d in dirs), dirs
    monkeypatch.setattr(pyjail._pool, "_STALE_AFTER", 0)
    with pyjail.Pool() as p:
        assert p.run("print(1)").stdout == "1\n"
        gone = [d for d in dirs if not os.path.exists(d)]
        assert gone == dirs, "stale directories left: %s" % sorted(set(dirs) - set(gone))
        # A live Pool's are never taken for stale.
        pyjail._pool._sweep_stale(os.path.dirname(p.sockets[0]))
        pyjail._pool._sweep_stale(os.path.dirname(p._launcher.script_dir))
        assert all(os.path.exists(s) for s in p.sockets)
        assert os.path.isdir(p._launcher.script_dir)
        assert p.run("print(2)").stdout == "2\n"


def test_pandas_from_a_template(data_rootfs):
    with pyjail.Pool(preload=["numpy", "pandas"], rootfs=data_rootfs) as p:
        r = p.run("import numpy as np, pandas as pd; print(pd.DataFrame({'a': np.arange(3)}).a.sum())")
        assert r.exit_code == 0 and r.stdout == "3\n", r.stderr
        seeds = {p.run("import numpy; print(numpy.random.rand())").stdout for _ in range(3)}
        assert len(seeds) == 3, "numpy's global generator must be reseeded in every run"


def test_the_readme_example(pyjail_bin):
    import re
    import subprocess
    import sys
    from pyjail_testing.package import REPO
    text = (REPO / "README.md").read_text()
    start = text.index("## Warm templates")
    code = re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start + 1)], re.S)[0]
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, "0 0.3\n"), r.stderr


def test_a_session_from_a_template_serves_the_agent_adapters(pool):
    with pool.session() as s:
        assert s.run("import sys; 'decimal' in sys.modules").value == "True"
        s.run("x = 41")
        assert s.run("x + 1").value == "42"
    from pyjail_testing.package import import_or_skip
    import_or_skip("langchain_core")
    from pyjail.langchain import PythonREPL, PythonREPLTool
    tool = PythonREPLTool(python_repl=PythonREPL(session=pool.session()))
    try:
        assert tool.run("print(6 * 7)").strip() == "42"
    finally:
        tool.python_repl.close()


def test_a_session_from_a_template_starts_the_template_s_server_only_of_the_same_version(
        pool, monkeypatch):
    from pyjail import _launch
    ask = ("import sys; t = sys.modules['pyjail_template']; "
           "(t.SESSION_SERVER_SHA256, 'pyjail_server' in t._TEMPLATE_MODULES, "
           "sys.modules['pyjail_server'].__dict__.get('FROM_DRIVER'))")
    with pool.session() as s:
        if s.server_info["server"] != "rootfs":
            pytest.skip("the rootfs's in-jail modules differ from python/pyjail's")
        assert s.run(ask).value == repr((_launch.SERVER_SHA256, True, None))
    # A driver of another version gets its own server, not the template's.
    monkeypatch.setattr(_launch, "_SERVER_SHA256_IN_USE", ["0" * 64])
    with pool.session() as s:
        assert s.server_info["server"] == "driver"
        assert s.run(ask).value == repr((_launch.SERVER_SHA256, True, True))


def test_a_batch_pool_reads_and_writes_the_current_directory(pyjail_bin, monkeypatch):
    # The cron case: a job's directory is /work, writable, through a template.
    os.environ.setdefault("PYJAIL_BIN", pyjail_bin)
    top = tempfile.mkdtemp(prefix="pyjail-pool-batch-", dir="/tmp")
    try:
        os.chmod(top, 0o755)      # root's runs reach it as --host-user (nobody)
        job = os.path.join(top, "job")
        os.mkdir(job)
        os.chmod(job, 0o777)
        with open(os.path.join(job, "data.txt"), "w") as f:
            f.write("42\n")
        os.chmod(os.path.join(job, "data.txt"), 0o644)
        monkeypatch.chdir(job)
        with pyjail.Pool(profile="batch") as p:
            r = p.run("import os; n = open('data.txt').read(); open('out.txt', 'w').write(n); "
                      "print(os.getcwd(), n.strip())")
        assert (r.exit_code, r.stdout) == (0, "/work 42\n"), r.stderr
        with open(os.path.join(job, "out.txt")) as f:
            assert f.read() == "42\n"
    finally:
        shutil.rmtree(top)


def test_net_allow_from_a_template_reaches_the_pool_s_hosts_and_no_others(pyjail_bin):
    code = """
import socket, sys, urllib.request
for name in sys.argv[1:]:
    try:
        print(urllib.request.urlopen("http://%s/" % name, timeout=5).read().decode())
    except Exception as e:
        print(name, type(e).__name__)
"""
    with hello_server() as port, pyjail.Pool(net="allow", allow_hosts=[f"web.test:{port}", f"api.test:{port}"],
                                             options={"net_resolve": ["web.test:127.0.0.1", "api.test:127.0.0.1"]}) as p:
        r = p.run(code, args=[f"web.test:{port}", f"api.test:{port}"])
        assert r.ok, r.stderr
        assert r.stdout == f"hello web.test:{port}\nhello api.test:{port}\n"
        assert r.report.raw["egress"]["connections"] == 2
        # A run's own allowlist replaces the Pool's: api.test is not in it.
        r = p.run(code, args=[f"web.test:{port}", f"api.test:{port}"], allow_hosts=[f"web.test:{port}"])
        assert r.stdout == f"hello web.test:{port}\napi.test:{port} URLError\n", r.stderr
        # ... and must be within it.
        with pytest.raises(pyjail.JailError, match="beyond this server's runs' allowlist"):
            p.run(code, allow_hosts=["other.test"])
