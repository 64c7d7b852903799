"""pyjail-mcp (pyjail.mcp), driven by the MCP SDK's own client over stdio and
streamable HTTP: state per MCP session, fresh runs, files in and out of /work,
images as image content, the jail's facts in the tool descriptions."""

import asyncio
import base64
import os
import socket
import subprocess
import sys
import time

import pytest

from pyjail_testing import REPO
from pyjail_testing.package import import_or_skip

PY = [sys.executable, "-m", "pyjail.mcp"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _texts(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mcp_sdk():
    return import_or_skip("mcp")


def test_stdio_session_keeps_state_fresh_run_does_not(mcp_sdk, pyjail_bin):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def scenario():
        params = StdioServerParameters(command=PY[0], args=PY[1:] + ["--memory", "512M",
                                                                      "--timeout", "20"],
                                       env=_env())
        async with Client(params) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert {"run_python", "run_python_fresh", "upload_file", "download_file",
                    "list_files", "reset_session"} <= set(tools)
            assert tools["run_python"].input_schema["required"] == ["code"]
            desc = tools["run_python"].description
            assert "Network: none" in desc and "/work" in desc and "Python 3" in desc

            r = await c.call_tool("run_python", {"code": "x = 6 * 7\nprint('out')\nx"})
            assert not r.is_error and "out" in _texts(r) and "value: 42" in _texts(r)
            r = await c.call_tool("run_python", {"code": "x + 1"})
            assert "value: 43" in _texts(r)
            # A lone surrogate in an error (undecodable bytes, as Python keeps them) has no
            # UTF-8: the reply carries its escape instead of failing as a whole.
            r = await asyncio.wait_for(c.call_tool("run_python", {"code": "raise ValueError('a\\udc80b')"}), 60)
            assert r.is_error and "ValueError: a\\udc80b" in _texts(r), _texts(r)
            # A fresh run sees nothing of the session.
            r = await c.call_tool("run_python_fresh", {"code": "print('x' in globals())"})
            assert "False" in _texts(r) and "exit status 0" in _texts(r)
            r = await c.call_tool("run_python_fresh", {"code": "raise SystemExit(3)"})
            assert r.is_error and "exit status 3" in _texts(r)

            # Files in and out of /work.
            r = await c.call_tool("upload_file", {"path": "in/a.txt", "content": "hello"})
            assert not r.is_error, _texts(r)
            r = await c.call_tool("run_python", {
                "code": "open('/work/out.bin', 'wb').write(bytes(range(256)))\n"
                        "open('/work/in/a.txt').read()"})
            assert "value: 'hello'" in _texts(r)
            r = await c.call_tool("download_file", {"path": "out.bin"})
            assert base64.b64decode(_texts(r)[len("base64:"):]) == bytes(range(256))
            r = await c.call_tool("list_files", {})
            assert "in/a.txt\t5 bytes" in _texts(r)
            # A missing file and bad base64 are errors of the call.
            r = await c.call_tool("download_file", {"path": "missing.txt"})
            assert r.is_error and "missing.txt" in _texts(r)
            r = await c.call_tool("upload_file", {"path": "b", "content": "!!",
                                                  "base64_encoded": True})
            assert r.is_error and "base64" in _texts(r)

            # An exception is the call's error; a timeout keeps the session.
            r = await c.call_tool("run_python", {"code": "1/0"})
            assert r.is_error and "ZeroDivisionError" in _texts(r)
            r = await c.call_tool("run_python", {"code": "import time; time.sleep(30)",
                                                 "timeout": 1})
            assert r.is_error and "ran out of time" in _texts(r)
            r = await c.call_tool("run_python", {"code": "x"})
            assert "value: 42" in _texts(r)
            r = await c.call_tool("reset_session", {})
            r = await c.call_tool("run_python", {"code": "x"})
            assert r.is_error and "NameError" in _texts(r)

    asyncio.run(scenario())


def _serve_http(data_rootfs, tmp_path, *extra):
    """pyjail-mcp over HTTP on a free port: yields its /mcp URL."""
    port = _free_port()
    config = tmp_path / "mcp.toml"
    # The config file gives the rootfs and limits; the command line the transport.
    config.write_text('rootfs = "%s"\nmemory = "1G"\ntimeout = 60\nmax-sessions = 4\n'
                      % data_rootfs)
    proc = subprocess.Popen(PY + ["--config", str(config), "--transport", "http",
                                  "--listen", "127.0.0.1:%d" % port, *extra],
                            env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("pyjail-mcp did not listen: %s" % proc.stderr.read().decode())
            time.sleep(0.2)
    try:
        yield "http://127.0.0.1:%d/mcp" % port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.fixture
def http_server(mcp_sdk, pyjail_bin, data_rootfs, tmp_path):
    yield from _serve_http(data_rootfs, tmp_path)


TOKEN = "tok-" + "0123456789abcdef" * 2
BOB_TOKEN = "tok-" + "fedcba9876543210" * 2


@pytest.fixture
def tokens_file(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# tenant token\nalice %s\nbob %s\n" % (TOKEN, BOB_TOKEN))
    path.chmod(0o600)
    return path


def test_http_sessions_images_and_facts(http_server):
    from mcp import Client

    async def scenario():
        # The handshake's protocol (an Mcp-Session-Id): the connection is the session.
        async with Client(http_server, mode="legacy") as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            # The rootfs's lock, in the description the model reads.
            assert "numpy " in tools["run_python"].description
            r = await c.call_tool("run_python", {"code": "import numpy as np\na = np.arange(4)"})
            assert not r.is_error, _texts(r)
            r = await c.call_tool("run_python", {"code": "int(a.sum())"})
            assert "value: 6" in _texts(r)
            r = await c.call_tool("run_python", {
                "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
            images = [b for b in r.content if b.type == "image"]
            assert len(images) == 1 and images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
        # Another connection is another session.
        async with Client(http_server, mode="legacy") as c:
            r = await c.call_tool("run_python", {"code": "a"})
            assert r.is_error and "NameError" in _texts(r)
        # The stateless protocol has no MCP session: the call names one to pass back.
        async with Client(http_server) as c:
            r = await c.call_tool("run_python", {"code": "y = 5"})
            note = [line for line in _texts(r).splitlines() if line.startswith("session: ")]
            assert note, _texts(r)
            name = note[0].split()[1]
            r = await c.call_tool("run_python", {"code": "y * 2", "session": name})
            assert "value: 10" in _texts(r)

    asyncio.run(scenario())


@pytest.mark.parametrize("args, message", [
    (["--transport", "http", "--listen", "0.0.0.0:8123"],
     "without --tokens would let anyone who reaches the port run code"),
    (["--transport", "http", "--listen", "127.0.0.1:8123", "--tokens", "{tokens}",
      "--no-auth"], "--tokens and --no-auth: give one"),
    (["--tokens", "{tokens}"], "--tokens and --no-auth are for --transport http"),
    (["--transport", "http", "--listen", "0.0.0.0:8123", "--tokens", "{open_tokens}"],
     "lets others read the tokens; chmod 600 it"),
])
def test_http_refuses_to_serve_code_execution_without_auth(mcp_sdk, tokens_file, args, message):
    # Before any jail starts: a listen address others can reach without tokens, a tokens
    # file others can read, contradictory settings.
    open_tokens = tokens_file.with_name("open-tokens")
    open_tokens.write_text(tokens_file.read_text())
    open_tokens.chmod(0o644)
    args = [a.format(tokens=tokens_file, open_tokens=open_tokens) for a in args]
    r = subprocess.run(PY + args, env=_env(), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_http_with_tokens_needs_a_valid_bearer_token(mcp_sdk, pyjail_bin, data_rootfs, tmp_path,
                                                     tokens_file):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    for url in _serve_http(data_rootfs, tmp_path, "--tokens", str(tokens_file)):
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        for headers in ({}, {"Authorization": "Bearer " + TOKEN[:-1] + "x"},
                        {"Authorization": TOKEN}):
            r = httpx2.post(url, json=hello, headers=headers, timeout=30)
            assert r.status_code == 401, (headers, r.status_code, r.text)

        async def scenario():
            client = httpx2.AsyncClient(headers={"Authorization": "Bearer " + TOKEN},
                                        timeout=60)
            async with client, Client(streamable_http_client(url, http_client=client),
                                      mode="legacy") as c:
                r = await c.call_tool("run_python", {"code": "6 * 7"})
                assert "value: 42" in _texts(r), _texts(r)
                # Attack: bob names alice's session, or sends her Mcp-Session-Id (and a
                # tenant header of his own making): each is a session of bob's.
                r = await c.call_tool("run_python", {"code": "secret = 'alice-42'",
                                                     "session": "work"})
                assert not r.is_error, _texts(r)
            bob = httpx2.AsyncClient(headers={"Authorization": "Bearer " + BOB_TOKEN,
                                              "X-Pyjail-Tenant": "alice"}, timeout=60)
            async with bob, Client(streamable_http_client(url, http_client=bob),
                                   mode="legacy") as c:
                r = await c.call_tool("run_python", {"code": "secret", "session": "work"})
                assert r.is_error and "NameError" in _texts(r), _texts(r)
                r = await c.call_tool("run_python", {"code": "'secret' in globals()"})
                assert "value: False" in _texts(r), _texts(r)

        asyncio.run(scenario())
        # Attack: bob's handshakes alone, past his share of the MCP sessions (max-sessions
        # 4, two tenants: 2 each), filled the server's: alice's was refused.
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        codes = [httpx2.post(url, json=init, timeout=30, headers=dict(
            accept, Authorization="Bearer " + BOB_TOKEN)).status_code for _ in range(5)]
        assert codes == [200, 200, 503, 503, 503], codes
        r = httpx2.post(url, json=init, timeout=30,
                        headers=dict(accept, Authorization="Bearer " + TOKEN))
        assert r.status_code == 200 and r.headers.get("mcp-session-id"), (r.status_code, r.text)


class _FakeSession:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


class _FakePool:
    def session(self, timeout=None):
        return _FakeSession()


@pytest.mark.no_binary
def test_one_tenants_sessions_never_evict_anothers():
    # Attack: bob opening sessions until the server's cap evicted alice's (her variables and
    # files gone). Each tenant holds its share of --max-sessions and gives up its own.
    from pyjail.mcp import Config, JailSessions
    store = JailSessions(_FakePool(), Config(max_sessions=4), tenants=2)
    try:
        alice = [store.get("named:alice\0a%d" % i) for i in range(2)]
        bob = [store.get("named:bob\0b%d" % i) for i in range(5)]
        assert not any(s.closed for s in alice)
        assert [s.closed for s in bob] == [True, True, True, False, False]
        assert len(store) == 4
        assert store.get("named:alice\0a0", create=False) is alice[0]
    finally:
        store.close()


class _FakeTransport:
    """The SDK's session manager as TenantShares sees it: a request without an
    Mcp-Session-Id opens one (named in the answer), a known one is served, an unknown one is
    404, DELETE ends one; another path is 404; a request with the query "hold" waits for
    `release` first."""

    def __init__(self):
        self.sessions = set()
        self.n = 0
        self.release = None

    async def __call__(self, scope, receive, send):
        sid = dict(scope["headers"]).get(b"mcp-session-id")
        headers = []
        if scope.get("query_string") == b"hold":
            await self.release.wait()
        if scope["path"] != "/mcp":
            status = 404                                # no such route
        elif sid is None:
            self.n += 1
            sid = b"s%d" % self.n
            self.sessions.add(sid)
            status, headers = 200, [(b"mcp-session-id", sid)]
        elif sid not in self.sessions:
            status = 404
        elif scope["method"] == "DELETE":
            self.sessions.discard(sid)
            status = 200
        else:
            status = 200
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


@pytest.mark.no_binary
def test_one_tenant_cannot_hold_every_mcp_session_of_the_server():
    # Attack: bob opening MCP sessions (handshakes only) until the SDK's --max-sessions cap
    # refused every other tenant's with 503. Each tenant opens at most its share.
    from pyjail.mcp import TENANT_HEADER, TenantShares

    async def scenario():
        inner = _FakeTransport()
        inner.release = asyncio.Event()
        app = TenantShares(inner, share=2, idle_timeout=0.2, handshake_versions=["2025-06-18"])
        app.MARGIN = 0

        async def call(tenant, sid=None, method="POST", path="/mcp", version=None, hold=False):
            headers = [(TENANT_HEADER, tenant.encode())]
            if version is not None:
                headers.append((b"mcp-protocol-version", version))
            if sid is not None:
                headers.append((b"mcp-session-id", sid))
            sent = []

            async def send(message):
                sent.append(message)
            await app({"type": "http", "method": method, "path": path, "headers": headers,
                       "query_string": b"hold" if hold else b""}, None, send)
            start = sent[0]
            return start["status"], dict(start["headers"]).get(b"mcp-session-id"), \
                sent[1]["body"]

        b1, b2 = (await call("bob"))[1], (await call("bob"))[1]
        status, _, body = await call("bob")
        assert status == 503 and b"this tenant has its 2 MCP sessions open" in body
        a1 = (await call("alice"))[1]
        assert a1, "another tenant's session was refused"
        assert (await call("bob", b1))[0] == 200       # bob's own still serve him
        assert (await call("bob", b1, "DELETE"))[0] == 200
        b3 = (await call("bob"))[1]
        assert b3 and (await call("bob"))[0] == 503
        # Attack: bob's live session's id sent to another route, whose 404 the middleware
        # took for the SDK's, forgetting the session: he opened past his share.
        assert (await call("bob", b2, path="/other"))[0] == 404
        assert (await call("bob", b2, "DELETE", path="/other"))[0] == 404
        assert (await call("bob"))[0] == 503, "another route's 404 freed a slot"
        inner.sessions.discard(b2)                     # the SDK forgot it: 404, slot freed
        assert (await call("bob", b2))[0] == 404
        assert (await call("bob"))[0] == 200 and (await call("bob"))[0] == 503
        # The stateless protocol's requests open no session: never counted, never refused.
        stateless = [asyncio.ensure_future(call("bob", version=b"2026-07-28", hold=True))
                     for _ in range(4)]
        await asyncio.sleep(0.05)
        assert (await call("bob", version=b"2026-07-28"))[0] == 200
        assert (await call("bob", version=b"2025-06-18"))[0] == 503
        # A request in flight keeps its session, however long; idle ones are let go.
        assert (await call("alice"))[0] == 200 and (await call("alice"))[0] == 503
        held = asyncio.ensure_future(call("alice", a1, hold=True))
        await asyncio.sleep(0.5)                       # past idle_timeout
        assert (await call("alice"))[0] == 200, "alice's idle session was not let go"
        assert (await call("alice"))[0] == 503, "alice's busy session was let go"
        inner.release.set()
        await held
        await asyncio.gather(*stateless)

    asyncio.run(scenario())


def test_one_tenants_waiting_calls_leave_threads_for_another(mcp_sdk, pyjail_bin, data_rootfs,
                                                            tmp_path, tokens_file):
    # Attack: bob's 45 calls at once into one session: one runs a long cell, the others wait
    # for it. They held all 40 of the server's worker threads, and alice's call waited for
    # bob's cell to end. Each tenant's calls now wait on threads of their own.
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    for url in _serve_http(data_rootfs, tmp_path, "--tokens", str(tokens_file)):
        async def scenario():
            bob_http = httpx2.AsyncClient(headers={"Authorization": "Bearer " + BOB_TOKEN},
                                          timeout=120)
            alice_http = httpx2.AsyncClient(headers={"Authorization": "Bearer " + TOKEN},
                                            timeout=120)
            async with bob_http, alice_http, \
                    Client(streamable_http_client(url, http_client=bob_http)) as bob, \
                    Client(streamable_http_client(url, http_client=alice_http)) as alice:
                r = await alice.call_tool("run_python", {"code": "1", "session": "a"})
                assert "value: 1" in _texts(r), _texts(r)
                r = await bob.call_tool("run_python", {"code": "import time", "session": "slow"})
                assert not r.is_error, _texts(r)
                flood = [asyncio.ensure_future(bob.call_tool("run_python", {
                    "code": "time.sleep(40)", "session": "slow"})) for _ in range(45)]
                try:
                    await asyncio.sleep(3)      # bob's calls reach the server, and wait
                    t0 = time.monotonic()
                    r = await asyncio.wait_for(
                        alice.call_tool("run_python", {"code": "6 * 7", "session": "a"}), 30)
                    took = time.monotonic() - t0
                    assert "value: 42" in _texts(r), _texts(r)
                    # Before, alice's call waited for bob's 40 s cell to end.
                    assert took < 20, "alice waited %.1f s behind bob's calls" % took
                    done = [f for f in flood if f.done()]
                    assert not done, "bob's cell did not hold: %s" % [
                        _texts(f.result()) if not f.exception() else repr(f.exception()) for f in done[:3]]
                finally:
                    for f in flood:
                        f.cancel()
                    await asyncio.gather(*flood, return_exceptions=True)

        asyncio.run(scenario())
