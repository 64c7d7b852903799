"""Shell commands in a Session: ``/bin/sh -c`` run by the session's interpreter."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ._session import CellResult, Session

# The command runs under /bin/sh with stdin from /dev/null (a command that reads its
# input must not wait forever) and stderr into stdout, so that the output interleaves
# as a terminal shows it. A signal's death is reported as a shell does: 128 + signal.
# On a timeout the interpreter's KeyboardInterrupt kills the shell, and the session
# kills every other process the failed cell started (kill_failed_cell_processes).
SHELL_SOURCE = r'''
def sh(command):
    import subprocess
    rc = subprocess.call(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                         stderr=subprocess.STDOUT)
    return 128 - rc if rc < 0 else rc
'''


def call_code(source: str, function: str, args: Tuple[Any, ...]) -> str:
    """A cell that calls ``function(*args)``, defined in ``source``, as one
    expression: nothing is left in the namespace the model's Python shares."""
    return "(lambda ns: (exec(%r, ns), ns[%r](*%r))[1])({})" % (source, function, args)


def in_jail(session: Session, source: str, function: str, args: Tuple[Any, ...],
            timeout: Optional[float]) -> CellResult:
    """``function(*args)``, defined in ``source``, run in ``session`` (see call_code)."""
    return session.run(call_code(source, function, args), timeout=timeout, want_data=True)


def shell_code(command: str) -> str:
    """The cell that runs ``command`` with ``/bin/sh -c`` in the session's working
    directory; its value is the exit status (an int) when it ran to its end."""
    return call_code(SHELL_SOURCE, "sh", (command,))


def run_shell(session: Session, command: str, timeout: Optional[float]) -> CellResult:
    """Run ``command`` in ``session`` (see shell_code)."""
    return session.run(shell_code(command), timeout=timeout, want_data=True)


def exit_code(result: CellResult) -> Optional[int]:
    """The command's exit status, or None when it did not run to its end."""
    if result.error is not None or result.timed_out or result.restarted:
        return None
    return result.data if type(result.data) is int else None


def cut(data: bytes, budget: int, omitted: int) -> Tuple[str, bool]:
    """``data`` as text of at most ``budget`` bytes (its start and end, with a
    line saying how many bytes were left out), and whether anything was: by this
    cut, or already by the session (``omitted``; its text then says so)."""
    if len(data) <= budget:
        return data.decode("utf-8", "replace"), omitted > 0
    half = budget // 2
    head, tail = data[:half], data[len(data) - half:] if half else b""
    return (head.decode("utf-8", "ignore") + "\n[... %d bytes of output omitted ...]\n"
            % (len(data) - 2 * half) + tail.decode("utf-8", "ignore")), True
