"""pyjail.langchain_tools: a session's tools for LangChain v1's create_agent."""

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("langchain_core")
import_or_skip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402

from pyjail.langchain import REPL_DESCRIPTION  # noqa: E402
from pyjail.langchain_tools import SHELL_DESCRIPTION, session_tools  # noqa: E402


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def call(name, args, i):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": "call%d" % i}])


@pytest.fixture
def tools(pyjail_bin, data_rootfs):
    ts = session_tools(timeout=5, max_output_chars=2000)
    yield ts
    ts[0].close()


def test_create_agent_runs_python_and_shell_in_one_jail(tools):
    python, shell = tools
    assert python.description.startswith(REPL_DESCRIPTION) and "no network" in python.description
    assert shell.description.startswith(SHELL_DESCRIPTION) and "no network" in shell.description
    model = ScriptedModel(messages=iter([
        call("Python_REPL", {"query": "n = 2 ** 20\nopen('n.txt', 'w').write(str(n))"}, 1),
        call("shell", {"command": "cat n.txt; echo; ls /proc | grep -c '^[0-9]'"}, 2),
        call("shell", {"command": "cat /no/such/file"}, 3),
        call("Python_REPL", {"query": "print(n + 1)"}, 4),
        call("Python_REPL", {"query": "1 / 0"}, 5),
        AIMessage("n is 1048576"),
    ]))
    agent = create_agent(model, tools=tools)
    out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    answers = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers[0] == ""
    first, procs, status = answers[1].split("\n")
    assert first == "1048576" and int(procs) < 20 and status == "[exit status 0]"
    assert answers[2].endswith("[exit status 1]") and "No such file" in answers[2]
    assert answers[3] == "1048577\n"
    assert "ZeroDivisionError" in answers[4] and "line 1" in answers[4]   # the traceback
    assert out["messages"][-1].content == "n is 1048576"


def test_shell_timeout_output_budget_and_no_network(tools):
    python, shell = tools
    shell.invoke("echo before > before.txt")
    r = shell.invoke("sleep 300")
    assert r.startswith("Execution timed out after 5 s") and "stopped" in r
    assert shell.invoke("cat before.txt") == "before\n[exit status 0]"
    under = shell.invoke("seq 1 100")
    assert "omitted" not in under and under.endswith("100\n[exit status 0]")
    over = shell.invoke("seq 1 100000")
    assert len(over) <= 2200 and "100000" in over and "[exit status 0]" in over
    net = shell.invoke("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\"")
    assert "[exit status 1]" in net and "no network" in net


def test_async_shell(tools):
    import asyncio
    assert asyncio.run(tools[1].ainvoke("echo hi")) == "hi\n[exit status 0]"


def test_the_readme_example(pyjail_bin, data_rootfs):
    from test_readme import find, run_example
    r = run_example(find("pyjail.langchain_tools"), pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "20 n.txt\n[exit status 0]\n"
