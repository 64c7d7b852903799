"""Run smolagents' CodeAgent code in a pyjail session.

::

    from smolagents import CodeAgent
    from pyjail.smolagents import PyjailExecutor

    with PyjailExecutor() as executor:
        agent = CodeAgent(tools=[...], model=model, executor=executor)
        agent.run("...")

:class:`PyjailExecutor` is a smolagents ``PythonExecutor``, like its remote
executors: every code action runs as one cell of a persistent jailed
interpreter, so variables and imports carry over from step to step, any module
of the jail's rootfs can be imported (the jail, not an import allowlist, is the
boundary), and a step that runs out of time is interrupted without losing the
state.

Tools work as smolagents expects, with one difference from the remote
executors: a tool is not copied into the jail but called from it. The code sees
a function of the tool's name; calling it runs the tool here, on the host, and
returns its result to the code (arguments and results cross as plain data). So
tools that need the network or credentials keep working while the code itself
has neither. ``final_answer(...)`` ends the step, and the agent receives the
final answer tool's own return value (a DataFrame, an array, a date or a dict
of numpy numbers given to it come back as themselves, as the local executor
gives them: see ``CellResult.data``; nothing is unpickled); a PIL image given to it crosses as PNG
bytes (never a pickle) and reaches the tool as a PIL image (smolagents then
makes it an ``AgentImage``), decoded only when its pixels are first used. The
final answers of one code action carry at most ``MAX_IMAGES_PER_CELL`` images
of ``MAX_IMAGE_PIXELS`` pixels in all; past that, final_answer raises
ValueError in the jail. Managed agents are called the same way.

It behaves as smolagents' Docker, E2B and Modal executors do: the same
``CodeOutput`` fields, errors raised as smolagents' own ``AgentError`` types
(``PyjailExecutionError`` is an ``AgentExecutionError``), and the modules of
``additional_imports`` (CodeAgent's ``additional_authorized_imports``: pass
the same list) checked when the executor is made, so that a rootfs without
one fails then, naming it, not when the model first imports it. What the
model sees: the step's logs cut to ``max_print_outputs_length`` (16000)
characters at line boundaries, with a line saying how much was left out; a
failed connection or name lookup explained as the sandbox having no network;
``describe()`` gives the jail's facts for the agent's ``instructions`` (with
controlled egress, ``net="allow"``: the only hosts the code can reach).

Needs ``smolagents`` (from a pyjail checkout: ``pip install './python[smolagents]'``;
the distribution is ``pyjail-sandbox``: the PyPI project named ``pyjail`` is
an unrelated one).
"""

from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Optional, Union

from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.utils import AgentExecutionError

from ._agents import (DEFAULT_OUTPUT_BUDGET, JailFacts, check_modules, egress, fit_for_model,
                      missing_module_note, network_note, open_session, read_facts,
                      send_values)
from ._common import PyjailError
from ._session import CellResult, Session

__all__ = ["PyjailExecutor", "PyjailExecutionError"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a code action may run (smolagents' own default for its local executor)."""

MAX_IMAGE_PIXELS = 4096 * 4096
"""The pixels the final answers of one code action may carry out of the jail, in
all: a small PNG can unpack to gigabytes, and a cell can call final_answer again
and again (catching what ends it). 16 Mi pixels decode to at most 64 MiB."""

MAX_IMAGES_PER_CELL = 8
"""The images the final answers of one code action may carry."""

_IMAGE_TAG = "__pyjail_image__"

# Run in the jail after the tools are sent: final_answer turns a PIL image into
# PNG bytes (plain data) before it calls the host's final_answer.
_WRAP_FINAL_ANSWER = """\
def wrap(host):
    def final_answer(*args, **kwargs):
        def plain(v):
            if type(v).__module__.startswith("PIL.") and hasattr(v, "save"):
                import io
                buf = io.BytesIO()
                v.save(buf, format="PNG")
                return {%r: "image/png", "data": buf.getvalue()}
            return v
        return host(*[plain(a) for a in args], **{k: plain(v) for k, v in kwargs.items()})
    final_answer.__doc__ = host.__doc__
    return final_answer
""" % _IMAGE_TAG


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The chunks that make a PNG's pixels. The others are left out: text, ICC profiles and the
# like are zlib streams that PIL would inflate as soon as the image is opened.
_PNG_PIXEL_CHUNKS = (b"IHDR", b"PLTE", b"tRNS", b"IDAT", b"IEND")


def _png_pixels_only(data: bytes) -> "tuple[bytes, int, int]":
    """The PNG with only its pixel chunks, and its width and height, read from its
    header: nothing is decompressed. ValueError if it is not a whole PNG."""
    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError("it is not a PNG")
    kept, pos, size, kind = [_PNG_SIGNATURE], len(_PNG_SIGNATURE), None, b""
    while kind != b"IEND":
        if pos + 12 > len(data):
            raise ValueError("the PNG is cut short")
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, end = data[pos + 4:pos + 8], pos + 12 + length
        if end > len(data):
            raise ValueError("the PNG is cut short")
        if kind == b"IHDR":
            if size is not None or length != 13:
                raise ValueError("the PNG's header is malformed")
            size = (int.from_bytes(data[pos + 8:pos + 12], "big"),
                    int.from_bytes(data[pos + 12:pos + 16], "big"))
        if kind in _PNG_PIXEL_CHUNKS:
            kept.append(data[pos:end])
        pos = end
    if size is None:
        raise ValueError("the PNG has no header")
    return b"".join(kept), size[0], size[1]


class _CellImages:
    """What the final answers of one code action have made the host hold."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.images = 0
        self.pixels = 0

    def admit(self, width: int, height: int) -> None:
        if width * height > MAX_IMAGE_PIXELS:
            raise ValueError("the image is %dx%d pixels, more than the %d a final answer may carry"
                             % (width, height, MAX_IMAGE_PIXELS))
        if self.images >= MAX_IMAGES_PER_CELL:
            raise ValueError("the final answers of one code action may carry at most %d images"
                             % MAX_IMAGES_PER_CELL)
        if self.pixels + width * height > MAX_IMAGE_PIXELS:
            raise ValueError("the image is %dx%d pixels, and with the %d this code action's final "
                             "answers carry already, more than the %d they may carry in all"
                             % (width, height, self.pixels, MAX_IMAGE_PIXELS))
        self.images += 1
        self.pixels += width * height


def _from_jail(value: Any, cell: _CellImages) -> Any:
    """A final answer's argument as the tool should get it: PNG bytes the jail
    tagged as an image become a PIL image (never unpickled), counted against the
    cell's share. The image is opened, not decoded: its pixels are decoded when
    the caller first uses them (PIL loads lazily), so the host holds only the
    compressed PNG until then."""
    if not (isinstance(value, dict) and set(value) == {_IMAGE_TAG, "data"} and
            value[_IMAGE_TAG] == "image/png" and isinstance(value["data"], bytes)):
        return value
    from PIL import Image
    try:
        png, width, height = _png_pixels_only(value["data"])
    except ValueError as e:
        raise ValueError("the final answer's image could not be read: %s" % e) from None
    cell.admit(width, height)
    try:
        image = Image.open(io.BytesIO(png), formats=["PNG"])
    except Exception as e:
        raise ValueError("the final answer's image could not be read: %s" % e) from None
    if image.size != (width, height):
        raise ValueError("the final answer's image could not be read: its size is unclear")
    return image


class PyjailExecutionError(AgentExecutionError, PyjailError):  # type: ignore[misc]
    """A code action failed: smolagents' AgentExecutionError, whose message
    holds the code's traceback (the agent shows it to the model as the step's
    error)."""


class PyjailExecutor(PythonExecutor):  # type: ignore[misc]
    """A smolagents code executor backed by a pyjail Session.

    ``additional_imports`` (also as ``additional_authorized_imports``) names
    packages the agent may use, as distributions (``pillow``, as smolagents'
    Docker and E2B executors pip-install them) or as modules (``PIL``;
    ``pkg.*`` means ``pkg``; ``*`` is not checked). Each the rootfs lacks is
    pip-installed in the session when it has controlled egress
    (``net="allow"``, ``allow_hosts`` naming the package index, e.g.
    ``["pypi.org", "files.pythonhosted.org"]``; ``options={"net_resolve": ...}`` and
    ``env={"PIP_INDEX_URL": ...}`` for another index), into a directory on its
    ``sys.path``; otherwise, or when pip fails, MissingModuleError names it
    and the fix here. With egress, the model is told which hosts it can reach.
    ``timeout`` is the time limit of one code action in seconds (None: none).
    ``session`` is a Session to use (it stays open when the executor is
    cleaned up); otherwise the executor starts one with ``session_options``
    (e.g. ``memory="2G"``, ``binary=...``) and closes it in ``cleanup()``.
    ``rootfs`` is the root filesystem that session runs in, as ``pyjail
    --rootfs`` takes it: a name (see ``pyjail rootfs list``) or a path;
    None: ``data`` when it is installed, else the installed default one.
    ``max_print_outputs_length`` caps a step's logs (None: no cap). A failed
    step shows the model the frames of its own code and the exception, each
    run of library frames as one line (``traceback=True``: the whole
    traceback).
    """

    def __init__(self, additional_imports: Optional[List[str]] = None, logger: Any = None, *,
                 session: Optional[Session] = None, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 max_print_outputs_length: Optional[int] = DEFAULT_OUTPUT_BUDGET,
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 additional_authorized_imports: Optional[List[str]] = None,
                 traceback: bool = False,
                 **session_options: Any) -> None:
        self.additional_imports = list(additional_imports or []) + [
            m for m in additional_authorized_imports or [] if m not in (additional_imports or [])]
        self.logger = logger if logger is not None else AgentLogger(level=LogLevel.OFF)
        self.timeout = timeout
        self.traceback = traceback
        self.max_print_outputs_length = max_print_outputs_length
        self._owns_session = session is None
        if session is not None:
            self.session, self.rootfs = session, None
        else:
            self.session, self.rootfs = open_session(rootfs, session_options)
        self.network, hosts = egress(self.session)
        self._install = bool(hosts)
        try:
            self._installed = check_modules(self.session, self.additional_imports, self.rootfs,
                                            "additional_imports", install=self._install)
        except BaseException:
            if self._owns_session:
                self.session.close()
            raise
        self._facts: Optional[JailFacts] = None
        self._variables: Dict[str, Any] = {}
        self._wrapped = False
        self._restarts_seen = self.session.restarts
        self._cell_images = _CellImages()
        self.state: Dict[str, Any] = {"_print_outputs": ""}

    def describe(self) -> str:
        """The jail's facts (no network, its packages, files in /work), for the
        agent's ``instructions``."""
        return self._jail_facts().describe()

    def _jail_facts(self) -> JailFacts:
        if self._facts is None:
            self._facts = read_facts(self.session, self.rootfs, self.network)
        return self._facts

    # --------------------------------------------------------- PythonExecutor

    def send_tools(self, tools: Dict[str, Any]) -> None:
        """Make each tool (and managed agent) callable by name from the code."""
        docs = {}
        functions: Dict[str, Any] = {}
        for name, tool in tools.items():
            desc = getattr(tool, "description", None) or getattr(tool, "__doc__", None) or ""
            inputs = getattr(tool, "inputs", None)
            if isinstance(inputs, dict) and inputs:
                desc += "\n\nArguments: " + ", ".join(
                    "%s (%s)" % (k, v.get("type", "any") if isinstance(v, dict) else "any")
                    for k, v in inputs.items())
            docs[name] = desc
            functions[name] = (_final_answer_on_host(tool, self._cell_images)
                               if name == "final_answer" else tool)
        self.session.expose(functions, ends_cell=[n for n in tools if n == "final_answer"],
                            docs=docs)
        self._wrapped = "final_answer" in tools
        if self._wrapped:
            self._wrap_final_answer()

    def _wrap_final_answer(self) -> None:
        code = ("(lambda ns: (exec(%r, ns), globals().__setitem__('final_answer', "
                "ns['wrap'](final_answer)))[1])({})" % _WRAP_FINAL_ANSWER)
        result = self.session.run(code, timeout=60)
        if not result.ok:
            raise PyjailError("pyjail: could not set up final_answer in the jail: %s"
                              % result.error)

    def send_variables(self, variables: Dict[str, Any]) -> None:
        """Put the agent's variables (e.g. ``additional_args``) into the
        namespace: plain data as it is, other objects pickled (host to jail
        only). One that cannot be sent raises ValueNotSentError."""
        if not variables:
            return
        self._variables.update(variables)
        send_values(self.session, variables, "additional_args")

    def __call__(self, code_action: str) -> CodeOutput:
        self._cell_images.reset()  # each code action has the whole share
        result = self.session.run(code_action, timeout=self.timeout, want_data=True)
        logs = self._logs(result)
        self.state["_print_outputs"] = logs
        if self.session.restarts != self._restarts_seen:
            # A fresh interpreter: the tools came back with the session; the
            # wrapper of final_answer and the agent's variables must be sent again.
            self._restarts_seen = self.session.restarts
            if self._installed:   # gone with the old interpreter's /tmp
                check_modules(self.session, self._installed, self.rootfs, "additional_imports",
                              install=True)
            if self._wrapped:
                self._wrap_final_answer()
            if self._variables:
                send_values(self.session, self._variables, "additional_args")
        if result.final is not None:
            return CodeOutput(output=result.final.value, logs=logs, is_final_answer=True)
        if result.error is not None or result.timed_out:
            raise PyjailExecutionError(self._error_message(result), self.logger)
        output = result.data if result.value is not None else None
        return CodeOutput(output=output, logs=logs, is_final_answer=False)

    def _logs(self, result: CellResult) -> str:
        logs = result.stdout
        if result.stderr:
            logs += ("" if not logs or logs.endswith("\n") else "\n") + result.stderr
        return fit_for_model(logs, self.max_print_outputs_length,
                             result.stdout_omitted + result.stderr_omitted)

    def _error_message(self, result: CellResult) -> str:
        err = result.error
        if result.timed_out and not result.restarted:
            head = ("Code execution timed out after %g s: it was interrupted, and the variables "
                    "it had set are kept.\n" % (self.timeout or 0))
        elif result.restarted:
            return "Code execution failed: %s\n" % (err.message if err else "")
        else:
            head = "Code execution failed:\n"
        if err is None:
            shown = ""
        elif self.traceback or not err.short_traceback:
            shown = str(err)
        else:
            shown = err.short_traceback.rstrip("\n")
        text = head + shown
        note = network_note(err, self.network)
        if note is None and err is not None and err.type == "ModuleNotFoundError":
            note = missing_module_note(err, self._jail_facts())
        if note:
            text += "\n" + note
        return fit_for_model(text, self.max_print_outputs_length)

    # --------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        """Close the session if this executor started it."""
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "PyjailExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()


def _final_answer_on_host(tool: Any, cell: _CellImages) -> Any:
    """The final answer tool, called with images rebuilt from PNG bytes."""
    def final_answer(*args: Any, **kwargs: Any) -> Any:
        return tool(*[_from_jail(a, cell) for a in args],
                    **{k: _from_jail(v, cell) for k, v in kwargs.items()})
    final_answer.__doc__ = getattr(tool, "__doc__", None)
    return final_answer
