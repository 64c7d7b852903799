"""pyjail.smolagents: a CodeAgent driven by a scripted model, its code in a jail."""


import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("smolagents")

from smolagents import ActionStep, ChatMessage, CodeAgent, FinalAnswerTool, Model, tool
from smolagents.local_python_executor import CodeOutput, PythonExecutor

from pyjail.smolagents import PyjailExecutionError, PyjailExecutor

HOST_CALLS = []


@tool
def lookup_price(item: str) -> float:
    """Looks up the price of an item (runs on the host, outside the jail).

    Args:
        item: the item's name
    """
    HOST_CALLS.append(item)
    return {"apple": 1.25, "pear": 2.0}[item]


class ScriptedModel(Model):
    """Plays back one code action per step, like a model would write them."""

    def __init__(self, actions):
        super().__init__(model_id="scripted")
        self.actions = list(actions)
        self.seen = []

    def generate(self, messages, stop_sequences=None, response_format=None,
                 tools_to_call_from=None, **kwargs):
        self.seen.append(messages)
        code = self.actions.pop(0)
        return ChatMessage(role="assistant", content="Thought: next step.\n<code>\n%s\n</code>" % code)


def steps_of(agent):
    return [s for s in agent.memory.steps if isinstance(s, ActionStep)]


def test_is_a_python_executor():
    with PyjailExecutor() as ex:
        assert isinstance(ex, PythonExecutor)
        out = ex("x = 2\nx * 21")
        assert isinstance(out, CodeOutput) and out.output == 42 and not out.is_final_answer
        with pytest.raises(PyjailExecutionError, match="ZeroDivisionError"):
            ex("1 / 0")


def test_code_agent_runs_several_steps_to_a_final_answer(tmp_path, host_port):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    actions = [
        # 1: a host tool, and state for later steps
        "apples = lookup_price('apple')\nprint('apple costs', apples)",
        # 2: the state is there
        "total = apples * 4 + lookup_price(item='pear')\nprint('total', total)",
        # 3: a host file
        "print(open(%r).read())" % str(secret),
        # 4: the network
        "import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=3)" % host_port,
        # 5: a step that never ends
        "import time\nwhile True:\n    total += 0\n    time.sleep(0.01)",
        # 6: a fork bomb
        "import os\nwhile True:\n    os.fork()",
        # 7: a memory bomb
        "hog = []\nwhile True:\n    hog.append(bytearray(10 ** 8))",
        # 8: the state survived all of it; extra args are there
        "hog = None\nprint('still', total, bonus)",
        "final_answer({'total': total + bonus, 'items': ['apple', 'pear']})",
    ]
    model = ScriptedModel(actions)
    HOST_CALLS.clear()
    with PyjailExecutor(timeout=2) as executor:
        agent = CodeAgent(tools=[lookup_price], model=model, executor=executor,
                          max_steps=12, verbosity_level=0)
        answer = agent.run("What do 4 apples and a pear cost, plus the bonus?",
                           additional_args={"bonus": 10})
    assert answer == {"total": 17.0, "items": ["apple", "pear"]}
    assert HOST_CALLS == ["apple", "pear"]
    steps = steps_of(agent)
    assert len(steps) == 9
    assert "apple costs 1.25" in steps[0].observations
    assert "total 7.0" in steps[1].observations
    assert "FileNotFoundError" in str(steps[2].error) and "s3cret" not in str(steps[2].error)
    assert "PermissionError" in str(steps[3].error)
    assert "timed out after 2 s" in str(steps[4].error)
    assert "BlockingIOError" in str(steps[5].error)
    # The bomb ends its cell: at the memory limit, or (on a loaded machine, zero-filling
    # 100 MB at a time) at the cell's timeout first.
    assert any(word in str(steps[6].error) for word in ("MemoryError", "restarted", "timed out"))
    assert "still 7.0 10" in steps[7].observations
    assert steps[8].is_final_answer


def test_final_answer_tool_result_reaches_the_agent_unchanged():
    class Answer:
        pass

    marker = Answer()

    class CustomFinal(FinalAnswerTool):
        def forward(self, answer):
            return (marker, answer)

    model = ScriptedModel(["final_answer([1, 2, 3])"])
    with PyjailExecutor() as executor:
        agent = CodeAgent(tools=[], model=model, executor=executor, verbosity_level=0)
        agent.tools["final_answer"] = CustomFinal()
        out = agent.run("go")
    assert out == (marker, [1, 2, 3])


def test_a_pandas_step_on_the_data_rootfs(data_rootfs):
    actions = [
        "import pandas as pd\n"
        "df = pd.DataFrame({'city': ['Oslo', 'Rome', 'Oslo'], 'rain_mm': [12.5, 3.0, 7.5]})\n"
        "print(df.groupby('city').rain_mm.mean().to_dict())",
        "final_answer(float(df.rain_mm.sum()))",
    ]
    model = ScriptedModel(actions)
    with PyjailExecutor(rootfs=data_rootfs, timeout=60) as executor:
        agent = CodeAgent(tools=[], model=model, executor=executor, verbosity_level=0)
        answer = agent.run("How much rain fell in all?")
    assert answer == 23.0
    steps = steps_of(agent)
    assert "{'Oslo': 10.0, 'Rome': 3.0}" in steps[0].observations


def test_shared_session_stays_open():
    import pyjail
    with pyjail.Session() as s:
        ex = PyjailExecutor(session=s)
        ex("kept = 'here'")
        ex.cleanup()
        assert not s.closed and s.run("kept").value == "'here'"


def test_rootfs_by_name_or_path(pyjail_bin):
    import subprocess
    import pyjail
    with pytest.raises(pyjail.JailError, match="no rootfs named 'no-such-rootfs'"):
        PyjailExecutor(rootfs="no-such-rootfs")
    out = subprocess.run([pyjail_bin, "rootfs", "info", "default"], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=60).stdout
    path = [l.split(None, 1)[1] for l in out.splitlines() if l.startswith("rootfs ")][0]
    executor = PyjailExecutor(rootfs=path)
    try:
        assert "3" in executor("import sys\nprint(sys.version_info[0])").logs
    finally:
        executor.cleanup()
