"""pyjail.smolagents: a CodeAgent driven by a scripted model, its code in a jail."""

import dataclasses
import os
import subprocess

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("smolagents")

from smolagents import ActionStep, ChatMessage, CodeAgent, FinalAnswerTool, Model, tool
from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.utils import AgentError, AgentExecutionError

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
        # smolagents' own error type, as its Docker, E2B and Modal executors raise.
        with pytest.raises(AgentExecutionError, match="NameError"):
            ex("undefined_name")
        assert [f.name for f in dataclasses.fields(CodeOutput)] == [
            "output", "logs", "is_final_answer"]


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


def _default_rootfs_path(pyjail_bin):
    out = subprocess.run([pyjail_bin, "rootfs", "info", "default"], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=60).stdout
    return [l.split(None, 1)[1] for l in out.splitlines() if l.startswith("rootfs ")][0]


def test_authorized_imports_are_checked_when_the_executor_is_made(pyjail_bin, data_rootfs):
    from pyjail._agents import MissingModuleError
    minimal = _default_rootfs_path(pyjail_bin)
    with pytest.raises(MissingModuleError, match=r"rootfs .* has no package 'pandas', "
                                                 r"'sklearn' \(named in additional_imports"):
        PyjailExecutor(["json", "pandas", "sklearn.*"], rootfs=minimal)
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        PyjailExecutor(additional_authorized_imports=["no_such_module"])
    # The data rootfs, the default when installed, has them; "*" is not checked.
    with PyjailExecutor(["pandas", "sklearn.*", "numpy.linalg", "*"]) as ex:
        assert ex.rootfs == "data"
        assert ex("import sklearn, pandas\n1").output == 1
        facts = ex.describe()
        assert "no network in this sandbox" in facts and "pandas" in facts and "/work" in facts


def test_additional_args_go_in_as_values_and_unsendable_ones_are_an_error():
    import datetime
    model = ScriptedModel(["import datetime\n"
                           "final_answer((when + datetime.timedelta(days=1)).isoformat())"])
    with PyjailExecutor() as executor:
        agent = CodeAgent(tools=[], model=model, executor=executor, verbosity_level=0,
                          additional_authorized_imports=["datetime"])
        assert agent.run("go", additional_args={"when": datetime.date(2026, 1, 31)}) == \
            "2026-02-01"

    class Local:
        pass

    with PyjailExecutor() as executor:
        agent = CodeAgent(tools=[], model=ScriptedModel(["final_answer(1)"]), executor=executor,
                          verbosity_level=0)
        with pytest.raises(ValueError, match="additional_args not put into the jail: thing"):
            agent.run("go", additional_args={"thing": Local()})


def test_logs_are_cut_for_the_model():
    with PyjailExecutor() as ex:
        out = ex("for i in range(100000):\n    print('row', i)")
        assert len(out.logs) <= 16000 and out.logs.startswith("row 0\n")
        assert out.logs.endswith("row 99999\n")
        assert sum(1 for l in out.logs.splitlines() if l.endswith("left out ...]")) == 1
    with PyjailExecutor(max_print_outputs_length=500) as ex:
        assert len(ex("print('y' * 5000)").logs) <= 500


def test_a_network_error_says_there_is_no_network():
    with PyjailExecutor() as ex:
        with pytest.raises(AgentError) as info:
            ex("import socket\nsocket.getaddrinfo('huggingface.co', 443)")
        assert "There is no network in this sandbox" in str(info.value)
        with pytest.raises(AgentError) as info:
            ex("import torch")
        assert "There is no module 'torch' in this sandbox, and nothing can be installed " \
               "here" in str(info.value)


def test_an_image_final_answer_comes_back_as_an_image(data_rootfs):
    PIL = pytest.importorskip("PIL.Image")
    from smolagents.agent_types import AgentImage
    actions = ["from PIL import Image\nimg = Image.new('RGB', (40, 30), (200, 10, 20))\n"
               "img.putpixel((3, 4), (1, 2, 3))\nfinal_answer(img)"]
    with PyjailExecutor(rootfs=data_rootfs) as executor:
        agent = CodeAgent(tools=[], model=ScriptedModel(actions), executor=executor,
                          verbosity_level=0, additional_authorized_imports=["PIL"])
        answer = agent.run("Draw a red box.")
    # An AgentImage, as smolagents makes of a PIL image final answer from its own executors.
    assert isinstance(answer, PIL.Image) and isinstance(answer, AgentImage)
    raw = answer.to_raw()
    assert isinstance(raw, PIL.Image) and raw.size == (40, 30)
    assert raw.getpixel((0, 0))[:3] == (200, 10, 20) and raw.getpixel((3, 4))[:3] == (1, 2, 3)
    # A huge image is refused on the host, before it is decoded.
    with PyjailExecutor(rootfs=data_rootfs, timeout=120) as executor:
        agent = CodeAgent(tools=[], model=ScriptedModel([
            "from PIL import Image\nfinal_answer(Image.new('1', (10000, 5000)))",
            "final_answer('gave up')"]), executor=executor, verbosity_level=0)
        assert agent.run("Draw a big one.") == "gave up"
        assert "more than the 16777216 a final answer may carry" in str(steps_of(agent)[0].error)


# A PNG made in the jail without PIL: zeros compress about 1000 to 1.
_MAKE_PNG = """
import struct, zlib
def png(w, h):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = zlib.compress(b"".join(b"\\0" + bytes(4 * w) for _ in range(h)), 9)
    return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"zTXt", b"note\\0\\0" + zlib.compress(bytes(1 << 20), 9))
            + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
def tagged(w, h):  # what the jail's final_answer sends for a PIL image
    return {"__pyjail_image__": "image/png", "data": png(w, h)}
def answer_many(image, times):
    refused = []
    for _ in range(times):
        try:
            final_answer(image)
        except ValueError as e:
            refused.append(str(e))
        except BaseException:
            pass   # what ends the cell, caught to call again
    return refused
"""


class KeepingFinalAnswer(FinalAnswerTool):
    """The final answer tool, keeping what it is given (as an agent's memory would)."""

    def __init__(self):
        super().__init__()
        self.given = []

    def forward(self, answer):
        self.given.append(answer)
        return answer


def test_one_cell_cannot_make_the_host_hold_many_decoded_images(monkeypatch):
    PIL = pytest.importorskip("PIL.Image")
    from PIL import PngImagePlugin
    per_cell, pixels_per_cell = 8, 4096 * 4096  # MAX_IMAGES_PER_CELL, MAX_IMAGE_PIXELS
    decoded = []
    real_load = PngImagePlugin.PngImageFile.load

    def counting_load(image):
        if image.tile:  # pixels not decoded yet: this call decodes them
            decoded.append(image.size)
        return real_load(image)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", counting_load)
    tool = KeepingFinalAnswer()
    with PyjailExecutor(timeout=120) as ex:
        ex.send_tools({"final_answer": tool})
        # 100 answers of a 512x512 image: only the first 8 reach the host.
        out = ex(_MAKE_PNG + "refused = answer_many(tagged(512, 512), 100)\n"
                 "print(len(refused), *refused[:1])\nfinal_answer('done')")
        assert out.is_final_answer and out.output == "done"
        assert out.logs == ("%d the final answers of one code action may carry at most %d images\n"
                            % (100 - per_cell, per_cell))
        images = tool.given[:-1]
        assert len(images) == per_cell
        assert all(isinstance(i, PIL.Image) and i.size == (512, 512) for i in images)
        # None decoded: the host holds the compressed PNGs (the text chunk left out).
        assert decoded == []
        assert all("note" not in i.info for i in images)
        # Decoded when the caller asks, once.
        assert images[0].getpixel((5, 5)) == (0, 0, 0, 0)
        assert images[0].getpixel((6, 6)) == (0, 0, 0, 0)
        assert decoded == [(512, 512)]

        # The pixels in all, too: four 2048x2048 images fill a cell's share.
        tool.given.clear()
        out = ex(_MAKE_PNG + "refused = answer_many(tagged(2048, 2048), 5)\n"
                 "print(len(refused), *refused[:1])\nfinal_answer('done')")
        assert len(tool.given) - 1 == pixels_per_cell // (2048 * 2048) == 4
        assert out.logs.startswith("1 the image is 2048x2048 pixels, and with the 16777216 this "
                                   "code action's final answers carry already, more than the "
                                   "16777216 they may carry in all")
        # The next code action has the whole share again.
        tool.given.clear()
        out = ex(_MAKE_PNG + "final_answer(tagged(2048, 2048))")
        assert out.is_final_answer and out.output.size == (2048, 2048)
        assert len(decoded) == 1
