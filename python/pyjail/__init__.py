"""Run untrusted Python in a pyjail jail, from Python.

This package is a thin driver for the ``pyjail`` binary: no code it is given
runs outside the jail.

- :func:`run` runs a program in a fresh jail and returns a :class:`Result`
  (stdout, stderr, exit code, pyjail's report, collected files).
- :class:`Session` keeps one jailed interpreter alive across cells
  (:class:`CellResult`: stdout, stderr, the trailing expression's repr, the
  exception with its traceback), survives cell timeouts and moves files in and
  out.
- :class:`AsyncSession` and :func:`arun` are the same for asyncio programs
  (coroutine methods; one call at a time per session, sessions in parallel).
- The rarer settings come in small typed groups, the same for run(),
  Session, AsyncSession and Pool: :class:`Limits` (CPU time, processes,
  tmpfs size, output limit, a session's wall time), :class:`OutputCaps`
  (how much of the output and files the driver keeps) and, for run(),
  :class:`Callbacks` (``on_stdout``/``on_stderr``, which receive output as
  it is written; Session.run takes them per cell).
- A cell's ``images`` hold the figures it showed (PNG bytes and MIME type);
  cells may ``await`` at the top level.
- :mod:`pyjail.langchain` and :mod:`pyjail.smolagents` plug sessions into
  LangChain and smolagents.

The binary is ``binary=`` if given, else ``$PYJAIL_BIN``, else ``pyjail`` on
``PATH``.

Everything that comes back from a jail is treated as hostile (names, sizes,
counts, frames): a jail that breaks the protocol is ended, and run() raises
:class:`ProtocolError` (a Session replaces its interpreter and says so).
"""

from ._channel import ProtocolError
from ._common import (BinaryNotFoundError, Callbacks, JailError, Limits, OutputCaps, PyjailError,
                      Report, find_binary)
from ._async import AsyncSession, arun
from ._pool import Pool
from ._run import Result, run
from ._session import (CellError, CellResult, FinalCall, Image, JailObject, Session,
                       SessionClosedError, SessionDiedError, SessionError)

__version__ = "0.1.0"

__all__ = [
    "run", "arun", "Result", "Report", "Pool", "Limits", "OutputCaps", "Callbacks",
    "Session", "AsyncSession", "CellResult", "CellError", "FinalCall", "Image", "JailObject",
    "PyjailError", "BinaryNotFoundError", "JailError", "ProtocolError",
    "SessionError", "SessionClosedError", "SessionDiedError",
    "find_binary", "__version__",
]
