"""pyjail.Pool: fresh jails with modules already imported, from templates.

A Pool starts ``size`` servers (``pyjail serve``), each holding a template: a
jailed interpreter that has imported ``preload`` from the rootfs and waits.
Every ``Pool.run`` is a fork of a template that becomes a jail of its own
(its own pid, mount, network, IPC, UTS and cgroup namespaces, private /work
and /tmp, every capability dropped, no_new_privs, the profile's filter and
limits) before the program exists: the isolation of ``pyjail.run``, without
paying for the imports. Nothing of one run reaches the next; see man
pyjail(1), TEMPLATES, for what a run shares with its template (address-space
layout, hash seed).

Runs are independent: any number may run at once, from threads or from
asyncio (``await pool.arun(...)``). A template that ends (killed, out of
memory) is started again by its server; the run that finds it gone says so
on stderr. With ``files=`` or ``outputs=``, the run's in-jail file server
forks the program from itself: the preloads are there too.

A Pool's process killed with SIGKILL leaves nothing running: each template's
server stops once its reader is gone, the launcher once its socket closes.
Its two directories (the sockets', the runs' scripts') are removed by the
next Pool the same user starts there.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import select
import shutil
import signal
import stat
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any, List, Mapping, Optional, Sequence, Union

from ._common import (EXIT_PYJAIL_ERROR, JailError, Limits, Report, find_binary, option_args,
                      refuse_given_twice, setup_error)
from ._run import Result, run
from ._session import Session

__all__ = ["Pool"]

# Options of `pyjail serve` itself, not of the runs it starts.
_SERVER_ONLY = frozenset({"preload", "socket", "report", "report-fd", "explain"})


class _Server:
    """One ``pyjail serve`` process and its socket."""

    def __init__(self, binary: str, socket: str, args: List[str], timeout: float) -> None:
        self.socket = socket
        self._err = tempfile.TemporaryFile(prefix="pyjail-serve-")
        self._report = tempfile.TemporaryFile(prefix="pyjail-serve-report-")
        fd = self._report.fileno()
        self.proc = subprocess.Popen([binary, "serve", "--socket", socket, "--report-fd", str(fd)]
                                     + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._err, close_fds=True, pass_fds=(fd,),
                                     start_new_session=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                self.close()
                raise JailError("pyjail: the template did not get ready in %.0f s" % timeout)
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.proc.wait()
                raise self._start_error()
            line += chunk

    def _start_error(self) -> JailError:
        """Why the server ended before it was ready: its report's error, with the last
        line the template itself wrote (a module the rootfs lacks, say), which pyjail's
        line refers to ("its error is above")."""
        try:
            report = Report.parse(os.pread(self._report.fileno(), 4 << 20, 0))
        except OSError:
            report = None
        err = self.stderr()
        if report is not None and report.error:
            own = [l.strip() for l in err.splitlines()
                   if l.strip() and not l.startswith("pyjail: ")]
            return JailError.from_report(
                report, "; the template said: %s" % own[-1][:500] if own else "")
        if self.proc.returncode == EXIT_PYJAIL_ERROR:
            return setup_error(err.encode(), report)
        return JailError(err.strip() or
                         "pyjail: pyjail serve exited with status %s" % self.proc.returncode)

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-8192:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
        self._report.close()


_LAUNCH_MAGIC = b"PYJAIL-LAUNCH/1"


class _LaunchedProcess:
    """A ``pyjail`` that a Pool's launcher forked for one run or session,
    with the face of the ``subprocess.Popen`` it would otherwise have (stdin,
    stdout, stderr, pid, poll, wait, send_signal, kill, returncode), so that
    ``pyjail.run`` and ``Session`` read it the same way."""

    def __init__(self, launcher: "_Launcher", run_id: int) -> None:
        self._launcher = launcher
        self._id = run_id
        self._pid: Optional[int] = None
        self.args = ["pyjail", "launcher"]
        self.returncode: Optional[int] = None
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        self._done = threading.Event()
        self._known = threading.Event()      # its start, or its end, was heard of
        self._lost: Optional[JailError] = None
        self._pidfd: Optional[int] = None    # its pyjail's, from the launcher

    def _started(self, pidfd: int) -> None:
        self._pidfd = pidfd
        self._pid = _pid_of(pidfd)
        self._known.set()

    def _ended(self, status: int) -> None:
        self.returncode = status
        self._forget_pidfd()
        self._done.set()
        self._known.set()

    def _failed(self, error: JailError) -> None:
        self._lost = error
        self.returncode = EXIT_PYJAIL_ERROR
        self._forget_pidfd()
        self._done.set()
        self._known.set()

    def _forked(self) -> None:
        """In a fork of this process: its pyjail is the parent's, which this process
        neither signals nor waits for (a finalizer at the fork's exit would)."""
        # Events of their own: a thread that the fork left behind may hold the parent's.
        self._done, self._known = threading.Event(), threading.Event()
        self._failed(JailError("pyjail: this pyjail is the parent process's (this is a fork)"))

    def _signal(self, sig: int = signal.SIGKILL) -> bool:
        """``sig`` to its pyjail through its pidfd (with SIGKILL its jail ends with it).
        Called with the launcher's lock held: the pidfd is closed only under it."""
        if self._pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except OSError:
            pass
        return True

    def _forget_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            os.close(fd)

    @property
    def pid(self) -> Optional[int]:
        """Its pyjail's pid (None if the launcher has not said it started it)."""
        self._known.wait(_STARTED_WITHIN_S)
        return self._pid

    def poll(self) -> Optional[int]:
        return self.returncode if self._done.is_set() else None

    def holds_pid(self) -> bool:
        """Whether ``pid`` still names its pyjail. The launcher reaps it at once,
        before it says so: only the pidfd tells that the pid may be another's now."""
        with self._launcher._lock:
            if self._pidfd is None or self._done.is_set():
                return False
            try:
                signal.pidfd_send_signal(self._pidfd, 0)
            except OSError:
                return False
            return True

    def wait(self, timeout: Optional[float] = None) -> int:
        """Its exit status; raises, once, the JailError of a run that the
        launcher could not start or lost (it ended while the run was in flight)."""
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("pyjail", timeout or 0.0)
        lost, self._lost = self._lost, None
        if lost is not None:
            raise lost
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """``sig`` to its pyjail (a Session's interrupt: pyjail relays SIGINT to
        the program). The launcher's word that it started it comes on another
        socket than the jail's own output, so it may arrive after the session's
        hello: waited for, briefly. ProcessLookupError if nothing was sent (it has
        ended, or its start was never heard of): the Session does not count it
        as an interrupt the next cell must wait for."""
        self._known.wait(_STARTED_WITHIN_S)
        with self._launcher._lock:
            if not self._done.is_set() and self._signal(sig):
                return
        raise ProcessLookupError("pyjail: the run's pyjail has ended or never started")

    def kill(self) -> None:
        with self._launcher._lock:
            if self._done.is_set() or self._signal():
                return
        self._launcher.kill(self._id)


# How long a signal or a pid waits for the launcher to say it started a run's pyjail.
_STARTED_WITHIN_S = 5.0


def _pid_of(pidfd: int) -> Optional[int]:
    """The pid a pidfd refers to (its fdinfo's Pid line), or None."""
    try:
        with open("/proc/self/fdinfo/%d" % pidfd, "rb") as f:
            for line in f:
                if line.startswith(b"Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        pass
    return None


# A Pool's directories (its sockets', its launcher's scripts'): this prefix and a random
# suffix, each locked (flock) by the process that made it for as long as it holds it. One
# whose lock can be taken was left by a process killed with SIGKILL, which no cleanup
# outlives; the next Pool of the same user in the same place removes it.
_DIR_PREFIX = "pyjail-pool."
# A directory only this new, or changed this lately, is never taken for stale: one just made
# may not be locked yet.
_STALE_AFTER = 60.0


def _own_dir(parent: Optional[str] = None) -> "tuple[str, int]":
    """A new directory of this process's (0700) in ``parent`` (the temporary directory by
    default), and the descriptor that holds its lock; stale ones removed first."""
    parent = parent or tempfile.gettempdir()
    _sweep_stale(parent)
    path = tempfile.mkdtemp(prefix=_DIR_PREFIX, dir=parent)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def _sweep_stale(parent: str) -> None:
    """Removes this user's Pool directories in ``parent`` that no live process holds."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for e in entries:
        if not e.name.startswith(_DIR_PREFIX):
            continue
        try:
            st = e.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or \
                    now - max(st.st_mtime, st.st_ctime) < _STALE_AFTER:
                continue
            fd = os.open(e.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Held: no one else can take it for live meanwhile. (rmtree refuses a link.)
            shutil.rmtree(e.path, ignore_errors=True)
        except OSError:
            pass          # held by a live Pool
        finally:
            os.close(fd)


def _release_dir(path: str, fd: int) -> int:
    """Removes a directory of _own_dir's, then lets its lock go; returns -1, the descriptor's
    value from then on (a second call does nothing)."""
    if fd >= 0:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
    return -1


class _Launcher:
    """The Pool's ``pyjail launcher``: one long-lived pyjail that forks the
    ``pyjail --via`` of each run (launcher.hpp in pyjail's sources), instead
    of a fork and exec of pyjail from this process per run. The same command
    line, pipes and report as a run started here; the run's supervision (its
    limits, filter listener and report) is that pyjail's own, in a process of
    its own. Started on the first run; if it ends, the runs in flight fail
    with a JailError that says so, and the next run starts another."""

    def __init__(self, binary: str) -> None:
        self._binary = binary
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._runs: dict = {}
        self._sock: Optional[socket.socket] = None
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._err: Any = None
        self._closed = False
        self._owner = os.getpid()
        _LAUNCHERS.add(self)
        # The runs' scripts: in memory (/dev/shm) unless a temporary directory is named
        # (TMPDIR, TEMP, TMP): a disk's journal under load made a run wait tens of ms
        # to create and remove its script's directory.
        shm = "/dev/shm"
        in_memory = os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) and not any(
            os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP"))
        self.script_dir, self._dir_lock = _own_dir(shm if in_memory else None)

    def _forked(self) -> None:
        """In a fork of this process (a multiprocessing worker): the launcher, its
        socket and its runs stay the parent's. Shared, the launcher's answers would reach
        the parent's reader alone, under ids the child takes from the same count (its runs
        hang, the parent's are refused or given the child's status); the child's pidfds of
        the parent's runs would let it kill them. The child starts a launcher of its own."""
        self._lock = threading.Lock()    # perhaps held by a thread the fork left behind
        for run in self._runs.values():
            run._forked()
        self._runs = {}
        for f in (self._sock, self._err):
            if f is not None:
                f.close()
        self._sock = self._proc = self._err = None

    def _start(self) -> socket.socket:
        """Called with the lock held."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        err = tempfile.TemporaryFile(prefix="pyjail-launcher-")
        try:
            proc = subprocess.Popen([self._binary, "launcher"], stdin=theirs.fileno(),
                                    stdout=subprocess.DEVNULL, stderr=err, close_fds=True,
                                    start_new_session=True)
        except OSError as e:
            ours.close()
            err.close()
            raise JailError("pyjail: cannot run %s launcher: %s" % (self._binary, e.strerror)) from e
        finally:
            theirs.close()
        self._sock, self._proc, self._err = ours, proc, err
        threading.Thread(target=self._read, args=(ours, proc, err), daemon=True,
                         name="pyjail-launcher").start()
        return ours

    def _read(self, sock: socket.socket, proc: "subprocess.Popen[bytes]", err: Any) -> None:
        """The launcher's answers (bounded: a status or a short reason each),
        until it ends; then every run it still had fails, saying why."""
        while True:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                break
            words = data.split(b"\0")
            if len(words) == 3 and words[:2] == [_LAUNCH_MAGIC, b"started"] and fds:
                with self._lock:
                    run = self._runs.get(int(words[2])) if words[2].isdigit() else None
                    if run is not None:
                        run._started(fds.pop())
            for fd in fds:
                os.close(fd)
            if len(words) != 4 or words[0] != _LAUNCH_MAGIC or not words[2].isdigit():
                continue
            status = int(words[3]) if words[1] == b"ended" and words[3].lstrip(b"-").isdigit() \
                else None
            with self._lock:    # a run's pidfd is closed only under the lock kill() takes
                run = self._runs.pop(int(words[2]), None)
                if run is not None and status is not None:
                    run._ended(status)
                elif run is not None:
                    run._failed(JailError("pyjail: the Pool's launcher cannot start the run: %s"
                                          % words[3][:500].decode("utf-8", "replace")))
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            err.seek(0)
            said = err.read(4096).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            said = ""
        with self._lock:
            runs, self._runs = list(self._runs.values()), {}
            if self._sock is sock:
                self._sock = None
            # Its runs' pyjails, which outlive it (their parent-death signal does not
            # survive the fsuid changes of root opening a script), end here.
            for run in runs:
                run._signal()
        why = "exit status %s" % proc.returncode if proc.returncode is not None else "gone"
        with self._lock:
            for run in runs:
                run._failed(JailError(
                    "pyjail: the Pool's launcher (pyjail launcher) ended while the run was in "
                    "flight (%s%s); the Pool starts another for its next run"
                    % (why, ": " + said.splitlines()[-1][:500] if said else "")))
        sock.close()
        err.close()

    def kill(self, run_id: int) -> None:
        with self._lock:
            sock = self._sock
            if sock is None or run_id not in self._runs:
                return
        try:
            sock.send(b"\0".join([_LAUNCH_MAGIC, b"kill", b"%d" % run_id]))
        except OSError:
            pass

    def launch(self, options: List[str], program: List[str], stderr_to_file: bool) -> Any:
        from ._launch import Launched
        report = open(os.memfd_create("pyjail-report", os.MFD_CLOEXEC), "w+b", buffering=0)
        errfile = (open(os.memfd_create("pyjail-stderr", os.MFD_CLOEXEC), "w+b", buffering=0)
                   if stderr_to_file else None)
        ends: List[int] = []    # the run's ends of its pipes, closed here once sent
        mine: List[int] = []    # ours: its stdin's writing end, its stdout's (stderr's) reading
        try:
            r, w = os.pipe()
            ends.append(r)
            mine.append(w)
            for _ in range(1 if stderr_to_file else 2):
                r, w = os.pipe()
                ends.append(w)
                mine.append(r)
            # The run's fds 0-3: stdin, stdout, stderr, the report (--report-fd 3).
            fds = ends + ([errfile.fileno()] if errfile is not None else []) + [report.fileno()]
            args = ["--quiet", "--report-fd", "3"] + list(options) + ["--"] + list(program)
            # A NUL ends a word on the wire: one inside a value (an env variable's, say) would
            # split it into options of pyjail's own (--env-pass, --report FILE). Popen
            # refuses it alike.
            words = [os.fsencode(os.getcwd())] + [os.fsencode(a) for a in args]
            if any(b"\0" in w for w in words):
                raise ValueError("embedded null byte")
            with self._lock:
                if self._closed:
                    raise JailError("pyjail: this Pool is closed")
                sock = self._sock if self._sock is not None else self._start()
                run_id = next(self._ids)
                proc = _LaunchedProcess(self, run_id)
                self._runs[run_id] = proc
            message = b"\0".join([_LAUNCH_MAGIC, b"run", b"%d" % run_id] + words)
            try:
                socket.send_fds(sock, [message], fds)
            except OSError as e:
                with self._lock:
                    self._runs.pop(run_id, None)
                raise JailError("pyjail: cannot send the run to the Pool's launcher: %s"
                                % e.strerror) from e
        except BaseException:
            for fd in ends + mine:
                os.close(fd)
            report.close()
            if errfile is not None:
                errfile.close()
            raise
        for fd in ends:
            os.close(fd)
        proc.stdin = open(mine[0], "wb", buffering=0)
        proc.stdout = open(mine[1], "rb", buffering=0)
        proc.stderr = open(mine[2], "rb", buffering=0) if errfile is None else None
        return Launched(proc, report, errfile)  # type: ignore[arg-type]

    def close(self) -> None:
        """Ends the launcher, and with it the runs in flight."""
        with self._lock:
            self._closed = True
            sock, proc = self._sock, self._proc
            self._sock = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if proc is not None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if os.getpid() == self._owner:    # a fork's runs' scripts are there too
            self._dir_lock = _release_dir(self.script_dir, self._dir_lock)


# Every live launcher, for _forked in a fork of this process.
_LAUNCHERS: "weakref.WeakSet[_Launcher]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for launcher in list(_LAUNCHERS):
        launcher._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Pool:
    """Templates that fork fresh jails with ``preload`` already imported.

    ``preload``: modules to import from the rootfs (e.g. ``["numpy",
    "pandas"]``; a submodule that its package loads on first use, such as
    numpy's ``numpy.random`` or ``numpy.fft``, is shared only if named, else
    every run that uses it loads it again); ``size``: templates (each forks one run at a time; runs
    themselves are concurrent either way); ``profile`` and ``rootfs`` as for
    ``pyjail.run``; ``limits`` (pyjail.Limits, e.g. ``Limits(cpu_time=5,
    wall_time=3)``) and ``options``, other pyjail options by name, as
    ``pyjail.run`` takes them (e.g. ``{"memory": "64M"}``). The profile,
    limits and options are every run's and session's settings (a run may
    give smaller ones of its own) and their upper bound: the server refuses
    a run that asks for more (a larger limit, another ``net``, a filter that
    allows more), and the call raises JailError saying which. Raises
    JailError when a template cannot start (a module the rootfs lacks, say),
    with pyjail's explanation.

    ``net="allow"`` with ``allow_hosts=["pypi.org", "@pypi", ...]``: every
    run reaches those hosts by name, through pyjail (``--net allow``,
    ``--allow-host``), each with a resolver and listeners of its own; the
    list is also the most a run may ask for: a run's own ``allow_hosts``
    replaces the Pool's and must be within it (the server refuses a host
    or port it does not allow, and the call raises JailError).
    """

    def __init__(self, preload: Sequence[str] = (), size: int = 1, *, profile: str = "strict",
                 rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
                 net: Optional[str] = None, allow_hosts: Sequence[str] = (),
                 limits: Optional[Limits] = None, options: Optional[Mapping[str, Any]] = None,
                 binary: Optional[str] = None, start_timeout: float = 300.0) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        if isinstance(allow_hosts, str):
            raise TypeError("allow_hosts is a list of host names, not a str")
        if isinstance(preload, str):    # each letter would be a module
            raise TypeError("preload is a list of module names, not a str: e.g. [%r]" % preload)
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError("limits must be a pyjail.Limits, not %s" % type(limits).__name__)
        self._allow_hosts = [str(h) for h in allow_hosts]
        # The limits are options like the others, each given once.
        refuse_given_twice(dict({k.replace("_", "-"): v
                                 for k, v in (limits or Limits()).as_options().items()},
                                profile=profile, net=net, rootfs=rootfs,
                                **{"allow-host": allow_hosts}), options)
        self._binary = find_binary(binary)
        self._profile = profile
        self._rootfs = None if rootfs is None else os.fspath(rootfs)
        options = dict((limits or Limits()).as_options(), **(options or {}))
        args = ["--profile", profile]
        if self._rootfs is not None:
            args += ["--rootfs", self._rootfs]
        for name in preload:
            args += ["--preload", name]
        args += option_args({"net": net, "allow-host": self._allow_hosts})
        args += option_args(options)
        # Runs that bind host paths (the standard and batch profiles' current directory, or
        # binds among the options) need a server that takes them; each run's client opens
        # its binds itself, with its own rights.
        if profile in ("standard", "batch") or any(
                k.replace("_", "-") in ("bind", "ro-bind", "workdir") and v is not None
                for k, v in options.items()):
            args.append("--allow-binds")
        # The runs' defaults: the same options, but those of the server alone. The allowlist
        # is a run's unless it gives its own (a list given twice would be joined, not
        # replaced: _through_template).
        self._defaults = option_args({"net": net})
        self._defaults += option_args({k: v for k, v in options.items()
                                       if k.replace("_", "-") not in _SERVER_ONLY})
        # Made once every argument above was taken: a bad option leaves nothing behind.
        self._dir, self._dir_lock = _own_dir()   # 0700: the sockets' home
        self._servers: List[_Server] = []
        self._launcher = _Launcher(self._binary)
        self._owner = os.getpid()
        self._closed = False
        self._lock = threading.Lock()
        self._turn = itertools.count()
        try:
            for i in range(size):
                self._servers.append(_Server(self._binary, os.path.join(self._dir, "t%d.sock" % i),
                                             args, start_timeout))
        except BaseException:
            self.close()
            raise

    def _socket(self) -> str:
        with self._lock:
            if self._closed:
                raise JailError("pyjail: this Pool is closed")
            return self._servers[next(self._turn) % len(self._servers)].socket

    def _through_template(self, kwargs: Any) -> Any:
        """The arguments of a run or session, sent to one of the templates:
        the Pool's profile and options first, the call's own on top; its
        pyjail forked by the Pool's launcher."""
        kwargs["_launcher"] = self._launcher
        kwargs.setdefault("profile", self._profile)
        if self._allow_hosts and not kwargs.get("allow_hosts"):
            kwargs["allow_hosts"] = list(self._allow_hosts)
        if self._rootfs is not None:
            kwargs.setdefault("rootfs", self._rootfs)
        kwargs["_defaults"] = self._defaults + ["--via", self._socket()]
        kwargs["binary"] = self._binary
        return kwargs

    def run(self, code: Optional[str] = None, **kwargs: Any) -> Result:
        """Run ``code`` (or ``script=``) as ``pyjail.run`` would, in a fork of
        a template: the same arguments (``files``, ``outputs``, ``stdin``,
        ``timeout``, ``memory``, ``limits``, ...) and the same Result."""
        return run(code, **self._through_template(kwargs))

    def session(self, **kwargs: Any) -> Session:
        """A ``Session`` whose interpreter is a fork of a template: its cells
        start with the preloads imported, and it starts in milliseconds. The
        same arguments as ``Session``, on top of the Pool's profile and
        options (which bound it like a run: a session lives at most the
        Pool's wall time); when it restarts, it forks the template again. The
        agent adapters take it as ``session=``
        (``PythonREPLTool(python_repl=PythonREPL(session=...))``,
        ``PyjailExecutor(session=...)``)."""
        return Session(**self._through_template(kwargs))

    async def arun(self, code: Optional[str] = None, **kwargs: Any) -> Result:
        """``run`` for asyncio, as ``pyjail.arun``: the same arguments (and
        async callbacks); cancelling it ends the run."""
        from ._async import arun
        return await arun(code, **self._through_template(kwargs))

    @property
    def sockets(self) -> List[str]:
        """The servers' sockets, for ``pyjail --via`` from elsewhere."""
        return [s.socket for s in self._servers]

    def close(self) -> None:
        """Stop the templates (runs in flight are ended) and remove the sockets."""
        with self._lock:
            self._closed = True
            servers, self._servers = self._servers, []
        self._launcher.close()
        if os.getpid() != self._owner:
            return    # in a fork of the process that made it: the templates are the parent's
        for s in servers:
            s.close()
        self._dir_lock = _release_dir(self._dir, self._dir_lock)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass
