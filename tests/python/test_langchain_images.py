"""LangChain tools return the images the code showed the LangChain way: with
response_format="content_and_artifact", a ToolMessage whose content holds image blocks a
multimodal model takes and whose artifact is the cell's result."""

import base64

import pytest

from pyjail_testing.package import import_or_skip

import_or_skip("langchain_core")

from langchain_core.messages import ToolMessage  # noqa: E402

from pyjail import CellResult  # noqa: E402
from pyjail.langchain import PythonAstREPLTool, PythonREPL, PythonREPLTool  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
SHOW = ("class Picture:\n"
        "    def __init__(self, data, mime='png'):\n"
        "        self.data, self.mime = data, mime\n"
        "    def _repr_png_(self):\n"
        "        return self.data if self.mime == 'png' else None\n"
        "    def _repr_svg_(self):\n"
        "        return '<svg/>' if self.mime == 'svg' else None\n"
        "display(Picture(%r))\ndisplay(Picture(b'', 'svg'))\nprint('shown')" % PNG)


def call(tool, code):
    return tool.invoke({"type": "tool_call", "name": tool.name, "args": {"query": code},
                        "id": "call-1"})


@pytest.mark.parametrize("make", [PythonREPLTool, PythonAstREPLTool])
def test_images_come_as_content_blocks_and_the_result_as_the_artifact(make):
    tool = make(response_format="content_and_artifact")
    try:
        msg = call(tool, SHOW)
        assert isinstance(msg, ToolMessage) and msg.tool_call_id == "call-1"
        text, image = msg.content    # the SVG is not for a model: in the artifact only
        assert text["type"] == "text" and text["text"] == "shown\n"
        assert image["type"] == "image" and image["mime_type"] == "image/png"
        assert base64.b64decode(image["base64"]) == PNG
        assert isinstance(msg.artifact, CellResult)
        assert [(i.mime, i.data) for i in msg.artifact.images] == \
            [("image/png", PNG), ("image/svg+xml", b"<svg/>")]
        # No image: the usual string.
        msg = call(tool, "print(6 * 7)")
        assert msg.content == "42\n" and msg.artifact.images == []
        # Called with a string (no tool call), LangChain gives the content alone.
        assert isinstance(tool.invoke({"query": SHOW}), list)
    finally:
        tool.close()


def test_by_default_the_answer_is_the_string_langchain_s_tool_gives():
    tool = PythonREPLTool()
    try:
        msg = call(tool, SHOW)
        assert msg.content == "shown\n" and msg.artifact is None
    finally:
        tool.close()


def test_a_matplotlib_figure_reaches_the_model_as_an_image(data_rootfs):
    tool = PythonREPLTool(python_repl=PythonREPL(rootfs=data_rootfs),
                          response_format="content_and_artifact")
    try:
        msg = call(tool, "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
        assert [b["type"] for b in msg.content] == ["image"]
        assert base64.b64decode(msg.content[0]["base64"]).startswith(b"\x89PNG")
    finally:
        tool.close()
