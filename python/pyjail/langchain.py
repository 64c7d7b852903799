"""LangChain tools whose Python runs in a pyjail session.

- :class:`PythonREPLTool` is a drop-in for
  ``langchain_experimental.tools.PythonREPLTool``: the same ``name``
  (``"Python_REPL"``), input (one string, ``query``), ``sanitize_input``
  switch and string output, with variables kept from call to call. Its
  ``python_repl`` is a :class:`PythonREPL`, in place of
  ``langchain_experimental.utilities.PythonREPL``: ``run(command,
  timeout=None)``, ``_globals``/``_locals`` sent into the jail, readable
  ``globals``/``locals``, errors as ``repr(exc)``.
- :class:`PythonAstREPLTool` is the same for
  ``langchain_experimental.tools.PythonAstREPLTool`` (``"python_repl_ast"``):
  it answers with the value of the last expression (the value itself when it
  is plain data), errors as ``"IndexError: list index out of range"``, and
  puts its ``globals``/``locals`` (a DataFrame as ``df``) into the jail.
- :func:`create_pandas_dataframe_agent` is LangChain's pandas agent with its
  Python tool replaced by a jailed :class:`PythonAstREPLTool`.

The contract is LangChain's, with what the jail adds: the code cannot reach
the host's files, network or processes; a call that runs out of time is
interrupted and the interpreter keeps its state (the original kills a forked
copy, losing what the call did); stderr and output written by ``os.write`` or
subprocesses are captured; every process the code starts dies with the session.

Images: a tool made with ``response_format="content_and_artifact"`` returns
what the code showed (``plt.show()``, ``display(img)``, a trailing figure) the
LangChain way: as a tool call's ToolMessage whose content is a list of blocks,
the text and then an image block for each PNG or JPEG (what multimodal chat
models take), and whose ``artifact`` is the cell's :class:`pyjail.CellResult`
(its ``images`` hold the bytes, SVG included; never sent to the model).
Without images the content is the usual string. The default
(``response_format="content"``) answers with text only, as LangChain's tools do.

What the model sees: each tool's description is LangChain's, followed by the
jail's facts (no network, or with ``net="allow"`` the only hosts it can
reach; the rootfs's packages; files in ``/work``); output
is cut to ``max_output_chars`` (16000) at line boundaries, with a line saying
how much was left out; an error that is the jail refusing a connection or a
name lookup comes with a note that there is no network in this sandbox.
``PythonREPL(traceback="short")`` answers errors with the frames of the
code itself (with line numbers; each run of library frames as one line) and
the exception, instead of LangChain's one line, which serves models better;
``traceback=True`` gives the whole traceback. The tools run on the ``data``
rootfs (numpy, pandas, ...) when it is installed, else on the installed
default one.

Needs ``langchain-core`` (from a pyjail checkout: ``pip install './python[langchain]'``;
the distribution is ``pyjail-sandbox``: the PyPI project named ``pyjail`` is
an unrelated one).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ._agents import (DEFAULT_OUTPUT_BUDGET, JailFacts, egress, fit_for_model, is_plain,
                      missing_module_note, network_note, open_session, plain_variables,
                      read_facts, send_values)
from ._session import CellResult, Session

__all__ = ["PythonREPL", "PythonREPLTool", "PythonAstREPLTool", "PythonInputs", "sanitize_input",
           "create_pandas_dataframe_agent"]

_LEADING = re.compile(r"\A[\s`]*(?:(?i:python)(?![0-9A-Za-z_]))?\s*")
_TRAILING = re.compile(r"[\s`]*\Z")

REPL_DESCRIPTION = (
    "A Python shell. Use this to execute python commands. "
    "Input should be a valid python command. "
    "If you want to see the output of a value, you should print it out "
    "with `print(...)`."
)
AST_DESCRIPTION = (
    "A Python shell. Use this to execute python commands. "
    "Input should be a valid python command. "
    "When using this tool, sometimes output is abbreviated - "
    "make sure it does not look abbreviated before using it in your answer."
)


def sanitize_input(query: str) -> str:
    """Remove leading and trailing white space and backticks, and a leading
    ``python`` language tag (any case), from code a model wrote. Unlike
    LangChain's, it never eats the start of an identifier such as
    ``python_version``."""
    return _TRAILING.sub("", _LEADING.sub("", query, count=1), count=1)


def _secs(x: Optional[float]) -> str:
    return "?" if x is None else "%g" % x


def _unseen(result: CellResult) -> int:
    """Bytes of the cell's output the session already left out (past its max_output)."""
    return result.stdout_omitted + result.stderr_omitted


def _printed(result: CellResult, value: bool = False) -> str:
    """What the cell wrote (stdout, then stderr), and its value's repr if asked."""
    return dataclasses.replace(result, error=None).text(value=value)


def format_result(result: CellResult, timeout: Optional[float], *, value: bool = False,
                  traceback: Union[bool, str] = True, error_style: str = "repr") -> str:
    """A cell's result as the one string a tool returns: its output, then the
    error (its whole traceback if ``traceback`` is True, the code's own frames
    and the exception if it is ``"short"``, else LangChain's ``repr(exc)`` or,
    for ``error_style="type"``, ``"Type: message"``) or what happened to the
    session."""
    body = _printed(result, value=value and result.error is None)
    err = result.error
    if err is not None:
        if traceback == "short" and err.short_traceback and not result.restarted:
            body += err.short_traceback.rstrip("\n") + "\n"
        elif traceback or result.restarted or err.type in ("InterpreterDied", "ProtocolError"):
            body += str(err) + "\n"
        elif error_style == "repr":
            # LangChain's one line, as it gives it: no newline after it.
            body += err.repr or "%s(%r)" % (err.type, err.message)
        else:
            body += "%s: %s" % (err.type, err.message)
    if result.timed_out and not result.restarted:
        note = ("Execution timed out after %s s: the code was interrupted (KeyboardInterrupt) "
                "and the interpreter kept its variables.\n" % _secs(timeout))
        return note + body
    if result.timed_out:
        return "Execution timed out after %s s, and %s\n%s" % (
            _secs(timeout), err.message if err else "", _printed(result))
    return body


class PythonREPL:
    """A Python REPL in a pyjail session, in place of
    ``langchain_experimental.utilities.PythonREPL``.

    ``run(command, timeout=None)`` runs the command (sanitised like the
    original) and returns what it printed, stdout then stderr; an error is
    reported as LangChain's is, ``repr(exc)`` (``NameError("name 'foo' is
    not defined")``), or, with ``traceback="short"``, as the frames of the code
    itself and the exception (library frames summed up in one line): better
    for a model, which sees the line that failed; ``traceback=True``: the
    whole traceback. The answer is cut to ``max_output_chars`` (None: no
    cut) at line boundaries.
    ``timeout`` is in seconds; None means this REPL's ``timeout`` (60 s
    unless given; pass ``timeout=None`` to the constructor for no limit).

    ``_globals`` and ``_locals`` (as LangChain takes them) are put into the
    jail's namespace when the session starts, and again if its interpreter
    is replaced: plain data as it is, other objects pickled (host to jail
    only), so the rootfs must have their classes' modules; a value that
    cannot be sent raises ``ValueNotSentError`` at the first ``run()``.
    ``globals`` and ``locals`` read back a snapshot of the session's
    variables that are plain data (the jail has one namespace: both are the
    same dict); nothing from the jail is unpickled.

    The session starts on first use and ends with close() (or when the REPL
    is garbage-collected); ``session_options`` go to Session, e.g.
    ``memory="2G"``, ``limits=pyjail.Limits(pids=64)`` or
    ``binary="/opt/pyjail/bin/pyjail"``; with controlled egress
    (``net="allow"``, ``allow_hosts=[...]``) the tools'
    descriptions name the only hosts the code can reach. ``rootfs`` is the
    root filesystem, as ``pyjail --rootfs`` takes it: the name of one built
    with ``pyjail rootfs build`` or a path; None: ``data`` when it is
    installed, else the installed default one.
    """

    def __init__(self, *, timeout: Optional[float] = 60.0, session: Optional[Session] = None,
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 traceback: Union[bool, str] = False,
                 max_output_chars: Optional[int] = DEFAULT_OUTPUT_BUDGET,
                 _globals: Optional[Dict[str, Any]] = None,
                 _locals: Optional[Dict[str, Any]] = None,
                 **session_options: Any) -> None:
        if traceback not in (False, True, "short"):
            raise ValueError("traceback must be False, True or 'short', not %r" % (traceback,))
        self.timeout = timeout
        self.traceback = traceback
        self.max_output_chars = max_output_chars
        self._session = session
        self._rootfs = rootfs
        self._rootfs_name: Optional[str] = None if session is not None else str(rootfs or "")
        self._options = session_options
        self._initial: Dict[str, Any] = dict(_globals or {})
        self._initial.update(_locals or {})
        self._facts: Optional[Tuple[int, JailFacts]] = None
        self._sent_to: Optional[Tuple[int, int]] = None
        self._opened = 0      # sessions opened: an id() may be reused once one is freed
        self._lock = threading.RLock()

    @property
    def session(self) -> Session:
        """The session, started on first use (and again after close())."""
        with self._lock:
            if self._session is None or self._session.closed:
                self._session, self._rootfs_name = open_session(self._rootfs, self._options)
                self._opened += 1
            return self._session

    def interpreter_key(self) -> Tuple[int, int]:
        """Names the current interpreter: it changes when the session is replaced
        or restarts its interpreter (and everything sent into it is gone)."""
        with self._lock:
            session = self.session
            return (self._opened, session.restarts)

    def prepared_session(self) -> Session:
        """The session, with ``_globals``/``_locals`` in it."""
        with self._lock:
            session = self.session
            key = self.interpreter_key()
            if self._sent_to != key:
                send_values(session, self._initial, "_globals/_locals")
                self._sent_to = key
            return session

    @property
    def network(self) -> bool:
        """Whether the session has a network (``net`` other than ``"none"``)."""
        return egress(self.session)[0]

    @property
    def facts(self) -> JailFacts:
        """What the model should know of the jail (read once per session)."""
        with self._lock:
            session = self.session
            if self._facts is None or self._facts[0] != self._opened:
                self._facts = (self._opened, read_facts(session, self._rootfs_name,
                                                        self.network))
            return self._facts[1]

    @property
    def globals(self) -> Dict[str, Any]:
        """The session's plain-data variables (a snapshot)."""
        return plain_variables(self.prepared_session())

    @property
    def locals(self) -> Dict[str, Any]:
        """The same snapshot as ``globals``: the jail has one namespace."""
        return self.globals

    @staticmethod
    def sanitize_input(query: str) -> str:
        return sanitize_input(query)

    def answer(self, result: CellResult, timeout: Optional[float], *, value: bool = False,
               error_style: str = "repr") -> str:
        """A result as the string for the model: LangChain's form, the no-network
        note when it applies, cut to ``max_output_chars``."""
        text = format_result(result, timeout, value=value, traceback=self.traceback,
                             error_style=error_style)
        note = network_note(result.error, self.network)
        if note is None and result.error is not None and \
                result.error.type == "ModuleNotFoundError":
            note = missing_module_note(result.error, self.facts)
        if note:
            text += ("" if text.endswith("\n") else "\n") + note
        return fit_for_model(text, self.max_output_chars, _unseen(result))

    def run(self, command: str, timeout: Optional[float] = None) -> str:
        """Run a command and return everything it printed (and its error)."""
        limit = self.timeout if timeout is None else timeout
        result = self.prepared_session().run(sanitize_input(command), timeout=limit)
        return self.answer(result, limit)

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()

    def __enter__(self) -> "PythonREPL":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# The images a multimodal chat model takes in a content block.
_MODEL_IMAGES = ("image/png", "image/jpeg")


def _image_block(mime: str, data: bytes) -> Dict[str, Any]:
    import base64
    b64 = base64.b64encode(data).decode("ascii")
    try:
        from langchain_core.messages.content import create_image_block
    except ImportError:       # langchain-core 0.3: its standard block
        return {"type": "image", "source_type": "base64", "data": b64, "mime_type": mime}
    return dict(create_image_block(base64=b64, mime_type=mime))


def _respond(tool: BaseTool, answer: Any, result: CellResult) -> Any:
    """The tool's answer in its ``response_format``: as it is, or, for
    ``content_and_artifact``, (content, the CellResult), the content holding an
    image block after the text for each image a model can take."""
    if tool.response_format != "content_and_artifact":
        return answer
    blocks = [_image_block(i.mime, i.data) for i in result.images if i.mime in _MODEL_IMAGES]
    if not blocks:
        return answer, result
    text = answer if isinstance(answer, str) else str(answer)
    return ([{"type": "text", "text": text}] if text else []) + blocks, result


def _with_facts(tool: Any, original: str) -> None:
    """LangChain's description followed by the jail's facts, unless the
    caller gave a description of their own."""
    if "description" not in tool.model_fields_set:
        tool.description = original + " " + tool.python_repl.facts.describe()


class PythonREPLTool(BaseTool):
    """Runs Python in a pyjail session; the variables stay from call to call.
    Its description is LangChain's followed by the jail's facts (so the
    session starts when the tool is made)."""

    name: str = "Python_REPL"
    description: str = REPL_DESCRIPTION
    python_repl: PythonREPL = Field(default_factory=PythonREPL)
    sanitize_input: bool = True

    @model_validator(mode="after")
    def _describe_the_jail(self) -> "PythonREPLTool":
        _with_facts(self, REPL_DESCRIPTION)
        return self

    def _run(self, query: str, run_manager: Optional[CallbackManagerForToolRun] = None) -> Any:
        if self.sanitize_input:
            query = sanitize_input(query)
        repl = self.python_repl
        if self.response_format != "content_and_artifact":
            return repl.run(query)
        limit = repl.timeout
        result = repl.prepared_session().run(sanitize_input(query), timeout=limit)
        return _respond(self, repl.answer(result, limit), result)

    async def _arun(self, query: str,
                    run_manager: Optional[AsyncCallbackManagerForToolRun] = None) -> str:
        # Natively async (pyjail.AsyncSession): the event loop goes on while the
        # cell runs, and cancelling the call interrupts the cell. Calls on one
        # tool take turns (one interpreter); separate tools run in parallel.
        from ._async import AsyncSession, _in_thread
        if self.sanitize_input:
            query = sanitize_input(query)
        repl = self.python_repl
        session = AsyncSession.wrap(await _in_thread(repl.prepared_session))
        limit = repl.timeout
        result = await session.run(sanitize_input(query), timeout=limit)
        return _respond(self, await _in_thread(repl.answer, result, limit), result)

    def close(self) -> None:
        """End the tool's session (a later call starts a fresh one)."""
        self.python_repl.close()


class PythonInputs(BaseModel):
    """Python inputs."""

    query: str = Field(description="code snippet to run")


class PythonAstREPLTool(BaseTool):
    """Runs Python in a pyjail session and answers with the value of the last
    expression, as LangChain's does: the value itself when it is plain data
    (``run("1 + 1")`` is ``2``) and nothing was printed, else its str() after
    what the code printed; an error as ``"Type: message"`` (with
    ``PythonREPL(traceback="short")``, the code's own frames and the exception;
    ``traceback=True``, the whole traceback).

    ``globals`` and ``locals`` are put into the session's namespace before
    the first call (and again if the interpreter had to be restarted): plain
    data as it is, other objects pickled, so the jail must be able to import
    their classes (a DataFrame needs a rootfs with pandas, such as ``data``);
    one that cannot be sent raises ``ValueNotSentError``. They are what the
    host gave: the jail's variables are read with ``python_repl.globals``."""

    name: str = "python_repl_ast"
    description: str = AST_DESCRIPTION
    globals: Optional[Dict[str, Any]] = Field(default_factory=dict)
    locals: Optional[Dict[str, Any]] = Field(default_factory=dict)
    sanitize_input: bool = True
    args_schema: Type[BaseModel] = PythonInputs
    python_repl: PythonREPL = Field(default_factory=PythonREPL)
    _sent_to: Optional[Tuple[int, int]] = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _describe_the_jail(self) -> "PythonAstREPLTool":
        _with_facts(self, AST_DESCRIPTION)
        return self

    def _prepare(self) -> Session:
        session = self.python_repl.prepared_session()
        key = self.python_repl.interpreter_key()
        if self._sent_to != key:
            variables = dict(self.globals or {})
            variables.update(self.locals or {})
            send_values(session, variables, "the tool's globals/locals")
            self._sent_to = key
        return session

    def _run(self, query: str, run_manager: Optional[CallbackManagerForToolRun] = None) -> Any:
        if self.sanitize_input:
            query = sanitize_input(query)
        session = self._prepare()
        limit = self.python_repl.timeout
        result = session.run(query, timeout=limit, want_str=True, want_data=True)
        return _respond(self, self._answer(result, limit), result)

    def _answer(self, result: CellResult, limit: Optional[float]) -> Any:
        """The tool's answer to a cell's result (for _run and _arun)."""
        repl = self.python_repl
        if not result.ok or result.value is None:
            return repl.answer(result, limit, error_style="type")
        printed = _printed(result)
        budget = repl.max_output_chars
        if not printed and is_plain(result.data) and \
                (budget is None or len(result.value) <= budget):
            return result.data
        value = result.value_str if result.value_str is not None else result.value
        return fit_for_model(printed + value, budget, _unseen(result))

    async def _arun(self, query: str,
                    run_manager: Optional[AsyncCallbackManagerForToolRun] = None) -> Any:
        # Natively async, as PythonREPLTool._arun.
        from ._async import AsyncSession, _in_thread
        if self.sanitize_input:
            query = sanitize_input(query)
        session = AsyncSession.wrap(await _in_thread(self._prepare))
        limit = self.python_repl.timeout
        result = await session.run(query, timeout=limit, want_str=True, want_data=True)
        return _respond(self, await _in_thread(self._answer, result, limit), result)

    def close(self) -> None:
        """End the tool's session (a later call starts a fresh one)."""
        self.python_repl.close()


def create_pandas_dataframe_agent(llm: Any, df: Any, *, python_repl: Optional[PythonREPL] = None,
                                  **kwargs: Any) -> Any:
    """LangChain's pandas DataFrame agent
    (``langchain_experimental.agents.create_pandas_dataframe_agent``, same
    arguments) whose Python tool runs in a jail: its ``PythonAstREPLTool`` is
    replaced by this module's, holding the DataFrame(s) as ``df`` (or
    ``df1``, ``df2``, ... for a list). ``python_repl`` chooses the session
    (default: a PythonREPL on the ``data`` rootfs when it is installed).
    LangChain's ``allow_dangerous_code`` opt-in is given for you: the code
    runs in the jail, not in this process."""
    from langchain_experimental.agents import create_pandas_dataframe_agent as original

    kwargs.setdefault("allow_dangerous_code", True)
    executor = original(llm, df, **kwargs)
    frames: Dict[str, Any] = ({"df%d" % (i + 1): d for i, d in enumerate(df)}
                              if isinstance(df, list) else {"df": df})
    tools: List[Any] = list(executor.tools)
    theirs = tools[0]
    if theirs.name != "python_repl_ast":
        raise RuntimeError("langchain_experimental's pandas agent changed: its first tool is "
                           "%r, not python_repl_ast" % theirs.name)
    ours = PythonAstREPLTool(locals=frames, python_repl=python_repl or PythonREPL())
    ours._prepare()     # the DataFrames go in now: a rootfs without pandas fails here
    executor.tools = [ours] + tools[1:]
    return executor
