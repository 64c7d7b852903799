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
"""

from __future__ import annotations

import itertools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
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


class Pool:
    """Templates that fork fresh jails with ``preload`` already imported.

    ``preload``: modules to import from the rootfs (e.g. ``["numpy",
    "pandas"]``); ``size``: templates (each forks one run at a time; runs
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
        self._dir = tempfile.mkdtemp(prefix="pyjail-pool-")   # 0700: the sockets' home
        self._servers: List[_Server] = []
        self._closed = False
        self._lock = threading.Lock()
        self._turn = itertools.count()
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
        the Pool's profile and options first, the call's own on top."""
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
        for s in servers:
            s.close()
        shutil.rmtree(self._dir, ignore_errors=True)

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
