"""The in-jail server of ``pyjail.Session`` (installed in the rootfs as
``/usr/lib/pyjail/pyjail_server.py``): the jail's program, which speaks the
protocol of _wire with the driver over the jail's original stdin and stdout.
``spawn`` (pyjail.run's program) is in _spawn. Runs only in the jail (the
driver never imports it); standard library only; Python 3.9 or newer.

Before any user code runs it moves that channel to private, close-on-exec
descriptors and gives the user's code a stdin of its own (``/dev/null``) and a
stdout and stderr of their own (pipes that this process drains into capped
buffers). So nothing the code prints -- through ``print``, ``os.write(1, ...)``
or a subprocess -- ever reaches the channel: the driver sees it only as the
payload of a result frame.

The channel is not a security boundary against a Session's cells, which run
in this very process and could write to the channel on purpose. All they can
gain that way is to lie about their own results, or break the protocol and
have the driver end the interpreter: the driver treats every frame as hostile
(see _wire.decode_header_from_jail and decode_value's from_jail). The program
of ``pyjail.run`` is a child of this process: before it starts, this process
makes itself non-dumpable (see _become_unreachable), so the program, though
it has the same uid, can reach neither its channel descriptors through
/proc/PID/fd nor its memory through /proc/PID/mem.
"""

import _ast
import os
import select
import sys
import time
TYPE_CHECKING = False     # typing's, without importing typing (see _wire)

if TYPE_CHECKING or __package__:     # imported from the host's pyjail package (its tests)
    from ._wire import (DRIVER, ERROR_LIMIT, FRAME, HEADER_FROM_JAIL, INTERRUPT_RELAY_S,
                        PROTOCOL, REPR_LIMIT,
                        TRACEBACK_LIMIT, WORKDIR, Capture, PlainDataError, Spinner,
                        _decode_driver_json, _encode_json, check_header, decode_value,
                        encode_frame, encode_value, list_files, parse_frame, processes,
                        stop_then_kill)
    from ._wire import IMAGES_LIMIT, FORMAT_LIMIT, DATA_FROM_JAIL, DISPLAYS_LIMIT
    from . import _spawn as spawn
else:               # in the jail, as pyjail_server (see _wire.JAIL_MODULES)
    from pyjail_wire import (DRIVER, ERROR_LIMIT, FRAME, HEADER_FROM_JAIL, INTERRUPT_RELAY_S,
                             PROTOCOL,
                             REPR_LIMIT, TRACEBACK_LIMIT, WORKDIR, Capture, PlainDataError,
                             Spinner, _decode_driver_json, _encode_json, check_header,
                             decode_value, encode_frame, encode_value, list_files,
                             parse_frame, processes, stop_then_kill)
    from pyjail_wire import IMAGES_LIMIT, FORMAT_LIMIT, DATA_FROM_JAIL, DISPLAYS_LIMIT
    import pyjail_spawn as spawn

# The server's own source files, whose frames a cell's traceback leaves out.
_OWN_FILES = frozenset(m.__file__ for m in (sys.modules[__name__], spawn) if m.__file__)
try:
    # The signal module's functions without its enum conversions: importing
    # signal imports enum (2-4 ms of a fresh session's start), and each of its
    # calls converts (a few µs a cell).
    import _signal as _sig
except ImportError:
    import signal as _sig


class _EndCell(BaseException):
    """Raised by a host function that ends the cell (smolagents' final_answer).
    A BaseException, so `except Exception` in the cell does not swallow it."""

    def __init__(self, name, token):
        BaseException.__init__(self, name)
        self.name, self.token = name, token


class HostFunctionError(Exception):
    """A host function failed with an exception that has no builtin equivalent."""


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _FrameReader:
    """Frames from the driver, read in as few system calls as it takes: a
    small frame (a cell, a ping) comes whole in one read."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()

    def fill(self):
        """One read, of as much as a pipe holds. False at the end of the stream."""
        data = os.read(self.fd, 1 << 16)
        self.buf += data
        return bool(data)

    def next(self):
        """The next (header, body) if the buffer holds all of it, else None."""
        frame = parse_frame(self.buf)
        if frame is None:
            return None
        head, body = frame
        return _decode_driver_json(head.decode("utf-8")), body

    def read(self):
        """The next (header, body), waiting for it; None once the driver has
        closed its end."""
        while True:
            frame = self.next()
            if frame is not None:
                return frame
            if not self.fill():
                return None


class _Drain:
    """Drains one of the user's output pipes into a Capture, from the thread
    that drains both (see _drain_both).

    The main thread takes the buffer after a cell under the same lock, after
    reading whatever is still in the pipe itself (see take): everything
    written before the cell ended is in the buffer it takes, with no marker
    in the stream.

    While a cell that asked for it runs (see stream), what is read is also
    sent to the driver as ``output`` frames, at once, up to the cell's output
    limit: under the lock, so every one goes out before the cell's result."""

    def __init__(self, rfd, limit, number, send):
        import threading
        self.rfd = rfd
        self.limit = limit
        self.number = number        # 1 or 2: the stream, as output frames name it
        self.send = send
        self.stream_id = None       # the streaming cell's request id
        self.stream_room = 0        # bytes it may still be sent
        self.lock = threading.Lock()
        self.buf = Capture(limit)
        os.set_blocking(rfd, False)

    def _read_available(self, most=-1):
        """Reads what the pipe holds: until it is empty, or ``most`` reads.
        False at its end (or an error): nothing more will come."""
        while most != 0:
            most -= 1
            try:
                data = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self.buf.add(data)
            if self.stream_id is not None and self.stream_room > 0:
                self._stream(data[:self.stream_room])
        return True

    def _stream(self, data):
        self.stream_room -= len(data)
        try:
            self.send({"op": "output", "id": self.stream_id, "stream": self.number}, data)
        except Exception:
            self.stream_id = None    # the channel is gone: the result says the rest

    def stream(self, rid, room):
        """From now on (a cell starts) send what is read as ``output`` frames
        of request ``rid``, at most ``room`` bytes; None: no more."""
        with self.lock:
            self.stream_id, self.stream_room = rid, room

    def take(self, next_limit, pending):
        """The buffer, with what is still in the pipe if ``pending`` (the pipe
        polled readable): a byte the thread has read already is in the buffer
        once we hold the lock."""
        with self.lock:
            if pending:
                self._read_available()
            out, self.buf = self.buf, Capture(next_limit)
            self.stream_id = None
        return out


def _drain_both(drains):
    """The one thread that drains the user's stdout and stderr pipes (one, not
    one each: every thread started copies pages of a template's fork, and
    delays a session's start). One read of each pipe per turn: a flood on one
    does not starve the other."""
    poller = select.poll()
    by_fd = {d.rfd: d for d in drains}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    while by_fd:
        try:
            ready = poller.poll()
        except OSError:
            return
        for fd, _events in ready:
            d = by_fd[fd]
            with d.lock:
                if not d._read_available(most=1):
                    poller.unregister(fd)
                    del by_fd[fd]


class Server:
    # The driver's requests (see _wire.OPS) this server answers, each by its
    # method op_NAME. (bye ends the loop; a reply goes to the host-function
    # call that waits for it; source is the boot's.)
    HANDLED = ("ping", "exec", "expose", "set", "put", "get", "list", "killall", "spawn")

    def __init__(self):
        import collections
        import threading
        import queue
        self.pid = os.getpid()
        self.in_cell = False
        self.interrupts = 0     # SIGINTs received (see _await_interrupts)
        self.exit_status = None
        self.cell_count = 0
        self.output_limit = 1 << 20
        self.next_call = 0
        self.write_lock = threading.Lock()
        self.call_lock = threading.Lock()
        # The channel moves to private close-on-exec descriptors (os.dup's
        # default); the user's 0, 1 and 2 are rebuilt before every cell.
        self.proto_in = os.dup(0)
        self.proto_out = os.dup(1)
        self.devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        r1, self.out_w = os.pipe()
        r2, self.err_w = os.pipe()
        self._restore_fds()
        # Helper threads block SIGINT, so the driver's interrupt (relayed by
        # pyjail to this process) is delivered to the main thread, where it
        # also breaks a blocking call.
        signal = self.signal = _sig
        # The only way from an operation's name on the wire to code: a
        # request of _wire.OPS this server answers (see HANDLED).
        self.handlers = {op: getattr(self, "op_" + op) for op in self.HANDLED}
        self.frames = _FrameReader(self.proto_in)
        self.spinner = Spinner(self.proto_in)
        self.pending = collections.deque()    # requests the channel thread read
        self.replies = queue.SimpleQueue()    # replies to host-function calls
        self.channel_lock = threading.Lock()
        self.main_reads = True                # who reads the channel: see _channel_thread
        self.thread_reads = False
        self.call_waiting = False
        self.control_r, self.control_w = os.pipe()
        self.control_ack = queue.SimpleQueue()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.drains = (_Drain(r1, self.output_limit, 1, self.send),
                           _Drain(r2, self.output_limit, 2, self.send))
            _start_thread(lambda: _drain_both(self.drains))
            self.output_poll = select.poll()
            for d in self.drains:
                self.output_poll.register(d.rfd, select.POLLIN)
            _start_thread(self._channel_thread)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self.sigint_handler = self._on_sigint
        signal.signal(signal.SIGINT, self.sigint_handler)
        # The pid namespace's last pid: while it stays the same, no process
        # (or thread) was started, and the last list of the jail's processes
        # still holds (see _processes_before_cell).
        try:
            self.last_pid_fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.last_pid_fd = -1
        self.before_cell = self.before_cell_key = None
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        self.stdin = sys.stdin = open(0, "r", encoding="utf-8", errors="surrogateescape",
                                      closefd=False)
        self.stdout = sys.stdout = self._text(1)
        self.stderr = sys.stderr = self._text(2)
        setattr(sys, "__stdin__", sys.stdin)
        setattr(sys, "__stdout__", sys.stdout)
        setattr(sys, "__stderr__", sys.stderr)
        # The user's namespace is a real __main__ module, so pickle and
        # multiprocessing find functions defined in cells.
        import types
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        self.namespace = main.__dict__
        # What cells show (display(), plt.show(), a trailing figure): images
        # for the cell's result (see _show).
        self.images, self.shown_figures, self.image_room = [], [], 0
        self.displays = []      # display() of objects with rich formats (a DataFrame)
        self.namespace["display"] = self.display
        def patch_pyplot(pyplot):
            _patch_pyplot(pyplot, self._show_figures)
        sys.meta_path.insert(0, _AfterImport({"matplotlib.pyplot": patch_pyplot,
                                              "linecache": _fill_linecache}))
        if "matplotlib.pyplot" in sys.modules:      # preloaded (a template's fork)
            patch_pyplot(sys.modules["matplotlib.pyplot"])
        self.loop = None     # the event loop of cells with a top-level await
        sys.argv = [""]
        if "" not in sys.path:
            sys.path.insert(0, "")
        try:
            os.chdir(WORKDIR)
        except OSError:
            pass

    @staticmethod
    def _text(fd):
        return open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                    closefd=False)

    def _restore_fds(self):
        os.dup2(self.devnull, 0)
        os.dup2(self.out_w, 1)
        os.dup2(self.err_w, 2)

    def _after_fork_in_child(self):
        # A process the cell forked must never speak on the channel.
        for fd in (self.proto_in, self.proto_out):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proto_in = self.proto_out = -1

    def _on_sigint(self, signum, frame):
        self.interrupts += 1
        if self.in_cell:
            raise KeyboardInterrupt
        # An interrupt that arrives between cells (the cell finished just as
        # the driver's timeout fired) is dropped, and counted (see
        # _await_interrupts).

    def _await_interrupts(self, sent):
        """Before a cell: wait until the interrupts the driver has sent (its
        count, ``sent``) have arrived, at most INTERRUPT_RELAY_S. pyjail
        relays SIGINT through the jail's pid 1, so one sent just as the
        earlier cell ended may still be on its way; arriving in this cell, it
        would interrupt a cell nobody interrupted (a fork bomb's cell, ended
        quickly, leaves one in flight). Counted, the next cell waits only for
        those still missing (none, after a cell an interrupt ended), where it
        used to wait out the whole bound after every interrupt."""
        if type(sent) is not int or self.interrupts >= sent:
            return
        deadline = time.monotonic() + INTERRUPT_RELAY_S
        while self.interrupts < sent and time.monotonic() < deadline:
            time.sleep(0.001)
        # Two SIGINTs sent close together may arrive as one: not waited for again.
        self.interrupts = max(self.interrupts, sent)

    # ------------------------------------------------------------ channel
    #
    # Between cells the main thread reads the channel itself, so a request is
    # one read away, with no hand-over between threads. While a cell runs,
    # the channel thread reads it, but only once a host function's reply is
    # awaited, and the main thread takes it back when the cell ends. The rest
    # of the time that thread only waits for the driver to hang up.

    def _channel_thread(self):
        """Reads the channel while a cell that called a host function runs;
        the rest of the time, waits for the driver to hang up."""
        poller = select.poll()
        poller.register(self.control_r, select.POLLIN)
        poller.register(self.proto_in, 0)   # no events: only a hang-up wakes it
        reading = False
        while True:
            ready = dict(poller.poll())
            if self.control_r in ready:
                reading = os.read(self.control_r, 1) == b"r"
                poller.modify(self.proto_in, select.POLLIN if reading else 0)
                if not reading:
                    self.control_ack.put(None)
                    continue
                # The main thread may have read a reply along with the cell
                # (in one read): it is in the buffer, not in the pipe.
                if self._pass_on_frames(fill=False):
                    continue
            elif reading:
                if self._pass_on_frames(fill=True):
                    continue
            elif self.exit_status is not None:
                return    # a finished spawn: main() exits with its status
            # The driver is gone: end the jail (pid 1 then takes every
            # remaining process with it), even in the middle of a cell.
            os._exit(0)

    def _pass_on_frames(self, fill):
        """The channel thread's reading: one read if ``fill``, then every
        complete frame in the buffer to the one it is for. False once the
        driver is gone (the end of the stream, or a bad frame)."""
        try:
            if fill and not self.frames.fill():
                return False
            frame = self.frames.next()
            while frame is not None:
                op = frame[0].get("op")
                if op == "reply":
                    self.replies.put(frame)
                elif op == "bye":
                    os._exit(0)     # the driver is closing the session
                else:
                    self.pending.append(frame)
                frame = self.frames.next()
        except (OSError, ValueError):
            return False
        return True

    def _lend_channel(self):
        """At a cell's start: from now on a host-function call (or one that a
        thread of an earlier cell is waiting for) has the channel thread read."""
        with self.channel_lock:
            self.main_reads = False
            self._reader_for_calls()

    def _reader_for_calls(self):
        # With channel_lock held.
        if self.call_waiting and not self.main_reads and not self.thread_reads:
            self.thread_reads = True
            os.write(self.control_w, b"r")

    def _take_channel_back(self):
        """At a cell's end: the main thread reads the channel again."""
        with self.channel_lock:
            self.main_reads = True
            lent, self.thread_reads = self.thread_reads, False
        if lent:
            os.write(self.control_w, b"s")
            self.control_ack.get()    # it has stopped reading

    def _next_request(self):
        """The next frame for the main loop, or None once the driver is gone."""
        while True:
            if self.pending:
                return self.pending.popleft()
            try:
                frame = self.frames.next()
                if frame is None:
                    self.spinner.spin()
                    frame = self.frames.read()
            except (OSError, ValueError):
                return None
            if frame is None or frame[0].get("op") != "reply":
                return frame
            # A reply to a call from a thread a cell left running, or a late
            # one to a call that was interrupted.
            self.replies.put(frame)

    def send(self, header, body=b""):
        if os.getpid() != self.pid:
            return
        data = encode_frame(header, body)
        if len(data) - len(body) - FRAME.size > HEADER_FROM_JAIL:
            # The driver would take it for an attack and end the session:
            # each op keeps its headers smaller (see _fit_result).
            raise ValueError("a %s frame's header of %d bytes is over the driver's limit"
                             % (header.get("op"), len(data) - len(body) - FRAME.size))
        with self.write_lock:
            _write_all(self.proto_out, data)

    # ------------------------------------------------------------ loop

    def serve(self):
        self.send({"op": "hello", "protocol": PROTOCOL, "pid": self.pid,
                   "python": sys.version.split()[0],
                   "server": "driver" if globals().get("FROM_DRIVER") else "rootfs"})
        while True:
            try:
                frame = self._next_request()
                if frame is None:
                    return    # the driver is gone: main() ends the jail
                header, body = frame
                rid = header.get("id")
                if type(rid) is not str:
                    rid = None
                try:
                    op = check_header(header, DRIVER).name
                except ValueError as e:
                    self.send({"op": "error", "id": rid, "error": _cut(str(e), ERROR_LIMIT)})
                    continue
                if op == "bye":
                    return
                handler = self.handlers.get(op)
                if handler is None:     # an operation that is not a request (a late reply)
                    self.send({"op": "error", "id": rid, "error": "unexpected %s frame" % op})
                    continue
                handler(rid, header, body)
                if self.exit_status is not None:
                    return
            except KeyboardInterrupt:
                continue
            except Exception as e:  # a bug here must not end the session
                try:
                    self.reply_error(rid, e)
                except Exception:
                    pass

    def reply_error(self, rid, e):
        err = {"op": "error", "id": rid,
               "error": _cut("%s: %s" % (type(e).__name__, e), ERROR_LIMIT)}
        if isinstance(e, OSError) and e.errno:
            err["errno"] = e.errno
            err["strerror"] = e.strerror
        self.send(err)

    def kill_others(self):
        return _kill_others()

    def op_ping(self, rid, header, body):
        self.send({"op": "pong", "id": rid})

    # ------------------------------------------------------------ cells

    def op_exec(self, rid, header, body):
        code = header.get("code", "")
        limit = header.get("output_limit")
        if isinstance(limit, int) and limit >= 0 and limit != self.output_limit:
            self.output_limit = limit
            for d in self.drains:
                with d.lock:
                    d.buf.set_limit(limit)
        self.cell_count += 1
        self._await_interrupts(header.get("interrupts"))
        name = header.get("name") or "<cell-%d>" % self.cell_count
        result = {"op": "result", "id": rid, "error": None, "value": None}
        started = self._processes_before_cell()
        self.images, self.shown_figures, self.displays = [], [], []
        room = header.get("image_limit")
        self.image_room = room if isinstance(room, int) and room >= 0 else 8 << 20
        if header.get("stream"):
            for d in self.drains:
                d.stream(rid, self.output_limit)
        self._lend_channel()
        try:
            self._run_cell(code, name, header, result)
        except KeyboardInterrupt as e:
            # Raised after the cell's own code had finished.
            if result["error"] is None:
                result["error"] = self._describe(e)
        finally:
            self._take_channel_back()
        if result["error"] is not None and header.get("kill_failed", True):
            # A cell that failed or was interrupted takes the processes it
            # started with it: what a fork bomb leaves behind once the cell's
            # own fork() fails, or a runaway child of a timed-out cell.
            # Processes of earlier cells (a server, a pool) are left alone.
            try:
                result["killed"] = _kill_started_since(started)
            except Exception:
                pass
        # One poll for both pipes rather than a read that fails on each.
        ready = {fd for fd, _ in self.output_poll.poll(0)}
        out, err = (d.take(self.output_limit, d.rfd in ready) for d in self.drains)
        result["stdout"] = [len(out.head), len(out.tail), out.omitted]
        result["stderr"] = [len(err.head), len(err.tail), err.omitted]
        images, self.images, self.shown_figures = self.images, [], []
        if images:
            result["images"] = [[mime, len(data)] for mime, data in images]
        displays, self.displays = self.displays, []
        if displays:
            result["displays"] = displays
        self.send(_fit_result(result),
                  b"".join([bytes(out.head), bytes(out.tail), bytes(err.head), bytes(err.tail)] +
                           [data for _mime, data in images]))

    def _processes_before_cell(self):
        """The jail's processes now, for _kill_started_since. Listing /proc is
        the costliest part of a trivial cell, so the list is kept while the
        pid namespace's last pid shows that nothing was started since. (Only
        pids going round their whole range between two cells, to the same
        last one, could fool that, and then a failing cell would also kill
        processes an earlier cell started.)"""
        key = None
        if self.last_pid_fd >= 0:
            try:
                key = os.pread(self.last_pid_fd, 32, 0)
            except OSError:
                pass
        if key is None or key != self.before_cell_key:
            # The key is read first: a process started while /proc is listed
            # changes it, and the next cell lists again.
            self.before_cell = (_pids(), _ticks_now())
            self.before_cell_key = key
        return self.before_cell

    def _run_cell(self, code, name, header, result):
        self._restore_fds()
        for attr, obj in (("stdin", self.stdin), ("stdout", self.stdout), ("stderr", self.stderr)):
            if getattr(sys, attr, None) is None or getattr(sys, attr).closed:
                setattr(sys, attr, obj)
        for obj, fd in ((self.stdout, 1), (self.stderr, 2)):
            if obj.closed:
                new = self._text(fd)
                if obj is self.stdout:
                    self.stdout = new
                else:
                    self.stderr = new
                if sys.stdout is obj:
                    sys.stdout = new
                if sys.stderr is obj:
                    sys.stderr = new
        _sig.signal(_sig.SIGINT, self.sigint_handler)
        _remember_source(name, code)
        _note_cell_file(name)
        # `await` at the top level of a cell, as in IPython: such a cell
        # compiles to a coroutine, run to its end on the session's loop.
        flags = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            # ast.parse's own compile, with _ast's nodes: the ast module imports
            # enum and contextlib (2-3 ms of a fresh session's first cell).
            tree = compile(code, name, "exec", _ast.PyCF_ONLY_AST)
            last = None
            if tree.body and isinstance(tree.body[-1], _ast.Expr):
                last = compile(_ast.Expression(tree.body.pop().value), name, "eval", flags)
            body = compile(tree, name, "exec", flags)
        except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
            # The code did not compile: no frames to show, only where and why.
            import traceback
            result["error"] = {"type": type(e).__name__, "message": self._safe(str, e, REPR_LIMIT),
                               "repr": self._safe(repr, e, REPR_LIMIT),
                               "traceback": "".join(traceback.format_exception_only(type(e), e))}
            result["error"]["short"] = result["error"]["traceback"]
            return
        value = None
        try:
            self.in_cell = True
            try:
                if body.co_flags & _CO_COROUTINE:
                    self._await(eval(body, self.namespace))
                else:
                    exec(body, self.namespace)
                if last is not None:
                    value = eval(last, self.namespace)
                    if last.co_flags & _CO_COROUTINE:
                        value = self._await(value)
                    if value is not None:
                        self._show(value, trailing=True)
            finally:
                self.in_cell = False
        except _EndCell as e:
            result["ended_by"] = {"name": e.name, "token": e.token}
        except BaseException as e:  # the cell's own exception, SystemExit included
            self.in_cell = False
            if os.getpid() != self.pid:
                self._end_forked_child()
            result["error"] = self._describe(e)
        if os.getpid() != self.pid:
            self._end_forked_child()
        if "ended_by" not in result:
            self._show_open_figures()
        self._flush()
        if value is not None:
            result["value"] = self._safe(repr, value, REPR_LIMIT)
            if header.get("str"):
                result["value_str"] = self._safe(str, value, REPR_LIMIT)
            if header.get("data"):
                try:
                    result["data"] = encode_value(value, limit=DATA_FROM_JAIL)
                except Exception as e:
                    # The host gets the repr, and why the value itself did not come.
                    why = str(e) if isinstance(e, PlainDataError) else \
                        "%s: %s" % (type(e).__name__, e)
                    if why.startswith("value larger than"):
                        why = ("the value is larger than the %d KiB a cell's data may take "
                               "(save it to a file and download it)" % (DATA_FROM_JAIL >> 10))
                    result["data_error"] = _cut(why, 1024)
            if header.get("formats"):
                try:
                    formats = _formats(value)
                except BaseException:
                    formats = None      # (an object whose attributes raise SystemExit)
                if formats:
                    result["formats"] = formats

    def _await(self, coroutine):
        """Runs a cell's coroutine on the session's own event loop (tasks a
        cell creates live on into later cells, as in IPython)."""
        import asyncio
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        task = self.loop.create_task(coroutine)
        try:
            return self.loop.run_until_complete(task)
        except BaseException:
            # An interrupt (the cell's timeout) ends the cell's coroutine too.
            if not task.done():
                task.cancel()
                try:
                    self.loop.run_until_complete(task)
                except BaseException:
                    pass
            raise

    # ------------------------------------------------------------ rich results

    def display(self, *objects):
        """Show objects as the cell's results, as IPython's display() does:
        a matplotlib figure, or an object with _repr_png_/_repr_jpeg_/_repr_svg_
        (a PIL image), becomes an image of the cell's result (CellResult.images);
        anything else is printed as its repr."""
        for obj in objects:
            if not self._show(obj):
                print(repr(obj))
                self._keep_display(obj)

    def _keep_display(self, obj):
        """A displayed object's rich formats (a DataFrame's HTML table, JSON),
        for the cell's result (CellResult.displays), as E2B gives them."""
        if len(self.displays) >= DISPLAYS_LIMIT:
            return
        try:
            formats = _formats(obj)
        except BaseException:
            return
        if formats:
            formats["text/plain"] = self._safe(repr, obj, REPR_LIMIT)
            self.displays.append(formats)

    def _show(self, obj, trailing=False):
        """Adds ``obj``'s image to the cell's result, if it has one: True if it
        had one (shown, or left out for the limits, with a note on stderr).
        For a cell's trailing value, an image that cannot be made is noted
        on stderr, not raised."""
        try:
            image = _image_of(obj)
        except Exception as e:
            if not trailing:
                raise
            self._note("the image of the cell's value could not be made: %s: %s"
                       % (type(e).__name__, e))
            return True
        if image is None:
            return False
        if _is_figure(obj):
            if any(f is obj for f in self.shown_figures):
                return True     # shown once per cell (a trailing figure pyplot also holds)
            self.shown_figures.append(obj)
        mime, data = image
        if len(self.images) >= IMAGES_LIMIT or len(data) > self.image_room:
            self._note("an image (%s, %d bytes) was left out of the result: a cell's result "
                       "holds at most %d images and %d more bytes of them"
                       % (mime, len(data), IMAGES_LIMIT, self.image_room))
            return True
        self.image_room -= len(data)
        self.images.append((mime, data))
        return True

    def _show_figures(self):
        """pyplot.show() in a cell: every open figure becomes an image of the
        cell's result and is closed (as IPython's inline backend does)."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf
            figures = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
        except Exception:
            figures = [pyplot.figure(n) for n in pyplot.get_fignums()]
        try:
            for fig in figures:
                self._show(fig)
        finally:
            pyplot.close("all")

    def _show_open_figures(self):
        """At a cell's end: the figures it left open, as if it had called
        pyplot.show() (a figure is shown once, then closed)."""
        if "matplotlib.pyplot" not in sys.modules:
            return
        try:
            self.in_cell = True
            try:
                self._show_figures()
            finally:
                self.in_cell = False
        except BaseException as e:
            self._note("the cell's figures could not be shown: %s: %s" % (type(e).__name__, e))

    def _note(self, text):
        try:
            sys.stderr.write("[pyjail: %s]\n" % text)
        except Exception:
            pass

    def _end_forked_child(self):
        # A bare os.fork() in a cell: the child ends where the cell ends.
        self._flush()
        os._exit(0)

    @staticmethod
    def _flush():
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                f.flush()
            except Exception:
                pass

    @staticmethod
    def _safe(fn, value, limit):
        try:
            text = fn(value)
        except BaseException as e:
            text = "<%s of %s object failed: %s: %s>" % (
                fn.__name__, type(value).__name__, type(e).__name__, e)
        if not isinstance(text, str):
            text = "<%s returned %s>" % (fn.__name__, type(text).__name__)
        if len(text) > limit:
            text = text[:limit] + "... [%d more characters]" % (len(text) - limit)
        return text

    @staticmethod
    def _describe(e):
        """The exception as the cell would see it: its traceback without the
        server's own frames (the cell, and what the cell called). Never fails:
        the cell's result goes back even when the traceback cannot be made
        (e.g. the traceback module cannot be imported)."""
        here = _OWN_FILES
        text = te = None
        try:
            import traceback
            if _pending_sources:    # a cell took the import hook away: its lines still show
                _fill_linecache(sys.modules["linecache"])
            te = traceback.TracebackException(type(e), e, e.__traceback__, limit=200)
            seen = set()
            todo = [te]
            while todo:
                t = todo.pop()
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                t.stack = traceback.StackSummary.from_list(
                    [f for f in t.stack if f.filename not in here])
                todo.extend((t.__cause__, t.__context__))
            text = "".join(te.format())
        except BaseException:
            pass
        if text is None:
            text = "%s (traceback unavailable)\n" % type(e).__name__
        if len(text) > TRACEBACK_LIMIT:
            cut = len(text) - TRACEBACK_LIMIT
            text = "[%d characters omitted]\n%s" % (cut, text[cut:])
        try:
            short = _short_traceback(e, te)
        except BaseException:
            short = text
        # repr: LangChain's PythonREPL reports an error as repr(exc), which the
        # host cannot rebuild from the type and str() (KeyError('k'), OSError(2, ...)).
        return {"type": type(e).__name__, "message": Server._safe(str, e, REPR_LIMIT),
                "repr": Server._safe(repr, e, REPR_LIMIT), "traceback": text, "short": short}

    # ------------------------------------------------------------ host functions

    def op_expose(self, rid, header, body):
        ends = set(header.get("ends_cell", ()))
        for name, doc in header.get("functions", {}).items():
            self.namespace[name] = self._stub(name, doc, name in ends)
        self.send({"op": "ok", "id": rid})

    def _stub(self, name, doc, ends_cell):
        server = self

        def host_function(*args, **kwargs):
            return server.call_host(name, args, kwargs, ends_cell)

        host_function.__name__ = host_function.__qualname__ = name
        host_function.__doc__ = doc or "%s: runs outside the jail, on the host" % name
        host_function.__module__ = "__main__"
        return host_function

    def call_host(self, name, args, kwargs, ends_cell):
        if os.getpid() != self.pid:
            raise RuntimeError("%s() can only be called from the session's own process" % name)
        try:
            payload = {"args": encode_value(list(args)), "kwargs": encode_value(dict(kwargs))}
        except PlainDataError as e:
            raise TypeError("arguments of %s() must be plain data (str, numbers, bytes, "
                            "lists, tuples, dicts, sets), dates and times, Decimal, UUID, "
                            "or numpy and pandas values: %s" % (name, e)) from None
        if len(_encode_json(payload)) > HEADER_FROM_JAIL - 4096:
            raise TypeError("arguments of %s() are too large to send to the host (more than "
                            "%d KiB encoded): pass a file name instead" % (name, HEADER_FROM_JAIL >> 10))
        # One call at a time (threads of the cell may call too); the driver
        # answers while a cell runs.
        with self.call_lock:
            self.next_call += 1
            cid = "c%d" % self.next_call
            payload.update({"op": "call", "id": cid, "name": name})
            with self.channel_lock:
                self.call_waiting = True
                self._reader_for_calls()
            try:
                self.send(payload)
                while True:
                    header, body = self.replies.get()
                    if header.get("id") == cid:
                        break     # (a late reply to an interrupted call is dropped)
            finally:
                with self.channel_lock:
                    self.call_waiting = False
        if "error" in header:
            etype = str(header.get("type", ""))
            message = str(header.get("error", ""))
            import builtins
            cls = getattr(builtins, etype, None)
            if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception:
                try:
                    exc = cls(message)
                except Exception:
                    exc = HostFunctionError("%s: %s" % (etype, message))
            else:
                exc = HostFunctionError("%s: %s" % (etype, message) if etype else message)
            raise exc
        if ends_cell:
            raise _EndCell(name, header.get("token"))
        try:
            return decode_value(header.get("value"), allow_pickle=True)
        except ValueError as e:
            raise HostFunctionError("%s(): the result could not be rebuilt in the jail: %s"
                                    % (name, e)) from None

    def op_set(self, rid, header, body):
        failed = {}
        for name, tree in header.get("variables", {}).items():
            try:
                self.namespace[name] = decode_value(tree, allow_pickle=True,
                                                    pickle_fallback=False)
            except Exception as e:
                failed[name] = _cut("%s: %s" % (type(e).__name__, e), 1024)
        self.send({"op": "ok", "id": rid, "failed": failed})

    # ------------------------------------------------------------ files

    @staticmethod
    def _path(p):
        if not isinstance(p, str) or not p or "\0" in p:
            raise ValueError("bad path %r" % (p,))
        return p if os.path.isabs(p) else os.path.join(WORKDIR, p)

    def op_put(self, rid, header, body):
        try:
            path = self._path(header.get("path"))
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            tmp = "%s.pyjail-%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as f:
                f.write(body)
            mode = header.get("mode")
            if isinstance(mode, int):
                os.chmod(tmp, mode & 0o777)
            os.replace(tmp, path)
            st = os.stat(path)
            self.send({"op": "ok", "id": rid, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        except Exception as e:
            try:
                os.unlink(tmp)
            except Exception:
                pass
            self.reply_error(rid, e)

    def op_get(self, rid, header, body):
        try:
            path = self._path(header.get("path"))
            limit = int(header.get("max_bytes", 64 << 20))
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > limit:
                    self.send({"op": "error", "id": rid, "too_large": size,
                               "error": "%s is %d bytes, more than the limit of %d"
                               % (header.get("path"), size, limit)})
                    return
                data = f.read(limit + 1)
            if len(data) > limit:
                self.send({"op": "error", "id": rid, "too_large": len(data),
                           "error": "%s grew past the limit of %d bytes"
                           % (header.get("path"), limit)})
                return
            self.send({"op": "file", "id": rid}, data)
        except Exception as e:
            self.reply_error(rid, e)

    def op_list(self, rid, header, body):
        try:
            entries = list_files(self._path(header.get("path") or "."),
                                  header.get("patterns"), int(header.get("max_entries", 10000)))
            fitting = _fitting(entries, HEADER_FROM_JAIL - 4096)
            self.send({"op": "ok", "id": rid, "entries": fitting,
                       "truncated": len(fitting) < len(entries)})
        except Exception as e:
            self.reply_error(rid, e)

    # ------------------------------------------------------------ processes

    def op_killall(self, rid, header, body):
        self.send({"op": "ok", "id": rid, "killed": _kill_others()})

    def op_spawn(self, rid, header, body):
        """pyjail.run with files (see _spawn): main() then exits with the
        program's status."""
        spawn.serve_spawn(self, rid, header, body)


# A code object's flag: compiled from a cell with a top-level await (the value
# of inspect.CO_COROUTINE, without importing inspect).
_CO_COROUTINE = 0x0080


def _is_figure(obj):
    figure = sys.modules.get("matplotlib.figure")
    cls = getattr(figure, "Figure", None)
    return cls is not None and isinstance(obj, cls)


def _image_of(obj):
    """(MIME type, bytes) of what a notebook would show of ``obj`` as an
    image, or None: a matplotlib figure as PNG, else the object's own
    _repr_png_, _repr_jpeg_ or _repr_svg_ (IPython's protocol)."""
    import io
    if _is_figure(obj):
        buf = io.BytesIO()
        obj.savefig(buf, format="png", bbox_inches="tight")
        return "image/png", buf.getvalue()
    if isinstance(obj, type):
        return None     # a class, whose _repr_png_ is a plain function
    for method, mime in (("_repr_png_", "image/png"), ("_repr_jpeg_", "image/jpeg"),
                         ("_repr_svg_", "image/svg+xml")):
        fn = getattr(obj, method, None)
        if not callable(fn):
            continue
        data = fn()
        if isinstance(data, tuple) and data:
            data = data[0]      # (data, metadata)
        if isinstance(data, str) and mime == "image/svg+xml":
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray)):
            return mime, bytes(data)
    return None


def _patch_pyplot(pyplot, show):
    """Give matplotlib.pyplot a show() that shows the figures as the cell's
    images (its own would warn that the headless backend cannot show them)."""

    def show_figures(*args, **kwargs):
        """Show every open figure as an image of the cell's result, and
        close it (pyjail)."""
        show()

    pyplot.show = show_figures


class _AfterImport:
    """A finder on sys.meta_path that calls ``after[name](module)`` once the
    module ``name`` is imported (matplotlib.pyplot's show, linecache's cells:
    see _remember_source). It finds nothing itself: the usual finders do, and
    their loader is wrapped."""

    def __init__(self, after):
        self.after = after

    def find_spec(self, fullname, path=None, target=None):
        then = self.after.get(fullname)
        if then is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        load = getattr(loader, "exec_module", None)
        if load is None or isinstance(loader, type):
            return spec     # a class (frozen, built-in): wrapping it would wrap every module's

        def exec_module(module):
            load(module)
            then(module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass     # a loader that cannot be wrapped
        return spec


# The cells' sources for tracebacks, until linecache is imported (see
# _remember_source).
_pending_sources = {}


def _remember_source(name, code):
    """A cell's source, in linecache's cache, for the tracebacks of its
    frames. linecache itself is imported only by what reads it (a traceback,
    pdb, inspect): it imports tokenize, and so re and enum, several ms of a
    fresh session's first cell. Until then the entries wait here, and
    _AfterImport hands them over."""
    entry = (len(code), None, code.splitlines(True), name)
    linecache = sys.modules.get("linecache")
    if linecache is not None:
        linecache.cache[name] = entry
    else:
        _pending_sources[name] = entry


def _fill_linecache(linecache):
    linecache.cache.update(_pending_sources)
    _pending_sources.clear()


# The file names of cells (linecache's), whose frames are the code's own in a
# short traceback: "<cell-N>", and the names the driver gave (at most
# _NAMED_CELLS of them are remembered).
_NAMED_CELLS = 1000
_cell_files = set()


def _note_cell_file(name):
    if not name.startswith("<cell-") and len(_cell_files) < _NAMED_CELLS:
        _cell_files.add(name)


def _is_cell_file(name):
    return name in _cell_files or (name.startswith("<cell-") and name.endswith(">") and
                                   name[6:-1].isdigit())


SHORT_TRACEBACK_LIMIT = 8192


def _short_traceback(e, te):
    """The traceback a model needs: the frames of the cells' own code, each
    run of library frames between them as one line naming the libraries,
    and the exception (as IPython's short tracebacks do). The chained
    exceptions of the full traceback are left out."""
    import traceback
    if te is None:
        return "".join(traceback.format_exception_only(type(e), e))
    lines = []
    run = []        # the current run of the code's own frames
    hidden = []     # the current run of library frames

    def flush_own():
        if run:
            lines.extend(traceback.StackSummary.from_list(run).format())
            del run[:]

    def flush_hidden():
        if hidden:
            libraries = []
            for f in hidden:
                lib = _library_of(f.filename)
                if lib not in libraries:
                    libraries.append(lib)
            lines.append("  [... %d frame%s in %s ...]\n" % (
                len(hidden), "s" if len(hidden) > 1 else "", ", ".join(libraries[:4])))
            del hidden[:]

    for f in te.stack:
        if _is_cell_file(f.filename):
            flush_hidden()
            run.append(f)
        else:
            flush_own()
            hidden.append(f)
    flush_own()
    flush_hidden()
    head = "Traceback (most recent call last):\n" if lines else ""
    tail = "".join(te.format_exception_only())
    body = "".join(lines)
    room = SHORT_TRACEBACK_LIMIT - len(tail) - len(head)
    if len(body) > room:
        cut = len(body) - max(room, 0)
        body = "[%d characters omitted]\n%s" % (cut, body[cut:])
    return head + body + tail


def _library_of(filename):
    """What a model should read of a library frame's file: its package
    (``pandas``), or the file's base name."""
    if filename.startswith("<"):
        return filename
    parts = filename.split("/")
    # The part after .../site-packages/ or, for the standard library, after .../python3.X/.
    for i in range(len(parts) - 2, -1, -1):
        part = parts[i]
        if part in ("site-packages", "dist-packages") or \
                (part.startswith("python") and part[6:7].isdigit()):
            name = parts[i + 1]
            return name[:-3] if name.endswith(".py") else name
    return parts[-1]


def _formats(value):
    """The trailing value as a notebook would show it besides its repr
    (text/plain) and images: {MIME type: content}. HTML, Markdown and LaTeX
    from the object's own _repr_html_ and the like (a DataFrame's table),
    application/json for a dict or list of JSON values (or _repr_json_).
    Each at most FORMAT_LIMIT characters (a larger one is left out)."""
    out = {}
    if isinstance(value, type):
        return out      # a class, whose _repr_html_ is a plain function
    for method, mime in (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
                         ("_repr_latex_", "text/latex"), ("_repr_json_", "application/json")):
        fn = getattr(value, method, None)
        if not callable(fn):
            continue
        try:
            content = fn()
        except Exception:
            continue
        if isinstance(content, tuple) and content:
            content = content[0]        # (data, metadata)
        if mime == "application/json":
            content = _as_json(content)
            if content is not _NOT_JSON:
                out[mime] = content
        elif isinstance(content, str) and len(content) <= FORMAT_LIMIT:
            out[mime] = content
    if "application/json" not in out and type(value) in (dict, list, tuple):
        content = _as_json(value)
        if content is not _NOT_JSON:
            out["application/json"] = content
    return out


_NOT_JSON = object()


def _as_json(value):
    """``value`` as a JSON tree (a tuple as a list) of at most FORMAT_LIMIT
    characters, or _NOT_JSON."""
    budget = [FORMAT_LIMIT]

    def walk(v, depth):
        budget[0] -= 8
        if budget[0] < 0 or depth > 64:
            raise ValueError
        if v is None or type(v) in (bool, int):
            if type(v) is int and not -(1 << 63) <= v < (1 << 63):
                raise ValueError
            return v
        if type(v) is float:
            if v != v or v in (float("inf"), float("-inf")):
                raise ValueError
            return v
        if type(v) is str:
            budget[0] -= len(v)
            if budget[0] < 0:
                raise ValueError
            return v
        if type(v) in (list, tuple):
            return [walk(x, depth + 1) for x in v]
        if type(v) is dict:
            if not all(type(k) is str for k in v):
                raise ValueError
            budget[0] -= sum(len(k) for k in v)
            return {k: walk(x, depth + 1) for k, x in v.items()}
        raise ValueError

    try:
        return walk(value, 0)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _cut(text, limit):
    """text, cut to ``limit`` characters with a note of how many were left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + "... [%d more characters]" % (len(text) - limit)


def _fitting(entries, room):
    """The longest start of ``entries`` whose JSON fits in ``room`` bytes."""
    for i, entry in enumerate(entries):
        room -= len(_encode_json(entry)) + 1
        if room < 0:
            return entries[:i]
    return entries


def _fit_result(result):
    """A cell's result header, made to fit in HEADER_FROM_JAIL: first without
    the plain data (the driver then has the value's repr), then with its texts
    cut shorter. (A repr of 64K characters can take 12 bytes each in JSON.)"""
    err = result.get("error") or {}
    texts = (result.get("value"), result.get("value_str"), err.get("type"), err.get("message"),
             err.get("repr"), err.get("traceback"), err.get("short"))
    if "data" not in result and "formats" not in result and "displays" not in result and \
            12 * sum(len(t) for t in texts if isinstance(t, str)) < HEADER_FROM_JAIL - 4096:
        return result       # the usual cell: no need to encode it twice
    if len(_encode_json(result)) <= HEADER_FROM_JAIL:
        return result
    for key in ("displays", "formats", "data"):
        if result.pop(key, None) is not None and key == "data":
            result["data_error"] = ("the value and the rest of the result are more than the "
                                    "%d KiB a result may take" % (HEADER_FROM_JAIL >> 10))
        if len(_encode_json(result)) <= HEADER_FROM_JAIL:
            return result
    for limit in (REPR_LIMIT // 8, 256):
        if len(_encode_json(result)) <= HEADER_FROM_JAIL:
            break
        for key in ("value", "value_str"):
            if isinstance(result.get(key), str):
                result[key] = _cut(result[key], limit)
        err = result.get("error")
        if isinstance(err, dict):
            for key in ("type", "message", "repr", "traceback", "short"):
                if isinstance(err.get(key), str):
                    err[key] = _cut(err[key], limit)
    return result


def _start_thread(target):
    """Start the server's own thread running target(), without waiting for it to run (as
    threading.Thread.start does: a context switch each, paid by every session's start). It
    is not among threading.enumerate()'s, and like a daemon thread it ends with the process."""
    import _thread
    _thread.start_new_thread(target, ())


def _become_unreachable():
    """Make this process non-dumpable, before any user code runs: the
    program that pyjail.run starts as its child has the same uid, and could
    otherwise open the channel through /proc/PPID/fd/N, or write into this
    process through /proc/PPID/mem (or ptrace it), and send the driver
    frames of its own. (execve makes a process dumpable again, so pid 1's
    setting does not carry over to this interpreter.) Non-dumpable, its
    /proc files belong to root, and only CAP_SYS_PTRACE, which nothing in
    the jail has, gets through. ctypes is the only way to prctl() from
    Python; this is trusted code that runs before any untrusted byte is
    read. Raises OSError (or ImportError) when that cannot be done.

    In a fork of a template (Pool.session), the template's C half does the
    same prctl: ctypes' libc, loaded there, copied about 150 of the
    template's pages (0.5 ms of the session's start). Returns which way it
    was done: "template" or "ctypes"."""
    make_undumpable = getattr(sys.modules.get("_pyjail_template"), "make_undumpable", None)
    if make_undumpable is not None:
        make_undumpable()
        return "template"
    pr_get_dumpable, pr_set_dumpable = 3, 4
    prctl, get_errno = _libc_prctl()
    if prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        e = get_errno()
        raise OSError(e, "prctl(PR_SET_DUMPABLE, 0): %s" % os.strerror(e))
    if prctl(pr_get_dumpable, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) left the process dumpable")
    return "ctypes"


def _libc_prctl():
    """libc's prctl, as ctypes.CDLL(None, use_errno=True).prctl would give it,
    and the errno getter: from ctypes' C half alone where it has what ctypes
    itself builds that from (0.5 ms in a fresh jail, against 2.2 ms for the
    ctypes package, of a session's start); else through the package."""
    try:
        import _ctypes

        class c_int(_ctypes._SimpleCData):
            _type_ = "i"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = c_int

        class Libc:     # what CFuncPtr reads of a CDLL: its handle
            _handle = _ctypes.dlopen(None, 0)

        return Function(("prctl", Libc())), _ctypes.get_errno
    except (ImportError, AttributeError, TypeError, OSError):
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl, ctypes.get_errno


def _ticks_now():
    """Clock ticks since boot, the unit of a process's start time in /proc."""
    try:
        with open("/proc/uptime", "rb") as f:
            up = float(f.read().split()[0])
        return int(up * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _pids():
    try:
        return {int(e) for e in os.listdir("/proc") if e.isdigit()}
    except OSError:
        return set()


def _kill_started_since(since):
    """SIGKILL every process of the jail (but this one) that was not there at
    ``since`` (the pids then, and the time in ticks), reap the ones that were
    this process's children, and return how many were killed. Stopped first
    (see stop_then_kill): a fork bomb's processes fork while they are killed."""
    signal = _sig
    before, start = since
    me = os.getpid()

    def earlier(pid, started):
        # A pid that was there already is new only if it was reused: its
        # start time is clearly (two ticks, for rounding) after the start.
        return pid in (1, me) or (pid in before and (start is None or started <= start + 1))

    def listing():
        found = []
        for pid, state, ppid, started in processes():
            if earlier(pid, started):
                continue
            if state in ("Z", "X") and ppid == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            found.append((pid, state))
        return found

    def suspects():
        # Names only, no /proc/PID/stat read: what the bomb forks while this
        # runs is stopped sooner. (A reused old pid waits for listing().)
        return [pid for pid in _pids() if pid not in before and pid != me]

    def send(pid, sig):
        try:
            os.kill(pid, sig)
            return True
        except OSError:
            return False

    resume = []

    def stop_everyone():
        # Every process of the jail but pid 1 and this one, in one call that
        # no fork slips past; those of earlier cells that were running are
        # continued once the new ones are dead.
        resume.extend(pid for pid, state, _ppid, started in processes()
                      if earlier(pid, started) and pid not in (1, me) and state in "RSD")
        try:
            os.kill(-1, signal.SIGSTOP)
        except OSError:
            pass

    try:
        return len(stop_then_kill(listing, send, suspects, stop_everyone))
    finally:
        for pid in resume:
            send(pid, signal.SIGCONT)


def _kill_others():
    """SIGKILL every process of the jail but this one and pid 1, then reap
    this process's own children. Returns how many processes were killed."""
    signal = _sig
    me = os.getpid()
    killed = set()
    for _ in range(50):
        alive = [pid for pid, state, _parent, _start in processes()
                 if pid not in (1, me) and state not in ("Z", "X")]
        if not alive:
            break
        killed.update(alive)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        _reap_children()
        time.sleep(0.005)
    _reap_children()
    return len(killed)


def _reap_children():
    """Reaps every child of this process that has ended, without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# How this server made itself non-dumpable (see _become_unreachable), for the tests.
UNREACHABLE_BY = None


def main():
    global UNREACHABLE_BY
    try:
        UNREACHABLE_BY = _become_unreachable()
    except Exception as e:
        # Fail closed: no user code runs in a process it could take over.
        _write_all(1, encode_frame({"op": "refused", "error": _cut(
            "the in-jail server cannot make itself non-dumpable (%s: %s); the rootfs's "
            "Python needs ctypes and the syscall filter prctl" % (type(e).__name__, e), 4096)}))
        os._exit(125)
    server = Server()
    try:
        server.serve()
    finally:
        server._flush()
    status = server.exit_status
    if status is None:
        os._exit(0)
    if status < 0:
        # Die of the same signal, so pyjail reports it as the program's.
        signal = _sig
        sig = -status
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
