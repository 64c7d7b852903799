"""Starting a jail from the driver: the one launch that ``pyjail.run`` and
``Session`` share, and the boot of the in-jail server (see _wire's protocol
description).

A launched pyjail writes its report to an unnamed temporary file (``--report-fd``)
and its stderr to another: the driver creates no named file for a jail, so
nothing is left behind however the driver ends (even SIGKILL). Only a direct
``pyjail.run`` names a file, its script (see _run).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from typing import IO, Any, Dict, List, Optional, Tuple

from . import _wire
from ._channel import Channel, ProtocolError, ServerRefused
from ._common import JailError, Report

_HERE = os.path.dirname(os.path.abspath(__file__))


def _read_sources() -> List[Tuple[str, bytes]]:
    out = []
    for module, filename in _wire.JAIL_MODULES:
        with open(os.path.join(_HERE, filename), "rb") as f:
            out.append((module, f.read()))
    return out


# The in-jail modules, as this driver has them: sent to a jail whose rootfs
# has other versions (or none), and hashed for the boot to compare.
SOURCES = _read_sources()


def sources_sha256(sources: List[Tuple[str, bytes]]) -> str:
    """The hash the boot compares the rootfs's modules with: sha256 over the
    sha256 of each module, in JAIL_MODULES's order."""
    h = hashlib.sha256()
    for _module, source in sources:
        h.update(hashlib.sha256(source).digest())
    return h.hexdigest()


SERVER_SHA256 = sources_sha256(SOURCES)
# The hash the driver asks for (tests replace it to force the fallback).
_SERVER_SHA256_IN_USE = [SERVER_SHA256]

# The jail's program: `python -I -c BOOT SHA256`. It imports the rootfs's
# copies of the modules when they hash to SHA256, and otherwise asks the
# driver for the sources, so a driver never talks to a server of another
# version (an older rootfs, a --rootfs built elsewhere). Its constants are
# filled in from _wire, not copied.
_BOOT_TEMPLATE = r"""
import sys
def _boot(want):
    import os, struct
    names = @MODULES@
    jail_dir = @JAIL_DIR@
    try:
        # CPython's own sha256 (built in): hashlib's loads OpenSSL, 2-3 ms of every start.
        try:
            from _sha2 import sha256
        except ImportError:
            try:
                from _sha256 import sha256
            except ImportError:
                from hashlib import sha256
        h = sha256()
        for name in names:
            with open(jail_dir + "/" + name + ".py", "rb") as f:
                h.update(sha256(f.read()).digest())
        have = h.hexdigest()
    except (OSError, ImportError):
        have = None
    if have == want:
        for name in names:
            sys.modules.pop(name, None)    # a template's copies, of another version
        sys.path.insert(0, jail_dir)
        try:
            import @SERVER@ as m
        finally:
            del sys.path[0]
    else:
        os.write(1, @NEED_SOURCE@)
        def read(n):
            b = b""
            while len(b) < n:
                c = os.read(0, n - len(b))
                if not c:
                    raise SystemExit(3)
                b += c
            return b
        frame = struct.Struct(@FRAME@)
        magic, hlen, blen = frame.unpack(read(frame.size))
        import json, types
        header = json.loads(read(hlen))
        body = read(blen)
        if magic != @MAGIC@ or header.get("op") != "source" or \
                [n for n, _ in header["modules"]] != names:
            raise SystemExit(3)
        pos = 0
        for name, size in header["modules"]:
            path = jail_dir + "/" + name + ".py"
            m = types.ModuleType(name)
            m.__file__ = path
            m.FROM_DRIVER = True
            sys.modules[name] = m
            exec(compile(body[pos:pos + size], path, "exec"), m.__dict__)
            pos += size
    m.main()
_boot(sys.argv[1])
"""


# The boot's first lines: in a fork of a template that imported the rootfs's modules and
# found them to hash to what the driver wants (pyjail_template.SESSION_SERVER_SHA256), the
# server starts as it is; anywhere else the boot above runs. It stays a string until then:
# every start compiles its program, and this head compiles in a tenth of the whole's time.
_BOOT_HEAD = r"""
import sys
t = sys.modules.get("pyjail_template")
if getattr(t, "SESSION_SERVER_SHA256", None) == sys.argv[1] and @SERVER_NAME@ in sys.modules:
    del t
    sys.modules[@SERVER_NAME@].main()
else:
    exec(r'@QUOTES@@BOOT@@QUOTES@')
"""


def boot_text() -> str:
    """The boot of the in-jail server, with _wire's constants filled in."""
    values = {
        "@MODULES@": repr([module for module, _ in _wire.JAIL_MODULES]),
        "@JAIL_DIR@": repr(_wire.JAIL_DIR),
        "@SERVER@": _wire.JAIL_MODULES[-1][0],
        "@NEED_SOURCE@": repr(_wire.encode_frame({"op": "need-source"})),
        "@FRAME@": repr(_wire.FRAME.format),
        "@MAGIC@": repr(_wire.MAGIC),
    }
    text = _BOOT_TEMPLATE
    for key, value in values.items():
        text = text.replace(key, value)
    quotes = "'" * 2    # with the head's own quote, a raw triple-quoted string: verbatim
    if quotes + "'" in text or text.endswith("\\"):
        raise AssertionError("the boot cannot be quoted as a raw string")
    return (_BOOT_HEAD.replace("@SERVER_NAME@", repr(_wire.JAIL_MODULES[-1][0]))
            .replace("@QUOTES@", quotes).replace("@BOOT@", text))


BOOT = boot_text()


def server_command() -> List[str]:
    """The command (after pyjail's `--`) that starts the in-jail server."""
    return ["python", "-I", "-c", BOOT, _SERVER_SHA256_IN_USE[0]]


def handshake(chan: Channel, deadline: Optional[float]) -> Dict[str, Any]:
    """Wait for the server's hello, sending it the modules' sources if it
    asks. ServerRefused if it could not make itself safe; ProtocolError for
    anything but a hello of this protocol."""
    header, _ = chan.recv(deadline)
    if header["op"] == "need-source":
        chan.send({"op": "source", "modules": [[m, len(src)] for m, src in SOURCES]},
                  b"".join(src for _m, src in SOURCES), deadline)
        header, _ = chan.recv(deadline)
    if header["op"] == "refused":
        raise ServerRefused(header["error"][:4096])
    if header["op"] != "hello":
        raise ProtocolError("expected the server's hello, got %r" % header["op"])
    if header["protocol"] != _wire.PROTOCOL:
        raise ProtocolError("the jail speaks protocol %r, this driver %d"
                            % (header["protocol"], _wire.PROTOCOL))
    return header


class Launched:
    """One pyjail process the driver started, with its report and stderr
    (unnamed temporary files). close() ends it and frees everything; it is
    safe to call more than once and from a finalizer."""

    def __init__(self, proc: "subprocess.Popen[bytes]", report: IO[bytes],
                 stderr: Optional[IO[bytes]]) -> None:
        self.proc = proc
        self._report = report
        self._stderr = stderr
        self._closed: Optional[Tuple[Optional[Report], bytes]] = None

    def report(self) -> Optional[Report]:
        """pyjail's report, once it has ended (None if it wrote none)."""
        if self._closed is not None:
            return self._closed[0]
        try:
            # As much as was written (up to 4 MiB): a buffer of the cap itself would be
            # allocated, mapped and unmapped at every read of a report of a few kB.
            fd = self._report.fileno()
            return Report.parse(os.pread(fd, min(os.fstat(fd).st_size, 4 << 20), 0))
        except (OSError, ValueError):
            return None

    def stderr(self) -> bytes:
        """The start of what pyjail wrote to stderr (when it went to a file)."""
        if self._closed is not None:
            return self._closed[1]
        if self._stderr is None:
            return b""
        try:
            return os.pread(self._stderr.fileno(), 1 << 16, 0)
        except (OSError, ValueError):
            return b""

    def kill(self) -> None:
        """SIGKILL to pyjail: its jail dies with it (parent-death signal)."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def close(self) -> None:
        """End pyjail, keep its report and stderr (report() and stderr() still
        answer), and close every descriptor."""
        if self._closed is not None:
            return
        self.kill()
        try:
            self.proc.wait(5)
        except (subprocess.TimeoutExpired, JailError):
            # JailError: a Pool's launcher lost it (_pool._LaunchedProcess.wait); what is
            # left is to close it, also from a finalizer.
            pass
        self._closed = (self.report(), self.stderr())
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr, self._report,
                       self._stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


def launch(binary: str, options: List[str], program: List[str], *,
           stderr_to_file: bool = True, launcher: Any = None) -> Launched:
    """Start ``binary --quiet --report-fd N OPTIONS -- PROGRAM`` with pipes
    for its stdin and stdout, and its stderr in a file (or a pipe, if not
    ``stderr_to_file``). JailError if it cannot be run. With ``launcher`` (a
    Pool's ``pyjail launcher``, _pool._Launcher), that pyjail is forked by the
    launcher instead of started here: the same command line, the same pipes,
    its report and stderr in unnamed memory files."""
    if launcher is not None:
        return launcher.launch(options, program, stderr_to_file)
    report = tempfile.TemporaryFile(prefix="pyjail-report-")
    errfile = tempfile.TemporaryFile(prefix="pyjail-stderr-") if stderr_to_file else None
    fd = report.fileno()
    cmd = [binary, "--quiet", "--report-fd", str(fd)] + options + ["--"] + program
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=errfile if errfile is not None else subprocess.PIPE,
                                bufsize=0, close_fds=True, pass_fds=(fd,))
    except OSError as e:
        report.close()
        if errfile is not None:
            errfile.close()
        raise JailError("pyjail: cannot run %s: %s" % (binary, e.strerror)) from e
    except BaseException:
        report.close()
        if errfile is not None:
            errfile.close()
        raise
    return Launched(proc, report, errfile)
