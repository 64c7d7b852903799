"""pyjail.deepagents.PyjailSandbox against the real deepagents from PyPI.

The attack tests run the same command or file operation against deepagents' own
LocalShellBackend as well, where it reaches the host: what each test shows pyjail
stopping is something an agent's backend can otherwise do.
"""

import asyncio
import base64
import os

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("deepagents")

from deepagents import create_deep_agent  # noqa: E402
from deepagents.backends import CompositeBackend, LocalShellBackend, StateBackend  # noqa: E402
import pyjail  # noqa: E402
from deepagents.backends.protocol import SandboxBackendProtocol  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402

from pyjail.deepagents import PyjailSandbox  # noqa: E402


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers with the messages it is given, tool calls included."""

    def bind_tools(self, tools, **kwargs):
        return self


def call(name, args, i):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": "call%d" % i}])


@pytest.fixture(scope="module")
def sandbox(pyjail_bin, data_rootfs):
    os.environ["PYJAIL_BIN"] = pyjail_bin
    sb = PyjailSandbox(timeout=30)
    yield sb
    sb.close()


@pytest.fixture
def host_secret(tmp_path):
    """A host file only the host can read: the attack tests' target."""
    path = tmp_path / "secret.txt"
    path.write_text("host-secret-4c1d\n")
    os.chmod(str(tmp_path), 0o755)
    return str(path)


# ------------------------------------------------------------------ execute

def test_is_a_sandbox_backend(sandbox):
    assert isinstance(sandbox, SandboxBackendProtocol)
    assert sandbox.id.startswith("pyjail-")
    assert PyjailSandbox(session=sandbox.session).id != sandbox.id


def test_execute_output_and_exit_code(sandbox):
    r = sandbox.execute("echo out; echo err >&2; exit 3")
    assert (r.output, r.exit_code, r.truncated) == ("out\nerr\n", 3, False)
    r = sandbox.execute("pwd; python3 -c 'import sys; print(sys.version_info[0])'")
    assert (r.output, r.exit_code) == ("/work\n3\n", 0)
    assert sandbox.execute("kill -9 $$").exit_code == 137
    assert sandbox.execute("cat").output == ""          # stdin is /dev/null, not a hang


def test_work_persists_across_calls(sandbox):
    assert sandbox.execute("echo kept > /work/kept.txt").exit_code == 0
    assert sandbox.execute("cat kept.txt").output == "kept\n"
    assert sandbox.read("/work/kept.txt").file_data["content"] == "kept"


def test_output_budget_both_sides(pyjail_bin, data_rootfs):
    with PyjailSandbox(max_output_bytes=1000) as sb:
        under = sb.execute("head -c 1000 /dev/zero | tr '\\0' a")
        assert (len(under.output), under.truncated) == (1000, False)
        over = sb.execute("seq 1 100000")
        assert over.truncated and over.exit_code == 0
        assert over.output.startswith("1\n2\n3\n") and over.output.endswith("\n99999\n100000\n")
        assert "bytes of output omitted" in over.output
        assert len(over.output.encode()) < 1100
        # The budget is the model's: the file operations' own commands are not cut.
        sb.upload_files([("/work/big.txt", b"".join(b"line %d\n" % i for i in range(5000)))])
        r = sb.read("/work/big.txt", 0, 5000)
        assert r.error is None and r.end_line == 5000


def test_a_command_that_hangs_is_stopped_and_the_sandbox_goes_on(sandbox):
    sandbox.execute("echo before > /work/before.txt")
    # A child that ignores SIGINT and SIGTERM, in the background: killed with the command.
    r = sandbox.execute("sh -c 'trap \"\" INT TERM; sleep 300' & sleep 300", timeout=2)
    assert r.exit_code == 124 and "timed out after 2 seconds" in r.output
    assert sandbox.execute("ps -o args | grep '^sleep 300' || echo none").output == "none\n"
    assert sandbox.execute("cat /work/before.txt").output == "before\n"   # the jail is the same
    # Under the timeout, the same command finishes.
    assert sandbox.execute("sleep 0.2; echo done", timeout=30).output == "done\n"


def test_a_killed_jail_is_replaced_and_the_output_says_so(pyjail_bin, data_rootfs):
    with PyjailSandbox() as sb:
        sb.execute("echo x > /work/x")
        r = sb.execute("kill -9 $PPID; sleep 5")     # the jail's interpreter
        assert "restarted" in r.output and "/work" in r.output
        assert sb.session.restarts == 1
        assert sb.execute("ls /work").output == ""
        assert sb.execute("echo again").output == "again\n"


def test_async_twins_do_not_block_the_event_loop(sandbox):
    async def main():
        ticks = []

        async def ticker():
            while True:
                ticks.append(1)
                await asyncio.sleep(0.01)

        t = asyncio.ensure_future(ticker())
        r = await sandbox.aexecute("sleep 1; echo slept")
        seen = len(ticks)
        t.cancel()
        w = await sandbox.awrite("/work/async.txt", "a\nb\n")
        got = await sandbox.aread("/work/async.txt")
        g = await sandbox.agrep("b", "/work", "async.*")
        d = await sandbox.adownload_files(["/work/async.txt"])
        return r, seen, w, got, g, d

    r, seen, w, got, g, d = asyncio.run(main())
    assert r.output == "slept\n" and seen > 1
    assert w.error is None and got.file_data["content"] == "a\nb"
    assert [m["line"] for m in g.matches] == [2]
    assert d[0].content == b"a\nb\n"


def test_cancelling_aexecute_stops_the_command(sandbox):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sandbox.aexecute("sleep 300 & sleep 301", timeout=60), 1)
        return await sandbox.aexecute("ps -o args | grep '^sleep 30' || echo none")

    assert asyncio.run(main()).output == "none\n"
    assert sandbox.execute("echo still here").output == "still here\n"


# ---------------------------------------------------------- file operations

def test_file_operations_edge_cases(sandbox):
    assert sandbox.write("/work/ops/a.txt", "one\ntwo\ntwo\nthree\n").error is None
    r = sandbox.read("/work/ops/a.txt", offset=1, limit=2)
    assert r.file_data["content"] == "two\ntwo" and (r.start_line, r.end_line) == (2, 3)
    assert "file_not_found" in sandbox.read("/work/ops/missing.txt").error
    assert sandbox.read("/work/ops").error
    e = sandbox.edit("/work/ops/a.txt", "two", "2")
    assert "multiple times" in e.error                  # not unique: two occurrences
    assert sandbox.edit("/work/ops/a.txt", "two", "2", replace_all=True).occurrences == 2
    assert sandbox.edit("/work/ops/missing.txt", "a", "b").error
    assert sandbox.read("/work/ops/a.txt").file_data["content"] == "one\n2\n2\nthree"
    assert {e["path"] for e in sandbox.ls("/work/ops").entries} == {"/work/ops/a.txt"}
    assert sandbox.ls("/work/ops/missing").error
    g = sandbox.grep("2", "/work/ops", "*.txt")
    assert [(m["path"], m["line"]) for m in g.matches] == [("/work/ops/a.txt", 2),
                                                          ("/work/ops/a.txt", 3)]
    assert sandbox.grep("2", "/work/ops", max_count=1).truncated
    assert sandbox.grep("2", "/work/ops", "**/*.py").matches == []
    assert [m["path"] for m in sandbox.glob("**/*.txt", "/work/ops").matches] == ["/work/ops/a.txt"]
    assert sandbox.delete("/work/ops/a.txt").error is None
    assert sandbox.delete("/work/ops/a.txt").error


def test_upload_and_download_bytes(sandbox):
    blob = bytes(range(256)) * 4
    up = sandbox.upload_files([("/work/bin/blob", blob), ("/usr/x", b"1"),
                               ("/work/../tmp/x", b"1"), ("relative", b"1")])
    assert [u.error for u in up] == [None, "permission_denied", "invalid_path", "invalid_path"]
    down = sandbox.download_files(["/work/bin/blob", "/work/bin/none", "/work/bin"])
    assert down[0].content == blob
    assert [d.error for d in down[1:]] == ["file_not_found", "is_directory"]
    assert sandbox.execute("wc -c < /work/bin/blob").output.strip() == "1024"
    r = sandbox.read("/work/bin/blob")                  # not UTF-8: whole, as base64
    assert r.file_data["encoding"] == "base64"
    assert base64.b64decode(r.file_data["content"]) == blob


def test_upload_and_download_caps(pyjail_bin, data_rootfs):
    with PyjailSandbox(max_file_bytes=1000) as sb:
        assert sb.upload_files([("/work/ok", b"x" * 1000)])[0].error is None
        assert "limit" in sb.upload_files([("/work/big", b"x" * 1001)])[0].error
        sb.execute("head -c 1001 /dev/zero > /work/big")
        assert sb.download_files(["/work/ok"])[0].content == b"x" * 1000
        assert "limit" in sb.download_files(["/work/big"])[0].error


# ------------------------------------------------------------------ attacks

def test_attack_dotdot_paths_are_refused(sandbox):
    sandbox.execute("mkdir -p /work/route && echo inside > /work/route/f")
    for path in ("/work/route/../../etc/passwd", "/work/..", "/../etc/passwd"):
        assert "'..'" in sandbox.read(path).error
        assert "'..'" in sandbox.write(path, "x").error
        assert "'..'" in sandbox.edit(path, "a", "b").error
        assert "'..'" in sandbox.ls(path).error
        assert "'..'" in sandbox.delete(path).error
        assert "'..'" in sandbox.glob("*", path).error
        assert "'..'" in sandbox.grep("root", path).error
        assert sandbox.download_files([path])[0].error == "invalid_path"
        assert sandbox.upload_files([(path, b"x")])[0].error == "invalid_path"
    assert "absolute" in sandbox.read("etc/passwd").error


def test_attack_host_paths_are_the_jails_own(sandbox, host_secret, tmp_path):
    """A host path names nothing in the jail: no file operation or command reaches it."""
    assert sandbox.download_files([host_secret])[0].error == "file_not_found"
    assert sandbox.read(host_secret).error
    assert sandbox.ls(str(tmp_path)).error
    assert sandbox.grep("host-secret", "/").matches == []
    r = sandbox.execute("cat %s; grep -rs host-secret / 2>/dev/null | head -1" % host_secret)
    assert "host-secret" not in r.output
    # The same, against deepagents' unisolated local shell: it reads the host's file.
    local = LocalShellBackend(root_dir=str(tmp_path))
    assert "host-secret-4c1d" in local.execute("cat %s" % host_secret).output


def test_attack_a_symlink_out_stays_in_the_jail(sandbox, host_secret):
    sandbox.execute("ln -sf %s /work/link && ln -sf /etc/passwd /work/passwd-link" % host_secret)
    assert sandbox.download_files(["/work/link"])[0].error == "file_not_found"
    assert sandbox.read("/work/link").error
    assert "host-secret" not in sandbox.execute("cat /work/link").output
    # /etc/passwd through a link is the jail's rootfs's, not the host's.
    jails = sandbox.download_files(["/work/passwd-link"])[0].content
    with open("/etc/passwd", "rb") as f:
        assert jails != f.read()


def test_attack_host_processes_and_network_are_out_of_reach(sandbox, tmp_path):
    ps = sandbox.execute("ls /proc | grep -c '^[0-9]'").output.strip()
    assert 0 < int(ps) < 20
    assert str(os.getpid()) not in sandbox.execute("ls /proc").output.split()
    net = sandbox.execute("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\"")
    assert net.exit_code != 0
    local = LocalShellBackend(root_dir=str(tmp_path))
    assert str(os.getpid()) in local.execute("ls /proc").output.split()


def test_egress_and_limits_come_from_the_constructor(pyjail_bin, data_rootfs):
    with PyjailSandbox(memory="200M", limits=pyjail.Limits(pids=32)) as sb:
        assert sb.session.egress[0] in (None, "none")
        over = sb.execute("python3 -c 'b = bytearray(400 << 20); print(len(b))'")
        assert over.exit_code != 0 and "MemoryError" in over.output
        under = sb.execute("python3 -c 'b = bytearray(20 << 20); print(len(b))'")
        assert under.output == "20971520\n"


def test_controlled_egress_from_the_constructor(pyjail_bin, data_rootfs):
    from pyjail_testing.web import hello_server
    fetch = ("python3 -c \"import urllib.request; "
             "print(urllib.request.urlopen('http://%s/', timeout=5).read().decode())\"")
    with hello_server() as port:
        host = "web.test:%d" % port
        with PyjailSandbox(net="allow", allow_hosts=[host],
                           options={"net_resolve": {"web.test": "127.0.0.1"}}) as sb:
            assert sb.session.egress == ("allow", [host])
            allowed = sb.execute(fetch % host)
            assert (allowed.output, allowed.exit_code) == ("hello %s\n" % host, 0)
            other = sb.execute(fetch % ("other.test:%d" % port))
            assert other.exit_code != 0 and "hello" not in other.output


def test_pip_install_user_with_the_index_allowed(pyjail_bin, data_rootfs, tmp_path):
    """What the docstring and describe() promise: pip --user from an allowed index, then
    the package imports in the next command; without the index allowed, pip cannot."""
    from pyjail_testing.web import make_wheel, package_index
    wheel = make_wheel(tmp_path, "pj-deep-widget", "deepwidget")
    with package_index([wheel]) as index:
        with PyjailSandbox(net="allow", allow_hosts=[index.host],
                           options={"net_resolve": index.resolve}, env=index.pip_env) as sb:
            r = sb.execute("python3 -m pip install -q --user pj-deep-widget", timeout=120)
            assert r.exit_code == 0, r.output
            r = sb.execute("python3 -c 'import deepwidget; print(deepwidget.VALUE)'")
            assert r.output == "42\n"
        with PyjailSandbox(env=index.pip_env) as sb:
            r = sb.execute("python3 -m pip install -q --user --retries 0 --timeout 3 "
                           "pj-deep-widget", timeout=120)
            assert r.exit_code != 0


# ------------------------------------------------------------------ agents

def test_create_deep_agent_drives_the_sandbox(pyjail_bin, data_rootfs):
    model = ScriptedModel(messages=iter([
        call("write_file", {"file_path": "/work/hello.py", "content": "print('hello')\n"}, 1),
        call("edit_file", {"file_path": "/work/hello.py", "old_string": "hello",
                           "new_string": "hi there"}, 2),
        call("grep", {"pattern": "hi there", "output_mode": "content"}, 3),
        call("execute", {"command": "python3 hello.py > out.txt; cat out.txt"}, 4),
        call("write_file", {"file_path": "/memories/notes.md", "content": "ran hello.py"}, 5),
        AIMessage("It printed: hi there"),
    ]))
    with PyjailSandbox() as sb:
        backend = CompositeBackend(default=sb, routes={"/memories/": StateBackend()})
        agent = create_deep_agent(model=model, backend=backend)
        out = agent.invoke({"messages": [{"role": "user", "content": "Run hello.py"}]})
        tools = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
        assert "hi there" in tools[2]
        assert tools[3] == "hi there\n\n[Command succeeded with exit code 0]"
        assert out["messages"][-1].content == "It printed: hi there"
        assert sb.download_files(["/work/out.txt"])[0].content == b"hi there\n"
        # The route's file is in the agent's state (under the route's own name), not in
        # the jail.
        assert out["files"]["/notes.md"]["content"] == "ran hello.py"
        assert sb.execute("ls /memories 2>&1").exit_code != 0


def test_the_readme_example(pyjail_bin, data_rootfs):
    from test_readme import find, run_example
    code = find("pyjail.deepagents")
    r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("1267650600228229401496703205376\n\n[Command succeeded with exit code 0]\n"
                        "b'1267650600228229401496703205376\\n'\n")


def test_attack_a_lying_interpreter_gets_no_malformed_result_through(pyjail_bin, data_rootfs):
    """Code in the session's interpreter (a Python tool sharing it) can replace what the
    backend runs there: its answers are checked, never trusted for their shape."""
    with PyjailSandbox() as sb:
        sb.session.run(
            "import builtins\n"
            "_real_exec = builtins.exec\n"
            "def _lying_exec(src, ns=None):\n"
            "    _real_exec(src, ns)\n"
            "    ns['grep'] = lambda *a: ([['/w', 'one', 'x'], ['/w', 2, 'ok'], 'junk', [1, 2, 3]],"
            " True) if 'bad' in a[0] else ({'a': 1}, 2)\n"
            "    ns['sh'] = lambda *a: 'zero'\n"
            "builtins.exec = _lying_exec\n")
        g = sb.grep("bad", "/work")
        assert g.matches == [{"path": "/w", "line": 2, "text": "ok"}] and g.truncated
        assert "malformed" in sb.grep("other", "/work").error
        r = sb.execute("echo hi")
        assert r.exit_code is None


def test_describe_tells_the_model_the_sandbox_facts(sandbox, pyjail_bin):
    text = sandbox.describe()
    assert "rootfs 'data'" in text and "busybox" in text and "numpy" in text
    assert "no network" in text and "/work" in text
    with PyjailSandbox(rootfs="default", net="allow", allow_hosts=["a.test"]) as sb:
        text = sb.describe()
        assert "busybox" not in text and "only these hosts" in text and "a.test" in text
    # As create_deep_agent's system prompt.
    model = ScriptedModel(messages=iter([AIMessage("ok")]))
    out = create_deep_agent(model=model, backend=sandbox, system_prompt=sandbox.describe()) \
        .invoke({"messages": [{"role": "user", "content": "hi"}]})
    assert out["messages"][-1].content == "ok"


def test_as_a_route_of_a_composite_backend(sandbox, tmp_path):
    from deepagents.backends import FilesystemBackend
    c = CompositeBackend(default=FilesystemBackend(root_dir=str(tmp_path), virtual_mode=True),
                         routes={"/jail/": sandbox})
    assert c.write("/jail/work/routed.txt", "routed").error is None
    assert sandbox.execute("cat /work/routed.txt").output == "routed"
    assert c.read("/jail/work/routed.txt").file_data["content"] == "routed"
    assert [m["path"] for m in c.grep("routed", "/jail/work").matches] == ["/jail/work/routed.txt"]
    assert c.download_files(["/jail/work/routed.txt"])[0].content == b"routed"
    assert not os.path.exists(str(tmp_path / "work"))     # nothing went to the host backend
    # Attack: climbing out of the route's directory inside the jail.
    assert "'..'" in c.read("/jail/work/../../etc/passwd").error


def test_the_limits_keywords_of_the_previous_release_still_work(pyjail_bin, data_rootfs):
    with pytest.warns(DeprecationWarning, match=r"PyjailSandbox\(pids=\.\.\.\) is deprecated .* "
                                                r"use limits=pyjail\.Limits\(pids=\.\.\.\)"):
        sb = PyjailSandbox(pids=32)
    with sb:
        assert ["--pids", "32"] == [a for a in sb.session._args if a in ("--pids", "32")]
        assert sb.execute("echo hi").output == "hi\n"
