"""pyjail.AsyncSession and pyjail.arun: the package for asyncio programs
(agent frameworks' ``ainvoke``, async web servers).

A jailed program runs in its own processes whatever the host does, so an
awaiting caller needs only its wait to be off the event loop: each call runs
the blocking driver (Session, run) in a thread of its own (an idle one from
an earlier call, or one started for it), so the loop goes on serving other
tasks and no bounded thread pool limits how many jails run at once. Output callbacks (``on_stdout``,
``on_stderr``) run on the event loop, in order, and may be coroutine
functions.

Concurrency: one session runs one call at a time (its interpreter is a single
process with one namespace), so calls on one AsyncSession wait for each other
in the order they came; calls on different sessions, and arun() calls, run at
the same time. An agent that runs tools concurrently gets that concurrency by
giving each tool its own session.

Cancelling a call (``task.cancel()``, ``asyncio.wait_for``) interrupts the
cell it runs (a KeyboardInterrupt in the jail; the session keeps its
variables) and, for arun(), kills the jail; the awaiting task is cancelled at
once and the session takes its next call when the interrupted cell has ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import queue
import threading
import time
from typing import (Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union)

from ._common import Callbacks, egress_of, jail_args, moved_keywords
from ._run import Result, run
from ._session import _NOT_GIVEN, CellResult, Session, SessionClosedError

__all__ = ["AsyncSession", "arun"]

T = TypeVar("T")
AsyncOutputCallback = Callable[[str], Union[None, Awaitable[None]]]


class WorkersBusy(RuntimeError):
    """No thread can take a call now (see _Workers.MAX_THREADS): try again later."""


class _Workers:
    """Daemon threads for _in_thread's calls, each call on a thread of its own at the time:
    an idle thread from an earlier call takes it, else a new thread starts. Reused because
    starting one holds the event loop until the new thread runs (Thread.start waits for it:
    about 1 ms a call on a busy host, which a server's every cell paid). Daemon threads, and
    no executor, because an abandoned call (a cancelled await) may block for long and must
    not hold the interpreter's exit. A thread idle for `IDLE_SECONDS` ends."""

    IDLE_SECONDS = 30.0
    # At most this many calls in threads at once; more raise WorkersBusy. Attack: a client of
    # pyjail-server parking a thread per request (each waits on a busy session) until the
    # process could start none, which froze the service for every tenant.
    MAX_THREADS = 512

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0      # threads waiting for a job that no submit has counted on yet
        self._threads = 0   # started and not ended

    def submit(self, job: Callable[[], None]) -> None:
        """Runs `job` in a thread; WorkersBusy if none can take it (at MAX_THREADS, or
        the process cannot start one), and then the job never runs."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1     # an idle thread takes it off the queue
                self._jobs.put(job)
                return
            if self._threads >= self.MAX_THREADS:
                raise WorkersBusy("%d calls are in flight already" % self._threads)
            self._threads += 1
        try:
            # The job goes with its new thread: one that cannot start leaves none queued.
            threading.Thread(target=self._serve, args=(job,), name="pyjail-async",
                             daemon=True).start()
        except RuntimeError as e:
            with self._lock:
                self._threads -= 1
            raise WorkersBusy("cannot start a thread: %s" % e) from None

    def _serve(self, job: "Optional[Callable[[], None]]") -> None:
        while True:
            if job is not None:
                job()
                job = None
                with self._lock:
                    self._idle += 1
            try:
                job = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    # Leave only if no submit counted on this thread meanwhile.
                    if self._idle > 0:
                        self._idle -= 1
                        self._threads -= 1
                        return


_workers = _Workers()


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a thread of its own (with the caller's context
    variables), awaited. Cancelling the await abandons the call: the caller
    ends it by other means (interrupt, kill)."""
    loop = asyncio.get_running_loop()
    future: "asyncio.Future[T]" = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(value: Any, error: Optional[BaseException]) -> None:
        if future.done():
            return          # cancelled meanwhile
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = ctx.run(fn, *args, **kwargs), None
        except BaseException as e:
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass            # the loop is closed: nobody waits for it any more

    _workers.submit(work)
    return await future


class _Relay:
    """Output callbacks for a call that runs in another thread: the thread's
    chunks go, in order, to a task on the event loop that calls the user's
    callbacks there (awaiting a coroutine function's result). The first
    exception of a callback stops the calls; finish() raises it."""

    def __init__(self, on_stdout: Optional[AsyncOutputCallback],
                 on_stderr: Optional[AsyncOutputCallback]) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: "asyncio.Queue[Optional[Tuple[AsyncOutputCallback, str]]]" = asyncio.Queue()
        self.error: Optional[BaseException] = None
        self.task = self.loop.create_task(self._deliver())
        self.on_stdout = self._sender(on_stdout)
        self.on_stderr = self._sender(on_stderr)

    def _sender(self, callback: Optional[AsyncOutputCallback]
                ) -> Optional[Callable[[str], None]]:
        if callback is None:
            return None

        def send(text: str) -> None:    # in the call's thread
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (callback, text))
        return send

    async def _deliver(self) -> None:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if self.error is not None:
                continue
            callback, text = item
            try:
                out = callback(text)
                if inspect.isawaitable(out):
                    await out
            except asyncio.CancelledError:
                raise
            except BaseException as e:
                self.error = e

    async def finish(self) -> None:
        """Waits until every chunk the call sent has been delivered (the call
        has returned: its chunks are all queued), then raises a callback's
        exception, if any."""
        self.queue.put_nowait(None)
        await self.task
        if self.error is not None:
            raise self.error

    async def drain(self) -> None:
        """finish(), for a call that failed: its exception is the one raised."""
        try:
            await self.finish()
        except Exception:
            pass

    def cancel(self) -> None:
        self.task.cancel()


class AsyncSession:
    """A persistent jailed interpreter for asyncio: Session's API, with
    coroutine methods (see the module's notes on concurrency and
    cancellation).

    ``AsyncSession(**options)`` takes Session's options (controlled egress
    included: ``net="allow"``, ``allow_hosts``; ``limits``, ``caps``) and starts
    the jail on first use, or at ``await session.start()`` / ``async with``;
    ``AsyncSession.wrap(session)`` drives an existing Session (a LangChain
    tool's, so that ``invoke`` and ``ainvoke`` share its variables)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._session: Optional[Session] = None
        self._start_lock = threading.Lock()
        self._closed = False

    @classmethod
    def wrap(cls, session: Session) -> "AsyncSession":
        """An AsyncSession driving ``session`` (which stays usable directly)."""
        self = cls()
        self._session = session
        return self

    # ------------------------------------------------------------------ life

    def _started(self) -> Session:
        """The Session, started if need be (in a call's thread)."""
        with self._start_lock:
            if self._closed:
                raise SessionClosedError("the session is closed")
            if self._session is None:
                self._session = Session(**self._options)
            return self._session

    async def start(self) -> "AsyncSession":
        """Starts the jail now rather than on first use."""
        await _in_thread(self._started)
        return self

    async def __aenter__(self) -> "AsyncSession":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Ends the jail (a call that is running ends with it, raising
        SessionClosedError); nothing is left behind."""
        with self._start_lock:
            self._closed = True
            session = self._session
        if session is not None:
            await _in_thread(session.close)

    @property
    def session(self) -> Optional[Session]:
        """The Session this drives (None before it started)."""
        return self._session

    @property
    def closed(self) -> bool:
        return self._closed or (self._session is not None and self._session.closed)

    @property
    def restarts(self) -> int:
        return self._session.restarts if self._session is not None else 0

    @property
    def egress(self) -> Tuple[Optional[str], List[str]]:
        """Session.egress: the ``--net`` mode (None: the profile's) and the
        allowed hosts, known before the jail starts."""
        if self._session is not None:
            return self._session.egress
        o = self._options
        return egress_of(jail_args(net=o.get("net"), allow_hosts=o.get("allow_hosts", ()),
                                   options=o.get("options"), extra_args=o.get("extra_args", ())))

    @property
    def pid(self) -> Optional[int]:
        """The host pid of the current pyjail process (None when not running)."""
        return self._session.pid if self._session is not None else None

    @property
    def last_report(self) -> Any:
        """pyjail's report of the last jail of this session that ended."""
        return self._session.last_report if self._session is not None else None

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self._started(), method)(*args, **kwargs)
        return await _in_thread(call)

    # ------------------------------------------------------------------ cells

    async def run(self, code: str, timeout: Optional[float] = _NOT_GIVEN, *,
                  want_data: bool = False, want_str: bool = False,
                  name: Optional[str] = None, on_stdout: Optional[AsyncOutputCallback] = None,
                  on_stderr: Optional[AsyncOutputCallback] = None,
                  want_formats: bool = True) -> CellResult:
        """Session.run, awaited. ``on_stdout``/``on_stderr`` are called on the
        event loop with the text as the cell writes it (a coroutine function's
        result is awaited before the next chunk); an exception of theirs is
        raised once the cell has ended. Cancelling interrupts the cell."""
        if not isinstance(code, str):
            raise TypeError("code must be a str, not %s" % type(code).__name__)
        relay = _Relay(on_stdout, on_stderr) if (on_stdout or on_stderr) else None
        # The cell is "running" from when this call holds the session (a call
        # waiting for another one's cell must not interrupt that cell).
        state = {"running": False, "cancelled": False}

        def call() -> CellResult:
            session = self._started()
            with session._lock:
                if state["cancelled"]:
                    raise asyncio.CancelledError()
                state["running"] = True
                try:
                    return session.run(
                        code, timeout, want_data=want_data, want_str=want_str, name=name,
                        on_stdout=relay.on_stdout if relay else None,
                        on_stderr=relay.on_stderr if relay else None,
                        want_formats=want_formats)
                finally:
                    state["running"] = False

        try:
            result = await _in_thread(call)
        except asyncio.CancelledError:
            state["cancelled"] = True
            if relay is not None:
                relay.cancel()
            self._interrupt_while(state)
            raise
        except BaseException:
            if relay is not None:
                await relay.drain()
            raise
        if relay is not None:
            await relay.finish()
        return result

    def _interrupt_while(self, state: Dict[str, bool]) -> None:
        """Interrupts the cancelled call's cell, again every 0.25 s while it
        runs (an interrupt that comes before the cell has started is dropped
        by the jail), within the session's interrupt grace; then the cell's
        own timeout, if any, ends it."""
        session = self._session
        if session is None:
            return

        def interrupt() -> None:
            end = time.monotonic() + max(session.interrupt_grace, 1.0)
            while state["running"] and time.monotonic() < end:
                # Checked again under the session's interrupt lock: the call's
                # cell may end, and the next call's start, after this check.
                session._interrupt(only_if=lambda: state["running"])
                time.sleep(0.25)

        threading.Thread(target=interrupt, name="pyjail-cancel", daemon=True).start()

    async def restart(self) -> None:
        await self._call("restart")

    async def expose(self, functions: Mapping[str, Callable[..., Any]], **kwargs: Any) -> None:
        """Session.expose: the functions run on the host, in the call's thread."""
        await self._call("expose", functions, **kwargs)

    async def set_variables(self, variables: Mapping[str, Any]) -> Dict[str, str]:
        return await self._call("set_variables", variables)

    # ------------------------------------------------------------------ files

    async def upload(self, name: str, data: Union[bytes, str], *,
                     mode: Optional[int] = None) -> int:
        return await self._call("upload", name, data, mode=mode)

    async def upload_file(self, host_path: Union[str, "os.PathLike[str]"],
                          name: Optional[str] = None) -> int:
        return await self._call("upload_file", host_path, name)

    async def download(self, name: str, *, max_bytes: Optional[int] = None) -> bytes:
        return await self._call("download", name, max_bytes=max_bytes)

    async def download_file(self, name: str, host_path: Union[str, "os.PathLike[str]"]) -> int:
        return await self._call("download_file", name, host_path)

    async def list_files(self, path: str = ".", patterns: Optional[Sequence[str]] = None,
                         max_entries: int = 10000) -> Dict[str, int]:
        return await self._call("list_files", path, patterns, max_entries)

    async def kill_processes(self) -> int:
        return await self._call("kill_processes")

    async def ping(self, timeout: float = 5.0) -> float:
        return await self._call("ping", timeout)


async def arun(code: Optional[str] = None, *, callbacks: Optional[Callbacks] = None,
               **options: Any) -> Result:
    """pyjail.run, awaited: the same arguments and Result. ``callbacks``'
    ``on_stdout`` and ``on_stderr`` are called on the event loop (a coroutine
    function's result is awaited). Cancelling it kills the jail (nothing is
    left behind)."""
    moved = {k: options.pop(k) for k in ("on_stdout", "on_stderr") if k in options}
    groups: Dict[str, Any] = {"callbacks": callbacks}
    moved_keywords("arun", moved, {k: ("callbacks", k) for k in moved}, groups)
    given = groups["callbacks"] or Callbacks()
    relay = _Relay(given.on_stdout, given.on_stderr) if (given.on_stdout or given.on_stderr) \
        else None
    launched: List[Any] = []
    cancelled = threading.Event()

    def started(jail: Any) -> None:     # in the call's thread, once pyjail runs
        launched.append(jail)
        if cancelled.is_set():
            jail.proc.kill()

    try:
        result = await _in_thread(run, code, _started=started, callbacks=Callbacks(
            relay.on_stdout, relay.on_stderr) if relay else None, **options)
    except asyncio.CancelledError:
        cancelled.set()
        for jail in launched:
            # SIGKILL to pyjail: its jail dies with it (parent-death signal),
            # and run() in its thread cleans up what it made.
            jail.proc.kill()
        if relay is not None:
            relay.cancel()
        raise
    except BaseException:
        if relay is not None:
            await relay.drain()
        raise
    if relay is not None:
        await relay.finish()
    return result


_run_signature = inspect.signature(run)
arun.__signature__ = _run_signature.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _run_signature.parameters.values() if not p.name.startswith("_")])

# help(AsyncSession) shows Session's options, which it takes.
_session_signature = inspect.signature(Session.__init__)
AsyncSession.__init__.__signature__ = _session_signature.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _session_signature.parameters.values() if not p.name.startswith("_")])
