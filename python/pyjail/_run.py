"""pyjail.run: one program in one fresh jail."""

from __future__ import annotations

import datetime
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _wire
from ._channel import (Channel, ChannelClosed, ChannelError, ChannelTimeout, ProtocolError,
                       ServerRefused)
from ._common import (EXIT_PYJAIL_ERROR, Callbacks, JailError, Limits, OutputCaps, Report, Size,
                      check_name, find_binary, jail_args, moved_keywords, render_output,
                      setup_error)
from ._launch import Launched, handshake, launch, server_command
from ._stream import Streams

__all__ = ["run", "Result"]

FileData = Union[bytes, str, "os.PathLike[str]"]


@dataclass
class Result:
    """What a program run by pyjail.run() did."""

    exit_code: int
    """pyjail's exit status: the program's own, 128+N for signal N, 124 for a
    timeout (see ``report.status`` for which limit)."""
    stdout_bytes: bytes = b""
    """What the program wrote to stdout, capped at ``max_output`` (the start and
    the end are kept; ``stdout_omitted`` bytes in between are not)."""
    stderr_bytes: bytes = b""
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    report: Optional[Report] = None
    """pyjail's result report: status, start and other times, peak memory, denied
    syscalls, limits (as text and, ``limit_amounts``, as numbers)."""
    files: Dict[str, bytes] = field(default_factory=dict)
    """Files collected from the work directory (``outputs=``), by relative name
    (checked as ``files=`` names are: relative, no ``..``; matching ``outputs``,
    within the caps)."""
    skipped_files: Dict[str, str] = field(default_factory=dict)
    """Files that matched ``outputs`` but were left out, with why (the caps;
    at most 1000 are named)."""
    _stdout_split: int = field(default=0, repr=False)
    _stderr_split: int = field(default=0, repr=False)

    @property
    def stdout(self) -> str:
        """stdout as text (UTF-8), with a marker where output was left out."""
        b = self.stdout_bytes
        return render_output(b[:self._stdout_split], b[self._stdout_split:], self.stdout_omitted)

    @property
    def stderr(self) -> str:
        b = self.stderr_bytes
        return render_output(b[:self._stderr_split], b[self._stderr_split:], self.stderr_omitted)

    @property
    def status(self) -> str:
        """The report's status: ok, exit, signal, wall-timeout, cpu-timeout, oom, ..."""
        if self.report is not None:
            return self.report.status
        return "ok" if self.exit_code == 0 else "exit"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        return self.status in ("wall-timeout", "cpu-timeout")

    @property
    def denied_syscalls(self) -> List[Dict[str, Any]]:
        return self.report.denied_syscalls if self.report is not None else []

    @property
    def memory_peak_bytes(self) -> Optional[int]:
        return self.report.memory_peak_bytes if self.report is not None else None

    @property
    def wall_time_s(self) -> Optional[float]:
        return self.report.wall_time_s if self.report is not None else None

    @property
    def started_at(self) -> Optional[datetime.datetime]:
        """When pyjail began the run (UTC, to the millisecond), from its report."""
        return self.report.started_at if self.report is not None else None


def _outputs_from_jail(reply: Dict[str, Any], body: bytes, collect: Union[bool, List[str]],
                       script_name: str, max_files: int, max_bytes: int
                       ) -> Tuple[Dict[str, bytes], Dict[str, str]]:
    """The files (and the skipped ones) of the jail's ``exited`` frame, checked
    as if the jail were hostile, for it may be: a program that took over the
    in-jail server could send any names and sizes. Every name passes the
    check of input names (no host path: relative, no ``..``, no NUL), matches
    ``collect``, appears once and is not the program itself; there are at
    most ``max_files``, their sizes are integers >= 0 that add up exactly to
    the body and to at most ``max_bytes``. ProtocolError otherwise.

    >>> _outputs_from_jail({"files": [["a.txt", 2], ["b/c", 1]]}, b"hiX", True, "main.py", 9, 9)
    ({'a.txt': b'hi', 'b/c': b'X'}, {})
    >>> _outputs_from_jail({"files": [["../../x", 1]]}, b"X", True, "main.py", 9, 9)
    Traceback (most recent call last):
    pyjail._channel.ProtocolError: the jail sent back a file name '../../x': no empty, '.' or '..' parts
    """
    entries = reply.get("files", [])
    skipped_entries = reply.get("skipped", [])
    if not isinstance(entries, list) or not isinstance(skipped_entries, list):
        raise ProtocolError("the jail sent back a malformed list of files")
    if not collect and (entries or skipped_entries or body):
        raise ProtocolError("the jail sent back files though none were asked for")
    patterns = None if collect is True else list(collect or [])
    if len(entries) > max_files:
        raise ProtocolError("the jail sent back %d files, more than max_output_files=%d"
                            % (len(entries), max_files))
    checked: List[Tuple[str, int]] = []
    seen = set()     # of names that passed check_name: str, whose hashes are salted
    total = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise ProtocolError("the jail sent back a malformed file entry")
        name, size = entry
        try:
            check_name(name)
        except ValueError as e:
            raise ProtocolError("the jail sent back a %s" % e) from None
        if type(size) is not int or size < 0:
            raise ProtocolError("the jail sent back file %r with a bad size %r" % (name, size))
        if name in seen or name == script_name:
            raise ProtocolError("the jail sent back file %r twice, or the program itself" % name)
        if not _wire.matches_patterns(name, patterns):
            raise ProtocolError("the jail sent back file %r, which matches none of outputs=%r"
                                % (name, patterns))
        seen.add(name)
        total += size
        checked.append((name, size))
    if total != len(body):
        raise ProtocolError("the jail's file sizes add up to %d bytes, its frame holds %d"
                            % (total, len(body)))
    if total > max_bytes:
        raise ProtocolError("the jail sent back %d bytes of files, more than "
                            "max_output_bytes=%d" % (total, max_bytes))
    files: Dict[str, bytes] = {}
    pos = 0
    for name, size in checked:
        files[name] = body[pos:pos + size]
        pos += size
    if len(skipped_entries) > _wire.SKIPPED_LIMIT:
        raise ProtocolError("the jail named %d skipped files, more than %d"
                            % (len(skipped_entries), _wire.SKIPPED_LIMIT))
    skipped: Dict[str, str] = {}
    for entry in skipped_entries:
        if not (isinstance(entry, list) and len(entry) == 3 and type(entry[1]) is int and
                entry[1] >= 0 and isinstance(entry[2], str)):
            raise ProtocolError("the jail sent back a malformed skipped-file entry")
        try:
            check_name(entry[0])
        except ValueError as e:
            raise ProtocolError("the jail named a skipped %s" % e) from None
        skipped[entry[0]] = "%s (%d bytes)" % (entry[2][:200], entry[1])
    return files, skipped


def _file_bytes(value: FileData) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, os.PathLike):
        with open(value, "rb") as f:
            return f.read()
    raise TypeError("a file's content must be bytes, str (text) or a path "
                    "(os.PathLike), not %s" % type(value).__name__)


#: Keywords of run() of the previous release, and where they went.
_MOVED = {"cpu_time": ("limits", "cpu_time"), "pids": ("limits", "pids"),
          "tmpfs_size": ("limits", "tmpfs_size"), "output_limit": ("limits", "output_limit"),
          "max_output": ("caps", "max_output"), "max_output_files": ("caps", "max_output_files"),
          "max_output_bytes": ("caps", "max_output_bytes"),
          "on_stdout": ("callbacks", "on_stdout"), "on_stderr": ("callbacks", "on_stderr"),
          "ro_bind": ("options", "ro_bind"), "net_resolve": ("options", "net_resolve"),
          "extra_args": ("extra_args", "")}

#: The caps run() uses, and their defaults.
RUN_CAPS = {"max_output": 16 << 20, "max_output_files": 100, "max_output_bytes": 64 << 20}


def run(code: Optional[str] = None, *, script: Optional[Union[str, "os.PathLike[str]"]] = None,
        args: Sequence[str] = (), stdin: Optional[Union[bytes, str]] = None,
        files: Optional[Mapping[str, FileData]] = None, outputs: Union[bool, Sequence[str]] = False,
        profile: str = "strict", rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
        timeout: Optional[float] = None, memory: Optional[Size] = None,
        net: Optional[str] = None, allow_hosts: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None, options: Optional[Mapping[str, Any]] = None,
        limits: Optional[Limits] = None, caps: Optional[OutputCaps] = None,
        callbacks: Optional[Callbacks] = None, python_args: Sequence[str] = (),
        binary: Optional[str] = None,
        _started: Optional[Callable[[Launched], None]] = None,
        _defaults: Sequence[str] = (), _launcher: Any = None, **_deprecated: Any) -> Result:
    """Run Python code (or a script file) in a fresh jail and wait for it.

    ``code`` is the program's source, or ``script`` a host path to it; ``args``
    are its arguments, ``stdin`` its input and ``python_args`` the
    interpreter's own options (``["-X", "dev"]``). ``files`` puts inputs into
    the work directory: {relative name: bytes, str (text) or a host path}.
    ``outputs`` collects files from it when the program has ended: True for
    every file it created or changed, or glob patterns (``["*.csv",
    "out/*"]``).

    The jail: ``profile``; ``rootfs``, the root filesystem as ``pyjail
    --rootfs`` takes it: the name of one built with ``pyjail rootfs build``
    (e.g. ``"data"``; ``pyjail rootfs list`` shows them) or a path (None: the
    profile's); ``timeout`` (``--wall-time``) and ``memory``; ``env``;
    ``net``: ``net="allow"`` with ``allow_hosts=["pypi.org",
    "api.example.com:8443"]`` lets the program reach those hosts by name,
    through pyjail (``--net allow``, ``--allow-host``). With the package index
    allowed (``allow_hosts=["pypi.org", "files.pythonhosted.org"]``), a
    program on the ``data`` rootfs can ``python -m pip install --target
    /tmp/site NAME`` and import what it installed. ``options`` takes any
    other pyjail option by name (``{"cpus": 2, "net_resolve":
    {"index.internal": "10.0.0.5"}, "ro_bind": ["/data"]}``).

    The rarer settings come in groups: ``limits`` (pyjail.Limits: CPU time,
    processes, the tmpfs's size, ``output_limit`` which stops a program that
    writes more); ``caps`` (pyjail.OutputCaps: output beyond ``max_output``
    bytes per stream, 16 MiB, is left out of the result, its start and end
    kept; collected files are capped at ``max_output_files``, 100, and
    ``max_output_bytes``, 64 MiB, in all); ``callbacks`` (pyjail.Callbacks:
    ``on_stdout`` and ``on_stderr`` are called, in this thread, with the text
    the program writes to that stream as it writes it, up to ``max_output``
    bytes per stream; an exception a callback raises ends its calls and is
    raised once the program has ended and the jail is gone). The keywords
    these replaced (``cpu_time=``, ``max_output=``, ``on_stdout=``,
    ``net_resolve=``, ``ro_bind=``, ``extra_args=``, ...) still work, with a
    DeprecationWarning, until the next release.

    Returns a Result; the program's failures are in it, never raised. Raises
    BinaryNotFoundError without a pyjail binary, JailError when pyjail cannot
    set up the jail (exit status 125: its step, errno and hint from pyjail's
    report), and ProtocolError when the jail broke the protocol of
    ``files``/``outputs`` (e.g. sent back a name outside the work directory;
    the jail is ended and nothing it sent is returned).
    """
    groups: Dict[str, Any] = {"limits": limits, "caps": caps, "callbacks": callbacks,
                              "options": options}
    extra_args = moved_keywords("run", _deprecated, _MOVED, groups)
    limits, options = groups["limits"], groups["options"]
    cap = (groups["caps"] or OutputCaps()).resolved("run()", RUN_CAPS)
    callbacks = groups["callbacks"] or Callbacks()
    if limits is not None and limits.wall_time is not None:
        if timeout is not None:
            raise ValueError("give run()'s wall time once: timeout= or limits.wall_time")
        timeout = limits.wall_time
    script_name, source = _program(code, script)
    exe = find_binary(binary)
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8")
    inputs = {check_name(k): _file_bytes(v) for k, v in (files or {}).items()}
    if script_name in inputs:
        raise ValueError("files: %r is the program's own name" % script_name)
    opts = jail_args(profile=profile, wall_time=timeout, memory=memory, net=net, env=env,
                     rootfs=rootfs, allow_hosts=allow_hosts, limits=limits, options=options,
                     extra_args=extra_args, defaults=_defaults)
    # pyjail's own backstop is --wall-time; this one only guards against a
    # pyjail that does not end (it never should).
    backstop = None if timeout is None else time.monotonic() + float(timeout) + 30.0
    max_output = cap["max_output"]
    streams = None
    if callbacks.on_stdout is not None or callbacks.on_stderr is not None:
        streams = Streams(callbacks.on_stdout, callbacks.on_stderr, max_output, strict=False)
    collected: Dict[str, bytes] = {}
    skipped: Dict[str, str] = {}
    if not inputs and not outputs:
        jail, (out, err, rc, pyjail_err) = _run_script_file(
            exe, opts, list(python_args), script_name, source, list(args), stdin, max_output,
            backstop, streams, _started, _launcher)
    else:
        collect: Union[bool, List[str]] = True if outputs is True else list(outputs or [])
        jail = launch(exe, opts, server_command(), launcher=_launcher)
        try:
            if _started is not None:
                _started(jail)
            out, err, rc, collected, skipped = _run_served(
                jail, inputs, script_name, source,
                ["{python}"] + list(python_args) + [script_name] + list(args),
                stdin, collect, cap["max_output_files"], cap["max_output_bytes"], max_output,
                backstop, streams)
            pyjail_err = jail.stderr()
        finally:
            jail.close()
    report = jail.report()
    if rc == EXIT_PYJAIL_ERROR and (report is None or report.status == "setup-error"):
        raise setup_error(pyjail_err, report)
    if streams is not None:
        streams.finish()
    return Result(exit_code=rc, stdout_bytes=bytes(out.head) + bytes(out.tail),
                  stderr_bytes=bytes(err.head) + bytes(err.tail),
                  stdout_omitted=out.omitted, stderr_omitted=err.omitted, report=report,
                  files=collected, skipped_files=skipped, _stdout_split=len(out.head),
                  _stderr_split=len(err.head))


def _program(code: Optional[str], script: Optional[Union[str, "os.PathLike[str]"]]
             ) -> Tuple[str, bytes]:
    """The program's file name in the jail and its source: ``script``'s, or
    ``code`` as main.py."""
    if (code is None) == (script is None):
        raise ValueError("pass exactly one of code and script")
    if script is not None:
        with open(script, "rb") as f:
            return os.path.basename(os.fspath(script)), f.read()
    if not isinstance(code, str):
        raise TypeError("code must be a str")
    return "main.py", code.encode("utf-8")


def _run_script_file(exe: str, opts: List[str], python_args: List[str], script_name: str,
                     source: bytes, args: List[str], stdin: Optional[bytes], max_output: int,
                     backstop: Optional[float], streams: Optional[Streams],
                     started: Optional[Callable[[Launched], None]], launcher: Any = None
                     ) -> Tuple[Launched, Tuple[_wire.Capture, _wire.Capture, int, bytes]]:
    """A run without files: the script is bound into the jail from a host
    path, the one named file of a run, removed however the run ends (but a
    SIGKILL of this process). A Pool's launcher names where (a directory in
    memory where there is one: no disk's journal to wait for)."""
    tmpdir = tempfile.mkdtemp(prefix="pyjail-run-",
                              dir=launcher.script_dir if launcher is not None else None)
    try:
        path = os.path.join(tmpdir, script_name)
        with open(path, "wb") as f:
            f.write(source)
        jail = launch(exe, opts, ["python"] + python_args + [path] + args, stderr_to_file=False,
                      launcher=launcher)
        try:
            if started is not None:
                started(jail)   # arun: a cancelled call kills it
            return jail, _run_direct(jail, stdin, max_output, backstop, streams)
        finally:
            jail.close()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _finish(proc: "subprocess.Popen[bytes]", backstop: Optional[float]) -> int:
    try:
        left = None if backstop is None else max(0.1, backstop - time.monotonic())
        return proc.wait(left)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _run_direct(jail: Launched, stdin: Optional[bytes], max_output: int,
                backstop: Optional[float], streams: Optional[Streams] = None
                ) -> Tuple[_wire.Capture, _wire.Capture, int, bytes]:
    """pyjail -- python main.py: the program's own stdin, stdout and stderr."""
    proc = jail.proc
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = _wire.Capture(max_output), _wire.Capture(max_output)
    sel = selectors.DefaultSelector()
    pending = memoryview(stdin or b"")
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ, (out, 1))
    sel.register(proc.stderr, selectors.EVENT_READ, (err, 2))
    try:
        while sel.get_map():
            left = None if backstop is None else backstop - time.monotonic()
            if left is not None and left <= 0:
                proc.kill()
                break
            for key, _ in sel.select(left):
                if key.fileobj is proc.stdin:
                    try:
                        n = os.write(proc.stdin.fileno(), pending[:1 << 16])
                        pending = pending[n:]
                    except BlockingIOError:
                        continue
                    except OSError:   # the program does not read its input
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                capture, stream = key.data
                capture.add(data)
                if streams is not None:
                    streams.add(stream, data)
    finally:
        sel.close()
        for s in (proc.stdin, proc.stdout, proc.stderr):
            try:
                s.close()
            except OSError:
                pass
    rc = _finish(proc, backstop)
    # With --quiet, anything on pyjail's stderr is the program's, except on a
    # setup failure (exit status 125), when the caller looks for pyjail's line.
    return out, err, rc, bytes(err.head) + bytes(err.tail)


def _run_served(jail: Launched, inputs: Dict[str, bytes], script_name: str, source: bytes,
                argv: List[str], stdin: Optional[bytes], collect: Union[bool, List[str]],
                max_files: int, max_bytes: int, max_output: int, backstop: Optional[float],
                streams: Optional[Streams] = None) -> Tuple[_wire.Capture, _wire.Capture, int, Dict[str, bytes], Dict[str, str]]:
    """With files: the in-jail server writes the inputs into the private /work,
    runs the program as its child, streams its output in frames and sends back
    the files it wrote, capped, before the jail ends."""
    proc = jail.proc
    assert proc.stdin is not None and proc.stdout is not None
    out, err = _wire.Capture(max_output), _wire.Capture(max_output)
    files: Dict[str, bytes] = {}
    skipped: Dict[str, str] = {}
    chan = Channel(proc.stdin.fileno(), proc.stdout.fileno(),
                   max(max_bytes, max(len(v) for v in inputs.values()) if inputs else 0,
                       1 << 20) + (1 << 20))
    broke: Optional[ProtocolError] = None
    try:
        handshake(chan, backstop if backstop is not None else time.monotonic() + 60)
        stamps: Dict[str, List[Any]] = {}
        for i, (name, data) in enumerate(sorted(inputs.items()) + [(script_name, source)]):
            chan.send({"op": "put", "id": "p%d" % i, "path": name}, data, backstop)
            reply, _ = chan.recv(backstop)
            if reply.get("op") == "error" and reply.get("id") == "p%d" % i:
                raise JailError("pyjail: cannot put %s into the jail: %s"
                                % (name, str(reply.get("error"))[:4096]))
            if reply.get("op") != "ok" or reply.get("id") != "p%d" % i:
                raise ProtocolError("a %r frame in answer to a file put" % (reply.get("op"),))
            if name != script_name:
                stamps[name] = [reply.get("size"), reply.get("mtime_ns")]
        chan.send({"op": "spawn", "id": "run", "argv": argv, "script": script_name,
                   "collect": collect, "max_files": max_files, "max_bytes": max_bytes,
                   "inputs": stamps}, stdin or b"", backstop)
        while True:
            reply, body = chan.recv(backstop)
            op = reply.get("op")
            if op == "out" and reply.get("stream") in (1, 2):
                (out if reply.get("stream") == 1 else err).add(body)
                if streams is not None:
                    streams.add(reply.get("stream"), body)
            elif op == "exited":
                files, skipped = _outputs_from_jail(reply, body, collect, script_name,
                                                    max_files, max_bytes)
                break
            elif op == "error":
                # (JSON's text may hold lone surrogates, which UTF-8 has no bytes for)
                err.add(("pyjail: %s\n" % str(reply.get("error"))[:4096])
                        .encode("utf-8", "backslashreplace"))
                break
            else:
                raise ProtocolError("an unexpected %r frame while the program ran" % (op,))
            # Output keeps the channel readable: the deadline is checked on
            # every frame, not only when the jail falls silent.
            if backstop is not None and time.monotonic() >= backstop:
                raise ChannelTimeout("timed out")
    except ChannelClosed:
        pass   # the jail ended early (a timeout, a limit): the report says why
    except ServerRefused as e:
        proc.kill()
        _finish(proc, backstop)
        raise JailError("pyjail: %s" % e) from None
    except ProtocolError as e:
        # Nothing from a jail that broke the protocol is returned.
        proc.kill()
        broke = ProtocolError("the jail broke the protocol (%s); it was ended" % e)
    except ChannelError:
        proc.kill()
    finally:
        for s in (proc.stdin, proc.stdout):
            try:
                s.close()
            except OSError:
                pass
    rc = _finish(proc, backstop)
    if broke is not None:
        raise broke
    return out, err, rc, files, skipped
