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


@pytest.fixture
def http_server(mcp_sdk, pyjail_bin, data_rootfs, tmp_path):
    port = _free_port()
    config = tmp_path / "mcp.toml"
    # The config file gives the rootfs and limits; the command line the transport.
    config.write_text('rootfs = "%s"\nmemory = "1G"\ntimeout = 60\nmax-sessions = 4\n'
                      % data_rootfs)
    proc = subprocess.Popen(PY + ["--config", str(config), "--transport", "http",
                                  "--listen", "127.0.0.1:%d" % port],
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
