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
final answer tool's own return value. Managed agents are called the same way.

Needs ``smolagents`` (from a pyjail checkout: ``pip install './python[smolagents]'``;
the distribution is ``pyjail-sandbox``: the PyPI project named ``pyjail`` is
an unrelated one).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union

from smolagents.local_python_executor import CodeOutput, PythonExecutor

from ._common import PyjailError
from ._session import CellResult, Session

__all__ = ["PyjailExecutor", "PyjailExecutionError"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a code action may run (smolagents' own default for its local executor)."""


class PyjailExecutionError(PyjailError):
    """A code action failed; the message holds its traceback (the agent shows
    it to the model as the step's error)."""


class PyjailExecutor(PythonExecutor):  # type: ignore[misc]
    """A smolagents code executor backed by a pyjail Session.

    ``timeout`` is the time limit of one code action in seconds (None: none).
    ``session`` is a Session to use (it stays open when the executor is
    cleaned up); otherwise the executor starts one with ``session_options``
    (e.g. ``memory="2G"``, ``binary=...``) and closes it in ``cleanup()``.
    ``rootfs`` is the root filesystem that session runs in, as ``pyjail
    --rootfs`` takes it: a name (``"data"``, see ``pyjail rootfs list``) or a
    path (None: the installed one).
    ``additional_imports`` and ``logger`` are accepted for compatibility with
    smolagents' executors; nothing is installed (the jail has no network).
    """

    def __init__(self, additional_imports: Optional[List[str]] = None, logger: Any = None, *,
                 session: Optional[Session] = None, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 max_print_outputs_length: int = 50_000,
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 **session_options: Any) -> None:
        if rootfs is not None:
            session_options["rootfs"] = rootfs
        self.additional_imports = list(additional_imports or [])
        self.logger = logger
        self.timeout = timeout
        self.max_print_outputs_length = max_print_outputs_length
        self._owns_session = session is None
        self.session = session if session is not None else Session(**session_options)
        self._variables: Dict[str, Any] = {}
        self._restarts_seen = self.session.restarts
        self.state: Dict[str, Any] = {"_print_outputs": ""}

    # --------------------------------------------------------- PythonExecutor

    def send_tools(self, tools: Dict[str, Any]) -> None:
        """Make each tool (and managed agent) callable by name from the code."""
        docs = {}
        for name, tool in tools.items():
            desc = getattr(tool, "description", None) or getattr(tool, "__doc__", None) or ""
            inputs = getattr(tool, "inputs", None)
            if isinstance(inputs, dict) and inputs:
                desc += "\n\nArguments: " + ", ".join(
                    "%s (%s)" % (k, v.get("type", "any") if isinstance(v, dict) else "any")
                    for k, v in inputs.items())
            docs[name] = desc
        self.session.expose(dict(tools), ends_cell=[n for n in tools if n == "final_answer"],
                            docs=docs)

    def send_variables(self, variables: Dict[str, Any]) -> None:
        """Put the agent's variables (e.g. ``additional_args``) into the namespace."""
        if not variables:
            return
        self._variables.update(variables)
        failed = self.session.set_variables(variables)
        if failed and self.logger is not None:
            try:
                self.logger.log("pyjail: not sent into the jail: %s" % ", ".join(
                    "%s (%s)" % kv for kv in failed.items()))
            except Exception:
                pass

    def __call__(self, code_action: str) -> CodeOutput:
        result = self.session.run(code_action, timeout=self.timeout, want_data=True)
        logs = self._logs(result)
        self.state["_print_outputs"] = logs
        if self.session.restarts != self._restarts_seen:
            # A fresh interpreter: the tools came back with the session; the
            # agent's variables must be sent again.
            self._restarts_seen = self.session.restarts
            if self._variables:
                self.session.set_variables(self._variables)
        if result.final is not None:
            return CodeOutput(output=result.final.value, logs=logs, is_final_answer=True)
        if result.error is not None or result.timed_out:
            raise PyjailExecutionError(self._error_message(result))
        output = result.data if result.value is not None else None
        return CodeOutput(output=output, logs=logs, is_final_answer=False)

    def _logs(self, result: CellResult) -> str:
        logs = result.stdout
        if result.stderr:
            logs += ("" if not logs or logs.endswith("\n") else "\n") + result.stderr
        limit = self.max_print_outputs_length
        if limit and len(logs) > limit:
            logs = logs[:limit] + "\n[... %d characters of output left out ...]" % (
                len(logs) - limit)
        return logs

    def _error_message(self, result: CellResult) -> str:
        err = result.error
        if result.timed_out and not result.restarted:
            head = ("Code execution timed out after %g s: it was interrupted, and the variables "
                    "it had set are kept.\n" % (self.timeout or 0))
        elif result.restarted:
            head = "Code execution failed: %s\n" % (err.message if err else "")
            return head
        else:
            head = "Code execution failed:\n"
        return head + (str(err) if err is not None else "")

    # --------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        """Close the session if this executor started it."""
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "PyjailExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()
