"""What run() and Session share: errors, the binary, jail options, the report."""

from __future__ import annotations

import decimal
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

Size = Union[int, str]
"""A size: bytes as an int, or a string with a suffix such as ``"512M"``."""

#: pyjail's exit status when pyjail itself failed (bad option, missing rootfs, ...).
EXIT_PYJAIL_ERROR = 125


class PyjailError(Exception):
    """Base class of every error this package raises."""


class BinaryNotFoundError(PyjailError, FileNotFoundError):
    """The ``pyjail`` binary is not where it was looked for."""


class JailError(PyjailError):
    """pyjail could not set up the jail (exit status 125).

    ``message`` (also ``str()``) is pyjail's one line: what failed, why, and
    how to fix it. When pyjail wrote a report, its structured ``error`` is
    here as it is: ``step`` (``"usage"`` for a bad option value,
    ``"rootfs"``, ``"bind"``, ``"serve"``, ...), ``errno`` and
    ``errno_name`` (0 and None when no system call failed), ``detail`` (the
    report's message, without step, errno or hint) and ``hint``; ``report``
    is the whole report. Without a report (the command line itself was
    refused, or the failure was the driver's) those are None."""

    def __init__(self, message: str, report: Optional["Report"] = None, *,
                 step: Optional[str] = None, errno: Optional[int] = None,
                 errno_name: Optional[str] = None, detail: Optional[str] = None,
                 hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.report = report
        self.step = step
        self.errno = errno
        self.errno_name = errno_name
        self.detail = detail
        self.hint = hint

    @classmethod
    def from_report(cls, report: "Report", context: str = "") -> "JailError":
        """The error of a report whose ``error`` is set, its line written as
        pyjail writes it on stderr (``context``, if any, is added after it)."""
        e = report.error or {}
        step = e.get("step") if isinstance(e.get("step"), str) else None
        code = e.get("errno") if type(e.get("errno")) is int else None
        name = e.get("errno_name") if isinstance(e.get("errno_name"), str) else None
        detail = str(e.get("message") or "")
        hint = e.get("hint") if isinstance(e.get("hint"), str) and e.get("hint") else None
        line = "pyjail: " + ("%s: " % step if step and step != "usage" else "") + detail
        if code:
            line += ": " + os.strerror(code)
        if hint:
            line += " (%s)" % hint
        return cls(line + context, report, step=step, errno=code, errno_name=name,
                   detail=detail, hint=hint)


def setup_error(stderr: bytes, report: Optional["Report"], context: str = "") -> JailError:
    """The JailError of a pyjail that exited with status 125: from its
    report's structured ``error`` when it wrote one; only without a report
    (a command line refused before there is one) from its stderr: the last
    ``pyjail: `` line, else the last line."""
    if report is not None and report.error:
        return JailError.from_report(report, context)
    lines = [l for l in stderr.decode("utf-8", "replace").splitlines() if l.startswith("pyjail: ")]
    if lines:
        return JailError(lines[-1] + context, report)
    text = stderr.decode("utf-8", "replace").strip()
    return JailError((text.splitlines()[-1] if text else
                      "pyjail failed (exit status 125) without a message") + context, report)


def find_binary(binary: Optional[Union[str, "os.PathLike[str]"]] = None) -> str:
    """The pyjail binary to run: ``binary`` if given, else ``$PYJAIL_BIN``, else
    ``pyjail`` on ``PATH``. Raises BinaryNotFoundError saying where it looked."""
    if binary is not None:
        path = os.fspath(binary)
        where = "given as binary=%r" % path
    elif os.environ.get("PYJAIL_BIN"):
        path = os.environ["PYJAIL_BIN"]
        where = "named by PYJAIL_BIN=%r" % path
    else:
        found = shutil.which("pyjail")
        if found is None:
            raise BinaryNotFoundError(
                "the pyjail binary is not on PATH (install it, e.g. with "
                "`cmake --install build`, or pass binary='/path/to/pyjail' or set PYJAIL_BIN)")
        return found
    if os.sep not in path:
        found = shutil.which(path)
        if found is None:
            raise BinaryNotFoundError("the pyjail binary %s is not on PATH" % where)
        return found
    if not os.path.isfile(path):
        raise BinaryNotFoundError("the pyjail binary %s does not exist" % where)
    if not os.access(path, os.X_OK):
        raise BinaryNotFoundError("the pyjail binary %s is not executable" % where)
    return path


def check_name(name: Any) -> str:
    """A file name relative to the jail's work directory, or ValueError: the
    one check of every name that crosses the boundary, going in (``files=``)
    as well as coming out (collected outputs, listed files), so that no name
    from the jail can point at a host path (absolute, ``..``, NUL)."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\0" in name:
        raise ValueError("file name %r: must be a relative path" % (name,))
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError("file name %r: no empty, '.' or '..' parts" % (name,))
    return name


#: pyjail's options that take no value (the flags of its option table): given for
#: True, left out for False.
FLAG_OPTIONS = frozenset({"allow-sensitive-bind", "allow-binds", "explain", "verbose", "quiet"})


def _number(v: Union[int, float]) -> str:
    """A number as pyjail reads it: 3 and 3.0 as "3", 0.5 as "0.5" (never an exponent)."""
    if isinstance(v, int) or float(v).is_integer():
        return str(int(v))
    return format(decimal.Decimal(repr(float(v))), "f")


def option_args(options: Optional[Mapping[str, Any]]) -> List[str]:
    """pyjail command-line arguments for options by name: the one mapping of
    ``options=`` for run(), Session and Pool. A name is pyjail's option with
    ``_`` or ``-`` between its words (``"cpu_time"`` and ``"cpu-time"`` are
    ``--cpu-time``); a flag (``quiet``, ``verbose``, ...) is given for True and
    left out for False; None leaves an option out; a list or tuple repeats it
    (``{"ro_bind": ["/data", "/models"]}``); a mapping gives KEY=VALUE items
    (``{"env": {"LANG": "C"}}``); other bools are ``true``/``false``; numbers
    are written as pyjail reads them (``{"cpus": 0.5}``)."""
    args: List[str] = []
    for key, value in (options or {}).items():
        if not isinstance(key, str) or not key or key.startswith("-") or "=" in key:
            raise ValueError("option name %r: use pyjail's option name without dashes, e.g. "
                             "'memory' or 'cpu_time'" % (key,))
        name = key.replace("_", "-")
        if value is None:
            continue
        if name in FLAG_OPTIONS:
            if not isinstance(value, bool):
                raise ValueError("option %r is a flag: True or False, not %r" % (key, value))
            if value:
                args.append("--" + name)
            continue
        if isinstance(value, Mapping):
            values: List[Any] = ["%s=%s" % (k, v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            values = list(value)
        else:
            values = [value]
        for v in values:
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, (int, float)):
                text = _number(v)
            else:
                text = os.fspath(v) if isinstance(v, os.PathLike) else str(v)
            args += ["--" + name, text]
    return args


def jail_args(*, profile: Optional[str] = None, wall_time: Optional[float] = None,
              cpu_time: Optional[float] = None, memory: Optional[Size] = None,
              pids: Optional[int] = None, tmpfs_size: Optional[Size] = None,
              net: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
              ro_bind: Sequence[str] = (), rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
              allow_hosts: Sequence[str] = (),
              net_resolve: Union[Mapping[str, str], Sequence[str]] = (),
              output_limit: Optional[Size] = None,
              options: Optional[Mapping[str, Any]] = None,
              extra_args: Sequence[str] = (),
              audit_log: Optional[Union[str, "os.PathLike[str]"]] = None,
              defaults: Sequence[str] = ()) -> List[str]:
    """pyjail command-line options for the given settings (None: the profile's).

    ``audit_log``: the file pyjail appends one JSON line per run to
    (``--audit-log``); None means ``$PYJAIL_AUDIT_LOG`` when that is set, so
    one variable points every run and session of a process at one log (a
    session is one run: its line is written when it ends). A relative path is
    made absolute here, against this process's current directory.
    ``defaults``: arguments (option_args's) that the others override: a
    Pool's options for its runs.
    ``net_resolve``: names pinned to addresses (``--net-resolve``), as
    ``{"index.internal": "10.0.0.5"}`` or ``["index.internal:10.0.0.5"]``."""
    args: List[str] = []
    if profile is not None:
        args += ["--profile", os.fspath(profile)]
    # Before the call's own settings, which replace them (a later option wins).
    args += list(defaults)
    if isinstance(allow_hosts, str):
        raise TypeError("allow_hosts is a list of host names, not a str")
    if isinstance(net_resolve, str):
        raise TypeError("net_resolve is a dict {host: address} or a list of 'HOST:ADDR', not a str")
    if isinstance(net_resolve, Mapping):
        net_resolve = ["%s:%s" % (h, a) for h, a in net_resolve.items()]
    for key in env or {}:
        if "=" in key or not key:
            raise ValueError("bad environment variable name %r" % key)
    args += option_args({"wall-time": wall_time, "cpu-time": cpu_time, "memory": memory,
                         "pids": pids, "tmpfs-size": tmpfs_size, "net": net,
                         "output-limit": output_limit,
                         "allow-host": [str(h) for h in allow_hosts],
                         "net-resolve": [str(r) for r in net_resolve],
                         "rootfs": None if rootfs is None else os.fspath(rootfs),
                         "env": dict(env or {}), "ro-bind": [os.fspath(s) for s in ro_bind]})
    args += option_args(options)
    if audit_log is None and not any(k.replace("_", "-") == "audit-log" for k in (options or {})):
        audit_log = os.environ.get("PYJAIL_AUDIT_LOG") or None
    if audit_log is not None:
        args += ["--audit-log", os.path.abspath(os.fspath(audit_log))]
    args += list(extra_args)
    return args


@dataclass
class Report:
    """pyjail's result report (``--report``): how the jail ended. Field names
    follow the JSON; ``raw`` holds the whole object, unknown fields included."""

    status: str
    exit_code: Optional[int] = None
    program_exit_code: Optional[int] = None
    signal: Optional[int] = None
    signal_name: Optional[str] = None
    wall_time_s: Optional[float] = None
    cpu_user_s: Optional[float] = None
    cpu_system_s: Optional[float] = None
    memory_peak_bytes: Optional[int] = None
    setup_time_ms: Optional[float] = None
    limits: Dict[str, Any] = field(default_factory=dict)
    denied_syscalls: List[Dict[str, Any]] = field(default_factory=list)
    error: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Report":
        def get(key: str, types: Tuple[type, ...]) -> Any:
            v = obj.get(key)
            return v if isinstance(v, types) and not isinstance(v, bool) else None

        return cls(
            status=str(obj.get("status", "unknown")),
            exit_code=get("exit_code", (int,)),
            program_exit_code=get("program_exit_code", (int,)),
            signal=get("signal", (int,)),
            signal_name=get("signal_name", (str,)),
            wall_time_s=get("wall_time_s", (int, float)),
            cpu_user_s=get("cpu_user_s", (int, float)),
            cpu_system_s=get("cpu_system_s", (int, float)),
            memory_peak_bytes=get("memory_peak_bytes", (int,)),
            setup_time_ms=get("setup_time_ms", (int, float)),
            limits=dict(obj.get("limits") or {}),
            denied_syscalls=list(obj.get("denied_syscalls") or []),
            error=obj.get("error") if isinstance(obj.get("error"), dict) else None,
            raw=dict(obj),
        )

    @classmethod
    def load(cls, path: str) -> Optional["Report"]:
        """The report pyjail wrote to ``path``, or None if there is none."""
        try:
            with open(path, "rb") as f:
                data = f.read(4 << 20)
        except OSError:
            return None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: bytes) -> Optional["Report"]:
        """The report in ``data`` (pyjail's JSON), or None if there is none."""
        if not data.strip():
            return None
        try:
            obj, _ = json.JSONDecoder().raw_decode(data.decode("utf-8", "replace").strip())
        except ValueError:
            return None
        return cls.from_json(obj) if isinstance(obj, dict) else None

    @property
    def timed_out(self) -> bool:
        return self.status in ("wall-timeout", "cpu-timeout")

    @property
    def cpu_time_s(self) -> Optional[float]:
        if self.cpu_user_s is None or self.cpu_system_s is None:
            return None
        return self.cpu_user_s + self.cpu_system_s

    def describe(self) -> str:
        """How the jail ended, in words."""
        s = self.status
        if s == "seccomp-denied" and self.signal_name != "SIGSYS":
            # Older pyjail builds named refused calls as the cause of any failing run after
            # them (numpy's harmless NUMA calls made every failing numpy program one): say
            # how it ended instead.
            s = "exit" if self.program_exit_code is not None else "signal"
        if s == "ok":
            return "exited normally"
        if s == "exit":
            return "exited with status %s" % self.program_exit_code
        if s == "signal":
            return "was killed by %s" % (self.signal_name or "signal %s" % self.signal)
        if s == "wall-timeout":
            return "ran out of wall-clock time and was killed"
        if s == "cpu-timeout":
            return "ran out of CPU time and was killed"
        if s == "oom":
            return "ran out of memory and was killed"
        if s == "pids-limit":
            return "failed after hitting its process limit"
        if s == "output-limit":
            return "was stopped for writing more output than allowed"
        if s == "seccomp-denied":
            # Only a death by the filter's kill action: refusals a program survived, and then
            # exited or crashed for whatever reason, are not its cause (see status "exit").
            return "was killed by the system-call filter (SIGSYS)"
        if s == "setup-error":
            return "could not be set up: %s" % ((self.error or {}).get("message") or "")
        return "ended with status %r" % s


def render_output(head: bytes, tail: bytes, omitted: int) -> str:
    """Captured bytes as text, with a marker where the middle was left out."""
    text = head.decode("utf-8", "replace")
    if omitted:
        text += "\n[... %d bytes of output omitted ...]\n" % omitted
    return text + tail.decode("utf-8", "replace")


def egress_of(args: Sequence[str]) -> Tuple[Optional[str], List[str]]:
    """The network mode (the last ``--net``; None: the profile's) and the
    allowed hosts (every ``--allow-host``) in pyjail options ``args``.

    >>> egress_of(["--net", "none", "--net=allow", "--allow-host", "pypi.org", "--", "--net"])
    ('allow', ['pypi.org'])
    """
    net: Optional[str] = None
    hosts: List[str] = []
    i = 0
    while i < len(args) and args[i] != "--":
        name, eq, value = args[i].partition("=")
        if name in ("--net", "--allow-host"):
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            if name == "--net":
                net = value
            elif value not in hosts:
                hosts.append(value)
        i += 1
    return net, hosts
