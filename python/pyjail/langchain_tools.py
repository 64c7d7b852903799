"""Tools for LangChain v1's ``create_agent`` whose code runs in one pyjail session.

``session_tools()`` returns two tools that share one jail (its variables and its
files in ``/work``):

- ``Python_REPL``: :class:`pyjail.langchain.PythonREPLTool`, with its
  model-facing texts (LangChain's description followed by the jail's facts;
  the answer cut to ``max_output_chars``), here with tracebacks on (a model
  fixes code better when it sees the line that failed);
- ``shell``: :class:`ShellTool`, a shell command (``/bin/sh -c``, busybox's
  tools on the ``data`` rootfs) in the same jail, answering with its output
  and its exit status.

    from langchain.agents import create_agent
    from pyjail.langchain_tools import session_tools

    agent = create_agent(model, tools=session_tools(memory="1G"))

This is the way forward for LangChain agents; ``pyjail.langchain`` keeps the
drop-ins for ``langchain-experimental``'s tools for existing code. Needs
``langchain-core`` (and ``langchain`` 1.x for ``create_agent``).
"""

from __future__ import annotations

from typing import Any, List, Optional, Type

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field, model_validator

from ._agents import DEFAULT_OUTPUT_BUDGET, fit_for_model, network_note
from ._session import CellError
from ._shell import exit_code, run_shell
from .langchain import PythonREPL, PythonREPLTool

__all__ = ["ShellTool", "ShellInputs", "session_tools", "SHELL_DESCRIPTION"]

SHELL_DESCRIPTION = (
    "Run a shell command (/bin/sh -c) in the same sandbox as the Python tool: the same files, "
    "in the working directory /work. Input should be one shell command line; the answer is "
    "what it printed (stdout and stderr together) and its exit status."
)


class ShellInputs(BaseModel):
    command: str = Field(description="the shell command line to run")


class ShellTool(BaseTool):
    """Runs a shell command in the session of ``python_repl`` (its timeout,
    output budget and jail): the answer is the command's output, then
    ``[exit status N]``; past the timeout, the command and every process it
    started are stopped and the answer says so. Its description is
    :data:`SHELL_DESCRIPTION` followed by the jail's facts."""

    name: str = "shell"
    description: str = SHELL_DESCRIPTION
    args_schema: Type[BaseModel] = ShellInputs
    python_repl: PythonREPL = Field(default_factory=PythonREPL)

    @model_validator(mode="after")
    def _describe_the_jail(self) -> "ShellTool":
        if "description" not in self.model_fields_set:
            self.description = SHELL_DESCRIPTION + " " + self.python_repl.facts.describe()
        return self

    def _run(self, command: str, run_manager: Optional[CallbackManagerForToolRun] = None) -> str:
        repl = self.python_repl
        limit = repl.timeout
        result = run_shell(repl.session, command, limit)
        text = result.stdout + result.stderr
        if result.timed_out:
            text += ("" if not text or text.endswith("\n") else "\n") + (
                "Execution timed out after %s s: the command and every process it started "
                "were stopped." % ("?" if limit is None else "%g" % limit))
            if result.restarted:
                text += " The sandbox was restarted: its variables and files are gone."
            return fit_for_model(text, repl.max_output_chars,
                                 result.stdout_omitted + result.stderr_omitted)
        code = exit_code(result)
        if code is None:
            err = result.error or CellError("Error", "the command did not run to its end")
            text += ("" if not text or text.endswith("\n") else "\n") + str(err)
        else:
            # The no-network note when the command failed as a refused socket does.
            tail = text[-4000:]
            note = network_note(CellError("OSError", tail, tail), repl.network) \
                if code != 0 else None
            text += ("" if not text or text.endswith("\n") else "\n") + \
                "[exit status %d]" % code
            if note:
                text += "\n" + note
        return fit_for_model(text, repl.max_output_chars,
                             result.stdout_omitted + result.stderr_omitted)

    async def _arun(self, command: str,
                    run_manager: Optional[AsyncCallbackManagerForToolRun] = None) -> str:
        # In a thread: the event loop goes on while the command runs.
        return await run_in_executor(None, self._run, command)

    def close(self) -> None:
        self.python_repl.close()


def session_tools(python_repl: Optional[PythonREPL] = None, *, timeout: Optional[float] = 60.0,
                  max_output_chars: Optional[int] = DEFAULT_OUTPUT_BUDGET,
                  **session_options: Any) -> List[BaseTool]:
    """``[Python_REPL, shell]`` sharing one session: ``python_repl``'s, else a
    new PythonREPL's (``timeout``, ``max_output_chars``, and ``session_options``
    as Session takes them: ``rootfs``, ``memory``, ``net="allow"``,
    ``allow_hosts``, ...; tracebacks on). Close either tool (or the REPL) to
    end the jail."""
    repl = python_repl or PythonREPL(timeout=timeout, max_output_chars=max_output_chars,
                                     traceback=True, **session_options)
    return [PythonREPLTool(python_repl=repl), ShellTool(python_repl=repl)]
