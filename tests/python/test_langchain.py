"""pyjail.langchain against the real langchain-core and langchain-experimental."""

import asyncio
import os
import re
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
    # LangChain's description, then the jail's facts.
    assert ours.description.startswith(theirs.description + " The code runs in an isolated")
    assert ours.sanitize_input is theirs.sanitize_input is True
    assert ours.args == theirs.args
    schema = ours.tool_call_schema.model_json_schema()
    assert schema.pop("description") == ours.description
    theirs_schema = theirs.tool_call_schema.model_json_schema()
    theirs_schema.pop("description")
    assert schema == theirs_schema
    ours_ast, theirs_ast = PythonAstREPLTool(), original.PythonAstREPLTool()
    assert ours_ast.name == theirs_ast.name == "python_repl_ast"
    assert ours_ast.description.startswith(theirs_ast.description + " The code runs in")
    assert ours_ast.args == theirs_ast.args
    assert PythonREPLTool(description="mine").description == "mine"
    for t in (ours, ours_ast):
        t.close()


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


def test_better_than_the_original():
    # traceback=True: the code's own traceback, better for a model than LangChain's repr.
    tool = PythonREPLTool(python_repl=PythonREPL(timeout=20, traceback=True))
    try:
        r = tool.invoke("import sys, os\nprint('out')\nprint('warn', file=sys.stderr)\n"
                        "os.write(1, b'raw\\n')\n1 / 0")
    finally:
        tool.close()
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
    assert "FileNotFoundError(2, 'No such file or directory')" in out and "s3cret" not in out
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
        assert t.invoke("sum(r['a'] for r in rows)") == 6          # the value, as LangChain's
        assert t.invoke("text = 'hello'\ntext.upper()") == "HELLO"
        assert t.invoke("print('side')\n2 + 2") == "side\n4"      # LangChain's loses 'side'
        assert t.invoke("z = 1") == ""
        assert t.invoke("print(z + 1)") == "2\n"
        out = t.invoke("undefined_name")
        assert out == "NameError: name 'undefined_name' is not defined"
        assert asyncio.run(t.ainvoke("len(rows)")) == 2
        theirs = original.PythonAstREPLTool(locals={"rows": [{"a": 1}, {"a": 5}]})
        for code in ("sum(r['a'] for r in rows)", "'abc'.upper()", "print(3)", "1 + 1",
                     "rows[7]", "{'k': [1, 2.5, None]}", "rows[0]['b']", "int('x')",
                     "(1, 'a')", "b'xy'", "len(rows) > 1"):
            assert t.invoke(code) == theirs.invoke(code), code
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


# ---------------------------------------------------------------- what the model sees

def test_output_is_cut_for_the_model_at_line_boundaries(tool):
    out = tool.invoke("for i in range(200000):\n    print('line', i)")
    assert 15000 < len(out) <= 16000
    lines = out.splitlines()
    assert lines[0] == "line 0" and lines[-1] == "line 199999"
    marker = [l for l in lines if l.startswith("[... ")]
    assert len(marker) == 1 and re.fullmatch(
        r"\[\.\.\. about \d+ characters \(more than \d+ lines\) left out \.\.\.\]", marker[0])
    # The session kept 1 MiB of it: the count adds what it left out.
    left_out = int(marker[0].split()[2])
    total = sum(len("line %d\n" % i) for i in range(200000))
    assert abs(len(out) - len(marker[0]) - 1 + left_out - total) < 100
    short = tool.invoke("for i in range(20000):\n    print('line', i)")
    short_marker = [l for l in short.splitlines() if l.startswith("[... ")][0]
    assert re.fullmatch(r"\[\.\.\. \d+ characters \(\d+ lines\) left out \.\.\.\]", short_marker)
    assert len(short) - len(short_marker) - 1 + int(short_marker.split()[1]) == sum(
        len("line %d\n" % i) for i in range(20000))
    # Every other line is whole.
    assert all(re.fullmatch(r"line \d+", l) for l in lines if l is not marker[0])
    # Configurable, and None gives everything.
    tool.python_repl.max_output_chars = 1000
    assert len(tool.invoke("print('x' * 5000)")) <= 1000
    tool.python_repl.max_output_chars = None
    assert tool.invoke("print('x' * 50000)") == "x" * 50000 + "\n"


def test_the_ast_tool_cuts_long_values_too():
    t = PythonAstREPLTool(python_repl=PythonREPL(max_output_chars=2000))
    try:
        out = t.invoke("list(range(100000))")
        assert isinstance(out, str) and len(out) <= 2000 and "left out" in out
        assert t.invoke("'short'") == "short"
    finally:
        t.close()


def test_descriptions_and_errors_state_the_jails_facts(tool, data_rootfs):
    # The data rootfs is installed: the adapters run on it by default.
    assert tool.python_repl.session._args[tool.python_repl.session._args.index(
        "--rootfs") + 1] == "data"
    desc = tool.description
    assert "no network in this sandbox" in desc and "/work" in desc
    assert "rootfs 'data'" in desc
    for package in ("numpy", "pandas", "matplotlib"):
        assert package in desc, package
    assert tool.invoke("import pandas, os\nprint(os.getcwd())") == "/work\n"
    for code in ("import socket\nsocket.getaddrinfo('pypi.org', 443)",
                 "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=5)",
                 "import requests\nrequests.get('https://example.com', timeout=5)"):
        out = tool.invoke(code)
        assert out.endswith("[pyjail] There is no network in this sandbox: this code cannot "
                            "reach the internet or any other host. Work with the files in "
                            "/work and the data you were given."), (code, out)
    assert "no network" not in tool.invoke("1 / 0")
    out = tool.invoke("import torch")
    assert out.startswith("ModuleNotFoundError(\"No module named 'torch'\")\n[pyjail] There is "
                          "no module 'torch' in this sandbox, and nothing can be installed here "
                          "(no network, no pip); its packages are: ")
    assert "pandas" in out.splitlines()[1]


def test_the_minimal_rootfs_says_it_has_no_packages(pyjail_bin):
    t = PythonREPLTool(python_repl=PythonREPL(rootfs=_default_rootfs_path(pyjail_bin)))
    try:
        assert "standard library only (no third-party packages)" in t.description
        assert "no network" in t.description
    finally:
        t.close()


def _default_rootfs_path(pyjail_bin):
    import subprocess
    out = subprocess.run([pyjail_bin, "rootfs", "info", "default"], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=60).stdout
    return [l.split(None, 1)[1] for l in out.splitlines() if l.startswith("rootfs ")][0]


# ---------------------------------------------------------------- values in, values out

class NotInTheJail:
    """Pickled by reference to this test module, which the jail cannot import."""


def test_python_repl_globals_and_locals_go_in_and_come_back():
    with PythonREPL(timeout=20, _globals={"base": 10}, _locals={"rows": [1, 2, 3]}) as repl:
        assert repl.run("print(base + sum(rows))") == "16\n"
        repl.run("import math\ntotal = base * 2\nnames = {'a': (1, 'x')}\nf = lambda: 1")
        # Readable after a run, as LangChain's: the plain-data variables.
        assert repl.locals == {"base": 10, "rows": [1, 2, 3], "total": 20,
                               "names": {"a": (1, "x")}}
        assert repl.globals == repl.locals
        # The same answers as LangChain's own PythonREPL.
        theirs = OriginalREPL(_globals={"base": 10})
        for code in ("print(base)", "foo", "import nosuchmodule", "{}['k']", "x = = 1",
                     "print('before')\nraise ValueError('bad', 2)"):
            want = theirs.run(code)
            got = repl.run(code)
            if code.startswith("print('before')"):
                assert got == "before\n" + want      # ours keeps what was printed first
            elif code == "import nosuchmodule":      # and says what the jail has
                assert got.startswith(want + "\n[pyjail] There is no module 'nosuchmodule' "
                                      "in this sandbox, and nothing can be installed here")
            elif code == "x = = 1":                  # the cell's name for LangChain's
                assert re.sub(r"<cell-\d+>", "<string>", got) == want
            else:
                assert got == want, code


def test_values_that_cannot_go_in_are_an_error_not_a_silent_drop():
    from pyjail._agents import ValueNotSentError
    with PythonREPL(_locals={"thing": NotInTheJail()}) as repl:
        with pytest.raises(ValueNotSentError, match=r"_globals/_locals not put into the "
                                                    r"jail: thing: .*test_langchain"):
            repl.run("thing")
    t = PythonAstREPLTool(locals={"ok": 1, "thing": NotInTheJail()})
    try:
        with pytest.raises(ValueNotSentError, match="thing"):
            t.invoke("ok")
    finally:
        t.close()


def test_a_dataframe_goes_in_as_df(data_rootfs):
    pd = import_or_skip("pandas")
    df = pd.DataFrame({"city": ["Oslo", "Rome", "Oslo"], "rain_mm": [12.5, 3.0, 7.5]})
    t = PythonAstREPLTool(locals={"df": df})
    try:
        assert t.invoke("df.groupby('city').rain_mm.sum().to_dict()") == {"Oslo": 20.0,
                                                                          "Rome": 3.0}
        assert t.invoke("df.shape") == (3, 2)
        head = t.invoke("df.head()")       # a DataFrame, as LangChain's own tool gives it
        pd.testing.assert_frame_equal(head, df)
        assert t.invoke("df.nosuchcolumn") == \
            "AttributeError: 'DataFrame' object has no attribute 'nosuchcolumn'"
    finally:
        t.close()


def test_the_pandas_dataframe_agent_runs_its_code_in_the_jail(data_rootfs):
    pd = import_or_skip("pandas")
    import_or_skip("langchain_classic")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from pyjail.langchain import create_pandas_dataframe_agent

    df = pd.DataFrame({"city": ["Oslo", "Rome", "Oslo", "Lima"], "rain_mm": [12.5, 3.0, 7.5, 0.5]})
    responses = [
        "Thought: sum the rain per city.\nAction: python_repl_ast\n"
        "Action Input: df.groupby('city').rain_mm.sum().idxmax()",
        "Thought: where does this run?\nAction: python_repl_ast\n"
        "Action Input: import socket, os\nprint(socket.gethostname(), os.getcwd())",
        "Thought: try the network.\nAction: python_repl_ast\n"
        "Action Input: import urllib.request\nurllib.request.urlopen('http://example.com')",
        "Thought: a mistake.\nAction: python_repl_ast\nAction Input: df['nope']",
        "Thought: I now know the final answer.\nFinal Answer: Oslo",
    ]
    agent = create_pandas_dataframe_agent(FakeListChatModel(responses=responses), df,
                                          return_intermediate_steps=True, max_iterations=8)
    try:
        result = agent.invoke({"input": "Which city had the most rain?"})
        assert result["output"] == "Oslo"
        observations = [obs for _action, obs in result["intermediate_steps"]]
        assert observations[0] == "Oslo"
        hostname, cwd = observations[1].split()
        assert cwd == "/work" and hostname != os.uname().nodename
        assert "no network in this sandbox" in observations[2]
        assert observations[3].startswith("KeyError: ")
        assert len(observations) == 4
        # The host's DataFrame is untouched, and LangChain's own tool was never used.
        assert list(df.columns) == ["city", "rain_mm"]
        assert type(agent.tools[0]) is PythonAstREPLTool
    finally:
        agent.tools[0].close()


def test_the_pandas_agent_on_a_rootfs_without_pandas_fails_when_made(pyjail_bin):
    pd = import_or_skip("pandas")
    import_or_skip("langchain_classic")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from pyjail._agents import ValueNotSentError
    from pyjail.langchain import create_pandas_dataframe_agent

    with pytest.raises(ValueNotSentError, match="df: .*pandas"):
        create_pandas_dataframe_agent(
            FakeListChatModel(responses=["x"]), pd.DataFrame({"a": [1]}),
            python_repl=PythonREPL(rootfs=_default_rootfs_path(pyjail_bin)))


def test_values_go_in_again_after_a_restart_and_after_close():
    t = PythonAstREPLTool(locals={"rows": [4, 5]},
                          python_repl=PythonREPL(_globals={"base": 100}))
    try:
        assert t.invoke("base + sum(rows)") == 109
        t.python_repl.session.restart()             # a fresh interpreter: sent again
        assert t.invoke("base + sum(rows)") == 109
        for _ in range(3):                          # a new session each time: sent again
            t.close()
            assert t.invoke("base + sum(rows)") == 109
    finally:
        t.close()
