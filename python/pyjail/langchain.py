"""LangChain tools whose Python runs in a pyjail session.

- :class:`PythonREPLTool` is a drop-in for
  ``langchain_experimental.tools.PythonREPLTool``: the same ``name``
  (``"Python_REPL"``), ``description``, input (one string, ``query``),
  ``sanitize_input`` switch and string output, with variables kept from call
  to call. Its ``python_repl`` has ``run(command, timeout=None)`` like
  ``langchain_experimental.utilities.PythonREPL``.
- :class:`PythonAstREPLTool` is the same for
  ``langchain_experimental.tools.PythonAstREPLTool`` (``"python_repl_ast"``):
  it answers with the value of the last expression.

Where the originals are weak, these are better without changing the contract:
the code cannot reach the host's files, network or processes; a call that runs
out of time is interrupted and the interpreter keeps its state (the original
kills a forked copy, losing what the call did); an error comes back as the
traceback of the code, not a bare ``repr(e)``; stderr and output written by
``os.write`` or subprocesses are captured; every process the code starts dies
with the session. ``sanitize_input`` strips what a model wraps code in (white
space, backticks, a ``python`` language tag) like the original, except that it
never eats the start of an identifier such as ``python_version``.

Needs ``langchain-core`` (from a pyjail checkout: ``pip install './python[langchain]'``;
the distribution is ``pyjail-sandbox``: the PyPI project named ``pyjail`` is
an unrelated one).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Dict, Optional, Tuple, Type, Union

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field, PrivateAttr

from ._session import CellResult, Session

__all__ = ["PythonREPL", "PythonREPLTool", "PythonAstREPLTool", "PythonInputs", "sanitize_input"]

_LEADING = re.compile(r"\A[\s`]*(?:(?i:python)(?![0-9A-Za-z_]))?\s*")
_TRAILING = re.compile(r"[\s`]*\Z")


def sanitize_input(query: str) -> str:
    """Remove leading and trailing white space and backticks, and a leading
    ``python`` language tag (any case), from code a model wrote."""
    return _TRAILING.sub("", _LEADING.sub("", query, count=1), count=1)


def format_result(result: CellResult, timeout: Optional[float], *, value: bool = False) -> str:
    """A cell's result as the one string a tool returns: its output, then the
    traceback or what happened to the session."""
    body = result.text(value=value)
    if result.timed_out and not result.restarted:
        note = ("Execution timed out after %s s: the code was interrupted (KeyboardInterrupt) "
                "and the interpreter kept its variables.\n" % _secs(timeout))
        return note + body
    if result.timed_out:
        return "Execution timed out after %s s, and %s\n%s" % (
            _secs(timeout), result.error.message if result.error else "", body)
    return body


def _secs(x: Optional[float]) -> str:
    return "?" if x is None else "%g" % x


class PythonREPL:
    """A Python REPL in a pyjail session, in place of
    ``langchain_experimental.utilities.PythonREPL``.

    ``run(command, timeout=None)`` runs the command (sanitised like the
    original) and returns what it printed, stdout then stderr, then the
    traceback if it failed. ``timeout`` is in seconds; None means this REPL's
    ``timeout`` (60 s unless given; pass ``timeout=None`` to the constructor
    for no limit). The session starts on first use and ends with close() (or
    when the REPL is garbage-collected); ``session_options`` go to Session,
    e.g. ``memory="2G"`` or ``binary="/opt/pyjail/bin/pyjail"``. ``rootfs``
    is the root filesystem to run in, as ``pyjail --rootfs`` takes it: the
    name of one built with ``pyjail rootfs build`` (``"data"``) or a path
    (None: the installed one); the tools take it as
    ``PythonREPLTool(python_repl=PythonREPL(rootfs="data"))``.
    """

    def __init__(self, *, timeout: Optional[float] = 60.0, session: Optional[Session] = None,
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 **session_options: Any) -> None:
        self.timeout = timeout
        self._session = session
        if rootfs is not None:
            session_options["rootfs"] = rootfs
        self._options = session_options
        self._lock = threading.Lock()

    @property
    def session(self) -> Session:
        """The session, started on first use (and again after close())."""
        with self._lock:
            if self._session is None or self._session.closed:
                self._session = Session(**self._options)
            return self._session

    @staticmethod
    def sanitize_input(query: str) -> str:
        return sanitize_input(query)

    def run(self, command: str, timeout: Optional[float] = None) -> str:
        """Run a command and return everything it printed (and its traceback)."""
        limit = self.timeout if timeout is None else timeout
        result = self.session.run(sanitize_input(command), timeout=limit)
        return format_result(result, limit)

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()

    def __enter__(self) -> "PythonREPL":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PythonREPLTool(BaseTool):
    """Runs Python in a pyjail session; the variables stay from call to call."""

    name: str = "Python_REPL"
    description: str = (
        "A Python shell. Use this to execute python commands. "
        "Input should be a valid python command. "
        "If you want to see the output of a value, you should print it out "
        "with `print(...)`."
    )
    python_repl: PythonREPL = Field(default_factory=PythonREPL)
    sanitize_input: bool = True

    def _run(self, query: str, run_manager: Optional[CallbackManagerForToolRun] = None) -> str:
        if self.sanitize_input:
            query = sanitize_input(query)
        return self.python_repl.run(query)

    async def _arun(self, query: str,
                    run_manager: Optional[AsyncCallbackManagerForToolRun] = None) -> str:
        return await run_in_executor(None, self._run, query)

    def close(self) -> None:
        """End the tool's session (a later call starts a fresh one)."""
        self.python_repl.close()


class PythonInputs(BaseModel):
    """Python inputs."""

    query: str = Field(description="code snippet to run")


class PythonAstREPLTool(BaseTool):
    """Runs Python in a pyjail session and answers with the value of the last
    expression (or what the code printed, if it has none).

    ``globals`` and ``locals`` are copied into the session's namespace before
    the first call (and again if the interpreter had to be restarted): plain
    data as it is, other objects pickled, so the jail must be able to import
    their classes (build the rootfs ``--with pandas`` for a DataFrame)."""

    name: str = "python_repl_ast"
    description: str = (
        "A Python shell. Use this to execute python commands. "
        "Input should be a valid python command. "
        "When using this tool, sometimes output is abbreviated - "
        "make sure it does not look abbreviated before using it in your answer."
    )
    globals: Optional[Dict[str, Any]] = Field(default_factory=dict)
    locals: Optional[Dict[str, Any]] = Field(default_factory=dict)
    sanitize_input: bool = True
    args_schema: Type[BaseModel] = PythonInputs
    python_repl: PythonREPL = Field(default_factory=PythonREPL)
    _sent_to: Optional[Tuple[int, int]] = PrivateAttr(default=None)

    def _prepare(self) -> Session:
        session = self.python_repl.session
        key = (id(session), session.restarts)
        if self._sent_to != key:
            variables = dict(self.globals or {})
            variables.update(self.locals or {})
            if variables:
                session.set_variables(variables)
            self._sent_to = (id(session), session.restarts)
        return session

    def _run(self, query: str, run_manager: Optional[CallbackManagerForToolRun] = None) -> str:
        if self.sanitize_input:
            query = sanitize_input(query)
        session = self._prepare()
        limit = self.python_repl.timeout
        result = session.run(query, timeout=limit, want_str=True)
        if result.ok and result.value_str is not None:
            printed = result.text(value=False)
            return printed + result.value_str if printed else result.value_str
        return format_result(result, limit)

    async def _arun(self, query: str,
                    run_manager: Optional[AsyncCallbackManagerForToolRun] = None) -> str:
        return await run_in_executor(None, self._run, query)

    def close(self) -> None:
        """End the tool's session (a later call starts a fresh one)."""
        self.python_repl.close()
