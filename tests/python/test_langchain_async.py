"""pyjail.langchain's tools driven by asyncio (ainvoke): natively async through
pyjail.AsyncSession, against the real langchain-core."""

import asyncio
import time

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("langchain_core")

from pyjail.langchain import PythonAstREPLTool, PythonREPL, PythonREPLTool

SLEEP = "import time\ntime.sleep(1)\nprint('slept')"


def test_four_tools_run_at_once_and_one_tool_takes_turns():
    tools = [PythonREPLTool(python_repl=PythonREPL(timeout=60)) for _ in range(4)]

    async def main():
        # Started first (each tool's session starts on its first call).
        assert await asyncio.gather(*(t.ainvoke("print(1)") for t in tools)) == ["1\n"] * 4
        t0 = time.monotonic()
        assert await tools[0].ainvoke(SLEEP) == "slept\n"
        one = time.monotonic() - t0
        t0 = time.monotonic()
        outs = await asyncio.gather(*(t.ainvoke(SLEEP) for t in tools))
        four_tools = time.monotonic() - t0
        assert outs == ["slept\n"] * 4
        t0 = time.monotonic()
        outs = await asyncio.gather(*(tools[0].ainvoke(SLEEP) for _ in range(4)))
        one_tool = time.monotonic() - t0
        assert outs == ["slept\n"] * 4
        return one, four_tools, one_tool

    try:
        one, four_tools, one_tool = asyncio.run(main())
    finally:
        for t in tools:
            t.close()
    print("one call %.2f s; four calls on four tools %.2f s (%.2fx); four calls on one tool "
          "%.2f s" % (one, four_tools, four_tools / one, one_tool))
    assert four_tools < 2 * one
    # One tool has one interpreter: its calls take turns (each sleeps 1 s).
    assert one_tool >= 4.0


def test_cancelling_ainvoke_interrupts_the_code():
    tool = PythonREPLTool(python_repl=PythonREPL(timeout=None))

    async def main():
        assert await tool.ainvoke("x = 1") == ""
        task = asyncio.ensure_future(tool.ainvoke("import time\ntime.sleep(600)"))
        await asyncio.sleep(2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Without the interrupt this call would wait for the 600 s sleep.
        return await asyncio.wait_for(tool.ainvoke("print(x)"), 60)

    try:
        assert asyncio.run(main()) == "1\n"
    finally:
        tool.close()


def test_ainvoke_shares_the_session_of_invoke():
    tool = PythonAstREPLTool(locals={"rows": [1, 2, 3]})
    try:
        assert tool.invoke("z = len(rows)") == ""
        assert asyncio.run(tool.ainvoke("z * 2")) == 6          # LangChain's: the value
        assert asyncio.run(tool.ainvoke("print('p')\nz")) == "p\n3"
        assert asyncio.run(tool.ainvoke("rows[5]")) == "IndexError: list index out of range"
        assert tool.invoke("z") == 3
    finally:
        tool.close()
