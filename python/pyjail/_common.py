"""What run() and Session share: errors, the binary, jail options, the report."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import shutil
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

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


@dataclass(frozen=True)
class Limits:
    """The jail's rarer limits, as pyjail's options of the same names (None:
    the profile's); ``timeout`` and ``memory`` are keywords of their own, and
    any other limit (``cpus``, ``fsize``, ``nofile``, ...) goes by name
    through ``options=``. A setting given both by a keyword or here and in
    ``options=`` is refused (ValueError). Taken by run(), Session,
    AsyncSession, Pool and the agent adapters::

        pyjail.run(code, limits=pyjail.Limits(cpu_time=5, pids=32))
    """

    cpu_time: Optional[float] = None
    """CPU seconds (``--cpu-time``): a program that uses more is killed."""
    pids: Optional[int] = None
    """Processes and threads at once (``--pids``)."""
    tmpfs_size: Optional[Size] = None
    """The size of the writable /work and /tmp (``--tmpfs-size``), e.g. ``"256M"``."""
    output_limit: Optional[Size] = None
    """Bytes of output (``--output-limit``): a program that writes more is stopped
    (status ``output-limit``). A Session's output includes its channel."""
    wall_time: Optional[float] = None
    """Seconds of the jail's whole life (``--wall-time``): a Session's, a Pool's
    runs'; run()'s is its ``timeout``."""

    def as_options(self) -> Dict[str, Any]:
        """These limits as ``options=`` takes them (None: left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class OutputCaps:
    """How much of what a jail sends back the driver keeps (None: the call's
    default). These are the host's caps on the jail's answers, not limits of
    the jail: output past ``max_output`` is left out of the result (its start
    and end kept), and a jail that sends more than the other caps allow
    breaks the protocol. A call refuses a cap it has no use for::

        pyjail.run(code, outputs=True, caps=pyjail.OutputCaps(max_output_files=10))
        pyjail.Session(caps=pyjail.OutputCaps(max_output=4 << 20))
    """

    max_output: Optional[int] = None
    """Bytes of each stream kept: of a run (run(): 16 MiB) or of one cell (Session: 1 MiB)."""
    max_output_files: Optional[int] = None
    """run(): files collected from /work (``outputs=``), 100."""
    max_output_bytes: Optional[int] = None
    """run(): bytes of collected files in all, 64 MiB."""
    max_file_bytes: Optional[int] = None
    """Session: the largest upload or download, 64 MiB."""
    max_image_bytes: Optional[int] = None
    """Session: the images of one cell in all, 8 MiB (CellResult.images)."""

    def resolved(self, call: str, defaults: Mapping[str, int]) -> Dict[str, int]:
        """The caps ``call`` uses (``defaults``: their values when not given);
        ValueError for one it has no use for."""
        out = dict(defaults)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name not in defaults:
                raise ValueError("OutputCaps.%s does not apply to %s (it takes %s)"
                                 % (f.name, call, ", ".join(sorted(defaults))))
            if type(value) is not int or value < 0:
                raise ValueError("OutputCaps.%s must be an int >= 0, not %r" % (f.name, value))
            out[f.name] = value
        return out


@dataclass(frozen=True)
class Callbacks:
    """Functions that receive a run's output as the program writes it (str,
    decoded as UTF-8), up to ``max_output`` bytes per stream; for arun() and
    a Pool's ``arun`` they may be coroutine functions::

        pyjail.run(code, callbacks=pyjail.Callbacks(on_stdout=print))

    (Session.run takes ``on_stdout``/``on_stderr`` per cell.)"""

    on_stdout: Optional[Callable[[str], Any]] = None
    on_stderr: Optional[Callable[[str], Any]] = None


#: Replacement of each keyword that moved into a group, for its DeprecationWarning.
_GROUP_CLASSES = {"limits": Limits, "caps": OutputCaps, "callbacks": Callbacks}


def moved_keywords(call: str, old: Mapping[str, Any], moved: Mapping[str, Tuple[str, str]],
                   groups: Dict[str, Any]) -> List[str]:
    """Takes keywords of an earlier release that moved into ``groups``
    (``{"limits": Limits or None, "caps": ..., "callbacks": ...,
    "options": dict or None}``, updated here): ``moved`` maps each old name to
    (group, field); ``extra_args`` is returned as it is. Each one warns with
    a DeprecationWarning naming its replacement; a name that is not in
    ``moved`` is a TypeError, as Python's own; a setting given both ways a
    ValueError; a group that is not of its class a TypeError."""
    for group, cls in _GROUP_CLASSES.items():
        if groups.get(group) is not None and not isinstance(groups[group], cls):
            raise TypeError("%s: %s must be a pyjail.%s, not %s"
                            % (call, group, cls.__name__, type(groups[group]).__name__))
    extra: List[str] = []
    for key, value in old.items():
        if key not in moved:
            raise TypeError("%s() got an unexpected keyword argument %r" % (call, key))
        group, name = moved[key]
        if group == "extra_args":
            new = "options={...} (pyjail's options by name, e.g. {'verbose': True})"
        elif group == "options":
            new = "options={%r: ...}" % name
        else:
            new = "%s=pyjail.%s(%s=...)" % (group, _GROUP_CLASSES[group].__name__, name)
        warnings.warn("%s(%s=...) is deprecated and goes in the next release: use %s"
                      % (call, key, new), DeprecationWarning, stacklevel=3)
        if group == "extra_args":
            extra += [str(a) for a in value]
            continue
        if group == "options":
            options = dict(groups.get("options") or {})
            if any(k.replace("-", "_") == name for k in options):
                raise ValueError("%s: %s given twice, as %s= and in options=" % (call, name, key))
            options[name] = value
            groups["options"] = options
            continue
        current = groups.get(group) or _GROUP_CLASSES[group]()
        if getattr(current, name) is not None:
            raise ValueError("%s: %s given twice, as %s= and in %s=" % (call, name, key, group))
        groups[group] = replace(current, **{name: value})
    return extra


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
    if os.path.isdir(path):
        inside = os.path.join(path, "pyjail")
        raise BinaryNotFoundError(
            "the pyjail binary %s is a directory%s" % (
                where, ": did you mean %s?" % inside if os.path.isfile(inside) else ""))
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


#: The options whose items a mapping gives as KEY:VALUE (the others: KEY=VALUE).
_COLON_ITEMS = frozenset({"net-resolve"})


def option_args(options: Optional[Mapping[str, Any]]) -> List[str]:
    """pyjail command-line arguments for options by name: the one mapping of
    ``options=`` for run(), Session and Pool. A name is pyjail's option with
    ``_`` or ``-`` between its words (``"cpu_time"`` and ``"cpu-time"`` are
    ``--cpu-time``); a flag (``quiet``, ``verbose``, ...) is given for True and
    left out for False; None leaves an option out; a list or tuple repeats it
    (``{"ro_bind": ["/data", "/models"]}``); a mapping gives KEY=VALUE items
    (``{"env": {"LANG": "C"}}``; HOST:ADDRESS for ``{"net_resolve":
    {"db.internal": "10.0.0.5"}}``); other bools are ``true``/``false``;
    numbers are written as pyjail reads them (``{"cpus": 0.5}``)."""
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
            sep = ":" if name in _COLON_ITEMS else "="
            values: List[Any] = ["%s%s%s" % (k, sep, v) for k, v in value.items()]
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


def refuse_given_twice(named: Mapping[str, Any],
                       options: Optional[Mapping[str, Any]]) -> None:
    """ValueError when ``options=`` gives a setting that a keyword or a Limits
    field (``named``: pyjail's option name -> the value given, None or empty
    for not given) already gives: which of the two should win is not for
    pyjail to guess, and a silent winner hides a limit the caller set."""
    for key, value in (options or {}).items():
        name = str(key).replace("_", "-")
        if value is None or named.get(name) in (None, (), [], {}):
            continue
        raise ValueError("the %s option is given twice, as options[%r] and as a keyword or "
                         "Limits field of the call: give it once" % (name, key))


def jail_args(*, profile: Optional[str] = None, wall_time: Optional[float] = None,
              memory: Optional[Size] = None, net: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None,
              rootfs: Optional[Union[str, "os.PathLike[str]"]] = None,
              allow_hosts: Sequence[str] = (), limits: Optional[Limits] = None,
              options: Optional[Mapping[str, Any]] = None,
              extra_args: Sequence[str] = (),
              audit_log: Optional[Union[str, "os.PathLike[str]"]] = None,
              defaults: Sequence[str] = ()) -> List[str]:
    """pyjail command-line options for the given settings (None: the profile's).

    ``wall_time`` is run()'s ``timeout`` (None: ``limits.wall_time``).
    ``audit_log``: the file pyjail appends one JSON line per run to
    (``--audit-log``); None means ``$PYJAIL_AUDIT_LOG`` when that is set, so
    one variable points every run and session of a process at one log (a
    session is one run: its line is written when it ends). A relative path is
    made absolute here, against this process's current directory.
    ``defaults``: arguments (option_args's) that the others override: a
    Pool's options for its runs."""
    args: List[str] = []
    if profile is not None:
        args += ["--profile", os.fspath(profile)]
    # Before the call's own settings, which replace them (a later option wins).
    args += list(defaults)
    if isinstance(allow_hosts, str):
        raise TypeError("allow_hosts is a list of host names, not a str")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be a pyjail.Limits, not %s" % type(limits).__name__)
    for key in env or {}:
        if "=" in key or not key:
            raise ValueError("bad environment variable name %r" % key)
    rare = (limits or Limits()).as_options()
    if wall_time is not None:
        rare["wall_time"] = wall_time
    refuse_given_twice(dict({k.replace("_", "-"): v for k, v in rare.items()},
                            profile=profile, memory=memory, net=net, rootfs=rootfs, env=env,
                            **{"allow-host": allow_hosts}), options)
    args += option_args({"wall-time": rare.pop("wall_time"), "memory": memory, "net": net,
                         "allow-host": [str(h) for h in allow_hosts],
                         "rootfs": None if rootfs is None else os.fspath(rootfs),
                         "env": dict(env or {})})
    args += option_args(rare)
    args += option_args(options)
    if audit_log is None and not any(k.replace("_", "-") == "audit-log" for k in (options or {})):
        audit_log = os.environ.get("PYJAIL_AUDIT_LOG") or None
    if audit_log is not None:
        args += ["--audit-log", os.path.abspath(os.fspath(audit_log))]
    args += list(extra_args)
    return args


def _utc_time(text: Any) -> Optional[datetime.datetime]:
    """The report's "2026-12-03T18:45:12.345Z" as an aware datetime, None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")
    except ValueError:
        return None


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
    #: When pyjail began the run (UTC, to the millisecond); None from an older pyjail.
    started_at: Optional[datetime.datetime] = None
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
            started_at=_utc_time(obj.get("started_at")),
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
    def limit_amounts(self) -> Dict[str, Union[int, float]]:
        """Each limit as a number in its unit (``limits[name]["unit"]``: bytes, seconds,
        count, cpus, priority), e.g. ``{"memory": 536870912, "wall-time": 30.0}``; limits
        from an older pyjail, which gave only text, are left out."""
        out: Dict[str, Union[int, float]] = {}
        for name, limit in self.limits.items():
            amount = limit.get("amount") if isinstance(limit, dict) else None
            if isinstance(amount, (int, float)) and not isinstance(amount, bool):
                out[name] = amount
        return out

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
