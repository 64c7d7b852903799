"""pyjail.Session: a persistent jailed interpreter."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set,
                    Tuple, Union)

from . import _hostprocs, _wire
from ._channel import (Channel, ChannelClosed, ChannelError, ChannelTimeout, ProtocolError,
                       ServerRefused)
from ._common import (EXIT_PYJAIL_ERROR, JailError, Limits, OutputCaps, PyjailError, Report, Size,
                      check_name, egress_of, find_binary, jail_args, moved_keywords,
                      render_output, setup_error)
from ._launch import Launched, handshake, launch, server_command
from ._stream import OutputCallback, Streams

__all__ = ["Session", "CellResult", "CellError", "FinalCall", "Image", "JailObject",
           "SessionError", "SessionClosedError", "SessionDiedError"]


class SessionError(PyjailError):
    """The session cannot do what was asked."""


class SessionClosedError(SessionError):
    """The session was closed."""


class SessionDiedError(SessionError):
    """The session's interpreter died and the session was not allowed to
    restart it (``auto_restart=False``)."""

    def __init__(self, message: str, report: Optional[Report] = None) -> None:
        super().__init__(message)
        self.report = report


JailObject = _wire.JailObject


@dataclass
class CellError:
    """The exception a cell ended with (``type`` is its class name), or, for
    ``InterpreterDied`` and ``ProtocolError``, what happened to the session."""

    type: str
    message: str
    traceback: str = ""
    repr: str = ""
    """repr() of the exception (LangChain's PythonREPL reports errors so)."""
    short_traceback: str = ""
    """The traceback a model needs: the frames of the cells' own code (each run
    of library frames between them as one line naming the libraries) and the
    exception, without chained exceptions; ``traceback`` is the whole one."""

    def __str__(self) -> str:
        return self.traceback.rstrip("\n") if self.traceback else "%s: %s" % (self.type, self.message)


@dataclass
class FinalCall:
    """A call of a host function that ends the cell (see Session.expose)."""

    name: str
    value: Any


@dataclass
class Image:
    """An image a cell showed (a matplotlib figure, ``display(img)``), as a
    notebook would: its MIME type (``image/png``, ``image/jpeg`` or
    ``image/svg+xml``) and its bytes, which the host never decodes."""

    mime: str
    data: bytes = field(repr=False)

    def __repr__(self) -> str:
        return "Image(mime=%r, %d bytes)" % (self.mime, len(self.data))

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        with open(path, "wb") as f:
            f.write(self.data)

    def _repr_png_(self) -> Optional[bytes]:
        return self.data if self.mime == "image/png" else None

    def _repr_jpeg_(self) -> Optional[bytes]:
        return self.data if self.mime == "image/jpeg" else None


@dataclass
class CellResult:
    """What one cell did."""

    stdout: str = ""
    """Everything the cell wrote to fd 1 (print, os.write, subprocesses), capped."""
    stderr: str = ""
    """Everything the cell wrote to fd 2, capped."""
    value: Optional[str] = None
    """repr() of the cell's trailing expression, or None (none, or it was None)."""
    error: Optional[CellError] = None
    """The exception the cell raised, with its traceback; None if it succeeded."""
    timed_out: bool = False
    """The cell ran out of time and was interrupted (``error`` is then its
    KeyboardInterrupt), or, if ``restarted``, killed."""
    restarted: bool = False
    """The interpreter died or had to be killed, and a fresh one replaced it:
    every variable (and file) of the session is gone."""
    duration_s: float = 0.0
    stdout_omitted: int = 0
    """Bytes of stdout left out of ``stdout`` (past the session's ``max_output``)."""
    stderr_omitted: int = 0
    value_str: Optional[str] = None
    """str() of the trailing expression, when asked for (``run(..., want_str=True)``)."""
    data: Any = None
    """The trailing expression's value itself when it was asked for
    (``run(..., want_data=True)``) and could cross (see ``data_error``), else a
    JailObject with its repr. Plain data, dates and times, Decimal, UUID and
    complex numbers cross as they are; numpy scalars and arrays and pandas
    DataFrames and Series (their dtypes and index) are rebuilt when this
    interpreter has numpy and pandas, else they are JailObjects holding numpy's
    or pandas' own text. Nothing is unpickled."""
    data_error: Optional[str] = None
    """Why the value did not come back as ``data`` (not plain data, or too large)."""
    formats: Dict[str, Any] = field(default_factory=dict)
    """The trailing value as a notebook (or E2B) shows it, by MIME type:
    ``text/plain`` (its repr), ``text/html`` (a DataFrame's table),
    ``text/markdown``, ``text/latex`` (from the object's ``_repr_*_``), and
    ``application/json`` for a dict or list of JSON values; images are in
    ``images``. Empty when the cell had no trailing value."""
    displays: List[Dict[str, Any]] = field(default_factory=list)
    """What the cell's ``display(obj)`` calls showed of objects with rich formats
    (a DataFrame, a dict), each as ``formats`` holds a trailing value (at most 8;
    the repr is also in ``stdout``)."""
    final: Optional[FinalCall] = None
    """Set when the cell ended by calling a host function exposed with ``ends_cell``."""
    processes_killed: int = 0
    """Processes the cell started that were still running when it failed or
    timed out, and were killed (see ``kill_failed_cell_processes``)."""
    report: Optional[Report] = None
    """pyjail's report of the jail that ended, when ``restarted``."""
    images: List[Image] = field(default_factory=list)
    """The images the cell showed, in order: ``plt.show()``, ``display(...)``,
    a trailing figure (or object with ``_repr_png_``), and the figures it left
    open. At most 32, of at most ``max_image_bytes`` in all (the jail notes on
    stderr what it left out)."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and not self.restarted

    def text(self, *, value: bool = True) -> str:
        """The cell's output as one string for a person or a language model:
        stdout, stderr, the trailing value's repr, then the traceback and what
        happened to the session."""
        parts: List[str] = []

        def add(s: Optional[str]) -> None:
            if s:
                parts.append(s if s.endswith("\n") else s + "\n")

        add(self.stdout)
        add(self.stderr)
        if value and self.value is not None and self.error is None:
            add(self.value)
        if self.error is not None:
            add(str(self.error))
        return "".join(parts)


_NOT_GIVEN: Any = object()

#: Keywords of Session() of the previous release, and where they went.
_MOVED = {"cpu_time": ("limits", "cpu_time"), "pids": ("limits", "pids"),
          "tmpfs_size": ("limits", "tmpfs_size"), "wall_time": ("limits", "wall_time"),
          "output_limit": ("caps", "max_output"), "max_file_bytes": ("caps", "max_file_bytes"),
          "max_image_bytes": ("caps", "max_image_bytes"),
          "ro_bind": ("options", "ro_bind"), "net_resolve": ("options", "net_resolve"),
          "extra_args": ("extra_args", "")}

#: The caps a Session uses, and their defaults.
SESSION_CAPS = {"max_output": 1 << 20, "max_file_bytes": 64 << 20, "max_image_bytes": 8 << 20}


def _holds_pid(proc: Any) -> bool:
    """Whether ``proc.pid`` still names the pyjail it started: a Popen's child until
    it is waited for (this process reaps it), a Pool's launched pyjail while its pidfd
    says so."""
    holds = getattr(proc, "holds_pid", None)
    return bool(holds()) if holds is not None else proc.poll() is None


class HostFileCopies:
    """upload_file and download_file, for a session with upload and download
    (Session, and pyjail.remote's RemoteSession)."""

    if TYPE_CHECKING:
        def upload(self, name: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> int: ...

        def download(self, name: str, *, max_bytes: Optional[int] = None) -> bytes: ...

    def upload_file(self, host_path: Union[str, "os.PathLike[str]"],
                    name: Optional[str] = None) -> int:
        """Copy a host file into the jail (default name: its base name)."""
        with open(host_path, "rb") as f:
            data = f.read()
        return self.upload(name or os.path.basename(os.fspath(host_path)), data)

    def download_file(self, name: str, host_path: Union[str, "os.PathLike[str]"]) -> int:
        """Copy a file out of the jail to ``host_path``. Returns its size."""
        data = self.download(name)
        with open(host_path, "wb") as f:
            f.write(data)
        return len(data)


class Session(HostFileCopies):
    """A persistent Python interpreter in a pyjail jail (the ``repl`` profile).

    ``run(code)`` executes a cell in one long-lived namespace and returns a
    CellResult. A cell that runs out of time gets a KeyboardInterrupt and the
    session keeps its variables. An interpreter that has not answered halfway
    through ``interrupt_grace`` seconds has every process its cells started
    killed from the host (a fork bomb starving it of CPU is the usual cause);
    only one that still does not answer is killed and replaced (the result
    says so). Processes a cell starts never outlive the session; those of a cell
    that fails or times out are killed when it ends (a fork bomb's leftovers,
    a runaway child), while a successful cell's live on, e.g. a server or a
    pool for later cells (``kill_failed_cell_processes``).

    Files move in and out of the jail's work directory (``/work``, a private
    tmpfs) with upload() and download(). Use it as a context manager, or call
    close(): nothing is left behind. close() may be called from any thread: a
    call that is running (a cell, a download) is ended with the jail, and
    raises SessionClosedError.

    Cells share one interpreter: a cell can change what later cells of the
    same session see (and lie about its own results), never the host or
    another session. Everything the jail sends is treated as hostile: a jail
    that breaks the protocol (a malformed frame, one it had no reason to
    send, a file name that is not relative) has its interpreter ended and
    replaced, and the call says so (a CellResult's ``error.type`` is
    ``"ProtocolError"``; other calls raise SessionError).

    The jail: ``profile``; ``rootfs``, the root filesystem as ``pyjail
    --rootfs`` takes it: a name (``"data"``, see ``pyjail rootfs list``) or a
    path (None: the profile's; a name that does not exist raises JailError);
    ``memory``, ``env``; ``net="allow"`` with ``allow_hosts`` is controlled
    egress, as for run(): with the package index allowed, a cell on the
    ``data`` rootfs can pip install into a directory it then puts on
    ``sys.path`` (``python -m pip install --target /tmp/site NAME``).
    ``options`` takes any other pyjail option by name, e.g. ``{"cpus": 2,
    "net_resolve": {"index.internal": "10.0.0.5"}}``. ``limits``
    (pyjail.Limits) holds the rarer limits, ``wall_time`` among them: the
    whole session's life. ``timeout`` is the default time limit of one cell
    (None: no limit). ``caps`` (pyjail.OutputCaps): ``max_output`` bytes of
    each stream a cell's result holds (1 MiB), ``max_file_bytes`` the
    largest upload or download (64 MiB), ``max_image_bytes`` the images of
    one cell (8 MiB, see CellResult.images). The keywords these replaced
    (``pids=``, ``wall_time=``, ``output_limit=``, ``max_file_bytes=``,
    ``net_resolve=``, ...) still work, with a DeprecationWarning, until the
    next release.
    """

    def __init__(self, *, profile: str = "repl",
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 timeout: Optional[float] = None, memory: Optional[Size] = None,
                 net: Optional[str] = None, allow_hosts: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None,
                 options: Optional[Mapping[str, Any]] = None, limits: Optional[Limits] = None,
                 caps: Optional[OutputCaps] = None, binary: Optional[str] = None,
                 interrupt_grace: float = 2.0, kill_failed_cell_processes: bool = True,
                 auto_restart: bool = True, start_timeout: float = 30.0,
                 _defaults: Sequence[str] = (), _launcher: Any = None,
                 **_deprecated: Any) -> None:
        groups: Dict[str, Any] = {"limits": limits, "caps": caps, "options": options}
        extra_args = moved_keywords("Session", _deprecated, _MOVED, groups)
        cap = (groups["caps"] or OutputCaps()).resolved("a Session", SESSION_CAPS)
        self.binary = find_binary(binary)
        self._launcher = _launcher       # a Pool's, which forks each pyjail of this session
        self.timeout = timeout
        self.max_output = cap["max_output"]
        self.max_file_bytes = cap["max_file_bytes"]
        self.max_image_bytes = cap["max_image_bytes"]
        self.interrupt_grace = float(interrupt_grace)
        self.kill_failed_cell_processes = kill_failed_cell_processes
        self.auto_restart = auto_restart
        self.start_timeout = start_timeout
        self.io_timeout = 120.0
        self._args = jail_args(profile=profile, memory=memory, net=net, env=env, rootfs=rootfs,
                               allow_hosts=allow_hosts, limits=groups["limits"],
                               options=groups["options"], extra_args=extra_args,
                               defaults=_defaults)
        self._lock = threading.RLock()       # held by every call, for its whole length
        self._close_lock = threading.Lock()  # held only to set _closed
        self._busy = 0                       # calls in progress (nested: a host function's)
        self._busy_thread: Optional[int] = None
        self._functions: Dict[str, Tuple[Callable[..., Any], str, bool]] = {}
        self._final_values: Dict[str, Any] = {}
        self._next_id = 0
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._jail: Optional[Launched] = None
        self._chan: Optional[Channel] = None
        self._finalizer: Optional["weakref.finalize[Any, Any]"] = None
        self._closed = False
        self._last_stderr = b""
        self._last_returncode: Optional[int] = None
        self._last_lost: Optional[str] = None     # why a Pool's launcher lost the last jail
        # The interrupts sent to the current interpreter, which each cell's request
        # tells it (the server's _await_interrupts): counted, and read for a request,
        # under their own lock (_interrupt comes from other threads).
        self._interrupt_lock = threading.Lock()
        self._interrupts_sent = 0
        self.restarts = 0
        """How many times the interpreter was replaced."""
        self.last_report: Optional[Report] = None
        """pyjail's report of the last jail of this session that ended."""
        self.server_info: Dict[str, Any] = {}
        self._start()

    # ------------------------------------------------------------------ life

    def _start(self) -> None:
        # close() from another thread while a call restarts the interpreter.
        self._check_open()
        jail = launch(self.binary, self._args, server_command(), launcher=self._launcher)
        proc = jail.proc
        with self._interrupt_lock:
            self._interrupts_sent = 0     # a new interpreter has had none
            self._jail, self._proc = jail, proc
        # Nothing is left behind, also at exit or garbage collection.
        self._finalizer = weakref.finalize(self, jail.close)
        assert proc.stdin is not None and proc.stdout is not None
        max_body = max(self.max_file_bytes,
                       4 * self.max_output + self.max_image_bytes) + (1 << 20)
        deadline = time.monotonic() + self.start_timeout
        try:
            self._chan = Channel(proc.stdin.fileno(), proc.stdout.fileno(), max_body)
            self.server_info = handshake(self._chan, deadline)
            if self._functions:
                # The host functions of the session come back with every new interpreter.
                self._raw_request({"op": "expose", "functions": {
                    n: doc for n, (_, doc, _e) in self._functions.items()},
                    "ends_cell": [n for n, (_, _d, e) in self._functions.items() if e]},
                    b"", deadline)
        except ServerRefused as e:
            self._stop()
            raise JailError("pyjail: %s" % e) from None
        except ChannelError as e:
            rep = self._stop()
            stderr = self._last_stderr
            if proc.returncode == EXIT_PYJAIL_ERROR and (rep is None or rep.status == "setup-error"):
                raise setup_error(stderr, rep) from None
            detail = stderr.decode("utf-8", "replace").strip()
            raise SessionError("the session's interpreter did not start (%s; %s)%s"
                               % (e, self._why(rep), (": " + detail[-2000:]) if detail else "")
                               ) from None

    def _stop(self, graceful: bool = False) -> Optional[Report]:
        """End the current jail; return its report. Leaves nothing behind."""
        proc, chan = self._proc, self._chan
        if proc is None:
            return None
        if graceful and chan is not None and proc.poll() is None:
            try:
                chan.send({"op": "bye"}, deadline=time.monotonic() + 1.0)
                proc.wait(2.0)
            except (ChannelError, subprocess.TimeoutExpired, JailError):
                pass
        if proc.poll() is None:
            # SIGKILL to pyjail: its jail dies with it (parent-death signal).
            proc.kill()
        self._last_lost = None
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            pass
        except JailError as e:
            # A Pool's launcher that ended took this pyjail with it (_pool._LaunchedProcess).
            self._last_lost = str(e)
        self._last_returncode = proc.returncode
        jail = self._jail
        assert jail is not None
        rep = jail.report()
        if rep is not None:
            self.last_report = rep
        self._last_stderr = jail.stderr()
        if self._finalizer is not None:
            self._finalizer()      # closes the pipes and the report and stderr files
            self._finalizer = None
        self._proc = self._chan = self._jail = None
        return rep

    def _restart(self) -> None:
        self._stop()
        self._start()
        self.restarts += 1

    def restart(self) -> None:
        """Replace the interpreter with a fresh one (every variable is lost)."""
        with self._call():
            self._check_open()
            self._restart()

    @contextlib.contextmanager
    def _call(self) -> Any:
        """Holds the session for one call. close() does not wait for it: it
        kills the jail, which ends the call, and the call cleans up here."""
        with self._lock:
            self._busy += 1
            self._busy_thread = threading.get_ident()
            try:
                yield
            finally:
                self._busy -= 1
                if not self._busy:
                    self._busy_thread = None
                    if self._closed and self._proc is not None:
                        self._stop()    # close() came while this call ran

    def close(self) -> None:
        """End the session: the jail and every process in it, and the
        driver's temporary files. Safe to call more than once, and from any
        thread: a call in progress (in another thread, stuck or not) is ended
        with the jail and raises SessionClosedError."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                if not self._busy:
                    self._stop(graceful=True)
                    return
            finally:
                self._lock.release()
        # A call is in progress: never wait behind it (a jail that floods the
        # channel or a stuck cell could hold it for long). SIGKILL to pyjail
        # ends the jail; the call then sees the channel close and returns.
        proc = self._proc
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass
        if self._busy_thread != threading.get_ident() and self._lock.acquire(timeout=5.0):
            # Give the call a moment to return, so that the temporary files
            # are gone when close() returns (it removes them on its way out).
            self._lock.release()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def output_limit(self) -> int:
        """``max_output``, by its name of the previous release."""
        warnings.warn("Session.output_limit is deprecated and goes in the next release: use "
                      "Session.max_output", DeprecationWarning, stacklevel=2)
        return self.max_output

    @property
    def egress(self) -> Tuple[Optional[str], List[str]]:
        """The network this session was given: pyjail's ``--net`` mode (None:
        the profile's) and the hosts it may reach (``--allow-host``)."""
        return egress_of(self._args)

    @property
    def pid(self) -> Optional[int]:
        """The host pid of the current pyjail process (None when closed)."""
        return self._proc.pid if self._proc is not None else None

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("the session is closed")

    # -------------------------------------------------------------- requests

    def _new_id(self) -> str:
        self._next_id += 1
        return "r%d" % self._next_id

    def _ensure_alive(self) -> Optional[str]:
        """Restart a session whose interpreter died between calls. Returns what
        happened, for the caller's result, or None if it was alive."""
        self._check_open()
        if self._proc is not None and self._proc.poll() is None:
            return None
        return self._died("before the cell could run")

    def _died(self, when: str) -> str:
        if self._closed:
            raise SessionClosedError("the session was closed %s" % when)
        rep = self._stop()
        why = self._why(rep)
        msg = ("the session's interpreter died %s (%s); " % (when, why))
        if not self.auto_restart:
            self._closed = True
            raise SessionDiedError(msg + "the session is closed", rep)
        self._start()
        self.restarts += 1
        return msg + "a fresh one was started: every variable and file of the session is lost"

    def _why(self, rep: Optional[Report]) -> str:
        if rep is not None:
            return "the jail " + rep.describe()
        if self._last_lost:
            return self._last_lost
        rc = self._last_returncode
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = "signal %d" % -rc
            return "pyjail was killed by %s" % name
        return "pyjail exited with status %s" % rc

    def _raw_request(self, header: Dict[str, Any], body: bytes,
                     deadline: float) -> Tuple[Dict[str, Any], bytes]:
        chan = self._chan
        assert chan is not None
        rid = self._new_id()
        chan.send(dict(header, id=rid), body, deadline)
        while True:
            reply, rbody = chan.recv(deadline)
            op = reply.get("op")
            if op == "call":
                # A thread an earlier cell left running calls a host function.
                self._serve_call(reply, deadline)
            elif reply.get("id") == rid:
                return reply, rbody
            else:
                raise ProtocolError("a %r frame in answer to a %r request"
                                    % (str(op)[:40], header.get("op")))
            # Calls keep the channel readable: the deadline is checked on
            # every frame, not only when the jail falls silent.
            if time.monotonic() >= deadline:
                raise ChannelTimeout("timed out")

    def _request(self, header: Dict[str, Any], body: bytes = b"",
                 timeout: Optional[float] = None,
                 check: Optional[Callable[[Dict[str, Any], bytes], None]] = None
                 ) -> Tuple[Dict[str, Any], bytes]:
        """Send a request that the idle server answers at once; return the
        answer, which ``check`` (if given) vets, raising ProtocolError."""
        deadline = time.monotonic() + (timeout or self.io_timeout)
        try:
            reply, rbody = self._raw_request(header, body, deadline)
            if check is not None and reply.get("op") != "error":
                check(reply, rbody)
        except ChannelTimeout:
            self._restart()
            raise SessionError("the session's interpreter did not answer a %r request in time; "
                               "it was restarted (every variable is lost)" % header.get("op"))
        except ProtocolError as e:
            self._restart()
            raise SessionError("the jail broke the protocol (%s); the session's interpreter was "
                               "ended and a fresh one started (every variable is lost)" % e)
        except ChannelClosed:
            self._died("during a %r request" % header.get("op"))
            raise SessionError("the session's interpreter died during a %r request; a fresh "
                               "one was started (every variable and file is lost)"
                               % header.get("op"))
        if reply.get("op") == "error":
            err = str(reply.get("error", "error"))[:4096]
            code = reply.get("errno")
            # An OSError only from a request for a file: callers of the others
            # (ping, set_variables, ...) expect a SessionError.
            if type(code) is int and 0 < code < 4096 and "path" in header:
                raise OSError(code, str(reply.get("strerror", err))[:200], header.get("path"))
            raise SessionError(err)
        return reply, rbody

    # -------------------------------------------------------------- cells

    def run(self, code: str, timeout: Optional[float] = _NOT_GIVEN, *,
            want_data: bool = False, want_str: bool = False,
            name: Optional[str] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None,
            want_formats: bool = True) -> CellResult:
        """Run one cell. ``timeout``: seconds (None: no limit; default: the
        session's ``timeout``). Exceptions of the code are in the result's
        ``error``, never raised; a closed session raises SessionClosedError.

        ``on_stdout`` and ``on_stderr`` are called, in this thread, with the
        text the cell writes to that stream (str, decoded as UTF-8) as it
        writes it, up to ``max_output`` bytes per stream (the result still
        holds the output's start and end). An exception a callback raises ends
        its calls for the cell and is raised by run() once the cell has ended
        (the session keeps its state). ``want_formats``: the trailing value's
        HTML, Markdown, LaTeX and JSON forms (CellResult.formats)."""
        if not isinstance(code, str):
            raise TypeError("code must be a str, not %s" % type(code).__name__)
        if timeout is _NOT_GIVEN:
            timeout = self.timeout
        with self._call():
            note = self._ensure_alive()
            if note is not None:
                return CellResult(error=CellError("InterpreterDied", note), restarted=True,
                                  report=self.last_report)
            streams = None
            if on_stdout is not None or on_stderr is not None:
                streams = Streams(on_stdout, on_stderr, self.max_output)
            res = self._exec(code, timeout, want_data, want_str, name, streams, want_formats)
        if streams is not None:
            streams.finish()
        return res

    def _interrupt(self, only_if: Optional[Callable[[], bool]] = None) -> None:
        """SIGINT to the cell that runs (pyjail relays it to the program: the
        server raises KeyboardInterrupt in the cell); with ``only_if``, only
        while it says so (AsyncSession: while the cancelled call's cell runs)."""
        with self._interrupt_lock:
            # Under the lock a next cell's request takes its count from: that
            # cell waits for this interrupt before it starts (counted before it
            # is sent), or its request came first, once ``only_if`` was false.
            if only_if is not None and not only_if():
                return
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return
            self._interrupts_sent += 1
            try:
                proc.send_signal(signal.SIGINT)
            except OSError:
                self._interrupts_sent -= 1

    def _exec(self, code: str, timeout: Optional[float], want_data: bool, want_str: bool,
              name: Optional[str], streams: Optional[Streams] = None,
              want_formats: bool = False) -> CellResult:
        """Runs one cell: sends it, reads its frames until its result, and
        escalates when it runs past ``timeout`` (see _CellClock)."""
        chan = self._chan
        assert chan is not None
        rid = self._new_id()
        start = time.monotonic()
        clock = _CellClock(start, timeout, self.interrupt_grace)
        self._final_values.clear()
        # A cell larger than the pipe waits for the server to read it: one that
        # does not (an earlier cell stalled it) is killed no later than a cell
        # that ran out of time would be.
        send_by = start + self.io_timeout
        if clock.deadline is not None:
            send_by = min(send_by, clock.deadline + clock.grace)
        try:
            chan.send(self._exec_header(rid, code, want_data, want_str, name,
                                        streams is not None, want_formats),
                      b"", send_by)
            res = self._await_result(rid, streams, clock, start)
        except (ChannelClosed, ProtocolError, ChannelTimeout) as e:
            return self._cell_failed(e, clock, start)
        if res is None:
            return self._killed_for_timeout(timeout, start)
        return res

    def _exec_header(self, rid: str, code: str, want_data: bool, want_str: bool,
                     name: Optional[str], stream: bool, want_formats: bool) -> Dict[str, Any]:
        """The ``exec`` request of a cell (see _wire.OPS)."""
        header: Dict[str, Any] = {"op": "exec", "id": rid, "code": code,
                                  "output_limit": self.max_output,
                                  "kill_failed": self.kill_failed_cell_processes}
        for key, wanted in (("data", want_data), ("str", want_str), ("formats", want_formats),
                            ("stream", stream)):
            if wanted:
                header[key] = True
        if name:
            header["name"] = name
        if self.max_image_bytes != 8 << 20:
            header["image_limit"] = self.max_image_bytes
        with self._interrupt_lock:
            if self._interrupts_sent:
                header["interrupts"] = self._interrupts_sent
        return header

    def _await_result(self, rid: str, streams: Optional[Streams], clock: "_CellClock",
                      start: float) -> Optional[CellResult]:
        """Reads the cell's frames until its result; None when the cell ran out
        of time and the interpreter did not answer the interrupts."""
        chan = self._chan
        assert chan is not None
        while True:
            try:
                reply: Optional[Dict[str, Any]]
                reply, body = chan.recv(clock.next_action)
            except ChannelTimeout:
                reply = None
            if reply is not None:
                res = self._cell_frame(reply, body, rid, streams, clock, start)
                if res is not None:
                    return res
            # Checked after every frame too: a jail that keeps the channel
            # readable (a flood of calls) must not stop the deadline.
            if clock.due() and clock.escalate(self._interrupt,
                                              self._kill_interpreter_descendants):
                return None

    def _cell_frame(self, reply: Dict[str, Any], body: bytes, rid: str,
                    streams: Optional[Streams], clock: "_CellClock",
                    start: float) -> Optional[CellResult]:
        """Handles one frame from a running cell: its result (returned), its
        output, or a host-function call; anything else breaks the protocol."""
        op = reply.get("op")
        if op == "result" and reply.get("id") == rid:
            res = self._cell_result(reply, body, start, self.max_output)
            # Interrupted, unless it finished on its own just as time ran out.
            res.timed_out = clock.interrupted_at is not None and res.error is not None
            return res
        if op == "output" and streams is not None and reply.get("id") == rid:
            streams.add(reply.get("stream"), body)
        elif op == "call":
            self._serve_call(reply, clock.send_by(self.io_timeout))
        else:
            raise ProtocolError("a %r frame while a cell ran" % (str(op)[:40],))
        return None

    def _cell_failed(self, e: ChannelError, clock: "_CellClock", start: float) -> CellResult:
        """The result of a cell whose channel failed: the interpreter died,
        broke the protocol or did not take the cell; a fresh one replaces it."""
        if isinstance(e, ChannelClosed):
            note = self._died("while running the cell")
            return CellResult(error=CellError("InterpreterDied", note), restarted=True,
                              timed_out=clock.interrupted_at is not None,
                              report=self.last_report, duration_s=time.monotonic() - start)
        self._restart()
        if isinstance(e, ProtocolError):
            return CellResult(
                error=CellError("ProtocolError",
                                "the jail broke the protocol (%s); the interpreter was ended and "
                                "a fresh one started: every variable and file is lost" % e),
                restarted=True, report=self.last_report, duration_s=time.monotonic() - start)
        # A ChannelTimeout: sending the cell itself did not finish, the server is stuck.
        return CellResult(
            error=CellError("InterpreterDied",
                            "the interpreter did not accept the cell; it was killed and a "
                            "fresh one started: every variable and file is lost"),
            restarted=True, duration_s=time.monotonic() - start)

    def _jail_cpu_seconds(self) -> Optional[float]:
        """The CPU seconds the current interpreter's jail has used so far (its pid 1
        and everything under it), read from the host, where nothing in the jail can
        change it: its cgroup v2 leaf's count where it has one, else its processes' in
        /proc (which miss those the kernel reaped itself). What pyjail-server charges a
        tenant for a cell. None without a live jail."""
        proc = self._proc
        if proc is None or not _holds_pid(proc):
            return None
        init = _hostprocs.jail_init_of(proc.pid)
        if init is None:
            return None
        used = _hostprocs.leaf_cpu_seconds(init)
        if used is None:
            used = _hostprocs.tree_cpu_seconds(init)
        # Read while the pid was still its pid 1's (see _kill_interpreter_descendants).
        return used if _holds_pid(proc) and _hostprocs.jail_init_of(proc.pid) == init else None

    def _kill_interpreter_descendants(self) -> int:
        """SIGKILLs, from the host, every process of the jail but its pid 1 and the
        interpreter (the jail's pid 2): what the cells started, and orphans of theirs that
        pid 1 adopted. Stopped first, then killed, each repeated while new ones appear
        within a bound (see _wire.stop_then_kill: a fork bomb forks while it is being
        killed). Returns how many were killed."""
        proc = self._proc
        if proc is None or not _holds_pid(proc):
            return 0
        # The jail's pid 1, through the pidfd pyjail watches it by: a fresh jail's is
        # pyjail's child, a run's from a template (a Pool's session) the template's.
        # Found while pyjail's pid was still its own (a Pool's launcher reaps it at once:
        # after that the pid may be another process's, whose processes are not ours).
        found = _hostprocs.jail_init_of(proc.pid)
        if found is None or not _holds_pid(proc):
            return 0
        init = [found]
        parents = _hostprocs.process_parents()
        # The interpreter stays the same process for the whole call: found once.
        keep = {pid for pid, pp in parents.items() if pp in init and _hostprocs.is_jail_pid(pid, 2)}

        def listing() -> List[Tuple[int, str]]:
            # pyjail, and with it the jail, is gone; or its pid 1's pid is no longer its.
            if not _holds_pid(proc) or _hostprocs.jail_init_of(proc.pid) != found:
                return []
            listed = _wire.processes()
            parents.clear()
            parents.update((pid, pp) for pid, _state, pp, _start in listed)
            wanted = _hostprocs.descendants(parents, init) - keep
            return [(pid, state) for pid, state, _pp, _start in listed if pid in wanted]

        def send(pid: int, sig: int) -> bool:
            return pid in parents and _hostprocs.signal_if_child_of(pid, parents[pid], sig)

        return len(_wire.stop_then_kill(listing, send, passes=20))

    def _killed_for_timeout(self, timeout: Optional[float], start: float) -> CellResult:
        self._stop()
        self._start()
        self.restarts += 1
        msg = ("the cell ran out of time (%s s) and did not respond to KeyboardInterrupt within "
               "%s s; the interpreter was killed and a fresh one started: every variable and "
               "file of the session is lost" % (_fmt(timeout), _fmt(self.interrupt_grace)))
        return CellResult(error=CellError("TimeoutError", msg), timed_out=True, restarted=True,
                          report=self.last_report, duration_s=time.monotonic() - start)

    def _cell_result(self, reply: Dict[str, Any], body: bytes, start: float,
                     output_limit: int) -> CellResult:
        oh, ot, oo = _lengths(reply, "stdout")
        eh, et, eo = _lengths(reply, "stderr")
        if oh + ot + eh + et > len(body):
            raise ProtocolError("result body length mismatch")
        if oh + ot > output_limit or eh + et > output_limit:
            raise ProtocolError("a cell's output over max_output=%d" % output_limit)
        images = _images(reply, len(body) - (oh + ot + eh + et), self.max_image_bytes)
        stdout = render_output(body[:oh], body[oh:oh + ot], oo)
        stderr = render_output(body[oh + ot:oh + ot + eh], body[oh + ot + eh:oh + ot + eh + et], eo)
        value, value_str = reply.get("value"), reply.get("value_str")
        res = CellResult(stdout=stdout, stderr=stderr, stdout_omitted=oo, stderr_omitted=eo,
                         value=value if isinstance(value, str) else None,
                         value_str=value_str if isinstance(value_str, str) else None,
                         duration_s=time.monotonic() - start)
        pos = oh + ot + eh + et
        for mime, size in images:
            res.images.append(Image(mime, body[pos:pos + size]))
            pos += size
        err = reply.get("error")
        if isinstance(err, dict):
            full = str(err.get("traceback", ""))
            short = err.get("short")
            res.error = CellError(str(err.get("type", "Exception")), str(err.get("message", "")),
                                  full, str(err.get("repr", "")),
                                  short if isinstance(short, str) else full)
        if res.value is not None:
            if "data" in reply:
                try:
                    res.data = _wire.decode_value(reply["data"], from_jail=True)
                except ValueError as e:
                    res.data = JailObject(res.value)
                    res.data_error = "the value could not be rebuilt here: %s" % e
            else:
                res.data = JailObject(res.value)
            why = reply.get("data_error")
            if isinstance(why, str) and res.data_error is None:
                res.data_error = why[:1024]
            res.formats = _formats(reply, res.value)
        res.displays = _displays(reply)
        killed = reply.get("killed")
        if type(killed) is int and killed >= 0:
            res.processes_killed = killed
        ended = reply.get("ended_by")
        if isinstance(ended, dict):
            token = ended.get("token")
            if isinstance(token, str) and token in self._final_values:
                res.final = FinalCall(str(ended.get("name")), self._final_values.pop(token))
        # The values of the cell's other ending calls (a cell that caught what ended it and
        # called again) are nobody's: not kept until the next cell.
        self._final_values.clear()
        return res

    # ---------------------------------------------------------- host functions

    def expose(self, functions: Mapping[str, Callable[..., Any]], *,
               ends_cell: Iterable[str] = (), docs: Optional[Mapping[str, str]] = None) -> None:
        """Make host callables callable by name from the jailed code.

        A call runs the function here, on the host, with the host's rights: expose
        only what the jailed code may use. Arguments and results cross as plain
        data (str, numbers, bytes, lists, tuples, dicts, sets; arguments also as
        ``CellResult.data`` takes them: dates, numpy and pandas values, ...); a result that is not
        is pickled for the jail, or, if the jail cannot rebuild it, sent as its str().
        An exception becomes the builtin of the same name in the jail (else a
        HostFunctionError, a class of the jail's: the host sees it only as a
        cell's ``error.type``) with its message, without the host's traceback. A call
        of a function named in ``ends_cell`` ends the cell, and the result's
        ``final`` holds the function's return value (smolagents' final_answer).
        """
        ends = set(ends_cell)
        with self._call():
            self._check_open()
            for name, fn in functions.items():
                if not name.isidentifier():
                    raise ValueError("%r is not a Python identifier" % name)
                if not callable(fn):
                    raise TypeError("%s is not callable" % name)
                doc = (docs or {}).get(name) or getattr(fn, "__doc__", None) or ""
                self._functions[name] = (fn, str(doc), name in ends)
            self._ensure_alive()
            self._request({"op": "expose",
                           "functions": {n: self._functions[n][1] for n in functions},
                           "ends_cell": [n for n in functions if n in ends]})

    def _serve_call(self, header: Dict[str, Any], send_by: float) -> None:
        """Run the host function the jail calls and send it the answer, by
        ``send_by`` (else ProtocolError: the jail does not read its answers)."""
        assert self._chan is not None
        cid = header.get("id")
        if not isinstance(cid, str) or len(cid) > 64:
            raise ProtocolError("a call with a bad id")
        name = header.get("name")
        entry = self._functions.get(name) if isinstance(name, str) else None
        reply: Dict[str, Any] = {"op": "reply", "id": cid}
        try:
            if entry is None:
                raise NameError(("%r is not a host function of this session" % (name,))[:200])
            fn, _doc, ends = entry
            if ends and len(self._final_values) >= 100:
                raise RuntimeError("%s() called more than 100 times in one cell" % name)
            args = _wire.decode_value(header.get("args"), from_jail=True)
            kwargs = _wire.decode_value(header.get("kwargs"), from_jail=True)
            if not isinstance(args, list) or not isinstance(kwargs, dict) or \
                    not all(isinstance(k, str) for k in kwargs):
                raise TypeError("malformed arguments")
            value = fn(*args, **kwargs)
            if ends:
                token = "f%d" % (len(self._final_values) + 1)
                self._final_values[token] = value
                reply["token"] = token
            else:
                try:
                    reply["value"] = _wire.encode_value(value, allow_pickle=True)
                except _wire.PlainDataError:
                    reply["value"] = str(value)
        except Exception as e:
            # The message without the host's traceback; a single str argument
            # as it is (str(KeyError('k')) would quote it again).
            msg = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
            reply = {"op": "reply", "id": cid, "error": msg, "type": type(e).__name__}
        try:
            self._chan.send(reply, b"", max(send_by, time.monotonic() + 0.1))
        except ChannelTimeout:
            raise ProtocolError("the jail does not read the answers to its host-function calls")

    def set_variables(self, variables: Mapping[str, Any]) -> Dict[str, str]:
        """Put host values into the session's namespace, as plain data or, for
        other objects, pickled (the jail must be able to import their classes).
        Returns the names that could not be set, with why."""
        tree: Dict[str, Any] = {}
        failed: Dict[str, str] = {}
        for name, value in variables.items():
            try:
                tree[name] = _wire.encode_value(value, allow_pickle=True, limit=256 << 20)
            except _wire.PlainDataError as e:
                failed[name] = str(e)
        with self._call():
            self._ensure_alive()
            reply, _ = self._request({"op": "set", "variables": tree})
        more = reply.get("failed")
        if isinstance(more, dict):
            failed.update({k: str(v)[:1024] for k, v in more.items() if k in variables})
        return failed

    # ---------------------------------------------------------------- files

    def upload(self, name: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> int:
        """Write ``data`` (bytes, or str as UTF-8) to ``name`` in the jail:
        relative to the work directory /work, or an absolute in-jail path.
        Parent directories are created. Returns the size written."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes or str")
        def check(reply: Dict[str, Any], _body: bytes) -> None:
            size = reply.get("size")
            if reply.get("op") != "ok" or type(size) is not int or size < 0:
                raise ProtocolError("a bad answer to a file put")

        with self._call():
            self._ensure_alive()
            header: Dict[str, Any] = {"op": "put", "path": name}
            if mode is not None:
                header["mode"] = mode
            reply, _ = self._request(header, bytes(data), check=check)
        return int(reply["size"])

    def download(self, name: str, *, max_bytes: Optional[int] = None) -> bytes:
        """The content of file ``name`` in the jail (relative to /work). Raises
        FileNotFoundError and friends, or SessionError past ``max_bytes``
        (default: the session's ``max_file_bytes``)."""
        limit = self.max_file_bytes if max_bytes is None else int(max_bytes)

        def check(reply: Dict[str, Any], body: bytes) -> None:
            if reply.get("op") != "file" or len(body) > limit:
                raise ProtocolError("a bad answer to a download (%r, %d bytes for at most %d)"
                                    % (str(reply.get("op"))[:40], len(body), limit))

        with self._call():
            self._ensure_alive()
            _reply, body = self._request({"op": "get", "path": name, "max_bytes": limit},
                                         check=check)
        return body

    def list_files(self, path: str = ".", patterns: Optional[Sequence[str]] = None,
                   max_entries: int = 10000) -> Dict[str, int]:
        """Regular files under ``path`` (default /work), as {relative name: size},
        optionally only those matching one of the glob ``patterns``: at most
        ``max_entries``, and as many as fit in one frame (1 MiB of names).
        Every name is relative (no ``..``, as the names given to run()'s
        ``files=``), every size an int >= 0, or the jail broke the protocol."""
        pats = list(patterns) if patterns else None
        out: Dict[str, int] = {}

        def check(reply: Dict[str, Any], _body: bytes) -> None:
            entries = reply.get("entries")
            if reply.get("op") != "ok" or not isinstance(entries, list) or \
                    len(entries) > max_entries:
                raise ProtocolError("a bad answer to a file listing")
            for entry in entries:
                if not (isinstance(entry, list) and len(entry) == 2 and
                        type(entry[1]) is int and entry[1] >= 0):
                    raise ProtocolError("a bad entry in a file listing")
                try:
                    check_name(entry[0])
                except ValueError as e:
                    raise ProtocolError("a listed %s" % e) from None
                if not _wire.matches_patterns(entry[0], pats) or entry[0] in out:
                    raise ProtocolError("a listed file %r that was not asked for" % entry[0])
                out[entry[0]] = entry[1]

        with self._call():
            self._ensure_alive()
            self._request({"op": "list", "path": path, "patterns": pats,
                           "max_entries": max_entries}, check=check)
        return out

    def kill_processes(self) -> int:
        """Kill every process in the jail but the interpreter. Returns how many."""
        with self._call():
            self._ensure_alive()
            reply, _ = self._request({"op": "killall"}, timeout=10.0)
        killed = reply.get("killed")
        return killed if type(killed) is int and killed >= 0 else 0

    def ping(self, timeout: float = 5.0) -> float:
        """Round-trip time to the idle interpreter, in seconds."""
        with self._call():
            self._ensure_alive()
            t = time.monotonic()
            self._request({"op": "ping"}, timeout=timeout)
            return time.monotonic() - t


def _images(reply: Dict[str, Any], room: int, max_bytes: int) -> List[Tuple[str, int]]:
    """A result's images ([MIME type, size] each), checked: a known image type,
    at most IMAGES_LIMIT of them, sizes that fill the rest of the body (``room``
    bytes) exactly and add up to at most ``max_bytes``. ProtocolError otherwise."""
    entries = reply.get("images", [])
    if not isinstance(entries, list) or len(entries) > _wire.IMAGES_LIMIT:
        raise ProtocolError("a result with a bad list of images")
    out: List[Tuple[str, int]] = []
    total = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in _wire.IMAGE_MIMES
                and type(entry[1]) is int and entry[1] >= 0):
            raise ProtocolError("a result with a bad image entry")
        total += entry[1]
        out.append((entry[0], entry[1]))
    if total != room:
        raise ProtocolError("result body length mismatch")
    if total > max_bytes:
        raise ProtocolError("a result's images over max_image_bytes=%d" % max_bytes)
    return out


def _displays(reply: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A result's displays, checked: at most DISPLAYS_LIMIT, each with its
    repr (else ProtocolError), their formats as _formats checks them."""
    entries = reply.get("displays", [])
    if not isinstance(entries, list) or len(entries) > _wire.DISPLAYS_LIMIT:
        raise ProtocolError("a result with a bad list of displays")
    out = []
    for entry in entries:
        text = entry.get("text/plain") if isinstance(entry, dict) else None
        if not isinstance(text, str) or len(text) > 2 * _wire.REPR_LIMIT:
            raise ProtocolError("a result with a bad display")
        out.append(_formats({"formats": entry}, text))
    return out


def _formats(reply: Dict[str, Any], value: str) -> Dict[str, Any]:
    """A result's formats of its trailing value, checked: the known MIME types,
    text as str of at most FORMAT_LIMIT characters (JSON as the header's own
    JSON, already bounded by its size); others are left out."""
    out: Dict[str, Any] = {"text/plain": value}
    got = reply.get("formats")
    if not isinstance(got, dict):
        return out
    for mime in _wire.FORMAT_MIMES:
        if mime not in got:
            continue
        content = got[mime]
        if mime == "application/json" or (isinstance(content, str) and
                                           len(content) <= _wire.FORMAT_LIMIT):
            out[mime] = content
    return out


def _lengths(reply: Dict[str, Any], key: str) -> Tuple[int, int, int]:
    """A result's [head, tail, omitted] byte counts of one stream, checked."""
    v = reply.get(key)
    if isinstance(v, list) and len(v) == 3:
        a, b, c = v
        if isinstance(a, int) and isinstance(b, int) and isinstance(c, int) and \
                a >= 0 and b >= 0 and c >= 0:
            return a, b, c
    raise ProtocolError("bad %s lengths" % key)


class _CellClock:
    """When a cell that runs past its timeout is interrupted, and what follows:
    a KeyboardInterrupt, again every half second (code may swallow one); halfway
    through the interrupt grace without an answer, every process the cells
    started killed from the host (a fork bomb may be starving the interpreter of
    CPU, and that costs less than the session's state); at its end, the
    interpreter itself."""

    def __init__(self, start: float, timeout: Optional[float], grace: float) -> None:
        self.deadline = start + timeout if timeout is not None else None
        self.grace = grace
        self.interrupted_at: Optional[float] = None
        self.descendants_killed = False
        self.next_action = self.deadline
        """When escalate() is next due (None: never, the cell has no timeout)."""

    def due(self) -> bool:
        return self.next_action is not None and time.monotonic() >= self.next_action

    def send_by(self, io_timeout: float) -> float:
        """When the answer to a host-function call must have been sent: an answer
        the jail does not read in time (it floods the driver with calls) ends
        the cell no later than a kill would."""
        if self.interrupted_at is not None:
            return self.interrupted_at + self.grace
        if self.deadline is not None:
            return self.deadline + self.grace
        return time.monotonic() + io_timeout

    def escalate(self, interrupt: Callable[[], None],
                 kill_descendants: Callable[[], int]) -> bool:
        """The next step, once due; True when the interpreter must be killed."""
        now = time.monotonic()
        if self.interrupted_at is None:
            self.interrupted_at = now
        elif now - self.interrupted_at >= self.grace:
            return True
        elif not self.descendants_killed and now - self.interrupted_at >= self.grace / 2:
            self.descendants_killed = True
            kill_descendants()
        interrupt()
        step = self.grace if self.descendants_killed else self.grace / 2
        self.next_action = min(now + 0.5, self.interrupted_at + step)
        return False


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "no limit"
    return ("%g" % x)
