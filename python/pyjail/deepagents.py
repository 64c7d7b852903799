"""A deepagents sandbox backend whose shell and files are in a pyjail jail.

:class:`PyjailSandbox` implements deepagents' ``SandboxBackendProtocol``
(through its ``BaseSandbox``): ``execute(command, timeout=)`` runs a shell
command in one long-lived jail (a :class:`~pyjail.Session`, on the ``data``
rootfs when it is installed: busybox's shell tools, ``python3``, ``pip``),
and the file operations (``ls``, ``read``, ``write``, ``edit``, ``glob``,
``grep``, ``delete``, ``upload_files``, ``download_files``) act on the jail's
filesystem, never the host's. ``/work`` is the working directory; it and
``/tmp`` are writable and last as long as the backend (or until the jail has
to be restarted, which the command's output then says). Every path is an
absolute path in the jail, without ``..``.

    import pyjail
    from deepagents import create_deep_agent
    from pyjail.deepagents import PyjailSandbox

    with PyjailSandbox(memory="1G", limits=pyjail.Limits(pids=64)) as sandbox:
        agent = create_deep_agent(model=model, backend=sandbox)
        agent.invoke({"messages": [{"role": "user", "content": "..."}]})

Needs ``deepagents`` (``pip install 'pyjail-sandbox[deepagents]'``).
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import posixpath
import uuid
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from deepagents.backends.protocol import (FILE_NOT_FOUND, INVALID_PATH, IS_DIRECTORY,
                                          PERMISSION_DENIED, DeleteResult, EditResult, ExecuteResponse,
                                          FileDownloadResponse, FileUploadResponse, GlobResult,
                                          GrepResult, LsResult, ReadResult, WriteResult)
from deepagents.backends.sandbox import BaseSandbox

from ._agents import DATA_ROOTFS, egress, read_facts
from ._common import JailError, Limits, OutputCaps, Size, moved_keywords
from ._async import AsyncSession
from ._session import CellResult, Session, SessionError
from ._shell import cut, exit_code, in_jail, run_shell, shell_code

__all__ = ["PyjailSandbox", "DEFAULT_TIMEOUT", "DEFAULT_MAX_OUTPUT_BYTES"]

DEFAULT_TIMEOUT = 120
"""Seconds a command may run when ``execute`` is given no timeout (deepagents' own default)."""
DEFAULT_MAX_OUTPUT_BYTES = 100_000
"""The output ``execute`` returns at most, start and end kept (as LocalShellBackend)."""
HELPER_OUTPUT_BYTES = 1 << 20
"""The output budget of the commands BaseSandbox's file operations run (a read's page
is up to 500 KiB): never the model's budget, which would cut their JSON."""
MAX_PATH = 4096
WORKDIR = "/work"
GREP_TIMEOUT = 30.0
GREP_MAX_MATCHES = 1000
GREP_LINE_CHARS = 500
GREP_BUDGET_CHARS = 60_000
"""What grep sends back at most (paths and lines): a cell's answer is bounded."""

#: Keywords of PyjailSandbox() of the previous release, and where they went (as Session's).
_MOVED = {"pids": ("limits", "pids"), "cpu_time": ("limits", "cpu_time"),
          "wall_time": ("limits", "wall_time"), "tmpfs_size": ("limits", "tmpfs_size"),
          "net_resolve": ("options", "net_resolve")}

# busybox's grep has neither -Z nor --include: the literal search runs in Python,
# in the jail, with bounds on the matches and the length of a line sent back.
_GREP = r'''
def grep(pattern, root, glob, cap, line_chars, budget, exclude):
    import os, re, fnmatch
    def path_re(pat):
        out, i = "", 0
        while i < len(pat):
            if pat.startswith("**/", i):
                out += "(?:.*/)?"; i += 3
            elif pat.startswith("**", i):
                out += ".*"; i += 2
            elif pat[i] == "*":
                out += "[^/]*"; i += 1
            elif pat[i] == "?":
                out += "[^/]"; i += 1
            else:
                out += re.escape(pat[i]); i += 1
        return re.compile(out + r"\Z")
    by_path = path_re(glob.lstrip("/")) if glob and "/" in glob else None
    def wanted(rel):
        if not glob:
            return True
        if by_path is not None:
            return by_path.match(rel) is not None
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    matches, more = [], False
    def scan(path, rel):
        nonlocal more
        try:
            with open(path, "rb") as f:
                if b"\0" in f.read(8192):
                    return True
                f.seek(0)
                for n, raw in enumerate(f, 1):
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if pattern in line:
                        text = line[:line_chars]
                        budget[0] -= len(path) + len(text)
                        if len(matches) >= cap or budget[0] < 0:
                            more = True
                            return False
                        matches.append([path, n, text])
        except OSError:
            pass
        return True
    root = os.path.abspath(root)
    if os.path.isfile(root):
        scan(root, os.path.basename(root))
        return matches, more
    if not os.path.isdir(root):
        return "no such file or directory", False
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in exclude and not (
            top == "/" and d in ("proc", "sys", "dev")))
        for name in sorted(files):
            path = os.path.join(top, name)
            if wanted(os.path.relpath(path, root)) and not scan(path, name):
                return matches, more
    return matches, more
'''


# Set while a file operation of BaseSandbox runs its helper commands through execute();
# a context variable, so that asyncio.to_thread (which copies the context) carries it.
_HELPER: "contextvars.ContextVar[bool]" = contextvars.ContextVar("pyjail_deepagents_helper",
                                                                 default=False)


class _Helper:
    def __enter__(self) -> None:
        self._token = _HELPER.set(True)

    def __exit__(self, *exc: Any) -> None:
        _HELPER.reset(self._token)


def _search_root(path: Optional[str]) -> str:
    """glob's and grep's root: /work when none (or /) is named. deepagents' tools
    default to /, and the rootfs's tens of thousands of files are not the agent's."""
    return WORKDIR if path in (None, "", "/") else path  # type: ignore[return-value]


def _check_path(path: Any) -> Optional[str]:
    """Why ``path`` is refused, or None: absolute, in the jail, without ``..``.

    Closes a path that a caller's rules match as one directory while it names
    another: ``/work/public/../private/key`` passes a check for ``/work/public/``
    (deepagents' permission rules, a CompositeBackend's route, an application's
    own allowlist), and deepagents' middleware checks only the model's tool
    calls, not direct calls such as upload_files/download_files. (Every path,
    symlinks included, resolves in the jail: none names a host file.)"""
    if not isinstance(path, str) or not path:
        return "a path must be a non-empty string"
    if "\0" in path:
        return "a path cannot contain a NUL byte"
    if len(path) > MAX_PATH:
        return "a path is at most %d characters" % MAX_PATH
    if not path.startswith("/"):
        return "%r is not absolute: paths in the sandbox start with / (e.g. /work/%s)" % (
            path, path)
    if ".." in path.split("/"):
        return "%r has a '..' component: name the file by its absolute path" % path
    return None


def _oserror_code(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return FILE_NOT_FOUND
    if isinstance(e, IsADirectoryError):
        return IS_DIRECTORY
    if isinstance(e, PermissionError) or e.errno == errno.EROFS:
        return PERMISSION_DENIED
    if isinstance(e, NotADirectoryError) or e.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return INVALID_PATH
    return "%s: %s" % (type(e).__name__, e.strerror or e)


class PyjailSandbox(BaseSandbox):
    """A deepagents sandbox backend: one pyjail jail for the backend's life.

    ``execute`` runs ``command`` with ``/bin/sh -c`` in the jail, in ``/work``,
    and returns its combined stdout and stderr (at most ``max_output_bytes``:
    the start and the end, with a marker where the middle was left out, and
    ``truncated`` set), and its exit code. A command that runs past its
    timeout (``execute``'s ``timeout=``, else ``timeout``; 0: none) is stopped
    with every process it started and gets exit code 124; the jail stays as it
    was, unless its interpreter did not answer either: then a fresh jail
    replaces it and the output says that the files are gone.

    The jail: ``profile`` (``repl``), ``rootfs`` (None: ``data`` when
    installed, else the default one), ``memory``, ``limits`` (pyjail.Limits:
    ``pids``, ``cpu_time``, ``wall_time``, ``tmpfs_size``, ...), ``env``, and
    the network: none by default, or controlled egress with ``net="allow"``
    and ``allow_hosts`` (e.g. ``allow_hosts=["pypi.org",
    "files.pythonhosted.org"]`` lets ``pip install --user`` work). ``options``
    takes any other pyjail option by name (``{"net_resolve": {"index.internal":
    "10.0.0.5"}}``), as Session does. ``max_file_bytes`` caps one upload or
    download. Or pass ``session=``: a Session of your own, which the backend
    uses as it is (and closes with itself only if ``close_session`` is
    true). The keywords ``limits`` replaced (``pids=``, ``cpu_time=``, ...)
    and ``net_resolve=`` still work, with a DeprecationWarning, until the
    next release.
    """

    def __init__(self, *, session: Optional[Session] = None, profile: str = "repl",
                 rootfs: Optional[Union[str, Any]] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                 memory: Optional[Size] = None, net: Optional[str] = None,
                 allow_hosts: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
                 options: Optional[Mapping[str, Any]] = None, limits: Optional[Limits] = None,
                 max_file_bytes: int = 64 << 20, binary: Optional[str] = None,
                 close_session: Optional[bool] = None, **_deprecated: Any) -> None:
        if max_output_bytes < 1:
            raise ValueError("max_output_bytes must be at least 1")
        groups: dict = {"limits": limits, "options": options}
        moved_keywords("PyjailSandbox", _deprecated, _MOVED, groups)
        self.timeout = timeout
        self.max_output_bytes = int(max_output_bytes)
        self._id = "pyjail-" + uuid.uuid4().hex[:12]
        if session is not None:
            self._session = session
            self._rootfs_name = None
            self._close_session = bool(close_session)
            return
        caps = OutputCaps(max_output=max(self.max_output_bytes, HELPER_OUTPUT_BYTES),
                          max_file_bytes=max_file_bytes)
        kwargs: dict = dict(profile=profile, memory=memory, net=net, allow_hosts=allow_hosts,
                            env=env, options=groups["options"], limits=groups["limits"],
                            binary=binary, caps=caps)
        if rootfs is not None:
            self._session = Session(rootfs=rootfs, **kwargs)
            self._rootfs_name: Optional[str] = str(rootfs)
        else:
            try:
                self._session = Session(rootfs=DATA_ROOTFS, **kwargs)
                self._rootfs_name = DATA_ROOTFS
            except JailError as e:
                if e.step != "rootfs" or "no rootfs named %r" % DATA_ROOTFS not in e.message:
                    raise
                self._session = Session(**kwargs)
                self._rootfs_name = "default"
        self._close_session = True if close_session is None else bool(close_session)

    # ------------------------------------------------------------------ life

    @property
    def id(self) -> str:
        return self._id

    @property
    def session(self) -> Session:
        """The jail's session (its ``restarts`` counts the jails replaced)."""
        return self._session

    def describe(self) -> str:
        """What a model should know of the sandbox, for ``create_deep_agent``'s
        ``system_prompt``: its tools and packages, its network (none, or the
        only hosts it reaches), where the files are."""
        network, hosts = egress(self._session)
        facts = read_facts(self._session, self._rootfs_name, network)
        python = "Python %s (python3)" % facts.python if facts.python else "Python (python3)"
        if facts.packages:
            python += " with these packages: %s" % ", ".join(facts.packages)
        if not network:
            net = (" There is no network in this sandbox: commands cannot download anything, "
                   "call web APIs or pip install packages.")
        elif hosts:
            net = (" The network reaches only these hosts (a port after the colon; else 80 and "
                   "443): %s. Nothing else is reachable: other names do not resolve."
                   % ", ".join(hosts))
            if "pip" in facts.packages:
                net += (" If the package index is among them, python3 -m pip install --user "
                        "NAME installs a missing package.")
        else:
            net = ""
        where = " (rootfs %r)" % facts.rootfs if facts.rootfs else ""
        tools = " with busybox's tools" if exit_code(run_shell(
            self._session, "command -v busybox >/dev/null", 30.0)) == 0 else ""
        return ("Shell commands run in an isolated Linux sandbox%s: /bin/sh%s, %s.%s Files are "
                "in /work, the working directory (and /tmp); they stay from one command to "
                "the next." % (where, tools, python, net))

    def close(self) -> None:
        """End the jail and every process in it (if the backend made it)."""
        if self._close_session:
            self._session.close()

    def __enter__(self) -> "PyjailSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --------------------------------------------------------------- execute

    def _in_jail(self, source: str, function: str, args: Tuple[Any, ...],
                 timeout: Optional[float]) -> Any:
        return in_jail(self._session, source, function, args, timeout)

    def _limit(self, timeout: Optional[int]) -> Optional[float]:
        limit = self.timeout if timeout is None else timeout
        if limit is not None and limit < 0:
            raise ValueError("timeout must be >= 0, got %r" % (limit,))
        return None if not limit else float(limit)

    def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """Run ``command`` with ``/bin/sh -c`` in the jail (see the class)."""
        if not command or not isinstance(command, str):
            return ExecuteResponse(output="Error: Command must be a non-empty string.",
                                   exit_code=1)
        seconds = self._limit(timeout)
        restarts = self._session.restarts
        result = run_shell(self._session, command, seconds)
        return self._response(result, seconds, timeout is not None, restarts)

    async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """execute(), awaited: the event loop goes on while the command runs, and
        cancelling the await stops the command (and every process it started)."""
        if not command or not isinstance(command, str):
            return ExecuteResponse(output="Error: Command must be a non-empty string.",
                                   exit_code=1)
        seconds = self._limit(timeout)
        restarts = self._session.restarts
        result = await AsyncSession.wrap(self._session).run(shell_code(command), seconds,
                                                            want_data=True)
        return self._response(result, seconds, timeout is not None, restarts)

    def _response(self, result: CellResult, seconds: Optional[float], custom: bool,
                  restarts: int) -> ExecuteResponse:
        budget = HELPER_OUTPUT_BYTES if _HELPER.get() else self.max_output_bytes
        # The session kept the start and end of a flood (its marker in between, within
        # HELPER_OUTPUT_BYTES); the model gets at most its own budget of that.
        raw = (result.stdout + result.stderr).encode("utf-8", "replace")
        output, truncated = cut(raw, budget, result.stdout_omitted + result.stderr_omitted)
        restarted = result.restarted or self._session.restarts != restarts
        notes: List[str] = []
        if result.timed_out:
            code: Optional[int] = 124
            notes.append("Error: Command timed out after %s seconds%s; it was stopped with "
                         "every process it started. For long-running commands, re-run using "
                         "the timeout parameter." % (
                             "%g" % seconds if seconds is not None else "?",
                             " (custom timeout)" if custom else ""))
        elif result.error is not None:
            code = 1 if result.error.type != "ProtocolError" else None
            if not restarted:
                notes.append("Error: the sandbox could not run the command: %s: %s"
                             % (result.error.type, result.error.message))
        else:
            code = result.data if type(result.data) is int else None
        if restarted:
            notes.append("The sandbox was restarted (%s): every file in /work and /tmp, and "
                         "every package installed, is gone." % (
                             result.error.message if result.error is not None else
                             "its jail had ended"))
        if notes:
            output = output + ("" if not output or output.endswith("\n") else "\n") + \
                "\n".join(notes)
        return ExecuteResponse(output=output, exit_code=code, truncated=truncated)

    # ----------------------------------------------------- file operations

    # Each checks its path, then runs BaseSandbox's helper command in the jail with
    # the helpers' output budget.

    def ls(self, path: str) -> LsResult:
        why = _check_path(path)
        if why:
            return LsResult(error="Error: " + why)
        with _Helper():
            return super().ls(path)

    async def als(self, path: str) -> LsResult:
        why = _check_path(path)
        if why:
            return LsResult(error="Error: " + why)
        with _Helper():
            return await super().als(path)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        why = _check_path(file_path)
        if why:
            return ReadResult(error="Error: " + why)
        with _Helper():
            return super().read(file_path, offset, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        why = _check_path(file_path)
        if why:
            return ReadResult(error="Error: " + why)
        with _Helper():
            return await super().aread(file_path, offset, limit)

    def write(self, file_path: str, content: str) -> WriteResult:
        why = _check_path(file_path)
        if why:
            return WriteResult(error="Error: " + why)
        with _Helper():
            return super().write(file_path, content)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        why = _check_path(file_path)
        if why:
            return WriteResult(error="Error: " + why)
        with _Helper():
            return await super().awrite(file_path, content)

    def edit(self, file_path: str, old_string: str, new_string: str,
             replace_all: bool = False) -> EditResult:
        why = _check_path(file_path)
        if why:
            return EditResult(error="Error: " + why)
        with _Helper():
            return super().edit(file_path, old_string, new_string, replace_all)

    async def aedit(self, file_path: str, old_string: str, new_string: str,
                    replace_all: bool = False) -> EditResult:
        why = _check_path(file_path)
        if why:
            return EditResult(error="Error: " + why)
        with _Helper():
            return await super().aedit(file_path, old_string, new_string, replace_all)

    def delete(self, file_path: str) -> DeleteResult:
        why = _check_path(file_path)
        if why:
            return DeleteResult(error="Error: " + why)
        if posixpath.normpath(file_path) in ("/", "//"):
            return DeleteResult(error="Error: refusing to delete /")
        with _Helper():
            return super().delete(file_path)

    async def adelete(self, file_path: str) -> DeleteResult:
        return await asyncio.to_thread(self.delete, file_path)

    def glob(self, pattern: str, path: Optional[str] = None) -> GlobResult:
        """Files matching ``pattern`` under ``path`` (``/work`` when none or ``/``)."""
        root = _search_root(path)
        why = _check_path(root)
        if why:
            return GlobResult(error="Error: " + why)
        with _Helper():
            return super().glob(pattern, root)

    async def aglob(self, pattern: str, path: Optional[str] = None) -> GlobResult:
        root = _search_root(path)
        why = _check_path(root)
        if why:
            return GlobResult(error="Error: " + why)
        with _Helper():
            return await super().aglob(pattern, root)

    def grep(self, pattern: str, path: Optional[str] = None, glob: Optional[str] = None, *,
             max_count: Optional[int] = None) -> GrepResult:
        """Lines of files under ``path`` (default ``/work``) holding the literal
        ``pattern``, in files whose name (or, with a ``/``, path) matches
        ``glob``; binary files and ``.git`` are skipped. ``path``: ``/work``
        when none or ``/``."""
        root = _search_root(path)
        why = _check_path(root)
        if why:
            return GrepResult(error="Error: " + why)
        if not isinstance(pattern, str) or not pattern:
            return GrepResult(error="Error: the pattern must be a non-empty string")
        cap = GREP_MAX_MATCHES if max_count is None else max(0, min(int(max_count),
                                                                    GREP_MAX_MATCHES))
        result = self._in_jail(_GREP, "grep", (pattern, root, glob, cap, GREP_LINE_CHARS,
                                               [GREP_BUDGET_CHARS],
                                               list(self.grep_exclude_dirs)), GREP_TIMEOUT)
        if result.timed_out:
            return GrepResult(error="Error: grep timed out after %g s. Try a more specific "
                                    "pattern or a narrower path." % GREP_TIMEOUT)
        data = result.data
        if not result.ok or not (isinstance(data, tuple) and len(data) == 2):
            return GrepResult(error="Error: grep failed in the sandbox: %s"
                              % (result.error or "no answer"))
        found, more = data
        if isinstance(found, str):
            return GrepResult(error="Path '%s': %s" % (root, found[:200]))
        if not isinstance(found, list):
            return GrepResult(error="Error: grep failed in the sandbox: a malformed answer")
        # What the jail sent back is checked before it becomes the model's input.
        matches = [{"path": p, "line": n, "text": t} for p, n, t in
                   (m for m in found[:cap] if isinstance(m, list) and len(m) == 3)
                   if isinstance(p, str) and type(n) is int and isinstance(t, str)]
        return GrepResult(matches=matches, truncated=bool(more))

    async def agrep(self, pattern: str, path: Optional[str] = None, glob: Optional[str] = None,
                    *, max_count: Optional[int] = None) -> GrepResult:
        return await asyncio.to_thread(self.grep, pattern, path, glob, max_count=max_count)

    # ------------------------------------------------------ upload/download

    def upload_files(self, files: List[Tuple[str, bytes]]) -> List[FileUploadResponse]:
        """Write each (path, bytes) in the jail, parents created; at most
        the session's ``max_file_bytes`` each."""
        out: List[FileUploadResponse] = []
        for path, data in files:
            why = _check_path(path)
            if why:
                out.append(FileUploadResponse(path=path, error=INVALID_PATH))
                continue
            if not isinstance(data, (bytes, bytearray, memoryview)):
                out.append(FileUploadResponse(path=path, error="content must be bytes"))
                continue
            if len(data) > self._session.max_file_bytes:
                out.append(FileUploadResponse(
                    path=path, error="%d bytes, more than the sandbox's limit of %d per file"
                    % (len(data), self._session.max_file_bytes)))
                continue
            try:
                self._session.upload(path, bytes(data))
                out.append(FileUploadResponse(path=path))
            except OSError as e:
                out.append(FileUploadResponse(path=path, error=_oserror_code(e)))
            except SessionError as e:
                out.append(FileUploadResponse(path=path, error=str(e)))
        return out

    def download_files(self, paths: List[str]) -> List[FileDownloadResponse]:
        """The bytes of each file in the jail; at most the session's
        ``max_file_bytes`` each (a larger one is an error, not a cut copy)."""
        out: List[FileDownloadResponse] = []
        for path in paths:
            why = _check_path(path)
            if why:
                out.append(FileDownloadResponse(path=path, error=INVALID_PATH))
                continue
            try:
                out.append(FileDownloadResponse(path=path, content=self._session.download(path)))
            except OSError as e:
                out.append(FileDownloadResponse(path=path, error=_oserror_code(e)))
            except SessionError as e:
                out.append(FileDownloadResponse(path=path, error=str(e)))
        return out
