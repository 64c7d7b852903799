"""pyjail.langchain against the real langchain-core and langchain-experimental."""

import asyncio
import os
import warnings

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("langchain_core")
import_or_skip("langchain_experimental")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langchain_experimental.tools.python import tool as original
    from langchain_experimental.utilities.python import PythonREPL as OriginalREPL

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool

from pyjail.langchain import PythonAstREPLTool, PythonREPL, PythonREPLTool, sanitize_input


@pytest.fixture
def tool():
    t = PythonREPLTool(python_repl=PythonREPL(timeout=20))
    yield t
    t.close()


def test_same_contract_as_the_original():
    ours, theirs = PythonREPLTool(), original.PythonREPLTool()
    assert isinstance(ours, BaseTool)
    assert ours.name == theirs.name == "Python_REPL"
    assert ours.description == theirs.description
    assert ours.sanitize_input is theirs.sanitize_input is True
    assert ours.args == theirs.args
    assert ours.tool_call_schema.model_json_schema() == theirs.tool_call_schema.model_json_schema()
    ours_ast, theirs_ast = PythonAstREPLTool(), original.PythonAstREPLTool()
    assert ours_ast.name == theirs_ast.name == "python_repl_ast"
    assert ours_ast.description == theirs_ast.description
    assert ours_ast.args == theirs_ast.args


SANITIZE_CASES = [
    "print(1)", "  print(1)  ", "`print(1)`", "```python\nprint(1)\n```", "```Python\nx=1\n```",
    "```\nprint(1)\n```", "python print(1)", "PYTHON\nprint(2)", "\n\n  ```py\nx```\n",
    "python", "``` python \n a = 1 \n ``` \n", "print('python')", "x = '`'",
    "pythonic = 1", "python_version = 3",
]


def test_sanitize_input_matches_the_original_but_keeps_identifiers():
    for case in SANITIZE_CASES:
        want = original.sanitize_input(case)
        if case.lower().lstrip("` \n").startswith("python") and \
                case.lower().lstrip("` \n")[6:7].isidentifier():
            # The original strips "python" off "python_version = 3"; we do not.
            assert sanitize_input(case) == case.strip(), case
            assert want != case.strip()
        else:
            assert sanitize_input(case) == want, case
            assert OriginalREPL.sanitize_input(case) == want


def test_invoke_string_dict_and_tool_call(tool):
    assert tool.invoke("```python\nx = 6 * 7\nprint(x)\n```") == "42\n"
    assert tool.invoke({"query": "print(x + 1)"}) == "43\n"    # state is kept
    msg = tool.invoke({"type": "tool_call", "name": "Python_REPL", "id": "c1",
                       "args": {"query": "print(x * 2)"}})
    assert isinstance(msg, ToolMessage) and msg.content == "84\n" and msg.tool_call_id == "c1"
    assert tool.invoke("y = 1") == ""                            # like the original
    assert asyncio.run(tool.ainvoke("print(x - 2)")) == "40\n"


def test_same_output_as_the_original_for_plain_code(tool):
    theirs = original.PythonREPLTool()
    for code in ("print(1)", "for i in range(3): print(i)", "x = 5", "print('a', 'b', sep='-')"):
        assert tool.invoke(code) == theirs.invoke(code), code


def test_better_than_the_original(tool):
    r = tool.invoke("import sys, os\nprint('out')\nprint('warn', file=sys.stderr)\n"
                    "os.write(1, b'raw\\n')\n1 / 0")
    assert r.startswith("out\nraw\nwarn\n")
    assert "Traceback (most recent call last)" in r and "ZeroDivisionError" in r
    assert 'File "<cell-1>", line 5' in r
    assert OriginalREPL().run("1 / 0") == "ZeroDivisionError('division by zero')"


def test_timeout_keeps_state(tool):
    tool.invoke("counter = 10")
    out = tool.python_repl.run("import time\nwhile True:\n    counter += 1\n    time.sleep(0.01)",
                               timeout=1)
    assert out.startswith("Execution timed out after 1 s")
    assert "kept its variables" in out
    assert int(tool.invoke("print(counter)")) > 20


def test_host_files_and_network_out_of_reach(tool, tmp_path, host_port):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    out = tool.invoke("print(open(%r).read())" % str(secret))
    assert "FileNotFoundError" in out and "s3cret" not in out
    out = tool.invoke("print(open('/etc/passwd').read())")
    assert "jail:x:1000" in out and os.uname().nodename not in out.split("jail")[0]
    out = tool.invoke("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=3)"
                      % host_port)
    assert "PermissionError" in out


def test_bombs_end_the_call_not_the_host(tool):
    tool.invoke("keep = 'yes'")
    out = tool.invoke("import os\nwhile True:\n    os.fork()")
    assert "BlockingIOError" in out
    out = tool.python_repl.run("x = []\nwhile True:\n    x.append(bytearray(10 ** 7))",
                               timeout=30)
    assert "MemoryError" in out or "restarted" in out
    tool.invoke("x = None")
    assert tool.invoke("print(keep)") == "yes\n"


def test_react_agent_loop_with_the_fake_chat_model(tool):
    classic = import_or_skip("langchain_classic")
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import PromptTemplate

    prompt = PromptTemplate.from_template(
        "Answer with tools.\n{tools}\nTool names: {tool_names}\n"
        "Question: {input}\n{agent_scratchpad}")
    responses = [
        "I will compute.\nAction: Python_REPL\nAction Input: ```python\nvalues = [3, 4]\n"
        "print(sum(values))\n```",
        "The variables stay.\nAction: Python_REPL\nAction Input: print(max(values) * 10)",
        "Try the host.\nAction: Python_REPL\nAction Input: import os; print(os.listdir('/root'))",
        "Spin.\nAction: Python_REPL\nAction Input: while True: pass",
        "Still there?\nAction: Python_REPL\nAction Input: print(values)",
        "I now know the final answer.\nFinal Answer: 40",
    ]
    llm = FakeListChatModel(responses=responses)
    tool.python_repl.timeout = 1
    agent = create_react_agent(llm, [tool], prompt)
    executor = AgentExecutor(agent=agent, tools=[tool], return_intermediate_steps=True,
                             max_iterations=10)
    result = executor.invoke({"input": "What is max(values) * 10?"})
    assert result["output"] == "40"
    observations = [obs for _action, obs in result["intermediate_steps"]]
    assert observations[0] == "7\n"
    assert observations[1] == "40\n"
    assert "PermissionError" in observations[2] or "FileNotFoundError" in observations[2]
    assert observations[3].startswith("Execution timed out")
    assert observations[4] == "[3, 4]\n"


def test_tool_calling_loop_with_the_fake_chat_model(tool):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    def call(code, i):
        return AIMessage("", tool_calls=[{"name": "Python_REPL", "args": {"query": code},
                                          "id": "call%d" % i}])

    model = GenericFakeChatModel(messages=iter([
        call("import math\nr = math.factorial(10)\nprint(r)", 1),
        call("print(r // 7)", 2),
        AIMessage("The answer is 518400."),
    ]))
    tools = {tool.name: tool}
    history = [HumanMessage("What is 10! / 7?")]
    while True:
        ai = model.invoke(history)
        history.append(ai)
        if not ai.tool_calls:
            break
        for tc in ai.tool_calls:
            history.append(tools[tc["name"]].invoke(tc))
    contents = [m.content for m in history if isinstance(m, ToolMessage)]
    assert contents == ["3628800\n", "518400\n"]
    assert history[-1].content == "The answer is 518400."


def test_ast_tool_returns_the_last_value():
    t = PythonAstREPLTool(locals={"rows": [{"a": 1}, {"a": 5}]})
    try:
        assert t.invoke("sum(r['a'] for r in rows)") == "6"
        assert t.invoke("text = 'hello'\ntext.upper()") == "HELLO"
        assert t.invoke("print('side')\n2 + 2") == "side\n4"
        assert t.invoke("z = 1") == ""
        assert t.invoke("print(z + 1)") == "2\n"
        out = t.invoke("undefined_name")
        assert "NameError" in out
        assert asyncio.run(t.ainvoke("len(rows)")) == "2"
        theirs = original.PythonAstREPLTool(locals={"rows": [{"a": 1}, {"a": 5}]})
        for code in ("sum(r['a'] for r in rows)", "'abc'.upper()", "print(3)"):
            assert t.invoke(code) == str(theirs.invoke(code)), code
    finally:
        t.close()


def test_repl_object_standalone():
    with PythonREPL(timeout=5) as repl:
        assert repl.run("a = 2\nprint(a ** 10)") == "1024\n"
        assert repl.run("print(a)") == "2\n"
        assert repl.run("import time; time.sleep(30)", timeout=0.5).startswith(
            "Execution timed out")
        assert repl.run("print(a)") == "2\n"


def test_rootfs_by_name_or_path(pyjail_bin):
    import subprocess
    import pyjail
    repl = PythonREPL(rootfs="no-such-rootfs")
    with pytest.raises(pyjail.JailError, match="no rootfs named 'no-such-rootfs'"):
        repl.run("print(1)")
    out = subprocess.run([pyjail_bin, "rootfs", "info", "default"], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=60).stdout
    path = [l.split(None, 1)[1] for l in out.splitlines() if l.startswith("rootfs ")][0]
    tool = PythonREPLTool(python_repl=PythonREPL(rootfs=path))
    try:
        assert tool.invoke("import sys\nprint(sys.version_info[0])") == "3\n"
        assert tool.python_repl.session._args[tool.python_repl.session._args.index(
            "--rootfs") + 1] == path
    finally:
        tool.close()


PANDAS_CELL = """\
import pandas as pd
sales = pd.DataFrame({"item": ["apple", "pear", "apple"], "qty": [3, 1, 2],
                      "price": [1.25, 2.0, 1.25]})
sales["total"] = sales.qty * sales.price
by_item = sales.groupby("item").total.sum()
print(by_item.to_dict())
"""


def test_a_pandas_cell_on_the_data_rootfs(data_rootfs):
    tool = PythonREPLTool(python_repl=PythonREPL(rootfs=data_rootfs, timeout=60))
    try:
        assert tool.run(PANDAS_CELL) == "{'apple': 6.25, 'pear': 2.0}\n"
        # The DataFrame is kept for the next call, as in LangChain's own REPL.
        assert tool.run("print(sales.qty.sum(), round(by_item.mean(), 3))") == "6 4.125\n"
    finally:
        tool.close()
