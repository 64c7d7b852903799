"""pyjail-server (pyjail.server) and its client pyjail.remote, against a real server
process: runs and sessions with streamed output, files, host functions; and every bad
input or fault the service must answer cleanly: a wrong token, an unknown session, a body
over the limit, another tenant's session, a client gone mid-stream, quotas, idle expiry,
a dead template, a dead server."""

import asyncio
import json
import os
import shutil
import signal
import resource
import socket
import subprocess
import sys
import threading
import time

import pytest

from pyjail_testing import REPO
from pyjail_testing.package import import_or_skip, wait_until

ALICE = "alice-token-0123456789"
BOB = "bob-token-abcdefghijklmn"
CAROL = "carol-token-zyxwvutsrqpo"


def _env(pyjail_bin=None):
    env = dict(os.environ)
    if pyjail_bin:
        env["PYJAIL_BIN"] = pyjail_bin
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid):
    """Every process under pid, from /proc (the server's templates and jails)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Server:
    def __init__(self, tmp_path, pyjail_bin, *args, nofile=None):
        import_or_skip("starlette")
        import_or_skip("uvicorn")
        import_or_skip("prometheus_client")
        import_or_skip("httpx")
        self.tokens = tmp_path / ("tokens-%d" % id(self))
        self.tokens.write_text("# tenant token\nalice %s\nbob %s\ncarol %s\n"
                               % (ALICE, BOB, CAROL))
        os.chmod(self.tokens, 0o600)
        self.port = _free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyjail.server", "--listen", "127.0.0.1:%d" % self.port,
             "--tokens", str(self.tokens), "--memory", "512M", "--timeout", "30"] + list(args),
            env=_env(pyjail_bin), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=None if nofile is None else
            lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
        self.pyjail_bin = pyjail_bin
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail("pyjail-server did not listen: %s"
                                % self.proc.stderr.read().decode())
                time.sleep(0.1)

    def client(self, token=ALICE):
        import pyjail.remote
        return pyjail.remote.connect(self.url, token=token)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, pyjail_bin):
    s = Server(tmp_path_factory.mktemp("server"), pyjail_bin, "--max-sessions", "2",
               "--max-runs", "2")
    yield s
    s.stop()


@pytest.fixture
def tight(tmp_path, pyjail_bin):
    """A server with a short idle expiry and a small CPU budget."""
    s = Server(tmp_path, pyjail_bin, "--idle-timeout", "1", "--cpu-seconds", "1")
    yield s
    s.stop()


def test_runs_and_sessions_through_the_remote_client(server):
    import pyjail
    pool = server.client()
    seen = []
    r = pool.run("import sys\nprint('one', flush=True)\nprint('two', file=sys.stderr)\n"
                 "open('out.txt', 'w').write(open('in.txt').read().upper())",
                 files={"in.txt": "abc"}, outputs=["*.txt"], on_stdout=seen.append)
    assert isinstance(r, pyjail.Result) and r.ok and r.stdout == "one\n"
    assert r.stderr == "two\n" and seen == ["one\n"] and r.report.status == "ok"
    assert r.files == {"out.txt": b"ABC"}
    r = pool.run("raise SystemExit(3)")
    assert r.exit_code == 3 and not r.ok

    with pool.session() as s:
        c = s.run("x = 41\nprint('p')\nx + 1")
        assert isinstance(c, pyjail.CellResult) and c.stdout == "p\n" and c.value == "42"
        assert c.data == 42
        assert s.run("1/0").error.type == "ZeroDivisionError"
        assert s.run("x").value == "41"
        assert s.upload("d/a.bin", bytes(range(256))) == 256
        assert s.download("d/a.bin") == bytes(range(256))
        assert s.list_files() == {"d/a.bin": 256}
        # Host functions run here, in the client; the final answer is the client's object.
        answer = object()
        s.expose({"add": lambda a, b: a + b, "final_answer": lambda v: answer},
                 ends_cell=["final_answer"])
        c = s.run("print(add(2, 3))\nfinal_answer(1)")
        assert c.stdout == "5\n" and c.final.value is answer
        assert s.set_variables({"y": [1, b"b", {"k": (2, 3)}]}) == {}
        assert s.run("y").data == [1, b"b", {"k": (2, 3)}]
        # Objects are not pickled over the network.
        assert "pickle" in s.set_variables({"o": object()})["o"]
        with pytest.raises(FileNotFoundError):
            s.download("missing.txt")
    # The adapters take it as they take a session.
    import_or_skip("langchain_core")
    import_or_skip("smolagents")
    from pyjail.langchain import PythonREPL, PythonREPLTool
    from pyjail.smolagents import PyjailExecutor
    from smolagents.default_tools import FinalAnswerTool
    with pool.session() as s:
        assert PythonREPL(session=s).run("print(6 * 7)") == "42\n"
        tool = PythonREPLTool(python_repl=PythonREPL(session=s))
        assert asyncio.run(tool.ainvoke("print(7)")) == "7\n"
        executor = PyjailExecutor(additional_imports=[], session=s)
        executor.send_tools({"final_answer": FinalAnswerTool()})
        out = executor("y = 3\nprint('hello')\nfinal_answer(y * 2)")
        assert out.is_final_answer and out.output == 6 and out.logs == "hello\n"


def test_wrong_and_missing_tokens_are_refused(server):
    import httpx
    import pyjail.remote
    for headers in ({}, {"Authorization": "Bearer " + ALICE[:-1]},
                    {"Authorization": "Basic " + ALICE}, {"Authorization": "Bearer  x"}):
        r = httpx.post(server.url + "/v1/runs", json={"code": "print(1)"}, headers=headers)
        assert r.status_code == 401, headers
    with pytest.raises(PermissionError):
        pyjail.remote.connect(server.url, token="x" * 20).run("print(1)")
    # What an orchestrator reads needs no token.
    assert httpx.get(server.url + "/healthz").status_code == 200
    assert httpx.get(server.url + "/readyz").status_code == 200
    metrics = httpx.get(server.url + "/metrics").text
    assert "pyjail_live_sessions" in metrics and "pyjail_refused_requests_total" in metrics


def test_a_token_file_others_can_read_is_refused(tmp_path, pyjail_bin):
    import_or_skip("starlette")
    tokens = tmp_path / "tokens"
    tokens.write_text("alice %s\n" % ALICE)
    os.chmod(tokens, 0o644)
    r = subprocess.run([sys.executable, "-m", "pyjail.server", "--listen", "127.0.0.1:1",
                        "--tokens", str(tokens)], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "chmod 600" in r.stderr
    os.chmod(tokens, 0o600)
    from pyjail.server import read_tokens
    assert list(read_tokens(str(tokens)).values()) == ["alice"]


def test_unknown_session_and_other_tenants_sessions(server):
    import httpx
    import pyjail
    alice, bob = server.client(ALICE), server.client(BOB)
    with alice.session() as s:
        s.run("secret = 'alice'")
        s.upload("s.txt", "alice's")
        # Bob knows the id: every way in answers as for an unknown session.
        for method, path, kw in [("POST", "/run", {"json": {"code": "secret"}}),
                                 ("GET", "/file?path=s.txt", {}), ("GET", "/files", {}),
                                 ("PUT", "/files/s.txt", {"content": b"bob's"}),
                                 ("POST", "/interrupt", {}), ("DELETE", "", {})]:
            r = httpx.request(method, server.url + "/v1/sessions/" + s.id + path,
                              headers={"Authorization": "Bearer " + BOB}, **kw)
            assert r.status_code == 404, (method, path, r.text)
        assert s.run("secret").value == "'alice'" and s.download("s.txt") == b"alice's"
    # Closed, it is unknown to its own tenant too.
    closed = alice.session()
    closed.close()
    closed._closed = False        # as if this client did not know
    with pytest.raises(pyjail.SessionDiedError):
        closed.run("1")
    r = httpx.post(server.url + "/v1/sessions/nope/run", json={"code": "1"},
                   headers={"Authorization": "Bearer " + ALICE})
    assert r.status_code == 404 and "no such session" in r.json()["error"]
    del bob


def test_bodies_over_the_limit(server):
    import httpx
    auth = {"Authorization": "Bearer " + ALICE}
    # Said so up front: refused before a byte of the body is read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as c:
        c.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{"
                  % (ALICE.encode(), 1 << 30))
        assert c.recv(4096).startswith(b"HTTP/1.1 413 ")
    # Sent in chunks, without a length: refused once over.
    r = httpx.post(server.url + "/v1/runs", headers=auth,
                   content=(b"x" * (1 << 20) for _ in range(9)))
    assert r.status_code == 413
    # Under the limit, a body that is not what is asked for is a 400.
    for body in (b"[1]", b"{\"code\": 3}", b"not json", b"{\"code\": \"1\", \"timeout\": -1}",
                 b"{\"code\": \"1\", \"files\": {\"../x\": \"\"}}",
                 b"[" * 100000 + b"]" * 100000,
                 b"{\"code\": \"1\", \"outputs\": [\"" + b"*" * 1025 + b"\"]}"):
        r = httpx.post(server.url + "/v1/runs", content=body, headers=auth)
        assert r.status_code == 400, body
    # A lone surrogate (a \\ud800 escape with no pair) has no UTF-8: its run's response was
    # cut short. A pair is a character like any other.
    r = httpx.post(server.url + "/v1/runs", content=b'{"code": "print(\\"\\ud800\\")"}', headers=auth)
    assert r.status_code == 400 and "lone surrogate" in r.text, r.text
    r = httpx.post(server.url + "/v1/runs", content=b'{"code": "print(len(\\"\\ud83d\\ude00\\"))"}',
                   headers=auth)
    assert r.status_code == 200 and '"1\\n"' in r.text, r.text


def test_client_gone_mid_stream_ends_the_run_and_interrupts_the_cell(server):
    import httpx
    import pyjail
    auth = {"Authorization": "Bearer " + ALICE}
    before = set(_descendants(server.proc.pid))
    with httpx.stream("POST", server.url + "/v1/runs", headers=auth, timeout=30,
                      json={"code": "import time\nwhile True:\n print('tick', flush=True)\n"
                                    " time.sleep(0.01)"}) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines)) == {"stdout": "tick\n"}
        assert len(set(_descendants(server.proc.pid)) - before) > 0
    # The run's jail is gone with the connection.
    assert wait_until(lambda: not set(_descendants(server.proc.pid)) - before, 20)

    pool = server.client()
    with pool.session() as s:
        s.run("import threading\nn = 0")
        with httpx.stream("POST", server.url + "/v1/sessions/%s/run" % s.id, headers=auth,
                          timeout=30,
                          json={"code": "import time\nwhile True:\n n += 1\n print(n)\n"
                                        " time.sleep(0.01)"}) as r:
            next(r.iter_lines())
        # The cell was interrupted; the session keeps its state and takes the next cell.
        def free():
            try:
                return s.run("n").value is not None
            except pyjail.SessionError:     # still busy with the interrupted cell
                return False
        assert wait_until(free, 20)
        first = int(s.run("n").value)
        time.sleep(0.3)
        assert int(s.run("n").value) == first and first > 0


def test_quotas_sessions_and_runs_at_once(server):
    import pyjail
    pool = server.client(BOB)
    a, b = pool.session(), pool.session()
    with pytest.raises(pyjail.JailError, match="live sessions"):
        pool.session()
    a.close()
    c = pool.session()     # under the limit again
    b.close()
    c.close()

    started = threading.Barrier(3)
    results = []

    def long_run():
        results.append(pool.run("import time\nprint('go', flush=True)\ntime.sleep(3)",
                                on_stdout=lambda _: started.wait(20)))
    threads = [threading.Thread(target=long_run) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait(30)
    with pytest.raises(pyjail.JailError, match="calls running"):
        pool.run("print(1)")
    for t in threads:
        t.join(60)
    assert len(results) == 2 and all(r.ok for r in results)
    assert pool.run("print(1)").stdout == "1\n"


def test_cpu_budget_and_idle_expiry(tight):
    import pyjail
    pool = tight.client(CAROL)
    r = pool.run("import time\nwhile time.process_time() < 1.2: pass\nprint('spent')")
    assert r.stdout == "spent\n"
    with pytest.raises(pyjail.JailError, match="CPU seconds"):
        pool.run("print(1)")
    # Another tenant's budget is its own.
    alice = tight.client(ALICE)
    s = alice.session()
    assert s.run("1 + 1").value == "2"
    time.sleep(1.8)    # idle past --idle-timeout 1 (the reaper looks every 0.25 s)
    with pytest.raises(pyjail.SessionDiedError):
        s.run("1 + 1")



def test_a_cell_is_charged_the_cpu_its_session_s_jail_used_not_its_wall_time(tight):
    import pyjail
    s = tight.client(BOB).session()
    # Waiting costs nothing: 2.4 s of cells that sleep leave a budget of 1 CPU second.
    for _ in range(4):
        assert s.run("import time; time.sleep(0.6)").ok
    assert s.run("1 + 1").value == "2"
    # Spending does, also by a process a cell started and left running, while the
    # interpreter itself only waits: the jail's CPU as the host sees it.
    burn = "import time\nwhile time.process_time() < 1.3: pass"
    r = s.run("import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', %r])" % burn)
    assert r.ok, r.error
    assert s.run("p.wait(20)").value == "0"
    with pytest.raises(pyjail.PyjailError, match="CPU seconds"):
        s.run("1 + 1")


def test_dead_template_and_dead_server_end_sessions_at_once(tight):
    import httpx
    import pyjail
    pool = tight.client(ALICE)
    s = pool.session()
    s.run("x = 1")
    serve = [p for p in _descendants(tight.proc.pid)
             if b" serve " in open("/proc/%d/cmdline" % p, "rb").read().replace(b"\0", b" ")]
    assert serve
    for p in serve:
        os.kill(p, signal.SIGKILL)
    assert wait_until(lambda: httpx.get(tight.url + "/readyz").status_code == 503, 20)
    assert httpx.get(tight.url + "/healthz").status_code == 503
    with pytest.raises(pyjail.SessionDiedError):
        s.run("x")
    with pytest.raises(pyjail.JailError):
        pool.session()

    # The server itself killed mid-cell: the client's call ends, it does not hang.
    tight2 = Server(tight.tokens.parent, tight.pyjail_bin)
    leftovers, pool_dirs = [], set()
    try:
        s = tight2.client().session()
        leftovers = _descendants(tight2.proc.pid)
        for pid in leftovers:
            argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
            if b"--socket" in argv:
                pool_dirs.add(os.path.dirname(argv[argv.index(b"--socket") + 1].decode()))
        outcome = []

        def cell():
            try:
                s.run("import time\nprint('x', flush=True)\ntime.sleep(60)",
                      on_stdout=lambda _: os.kill(tight2.proc.pid, signal.SIGKILL))
            except pyjail.SessionDiedError as e:
                outcome.append(e)
        t = threading.Thread(target=cell)
        t.start()
        t.join(60)
        assert not t.is_alive() and outcome
        with pytest.raises(pyjail.SessionDiedError):
            s.run("1")
    finally:
        tight2.stop()
        # A server killed with SIGKILL cannot stop its templates (in a pod, they go with
        # the pod): this test's own are stopped here.
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for d in pool_dirs:
            shutil.rmtree(d, ignore_errors=True)


def test_connections_past_a_quarter_of_the_descriptors_are_refused(tmp_path, pyjail_bin):
    # Attack: clients that connect and send nothing until the server has no descriptor left,
    # when every tenant's run fails to make its pipes. With 2048 descriptors, past 512
    # connections new ones are answered 503, and a run still works once they go.
    import httpx
    s = Server(tmp_path, pyjail_bin, nofile=2048)
    held = []
    try:
        for _ in range(530):
            held.append(socket.create_connection(("127.0.0.1", s.port), timeout=10))
        time.sleep(0.5)
        r = httpx.get(s.url + "/healthz", timeout=30)
        assert r.status_code == 503, r.status_code
        for c in held:
            c.close()
        held = []
        time.sleep(0.5)
        with s.client() as client:
            assert client.run("print(6 * 7)").stdout == "42\n"
    finally:
        for c in held:
            c.close()
        s.stop()


def test_a_session_whose_creator_left_is_not_kept(server):
    # Attack: a client that gives up on POST /v1/sessions (its timeout) left a session that
    # counted against the tenant's quota for 30 minutes: three such, and the tenant (2
    # sessions at most here) could open none. Now each is closed once it is made.
    import httpx
    auth = {"Authorization": "Bearer " + CAROL}
    for _ in range(3):      # the whole request sent, and the connection closed at once
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as c:
            c.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}" % CAROL.encode())
    time.sleep(3)       # each creation finishes, finds its client gone, and closes
    made = []
    try:
        for _ in range(2):
            r = httpx.post(server.url + "/v1/sessions", json={}, headers=auth, timeout=60)
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
    finally:
        for sid in made:
            httpx.delete(server.url + "/v1/sessions/" + sid, headers=auth, timeout=60)


def test_the_server_says_when_its_limits_are_per_process(tmp_path, pyjail_bin):
    # Without cgroup v2, --memory bounds each process, not the jail, and the CPU charged
    # misses processes the kernel reaps itself: said when the server starts, as a warning,
    # exactly when a run's report says its memory limit is not the cgroup's.
    import fcntl
    import pyjail
    mechanism = pyjail.run("pass", binary=pyjail_bin, memory="512M").report.limits["memory"]["mechanism"]
    s = Server(tmp_path, pyjail_bin)
    try:
        fd = s.proc.stderr.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        try:
            said = os.read(fd, 65536).decode()
        except BlockingIOError:
            said = ""
        warned = "pyjail-server: warning: no cgroup v2 for the jails here" in said
        assert warned == (mechanism != "cgroup-v2"), (mechanism, said)
    finally:
        s.stop()
